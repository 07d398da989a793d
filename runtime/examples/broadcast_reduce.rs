//! PE 0 broadcasts a number down the spanning tree; every PE multiplies it by its own PE
//! number plus one; a sum reduction brings the result back to PE 0, which checks it and does
//! the next round. Then a barrier, and exit.
//!
//! `cargo run --release --example broadcast_reduce -- +p4 [ROUNDS]`

use converse::{ops, ReduceTarget};
use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;

fn main() -> ExitCode {
    converse::run(|pe| {
        let rounds: u64 = pe.args().get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
        let round = Rc::new(Cell::new(0u64));
        let r = round.clone();
        let result = pe.register("result", move |pe, msg| {
            let sum = msg.payload().try_into().map_or(0, u64::from_le_bytes);
            let n = pe.num_pes() as u64;
            let x = r.get() + 1;
            let expect = x * n * (n + 1) / 2;
            println!("round {x}: broadcast {x}, sum of x*(pe+1) = {sum} (expected {expect})");
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
