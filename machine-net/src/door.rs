//! The TCP node's door: a thread of its own that accepts every connection to the node's
//! listener and judges its introduction (`mesh.rs`), handing the node only its peers'.
//!
//! Why a thread: the node's own thread may compute in a handler for minutes, and a node
//! judging connections only between handlers let strangers fill the kernel's backlog
//! meanwhile, so a peer's connect timed out and the job ended (a sustained flood of silent
//! connections did that in seconds). The door accepts as fast as connections come, whatever
//! the node does, and strangers never take a peer's place:
//!
//! - a connection is read at once when accepted (a peer's introduction comes with it, or
//!   microseconds after), and judged as soon as its 20 bytes are in;
//! - at most [`Door::bound`] wait for their introduction; at the bound the oldest goes, if it
//!   has said nothing for [`SILENT_STRANGER`] (a peer is judged long before); otherwise the
//!   door stops accepting until it has, and the rest waits in the kernel's backlog;
//! - one that has not introduced itself after [`mesh::INTRO_TIMEOUT`] is closed.
//!
//! What the door judges alone — the secret, a node number of the job, and which side may open
//! which kind of connection — is all it can know; whether the pair's connection is already
//! open, or the peer out of the job, is the node's to judge when it takes the connection.
//!
//! The handing over costs the node's message path one relaxed load per `advance` (the
//! [`ready`](Door::ready) flag); the door rings the node's [`Wake`] so an idle node learns
//! at once.

use crate::mesh::{self, Intro, Kind, Pending};
use converse_bootstrap::protocol::SECRET_LEN;
use converse_machine::Wake;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// At the bound, the oldest waiting connection goes only once it has been silent this long:
/// a peer's introduction follows its connection by a round trip at most.
pub(crate) const SILENT_STRANGER: Duration = Duration::from_millis(20);

/// The most connections waiting for their introduction, whatever the descriptor limit allows.
const MAX_BOUND: usize = 4096;

/// Accepts in a row before the door looks at the introductions that came meanwhile.
const ACCEPT_BATCH: usize = 256;

const LISTENER: u64 = u64::MAX;
const STOP: u64 = u64::MAX - 1;

/// A connection the door let in: node `peer` of the job, asking for `kind`.
pub(crate) struct Arrival {
    pub peer: usize,
    pub kind: Kind,
    pub stream: TcpStream,
}

/// The node's side of its door.
pub(crate) struct Door {
    arrivals: Receiver<Arrival>,
    ready: Arc<AtomicBool>,
    strangers: Arc<AtomicU64>,
    stop: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

/// What the door's thread needs to judge an introduction.
pub(crate) struct Judge {
    pub me: usize,
    pub nodes: usize,
    pub secret: [u8; SECRET_LEN],
}

impl Judge {
    /// Only a lower node opens the pair's connection; only a higher one asks for it.
    fn allowed(&self, peer: usize, kind: Kind) -> bool {
        peer != self.me
            && match kind {
                Kind::Data => peer < self.me,
                Kind::Request => peer > self.me,
            }
    }
}

impl Door {
    /// Open the door on `listener` (non-blocking), handing arrivals over and ringing `wake`.
    ///
    /// # Errors
    /// The OS's (no descriptor for the epoll set or the eventfd, no thread).
    pub(crate) fn open(
        listener: TcpListener,
        judge: Judge,
        wake: Arc<dyn Wake>,
    ) -> std::io::Result<Door> {
        listener.set_nonblocking(true)?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        epoll.add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))?;
        let stop = Arc::new(EventFd::from_flags(
            EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
        )?);
        epoll.add(&*stop, EpollEvent::new(EpollFlags::EPOLLIN, STOP))?;
        let (tx, arrivals) = channel();
        let ready = Arc::new(AtomicBool::new(false));
        let strangers = Arc::new(AtomicU64::new(0));
        let mut keeper = Keeper {
            listener,
            epoll,
            judge,
            waiting: BTreeMap::new(),
            next: 0,
            bound: Door::bound(),
            accepting: true,
            tx,
            ready: ready.clone(),
            strangers: strangers.clone(),
            wake,
        };
        let thread = std::thread::Builder::new()
            .name("tcp-door".into())
            .stack_size(256 << 10)
            .spawn(move || keeper.run())?;
        Ok(Door {
            arrivals,
            ready,
            strangers,
            stop,
            thread: Some(thread),
        })
    }

    /// The most connections waiting for their introduction: a quarter of the descriptor
    /// limit (the rest is the node's), between 64 and [`MAX_BOUND`].
    pub(crate) fn bound() -> usize {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        usize::try_from(soft / 4).map_or(MAX_BOUND, |q| q.clamp(64, MAX_BOUND))
    }

    /// Whether connections wait to be taken (one relaxed load: the message path's cost).
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Take the connections let in so far.
    pub(crate) fn take(&mut self, mut each: impl FnMut(Arrival)) {
        // Cleared before draining: an arrival sent after the drain sets it again.
        if !self.ready.swap(false, Ordering::Acquire) {
            return;
        }
        while let Ok(a) = self.arrivals.try_recv() {
            each(a);
        }
    }

    /// Connections closed as strangers so far.
    pub(crate) fn strangers(&self) -> u64 {
        self.strangers.load(Ordering::Relaxed)
    }

    /// Count a connection the node itself found not to be wanted.
    pub(crate) fn refused(&self) {
        self.strangers.fetch_add(1, Ordering::Relaxed);
    }

    /// Close the door: nothing more is accepted, and the listener is closed.
    pub(crate) fn close(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.close();
    }
}

/// The door's thread: the listener, and the connections waiting for their introduction.
struct Keeper {
    listener: TcpListener,
    epoll: Epoll,
    judge: Judge,
    /// By arrival order (the key is the connection's epoll token).
    waiting: BTreeMap<u64, Pending>,
    next: u64,
    bound: usize,
    /// Whether the listener is in the epoll set (out while at the bound).
    accepting: bool,
    tx: Sender<Arrival>,
    ready: Arc<AtomicBool>,
    strangers: Arc<AtomicU64>,
    wake: Arc<dyn Wake>,
}

impl Keeper {
    fn run(&mut self) {
        let mut events = vec![EpollEvent::empty(); 64];
        loop {
            let timeout = self.next_deadline().map_or(EpollTimeout::NONE, |d| {
                let ms = d.as_millis().clamp(1, u128::from(u16::MAX));
                EpollTimeout::from(ms as u16)
            });
            let n = match self.epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => 0,
                Err(_) => return,
            };
            let mut accept = false;
            for e in &events[..n] {
                match e.data() {
                    STOP => return,
                    LISTENER => accept = true,
                    token => self.look(token),
                }
            }
            self.expire();
            if accept || !self.accepting {
                self.accept();
            }
        }
    }

    /// How long until the oldest waiting connection is due: closed for its silence, or (the
    /// listener out, at the bound) old enough to make room. None: nothing waits.
    fn next_deadline(&self) -> Option<Duration> {
        let (_, oldest) = self.waiting.first_key_value()?;
        let silent = oldest.silent_for();
        let mut due = mesh::INTRO_TIMEOUT.saturating_sub(silent);
        if !self.accepting {
            due = due.min(SILENT_STRANGER.saturating_sub(silent));
        }
        Some(due)
    }

    /// Accept what waits on the listener, up to the bound.
    fn accept(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            if self.waiting.len() >= self.bound && !self.evict_oldest() {
                self.listen(false);
                return;
            }
            match self.listener.accept() {
                Ok((s, _)) => {
                    // Replies go back on accepted connections too.
                    if s.set_nonblocking(true)
                        .and_then(|()| s.set_nodelay(true))
                        .is_err()
                    {
                        continue;
                    }
                    self.judge_new(Pending::new(s));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Out of descriptors and the like: the connection stays queued in the kernel;
                // try again a little later rather than spin on a listener that stays ready.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    break;
                }
            }
        }
        self.listen(true);
    }

    /// A freshly accepted connection: judged at once if its introduction is in.
    fn judge_new(&mut self, p: Pending) {
        let j = &self.judge;
        match p.advance(&j.secret, j.nodes, |n, k| j.allowed(n, k)) {
            Intro::Waiting(p) => {
                let token = self.next;
                self.next += 1;
                if self
                    .epoll
                    .add(&p.stream, EpollEvent::new(EpollFlags::EPOLLIN, token))
                    .is_ok()
                {
                    self.waiting.insert(token, p);
                }
            }
            Intro::Node(peer, kind, stream) => self.hand_over(peer, kind, stream),
            Intro::Stranger => self.stranger(),
        }
    }

    /// Bytes came on a waiting connection.
    fn look(&mut self, token: u64) {
        let Some(p) = self.waiting.remove(&token) else {
            return;
        };
        let j = &self.judge;
        match p.advance(&j.secret, j.nodes, |n, k| j.allowed(n, k)) {
            Intro::Waiting(p) => {
                self.waiting.insert(token, p);
            }
            Intro::Node(peer, kind, stream) => {
                let _ = self.epoll.delete(&stream);
                self.hand_over(peer, kind, stream);
            }
            // Closing it takes it out of the epoll set.
            Intro::Stranger => self.stranger(),
        }
    }

    /// Close connections silent past the introduction's timeout (oldest first).
    fn expire(&mut self) {
        while let Some(e) = self.waiting.first_entry() {
            if e.get().silent_for() < mesh::INTRO_TIMEOUT {
                break;
            }
            e.remove();
            self.stranger();
        }
    }

    /// At the bound: close the oldest waiting connection if it has been silent long enough
    /// to be a stranger's.
    fn evict_oldest(&mut self) -> bool {
        match self.waiting.first_entry() {
            Some(e) if e.get().silent_for() >= SILENT_STRANGER => {
                e.remove();
                self.stranger();
                true
            }
            _ => false,
        }
    }

    fn stranger(&self) {
        self.strangers.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "tcp", "closed a connection that is not from the job");
    }

    fn hand_over(&mut self, peer: usize, kind: Kind, stream: TcpStream) {
        if self.tx.send(Arrival { peer, kind, stream }).is_ok() {
            self.ready.store(true, Ordering::Release);
            self.wake.wake();
        }
    }

    /// Put the listener in the epoll set, or take it out.
    fn listen(&mut self, on: bool) {
        if on == self.accepting {
            return;
        }
        let flags = if on {
            EpollFlags::EPOLLIN
        } else {
            EpollFlags::empty()
        };
        let mut ev = EpollEvent::new(flags, LISTENER);
        if self.epoll.modify(&self.listener, &mut ev).is_ok() {
            self.accepting = on;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Mutex;
    use std::time::Instant;

    struct Count(Mutex<u32>);
    impl Wake for Count {
        fn wake(&self) {
            if let Ok(mut n) = self.0.lock() {
                *n += 1;
            }
        }
    }

    fn intro(secret: &[u8; SECRET_LEN], word: u32) -> Vec<u8> {
        let mut v = secret.to_vec();
        v.extend_from_slice(&word.to_le_bytes());
        v
    }

    /// Silent strangers past the bound, a wrong secret and a node that may not open that kind
    /// of connection are all turned away, and a peer's connection made in the middle of it
    /// all is handed over.
    #[test]
    fn a_peer_gets_in_through_a_crowd_of_strangers() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let secret = [7u8; SECRET_LEN];
        let wake = Arc::new(Count(Mutex::new(0)));
        let mut door = Door::open(
            l,
            Judge {
                me: 1,
                nodes: 4,
                secret,
            },
            wake.clone(),
        )
        .expect("door");
        let bound = Door::bound();
        let mut crowd = Vec::new();
        for _ in 0..bound + 50 {
            if let Ok(s) = TcpStream::connect(addr) {
                crowd.push(s);
            }
        }
        // Wrong secret; node 2 may not open the pair's connection to node 1 (only ask).
        let mut bad = TcpStream::connect(addr).expect("connect");
        bad.write_all(&intro(&[0; SECRET_LEN], 0)).expect("write");
        let mut wrong_kind = TcpStream::connect(addr).expect("connect");
        wrong_kind.write_all(&intro(&secret, 2)).expect("write");
        // The peer: node 0 opens the pair's connection.
        let mut peer = TcpStream::connect(addr).expect("connect");
        peer.write_all(&intro(&secret, 0)).expect("write");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while got.is_empty() && Instant::now() < deadline {
            door.take(|a| got.push((a.peer, a.kind)));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(got, [(0, Kind::Data)]);
        assert!(wake.0.lock().map_or(0, |n| *n) >= 1, "the node was woken");
        // Turned away: the two bad ones, and strangers past the bound once silent.
        while door.strangers() < 52 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(door.strangers() >= 52, "{} strangers", door.strangers());
        door.close();
        drop(crowd);
    }
}
