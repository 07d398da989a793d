//! A token around a ring, message-driven: each process passes the token to its right-hand
//! neighbour from its receive callback; after `ROUNDS` rounds process 0 reports and ends the
//! job. Every process first says which host it runs on: under charmrun with a machine file
//! (`charmrun +p8 ++nodelist hosts target/release/examples/token_ring`) the processes land on
//! the hosts round-robin, process 0 on the first.
//!
//! `token_ring [ROUNDS] [--trace FILE]`: with `--trace`, the hops are recorded and written
//! to FILE for `topo-draw`.

use converse_topo::{attach, Topology};
use std::cell::Cell;
use std::rc::Rc;

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let args = pe.args().to_vec();
        let rounds: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10);
        let trace = args
            .iter()
            .position(|a| a == "--trace")
            .and_then(|i| args.get(i + 1).cloned());
        let n = pe.num_pes();
        let t = match Topology::ring(n).and_then(|r| attach(pe, r)) {
            Ok(Some(t)) => t,
            Ok(None) => return,
            Err(e) => pe.abort(&e.to_string()),
        };
        let host = pe
            .node_table()
            .node(pe.my_node())
            .map_or("?".to_owned(), |n| n.host.clone());
        println!("process {} on PE {} host {host}", t.id(), pe.my_pe());
        t.set_visual(trace.is_some());
        let me = t.id();
        let right = t.shift(0, 1).unwrap_or(me);
        let done = Rc::new(Cell::new(false));
        let (t2, d2) = (t.clone(), done.clone());
        t.on_receive(Some(move |pe: &mut converse::Pe, r: converse_topo::Received| {
            let mut hops = u64::from_le_bytes(r.data().try_into().unwrap_or([0; 8]));
            hops += 1;
            if me == 0 && hops == rounds * n as u64 {
                println!(
                    "token went {rounds} times round {n} processes ({hops} hops); vector time at 0: {:?}",
                    t2.vector_time().entries()
                );
                d2.set(true);
                return;
            }
            if let Err(e) = t2.send(pe, right, &hops.to_le_bytes()) {
                pe.abort(&e.to_string());
            }
            // Every other process passes the token once a round.
            if me != 0 && hops / n as u64 + 1 == rounds {
                d2.set(true);
            }
        }));
        if me == 0 {
            if let Err(e) = t.send(pe, right, &0u64.to_le_bytes()) {
                pe.abort(&e.to_string());
            }
        }
        let d = done.clone();
        pe.run_until(move |_| d.get());
        // Everyone leaves the ring's traffic behind before the collective that saves it.
        t.on_receive(None::<fn(&mut converse::Pe, converse_topo::Received)>);
        t.set_visual(false);
        t.barrier(pe).ok();
        if let Some(file) = trace {
            if let Err(e) = t.save_trace(pe, &file) {
                pe.abort(&e.to_string());
            }
        }
        if me == 0 {
            pe.exit(0);
        }
    })
}
