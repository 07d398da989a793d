//! PE 0 and the last PE bounce a message back and forth; PE 0 prints the round-trip time.
//!
//! `cargo run --release --example pingpong -- +p2 [ROUNDS] [BYTES]`: ROUNDS from 1 to
//! 1000000000 (default 100000), BYTES from 0 to 67108864 (64 MiB, default 8), two PEs or more.

use converse::input::number;
use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

const USAGE: &str = "pingpong [ROUNDS] [BYTES] +pN";

/// Most round trips: bounds the run's length (about an hour at a few microseconds each).
const MAX_ROUNDS: usize = 1_000_000_000;

/// Largest message: one is in flight at a time, so this bounds the memory the job uses.
const MAX_BYTES: usize = 64 << 20;

fn main() -> ExitCode {
    converse::run(|pe| {
        let (rounds, bytes) = match parse(pe.args(), pe.num_pes()) {
            Ok(parsed) => parsed,
            Err(why) => return pe.refuse_arguments(&format!("pingpong: {why} (usage: {USAGE})")),
        };
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
                converse::input::out_line(&format!("{rounds} round trips of {bytes} B: {us:.3} us per round trip, {:.3} us one way", us / 2.0));
                return pe.exit(0);
            }
            pe.forward(peer, msg);
        });
        if pe.my_pe() == 0 {
            t0.set(Instant::now());
            pe.send_msg(peer, ball, converse::Message::new(bytes));
        }
    })
}

/// ROUNDS and BYTES, from the program's arguments on a job of `pes` PEs; why not, when they
/// do not fit.
fn parse(args: &[String], pes: usize) -> Result<(usize, usize), String> {
    if let Some(extra) = args.get(3) {
        return Err(format!("unexpected argument {extra:?}"));
    }
    if pes < 2 {
        return Err("a ping-pong needs two PEs: +p2 or more".into());
    }
    Ok((
        number(
            args.get(1).map(String::as_str),
            "ROUNDS",
            100_000,
            1..=MAX_ROUNDS,
        )?,
        number(args.get(2).map(String::as_str), "BYTES", 8, 0..=MAX_BYTES)?,
    ))
}
