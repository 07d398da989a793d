//! Draws recorded topology traces (placeholder until the drawing step).
fn main() {}
