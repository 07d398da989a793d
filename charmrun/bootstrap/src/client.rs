//! The node side of the control protocol, used by every layer charmrun starts.
//!
//! ```text
//! let env = LaunchEnv::from_env()?;       // what charmrun put in the environment
//! let mut ctl = Control::connect(&env)?;  // connect back; learn our IP on charmrun's route
//! /* bind the layer's own socket on ctl.local_ip(), make `info` from its address */
//! let table = ctl.exchange(info)?;        // HELLO, then wait for the node table
//! ctl.barrier()?; ctl.ending(code)?;      // at exit
//! ```
//!
//! Layers do not call it themselves: the launcher session ([`crate::session`]) does, through
//! the [`Bootstrap`] interface this implements. After [`exchange`](Bootstrap::exchange) a watchdog thread owns the read side of the control connection. It
//! releases barriers, and it ends the process at once when charmrun says the job is over or
//! the connection drops: so a node never outlives its job, even one whose main thread is hung
//! and never polls. Between charmrun's frames the same thread tells charmrun every
//! [`HEARTBEAT_INTERVAL`](protocol::HEARTBEAT_INTERVAL) that the process still answers, so a
//! stopped or frozen node is noticed (`++hang-timeout`), and one busy in a long handler is not
//! taken for one.

use crate::protocol::{self, Hello, Kind, SECRET_LEN};
use crate::Bootstrap;
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
    /// Shared with the watchdog thread, which stops its heartbeats when the connection ends.
    writer: Arc<Mutex<TcpStream>>,
    reader: Option<TcpStream>,
    local_ip: IpAddr,
    released: Signal,
    node: usize,
    /// Nodes in the job, as the launch said: the table must agree.
    nodes: usize,
    secret: [u8; SECRET_LEN],
    /// For a node in the launcher's process: set once it said it leaves.
    leaving: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The nodes charmrun said are out of the job (report mode).
    deaths: Arc<Deaths>,
    /// Broadcasts' blobs charmrun handed down, oldest first, for [`Bootstrap::broadcast`].
    blobs: Arc<Blobs>,
    /// Every node's host, from the node table: for errors that name a node.
    hosts: std::sync::OnceLock<Vec<String>>,
}

/// Broadcasts' blobs from charmrun (`BCAST` frames), filled by the watchdog.
#[derive(Default)]
struct Blobs {
    list: Mutex<std::collections::VecDeque<Vec<u8>>>,
    came: std::sync::Condvar,
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
            nodes: env.num_nodes,
            secret: env.secret,
            leaving: env
                .embedded
                .then(|| std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))),
            deaths: Arc::default(),
            blobs: Arc::default(),
            hosts: std::sync::OnceLock::new(),
        })
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

impl Bootstrap for Control {
    fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    fn exchange(&mut self, info: Vec<u8>) -> Result<NodeTable, MachineError> {
        let hello = Hello {
            secret: self.secret,
            node: self.node as u32,
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
        if table.num_nodes() != self.nodes {
            return Err(MachineError::Boot(format!(
                "node table has {} nodes, expected {}",
                table.num_nodes(),
                self.nodes
            )));
        }
        tracing::debug!(target: "charmrun", nodes = table.num_nodes(), "node table received");
        let _ = self
            .hosts
            .set(table.nodes().iter().map(|n| n.host.clone()).collect());
        let released = self.released.clone();
        let leaving = self.leaving.clone();
        let deaths = self.deaths.clone();
        let blobs = self.blobs.clone();
        let writer = Arc::downgrade(&self.writer);
        // One thread reads and beats: a second one for the heartbeat cost every node a
        // thread's creation and exit while the job starts.
        std::thread::Builder::new()
            .name("charmrun-watchdog".into())
            .spawn(move || watchdog(reader, &writer, released, leaving, &deaths, &blobs))
            .map_err(|e| MachineError::io("starting the charmrun watchdog", e))?;
        Ok(table)
    }

    fn barrier(&self) -> Result<(), MachineError> {
        let ticket = self.barrier_begin()?;
        self.released.wait_past(ticket, None);
        Ok(())
    }

    fn barrier_begin(&self) -> Result<u64, MachineError> {
        let ticket = self.released.ticket();
        tracing::debug!(target: "charmrun", ticket, "entering charmrun's barrier");
        self.send(Kind::Barrier, &[])?;
        Ok(ticket)
    }

    fn released(&self, ticket: u64, timeout: Duration) -> bool {
        self.released.wait_past(ticket, Some(timeout))
    }

    fn wake_on_release(&self, waker: Arc<dyn Wake>) {
        self.released.ring_at_raise(waker);
    }

    fn broadcast(&self, root: usize, blob: &[u8]) -> Result<Vec<u8>, MachineError> {
        if root >= self.nodes {
            return Err(MachineError::InvalidNode {
                node: root,
                nodes: self.nodes,
            });
        }
        if root == self.node {
            self.send(Kind::Bcast, blob)?;
        }
        let Ok(mut list) = self.blobs.list.lock() else {
            return Err(MachineError::Boot(
                "the broadcast's lock is poisoned".into(),
            ));
        };
        loop {
            if let Some(b) = list.pop_front() {
                return Ok(b);
            }
            // Report mode: a root gone before its blob came never sends it (charmrun's
            // DEAD frame for it came first, on the same connection).
            let gone = self
                .deaths
                .list
                .lock()
                .ok()
                .and_then(|l| l.iter().find(|(n, _)| *n == root).map(|(_, w)| w.clone()));
            if let Some(why) = gone {
                let host = self.hosts.get().and_then(|h| h.get(root)).cloned();
                return Err(MachineError::PeerDead {
                    node: root,
                    host: host.unwrap_or_else(|| "?".into()),
                    reason: format!("the root of a broadcast is out of the job: {why}"),
                });
            }
            list = match self
                .blobs
                .came
                .wait_timeout(list, Duration::from_millis(100))
            {
                Ok((l, _)) => l,
                Err(_) => {
                    return Err(MachineError::Boot(
                        "the broadcast's lock is poisoned".into(),
                    ))
                }
            };
        }
    }

    fn report_deaths(&self, waker: Arc<dyn Wake>) -> Result<(), MachineError> {
        if let Ok(mut w) = self.deaths.waker.lock() {
            *w = Some(waker);
        }
        // Charmrun then tells this node of every death with a `DEAD` frame (the watchdog
        // keeps them for `next_death`); a death before charmrun has heard it (during
        // start-up) still ends the job.
        self.send(Kind::Survive, &[])
    }

    fn next_death(&self, cursor: &mut usize) -> Option<(usize, String)> {
        if self.deaths.count.load(std::sync::atomic::Ordering::Acquire) <= *cursor {
            return None;
        }
        let l = self.deaths.list.lock().ok()?;
        let d = l.get(*cursor)?.clone();
        *cursor += 1;
        Some(d)
    }

    fn suspect(&self, node: usize, why: &str) {
        // Best effort: if charmrun cannot be told, it will notice the death itself.
        let _ = self.send(Kind::Suspect, &protocol::node_why(node, why));
    }

    fn ending(&self, code: i32) -> Result<(), MachineError> {
        if let Some(l) = &self.leaving {
            l.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.send(Kind::Ending, &code.to_le_bytes())
    }

    fn abort(&self, reason: &str) -> ! {
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

/// Tell charmrun this process still answers: `false` once it cannot be told any more (the
/// connection dropped or failed), `None` when the writer is busy and `wait` is false (try
/// again soon: the reading thread that beats should not wait behind a writer; after a few
/// tries it does, since a writer sending back to back could otherwise starve the beats).
fn beat(writer: &Weak<Mutex<TcpStream>>, wait: bool) -> Option<bool> {
    let Some(w) = writer.upgrade() else {
        return Some(false);
    };
    let w = if wait {
        w.lock().map_err(|_| ())
    } else {
        match w.try_lock() {
            Ok(w) => Ok(w),
            Err(std::sync::TryLockError::WouldBlock) => return None,
            Err(std::sync::TryLockError::Poisoned(_)) => Err(()),
        }
    };
    let Ok(mut w) = w else {
        return Some(false);
    };
    Some(
        protocol::write_frame(&mut *w, Kind::Heartbeat, &[])
            .and_then(|()| w.flush())
            .is_ok(),
    )
}

/// Whether `s` has something to read (or has ended) within `wait`.
fn readable_within(s: &TcpStream, wait: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // Rounded up: a wait of less than a millisecond is not a spin of zero-time polls.
        let ms = libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
        let mut fds = [libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd, for a descriptor `s` keeps open.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if n == 0 {
            return false;
        }
        let interrupted =
            n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        if !interrupted {
            // Readable, ended, or an error the next read reports.
            return true;
        }
    }
}

/// Read what charmrun sends until the job is over, and between its frames tell charmrun every
/// [`HEARTBEAT_INTERVAL`](protocol::HEARTBEAT_INTERVAL) that this process still answers (until
/// the connection is dropped or fails).
fn watchdog(
    mut reader: TcpStream,
    writer: &Weak<Mutex<TcpStream>>,
    released: Signal,
    leaving: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    deaths: &Deaths,
    blobs: &Blobs,
) {
    let mut beating = true;
    let mut next_beat = std::time::Instant::now() + protocol::HEARTBEAT_INTERVAL;
    // Tries in a row that found the writer busy.
    let mut busy = 0u32;
    loop {
        if beating {
            let now = std::time::Instant::now();
            if now >= next_beat || !readable_within(&reader, next_beat - now) {
                match beat(writer, busy >= 10) {
                    Some(true) => {
                        busy = 0;
                        next_beat = std::time::Instant::now() + protocol::HEARTBEAT_INTERVAL;
                    }
                    Some(false) => beating = false,
                    None => {
                        busy += 1;
                        next_beat = std::time::Instant::now() + Duration::from_millis(10);
                    }
                }
                continue;
            }
        }
        match protocol::read_frame(&mut reader) {
            Ok((Kind::Bcast, blob)) => {
                if let Ok(mut l) = blobs.list.lock() {
                    l.push_back(blob);
                }
                blobs.came.notify_all();
            }
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
                // handlers, which could wait for locks other threads hold. A trace chunk being
                // written is let finish (a moment at most), and the layer's files go first:
                // with charmrun gone, nobody else removes them.
                converse_machine::writes::wait(std::time::Duration::from_millis(200));
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
    use converse_machine::Wake;
    use std::sync::{Arc, Condvar, Mutex};

    /// A counter raised by one thread and waited past by another; `waker`, if set, is rung
    /// at each raise too, for a waiter napping in its layer instead of on the condvar.
    #[derive(Clone, Default)]
    pub(super) struct Signal(Arc<Inner>);

    #[derive(Default)]
    pub(super) struct Inner {
        count: Mutex<u64>,
        raised: Condvar,
        waker: Mutex<Option<Arc<dyn Wake>>>,
    }

    impl Signal {
        pub(super) fn ticket(&self) -> u64 {
            self.0.count.lock().map_or(0, |g| *g)
        }
        pub(super) fn raise(&self) {
            if let Ok(mut g) = self.0.count.lock() {
                *g += 1;
            }
            self.0.raised.notify_all();
            if let Ok(w) = self.0.waker.lock() {
                if let Some(w) = w.as_ref() {
                    w.wake();
                }
            }
        }
        pub(super) fn ring_at_raise(&self, waker: Arc<dyn Wake>) {
            if let Ok(mut w) = self.0.waker.lock() {
                *w = Some(waker);
            }
        }
        /// Wait until the counter is past `ticket`, or `timeout` passed; whether it is.
        pub(super) fn wait_past(&self, ticket: u64, timeout: Option<std::time::Duration>) -> bool {
            let deadline = timeout.map(|t| std::time::Instant::now() + t);
            let Ok(mut g) = self.0.count.lock() else {
                return false;
            };
            while *g <= ticket {
                let r = match deadline {
                    None => self.0.raised.wait(g).map(|g| (g, false)).map_err(|_| ()),
                    Some(d) => {
                        let left = d.saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            return false;
                        }
                        self.0
                            .raised
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

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::atomic::{AtomicUsize, Ordering};

        #[derive(Default)]
        struct Rings(AtomicUsize);
        impl Wake for Rings {
            fn wake(&self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }

        /// A release rings the layer's waker (a barrier waiter napping in its layer), once per
        /// raise, and is seen past the ticket taken before it.
        #[test]
        fn a_raise_rings_the_waker_and_passes_the_ticket() {
            let s = Signal::default();
            let ticket = s.ticket();
            s.raise();
            assert!(s.wait_past(ticket, Some(std::time::Duration::ZERO)));
            let rings = Arc::new(Rings::default());
            s.ring_at_raise(rings.clone());
            let ticket = s.ticket();
            assert!(!s.wait_past(ticket, Some(std::time::Duration::ZERO)));
            s.raise();
            assert_eq!(rings.0.load(Ordering::SeqCst), 1);
            assert!(s.wait_past(ticket, Some(std::time::Duration::ZERO)));
        }
    }
}
