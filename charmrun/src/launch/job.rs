//! Serving one started job: events from the control server and the node watchers go to the
//! [`Verdict`], and when it says the job is over, the job is ended — every node told to die,
//! every process group killed and reaped, the job's files removed, its output drained (for a
//! few seconds at most after an interrupt, the time limit or a failure).

use super::control::ControlServer;
use super::fleet::Fleet;
use super::verdict::{Cause, Death, Decision, Failure, Verdict};
use super::{Event, NodeStart};
use crate::client;
use crate::opts::Opts;
use crate::output::Watcher;
use crate::protocol::{self, Kind};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the job loop looks at signals and deadlines when no event comes (events — frames,
/// connections, process exits — wake it at once).
const TICK: Duration = Duration::from_millis(20);

/// Once the job is being ended (interrupted, out of time, failed), how long its output is
/// still waited on: charmrun must end even if its reader does not read. A job that ended
/// normally waits for its output however long the reader takes.
const ENDING_OUTPUT_GRACE: Duration = Duration::from_secs(5);

/// What was started for one node, as far as ending the job goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Process {
    /// The node runs in the launcher's own process: nothing to kill or reap.
    Embedded,
    /// A process, leading a process group of the same id, not reaped yet.
    Running(u32),
    /// Its process has been reaped; what it started may still be in its group.
    Reaped(u32),
    /// Nothing of it is left to end.
    Gone,
}

impl Process {
    /// The same, once its process has been reaped.
    pub(super) fn reaped(self) -> Process {
        match self {
            Process::Running(pid) => Process::Reaped(pid),
            other => other,
        }
    }
}

/// One node of the job, as the launcher sees it (its place in the job is the verdict's).
pub(super) struct Node {
    /// The host it was started on, by the name charmrun knows it by.
    pub(super) host: String,
    /// The host's name as the node gave it when it introduced itself: the name the nodes'
    /// own messages use, so charmrun's use it too.
    pub(super) reported: Option<String>,
    pub(super) process: Process,
    /// The last lines of its remote shell's stderr (or its agent's), if it has one.
    pub(super) tail: Option<crate::output::Tail>,
}

/// What starting an agent's shell later needs.
#[derive(Debug, Clone)]
pub(super) struct ShellCtx {
    /// The control socket's port.
    pub(super) port: u16,
    /// The job secret, hex.
    pub(super) secret_hex: String,
    /// Where nodes start.
    pub(super) cwd: String,
}

/// One job.
pub(super) struct Job<'a> {
    pub(super) opts: &'a Opts,
    pub(super) nodes: Vec<Node>,
    pub(super) verdict: Verdict,
    /// `None` until the control socket is open.
    pub(super) control: Option<ControlServer>,
    pub(super) events: Receiver<Event>,
    pub(super) tx: Sender<Event>,
    /// One per node started here (with its number), passing its output on.
    pub(super) outputs: Vec<(usize, Watcher)>,
    /// Set when the job is over: the output threads then let go of pipes that stay quiet.
    pub(super) output_over: Arc<AtomicBool>,
    /// Set once the job is being ended (see [`Job::ending`]): its output is given up on then.
    output_deadline: Option<Instant>,
    pub(super) started: Instant,
    pub(super) strangers: usize,
    /// The job's tag: its files in /dev/shm carry it.
    pub(super) tag: String,
    /// What each in-process node joins with.
    pub(super) in_process: Vec<client::LaunchEnv>,
    /// What each node runs.
    pub(super) plan: Vec<NodeStart>,
    /// The agents and the shells that start them (none when nodes start by themselves).
    pub(super) fleet: Fleet,
    /// Set once the control socket is open.
    pub(super) shell_ctx: Option<ShellCtx>,
    /// Passing on the output of each shell that starts agents (with the shell's number).
    pub(super) shell_outputs: Vec<(usize, Watcher)>,
    /// charmrun's address as each node's host reaches it.
    pub(super) routes: Vec<std::net::IpAddr>,
    /// Nodes to start through their remote shell once `++batch` leaves room, in order.
    pub(super) queued_nodes: std::collections::VecDeque<usize>,
    /// Nodes to start at once (used while starting).
    pub(super) to_start: Vec<usize>,
}

/// Say how many more nodes printed each line collapsed during start-up, and stop collapsing.
fn say_repeats() {
    for line in crate::output::repeats_over() {
        converse_machine::input::error_line(&line);
    }
}

impl<'a> Job<'a> {
    /// A job of `in_process.len()` nodes, nothing started yet; `in_process[i]` says whether
    /// node `i` is the launcher's own process.
    pub(super) fn new(opts: &'a Opts, in_process: Vec<bool>) -> Job<'a> {
        // Until the nodes have their table, a line every node prints is printed once.
        crate::output::collapse_repeats();
        let (tx, events) = crossbeam_channel::unbounded();
        let started = Instant::now();
        let n = in_process.len();
        Job {
            opts,
            nodes: Vec::with_capacity(n),
            verdict: Verdict::new(in_process, started, opts.timeout, opts.timelimit)
                .with_hang_timeout(opts.hang_timeout),
            control: None,
            events,
            tx,
            outputs: Vec::with_capacity(n),
            output_over: Arc::new(AtomicBool::new(false)),
            output_deadline: None,
            started,
            strangers: 0,
            tag: String::new(),
            in_process: Vec::new(),
            plan: Vec::new(),
            fleet: Fleet::default(),
            shell_ctx: None,
            shell_outputs: Vec::new(),
            routes: Vec::new(),
            queued_nodes: std::collections::VecDeque::new(),
            to_start: Vec::new(),
        }
    }

    /// "PE 3", or "node 1 (PEs 2-3)" with several PEs per node.
    pub(super) fn label(&self, node: usize) -> String {
        let ppn = self.opts.ppn;
        if ppn == 1 {
            format!("PE {node}")
        } else {
            format!("node {node} (PEs {}-{})", node * ppn, node * ppn + ppn - 1)
        }
    }

    /// "PE 3 on host-a": the host by the name its nodes gave it, once one of them has.
    fn label_at(&self, node: usize) -> String {
        let host = self.nodes.get(node).map_or("?", |n| {
            n.reported
                .as_deref()
                .or_else(|| {
                    self.nodes
                        .iter()
                        .filter(|m| m.host == n.host)
                        .find_map(|m| m.reported.as_deref())
                })
                .unwrap_or(&n.host)
        });
        format!("{} on {host}", self.label(node))
    }

    /// Serve the job to its end, end it, and return its exit code.
    pub(super) fn run(&mut self) -> i32 {
        let code = match self.event_loop() {
            Ok(code) => code,
            Err(f) => {
                self.ending();
                converse_machine::input::error_line(&format!(
                    "charmrun: {}",
                    f.message(&|i| self.label_at(i))
                ));
                self.explain(&f);
                f.code
            }
        };
        // Whatever still runs (after a failure, or a node that left but lingers) is ended and
        // reaped; after a normal end this finds nothing to do.
        self.end_processes();
        self.stop_accepting();
        self.remove_job_files();
        let lost = self.drain_output();
        say_repeats();
        tracing::debug!(target: "charmrun", code, secs = self.started.elapsed().as_secs_f64(), strangers = self.strangers, lost, "job ended");
        if self.opts.verbose {
            let line = format!(
                "charmrun: job ended with code {code} after {:.3} s ({} stranger connection(s) refused)\n",
                self.started.elapsed().as_secs_f64(),
                self.strangers
            );
            if lost == 0 {
                converse_machine::input::error_text(&line);
            } else {
                // As the line that said so: stderr may be what is not read.
                crate::output::say_within(&line, SAY_WAIT);
            }
        }
        code
    }

    /// The job is being ended (interrupted, out of time, failed, not started): its output is
    /// waited on for [`ENDING_OUTPUT_GRACE`] from now at most.
    fn ending(&mut self) {
        self.output_deadline
            .get_or_insert_with(|| Instant::now() + ENDING_OUTPUT_GRACE);
    }

    /// When the job's output is given up on, if it is: a signal or the time limit arriving
    /// while charmrun waits at the end of a job that ended normally ends that wait too.
    fn output_given_up_at(&mut self) -> Option<Instant> {
        if self.output_deadline.is_none()
            && (super::signalled().is_some()
                || self
                    .opts
                    .timelimit
                    .is_some_and(|l| self.started.elapsed() >= l))
        {
            self.ending();
        }
        self.output_deadline
    }

    /// Serve the job until every node has left (`Ok` with the job's code) or it must end.
    fn event_loop(&mut self) -> Result<i32, Failure> {
        let mut table_sent = false;
        let mut last_turn = Instant::now();
        loop {
            match self.events.recv_timeout(TICK) {
                Ok(e) => {
                    self.on_event(e);
                    // Everything already queued is taken before deciding: after charmrun
                    // itself was paused, the heartbeats waiting here must count.
                    while let Ok(e) = self.events.try_recv() {
                        self.on_event(e);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(launcher_failure("internal: event channel closed".into()))
                }
            }
            // A node whose output waits for charmrun's reader is not lingering: it may be
            // blocked on its own full pipe.
            let now = Instant::now();
            if now.saturating_duration_since(last_turn) > super::verdict::PAUSE_GAP {
                self.verdict.restart_silence(now);
            }
            last_turn = now;
            for (i, w) in &self.outputs {
                if w.busy.load(Ordering::SeqCst) {
                    self.verdict.output_pending(*i, now);
                }
            }
            // An agent's nodes write through it and its shell: when charmrun's reader holds
            // the shell's output up, they may be blocked on their own pipes, not lingering.
            for (sh, w) in &self.shell_outputs {
                if w.busy.load(Ordering::SeqCst) {
                    for &a in &self.fleet.shells[*sh].agents {
                        for &i in &self.fleet.agents[a].subtree {
                            self.verdict.output_pending(i, now);
                        }
                    }
                }
            }
            if let Some(sig) = super::signalled() {
                self.verdict.interrupt(sig);
            }
            if !self.fleet.queue.is_empty() {
                if let Err(e) = self.start_shells() {
                    self.verdict.cancel(e.to_string());
                }
            }
            if !self.queued_nodes.is_empty() {
                if let Err(e) = self.start_queued_nodes() {
                    self.verdict.cancel(e.to_string());
                }
            }
            if !table_sent && self.verdict.all_joined() {
                self.send_table()?;
                table_sent = true;
                say_repeats();
            }
            let decision = self.verdict.decide(Instant::now());
            for (i, why) in self.verdict.take_reports() {
                self.node_gone(i, &why);
            }
            match decision {
                Decision::Continue => {}
                Decision::Done(code) => return Ok(code),
                Decision::Fail(f) => return Err(f),
            }
        }
    }

    /// Report mode: node `i` is out of the job (`why`). End what is left of it (a lost or
    /// silent node may still run, and must not come back), count it as arrived at every
    /// barrier from now on, and tell every survivor.
    fn node_gone(&mut self, i: usize, why: &str) {
        // In one write (not eprintln!'s several): the nodes go on printing, and on a terminal
        // that shows stdout and stderr together a line in pieces could take theirs in between.
        converse_machine::input::error_line(&format!(
            "charmrun: {} {why}; the job goes on without it (faults=report)",
            self.label_at(i)
        ));
        if let Some(n) = self.nodes.get(i) {
            if let Process::Running(pid) | Process::Reaped(pid) = n.process {
                kill_group(pid);
            }
        }
        if let Some(c) = self.control.as_mut() {
            c.die(i);
            c.gone(i, why);
        }
    }

    fn on_event(&mut self, e: Event) {
        let now = Instant::now();
        match e {
            Event::Cancel(why) => {
                tracing::debug!(target: "charmrun", "cancelling the job: {why}");
                self.verdict.cancel(why)
            }
            Event::Hello(stream, hello) => {
                let i = hello.node as usize;
                if !self.verdict.hello(i) {
                    tracing::debug!(target: "charmrun", node = i, pid = hello.pid, host = %hello.host, "refused a HELLO for a node that is not expected");
                    self.strangers += 1;
                    return;
                }
                tracing::debug!(target: "charmrun", node = i, pid = hello.pid, host = %hello.host, peer = ?stream.peer_addr().ok(), "node connected");
                if self.opts.verbose {
                    let from = stream
                        .peer_addr()
                        .map_or("?".to_string(), |a| a.ip().to_string());
                    // The info is the layer's business; shown only when it is printable text.
                    let info = std::str::from_utf8(&hello.info)
                        .ok()
                        .filter(|t| t.chars().all(|c| c.is_ascii_graphic()))
                        .map_or(String::new(), |t| format!(", info {t}"));
                    converse_machine::input::error_line(&format!(
                        "charmrun: {} connected from {from} (pid {}, host {}, {}{info})",
                        self.label(i),
                        hello.pid,
                        hello.host,
                        self.counts(i)
                    ));
                }
                if let Some(n) = self.nodes.get_mut(i) {
                    n.reported = Some(hello.host.clone());
                }
                self.verdict.heard(i, now);
                if let Some(c) = self.control.as_mut() {
                    c.joined(i, stream, hello);
                }
            }
            Event::RelayedHello(a, hello) => {
                let i = hello.node as usize;
                tracing::debug!(target: "charmrun", node = i, agent = a, pid = hello.pid, host = %hello.host, "node connected through an agent");
                if !self.verdict.hello(i) {
                    self.strangers += 1;
                    return;
                }
                if let Some(n) = self.nodes.get_mut(i) {
                    n.reported = Some(hello.host.clone());
                }
                self.verdict.heard(i, now);
                if self.opts.verbose {
                    self.progress(i, hello.pid);
                }
                if let Some(c) = self.control.as_mut() {
                    c.joined_via(i, a, hello);
                }
            }
            Event::Agent(stream, hello) => self.agent_joined(stream, &hello),
            Event::AgentClosed(a) => {
                tracing::debug!(target: "charmrun", agent = a, "agent closed its connection");
                if let Some(ag) = self.fleet.agents.get_mut(a) {
                    ag.gone = true;
                    let why = format!("its agent on {} closed its connection to charmrun", ag.host);
                    let nodes = ag.subtree.clone();
                    self.verdict.agent_lost(&nodes, why, now);
                }
            }
            Event::Lost(nodes, why) => {
                tracing::debug!(target: "charmrun", ?nodes, "nodes lost: {why}");
                self.verdict.agent_lost(&nodes, why, now)
            }
            Event::AgentHeartbeat(a, silent) => {
                if let Some(ag) = self.fleet.agents.get(a) {
                    for &i in ag.subtree.iter().filter(|i| !silent.contains(i)) {
                        self.verdict.heard(i, now);
                    }
                }
            }
            Event::AgentBarrier(a) => {
                if let (Some(ag), Some(c)) = (self.fleet.agents.get(a), self.control.as_mut()) {
                    c.agent_barrier(&ag.subtree);
                }
            }
            Event::ShellExited(s, st) => self.shell_exited(s, st, now),
            Event::Stranger(addr, why) => {
                tracing::debug!(target: "charmrun", %addr, "refused a connection: {why}");
                self.strangers += 1;
                if self.opts.verbose {
                    converse_machine::input::error_line(&format!(
                        "charmrun: refused a connection from {addr}: {why}"
                    ));
                }
            }
            Event::Frame(i, Kind::Heartbeat, _) => {
                tracing::trace!(target: "charmrun", node = i, "heartbeat");
                self.verdict.heard(i, now)
            }
            Event::Frame(i, Kind::Barrier, _) => {
                tracing::debug!(target: "charmrun", node = i, "node entered a barrier");
                self.verdict.heard(i, now);
                if let Some(c) = self.control.as_mut() {
                    c.barrier(i);
                }
            }
            Event::Frame(i, Kind::Ending, body) => {
                let code = body
                    .first_chunk::<4>()
                    .map_or(1, |b| i32::from_le_bytes(*b));
                tracing::debug!(target: "charmrun", node = i, code, "node is ending");
                self.verdict.ending(i, code);
            }
            Event::Frame(_, Kind::Survive, _) => self.verdict.survive(),
            Event::Frame(i, Kind::Bcast, blob) => {
                tracing::debug!(target: "charmrun", node = i, bytes = blob.len(), "broadcast");
                self.verdict.heard(i, now);
                if let Some(c) = self.control.as_mut() {
                    c.broadcast(&blob);
                }
            }
            Event::Frame(i, Kind::Suspect, body) => {
                if let Some((node, why)) = protocol::parse_node_why(&body) {
                    self.verdict.suspect(i, node, &why, now);
                }
            }
            Event::Frame(i, Kind::Abort, reason) => {
                let reason = String::from_utf8_lossy(&reason).into_owned();
                tracing::debug!(target: "charmrun", node = i, "node aborts the job: {reason}");
                self.verdict.abort(i, reason, now);
            }
            Event::Frame(..) => {}
            Event::Closed(i) => {
                tracing::debug!(target: "charmrun", node = i, "node's control connection closed");
                self.verdict.closed(i, now)
            }
            Event::Exited(i, st) => {
                tracing::debug!(target: "charmrun", node = i, status = %st, "node process exited");
                if let Some(n) = self.nodes.get_mut(i) {
                    n.process = n.process.reaped();
                }
                self.verdict.exited(i, st, now);
            }
        }
    }

    /// `++verbose`: node `i` connected through an agent; how many are in, on its host and in
    /// all.
    pub(super) fn progress(&self, i: usize, pid: u32) {
        converse_machine::input::error_line(&format!(
            "charmrun: {} connected (pid {pid}): {}",
            self.label(i),
            self.counts(i)
        ));
    }

    /// "3 of 4 on host-a, 7 of 16 in all": how many nodes have connected, on node `i`'s host
    /// (as charmrun knows it) and in the whole job.
    fn counts(&self, i: usize) -> String {
        let joined = |j: &usize| {
            !matches!(
                self.verdict.state(*j),
                Some(super::verdict::NodeState::Starting) | None
            )
        };
        let host = self.nodes.get(i).map_or("?", |n| n.host.as_str());
        let here: Vec<usize> = (0..self.nodes.len())
            .filter(|&j| self.nodes[j].host == host)
            .collect();
        format!(
            "{} of {} on {host}, {} of {} in all",
            here.iter().filter(|j| joined(j)).count(),
            here.len(),
            (0..self.nodes.len()).filter(|j| joined(j)).count(),
            self.nodes.len()
        )
    }

    /// After the failure's sentence: what the remote shells of the nodes it names said, in
    /// their own words (why a node never connected, usually).
    fn explain(&self, f: &Failure) {
        let nodes: Vec<usize> = match &f.cause {
            Cause::NeverConnected { nodes, .. } => nodes.clone(),
            Cause::Died {
                node,
                when: Death::Starting,
                ..
            } => vec![*node],
            Cause::AgentLost { node, .. } => vec![*node],
            _ => return,
        };
        let mut said: Vec<(String, Vec<String>)> = Vec::new();
        for i in nodes {
            let Some(n) = self.nodes.get(i) else { continue };
            let Some(tail) = &n.tail else { continue };
            // A shell that exited at once may have its last words still in the pipe.
            let until = Instant::now() + Duration::from_millis(300);
            let mut lines = tail.lines();
            while lines.is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
                lines = tail.lines();
            }
            if !lines.is_empty() && !said.iter().any(|(h, _)| *h == n.host) {
                said.push((n.host.clone(), lines));
            }
        }
        for (host, lines) in said {
            converse_machine::input::error_line(&format!(
                "charmrun: the remote shell for {host} said:"
            ));
            for l in lines {
                converse_machine::input::error_line(&format!("charmrun:   {l}"));
            }
        }
    }

    fn send_table(&mut self) -> Result<(), Failure> {
        if let Some(c) = self.control.as_mut() {
            c.send_table(self.opts.ppn).map_err(launcher_failure)?;
        }
        tracing::debug!(target: "charmrun", nodes = self.nodes.len(), ms = self.started.elapsed().as_secs_f64() * 1e3, "every node connected: node table sent");
        if self.opts.verbose {
            converse_machine::input::error_line(&format!(
                "charmrun: all {} node(s) connected in {:.1} ms",
                self.nodes.len(),
                self.started.elapsed().as_secs_f64() * 1e3
            ));
        }
        Ok(())
    }

    /// End the job now: tell every node to die, kill what was started here (whole process
    /// groups, also of nodes that have exited: what they started ends with the job), and wait
    /// until every process has been reaped.
    ///
    /// A process that left its node's group (`setsid`, `setpgid`) escapes; so does what a
    /// remote shell started on another host, beyond what ends with the shell's connection.
    ///
    /// The job is being ended: its output is waited on for a while at most (see
    /// [`ENDING_OUTPUT_GRACE`]).
    pub(super) fn abandon(&mut self) {
        self.ending();
        self.end_processes();
    }

    /// As [`abandon`](Self::abandon), after a normal end too: then agents passing their nodes'
    /// output on get the time the reader takes.
    fn end_processes(&mut self) {
        tracing::debug!(target: "charmrun", "ending the job: DIE to every node, SIGKILL to their groups");
        if let Some(c) = self.control.as_mut() {
            for (i, n) in self.nodes.iter().enumerate() {
                // A node in this very process that is leaving normally must not be told to
                // die: that would end the process the job was embedded in.
                if n.process == Process::Embedded && self.verdict.said_leaving(i) {
                    continue;
                }
                c.die(i);
            }
            for a in 0..c.agents() {
                c.die_agent(a);
            }
        }
        // No more shells: whatever waits in the queue is never started.
        self.fleet.queue.clear();
        self.queued_nodes.clear();
        for n in &self.nodes {
            if let Process::Running(pid) | Process::Reaped(pid) = n.process {
                kill_group(pid);
            }
        }
        // Agents end their nodes and then themselves: a moment for that, then their shells'
        // groups are killed (an agent killed first leaves its nodes to their watchdogs).
        let deadline = Instant::now() + Duration::from_secs(10);
        let agents_deadline = Instant::now() + AGENT_GRACE;
        let mut shells_killed = false;
        loop {
            let nodes_running = self
                .nodes
                .iter()
                .any(|n| matches!(n.process, Process::Running(_)));
            let shells_running = self
                .fleet
                .shells
                .iter()
                .any(|s| matches!(s.process, Process::Running(_)));
            // An agent still passing its nodes' output on to a slow reader is not hung: it
            // gets the time the reader takes (output is never dropped while the reader lives),
            // unless the job is being ended and that time is up.
            let given_up = self
                .output_given_up_at()
                .is_some_and(|d| Instant::now() >= d);
            let passing_output = !given_up
                && self
                    .shell_outputs
                    .iter()
                    .any(|(_, w)| w.busy.load(Ordering::SeqCst));
            if (!nodes_running && !shells_running)
                || (Instant::now() >= deadline && !passing_output)
            {
                break;
            }
            let grace_over = Instant::now() >= agents_deadline && !passing_output;
            if !shells_killed && (grace_over || !shells_running) {
                shells_killed = true;
                for s in &self.fleet.shells {
                    if let Process::Running(pid) | Process::Reaped(pid) = s.process {
                        kill_group(pid);
                    }
                }
            }
            match self.events.recv_timeout(TICK) {
                Ok(Event::Exited(i, _)) => {
                    if let Some(n) = self.nodes.get_mut(i) {
                        n.process = n.process.reaped();
                    }
                }
                Ok(Event::ShellExited(s, _)) => {
                    if let Some(s) = self.fleet.shells.get_mut(s) {
                        s.process = s.process.reaped();
                    }
                }
                _ => {}
            }
        }
        if !shells_killed {
            // Whatever a shell's group still holds ends with the job.
            for s in &self.fleet.shells {
                if let Process::Reaped(pid) = s.process {
                    kill_group(pid);
                }
            }
        }
    }

    /// Close the control socket (see [`ControlServer::stop_accepting`]).
    pub(super) fn stop_accepting(&self) {
        if let Some(c) = &self.control {
            c.stop_accepting();
        }
    }

    /// Remove the job's files from /dev/shm: whatever a layer made there under the job's tag
    /// and did not remove, because a node died or because it never got that far.
    fn remove_job_files(&self) {
        if self.tag.is_empty() {
            return;
        }
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

    /// Wait for the output threads to pass on everything the nodes printed, however long
    /// charmrun's reader takes to read it — unless the job is being ended (see
    /// [`Job::ending`]): then what is not written by the deadline is given up on, and one line
    /// says how much. Returns the bytes given up on. A pipe kept open by a process that escaped
    /// the job's process groups is let go once it stays quiet (see [`output`](crate::output)).
    fn drain_output(&mut self) -> u64 {
        self.output_over.store(true, Ordering::SeqCst);
        let mut left: Vec<Watcher> = self
            .outputs
            .drain(..)
            .chain(self.shell_outputs.drain(..))
            .map(|(_, w)| w)
            .collect();
        while let Some(w) = left.last() {
            // A thread blocked in a write to a reader that does not read never returns by
            // itself: waited on a tick at a time, to see a signal or the deadline.
            let deadline = self.output_given_up_at();
            let tick = Instant::now() + TICK;
            if w.done_by(deadline.map_or(tick, |d| d.min(tick))) {
                if let Some(w) = left.pop() {
                    let _ = w.thread.join();
                }
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        if left.is_empty() {
            return 0;
        }
        for w in &left {
            w.give_up();
        }
        let lost: u64 = left.iter().map(Watcher::unwritten).sum();
        // The threads still writing are left: they end with charmrun.
        if lost > 0 {
            crate::output::say_within(
                &format!(
                    "charmrun: gave up on {lost} bytes of the job's output: charmrun's reader \
                     did not take them within {} s of the job being ended\n",
                    ENDING_OUTPUT_GRACE.as_secs()
                ),
                SAY_WAIT,
            );
        }
        lost
    }
}

/// How long a line charmrun says after giving up on the job's output may wait for stderr.
const SAY_WAIT: Duration = Duration::from_millis(500);

/// After `DIE`, how long agents get to end their nodes and leave before their shells are
/// killed.
const AGENT_GRACE: Duration = Duration::from_secs(3);

fn kill_group(pid: u32) {
    let pgid = nix::unistd::Pid::from_raw(pid as i32);
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
}

fn launcher_failure(why: String) -> Failure {
    Failure {
        code: 1,
        cause: Cause::Launcher(why),
    }
}
