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

/// Run the job; returns the exit code charmrun should exit with.
pub fn run(opts: &Opts, hosts: Option<&[Host]>) -> i32 {
    install_signal_handlers();
    match Job::start(opts, hosts) {
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
}

impl<'a> Job<'a> {
    /// Open the control socket and start every node. On failure, the job so far is returned
    /// with the error so that what was started can be ended.
    fn start(opts: &'a Opts, hosts: Option<&[Host]>) -> Result<Job<'a>, Box<(Job<'a>, String)>> {
        let (tx, events) = crossbeam_channel::unbounded();
        let n = opts.pes / opts.ppn;
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
        {
            let tx = job.tx.clone();
            std::thread::spawn(move || accept_loop(listener, secret, tx));
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
        let mut args = opts.args.clone();
        if opts.ppn > 1 {
            args.extend(["+ppn".to_string(), opts.ppn.to_string()]);
        }
        // charmrun's address as each host reaches it. In a job that spans hosts, a host named
        // for this machine's loopback (localhost, Debian's 127.0.1.1 entry) must still get an
        // address the other hosts can reach, since its nodes listen where they reach charmrun.
        let mut routes: Vec<IpAddr> = Vec::new();
        if let Some(hs) = hosts {
            for (i, h) in hs.iter().enumerate().take(n) {
                match spawn::address_towards(&h.name) {
                    Ok(ip) => routes.push(ip),
                    Err(e) => {
                        let msg = format!("host {} (node {i}) is unreachable: {e}", h.name);
                        return Err(Box::new((job, msg)));
                    }
                }
            }
            if let Some(&outward) = routes.iter().find(|a| !a.is_loopback()) {
                for r in routes.iter_mut().filter(|a| a.is_loopback()) {
                    *r = outward;
                }
            }
        }
        for i in 0..n {
            let host = hosts.map(|h| &h[i % h.len()]);
            let (name, addr) = match host {
                None => ("localhost".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
                Some(h) => (h.name.clone(), routes[i % routes.len()]),
            };
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
                    spawn::local(&opts.program, &args, &env)
                }
                Some(h) => {
                    let shell = h.shell.as_deref().unwrap_or(opts.remote_shell());
                    let secret = (client::ENV_SECRET, secret_hex.as_str());
                    spawn::remote(shell, &h.name, &cwd, &opts.program, &args, &env, secret)
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

fn accept_loop(listener: TcpListener, secret: [u8; SECRET_LEN], tx: Sender<Event>) {
    for conn in listener.incoming() {
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
