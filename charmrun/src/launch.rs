//! Running one job: start the nodes, gather their introductions, hand out the node table,
//! serve barriers, and end the job — normally when every node has left, or at once when a
//! node crashes, aborts, the time limit passes or charmrun is interrupted.

use crate::nodelist::Host;
use crate::opts::Opts;
use crate::output::{self, Stream};
use crate::protocol::{self, Hello, Kind, SECRET_LEN};
use crate::{client, spawn};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use machine::{NodeInfo, NodeTable};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Pending connections the control socket holds: a whole job may connect at once, and a small
/// backlog (Charm++'s is 5) turns a burst into retries that take seconds.
const BACKLOG: i32 = 4096;

/// How long a connection may take to introduce itself.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the job loop looks at child processes, signals and deadlines.
const TICK: Duration = Duration::from_millis(20);

/// After a node's control connection drops, how long to wait for its process to exit (so the
/// message can say how it died) before declaring it lost.
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
    Hello(TcpStream, Hello),
    Stranger(SocketAddr, String),
    Frame(usize, Kind, Vec<u8>),
    Closed(usize),
}

struct Node {
    host: String,
    child: Option<Child>,
    status: Option<ExitStatus>,
    control: Option<TcpStream>,
    ended: Option<i32>,
    at_barrier: bool,
    /// Its control connection closed: every frame it sent has been seen.
    closed: bool,
    /// It asked to abort the job.
    aborted: bool,
    lost_at: Option<Instant>,
    exited_at: Option<Instant>,
}

/// Why the job ended early.
struct Failure {
    code: i32,
    message: Option<String>,
}

/// Run the job; returns the exit code charmrun should exit with.
pub fn run(opts: &Opts, hosts: Option<&[Host]>) -> i32 {
    install_signal_handlers();
    match Job::start(opts, hosts) {
        Ok(mut job) => job.run(),
        Err(e) => {
            eprintln!("charmrun: {e}");
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
}

impl<'a> Job<'a> {
    fn start(opts: &'a Opts, hosts: Option<&[Host]>) -> Result<Job<'a>, String> {
        let secret =
            protocol::new_secret().map_err(|e| format!("cannot make a job secret: {e}"))?;
        let listener = crate::net::listener(Ipv4Addr::UNSPECIFIED.into(), BACKLOG)
            .map_err(|e| format!("cannot open the control socket: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("control socket: {e}"))?
            .port();
        let (tx, events) = crossbeam_channel::unbounded();
        {
            let tx = tx.clone();
            std::thread::spawn(move || accept_loop(listener, secret, tx));
        }
        let n = opts.pes / opts.ppn;
        let cwd = std::env::current_dir()
            .map_err(|e| format!("no current directory: {e}"))?
            .display()
            .to_string();
        let mut job = Job {
            opts,
            nodes: Vec::with_capacity(n),
            events,
            tx,
            outputs: Vec::with_capacity(2 * n),
            started: Instant::now(),
            strangers: 0,
        };
        if opts.verbose {
            eprintln!("charmrun: control port {port}, starting {n} node(s)");
        }
        let mut args = opts.args.clone();
        if opts.ppn > 1 {
            args.extend(["+ppn".to_string(), opts.ppn.to_string()]);
        }
        for i in 0..n {
            let host = hosts.map(|h| &h[i % h.len()]);
            let (name, addr) = match host {
                None => ("localhost".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
                Some(h) => {
                    let ip = spawn::address_towards(&h.name).map_err(|e| {
                        job.abandon();
                        format!("host {} (node {i}) is unreachable: {e}", h.name)
                    })?;
                    (h.name.clone(), ip)
                }
            };
            let env = vec![
                (
                    client::ENV_CHARMRUN.to_string(),
                    SocketAddr::new(addr, port).to_string(),
                ),
                (
                    client::ENV_SECRET.to_string(),
                    protocol::secret_to_hex(&secret),
                ),
                (client::ENV_NODE.to_string(), i.to_string()),
                (client::ENV_NODES.to_string(), n.to_string()),
            ];
            let child = match host {
                None => spawn::local(&opts.program, &args, &env),
                Some(h) => {
                    let shell = h.shell.as_deref().unwrap_or(&opts.remote_shell);
                    spawn::remote(shell, &h.name, &cwd, &opts.program, &args, &env)
                }
            };
            let mut child = child.map_err(|e| {
                job.abandon();
                format!("cannot start node {i} on {name}: {e}")
            })?;
            let prefix = if opts.prefix {
                job.label(i) + ": "
            } else {
                String::new()
            };
            if let Some(out) = child.stdout.take() {
                job.outputs
                    .push(output::forward(out, Stream::Out, prefix.clone()));
            }
            if let Some(err) = child.stderr.take() {
                job.outputs.push(output::forward(err, Stream::Err, prefix));
            }
            job.nodes.push(Node {
                host: name,
                child: Some(child),
                status: None,
                control: None,
                ended: None,
                at_barrier: false,
                closed: false,
                aborted: false,
                lost_at: None,
                exited_at: None,
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
        let outcome = self.startup().and_then(|()| self.serve());
        let code = match outcome {
            Ok(code) => code,
            Err(f) => {
                if let Some(m) = &f.message {
                    eprintln!("charmrun: {m}");
                }
                self.abandon();
                f.code
            }
        };
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

    /// Until every node has introduced itself; then send the table.
    fn startup(&mut self) -> Result<(), Failure> {
        let deadline = self.started + self.opts.timeout;
        let mut infos: Vec<Option<Hello>> = vec![None; self.nodes.len()];
        let mut joined = 0;
        while joined < self.nodes.len() {
            self.check_signals_and_limit()?;
            if Instant::now() >= deadline {
                let missing: Vec<String> = (0..self.nodes.len())
                    .filter(|&i| infos[i].is_none())
                    .map(|i| self.label_at(i))
                    .collect();
                return Err(Failure {
                    code: 1,
                    message: Some(format!(
                        "start-up timed out after {:.0} s: {} never connected: {}",
                        self.opts.timeout.as_secs_f64(),
                        if missing.len() == 1 {
                            "this node"
                        } else {
                            "these nodes"
                        },
                        missing.join(", ")
                    )),
                });
            }
            match self.events.recv_timeout(TICK) {
                Ok(Event::Hello(stream, hello)) => {
                    let i = hello.node as usize;
                    if i >= self.nodes.len() || infos[i].is_some() {
                        self.strangers += 1;
                        continue;
                    }
                    if self.opts.verbose {
                        eprintln!(
                            "charmrun: {} connected (pid {}, {})",
                            self.label(i),
                            hello.pid,
                            hello.host
                        );
                    }
                    self.nodes[i].control = Some(stream);
                    infos[i] = Some(hello);
                    joined += 1;
                }
                Ok(Event::Stranger(addr, why)) => {
                    self.strangers += 1;
                    if self.opts.verbose {
                        eprintln!("charmrun: refused a connection from {addr}: {why}");
                    }
                }
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Failure {
                        code: 1,
                        message: Some("the control socket stopped accepting".into()),
                    })
                }
            }
            // A node that exits before joining will never join.
            for i in 0..self.nodes.len() {
                if infos[i].is_none() {
                    if let Some(st) = self.poll_child(i) {
                        return Err(Failure {
                            code: exit_code(st).max(1),
                            message: Some(format!(
                                "{} {} before connecting to charmrun",
                                self.label_at(i),
                                describe(st)
                            )),
                        });
                    }
                }
            }
        }
        let ppn = self.opts.ppn;
        let table = NodeTable::new(
            infos
                .into_iter()
                .enumerate()
                .map(|(i, h)| {
                    let h = h.unwrap_or_else(|| unreachable!("every node joined"));
                    NodeInfo {
                        first_pe: i * ppn,
                        num_pes: ppn,
                        host: h.host,
                        addr: h.info,
                    }
                })
                .collect(),
        )
        .map_err(|e| Failure {
            code: 1,
            message: Some(format!("cannot build the node table: {e}")),
        })?
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

    /// Serve the running job until every node has exited.
    fn serve(&mut self) -> Result<i32, Failure> {
        let mut job_code = 0;
        let mut aborted: Option<(usize, String, Instant)> = None;
        loop {
            self.check_signals_and_limit()?;
            if let Some((i, reason, at)) = &aborted {
                if at.elapsed() > ABORT_GRACE {
                    return Err(Failure {
                        code: 1,
                        message: Some(format!("{} aborted the job: {reason}", self.label_at(*i))),
                    });
                }
            }
            match self.events.recv_timeout(TICK) {
                Ok(Event::Frame(i, Kind::Barrier, _)) => {
                    self.nodes[i].at_barrier = true;
                    if self.nodes.iter().all(|n| n.at_barrier) {
                        for j in 0..self.nodes.len() {
                            self.nodes[j].at_barrier = false;
                            self.send(j, Kind::Release, &[]);
                        }
                    }
                }
                Ok(Event::Frame(i, Kind::Ending, body)) => {
                    let code = body
                        .first_chunk::<4>()
                        .map_or(1, |b| i32::from_le_bytes(*b));
                    self.nodes[i].ended = Some(code);
                }
                Ok(Event::Frame(i, Kind::Abort, reason)) => {
                    self.nodes[i].aborted = true;
                    if aborted.is_none() {
                        let reason = String::from_utf8_lossy(&reason).into_owned();
                        aborted = Some((i, reason, Instant::now()));
                    }
                }
                Ok(Event::Closed(i)) => {
                    self.nodes[i].closed = true;
                    if self.nodes[i].ended.is_none() && self.nodes[i].status.is_none() {
                        self.nodes[i].lost_at = Some(Instant::now());
                    }
                }
                Ok(Event::Stranger(addr, why)) => {
                    self.strangers += 1;
                    if self.opts.verbose {
                        eprintln!("charmrun: refused a connection from {addr}: {why}");
                    }
                }
                Ok(Event::Hello(..)) => self.strangers += 1,
                Ok(Event::Frame(..)) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {}
            }
            let mut running = 0;
            for i in 0..self.nodes.len() {
                if self.nodes[i].aborted {
                    // It said why it is leaving; the abort is reported above, after the grace.
                    let _ = self.poll_child(i);
                    running += 1;
                    continue;
                }
                if self.nodes[i].exited_at.is_some() && self.nodes[i].ended.is_none() {
                    // Exited: but its last frames (ENDING) may still be on their way. Decide
                    // once its connection has closed, or after a grace period.
                    let waited = self.nodes[i]
                        .exited_at
                        .map_or(Duration::ZERO, |t| t.elapsed());
                    if self.nodes[i].closed || waited > LOST_GRACE {
                        let st = self.nodes[i].status.unwrap_or_else(ExitStatus::default);
                        let code = exit_code(st);
                        return Err(Failure {
                            code: if code == 0 { 1 } else { code },
                            message: Some(format!(
                                "{} {} before the job ended; ending the job",
                                self.label_at(i),
                                describe(st)
                            )),
                        });
                    }
                    running += 1;
                    continue;
                }
                if self.nodes[i].status.is_some() {
                    continue;
                }
                let Some(st) = self.poll_child(i) else {
                    running += 1;
                    if let Some(t) = self.nodes[i].lost_at {
                        if t.elapsed() > LOST_GRACE {
                            return Err(Failure {
                                code: 1,
                                message: Some(format!(
                                    "lost contact with {} (its connection to charmrun closed); ending the job",
                                    self.label_at(i)
                                )),
                            });
                        }
                    }
                    continue;
                };
                match self.nodes[i].ended {
                    Some(_) if st.signal().is_none() => {
                        if job_code == 0 {
                            job_code = exit_code(st);
                        }
                    }
                    Some(_) => {
                        return Err(Failure {
                            code: exit_code(st),
                            message: Some(format!(
                                "{} {} while leaving the job; ending the job",
                                self.label_at(i),
                                describe(st)
                            )),
                        })
                    }
                    None => {
                        self.nodes[i].exited_at = Some(Instant::now());
                        running += 1;
                    }
                }
            }
            if running == 0 {
                return Ok(job_code);
            }
        }
    }

    fn check_signals_and_limit(&self) -> Result<(), Failure> {
        let sig = SIGNALLED.load(Ordering::SeqCst);
        if sig != 0 {
            return Err(Failure {
                code: 128 + sig,
                message: Some(format!("interrupted by signal {sig}; ending the job")),
            });
        }
        if let Some(limit) = self.opts.timelimit {
            if self.started.elapsed() >= limit {
                return Err(Failure {
                    code: 124,
                    message: Some(format!(
                        "++timelimit of {} s reached; ending the job",
                        limit.as_secs_f64()
                    )),
                });
            }
        }
        Ok(())
    }

    fn poll_child(&mut self, i: usize) -> Option<ExitStatus> {
        let n = &mut self.nodes[i];
        if n.status.is_none() {
            if let Some(c) = n.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    n.status = Some(st);
                }
            }
        }
        n.status
    }

    fn send(&mut self, i: usize, kind: Kind, body: &[u8]) {
        if let Some(c) = self.nodes[i].control.as_mut() {
            // A node that cannot be told anything more is handled when its process exits.
            let _ = protocol::write_frame(c, kind, body).and_then(|()| c.flush());
        }
    }

    /// End the job now: tell every node to die, kill what was started here, reap everything.
    fn abandon(&mut self) {
        for i in 0..self.nodes.len() {
            self.send(i, Kind::Die, &[]);
        }
        for n in &mut self.nodes {
            if n.status.is_some() {
                continue;
            }
            if let Some(c) = n.child.as_mut() {
                // The whole process group: the node (or the remote shell) and anything it started.
                let pgid = nix::unistd::Pid::from_raw(c.id() as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                n.status = c.wait().ok();
            }
        }
    }

    /// Wait for the output threads to pass on everything the nodes printed. A pipe kept open by
    /// something a node left behind must not keep charmrun alive forever.
    fn drain_output(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        for h in self.outputs.drain(..) {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

fn accept_loop(listener: TcpListener, secret: [u8; SECRET_LEN], tx: Sender<Event>) {
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let tx = tx.clone();
        // One thread per connection, so a stranger that sends nothing delays nobody.
        std::thread::spawn(move || {
            let peer = stream
                .peer_addr()
                .unwrap_or_else(|_| SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0));
            let _ = stream.set_read_timeout(Some(HELLO_TIMEOUT));
            let mut s = stream;
            let verdict = match protocol::read_frame(&mut s) {
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

/// The shell convention: the exit code, or 128 + the signal.
fn exit_code(st: ExitStatus) -> i32 {
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
