//! Collectives, built as handlers over point-to-point messages: spanning-tree broadcast,
//! reduction with a user combine function, barrier.
//!
//! All use a k-ary spanning tree (`tree.branching`, default 4) over the PEs. A broadcast's tree
//! is rooted at its sender; reductions and barriers are rooted at PE 0.

use crate::lifecycle::{H_BARRIER_DONE, H_REDUCE, H_TREE_BCAST};
use crate::pe::{HandlerId, Pe};
use machine::Message;
use std::collections::HashMap;
use std::rc::Rc;

/// The children of `me` in the `k`-ary spanning tree over `n` PEs rooted at `root`.
///
/// ```
/// let kids: Vec<usize> = converse::tree_children(0, 0, 10, 4).collect();
/// assert_eq!(kids, [1, 2, 3, 4]);
/// // Rooted at 7, the tree is the same shape, shifted: relative rank r is PE (r + 7) % 10.
/// let kids: Vec<usize> = converse::tree_children(7, 7, 10, 4).collect();
/// assert_eq!(kids, [8, 9, 0, 1]);
/// assert_eq!(converse::tree_parent(7, 1, 10, 4), Some(7));
/// ```
pub fn tree_children(root: usize, me: usize, n: usize, k: usize) -> impl Iterator<Item = usize> {
    let rel = (me + n - root) % n;
    (1..=k)
        .map(move |i| rel * k + i)
        .take_while(move |&c| c < n)
        .map(move |c| (c + root) % n)
}

/// The parent of `me` in the `k`-ary spanning tree over `n` PEs rooted at `root`; `None` for
/// the root.
pub fn tree_parent(root: usize, me: usize, n: usize, k: usize) -> Option<usize> {
    let rel = (me + n - root) % n;
    (rel != 0).then(|| ((rel - 1) / k + root) % n)
}

/// Where a reduction's result goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceTarget {
    /// To this handler on PE 0.
    Root(HandlerId),
    /// To this handler on every PE (an all-reduce).
    All(HandlerId),
}

/// A combine function: fold a contribution into the accumulator. It must be associative and
/// commutative, since contributions are folded in the order they arrive.
pub type Combine = dyn Fn(&mut Vec<u8>, &[u8]);

#[derive(Default)]
struct Round {
    /// The combined value so far; `None` until this PE contributed.
    acc: Option<Vec<u8>>,
    combine: Option<Rc<Combine>>,
    target: Option<ReduceTarget>,
    /// Children's contributions that came before this PE's own.
    early: Vec<Message>,
    children_in: usize,
}

/// Reduction rounds in progress on one PE, by sequence number.
#[derive(Default)]
pub(crate) struct Reductions {
    next_seq: u32,
    rounds: HashMap<u32, Round>,
    barriers_started: u64,
    barriers_done: u64,
}

impl Pe {
    /// Send a copy of `payload` to handler `h` on every other PE, down a spanning tree rooted
    /// here (Converse's `CmiSyncBroadcast`).
    pub fn broadcast(&mut self, h: HandlerId, payload: &[u8]) {
        self.broadcast_msg(h, Message::from_payload(payload));
    }

    /// Like [`broadcast`](Pe::broadcast), and to this PE too (Converse's
    /// `CmiSyncBroadcastAll`).
    pub fn broadcast_all(&mut self, h: HandlerId, payload: &[u8]) {
        let msg = Message::from_payload(payload);
        let mut local = msg.clone();
        self.broadcast_msg(h, msg);
        local.set_handler(h.raw());
        self.route(self.my_pe, local);
    }

    /// Broadcast `msg` to every other PE, giving it away. It keeps its priority.
    pub fn broadcast_msg(&mut self, h: HandlerId, mut msg: Message) {
        msg.set_handler(H_TREE_BCAST);
        msg.set_arg0(self.my_pe as u32);
        msg.set_arg1(h.raw());
        self.forward_down(self.my_pe, &msg);
    }

    /// Send copies of a tree message to this PE's children in the tree rooted at `root`.
    fn forward_down(&mut self, root: usize, msg: &Message) {
        let (me, n, k) = (self.my_pe, self.num_pes, self.tun.branching);
        for child in tree_children(root, me, n, k) {
            // Each send owns its buffer, so every child gets its own copy; a shared buffer
            // would save the copy but make every layer deal with shared ownership.
            self.route(child, msg.clone());
        }
    }

    pub(crate) fn on_tree_broadcast(&mut self, mut msg: Message) {
        let root = msg.arg0() as usize;
        if root >= self.num_pes {
            return self.drop_message(&msg, "its broadcast root is not a PE");
        }
        self.forward_down(root, &msg);
        msg.set_handler(msg.arg1());
        self.run_handler(msg);
    }

    /// Contribute `data` to the next reduction; when every PE has contributed, the values
    /// combined with `combine` reach `target`. Every PE must call its reductions (and
    /// barriers) in the same order, with the same combine function.
    ///
    /// ```no_run
    /// use converse::{ops, ReduceTarget};
    /// converse::run(|pe| {
    ///     let total = pe.register("total", |pe, msg| {
    ///         let sum = u64::from_le_bytes(msg.payload().try_into().unwrap());
    ///         println!("sum of PE numbers: {sum}");
    ///         pe.exit(0);
    ///     });
    ///     let mine = (pe.my_pe() as u64).to_le_bytes();
    ///     pe.reduce(&mine, ops::sum_u64, ReduceTarget::Root(total));
    /// });
    /// ```
    pub fn reduce(
        &mut self,
        data: &[u8],
        combine: impl Fn(&mut Vec<u8>, &[u8]) + 'static,
        target: ReduceTarget,
    ) {
        let seq = self.reductions.next_seq;
        self.reductions.next_seq = seq.wrapping_add(1);
        let round = self.reductions.rounds.entry(seq).or_default();
        let combine: Rc<Combine> = Rc::new(combine);
        let mut acc = data.to_vec();
        for m in round.early.drain(..) {
            combine(&mut acc, m.payload());
        }
        round.acc = Some(acc);
        round.combine = Some(combine);
        round.target = Some(target);
        self.finish_round_if_complete(seq);
    }

    pub(crate) fn on_reduce_contribution(&mut self, msg: Message) {
        let seq = msg.arg0();
        let round = self.reductions.rounds.entry(seq).or_default();
        round.children_in += 1;
        match (&mut round.acc, &round.combine) {
            (Some(acc), Some(c)) => c(acc, msg.payload()),
            _ => round.early.push(msg),
        }
        self.finish_round_if_complete(seq);
    }

    fn finish_round_if_complete(&mut self, seq: u32) {
        let (me, n, k) = (self.my_pe, self.num_pes, self.tun.branching);
        let children = tree_children(0, me, n, k).count();
        let Some(round) = self.reductions.rounds.get(&seq) else {
            return;
        };
        if round.acc.is_none() || round.children_in < children {
            return;
        }
        let Some(round) = self.reductions.rounds.remove(&seq) else {
            return;
        };
        let (Some(acc), Some(target)) = (round.acc, round.target) else {
            return;
        };
        // The accumulator becomes a message: one copy of the (usually small) combined value per
        // tree level.
        let mut m = Message::from_payload(&acc);
        match tree_parent(0, me, n, k) {
            Some(parent) => {
                m.set_handler(H_REDUCE);
                m.set_arg0(seq);
                self.route(parent, m);
            }
            None => match target {
                ReduceTarget::Root(h) => self.send_msg(me, h, m),
                ReduceTarget::All(h) => {
                    let mut local = m.clone();
                    self.broadcast_msg(h, m);
                    local.set_handler(h.raw());
                    self.route(me, local);
                }
            },
        }
    }

    /// Wait, running handlers meanwhile, until every PE has called `barrier` (as many times).
    /// Returns `false` if the job ended first. Counts as a reduction for ordering.
    pub fn barrier(&mut self) -> bool {
        self.reductions.barriers_started += 1;
        let want = self.reductions.barriers_started;
        self.reduce(&[], |_, _| {}, ReduceTarget::All(HandlerId(H_BARRIER_DONE)));
        self.schedule(&mut |pe| pe.reductions.barriers_done >= want, false)
    }

    /// A barrier that does not wait: once every PE has called it, handler `h` runs on every PE
    /// with an empty message. Counts as a reduction for ordering.
    pub fn barrier_then(&mut self, h: HandlerId) {
        self.reduce(&[], |_, _| {}, ReduceTarget::All(h));
    }

    pub(crate) fn on_barrier_done(&mut self) {
        self.reductions.barriers_done += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pe_has_exactly_one_parent_in_every_tree() {
        for n in 1..40 {
            for k in 2..6 {
                for root in [0, n / 2, n - 1] {
                    let mut seen = vec![0; n];
                    seen[root] += 1;
                    for me in 0..n {
                        for c in tree_children(root, me, n, k) {
                            seen[c] += 1;
                            assert_eq!(tree_parent(root, c, n, k), Some(me));
                        }
                    }
                    assert!(seen.iter().all(|&s| s == 1), "n={n} k={k} root={root}");
                    assert_eq!(tree_parent(root, root, n, k), None);
                }
            }
        }
    }
}
