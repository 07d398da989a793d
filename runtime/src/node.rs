//! SMP mode's shared state: what the PEs of one process and its communication thread share.
//!
//! With `+ppn K` above 1 a process hosts one node of K PEs, each on a worker thread of its
//! own, plus one communication thread that alone drives the node's [`Machine`]. They meet
//! here, through lock-free queues only:
//!
//! | from → to | path |
//! |---|---|
//! | worker → PE of the same node | straight into the destination's [`Inbox`] (the message is moved, not copied) |
//! | worker → another node | the node's outbox, which the communication thread hands to the layer |
//! | interconnect → PE | the communication thread pushes each arrival into its destination's inbox |
//! | anyone → node | the [`NodeQueue`], taken by the first PE free to run it |
//!
//! A sleeping thread is woken only when it says it sleeps (a flag it sets before it blocks,
//! checked by the pusher after a fence), so a busy receiver costs a pusher no system call.
//!
//! [`Machine`]: converse_machine::Machine

use crate::queue::Queue;
use crate::sync::{
    fence, park_timeout, AtomicBool, AtomicI32, AtomicIsize, AtomicUsize, Fifo, Mutex, Ordering,
    ThreadSlot,
};
use converse_machine::{Message, NodeTable, Wake};
use crossbeam_utils::CachePadded;
use std::sync::Arc;
use std::time::Duration;

/// The bit of a message's destination field that makes it a node message: the low bits are
/// then the node, and the first PE of that node free to take it runs it (Charm++'s node
/// queue). PE numbers stay far below it ([`MAX_PES`](crate::MAX_PES)).
pub(crate) const NODE_BIT: u32 = 1 << 31;

/// A thread that may sleep until somebody hands it work.
#[derive(Debug, Default)]
struct Sleeper {
    sleeping: AtomicBool,
    thread: ThreadSlot,
}

impl Sleeper {
    /// Called by the pusher after it published its work.
    #[inline]
    fn wake_if_sleeping(&self) {
        // Pairs with the fence in `sleep`: either the sleeper sees the work before it blocks,
        // or this load sees its flag (the Dekker pattern; the queues' own orderings are only
        // acquire/release, hence the explicit fences).
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.thread.unpark();
        }
    }

    /// Block for up to `timeout` unless `has_work` says there is some. Spurious returns are
    /// fine: the caller polls again.
    fn sleep(&self, timeout: Duration, has_work: impl Fn() -> bool) {
        self.thread.register();
        self.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !has_work() {
            // park's token is sticky: an unpark between the check and here ends it at once.
            park_timeout(timeout);
        }
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

/// One PE's inbox: every message for it from another thread of its process.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    q: Fifo<Message>,
    sleeper: Sleeper,
    /// Wire bytes its siblings pushed that the PE has not taken yet: a sibling waits while it
    /// is over the bound (see `Pe::wait_for_sibling`), so a PE that computes for minutes does
    /// not make its siblings' messages to it grow without limit. Arrivals from other nodes
    /// are bounded apart, by the communication thread (`NodeShared::arrived`).
    from_siblings: AtomicUsize,
    /// The PE left its scheduler for good: nobody waits for it to take anything again.
    closed: AtomicBool,
    /// The PE is past start-up and takes node messages: only then does work in the node queue
    /// wake it or keep it from sleeping.
    node_work: AtomicBool,
}

impl Inbox {
    /// Hand `msg`, from a sibling PE, to the PE. One relaxed atomic add more than
    /// [`push`](Self::push): the only way the siblings learn how far behind the PE is.
    #[inline]
    pub(crate) fn push_from_sibling(&self, msg: Message) {
        self.from_siblings
            .fetch_add(msg.wire_len(), Ordering::Relaxed);
        self.push(msg);
    }

    /// Bytes from siblings not yet taken.
    #[inline]
    pub(crate) fn sibling_bytes(&self) -> usize {
        self.from_siblings.load(Ordering::Relaxed)
    }

    /// The PE took `bytes` of its siblings' messages (once per batch).
    #[inline]
    pub(crate) fn taken_from_siblings(&self, bytes: usize) {
        if bytes > 0 {
            self.from_siblings.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Whether the PE left its scheduler for good.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Hand `msg` to the PE, waking it if it sleeps. Lock-free; no allocation except when the
    /// queue starts a new block (one per 31 messages).
    #[inline]
    pub(crate) fn push(&self, msg: Message) {
        self.q.push(msg);
        self.sleeper.wake_if_sleeping();
    }

    #[inline]
    pub(crate) fn pop(&self) -> Option<Message> {
        self.q.pop()
    }

    fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

/// Messages for the node as a whole, by priority. A mutex guards it, as Charm++'s node queue
/// has a lock: node messages are the rare kind, and PE messages never touch it — a PE looks
/// at `len` (one atomic load) before it takes the lock.
#[derive(Default)]
pub(crate) struct NodeQueue {
    len: AtomicUsize,
    q: Mutex<Queue>,
}

impl std::fmt::Debug for NodeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeQueue")
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

impl NodeQueue {
    fn push(&self, msg: Message) {
        // A poisoned lock means a PE panicked while holding it; the job is being aborted.
        if let Ok(mut q) = self.q.lock() {
            q.push(msg);
            self.len.fetch_add(1, Ordering::Release);
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// The priority of the node message that would run next, if any (takes the lock only
    /// when the queue holds something).
    pub(crate) fn peek_priority(&self) -> Option<i32> {
        if self.is_empty() {
            return None;
        }
        self.q.lock().ok()?.peek_priority()
    }

    /// The next node message, if it comes before a PE message of priority `before` (or there
    /// is none): node and PE messages run in one priority order.
    pub(crate) fn pop_before(&self, before: Option<i32>) -> Option<Message> {
        let mut q = self.q.lock().ok()?;
        let first = q.peek_priority()?;
        if before.is_some_and(|b| b < first) {
            return None;
        }
        let m = q.pop();
        if m.is_some() {
            self.len.fetch_sub(1, Ordering::Release);
        }
        m
    }

    /// Drop everything (at job exit).
    pub(crate) fn clear(&self) {
        if let Ok(mut q) = self.q.lock() {
            q.clear();
            self.len.store(0, Ordering::Release);
        }
    }
}

/// Bytes held for one destination node.
#[derive(Debug, Default)]
struct Held {
    /// Wire bytes in the outbox (workers add, the communication thread subtracts).
    outbox: AtomicUsize,
    /// What the layer holds, as the communication thread last read
    /// [`Transport::queued`](converse_machine::Transport::queued).
    layer: AtomicUsize,
}

/// What the PEs of one process and its communication thread share.
pub(crate) struct NodeShared {
    /// This node's number.
    pub node: usize,
    /// Its first PE: PE `first_pe + r` is rank `r`.
    pub first_pe: usize,
    /// The layer's name.
    pub layer: &'static str,
    /// One inbox per PE of the node, by rank; padded so that two PEs' inboxes never share a
    /// cache line.
    pub inboxes: Box<[CachePadded<Inbox>]>,
    /// Node messages.
    pub node_queue: NodeQueue,
    /// Messages for other nodes, for the communication thread: (destination node, message).
    outbox: Fifo<(usize, Message)>,
    /// Per destination node, what is held for it. Workers keep the sum under
    /// `peer.max_queued_mib`.
    held: Box<[Held]>,
    comm: CachePadded<Sleeper>,
    /// Wakes the communication thread out of the layer's `wait`, when the layer has one.
    waker: Option<Arc<dyn Wake>>,
    /// The layer's direct copies to other nodes' memory ([`Transport::rma`]), asked for once
    /// so that worker PEs use it without the communication thread.
    ///
    /// [`Transport::rma`]: converse_machine::Transport::rma
    pub rma: Option<Arc<dyn converse_machine::Rma>>,
    /// Workers still running; the communication thread leaves the layer once none is.
    live_workers: AtomicUsize,
    /// The node's exit code: the first non-zero one a worker reports.
    exit_code: AtomicI32,
    /// Set when a PE asked to end the whole job; the reason is in `abort_reason`.
    aborting: AtomicBool,
    abort_reason: Mutex<Option<String>>,
    /// Wire bytes from other nodes in the inboxes and the node queue, not yet taken by a
    /// worker: the communication thread adds once per `advance`, a worker subtracts once per
    /// batch it takes. Above `sched.max_queued_mib` the communication thread stops taking in
    /// arrivals (see `comm::run`). Signed: a worker may take a message before the
    /// communication thread has added the `advance` that brought it, and a clamp at zero then
    /// would lose that much for good.
    arrived: CachePadded<AtomicIsize>,
}

impl std::fmt::Debug for NodeShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeShared")
            .field("node", &self.node)
            .field("pes", &self.inboxes.len())
            .finish_non_exhaustive()
    }
}

impl NodeShared {
    pub(crate) fn new(
        node: usize,
        table: &NodeTable,
        layer: &'static str,
        waker: Option<Arc<dyn Wake>>,
    ) -> NodeShared {
        let (first_pe, pes) = table.node(node).map_or((0, 1), |n| (n.first_pe, n.num_pes));
        NodeShared {
            node,
            first_pe,
            inboxes: (0..pes)
                .map(|_| CachePadded::new(Inbox::default()))
                .collect(),
            node_queue: NodeQueue::default(),
            outbox: Fifo::default(),
            held: (0..table.num_nodes()).map(|_| Held::default()).collect(),
            comm: CachePadded::new(Sleeper::default()),
            waker,
            rma: None,
            live_workers: AtomicUsize::new(pes),
            exit_code: AtomicI32::new(0),
            aborting: AtomicBool::new(false),
            abort_reason: Mutex::new(None),
            arrived: CachePadded::new(AtomicIsize::new(0)),
            layer,
        }
    }

    // ---- worker side ----

    /// Bytes held for `node` (outbox and layer).
    #[inline]
    pub(crate) fn held(&self, node: usize) -> usize {
        self.held.get(node).map_or(0, |h| {
            h.outbox.load(Ordering::Relaxed) + h.layer.load(Ordering::Relaxed)
        })
    }

    /// Queue `msg` for another node and wake the communication thread if it sleeps.
    #[inline]
    pub(crate) fn post(&self, node: usize, msg: Message) {
        // One uncontended atomic add per message: the only way the sender learns what waits
        // for this peer (the bound of `peer.max_queued_mib`) without asking the comm thread.
        if let Some(h) = self.held.get(node) {
            h.outbox.fetch_add(msg.wire_len(), Ordering::Relaxed);
        }
        self.outbox.push((node, msg));
        self.wake_comm();
    }

    /// Queue a node message for this node and wake one sleeping PE to take it.
    pub(crate) fn post_node(&self, msg: Message) {
        self.node_queue.push(msg);
        fence(Ordering::SeqCst);
        // One sleeper is enough: a PE that is awake looks at the node queue between messages.
        if let Some(i) = self.inboxes.iter().find(|i| {
            i.sleeper.sleeping.load(Ordering::Relaxed) && i.node_work.load(Ordering::Relaxed)
        }) {
            i.sleeper.wake_if_sleeping();
        }
    }

    /// Worker `rank` has nothing to do: block up to `timeout` unless its inbox or the node
    /// queue has something.
    pub(crate) fn worker_sleep(&self, rank: usize, timeout: Duration) {
        if let Some(inbox) = self.inboxes.get(rank) {
            inbox.sleeper.sleep(timeout, || {
                !inbox.is_empty()
                    || (inbox.node_work.load(Ordering::Relaxed) && !self.node_queue.is_empty())
            });
        }
    }

    /// Worker `rank` is past start-up: it takes node messages from now on.
    pub(crate) fn takes_node_work(&self, rank: usize) {
        if let Some(i) = self.inboxes.get(rank) {
            i.node_work.store(true, Ordering::SeqCst);
        }
    }

    /// Worker `rank` left its scheduler for good with `code`.
    pub(crate) fn worker_done(&self, rank: usize, code: i32) {
        if let Some(i) = self.inboxes.get(rank) {
            i.closed.store(true, Ordering::Release);
        }
        if code != 0 {
            let _ = self
                .exit_code
                .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
        }
        self.live_workers.fetch_sub(1, Ordering::AcqRel);
        self.wake_comm();
    }

    /// Ask the communication thread to end the whole job (it owns the layer that can).
    pub(crate) fn request_abort(&self, reason: String) {
        if let Ok(mut r) = self.abort_reason.lock() {
            r.get_or_insert(reason);
        }
        self.aborting.store(true, Ordering::Release);
        self.wake_comm();
    }

    #[inline]
    fn wake_comm(&self) {
        fence(Ordering::SeqCst);
        if self.comm.sleeping.load(Ordering::Relaxed) {
            // Without a waker the communication thread's waits are short (see `comm_sleep`).
            if let Some(w) = &self.waker {
                w.wake();
            }
        }
    }

    // ---- communication thread side ----

    /// The next message for another node, with its destination. The caller hands it to the
    /// layer and then calls [`sent`](Self::sent).
    #[inline]
    pub(crate) fn next_outgoing(&self) -> Option<(usize, Message)> {
        self.outbox.pop()
    }

    /// `len` wire bytes for `node` left the outbox; the layer now holds `layer_queued` for it.
    #[inline]
    pub(crate) fn sent(&self, node: usize, len: usize, layer_queued: usize) {
        if let Some(h) = self.held.get(node) {
            h.outbox.fetch_sub(len, Ordering::Relaxed);
            h.layer.store(layer_queued, Ordering::Relaxed);
        }
    }

    /// The layer now holds `layer_queued` for `node` (after an `advance` moved some out).
    pub(crate) fn layer_holds(&self, node: usize, layer_queued: usize) {
        if let Some(h) = self.held.get(node) {
            h.layer.store(layer_queued, Ordering::Relaxed);
        }
    }

    /// Whether `msg` came from another node (through the communication thread), so counts in
    /// [`arrived_bytes`](Self::arrived_bytes) when a worker takes it.
    #[inline]
    pub(crate) fn is_remote(&self, msg: &Message) -> bool {
        (msg.src_pe() as usize).wrapping_sub(self.first_pe) >= self.inboxes.len()
    }

    /// A worker took `bytes` of messages from other nodes out of its inbox or the node queue.
    #[inline]
    pub(crate) fn taken(&self, bytes: usize) {
        if bytes > 0 {
            self.arrived.fetch_sub(bytes as isize, Ordering::Relaxed);
        }
    }

    /// The communication thread delivered `bytes` from other nodes.
    pub(crate) fn arrived(&self, bytes: usize) {
        if bytes > 0 {
            self.arrived.fetch_add(bytes as isize, Ordering::Relaxed);
        }
    }

    /// Bytes from other nodes delivered and not yet taken by a worker.
    pub(crate) fn arrived_bytes(&self) -> usize {
        usize::try_from(self.arrived.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Hand an arrival to the PE or node it is for.
    #[inline]
    pub(crate) fn deliver(&self, msg: Message) {
        let dst = msg.dst_pe();
        if dst & NODE_BIT != 0 {
            return self.post_node(msg);
        }
        // A message for a PE this node does not host goes to rank 0, which drops and reports
        // it as misaddressed (it can only come from a broken peer).
        let rank = (dst as usize).wrapping_sub(self.first_pe);
        let inbox = self.inboxes.get(rank).or(self.inboxes.first());
        if let Some(i) = inbox {
            if self.is_remote(&msg) {
                i.push(msg);
            } else {
                // Made here with a PE of this node as its source (a death's notice): counted
                // as a sibling's, since that is how the PE will count it when it takes it.
                i.push_from_sibling(msg);
            }
        }
    }

    /// Whether nothing waits to go to another node.
    pub(crate) fn outbox_is_empty(&self) -> bool {
        self.outbox.is_empty()
    }

    /// Whether every worker is done.
    pub(crate) fn workers_done(&self) -> bool {
        self.live_workers.load(Ordering::Acquire) == 0
    }

    /// The node's exit code, once the workers are done.
    pub(crate) fn exit_code(&self) -> i32 {
        self.exit_code.load(Ordering::Acquire)
    }

    /// The reason a PE gave for ending the job, if one asked.
    pub(crate) fn abort_requested(&self) -> Option<String> {
        if !self.aborting.load(Ordering::Acquire) {
            return None;
        }
        let r = self.abort_reason.lock().ok().and_then(|r| r.clone());
        Some(r.unwrap_or_else(|| "a PE ended the job".into()))
    }

    /// Whether the workers handed the communication thread anything to do.
    fn comm_has_work(&self) -> bool {
        !self.outbox.is_empty() || self.aborting.load(Ordering::Relaxed) || self.workers_done()
    }

    /// The communication thread has nothing to do: run `block` (the layer's wait) unless a
    /// worker handed it work meanwhile. A worker that hands it work while it blocks rings the
    /// layer's waker; without one, the caller must keep `block` short.
    pub(crate) fn comm_sleep(&self, block: impl FnOnce()) {
        self.comm.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !self.comm_has_work() {
            block();
        }
        self.comm.sleeping.store(false, Ordering::Relaxed);
    }

    /// Whether the layer gave a waker.
    pub(crate) fn has_waker(&self) -> bool {
        self.waker.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn node(pes: usize) -> NodeShared {
        NodeShared::new(1, &NodeTable::uniform(3, pes), "test", None)
    }

    fn msg(dst: u32, prio: i32, tag: u8) -> Message {
        let mut m = Message::from_payload(&[tag]).with_priority(prio);
        m.set_dst_pe(dst);
        m
    }

    #[test]
    fn arrivals_go_to_their_pe_the_node_queue_or_rank_0() {
        let n = node(2);
        n.deliver(msg(3, 0, 1));
        n.deliver(msg(NODE_BIT | 1, 0, 2));
        n.deliver(msg(0, 0, 3)); // another node's PE: rank 0 drops it as misaddressed
        assert_eq!(n.inboxes[1].pop().map(|m| m.payload()[0]), Some(1));
        assert_eq!(n.inboxes[0].pop().map(|m| m.payload()[0]), Some(3));
        assert!(!n.node_queue.is_empty());
        assert_eq!(
            n.node_queue.pop_before(None).map(|m| m.payload()[0]),
            Some(2)
        );
        assert!(n.node_queue.is_empty());
    }

    #[test]
    fn node_messages_keep_their_place_in_priority_order() {
        let n = node(2);
        n.post_node(msg(NODE_BIT | 1, 5, 1));
        // A PE whose own next message has priority 0 keeps it first ...
        assert!(n.node_queue.pop_before(Some(0)).is_none());
        // ... and takes the node message when it has nothing better.
        assert_eq!(
            n.node_queue.pop_before(Some(7)).map(|m| m.payload()[0]),
            Some(1)
        );
        n.post_node(msg(NODE_BIT | 1, -1, 2));
        assert_eq!(
            n.node_queue.pop_before(Some(0)).map(|m| m.payload()[0]),
            Some(2)
        );
    }

    #[test]
    fn a_sleeping_pe_is_woken_by_a_push_and_a_wake_is_never_lost() {
        let n = Arc::new(node(2));
        let t = Instant::now();
        let pusher = {
            let n = Arc::clone(&n);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                n.inboxes[0].push(msg(2, 0, 9));
            })
        };
        // Sleeps until the push (the loop covers spurious returns), far below its timeout.
        while n.inboxes[0].is_empty() {
            n.worker_sleep(0, Duration::from_secs(20));
        }
        assert!(t.elapsed() < Duration::from_secs(10));
        pusher.join().unwrap();
        // Work already there: no sleep at all.
        let t = Instant::now();
        n.worker_sleep(0, Duration::from_secs(20));
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn node_work_wakes_only_a_pe_past_start_up() {
        let n = node(1);
        n.post_node(msg(NODE_BIT | 1, 0, 1));
        // Before go, the node queue's work is not this PE's: it sleeps its time out.
        let t = Instant::now();
        n.worker_sleep(0, Duration::from_millis(50));
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        // After go, work in the node queue keeps it from sleeping at all.
        n.takes_node_work(0);
        let t = Instant::now();
        n.worker_sleep(0, Duration::from_secs(20));
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn what_is_held_for_a_peer_counts_the_outbox_and_the_layer() {
        let n = node(2);
        let m = msg(4, 0, 0);
        let len = m.wire_len();
        n.post(2, m);
        assert_eq!(n.held(2), len);
        let (dest, m) = n.next_outgoing().unwrap();
        assert_eq!(dest, 2);
        n.sent(2, m.wire_len(), 100);
        assert_eq!(n.held(2), 100);
        n.layer_holds(2, 0);
        assert_eq!(n.held(2), 0);
        assert_eq!(n.held(99), 0);
    }

    #[test]
    fn the_node_ends_once_every_worker_is_done_with_the_first_nonzero_code() {
        let n = node(3);
        n.worker_done(0, 0);
        n.worker_done(1, 4);
        assert!(!n.workers_done());
        n.worker_done(2, 5);
        assert!(n.workers_done());
        assert_eq!(n.exit_code(), 4);
        assert!(n.abort_requested().is_none());
        n.request_abort("why".into());
        assert_eq!(n.abort_requested().as_deref(), Some("why"));
    }
}

/// The SMP protocol model-checked: `loom` runs the real code above (its atomics, fences,
/// queues and parks swapped for the model's, `sync.rs`) through every interleaving of a few
/// threads. A wake-up lost anywhere leaves a thread parked for good, which loom reports as a
/// deadlock; the byte counters must balance however the threads interleave.
///
/// `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p converse --lib loom`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    fn node(pes: usize) -> NodeShared {
        NodeShared::new(1, &NodeTable::uniform(3, pes), "loom", None)
    }

    fn msg(dst: u32) -> Message {
        let mut m = Message::from_payload(&[7]);
        m.set_dst_pe(dst);
        m
    }

    // The pushers are not joined: one may unpark a thread that sleeps no more (a flag it read
    // before the store that cleared it), which std allows and loom 0.7 mis-models when that
    // thread is in `join` (tokio-rs/loom#249). Loom runs every thread to its end regardless.

    /// A worker that sleeps while its inbox is empty is woken by a push from another thread.
    #[test]
    fn loom_a_push_to_a_sleeping_pe_is_never_lost() {
        loom::model(|| {
            let n = Arc::new(node(2));
            {
                let n = Arc::clone(&n);
                loom::thread::spawn(move || n.deliver(msg(2)));
            }
            while n.inboxes[0].is_empty() {
                n.worker_sleep(0, Duration::from_secs(1));
            }
            assert!(n.inboxes[0].pop().is_some());
        });
    }

    /// A node message wakes a PE that sleeps on its inbox and the node queue.
    #[test]
    fn loom_a_node_message_wakes_a_sleeping_pe() {
        loom::model(|| {
            let n = Arc::new(node(1));
            n.takes_node_work(0);
            {
                let n = Arc::clone(&n);
                loom::thread::spawn(move || n.deliver(msg(NODE_BIT | 1)));
            }
            while n.node_queue.is_empty() {
                n.worker_sleep(0, Duration::from_secs(1));
            }
            assert!(n.node_queue.pop_before(None).is_some());
        });
    }

    /// The communication thread's wake: a worker's message for another node, or its last
    /// `worker_done`, ends the thread's sleep in the layer (here: a park its waker undoes).
    #[test]
    fn loom_a_worker_always_wakes_the_communication_thread() {
        struct Unpark(loom::thread::Thread);
        impl Wake for Unpark {
            fn wake(&self) {
                self.0.unpark();
            }
        }
        loom::model(|| {
            let waker: std::sync::Arc<dyn Wake> =
                std::sync::Arc::new(Unpark(loom::thread::current()));
            let n = Arc::new(NodeShared::new(
                1,
                &NodeTable::uniform(3, 1),
                "loom",
                Some(waker),
            ));
            {
                let n = Arc::clone(&n);
                loom::thread::spawn(move || {
                    n.post(2, msg(4));
                    n.worker_done(0, 0);
                });
            }
            let mut out = 0;
            loop {
                while let Some((dest, m)) = n.next_outgoing() {
                    n.sent(dest, m.wire_len(), 0);
                    out += 1;
                }
                if n.workers_done() && n.outbox_is_empty() {
                    break;
                }
                n.comm_sleep(loom::thread::park);
            }
            assert_eq!(out, 1);
            assert_eq!(n.held(2), 0);
        });
    }

    /// The bytes from other nodes balance whichever side counts first: a worker may take a
    /// message before the communication thread has added the `advance` that brought it.
    #[test]
    fn loom_arrived_bytes_balance_in_any_order() {
        loom::model(|| {
            let n = Arc::new(node(1));
            let worker = {
                let n = Arc::clone(&n);
                loom::thread::spawn(move || n.taken(100))
            };
            n.arrived(100);
            let mid = n.arrived_bytes();
            assert!(mid == 0 || mid == 100, "{mid}");
            worker.join().unwrap();
            assert_eq!(n.arrived_bytes(), 0);
        });
    }

    /// A sibling's bytes balance whoever counts first, and the receiver sees each message
    /// only after its bytes were counted (so the count never goes below zero).
    #[test]
    fn loom_sibling_bytes_balance() {
        loom::model(|| {
            let n = Arc::new(node(2));
            let m = msg(1);
            let len = m.wire_len();
            let sender = {
                let n = Arc::clone(&n);
                loom::thread::spawn(move || n.inboxes[1].push_from_sibling(m))
            };
            let inbox = &n.inboxes[1];
            let mut took = 0;
            while took == 0 {
                match inbox.pop() {
                    Some(m) => {
                        assert!(inbox.sibling_bytes() >= m.wire_len());
                        took = m.wire_len();
                    }
                    None => loom::thread::yield_now(),
                }
            }
            inbox.taken_from_siblings(took);
            sender.join().unwrap();
            assert_eq!(inbox.sibling_bytes(), 0);
            assert_eq!(took, len);
        });
    }

    /// What a sender sees held for a peer: its outbox bytes until the communication thread
    /// hands them to the layer, then the layer's; never a sum that counts a message twice
    /// once both are done.
    #[test]
    fn loom_held_bytes_settle_at_what_the_layer_holds() {
        loom::model(|| {
            let n = Arc::new(node(1));
            let m = msg(4);
            let len = m.wire_len();
            let worker = {
                let n = Arc::clone(&n);
                loom::thread::spawn(move || n.post(2, m))
            };
            let mut sent = 0;
            while sent == 0 {
                match n.next_outgoing() {
                    Some((dest, m)) => {
                        n.sent(dest, m.wire_len(), 10);
                        sent += 1;
                    }
                    None => loom::thread::yield_now(),
                }
            }
            worker.join().unwrap();
            assert_eq!(n.held(2), 10);
            assert!(len > 0);
        });
    }
}
