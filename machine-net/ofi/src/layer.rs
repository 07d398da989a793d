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
use std::os::fd::BorrowedFd;
use std::os::raw::c_void;
use std::time::{Duration, Instant};

/// How long `leave` keeps pushing what is still queued.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// Completions read per call of `fi_cq_readfrom`; `advance` reads at most two batches, so a
/// receiver that stops calling it holds its senders back.
const BATCH: usize = 32;

/// Without a wait object, `wait` sleeps in slices this long (a message then waits up to it).
const SLICE: Duration = Duration::from_millis(1);

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
        let want = Want {
            provider: provider::<C>(&cfg.settings)?,
            node: Some(launcher.local_ip().to_string()),
            shm_name: Some(format!(
                "{}ofi-{}",
                converse_machine::launch::shm_prefix(&env.job),
                env.node
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
        OfiMachine::new(
            self.fi,
            env.node,
            table,
            self.eager,
            self.rx_posted,
            C::NAME,
        )
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
    strangers: u64,
    truncated: u64,
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
            wake,
            strangers: 0,
            truncated: 0,
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

    /// Post eager receive `i` (again).
    fn post_eager(&mut self, i: usize) -> Result<(), MachineError> {
        let r = &mut self.rx[i];
        // The frame lands with its header in the last bytes of the headroom, its wire bytes
        // where a message's are.
        // SAFETY: the buffer and context live in `self.rx[i]` until the receive completes
        // or the endpoint is closed (Drop order); `HEADER + eager` bytes from
        // `HEADROOM - HEADER` are in it.
        let rc = unsafe {
            sys::trecv(
                self.fi.ep(),
                r.buf.as_mut_ptr().add(HEADROOM - tag::HEADER).cast(),
                tag::HEADER + self.eager,
                sys::ADDR_UNSPEC,
                0,
                0,
                r.op.ctx(),
            )
        };
        match rc {
            0 => Ok(()),
            EAGAIN => {
                self.repost.push(i);
                Ok(())
            }
            rc => Err(io("posting a receive (fi_trecv)", rc)),
        }
    }

    /// Post large receive `i`.
    fn post_large(&mut self, i: usize) -> Result<bool, MachineError> {
        let l = &mut self.large[i];
        let len = l.buf.len() - HEADROOM;
        // SAFETY: the buffer and context live in `self.large[i]` until the receive completes
        // (its slot is not reused before) or the endpoint is closed.
        let rc = unsafe {
            sys::trecv(
                self.fi.ep(),
                l.buf.as_mut_ptr().add(HEADROOM).cast(),
                len,
                sys::ADDR_UNSPEC,
                l.tag,
                0,
                l.op.ctx(),
            )
        };
        match rc {
            0 => {
                l.posted = true;
                Ok(true)
            }
            EAGAIN => Ok(false),
            rc => Err(io("posting a large message's receive (fi_trecv)", rc)),
        }
    }

    fn send_slot(&mut self, node: usize) -> usize {
        match self.free_sends.pop() {
            Some(i) => {
                self.sends[i].node = node;
                i
            }
            None => {
                let i = self.sends.len();
                self.sends.push(SendOp {
                    op: Op::boxed(Kind::Send, i),
                    node,
                    msg: None,
                    bytes: 0,
                    large: false,
                });
                i
            }
        }
    }

    /// Hand a tagged send of `len` bytes at `buf` to the provider, with a slot whose context
    /// it gets back on completion. `Ok(None)`: not now (`-FI_EAGAIN`).
    fn post_send(
        &mut self,
        node: usize,
        addr: sys::fi_addr_t,
        buf: *const u8,
        len: usize,
        tag: u64,
    ) -> Result<Option<usize>, MachineError> {
        let i = self.send_slot(node);
        // SAFETY: `buf` is the wire bytes of a message the caller stores in slot `i` on
        // success, so they live until the completion; the slot's context likewise.
        let rc = unsafe {
            sys::tsend(
                self.fi.ep(),
                buf.cast(),
                len,
                addr,
                tag,
                self.sends[i].op.ctx(),
            )
        };
        match rc {
            0 => Ok(Some(i)),
            EAGAIN => {
                self.free_sends.push(i);
                Ok(None)
            }
            rc => Err(self.send_error(node, rc)),
        }
    }

    fn send_error(&self, node: usize, rc: isize) -> MachineError {
        MachineError::peer_dead(
            &self.table,
            node,
            format!("sending failed: {}", crate::fabric::errstr(rc)),
        )
    }

    /// Try to give `w` to the provider; `Ok(Some(w))` hands it back (not now).
    fn try_send(&mut self, node: usize, mut w: Waiting) -> Result<Option<Waiting>, MachineError> {
        let Some(addr) = self.peers[node].addr else {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        };
        let len = w.msg.wire_len();
        let me = self.me;
        if len <= self.eager {
            let seq = self.peers[node].seq_out;
            let head = tag::Header {
                announce: false,
                src: me,
                seq,
            };
            // The header goes into the message's headroom: the frame is sent from its buffer.
            let frame = w.msg.frame_with_header(tag::HEADER);
            frame[..tag::HEADER].copy_from_slice(&head.encode());
            let (buf, flen) = (frame.as_ptr(), frame.len());
            let sent = if flen <= self.fi.inject_size() {
                // SAFETY: the frame lives across the call; inject copies it.
                match unsafe { sys::tinject(self.fi.ep(), buf.cast(), flen, addr, 0) } {
                    0 => true,
                    EAGAIN => false,
                    rc => return Err(self.send_error(node, rc)),
                }
            } else {
                match self.post_send(node, addr, buf, flen, 0)? {
                    Some(i) => {
                        let s = &mut self.sends[i];
                        s.msg = Some(w.msg);
                        s.bytes = len;
                        s.large = false;
                        self.peers[node].queued += len;
                        self.peers[node].seq_out = seq.wrapping_add(1) & tag::SEQ_MASK;
                        return Ok(None);
                    }
                    None => false,
                }
            };
            if !sent {
                return Ok(Some(w));
            }
            self.peers[node].seq_out = seq.wrapping_add(1) & tag::SEQ_MASK;
            return Ok(None);
        }
        let buf = w.msg.wire().as_ptr();
        if !w.announced {
            let seq = self.peers[node].seq_out;
            let head = tag::Header {
                announce: true,
                src: me,
                seq,
            };
            let mut word = [0u8; ANNOUNCE_LEN];
            word[..tag::HEADER].copy_from_slice(&head.encode());
            word[tag::HEADER..].copy_from_slice(&(len as u64).to_le_bytes());
            let rc = if self.fi.inject_size() >= ANNOUNCE_LEN {
                // SAFETY: the announce on the stack, which inject copies during the call.
                unsafe { sys::tinject(self.fi.ep(), word.as_ptr().cast(), ANNOUNCE_LEN, addr, 0) }
            } else {
                let i = self.send_slot(node);
                let s = &mut self.sends[i];
                s.op.word = word;
                s.msg = None;
                s.bytes = 0;
                s.large = false;
                let ptr = s.op.word.as_ptr();
                let ctx = s.op.ctx();
                // SAFETY: the announce lives in the slot's boxed context until the completion.
                match unsafe { sys::tsend(self.fi.ep(), ptr.cast(), ANNOUNCE_LEN, addr, 0, ctx) } {
                    0 => 0,
                    rc => {
                        self.free_sends.push(i);
                        rc
                    }
                }
            };
            match rc {
                0 => {
                    w.announced = true;
                    self.peers[node].seq_out = seq.wrapping_add(1) & tag::SEQ_MASK;
                }
                EAGAIN => return Ok(Some(w)),
                rc => return Err(self.send_error(node, rc)),
            }
        }
        let seq = self.peers[node].large_out;
        match self.post_send(node, addr, buf, len, tag::data(self.me, seq))? {
            Some(i) => {
                let s = &mut self.sends[i];
                s.msg = Some(w.msg);
                s.bytes = len;
                s.large = true;
                let p = &mut self.peers[node];
                p.large_out = seq.wrapping_add(1);
                p.queued += len;
                self.large_sends += 1;
                Ok(None)
            }
            None => Ok(Some(w)),
        }
    }

    /// Push what waits: sends per peer in order, receives the provider had no room for.
    fn flush_backlog(&mut self) -> Result<(), MachineError> {
        while let Some(i) = self.repost.pop() {
            self.post_eager(i)?;
            if self.repost.last() == Some(&i) {
                break;
            }
        }
        let k = 0;
        while k < self.unposted.len() {
            let i = self.unposted[k];
            if self.post_large(i)? {
                self.unposted.remove(k);
            } else {
                break;
            }
        }
        let mut b = 0;
        while b < self.backlog.len() {
            let node = self.backlog[b];
            while let Some(w) = self.peers[node].waiting.pop_front() {
                let len = w.msg.wire_len();
                self.peers[node].queued -= len;
                if let Some(w) = self.try_send(node, w)? {
                    self.peers[node].queued += len;
                    self.peers[node].waiting.push_front(w);
                    break;
                }
            }
            if self.peers[node].waiting.is_empty() {
                self.backlog.swap_remove(b);
            } else {
                b += 1;
            }
        }
        Ok(())
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
                self.large_recvs -= 1;
                let node = l.node;
                if self.peers[node].gone {
                    self.release_large(index);
                    return Ok(());
                }
                self.drain(node, deliver, delivered)
            }
        }
    }

    fn node_of(&self, src: sys::fi_addr_t) -> Option<usize> {
        usize::try_from(src)
            .ok()
            .and_then(|a| self.by_addr.get(a).copied())
            .filter(|&n| n != usize::MAX)
    }

    fn eager_in(
        &mut self,
        i: usize,
        e: &sys::fi_cq_tagged_entry,
        src: sys::fi_addr_t,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        let b = &self.rx[i].buf;
        let head = (e.len >= tag::HEADER)
            .then(|| {
                let mut h = [0u8; tag::HEADER];
                h.copy_from_slice(&b[HEADROOM - tag::HEADER..HEADROOM]);
                tag::Header::decode(h)
            })
            .flatten()
            .filter(|h| {
                self.peers
                    .get(h.src)
                    .is_some_and(|p| p.addr.is_some() && !p.gone)
            });
        let Some(t) = head.filter(|_| self.node_of(src).is_some()) else {
            // From outside the job (an address not in the vector, or a header no node of the
            // job writes), or from a peer out of it: dropped, counted.
            self.strangers += 1;
            tracing::debug!(target: "ofi", src, len = e.len, "message from outside the job dropped");
            return self.post_eager(i);
        };
        let (node, seq) = (t.src, t.seq);
        let len = (e.len - tag::HEADER).min(self.eager);
        let early = if !t.announce {
            {
                let m = if len > self.eager / 2 {
                    // Over half the buffer: hand the buffer itself over (no copy) and post a
                    // fresh one.
                    let mut buf = std::mem::replace(
                        &mut self.rx[i].buf,
                        converse_machine::zeroed(HEADROOM + self.eager),
                    );
                    buf.truncate(HEADROOM + len);
                    Message::from_frame(buf, HEADROOM)
                } else {
                    // The one copy of a small message, into a buffer of its size: a message
                    // may wait long in a queue, and an eager buffer is `ofi.eager_kib`.
                    Message::from_wire(&self.rx[i].buf[HEADROOM..HEADROOM + len])
                };
                self.post_eager(i)?;
                let m = m.map_err(|source| MachineError::Corrupt { node, source })?;
                Early::Message(m)
            }
        } else {
            let word = self.rx[i].buf[HEADROOM..HEADROOM + 8].try_into().ok();
            self.post_eager(i)?;
            let size = match word {
                Some(w) if len == 8 => usize::try_from(u64::from_le_bytes(w)).unwrap_or(usize::MAX),
                _ => {
                    return Err(MachineError::corrupt(
                        node,
                        format!("an announce of {len} bytes (8 expected)"),
                    ))
                }
            };
            {
                if size <= self.eager || size < ENVELOPE_LEN {
                    return Err(MachineError::corrupt(
                        node,
                        format!(
                            "an announce of a {size}-byte message, which would have gone eagerly \
                             (limit {} B)",
                            self.eager
                        ),
                    ));
                }
                Early::Announce(size)
            }
        };
        self.arrive(node, seq, early, deliver, delivered)
    }

    /// Eager message or announce number `seq` from `node`: taken now if it is the one due
    /// (with those after it that came early), else kept until it is.
    fn arrive(
        &mut self,
        node: usize,
        seq: u32,
        a: Early,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        let p = &mut self.peers[node];
        let ahead = seq.wrapping_sub(p.seq_in) & tag::SEQ_MASK;
        if ahead == 0 && p.early.is_empty() {
            // The common case: in order, nothing early.
            p.seq_in = p.seq_in.wrapping_add(1) & tag::SEQ_MASK;
            return self.take(node, a, deliver, delivered);
        }
        if ahead >= tag::REORDER_WINDOW {
            return Err(MachineError::corrupt(
                node,
                format!("message number {seq} where {} was due", p.seq_in),
            ));
        }
        tracing::trace!(target: "ofi", node, seq, due = p.seq_in, "arrived early");
        let ahead = ahead as usize;
        if p.early.len() <= ahead {
            p.early.resize_with(ahead + 1, || None);
        }
        if p.early[ahead].is_some() {
            return Err(MachineError::corrupt(
                node,
                format!("message number {seq} twice"),
            ));
        }
        p.early[ahead] = Some(a);
        while matches!(self.peers[node].early.front(), Some(Some(_))) {
            let p = &mut self.peers[node];
            let Some(Some(a)) = p.early.pop_front() else {
                break;
            };
            p.seq_in = p.seq_in.wrapping_add(1) & tag::SEQ_MASK;
            self.take(node, a, deliver, delivered)?;
        }
        Ok(())
    }

    /// An eager message or announce in its turn.
    fn take(
        &mut self,
        node: usize,
        a: Early,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        match a {
            Early::Message(m) => {
                if self.peers[node].held.is_empty() {
                    deliver(m);
                    *delivered += 1;
                } else {
                    self.peers[node].held.push_back(Held::Ready(m));
                }
                Ok(())
            }
            Early::Announce(size) => self.announced(node, size),
        }
    }

    /// A large message of `size` wire bytes from `node` is coming: post its receive.
    fn announced(&mut self, node: usize, size: usize) -> Result<(), MachineError> {
        let seq = self.peers[node].large_in;
        self.peers[node].large_in = seq.wrapping_add(1);
        let t = tag::data(node, seq);
        let buf = converse_machine::zeroed(HEADROOM + size);
        let i = match self.free_large.pop() {
            Some(i) => {
                let l = &mut self.large[i];
                l.node = node;
                l.tag = t;
                l.buf = buf;
                l.posted = false;
                l.done = false;
                i
            }
            None => {
                let i = self.large.len();
                self.large.push(LargeOp {
                    op: Op::boxed(Kind::Large, i),
                    node,
                    tag: t,
                    buf,
                    posted: false,
                    done: false,
                });
                i
            }
        };
        self.large_recvs += 1;
        self.peers[node].held.push_back(Held::Large(i));
        if !self.unposted.is_empty() || !self.post_large(i)? {
            self.unposted.push(i);
        }
        Ok(())
    }

    fn release_large(&mut self, i: usize) {
        self.large[i].buf = Vec::new();
        self.free_large.push(i);
    }

    /// Deliver what is ready at the front of `node`'s held arrivals, in order.
    fn drain(
        &mut self,
        node: usize,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        loop {
            let m = match self.peers[node].held.front() {
                Some(Held::Ready(_)) => match self.peers[node].held.pop_front() {
                    Some(Held::Ready(m)) => m,
                    _ => unreachable!("front was Ready"),
                },
                Some(&Held::Large(i)) if self.large[i].done => {
                    self.peers[node].held.pop_front();
                    let buf = std::mem::take(&mut self.large[i].buf);
                    self.free_large.push(i);
                    Message::from_frame(buf, HEADROOM)
                        .map_err(|source| MachineError::Corrupt { node, source })?
                }
                _ => return Ok(()),
            };
            deliver(m);
            *delivered += 1;
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
                let node = self.large[i].node;
                self.large_recvs -= 1;
                self.large[i].done = true;
                if canceled || self.peers[node].gone {
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
            timeout.min(SLICE)
        };
        let ms = timeout.as_millis().clamp(1, u16::MAX as u128) as u16;
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
        self.large_sends > 0 || self.large_recvs > 0 || !self.backlog.is_empty()
    }

    fn waker(&self) -> Option<std::sync::Arc<dyn Wake>> {
        Some(self.wake.waker())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("ofi.strangers_dropped", self.strangers),
            ("ofi.truncated_dropped", self.truncated),
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
