//! PE 0 broadcasts a number down the spanning tree; every PE multiplies it by its own PE
//! number plus one; a sum reduction brings the result back to PE 0, which checks it and does
//! the next round. Then a barrier, and exit.
//!
//! `cargo run --release --example broadcast_reduce -- +p4 [ROUNDS]`: ROUNDS from 1 to
//! 1000000 (default 5).

use converse::input::number;
use converse::{ops, ReduceTarget};
use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;

const USAGE: &str = "broadcast_reduce [ROUNDS] +pN";

/// Most rounds: round X's expected sum, X × N(N+1)/2, computed before halving, then stays
/// below 2^61 even with the most PEs a job can have (2^20), so no sum can overflow.
const MAX_ROUNDS: u64 = 1_000_000;

fn main() -> ExitCode {
    converse::run(|pe| {
        let rounds = match parse(pe.args()) {
            Ok(rounds) => rounds,
            Err(why) => {
                return pe.refuse_arguments(&format!("broadcast_reduce: {why} (usage: {USAGE})"))
            }
        };
        let round = Rc::new(Cell::new(0u64));
        let r = round.clone();
        let result = pe.register("result", move |pe, msg| {
            let sum = msg.payload().try_into().map_or(0, u64::from_le_bytes);
            let n = pe.num_pes() as u64;
            let x = r.get() + 1;
            let expect = x * n * (n + 1) / 2;
            converse::input::out_line(&format!(
                "round {x}: broadcast {x}, sum of x*(pe+1) = {sum} (expected {expect})"
            ));
            if sum != expect {
                return pe.exit(1);
            }
            r.set(x);
            if x == rounds {
                return pe.exit(0);
            }
            // "compute" is registered after this handler, so look it up by name.
            match pe.handler("compute") {
                Some(h) => pe.broadcast_all(h, &(x + 1).to_le_bytes()),
                None => pe.abort("handler 'compute' is not registered"),
            }
        });
        let compute = pe.register("compute", move |pe, msg| {
            let x = msg.payload().try_into().map_or(0, u64::from_le_bytes);
            let mine = x * (pe.my_pe() as u64 + 1);
            pe.reduce(
                &mine.to_le_bytes(),
                ops::sum_u64,
                ReduceTarget::Root(result),
            );
        });
        // Everyone is up before PE 0 starts the rounds.
        pe.barrier();
        if pe.my_pe() == 0 {
            pe.broadcast_all(compute, &1u64.to_le_bytes());
        }
    })
}

/// ROUNDS, from the program's arguments; why not, when they do not fit.
fn parse(args: &[String]) -> Result<u64, String> {
    if let Some(extra) = args.get(2) {
        return Err(format!("unexpected argument {extra:?}"));
    }
    number(args.get(1).map(String::as_str), "ROUNDS", 5, 1..=MAX_ROUNDS)
}
