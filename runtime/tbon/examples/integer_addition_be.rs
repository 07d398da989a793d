//! The guide's Appendix B back-end: answer a `PROT_SUM` request with waves of integers until
//! `PROT_EXIT`. Started by `integer_addition_fe`, never by hand.

use converse_tbon::{self as tbon, FIRST_APPLICATION_TAG};
use std::process::ExitCode;

const PROT_EXIT: i32 = FIRST_APPLICATION_TAG;
const PROT_SUM: i32 = FIRST_APPLICATION_TAG + 1;

fn main() -> ExitCode {
    tbon::run_backend(|net| loop {
        let (stream, p) = net.recv()?;
        match p.tag() {
            PROT_SUM => {
                let (recv_val, num_iters): (i32, i32) = p.unpack("%d %d")?;
                // Send num_iters waves of integers.
                for i in 0..num_iters {
                    net.send(&stream, PROT_SUM, "%d", recv_val * i)?;
                    net.flush(&stream)?;
                }
            }
            PROT_EXIT => {
                converse::input::out_line("Processing PROT_EXIT ...");
                return Ok(());
            }
            other => converse::input::out_line(&format!("Unknown Protocol: {other}")),
        }
    })
}
