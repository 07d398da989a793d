//! The layer: [`OfiOpen`] (the two boot phases the launcher session drives) and
//! [`OfiMachine`] (the `Part`: send, advance, wait, leave).
//!
//! A message goes out as one tagged send of its wire bytes (no header: `tag.rs`). Up to the
//! provider's inject size it is injected (the buffer is free at once, no completion); up to
//! `ofi.eager_kib` it is sent from the message's own buffer, which is kept until the send's
//! completion; larger ones are announced and sent with a data tag the receiver matches with
//! a receive into the message's own buffer, so the provider's rendezvous (rxm: the receiver
//! reads the sender's buffer) moves the bytes once. Sends the provider cannot take yet
//! (`-FI_EAGAIN`) wait per peer, in order, and `advance` retries them.

use crate::fabric::{Fabric, Want};
use crate::info;
use crate::sys;
use crate::tag;
use converse_bootstrap::cleanup::{remove_on_exit, RemoveOnExit};
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::session::Open;
use converse_bootstrap::Bootstrap;
use converse_machine::{
    BootConfig, Machine, MachineError, Message, NodeTable, Part, Transport, Wake, ENVELOPE_LEN,
    HEADROOM,
};
use converse_net::wake::WakeFd;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::raw::c_void;
use std::time::{Duration, Instant};

/// How long `leave` keeps pushing what is still queued.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// Completions read per call of `fi_cq_readfrom`; `advance` reads at most two batches, so a
/// receiver that stops calling it holds its senders back.
const BATCH: usize = 32;

/// Without a wait object (shm), `wait` sleeps in slices, and nothing wakes it when a message
/// comes: so the slices start short after the node was last busy ([`NAP_FIRST`]) and double
/// up to this (an idle node looks at its queue a thousand times a second, at most).
const SLICE: Duration = Duration::from_millis(1);

/// The first slice after the node was busy. A reply that comes a few hundred microseconds
/// later (a 1 MiB ping-pong on shm) found the node asleep for a whole millisecond when every
/// slice was [`SLICE`]: 1.85 ms one way against the layer's own 0.2.
const NAP_FIRST: Duration = Duration::from_micros(20);

/// An announce: the header and the large message's wire length (u64 LE).
const ANNOUNCE_LEN: usize = tag::HEADER + 8;

/// Epoll tokens.
const CQ: u64 = 1;
const WAKE: u64 = 2;

/// Which transport string a layer of this crate is: its name and the provider it selects.
pub(crate) trait Choice: Send + 'static {
    /// The `+machine` name.
    const NAME: &'static str;
    /// The provider (`None`: the first suitable one).
    const PROVIDER: Option<&'static str>;
}

/// Boot a layer of this crate under charmrun.
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun, no provider serves, or start-up
/// fails.
pub(crate) fn boot<C: Choice>(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    converse_bootstrap::session::boot::<OfiOpen<C>>(C::NAME, cfg)
}

/// The provider this job's settings choose for transport `C`.
pub(crate) fn provider<C: Choice>(
    s: &converse_machine::Settings,
) -> Result<Option<String>, MachineError> {
    match (crate::PROVIDER.read_text(s), C::PROVIDER) {
        (Some(set), Some(named)) if set != named => Err(MachineError::Setting {
            key: crate::PROVIDER.key.into(),
            reason: format!(
                "'{set}' contradicts +machine {}, which names provider '{named}' (use +machine ofi \
                 with ofi.provider, or drop the setting)",
                C::NAME
            ),
        }),
        (Some(""), None) => Ok(None),
        (Some(set), _) => Ok(Some(set.to_owned())),
        (None, named) => Ok(named.map(str::to_owned)),
    }
}

/// A node between the two phases of its boot: its endpoint is open and has its address.
#[derive(Debug)]
pub(crate) struct OfiOpen<C> {
    fi: Fabric,
    eager: usize,
    rx_posted: usize,
    name: Vec<u8>,
    segments: Vec<RemoveOnExit>,
    _choice: PhantomData<C>,
}

fn boot_err(e: impl std::fmt::Display) -> MachineError {
    MachineError::Boot(e.to_string())
}

impl<C: Choice> Open for OfiOpen<C> {
    type Part = OfiMachine;

    fn open(
        cfg: &BootConfig,
        env: &LaunchEnv,
        launcher: &dyn Bootstrap,
    ) -> Result<Self, MachineError> {
        let eager = crate::EAGER_KIB.read_whole(&cfg.settings)? as usize * 1024;
        let rx_posted = crate::RX_POSTED.read_whole(&cfg.settings)? as usize;
        let provider = provider::<C>(&cfg.settings)?;
        // shm's segment is /dev/shm/NAME:0:0 (domain and endpoint index after the name),
        // registered before it exists: if the job ends while this node starts (charmrun has
        // then already removed the job's files), the watchdog ends the process at any moment,
        // and a segment made and not yet registered would outlive it (16 MiB each).
        let shm_name = format!("ofi-{}", env.node);
        let segments = if provider.as_deref() == Some("shm") {
            vec![
                remove_on_exit(env.shm_path(&format!("{shm_name}:0:0"))),
                remove_on_exit(env.shm_path(&shm_name)),
            ]
        } else {
            Vec::new()
        };
        let want = Want {
            provider,
            node: Some(launcher.local_ip().to_string()),
            shm_name: Some(format!(
                "{}{shm_name}",
                converse_machine::launch::shm_prefix(&env.job)
            )),
            nodes: env.num_nodes,
        };
        let fi = Fabric::open(&want).map_err(|e| boot_err(format!("{}: {e}", C::NAME)))?;
        let name = fi
            .name()
            .map_err(|e| boot_err(format!("{}: {e}", C::NAME)))?;
        tracing::debug!(target: "ofi", provider = fi.provider(), inject = fi.inject_size(), wait_fd = ?fi.wait_fd(), "endpoint open");
        Ok(OfiOpen {
            fi,
            eager,
            rx_posted,
            name,
            segments,
            _choice: PhantomData,
        })
    }

    fn info(&self) -> Vec<u8> {
        info::encode(self.eager as u32, self.fi.provider(), &self.name)
    }

    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        _: &dyn Bootstrap,
    ) -> Result<OfiMachine, MachineError> {
        let mut m = OfiMachine::new(
            self.fi,
            env.node,
            table,
            self.eager,
            self.rx_posted,
            C::NAME,
        )?;
        m.segments = self.segments;
        Ok(m)
    }
}

/// What an operation's context is: the memory handed to libfabric with the operation (the
/// provider may use it, `FI_CONTEXT2`), and where its state is.
#[repr(C)]
struct Op {
    fi: sys::fi_context2,
    kind: Kind,
    index: u32,
    /// An announce, sent from here when the provider cannot inject it.
    word: [u8; ANNOUNCE_LEN],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Eager,
    Large,
}

// SAFETY: the context's words are the provider's scratch space for the operation, touched
// only inside libfabric calls made by the thread that drives the node.
unsafe impl Send for Op {}

impl Op {
    fn boxed(kind: Kind, index: usize) -> Box<Op> {
        Box::new(Op {
            fi: sys::fi_context2::default(),
            kind,
            index: index as u32,
            word: [0; ANNOUNCE_LEN],
        })
    }

    fn ctx(&mut self) -> *mut c_void {
        (self as *mut Op).cast()
    }
}

/// A send in the provider's hands.
struct SendOp {
    op: Box<Op>,
    node: usize,
    /// The message whose buffer is being sent (none: an announce), kept until completion.
    msg: Option<Message>,
    /// Wire bytes counted in the peer's `queued`.
    bytes: usize,
    large: bool,
}

/// A posted receive for eager messages: `HEADROOM + eager` bytes, received at `HEADROOM`.
struct EagerOp {
    op: Box<Op>,
    buf: Vec<u8>,
}

/// A large message's receive, in its own buffer, which becomes the message.
struct LargeOp {
    op: Box<Op>,
    node: usize,
    tag: u64,
    buf: Vec<u8>,
    /// Posted (not waiting for room in the provider's receive queue).
    posted: bool,
    done: bool,
    /// Its sender was forgotten while it was posted: no longer counted in `large_recvs`, and
    /// its slot freed when the provider lets go of it.
    abandoned: bool,
}

/// What arrived from a peer while one of its large messages is still coming: delivered in
/// order once that one has.
enum Held {
    Ready(Message),
    Large(usize),
}

/// A send the provider could not take yet.
struct Waiting {
    msg: Message,
    /// Its announce went out: the data is next.
    announced: bool,
}

#[derive(Default)]
struct Peer {
    /// Its handle in the address vector; `None`: not one this part serves.
    addr: Option<sys::fi_addr_t>,
    gone: bool,
    waiting: VecDeque<Waiting>,
    /// Wire bytes held for it: waiting, or posted and not completed.
    queued: usize,
    /// Large messages sent to it / received from it: the numbers in data tags.
    large_out: u32,
    large_in: u32,
    /// Sequence numbers of the eager messages and announces sent to it / due from it.
    seq_out: u32,
    seq_in: u32,
    /// Eager messages and announces that arrived before the one due (`early[i]`: number
    /// `seq_in + i`).
    early: VecDeque<Option<Early>>,
    held: VecDeque<Held>,
}

/// An eager message or announce taken ahead of its turn.
enum Early {
    Message(Message),
    Announce(usize),
}

/// One node of an OFI job.
pub struct OfiMachine {
    // First, so it is dropped first: closing the endpoint ends the posted receives and sends
    // before their buffers (below) are freed.
    fi: Fabric,
    name: &'static str,
    me: usize,
    table: NodeTable,
    eager: usize,
    peers: Vec<Peer>,
    /// Node of each address-vector handle.
    by_addr: Vec<usize>,
    sends: Vec<SendOp>,
    free_sends: Vec<usize>,
    rx: Vec<EagerOp>,
    /// Eager receives to post again (the provider's queue was full).
    repost: Vec<usize>,
    large: Vec<LargeOp>,
    free_large: Vec<usize>,
    /// Large receives not posted yet.
    unposted: Vec<usize>,
    /// Peers with sends waiting.
    backlog: Vec<usize>,
    large_sends: usize,
    large_recvs: usize,
    epoll: Epoll,
    events: [EpollEvent; 2],
    wake: WakeFd,
    /// Without a wait object: the next slice `wait` sleeps (see [`NAP_FIRST`]).
    nap: Duration,
    strangers: u64,
    truncated: u64,
    /// Large receives from forgotten peers, dropped or cancelled.
    abandoned: u64,
    /// shm's segment, removed when the node ends (after `fi` closed it), however it ends.
    segments: Vec<RemoveOnExit>,
}

impl std::fmt::Debug for OfiMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfiMachine")
            .field("node", &self.me)
            .field("provider", &self.fi.provider())
            .finish_non_exhaustive()
    }
}

fn io(context: &str, rc: isize) -> MachineError {
    MachineError::io(
        context.to_owned(),
        std::io::Error::other(crate::fabric::errstr(rc)),
    )
}

const EAGAIN: isize = -(sys::FI_EAGAIN as isize);

mod receive;
mod send;

impl OfiMachine {
    fn new(
        mut fi: Fabric,
        me: usize,
        table: NodeTable,
        eager: usize,
        rx_posted: usize,
        name: &'static str,
    ) -> Result<OfiMachine, MachineError> {
        let n = table.num_nodes();
        let mut peers: Vec<Peer> = (0..n).map(|_| Peer::default()).collect();
        let mut by_addr = Vec::new();
        let my_host = table.node(me).map(|x| x.host.clone()).unwrap_or_default();
        for (node, entry) in table.nodes().iter().enumerate() {
            if node == me || entry.addr.is_empty() {
                continue;
            }
            let i = info::decode(&entry.addr).map_err(|why| {
                boot_err(format!(
                    "{name}: node {node}'s address in the node table: {why}"
                ))
            })?;
            if i.provider != fi.provider() || i.eager as usize != eager {
                return Err(boot_err(format!(
                    "{name}: node {node} uses provider '{}' with eager limit {} B, node {me} \
                     '{}' with {eager} B: every node of a job must use the same (one +machine, \
                     one ofi.provider and ofi.eager_kib for all)",
                    i.provider,
                    i.eager,
                    fi.provider()
                )));
            }
            if fi.provider() == "shm" && entry.host != my_host {
                return Err(boot_err(format!(
                    "{name}: provider shm reaches only this host, but node {node} is on {} and \
                     node {me} on {my_host} (use ofi+tcp, or si+tcp)",
                    entry.host
                )));
            }
            let a = fi
                .insert(i.name)
                .map_err(|e| boot_err(format!("{name}: node {node}: {e}")))?;
            let slot = usize::try_from(a)
                .ok()
                .filter(|&s| s < (1 << 24))
                .ok_or_else(|| boot_err(format!("{name}: address handle {a} out of range")))?;
            if by_addr.len() <= slot {
                by_addr.resize(slot + 1, usize::MAX);
            }
            by_addr[slot] = node;
            peers[node].addr = Some(a);
        }
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| MachineError::io("epoll_create", e.into()))?;
        let wake = WakeFd::new().map_err(|e| MachineError::io("creating the node's eventfd", e))?;
        epoll
            .add(wake.fd(), EpollEvent::new(EpollFlags::EPOLLIN, WAKE))
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))?;
        if let Some(fd) = fi.wait_fd() {
            // SAFETY: the CQ's descriptor, open as long as `fi` (which outlives the epoll set's
            // use of it: both are fields of the machine, and the set only holds the number).
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            epoll
                .add(bfd, EpollEvent::new(EpollFlags::EPOLLIN, CQ))
                .map_err(|e| MachineError::io("epoll_ctl (completion queue)", e.into()))?;
        }
        let mut m = OfiMachine {
            fi,
            name,
            me,
            table,
            eager,
            peers,
            by_addr,
            sends: Vec::new(),
            free_sends: Vec::new(),
            rx: Vec::new(),
            repost: Vec::new(),
            large: Vec::new(),
            free_large: Vec::new(),
            unposted: Vec::new(),
            backlog: Vec::new(),
            large_sends: 0,
            large_recvs: 0,
            epoll,
            events: [EpollEvent::empty(); 2],
            nap: NAP_FIRST,
            wake,
            strangers: 0,
            truncated: 0,
            abandoned: 0,
            segments: Vec::new(),
        };
        // Half the provider's receive queue at most: large messages' receives need room too
        // (with every slot taken by eager receives, a large one could never be posted, and
        // its sender would wait for ever).
        let rx_posted = rx_posted.min((m.fi.rx_size() / 2).max(1));
        for i in 0..rx_posted {
            m.rx.push(EagerOp {
                op: Op::boxed(Kind::Eager, i),
                buf: converse_machine::zeroed(HEADROOM + eager),
            });
            m.post_eager(i)?;
        }
        Ok(m)
    }

    /// A completion: a send done, or a message (or part of one) in.
    fn complete(
        &mut self,
        e: &sys::fi_cq_tagged_entry,
        src: sys::fi_addr_t,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        // SAFETY: every operation this layer posts has a context pointing at an `Op` it
        // keeps until the completion; injects have none (and write no completion).
        let (kind, index) = unsafe {
            let op = e.op_context.cast::<Op>();
            if op.is_null() {
                return Ok(());
            }
            ((*op).kind, (*op).index as usize)
        };
        match kind {
            Kind::Send => {
                let s = &mut self.sends[index];
                let node = s.node;
                let bytes = std::mem::take(&mut s.bytes);
                // The message's buffer is free now (dropped here: the sender gave it away).
                drop(s.msg.take());
                if std::mem::take(&mut s.large) {
                    self.large_sends -= 1;
                }
                self.free_sends.push(index);
                let p = &mut self.peers[node];
                p.queued = p.queued.saturating_sub(bytes);
                Ok(())
            }
            Kind::Eager => self.eager_in(index, e, src, deliver, delivered),
            Kind::Large => {
                let l = &mut self.large[index];
                l.done = true;
                if !l.abandoned {
                    self.large_recvs -= 1;
                }
                let node = l.node;
                if self.peers[node].gone {
                    self.release_large(index);
                    return Ok(());
                }
                self.drain(node, deliver, delivered)
            }
        }
    }

    /// An error completion.
    fn failed(&mut self) -> Result<(), MachineError> {
        let mut e = sys::fi_cq_err_entry::default();
        // SAFETY: the open CQ; `e` is written by the call.
        let rc = unsafe { sys::cq_readerr(self.fi.cq(), &mut e) };
        if rc < 0 {
            return if rc == EAGAIN {
                Ok(())
            } else {
                Err(io("reading an error completion (fi_cq_readerr)", rc))
            };
        }
        let text = self.fi.cq_error_text(&e);
        let canceled = e.err == sys::FI_ECANCELED as i32;
        // SAFETY: as in `complete`.
        let op = unsafe {
            let op = e.op_context.cast::<Op>();
            (!op.is_null()).then(|| ((*op).kind, (*op).index as usize))
        };
        match op {
            Some((Kind::Send, i)) => {
                let node = self.sends[i].node;
                let s = &mut self.sends[i];
                let bytes = std::mem::take(&mut s.bytes);
                drop(s.msg.take());
                if std::mem::take(&mut s.large) {
                    self.large_sends -= 1;
                }
                self.free_sends.push(i);
                let p = &mut self.peers[node];
                p.queued = p.queued.saturating_sub(bytes);
                if p.gone || canceled {
                    return Ok(());
                }
                Err(MachineError::peer_dead(
                    &self.table,
                    node,
                    format!("a send to it failed: {text}"),
                ))
            }
            Some((Kind::Eager, i)) => {
                if canceled {
                    return Ok(());
                }
                // A message longer than the posted buffer: every node of the job has the
                // same eager limit (checked at start-up), so it came from outside.
                self.truncated += 1;
                tracing::debug!(target: "ofi", %text, "eager receive failed; dropped");
                self.post_eager(i)
            }
            Some((Kind::Large, i)) => {
                let l = &mut self.large[i];
                let node = l.node;
                if !l.abandoned {
                    self.large_recvs -= 1;
                }
                l.done = true;
                if self.peers[node].gone {
                    // Nobody holds it any more (`forget` cleared the peer's arrivals).
                    self.release_large(i);
                    return Ok(());
                }
                if canceled {
                    return Ok(());
                }
                Err(MachineError::peer_dead(
                    &self.table,
                    node,
                    format!("receiving a large message failed: {text}"),
                ))
            }
            None => {
                tracing::debug!(target: "ofi", %text, "error completion without a context");
                Ok(())
            }
        }
    }

    /// Read completions: at most two batches.
    fn poll(
        &mut self,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        for _ in 0..2 {
            let mut entries = [sys::fi_cq_tagged_entry::default(); BATCH];
            let mut srcs = [sys::ADDR_NOTAVAIL; BATCH];
            // SAFETY: the open CQ (tagged format) writes up to BATCH entries and sources.
            let n = unsafe {
                sys::cq_readfrom(
                    self.fi.cq(),
                    entries.as_mut_ptr().cast(),
                    BATCH,
                    srcs.as_mut_ptr(),
                )
            };
            if n == EAGAIN {
                return Ok(());
            }
            if n == -(sys::FI_EAVAIL as isize) {
                self.failed()?;
                continue;
            }
            if n < 0 {
                return Err(io("reading completions (fi_cq_readfrom)", n));
            }
            let n = n as usize;
            // Busy: the next sleep starts with a short slice.
            self.nap = NAP_FIRST;
            for (e, &src) in entries[..n].iter().zip(&srcs[..n]) {
                self.complete(e, src, deliver, delivered)?;
            }
            if n < BATCH {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Sleep on the completion queue's descriptor and the wake eventfd, up to `timeout`.
    fn sleep(&mut self, timeout: Duration) -> Result<(), MachineError> {
        let timeout = if self.fi.wait_fd().is_some() {
            if !self.fi.trywait() {
                // Completions or progress pending: a sleep now could miss them.
                return Ok(());
            }
            timeout
        } else {
            let slice = timeout.min(self.nap);
            self.nap = (self.nap * 2).min(SLICE);
            if slice < SLICE {
                // Below epoll_wait's millisecond: `ppoll` on the epoll descriptor (readable
                // once a wake-up is in it), whose timeout is in nanoseconds.
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: slice.as_nanos() as libc::c_long,
                };
                let mut fd = libc::pollfd {
                    fd: self.epoll.0.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, a valid timespec, no signal mask.
                let n = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
                if n <= 0 {
                    return Ok(()); // the slice is over (or EINTR): the scheduler looks again
                }
                Duration::ZERO
            } else {
                slice
            }
        };
        let ms = if timeout.is_zero() {
            0
        } else {
            timeout.as_millis().clamp(1, u16::MAX as u128) as u16
        };
        let ready = match self.epoll.wait(&mut self.events, EpollTimeout::from(ms)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(MachineError::io("epoll_wait", e.into())),
        };
        if self.events[..ready].iter().any(|e| e.data() == WAKE) {
            self.wake.reset();
        }
        Ok(())
    }
}

impl Transport for OfiMachine {
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
        let Some(p) = self.peers.get(node) else {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        };
        if p.gone {
            return Ok(());
        }
        // An answer may follow soon: the next sleep starts with a short slice.
        self.nap = NAP_FIRST;
        let w = Waiting {
            msg,
            announced: false,
        };
        // Behind what already waits, to keep the pair's order.
        let w = if p.waiting.is_empty() {
            match self.try_send(node, w)? {
                None => return Ok(()),
                Some(w) => {
                    self.backlog.push(node);
                    w
                }
            }
        } else {
            w
        };
        let p = &mut self.peers[node];
        p.queued += w.msg.wire_len();
        p.waiting.push_back(w);
        Ok(())
    }

    fn queued(&self, node: usize) -> usize {
        self.peers.get(node).map_or(0, |p| p.queued)
    }

    fn in_transfer(&self) -> bool {
        // A large message in the provider's rendezvous counts only where `wait` has no
        // descriptor (shm: it would sleep 1 ms slices; measured 1.68 ms one way at 1 MiB).
        // rxm over tcp moves its bytes in `fi_trywait` and on its descriptor's wake-ups, not
        // in `fi_cq_read` polled in a spin (a 1 MiB ping-pong took as long as the scheduler
        // spun, 2 ms, and 6 ms with sched.spin_us=10000): there the scheduler is better off
        // asleep in `wait`.
        !self.backlog.is_empty()
            || (self.fi.wait_fd().is_none() && (self.large_sends > 0 || self.large_recvs > 0))
    }

    fn waker(&self) -> Option<std::sync::Arc<dyn Wake>> {
        Some(self.wake.waker())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("ofi.strangers_dropped", self.strangers),
            ("ofi.truncated_dropped", self.truncated),
            ("ofi.large_abandoned", self.abandoned),
            ("ofi.large_receiving", self.large_recvs as u64),
        ]
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        if !self.backlog.is_empty() || !self.repost.is_empty() || !self.unposted.is_empty() {
            self.flush_backlog()?;
        }
        let mut delivered = 0;
        self.poll(deliver, &mut delivered)?;
        Ok(delivered)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        if self.wake.take() {
            // Woken during a nap, and not answered yet.
            return Ok(());
        }
        self.sleep(timeout)
    }
}

impl Part for OfiMachine {
    fn nap(&mut self) -> Result<(), MachineError> {
        self.sleep(Duration::from_millis(1))
    }

    fn forget(&mut self, node: usize) {
        tracing::debug!(target: "ofi", peer = node, "peer out of the job");
        if let Some(p) = self.peers.get_mut(node) {
            p.gone = true;
            p.waiting.clear();
            p.held.clear();
            p.early.clear();
            p.queued = 0;
        }
        self.backlog.retain(|&n| n != node);
        self.abandon_large(node);
    }

    fn leave(&mut self) -> Result<(), MachineError> {
        // What is queued goes out if the peers take it soon; the job is over, so not forever.
        let deadline = Instant::now() + EXIT_FLUSH;
        let mut drop_all = |_: Message| {};
        let mut n = 0;
        loop {
            let pending = !self.backlog.is_empty()
                || self.sends.iter().any(|s| s.msg.is_some() || s.bytes > 0);
            if !pending || Instant::now() >= deadline {
                break;
            }
            if self.flush_backlog().is_err() || self.poll(&mut drop_all, &mut n).is_err() {
                break;
            }
            let _ = self.sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}
