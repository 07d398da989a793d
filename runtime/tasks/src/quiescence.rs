//! Quiescence detection (Charm++'s `CkStartQD`): a callback once no message is in flight
//! anywhere in the job.
//!
//! **The counts.** Every PE counts the messages it sends and the messages it takes to run
//! ([`Pe::message_counts`]; a task's wake-up is a message, so a task about to run counts as
//! work in flight). Summed over the job the two are equal when nothing is in flight — but a
//! sum read PE by PE at different moments can balance by accident (a message sent after its
//! sender was read and taken before its receiver was). So, as Charm++ does, the sums are read
//! in *waves*, and the job is quiescent when two consecutive waves find the same balanced
//! totals: nothing was sent or taken at any PE between its two readings, and the readings
//! of the later wave all come after every reading of the earlier one.
//!
//! **A wave** runs down a spanning tree over all PEs rooted at the PE that asked (fan-out 4):
//! a probe goes down; each PE reads its counts, less the detection's own messages, and passes
//! the probe on; the sums come back up. Its messages:
//!
//! | message | handler | arg0 | arg1 | payload |
//! |---|---|---|---|---|
//! | probe | `converse-tasks.qd-probe` | root PE | wave | none |
//! | report | `converse-tasks.qd-report` | root PE | wave | sent u64 LE, taken u64 LE |
//!
//! A wave costs 2(N−1) messages and a tree round trip. While the job is busy the root starts
//! the next wave only at its next idle moment or timer check (a zero-delay timer), so the
//! detection does not crowd out the work it waits for; once the sums balance, the confirming
//! wave starts at once. Quiescence is thus seen within about two tree round trips of the last
//! message.
//!
//! A task's timer ([`sleep`](crate::sleep), [`timeout`](crate::timeout)) counts as a message in
//! flight from when it is set until it fires or is dropped: a job whose tasks sleep is not
//! quiescent. Timers set with `Pe::after` and `every` directly are not counted (as in
//! Charm++, whose detection sees messages only).
//!
//! Report mode: a PE that dies holds its wave for ever (its report never comes) and the
//! messages it took with it never balance; detection is meant for jobs whose PEs are all alive.

use crate::Inner;
use converse::{tree_children, tree_parent, Message, Pe};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// Fan-out of the detection's spanning tree.
const FAN_OUT: usize = 4;

/// One wave's collection at one PE.
struct Collect {
    wave: u32,
    /// Reports still to come from children.
    missing: usize,
    sent: u64,
    taken: u64,
}

/// What runs at quiescence.
type Callback = Box<dyn FnOnce(&mut Pe)>;

/// What the PE that asked keeps between waves.
#[derive(Default)]
struct Root {
    wave: u32,
    /// The previous wave's totals, when they balanced.
    balanced: Option<(u64, u64)>,
    callbacks: Vec<Callback>,
    /// A wave is on its way (or about to start).
    running: bool,
}

/// One PE's detection state.
#[derive(Default)]
pub(crate) struct Detector {
    /// The detection's own messages sent and taken by this PE, left out of the counts.
    own_sent: u64,
    own_taken: u64,
    /// Task timers ([`sleep`](crate::sleep), [`timeout`](crate::timeout)) set and ended
    /// (fired or dropped) on this PE: a task waiting for its timer is work to come, counted as
    /// a message in flight.
    pub(crate) timers_set: u64,
    pub(crate) timers_ended: u64,
    /// Waves passing through this PE, by root.
    collecting: HashMap<usize, Collect>,
    root: Root,
}

/// The handlers of the detection, registered by `Tasks::attach`.
#[derive(Clone, Copy)]
pub(crate) struct Handlers {
    pub(crate) probe: converse::HandlerId,
    pub(crate) report: converse::HandlerId,
}

impl Detector {
    /// This PE's counts less the detection's own messages.
    fn counts(&self, pe: &Pe) -> (u64, u64) {
        let (sent, taken) = pe.message_counts();
        (
            sent.saturating_sub(self.own_sent) + self.timers_set,
            taken.saturating_sub(self.own_taken) + self.timers_ended,
        )
    }
}

/// Ask for `f` to run on this PE once the job is quiescent.
pub(crate) fn on_quiescence(inner: &Rc<Inner>, pe: &mut Pe, f: Box<dyn FnOnce(&mut Pe)>) {
    let start = {
        let mut d = inner.qd.borrow_mut();
        d.root.callbacks.push(f);
        !std::mem::replace(&mut d.root.running, true)
    };
    if start {
        // Not from inside the caller: on one PE a wave needs no message, and both waves would
        // be read before the caller's next send. The first wave starts at the PE's next idle
        // moment or timer check.
        let inner = inner.clone();
        pe.after(Duration::ZERO, move |pe| start_wave(&inner, pe));
    }
}

fn start_wave(inner: &Rc<Inner>, pe: &mut Pe) {
    let me = pe.my_pe();
    let wave = {
        let mut d = inner.qd.borrow_mut();
        d.root.wave = d.root.wave.wrapping_add(1);
        d.root.wave
    };
    // The root reads itself as the probe's first stop, without a message to itself.
    probe(inner, pe, me, wave);
}

/// A probe of `root`'s wave `wave` reached this PE.
fn probe(inner: &Rc<Inner>, pe: &mut Pe, root: usize, wave: u32) {
    let (me, n) = (pe.my_pe(), pe.num_pes());
    let children: Vec<usize> = tree_children(root, me, n, FAN_OUT).collect();
    for &c in &children {
        let mut m = Message::new(0);
        m.set_arg0(root as u32);
        m.set_arg1(wave);
        pe.send_msg(c, inner.qd_h.probe, m);
    }
    let (sent, taken) = {
        let mut d = inner.qd.borrow_mut();
        d.own_sent += children.len() as u64;
        d.counts(pe)
    };
    let c = Collect {
        wave,
        missing: children.len(),
        sent,
        taken,
    };
    if c.missing == 0 {
        finish(inner, pe, root, c);
    } else {
        inner.qd.borrow_mut().collecting.insert(root, c);
    }
}

/// This PE's part of a wave is complete: report up, or judge it at the root.
fn finish(inner: &Rc<Inner>, pe: &mut Pe, root: usize, c: Collect) {
    let (me, n) = (pe.my_pe(), pe.num_pes());
    if let Some(parent) = tree_parent(root, me, n, FAN_OUT) {
        let mut payload = [0u8; 16];
        payload[..8].copy_from_slice(&c.sent.to_le_bytes());
        payload[8..].copy_from_slice(&c.taken.to_le_bytes());
        let mut m = Message::from_payload(&payload);
        m.set_arg0(root as u32);
        m.set_arg1(c.wave);
        inner.qd.borrow_mut().own_sent += 1;
        pe.send_msg(parent, inner.qd_h.report, m);
        return;
    }
    judge(inner, pe, c.sent, c.taken);
}

/// A wave's totals at the root.
fn judge(inner: &Rc<Inner>, pe: &mut Pe, sent: u64, taken: u64) {
    let quiet = {
        let mut d = inner.qd.borrow_mut();
        let quiet = sent == taken && d.root.balanced == Some((sent, taken));
        d.root.balanced = (sent == taken).then_some((sent, taken));
        quiet
    };
    if quiet {
        let callbacks = {
            let mut d = inner.qd.borrow_mut();
            d.root.running = false;
            d.root.balanced = None;
            std::mem::take(&mut d.root.callbacks)
        };
        for f in callbacks {
            f(pe);
        }
        return;
    }
    if inner.qd.borrow().root.balanced.is_some() {
        // Balanced once: confirm at once.
        start_wave(inner, pe);
        return;
    }
    // Busy: the next wave waits for this PE's next idle moment (or timer check), so waves do
    // not crowd out the work they wait for.
    let inner = inner.clone();
    pe.after(Duration::ZERO, move |pe| start_wave(&inner, pe));
}

/// The probe handler.
pub(crate) fn on_probe(inner: &Rc<Inner>, pe: &mut Pe, msg: &Message) {
    inner.qd.borrow_mut().own_taken += 1;
    let root = msg.arg0() as usize;
    if root >= pe.num_pes() {
        return;
    }
    probe(inner, pe, root, msg.arg1());
}

/// The report handler.
pub(crate) fn on_report(inner: &Rc<Inner>, pe: &mut Pe, msg: &Message) {
    inner.qd.borrow_mut().own_taken += 1;
    let root = msg.arg0() as usize;
    let Ok(p) = <[u8; 16]>::try_from(msg.payload()) else {
        return;
    };
    let sent = u64::from_le_bytes(p[..8].try_into().unwrap_or_default());
    let taken = u64::from_le_bytes(p[8..].try_into().unwrap_or_default());
    let done = {
        let mut d = inner.qd.borrow_mut();
        let Some(c) = d.collecting.get_mut(&root) else {
            return;
        };
        if c.wave != msg.arg1() || c.missing == 0 {
            return;
        }
        c.sent += sent;
        c.taken += taken;
        c.missing -= 1;
        if c.missing == 0 {
            d.collecting.remove(&root)
        } else {
            None
        }
    };
    if let Some(c) = done {
        finish(inner, pe, root, c);
    }
}
