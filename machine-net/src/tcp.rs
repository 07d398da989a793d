//! The TCP layer: one process per node, started by charmrun; one TCP connection per pair of
//! nodes, opened on first use (see `mesh.rs`).
//!
//! Every socket is non-blocking and driven by the scheduler's poll loop; an idle node blocks in
//! `epoll_wait` on all of them, and on the eventfd its [`waker`](Transport::waker) rings
//! (`wake.rs`). Framing and buffers: `conn.rs`.

use crate::conn::{Conn, ConnError};
use crate::mesh::{self, Intro, Kind, Pending};
use crate::wake::WakeFd;
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::protocol::SECRET_LEN;
use converse_bootstrap::session::{self, Open};
use converse_bootstrap::Bootstrap;
use converse_machine::BufferPool as Pool;
use converse_machine::{
    BootConfig, Layer, Machine, MachineError, Message, NodeTable, Part, Transport, Wake,
};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::collections::VecDeque;
use std::net::TcpListener;
use std::time::Duration;

/// The registry entry for this layer.
pub const LAYER: Layer = Layer {
    name: "tcp",
    summary: "one process per node started by charmrun, TCP between nodes",
    boot,
    launched: LaunchEnv::present,
    settings: &[],
    check: converse_machine::no_settings,
    describe: converse_machine::no_description,
};

/// With up to this many incoming connections, `advance` simply tries a read on each (as cheap
/// as one `epoll_wait`, and no second call when data is there); with more, it asks epoll.
const READ_ALL_UP_TO: usize = 4;

/// In read-every-socket mode, how often (in `advance` calls) to look for new connections; an
/// idle node's `wait` watches the listener all the time.
const ACCEPT_EVERY: u32 = 64;

/// How long `exit` keeps trying to send what is still queued.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// Accepted connections still introducing themselves beyond what the job's own peers can
/// open (each at most two: the pair's connection and a request to open it). With that many
/// pending, what came is judged (a peer's introduction read and its connection attached),
/// strangers silent past [`STRANGER_AFTER`] are closed, and if none is, nothing more is
/// accepted until one is: the rest waits in the kernel's backlog. A stranger never takes a
/// peer's place, however many connect.
const MAX_STRANGERS: usize = 64;

/// A connection that has not introduced itself this long after it was accepted is a
/// stranger's: a peer sends its introduction with the connection (`mesh::open`), so by the
/// time it is accepted the introduction is in its socket, or microseconds away.
const STRANGER_AFTER: Duration = Duration::from_millis(200);

/// Epoll tokens: a connection is its peer's node number; these are the others.
const LISTENER: u64 = u64::MAX;
const PENDING: u64 = u64::MAX - 1;
const WAKE: u64 = u64::MAX - 2;

/// What this node has with one peer (see `mesh.rs` for how the pair's connection comes about).
#[derive(Default)]
struct Link {
    pair: Pair,
    /// Messages for the peer while we wait for it to connect back (we are the higher node).
    waiting: VecDeque<Message>,
    /// Their wire bytes.
    waiting_bytes: usize,
}

/// Where the pair's connection stands.
#[derive(Default)]
enum Pair {
    /// Not open, nothing asked.
    #[default]
    Closed,
    /// We asked the peer to connect back (we are the higher node).
    Requested,
    /// The pair's connection.
    Open(Conn),
    /// Out of the job (report mode): a connection from it is a stranger's.
    Gone,
}

impl Link {
    #[inline]
    fn conn(&self) -> Option<&Conn> {
        match &self.pair {
            Pair::Open(c) => Some(c),
            _ => None,
        }
    }

    #[inline]
    fn conn_mut(&mut self) -> Option<&mut Conn> {
        match &mut self.pair {
            Pair::Open(c) => Some(c),
            _ => None,
        }
    }
}

/// One node of a TCP job.
pub struct TcpMachine {
    me: usize,
    table: NodeTable,
    secret: [u8; SECRET_LEN],
    listener: TcpListener,
    links: Vec<Link>,
    /// Peers with an open connection: what `advance` reads.
    readers: Vec<usize>,
    /// Accepted connections still introducing themselves.
    pending: Vec<Pending>,
    /// Peers whose outgoing frames wait for their socket.
    backlog: Vec<usize>,
    epoll: Epoll,
    events: Vec<EpollEvent>,
    advances: u32,
    /// In the epoll set: other threads ring it to end `wait`.
    wake: WakeFd,
    /// Buffers of large messages sent, to receive large ones into (no page faulted in, no
    /// `memset`, per message).
    pool: Pool,
    /// Connections closed because they did not introduce themselves as this job's.
    strangers: u64,
    /// Whether the listener is in the epoll set: taken out while the pending connections are
    /// at their bound (its readiness would end every wait at once), and for good at `leave`.
    listening: bool,
    /// In `leave`: nothing is accepted any more.
    left: bool,
}

// By hand: the fields are the layer's working state (sockets, queues, buffers); the node
// number says which one it is.
impl std::fmt::Debug for TcpMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpMachine")
            .field("node", &self.me)
            .finish_non_exhaustive()
    }
}

/// Boot: connect back to charmrun, open the listener, learn the table (the launcher
/// session's [`session::boot`]).
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun or when start-up fails.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<TcpOpen>(LAYER.name, cfg)
}

/// A TCP node between the two phases of its boot ([`Open`]): its listener is open, and
/// [`info`](Open::info) says where peers reach it.
#[derive(Debug)]
pub struct TcpOpen {
    listener: TcpListener,
    addr: std::net::SocketAddr,
}

impl Open for TcpOpen {
    type Part = TcpMachine;

    /// Open the node's listener on the address that routes to the launcher.
    fn open(
        _: &BootConfig,
        _: &LaunchEnv,
        launcher: &dyn Bootstrap,
    ) -> Result<TcpOpen, MachineError> {
        let listener = converse_bootstrap::net::listener(launcher.local_ip(), 4096)
            .map_err(|e| MachineError::io("opening the node's listener", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| MachineError::io("node listener address", e))?;
        tracing::debug!(target: "tcp", %addr, "listening for peers");
        Ok(TcpOpen { listener, addr })
    }

    /// This node's info for the node table: the listener's address.
    fn info(&self) -> Vec<u8> {
        mesh::encode_addr(self.addr)
    }

    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        _: &dyn Bootstrap,
    ) -> Result<TcpMachine, MachineError> {
        let listener = self.listener;
        listener
            .set_nonblocking(true)
            .map_err(|e| MachineError::io("configuring the listener", e))?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| MachineError::io("epoll_create", e.into()))?;
        epoll
            .add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))?;
        let wake = WakeFd::new().map_err(|e| MachineError::io("creating the node's eventfd", e))?;
        epoll
            .add(wake.fd(), EpollEvent::new(EpollFlags::EPOLLIN, WAKE))
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))?;
        let n = table.num_nodes();
        Ok(TcpMachine {
            me: env.node,
            table,
            secret: env.secret,
            listener,
            links: (0..n).map(|_| Link::default()).collect(),
            readers: Vec::new(),
            pending: Vec::new(),
            backlog: Vec::new(),
            epoll,
            events: vec![EpollEvent::empty(); 64],
            advances: 0,
            wake,
            pool: Pool::default(),
            strangers: 0,
            listening: true,
            left: false,
        })
    }
}

fn epoll_err(e: nix::errno::Errno) -> MachineError {
    MachineError::io("epoll_ctl", e.into())
}

impl TcpMachine {
    /// A nap outside `wait` (barrier, exit): up to 1 ms in `epoll_wait`. A wake it sees is
    /// reset, so the nap does not turn into a spin, and kept for the next `wait`.
    fn nap(&mut self) {
        let ready = self
            .epoll
            .wait(&mut self.events, EpollTimeout::from(1u16))
            .unwrap_or(0);
        if self.events[..ready].iter().any(|e| e.data() == WAKE) {
            self.wake.reset();
        }
    }

    fn dead(&self, node: usize, reason: String) -> MachineError {
        MachineError::peer_dead(&self.table, node, reason)
    }

    fn conn_error(&self, node: usize, e: ConnError) -> MachineError {
        match e {
            ConnError::Gone(reason) => self.dead(node, reason),
            ConnError::Corrupt(source) => MachineError::Corrupt { node, source },
        }
    }

    /// Make `s` the pair's connection with `peer` and send what waited for it.
    fn attach(&mut self, peer: usize, s: std::net::TcpStream) -> Result<(), MachineError> {
        self.epoll
            .add(&s, EpollEvent::new(EpollFlags::EPOLLIN, peer as u64))
            .map_err(epoll_err)?;
        tracing::debug!(target: "tcp", peer, waiting = self.links[peer].waiting.len(), "connection to peer open");
        self.links[peer].pair = Pair::Open(Conn::new(s));
        self.readers.push(peer);
        while let Some(m) = self.links[peer].waiting.pop_front() {
            self.links[peer].waiting_bytes -= m.wire_len();
            self.send_on(peer, m)?;
        }
        Ok(())
    }

    /// Open the pair's connection to `peer` (we are the lower node).
    fn open_pair(&mut self, peer: usize) -> Result<(), MachineError> {
        let addr = mesh::decode_addr(&self.table, peer)?;
        let s =
            mesh::open(addr, self.me, Kind::Data, &self.secret).map_err(|r| self.dead(peer, r))?;
        self.attach(peer, s)
    }

    /// Send on the pair's connection, which is open.
    fn send_on(&mut self, peer: usize, msg: Message) -> Result<(), MachineError> {
        let Some(c) = self.links[peer].conn_mut() else {
            self.links[peer].waiting_bytes += msg.wire_len();
            self.links[peer].waiting.push_back(msg);
            return Ok(());
        };
        let had_output = c.has_output();
        let r = c.send(msg, &mut self.pool).map(|()| c.has_output());
        match r {
            Ok(true) if !had_output => {
                self.backlog.push(peer);
                self.watch_output(peer, true)
            }
            Ok(_) => Ok(()),
            Err(e) => Err(self.conn_error(peer, e)),
        }
    }

    /// Watch the connection to `peer` for writability too (frames wait for it), or stop.
    fn watch_output(&mut self, peer: usize, on: bool) -> Result<(), MachineError> {
        let Some(c) = self.links[peer].conn() else {
            return Ok(());
        };
        let flags = if on {
            EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
        } else {
            EpollFlags::EPOLLIN
        };
        let mut ev = EpollEvent::new(flags, peer as u64);
        self.epoll.modify(c.stream(), &mut ev).map_err(epoll_err)
    }

    fn flush_backlog(&mut self) -> Result<(), MachineError> {
        let mut i = 0;
        while i < self.backlog.len() {
            let peer = self.backlog[i];
            let r = match self.links[peer].conn_mut() {
                Some(c) => c.flush(&mut self.pool).map(|()| c.has_output()),
                None => Ok(false),
            };
            match r {
                Ok(true) => i += 1,
                Ok(false) => {
                    self.backlog.swap_remove(i);
                    self.watch_output(peer, false)?;
                }
                Err(e) => return Err(self.conn_error(peer, e)),
            }
        }
        Ok(())
    }

    fn receive_from(
        &mut self,
        peer: usize,
        deliver: &mut dyn FnMut(Message),
    ) -> Result<usize, MachineError> {
        let r = match self.links.get_mut(peer).and_then(|l| l.conn_mut()) {
            Some(c) => c.receive(deliver, &mut self.pool),
            None => Ok(0),
        };
        r.map_err(|e| self.conn_error(peer, e))
    }

    /// The most connections still introducing themselves (see [`MAX_STRANGERS`]).
    fn max_pending(&self) -> usize {
        2 * self.table.num_nodes() + MAX_STRANGERS
    }

    /// Take the connections waiting on the listener, as many as the bound on pending ones
    /// allows (making room first by judging what came and closing silent strangers); whatever
    /// does not fit stays in the kernel's backlog, the listener out of the poll set meanwhile.
    fn accept_new(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        if self.left {
            return Ok(0);
        }
        loop {
            if self.pending.len() >= self.max_pending() {
                n += self.check_pending(deliver)?;
                let before = self.pending.len();
                // Read to the end of what came: silent past STRANGER_AFTER is a stranger.
                self.pending.retain(|p| p.silent_for() < STRANGER_AFTER);
                self.strangers += (before - self.pending.len()) as u64;
                if self.pending.len() >= self.max_pending() {
                    self.listen(false)?;
                    return Ok(n);
                }
            }
            match self.listener.accept() {
                Ok((s, _)) => {
                    // Accepted connections carry sends too (replies go back on them).
                    if s.set_nonblocking(true)
                        .and_then(|()| s.set_nodelay(true))
                        .is_err()
                    {
                        continue;
                    }
                    self.epoll
                        .add(&s, EpollEvent::new(EpollFlags::EPOLLIN, PENDING))
                        .map_err(epoll_err)?;
                    self.pending.push(Pending::new(s));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Out of descriptors and the like: the connection stays queued; try later.
                Err(_) => break,
            }
        }
        self.listen(true)?;
        Ok(n)
    }

    /// Put the listener in the poll set, or take it out.
    fn listen(&mut self, on: bool) -> Result<(), MachineError> {
        if on == self.listening || (on && self.left) {
            return Ok(());
        }
        let mut ev = EpollEvent::new(
            if on {
                EpollFlags::EPOLLIN
            } else {
                EpollFlags::empty()
            },
            LISTENER,
        );
        self.epoll
            .modify(&self.listener, &mut ev)
            .map_err(epoll_err)?;
        self.listening = on;
        Ok(())
    }

    /// Judge the introductions that have come: attach pair connections from lower nodes,
    /// answer requests from higher ones, close strangers.
    fn check_pending(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        let me = self.me;
        for p in std::mem::take(&mut self.pending) {
            let links = &self.links;
            // Only a lower node opens the pair's connection, once; only a higher one asks; a
            // node out of the job (report mode) is a stranger, should it still be running.
            let allowed = |peer: usize, kind: Kind| {
                !matches!(links[peer].pair, Pair::Gone)
                    && match kind {
                        Kind::Data => peer < me && links[peer].conn().is_none(),
                        Kind::Request => peer > me,
                    }
            };
            match p.advance(&self.secret, self.table.num_nodes(), allowed) {
                Intro::Waiting(p) => self.pending.push(p),
                Intro::Node(peer, Kind::Data, s) => {
                    // Re-registered under the peer's token by attach.
                    let _ = self.epoll.delete(&s);
                    self.attach(peer, s)?;
                    n += self.receive_from(peer, deliver)?;
                }
                Intro::Node(peer, Kind::Request, s) => {
                    let _ = self.epoll.delete(&s);
                    drop(s);
                    if self.links[peer].conn().is_none() {
                        self.open_pair(peer)?;
                    }
                }
                // Dropping the stream closes it, which also takes it out of the epoll set.
                Intro::Stranger => {
                    self.strangers += 1;
                    tracing::debug!(target: "tcp", "closed a connection that is not from the job");
                }
            }
        }
        Ok(n)
    }
}

impl Transport for TcpMachine {
    fn layer(&self) -> &'static str {
        LAYER.name
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        if node >= self.links.len() || node == self.me {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        self.send_to(node, msg)
    }

    fn queued(&self, node: usize) -> usize {
        self.links
            .get(node)
            .map_or(0, |l| l.waiting_bytes + l.conn().map_or(0, Conn::queued))
    }

    fn in_transfer(&self) -> bool {
        !self.backlog.is_empty()
            || self
                .readers
                .iter()
                .any(|&p| self.links[p].conn().is_some_and(Conn::mid_frame))
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        if !self.backlog.is_empty() {
            self.flush_backlog()?;
        }
        self.advances = self.advances.wrapping_add(1);
        if self.readers.len() <= READ_ALL_UP_TO {
            for i in 0..self.readers.len() {
                n += self.receive_from(self.readers[i], deliver)?;
            }
            // New connections and introductions are looked at now and then (and at once after
            // `wait` saw them); that also closes silent strangers when their time is up.
            if self.advances.is_multiple_of(ACCEPT_EVERY) {
                n += self.accept_new(deliver)?;
                n += self.check_pending(deliver)?;
            }
            return Ok(n);
        }
        let ready = self
            .epoll
            .wait(&mut self.events, EpollTimeout::ZERO)
            .map_err(|e| MachineError::io("epoll_wait", e.into()))?;
        let mut accept = false;
        for i in 0..ready {
            match self.events[i].data() {
                LISTENER | PENDING => accept = true,
                // Left rung for `wait`, which returns at once: no read on the message path.
                WAKE => {}
                peer => n += self.receive_from(peer as usize, deliver)?,
            }
        }
        // Now and then also while the listener is out of the poll set (pending connections at
        // their bound): the strangers among them are closed once silent long enough.
        let now_and_then = self.advances.is_multiple_of(ACCEPT_EVERY);
        if accept || (now_and_then && !self.listening) {
            n += self.accept_new(deliver)?;
        }
        if accept || (now_and_then && !self.pending.is_empty()) {
            n += self.check_pending(deliver)?;
        }
        Ok(n)
    }

    fn waker(&self) -> Option<std::sync::Arc<dyn Wake>> {
        Some(self.wake.waker())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("tcp.connections", self.readers.len() as u64),
            ("tcp.strangers_dropped", self.strangers),
        ]
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        if self.wake.take() {
            // Woken during the barrier's nap, and not answered yet.
            return Ok(());
        }
        let ms = timeout.as_millis().clamp(1, u16::MAX as u128) as u16;
        let ready = match self.epoll.wait(&mut self.events, EpollTimeout::from(ms)) {
            Ok(r) => r,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(MachineError::io("epoll_wait", e.into())),
        };
        for e in &self.events[..ready] {
            match e.data() {
                // New connections and introductions are taken at the next advance.
                LISTENER | PENDING => self.advances = ACCEPT_EVERY - 1,
                WAKE => {
                    self.wake.reset();
                    // Answered by this return.
                    self.wake.take();
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl TcpMachine {
    /// [`Transport::send`] to a node in the table other than this one.
    fn send_to(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        if self.links[node].conn().is_none() {
            if node > self.me {
                self.open_pair(node)?;
            } else if !matches!(self.links[node].pair, Pair::Requested) {
                // The lower node opens the pair's connection: ask it to, and queue meanwhile.
                let addr = mesh::decode_addr(&self.table, node)?;
                mesh::open(addr, self.me, Kind::Request, &self.secret)
                    .map_err(|r| self.dead(node, r))?;
                self.links[node].pair = Pair::Requested;
            }
        }
        self.send_on(node, msg)
    }
}

impl Part for TcpMachine {
    fn nap(&mut self) -> Result<(), MachineError> {
        TcpMachine::nap(self);
        Ok(())
    }

    fn forget(&mut self, node: usize) {
        tracing::debug!(target: "tcp", peer = node, "peer out of the job");
        if let Some(l) = self.links.get_mut(node) {
            if let Pair::Open(c) = std::mem::replace(&mut l.pair, Pair::Gone) {
                let _ = self.epoll.delete(c.stream());
            }
            l.waiting.clear();
            l.waiting_bytes = 0;
        }
        self.readers.retain(|&p| p != node);
        self.backlog.retain(|&p| p != node);
    }

    fn leave(&mut self) -> Result<(), MachineError> {
        // Frames still queued go out if the peers take them soon; the job is over, so not
        // forever.
        let deadline = std::time::Instant::now() + EXIT_FLUSH;
        tracing::debug!(target: "tcp", backlog = self.backlog.len(), "leaving: flushing what is queued");
        // Nothing is accepted any more: a connection waiting on the listener would otherwise
        // end every epoll nap at once and turn this loop into a spin.
        self.left = true;
        if self.listening {
            let _ = self.epoll.delete(&self.listener);
            self.listening = false;
        }
        while !self.backlog.is_empty() && std::time::Instant::now() < deadline {
            if self.flush_backlog().is_err() {
                break;
            }
            self.nap();
        }
        Ok(())
    }
}
