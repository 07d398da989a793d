//! A PE's I/O thread: it accepts connections on the PE's listeners (handing each to a
//! handshake thread), reads every connection and posts what arrives to the PE's mailbox, and
//! writes what the PE's sends left queued. The PE writes directly when nothing waits, so a
//! message out costs no thread switch; a message in costs one (this thread to the PE), the
//! price of a PE that never blocks on a socket.
//!
//! **Bounds.** Per connection, bytes posted to the PE and not yet handled stop at the
//! inbound limit: past it, the thread stops reading that connection until the PE catches up,
//! and TCP's window stops the peer. Bytes queued for a peer stop at the queue limit (the
//! PE's send is refused, `SendError::Full`). Handshakes under way stop at
//! [`MAX_HANDSHAKES`] (8 from one host): past the total, new connections wait in the kernel's
//! backlog until a slot frees; past one host's share, its new ones are closed at once. So
//! strangers cost a bounded number of threads and never an established peer.
//!
//! **Exit.** What a PE sent is not lost because its job ended: once the PE's thread has
//! ended (or the process exits, through an `atexit` handler, [`stop_at_exit`]), the thread
//! goes on writing what is still queued for its peers, and on TCP waits until they have
//! acknowledged it (reading and dropping what they send meanwhile: a socket closed with
//! unread input is reset, which would drop the rest), at most [`LINGER`]; then it closes
//! every connection, a `udp://` listener's in order. The process's exit waits for that (and
//! then for `udp://`'s own close, at most another [`LINGER`]). A peer that reads gets the
//! job's last messages; one that does not costs the exit the linger.
//!
//! | posted to the PE (`arg0`) | `arg1` | payload |
//! |---|---|---|
//! | [`EV_MSG`] | peer | name length u16 LE, name, data |
//! | [`EV_CALL`] | peer | id u64 LE, name length u16 LE, name, data |
//! | [`EV_REPLY`] | peer | id u64 LE, status u8, data |
//! | [`EV_JOINED`] | peer | the listener's address string, NUL, the peer's socket address |
//! | [`EV_LEFT`] | peer | why (UTF-8) |
//! | [`EV_DRAINED`] | peer | nothing |

use crate::conn::{accept_handshake, Conn};
use crate::secret::Secret;
use crate::stream::{Listener, Stream};
use crate::wire::{Frame, FrameReader};
use crate::Limits;
use converse::{HandlerId, Mailbox, Message};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, Weak};
use std::time::{Duration, Instant};

/// How long an I/O thread whose PE has ended keeps writing what is queued for its peers.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// Every I/O thread of the process (what it shares with its PE), so the exit can stop them.
static THREADS: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// I/O threads of the process still running, and the signal that one ended.
static RUNNING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// Registers [`stop_at_exit`] once per process.
static AT_EXIT: Once = Once::new();

/// The process whose threads [`RUNNING`] counts: a child forked without `exec` inherits the
/// handler and the count but not the threads, and must not wait for them.
static THREADS_PID: AtomicU32 = AtomicU32::new(0);

/// Run by `exit` (the end of `main`, `std::process::exit`): every I/O thread is told its PE
/// is gone (a PE on the main thread may never run its thread-locals' destructors), and the
/// exit waits until they have written what was queued and ended, or [`LINGER`] and a little
/// more have passed. Nothing here panics (a panic would abort in an `extern "C"` function).
extern "C" fn stop_at_exit() {
    if THREADS_PID.load(Ordering::Acquire) != std::process::id() {
        return;
    }
    let threads: Vec<Arc<Shared>> = THREADS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for s in &threads {
        s.stop.store(true, Ordering::SeqCst);
        s.bell.ring();
    }
    drop(threads);
    wait_for_none(
        &RUNNING,
        Instant::now() + LINGER + Duration::from_millis(100),
    );
}

/// Wait until `count` is 0 (its condition variable signals each change) or `deadline`:
/// what the exit handlers wait on. Never panics (they are `extern "C"`).
pub(crate) fn wait_for_none(count: &(Mutex<usize>, Condvar), deadline: Instant) {
    let (n, cv) = count;
    let mut left_alive = n.lock().unwrap_or_else(|p| p.into_inner());
    while *left_alive > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        left_alive = match cv.wait_timeout(left_alive, left) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
}

/// Counts a running I/O thread in [`RUNNING`] for as long as it lives.
struct Running;

impl Running {
    /// Counted, in the process it runs in: a child forked without `exec` inherits the
    /// parent's count and registry but none of its threads, so they start again from
    /// nothing there (else its exit would wait the whole linger for threads it lacks).
    fn start(shared: &Arc<Shared>) -> Running {
        let me = std::process::id();
        let mut n = RUNNING.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = THREADS.lock().unwrap_or_else(|p| p.into_inner());
        if THREADS_PID.load(Ordering::Acquire) != me {
            *n = 0;
            all.clear();
            THREADS_PID.store(me, Ordering::Release);
        }
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(shared));
        *n += 1;
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let (count, cv) = &RUNNING;
        let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        cv.notify_all();
    }
}

pub(crate) const EV_MSG: u32 = 0;
pub(crate) const EV_CALL: u32 = 1;
pub(crate) const EV_REPLY: u32 = 2;
pub(crate) const EV_JOINED: u32 = 3;
pub(crate) const EV_LEFT: u32 = 4;
pub(crate) const EV_DRAINED: u32 = 5;

/// Handshakes under way at once, per PE.
pub const MAX_HANDSHAKES: usize = 32;

/// Handshakes under way at once from one host (one IP address; all of this host's `si://`).
const MAX_HANDSHAKES_PER_SOURCE: usize = 8;

/// Connections accepted and waiting for their host's handshake slot, at most (then refused).
const MAX_WAITING: usize = 256;

/// How long a connecting program has to prove the secret once the listener spoke: a client
/// answers at once, so a short wait bounds what a silent stranger holds.
const PROOF_WITHIN: Duration = Duration::from_secs(3);

/// What a PE and its I/O thread share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) conns: Mutex<HashMap<u32, Arc<Conn>>>,
    /// Listeners not yet taken up by the I/O thread, with their secret and address string.
    pub(crate) new_listeners: Mutex<Vec<(Listener, Arc<Secret>, String)>>,
    pub(crate) bell: Bell,
    pub(crate) mailbox: Mailbox,
    pub(crate) in_h: HandlerId,
    pub(crate) limits: Limits,
    pub(crate) next_peer: AtomicU32,
    pub(crate) handshakes: AtomicUsize,
    /// Handshakes under way and waiting, per source (see [`MAX_HANDSHAKES_PER_SOURCE`]).
    pub(crate) by_source: Mutex<HashMap<String, Source>>,
    /// Connections waiting for a handshake slot of their host, in all.
    pub(crate) waiting: AtomicUsize,
    pub(crate) refusals: Mutex<RefusalLines>,
    /// The PE's thread has ended: the I/O thread closes everything and ends too.
    pub(crate) stop: AtomicBool,
}

/// Held by the PE's thread (a thread-local): when the thread ends, with its job, the I/O
/// thread is told to close its listeners and connections and end (a job run inside a larger
/// program leaves no socket open behind it).
#[derive(Debug)]
pub(crate) struct StopOnExit(pub(crate) Arc<Shared>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
        self.0.bell.ring();
    }
}

/// The eventfd that ends the I/O thread's poll; a flag spares the system call of every ring
/// but the first until the thread has seen it.
#[derive(Debug)]
pub(crate) struct Bell {
    fd: EventFd,
    rung: AtomicBool,
}

impl Bell {
    pub(crate) fn new() -> std::io::Result<Bell> {
        Ok(Bell {
            fd: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
            rung: AtomicBool::new(false),
        })
    }

    pub(crate) fn ring(&self) {
        if !self.rung.swap(true, Ordering::SeqCst) {
            let _ = self.fd.write(1);
        }
    }

    fn reset(&self) {
        // Read, then clear: a ring in between writes nothing but came before this return.
        // Sequentially consistent with the ring's swap and the stop flag on both sides:
        // with acquire/release, "set stop, ring" racing "clear, look at stop" could lose both
        // the ring and the stop (each side reading the other's old value).
        let _ = self.fd.read();
        self.rung.store(false, Ordering::SeqCst);
    }
}

/// Lines about refused connections, at most one a second (a flood of strangers must not
/// flood the job's stderr), each saying how many it stands for.
#[derive(Debug, Default)]
pub(crate) struct RefusalLines {
    last: Option<Instant>,
    unsaid: u64,
}

impl Shared {
    pub(crate) fn post(&self, kind: u32, peer: u32, msg: Message) {
        let mut msg = msg;
        msg.set_arg0(kind);
        msg.set_arg1(peer);
        self.mailbox.post(self.in_h, msg);
    }

    fn refused(&self, listener: &str, from: &str, why: &str) {
        let mut r = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if r.last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            r.unsaid += 1;
            return;
        }
        let more = std::mem::take(&mut r.unsaid);
        r.last = Some(now);
        let and = if more > 0 {
            format!(" (and {more} more refused in the last second)")
        } else {
            String::new()
        };
        converse_machine::input::error_line(&format!(
            "endpoint {listener}: refused a connection from {from}: {why}{and}"
        ));
    }

    /// A connection is gone: out of the table, and the PE told why (once).
    pub(crate) fn close(&self, conn: &Conn, why: &str) {
        if conn.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&conn.peer);
        conn.stream.shutdown();
        self.post(EV_LEFT, conn.peer, Message::from_payload(why.as_bytes()));
    }

    /// Add an established connection (after its handshake) and have the I/O thread watch it.
    pub(crate) fn adopt(&self, conn: Arc<Conn>) {
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(conn.peer, conn);
        self.bell.ring();
    }
}

/// Start the I/O thread.
pub(crate) fn start(shared: Arc<Shared>) -> std::io::Result<()> {
    AT_EXIT.call_once(|| {
        // `udp://`'s handler first, so that this one, registered after it, runs before it.
        crate::udp::register_at_exit();
        // SAFETY: `stop_at_exit` is an `extern "C" fn()` that does not unwind.
        unsafe {
            libc::atexit(stop_at_exit);
        }
    });
    // Counted before the thread exists, so an exit right after this call waits for it.
    let running = Running::start(&shared);
    std::thread::Builder::new()
        .name(format!("endpoint-io-{}", shared.mailbox.pe()))
        .spawn(move || {
            let _running = running;
            run(&shared)
        })
        .map(|_| ())
}

struct Listening {
    listener: Listener,
    secret: Arc<Secret>,
    addr: String,
}

fn run(shared: &Arc<Shared>) {
    let mut listeners: Vec<Listening> = Vec::new();
    let mut readers: HashMap<u32, FrameReader> = HashMap::new();
    // Kept across polls: the loop allocates only when the set of connections grows.
    let mut conns: Vec<Arc<Conn>> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        listeners.extend(
            shared
                .new_listeners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..)
                .map(|(listener, secret, addr)| Listening {
                    listener,
                    secret,
                    addr,
                }),
        );
        // The connections now: a copy of the table's handles, so the PE's sends (which
        // take the table's lock only to find a peer) never wait on this thread's poll.
        conns.clear();
        conns.extend(
            shared
                .conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned(),
        );
        if readers.len() > conns.len() {
            readers.retain(|p, _| conns.iter().any(|c| c.peer == *p));
        }
        fds.clear();
        fds.push(pollfd(shared.bell.fd.as_fd().as_raw_fd(), libc::POLLIN));
        // With every handshake slot taken, the listeners are not watched: new connections
        // wait in the kernel's backlog (a burst of hundreds of peers is served in turn, not
        // refused) until a handshake ends and rings the bell.
        let full = shared.handshakes.load(Ordering::Acquire) >= MAX_HANDSHAKES;
        for l in &listeners {
            let ev = if full { 0 } else { libc::POLLIN };
            fds.push(pollfd(l.listener.as_raw_fd(), ev));
        }
        for c in &conns {
            let mut ev = 0;
            let waiting = c.waiting();
            // Not read while the PE is behind on it. Still read while its replies pile up
            // unread: the next reply past the cap ends the connection (`reply_status`), and
            // it only comes from a call read here (stopping reading there left a peer that
            // calls and never reads, and this side, both waiting for good).
            if c.ready.load(Ordering::Acquire) && !c.paused.load(Ordering::SeqCst) {
                ev |= libc::POLLIN;
            }
            if waiting > 0 {
                ev |= libc::POLLOUT;
            }
            fds.push(pollfd(c.stream.as_raw_fd(), ev));
        }
        // SAFETY: `fds` is a valid array of pollfd of the length given.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            continue; // EINTR
        }
        if fds[0].revents != 0 {
            shared.bell.reset();
            if shared.stop.load(Ordering::SeqCst) {
                let all: Vec<Arc<Conn>> = shared
                    .conns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .drain()
                    .map(|(_, c)| c)
                    .collect();
                // No one new while the last bytes go out; a `udp://` listener carries the
                // connections it accepted, so it stays until they are written out.
                let (carriers, others): (Vec<_>, Vec<_>) = std::mem::take(&mut listeners)
                    .into_iter()
                    .partition(|l| l.listener.carries_connections());
                drop(others);
                linger(&all, &mut fds);
                for c in all {
                    c.closed.store(true, Ordering::Release);
                    c.stream.shutdown();
                }
                for l in carriers {
                    l.listener.close_in_order();
                }
                return;
            }
        }
        for (i, l) in listeners.iter().enumerate() {
            if fds[1 + i].revents != 0 {
                accept_all(shared, l);
            }
        }
        let base = 1 + listeners.len();
        for (i, c) in conns.iter().enumerate() {
            let re = fds[base + i].revents;
            if re == 0 || c.closed.load(Ordering::Acquire) {
                continue;
            }
            if re & libc::POLLOUT != 0 {
                match c.flush() {
                    Ok(true) => shared.post(EV_DRAINED, c.peer, Message::with_capacity(0)),
                    Ok(false) => {}
                    Err(e) => {
                        shared.close(c, &format!("writing to it failed: {e}"));
                        continue;
                    }
                }
            }
            if re & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                let r = readers
                    .entry(c.peer)
                    .or_insert_with(|| FrameReader::new(shared.limits.max_message));
                if let Err(why) = read_conn(shared, c, r) {
                    shared.close(c, &why);
                }
            }
        }
    }
}

/// The PE has ended: write what is queued for `conns` until nothing is and the peers have
/// acknowledged it (TCP), or [`LINGER`] has passed. What the peers send meanwhile is read and
/// dropped: a TCP socket closed with unread input is reset, and a reset drops what the peer
/// has not acknowledged yet. A connection whose write fails is left (it is closed after).
fn linger(conns: &[Arc<Conn>], fds: &mut Vec<libc::pollfd>) {
    let deadline = Instant::now() + LINGER;
    let mut failed = vec![false; conns.len()];
    let mut eof = vec![false; conns.len()];
    let mut scratch = vec![0u8; 64 << 10];
    loop {
        fds.clear();
        let mut which = Vec::new();
        // Acknowledgements raise no event here: looked at again after a short wait.
        let mut unacked = false;
        for (i, c) in conns.iter().enumerate() {
            if failed[i] || c.closed.load(Ordering::Acquire) {
                continue;
            }
            let queued = c.waiting() > 0;
            if !queued && c.stream.unacked() == 0 {
                continue;
            }
            unacked |= !queued;
            let mut ev = if queued { libc::POLLOUT } else { 0 };
            if !eof[i] {
                ev |= libc::POLLIN;
            }
            fds.push(pollfd(c.stream.as_raw_fd(), ev));
            which.push(i);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if fds.is_empty() || left.is_zero() {
            return;
        }
        let mut ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        if unacked {
            ms = ms.min(5);
        }
        // SAFETY: `fds` is a valid array of pollfd of the length given.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            continue; // EINTR, or the wait is up (the deadline is seen at the top)
        }
        for (k, &i) in which.iter().enumerate() {
            let re = fds[k].revents;
            let c = &conns[i];
            if re & libc::POLLIN != 0 {
                // Dropped: the PE that would handle it is gone.
                loop {
                    match (&c.stream).read(&mut scratch) {
                        Ok(0) => {
                            eof[i] = true;
                            break;
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            failed[i] = true;
                            break;
                        }
                    }
                }
            }
            let broken = re & (libc::POLLERR | libc::POLLNVAL) != 0
                || (re & libc::POLLHUP != 0 && re & libc::POLLIN == 0);
            if broken || (re & libc::POLLOUT != 0 && c.flush().is_err()) {
                failed[i] = true;
            }
        }
    }
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

fn accept_all(shared: &Arc<Shared>, l: &Listening) {
    // Up to the slots free; the rest wait in the backlog (see `run`).
    while shared.handshakes.load(Ordering::Acquire) < MAX_HANDSHAKES {
        let stream = match l.listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            // Out of descriptors, say: the connection stays in the backlog, and the listener
            // readable; a pause, so this thread does not spin on it.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                return;
            }
        };
        // One host's handshakes run at most a share of the slots at once, so strangers from
        // one host cannot take them all from the rest; its further connections wait their
        // turn in its queue (a burst from one host is served in turn), up to a bound.
        let source = stream.source();
        let job = Handshake {
            stream,
            secret: l.secret.clone(),
            addr: l.addr.clone(),
        };
        let start = {
            let mut by = shared.by_source.lock().unwrap_or_else(|p| p.into_inner());
            let src = by.entry(source.clone()).or_default();
            if src.running < MAX_HANDSHAKES_PER_SOURCE {
                src.running += 1;
                shared.handshakes.fetch_add(1, Ordering::AcqRel);
                Some(job)
            } else if shared.waiting.load(Ordering::Acquire) < MAX_WAITING {
                shared.waiting.fetch_add(1, Ordering::AcqRel);
                src.queued.push_back(job);
                None
            } else {
                drop(by);
                shared.refused(
                    &l.addr,
                    &job.stream.peer_name(),
                    "too many connections waiting",
                );
                continue; // dropped: closed
            }
        };
        if let Some(job) = start {
            let (shared2, key) = (shared.clone(), source.clone());
            let spawned = std::thread::Builder::new()
                .name("endpoint-handshake".into())
                .spawn(move || handshakes_of(&shared2, source, job));
            if spawned.is_err() {
                // No thread to be had: the slot goes back, and this connection and those
                // waiting behind it are closed (dropped).
                while release(shared, &key).is_some() {}
            }
        }
    }
}

/// A connection accepted and waiting for its handshake.
pub(crate) struct Handshake {
    stream: Stream,
    secret: Arc<Secret>,
    addr: String,
}

/// One host's share of the handshakes: running, and waiting their turn.
#[derive(Default)]
pub(crate) struct Source {
    running: usize,
    queued: std::collections::VecDeque<Handshake>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("running", &self.running)
            .field("queued", &self.queued.len())
            .finish()
    }
}

/// A handshake thread: this connection's handshake, then its host's next waiting one, until
/// none waits.
fn handshakes_of(shared: &Arc<Shared>, source: String, first: Handshake) {
    let mut job = Some(first);
    while let Some(h) = job.take() {
        handshake(shared, h.stream, &h.secret, &h.addr);
        job = release(shared, &source);
    }
}

/// A handshake of `source` ended: its next waiting connection, to run on the same thread and
/// slot; or, when none waits, the slot is given back (and the listeners watched again if all
/// were taken).
fn release(shared: &Arc<Shared>, source: &String) -> Option<Handshake> {
    let mut by = shared.by_source.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(src) = by.get_mut(source) {
        if let Some(next) = src.queued.pop_front() {
            shared.waiting.fetch_sub(1, Ordering::AcqRel);
            return Some(next);
        }
        src.running -= 1;
        if src.running == 0 {
            by.remove(source);
        }
    }
    drop(by);
    if shared.handshakes.fetch_sub(1, Ordering::AcqRel) == MAX_HANDSHAKES {
        shared.bell.ring();
    }
    None
}

fn handshake(shared: &Arc<Shared>, stream: Stream, secret: &Secret, addr: &str) {
    // The accepted socket may have inherited non-blocking mode from the listener.
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let deadline = Instant::now() + shared.limits.handshake.min(PROOF_WITHIN);
    if let Err(why) = accept_handshake(&stream, secret, deadline) {
        shared.refused(addr, &stream.peer_name(), &why);
        return;
    }
    stream.proven();
    let peer = shared.next_peer.fetch_add(1, Ordering::AcqRel);
    let Ok(conn) = Conn::new(peer, stream) else {
        return;
    };
    let from = conn.remote.clone();
    let mut m = Message::with_capacity(addr.len() + 1 + 48);
    m.extend_payload(addr.as_bytes());
    m.extend_payload(&[0]);
    m.extend_payload(from.as_bytes());
    // In the table first (not read yet), so the PE can send to the peer from its Joined
    // handler; Joined posted before the first frame is read, so the PE hears of the peer
    // before anything it sends.
    let conn = Arc::new(conn);
    conn.ready.store(false, Ordering::Release);
    shared.adopt(conn.clone());
    shared.post(EV_JOINED, peer, m);
    conn.ready.store(true, Ordering::Release);
    shared.bell.ring();
}

/// Read what the connection has, posting each whole frame; stops when the socket has no
/// more or the inbound limit is reached.
fn read_conn(shared: &Shared, c: &Conn, r: &mut FrameReader) -> Result<(), String> {
    loop {
        // Frames already in the buffer first (the limit may have stopped them last time).
        while let Some(f) = r
            .next()
            .map_err(|e| format!("it sent bad bytes: {}", e.0))?
        {
            let m = to_message(&f);
            let bytes = m.payload().len();
            let kind = match f {
                Frame::Msg { .. } => EV_MSG,
                Frame::Call { .. } => EV_CALL,
                Frame::Reply { .. } => EV_REPLY,
            };
            let now = c.inbound.fetch_add(bytes, Ordering::SeqCst) + bytes;
            shared.post(kind, c.peer, m);
            if now >= shared.limits.inbound_bytes {
                // SeqCst, with the PE's side (`handled`): a store then a load on each side,
                // which weaker orderings let both sides miss (the PE would not ring, this
                // thread would not read, and the connection would stay paused for good).
                c.paused.store(true, Ordering::SeqCst);
                // The PE may have handled everything between the add and the store.
                if c.inbound.load(Ordering::SeqCst) >= shared.limits.inbound_bytes {
                    return Ok(());
                }
                c.paused.store(false, Ordering::SeqCst);
            }
        }
        let space = r.space();
        match (&c.stream).read(space) {
            Ok(0) => {
                return Err(c
                    .stream
                    .ended_why()
                    .unwrap_or_else(|| "it closed the connection".into()))
            }
            Ok(n) => r.filled(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(format!("reading from it failed: {e}")),
        }
    }
}

/// The frame as the PE's message (the one copy of its bytes on the way in: out of the
/// connection's buffer, which the next read reuses).
fn to_message(f: &Frame<'_>) -> Message {
    match *f {
        Frame::Msg { name, data } => {
            let mut m = Message::with_capacity(2 + name.len() + data.len());
            m.extend_payload(&(name.len() as u16).to_le_bytes());
            m.extend_payload(name.as_bytes());
            m.extend_payload(data);
            m
        }
        Frame::Call { id, name, data } => {
            let mut m = Message::with_capacity(10 + name.len() + data.len());
            m.extend_payload(&id.to_le_bytes());
            m.extend_payload(&(name.len() as u16).to_le_bytes());
            m.extend_payload(name.as_bytes());
            m.extend_payload(data);
            m
        }
        Frame::Reply { id, status, data } => {
            let mut m = Message::with_capacity(9 + data.len());
            m.extend_payload(&id.to_le_bytes());
            m.extend_payload(&[status]);
            m.extend_payload(data);
            m
        }
    }
}
