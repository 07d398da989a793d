//! Running one job: start the nodes, gather their introductions, hand out the node table,
//! serve barriers, and end the job — normally when every node has left, or at once when a
//! node crashes, aborts, the time limit passes or charmrun is interrupted.

use crate::nodelist::Host;
use crate::opts::Opts;
use crate::output;
use crate::protocol::{self, Hello, Kind, SECRET_LEN};
use crate::{client, spawn};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use machine::{NodeInfo, NodeTable};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Pending connections the control socket holds: a whole job may connect at once, and a small
/// backlog (Charm++'s is 5) turns a burst into retries that take seconds.
const BACKLOG: i32 = 4096;

/// How long a connection may take to introduce itself.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the job loop looks at signals and deadlines when no event comes (events — frames,
/// connections, process exits — wake it at once).
const TICK: Duration = Duration::from_millis(20);

/// Between a node's process exiting and its connection closing (or the reverse), how long to
/// wait for the other half, so the verdict sees every frame it sent and how it died.
const LOST_GRACE: Duration = Duration::from_secs(3);

/// After a node aborts, how long to look for a node that died first: a peer's death makes its
/// peers abort, and the message should name the node that died, not one that noticed.
const ABORT_GRACE: Duration = Duration::from_millis(750);

/// Signal that interrupted charmrun (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

enum Event {
    /// The program that embeds the launcher gives up on the job.
    Cancel(String),
    Hello(TcpStream, Hello),
    Stranger(SocketAddr, String),
    Frame(usize, Kind, Vec<u8>),
    Closed(usize),
    Exited(usize, ExitStatus),
}

#[derive(Default)]
struct Node {
    host: String,
    /// Process (and process group) id of what was started for it.
    pid: Option<u32>,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
    control: Option<TcpStream>,
    joined: bool,
    /// It said it leaves normally, with this code.
    ended: Option<i32>,
    /// Its control connection closed: every frame it sent has been seen.
    closed_at: Option<Instant>,
    /// It asked to abort the job, saying why, at this time.
    aborted: Option<(String, Instant)>,
    at_barrier: bool,
    /// Left normally and counted.
    settled: bool,
    /// Its introduction, until the table is built.
    addr_info: Option<Hello>,
    /// It is the process that runs the launcher (see [`start_embedded`]): there is no child
    /// to watch, kill or reap.
    in_process: bool,
}

/// Why the job ended early.
struct Failure {
    code: i32,
    message: Option<String>,
}

impl Failure {
    fn new(code: i32, message: String) -> Failure {
        Failure {
            code,
            message: Some(message),
        }
    }
}

/// What to start for one node of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeStart {
    /// A process running `program args`, on `host` through its remote shell, or here
    /// (`None`).
    Process {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Where.
        host: Option<Host>,
    },
    /// The process that runs the launcher joins the job as this node itself (see
    /// [`start_embedded`]).
    InProcess,
}

/// What every node of a job started from a command line runs: `opts.program` on the hosts
/// round-robin (or all here).
pub fn plan_of(opts: &Opts, hosts: Option<&[Host]>) -> Vec<NodeStart> {
    let mut args = opts.args.clone();
    if opts.ppn > 1 {
        args.extend(["+ppn".to_string(), opts.ppn.to_string()]);
    }
    (0..opts.pes / opts.ppn)
        .map(|i| NodeStart::Process {
            program: opts.program.clone(),
            args: args.clone(),
            host: hosts
                .filter(|h| !h.is_empty())
                .map(|h| h[i % h.len()].clone()),
        })
        .collect()
}

/// Run the job; returns the exit code charmrun should exit with.
pub fn run(opts: &Opts, hosts: Option<&[Host]>) -> i32 {
    install_signal_handlers();
    let plan = plan_of(opts, hosts);
    match Job::start(opts, &plan) {
        Ok(mut job) => job.run(),
        Err(failed) => {
            let (mut job, e) = *failed;
            eprintln!("charmrun: {e}");
            job.abandon();
            1
        }
    }
}

struct Job<'a> {
    opts: &'a Opts,
    nodes: Vec<Node>,
    events: Receiver<Event>,
    tx: Sender<Event>,
    outputs: Vec<JoinHandle<()>>,
    started: Instant,
    strangers: usize,
    job_code: i32,
    /// The job's tag: its files in /dev/shm carry it.
    tag: String,
    /// What each in-process node joins with.
    in_process: Vec<client::LaunchEnv>,
    /// Cleared to end the accepting thread.
    accepting: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The control socket's port.
    port: u16,
}

impl<'a> Job<'a> {
    /// Open the control socket and start every node. On failure, the job so far is returned
    /// with the error so that what was started can be ended.
    fn start(opts: &'a Opts, plan: &[NodeStart]) -> Result<Job<'a>, Box<(Job<'a>, String)>> {
        let (tx, events) = crossbeam_channel::unbounded();
        let n = plan.len();
        let mut job = Job {
            opts,
            nodes: Vec::with_capacity(n),
            events,
            tx,
            outputs: Vec::with_capacity(2 * n),
            started: Instant::now(),
            strangers: 0,
            job_code: 0,
            tag: String::new(),
            in_process: Vec::new(),
            accepting: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
            port: 0,
        };
        job.tag = match protocol::new_tag() {
            Ok(t) => t,
            Err(e) => return Err(Box::new((job, format!("cannot make a job tag: {e}")))),
        };
        let secret = match protocol::new_secret() {
            Ok(s) => s,
            Err(e) => return Err(Box::new((job, format!("cannot make a job secret: {e}")))),
        };
        let listener = match crate::net::listener(Ipv4Addr::UNSPECIFIED.into(), BACKLOG) {
            Ok(l) => l,
            Err(e) => {
                return Err(Box::new((
                    job,
                    format!("cannot open the control socket: {e}"),
                )))
            }
        };
        let port = listener.local_addr().map_or(0, |a| a.port());
        job.port = port;
        {
            let tx = job.tx.clone();
            let accepting = job.accepting.clone();
            std::thread::spawn(move || accept_loop(listener, secret, tx, accepting));
        }
        let cwd = match std::env::current_dir() {
            Ok(d) => d.display().to_string(),
            Err(e) => return Err(Box::new((job, format!("no current directory: {e}")))),
        };
        if opts.verbose {
            eprintln!(
                "charmrun: control port {port}, job tag {}, starting {n} node(s)",
                job.tag
            );
        }
        // charmrun's address as each host reaches it. In a job that spans hosts, a host named
        // for this machine's loopback (localhost, Debian's 127.0.1.1 entry) must still get an
        // address the other hosts can reach, since its nodes listen where they reach charmrun.
        let mut routes: Vec<IpAddr> = Vec::with_capacity(n);
        let mut known: std::collections::HashMap<&str, IpAddr> = std::collections::HashMap::new();
        for (i, start) in plan.iter().enumerate() {
            let ip = match start {
                NodeStart::Process { host: Some(h), .. } => match known.get(h.name.as_str()) {
                    Some(ip) => *ip,
                    None => match spawn::address_towards(&h.name) {
                        Ok(ip) => {
                            known.insert(&h.name, ip);
                            ip
                        }
                        Err(e) => {
                            let msg = format!("host {} (node {i}) is unreachable: {e}", h.name);
                            return Err(Box::new((job, msg)));
                        }
                    },
                },
                _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
            };
            routes.push(ip);
        }
        if let Some(&outward) = routes.iter().find(|a| !a.is_loopback()) {
            for r in routes.iter_mut().filter(|a| a.is_loopback()) {
                *r = outward;
            }
        }
        for (i, start) in plan.iter().enumerate() {
            let addr = routes[i];
            let (program, args, host) = match start {
                NodeStart::InProcess => {
                    job.in_process.push(client::LaunchEnv {
                        charmrun: SocketAddr::new(addr, port).to_string(),
                        secret,
                        node: i,
                        num_nodes: n,
                        job: job.tag.clone(),
                        embedded: true,
                    });
                    job.nodes.push(Node {
                        host: "localhost".into(),
                        in_process: true,
                        ..Node::default()
                    });
                    continue;
                }
                NodeStart::Process {
                    program,
                    args,
                    host,
                } => (program, args, host.as_ref()),
            };
            let name = host.map_or_else(|| "localhost".to_string(), |h| h.name.clone());
            let secret_hex = protocol::secret_to_hex(&secret);
            let mut env = vec![
                (
                    client::ENV_CHARMRUN.to_string(),
                    SocketAddr::new(addr, port).to_string(),
                ),
                (client::ENV_NODE.to_string(), i.to_string()),
                (client::ENV_NODES.to_string(), n.to_string()),
                (client::ENV_JOB.to_string(), job.tag.clone()),
            ];
            let child = match host {
                None => {
                    // Another user cannot read a local process's environment.
                    env.push((client::ENV_SECRET.to_string(), secret_hex));
                    spawn::local(program, args, &env)
                }
                Some(h) => {
                    let shell = h.shell.as_deref().unwrap_or(opts.remote_shell());
                    let secret = (client::ENV_SECRET, secret_hex.as_str());
                    spawn::remote(shell, &h.name, &cwd, program, args, &env, secret)
                }
            };
            let child = match child {
                Ok(c) => c,
                Err(e) => {
                    return Err(Box::new((
                        job,
                        format!("cannot start node {i} on {name}: {e}"),
                    )))
                }
            };
            let prefix = if opts.prefix {
                job.label(i) + ": "
            } else {
                String::new()
            };
            let pid = child.id();
            let tx = job.tx.clone();
            // One thread per node passes its output on and reports its exit at once.
            let watcher = output::watch(child, prefix, move |st| {
                let _ = tx.send(Event::Exited(i, st));
            });
            match watcher {
                Ok(h) => job.outputs.push(h),
                Err(e) => return Err(Box::new((job, format!("cannot watch node {i}: {e}")))),
            }
            job.nodes.push(Node {
                host: name,
                pid: Some(pid),
                ..Node::default()
            });
        }
        Ok(job)
    }

    /// "PE 3", or "node 1 (PEs 2-3)" with several PEs per node.
    fn label(&self, node: usize) -> String {
        let ppn = self.opts.ppn;
        if ppn == 1 {
            format!("PE {node}")
        } else {
            format!("node {node} (PEs {}-{})", node * ppn, node * ppn + ppn - 1)
        }
    }

    fn label_at(&self, node: usize) -> String {
        let host = self.nodes.get(node).map_or("?", |n| n.host.as_str());
        format!("{} on {host}", self.label(node))
    }

    fn run(&mut self) -> i32 {
        let code = match self.event_loop() {
            Ok(code) => code,
            Err(f) => {
                if let Some(m) = &f.message {
                    eprintln!("charmrun: {m}");
                }
                f.code
            }
        };
        // Whatever still runs (after a failure, or a node that left but lingers) is ended and
        // reaped; after a normal end this finds nothing to do.
        self.abandon();
        self.stop_accepting();
        self.remove_job_files();
        self.drain_output();
        if self.opts.verbose {
            eprintln!(
                "charmrun: job ended with code {code} after {:.3} s ({} stranger connection(s) refused)",
                self.started.elapsed().as_secs_f64(),
                self.strangers
            );
        }
        code
    }

    /// Serve the job until every node has left (`Ok` with the job's code) or it must end.
    fn event_loop(&mut self) -> Result<i32, Failure> {
        let deadline = self.started + self.opts.timeout;
        let mut table_sent = false;
        loop {
            self.check_signals_and_limit()?;
            if !table_sent && Instant::now() >= deadline {
                let missing: Vec<String> = (0..self.nodes.len())
                    .filter(|&i| !self.nodes[i].joined)
                    .map(|i| self.label_at(i))
                    .collect();
                return Err(Failure::new(
                    1,
                    format!(
                        "start-up timed out after {:.0} s: {} never connected: {}",
                        self.opts.timeout.as_secs_f64(),
                        if missing.len() == 1 {
                            "this node"
                        } else {
                            "these nodes"
                        },
                        missing.join(", ")
                    ),
                ));
            }
            match self.events.recv_timeout(TICK) {
                Ok(e) => self.on_event(e)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Failure::new(1, "internal: event channel closed".into()))
                }
            }
            if !table_sent && self.nodes.iter().all(|n| n.joined) {
                self.send_table()?;
                table_sent = true;
            }
            if let Some(code) = self.verdict()? {
                return Ok(code);
            }
        }
    }

    fn on_event(&mut self, e: Event) -> Result<(), Failure> {
        match e {
            Event::Cancel(why) => return Err(Failure::new(1, why)),
            Event::Hello(stream, hello) => {
                let i = hello.node as usize;
                if i >= self.nodes.len() || self.nodes[i].joined {
                    self.strangers += 1;
                    return Ok(());
                }
                if self.opts.verbose {
                    let from = stream
                        .peer_addr()
                        .map_or("?".to_string(), |a| a.ip().to_string());
                    // The info is the layer's business; shown only when it is printable text.
                    let info = std::str::from_utf8(&hello.info)
                        .ok()
                        .filter(|t| t.chars().all(|c| c.is_ascii_graphic()))
                        .map_or(String::new(), |t| format!(", info {t}"));
                    eprintln!(
                        "charmrun: {} connected from {from} (pid {}, host {}{info})",
                        self.label(i),
                        hello.pid,
                        hello.host
                    );
                }
                let n = &mut self.nodes[i];
                n.control = Some(stream);
                n.joined = true;
                n.addr_info = Some(hello);
            }
            Event::Stranger(addr, why) => {
                self.strangers += 1;
                if self.opts.verbose {
                    eprintln!("charmrun: refused a connection from {addr}: {why}");
                }
            }
            Event::Frame(i, Kind::Barrier, _) => {
                self.nodes[i].at_barrier = true;
                if self.nodes.iter().all(|n| n.at_barrier) {
                    for j in 0..self.nodes.len() {
                        self.nodes[j].at_barrier = false;
                        self.send(j, Kind::Release, &[]);
                    }
                }
            }
            Event::Frame(i, Kind::Ending, body) => {
                let code = body
                    .first_chunk::<4>()
                    .map_or(1, |b| i32::from_le_bytes(*b));
                self.nodes[i].ended = Some(code);
            }
            Event::Frame(i, Kind::Abort, reason) => {
                if self.nodes[i].aborted.is_none() {
                    let reason = String::from_utf8_lossy(&reason).into_owned();
                    self.nodes[i].aborted = Some((reason, Instant::now()));
                }
            }
            Event::Frame(..) => {}
            Event::Closed(i) => self.nodes[i].closed_at = Some(Instant::now()),
            Event::Exited(i, st) => {
                self.nodes[i].status = Some(st);
                self.nodes[i].exited_at = Some(Instant::now());
            }
        }
        Ok(())
    }

    /// Decide what the nodes' states mean: `Some(code)` when every node has left normally,
    /// an error when the job must end now, `None` to keep going.
    ///
    /// A node that died is reported before the nodes that noticed it and aborted: their
    /// aborts are held for [`ABORT_GRACE`] in case the cause shows up.
    fn verdict(&mut self) -> Result<Option<i32>, Failure> {
        let mut done = 0;
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if n.settled {
                done += 1;
                continue;
            }
            if n.aborted.is_some() {
                continue;
            }
            if n.in_process {
                // No process to wait for: its word that it leaves is all there will be.
                if let Some(code) = n.ended {
                    if self.job_code == 0 {
                        self.job_code = code;
                    }
                    self.nodes[i].settled = true;
                    done += 1;
                } else if n.closed_at.is_some_and(|t| t.elapsed() > LOST_GRACE) {
                    return Err(Failure::new(
                        1,
                        format!("lost contact with {} (in this process)", self.label_at(i)),
                    ));
                }
                continue;
            }
            let Some(st) = n.status else {
                if let (Some(code), Some(t)) = (n.ended, n.closed_at) {
                    // It left the job but its process lingers (a child of it keeping a remote
                    // shell open, say): count it as ended; it is killed when the job ends.
                    if t.elapsed() > LOST_GRACE {
                        if self.job_code == 0 {
                            self.job_code = code;
                        }
                        self.nodes[i].settled = true;
                        done += 1;
                    }
                    continue;
                }
                if n.closed_at.is_some_and(|t| t.elapsed() > LOST_GRACE) && n.ended.is_none() {
                    return Err(Failure::new(
                        1,
                        format!(
                            "lost contact with {} (its connection to charmrun closed); ending the job",
                            self.label_at(i)
                        ),
                    ));
                }
                continue;
            };
            if !n.joined {
                return Err(Failure::new(
                    exit_code(st).max(1),
                    format!(
                        "{} {} before connecting to charmrun",
                        self.label_at(i),
                        describe(st)
                    ),
                ));
            }
            match n.ended {
                Some(_) if st.signal().is_none() => {
                    if self.job_code == 0 {
                        self.job_code = exit_code(st);
                    }
                    self.nodes[i].settled = true;
                    done += 1;
                }
                Some(_) => {
                    return Err(Failure::new(
                        exit_code(st),
                        format!(
                            "{} {} while leaving the job; ending the job",
                            self.label_at(i),
                            describe(st)
                        ),
                    ))
                }
                None => {
                    // Its last frames may still be on the way: decide once the connection has
                    // closed too, or after a grace period.
                    let waited = n.exited_at.map_or(Duration::ZERO, |t| t.elapsed());
                    if n.closed_at.is_some() || waited > LOST_GRACE {
                        let code = exit_code(st);
                        return Err(Failure::new(
                            if code == 0 { 1 } else { code },
                            format!(
                                "{} {} before the job ended; ending the job",
                                self.label_at(i),
                                describe(st)
                            ),
                        ));
                    }
                }
            }
        }
        if let Some((i, (reason, at))) = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.aborted.as_ref().map(|a| (i, a)))
            .min_by_key(|(_, (_, at))| *at)
        {
            if at.elapsed() > ABORT_GRACE {
                return Err(Failure::new(
                    1,
                    format!("{} aborted the job: {reason}", self.label_at(i)),
                ));
            }
        }
        Ok((done == self.nodes.len()).then_some(self.job_code))
    }

    fn send_table(&mut self) -> Result<(), Failure> {
        let ppn = self.opts.ppn;
        let mut infos = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter_mut().enumerate() {
            let h = n.addr_info.take().ok_or_else(|| {
                Failure::new(1, format!("internal: node {i} has no introduction"))
            })?;
            infos.push(NodeInfo {
                first_pe: i * ppn,
                num_pes: ppn,
                host: h.host,
                addr: h.info,
            });
        }
        let table = NodeTable::new(infos)
            .map_err(|e| Failure::new(1, format!("cannot build the node table: {e}")))?
            .encode();
        for i in 0..self.nodes.len() {
            self.send(i, Kind::Table, &table);
            if let Some(reader) = self.nodes[i]
                .control
                .as_ref()
                .and_then(|c| c.try_clone().ok())
            {
                let tx = self.tx.clone();
                std::thread::spawn(move || read_loop(i, reader, tx));
            }
        }
        if self.opts.verbose {
            eprintln!(
                "charmrun: all {} node(s) connected in {:.1} ms",
                self.nodes.len(),
                self.started.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(())
    }

    fn check_signals_and_limit(&self) -> Result<(), Failure> {
        let sig = SIGNALLED.load(Ordering::SeqCst);
        if sig != 0 {
            return Err(Failure::new(
                128 + sig,
                format!("interrupted by signal {sig}; ending the job"),
            ));
        }
        if let Some(limit) = self.opts.timelimit {
            if self.started.elapsed() >= limit {
                return Err(Failure::new(
                    124,
                    format!(
                        "++timelimit of {} s reached; ending the job",
                        limit.as_secs_f64()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn send(&mut self, i: usize, kind: Kind, body: &[u8]) {
        if let Some(c) = self.nodes[i].control.as_mut() {
            // A node that cannot be told anything more is handled when its process exits.
            let _ = protocol::write_frame(c, kind, body).and_then(|()| c.flush());
        }
    }

    /// End the job now: tell every node to die, kill what was started here (whole process
    /// groups), and wait until every process has been reaped.
    fn abandon(&mut self) {
        for i in 0..self.nodes.len() {
            // A node in this very process that is leaving normally must not be told to die:
            // that would end the process the job was embedded in.
            if self.nodes[i].in_process && self.nodes[i].ended.is_some() {
                continue;
            }
            self.send(i, Kind::Die, &[]);
        }
        for n in &self.nodes {
            if let (None, Some(pid)) = (n.status, n.pid) {
                let pgid = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .nodes
            .iter()
            .any(|n| n.pid.is_some() && n.status.is_none())
            && Instant::now() < deadline
        {
            if let Ok(Event::Exited(i, st)) = self.events.recv_timeout(TICK) {
                self.nodes[i].status = Some(st);
            }
        }
    }

    /// End the accepting thread and close the control socket: a launcher embedded in a
    /// program that runs many jobs must not keep one of each.
    fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        // Wake the thread blocked in `accept` with a connection of our own; it sees the flag
        // and leaves, closing the socket.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.port),
            Duration::from_secs(1),
        );
    }

    /// Remove the job's files from /dev/shm: whatever a layer made there under the job's tag
    /// and did not remove, because a node died or because it never got that far.
    fn remove_job_files(&self) {
        let prefix = protocol::shm_prefix(&self.tag);
        let Ok(dir) = std::fs::read_dir("/dev/shm") else {
            return;
        };
        for e in dir.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Wait for the output threads to pass on everything the nodes printed. A pipe kept open by
    /// something a node left behind must not keep charmrun alive forever.
    fn drain_output(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        for h in self.outputs.drain(..) {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

/// Largest introduction accepted from a connection that has not proved the secret yet.
const MAX_HELLO: usize = 64 << 10;

/// How long a write to a node may block: charmrun's loop must stay responsive to signals and
/// time limits even if a node stops reading.
const CONTROL_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

fn accept_loop(
    listener: TcpListener,
    secret: [u8; SECRET_LEN],
    tx: Sender<Event>,
    accepting: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    for conn in listener.incoming() {
        if !accepting.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else {
            // Out of descriptors and the like: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let tx = tx.clone();
        // One thread per connection, so a stranger that sends nothing delays nobody.
        std::thread::spawn(move || {
            let peer = stream
                .peer_addr()
                .unwrap_or_else(|_| SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0));
            let _ = stream.set_read_timeout(Some(HELLO_TIMEOUT));
            let mut s = stream;
            let verdict = match protocol::read_frame_limited(&mut s, MAX_HELLO) {
                Ok((Kind::Hello, body)) => match Hello::decode(&body) {
                    Some(h) if protocol::secrets_equal(&h.secret, &secret) => Ok(h),
                    Some(_) => Err("wrong job secret".to_string()),
                    None => Err("malformed introduction".to_string()),
                },
                Ok((k, _)) => Err(format!("unexpected {k:?} before introduction")),
                Err(e) => Err(format!("no introduction: {e}")),
            };
            let _ = match verdict {
                Ok(h) => {
                    let _ = s.set_read_timeout(None);
                    let _ = s.set_write_timeout(Some(CONTROL_WRITE_TIMEOUT));
                    let _ = s.set_nodelay(true);
                    tx.send(Event::Hello(s, h))
                }
                Err(why) => tx.send(Event::Stranger(peer, why)),
            };
        });
    }
}

fn read_loop(node: usize, mut r: TcpStream, tx: Sender<Event>) {
    loop {
        match protocol::read_frame(&mut r) {
            Ok((k, body)) => {
                if tx.send(Event::Frame(node, k, body)).is_err() {
                    return;
                }
            }
            Err(_) => {
                let _ = tx.send(Event::Closed(node));
                return;
            }
        }
    }
}

/// A job run by a launcher inside the calling program, which joins it as one or more of its
/// nodes ([`NodeStart::InProcess`]): what a front-end that makes its own network uses
/// (MRNet's `CreateNetworkFE`). Nodes in this process join through [`client`] with the
/// [`LaunchEnv`](client::LaunchEnv)s of [`Embedded::envs`], handed to the runtime as its launch context ([`machine::BootConfig::launch`]).
///
/// The launcher runs on a thread of its own; no signal handler is installed (the program's
/// are its own). At the end it does what charmrun does, except that it never tells a node in
/// this process that leaves normally to die.
pub struct Embedded {
    envs: Vec<client::LaunchEnv>,
    cancel: Sender<Event>,
    handle: Option<JoinHandle<i32>>,
}

impl Embedded {
    /// What each in-process node joins with, in node order.
    pub fn envs(&self) -> &[client::LaunchEnv] {
        &self.envs
    }

    /// End the job now (the program could not join it, say): every process started is
    /// ended; `why` is printed.
    pub fn cancel(&self, why: &str) {
        let _ = self.cancel.send(Event::Cancel(why.to_owned()));
    }

    /// Wait until the job is over and every process it started has been reaped; its code.
    pub fn wait(mut self) -> i32 {
        self.handle.take().map_or(1, |h| h.join().unwrap_or(1))
    }
}

impl Drop for Embedded {
    /// A job nobody waits for is cancelled and waited for: no process outlives it.
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = self
                .cancel
                .send(Event::Cancel("the job was dropped".into()));
            let _ = h.join();
        }
    }
}

/// Start a job of `plan.len()` nodes run by a launcher on a thread of this process.
///
/// # Errors
/// A sentence saying why the job could not start (a program that cannot be started, a host
/// that cannot be reached); whatever was started is ended first.
pub fn start_embedded(opts: Opts, plan: Vec<NodeStart>) -> Result<Embedded, String> {
    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let handle = std::thread::Builder::new()
        .name("launcher".into())
        .spawn(move || match Job::start(&opts, &plan) {
            Ok(mut job) => {
                let _ = ready_tx.send(Ok((job.in_process.clone(), job.tx.clone())));
                job.run()
            }
            Err(failed) => {
                let (mut job, e) = *failed;
                job.abandon();
                job.stop_accepting();
                let _ = ready_tx.send(Err(e));
                1
            }
        })
        .map_err(|e| format!("cannot start the launcher thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok((envs, cancel))) => Ok(Embedded {
            envs,
            cancel,
            handle: Some(handle),
        }),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err("the launcher thread ended before starting the job".into())
        }
    }
}

/// The shell convention: the exit code, or 128 + the signal.
pub(crate) fn exit_code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => {
            let name = nix::sys::signal::Signal::try_from(s).map_or("?", |s| s.as_str());
            format!("was killed by signal {s} ({name})")
        }
        _ => "ended".into(),
    }
}

fn install_signal_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let _ = unsafe { sigaction(s, &act) };
    }
}
