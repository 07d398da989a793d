//! The `udp://` scheme: a connection is a reliable byte stream over datagrams
//! ([`session`], sans I/O), so the handshake, the frames, the I/O thread and the plain
//! process's `Connection` run over it exactly as over TCP.
//!
//! Each connection's program side is one end of a Unix socket pair ([`UdpStream`]); an
//! *engine* thread holds the other end and the UDP socket, and moves bytes between them
//! through the connection's [`session::Session`]. A listener is one UDP socket and one engine
//! for all its peers, which it tells apart by source address (and a connection id the
//! connector chose at random); a connector has a connected UDP socket and an engine of its
//! own (so the kernel's "port unreachable" ends a connection to a listener that is gone at
//! once). The socket pair is also the flow control toward the program: the engine reads it
//! only while the session has room, and the kernel's buffer of the pair stops the program's
//! writes as TCP's would.
//!
//! **Strangers.** A listener answers a first `OPEN` with a `COOKIE` and keeps nothing (SYN
//! cookies): the cookie is a keyed hash ([`Cookies`]: a random key per listener) of the
//! source address, the connection id and a coarse time, and only an `OPEN` that echoes a
//! valid one makes a connection. So `OPEN`s from forged source addresses, which never see
//! their cookie, cost no memory and take no slot a real connector needs. An echoed `OPEN`
//! allocates only while fewer than [`MAX_HANDSHAKES`](crate::MAX_HANDSHAKES) of its
//! connections have not proved the secret (8 per source IP); past that, it is dropped and
//! the connector repeats it, as a TCP connection waits in the backlog. A connection that has
//! not proved the secret within [`HALF_OPEN`] is dropped. Datagrams that are not of the
//! protocol are dropped; one of a connection the listener does not know gets one `RESET`
//! back (a `COOKIE` and a `RESET` are no larger than what came: no amplification).
//!
//! **Waiting.** The engine sleeps in `poll` until a socket is ready or a timer is really due
//! ([`poll_timeout`]): a listener with no connections sleeps until a datagram comes, and a
//! datagram the socket refused (its buffer full) waits for `POLLOUT` while the timers that
//! only want to send wait with it.
//!
//! **Exit.** The engines are threads of the program's process, so its exit would end them
//! mid-connection and leave each peer to find out after the session's 10 s of silence: an
//! `atexit` handler ([`close_at_exit`]) closes every connection in order and waits for them,
//! at most [`LINGER`].

mod cookie;
pub(crate) mod packet;
pub(crate) mod session;

use crate::EndpointError;
use cookie::Cookies;
use nix::sys::eventfd::{EfdFlags, EventFd};
use packet::{Header, COOKIE, HEADER, OPEN, RESET};
pub use session::UdpStats;
use session::{Config, Session, State};
use std::collections::{HashMap, VecDeque};
use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, Once, Weak};
use std::time::{Duration, Instant};

/// Connections of one source IP that have not proved the secret, at most.
const HALF_OPEN_PER_SOURCE: usize = 8;

/// How long a listener keeps a connection that has not proved the secret (the handshake's
/// own deadline comes first; this is the engine's backstop).
pub(crate) const HALF_OPEN: Duration = Duration::from_secs(15);

/// How long a listener's connection that did not prove the secret may take to deliver its
/// refusal once the handshake closed it.
const REFUSAL_GRACE: Duration = Duration::from_secs(1);

/// Datagrams taken from the socket per turn before the connections are served.
const RECV_BATCH: usize = 256;

/// The kernel buffers asked for (the kernel may give less: `net.core.rmem_max`).
const SOCKET_BUFFER: usize = 4 << 20;

/// How long the process's exit waits for its `udp://` connections to close in order (their
/// bytes delivered, the `CLOSE` acknowledged). TCP's kernel goes on delivering after a
/// process is gone; these engines are threads of the process, so without this wait a peer
/// would learn of the exit only after its [`session::Config::dead_after`].
const LINGER: Duration = Duration::from_secs(1);

/// Every engine of the process (its wake-up), so the exit can close their connections.
static ENGINES: Mutex<Vec<Weak<Wake>>> = Mutex::new(Vec::new());

/// Connections of the process's engines not yet over, and the signal that one ended.
static LIVE: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// Registers [`close_at_exit`] once per process.
static AT_EXIT: Once = Once::new();

/// The process whose engines [`LIVE`] counts: a child forked without `exec` inherits the
/// handler and the count but not the threads, and must not wait for them.
static ENGINES_PID: AtomicU32 = AtomicU32::new(0);

/// Register [`close_at_exit`], once per process. The job's I/O threads register theirs
/// after this one (`io::start` calls this first), so at exit, where handlers run last
/// registered first, they write out what they hold before the engines close.
pub(crate) fn register_at_exit() {
    AT_EXIT.call_once(|| {
        ENGINES_PID.store(std::process::id(), Ordering::Release);
        // SAFETY: `close_at_exit` is an `extern "C" fn()` that does not unwind.
        unsafe {
            libc::atexit(close_at_exit);
        }
    });
}

/// Run by `exit` (the end of `main`, `std::process::exit`): every engine closes its
/// connections as the program closing them would, and the exit waits until they are over or
/// [`LINGER`] has passed. Nothing here panics (a panic would abort in an `extern "C"`
/// function).
extern "C" fn close_at_exit() {
    if ENGINES_PID.load(Ordering::Acquire) != std::process::id() {
        return;
    }
    let engines: Vec<Arc<Wake>> = ENGINES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for w in &engines {
        w.exiting.store(true, Ordering::Release);
        let _ = w.fd.write(1);
    }
    crate::io::wait_for_none(&LIVE, Instant::now() + LINGER);
}

/// What the program's side and the engine share of a connection.
#[derive(Debug, Default)]
pub(crate) struct Link {
    /// The listener's handshake proved the secret: no longer counted as half-open.
    proven: AtomicBool,
    /// Why the connection ended, when not in order (the program reads end of stream).
    why: Mutex<Option<String>>,
    /// The program's side is gone before the connection opened (a connect given up).
    stop: AtomicBool,
    /// The session's counters, copied by the engine when they change.
    stats: Mutex<UdpStats>,
}

/// The program's side of a `udp://` connection: a stream as a TCP one is.
#[derive(Debug)]
pub(crate) struct UdpStream {
    pub(crate) app: UnixStream,
    pub(crate) peer: SocketAddr,
    link: Arc<Link>,
}

impl UdpStream {
    /// The listener's handshake succeeded.
    pub(crate) fn proven(&self) {
        self.link.proven.store(true, Ordering::Release);
    }

    /// What the connection's protocol repaired so far.
    pub(crate) fn stats(&self) -> UdpStats {
        *self.link.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why the connection ended, if it did otherwise than in order.
    pub(crate) fn ended_why(&self) -> Option<String> {
        self.link
            .why
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for UdpStream {
    fn drop(&mut self) {
        self.link.stop.store(true, Ordering::Release);
    }
}

/// Connections an engine opened and the I/O thread has not accepted, with the eventfd its
/// poll watches (readable while one waits).
#[derive(Debug)]
struct Accepted {
    queue: Mutex<VecDeque<UdpStream>>,
    ready: EventFd,
}

/// A `udp://` listener: its socket is the engine's; this is the accept queue.
#[derive(Debug)]
pub(crate) struct UdpListener {
    accepted: Arc<Accepted>,
    wake: Arc<Wake>,
    local: SocketAddr,
    /// Dropped by [`close_in_order`](UdpListener::close_in_order): its connections close
    /// as their programs' would, not reset.
    in_order: bool,
}

/// How the program's side ends an engine: a flag, and the eventfd in the engine's poll.
#[derive(Debug)]
struct Wake {
    stop: AtomicBool,
    /// The process exits: close every connection in order (see [`close_at_exit`]).
    exiting: AtomicBool,
    fd: EventFd,
    /// The engine's turns of its loop (tests: an idle engine does not wake).
    #[cfg(test)]
    turns: std::sync::atomic::AtomicU64,
}

impl Wake {
    fn new() -> std::io::Result<Wake> {
        Ok(Wake {
            stop: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
            fd: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
            #[cfg(test)]
            turns: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.fd.write(1);
    }
}

impl UdpListener {
    /// Bind the first of `addrs` that can be bound and start its engine.
    pub(crate) fn bind(addrs: &[SocketAddr]) -> std::io::Result<UdpListener> {
        let sock = UdpSocket::bind(addrs)?;
        let local = sock.local_addr()?;
        let accepted = Arc::new(Accepted {
            queue: Mutex::new(VecDeque::new()),
            ready: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
        });
        let wake = Arc::new(Wake::new()?);
        let engine = Engine::new(sock, Some(accepted.clone()), wake.clone())?;
        std::thread::Builder::new()
            .name("endpoint-udp".into())
            .spawn(move || engine.run(None))?;
        Ok(UdpListener {
            accepted,
            wake,
            local,
            in_order: false,
        })
    }

    /// Stop listening, and close the connections it accepted in order, after what their
    /// programs wrote last (the job's end: see `io`'s linger); the engine ends once they are
    /// over, or [`LINGER`] after this, whichever comes first.
    pub(crate) fn close_in_order(mut self) {
        self.in_order = true;
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next connection opened, if one waits.
    pub(crate) fn accept(&self) -> std::io::Result<UdpStream> {
        let mut q = self
            .accepted
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let s = q.pop_front();
        if q.is_empty() {
            // Under the lock the engine pushes under: the eventfd is readable exactly while
            // one waits.
            let _ = self.accepted.ready.read();
        }
        s.ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
    }
}

impl AsRawFd for UdpListener {
    fn as_raw_fd(&self) -> RawFd {
        self.accepted.ready.as_fd().as_raw_fd()
    }
}

impl Drop for UdpListener {
    fn drop(&mut self) {
        if self.in_order {
            self.wake.exiting.store(true, Ordering::SeqCst);
            let _ = self.wake.fd.write(1);
            return;
        }
        // The engine resets its connections and ends (the job's I/O thread ends with it).
        self.wake.stop();
    }
}

/// Connect to the listener at `addrs` (the first that answers), within `deadline`.
///
/// # Errors
/// [`EndpointError::Unreachable`], naming what happened with the last address tried.
pub(crate) fn dial(
    addrs: &[SocketAddr],
    text: &str,
    deadline: Instant,
) -> Result<UdpStream, EndpointError> {
    let mut last = String::from("no address to try");
    for &sa in addrs {
        if Instant::now() >= deadline {
            break;
        }
        match dial_one(sa, deadline) {
            Ok(s) => return Ok(s),
            Err(why) => last = why,
        }
    }
    Err(EndpointError::Unreachable {
        addr: text.to_string(),
        why: last,
    })
}

fn dial_one(sa: SocketAddr, deadline: Instant) -> Result<UdpStream, String> {
    let any: SocketAddr = if sa.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(any).map_err(|e| e.to_string())?;
    sock.connect(sa).map_err(|e| e.to_string())?;
    let wake = Arc::new(Wake::new().map_err(|e| e.to_string())?);
    let mut engine = Engine::new(sock, None, wake.clone()).map_err(|e| e.to_string())?;
    let sess = Session::connect(session::random_u64(), engine.config(sa), Instant::now());
    let stream = engine.open(sa, sess).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("endpoint-udp".into())
        .spawn(move || engine.run(Some(tx)))
        .map_err(|e| e.to_string())?;
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(Ok(())) => Ok(stream),
        Ok(Err(why)) => Err(why),
        Err(_) => {
            wake.stop();
            Err("no answer (nothing listens there, or datagrams do not get through)".into())
        }
    }
}

/// One connection as the engine holds it; counted in [`LIVE`] while it exists.
struct Slot {
    sess: Session,
    app: UnixStream,
    link: Arc<Link>,
    created: Instant,
    /// The program closed its side (or is gone), and when.
    app_eof: bool,
    eof_at: Option<Instant>,
    /// The program was given end of stream.
    write_shut: bool,
    /// The session's counters last copied to `link`.
    stats: UdpStats,
    /// Closing at the end (the process exits, or the listener closes in order): the session
    /// closes once the pair holds nothing more of the program's, however many windows that
    /// takes, not at once (which dropped what had not fitted in the window yet).
    exit_drain: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (count, cv) = &LIVE;
        let mut live = count.lock().unwrap_or_else(|p| p.into_inner());
        *live = live.saturating_sub(1);
        cv.notify_all();
    }
}

/// The thread behind a listener, or behind one connector: the UDP socket and its sessions.
struct Engine {
    sock: UdpSocket,
    /// A listener's accept queue (a connector has none).
    accepted: Option<Arc<Accepted>>,
    wake: Arc<Wake>,
    slots: HashMap<SocketAddr, Slot>,
    /// A datagram the socket refused (its buffer full): it goes first when writable.
    pending: Option<(Vec<u8>, SocketAddr)>,
    /// The receive buffer the kernel gave, which windows share.
    rcvbuf: usize,
    /// A listener's cookie maker.
    cookies: Cookies,
}

impl Engine {
    fn new(
        sock: UdpSocket,
        accepted: Option<Arc<Accepted>>,
        wake: Arc<Wake>,
    ) -> std::io::Result<Engine> {
        use nix::sys::socket::{getsockopt, setsockopt, sockopt};
        sock.set_nonblocking(true)?;
        // As much as the kernel allows (root may pass its limit): a window is only as large
        // as the buffer that must hold it.
        if setsockopt(&sock, sockopt::RcvBufForce, &SOCKET_BUFFER).is_err() {
            let _ = setsockopt(&sock, sockopt::RcvBuf, &SOCKET_BUFFER);
        }
        if setsockopt(&sock, sockopt::SndBufForce, &SOCKET_BUFFER).is_err() {
            let _ = setsockopt(&sock, sockopt::SndBuf, &SOCKET_BUFFER);
        }
        let rcvbuf = getsockopt(&sock, sockopt::RcvBuf).unwrap_or(212_992);
        register_at_exit();
        {
            let mut all = ENGINES.lock().unwrap_or_else(|p| p.into_inner());
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&wake));
        }
        Ok(Engine {
            sock,
            accepted,
            wake,
            slots: HashMap::new(),
            pending: None,
            rcvbuf,
            cookies: Cookies::new(),
        })
    }

    /// A connection's tunables toward `peer`: large datagrams on loopback (no path to
    /// fragment them), an Ethernet frame's worth elsewhere; the window a share of the
    /// socket's receive buffer (the kernel reports twice what holds data).
    fn config(&self, peer: SocketAddr) -> Config {
        let mss = match peer.ip() {
            ip if ip.is_loopback() => (32 << 10) - HEADER,
            // QUIC's choice: fits the paths of tunnels, VPNs and PPPoE too, where a full
            // Ethernet frame would be refused (EMSGSIZE) and the connection starve.
            _ => 1200 - HEADER,
        };
        Config {
            mss,
            max_window: (self.rcvbuf / 4).clamp(16 << 10, 2 << 20),
            ..Config::default()
        }
    }

    /// Add a connection to `peer`; returns the engine's and the program's ends.
    fn open(&mut self, peer: SocketAddr, sess: Session) -> std::io::Result<UdpStream> {
        let (mine, theirs) = UnixStream::pair()?;
        mine.set_nonblocking(true)?;
        let link = Arc::new(Link::default());
        *LIVE.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.slots.insert(
            peer,
            Slot {
                sess,
                app: mine,
                link: link.clone(),
                created: Instant::now(),
                app_eof: false,
                eof_at: None,
                write_shut: false,
                stats: UdpStats::default(),
                exit_drain: false,
            },
        );
        Ok(UdpStream {
            app: theirs,
            peer,
            link,
        })
    }

    fn run(mut self, opened: Option<mpsc::Sender<Result<(), String>>>) {
        let mut opened = opened;
        let mut inbuf = vec![0u8; 65536];
        let mut appbuf = vec![0u8; 64 << 10];
        let mut outbuf = vec![0u8; 65536];
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut timers: Vec<Instant> = Vec::new();
        // Set once the engine is told to close in order: past it, what is left is reset.
        let mut exit_by: Option<Instant> = None;
        loop {
            #[cfg(test)]
            self.wake.turns.fetch_add(1, Ordering::Relaxed);
            let now = Instant::now();
            if let Some(t) = exit_by {
                if now >= t {
                    self.reset_all();
                    return;
                }
            }
            fds.clear();
            timers.clear();
            fds.push(pollfd(self.wake.fd.as_fd().as_raw_fd(), libc::POLLIN));
            let sock_ev = libc::POLLIN
                | if self.pending.is_some() {
                    libc::POLLOUT
                } else {
                    0
                };
            fds.push(pollfd(self.sock.as_raw_fd(), sock_ev));
            for s in self.slots.values() {
                let mut ev = 0;
                if !s.app_eof && s.sess.room() > 0 {
                    ev |= libc::POLLIN;
                }
                let (x, y) = s.sess.ready();
                if !s.write_shut && x.len() + y.len() > 0 {
                    ev |= libc::POLLOUT;
                }
                // Nothing asked of it: left out (a negative fd), or a socket pair whose
                // program hung up would report POLLHUP at every poll and the engine spin.
                let fd = if ev == 0 { -1 } else { s.app.as_raw_fd() };
                fds.push(pollfd(fd, ev));
                timers.extend(s.sess.next_timer());
                if self.accepted.is_some() && !s.link.proven.load(Ordering::Acquire) {
                    // The half-open bounds below are the engine's own timers.
                    timers.push(s.created + HALF_OPEN);
                    timers.extend(s.eof_at.map(|t| t + REFUSAL_GRACE));
                }
            }
            timers.extend(exit_by);
            let ms = poll_timeout(now, &timers, self.pending.is_some());
            // SAFETY: `fds` is a valid array of pollfd of the length given.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n < 0 {
                continue; // EINTR
            }
            if self.wake.stop.load(Ordering::Acquire) {
                self.reset_all();
                return;
            }
            if fds[0].revents != 0 {
                // Read, or the eventfd would stay readable and the poll not sleep.
                let _ = self.wake.fd.read();
                if self.wake.exiting.load(Ordering::SeqCst) {
                    exit_by.get_or_insert(Instant::now() + LINGER);
                    // The process exits: each connection as if its program closed it, after
                    // what its program wrote last (still in the pair) is taken in.
                    for slot in self.slots.values_mut() {
                        slot.exit_drain = true;
                        app_io(slot, &mut appbuf);
                    }
                }
            }
            let now = Instant::now();
            if fds[1].revents & libc::POLLOUT != 0 {
                if let Some((d, to)) = self.pending.take() {
                    self.send(&d, to);
                }
            }
            if fds[1].revents != 0 {
                self.receive(&mut inbuf, now);
            }
            let mut done = Vec::new();
            let addrs: Vec<SocketAddr> = self.slots.keys().copied().collect();
            for a in addrs {
                let Some(slot) = self.slots.get_mut(&a) else {
                    continue;
                };
                if slot.link.stop.load(Ordering::Acquire) && slot.sess.state() == &State::Opening {
                    done.push(a);
                    continue;
                }
                if slot.app_eof && slot.eof_at.is_none() {
                    slot.eof_at = Some(now);
                }
                // A connection that never proved the secret holds a half-open slot only so
                // long: the handshake's deadline, or a second to deliver its refusal once the
                // listener's side closed it (a stranger would never acknowledge it).
                if !slot.link.proven.load(Ordering::Acquire)
                    && self.accepted.is_some()
                    && (now.duration_since(slot.created) > HALF_OPEN
                        || slot
                            .eof_at
                            .is_some_and(|t| now.duration_since(t) > REFUSAL_GRACE))
                {
                    slot.sess.fail("the handshake did not finish".into());
                    self.reset(a);
                    done.push(a);
                    continue;
                }
                // Every connection each turn, its program's bytes first: what it wrote (or
                // the window its reads reopened) goes in this turn's datagrams, not at the
                // next timer; and its timers may be due whatever its socket says.
                app_io(slot, &mut appbuf);
                if slot.app_eof && slot.eof_at.is_none() {
                    // Now, not at the next turn: its grace is a timer of the poll.
                    slot.eof_at = Some(now);
                }
                slot.sess.on_timers(now);
                while self.pending.is_none() {
                    let Some(slot) = self.slots.get_mut(&a) else {
                        break;
                    };
                    let Some(n) = slot.sess.transmit(now, &mut outbuf) else {
                        break;
                    };
                    self.send(&outbuf[..n], a);
                }
                let Some(slot) = self.slots.get_mut(&a) else {
                    continue;
                };
                if slot.sess.stats != slot.stats {
                    slot.stats = slot.sess.stats;
                    *slot.link.stats.lock().unwrap_or_else(|p| p.into_inner()) = slot.stats;
                }
                if let Some(tx) = opened.as_ref() {
                    match slot.sess.state() {
                        State::Open => {
                            let _ = tx.send(Ok(()));
                            opened = None;
                        }
                        State::Ended(why) => {
                            let _ = tx.send(Err(why.clone().unwrap_or_default()));
                            opened = None;
                        }
                        State::Opening => {}
                    }
                }
                if slot.sess.ended().is_some() || slot.sess.peer_done() {
                    // The end of stream (or the reason) reaches the program now.
                    app_io(slot, &mut appbuf);
                }
                if let Some(why) = slot.sess.ended() {
                    if let Some(why) = why {
                        *slot.link.why.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(why.to_string());
                    }
                    let _ = slot.app.shutdown(std::net::Shutdown::Both);
                    done.push(a);
                } else if slot.sess.done() {
                    done.push(a);
                }
            }
            for a in done {
                if let Some(slot) = self.slots.remove(&a) {
                    let _ = slot.app.shutdown(std::net::Shutdown::Both);
                }
            }
            if self.accepted.is_none() && self.slots.is_empty() {
                return; // a connector's one connection is over
            }
            if exit_by.is_some() && self.slots.is_empty() {
                return; // closed in order: every connection is over
            }
        }
    }

    fn send(&mut self, d: &[u8], to: SocketAddr) {
        let r = if self.accepted.is_some() {
            self.sock.send_to(d, to)
        } else {
            self.sock.send(d)
        };
        match r {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                self.pending = Some((d.to_vec(), to));
            }
            Err(e) => self.socket_error(&e),
        }
    }

    /// A connector's socket reports an error (an ICMP message). Only "port unreachable"
    /// while the connection is being opened ends it: nothing listens there. Anything else,
    /// or later (an ICMP message is easily forged, and a path's MTU may change), is left to
    /// the dead-peer rule, which ends a connection whose peer really went silent.
    fn socket_error(&mut self, e: &std::io::Error) {
        if self.accepted.is_some() || e.kind() != std::io::ErrorKind::ConnectionRefused {
            return;
        }
        for s in self.slots.values_mut() {
            if s.sess.state() == &State::Opening {
                s.sess
                    .fail("nothing listens there (port unreachable)".to_string());
            }
        }
    }

    fn receive(&mut self, buf: &mut [u8], now: Instant) {
        for _ in 0..RECV_BATCH {
            let (n, from) = match self.sock.recv_from(buf) {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.socket_error(&e);
                    return;
                }
            };
            let Some((h, payload)) = Header::decode(&buf[..n]) else {
                continue; // not of this protocol
            };
            match self.slots.get_mut(&from) {
                Some(s) if s.sess.conn() == h.conn => s.sess.receive(&h, payload, now),
                // Another connection from an address whose connection lives: not until
                // that one is over (a stranger cannot end it by claiming its address).
                Some(_) => {}
                None if self.accepted.is_some() && h.kind == OPEN => {
                    if self.cookies.valid(from, h.conn, h.seq, now) {
                        self.admit(from, h.conn, now);
                    } else if !self.wake.exiting.load(Ordering::Acquire) {
                        // Stateless: the same answer for every OPEN until one echoes it.
                        let c =
                            Header::control(COOKIE, h.conn, self.cookies.make(from, h.conn, now));
                        let _ = self.sock.send_to(&c, from);
                    }
                }
                None if self.accepted.is_some() && h.kind != RESET => {
                    let _ = self.sock.send_to(&Header::control(RESET, h.conn, 0), from);
                }
                None => {}
            }
        }
    }

    /// An `OPEN` from a new address that echoed its cookie: a connection, while the
    /// half-open ones are under their bounds (else dropped: the connector repeats it).
    fn admit(&mut self, from: SocketAddr, conn: u64, now: Instant) {
        if self.wake.exiting.load(Ordering::Acquire) {
            return; // the process is on its way out: as if the OPEN were lost
        }
        let (mut all, mut this) = (0, 0);
        for (a, s) in &self.slots {
            if !s.link.proven.load(Ordering::Acquire) {
                all += 1;
                this += usize::from(a.ip() == from.ip());
            }
        }
        if all >= crate::MAX_HANDSHAKES || this >= HALF_OPEN_PER_SOURCE {
            return;
        }
        let Some(accepted) = self.accepted.clone() else {
            return;
        };
        let sess = Session::accept(conn, self.config(from), now);
        let Ok(stream) = self.open(from, sess) else {
            return; // out of descriptors: as if the OPEN were lost
        };
        let mut q = accepted.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(stream);
        let _ = accepted.ready.write(1);
    }

    /// The listener is closed: every peer is told at once.
    fn reset_all(&mut self) {
        let all: Vec<SocketAddr> = self.slots.keys().copied().collect();
        for a in all {
            self.reset(a);
            if let Some(s) = self.slots.remove(&a) {
                let _ = s.app.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Tell the peer at `a` its connection is over.
    fn reset(&mut self, a: SocketAddr) {
        let Some(s) = self.slots.get(&a) else {
            return;
        };
        let r = Header::control(RESET, s.sess.conn(), 0);
        let _ = if self.accepted.is_some() {
            self.sock.send_to(&r, a)
        } else {
            self.sock.send(&r)
        };
    }
}

/// Move bytes between a connection's session and its program: what the program wrote (as
/// far as the session has room), and what arrived in order (as far as the program's socket
/// takes it).
fn app_io(slot: &mut Slot, buf: &mut [u8]) {
    while !slot.app_eof && slot.sess.room() > 0 {
        let room = slot.sess.room().min(buf.len());
        match (&slot.app).read(&mut buf[..room]) {
            Ok(0) => {
                slot.app_eof = true;
                slot.sess.close();
            }
            Ok(n) => {
                slot.sess.write(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if slot.exit_drain {
                    // Everything the program wrote is in the session: its end, as if it
                    // had closed its side.
                    slot.app_eof = true;
                    slot.sess.close();
                }
                break;
            }
            Err(_) => {
                slot.app_eof = true;
                slot.sess.close();
            }
        }
    }
    while !slot.write_shut {
        let (a, b) = slot.sess.ready();
        if a.is_empty() && b.is_empty() {
            break;
        }
        let parts = [IoSlice::new(a), IoSlice::new(b)];
        match (&slot.app).write_vectored(&parts) {
            Ok(n) => slot.sess.consume(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => {
                // The program is gone: nothing more for it.
                slot.write_shut = true;
                slot.app_eof = true;
                slot.sess.close();
            }
        }
    }
    if slot.sess.peer_done() && !slot.write_shut {
        // Everything the peer sent is with the program: now its end of stream.
        slot.write_shut = true;
        let _ = slot.app.shutdown(std::net::Shutdown::Write);
    }
}

/// How long the engine's poll may sleep, in ms (-1: until a descriptor is ready): until the
/// earliest of `timers`. While a datagram waits for the socket to take it (`blocked`), a
/// timer already due only wants to send, which must wait for `POLLOUT` as well: then only
/// the timers still ahead count, or the engine would poll without sleeping until the socket
/// drains. With no timers at all (a listener without connections) it sleeps until a
/// datagram or its wake-up comes.
fn poll_timeout(now: Instant, timers: &[Instant], blocked: bool) -> i32 {
    timers
        .iter()
        .filter(|&&t| !blocked || t > now)
        .min()
        .map_or(-1, |&t| {
            let d = t.saturating_duration_since(now);
            // Rounded up: a wake before the timer would only poll again.
            d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
        })
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

#[cfg(test)]
mod tests;
