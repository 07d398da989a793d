//! The Simple Interconnect of the porting slides, made real on shared memory.
//!
//! | slides                         | here                                  |
//! |--------------------------------|---------------------------------------|
//! | `si_init()`                    | [`Si::init`]                          |
//! | `si_open()` → port             | [`Si::open`] (creates this node's port) |
//! | `si_getid()`                   | [`Si::id`]                            |
//! | `si_write(node, port, size, msg)` | [`Si::write`] (waits for room), [`Si::try_write`] |
//! | `si_read(port, size, buf)`     | [`Si::peek`] + [`Si::read`], per sender |
//! | `si_close(port)`, `si_done()`  | [`Si::close`], drop                   |
//!
//! One extension, for large messages: a writer may *lend* a buffer instead of copying it
//! (it writes only the buffer's address), and the reader [`Si::pull`]s the bytes straight out
//! of the writer's memory, then says so with [`Si::mark_pulled`]; the writer learns how many
//! of its loans are done from [`Si::pulled_by`]. Whether a pair can do this is probed at
//! start-up ([`Si::enable_pull`], [`Si::can_lend_to`]).
//!
//! As in the slides, each node has a port, other nodes write messages to it, a node reads its
//! port, messages are received whole, the interconnect is reliable and does its own flow
//! control: a full ring makes `write` wait (and `try_write` say no); nothing is dropped or
//! overwritten. Learning where the other ports are ([`Si::attach`]) is the start-up's job.

use crate::coop::{self, Offer};
use crate::pull::{self, ProbeWord, PullError};
use crate::ring::{Consumer, Producer, Ring};
pub use crate::segment::Doorbell;
use crate::segment::{Bell, OwnBell, Segment};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A node's use of the interconnect.
pub struct Si {
    me: usize,
    nodes: usize,
    port: Option<Segment>,
    peers: Vec<Option<Segment>>,
    /// Per node, once its port is attached (ours once open): our ring in it.
    tx: Vec<Option<Tx>>,
    /// Per sender, once our port is open: its ring in our port.
    rx: Vec<Option<Rx>>,
    /// What peers read to check they may pull from us.
    probe: ProbeWord,
    /// Each port owner's process id (for pulls), learnt when attaching it.
    pids: Vec<i32>,
}

// By hand: the fields are the layer's working state (sockets, queues, buffers); the node
// number says which one it is.
impl std::fmt::Debug for Si {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Si")
            .field("node", &self.me)
            .finish_non_exhaustive()
    }
}

/// Our ring in a node's port, as its producer. The views point into mappings `Si` keeps.
struct Tx {
    ring: Ring,
    bell: Bell,
    state: Cell<Producer>,
}

/// A sender's ring in our port, as its consumer.
struct Rx {
    ring: Ring,
    state: Cell<Consumer>,
}

impl Tx {
    fn new(port: &Segment, me: usize) -> Tx {
        Tx {
            ring: port.ring(me),
            bell: port.bell(),
            state: Cell::default(),
        }
    }
}

impl Si {
    /// `si_init`: join an interconnect of `nodes` nodes as node `me`.
    pub fn init(me: usize, nodes: usize) -> Si {
        Si {
            me,
            nodes,
            port: None,
            peers: (0..nodes).map(|_| None).collect(),
            tx: (0..nodes).map(|_| None).collect(),
            rx: (0..nodes).map(|_| None).collect(),
            probe: ProbeWord::new(),
            pids: vec![0; nodes],
        }
    }

    /// `si_open`: create this node's port at `path`, with a ring of `ring_bytes` (a power of
    /// two) for each sender.
    ///
    /// # Errors
    /// The file system's.
    pub fn open(&mut self, path: &Path, ring_bytes: usize) -> std::io::Result<()> {
        let port = Segment::create(path, self.nodes, ring_bytes, &self.probe)?;
        for (sender, rx) in self.rx.iter_mut().enumerate() {
            *rx = Some(Rx {
                ring: port.ring(sender),
                state: Cell::default(),
            });
        }
        if let (Some(tx), Some(pid)) = (self.tx.get_mut(self.me), self.pids.get_mut(self.me)) {
            *tx = Some(Tx::new(&port, self.me));
            *pid = std::process::id() as i32;
        }
        self.port = Some(port);
        Ok(())
    }

    /// `si_getid`.
    pub fn id(&self) -> usize {
        self.me
    }

    /// Map node `node`'s port, found at `path`.
    ///
    /// # Errors
    /// The file system's, or `InvalidData` for a file that is not such a port.
    pub fn attach(&mut self, node: usize, path: &Path) -> std::io::Result<()> {
        let seg = Segment::open(path, self.nodes)?;
        if let (Some(slot), Some(tx), Some(pid)) = (
            self.peers.get_mut(node),
            self.tx.get_mut(node),
            self.pids.get_mut(node),
        ) {
            *pid = seg.owner_pid();
            *tx = Some(Tx::new(&seg, self.me));
            *slot = Some(seg);
        }
        Ok(())
    }

    /// `node`'s port (ours for `node == id()`), if open or attached.
    fn port_of(&self, node: usize) -> Option<&Segment> {
        if node == self.me {
            self.port.as_ref()
        } else {
            self.peers.get(node).and_then(Option::as_ref)
        }
    }

    /// Our ring in `node`'s port, once attached.
    fn tx(&self, node: usize) -> Option<&Tx> {
        self.tx.get(node).and_then(Option::as_ref)
    }

    /// `sender`'s ring in our port, once open.
    fn rx(&self, sender: usize) -> Option<&Rx> {
        self.rx.get(sender).and_then(Option::as_ref)
    }

    /// Find out whether we may pull from `node` (attached, or ourselves) and, if so, tell it
    /// through our port that it may lend to us. Whether it worked.
    ///
    /// # Errors
    /// [`PullError`]: `Denied` when this host forbids reading another process's memory.
    pub fn enable_pull(&self, node: usize) -> Result<bool, PullError> {
        let (Some(theirs), Some(rx)) = (self.port_of(node), self.rx(node)) else {
            return Ok(false);
        };
        let (addr, nonce) = theirs.probe();
        let ok = pull::probe(theirs.owner_pid(), addr, nonce)?;
        if ok {
            // Read by `node` only after the start-up barrier that follows.
            rx.ring.pull_ok().store(1, Ordering::Release);
        }
        Ok(ok)
    }

    /// Whether we can pull from `node` (our [`Si::enable_pull`] of it worked); then we may
    /// also write into its memory, as the kernel allows both or neither.
    pub fn can_pull_from(&self, node: usize) -> bool {
        self.rx(node)
            .is_some_and(|rx| rx.ring.pull_ok().load(Ordering::Relaxed) != 0)
    }

    /// Whether `node` said it can pull from us (after every node's [`Si::enable_pull`]).
    pub fn can_lend_to(&self, node: usize) -> bool {
        self.tx(node)
            .is_some_and(|tx| tx.ring.pull_ok().load(Ordering::Acquire) != 0)
    }

    /// Copy `into.len()` bytes at `addr` in `sender`'s memory (a buffer it lent us) into
    /// `into`.
    ///
    /// # Errors
    /// [`PullError::Gone`] when the sender's process is gone; the others as [`pull::pull`].
    pub fn pull(
        &self,
        sender: usize,
        addr: u64,
        into: &mut [MaybeUninit<u8>],
    ) -> Result<(), PullError> {
        let pid = self.pids.get(sender).copied().unwrap_or(0);
        if pid <= 0 {
            return Err(PullError::Gone);
        }
        pull::pull(pid, addr, into)
    }

    /// [`Si::pull`] with the sender's help: the copy is offered in chunks that it takes too,
    /// when it can (see `coop.rs`). Only for a sender that may write into our memory
    /// ([`Si::can_lend_to`] it).
    ///
    /// # Errors
    /// As [`Si::pull`].
    pub fn pull_together(
        &self,
        sender: usize,
        addr: u64,
        into: &mut [MaybeUninit<u8>],
    ) -> Result<(), PullError> {
        let (Some(rx), Some(tx), Some(&pid)) =
            (self.rx(sender), self.tx(sender), self.pids.get(sender))
        else {
            return Err(PullError::Gone);
        };
        coop::receive(
            rx.ring.coop(),
            pid,
            addr,
            into,
            || tx.bell.ring(),
            || self.peer_gone(sender),
        )
    }

    /// The copy `node` offers to share, if it has chunks left.
    pub fn offered(&self, node: usize) -> Option<Offer> {
        self.tx(node)?.ring.coop().offered()
    }

    /// Copy chunks of `offer` into `node`'s memory; `src` is what the offer names, in ours.
    /// Whether any chunk was copied.
    pub fn help(&self, node: usize, offer: Offer, src: &[u8]) -> bool {
        match (self.tx(node), self.pids.get(node)) {
            (Some(tx), Some(&pid)) => coop::help(tx.ring.coop(), pid, offer, src),
            _ => false,
        }
    }

    /// Whether `node`'s process has left or is gone.
    fn peer_gone(&self, node: usize) -> bool {
        let pid = self.pids.get(node).copied().unwrap_or(0);
        // No signal: only whether the process exists.
        self.peer_closed(node) || pid <= 0 || kill(Pid::from_raw(pid), None).is_err()
    }

    /// Tell `sender` we are done with one more of its loans (they are done in order).
    pub fn mark_pulled(&self, sender: usize) {
        if let Some(rx) = self.rx(sender) {
            // We are the only writer of this word: a plain increment, published with release
            // so the sender frees the buffer only after our copy.
            let n = rx.ring.pulled().load(Ordering::Relaxed);
            rx.ring.pulled().store(n + 1, Ordering::Release);
        }
    }

    /// How many of our loans `node` has finished with.
    pub fn pulled_by(&self, node: usize) -> u64 {
        self.tx(node)
            .map_or(0, |tx| tx.ring.pulled().load(Ordering::Acquire))
    }

    /// Whether `node` has left (closed its port for reading): nothing written to it will be
    /// read, nothing lent to it will be pulled.
    pub fn peer_closed(&self, node: usize) -> bool {
        self.port_of(node).is_none_or(Segment::is_closed)
    }

    /// Say that this node reads nothing more (at exit).
    pub fn mark_closed(&self) {
        if let Some(p) = self.port.as_ref() {
            p.mark_closed();
        }
    }

    /// Largest record one write carries.
    pub fn max_write(&self) -> usize {
        self.tx
            .iter()
            .flatten()
            .map(|tx| tx.ring.max_record())
            .min()
            .unwrap_or(0)
    }

    /// `si_write` without waiting: append the record `rec` to `node`'s port if its ring from
    /// us has room now.
    pub fn try_write(&self, node: usize, rec: &[u8]) -> bool {
        let Some(tx) = self.tx(node) else {
            return false;
        };
        let mut p = tx.state.get();
        let pushed = tx.ring.try_push(&mut p, rec);
        tx.state.set(p);
        if pushed {
            tx.bell.ring();
        }
        pushed
    }

    /// `si_write`: append one record to `node`'s port, waiting for room.
    pub fn write(&self, node: usize, bytes: &[u8]) {
        let mut spins = 0u32;
        while !self.try_write(node, bytes) {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// `si_read`, first half: the length of the next record from `sender`, if there is one.
    pub fn peek(&self, sender: usize) -> Option<usize> {
        let rx = self.rx(sender)?;
        let mut c = rx.state.get();
        let len = rx.ring.peek_len(&mut c);
        rx.state.set(c);
        len
    }

    /// `si_read`, second half: copy that record into `out` (exactly its length).
    pub fn read(&self, sender: usize, out: &mut [u8]) {
        // SAFETY: viewing initialised bytes as maybe-uninitialised ones is sound as long as
        // only initialised values are written through the view, which `read_uninit` does.
        let out = unsafe { &mut *(std::ptr::from_mut::<[u8]>(out) as *mut [MaybeUninit<u8>]) };
        self.read_uninit(sender, out);
    }

    /// [`Si::read`] into fresh memory (a message's buffer not yet zeroed: writing zeros first
    /// would be one more pass over a large message). Every byte of `out` is initialised
    /// afterwards if it returns `true`; `false` when there is no such sender or port.
    pub fn read_uninit(&self, sender: usize, out: &mut [MaybeUninit<u8>]) -> bool {
        let Some(rx) = self.rx(sender) else {
            return false;
        };
        let mut c = rx.state.get();
        rx.ring.pop_into(&mut c, out);
        rx.state.set(c);
        true
    }

    /// Whether any sender's ring holds a record.
    pub fn any_waiting(&self) -> bool {
        self.rx
            .iter()
            .flatten()
            .any(|rx| !rx.ring.is_empty(&rx.state.get()))
    }

    /// Sleep until a writer rings this node's doorbell, or `timeout`.
    pub fn wait(&self, timeout: Duration) {
        self.wait_unless(timeout, || false);
    }

    /// [`Si::wait`], not sleeping at all when `also` says so; `also` is asked after this
    /// node says it sleeps, so whoever makes it true and then rings this node's own bell either
    /// keeps this node from sleeping or wakes it.
    pub fn wait_unless(&self, timeout: Duration, also: impl Fn() -> bool) {
        if let Some(p) = self.port.as_ref() {
            p.sleep(timeout, || also() || self.any_waiting());
        }
    }

    /// This node's own doorbell, for its other threads: ringing it ends a [`Si::wait`]. `None`
    /// before [`Si::open`].
    pub(crate) fn own_bell(&self) -> Option<OwnBell> {
        self.port.as_ref().map(Segment::own_bell)
    }

    /// Begin an idle sleep that another thread does on [`Si::doorbell`]: from now on writers
    /// ring. The doorbell value to wait past, or `None` (and not begun) when a record is
    /// already waiting. End it with [`Si::disarm`].
    pub fn arm(&self) -> Option<u32> {
        let p = self.port.as_ref()?;
        let seen = p.arm();
        if self.any_waiting() {
            p.disarm();
            return None;
        }
        Some(seen)
    }

    /// End the sleep [`Si::arm`] began.
    pub fn disarm(&self) {
        if let Some(p) = self.port.as_ref() {
            p.disarm();
        }
    }

    /// This node's doorbell, for a thread that sleeps on it; valid while `self` lives.
    pub fn doorbell(&self) -> Option<Doorbell> {
        self.port.as_ref().map(Segment::doorbell_handle)
    }

    /// `si_close`: remove this node's port file. Mappings (ours and the peers') stay valid, so
    /// this is done as soon as every peer has attached: a crash later leaves nothing behind.
    pub fn close(&self) {
        if let Some(p) = self.port.as_ref() {
            let _ = std::fs::remove_file(p.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Two nodes' interconnects in this process: 0 reads, 1 writes to it.
    fn pair(name: &str) -> (Si, Si) {
        let path = |n: usize| {
            PathBuf::from(format!(
                "/dev/shm/cv-arm-test-{}-{name}-{n}",
                std::process::id()
            ))
        };
        let mut a = Si::init(0, 2);
        let mut b = Si::init(1, 2);
        a.open(&path(0), 4096).expect("port 0");
        b.open(&path(1), 4096).expect("port 1");
        b.attach(0, &path(0)).expect("attach");
        a.close();
        b.close();
        (a, b)
    }

    /// The sleep protocol a composite splits over two threads (`Part::arm`, the relay on the
    /// doorbell): armed, a record written rings the bell past what `arm` saw; awake, it does
    /// not; and a record already waiting makes `arm` say so instead of sleeping.
    #[test]
    fn armed_a_write_rings_the_doorbell_and_awake_it_does_not() {
        let (a, b) = pair("ring");
        let bell = a.doorbell().expect("open port");
        for round in 0..3 {
            let seen = a.arm().expect("nothing waiting yet");
            assert!(!a.any_waiting());
            assert!(b.try_write(0, b"hello"), "round {round}");
            assert_ne!(bell.value(), seen, "round {round}: the write rang");
            // Returns at once: rung past `seen`.
            bell.wait_past(seen, Duration::from_secs(5));
            a.disarm();
            let mut got = [0u8; 5];
            assert_eq!(a.peek(1), Some(5));
            a.read(1, &mut got);
            assert_eq!(&got, b"hello");
        }
        let before = bell.value();
        assert!(b.try_write(0, b"x"));
        assert_eq!(bell.value(), before, "awake: nobody rings");
        assert_eq!(a.arm(), None, "a record is waiting: no sleep");
    }
}
