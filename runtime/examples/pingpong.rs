//! PE 0 and the last PE bounce a message back and forth; PE 0 prints the round-trip time.
//!
//! `cargo run --release --example pingpong -- +p2 [ROUNDS] [BYTES]`

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

fn main() -> ExitCode {
    converse::run(|pe| {
        let arg = |i: usize, default: usize| {
            pe.args()
                .get(i)
                .and_then(|a| a.parse().ok())
                .unwrap_or(default)
        };
        let rounds = arg(1, 100_000);
        let bytes = arg(2, 8);
        let peer = pe.num_pes() - 1;
        let left = Rc::new(Cell::new(rounds));
        let t0 = Rc::new(Cell::new(Instant::now()));
        let (l, t) = (left.clone(), t0.clone());
        let ball = pe.register("ball", move |pe, msg| {
            if pe.my_pe() != 0 {
                return pe.forward(0, msg);
            }
            l.set(l.get() - 1);
            if l.get() == 0 {
                let us = t.get().elapsed().as_secs_f64() * 1e6 / rounds as f64;
                println!("{rounds} round trips of {bytes} B: {us:.3} us per round trip, {:.3} us one way", us / 2.0);
                return pe.exit(0);
            }
            pe.forward(peer, msg);
        });
        if pe.my_pe() == 0 {
            if peer == 0 || rounds == 0 {
                println!("pingpong needs +p2 or more and at least one round");
                return pe.exit(1);
            }
            t0.set(Instant::now());
            pe.send_msg(peer, ball, converse::Message::new(bytes));
        }
    })
}
