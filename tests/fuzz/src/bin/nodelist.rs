//! AFL target: [`converse_fuzz::nodelist`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| converse_fuzz::nodelist(data));
}
