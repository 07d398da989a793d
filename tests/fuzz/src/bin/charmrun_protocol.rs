//! AFL target: [`converse_fuzz::charmrun_protocol`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| converse_fuzz::charmrun_protocol(data));
}
