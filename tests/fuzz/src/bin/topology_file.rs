//! AFL target: [`converse_fuzz::topology_file`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| converse_fuzz::topology_file(data));
}
