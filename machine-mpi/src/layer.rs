//! The machine layer on MPI: node = rank of `MPI_COMM_WORLD`.
//!
//! ```text
//! send(node, msg):   small: MPI_Isend(msg.wire()) on the "small" communicator;
//!                    large: a notice (0 bytes) there, then MPI_Isend on "large";
//!                    keep (request, msg) until MPI_Testsome says done
//! advance():         MPI_Testsome(sends) now and then; hand up, in this order: a message
//!                    released from a hold queue; a large message from a source whose notice
//!                    is next (MPI_Improbe on "large" for that source, MPI_Mrecv into the
//!                    buffer of a large message sent); the head of the ring of pre-posted
//!                    receives (MPI_Test, copy out; re-posted at the next look)
//! wait(t):           MPI_Test the ring's head (and probe for awaited large messages),
//!                    napping between tests (MPI has no blocking wait that does not spin),
//!                    the nap growing while nothing comes; a wake from another thread
//!                    (`wake.rs`) ends the nap and the wait
//! barrier():         MPI_Ibarrier, keeping sends and receives moving until it completes
//! exit():            finish the sends (2 s at most), a second MPI_Ibarrier, MPI_Finalize
//! abort():           print the reason, MPI_Abort
//! ```
//!
//! MPI gives the source and the size of every message, so unlike the slides' layers this one
//! sends no header: the wire bytes (envelope + payload) are the MPI message.
//!
//! **Two ways in.** A message of up to `mpi.small_bytes` wire bytes lands in one of
//! `mpi.prepost` receives posted in advance (`prepost.rs`): MPI copies it once, as it lands,
//! where a probed message is first buffered as unexpected and copied again. A larger message is
//! received by probe, into a buffer of the right size. MPI keeps a sender's messages in order
//! within one communicator only, so each large message is announced by a notice in the small
//! stream, and what a source sent after it is held until it is received (`order.rs`): FIFO
//! per pair holds across both.
//!
//! Both are duplicates of `MPI_COMM_WORLD` ("small" and "large"), so the layer's receives,
//! posted for any source and tag, never take a message the program itself sends on the world
//! communicator.
//!
//! | communicator | tag | bytes | meaning |
//! |---|---:|---|---|
//! | small | 1 | wire bytes | a small message |
//! | small | 5 | none | a notice: the sender's next message is on "large" |
//! | small | 4 | u64 LE | credit (below) |
//! | large | 1 | wire bytes | a large message |
//! | large | 2 | u64 LE | a huge message's wire length; its pieces follow |
//! | large | 3 | a piece | one piece of a huge message |
//!
//! **Flow control.** MPI completes a small send as soon as it has copied it, whether or not the
//! receiver is receiving, so a fast sender could pile up any number of messages at a slow
//! receiver — memory without bound, and Open MPI's ob1 (16-bit sequence numbers per peer)
//! mis-orders a peer's messages once more than 65,536 are pending. So each pair has a window
//! (`mpi.window` messages): the receiver returns a credit (its cumulative count) after every
//! quarter window it takes off MPI's queue (a small message held behind a notice counts once
//! released, so the window bounds what is held), and a sender past its window queues messages
//! in the layer until credit comes back. Every message but a credit counts, notices included.
//! A message longer
//! than `mpi.piece_bytes` (MPI counts are `int`) goes as a small "huge" header carrying its
//! length followed by pieces; MPI's non-overtaking rule keeps a sender's messages in order, so
//! the receiver reassembles per source.
//!
//! All MPI calls come from the thread that booted the layer (the runtime runs a one-node
//! process on its calling thread): the layer asks for `MPI_THREAD_FUNNELED`.

pub(crate) mod boot;
mod receive;

pub use self::boot::boot;

use crate::launcher_env;
use crate::mpi_call;
use crate::order::Order;
use crate::prepost::Prepost;
use crate::sends::{InFlight, Keep};
use crate::wake::MpiWaker;
use converse_machine::{Layer, Machine, MachineError, Message, NodeTable, Part, Transport, Wake};
use mpi::ffi;
use receive::{Incoming, Received};
use std::collections::VecDeque;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The registry entry for this layer.
pub const LAYER: Layer = Layer {
    name: "mpi",
    summary: "MPI (rsmpi): one process per rank, started by mpirun/mpiexec",
    boot,
    launched: launcher_env::launched,
    settings: crate::SETTINGS,
    check: |s| boot::MpiSettings::parse(s).map(drop),
    describe: converse_machine::no_description,
};

/// A whole message (on "small" or "large" by its size).
const TAG_MSG: c_int = 1;
/// The start of a message sent in pieces: 8 bytes, its wire length (LE).
const TAG_HUGE: c_int = 2;
/// One piece of a message announced by [`TAG_HUGE`].
const TAG_PIECE: c_int = 3;
/// Credit: 8 bytes, how many data messages (every tag but this one) the sender of the credit
/// has received from its receiver so far (LE).
const TAG_CREDIT: c_int = 4;
/// A notice, 0 bytes: the sender's next message to this receiver goes on the large
/// communicator.
const TAG_NOTICE: c_int = 5;

/// Messages kept during a barrier handed up per `advance` at most.
const BATCH: usize = 64;

/// Sends in flight before `advance` asks MPI which completed (`wait` always asks).
const COMPLETE_EVERY: usize = 16;

/// How long `exit` tries to finish sends that are still in flight.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// How long `exit` waits for the other ranks before leaving without them.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Naps between probes while idle: the first, and the longest (which bounds how late an idle
/// node notices a message).
const NAP_MIN: Duration = Duration::from_micros(20);
const NAP_MAX: Duration = Duration::from_millis(1);

/// For this long after the last message in or out, an idle node yields instead of napping: an
/// answer is likely on its way, and a nap would delay it by up to the nap's length (measured:
/// a loaded machine's ping-pong at 1.4 ms p50 with naps, against 0.4 us raw).
const YIELD_FOR: Duration = Duration::from_millis(2);

/// One node (rank) of an MPI job.
pub struct MpiMachine {
    me: usize,
    table: NodeTable,
    /// Finalizes MPI when dropped: kept until `exit`.
    universe: Option<mpi::environment::Universe>,
    /// MPI was initialized without the universe (`si+mpi`): `exit` calls `MPI_Finalize`.
    finalize_raw: bool,
    /// A duplicate of the world communicator: small messages, notices, credits, barriers.
    comm: ffi::MPI_Comm,
    /// Another: large messages, received by probe.
    large: ffi::MPI_Comm,
    byte: ffi::MPI_Datatype,
    sends: InFlight,
    /// Largest message (wire bytes) sent to a pre-posted receive; the same on every rank.
    small: usize,
    /// The pre-posted receives.
    ring: Prepost,
    /// Per-source FIFO across the two communicators.
    order: Order<Message>,
    piece: usize,
    /// Per source: a message arriving in pieces.
    incoming: Vec<Option<Incoming>>,
    /// Flow control, see the module docs.
    window: u64,
    /// Per peer: data messages posted to it, and how many it said it has received.
    sent: Vec<u64>,
    credit: Vec<u64>,
    /// Per peer: messages waiting for credit, in send order.
    backlog: Vec<VecDeque<Message>>,
    /// Per peer: wire bytes in `backlog` (what is in flight is bounded by the window).
    backlog_bytes: Vec<usize>,
    /// Per source: data messages received from it, and the count last sent back as credit.
    received: Vec<u64>,
    reported: Vec<u64>,
    /// The current idle nap; grows while nothing arrives, back to the minimum when something does.
    nap: Duration,
    /// When `wait` last found that a message had gone out or come in since its previous call.
    last_activity: Instant,
    /// A message went out or came in since `wait` last looked (a flag, so that the hot path
    /// does not read the clock).
    active: bool,
    /// Ends `wait` from other threads, with no MPI call.
    waker: Arc<MpiWaker>,
}

// By hand: the fields are the layer's working state (MPI handles among them).
impl std::fmt::Debug for MpiMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiMachine")
            .field("rank", &self.me)
            .finish_non_exhaustive()
    }
}

// SAFETY: the MPI handles are plain values valid in the whole process (pointers into Open
// MPI's globals, integers in MPICH). The runtime moves a one-node machine at most from boot to
// the thread that runs it — the calling thread, the one that initialized MPI — and calls it
// from that thread only, as MPI_THREAD_FUNNELED requires.
unsafe impl Send for MpiMachine {}

impl MpiMachine {
    /// Post `msg` to `node`: one small MPI message; or a notice and a large one; or a notice,
    /// a header and pieces for a huge one.
    fn post_message(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        let len = msg.wire_len();
        // One MPI call per message; the buffer moves into the in-flight set (its heap bytes
        // do not move), so nothing is copied.
        if len <= self.small {
            let ptr = msg.wire().as_ptr();
            self.sent[node] += 1;
            return self.post(ptr, len, node, self.comm, TAG_MSG, Keep::One(msg));
        }
        self.sent[node] += 1;
        self.post(
            std::ptr::NonNull::<u8>::dangling().as_ptr(),
            0,
            node,
            self.comm,
            TAG_NOTICE,
            Keep::Nothing,
        )?;
        if len <= self.piece {
            let ptr = msg.wire().as_ptr();
            self.sent[node] += 1;
            return self.post(ptr, len, node, self.large, TAG_MSG, Keep::One(msg));
        }
        let header = Message::from_payload(&(len as u64).to_le_bytes());
        let hptr = header.payload().as_ptr();
        self.sent[node] += 1;
        self.post(hptr, 8, node, self.large, TAG_HUGE, Keep::One(header))?;
        let msg = Arc::new(msg);
        let base = msg.wire().as_ptr();
        let mut off = 0;
        while off < len {
            let n = self.piece.min(len - off);
            // SAFETY: `off + n <= len`, inside the wire bytes `msg` holds.
            let ptr = unsafe { base.add(off) };
            self.sent[node] += 1;
            self.post(
                ptr,
                n,
                node,
                self.large,
                TAG_PIECE,
                Keep::Shared(msg.clone()),
            )?;
            off += n;
        }
        Ok(())
    }

    /// Post what waits for `node` as far as its window allows.
    fn pump(&mut self, node: usize) -> Result<(), MachineError> {
        while self.sent[node] - self.credit[node] < self.window {
            let Some(m) = self.backlog[node].pop_front() else {
                break;
            };
            self.backlog_bytes[node] -= m.wire_len();
            self.post_message(node, m)?;
        }
        Ok(())
    }

    /// Count a data message from `src`; return credit once a quarter window has come.
    fn count_received(&mut self, src: usize) -> Result<(), MachineError> {
        self.received[src] += 1;
        if self.received[src] - self.reported[src] >= self.window / 4 {
            self.reported[src] = self.received[src];
            // A few bytes per quarter window: the allocation is not per message.
            let credit = Message::from_payload(&self.received[src].to_le_bytes());
            let ptr = credit.payload().as_ptr();
            self.post(ptr, 8, src, self.comm, TAG_CREDIT, Keep::One(credit))?;
        }
        Ok(())
    }

    /// Whether anything waits for credit.
    fn backlogged(&self) -> bool {
        self.backlog.iter().any(|b| !b.is_empty())
    }

    /// Post one non-blocking send of `len` bytes at `ptr` on `comm` and keep `keep` alive until
    /// it is done.
    fn post(
        &mut self,
        ptr: *const u8,
        len: usize,
        node: usize,
        comm: ffi::MPI_Comm,
        tag: c_int,
        keep: Keep,
    ) -> Result<(), MachineError> {
        // SAFETY: MPI_REQUEST_NULL is a predefined handle.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `ptr..ptr+len` lies in a buffer owned by `keep`, which the in-flight set holds
        // until MPI reports the request complete; `len` fits an int (checked by the callers).
        mpi_call("MPI_Isend", unsafe {
            ffi::MPI_Isend(
                ptr as *const c_void,
                len as c_int,
                self.byte,
                node as c_int,
                tag,
                comm,
                &mut req,
            )
        })?;
        self.sends.push(req, keep);
        Ok(())
    }

    /// Start a non-blocking barrier.
    fn ibarrier(&self) -> Result<ffi::MPI_Request, MachineError> {
        // SAFETY: reading a predefined handle, a constant rsmpi's shim exports.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `self.comm` is a duplicate of the world communicator, valid while MPI is initialised (the
        // universe is kept until `exit`); `req` is a local out-parameter.
        mpi_call("MPI_Ibarrier", unsafe {
            ffi::MPI_Ibarrier(self.comm, &mut req)
        })?;
        Ok(req)
    }

    /// Wait for `req` until `deadline`, keeping sends moving and receiving what arrives: handed
    /// to `deliver` if there is one, dropped otherwise. Returns whether the request completed.
    fn wait_moving(
        &mut self,
        req: &mut ffi::MPI_Request,
        mut deliver: Option<&mut dyn FnMut(Message)>,
        deadline: Option<Instant>,
    ) -> Result<bool, MachineError> {
        let mut nap = Duration::from_micros(1);
        loop {
            self.sends.complete()?;
            loop {
                match self.receive()? {
                    Received::Message(m) => {
                        if let Some(d) = deliver.as_mut() {
                            d(m);
                        }
                    }
                    Received::Nothing => break,
                    Received::Other => {}
                }
            }
            let mut flag: c_int = 0;
            // SAFETY: `req` is an active request owned by the caller.
            mpi_call("MPI_Test", unsafe {
                ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE)
            })?;
            if flag != 0 {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(NAP_MAX);
        }
    }
}

impl Transport for MpiMachine {
    fn layer(&self) -> &'static str {
        "mpi"
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        let nodes = self.table.num_nodes();
        if node >= nodes || node == self.me {
            return Err(MachineError::InvalidNode { node, nodes });
        }
        self.active = true;
        if self.backlog[node].is_empty() && self.sent[node] - self.credit[node] < self.window {
            self.post_message(node, msg)
        } else {
            self.backlog_bytes[node] += msg.wire_len();
            self.backlog[node].push_back(msg);
            Ok(())
        }
    }

    fn queued(&self, node: usize) -> usize {
        self.backlog_bytes.get(node).copied().unwrap_or(0)
    }

    fn in_transfer(&self) -> bool {
        // Out: a large send whose data is still moving (rendezvous: it needs our progress
        // calls, which `advance` makes), or messages waiting for credit that is on its way.
        // In: a large message announced and not received yet (it holds back what its source
        // sent after it), or messages released from a hold and not handed up yet.
        self.sends.large() > 0 || self.backlogged() || !self.order.is_empty()
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        Some(self.waker.clone())
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        // Completing sends only frees their buffers (every probe below drives MPI's progress
        // engine already), so it waits until a few have gathered: one call fewer per message.
        // A large send is asked about at once: until it is known complete, `in_transfer`
        // keeps the scheduler polling.
        if self.sends.len() >= COMPLETE_EVERY || self.sends.large() > 0 {
            self.sends.complete()?;
        }
        let mut n = 0;
        // One message per call: the next call's probe finds the next one as cheaply as this
        // one would, while a probe after the last message would only delay its handler (a
        // probe that finds nothing costs as much as one that finds something). Credits and
        // pieces do not count, up to a bound so the scheduler is not kept out.
        let mut taken = 0;
        while n == 0 && taken < 4 * BATCH {
            match self.receive()? {
                Received::Message(m) => {
                    deliver(m);
                    n += 1;
                }
                Received::Other => {}
                Received::Nothing => break,
            }
            taken += 1;
        }
        if taken > 0 {
            self.nap = NAP_MIN;
            self.active = true;
        }
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        // MPI offers no wait-for-any-message that does not spin, so an idle node probes and
        // naps. The nap grows while nothing comes (bounding an idle node's wake-ups to about
        // one per NAP_MAX) and drops back when a message is handed up.
        let deadline = Instant::now() + timeout;
        if std::mem::take(&mut self.active) {
            self.last_activity = Instant::now();
        }
        loop {
            if self.waker.take() {
                return Ok(());
            }
            self.sends.complete()?;
            if self.probe()? {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            if self.backlogged() || now - self.last_activity < YIELD_FOR {
                // Not idle yet: credit or an answer is likely on its way. Yield rather than
                // sleep, so it is seen as soon as it lands, while a process sharing this core
                // still gets to run.
                std::thread::yield_now();
                continue;
            }
            // A wake ends the nap at once (an unpark; see wake.rs for the worst case).
            self.waker.nap(self.nap.min(deadline - now));
            self.nap = (self.nap * 2).min(NAP_MAX);
        }
    }
}

impl Machine for MpiMachine {
    fn barrier(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<(), MachineError> {
        let mut req = self.ibarrier()?;
        self.wait_moving(&mut req, Some(deliver), None)?;
        Ok(())
    }

    fn exit(&mut self, _code: i32) -> Result<(), MachineError> {
        self.leave()
    }

    fn abort(&mut self, reason: &str) -> ! {
        converse_machine::input::error_line(&format!(
            "converse: node {} aborting the job: {reason}",
            self.me
        ));
        // SAFETY: MPI is initialized; MPI_Abort ends every rank of the communicator.
        unsafe {
            ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1);
        }
        std::process::exit(1)
    }
}

/// What `si+mpi` drives (`pshm.rs`): the plain layer's own `exit` is `leave`.
impl Part for MpiMachine {
    fn leave(&mut self) -> Result<(), MachineError> {
        // Every rank is past the runtime's barrier: what still arrives is not wanted, but it is
        // received (and dropped) so that a peer's large send — which MPI completes only once it
        // is matched — can finish.
        let flush_end = Instant::now() + EXIT_FLUSH;
        while (!self.sends.is_empty() || self.backlogged()) && Instant::now() < flush_end {
            self.sends.complete()?;
            while !matches!(self.receive()?, Received::Nothing) {}
            std::thread::yield_now();
        }
        // A second barrier: nobody finalizes while a peer's sends may still need it.
        let mut req = self.ibarrier()?;
        let done = self.wait_moving(&mut req, None, Some(Instant::now() + EXIT_WAIT))?;
        // Posted receives must not outlive the layer's buffers, nor be found by MPI_Finalize.
        self.ring.cancel()?;
        let left = self.sends.abandon() + self.backlog.iter().map(VecDeque::len).sum::<usize>();
        if left > 0 {
            converse_machine::input::error_line(&format!(
                "converse: node {}: {left} send(s) still in flight at exit were dropped",
                self.me
            ));
        }
        if done {
            match self.universe.take() {
                Some(u) => drop(u),
                // SAFETY: MPI is initialized, every rank is past the barrier, and nothing of
                // the layer's is posted any more.
                None if self.finalize_raw => unsafe {
                    ffi::MPI_Finalize();
                },
                None => {}
            }
        } else {
            // Some rank never reached the barrier; finalizing could wait for it forever.
            converse_machine::input::error_line(&format!(
                "converse: node {}: the other ranks did not reach the exit barrier within {} s; \
                 leaving without MPI_Finalize",
                self.me,
                EXIT_WAIT.as_secs()
            ));
            std::mem::forget(self.universe.take());
        }
        Ok(())
    }
}
