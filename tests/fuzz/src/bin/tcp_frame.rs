//! AFL target: [`converse_fuzz::tcp_frame`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| converse_fuzz::tcp_frame(data));
}
