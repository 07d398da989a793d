//! AFL target: [`fuzz::node_table`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::node_table(data));
}
