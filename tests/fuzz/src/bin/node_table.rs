//! AFL target: [`converse_fuzz::node_table`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| converse_fuzz::node_table(data));
}
