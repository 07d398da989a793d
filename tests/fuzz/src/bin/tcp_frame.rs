//! AFL target: [`fuzz::tcp_frame`] on each input.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::tcp_frame(data));
}
