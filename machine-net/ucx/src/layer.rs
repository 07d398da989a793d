//! The UCX layer: one `ucp_context` and one `ucp_worker` per node (one process per node,
//! started by charmrun), tagged messages between nodes.
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
fn check_settings(s: &converse_machine::Settings) -> Result<(), MachineError> {
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

/// One context and its worker, destroyed together (in this order) when dropped.
struct Ucp {
    ctx: sys::ucp_context_h,
    worker: sys::ucp_worker_h,
}

impl Drop for Ucp {
    fn drop(&mut self) {
        // SAFETY: both were made by `Ucp::new` and are destroyed once, here, worker first
        // (UCX's order); every endpoint and request of the worker was closed or freed by
        // `UcxMachine`'s drop before this runs (fields drop after `Drop::drop`).
        unsafe {
            if !self.worker.is_null() {
                sys::ucp_worker_destroy(self.worker);
            }
            if !self.ctx.is_null() {
                sys::ucp_cleanup(self.ctx);
            }
        }
    }
}

impl Ucp {
    /// A context for tagged messages (and wake-ups, when `wakeup`) over `tls`, and its
    /// worker in single-thread mode (the runtime drives a node's machine from one thread at a
    /// time; nothing here is called concurrently).
    fn new(tls: Option<&CString>, nodes: usize, wakeup: bool) -> Result<Ucp, MachineError> {
        let mut config: *mut sys::ucp_config_t = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; NULL prefix and file mean UCX's own (UCX_*
        // variables of the environment).
        let s = unsafe { sys::ucp_config_read(std::ptr::null(), std::ptr::null(), &mut config) };
        if s != sys::UCS_OK {
            return Err(ucx_err("reading UCX's configuration", s));
        }
        let mut ucp = Ucp {
            ctx: std::ptr::null_mut(),
            worker: std::ptr::null_mut(),
        };
        let made = (|| {
            if let Some(t) = tls {
                // SAFETY: config is live (read above); both strings are NUL-terminated and
                // outlive the call, which copies them.
                let s = unsafe { sys::ucp_config_modify(config, c"TLS".as_ptr(), t.as_ptr()) };
                if s != sys::UCS_OK {
                    return Err(MachineError::Boot(format!(
                        "UCX refuses the transport list '{}': {}",
                        t.to_string_lossy(),
                        sys::status_text(s)
                    )));
                }
            }
            // SAFETY: all-zero is a valid ucp_params_t (numbers, NULL pointers, no callbacks);
            // only the fields named in field_mask are read.
            let mut params: sys::ucp_params_t = unsafe { std::mem::zeroed() };
            params.field_mask =
                (sys::UCP_PARAM_FIELD_FEATURES | sys::UCP_PARAM_FIELD_ESTIMATED_NUM_EPS) as u64;
            params.features = sys::UCP_FEATURE_TAG as u64;
            if wakeup {
                params.features |= sys::UCP_FEATURE_WAKEUP as u64;
            }
            params.estimated_num_eps = nodes;
            // SAFETY: params and config are live; ctx is an out-pointer into `ucp`.
            let s = unsafe {
                sys::ucp_init_version(
                    sys::UCP_API_MAJOR,
                    sys::UCP_API_MINOR,
                    &params,
                    config,
                    &mut ucp.ctx,
                )
            };
            if s != sys::UCS_OK {
                ucp.ctx = std::ptr::null_mut();
                return Err(MachineError::Boot(format!(
                    "UCX cannot start over transports {}: {} (ucx_info -d lists what this host has)",
                    tls.map_or("(UCX's choice)".into(), |t| t.to_string_lossy().into_owned()),
                    sys::status_text(s)
                )));
            }
            // SAFETY: as above for ucp_worker_params_t.
            let mut wp: sys::ucp_worker_params_t = unsafe { std::mem::zeroed() };
            wp.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64;
            wp.thread_mode = sys::UCS_THREAD_MODE_SINGLE;
            // SAFETY: ctx was made above; worker is an out-pointer into `ucp`.
            let s = unsafe { sys::ucp_worker_create(ucp.ctx, &wp, &mut ucp.worker) };
            if s != sys::UCS_OK {
                ucp.worker = std::ptr::null_mut();
                return Err(ucx_err("creating the UCX worker", s));
            }
            Ok(())
        })();
        // SAFETY: config came from ucp_config_read and is released once; the context keeps
        // what it needs.
        unsafe { sys::ucp_config_release(config) };
        made.map(|()| ucp)
    }

    /// The worker's address, as bytes for the node table.
    fn address(&self) -> Result<Vec<u8>, MachineError> {
        let mut addr: *mut sys::ucp_address_t = std::ptr::null_mut();
        let mut len: usize = 0;
        // SAFETY: the worker is live; out-pointers to locals.
        let s = unsafe { sys::ucp_worker_get_address(self.worker, &mut addr, &mut len) };
        if s != sys::UCS_OK || addr.is_null() {
            return Err(ucx_err("getting the UCX worker's address", s));
        }
        // SAFETY: UCX gave `len` readable bytes at `addr`, released right after the copy.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len).to_vec() };
        // SAFETY: released once, as UCX asks.
        unsafe { sys::ucp_worker_release_address(self.worker, addr) };
        Ok(bytes)
    }

    /// The transports the context opened, by name (`tcp`, `self`, ...), from
    /// `ucp_context_print_info`'s "resource N : md M dev D flags -- TL/DEVICE" lines (UCX 1.13
    /// has no query for them). Empty when the report cannot be had.
    fn transports(&self) -> Vec<String> {
        let mut buf: *mut libc::c_char = std::ptr::null_mut();
        let mut len: libc::size_t = 0;
        // SAFETY: out-pointers to locals; the stream is closed below, after which `buf` holds
        // `len` bytes allocated by libc, freed below.
        let f = unsafe { libc::open_memstream(&mut buf, &mut len) };
        if f.is_null() {
            return Vec::new();
        }
        // SAFETY: the context is live; `f` is an open stream (libc's FILE is the C FILE the
        // bindings name).
        unsafe { sys::ucp_context_print_info(self.ctx, f.cast()) };
        // SAFETY: `f` is open and closed once; then `buf`/`len` are final.
        unsafe { libc::fclose(f) };
        if buf.is_null() {
            return Vec::new();
        }
        // SAFETY: `buf` holds `len` initialized bytes (open_memstream's contract).
        let text = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        let text = String::from_utf8_lossy(text).into_owned();
        // SAFETY: allocated by open_memstream with malloc, freed once.
        unsafe { libc::free(buf.cast()) };
        let mut tls: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| l.contains("resource")) {
            let Some(tl) = line
                .rsplit(' ')
                .next()
                .and_then(|r| r.split('/').next())
                .filter(|t| !t.is_empty())
            else {
                continue;
            };
            if !tls.iter().any(|t| t == tl) {
                tls.push(tl.to_owned());
            }
        }
        tls
    }

    /// UCX's event descriptor for this worker, when its transports can wake a sleeper.
    fn efd(&self) -> Option<i32> {
        let mut fd: i32 = -1;
        // SAFETY: the worker is live; out-pointer to a local.
        let s = unsafe { sys::ucp_worker_get_efd(self.worker, &mut fd) };
        (s == sys::UCS_OK && fd >= 0).then_some(fd)
    }

    /// Progress the worker until it finds nothing to do or `rounds` calls were made; returns
    /// whether anything was done (callbacks may have run: error handlers).
    #[inline]
    fn progress(&self, rounds: usize) -> bool {
        let mut any = false;
        for _ in 0..rounds {
            // SAFETY: the worker is live; single-thread mode, and only this node's thread
            // calls (the runtime's promise).
            if unsafe { sys::ucp_worker_progress(self.worker) } == 0 {
                break;
            }
            any = true;
        }
        any
    }
}

/// A request UCX returned: in progress until [`status`](Req::status) says otherwise; freed
/// by its owner once complete, or at drop.
#[derive(Clone, Copy)]
struct Req(*mut c_void);

impl Req {
    /// `UCS_INPROGRESS` while it runs, then its final status.
    #[inline]
    fn status(self) -> sys::ucs_status_t {
        // SAFETY: a request UCX returned and not yet freed (owners free it once, after this
        // says it completed).
        unsafe { sys::ucp_request_check_status(self.0) }
    }

    /// Release it (complete, or to be cancelled: then UCX releases it when it completes).
    fn free(self) {
        // SAFETY: as above; called once per request.
        unsafe { sys::ucp_request_free(self.0) }
    }
}

/// What an endpoint's error callback gets: which peer, and where to say it failed. Boxed, so
/// its address stays put for as long as the machine (and the endpoint) lives.
struct EpArg {
    node: usize,
    status: Cell<sys::ucs_status_t>,
    /// The machine's flag: some endpoint failed.
    any: *const Cell<bool>,
}

/// UCX's endpoint error callback (peer failure): noted, reported by the next call.
unsafe extern "C" fn on_ep_error(arg: *mut c_void, _ep: sys::ucp_ep_h, status: sys::ucs_status_t) {
    // SAFETY: `arg` is the address of an `EpArg` the machine boxed for this endpoint and keeps
    // until after the worker is destroyed; callbacks run inside ucp_worker_progress (or close),
    // on the node's thread, so nothing else touches the cells meanwhile.
    unsafe {
        let a = &*arg.cast::<EpArg>();
        a.status.set(status);
        (*a.any).set(true);
    }
}

/// A started receive: its buffer (the headroom, with room behind it for the wire bytes) and,
/// while it runs, its request.
struct Recv {
    req: Option<Req>,
    frame: Vec<u8>,
    /// Wire bytes UCX writes behind the headroom.
    len: usize,
}

impl Recv {
    /// The message, once UCX completed the receive successfully.
    fn into_message(self, node: usize) -> Result<Message, MachineError> {
        let mut frame = self.frame;
        debug_assert!(frame.len() == HEADROOM && frame.capacity() >= HEADROOM + self.len);
        // SAFETY: the capacity holds HEADROOM + len bytes (reserved in `probe`); the first
        // HEADROOM are initialized (resized with zeros), and UCX wrote the `len` after them: a
        // receive completes successfully only when the whole message landed (a shorter buffer
        // would have failed it as truncated).
        unsafe { frame.set_len(HEADROOM + self.len) };
        Message::from_frame(frame, HEADROOM)
            .map_err(|source| MachineError::Corrupt { node, source })
    }
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

/// A UCX node between the two phases of its boot ([`Open`]): its worker exists, and
/// [`info`](Open::info) is its address.
pub struct UcxOpen<const K: usize> {
    ucp: Ucp,
    addr: Vec<u8>,
    tls: String,
    efd: Option<i32>,
    exit_flush: Duration,
    peer_errors: PeerErrors,
}

impl<const K: usize> std::fmt::Debug for UcxOpen<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxOpen")
            .field("layer", &KINDS[K].name)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl<const K: usize> Open for UcxOpen<K> {
    type Part = UcxMachine;

    /// Read the settings, start UCX over the layer's transports, make the worker.
    fn open(
        cfg: &BootConfig,
        env: &LaunchEnv,
        _: &dyn Bootstrap,
    ) -> Result<UcxOpen<K>, MachineError> {
        let kind: Kind = KINDS[K];
        check_settings(&cfg.settings)?;
        let exit_flush = EXIT_FLUSH.read_seconds(&cfg.settings)?;
        let peer_errors = match ERR_MODE.read_choice(&cfg.settings)? {
            "peer" => PeerErrors::All,
            "none" => PeerErrors::No,
            // A transport list of the user's may hold shared memory: as `ucx`.
            _ if TLS.read_text(&cfg.settings).is_some() => PeerErrors::OtherHosts,
            _ => kind.peer_errors,
        };
        let tls = match TLS.read_text(&cfg.settings).or(kind.tls) {
            Some(t) => Some(tls_list(t)?),
            None => None,
        };
        let shown = match &tls {
            Some(t) => t.to_string_lossy().into_owned(),
            None => std::env::var("UCX_TLS")
                .map(|t| format!("{t} (UCX_TLS)"))
                .unwrap_or_else(|_| "as UCX chooses".into()),
        };
        // Wake-ups need transports that can signal; where UCX cannot give them, the layer
        // still runs and naps instead (a note says so).
        let ucp = match Ucp::new(tls.as_ref(), env.num_nodes, true) {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(target: "ucx", error = %e, "UCX without wake-ups");
                Ucp::new(tls.as_ref(), env.num_nodes, false).map_err(|_| e)?
            }
        };
        let efd = ucp.efd();
        if efd.is_none() && env.node == 0 {
            // Not eprintln!, which panics on a closed stderr.
            converse_machine::input::error_line(&format!(
                "note: ucx: the transports {shown} cannot wake a sleeping node; idle nodes poll \
                 every millisecond"
            ));
        }
        let addr = ucp.address()?;
        let open = ucp.transports();
        // Only `self` (a transport of the list missing here, as rc without InfiniBand): no
        // other node is reachable, and UCX only warned. Said once, at start-up.
        if env.num_nodes > 1 && !open.is_empty() && open.iter().all(|t| t == "self") {
            return Err(MachineError::Boot(format!(
                "{}: no transport of {shown} is available on this host, only self (UCX's \
                 warnings above say which are missing; ucx_info -d lists this host's)",
                kind.name
            )));
        }
        let shown = if open.is_empty() {
            shown
        } else {
            format!("{shown} (opened: {})", open.join(", "))
        };
        let _ = IN_USE.set(shown.clone());
        tracing::debug!(target: "ucx", layer = kind.name, tls = %shown, addr_len = addr.len(), "UCX worker up");
        Ok(UcxOpen {
            ucp,
            addr,
            tls: shown,
            efd,
            exit_flush,
            peer_errors,
        })
    }

    /// This node's info for the node table: its worker's address.
    fn info(&self) -> Vec<u8> {
        self.addr.clone()
    }

    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        _: &dyn Bootstrap,
    ) -> Result<UcxMachine, MachineError> {
        let kind = KINDS[K];
        let n = table.num_nodes();
        if kind.one_host {
            one_host(kind.name, &table)?;
        }
        if n > NODE_BITS as usize {
            return Err(MachineError::Boot(format!(
                "{} takes at most {NODE_BITS} nodes",
                kind.name
            )));
        }
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| MachineError::io("epoll_create", e.into()))?;
        let wake = WakeFd::new().map_err(|e| MachineError::io("creating the node's eventfd", e))?;
        epoll
            .add(wake.fd(), EpollEvent::new(EpollFlags::EPOLLIN, WAKE))
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))?;
        if let Some(fd) = self.efd {
            // SAFETY: UCX's descriptor is open (the worker is); epoll takes the open file, and
            // the set outlives nothing it would need when the worker closes it (`ucp` is
            // dropped before `epoll`, and a closed descriptor simply leaves the set).
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            epoll
                .add(bfd, EpollEvent::new(EpollFlags::EPOLLIN, UCX))
                .map_err(|e| MachineError::io("epoll_ctl (UCX's event descriptor)", e.into()))?;
        }
        let stamp = u64::from(u32::from_le_bytes([
            env.secret[0],
            env.secret[1],
            env.secret[2],
            env.secret[3],
        ])) << 32;
        Ok(UcxMachine {
            ucp: self.ucp,
            name: kind.name,
            tls: self.tls,
            me: env.node,
            my_tag: stamp | env.node as u64,
            stamp,
            peers: (0..n).map(|_| Peer::default()).collect(),
            table,
            failed: Box::new(Cell::new(false)),
            unreported: 0,
            sending: Vec::new(),
            receiving: Vec::new(),
            sends_out: 0,
            recvs_out: 0,
            graveyard: Vec::new(),
            epoll,
            events: [EpollEvent::empty(); 4],
            efd: self.efd.is_some(),
            wake,
            exit_flush: self.exit_flush,
            pool: BufferPool::default(),
            peer_errors: self.peer_errors,
            stats: Stats::default(),
        })
    }
}

/// `ucx+shm`: every node this part serves is on one host, or a one-line error.
fn one_host(name: &str, table: &NodeTable) -> Result<(), MachineError> {
    let mut hosts = table
        .nodes()
        .iter()
        .filter(|i| !i.addr.is_empty())
        .map(|i| i.host.as_str());
    if let Some(first) = hosts.next() {
        if let Some(other) = hosts.find(|h| *h != first) {
            return Err(MachineError::Boot(format!(
                "{name} is shared memory within one host, and this job spans hosts ({first}, \
                 {other}): use ucx+tcp, or ucx to let UCX choose per peer"
            )));
        }
    }
    Ok(())
}

/// Whether the transports shown as `tls` may include shared memory (UCX's names for it, or
/// UCX's own choice).
fn may_be_shm(tls: &str) -> bool {
    ["posix", "sysv", "cma", "shm", "sm", "mm", "all", "UCX"]
        .iter()
        .any(|t| tls.contains(t))
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

    /// The endpoint to `node`, made on first use from the table's address.
    fn endpoint(&mut self, node: usize) -> Result<sys::ucp_ep_h, MachineError> {
        let ep = self.peers[node].ep;
        if !ep.is_null() {
            return Ok(ep);
        }
        let addr = self
            .table
            .node(node)
            .map(|i| i.addr.as_slice())
            .unwrap_or(&[]);
        if addr.is_empty() {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        let arg = Box::new(EpArg {
            node,
            status: Cell::new(sys::UCS_OK),
            any: &*self.failed,
        });
        // SAFETY: all-zero is a valid ucp_ep_params_t; only the fields in field_mask are read.
        let mut params: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
            | sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
            | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64;
        params.address = addr.as_ptr().cast();
        let peer_mode = match self.peer_errors {
            PeerErrors::All => true,
            PeerErrors::No => false,
            PeerErrors::OtherHosts => {
                let host = |n: usize| self.table.node(n).map(|i| i.host.as_str());
                host(node) != host(self.me)
            }
        };
        params.err_mode = if peer_mode {
            sys::UCP_ERR_HANDLING_MODE_PEER
        } else {
            sys::UCP_ERR_HANDLING_MODE_NONE
        };
        params.err_handler.cb = Some(on_ep_error);
        params.err_handler.arg = (&*arg as *const EpArg).cast_mut().cast();
        let mut ep: sys::ucp_ep_h = std::ptr::null_mut();
        // SAFETY: the worker is live; `params.address` points into the table (a worker address
        // a peer published, only read during the call); the callback's argument is boxed and
        // kept in `peers[node]` until the machine is dropped, after the worker.
        let s = unsafe { sys::ucp_ep_create(self.ucp.worker, &params, &mut ep) };
        if s == sys::UCS_ERR_UNREACHABLE {
            // No transport of ours reaches the peer: a configuration error (a transport this
            // host lacks, shared memory only toward another host), not a death.
            return Err(MachineError::io(
                format!("making a UCX endpoint to node {node}"),
                std::io::Error::other(format!(
                    "no transport of {} reaches it (UCX's warnings above say which are missing; \
                     ucx_info -d lists this host's){}",
                    self.tls,
                    if peer_mode && may_be_shm(&self.tls) {
                        "; shared memory has no peer-failure handling in UCX 1.13: \
                         +set ucx.err_mode=none to use it"
                    } else {
                        ""
                    }
                )),
            ));
        }
        if s != sys::UCS_OK || ep.is_null() {
            return Err(self.dead(
                node,
                format!("UCX cannot make an endpoint to it: {}", sys::status_text(s)),
            ));
        }
        debug_assert_eq!(arg.node, node);
        self.peers[node].ep = ep;
        self.peers[node].arg = Some(arg);
        self.stats.endpoints += 1;
        Ok(ep)
    }

    /// Retire the sends UCX completed, from each peer's front (what `queued` counts).
    fn reap_sends(&mut self) -> Result<(), MachineError> {
        let mut i = 0;
        while i < self.sending.len() {
            let node = self.sending[i];
            let p = &mut self.peers[node];
            let mut failure = None;
            while let Some((req, _)) = p.sends.front() {
                let s = req.status();
                if s == sys::UCS_INPROGRESS {
                    break;
                }
                let Some((req, msg)) = p.sends.pop_front() else {
                    break;
                };
                req.free();
                p.queued -= msg.wire_len();
                self.sends_out -= 1;
                self.pool.put(msg);
                if s != sys::UCS_OK && failure.is_none() {
                    failure = Some(s);
                }
            }
            if p.sends.is_empty() {
                self.sending.swap_remove(i);
            } else {
                i += 1;
            }
            if let Some(s) = failure {
                if local_failure(s) {
                    return Err(ucx_err("a UCX send failed", s));
                }
                self.mark_dead(
                    node,
                    format!("a send to it failed: {}", sys::status_text(s)),
                );
            }
        }
        self.report()
    }

    /// Hand up, per source, the receives at the front of its queue that completed.
    fn deliver_ready(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        let mut i = 0;
        while i < self.receiving.len() {
            let node = self.receiving[i];
            let p = &mut self.peers[node];
            let mut failure = None;
            while let Some(r) = p.recvs.front() {
                if let Some(req) = r.req {
                    let s = req.status();
                    if s == sys::UCS_INPROGRESS {
                        break;
                    }
                    req.free();
                    self.recvs_out -= 1;
                    if s != sys::UCS_OK {
                        failure = Some(s);
                        // What follows from it cannot be handed up in order: dropped with it.
                        for r in p.recvs.drain(..).skip(1) {
                            if let Some(q) = r.req {
                                self.graveyard.push((q, Held::Frame(r.frame)));
                                self.recvs_out -= 1;
                            }
                        }
                        break;
                    }
                }
                let Some(r) = p.recvs.pop_front() else { break };
                deliver(r.into_message(node)?);
                n += 1;
            }
            if p.recvs.is_empty() {
                self.receiving.swap_remove(i);
            } else {
                i += 1;
            }
            if let Some(s) = failure {
                if local_failure(s) {
                    return Err(ucx_err("a UCX receive failed", s));
                }
                self.mark_dead(
                    node,
                    format!("a receive from it failed: {}", sys::status_text(s)),
                );
            }
        }
        Ok(n)
    }

    /// Receive a message nobody of this job sent (or one from a forgotten peer), and drop it.
    /// Into a few bytes whatever its claimed length (it comes from outside: no allocation of
    /// its size): UCX ends a longer one as truncated and discards the rest.
    fn drain(&mut self, msg: sys::ucp_tag_message_h, len: usize) {
        self.stats.strangers += 1;
        let mut junk = zeroed(DRAIN_BYTES);
        // SAFETY: `junk` has DRAIN_BYTES bytes, at least the count passed; kept in the
        // graveyard while its request runs; the handle came from the probe, received once.
        let r = unsafe { self.msg_recv(junk.as_mut_ptr(), len.min(DRAIN_BYTES), msg) };
        if !r.is_null() && !sys::ptr_is_err(r) {
            self.graveyard.push((Req(r), Held::Frame(junk)));
        }
    }

    /// `ucp_tag_msg_recv_nbx` of a probed message into `buf`.
    ///
    /// # Safety
    /// `buf` has `len` writable bytes that stay put until the returned request completes (or
    /// the worker is destroyed); `msg` came from `ucp_tag_probe_nb` with remove set, unused.
    #[inline]
    unsafe fn msg_recv(
        &self,
        buf: *mut u8,
        len: usize,
        msg: sys::ucp_tag_message_h,
    ) -> sys::ucs_status_ptr_t {
        // SAFETY: all-zero is a valid ucp_request_param_t: no field named, contiguous bytes,
        // no callback (completion is polled with ucp_request_check_status).
        let param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's promises; the worker is live.
        unsafe { sys::ucp_tag_msg_recv_nbx(self.ucp.worker, buf.cast(), len, msg, &param) }
    }

    /// Take in what arrived: probe UCX's unexpected queue, start each message's receive into
    /// its own buffer, hand up those that completed and are first of their source.
    fn probe(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let (mut n, mut taken, mut bytes) = (0, 0, 0);
        while taken < BATCH && bytes < BATCH_BYTES {
            // SAFETY: all-zero is a valid ucp_tag_recv_info_t (written by the probe).
            let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
            // SAFETY: the worker is live; tag mask 0 matches every message; remove=1: the
            // handle is ours to receive exactly once (below, or `drain`).
            let h = unsafe { sys::ucp_tag_probe_nb(self.ucp.worker, 0, 0, 1, &mut info) };
            if h.is_null() {
                break;
            }
            taken += 1;
            let (tag, len) = (info.sender_tag, info.length);
            let src = (tag & NODE_BITS) as usize;
            if tag & !NODE_BITS != self.stamp
                || src >= self.peers.len()
                || src == self.me
                || self.peers[src].gone
            {
                self.drain(h, len);
                continue;
            }
            if len < ENVELOPE_LEN {
                self.drain(h, len);
                return Err(MachineError::corrupt(
                    src,
                    format!("a message of {len} bytes, shorter than an envelope"),
                ));
            }
            bytes += len;
            // Not zeroed: UCX writes every byte. A large one into a kept buffer if one fits.
            let whole = HEADROOM + len;
            let mut frame = match self.pool.take(whole) {
                Some(b) => b,
                None => {
                    let mut b = Vec::new();
                    if b.try_reserve_exact(whole).is_err() {
                        self.drain(h, len);
                        return Err(MachineError::io(
                            format!("receiving a message of {len} bytes from node {src}"),
                            std::io::ErrorKind::OutOfMemory.into(),
                        ));
                    }
                    b
                }
            };
            frame.resize(HEADROOM, 0);
            // SAFETY: `frame` has capacity for HEADROOM + len bytes, so `len` from HEADROOM on;
            // it is moved into the peer's queue (its heap buffer does not move) until the
            // request completes, or kept in the graveyard; `h` is the probe's, received once.
            let r = unsafe { self.msg_recv(frame.as_mut_ptr().add(HEADROOM), len, h) };
            if sys::ptr_is_err(r) {
                let s = sys::ptr_status(r);
                if local_failure(s) {
                    return Err(ucx_err("starting a UCX receive", s));
                }
                self.mark_dead(
                    src,
                    format!("a receive from it failed: {}", sys::status_text(s)),
                );
                return self.report().map(|()| n);
            }
            self.stats.receives += 1;
            let p = &mut self.peers[src];
            let recv = Recv {
                req: (!r.is_null()).then_some(Req(r)),
                frame,
                len,
            };
            if recv.req.is_none() && p.recvs.is_empty() {
                // Complete (eager) and first of its source: straight up.
                deliver(recv.into_message(src)?);
                n += 1;
                continue;
            }
            if recv.req.is_some() {
                self.recvs_out += 1;
                self.stats.receives_held += 1;
            }
            if p.recvs.is_empty() {
                self.receiving.push(src);
            }
            p.recvs.push_back(recv);
        }
        Ok(n)
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

    /// Whether something waits to be taken in: a message in UCX's unexpected queue.
    fn arrived(&self) -> bool {
        // SAFETY: all-zero is a valid ucp_tag_recv_info_t.
        let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
        // SAFETY: the worker is live; remove=0 only looks.
        !unsafe { sys::ucp_tag_probe_nb(self.ucp.worker, 0, 0, 0, &mut info) }.is_null()
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
        if node >= self.peers.len() || node == self.me {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        if self.peers[node].dead.is_some() || self.peers[node].gone {
            let p = &mut self.peers[node];
            if !p.reported && !p.gone {
                p.reported = true;
                self.unreported = self.unreported.saturating_sub(1);
            }
            let why = p
                .dead
                .clone()
                .unwrap_or_else(|| "out of the job".to_owned());
            return Err(self.dead(node, why));
        }
        let ep = self.endpoint(node)?;
        let wire = msg.wire();
        // SAFETY: all-zero is a valid ucp_request_param_t: contiguous bytes, no callback
        // (completion is polled with ucp_request_check_status, so no per-send state is
        // allocated here).
        let param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        // SAFETY: `ep` is live (made by `endpoint`, closed only by `forget`/`leave`, which
        // reset it); `wire` stays valid until the request completes: the message is kept with
        // its request below (its heap buffer does not move), or dropped here when UCX
        // completed the send at once (NULL: UCX no longer needs the buffer).
        let r = unsafe {
            sys::ucp_tag_send_nbx(ep, wire.as_ptr().cast(), wire.len(), self.my_tag, &param)
        };
        self.stats.sends += 1;
        if r.is_null() {
            self.pool.put(msg);
            return Ok(());
        }
        if sys::ptr_is_err(r) {
            let s = sys::ptr_status(r);
            if local_failure(s) {
                return Err(ucx_err("a UCX send failed", s));
            }
            self.mark_dead(
                node,
                format!("a send to it failed: {}", sys::status_text(s)),
            );
            return self.report();
        }
        self.stats.sends_held += 1;
        let p = &mut self.peers[node];
        p.queued += msg.wire_len();
        if p.sends.is_empty() {
            self.sending.push(node);
        }
        p.sends.push_back((Req(r), msg));
        self.sends_out += 1;
        Ok(())
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

impl UcxMachine {
    /// Close `node`'s endpoint now (force: nothing more goes out, its requests end), keeping
    /// its callback argument until the machine is dropped.
    fn close_ep(&mut self, node: usize) {
        let ep = std::mem::replace(&mut self.peers[node].ep, std::ptr::null_mut());
        if ep.is_null() {
            return;
        }
        // SAFETY: all-zero is a valid ucp_request_param_t; the fields named are set.
        let mut param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        param.op_attr_mask = sys::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = sys::UCP_EP_CLOSE_FLAG_FORCE;
        // SAFETY: `ep` is live and closed once (its slot was reset above).
        let r = unsafe { sys::ucp_ep_close_nbx(ep, &param) };
        if !r.is_null() && !sys::ptr_is_err(r) {
            self.graveyard.push((Req(r), Held::Frame(Vec::new())));
        }
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
