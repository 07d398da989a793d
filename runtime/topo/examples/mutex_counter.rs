//! N processes increment a counter held by process 0, each `TIMES` times, under the
//! topology's distributed mutex (on a line, so requests and the token walk the line). A
//! holder reads the counter from process 0, writes it back plus one and waits for the
//! acknowledgement before it unlocks; without the mutex, increments would be lost.
//!
//! `mutex_counter [TIMES]`: TIMES from 1 to 1000000 (default 20).

use converse::input::number;
use converse_topo::{attach, Received, Topology};
use std::cell::Cell;
use std::rc::Rc;

const USAGE: &str = "mutex_counter [TIMES] +pN";

/// Most increments per process: bounds the run's length (each one takes the lock, whose
/// token walks the line), and TIMES × N stays far below 2^64.
const MAX_TIMES: u64 = 1_000_000;

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let times = match parse(pe.args()) {
            Ok(times) => times,
            Err(why) => {
                return pe.refuse_arguments(&format!("mutex_counter: {why} (usage: {USAGE})"))
            }
        };
        let n = pe.num_pes();
        let t = match Topology::line(n).and_then(|r| attach(pe, r)) {
            Ok(Some(t)) => t,
            Ok(None) => return,
            Err(e) => pe.abort(&e.to_string()),
        };
        let counter = Rc::new(Cell::new(0u64));
        if t.id() == 0 {
            // The counter's owner serves "get" (empty) and "set" (8 bytes) requests.
            let (c, t2) = (counter.clone(), t.clone());
            t.on_receive(Some(move |pe: &mut converse::Pe, r: Received| {
                if let Ok(v) = <[u8; 8]>::try_from(r.data()) {
                    c.set(u64::from_le_bytes(v));
                }
                let _ = t2.send(pe, r.from(), &c.get().to_le_bytes());
            }));
        }
        for _ in 0..times {
            if let Err(e) = t.lock(pe) {
                pe.abort(&e.to_string());
            }
            if t.id() == 0 {
                counter.set(counter.get() + 1);
            } else {
                let ask = |pe: &mut converse::Pe, body: &[u8]| -> u64 {
                    let r = t.send(pe, 0, body).and_then(|_| t.recv(pe, 0));
                    r.ok()
                        .and_then(|r| <[u8; 8]>::try_from(r.data()).ok())
                        .map_or(0, u64::from_le_bytes)
                };
                let v = ask(pe, &[]);
                ask(pe, &(v + 1).to_le_bytes());
            }
            if let Err(e) = t.unlock(pe) {
                pe.abort(&e.to_string());
            }
        }
        // Process 0 ends the job once the barrier is done there: elsewhere it may end first.
        match t.barrier(pe) {
            Ok(()) | Err(converse_topo::TopoError::JobEnded) => {}
            Err(e) => pe.abort(&e.to_string()),
        }
        if t.id() == 0 {
            let want = times * n as u64;
            converse::input::out_line(&format!(
                "counter = {} (want {want}): {}",
                counter.get(),
                if counter.get() == want {
                    "ok"
                } else {
                    "LOST UPDATES"
                }
            ));
            pe.exit(i32::from(counter.get() != want));
        }
    })
}

/// TIMES, from the program's arguments; why not, when they do not fit.
fn parse(args: &[String]) -> Result<u64, String> {
    if let Some(extra) = args.get(2) {
        return Err(format!("unexpected argument {extra:?}"));
    }
    number(args.get(1).map(String::as_str), "TIMES", 20, 1..=MAX_TIMES)
}
