//! AFL target: [`fuzz::nodelist`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::nodelist(data));
}
