//! The `Machine` contract: what an interconnect layer implements.

use crate::error::MachineError;
use crate::launch::LaunchEnv;
use crate::message::Message;
use crate::node_table::NodeTable;
use crate::rma::Rma;
use crate::settings::{SettingSpec, Settings};
use std::sync::Arc;
use std::time::Duration;

/// Ends a node's [`Transport::wait`] from another thread.
///
/// In SMP mode (several PEs per process) the runtime's communication thread owns the node's
/// `Machine` and blocks in [`wait`](Transport::wait) when idle; a worker PE that hands it an
/// outgoing message rings this to wake it. A layer provides it through
/// [`Transport::waker`], typically as an eventfd in the set its `wait` polls, or a flag its wait
/// loop checks.
///
/// # Contract
/// - A `wake` is never lost: one that comes while the node is not inside `wait` makes the
///   next `wait` return at once (it is sticky, like an eventfd's counter), and one that comes
///   during a `wait` ends it promptly. Several wakes before a `wait` may end only one.
/// - `wake` may be called from any thread, any number of times, and never blocks. The runtime
///   calls it only when the communication thread says it is about to sleep, so its cost (a
///   system call, say) is not paid per message.
pub trait Wake: Send + Sync {
    /// Make the node's current or next [`wait`](Transport::wait) return promptly.
    fn wake(&self);
}

/// One node's view of an interconnect: the Rust analog of Charm++'s LRTS machine layer.
///
/// The runtime owns one `Machine` per node and calls it from one thread at a time (the thread
/// that runs the node's communication server), so implementations need no internal locking for
/// calls on the same object. The scheduler, queues, priorities, broadcast trees, reductions,
/// start-up checks and exit protocol all live once in the runtime; a layer only moves messages
/// between nodes.
///
/// # Life cycle
/// 1. **Boot**: the layer's [`BootFn`] runs once per process. It learns (or, for the in-process
///    layer, creates) the node table and returns one `Machine` per node hosted in this process.
///    After boot every node can send to every other node.
/// 2. **Run**: the runtime calls [`send`](Transport::send) for outgoing messages and
///    [`advance`](Transport::advance) from its poll loop; when it has nothing to do it calls
///    [`wait`](Transport::wait).
/// 3. **Exit**: when the job ends, every node calls [`barrier`](Self::barrier) then
///    [`exit`](Self::exit). [`abort`](Self::abort) ends the whole job at once from any point.
///
/// # Ordering
/// Messages from one node to another are handed up at the receiver in the order they were
/// passed to `send` at the sender (FIFO per sender/receiver pair), each exactly once, none lost.
/// Nothing is promised across different senders. A layer over an unreliable interconnect must
/// restore these guarantees itself (sequence numbers, acknowledgements, retransmission).
///
/// # Buffer ownership
/// `send` takes the [`Message`] by value: from then on the layer owns the buffer and drops it
/// when the interconnect no longer needs it (after the bytes were written to a socket, after the
/// MPI request completed, ...). The layer may use the message's headroom for its own header
/// ([`Message::frame_with_header`]), so it never copies the payload to prepend one. On receipt
/// the layer builds one buffer per message (reading the frame straight into it) and wraps it with
/// [`Message::from_frame`]; the message handed up is owned by the runtime, which passes it to the
/// handler without copying the payload again.
///
/// # What may block
/// - `send` must not block waiting for the receiver to make progress: if the interconnect cannot
///   take the bytes now, the layer queues them and pushes them out in later `send`/`advance`
///   calls; a layer that coalesces may also hold small messages until its
///   [`flush`](Transport::flush). (A layer may block briefly on a local resource, never on a
///   remote node.)
/// - `advance` never blocks; it does whatever progress is possible now and returns.
/// - `wait` blocks up to its timeout, returning early when something arrived (or may have).
/// - `barrier` and `exit` block until every node has reached them.
///
/// # Errors and dead peers
/// Every error is fatal to the job — the runtime reports it with the PE and node and aborts —
/// but a `PeerDead` in report mode (below), which reports that node's death. A layer signals a peer that died or closed its end with [`MachineError::PeerDead`], and one
/// that stopped answering (which may only be busy in a long handler) with
/// [`MachineError::PeerSilent`], naming the node and the setting that bounds the wait; it
/// never retries forever. Bytes from a peer
/// that do not decode are [`MachineError::Corrupt`]. Packets from outside the job (wrong secret)
/// are not errors: the layer drops and counts them.
///
/// # Report mode: a job that survives a node's death
/// With the setting `faults=report` ([`Settings::reports_deaths`]) a program asks that a
/// node's death be reported rather than end the job. A layer that cannot do this (MPI) refuses
/// the setting at boot with [`MachineError::Setting`]. One that can:
/// - declares a node dead when it learns so — from its launcher (charmrun's `DEAD`) or from
///   its own interconnect (a connection reset, a peer silent past its bound) — and then
///   releases everything it holds for it (queues, windows, buffers: [`queued`](Transport::queued)
///   drops to 0), sends it nothing more and hands up nothing more from it. A death it found
///   itself it tells its launcher, which ends that node and tells every other node, so all
///   survivors agree on who is out;
/// - returns [`MachineError::PeerDead`] for that node **once**, from `advance`, `wait` or
///   `send`, as a report rather than a failure: the runtime records the death and keeps
///   calling the layer, which must be in a consistent state to be called again. A `send` to
///   a node already reported returns `PeerDead` again (the message is dropped). Every other
///   error stays fatal, and `PeerSilent` is not used: silence past the bound is a death;
/// - completes [`barrier`](Self::barrier) over the survivors (it ignores deaths while in it).
///
/// Messages from a node are handed up in order until its death is reported; a message sent
/// to a node that dies may be lost. Node 0's death always ends the job (it is the front-end),
/// as does a death before boot completes.
///
/// # What the runtime does, so a layer does not
/// - **Loopback**: the runtime never passes its own node to [`send`](Transport::send); it delivers
///   messages between PEs of one node itself. A layer needs no queue for messages to itself.
/// - **Holding messages**: a layer never keeps a message it has received for later. What
///   arrives during [`barrier`](Self::barrier) goes to the `deliver` callback the runtime
///   passes, exactly as from [`advance`](Transport::advance); the runtime holds it.
/// - **Scheduling, priorities, collectives, start-up check, exit protocol**: all in the runtime.
///
/// [`check`](crate::check) runs these promises against any layer's boot function inside one
/// process in a second or so; the whole-job conformance suite (`tests/`) runs real jobs.
///
/// # Two traits
/// The per-call methods — identity, `send`, `advance`, `wait` and what the runtime asks of a
/// node's side of the interconnect — are [`Transport`], which every layer implements; this
/// trait adds the life cycle (`barrier`, `exit`, `abort`). A layer started by a launcher does
/// not write the life cycle itself: it implements [`Part`](crate::Part) (mechanics only) and
/// the launcher session (`converse-bootstrap`'s `Session`) makes it a `Machine`, alone or as
/// one part of a composite. The local and MPI layers, whose life cycle is their own (threads
/// of one process, `MPI_Barrier`/`MPI_Abort`), implement both traits directly.
pub trait Machine: Transport {
    /// Block until every node of the job has called `barrier`. Used at exit; user code gets
    /// message-driven barriers from the runtime instead. While it waits, the layer must keep its
    /// interconnect moving — push out what it has queued (a peer may need it to reach the
    /// barrier), answer peers — and hand every message that arrives to `deliver`, as
    /// [`advance`](Transport::advance) does (per-sender order, exactly once). The simplest
    /// correct body calls `self.advance(deliver)` in its wait loop.
    ///
    /// # Errors
    /// [`MachineError::PeerDead`] when a node died before reaching the barrier (a launched layer
    /// may instead be ended by its launcher, which notices the death first); the errors of
    /// `advance`.
    fn barrier(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<(), MachineError>;

    /// Leave the job with `code` as this node's exit code: flush what is still queued for other
    /// nodes (for a bounded time: the job is over), tell the launcher (if any) the code,
    /// release the interconnect. No other method is called after it. The runtime calls
    /// `barrier` before `exit`, so no peer is still sending.
    ///
    /// # Errors
    /// [`MachineError::Io`] when the layer could not shut down cleanly; the process still exits.
    fn exit(&mut self, code: i32) -> Result<(), MachineError>;

    /// End the whole job now, from any state: print `reason` (once, naming this node), make
    /// every other node stop (through the launcher or the interconnect), and exit the process
    /// with a non-zero code.
    fn abort(&mut self, reason: &str) -> !;
}

/// The per-call half of the [`Machine`] contract: what moves messages, and what the runtime
/// asks of a node's side of the interconnect while the job runs. Every layer implements it;
/// [`Machine`]'s documentation (ordering, buffer ownership, what may block, errors, report
/// mode) is this trait's contract too.
pub trait Transport: Send {
    /// The layer's name as `+machine` knows it (`"local"`, `"tcp"`, ...).
    fn layer(&self) -> &'static str;

    /// This node's number, `0 .. table().num_nodes()`.
    fn my_node(&self) -> usize;

    /// The node table, identical on every node.
    fn table(&self) -> &NodeTable;

    /// Send `msg` (its wire bytes, see [`Message::wire`]) to node `node`, taking ownership.
    /// `node` is never [`my_node`](Self::my_node): the runtime delivers to its own node itself.
    ///
    /// Returns once the layer has taken the message: it may still be queued inside the layer.
    ///
    /// # Errors
    /// [`MachineError::InvalidNode`] for a node outside the table (or this node itself);
    /// [`MachineError::PeerDead`]
    /// when the destination is known to be gone; [`MachineError::Io`] for a local failure.
    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError>;

    /// Wire bytes this node holds for `node`: taken by [`send`](Self::send) and not yet off
    /// the layer's hands — queued for the interconnect, or handed to it but not released (a
    /// lent buffer not yet pulled, an MPI request not complete). Called once per send, so it
    /// must be a field read, not a walk over queues.
    ///
    /// The runtime keeps it under the `peer.max_queued_mib` setting: before a send to a node
    /// at or above it, the sender waits for room, running `advance` (arrivals go to its queue;
    /// no handler runs meanwhile) and `wait`. So a stopped or slow peer cannot make a sender
    /// grow without limit, and two nodes that flood each other both keep receiving, so neither
    /// waits forever. The default, 0, suits a layer that never holds anything (nothing to
    /// bound).
    fn queued(&self, node: usize) -> usize {
        let _ = node;
        0
    }

    /// Whether a message is part-way through this node's side of the interconnect: a frame
    /// partly read (its rest is on the way) or partly written. The scheduler then keeps polling
    /// for a while instead of blocking in [`wait`](Self::wait), since the rest is usually
    /// microseconds away and a wake-up per chunk costs more than the polling; after a bounded
    /// time it blocks as usual, so a peer stopped mid-message does not make this node spin.
    /// Called only when idle. The default, `false`, always lets the scheduler block.
    fn in_transfer(&self) -> bool {
        false
    }

    /// The longest this layer may go without an [`advance`](Self::advance) while its node is
    /// busy, before its peers could take it for dead: `None` when nothing on the layer's side
    /// times out (a kernel or library answers for it). The runtime stops taking in arrivals
    /// while a PE holds more than `sched.max_queued_mib` waiting to run, so that a flood is
    /// held back by the layer's flow control instead of filling the receiver; it still calls
    /// `advance` at least this often then, taking in what the layer holds. The default, `None`,
    /// suits a layer whose protocol runs without it (TCP, shared memory, MPI).
    fn max_unpolled(&self) -> Option<Duration> {
        None
    }

    /// Write out what the layer holds back to send several small messages at once (TCP's and
    /// UDP's coalescing, `tcp.coalesce_us`, `udp.coalesce_us`): after it returns, every message
    /// taken by [`send`](Self::send) is on its way as if just sent — handed to the
    /// interconnect, or queued only because the interconnect cannot take it now. Never blocks.
    ///
    /// Who calls it: the runtime, after each handler that sent to another node (on a PE that
    /// owns its layer), and the SMP communication thread after each batch of sends it makes
    /// for its workers. It is called when nothing is held too, so it must then cost next to
    /// nothing (a counter and an emptiness check).
    ///
    /// What a layer that holds messages must do besides: its own [`advance`](Self::advance)
    /// flushes first, and so do [`wait`](Self::wait), the exit barrier's loop and `exit` (sends
    /// made outside a handler — by timers, idle callbacks, code around `run_until` — rely on
    /// those); so a message is held at most until the handler that sent it returns or the PE
    /// next polls. It counts a *turn* at each flush and each `advance`, and never holds the
    /// first message to a node in a turn: a lone message's latency stays what it was, and only
    /// the later messages of a burst wait. A layer that wraps another (the launcher session, a
    /// composite) must forward `flush`: the default would leave the inner layer's messages held
    /// until its next `advance`.
    ///
    /// Optional: the default does nothing, for a layer that never holds a message back.
    ///
    /// # Errors
    /// As [`send`](Self::send). A broken connection to one node does not stop the flush to the
    /// others; the first error is returned after.
    fn flush(&mut self) -> Result<(), MachineError> {
        Ok(())
    }

    /// A handle that ends this node's [`wait`](Self::wait) from another thread (see [`Wake`]).
    /// Asked for once, at start-up, and only when the node runs several PEs (`+ppn` above 1).
    ///
    /// Optional: with the default, `None`, the runtime's communication thread never blocks in
    /// `wait` for longer than 1 ms at a time, so a worker's message to another node waits at
    /// most that long when the node was idle, and an idle node wakes a thousand times a
    /// second. Every layer of this repository provides one.
    fn waker(&self) -> Option<Arc<dyn Wake>> {
        None
    }

    /// Direct copies between this process's memory and its peers' ([`Rma`], the optional
    /// one-sided half of the contract; [`crate::rma`] says how the runtime uses it). Asked
    /// for once, at start-up, after boot.
    ///
    /// Optional: with the default, `None`, one-sided transfers travel as messages (a get's
    /// bytes copied into its answer, a put's into its request), which is correct on every
    /// layer. The SI layer and the in-process one offer [`ProcessMemory`](crate::ProcessMemory).
    fn rma(&self) -> Option<Arc<dyn Rma>> {
        None
    }

    /// This node's counters of its side of the interconnect, as (name, value), for the
    /// runtime's `+stats` summary at exit and for traces (`+trace` records each that changed
    /// whenever the PE that owns the layer goes idle): retransmissions, duplicates, strangers
    /// dropped, traffic per transport. Names are `layer.what` (`"udp.retransmits"`); values
    /// only grow. Called only when the program asked for them, never per message, so it may
    /// allocate.
    ///
    /// Optional: the default, no counters, suits a layer with nothing to count.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// The communication server: push out pending sends, then hand the messages that have
    /// arrived to `deliver`, in per-sender order. Returns how many messages were handed up. A
    /// layer may stop after a batch so the scheduler can dispatch; what is left is handed up
    /// by the next call. Never blocks. What one call hands up must be bounded (a socket
    /// buffer's worth, a ring, a window), not "until the interconnect is empty": the runtime
    /// bounds a receiver's memory by not calling `advance` while it is too far behind
    /// (`sched.max_queued_mib`), which holds only if what is not taken in stays with the
    /// interconnect and its flow control.
    ///
    /// # Errors
    /// [`MachineError::PeerDead`], [`MachineError::Corrupt`], [`MachineError::Aborted`] (the
    /// launcher or another node ended the job), [`MachineError::Io`].
    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError>;

    /// Block until a message may have arrived or `timeout` passed, whichever is first. The
    /// runtime calls it only when idle, after having spun on `advance` for a while. Spurious
    /// returns are allowed; a message that arrives during the wait must end it promptly.
    ///
    /// The default sleeps for `timeout` capped at 200 µs: correct for any layer, but a layer
    /// that can block on something real (a socket, an eventfd, a channel) should, so that an
    /// idle node uses no CPU yet wakes as soon as a message comes.
    ///
    /// # Errors
    /// As [`advance`](Self::advance).
    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        std::thread::sleep(timeout.min(Duration::from_micros(200)));
        Ok(())
    }
}

/// What the runtime tells a layer at boot.
#[derive(Debug, Clone)]
pub struct BootConfig {
    /// PEs the job should have (`+p`). A launched layer learns the real number from its launcher
    /// and uses this only as a check.
    pub num_pes: usize,
    /// PEs per node (`+ppn`).
    pub pes_per_node: usize,
    /// Settings: the build variant's defaults overridden by the command line. Every key in it
    /// is one the runtime or a compiled-in layer declares ([`Layer::settings`]).
    pub settings: Settings,
    /// The launch context, when a launcher running in this very process started the job (a
    /// tree-overlay front-end, the in-process check): a launched layer boots from it instead of
    /// the process environment ([`LaunchEnv::for_boot`]). `None`: the environment.
    pub launch: Option<LaunchEnv>,
}

impl BootConfig {
    /// A configuration for `num_pes` PEs, one per node, with no settings and no launch context.
    pub fn new(num_pes: usize) -> BootConfig {
        BootConfig {
            num_pes,
            pes_per_node: 1,
            settings: Settings::default(),
            launch: None,
        }
    }
}

/// Boots a layer: returns one [`Machine`] per node hosted by this process, in node order.
///
/// The in-process layer returns all nodes of the job; a layer with one process per node returns
/// one. The runtime runs each returned node on a thread of its own (the calling thread when
/// there is only one).
///
/// # Errors
/// [`MachineError::Boot`] with a message a person can act on (launcher not found, a setting out
/// of range, ...).
pub type BootFn = fn(&BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError>;

/// A layer as the runtime's registry lists it.
#[derive(Clone, Copy)]
pub struct Layer {
    /// The name `+machine` selects it by.
    pub name: &'static str,
    /// One line saying what it is.
    pub summary: &'static str,
    /// Its boot function.
    pub boot: BootFn,
    /// Whether this process was started by the layer's launcher (charmrun's environment, an
    /// MPI launcher's). Lets a program built with several layers pick the right one without
    /// `+machine`. Layers that need no launcher answer `false`.
    pub launched: fn() -> bool,
    /// The settings the layer reads (`+set KEY=VALUE`): a key that neither the runtime nor a
    /// compiled-in layer declares is refused at start-up, naming the known ones.
    pub settings: &'static [SettingSpec],
    /// Parse the layer's settings as its boot would, without booting. The runtime calls it for
    /// every compiled-in layer at start-up, so a malformed value is refused even when another
    /// layer runs (a typo in a variant's or a job script's settings shows at once, not on the
    /// day the other layer is used). [`no_settings`] for a layer that reads none.
    pub check: fn(&Settings) -> Result<(), MachineError>,
    /// For the start-up banner: how node `node` reaches its peers, when the layer has more to
    /// say than its name (a composite: "si to 1 peer, tcp to 2 peers"). [`no_description`]
    /// for a layer that has not.
    pub describe: fn(&NodeTable, usize) -> Option<String>,
}

/// [`Layer::describe`] of a layer whose name says it all.
pub fn no_description(_: &NodeTable, _: usize) -> Option<String> {
    None
}

/// [`Layer::check`] of a layer that reads no settings.
///
/// # Errors
/// Never.
pub fn no_settings(_: &Settings) -> Result<(), MachineError> {
    Ok(())
}

impl std::fmt::Debug for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layer").field("name", &self.name).finish()
    }
}
