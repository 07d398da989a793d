//! `topo survive WHAT DELAY_MS` (report mode): PE 2 kills itself (SIGKILL, from a thread, so
//! at whatever point its process has reached) `DELAY_MS` after a first barrier while every process loops
//! over `WHAT` on a line, where routes pass through PE 2. Every survivor must get
//! `ProcessDead` naming PE 2's process from the call it is in, never hang: it prints
//! `topo survive: PE i: <error>` and tells PE 0, which prints `topo survive: ok` once all
//! have and exits 0.
//!
//! WHAT: `mutex` (lock, ask process 0 for a counter and set it, unlock, as `mutex_counter`),
//! `collectives` (all-reduce, broadcast, gather, barrier in turn), `route` (process 0 sends
//! across the line and waits for the echo; the processes between wait in `recv(Any)`).

use converse::{ops, Pe};
use converse_topo::{attach, Received, Source, Topo, TopoError, Topology};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// The PE that dies: in the middle of the line, so that routes and the tree pass through it.
const VICTIM: usize = 2;

pub(crate) fn run(pe: &mut Pe, what: &str, delay_ms: u64) {
    let n = pe.num_pes();
    if n < 4 || !pe.survives_node_failures() {
        super::fail(pe, "survive needs 4 PEs or more and +set faults=report");
    }
    let done = Rc::new(Cell::new(0usize));
    let d = done.clone();
    let told = pe.register("survive.done", move |_, _| d.set(d.get() + 1));
    let t = match Topology::line(n).and_then(|l| attach(pe, l)) {
        Ok(Some(t)) => t,
        Ok(None) => return,
        Err(e) => super::fail(pe, &format!("survive: attach: {e}")),
    };
    // A death before the start-up check is over ends the job (report mode covers the running
    // job only): the clock starts after a first barrier.
    pe.barrier();
    if pe.my_pe() == VICTIM {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        });
    }
    let e = match what {
        "mutex" => mutex(pe, &t),
        "collectives" => collectives(pe, &t),
        "route" => route(pe, &t),
        other => super::fail(pe, &format!("survive: unknown WHAT '{other}'")),
    };
    if pe.my_pe() == VICTIM {
        // Killed at the next turn of the scheduler, whatever it was doing.
        loop {
            pe.progress();
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let dead = t.topology().id_of_pe(VICTIM).unwrap_or(usize::MAX);
    match &e {
        TopoError::ProcessDead { process, pe: p, .. } if *process == dead && *p == VICTIM => {}
        other => super::fail(
            pe,
            &format!("survive {what}: {other}, not PE {VICTIM}'s death"),
        ),
    }
    converse::input::out_line(&format!("topo survive: PE {}: {e}", pe.my_pe()));
    if pe.my_pe() != 0 {
        pe.send(0, told, &[]);
        return;
    }
    // PE 0 and every other survivor (the dead node's PEs excluded).
    let node = pe.node_of(VICTIM);
    let others = (1..n).filter(|&p| pe.node_of(p) != node).count();
    let d = done.clone();
    pe.run_until(move |_| d.get() >= others);
    converse::input::out_line("topo survive: ok");
    pe.exit(0);
}

/// Loop until the topology fails; the victim loops until it is killed.
fn mutex(pe: &mut Pe, t: &Topo) -> TopoError {
    let counter = Rc::new(Cell::new(0u64));
    if t.id() == 0 {
        let (c, t2) = (counter.clone(), t.clone());
        t.on_receive(Some(move |pe: &mut Pe, r: Received| {
            if let Ok(v) = <[u8; 8]>::try_from(r.data()) {
                c.set(u64::from_le_bytes(v));
            }
            let _ = t2.send(pe, r.from(), &c.get().to_le_bytes());
        }));
    }
    loop {
        let step = t.lock(pe).and_then(|()| {
            if t.id() != 0 {
                t.send(pe, 0, &[])?;
                let v = t.recv(pe, 0)?;
                let v = <[u8; 8]>::try_from(v.data()).map_or(0, u64::from_le_bytes);
                t.send(pe, 0, &(v + 1).to_le_bytes())?;
                t.recv(pe, 0)?;
            }
            t.unlock(pe)
        });
        if let Err(e) = step {
            return e;
        }
    }
}

fn collectives(pe: &mut Pe, t: &Topo) -> TopoError {
    let mine = (t.id() as u64).to_le_bytes();
    loop {
        let step = t
            .all_reduce(pe, &mine, ops::sum_u64)
            .and_then(|_| t.broadcast(pe, 0, b"x"))
            .and_then(|_| t.gather(pe, t.len() - 1, &mine))
            .and_then(|_| t.barrier(pe));
        if let Err(e) = step {
            return e;
        }
    }
}

fn route(pe: &mut Pe, t: &Topo) -> TopoError {
    let last = t.len() - 1;
    let me = t.id();
    if me == last {
        let t2 = t.clone();
        t.on_receive(Some(move |pe: &mut Pe, r: Received| {
            let _ = t2.send(pe, r.from(), r.data());
        }));
    }
    let mut i = 0u64;
    loop {
        let step = if me == 0 {
            i += 1;
            t.send(pe, last, &i.to_le_bytes())
                .and_then(|()| t.recv(pe, last))
                .map(|_| ())
        } else if me == last {
            // Echoes from its receive callback; waits in a barrier no one else calls.
            t.barrier(pe)
        } else {
            t.recv(pe, Source::Any).map(|_| ())
        };
        if let Err(e) = step {
            return e;
        }
    }
}
