//! The node side of the control protocol, used by every layer charmrun starts.
//!
//! ```text
//! let env = LaunchEnv::from_env()?;       // what charmrun put in the environment
//! let ctl = Control::connect(&env)?;      // connect back; learn our IP on charmrun's route
//! /* bind the layer's own socket on ctl.local_ip(), make `info` from its address */
//! let table = ctl.join(&env, info)?;      // HELLO, then wait for the node table
//! ctl.barrier()?; ctl.ending(code)?;      // at exit
//! ```
//!
//! After [`Control::join`] a watchdog thread owns the read side of the control connection. It
//! releases barriers, and it ends the process at once when charmrun says the job is over or
//! the connection drops: so a node never outlives its job, even one whose main thread is hung
//! and never polls. A heartbeat thread tells charmrun every
//! [`HEARTBEAT_INTERVAL`](protocol::HEARTBEAT_INTERVAL) that the process still answers, so a
//! stopped or frozen node is noticed (`++hang-timeout`), and one busy in a long handler is not
//! taken for one.

use crate::protocol::{self, Hello, Kind};
use converse_machine::{MachineError, NodeTable, Wake};
use signal::Signal;
use std::io::Write;
use std::net::{IpAddr, TcpStream};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub use converse_machine::launch::{
    LaunchEnv, ENV_CHARMRUN, ENV_JOB, ENV_NODE, ENV_NODES, ENV_SECRET,
};

/// A node's control connection to charmrun.
pub struct Control {
    /// Shared with the heartbeat thread, which ends when the connection does.
    writer: Arc<Mutex<TcpStream>>,
    reader: Option<TcpStream>,
    local_ip: IpAddr,
    released: Signal,
    node: usize,
    /// For a node in the launcher's process: set once it said it leaves.
    leaving: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The nodes charmrun said are out of the job (report mode).
    deaths: Arc<Deaths>,
}

/// The nodes charmrun reported dead, in its order (`DEAD` frames), filled by the watchdog and
/// read by the layer (which may have several parts, each with its own cursor).
#[derive(Default)]
struct Deaths {
    /// How many are in `list`: read on every `advance`, so that a layer looks at the lock only
    /// when there is something new.
    count: std::sync::atomic::AtomicUsize,
    list: Mutex<Vec<(usize, String)>>,
    /// Rung when one comes, so that a layer blocked in its wait looks.
    waker: Mutex<Option<Arc<dyn Wake>>>,
}

impl Deaths {
    fn push(&self, node: usize, why: String) {
        if let Ok(mut l) = self.list.lock() {
            l.push((node, why));
            self.count
                .store(l.len(), std::sync::atomic::Ordering::Release);
        }
        if let Ok(w) = self.waker.lock() {
            if let Some(w) = w.as_ref() {
                w.wake();
            }
        }
    }
}

// By hand: it holds sockets, threads and handles, which have no useful text form.
impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// In a barrier, how long a layer's failure (a peer's connection closing, say) waits for the
/// release that would explain it: peers released first leave first, and that is no death.
pub const BARRIER_GRACE: Duration = Duration::from_secs(2);

/// How long a node tries to reach charmrun before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an aborting node waits for charmrun to answer (see [`Control::abort`]).
const ABORT_WAIT: Duration = Duration::from_secs(2);

impl Control {
    /// Connect to charmrun.
    ///
    /// # Errors
    /// [`MachineError::Boot`] when charmrun cannot be reached.
    pub fn connect(env: &LaunchEnv) -> Result<Control, MachineError> {
        if !env.embedded {
            // A process that is one node: its threads' lines name it (the launcher's own
            // process, hosting an embedded node, is charmrun's too).
            converse_machine::log::set_process(converse_machine::log::Who::Node(env.node));
        }
        tracing::debug!(target: "charmrun", charmrun = %env.charmrun, "connecting to charmrun");
        let boot = |what: &str, e: std::io::Error| {
            MachineError::Boot(format!("{what} charmrun at {}: {e}", env.charmrun))
        };
        let addrs: Vec<_> = std::net::ToSocketAddrs::to_socket_addrs(&env.charmrun)
            .map_err(|e| boot("cannot resolve", e))?
            .collect();
        let mut last = None;
        let mut stream = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| {
            boot(
                "cannot connect to",
                last.unwrap_or_else(|| std::io::Error::other("no address")),
            )
        })?;
        let _ = stream.set_nodelay(true);
        let local_ip = stream
            .local_addr()
            .map_err(|e| boot("no local address towards", e))?
            .ip();
        let reader = stream
            .try_clone()
            .map_err(|e| boot("cannot clone the connection to", e))?;
        Ok(Control {
            writer: Arc::new(Mutex::new(stream)),
            reader: Some(reader),
            local_ip,
            released: Signal::default(),
            node: env.node,
            leaving: env
                .embedded
                .then(|| std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))),
            deaths: Arc::default(),
        })
    }

    /// This host's address on the route to charmrun: where peers can reach this node too.
    pub fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    /// Introduce this node with its layer `info`, wait for the node table, and start the
    /// watchdog.
    ///
    /// # Errors
    /// [`MachineError::Boot`] when charmrun refuses us or goes away.
    pub fn join(&mut self, env: &LaunchEnv, info: Vec<u8>) -> Result<NodeTable, MachineError> {
        let hello = Hello {
            secret: env.secret,
            node: env.node as u32,
            pid: std::process::id(),
            host: hostname(),
            info,
        };
        self.send(Kind::Hello, &hello.encode())?;
        tracing::debug!(target: "charmrun", info_bytes = hello.info.len(), "sent HELLO; waiting for the node table");
        let Some(mut reader) = self.reader.take() else {
            return Err(MachineError::Boot("joined twice".into()));
        };
        let table = loop {
            match protocol::read_frame(&mut reader) {
                Ok((Kind::Table, body)) => {
                    break NodeTable::decode(&body).map_err(|e| {
                        MachineError::Boot(format!("charmrun sent a bad node table: {e}"))
                    })?
                }
                Ok((Kind::Die, reason)) => {
                    return Err(MachineError::Aborted(
                        String::from_utf8_lossy(&reason).into(),
                    ))
                }
                Ok(_) => continue,
                Err(e) => {
                    return Err(MachineError::Boot(format!(
                        "charmrun closed the connection before sending the node table: {e}"
                    )))
                }
            }
        };
        if table.num_nodes() != env.num_nodes {
            return Err(MachineError::Boot(format!(
                "node table has {} nodes, expected {}",
                table.num_nodes(),
                env.num_nodes
            )));
        }
        tracing::debug!(target: "charmrun", nodes = table.num_nodes(), "node table received");
        let released = self.released.clone();
        let leaving = self.leaving.clone();
        let deaths = self.deaths.clone();
        std::thread::Builder::new()
            .name("charmrun-watchdog".into())
            .spawn(move || watchdog(reader, released, leaving, &deaths))
            .map_err(|e| MachineError::io("starting the charmrun watchdog", e))?;
        let writer = Arc::downgrade(&self.writer);
        std::thread::Builder::new()
            .name("charmrun-heartbeat".into())
            .spawn(move || heartbeat(&writer))
            .map_err(|e| MachineError::io("starting the charmrun heartbeat", e))?;
        Ok(table)
    }

    /// Block until every node reached the barrier. A layer that must keep its interconnect
    /// moving meanwhile (flush what it queued, answer peers) uses [`Control::barrier_begin`]
    /// and [`Control::released`] instead.
    ///
    /// # Errors
    /// [`MachineError::Io`] when the request cannot be sent.
    pub fn barrier(&self) -> Result<(), MachineError> {
        let ticket = self.barrier_begin()?;
        self.released.wait_past(ticket, None);
        Ok(())
    }

    /// Tell charmrun this node reached the barrier; the ticket to wait with.
    ///
    /// # Errors
    /// [`MachineError::Io`] when the request cannot be sent.
    pub fn barrier_begin(&self) -> Result<u64, MachineError> {
        let ticket = self.released.ticket();
        tracing::debug!(target: "charmrun", ticket, "entering charmrun's barrier");
        self.send(Kind::Barrier, &[])?;
        Ok(ticket)
    }

    /// Whether the barrier of `ticket` is complete, waiting for it up to `timeout`.
    pub fn released(&self, ticket: u64, timeout: Duration) -> bool {
        self.released.wait_past(ticket, Some(timeout))
    }

    /// A barrier for a layer that must keep its interconnect moving while it waits: calls
    /// `step` (push queued sends, answer peers, keep what arrives, then wait a moment for
    /// activity) until every node has arrived.
    ///
    /// A `step` error right when peers are released is expected: a peer released first may
    /// already have left and closed its end. It counts only if the release does not follow
    /// within [`BARRIER_GRACE`].
    ///
    /// # Errors
    /// `step`'s error when the barrier did not complete; [`MachineError::Io`] when charmrun
    /// cannot be told.
    pub fn barrier_while(
        &self,
        mut step: impl FnMut() -> Result<(), MachineError>,
    ) -> Result<(), MachineError> {
        let ticket = self.barrier_begin()?;
        loop {
            if let Err(e) = step() {
                return if self.released(ticket, BARRIER_GRACE) {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            if self.released(ticket, Duration::ZERO) {
                return Ok(());
            }
        }
    }

    /// Ask that a node's death be reported to the survivors instead of ending the job
    /// (`+set faults=report`): charmrun then tells this node of every death with a `DEAD`
    /// frame, read by [`Control::next_death`]. Every node of a job says the same; a death
    /// before charmrun has heard it (during start-up) still ends the job.
    ///
    /// # Errors
    /// [`MachineError::Io`] when charmrun cannot be told.
    pub fn report_deaths(&self) -> Result<(), MachineError> {
        self.send(Kind::Survive, &[])
    }

    /// Ring `waker` whenever charmrun reports a death, so that a layer blocked in its wait
    /// looks at [`Control::next_death`].
    pub fn set_death_waker(&self, waker: Arc<dyn Wake>) {
        if let Ok(mut w) = self.deaths.waker.lock() {
            *w = Some(waker);
        }
    }

    /// The next death charmrun reported that this reader (its `cursor`, starting at 0) has
    /// not seen: the node and why. One atomic load when there is none, so a layer calls it
    /// on every `advance`.
    pub fn next_death(&self, cursor: &mut usize) -> Option<(usize, String)> {
        if self.deaths.count.load(std::sync::atomic::Ordering::Acquire) <= *cursor {
            return None;
        }
        let l = self.deaths.list.lock().ok()?;
        let d = l.get(*cursor)?.clone();
        *cursor += 1;
        Some(d)
    }

    /// Tell charmrun that this node's connection to `node` failed (`why`), in report mode:
    /// charmrun ends that node, if it still runs, and reports its death to every survivor.
    /// Best effort: if charmrun cannot be told, it will notice the death itself.
    pub fn suspect(&self, node: usize, why: &str) {
        let _ = self.send(Kind::Suspect, &protocol::node_why(node, why));
    }

    /// Tell charmrun this node leaves the job normally with `code`.
    ///
    /// # Errors
    /// [`MachineError::Io`] when it cannot be told.
    pub fn ending(&self, code: i32) -> Result<(), MachineError> {
        if let Some(l) = &self.leaving {
            l.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.send(Kind::Ending, &code.to_le_bytes())
    }

    /// Ask charmrun to end the job, then exit non-zero.
    pub fn abort(&self, reason: &str) -> ! {
        // Not eprintln!, which panics when stderr is gone (a pipe to a charmrun that died),
        // and would end this process before it ends what it started.
        converse_machine::input::error_line(&format!(
            "converse: node {} aborting the job: {reason}",
            self.node
        ));
        let _ = self.send(Kind::Abort, reason.as_bytes());
        crate::cleanup::remove_registered();
        // With charmrun gone (killed, say, which is often why a peer's connection just broke),
        // nobody else ends what this node started: the watchdog would, but this exit may come
        // first. Charmrun's end may not have closed yet when a peer's did (the peer noticed
        // charmrun's death first and ended itself): so charmrun is given a moment to answer.
        // A live one answers the abort with DIE, on which the watchdog ends this process and
        // its group; a dead one's connection closes.
        if self.leaving.is_none() && self.charmrun_gone_within(ABORT_WAIT) {
            kill_own_group();
        }
        std::process::exit(1)
    }

    /// Whether charmrun's end of the control connection closes within `wait` (peeked,
    /// nothing read).
    fn charmrun_gone_within(&self, wait: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let fd = match self.writer.lock() {
            Ok(w) => w.as_raw_fd(),
            Err(p) => p.into_inner().as_raw_fd(),
        };
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
            let mut fds = [libc::pollfd {
                fd,
                events: libc::POLLRDHUP,
                revents: 0,
            }];
            // SAFETY: one valid pollfd, for a descriptor `self.writer` keeps open.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
            if n > 0 {
                return fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0;
            }
            let interrupted =
                n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if !interrupted || left.is_zero() {
                return false;
            }
        }
    }

    fn send(&self, kind: Kind, body: &[u8]) -> Result<(), MachineError> {
        let mut w = self
            .writer
            .lock()
            .map_err(|_| MachineError::Boot("control connection poisoned".into()))?;
        protocol::write_frame(&mut *w, kind, body)
            .and_then(|()| w.flush())
            .map_err(|e| MachineError::io("writing to charmrun", e))
    }
}

impl Drop for Control {
    /// A node in the launcher's own process closes its control connection for good, so that
    /// its watchdog and the launcher's reader (which each hold the connection open while they
    /// wait for the other's end) both see it end. A node in a process of its own closes it by
    /// exiting.
    fn drop(&mut self) {
        if self.leaving.is_some() {
            if let Ok(w) = self.writer.lock() {
                let _ = w.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// End what this node started: it lives in the node's process group, which charmrun kills as
/// the job ends, and which the node kills itself (taking itself along) when charmrun, or its
/// agent, is gone. Only a group this process leads: under another launcher the group may be
/// the launcher's own.
fn kill_own_group() {
    // SAFETY: getpgrp, getpid and killpg have no preconditions.
    unsafe {
        let group = libc::getpgrp();
        if group == libc::getpid() {
            libc::killpg(group, libc::SIGKILL);
        }
    }
}

/// Tell charmrun every [`HEARTBEAT_INTERVAL`](protocol::HEARTBEAT_INTERVAL) that this
/// process still answers, until the connection is dropped or fails.
fn heartbeat(writer: &Weak<Mutex<TcpStream>>) {
    loop {
        std::thread::sleep(protocol::HEARTBEAT_INTERVAL);
        let Some(w) = writer.upgrade() else {
            return;
        };
        let Ok(mut w) = w.lock() else {
            return;
        };
        if protocol::write_frame(&mut *w, Kind::Heartbeat, &[])
            .and_then(|()| w.flush())
            .is_err()
        {
            return;
        }
    }
}

fn watchdog(
    mut reader: TcpStream,
    released: Signal,
    leaving: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    deaths: &Deaths,
) {
    loop {
        match protocol::read_frame(&mut reader) {
            Ok((Kind::Release, _)) => {
                tracing::debug!(target: "charmrun", "charmrun released the barrier");
                released.raise()
            }
            Ok((Kind::Dead, body)) => {
                if let Some((node, why)) = protocol::parse_node_why(&body) {
                    deaths.push(node, why);
                }
            }
            Ok((Kind::Die, _)) | Err(_)
                if leaving
                    .as_ref()
                    .is_some_and(|l| l.load(std::sync::atomic::Ordering::SeqCst)) =>
            {
                // A node in the launcher's own process that has left: the job ending is no
                // reason to end the process.
                return;
            }
            Ok((Kind::Die, _)) | Err(_) => {
                tracing::debug!(target: "charmrun", "charmrun said DIE or went away: ending this process");
                // The job is over (charmrun said so, or charmrun is gone): leave now, from
                // whatever state the rest of the process is in. `_exit` runs no exit-time
                // handlers, which could wait for locks other threads hold. The layer's files
                // go first: with charmrun gone, nobody else removes them.
                crate::cleanup::remove_registered();
                // A node in the launcher's own process leaves the launcher's group alone: the
                // launcher ends what it started itself.
                if leaving.is_none() {
                    kill_own_group();
                }
                // SAFETY: _exit has no preconditions; it ends the process without unwinding.
                unsafe { libc::_exit(1) }
            }
            Ok(_) => {}
        }
    }
}

/// This host's name, for messages.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// A counter the watchdog raises and `barrier` waits past.
mod signal {
    use std::sync::{Arc, Condvar, Mutex};

    #[derive(Clone, Default)]
    pub(super) struct Signal(Arc<(Mutex<u64>, Condvar)>);

    impl Signal {
        pub(super) fn ticket(&self) -> u64 {
            self.0 .0.lock().map_or(0, |g| *g)
        }
        pub(super) fn raise(&self) {
            if let Ok(mut g) = self.0 .0.lock() {
                *g += 1;
            }
            self.0 .1.notify_all();
        }
        /// Wait until the counter is past `ticket`, or `timeout` passed; whether it is.
        pub(super) fn wait_past(&self, ticket: u64, timeout: Option<std::time::Duration>) -> bool {
            let deadline = timeout.map(|t| std::time::Instant::now() + t);
            let Ok(mut g) = self.0 .0.lock() else {
                return false;
            };
            while *g <= ticket {
                let r = match deadline {
                    None => self.0 .1.wait(g).map(|g| (g, false)).map_err(|_| ()),
                    Some(d) => {
                        let left = d.saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            return false;
                        }
                        self.0
                             .1
                            .wait_timeout(g, left)
                            .map(|(g, t)| (g, t.timed_out()))
                            .map_err(|_| ())
                    }
                };
                match r {
                    Ok((ng, _)) => g = ng,
                    Err(_) => return false,
                }
            }
            true
        }
    }
}

/// A node's record of which peers are out of the job, for a layer in report mode
/// (`faults=report`, see the `Machine` contract): it merges what charmrun reports with what
/// the layer finds itself, so that each death is reported to the runtime once.
#[derive(Debug, Clone, Default)]
pub struct DeadPeers {
    /// Report mode: deaths are reported, not fatal. Off, nothing here is used.
    report: bool,
    /// How many of charmrun's reports have been read.
    cursor: usize,
    dead: Vec<bool>,
}

impl DeadPeers {
    /// For a job of `nodes` nodes; `report` says whether it is in report mode.
    pub fn new(report: bool, nodes: usize) -> DeadPeers {
        DeadPeers {
            report,
            cursor: 0,
            dead: vec![false; if report { nodes } else { 0 }],
        }
    }

    /// Whether deaths are reported rather than fatal.
    #[inline]
    pub fn reporting(&self) -> bool {
        self.report
    }

    /// Whether `node` is out of the job.
    #[inline]
    pub fn is_dead(&self, node: usize) -> bool {
        self.dead.get(node).copied().unwrap_or(false)
    }

    /// The next death charmrun reported that this node has not recorded yet (it is recorded
    /// now): the layer releases what it holds for that node and reports it. One atomic load
    /// when there is none.
    pub fn from_launcher(&mut self, ctl: &Control) -> Option<(usize, String)> {
        if !self.report {
            return None;
        }
        while let Some((node, why)) = ctl.next_death(&mut self.cursor) {
            if let Some(d) = self.dead.get_mut(node).filter(|d| !**d) {
                *d = true;
                return Some((node, why));
            }
        }
        None
    }

    /// Report mode for a layer of `nodes` nodes: ask charmrun to report deaths, and ring
    /// `waker` (the one that ends the layer's wait) when it does.
    ///
    /// # Errors
    /// [`MachineError::Io`] when charmrun cannot be told.
    pub fn start(
        ctl: &Control,
        nodes: usize,
        waker: Arc<dyn Wake>,
    ) -> Result<DeadPeers, MachineError> {
        ctl.set_death_waker(waker);
        ctl.report_deaths()?;
        Ok(DeadPeers::new(true, nodes))
    }

    /// A send to `node` is refused once it is out of the job (report mode).
    ///
    /// # Errors
    /// [`MachineError::PeerDead`] for a node out of the job.
    #[inline]
    pub fn check(&self, table: &NodeTable, node: usize) -> Result<(), MachineError> {
        if self.is_dead(node) {
            return Err(MachineError::peer_dead(table, node, "it is out of the job"));
        }
        Ok(())
    }

    /// Report mode: whether the layer's error `e` is a peer's death to report. If so, the
    /// death is recorded, charmrun is told (unless the node is `leaving`: in the exit barrier
    /// peers released first close as they leave, which is no death), and the node returned
    /// for the layer to release ([`converse_machine::Part::forget`]); the error itself is the
    /// report to the runtime.
    pub fn judge(&mut self, ctl: &Control, leaving: bool, e: &MachineError) -> Option<usize> {
        match e {
            MachineError::PeerDead { node, reason, .. } if self.report => {
                if !leaving {
                    self.found(ctl, *node, reason);
                }
                Some(*node)
            }
            _ => None,
        }
    }

    /// One step of a layer's exit barrier: in report mode a death then changes nothing
    /// (charmrun counts the dead as arrived); other errors stay errors.
    ///
    /// # Errors
    /// `r`'s, but a peer's death in report mode.
    pub fn in_barrier(&self, r: Result<usize, MachineError>) -> Result<(), MachineError> {
        match r {
            Err(MachineError::PeerDead { .. }) if self.report => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// The layer found `node` dead itself (`why`): record it and tell charmrun, which ends
    /// that node and tells the others. Whether it was news (a death is reported once).
    pub fn found(&mut self, ctl: &Control, node: usize, why: &str) -> bool {
        match self.dead.get_mut(node) {
            Some(d) if !*d => {
                *d = true;
                ctl.suspect(node, why);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use converse_machine::NodeInfo;

    fn table(n: usize) -> NodeTable {
        let nodes = (0..n)
            .map(|i| NodeInfo {
                first_pe: i,
                num_pes: 1,
                host: "h".into(),
                addr: Vec::new(),
            })
            .collect();
        NodeTable::new(nodes).expect("table")
    }

    #[test]
    fn off_report_mode_nothing_is_dead_and_deaths_stay_errors() {
        let d = DeadPeers::default();
        let t = table(3);
        assert!(!d.reporting() && !d.is_dead(1) && !d.is_dead(99));
        assert!(d.check(&t, 1).is_ok());
        let e = MachineError::peer_dead(&t, 1, "gone");
        assert!(matches!(
            d.in_barrier(Err(e)),
            Err(MachineError::PeerDead { node: 1, .. })
        ));
    }

    #[test]
    fn in_report_mode_a_recorded_death_refuses_sends_and_passes_the_barrier() {
        let mut d = DeadPeers::new(true, 3);
        let t = table(3);
        d.dead[2] = true;
        assert!(d.is_dead(2) && !d.is_dead(1));
        assert!(matches!(
            d.check(&t, 2),
            Err(MachineError::PeerDead { node: 2, .. })
        ));
        assert!(d.check(&t, 1).is_ok());
        let e = MachineError::peer_dead(&t, 2, "gone");
        assert!(d.in_barrier(Err(e)).is_ok());
        let other = MachineError::Boot("x".into());
        assert!(d.in_barrier(Err(other)).is_err());
        assert!(d.in_barrier(Ok(3)).is_ok());
    }
}
