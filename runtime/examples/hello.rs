//! Every PE says hello; a reduction counts the greetings and PE 0 ends the job.
//!
//! `cargo run --release --example hello -- +p4`

use converse::{ops, ReduceTarget};
use std::process::ExitCode;

fn main() -> ExitCode {
    converse::run(|pe| {
        let all_said_it = pe.register("all-said-hello", |pe, msg| {
            let n = msg.payload().try_into().map_or(0, u64::from_le_bytes);
            converse::input::out_line(&format!("All {n} PEs said hello"));
            pe.exit(0);
        });
        let hello = pe.register("hello", move |pe, _msg| {
            converse::input::out_line(&format!(
                "Hello from PE {} of {} (node {})",
                pe.my_pe(),
                pe.num_pes(),
                pe.my_node()
            ));
            pe.reduce(
                &1u64.to_le_bytes(),
                ops::sum_u64,
                ReduceTarget::Root(all_said_it),
            );
        });
        if pe.my_pe() == 0 {
            pe.broadcast_all(hello, b"");
        }
    })
}
