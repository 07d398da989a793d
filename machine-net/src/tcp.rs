//! The TCP layer: one process per node, started by charmrun; one TCP connection per pair of
//! nodes, opened on first use (see `mesh.rs`).
//!
//! Every socket is non-blocking and driven by the scheduler's poll loop; an idle node blocks in
//! `epoll_wait` on all of them, and on the eventfd its [`waker`](Transport::waker) rings
//! (`wake.rs`). Framing and buffers: `conn.rs`.

use crate::conn::{Coalesce, Conn, ConnError};
use crate::door::{Arrival, Door, Judge};
use crate::mesh::{self, Kind};
use crate::wake::WakeFd;
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::protocol::SECRET_LEN;
use converse_bootstrap::session::{self, Open};
use converse_bootstrap::Bootstrap;
use converse_machine::BufferPool as Pool;
use converse_machine::{
    BootConfig, Layer, Machine, MachineError, Message, NodeTable, Part, SettingSpec, Settings,
    Transport, Wake,
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
    settings: SETTINGS,
    check: |s| coalesce_from(s).map(drop),
    describe: converse_machine::no_description,
};

/// `tcp.coalesce_us`: long enough for the sends of a loop, short against a handler that
/// computes between its sends (each of which then leaves at once).
const COALESCE_US: SettingSpec = SettingSpec::whole(
    "tcp.coalesce_us",
    50,
    0,
    1_000_000,
    "a message sent within this long of the last write to its peer, in the same handler, \
     waits to leave with the next ones in one writev (by the handler's end at the latest), \
     µs; 0: every message is written at once",
);
/// `tcp.coalesce_kib`.
const COALESCE_KIB: SettingSpec = SettingSpec::whole(
    "tcp.coalesce_kib",
    16,
    1,
    1024,
    "bytes held for coalescing at which they are written at once, KiB",
);
/// The layer's settings.
const SETTINGS: &[SettingSpec] = &[COALESCE_US, COALESCE_KIB];

/// Coalescing as the settings ask.
fn coalesce_from(s: &Settings) -> Result<Coalesce, MachineError> {
    let us = COALESCE_US.read_whole(s)?;
    Ok(Coalesce {
        within: Duration::from_micros(us),
        bytes: COALESCE_KIB.read_whole(s)? as usize * 1024,
    })
}

/// With up to this many incoming connections, `advance` simply tries a read on each (as cheap
/// as one `epoll_wait`, and no second call when data is there); with more, it asks epoll.
const READ_ALL_UP_TO: usize = 4;

/// How long `exit` keeps trying to send what is still queued.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// Epoll token of the wake eventfd; a connection's is its peer's node number. (The listener
/// is the door's, `door.rs`.)
const WAKE: u64 = u64::MAX - 2;

/// What this node has with one peer (see `mesh.rs` for how the pair's connection comes about).
#[derive(Default)]
struct Link {
    pair: Pair,
    /// Messages for the peer while we wait for it to connect back (we are the higher node).
    waiting: VecDeque<Message>,
    /// Their wire bytes.
    waiting_bytes: usize,
    /// The connection is watched for writability (its frames wait for the socket).
    watching: bool,
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
    /// Accepts connections and judges introductions on a thread of its own; hands over the
    /// peers'.
    door: Door,
    links: Vec<Link>,
    /// Peers with an open connection: what `advance` reads.
    readers: Vec<usize>,
    /// Peers whose outgoing frames wait: for their socket, or held to be coalesced.
    backlog: Vec<usize>,
    /// Flushes so far (each `advance`, each `flush`): a connection's first frame of a turn
    /// is written at once (`conn.rs`).
    turn: u64,
    /// `tcp.coalesce_us`, `tcp.coalesce_kib`.
    coalesce: Coalesce,
    /// Writes and frames of connections closed since (counters only grow).
    gone_written: (u64, u64),
    epoll: Epoll,
    events: Vec<EpollEvent>,
    /// In the epoll set: other threads ring it to end `wait`.
    wake: WakeFd,
    /// Buffers of large messages sent, to receive large ones into (no page faulted in, no
    /// `memset`, per message).
    pool: Pool,
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
    coalesce: Coalesce,
}

impl Open for TcpOpen {
    type Part = TcpMachine;

    /// Open the node's listener on the address that routes to the launcher.
    fn open(
        cfg: &BootConfig,
        _: &LaunchEnv,
        launcher: &dyn Bootstrap,
    ) -> Result<TcpOpen, MachineError> {
        let coalesce = coalesce_from(&cfg.settings)?;
        let listener = converse_bootstrap::net::listener(launcher.local_ip(), 4096)
            .map_err(|e| MachineError::io("opening the node's listener", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| MachineError::io("node listener address", e))?;
        tracing::debug!(target: "tcp", %addr, "listening for peers");
        Ok(TcpOpen {
            listener,
            addr,
            coalesce,
        })
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
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| MachineError::io("epoll_create", e.into()))?;
        let wake = WakeFd::new().map_err(|e| MachineError::io("creating the node's eventfd", e))?;
        epoll
            .add(wake.fd(), EpollEvent::new(EpollFlags::EPOLLIN, WAKE))
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))?;
        let n = table.num_nodes();
        let judge = Judge {
            me: env.node,
            nodes: n,
            secret: env.secret,
        };
        let door = Door::open(self.listener, judge, wake.waker())
            .map_err(|e| MachineError::io("opening the node's door (listener thread)", e))?;
        Ok(TcpMachine {
            me: env.node,
            table,
            secret: env.secret,
            door,
            links: (0..n).map(|_| Link::default()).collect(),
            readers: Vec::new(),
            backlog: Vec::new(),
            turn: 0,
            coalesce: self.coalesce,
            gone_written: (0, 0),
            epoll,
            events: vec![EpollEvent::empty(); 64],
            wake,
            pool: Pool::default(),
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
        let waited = !self.links[peer].waiting.is_empty();
        while let Some(m) = self.links[peer].waiting.pop_front() {
            self.links[peer].waiting_bytes -= m.wire_len();
            self.send_on(peer, m)?;
        }
        if waited {
            // What waited for the connection has waited long enough: none of it is held.
            self.flush_one(peer)?;
        }
        Ok(())
    }

    /// Write what is held for `peer` (its connection only), as [`flush_backlog`] does.
    ///
    /// [`flush_backlog`]: Self::flush_backlog
    fn flush_one(&mut self, peer: usize) -> Result<(), MachineError> {
        let r = match self.links[peer].conn_mut() {
            Some(c) if !c.blocked() => c
                .flush(&mut self.pool, self.turn, self.coalesce)
                .map(|()| (c.has_output(), c.blocked())),
            _ => return Ok(()),
        };
        match r {
            Ok((output, blocked)) => {
                if !output {
                    self.backlog.retain(|&p| p != peer);
                }
                self.watch_output(peer, blocked)
            }
            Err(e) => Err(self.conn_error(peer, e)),
        }
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
        let r = c
            .send(msg, &mut self.pool, self.turn, self.coalesce)
            .map(|()| (c.has_output(), c.blocked()));
        match r {
            Ok((output, blocked)) => {
                if output && !had_output {
                    self.backlog.push(peer);
                }
                self.watch_output(peer, blocked)
            }
            Err(e) => Err(self.conn_error(peer, e)),
        }
    }

    /// Watch the connection to `peer` for writability too (frames wait for the socket), or
    /// stop; nothing to do when it already is as asked (one comparison per send).
    #[inline]
    fn watch_output(&mut self, peer: usize, on: bool) -> Result<(), MachineError> {
        let link = &mut self.links[peer];
        if link.watching == on {
            return Ok(());
        }
        let Some(c) = link.conn() else {
            return Ok(());
        };
        let flags = if on {
            EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
        } else {
            EpollFlags::EPOLLIN
        };
        let mut ev = EpollEvent::new(flags, peer as u64);
        self.epoll.modify(c.stream(), &mut ev).map_err(epoll_err)?;
        link.watching = on;
        Ok(())
    }

    /// Write what waits for every peer (`held_only`: only the frames held for coalescing,
    /// not those waiting for a full socket, which its writability brings back to `advance`),
    /// as far as the sockets take it. A new turn begins: the next frame to each connection
    /// is written at once. A broken connection does not stop the others' flush; the first
    /// error is returned at the end.
    fn flush_backlog(&mut self, held_only: bool) -> Result<(), MachineError> {
        // The frames written here belong to the turn that ends: a connection's next frame is
        // the first of the new one.
        let ending = self.turn;
        self.turn = self.turn.wrapping_add(1);
        let mut first_error = None;
        let mut i = 0;
        while i < self.backlog.len() {
            let peer = self.backlog[i];
            if held_only && self.links[peer].watching {
                i += 1;
                continue;
            }
            let r = match self.links[peer].conn_mut() {
                Some(c) => c
                    .flush(&mut self.pool, ending, self.coalesce)
                    .map(|()| c.has_output()),
                None => Ok(false),
            };
            let watched = match r {
                Ok(true) => {
                    i += 1;
                    self.watch_output(peer, true)
                }
                Ok(false) => {
                    self.backlog.swap_remove(i);
                    self.watch_output(peer, false)
                }
                Err(e) => {
                    // Broken: reported once (the runtime forgets it in report mode, else
                    // the job ends); its frames cannot go.
                    self.backlog.swap_remove(i);
                    Err(self.conn_error(peer, e))
                }
            };
            if let Err(e) = watched {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
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

    /// Take the peers' connections the door let in: attach pair connections from lower
    /// nodes, answer requests from higher ones, and refuse what is not wanted now (a second
    /// pair connection, a node out of the job).
    fn take_arrivals(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut arrived = Vec::new();
        self.door.take(|a| arrived.push(a));
        let mut n = 0;
        for Arrival { peer, kind, stream } in arrived {
            let link = &self.links[peer];
            let wanted = !matches!(link.pair, Pair::Gone)
                && (kind == Kind::Request || link.conn().is_none());
            if !wanted {
                self.door.refused();
                continue;
            }
            match kind {
                Kind::Data => {
                    self.attach(peer, stream)?;
                    n += self.receive_from(peer, deliver)?;
                }
                Kind::Request => {
                    drop(stream);
                    if self.links[peer].conn().is_none() {
                        self.open_pair(peer)?;
                    }
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
        if self.backlog.is_empty() {
            self.turn = self.turn.wrapping_add(1);
        } else {
            self.flush_backlog(false)?;
        }
        // One relaxed load per advance: the door thread flags peers' new connections.
        if self.door.ready() {
            n += self.take_arrivals(deliver)?;
        }
        if self.readers.len() <= READ_ALL_UP_TO {
            for i in 0..self.readers.len() {
                n += self.receive_from(self.readers[i], deliver)?;
            }
            return Ok(n);
        }
        let ready = self
            .epoll
            .wait(&mut self.events, EpollTimeout::ZERO)
            .map_err(|e| MachineError::io("epoll_wait", e.into()))?;
        for i in 0..ready {
            match self.events[i].data() {
                // Left rung for `wait`, which returns at once: no read on the message path.
                WAKE => {}
                peer => n += self.receive_from(peer as usize, deliver)?,
            }
        }
        Ok(n)
    }

    /// The frames held for coalescing go out (see `conn.rs`); a new turn begins.
    #[inline]
    fn flush(&mut self) -> Result<(), MachineError> {
        if self.backlog.is_empty() {
            self.turn = self.turn.wrapping_add(1);
            return Ok(());
        }
        self.flush_backlog(true)
    }

    fn waker(&self) -> Option<std::sync::Arc<dyn Wake>> {
        Some(self.wake.waker())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let (writes, frames) = self
            .links
            .iter()
            .filter_map(Link::conn)
            .map(Conn::written)
            .fold(self.gone_written, |(w, f), (a, b)| (w + a, f + b));
        vec![
            ("tcp.connections", self.readers.len() as u64),
            ("tcp.strangers_dropped", self.door.strangers()),
            ("tcp.writes", writes),
            ("tcp.frames_sent", frames),
        ]
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        // Nothing held for coalescing sleeps with this node (the runtime polls before it
        // waits, which flushes; this is for any other caller).
        if self.backlog.iter().any(|&p| !self.links[p].watching) {
            self.flush_backlog(true)?;
        }
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
        // Also the door's ring: its arrivals are taken at the next advance.
        if self.events[..ready].iter().any(|e| e.data() == WAKE) {
            self.wake.reset();
            // Answered by this return.
            self.wake.take();
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
                let (w, f) = c.written();
                self.gone_written.0 += w;
                self.gone_written.1 += f;
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
        // Nothing is accepted any more (and the door's rings would only end naps early).
        self.door.close();
        while !self.backlog.is_empty() && std::time::Instant::now() < deadline {
            // A broken connection leaves the backlog at its error; the others go on.
            let _ = self.flush_backlog(false);
            self.nap();
        }
        Ok(())
    }
}
