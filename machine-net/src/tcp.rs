//! The TCP layer: one process per node, started by charmrun, a TCP connection between every
//! pair of nodes.
//!
//! Settings: none yet beyond the runtime's. Design: see `conn.rs` (framing) and `mesh.rs`
//! (connection set-up). Every socket is non-blocking and driven by the scheduler's poll loop;
//! an idle node blocks in `epoll_wait` on all its sockets.

use crate::conn::{Conn, ConnError};
use crate::mesh;
use charmrun::client::{Control, LaunchEnv};
use machine::{BootConfig, Layer, Machine, MachineError, Message, NodeTable};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The registry entry for this layer.
pub const LAYER: Layer = Layer {
    name: "tcp",
    summary: "one process per node started by charmrun, TCP between every pair",
    boot,
    launched: LaunchEnv::present,
};

/// With up to this many peers, `advance` simply tries a read on each socket (as cheap as one
/// `epoll_wait`, and no second call when data is there); with more, it asks epoll which.
const READ_ALL_UP_TO: usize = 4;

/// How long the all-pairs connection set-up may take.
const MESH_TIMEOUT: Duration = Duration::from_secs(60);

/// One node of a TCP job.
pub struct TcpMachine {
    me: usize,
    table: NodeTable,
    conns: Vec<Option<Conn>>,
    /// Peers whose frames wait for their socket.
    backlog: Vec<usize>,
    loopback: VecDeque<Message>,
    epoll: Epoll,
    events: Vec<EpollEvent>,
    read_all: bool,
    ctl: Control,
}

/// Boot: connect back to charmrun, open the listener, learn the table, connect every pair.
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun or when start-up fails.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    let env = LaunchEnv::from_env()?;
    let mut ctl = Control::connect(&env)?;
    let listener = charmrun::net::listener(ctl.local_ip(), 4096)
        .map_err(|e| MachineError::io("opening the node's listener", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| MachineError::io("node listener address", e))?;
    let table = ctl.join(&env, mesh::encode_addr(addr))?;
    if table.num_pes() != table.num_nodes() * cfg.pes_per_node {
        return Err(MachineError::Boot(format!(
            "the node table has {} PEs on {} nodes, but +ppn is {}",
            table.num_pes(),
            table.num_nodes(),
            cfg.pes_per_node
        )));
    }
    let me = env.node;
    let (streams, _strangers) = mesh::connect_all(
        me,
        &table,
        &listener,
        &env.secret,
        Instant::now() + MESH_TIMEOUT,
    )?;
    // Nobody else may connect from now on: a stranger finds the port closed.
    drop(listener);
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
        .map_err(|e| MachineError::io("epoll_create", e.into()))?;
    let mut conns = Vec::with_capacity(streams.len());
    for (peer, s) in streams.into_iter().enumerate() {
        let Some(s) = s else {
            conns.push(None);
            continue;
        };
        s.set_nonblocking(true)
            .and_then(|()| s.set_nodelay(true))
            .map_err(|e| MachineError::io("configuring a peer socket", e))?;
        epoll
            .add(&s, EpollEvent::new(EpollFlags::EPOLLIN, peer as u64))
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))?;
        conns.push(Some(Conn::new(s)));
    }
    let peers = table.num_nodes() - 1;
    Ok(vec![Box::new(TcpMachine {
        me,
        table,
        conns,
        backlog: Vec::new(),
        loopback: VecDeque::new(),
        epoll,
        events: vec![EpollEvent::empty(); 64],
        read_all: peers <= READ_ALL_UP_TO,
        ctl,
    })])
}

impl TcpMachine {
    fn dead(&self, node: usize, reason: String) -> MachineError {
        MachineError::PeerDead {
            node,
            host: self
                .table
                .node(node)
                .map_or("?", |n| n.host.as_str())
                .to_owned(),
            reason,
        }
    }

    fn conn_error(&self, node: usize, e: ConnError) -> MachineError {
        match e {
            ConnError::Gone(reason) => self.dead(node, reason),
            ConnError::Corrupt(source) => MachineError::Corrupt { node, source },
        }
    }

    /// Watch `peer` for writability too (its frames wait for the socket), or stop watching.
    fn watch_output(&mut self, peer: usize, on: bool) -> Result<(), MachineError> {
        let Some(c) = self.conns[peer].as_ref() else {
            return Ok(());
        };
        let flags = if on {
            EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
        } else {
            EpollFlags::EPOLLIN
        };
        let mut ev = EpollEvent::new(flags, peer as u64);
        self.epoll
            .modify(c.stream(), &mut ev)
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))
    }

    fn flush_backlog(&mut self) -> Result<(), MachineError> {
        let mut i = 0;
        while i < self.backlog.len() {
            let peer = self.backlog[i];
            let r = match self.conns[peer].as_mut() {
                Some(c) => c.flush().map(|()| c.has_output()),
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
        let r = match self.conns[peer].as_mut() {
            Some(c) => c.receive(deliver),
            None => Ok(0),
        };
        r.map_err(|e| self.conn_error(peer, e))
    }
}

impl Machine for TcpMachine {
    fn layer(&self) -> &'static str {
        "tcp"
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        if node == self.me {
            self.loopback.push_back(msg);
            return Ok(());
        }
        let Some(Some(c)) = self.conns.get_mut(node) else {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        };
        let had_output = c.has_output();
        let r = c.send(msg).map(|()| c.has_output());
        match r {
            Ok(true) if !had_output => {
                self.backlog.push(node);
                self.watch_output(node, true)
            }
            Ok(_) => Ok(()),
            Err(e) => Err(self.conn_error(node, e)),
        }
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        while let Some(m) = self.loopback.pop_front() {
            deliver(m);
            n += 1;
        }
        if !self.backlog.is_empty() {
            self.flush_backlog()?;
        }
        if self.read_all {
            for peer in 0..self.conns.len() {
                n += self.receive_from(peer, deliver)?;
            }
            return Ok(n);
        }
        let ready = self
            .epoll
            .wait(&mut self.events, EpollTimeout::ZERO)
            .map_err(|e| MachineError::io("epoll_wait", e.into()))?;
        for i in 0..ready {
            let peer = self.events[i].data() as usize;
            n += self.receive_from(peer, deliver)?;
        }
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        if !self.loopback.is_empty() {
            return Ok(());
        }
        let ms = timeout.as_millis().clamp(1, u16::MAX as u128) as u16;
        match self.epoll.wait(&mut self.events, EpollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(MachineError::io("epoll_wait", e.into())),
        }
    }

    fn barrier(&mut self) -> Result<(), MachineError> {
        self.ctl.barrier()
    }

    fn exit(&mut self, code: i32) -> Result<(), MachineError> {
        self.ctl.ending(code)
    }

    fn abort(&mut self, reason: &str) -> ! {
        self.ctl.abort(reason)
    }
}
