//! Collectives, built as handlers over point-to-point messages: spanning-tree broadcast,
//! reduction with a user combine function, barrier.
//!
//! All use the node-aware spanning tree of [`tree`](crate::tree) (fan-out `tree.branching`,
//! default 4): one message per node crosses the interconnect, and the PEs of a node pass it on
//! among themselves. A broadcast's tree is rooted at its sender; reductions and barriers are
//! rooted at PE 0.

use crate::lifecycle::{SystemHandler, USER_BASE};
use crate::pe::{HandlerId, Pe};
use crate::tree::tree_children;
use converse_machine::Message;
use std::collections::HashMap;
use std::rc::Rc;

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
    /// Which children contributed (bit i: the i-th child); at most 128 children.
    children_in: u128,
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
    /// here (Converse's `CmiSyncBroadcast`). Handlers see the root as the message's source.
    pub fn broadcast(&mut self, h: HandlerId, payload: &[u8]) {
        self.broadcast_msg(h, Message::from_payload(payload));
    }

    /// Like [`broadcast`](Pe::broadcast), and to this PE too (Converse's
    /// `CmiSyncBroadcastAll`).
    pub fn broadcast_all(&mut self, h: HandlerId, payload: &[u8]) {
        self.broadcast_all_msg(h, Message::from_payload(payload));
    }

    /// Broadcast `msg` to every other PE, giving it away. It keeps its priority.
    pub fn broadcast_msg(&mut self, h: HandlerId, msg: Message) {
        let msg = self.tree_message(h, msg);
        let me = self.my_pe;
        self.forward_down(me, msg, false);
    }

    /// Broadcast `msg` to every PE including this one, giving it away.
    pub fn broadcast_all_msg(&mut self, h: HandlerId, msg: Message) {
        let msg = self.tree_message(h, msg);
        let me = self.my_pe;
        if let Some(mut local) = self.forward_down(me, msg, true) {
            local.set_handler(h.raw());
            self.route(me, local);
        }
    }

    /// Send a copy of `payload` to handler `h` on every other node, run there by the first PE
    /// free to take it (Converse's `CmiSyncNodeBroadcast`). It travels a spanning tree over the
    /// nodes rooted here: one message per node. Handlers see this PE as the source.
    pub fn broadcast_node(&mut self, h: HandlerId, payload: &[u8]) {
        self.broadcast_node_msg(h, Message::from_payload(payload));
    }

    /// [`broadcast_node`](Pe::broadcast_node) of a message already built (its payload).
    pub(crate) fn broadcast_node_msg(&mut self, h: HandlerId, msg: Message) {
        let msg = self.node_tree_message(h, msg);
        self.forward_down_nodes(msg, false);
    }

    /// Like [`broadcast_node`](Pe::broadcast_node), and to this PE's node too (Converse's
    /// `CmiSyncNodeBroadcastAll`).
    pub fn broadcast_node_all(&mut self, h: HandlerId, payload: &[u8]) {
        self.broadcast_node_all_msg(h, Message::from_payload(payload));
    }

    /// [`broadcast_node_all`](Pe::broadcast_node_all) of a message already built.
    pub(crate) fn broadcast_node_all_msg(&mut self, h: HandlerId, msg: Message) {
        let msg = self.node_tree_message(h, msg);
        if let Some(mut local) = self.forward_down_nodes(msg, true) {
            local.set_handler(h.raw());
            let me = self.my_node;
            self.route_node(me, local);
        }
    }

    fn node_tree_message(&self, h: HandlerId, mut msg: Message) -> Message {
        msg.set_handler(SystemHandler::NodeBroadcast.id());
        msg.set_arg0(self.my_pe as u32);
        msg.set_arg1(h.raw());
        msg
    }

    /// Send a node broadcast on to this node's children in the tree over nodes rooted at the
    /// root PE's node; as [`forward_down`](Pe::forward_down), the last child gets `msg` itself
    /// unless the caller keeps it (`keep`), in which case it is returned.
    fn forward_down_nodes(&mut self, msg: Message, keep: bool) -> Option<Message> {
        let (nodes, k) = (self.table.num_nodes(), self.tun.branching);
        let root_node = self.table.node_of(msg.arg0() as usize);
        if self.fail.any {
            // As `forward_around_dead`, over the tree of nodes: a dead child node's children
            // are served by this node instead.
            let mut todo: Vec<usize> = tree_children(root_node, self.my_node, nodes, k).collect();
            while let Some(c) = todo.pop() {
                if self.fail.is_dead(c) {
                    todo.extend(tree_children(root_node, c, nodes, k));
                } else {
                    self.route_node(c, msg.clone());
                }
            }
            return keep.then_some(msg);
        }
        let mut children = tree_children(root_node, self.my_node, nodes, k).peekable();
        while let Some(child) = children.next() {
            if children.peek().is_none() && !keep {
                self.route_node(child, msg);
                return None;
            }
            self.route_node(child, msg.clone());
        }
        Some(msg)
    }

    pub(crate) fn on_node_broadcast(&mut self, msg: Message) {
        let root = msg.arg0() as usize;
        let target = msg.arg1();
        if root >= self.num_pes || target < USER_BASE {
            return self.drop_message(&msg, "its node broadcast names no PE or a runtime handler");
        }
        if let Some(mut local) = self.forward_down_nodes(msg, true) {
            local.set_handler(target);
            local.set_src_pe(root as u32);
            self.run_handler(local);
        }
    }

    fn tree_message(&self, h: HandlerId, mut msg: Message) -> Message {
        msg.set_handler(SystemHandler::TreeBroadcast.id());
        msg.set_arg0(self.my_pe as u32);
        msg.set_arg1(h.raw());
        msg
    }

    /// Send a tree message to this PE's children in the tree rooted at `root`. Each send owns
    /// its buffer, so every child but one gets a copy; the last gets `msg` itself unless the
    /// caller keeps it (`keep`) for local delivery, in which case it is returned.
    pub(crate) fn forward_down(
        &mut self,
        root: usize,
        msg: Message,
        keep: bool,
    ) -> Option<Message> {
        let kids = self.tree().children(root, self.my_pe);
        if self.fail.any {
            return self.forward_around_dead(root, kids.as_slice(), msg, keep);
        }
        let mut children = kids.as_slice().iter().copied().peekable();
        while let Some(child) = children.next() {
            if children.peek().is_none() && !keep {
                self.route(child, msg);
                return None;
            }
            self.route(child, msg.clone());
        }
        Some(msg)
    }

    /// [`forward_down`](Self::forward_down) after a death (report mode): a dead child's
    /// children are served by this PE instead, and theirs if dead too, so that the message
    /// still reaches every survivor below. (Survivors that learn of a death at different
    /// times may both serve a subtree, or neither if the child dies with the message: a
    /// broadcast during a death is not guaranteed, and a duplicate is never run twice by the
    /// exit it carries.)
    #[cold]
    fn forward_around_dead(
        &mut self,
        root: usize,
        kids: &[usize],
        msg: Message,
        keep: bool,
    ) -> Option<Message> {
        let mut todo: Vec<usize> = kids.to_vec();
        let mut live = Vec::new();
        while let Some(c) = todo.pop() {
            if self.fail.is_dead(self.table.node_of(c)) {
                todo.extend_from_slice(self.tree().children(root, c).as_slice());
            } else {
                live.push(c);
            }
        }
        for &c in &live {
            self.route(c, msg.clone());
        }
        keep.then_some(msg)
    }

    pub(crate) fn on_tree_broadcast(&mut self, msg: Message) {
        let root = msg.arg0() as usize;
        let target = msg.arg1();
        if root >= self.num_pes {
            return self.drop_message(&msg, "its broadcast root is not a PE");
        }
        // A broadcast may carry a user handler or the barrier's release, nothing else of ours.
        if target < USER_BASE && target != SystemHandler::BarrierDone.id() {
            return self.drop_message(&msg, "its broadcast names a runtime handler");
        }
        if let Some(mut m) = self.forward_down(root, msg, true) {
            m.set_handler(target);
            m.set_src_pe(root as u32);
            self.run_handler(m);
        }
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
        let early: Vec<Message> = round.early.drain(..).collect();
        for m in &early {
            // A mismatch left by a call outside a reduction is not this fold's.
            let _ = crate::ops::take_mismatch();
            combine(&mut acc, m.payload());
            self.check_fold(m.src_pe() as usize);
        }
        let Some(round) = self.reductions.rounds.get_mut(&seq) else {
            return;
        };
        round.acc = Some(acc);
        round.combine = Some(combine);
        round.target = Some(target);
        self.finish_round_if_complete(seq);
    }

    pub(crate) fn on_reduce_contribution(&mut self, msg: Message) {
        let seq = msg.arg0();
        // Which of my children sent it; anything else, or a second contribution from the same
        // child, is not part of this round.
        let src = msg.src_pe() as usize;
        let kids = self.tree().children(0, self.my_pe);
        let Some(slot) = kids.as_slice().iter().position(|&c| c == src) else {
            return self.drop_message(&msg, "its reduction contribution is not from a child");
        };
        let bit = 1u128 << slot;
        let round = self.reductions.rounds.entry(seq).or_default();
        if round.children_in & bit != 0 {
            return self.drop_message(&msg, "a second contribution from the same child");
        }
        round.children_in |= bit;
        match (&mut round.acc, &round.combine) {
            (Some(acc), Some(c)) => {
                let _ = crate::ops::take_mismatch();
                c(acc, msg.payload());
                self.check_fold(src);
            }
            _ => round.early.push(msg),
        }
        self.finish_round_if_complete(seq);
    }

    /// After folding `from`'s contribution: a combine function of [`ops`](crate::ops) that
    /// met a contribution it could not fold (lengths that differ) ends the job, naming both
    /// PEs and the lengths.
    fn check_fold(&mut self, from: usize) {
        if let Some((op, word, mine, theirs)) = crate::ops::take_mismatch() {
            let me = self.my_pe;
            self.abort(&format!(
                "reduction with {op}: PE {from}'s contribution is {theirs} bytes where PE \
                 {me} holds {mine}; every PE must contribute the same number of {word}-byte \
                 values"
            ));
        }
    }

    fn finish_round_if_complete(&mut self, seq: u32) {
        let me = self.my_pe;
        let children = self.tree().children(0, me).as_slice().len() as u32;
        let Some(round) = self.reductions.rounds.get(&seq) else {
            return;
        };
        if round.acc.is_none() || round.children_in.count_ones() < children {
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
        match self.tree().parent(0, me) {
            Some(parent) => {
                m.set_handler(SystemHandler::Reduce.id());
                m.set_arg0(seq);
                self.route(parent, m);
            }
            None => match target {
                ReduceTarget::Root(h) => self.send_msg(me, h, m),
                ReduceTarget::All(h) => self.broadcast_all_msg(h, m),
            },
        }
    }

    /// Wait, running handlers meanwhile, until every PE has called `barrier` (as many times).
    /// Returns `false` if the job ended first, or (report mode) a node is out of the job. Counts as a reduction for ordering.
    pub fn barrier(&mut self) -> bool {
        self.reductions.barriers_started += 1;
        let want = self.reductions.barriers_started;
        tracing::trace!(target: "converse", barrier = want, "entering a barrier");
        self.reduce(
            &[],
            |_, _| {},
            ReduceTarget::All(HandlerId(SystemHandler::BarrierDone.id())),
        );
        // Report mode: with a node out of the job the barrier cannot complete; it fails.
        self.schedule(
            &mut |pe| pe.reductions.barriers_done >= want || pe.fail.any,
            false,
        ) && self.reductions.barriers_done >= want
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
