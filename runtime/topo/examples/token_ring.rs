//! A token around a ring, message-driven: each process passes the token to its right-hand
//! neighbour from its receive callback; after `ROUNDS` rounds process 0 reports and ends the
//! job. Every process first says which host it runs on: under charmrun with a machine file
//! (`charmrun +p8 ++nodelist hosts target/release/examples/token_ring`) the processes land on
//! the hosts round-robin, process 0 on the first.
//!
//! `token_ring [ROUNDS] [--trace FILE]`: ROUNDS from 1 to 1000000 (default 10). With
//! `--trace`, the hops are recorded and written to FILE for `topo-draw`; each hop keeps the
//! vector time of every process, so ROUNDS × processes² may then be at most 1048576.

use converse::input::number;
use converse_topo::{attach, Topology};
use std::cell::Cell;
use std::rc::Rc;

const USAGE: &str = "token_ring [ROUNDS] [--trace FILE] +pN";

/// Most rounds: ROUNDS × N hops then stay far below 2^64 even with the most processes a
/// topology can have (2^16).
const MAX_ROUNDS: u64 = 1_000_000;

/// Most vector-time entries `--trace` records (ROUNDS × N hops of N entries each): 8 MiB of
/// them, a few times that with the trace file's text, so the memory a trace takes is bounded.
const MAX_TRACED: u64 = 1 << 20;

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let n = pe.num_pes();
        let (rounds, trace) = match parse(pe.args(), n as u64) {
            Ok(parsed) => parsed,
            Err(why) => return pe.refuse_arguments(&format!("token_ring: {why} (usage: {USAGE})")),
        };
        let t = match Topology::ring(n).and_then(|r| attach(pe, r)) {
            Ok(Some(t)) => t,
            Ok(None) => return,
            Err(e) => pe.abort(&e.to_string()),
        };
        let host = pe
            .node_table()
            .node(pe.my_node())
            .map_or("?".to_owned(), |n| n.host.clone());
        converse::input::out_line(&format!(
            "process {} on PE {} host {host}",
            t.id(),
            pe.my_pe()
        ));
        t.set_visual(trace.is_some());
        let me = t.id();
        let right = t.shift(0, 1).unwrap_or(me);
        let done = Rc::new(Cell::new(false));
        let (t2, d2) = (t.clone(), done.clone());
        t.on_receive(Some(move |pe: &mut converse::Pe, r: converse_topo::Received| {
            let mut hops = u64::from_le_bytes(r.data().try_into().unwrap_or([0; 8]));
            hops += 1;
            if me == 0 && hops == rounds * n as u64 {
                converse::input::out_line(&format!("token went {rounds} times round {n} processes ({hops} hops); vector time at 0: {:?}",
                    t2.vector_time().entries()));
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

/// ROUNDS and the trace file, from the program's arguments on a ring of `n` processes; why
/// not, when they do not fit.
fn parse(args: &[String], n: u64) -> Result<(u64, Option<String>), String> {
    let (mut rounds, mut trace) = (None, None);
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        if a == "--trace" {
            if trace.is_some() {
                return Err("--trace given twice".into());
            }
            trace = Some(rest.next().ok_or("--trace needs a FILE")?.clone());
        } else if rounds.is_none() {
            rounds = Some(a);
        } else {
            return Err(format!("unexpected argument {a:?}"));
        }
    }
    let rounds = number(rounds.map(String::as_str), "ROUNDS", 10, 1..=MAX_ROUNDS)?;
    // n ≤ 2^20 PEs, so n² does not overflow.
    let most = MAX_TRACED / (n * n);
    if trace.is_some() && rounds > most {
        return Err(format!(
            "--trace records ROUNDS × N² vector-time entries, at most {MAX_TRACED}: \
             with {n} processes ROUNDS can be at most {most}, got {rounds}"
        ));
    }
    Ok((rounds, trace))
}
