//! AFL target: [`converse_fuzz::tbon_format`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| converse_fuzz::tbon_format(data));
}
