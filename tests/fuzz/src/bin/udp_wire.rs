//! AFL target: [`converse_fuzz::udp_wire`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| converse_fuzz::udp_wire(data));
}
