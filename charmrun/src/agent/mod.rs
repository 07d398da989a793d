//! `charmrun ++agent`: charmrun's stand-in on one host (or one batch-system task). charmrun
//! starts one agent per host through one remote shell (or all of them through `mpiexec` /
//! `srun`), instead of one remote shell per node.
//!
//! The agent connects back to charmrun and introduces itself with the job secret, which it
//! finds in its environment (the remote shell reads it from its standard input, a batch
//! launcher passes the environment on: never a command line). charmrun answers with the
//! [`Plan`](wire::Plan): which nodes to start here, with what. The agent starts them with
//! itself as their charmrun: they connect to its own control socket (on the address its own
//! connection to charmrun leaves from, so their layers listen where other hosts reach them),
//! and it relays their frames up and charmrun's down over its one connection. It passes their
//! output on whole lines at a time (to its own stdout and stderr, which its remote shell
//! carries to charmrun), reaps them and reports each exit.
//!
//! Nothing outlives the job: when charmrun says `DIE`, its connection drops (charmrun killed)
//! or the agent is signalled, it tells every node to die, kills every node's process group and
//! reaps them; when the agent itself is killed, its nodes' connections to it drop and their
//! watchdogs end them.

pub mod wire;

use crate::protocol::{self, Hello, Kind, SECRET_LEN};
use crate::{client, output, spawn};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::{AgentHello, Plan};

/// The first argument that makes charmrun an agent.
pub const FLAG: &str = "++agent";

/// Environment variable: which agent of the job this is. A batch launcher starts every agent
/// with the same environment; then the agent is its rank ([`RANK_VARS`]).
pub const ENV_AGENT: &str = "CONVERSE_AGENT";

/// Where MPI launchers and Slurm put a task's rank.
pub const RANK_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "MV2_COMM_WORLD_RANK",
];

/// How long an agent tries to reach charmrun.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a write to charmrun or to a node may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a node may take to introduce itself once connected.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long, at the end, the agent waits for its nodes' processes once killed.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the agent's threads tell its loop.
enum Ev {
    /// A frame from charmrun.
    Up(Kind, Vec<u8>),
    /// charmrun's connection closed.
    UpClosed,
    /// A node of this job introduced itself.
    Hello(TcpStream, Hello),
    /// A frame from the node in slot `.0`.
    Frame(usize, Kind, Vec<u8>),
    /// The node in slot `.0` closed its connection.
    Closed(usize),
    /// The node in slot `.0` exited.
    Exited(usize, ExitStatus),
}

/// Why an agent could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Its environment lacks something charmrun puts there.
    #[error("{0}")]
    Env(String),
    /// charmrun cannot be reached or went away before the plan.
    #[error("charmrun at {addr}: {source}")]
    Charmrun {
        /// charmrun's address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// charmrun's plan is not one.
    #[error("charmrun sent a malformed plan")]
    BadPlan,
    /// The control socket for the nodes cannot be opened.
    #[error("cannot open the nodes' control socket: {0}")]
    Listen(#[source] std::io::Error),
}

/// Run as an agent; the process's exit code.
pub fn run() -> i32 {
    crate::launch::install_signal_handlers();
    match serve() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("charmrun agent on {}: {e}", client::hostname());
            1
        }
    }
}

/// Which agent this is: `CONVERSE_AGENT`, else the batch launcher's rank.
fn agent_index() -> Result<u32, AgentError> {
    for var in std::iter::once(ENV_AGENT).chain(RANK_VARS.iter().copied()) {
        if let Ok(v) = std::env::var(var) {
            return v
                .trim()
                .parse()
                .map_err(|_| AgentError::Env(format!("{var}='{v}' is not a number")));
        }
    }
    Err(AgentError::Env(format!(
        "neither {ENV_AGENT} nor a launcher's rank ({}) is set: charmrun starts agents itself",
        RANK_VARS.join(", ")
    )))
}

fn var(k: &str) -> Result<String, AgentError> {
    std::env::var(k).map_err(|_| AgentError::Env(format!("{k} is not set")))
}

fn serve() -> Result<i32, AgentError> {
    let addr = var(client::ENV_CHARMRUN)?;
    let job = var(client::ENV_JOB)?;
    let secret_hex = var(client::ENV_SECRET)?;
    let secret = protocol::secret_from_hex(&secret_hex)
        .ok_or_else(|| AgentError::Env(format!("{} is malformed", client::ENV_SECRET)))?;
    let agent = agent_index()?;
    let up_err = |source| AgentError::Charmrun {
        addr: addr.clone(),
        source,
    };
    let mut up = connect(&addr).map_err(up_err)?;
    let local_ip = up.local_addr().map_err(up_err)?.ip();
    let hello = AgentHello {
        secret,
        agent,
        pid: std::process::id(),
        host: client::hostname(),
    };
    protocol::write_frame(&mut up, Kind::Agent, &hello.encode()).map_err(up_err)?;
    let plan = loop {
        match protocol::read_frame(&mut up).map_err(up_err)? {
            (Kind::Plan, body) => break Plan::decode(&body).ok_or(AgentError::BadPlan)?,
            // The job ended before it got here.
            (Kind::Die, _) => return Ok(1),
            _ => {}
        }
    };
    let _ = up.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = up.set_nodelay(true);
    if let Err(e) = std::env::set_current_dir(&plan.cwd) {
        eprintln!(
            "charmrun agent on {}: cannot enter {}: {e}",
            hello.host, plan.cwd
        );
    }
    let (tx, rx) = crossbeam_channel::unbounded();
    let listener = crate::net::listener(local_ip, 4096).map_err(AgentError::Listen)?;
    let port = listener.local_addr().map_err(AgentError::Listen)?.port();
    {
        let tx = tx.clone();
        std::thread::spawn(move || accept_loop(listener, secret, tx));
    }
    {
        let reader = up.try_clone().map_err(up_err)?;
        let tx = tx.clone();
        std::thread::spawn(move || up_loop(reader, tx));
    }
    let mut agent = Agent {
        up,
        plan,
        conns: Vec::new(),
        pids: Vec::new(),
        reaped: Vec::new(),
        watchers: Vec::new(),
        over: Arc::new(AtomicBool::new(false)),
        tx,
        rx,
    };
    agent.start_nodes(SocketAddr::new(local_ip, port), &job, &secret_hex);
    agent.serve(&secret);
    agent.end();
    Ok(0)
}

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// One agent at work.
struct Agent {
    up: TcpStream,
    plan: Plan,
    /// Each node's connection once it introduced itself (by slot: place in the plan).
    conns: Vec<Option<TcpStream>>,
    /// Each node's process (group) id; `None` when it could not be started.
    pids: Vec<Option<u32>>,
    reaped: Vec<bool>,
    watchers: Vec<output::Watcher>,
    over: Arc<AtomicBool>,
    tx: Sender<Ev>,
    rx: Receiver<Ev>,
}

impl Agent {
    fn start_nodes(&mut self, me: SocketAddr, job: &str, secret_hex: &str) {
        let n = self.plan.nodes.len();
        self.conns = (0..n).map(|_| None).collect();
        self.pids = vec![None; n];
        self.reaped = vec![false; n];
        for slot in 0..n {
            let p = &self.plan.nodes[slot];
            let env = [
                (client::ENV_CHARMRUN.to_string(), me.to_string()),
                (client::ENV_NODE.to_string(), p.node.to_string()),
                (
                    client::ENV_NODES.to_string(),
                    self.plan.num_nodes.to_string(),
                ),
                (client::ENV_JOB.to_string(), job.to_string()),
                (client::ENV_SECRET.to_string(), secret_hex.to_string()),
            ];
            let tx = self.tx.clone();
            let started = spawn::local(&p.program, &p.args, &env).and_then(|child| {
                let pid = child.id();
                let w = output::watch(child, p.prefix.clone(), self.over.clone(), move |st| {
                    let _ = tx.send(Ev::Exited(slot, st));
                });
                match w {
                    Ok(w) => Ok((pid, w)),
                    Err(e) => {
                        kill_group(pid);
                        Err(e)
                    }
                }
            });
            match started {
                Ok((pid, w)) => {
                    self.pids[slot] = Some(pid);
                    self.watchers.push(w);
                }
                Err(e) => {
                    eprintln!(
                        "charmrun agent on {}: cannot start node {} ({}): {e}",
                        client::hostname(),
                        p.node,
                        p.program
                    );
                    // As a shell says of a program it cannot run.
                    let _ = self
                        .tx
                        .send(Ev::Exited(slot, ExitStatus::from_raw(127 << 8)));
                }
            }
        }
    }

    fn slot_of(&self, node: usize) -> Option<usize> {
        self.plan.nodes.iter().position(|p| p.node as usize == node)
    }

    /// Relay until the job is over: charmrun says so (or is gone), or the agent is signalled.
    fn serve(&mut self, secret: &[u8; SECRET_LEN]) {
        let mut last_signal_check = Instant::now();
        loop {
            let ev = match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(ev) => Some(ev),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            if last_signal_check.elapsed() >= Duration::from_millis(50) || ev.is_none() {
                last_signal_check = Instant::now();
                if crate::launch::signalled().is_some() {
                    return;
                }
            }
            let Some(ev) = ev else { continue };
            let up_ok = match ev {
                Ev::Hello(stream, h) => {
                    let slot = self.slot_of(h.node as usize);
                    match slot {
                        Some(s)
                            if self.conns[s].is_none()
                                && protocol::secrets_equal(&h.secret, secret) =>
                        {
                            self.joined(s, stream, &h)
                        }
                        // Not one of ours, or twice: a stranger, dropped.
                        _ => true,
                    }
                }
                Ev::Frame(s, k, body) => {
                    let node = self.plan.nodes[s].node as usize;
                    self.up(Kind::Relay, &wire::relay(node, k, &body))
                }
                Ev::Closed(s) => {
                    let node = self.plan.nodes[s].node as usize;
                    self.up(Kind::Relay, &wire::relay(node, Kind::Closed, &[]))
                }
                Ev::Exited(s, st) => {
                    self.reaped[s] = true;
                    let node = self.plan.nodes[s].node as usize;
                    // Even with every node gone the agent stays until charmrun says the job
                    // is over: leaving earlier would look like an agent lost while charmrun
                    // still weighs what its nodes' ends mean.
                    self.up(
                        Kind::Relay,
                        &wire::relay(node, Kind::Exited, &st.into_raw().to_le_bytes()),
                    )
                }
                Ev::Up(Kind::Table, body) => {
                    for s in 0..self.conns.len() {
                        self.down(s, Kind::Table, &body);
                    }
                    true
                }
                Ev::Up(Kind::Relay, body) => {
                    if let Some((node, k, b)) = wire::unrelay(&body) {
                        if let Some(s) = self.slot_of(node) {
                            self.down(s, k, b);
                        }
                    }
                    true
                }
                Ev::Up(Kind::Die, _) | Ev::UpClosed => return,
                Ev::Up(..) => true,
            };
            if !up_ok {
                // charmrun cannot be told anything: it is gone, and the job with it.
                return;
            }
        }
    }

    fn joined(&mut self, s: usize, stream: TcpStream, h: &Hello) -> bool {
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let _ = stream.set_nodelay(true);
        if let Ok(reader) = stream.try_clone() {
            let tx = self.tx.clone();
            std::thread::spawn(move || node_loop(s, reader, tx));
        } else {
            // Without a reader its barriers would never be seen: end it, as charmrun would.
            if let Some(pid) = self.pids[s] {
                kill_group(pid);
            }
        }
        self.conns[s] = Some(stream);
        self.up(
            Kind::Relay,
            &wire::relay(h.node as usize, Kind::Hello, &h.encode()),
        )
    }

    fn up(&mut self, kind: Kind, body: &[u8]) -> bool {
        protocol::write_frame(&mut self.up, kind, body)
            .and_then(|()| self.up.flush())
            .is_ok()
    }

    fn down(&mut self, s: usize, kind: Kind, body: &[u8]) {
        if let Some(c) = self.conns.get_mut(s).and_then(Option::as_mut) {
            // A node that cannot be told anything more is handled when its process exits.
            let _ = protocol::write_frame(c, kind, body).and_then(|()| c.flush());
        }
    }

    /// End every node here (also those that exited: what they started ends with the job),
    /// reap them, pass the rest of their output on.
    fn end(&mut self) {
        for s in 0..self.conns.len() {
            self.down(s, Kind::Die, &[]);
        }
        for pid in self.pids.iter().flatten() {
            kill_group(*pid);
        }
        let deadline = Instant::now() + REAP_TIMEOUT;
        while self
            .reaped
            .iter()
            .zip(&self.pids)
            .any(|(r, p)| !r && p.is_some())
            && Instant::now() < deadline
        {
            if let Ok(Ev::Exited(s, _)) = self.rx.recv_timeout(Duration::from_millis(20)) {
                self.reaped[s] = true;
            }
        }
        self.over.store(true, Ordering::SeqCst);
        for w in self.watchers.drain(..) {
            let _ = w.thread.join();
        }
    }
}

fn kill_group(pid: u32) {
    let pgid = nix::unistd::Pid::from_raw(pid as i32);
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
}

fn up_loop(mut r: TcpStream, tx: Sender<Ev>) {
    loop {
        match protocol::read_frame(&mut r) {
            Ok((k, body)) => {
                if tx.send(Ev::Up(k, body)).is_err() {
                    return;
                }
            }
            Err(_) => {
                let _ = tx.send(Ev::UpClosed);
                return;
            }
        }
    }
}

fn node_loop(slot: usize, mut r: TcpStream, tx: Sender<Ev>) {
    loop {
        match protocol::read_frame(&mut r) {
            Ok((k, body)) => {
                if tx.send(Ev::Frame(slot, k, body)).is_err() {
                    return;
                }
            }
            Err(_) => {
                let _ = tx.send(Ev::Closed(slot));
                return;
            }
        }
    }
}

fn accept_loop(listener: std::net::TcpListener, secret: [u8; SECRET_LEN], tx: Sender<Ev>) {
    for conn in listener.incoming() {
        let Ok(mut s) = conn else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let tx = tx.clone();
        // One thread per connection, so a stranger that sends nothing delays nobody.
        std::thread::spawn(move || {
            let _ = s.set_read_timeout(Some(HELLO_TIMEOUT));
            if let Ok((Kind::Hello, body)) = protocol::read_frame_limited(&mut s, 64 << 10) {
                if let Some(h) = Hello::decode(&body) {
                    if protocol::secrets_equal(&h.secret, &secret) {
                        let _ = tx.send(Ev::Hello(s, h));
                    }
                }
            }
        });
    }
}
