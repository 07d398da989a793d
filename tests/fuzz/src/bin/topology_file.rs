//! AFL target: [`fuzz::topology_file`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::topology_file(data));
}
