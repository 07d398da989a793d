//! AFL target: [`fuzz::udp_wire`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::udp_wire(data));
}
