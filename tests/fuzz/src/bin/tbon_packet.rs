//! AFL target: [`fuzz::tbon_packet`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::tbon_packet(data));
}
