//! Collectives over the topology's spanning tree rooted at the root: broadcast, scatter
//! (equal and uneven segments), gather in id order, reduce with the program's function,
//! all-reduce and barrier.
//!
//! Every process calls a collective with matching arguments, in the same order; calls are
//! matched by a sequence number per topology. Each message carries its call's signature
//! (operation, root, size), and a process that sees one differ from its own call fails the
//! collective on every process (a mismatch message to all). A mismatch that makes nobody send
//! to a process that would see it (a process that believes itself the root of a reduction
//! waits for children who send elsewhere) is found by the slow call's check: a call still
//! pending after [`VERIFY_AFTER`] (one periodic timer per topology looks, so a call costs no
//! timer of its own) sends its signature to every process, and whoever called something else
//! for that number says so. So a mismatch ends as an error, never a hang.
//!
//! The calls the program makes are in `calls.rs`; the mismatch checks in `mismatch.rs`.

mod calls;
mod mismatch;

use crate::error::TopoError;
use crate::process::{Later, Payload, State};
use crate::wire::{self, Header, Kind, DOWN, VISUAL};
use converse::{Message, Pe};
use mismatch::{Sig, Sigs};
use std::collections::HashMap;
use std::rc::Rc;

pub use mismatch::VERIFY_AFTER;

/// A combine function for [`Topo::reduce`](crate::Topo::reduce): fold a contribution into the accumulator. It
/// must be associative; contributions are folded in a fixed order (a process's own first,
/// then its children's subtrees in increasing id), so it need not be commutative for the
/// result to be the same on every run. `converse::ops` has ready ones.
pub type Combine = dyn Fn(&mut Vec<u8>, &[u8]);

/// The operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    Broadcast = 1,
    Scatter = 2,
    ScatterUneven = 3,
    Gather = 4,
    Reduce = 5,
    AllReduce = 6,
    Barrier = 7,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Broadcast,
            2 => Op::Scatter,
            3 => Op::ScatterUneven,
            4 => Op::Gather,
            5 => Op::Reduce,
            6 => Op::AllReduce,
            7 => Op::Barrier,
            _ => return None,
        })
    }

    /// The name traces and errors use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Broadcast => "broadcast",
            Op::Scatter => "scatter",
            Op::ScatterUneven => "scatter_uneven",
            Op::Gather => "gather",
            Op::Reduce => "reduce",
            Op::AllReduce => "all_reduce",
            Op::Barrier => "barrier",
        }
    }

    /// Data flows from the root down (else: up to it, and for all-reduce and barrier back).
    fn downward(self) -> bool {
        matches!(self, Op::Broadcast | Op::Scatter | Op::ScatterUneven)
    }
}

/// A collective's result on one process, before it is given the type its call returns.
pub(crate) enum Outcome {
    Bytes(Payload),
    Gathered(Option<Vec<Vec<u8>>>),
    Value(Option<Vec<u8>>),
}

type Then = Box<dyn FnOnce(&mut Pe, Result<Outcome, TopoError>)>;

/// A call in progress on this process.
struct Pending {
    op: Op,
    sig: Sig,
    visual: bool,
    /// This process's contribution (upward), or the accumulator.
    own: Option<Vec<u8>>,
    /// The root of the tree this call travels (its children are looked up there, not copied).
    troot: usize,
    /// What each child sent up, by its place among the children.
    got: Vec<Option<Message>>,
    combine: Option<Rc<Combine>>,
    /// All-reduce: the value went up; waiting for it to come back down.
    sent_up: bool,
    /// Looks of the periodic check that found it pending.
    looks: u8,
    then: Option<Then>,
}

/// Calls in progress, by sequence number. Numbers are given out in order, so the calls in
/// progress lie in a window from the oldest unfinished one: a deque indexed from its start
/// (a program may have thousands of message-driven calls in flight).
#[derive(Default)]
struct Pendings {
    base: u32,
    slots: std::collections::VecDeque<Option<Pending>>,
}

impl Pendings {
    fn index(&self, seq: u32) -> usize {
        seq.wrapping_sub(self.base) as usize
    }
    fn get(&self, seq: &u32) -> Option<&Pending> {
        self.slots.get(self.index(*seq))?.as_ref()
    }
    fn get_mut(&mut self, seq: &u32) -> Option<&mut Pending> {
        let i = self.index(*seq);
        self.slots.get_mut(i)?.as_mut()
    }
    fn contains_key(&self, seq: &u32) -> bool {
        self.get(seq).is_some()
    }
    fn insert(&mut self, seq: u32, p: Pending) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        let i = self.index(seq);
        while self.slots.len() <= i {
            self.slots.push_back(None);
        }
        self.slots[i] = Some(p);
    }
    fn remove(&mut self, seq: &u32) -> Option<Pending> {
        let i = self.index(*seq);
        let p = self.slots.get_mut(i)?.take();
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        p
    }
    fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .map(move |(i, _)| base.wrapping_add(i as u32))
    }
    fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut Pending)> {
        let base = self.base;
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, p)| p.as_mut().map(|p| (base.wrapping_add(i as u32), p)))
    }
}

/// The collectives' state on one process.
#[derive(Default)]
pub(crate) struct Collectives {
    next_seq: u32,
    pending: Pendings,
    /// Messages of calls this process has not made yet.
    early: HashMap<u32, Vec<Message>>,
    failed: Option<TopoError>,
    sigs: Sigs,
    /// Checks from other processes about calls this process has not made yet.
    queries: Vec<(usize, u32, Sig)>,
}

/// What a call brings.
enum Input<'a> {
    /// Broadcast: the root's data.
    Bytes(&'a [u8]),
    /// Scatter: the root's data, split in equal segments.
    Equal(&'a [u8], usize),
    /// Uneven scatter: the root's segment for each process.
    Segments(&'a [&'a [u8]]),
    /// Gather, reduce, all-reduce, barrier: this process's contribution.
    Up(Vec<u8>),
}

impl State {
    fn tree_root(op: Op, root: usize) -> usize {
        match op {
            Op::AllReduce | Op::Barrier => 0,
            _ => root,
        }
    }

    // Everything a call brings, passed once from the public calls' one entry point.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        pe: &mut Pe,
        op: Op,
        root: usize,
        aux: u64,
        input: Input<'_>,
        combine: Option<Rc<Combine>>,
        then: Then,
        later: &mut Later,
    ) {
        if let Some(e) = &self.coll.failed {
            let e = e.clone();
            later.push(Box::new(move |pe| then(pe, Err(e))));
            return;
        }
        let seq = self.coll.next_seq;
        self.coll.next_seq = seq.wrapping_add(1);
        let sig = Sig {
            op: op as u8,
            root: root as u32,
            aux,
        };
        self.coll.sigs.insert(seq, sig);
        if root >= self.n {
            let detail = format!(
                "process {} called {} with root {root}, which is not one of the {} processes",
                self.me,
                op.name(),
                self.n
            );
            self.coll
                .pending
                .insert(seq, self.pending(op, sig, root, None, None, then));
            return self.fail(pe, seq, detail, later);
        }
        let visual = self.visual_now();
        let troot = Self::tree_root(op, root);
        let (own, bad) = match &input {
            Input::Up(v) => (Some(v.clone()), None),
            Input::Equal(d, each) if self.me == root && d.len() != each * self.n => (
                None,
                Some(format!(
                    "process {root}, the root of scatter, has {} bytes, not {} segments of {each}",
                    d.len(),
                    self.n
                )),
            ),
            Input::Segments(s) if self.me == root && s.len() != self.n => (
                None,
                Some(format!(
                    "process {root}, the root of scatter_uneven, has {} segments for {} processes",
                    s.len(),
                    self.n
                )),
            ),
            _ => (None, None),
        };
        let mut p = self.pending(op, sig, troot, own, combine, then);
        p.visual = visual;
        self.coll.pending.insert(seq, p);
        if let Some(detail) = bad {
            return self.fail(pe, seq, detail, later);
        }
        let queries: Vec<_> = if self.coll.queries.is_empty() {
            Vec::new()
        } else {
            let q = self
                .coll
                .queries
                .iter()
                .filter(|q| q.1 == seq)
                .copied()
                .collect();
            self.coll.queries.retain(|q| q.1 != seq);
            q
        };
        for (from, _, theirs) in queries {
            if theirs != sig {
                return self.fail(pe, seq, self.differ(from, theirs, sig), later);
            }
        }
        if self.me == root && op.downward() {
            self.root_sends(pe, seq, input, later);
        } else {
            self.try_finish_up(pe, seq, later);
        }
        if !self.coll.early.is_empty() {
            for m in self.coll.early.remove(&seq).unwrap_or_default() {
                if let Ok(h) = Header::read(m.payload(), self.n) {
                    self.coll_message(pe, seq, h, m, later);
                }
            }
        }
    }

    fn pending(
        &self,
        op: Op,
        sig: Sig,
        troot: usize,
        own: Option<Vec<u8>>,
        combine: Option<Rc<Combine>>,
        then: Then,
    ) -> Pending {
        let kids = self
            .topo
            .tree(troot)
            .map_or(0, |t| t.children(self.me).len());
        Pending {
            op,
            sig,
            visual: false,
            own,
            troot,
            got: std::iter::repeat_with(|| None).take(kids).collect(),
            combine,
            sent_up: false,
            looks: 0,
            then: Some(then),
        }
    }

    fn header(&self, seq: u32, p: &Pending) -> Header {
        let mut h = Header::new(Kind::Coll, self.me, p.sig.root as usize);
        h.op = p.op as u8;
        h.seq = seq;
        h.aux = p.sig.aux;
        if p.visual {
            h.flags |= VISUAL;
        }
        h
    }

    /// Send `msg` (header and body set) to `to` as a new send of this process.
    fn send_coll(&mut self, pe: &mut Pe, op: Op, to: usize, mut msg: Message) {
        self.vc[self.me] += 1;
        wire::write_vc(msg.payload_mut(), &self.vc);
        if msg.payload()[1] & VISUAL != 0 {
            if let Ok(h) = Header::read(msg.payload(), self.n) {
                self.record(&h, op.name(), to, &msg);
            }
        }
        let hid = self.h.coll;
        self.hop(pe, hid, to, msg);
    }

    /// The root of a broadcast or scatter starts it.
    fn root_sends(&mut self, pe: &mut Pe, seq: u32, input: Input<'_>, later: &mut Later) {
        let Some(p) = self.coll.pending.get(&seq) else {
            return;
        };
        let h = self.header(seq, p);
        let (op, topo) = (p.op, self.topo.clone());
        let kids = topo.tree(p.troot).map_or(&[][..], |t| t.children(self.me));
        match input {
            Input::Bytes(d) => {
                let msg = wire::message_with(&h, &self.vc, d);
                for &c in kids {
                    self.send_coll(pe, op, c, msg.clone());
                }
                self.complete(seq, Ok(Outcome::Bytes(Payload::new(msg, self.n))), later);
            }
            Input::Equal(d, each) => {
                let segs: Vec<&[u8]> = if each == 0 {
                    vec![&[]; self.n]
                } else {
                    d.chunks(each).collect()
                };
                self.scatter_down(pe, seq, h, op, kids, &|id| segs[id], later);
            }
            Input::Segments(s) => {
                self.scatter_down(pe, seq, h, op, kids, &|id| s[id], later);
            }
            Input::Up(_) => {}
        }
    }

    /// Send each child the segments of its subtree, keep this process's own.
    #[allow(clippy::too_many_arguments)]
    fn scatter_down<'a>(
        &mut self,
        pe: &mut Pe,
        seq: u32,
        h: Header,
        op: Op,
        kids: &[usize],
        seg: &dyn Fn(usize) -> &'a [u8],
        later: &mut Later,
    ) {
        let Some(tree) = self.topo.tree(h.dst as usize) else {
            return;
        };
        let tree = tree.clone();
        for &c in kids {
            let body = wire::bundle(tree.subtree(c).iter().map(|&id| (id, seg(id))));
            let msg = wire::message_with(&h, &self.vc, &body);
            self.send_coll(pe, op, c, msg);
        }
        let own = wire::message_with(&h, &self.vc, seg(self.me));
        self.complete(seq, Ok(Outcome::Bytes(Payload::new(own, self.n))), later);
    }

    pub(crate) fn on_coll(&mut self, pe: &mut Pe, msg: Message, later: &mut Later) {
        let h = match Header::read(msg.payload(), self.n) {
            Ok(h) => h,
            Err(e) => {
                return converse::input::error_line(&format!(
                    "converse-topo: process {}: {e}",
                    self.me
                ))
            }
        };
        if self.coll.failed.is_some() {
            return;
        }
        if self.coll.pending.contains_key(&h.seq) {
            self.coll_message(pe, h.seq, h, msg, later);
        } else if h.seq.wrapping_sub(self.coll.next_seq) < u32::MAX / 2 {
            // A call this process has not made yet.
            self.coll.early.entry(h.seq).or_default().push(msg);
        } else if let Some(&mine) = self.coll.sigs.get(&h.seq) {
            // A call this process has finished: it must still have been the same call (a
            // process that believed itself a broadcast's root finished at once).
            let theirs = Sig {
                op: h.op,
                root: h.dst,
                aux: h.aux,
            };
            if theirs != mine {
                let d = self.differ(h.src as usize, theirs, mine);
                self.fail(pe, h.seq, d, later);
            }
        }
    }

    fn coll_message(&mut self, pe: &mut Pe, seq: u32, h: Header, msg: Message, later: &mut Later) {
        let Some(p) = self.coll.pending.get_mut(&seq) else {
            return;
        };
        let theirs = Sig {
            op: h.op,
            root: h.dst,
            aux: h.aux,
        };
        if theirs != p.sig {
            let mine = p.sig;
            return self.fail(pe, seq, self.differ(h.src as usize, theirs, mine), later);
        }
        p.visual |= h.flags & VISUAL != 0;
        let op = p.op;
        let from = h.src as usize;
        self.receive_time(msg.payload());
        if op.downward() || h.flags & DOWN != 0 {
            self.down_message(pe, seq, h, msg, later);
        } else if let Some(p) = self.coll.pending.get_mut(&seq) {
            let topo = self.topo.clone();
            let kids = topo.tree(p.troot).map_or(&[][..], |t| t.children(self.me));
            match kids.iter().position(|&k| k == from) {
                Some(i) if p.got[i].is_none() => p.got[i] = Some(msg),
                _ => {
                    return converse::input::error_line(&format!(
                        "converse-topo: process {}: {} #{seq} from {from}, not a child waited for",
                        self.me,
                        op.name()
                    ))
                }
            }
            self.try_finish_up(pe, seq, later);
        }
    }

    /// A broadcast, scatter or all-reduce result from the parent: pass it on, keep ours.
    fn down_message(&mut self, pe: &mut Pe, seq: u32, h: Header, msg: Message, later: &mut Later) {
        let Some(p) = self.coll.pending.get(&seq) else {
            return;
        };
        let (op, visual, topo) = (p.op, p.visual, self.topo.clone());
        let kids = topo.tree(p.troot).map_or(&[][..], |t| t.children(self.me));
        let mut h2 = h;
        h2.src = self.me as u32;
        if visual {
            h2.flags |= VISUAL;
        }
        match op {
            Op::Scatter | Op::ScatterUneven => {
                let body = &msg.payload()[wire::body_at(self.n)..];
                let segs = match wire::unbundle(body, self.n) {
                    Ok(s) => s,
                    Err(e) => {
                        return converse::input::error_line(&format!(
                            "converse-topo: process {}: {e}",
                            self.me
                        ))
                    }
                };
                let Some(tree) = self.topo.tree(h.dst as usize).cloned() else {
                    return;
                };
                let mut it = segs.iter();
                let mine = match it.next() {
                    Some(&(id, d)) if id == self.me => d,
                    _ => {
                        return converse::input::error_line(&format!(
                            "converse-topo: scatter bundle not for {}",
                            self.me
                        ))
                    }
                };
                if op == Op::Scatter && mine.len() as u64 != h.aux {
                    return converse::input::error_line(&format!(
                        "converse-topo: scatter segment of {} bytes",
                        mine.len()
                    ));
                }
                let start = mine.as_ptr() as usize - msg.payload().as_ptr() as usize;
                let range = start..start + mine.len();
                for &c in kids {
                    let k = tree.subtree(c).len();
                    let parts: Vec<(usize, &[u8])> = it.by_ref().take(k).copied().collect();
                    let body = wire::bundle(parts.iter().copied());
                    let m = wire::message_with(&h2, &self.vc, &body);
                    self.send_coll(pe, op, c, m);
                }
                let own = Payload::part(msg, self.n, range);
                self.complete(seq, Ok(Outcome::Bytes(own)), later);
            }
            _ => {
                for &c in kids {
                    let mut m = msg.clone();
                    wire::write_header(m.payload_mut(), &h2);
                    self.send_coll(pe, op, c, m);
                }
                let out = if op == Op::Broadcast {
                    Outcome::Bytes(Payload::new(msg, self.n))
                } else {
                    Outcome::Value(Some(msg.payload()[wire::body_at(self.n)..].to_vec()))
                };
                self.complete(seq, Ok(out), later);
            }
        }
    }

    /// Upward: once this process's contribution and every child's are in, fold them and send
    /// the result to the parent (or finish at the root).
    fn try_finish_up(&mut self, pe: &mut Pe, seq: u32, later: &mut Later) {
        let Some(p) = self.coll.pending.get_mut(&seq) else {
            return;
        };
        if p.sent_up || p.own.is_none() || p.got.iter().any(Option::is_none) {
            return;
        }
        let (op, troot) = (p.op, p.sig.root as usize);
        let troot = Self::tree_root(op, troot);
        let own = p.own.take().unwrap_or_default();
        let got: Vec<Message> = p.got.iter_mut().filter_map(Option::take).collect();
        let at = wire::body_at(self.n);
        let value = match op {
            Op::Gather => {
                let mut parts: Vec<(usize, &[u8])> = vec![(self.me, &own)];
                for m in &got {
                    match wire::unbundle(&m.payload()[at..], self.n) {
                        Ok(s) => parts.extend(s),
                        Err(e) => {
                            return converse::input::error_line(&format!(
                                "converse-topo: process {}: {e}",
                                self.me
                            ))
                        }
                    }
                }
                if self.me == troot {
                    let mut all = vec![Vec::new(); self.n];
                    for (id, d) in parts {
                        all[id] = d.to_vec();
                    }
                    return self.complete(seq, Ok(Outcome::Gathered(Some(all))), later);
                }
                wire::bundle(parts.iter().copied())
            }
            _ => {
                let mut acc = own;
                if let Some(f) = &p.combine {
                    for m in &got {
                        f(&mut acc, &m.payload()[at..]);
                    }
                }
                acc
            }
        };
        let Some(p) = self.coll.pending.get(&seq) else {
            return;
        };
        let h = self.header(seq, p);
        let parent = self.topo.tree(troot).and_then(|t| t.parent(self.me));
        match parent {
            Some(parent) => {
                if let Some(p) = self.coll.pending.get_mut(&seq) {
                    p.sent_up = true;
                }
                let msg = wire::message_with(&h, &self.vc, &value);
                self.send_coll(pe, op, parent, msg);
                match op {
                    Op::Gather => self.complete(seq, Ok(Outcome::Gathered(None)), later),
                    Op::Reduce => self.complete(seq, Ok(Outcome::Value(None)), later),
                    _ => {}
                }
            }
            None => {
                if matches!(op, Op::AllReduce | Op::Barrier) {
                    let mut hd = h;
                    hd.flags |= DOWN;
                    let topo = self.topo.clone();
                    let kids = topo.tree(troot).map_or(&[][..], |t| t.children(self.me));
                    let msg = wire::message_with(&hd, &self.vc, &value);
                    for &c in kids {
                        self.send_coll(pe, op, c, msg.clone());
                    }
                }
                self.complete(seq, Ok(Outcome::Value(Some(value))), later);
            }
        }
    }

    fn complete(&mut self, seq: u32, r: Result<Outcome, TopoError>, later: &mut Later) {
        if let Some(then) = self
            .coll
            .pending
            .remove(&seq)
            .and_then(|mut p| p.then.take())
        {
            later.push(Box::new(move |pe| then(pe, r)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> Pending {
        Pending {
            op: Op::Barrier,
            sig: Sig {
                op: Op::Barrier as u8,
                root: 0,
                aux: 0,
            },
            visual: false,
            own: None,
            troot: 0,
            got: Vec::new(),
            combine: None,
            sent_up: false,
            looks: 0,
            then: None,
        }
    }

    #[test]
    fn pending_calls_are_a_window_that_slides_as_the_oldest_end() {
        let mut p = Pendings::default();
        for seq in 10..15 {
            p.insert(seq, call());
        }
        assert!(p.remove(&12).is_some());
        assert!(!p.contains_key(&12) && p.contains_key(&10) && p.contains_key(&14));
        assert!(p.remove(&10).is_some() && p.remove(&11).is_some());
        // The window starts at the oldest call still running.
        assert_eq!(p.base, 13);
        assert_eq!(p.keys().collect::<Vec<_>>(), [13, 14]);
        assert!(p.get(&9).is_none() && p.get(&99).is_none() && p.remove(&99).is_none());
        assert!(p.remove(&13).is_some() && p.remove(&14).is_some());
        assert!(p.slots.is_empty());
        // Numbers wrap around.
        p.insert(u32::MAX, call());
        p.insert(0, call());
        assert!(p.contains_key(&0) && p.contains_key(&u32::MAX));
    }
}
