//! A PE: the context every handler and start function gets. Who am I, who else is there,
//! handler registration, and sending.

use crate::collectives::Reductions;
use crate::lifecycle::Lifecycle;
use crate::link::Link;
use crate::node::NODE_BIT;
use crate::queue::Queue;
use crate::scheduler::{Timers, Tunables};
use crate::tree::Tree;
use converse_machine::{Message, NodeTable};
use std::rc::Rc;
use std::sync::Arc;

/// A message handler: runs on the PE the message was sent to, owning the message.
pub(crate) type HandlerFn = dyn Fn(&mut Pe, Message);

/// A handler's id: the same on every PE of the job (the start-up check makes sure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandlerId(pub(crate) u32);

impl HandlerId {
    /// The number carried in the envelope.
    pub fn raw(self) -> u32 {
        self.0
    }
}

pub(crate) use crate::lifecycle::USER_BASE;

/// One PE of the job. Handlers and start functions receive `&mut Pe` and do everything through
/// it: send, broadcast, reduce, register callbacks, exit.
///
/// A `Pe` lives on one thread; handlers registered on it may capture non-`Send` state such as
/// `Rc<RefCell<_>>`.
pub struct Pe {
    pub(crate) my_pe: usize,
    pub(crate) num_pes: usize,
    pub(crate) my_node: usize,
    pub(crate) table: NodeTable,
    /// The way to the interconnect: the layer itself, or the node's communication thread.
    pub(crate) link: Link,
    pub(crate) queue: Queue,
    handlers: Vec<Rc<HandlerFn>>,
    pub(crate) handler_names: Vec<String>,
    pub(crate) life: Lifecycle,
    pub(crate) timers: Timers,
    pub(crate) reductions: Reductions,
    pub(crate) tun: Tunables,
    /// Since when arrivals are held back in the layer (the queue is over
    /// `sched.max_queued_mib`; see `Pe::poll_held_back`).
    pub(crate) held_back: crate::link::HeldBack,
    args: Arc<[String]>,
    variant: &'static str,
    /// Messages dispatched to handlers so far.
    pub(crate) dispatched: u64,
    /// Messages dropped because nothing could run them.
    pub(crate) dropped: u64,
    /// What this PE records for `+trace` and `+stats`; `None` (the usual case) keeps every
    /// hook to one untaken branch.
    pub(crate) rec: Option<Box<crate::trace::Recorder>>,
    /// Which nodes are out of the job, and what to call then (report mode).
    pub(crate) fail: crate::failure::Failures,
    /// The mailbox queue of a PE that owns its layer, once [`mailbox`](Pe::mailbox) made one.
    pub(crate) mail: Option<Arc<crate::mailbox::OwnMail>>,
    /// Posts to this PE's mailbox so far, from any thread.
    pub(crate) mail_posted: Arc<std::sync::atomic::AtomicU64>,
    /// Messages routed by this PE (see [`message_counts`](Pe::message_counts)).
    pub(crate) sent: u64,
    /// Messages taken off this PE's queues to run.
    pub(crate) taken: u64,
    /// The running handler sent to another node through the layer this PE owns: the layer
    /// is flushed when it returns ([`Transport::flush`](converse_machine::Transport::flush),
    /// which ends TCP's coalescing of that handler's sends).
    pub(crate) sent_out: bool,
    /// Converse Client-Server: this PE's handlers; on PE 0 with `+server`, the listener.
    pub(crate) ccs: crate::ccs::Ccs,
    /// One-sided transfers: this PE's regions and the transfers it waits on.
    pub(crate) onesided: crate::onesided::OneSided,
    /// `+idle-warn`'s part on this PE (`idle_warn.rs`).
    pub(crate) idle_watch: crate::idle_warn::IdleWatch,
}

// By hand: handlers, queues and the layer have no useful text form; the PE's number says
// which one it is.
impl std::fmt::Debug for Pe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pe")
            .field("pe", &self.my_pe)
            .finish_non_exhaustive()
    }
}

/// The cores this host gives the job. Usually what the process may run on (its affinity and
/// CPU quota); but a process that a launcher bound to fewer cores than the host has (`mpirun`
/// binds each rank to a core) says nothing about the host, so then the host's online count.
fn host_cores() -> usize {
    let allowed = std::thread::available_parallelism().map_or(1, |c| c.get());
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::{sysconf, Pid, SysconfVar};
    // Called once per PE at start-up: walking the whole set is nothing.
    let affinity = sched_getaffinity(Pid::from_raw(0)).map_or(-1, |set| {
        (0..CpuSet::count())
            .filter(|&i| set.is_set(i).unwrap_or(false))
            .count() as i64
    });
    let online = sysconf(SysconfVar::_NPROCESSORS_ONLN)
        .ok()
        .flatten()
        .map_or(-1, i64::from);
    match (usize::try_from(online), usize::try_from(affinity)) {
        (Ok(online), Ok(affinity)) if affinity < online => online.max(allowed),
        _ => allowed,
    }
}

/// PEs and communication threads on `node`'s host: its nodes' PEs, plus a communication
/// thread for each node of several PEs.
pub(crate) fn threads_on_host(table: &NodeTable, node: usize) -> (usize, usize) {
    let host = table.node(node).map(|n| n.host.as_str());
    table
        .nodes()
        .iter()
        .filter(|n| Some(n.host.as_str()) == host)
        .fold((0, 0), |(p, c), n| {
            (p + n.num_pes, c + usize::from(n.num_pes > 1))
        })
}

/// How the threads of `node`'s host may spin, as (PEs may spin, communication threads may
/// spin, spinning PEs should yield). Spinning before blocking only pays with a core to spare:
/// on a host running more spinners than cores, a spinning thread takes the core from one that
/// has work. PEs come first: the communication threads spin only when every thread has a
/// core, and PEs that share cores with communication threads yield as they spin, so that a
/// communication thread woken by an arrival runs at once.
pub(crate) fn spin_policy(table: &NodeTable, node: usize) -> (bool, bool, bool) {
    let (pes, comms) = threads_on_host(table, node);
    let cores = host_cores();
    (
        pes <= cores,
        pes + comms <= cores,
        comms > 0 && pes + comms > cores,
    )
}

/// Threads per core up to which a PE that has no core of its own still spins a little
/// (`sched.shared_spin_us`), yielding its core at every turn: the thread about to answer is
/// then likely next in line for the core, and a hand-over is cheaper than a wake-up. Measured
/// on 2 cores (`bench coll`, a broadcast-and-reduce round, three alternating runs): at 4 and 8
/// PEs, each a process, si and udp 1.1-4x faster, tcp at 8 not (0.9-1.2x); at 16 to 64
/// processes 0.7-1.3x either way (each yield then switches between processes, for a thread
/// far down the line); PEs that are threads of one process gained at every count up to 64
/// (1.6-5x).
const SHARED_SPIN_RATIO: usize = 4;

/// Whether a PE of `node` without a core of its own spins a little before it blocks (see
/// [`SHARED_SPIN_RATIO`]): on a host of at most that many threads per core, or whose PEs are
/// all threads of this process (`host_in_process`), and not in a node of several PEs, whose
/// communication thread already spins so for it (PEs spinning beside it made a round on 32
/// PEs at `++ppn 2` 15-25% slower).
fn shares_spin(table: &NodeTable, node: usize, host_in_process: bool) -> bool {
    let smp = table.node(node).is_some_and(|n| n.num_pes > 1);
    let (pes, comms) = threads_on_host(table, node);
    !smp && (host_in_process || pes + comms <= SHARED_SPIN_RATIO * host_cores())
}

impl Pe {
    /// PE `my_pe` of node `my_node`, reaching the interconnect through `link`.
    pub(crate) fn new(
        link: Link,
        table: NodeTable,
        my_node: usize,
        my_pe: usize,
        mut tun: Tunables,
        args: Arc<[String]>,
        variant: &'static str,
    ) -> Pe {
        if !spin_policy(&table, my_node).0 {
            tun.spin = if shares_spin(&table, my_node, tun.host_in_process) {
                tun.shared_spin
            } else {
                std::time::Duration::ZERO
            };
            tun.spin_yields = true;
        }
        let fail = crate::failure::Failures::new(tun.report_deaths, table.num_nodes());
        let onesided = crate::onesided::OneSided::new(link.rma(), my_node, tun.direct_min);
        Pe {
            my_pe,
            num_pes: table.num_pes(),
            my_node,
            table,
            link,
            queue: Queue::default(),
            handlers: Vec::new(),
            handler_names: Vec::new(),
            life: Lifecycle::default(),
            timers: Timers::default(),
            reductions: Reductions::default(),
            tun,
            held_back: crate::link::HeldBack::default(),
            args,
            variant,
            dispatched: 0,
            dropped: 0,
            rec: None,
            fail,
            mail: None,
            mail_posted: Arc::default(),
            sent: 0,
            taken: 0,
            sent_out: false,
            ccs: crate::ccs::Ccs::default(),
            onesided,
            idle_watch: crate::idle_warn::IdleWatch::default(),
        }
    }

    /// This PE's number, `0 .. num_pes()`.
    #[inline]
    pub fn my_pe(&self) -> usize {
        self.my_pe
    }

    /// Number of PEs in the job.
    #[inline]
    pub fn num_pes(&self) -> usize {
        self.num_pes
    }

    /// This PE's node.
    pub fn my_node(&self) -> usize {
        self.my_node
    }

    /// Number of nodes in the job.
    pub fn num_nodes(&self) -> usize {
        self.table.num_nodes()
    }

    /// This PE's rank inside its node.
    pub fn my_rank(&self) -> usize {
        self.my_pe - self.table.node(self.my_node).map_or(0, |n| n.first_pe)
    }

    /// The node hosting `pe`.
    pub fn node_of(&self, pe: usize) -> usize {
        self.table.node_of(pe)
    }

    /// The node table.
    pub fn node_table(&self) -> &NodeTable {
        &self.table
    }

    /// The layer this job runs on (`"local"`, `"tcp"`, ...).
    pub fn layer(&self) -> &'static str {
        self.link.layer()
    }

    /// Number of PEs on this PE's node.
    pub fn node_size(&self) -> usize {
        self.table.node(self.my_node).map_or(1, |n| n.num_pes)
    }

    /// The first PE of node `node`.
    pub fn node_first_pe(&self, node: usize) -> usize {
        self.table.node(node).map_or(0, |n| n.first_pe)
    }

    /// The spanning trees collectives travel.
    #[inline]
    pub(crate) fn tree(&self) -> Tree<'_> {
        Tree {
            table: &self.table,
            k: self.tun.branching,
        }
    }

    /// The build variant of this program (`"multicore"`, ...).
    pub fn variant(&self) -> &'static str {
        self.variant
    }

    /// The program's own arguments (runtime `+` arguments removed), `argv[0]` first.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Messages this PE has dispatched to handlers so far.
    pub fn dispatched(&self) -> u64 {
        self.dispatched
    }

    /// Record a user event named `name` at this moment in the PE's trace (Projections'
    /// `traceUserEvent`): `converse-trace report` marks it on the timeline and counts it. Does
    /// nothing without `+trace`; a name is stored once per trace, however often it is used.
    ///
    /// ```no_run
    /// # fn f(pe: &mut converse::Pe) {
    /// pe.trace_event("converged");
    /// # }
    /// ```
    pub fn trace_event(&mut self, name: &str) {
        if let Some(r) = self.rec.as_deref_mut() {
            r.user_event(name);
        }
    }

    /// Record a user bracket named `name`, from `since` until now, in the PE's trace
    /// (Projections' `traceUserBracketEvent`): the report draws it on the timeline under the
    /// handlers and sums its time. Does nothing without `+trace`.
    ///
    /// ```no_run
    /// # fn f(pe: &mut converse::Pe) {
    /// let t = std::time::Instant::now();
    /// // ... a solver step ...
    /// pe.trace_bracket("solve", t);
    /// # }
    /// ```
    pub fn trace_bracket(&mut self, name: &str, since: std::time::Instant) {
        if let Some(r) = self.rec.as_deref_mut() {
            r.bracket(name, since);
        }
    }

    /// `(sent, taken)`: messages this PE has sent (to any PE or node, itself included; each
    /// copy of a multicast or each hop of a broadcast or reduction counts, as does each post to
    /// its [`Mailbox`](crate::Mailbox)) and messages it has taken off its queues to run (run,
    /// held until start-up is done, or dropped). Summed over the job, the two are equal
    /// exactly when no message is in flight anywhere: what quiescence detection reads
    /// (`converse-tasks`). One increment per message each.
    pub fn message_counts(&self) -> (u64, u64) {
        let posted = self.mail_posted.load(std::sync::atomic::Ordering::Acquire);
        (self.sent + posted, self.taken)
    }

    /// Register a handler under `name` and get its id.
    ///
    /// Every PE must register the same names in the same order before it first schedules
    /// (before its start function returns or first calls a scheduling function such as
    /// [`barrier`](Pe::barrier)); the ids then agree across the job. The runtime checks this at
    /// start-up and fails the job with a message saying what differs.
    ///
    /// ```no_run
    /// converse::run(|pe| {
    ///     let hello = pe.register("hello", |pe, _msg| {
    ///         println!("hello from PE {}", pe.my_pe());
    ///         pe.exit(0);
    ///     });
    ///     if pe.my_pe() == 0 {
    ///         pe.send(pe.num_pes() - 1, hello, b"");
    ///     }
    /// });
    /// ```
    ///
    /// # Panics
    /// When `name` is already registered on this PE, or when called after the PE started
    /// scheduling: both are mistakes in the program, not in its input.
    pub fn register<F>(&mut self, name: &str, handler: F) -> HandlerId
    where
        F: Fn(&mut Pe, Message) + 'static,
    {
        assert!(
            !self.life.started(),
            "PE {}: handler '{name}' registered after the PE started scheduling; \
             register every handler first",
            self.my_pe
        );
        assert!(
            !self.handler_names.iter().any(|n| n == name),
            "PE {}: handler '{name}' registered twice",
            self.my_pe
        );
        self.handlers.push(Rc::new(handler));
        self.handler_names.push(name.to_owned());
        HandlerId(USER_BASE + self.handlers.len() as u32 - 1)
    }

    /// The id of the handler registered as `name`, if any.
    pub fn handler(&self, name: &str) -> Option<HandlerId> {
        self.handler_names
            .iter()
            .position(|n| n == name)
            .map(|i| HandlerId(USER_BASE + i as u32))
    }

    /// Send a copy of `payload` to handler `h` on PE `dest`, at priority 0.
    ///
    /// # Panics
    /// When `dest` is not a PE of the job.
    pub fn send(&mut self, dest: usize, h: HandlerId, payload: &[u8]) {
        self.send_msg(dest, h, Message::from_payload(payload));
    }

    /// Send `msg` to handler `h` on PE `dest`, giving it away (no copy). The message keeps its
    /// priority ([`Message::set_priority`]).
    ///
    /// # Panics
    /// When `dest` is not a PE of the job.
    pub fn send_msg(&mut self, dest: usize, h: HandlerId, mut msg: Message) {
        msg.set_handler(h.0);
        self.route(dest, msg);
    }

    /// Send `msg` on to PE `dest` for the handler it already names, giving it away: the way to
    /// pass a received message along without copying it.
    ///
    /// # Panics
    /// When `dest` is not a PE of the job, or when `msg` names no handler registered with
    /// [`register`](Pe::register) (a fresh [`Message`] names none: use
    /// [`send_msg`](Pe::send_msg) for it).
    pub fn forward(&mut self, dest: usize, msg: Message) {
        let idx = msg.handler().wrapping_sub(USER_BASE) as usize;
        assert!(
            idx < self.handlers.len(),
            "PE {}: forward of a message naming handler {}, which is not a registered handler",
            self.my_pe,
            msg.handler()
        );
        self.route(dest, msg);
    }

    /// Run the handler `msg` names on it now, on this PE, inside the running handler
    /// (Converse's `CmiHandleMessage`): for a library that holds messages and runs them later,
    /// such as a seed balancer's pool. The message keeps its envelope (source PE, priority);
    /// it is not counted as sent or taken again, since it was counted when it came. Only a
    /// program's handler ([`register`](Pe::register)) is run: a message naming anything else
    /// is dropped with one line, as on arrival. Nesting is allowed (a handler may run one).
    pub fn deliver(&mut self, msg: Message) {
        if msg.handler() < USER_BASE {
            return self.drop_message(
                &msg,
                "it was delivered by a library but names a system handler",
            );
        }
        self.run_handler(msg);
    }

    /// Send a copy of `payload` to handler `h` on each PE of `dests`.
    ///
    /// # Panics
    /// When a PE of `dests` is not a PE of the job.
    pub fn multicast(&mut self, dests: &[usize], h: HandlerId, payload: &[u8]) {
        for &d in dests {
            self.send(d, h, payload);
        }
    }

    /// Stamp source and destination and hand the message to whoever delivers it: the local
    /// queue for this PE, the destination's inbox for a PE of this node, the layer (or the
    /// communication thread) for any other.
    pub(crate) fn route(&mut self, dest: usize, mut msg: Message) {
        assert!(
            dest < self.num_pes,
            "PE {}: send to PE {dest}, but the job has {} PEs",
            self.my_pe,
            self.num_pes
        );
        msg.set_src_pe(self.my_pe as u32);
        msg.set_dst_pe(dest as u32);
        self.sent += 1;
        if let Some(r) = self.rec.as_deref_mut() {
            r.sent(dest as u32, msg.wire_len());
            if dest == self.my_pe {
                r.received(dest as u32, msg.wire_len());
            }
        }
        if dest == self.my_pe {
            self.queue.push(msg);
            return;
        }
        let node = self.table.node_of(dest);
        if node == self.my_node {
            if let Link::Worker { node: n, .. } = &self.link {
                // A PE of this process: the message moves by pointer, no copy, no hop. A
                // sibling that is far behind holds the sender back, as a peer does (one
                // relaxed load per message).
                let behind = n
                    .inboxes
                    .get(dest - n.first_pe)
                    .is_some_and(|i| i.sibling_bytes() >= self.tun.sibling_max());
                if behind {
                    self.wait_for_sibling(dest);
                }
                if let Link::Worker { node: n, .. } = &self.link {
                    if let Some(inbox) = n.inboxes.get(dest - n.first_pe) {
                        inbox.push_from_sibling(msg);
                    }
                }
                return;
            }
        }
        self.send_to_node(node, msg);
    }

    /// Hand `msg` (already stamped) to another node.
    #[inline]
    fn send_to_node(&mut self, node: usize, msg: Message) {
        // A stalled peer must not make this node grow without limit (one field read per send).
        if self.link.queued(node) >= self.tun.max_queued {
            self.wait_for_room(node);
        }
        let sent = match &mut self.link {
            Link::Own(m) => {
                self.sent_out = true;
                m.send(node, msg)
            }
            Link::Worker { node: n, .. } => {
                n.post(node, msg);
                Ok(())
            }
        };
        if let Err(e) = sent {
            // Report mode: a send to a dead node is dropped (`try_send` says so beforehand).
            self.machine_error(&e);
        }
    }

    /// Send a copy of `payload` to handler `h` on node `node`, to be run by the first PE of
    /// that node free to take it (Charm++'s `CmiSyncNodeSend` and node queue). Node messages
    /// and PE messages run in one priority order on each PE; the handler sees the sender as
    /// the message's source.
    ///
    /// # Panics
    /// When `node` is not a node of the job.
    pub fn send_node(&mut self, node: usize, h: HandlerId, payload: &[u8]) {
        self.send_node_msg(node, h, Message::from_payload(payload));
    }

    /// Like [`send_node`](Pe::send_node), giving `msg` away (no copy); it keeps its priority.
    ///
    /// # Panics
    /// When `node` is not a node of the job.
    pub fn send_node_msg(&mut self, node: usize, h: HandlerId, mut msg: Message) {
        msg.set_handler(h.0);
        self.route_node(node, msg);
    }

    /// Stamp a node message and hand it on.
    pub(crate) fn route_node(&mut self, node: usize, mut msg: Message) {
        let nodes = self.table.num_nodes();
        assert!(
            node < nodes,
            "PE {}: send to node {node}, but the job has {nodes} nodes",
            self.my_pe
        );
        msg.set_src_pe(self.my_pe as u32);
        msg.set_dst_pe(NODE_BIT | node as u32);
        self.sent += 1;
        if let Some(r) = self.rec.as_deref_mut() {
            r.sent(NODE_BIT | node as u32, msg.wire_len());
        }
        if node != self.my_node {
            return self.send_to_node(node, msg);
        }
        match &self.link {
            Link::Worker { node: n, .. } => n.post_node(msg),
            // The node's only PE is the first free to take it.
            Link::Own(_) => self.queue.push(msg),
        }
    }

    /// Whether a message's destination is this PE, or this PE's node.
    #[inline]
    pub(crate) fn is_for_me(&self, msg: &Message) -> bool {
        let dst = msg.dst_pe();
        dst as usize == self.my_pe || dst == NODE_BIT | self.my_node as u32
    }

    /// Run the handler a message names. Messages for ids nobody registered are dropped and
    /// counted: they can only come from a broken peer, since the start-up check makes every
    /// PE's table identical.
    #[inline]
    pub(crate) fn run_user_handler(&mut self, msg: Message) {
        let idx = msg.handler().wrapping_sub(USER_BASE) as usize;
        match self.handlers.get(idx) {
            Some(h) => {
                // A cheap non-atomic count bump lets the handler borrow `self` mutably, even
                // re-entrantly through a nested scheduler call.
                let h = h.clone();
                self.dispatched += 1;
                h(self, msg);
            }
            None => self.drop_message(&msg, "it names no registered handler"),
        }
    }

    pub(crate) fn drop_message(&mut self, msg: &Message, why: &str) {
        self.dropped += 1;
        if self.dropped == 1 {
            converse_machine::input::error_line(&format!(
                "converse: PE {} dropped a message (handler {}, from PE {}): {why}",
                self.my_pe,
                msg.handler(),
                msg.src_pe()
            ));
        } else {
            tracing::debug!(target: "converse", handler = msg.handler(), from = msg.src_pe(), dropped = self.dropped, "dropped a message: {why}");
        }
    }

    /// End the whole job now: print `reason` naming this PE, stop every other PE, exit non-zero.
    pub fn abort(&mut self, reason: &str) -> ! {
        tracing::debug!(target: "converse", "aborting the job: {reason}");
        if let Some(r) = self.rec.as_deref_mut() {
            // The process ends without unwinding: what this PE recorded goes out now.
            r.mark(&format!("abort: {reason}"));
            r.flush(&self.handler_names);
        }
        match &mut self.link {
            // With one PE per node, the PE's number is the node's.
            Link::Own(m) => m.abort(&format!("PE {}: {reason}", self.my_pe)),
            Link::Worker { node, .. } => {
                let reason = format!("PE {} (node {}): {reason}", self.my_pe, self.my_node);
                // The communication thread owns the layer that can end the job: it aborts the
                // process, and this thread waits for that. Should it be stuck itself, the
                // process still ends.
                node.request_abort(reason.clone());
                let deadline = std::time::Instant::now() + ABORT_GRACE;
                while std::time::Instant::now() < deadline {
                    std::thread::park_timeout(ABORT_GRACE);
                }
                converse_machine::input::error_line(&format!(
                    "converse: {reason} (the communication thread did not end the job)"
                ));
                std::process::exit(1)
            }
        }
    }

    pub(crate) fn fatal(&mut self, reason: &str) -> ! {
        self.abort(reason)
    }
}

/// How long a worker that asked to end the job waits for its communication thread to do it.
const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
