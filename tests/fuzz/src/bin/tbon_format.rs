//! AFL target: [`fuzz::tbon_format`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::tbon_format(data));
}
