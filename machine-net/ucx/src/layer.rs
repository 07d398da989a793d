//! The UCX layer: one `ucp_context` and one `ucp_worker` per node (one process per node,
//! started by charmrun), tagged messages between nodes.
//!
//! This file holds the node's state, the `Transport` and `Part` methods and the idle sleep;
//! `layer/ucp.rs` the context, worker and requests, `layer/boot.rs` start-up, `layer/send.rs`
//! endpoints and sends, `layer/receive.rs` receives.
//!
//! - **Start-up** ([`UcxOpen`]): the worker's address is the node's info for the node table;
//!   endpoints are made from the table's addresses on a pair's first send (a node that never
//!   sends to a peer never makes one: receiving needs no endpoint).
//! - **Send**: `ucp_tag_send_nbx` of the message's wire bytes, the tag carrying the job's stamp
//!   (32 bits of its secret) and the source node; no header is written, so nothing is copied
//!   by this layer. A send UCX completes at once (eager, buffered) drops the message there; one
//!   it does not keeps it, with its request, in the peer's queue until the request completes
//!   (that is what [`queued`](Transport::queued) counts).
//! - **Receive**: `ucp_tag_probe_nb` (removing the message from UCX's unexpected queue), then
//!   `ucp_tag_msg_recv_nbx` straight into a `Vec` of the message's size with the headroom in
//!   front, which becomes the [`Message`] (`Message::from_frame`): a large message comes by
//!   UCX's rendezvous into its final buffer, no staging copy. Receives complete out of order
//!   (an eager message overtakes a rendezvous one), so each source's receives wait in probe
//!   order and are handed up from the front only: FIFO per pair.
//! - **Idle**: `ucp_worker_arm` then `epoll_wait` on UCX's event descriptor and the wake
//!   eventfd (`wake.rs`).
//! - **Dead peers**: endpoints in `UCP_ERR_HANDLING_MODE_PEER`; the error callback marks the
//!   peer, and the next call reports it as [`MachineError::PeerDead`], once.

use crate::sys;
use crate::{Kind, PeerErrors, ERR_MODE, EXIT_FLUSH, KINDS, TLS};
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::session::{self, Open};
use converse_bootstrap::Bootstrap;
use converse_machine::{zeroed, BufferPool, ENVELOPE_LEN, HEADROOM};
use converse_machine::{
    BootConfig, Layer, Machine, MachineError, Message, NodeTable, Part, Transport, Wake,
};
use converse_net::wake::WakeFd;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::{c_void, CString};
use std::os::fd::BorrowedFd;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod boot;
mod receive;
mod send;
mod ucp;

pub use self::boot::UcxOpen;
use self::receive::Recv;
use self::send::EpArg;
use self::ucp::{Req, Ucp};

/// The layers, one per transport string, in the order of [`crate::NAMES`].
pub const LAYERS: &[Layer] = &[
    layer::<0>(),
    layer::<1>(),
    layer::<2>(),
    layer::<3>(),
    layer::<4>(),
    layer::<5>(),
];

const fn layer<const K: usize>() -> Layer {
    Layer {
        name: KINDS[K].name,
        summary: KINDS[K].summary,
        boot: boot_with::<K>,
        launched: LaunchEnv::present,
        settings: crate::SETTINGS,
        check: check_settings,
        describe,
    }
}

/// Parse the `ucx.*` settings as boot does.
pub(crate) fn check_settings(s: &converse_machine::Settings) -> Result<(), MachineError> {
    EXIT_FLUSH.read_seconds(s)?;
    ERR_MODE.read_choice(s)?;
    if let Some(t) = TLS.read_text(s) {
        tls_list(t)?;
    }
    Ok(())
}

/// A transport list as `UCX_TLS` takes it: names (with `^` in front to exclude, and `\` to
/// mean "exactly this one") separated by commas, nothing else (it goes into a C string).
fn tls_list(t: &str) -> Result<CString, MachineError> {
    let ok = !t.is_empty()
        && t.split(',').all(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-^\\:".contains(c))
        });
    if !ok {
        return Err(MachineError::Setting {
            key: TLS.key.into(),
            reason: format!(
                "'{t}' is not a transport list (names separated by commas, e.g. tcp,self)"
            ),
        });
    }
    CString::new(t).map_err(|_| MachineError::Setting {
        key: TLS.key.into(),
        reason: "a NUL byte in the transport list".into(),
    })
}

/// The transports this process's node gave UCX, for the banner ([`describe`]).
static IN_USE: OnceLock<String> = OnceLock::new();

/// For the banner: the transports handed to UCX. UCX picks among them per peer (shared memory
/// within a host, the network between hosts); `+set ucx.tls=...` shows here too.
fn describe(_: &NodeTable, _: usize) -> Option<String> {
    IN_USE.get().map(|t| format!("UCX transports {t}"))
}

/// Boot the transport string `KINDS[K]` under charmrun (the launcher session's
/// [`session::boot`]).
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun or when UCX cannot start (no transport
/// of the set here, ...).
pub fn boot_with<const K: usize>(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<UcxOpen<K>>(KINDS[K].name, cfg)
}

/// Tag bits that hold the source node; the rest hold the job's stamp.
const NODE_BITS: u64 = 0xffff_ffff;

/// Messages one `advance` takes in at most (the contract bounds what one call hands up; the
/// rest stays in UCX's unexpected queue, or at the sender for a rendezvous).
const BATCH: usize = 64;

/// Bytes one `advance` takes in at most (started receives: a large one counts whole).
const BATCH_BYTES: usize = 8 << 20;

/// Bytes a dropped message (a stranger's) is received into.
const DRAIN_BYTES: usize = 64;

/// `ucp_worker_progress` calls per `advance` at most, while each finds something to do.
const PROGRESS_ROUNDS: usize = 4;

/// How long `leave` gives the endpoints' close after the flush.
const CLOSE_WAIT: Duration = Duration::from_millis(200);

/// Epoll tokens.
const WAKE: u64 = 1;
const UCX: u64 = 2;

/// A UCX error seen as an error of the job.
fn ucx_err(what: &str, s: sys::ucs_status_t) -> MachineError {
    MachineError::io(
        what,
        std::io::Error::other(format!("UCX: {}", sys::status_text(s))),
    )
}

/// A buffer UCX may still touch: kept with its request until that completes.
enum Held {
    Msg(#[allow(dead_code)] Message),
    Frame(#[allow(dead_code)] Vec<u8>),
}

/// What this node has with one peer.
struct Peer {
    ep: sys::ucp_ep_h,
    /// The error callback's argument of `ep`.
    arg: Option<Box<EpArg>>,
    /// Sends UCX has not completed, in send order, with the message each keeps alive.
    sends: VecDeque<(Req, Message)>,
    /// Their wire bytes.
    queued: usize,
    /// Receives from the peer, in probe order (= its send order): handed up from the front.
    recvs: VecDeque<Recv>,
    /// Found dead (endpoint error, failed request): why.
    dead: Option<String>,
    /// Its death was reported (returned as `PeerDead` once).
    reported: bool,
    /// Forgotten (report mode): what still comes from it is dropped.
    gone: bool,
}

impl Default for Peer {
    fn default() -> Peer {
        Peer {
            ep: std::ptr::null_mut(),
            arg: None,
            sends: VecDeque::new(),
            queued: 0,
            recvs: VecDeque::new(),
            dead: None,
            reported: false,
            gone: false,
        }
    }
}

/// Counters for `+stats`.
#[derive(Default)]
struct Stats {
    sends: u64,
    /// Sends UCX did not complete at once (rendezvous, or waiting for the transport).
    sends_held: u64,
    receives: u64,
    /// Receives that did not complete at once (rendezvous).
    receives_held: u64,
    strangers: u64,
    endpoints: u64,
}

/// One node of a UCX job.
pub struct UcxMachine {
    /// First field: destroyed after `Drop::drop` closed every endpoint and request, and
    /// before the buffers below are freed (UCX may touch them until its worker is gone).
    ucp: Ucp,
    name: &'static str,
    tls: String,
    me: usize,
    table: NodeTable,
    /// This node's tag: the job's stamp above, the node below.
    my_tag: u64,
    /// The job's stamp, in the tag's upper 32 bits.
    stamp: u64,
    peers: Vec<Peer>,
    /// Set by error callbacks: some endpoint failed.
    failed: Box<Cell<bool>>,
    /// Deaths found and not yet reported.
    unreported: usize,
    /// Peers with sends in flight; with receives in their queue.
    sending: Vec<usize>,
    receiving: Vec<usize>,
    /// Requests not complete: sends, receives (for `in_transfer`).
    sends_out: usize,
    recvs_out: usize,
    /// Requests whose outcome no longer matters (a forgotten peer's, a stranger's), with the
    /// buffer each may still write or read.
    graveyard: Vec<(Req, Held)>,
    epoll: Epoll,
    events: [EpollEvent; 4],
    /// UCX's event descriptor is in the epoll set (else `wait` naps).
    efd: bool,
    wake: WakeFd,
    exit_flush: Duration,
    /// Buffers of large messages sent, to receive large ones into: no page faulted in, per
    /// message (UCX's rendezvous writes into warm memory, as `ucx_perftest`'s fixed buffers).
    pool: BufferPool,
    /// Which endpoints are in UCP_ERR_HANDLING_MODE_PEER (the others in NONE: their peers'
    /// deaths come from charmrun).
    peer_errors: PeerErrors,
    stats: Stats,
}

// SAFETY: the raw pointers are UCX handles and callback arguments owned by this machine. UCX
// runs in single-thread mode: the runtime calls a machine from one thread at a time, and
// moving it to another thread between calls is allowed (UCS_THREAD_MODE_SINGLE forbids
// concurrent use, not a change of thread). The waker handed to other threads is the eventfd
// alone (`wake.rs`), which touches nothing of UCX.
unsafe impl Send for UcxMachine {}

impl std::fmt::Debug for UcxMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxMachine")
            .field("layer", &self.name)
            .field("node", &self.me)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// Whether a failed request's status is local trouble rather than the peer's.
fn local_failure(s: sys::ucs_status_t) -> bool {
    s == sys::UCS_ERR_NO_MEMORY || s == sys::UCS_ERR_NO_RESOURCE || s == sys::UCS_ERR_INVALID_PARAM
}

impl UcxMachine {
    fn dead(&self, node: usize, reason: String) -> MachineError {
        MachineError::peer_dead(&self.table, node, reason)
    }

    /// Note that `node` failed (`why`), once; it is reported by [`report`](Self::report).
    fn mark_dead(&mut self, node: usize, why: String) {
        let p = &mut self.peers[node];
        if p.dead.is_none() && !p.gone {
            tracing::debug!(target: "ucx", peer = node, %why, "peer failed");
            p.dead = Some(why);
            self.unreported += 1;
        }
    }

    /// Collect what the error callbacks noted, and report one death not yet reported.
    #[inline]
    fn report(&mut self) -> Result<(), MachineError> {
        if self.failed.get() {
            self.failed.set(false);
            for node in 0..self.peers.len() {
                let s = self.peers[node]
                    .arg
                    .as_ref()
                    .map_or(sys::UCS_OK, |a| a.status.get());
                if s != sys::UCS_OK {
                    self.mark_dead(node, format!("UCX endpoint error: {}", sys::status_text(s)));
                }
            }
        }
        if self.unreported == 0 {
            return Ok(());
        }
        let Some(node) = self
            .peers
            .iter()
            .position(|p| p.dead.is_some() && !p.reported && !p.gone)
        else {
            self.unreported = 0;
            return Ok(());
        };
        self.peers[node].reported = true;
        self.unreported = self.unreported.saturating_sub(1);
        let why = self.peers[node].dead.clone().unwrap_or_default();
        Err(self.dead(node, why))
    }

    /// Free the requests of the graveyard that completed, and their buffers.
    fn bury(&mut self) {
        self.graveyard.retain(|(req, _)| {
            if req.status() == sys::UCS_INPROGRESS {
                return true;
            }
            req.free();
            false
        });
    }

    /// Block up to `timeout` until UCX or the waker has something. `answer`: a wake seen
    /// answers this call (`wait`); else it is kept for the next `wait` (a nap).
    fn sleep(&mut self, timeout: Duration, answer: bool) -> Result<(), MachineError> {
        if answer && self.wake.take() {
            return Ok(());
        }
        self.report()?;
        // UCX's rule for arming: progress until there is nothing left; something done means
        // the caller has work (a completion, an arrival), so return to it.
        if self.ucp.progress(PROGRESS_ROUNDS) || self.failed.get() || self.arrived() {
            return Ok(());
        }
        let timeout = if self.efd {
            // SAFETY: the worker is live, single-threaded use.
            let s = unsafe { sys::ucp_worker_arm(self.ucp.worker) };
            if s == sys::UCS_ERR_BUSY {
                // Events came after the progress above: progress again, do not sleep.
                return Ok(());
            }
            if s != sys::UCS_OK {
                return Err(ucx_err("ucp_worker_arm", s));
            }
            timeout
        } else {
            timeout.min(Duration::from_millis(1))
        };
        let ms = timeout.as_millis().clamp(1, u16::MAX as u128) as u16;
        let ready = match self.epoll.wait(&mut self.events, EpollTimeout::from(ms)) {
            Ok(r) => r,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(MachineError::io("epoll_wait", e.into())),
        };
        if self.events[..ready].iter().any(|e| e.data() == WAKE) {
            self.wake.reset();
            if answer {
                self.wake.take();
            }
        }
        Ok(())
    }
}

impl Transport for UcxMachine {
    fn layer(&self) -> &'static str {
        self.name
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        self.post(node, msg)
    }

    fn queued(&self, node: usize) -> usize {
        self.peers.get(node).map_or(0, |p| p.queued)
    }

    fn in_transfer(&self) -> bool {
        self.sends_out > 0 || self.recvs_out > 0
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        self.ucp.progress(PROGRESS_ROUNDS);
        self.report()?;
        if !self.sending.is_empty() {
            self.reap_sends()?;
        }
        let mut n = 0;
        if !self.receiving.is_empty() {
            n += self.deliver_ready(deliver)?;
        }
        n += self.probe(deliver)?;
        if !self.graveyard.is_empty() {
            self.bury();
        }
        self.report()?;
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        self.sleep(timeout, true)
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        Some(self.wake.waker())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("ucx.sends", self.stats.sends),
            ("ucx.sends_held", self.stats.sends_held),
            ("ucx.receives", self.stats.receives),
            ("ucx.receives_held", self.stats.receives_held),
            ("ucx.strangers_dropped", self.stats.strangers),
            ("ucx.endpoints", self.stats.endpoints),
        ]
    }
}

impl Part for UcxMachine {
    fn nap(&mut self) -> Result<(), MachineError> {
        self.sleep(Duration::from_millis(1), false)
    }

    fn forget(&mut self, node: usize) {
        if node >= self.peers.len() || node == self.me {
            return;
        }
        tracing::debug!(target: "ucx", peer = node, "peer out of the job");
        let p = &mut self.peers[node];
        p.gone = true;
        if p.dead.is_some() && !p.reported {
            p.reported = true;
            self.unreported = self.unreported.saturating_sub(1);
        }
        // What UCX may still touch is kept until it lets go; queued drops to 0 at once.
        for (req, msg) in p.sends.drain(..) {
            self.graveyard.push((req, Held::Msg(msg)));
            self.sends_out -= 1;
        }
        p.queued = 0;
        for r in p.recvs.drain(..) {
            if let Some(req) = r.req {
                self.graveyard.push((req, Held::Frame(r.frame)));
                self.recvs_out -= 1;
            }
        }
        self.sending.retain(|&x| x != node);
        self.receiving.retain(|&x| x != node);
        self.close_ep(node);
    }

    fn leave(&mut self) -> Result<(), MachineError> {
        let deadline = Instant::now() + self.exit_flush;
        tracing::debug!(target: "ucx", sends = self.sends_out, "leaving: flushing what is in flight");
        // Sends still in flight go out if the peers take them soon; the job is over, so not
        // forever. A peer that already left fails its sends: no matter now.
        while self.sends_out > 0 && Instant::now() < deadline {
            self.ucp.progress(PROGRESS_ROUNDS);
            let _ = self.reap_sends();
            std::thread::yield_now();
        }
        // SAFETY: all-zero is a valid ucp_request_param_t (no callback: polled).
        let param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        // SAFETY: the worker is live.
        let r = unsafe { sys::ucp_worker_flush_nbx(self.ucp.worker, &param) };
        if !r.is_null() && !sys::ptr_is_err(r) {
            let req = Req(r);
            while req.status() == sys::UCS_INPROGRESS && Instant::now() < deadline {
                self.ucp.progress(PROGRESS_ROUNDS);
            }
            if req.status() == sys::UCS_INPROGRESS {
                // SAFETY: the worker and the request are live; cancelled then released.
                unsafe { sys::ucp_request_cancel(self.ucp.worker, r) };
            }
            req.free();
        }
        for node in 0..self.peers.len() {
            self.close_ep(node);
        }
        let close_deadline = Instant::now() + CLOSE_WAIT;
        while !self.graveyard.is_empty() && Instant::now() < close_deadline {
            self.ucp.progress(PROGRESS_ROUNDS);
            self.bury();
        }
        Ok(())
    }
}

impl Drop for UcxMachine {
    fn drop(&mut self) {
        // Endpoints not closed yet (no `leave`: an error path): closed now.
        for node in 0..self.peers.len() {
            self.close_ep(node);
        }
        let worker = self.ucp.worker;
        let cancel = |req: Req| {
            if req.status() == sys::UCS_INPROGRESS {
                // SAFETY: the worker and the request are live; a cancelled request is
                // released by UCX when it ends (`free` below marks it so).
                unsafe { sys::ucp_request_cancel(worker, req.0) };
            }
            req.free();
        };
        // Requests released here; their buffers stay where they are until after the worker
        // is destroyed (the fields drop after this body, `ucp` first).
        for p in &self.peers {
            for (req, _) in &p.sends {
                cancel(*req);
            }
            for r in &p.recvs {
                if let Some(req) = r.req {
                    cancel(req);
                }
            }
        }
        for (req, _) in &self.graveyard {
            cancel(*req);
        }
        // The worker is destroyed next (`ucp`, the first field), then the buffers.
    }
}
