//! `charmrun ++agent`: charmrun's stand-in on one host (or one batch-system task). charmrun
//! starts one agent per host through one remote shell (or all of them through `mpiexec` /
//! `srun`), instead of one remote shell per node.
//!
//! The agent connects back to charmrun and introduces itself with the job secret, which it
//! finds in its environment (the remote shell reads it from its standard input, a batch
//! launcher passes the environment on: never a command line). charmrun answers with the
//! [`Plan`]: which nodes to start here, with what. The agent starts them with
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

/// How long, at the end, the agent waits for its nodes' processes once killed.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// At the end, how long agents below get to end their nodes and leave before their shells
/// are killed.
const CHILD_GRACE: Duration = Duration::from_secs(3);

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
    /// An agent below this one introduced itself.
    Child(TcpStream, AgentHello),
    /// A frame from child agent `.0`.
    ChildFrame(usize, Kind, Vec<u8>),
    /// Child agent `.0`'s connection closed.
    ChildClosed(usize),
    /// The remote shell of child agent `.0` exited.
    ShellExited(usize, ExitStatus),
}

/// An agent this one starts (in a tree of agents).
struct Child {
    agent: u32,
    host: String,
    shell: String,
    /// Its own plan (its nodes, the agents below it).
    plan: Plan,
    /// Every node it and the agents below it start.
    subtree: Vec<usize>,
    conn: Option<TcpStream>,
    /// Its remote shell's process (group) id, while it runs.
    pid: Option<u32>,
    reaped: bool,
}

/// Why an agent could not do its job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
            converse_machine::input::error_line(&format!(
                "charmrun agent on {}: {e}",
                client::hostname()
            ));
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
    converse_machine::log::set_process(converse_machine::log::Who::Agent(Some(agent)));
    tracing::debug!(target: "charmrun", agent, charmrun = %addr, "agent connecting to charmrun");
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
        converse_machine::input::error_line(&format!(
            "charmrun agent on {}: cannot enter {}: {e}",
            hello.host, plan.cwd
        ));
    }
    let (tx, rx) = crossbeam_channel::unbounded();
    let children: Vec<Child> = plan
        .agents
        .iter()
        .filter(|a| a.parent == agent)
        .filter_map(|a| {
            let p = plan.of(a.agent)?;
            Some(Child {
                agent: a.agent,
                host: a.host.clone(),
                shell: a.shell.clone(),
                subtree: p.all_nodes().collect(),
                plan: p,
                conn: None,
                pid: None,
                reaped: false,
            })
        })
        .collect();
    // Agents below this one reach it from other hosts; nodes from this one.
    let bind = if children.is_empty() {
        local_ip
    } else {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    };
    // Its nodes' connections and pipes, its children's, and strangers at its door: as
    // charmrun, past the usual soft limit at a few hundred nodes.
    crate::launch::start::raise_descriptor_limit();
    let listener = crate::net::listener(bind, 4096).map_err(AgentError::Listen)?;
    let port = listener.local_addr().map_err(AgentError::Listen)?.port();
    {
        let tx = tx.clone();
        // Introductions read at once: its nodes and children all at once, and room for
        // strangers.
        let most = 2 * (plan.nodes.len() + children.len()) + 64;
        std::thread::spawn(move || accept_loop(listener, most, secret, tx));
    }
    {
        let reader = up.try_clone().map_err(up_err)?;
        let tx = tx.clone();
        std::thread::spawn(move || read_loop(reader, tx, Ev::Up, Ev::UpClosed));
    }
    let mut agent = Agent {
        up,
        node_at_barrier: vec![false; plan.nodes.len()],
        child_at_barrier: vec![false; children.len()],
        node_gone: vec![false; plan.nodes.len()],
        child_gone: vec![false; children.len()],
        node_heard: vec![None; plan.nodes.len()],
        child_heard: vec![None; children.len()],
        plan,
        children,
        conns: Vec::new(),
        pids: Vec::new(),
        reaped: Vec::new(),
        watchers: Vec::new(),
        over: Arc::new(AtomicBool::new(false)),
        tx,
        rx,
    };
    agent.start_nodes(SocketAddr::new(local_ip, port), &job, &secret_hex);
    agent.start_children(local_ip, port, &job, &secret_hex);
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
    children: Vec<Child>,
    /// Which nodes here, and which agents below, reached the current barrier.
    node_at_barrier: Vec<bool>,
    child_at_barrier: Vec<bool>,
    /// Nodes here whose process or connection ended, and agents below that closed theirs:
    /// they count as arrived at every barrier, so that in a job that survives a death
    /// (`faults=report`) the others' barriers still complete. (In a job that does not,
    /// charmrun ends everything anyway.)
    node_gone: Vec<bool>,
    child_gone: Vec<bool>,
    /// When each node here last sent anything.
    node_heard: Vec<Option<Instant>>,
    /// When each agent below last sent its heartbeat, and the nodes it then said were silent.
    child_heard: Vec<Option<(Instant, Vec<usize>)>>,
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
                    tracing::debug!(target: "charmrun", node = p.node, pid, "agent started a node");
                    self.pids[slot] = Some(pid);
                    self.watchers.push(w);
                }
                Err(e) => {
                    converse_machine::input::error_line(&format!(
                        "charmrun agent on {}: cannot start node {} ({}): {e}",
                        client::hostname(),
                        p.node,
                        p.program
                    ));
                    // As a shell says of a program it cannot run.
                    let _ = self
                        .tx
                        .send(Ev::Exited(slot, ExitStatus::from_raw(127 << 8)));
                }
            }
        }
    }

    /// Start the agents below this one, each through its host's remote shell.
    fn start_children(
        &mut self,
        local_ip: std::net::IpAddr,
        port: u16,
        job: &str,
        secret_hex: &str,
    ) {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "charmrun".into());
        for c in 0..self.children.len() {
            let child = &self.children[c];
            let route = spawn::address_towards(&child.host)
                .ok()
                .filter(|a| !a.is_loopback())
                .unwrap_or(local_ip);
            let env = [
                (
                    client::ENV_CHARMRUN.to_string(),
                    SocketAddr::new(route, port).to_string(),
                ),
                (client::ENV_JOB.to_string(), job.to_string()),
                (ENV_AGENT.to_string(), child.agent.to_string()),
            ];
            let secret = (client::ENV_SECRET, secret_hex);
            let tx = self.tx.clone();
            let started = spawn::remote(
                &child.shell,
                &child.host,
                &self.plan.cwd,
                &exe,
                &[FLAG.into()],
                &env,
                secret,
            )
            .and_then(|proc| {
                let pid = proc.id();
                let w = output::watch(proc, String::new(), self.over.clone(), move |st| {
                    let _ = tx.send(Ev::ShellExited(c, st));
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
                    self.children[c].pid = Some(pid);
                    self.watchers.push(w);
                }
                Err(e) => {
                    converse_machine::input::error_line(&format!(
                        "charmrun agent on {}: cannot start the agent for {}: {e}",
                        client::hostname(),
                        self.children[c].host
                    ));
                    let _ = self
                        .tx
                        .send(Ev::ShellExited(c, ExitStatus::from_raw(127 << 8)));
                }
            }
        }
    }

    /// The child agent whose tree starts `node`.
    fn child_of(&self, node: usize) -> Option<usize> {
        self.children.iter().position(|c| c.subtree.contains(&node))
    }

    fn slot_of(&self, node: usize) -> Option<usize> {
        self.plan.nodes.iter().position(|p| p.node as usize == node)
    }

    /// Relay until the job is over: charmrun says so (or is gone), or the agent is signalled.
    fn serve(&mut self, secret: &[u8; SECRET_LEN]) {
        let mut last_signal_check = Instant::now();
        let mut last_beat = Instant::now();
        loop {
            if last_beat.elapsed() >= protocol::HEARTBEAT_INTERVAL {
                last_beat = Instant::now();
                if !self.heartbeat() {
                    return;
                }
            }
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
                Ev::Frame(s, Kind::Heartbeat, _) => {
                    self.node_heard[s] = Some(Instant::now());
                    true
                }
                Ev::Frame(s, Kind::Barrier, _) => {
                    self.node_heard[s] = Some(Instant::now());
                    self.node_at_barrier[s] = true;
                    self.barrier_step()
                }
                Ev::Frame(s, k, body) => {
                    self.node_heard[s] = Some(Instant::now());
                    let node = self.plan.nodes[s].node as usize;
                    self.up(Kind::Relay, &wire::relay(node, k, &body))
                }
                Ev::Closed(s) => {
                    let node = self.plan.nodes[s].node as usize;
                    self.node_gone[s] = true;
                    self.up(Kind::Relay, &wire::relay(node, Kind::Closed, &[]))
                        && self.barrier_step()
                }
                Ev::Exited(s, st) => {
                    self.reaped[s] = true;
                    self.node_gone[s] = true;
                    let node = self.plan.nodes[s].node as usize;
                    // Even with every node gone the agent stays until charmrun says the job
                    // is over: leaving earlier would look like an agent lost while charmrun
                    // still weighs what its nodes' ends mean.
                    self.up(
                        Kind::Relay,
                        &wire::relay(node, Kind::Exited, &st.into_raw().to_le_bytes()),
                    ) && self.barrier_step()
                }
                Ev::Up(Kind::Table, body) => {
                    for s in 0..self.conns.len() {
                        self.down(s, Kind::Table, &body);
                    }
                    for c in 0..self.children.len() {
                        self.tell_child(c, Kind::Table, &body);
                    }
                    true
                }
                Ev::Up(Kind::Relay, body) => {
                    if let Some((node, k, b)) = wire::unrelay(&body) {
                        if let Some(s) = self.slot_of(node) {
                            self.down(s, k, b);
                        } else if let Some(c) = self.child_of(node) {
                            self.tell_child(c, Kind::Relay, &body);
                        }
                    }
                    true
                }
                Ev::Child(stream, h) => {
                    let c = self
                        .children
                        .iter()
                        .position(|c| c.agent == h.agent && c.conn.is_none());
                    if let Some(c) = c.filter(|_| protocol::secrets_equal(&h.secret, secret)) {
                        self.child_joined(c, stream);
                    }
                    true
                }
                // What comes up from below goes on up as it is.
                Ev::ChildFrame(c, Kind::Relay, body) => {
                    // Only what concerns its own tree: the rest is not its to say.
                    let mine = wire::unrelay(&body)
                        .is_some_and(|(node, ..)| self.children[c].subtree.contains(&node));
                    !mine || self.up(Kind::Relay, &body)
                }
                Ev::ChildFrame(_, Kind::Lost, body) => self.up(Kind::Lost, &body),
                Ev::ChildFrame(c, Kind::Heartbeat, body) => {
                    let silent = wire::unlost(&body).map_or(Vec::new(), |(n, _)| n);
                    self.child_heard[c] = Some((Instant::now(), silent));
                    true
                }
                Ev::ChildFrame(c, Kind::Barrier, _) => {
                    self.child_at_barrier[c] = true;
                    self.barrier_step()
                }
                Ev::ChildFrame(..) => true,
                Ev::ChildClosed(c) => {
                    self.child_gone[c] = true;
                    let child = &self.children[c];
                    let why = format!("its agent on {} closed its connection", child.host);
                    let body = wire::lost(&child.subtree, &why);
                    self.up(Kind::Lost, &body) && self.barrier_step()
                }
                Ev::ShellExited(c, st) => {
                    self.children[c].reaped = true;
                    self.children[c].pid = None;
                    if self.children[c].conn.is_some() {
                        true
                    } else {
                        // Its agent never came: its nodes died before starting, by the
                        // shell's status (its own words went up on stderr).
                        let raw = st.into_raw().to_le_bytes();
                        let nodes = self.children[c].subtree.clone();
                        nodes
                            .iter()
                            .all(|&n| self.up(Kind::Relay, &wire::relay(n, Kind::Exited, &raw)))
                    }
                }
                Ev::Up(Kind::Release, _) => {
                    for s in 0..self.conns.len() {
                        self.down(s, Kind::Release, &[]);
                    }
                    for c in 0..self.children.len() {
                        self.tell_child(c, Kind::Release, &[]);
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
        tracing::debug!(target: "charmrun", node = h.node, pid = h.pid, "node connected to its agent");
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let _ = stream.set_nodelay(true);
        if let Ok(reader) = stream.try_clone() {
            let tx = self.tx.clone();
            std::thread::spawn(move || {
                read_loop(reader, tx, move |k, b| Ev::Frame(s, k, b), Ev::Closed(s))
            });
        } else {
            // Without a reader its barriers would never be seen: end it, as charmrun would.
            if let Some(pid) = self.pids[s] {
                kill_group(pid);
            }
        }
        self.conns[s] = Some(stream);
        // Its silence counts from now: a node stopped before its first heartbeat is silent.
        self.node_heard[s] = Some(Instant::now());
        self.up(
            Kind::Relay,
            &wire::relay(h.node as usize, Kind::Hello, &h.encode()),
        )
    }

    /// Tell the agent above (or charmrun) that this agent still answers, and which of the
    /// nodes in its tree have not: so charmrun handles one heartbeat per agent it started,
    /// not one per node, and still names a node that stopped (`++hang-timeout`). A node is
    /// silent when nothing came from it for two heartbeat intervals; an agent below that is
    /// silent makes its whole tree silent. Nodes not yet introduced are not counted (charmrun
    /// watches silence only once all have joined). Whether the write worked.
    fn heartbeat(&mut self) -> bool {
        let late = 2 * protocol::HEARTBEAT_INTERVAL;
        let quiet = |t: Option<Instant>| t.is_some_and(|t| t.elapsed() > late);
        let mut silent: Vec<usize> = (0..self.plan.nodes.len())
            .filter(|&s| self.conns[s].is_some() && quiet(self.node_heard[s]))
            .map(|s| self.plan.nodes[s].node as usize)
            .collect();
        for (c, child) in self.children.iter().enumerate() {
            match &self.child_heard[c] {
                Some((at, nodes)) if at.elapsed() <= late => silent.extend(nodes),
                Some(_) => silent.extend(&child.subtree),
                None => {}
            }
        }
        self.up(Kind::Heartbeat, &wire::lost(&silent, ""))
    }

    /// A barrier reached here: once every node here and every agent below has reached it,
    /// tell the agent above (or charmrun) once for all of them; its release comes back as
    /// one `RELEASE` for this agent. So charmrun handles one frame per agent it started, not
    /// one per node. Whether the upward write worked.
    fn barrier_step(&mut self) -> bool {
        let here = |at: &[bool], gone: &[bool]| at.iter().zip(gone).all(|(&a, &g)| a || g);
        let all = here(&self.node_at_barrier, &self.node_gone)
            && here(&self.child_at_barrier, &self.child_gone);
        let any =
            self.node_at_barrier.iter().any(|&b| b) || self.child_at_barrier.iter().any(|&b| b);
        if !all || !any {
            return true;
        }
        self.node_at_barrier.iter_mut().for_each(|b| *b = false);
        self.child_at_barrier.iter_mut().for_each(|b| *b = false);
        self.up(Kind::Barrier, &[])
    }

    /// Child agent `c` introduced itself on `stream`: send it its plan, read what it says.
    fn child_joined(&mut self, c: usize, mut stream: TcpStream) {
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let _ = stream.set_nodelay(true);
        let plan = self.children[c].plan.encode();
        if protocol::write_frame(&mut stream, Kind::Plan, &plan)
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
        if let Ok(reader) = stream.try_clone() {
            let tx = self.tx.clone();
            std::thread::spawn(move || {
                read_loop(
                    reader,
                    tx,
                    move |k, b| Ev::ChildFrame(c, k, b),
                    Ev::ChildClosed(c),
                )
            });
        }
        self.children[c].conn = Some(stream);
        self.child_heard[c] = Some((Instant::now(), Vec::new()));
    }

    fn tell_child(&mut self, c: usize, kind: Kind, body: &[u8]) {
        if let Some(s) = self.children.get_mut(c).and_then(|c| c.conn.as_mut()) {
            let _ = protocol::write_frame(s, kind, body).and_then(|()| s.flush());
        }
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
        tracing::debug!(target: "charmrun", "agent ending its nodes");
        for s in 0..self.conns.len() {
            self.down(s, Kind::Die, &[]);
        }
        for c in 0..self.children.len() {
            self.tell_child(c, Kind::Die, &[]);
        }
        for pid in self.pids.iter().flatten() {
            kill_group(*pid);
        }
        let start = Instant::now();
        let mut children_killed = false;
        loop {
            let nodes_left = self
                .reaped
                .iter()
                .zip(&self.pids)
                .any(|(r, p)| !r && p.is_some());
            let children_left = self.children.iter().any(|c| c.pid.is_some());
            if (!nodes_left && !children_left) || start.elapsed() >= REAP_TIMEOUT {
                break;
            }
            // Agents below end their own nodes first; their shells go after a grace.
            if !children_killed && start.elapsed() >= CHILD_GRACE {
                children_killed = true;
                for pid in self.children.iter().filter_map(|c| c.pid) {
                    kill_group(pid);
                }
            }
            match self.rx.recv_timeout(Duration::from_millis(20)) {
                Ok(Ev::Exited(s, _)) => self.reaped[s] = true,
                Ok(Ev::ShellExited(c, _)) => {
                    self.children[c].pid = None;
                    self.children[c].reaped = true;
                }
                _ => {}
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

/// Read frames from one connection (charmrun above, a child agent, a node) until it closes,
/// handing each to the agent's loop as `frame` makes it, then `closed`.
fn read_loop(
    mut r: TcpStream,
    tx: Sender<Ev>,
    frame: impl Fn(protocol::Kind, Vec<u8>) -> Ev,
    closed: Ev,
) {
    loop {
        match protocol::read_frame(&mut r) {
            Ok((k, body)) => {
                if tx.send(frame(k, body)).is_err() {
                    return;
                }
            }
            Err(_) => {
                let _ = tx.send(closed);
                return;
            }
        }
    }
}

fn accept_loop(
    listener: std::net::TcpListener,
    most: usize,
    secret: [u8; SECRET_LEN],
    tx: Sender<Ev>,
) {
    let open = Arc::new(AtomicBool::new(true));
    converse_bootstrap::door::serve(
        listener,
        most,
        64 << 10,
        converse_bootstrap::door::INTRO_DEADLINE,
        open,
        move |s, intro| {
            let ev = match intro {
                Ok((Kind::Hello, body)) => Hello::decode(&body)
                    .filter(|h| protocol::secrets_equal(&h.secret, &secret))
                    .map(|h| Ev::Hello(s, h)),
                Ok((Kind::Agent, body)) => AgentHello::decode(&body)
                    .filter(|h| protocol::secrets_equal(&h.secret, &secret))
                    .map(|h| Ev::Child(s, h)),
                _ => None,
            };
            if let Some(ev) = ev {
                let _ = tx.send(ev);
            }
        },
    );
}
