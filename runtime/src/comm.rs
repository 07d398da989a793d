//! The communication thread of an SMP node: the one thread that drives the node's layer.
//!
//! It hands what the workers queued for other nodes to the layer, pushes every arrival into
//! its destination PE's inbox (or the node queue), and keeps the layer's protocol running
//! whatever the workers do — acknowledgements, retransmissions, dead-peer detection and the
//! launcher's control traffic go on while every PE computes in a long handler. When there is
//! nothing to move it spins briefly, then blocks in [`Transport::wait`]; a worker that queues a
//! message rings the layer's [`Wake`](converse_machine::Wake) to end the wait. Once every
//! worker has left its scheduler it meets the other nodes in the layer's barrier and leaves.

use crate::error::RuntimeError;
use crate::failure;
use crate::idle::IdleSpin;
use crate::link::HeldBack;
use crate::node::NodeShared;
use crate::scheduler::Tunables;
use converse_machine::{Machine, MachineError};
use std::time::Duration;

/// Longest wait in the layer when the layer has no waker: a worker's message to another node
/// waits at most this long when the node was idle.
const NO_WAKER_WAIT: Duration = Duration::from_millis(1);

/// As the scheduler's: how long to keep polling while the layer is part-way through a message.
const TRANSFER_SPIN: Duration = Duration::from_millis(2);

/// Messages handed to the layer per turn before the thread polls for arrivals again.
const SEND_BATCH: usize = 256;

/// How long the thread naps while the workers are too far behind to take more in.
const HELD_BACK_NAP: Duration = Duration::from_micros(200);

/// Drive `machine` for the node's workers until they are all done; then the layer's barrier
/// and exit. Returns the node's exit code. Any layer error ends the whole job here, naming the
/// node.
pub(crate) fn run(
    machine: &mut dyn Machine,
    node: &NodeShared,
    tun: &Tunables,
    rec: Option<Box<crate::trace::Recorder>>,
) -> Result<i32, RuntimeError> {
    let me = node.node;
    // Shared with the error paths below, which write the trace before the job ends.
    let tracing = rec.is_some();
    let rec = std::cell::RefCell::new(rec);
    let flush = |why: &str| {
        if let Ok(mut r) = rec.try_borrow_mut() {
            if let Some(r) = r.as_deref_mut() {
                r.mark(why);
                r.flush(&[]);
            }
        }
    };
    let fatal = |m: &mut dyn Machine, e: &dyn std::fmt::Display| -> ! {
        let why = format!("node {me} (communication thread): {e}");
        flush(&format!("abort: {why}"));
        m.abort(&why)
    };
    // Report mode: a peer's death goes to every PE of this node, once, behind what already
    // arrived from it (see `failure.rs`); any other error ends the job.
    let mut reported = vec![false; machine.table().num_nodes()];
    let report = |m: &mut dyn Machine, e: MachineError, reported: &mut Vec<bool>| {
        let Some((dead, why)) = failure::reportable(tun.report_deaths, &e) else {
            fatal(m, &e)
        };
        if let Some(r) = reported.get_mut(dead).filter(|r| !**r) {
            *r = true;
            for rank in 0..node.inboxes.len() {
                node.deliver(failure::notice(dead, &why, node.first_pe + rank));
            }
        }
    };
    let wait_cap = if node.has_waker() {
        tun.idle_max
    } else {
        NO_WAKER_WAIT.min(tun.idle_max)
    };
    // Nodes the layer held bytes for at the last look: re-read after each advance, since the
    // workers bound their sends by it.
    let mut watched: Vec<usize> = Vec::new();
    let mut idle = IdleSpin::default();
    let mut held_back = HeldBack::default();
    loop {
        if let Some(reason) = node.abort_requested() {
            flush(&format!("abort: {reason}"));
            machine.abort(&reason);
        }
        // Traced: a clock read per turn, to draw the turns that moved messages as a track.
        let turn = tracing.then(std::time::Instant::now);
        let mut moved = 0;
        while moved < SEND_BATCH {
            let Some((dest, msg)) = node.next_outgoing() else {
                break;
            };
            let len = msg.wire_len();
            if let Err(e) = machine.send(dest, msg) {
                // Report mode: a message to a dead node is dropped, and accounted as gone.
                report(machine, e, &mut reported);
            }
            let held = machine.queued(dest);
            node.sent(dest, len, held);
            if held > 0 && !watched.contains(&dest) {
                watched.push(dest);
            }
            moved += 1;
        }
        if moved > 0 {
            // What the layer held back to coalesce (several of this turn's messages to one
            // node in one system call) leaves now, even if nothing is taken in below.
            if let Err(e) = machine.flush() {
                report(machine, e, &mut reported);
            }
        }
        // More than `sched.max_queued_mib` from other nodes waits for the workers: arrivals
        // stay in the layer, whose flow control holds their senders back, until the workers
        // have taken them down — unless the layer holds sends (a worker may be waiting for
        // that room, and `advance` is what frees it) or has gone unpolled as long as its peers
        // allow (`Transport::max_unpolled`).
        let behind = node.arrived_bytes() >= tun.max_backlog && watched.is_empty();
        if behind && !held_back.take_turn(machine.max_unpolled()) {
            if let Some(from) = turn.filter(|_| moved > 0) {
                if let Some(r) = rec.borrow_mut().as_deref_mut() {
                    r.comm_turn(from);
                }
            }
            if moved == 0 {
                // Not idle, not able to take anything in: a short nap, not a spin, until the
                // workers catch up.
                std::thread::sleep(HELD_BACK_NAP);
            }
            if node.workers_done() && node.outbox_is_empty() {
                break;
            }
            continue;
        }
        if !behind {
            held_back.end();
        }
        let mut arrived = 0;
        match machine.advance(&mut |m| {
            arrived += m.wire_len();
            node.deliver(m)
        }) {
            Ok(n) => moved += n,
            Err(e) => {
                report(machine, e, &mut reported);
                moved += 1;
            }
        }
        node.arrived(arrived);
        if !watched.is_empty() {
            watched.retain(|&d| {
                let held = machine.queued(d);
                node.layer_holds(d, held);
                held > 0
            });
        }
        if moved > 0 {
            if let Some(from) = turn {
                if let Some(r) = rec.borrow_mut().as_deref_mut() {
                    r.comm_turn(from);
                }
            }
            idle.busy();
            continue;
        }
        // A worker queues its last messages before it says it is done: look at the outbox
        // again after seeing that, or they could be left behind.
        if node.workers_done() && node.outbox_is_empty() {
            break;
        }
        // Idle: as the scheduler does (`idle.rs`), spin a little, then block in the layer.
        let Some(look) = idle.turn() else {
            if tun.spin_yields {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            continue;
        };
        let (idle_for, _) = idle.idle_for(look);
        if idle_for < tun.spin || (idle_for < TRANSFER_SPIN && machine.in_transfer()) {
            if tun.spin_yields {
                std::thread::yield_now();
            }
            continue;
        }
        let mut waited = Ok(());
        // Written before blocking, as a PE's trace is: a node killed while it waits keeps it,
        // and the layer's counters with it.
        if let Some(r) = rec.borrow_mut().as_deref_mut() {
            r.sample(&machine.counters());
            r.flush(&[]);
        }
        let slept = std::time::Instant::now();
        node.comm_sleep(|| waited = machine.wait(wait_cap));
        if let Some(r) = rec.borrow_mut().as_deref_mut() {
            r.comm_waited(slept);
        }
        if let Err(e) = waited {
            report(machine, e, &mut reported);
        }
        idle.blocked();
    }
    // The job is over: what still arrives (sent before the exit reached its sender) is not
    // run, as what was still queued was not.
    if let Some(r) = rec.borrow_mut().as_deref_mut() {
        r.finish(&[], &machine.counters());
    }
    tracing::debug!(target: "converse", "every worker is done: exit barrier, then the layer's exit");
    machine.barrier(&mut drop)?;
    if tun.stats {
        let line = crate::trace::node_stats_line(me, machine.layer(), &machine.counters());
        converse_machine::input::error_line(&line);
    }
    let code = node.exit_code();
    machine.exit(code)?;
    Ok(code)
}
