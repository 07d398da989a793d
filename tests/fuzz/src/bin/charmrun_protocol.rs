//! AFL target: [`fuzz::charmrun_protocol`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::charmrun_protocol(data));
}
