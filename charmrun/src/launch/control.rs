//! The control server: the socket nodes connect back to. It checks each introduction
//! (`HELLO` with the job secret), keeps each node's connection, hands out the node table once
//! all are in, serves barriers, and tells nodes `DIE`. What nodes send after the table
//! (`BARRIER`, `ENDING`, `ABORT`) and their connections closing arrive as [`Event`]s.

use super::{Event, LaunchError};
use crate::agent::wire::{self, AgentHello};
use crate::protocol::{self, Hello, Kind, SECRET_LEN};
use converse_machine::{NodeInfo, NodeTable};
use crossbeam_channel::Sender;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Pending connections the control socket holds: a whole job may connect at once, and a small
/// backlog (Charm++'s is 5) turns a burst into retries that take seconds.
const BACKLOG: i32 = 4096;

/// Largest introduction accepted from a connection that has not proved the secret yet.
const MAX_HELLO: usize = 64 << 10;

/// How long a write to a node may block: charmrun's loop must stay responsive to signals and
/// time limits even if a node stops reading.
const CONTROL_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How charmrun reaches one node.
#[derive(Default)]
enum Link {
    /// Not yet.
    #[default]
    None,
    /// Its own connection.
    Direct(TcpStream),
    /// Through the agent of this number.
    Agent(usize),
}

/// One node's side of the control server.
#[derive(Default)]
struct Conn {
    link: Link,
    /// Its introduction, until the table is built.
    hello: Option<Hello>,
    at_barrier: bool,
    /// Out of the job (report mode): counts as arrived at every barrier, is told nothing.
    gone: bool,
}

/// The control socket and every node's connection to it.
pub(super) struct ControlServer {
    conns: Vec<Conn>,
    /// Each agent's connection, once it introduced itself.
    agents: Vec<Option<TcpStream>>,
    port: u16,
    /// Cleared to end the accepting thread.
    accepting: Arc<AtomicBool>,
    tx: Sender<Event>,
}

impl ControlServer {
    /// Open the control socket for `n` nodes and accept introductions proving `secret`; each
    /// arrives on `tx` as [`Event::Hello`] or [`Event::Stranger`].
    pub(super) fn open(
        n: usize,
        secret: [u8; SECRET_LEN],
        tx: Sender<Event>,
    ) -> Result<ControlServer, LaunchError> {
        let listener = crate::net::listener(Ipv4Addr::UNSPECIFIED.into(), BACKLOG)
            .map_err(LaunchError::ControlSocket)?;
        let port = listener.local_addr().map_or(0, |a| a.port());
        let accepting = Arc::new(AtomicBool::new(true));
        {
            let tx = tx.clone();
            let accepting = accepting.clone();
            std::thread::spawn(move || accept_loop(listener, n, secret, tx, accepting));
        }
        Ok(ControlServer {
            conns: (0..n).map(|_| Conn::default()).collect(),
            agents: Vec::new(),
            port,
            accepting,
            tx,
        })
    }

    /// The control socket's port.
    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// Node `i` introduced itself on `stream` (the verdict has accepted it).
    pub(super) fn joined(&mut self, i: usize, stream: TcpStream, hello: Hello) {
        if let Some(c) = self.conns.get_mut(i) {
            c.link = Link::Direct(stream);
            c.hello = Some(hello);
        }
    }

    /// Agent `a`, which starts `nodes`, introduced itself on `stream`: from now on its frames
    /// are read, and `plan` is sent to it.
    ///
    /// # Errors
    /// A sentence when its connection cannot be read or written.
    pub(super) fn agent_joined(
        &mut self,
        a: usize,
        mut stream: TcpStream,
        nodes: &[usize],
        plan: &[u8],
    ) -> Result<(), String> {
        let reader = stream
            .try_clone()
            .map_err(|e| format!("cannot watch agent {a}'s control connection: {e}"))?;
        protocol::write_frame(&mut stream, Kind::Plan, plan)
            .and_then(|()| stream.flush())
            .map_err(|e| format!("cannot send agent {a} its plan: {e}"))?;
        if self.agents.len() <= a {
            self.agents.resize_with(a + 1, || None);
        }
        self.agents[a] = Some(stream);
        let mut mine = vec![false; self.conns.len()];
        for &i in nodes {
            if let Some(m) = mine.get_mut(i) {
                *m = true;
            }
        }
        let tx = self.tx.clone();
        std::thread::spawn(move || agent_read_loop(a, &mine, reader, tx));
        Ok(())
    }

    /// Node `i` introduced itself through agent `a` (the verdict has accepted it).
    pub(super) fn joined_via(&mut self, i: usize, a: usize, hello: Hello) {
        if let Some(c) = self.conns.get_mut(i) {
            c.link = Link::Agent(a);
            c.hello = Some(hello);
        }
    }

    /// Tell agent `a` the job is over: it ends every node it started.
    pub(super) fn die_agent(&mut self, a: usize) {
        if let Some(s) = self.agents.get_mut(a).and_then(Option::as_mut) {
            let _ = protocol::write_frame(s, Kind::Die, &[]).and_then(|()| s.flush());
        }
    }

    /// The number of agents that introduced themselves.
    pub(super) fn agents(&self) -> usize {
        self.agents.len()
    }

    /// Node `i` reached the barrier: when every node has, release them all.
    pub(super) fn barrier(&mut self, i: usize) {
        if let Some(c) = self.conns.get_mut(i) {
            c.at_barrier = true;
        }
        self.release_if_complete();
    }

    /// Agent `a` says every node in its tree (`nodes`) reached the barrier.
    pub(super) fn agent_barrier(&mut self, nodes: &[usize]) {
        for &i in nodes {
            if let Some(c) = self.conns.get_mut(i) {
                c.at_barrier = true;
            }
        }
        self.release_if_complete();
    }

    /// Report mode: node `i` is out of the job (`why`). Tell every other node still in it,
    /// and stop waiting for it at barriers.
    pub(super) fn gone(&mut self, i: usize, why: &str) {
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        c.gone = true;
        let body = protocol::node_why(i, why);
        for j in 0..self.conns.len() {
            if !self.conns[j].gone {
                self.send(j, Kind::Dead, &body);
            }
        }
        self.release_if_complete();
    }

    /// A broadcast's blob from its root: to every node still in the job, the root too (each
    /// node's next `BCAST`, in the order the roots' frames came).
    pub(super) fn broadcast(&mut self, blob: &[u8]) {
        for j in 0..self.conns.len() {
            if !self.conns[j].gone {
                self.send(j, Kind::Bcast, blob);
            }
        }
    }

    /// When every node reached the barrier (or is gone), release them all: each node of its
    /// own, and each agent once for all of its nodes.
    fn release_if_complete(&mut self) {
        if !self.conns.iter().all(|c| c.at_barrier || c.gone) {
            return;
        }
        // Nobody is at a barrier: every node is gone.
        if !self.conns.iter().any(|c| c.at_barrier) {
            return;
        }
        let mut agents_released = vec![false; self.agents.len()];
        for j in 0..self.conns.len() {
            self.conns[j].at_barrier = false;
            if self.conns[j].gone {
                continue;
            }
            match self.conns[j].link {
                Link::Agent(a) => {
                    if !agents_released.get(a).copied().unwrap_or(true) {
                        agents_released[a] = true;
                        if let Some(s) = self.agents.get_mut(a).and_then(Option::as_mut) {
                            let _ = protocol::write_frame(s, Kind::Release, &[])
                                .and_then(|()| s.flush());
                        }
                    }
                }
                _ => self.send(j, Kind::Release, &[]),
            }
        }
    }

    /// Every node is in: build the node table from their introductions (`ppn` PEs per node),
    /// send it to each, and from then on read what each sends.
    ///
    /// # Errors
    /// A sentence when the table cannot be built.
    pub(super) fn send_table(&mut self, ppn: usize) -> Result<(), String> {
        let mut infos = Vec::with_capacity(self.conns.len());
        for (i, c) in self.conns.iter_mut().enumerate() {
            let h = c
                .hello
                .take()
                .ok_or_else(|| format!("internal: node {i} has no introduction"))?;
            infos.push(NodeInfo {
                first_pe: i * ppn,
                num_pes: ppn,
                host: h.host,
                addr: h.info,
            });
        }
        let table = NodeTable::new(infos)
            .map_err(|e| format!("cannot build the node table: {e}"))?
            .encode();
        // Once to each agent, which hands it to its nodes.
        for s in self.agents.iter_mut().flatten() {
            let _ = protocol::write_frame(s, Kind::Table, &table).and_then(|()| s.flush());
        }
        // Every table first: a node's start-up waits for nothing else of ours.
        let mut readers = Vec::new();
        for i in 0..self.conns.len() {
            if !matches!(self.conns[i].link, Link::Direct(_)) {
                continue;
            }
            self.send(i, Kind::Table, &table);
            if let Link::Direct(c) = &self.conns[i].link {
                // A node nobody reads would never have its barriers released: out of
                // descriptors is the launcher's failure, said at once.
                let reader = c
                    .try_clone()
                    .map_err(|e| format!("cannot watch node {i}'s control connection: {e}"))?;
                readers.push((i, reader));
            }
        }
        if !readers.is_empty() {
            let tx = self.tx.clone();
            std::thread::Builder::new()
                .name("control-read".into())
                .spawn(move || read_all(readers, &tx))
                .map_err(|e| format!("cannot watch the nodes' control connections: {e}"))?;
        }
        Ok(())
    }

    /// Tell node `i` the job is over.
    pub(super) fn die(&mut self, i: usize) {
        self.send(i, Kind::Die, &[]);
    }

    fn send(&mut self, i: usize, kind: Kind, body: &[u8]) {
        // A node that cannot be told anything more is handled when its process exits.
        match self.conns.get_mut(i).map(|c| &mut c.link) {
            Some(Link::Direct(c)) => {
                let _ = protocol::write_frame(c, kind, body).and_then(|()| c.flush());
            }
            Some(Link::Agent(a)) => {
                let a = *a;
                if let Some(s) = self.agents.get_mut(a).and_then(Option::as_mut) {
                    let _ = protocol::write_frame(s, Kind::Relay, &wire::relay(i, kind, body))
                        .and_then(|()| s.flush());
                }
            }
            _ => {}
        }
    }

    /// End the accepting thread and close the control socket: a launcher embedded in a
    /// program that runs many jobs must not keep one of each.
    pub(super) fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        // Wake the thread blocked in `accept` with a connection of our own; it sees the flag
        // and leaves, closing the socket.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.port),
            Duration::from_secs(1),
        );
    }
}

fn accept_loop(
    listener: TcpListener,
    n: usize,
    secret: [u8; SECRET_LEN],
    tx: Sender<Event>,
    accepting: Arc<AtomicBool>,
) {
    // Introductions read at once: every node at once, agents, and room for strangers.
    converse_bootstrap::door::serve(
        listener,
        2 * n + 64,
        MAX_HELLO,
        converse_bootstrap::door::INTRO_DEADLINE,
        accepting,
        move |stream, intro| {
            let _ = tx.send(introduce(stream, intro, &secret));
        },
    );
}

/// Judge a connection by its introduction: a node of this job, or a stranger.
fn introduce(
    s: TcpStream,
    intro: converse_bootstrap::door::Intro,
    secret: &[u8; SECRET_LEN],
) -> Event {
    let peer = s
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0));
    let verdict = match intro {
        Ok((Kind::Hello, body)) => match Hello::decode(&body) {
            Some(h) if protocol::secrets_equal(&h.secret, secret) => Ok(Ok(h)),
            Some(_) => Err("wrong job secret".to_string()),
            None => Err("malformed introduction".to_string()),
        },
        Ok((Kind::Agent, body)) => match AgentHello::decode(&body) {
            Some(h) if protocol::secrets_equal(&h.secret, secret) => Ok(Err(h)),
            Some(_) => Err("wrong job secret".to_string()),
            None => Err("malformed agent introduction".to_string()),
        },
        Ok((k, _)) => Err(format!("unexpected {k:?} before introduction")),
        Err(e) => Err(format!("no introduction: {e}")),
    };
    match verdict {
        Ok(h) => {
            let _ = s.set_write_timeout(Some(CONTROL_WRITE_TIMEOUT));
            let _ = s.set_nodelay(true);
            match h {
                Ok(h) => Event::Hello(s, h),
                Err(a) => Event::Agent(s, a),
            }
        }
        Err(why) => Event::Stranger(peer, why),
    }
}

/// Read what every node sends on its control connection (`conns`: node and its reader), from
/// one thread: each frame as [`Event::Frame`], the end of a connection (or a frame that breaks
/// the protocol) as [`Event::Closed`], after every whole frame it brought. A thread per node
/// cost its creation and exit for every node while the job starts; the frames are few
/// (barriers, heartbeats, broadcasts, the end). An epoll set, so that a frame costs the same
/// whatever the number of nodes.
///
/// The sockets stay blocking (charmrun's writes to the same connections rely on a write
/// timeout): they are read with `MSG_DONTWAIT` once epoll says they have something.
fn read_all(conns: Vec<(usize, TcpStream)>, tx: &Sender<Event>) {
    use nix::errno::Errno;
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    let closed_all = |conns: &[(usize, TcpStream)]| {
        for (i, _) in conns {
            let _ = tx.send(Event::Closed(*i));
        }
    };
    let Ok(epoll) = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC) else {
        // Nobody could read them: as if every connection ended (the job ends, naming why).
        closed_all(&conns);
        return;
    };
    // By slot (the epoll token): the node, its reader, its bytes not yet a whole frame.
    let mut live: Vec<Option<(usize, TcpStream, Vec<u8>)>> = Vec::with_capacity(conns.len());
    let mut left = 0usize;
    for (slot, (i, s)) in conns.into_iter().enumerate() {
        if epoll
            .add(&s, EpollEvent::new(EpollFlags::EPOLLIN, slot as u64))
            .is_err()
        {
            let _ = tx.send(Event::Closed(i));
            live.push(None);
            continue;
        }
        live.push(Some((i, s, Vec::new())));
        left += 1;
    }
    let mut events = vec![EpollEvent::empty(); 64];
    let mut chunk = vec![0u8; 64 << 10];
    while left > 0 {
        let n = match epoll.wait(&mut events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(_) => {
                // Not expected of a valid set; never a spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        for e in &events[..n] {
            let slot = e.data() as usize;
            let Some(Some((node, s, buf))) = live.get_mut(slot) else {
                continue;
            };
            let ended = match recv(s.as_raw_fd(), &mut chunk, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => true,
                Ok(got) => {
                    buf.extend_from_slice(&chunk[..got]);
                    false
                }
                Err(Errno::EAGAIN | Errno::EINTR) => false,
                Err(_) => true,
            };
            let mut at = 0;
            let broken = loop {
                match protocol::take_frame(&buf[at..]) {
                    Ok(Some((used, k, body))) => {
                        at += used;
                        if tx.send(Event::Frame(*node, k, body)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => break false,
                    Err(_) => break true,
                }
            };
            buf.drain(..at);
            if ended || broken {
                let _ = tx.send(Event::Closed(*node));
                let _ = epoll.delete(&*s);
                live[slot] = None;
                left -= 1;
            }
        }
    }
}

/// Read what agent `a` relays for its nodes (`mine[i]`: node `i` is one of them); anything it
/// says of another node is ignored.
fn agent_read_loop(a: usize, mine: &[bool], mut r: TcpStream, tx: Sender<Event>) {
    loop {
        let ev = match protocol::read_frame(&mut r) {
            Ok((Kind::Relay, body)) => match wire::unrelay(&body) {
                Some((i, k, b)) if mine.get(i).copied().unwrap_or(false) => match k {
                    Kind::Hello => Hello::decode(b)
                        .filter(|h| h.node as usize == i)
                        .map(|h| Event::RelayedHello(a, h)),
                    Kind::Exited => b
                        .first_chunk::<4>()
                        .map(|s| Event::Exited(i, ExitStatus::from_raw(i32::from_le_bytes(*s)))),
                    Kind::Closed => Some(Event::Closed(i)),
                    k => Some(Event::Frame(i, k, b.to_vec())),
                },
                _ => None,
            },
            Ok((Kind::Barrier, _)) => Some(Event::AgentBarrier(a)),
            Ok((Kind::Heartbeat, body)) => Some(Event::AgentHeartbeat(
                a,
                wire::unlost(&body).map_or(Vec::new(), |(nodes, _)| nodes),
            )),
            Ok((Kind::Lost, body)) => wire::unlost(&body).map(|(nodes, why)| {
                let nodes = nodes
                    .into_iter()
                    .filter(|&i| mine.get(i).copied().unwrap_or(false))
                    .collect();
                Event::Lost(nodes, why)
            }),
            Ok(_) => None,
            Err(_) => {
                let _ = tx.send(Event::AgentClosed(a));
                return;
            }
        };
        if let Some(ev) = ev {
            if tx.send(ev).is_err() {
                return;
            }
        }
    }
}
