//! The Simple Interconnect of the porting slides, made real on shared memory.
//!
//! | slides                         | here                                  |
//! |--------------------------------|---------------------------------------|
//! | `si_init()`                    | [`Si::init`]                          |
//! | `si_open()` → port             | [`Si::create_host`] / [`Si::open_host`] (this node's block and rings in the host's segment) |
//! | `si_getid()`                   | [`Si::id`]                            |
//! | `si_write(node, port, size, msg)` | [`Si::reserve`] once, then [`Si::write`] (waits for room), [`Si::try_write`] |
//! | `si_read(port, size, buf)`     | [`Si::peek`] + [`Si::read`], per sender |
//! | `si_close(port)`, `si_done()`  | [`Si::close`], drop                   |
//!
//! One extension, for large messages: a writer may *lend* a buffer instead of copying it
//! (it writes only the buffer's address), and the reader [`Si::pull`]s the bytes straight out
//! of the writer's memory, then says so with [`Si::mark_pulled`]; the writer learns how many
//! of its loans are done from [`Si::pulled_by`]. Whether a pair can do this is probed when the
//! reader first sees the writer ([`Si::refresh_senders`], [`Si::enable_pull`],
//! [`Si::can_lend_to`]).
//!
//! As in the slides, each node has a port (its rings, one per writer, in the host's segment),
//! other nodes write messages to it, a node reads its port, messages are received whole, the
//! interconnect is reliable and does its own flow control: a full ring makes `write` wait (and
//! `try_write` say no); nothing is dropped or overwritten. A writer reserves its ring and
//! registers with the reader before its first record ([`Si::reserve`]); the reader reads only
//! from registered writers, so a job of many nodes where each talks to a few costs each node
//! only those few.

use crate::coop::{self, Offer};
use crate::pull::{self, ProbeWord, PullError};
use crate::ring::{self, Consumer, Producer, Ring};
pub use crate::segment::Doorbell;
pub use crate::segment::SegmentError;
use crate::segment::{Bell, Block, HostSegment, OwnBell};
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
    /// The host's segment, once made or mapped.
    host: Option<HostSegment>,
    /// Per node of the job: its index in the host's segment, if it has one.
    local: Vec<Option<usize>>,
    /// Per index in the host's segment: the node of the job.
    node_of: Vec<usize>,
    /// Per node of the job, once reserved: our ring in its port.
    tx: Vec<Option<Tx>>,
    /// Per node of the job, once it registered as a writer: its ring in our port.
    rx: Vec<Option<Rx>>,
    /// The writers registered so far (nodes of the job), in the order seen: what is read.
    senders: Vec<usize>,
    /// Nodes forgotten (out of the job): not read again even though registered.
    forgotten: Vec<bool>,
    /// Our block's registration count when the writers were last looked at.
    writers_seen: Cell<u32>,
    /// What peers read to check they may pull from us.
    probe: ProbeWord,
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

/// Our ring in a node's port, as its producer. The views point into the mapping `Si` keeps.
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

impl Si {
    /// `si_init`: join an interconnect of `nodes` nodes as node `me`.
    pub fn init(me: usize, nodes: usize) -> Si {
        Si {
            me,
            host: None,
            local: vec![None; nodes],
            node_of: Vec::new(),
            tx: (0..nodes).map(|_| None).collect(),
            rx: (0..nodes).map(|_| None).collect(),
            senders: Vec::new(),
            forgotten: vec![false; nodes],
            writers_seen: Cell::new(0),
            probe: ProbeWord::new(),
        }
    }

    /// `si_open`, by the first node of the host: create the host's segment at `path` for
    /// `locals` (the job's nodes on this host, this one among them, in order) with a ring of
    /// `ring_bytes` (a power of two) per pair. The others [`open_host`](Self::open_host) it
    /// once it exists.
    ///
    /// # Errors
    /// [`SegmentError`]: no room in /dev/shm for the blocks, too large, the file system's.
    pub fn create_host(
        &mut self,
        path: &Path,
        locals: &[usize],
        ring_bytes: usize,
    ) -> Result<(), SegmentError> {
        let seg = HostSegment::create(path, locals.len(), ring_bytes)?;
        self.join(seg, locals);
        Ok(())
    }

    /// `si_open`, by the other nodes of the host: map the segment the first one made (same
    /// `locals` and `ring_bytes`).
    ///
    /// # Errors
    /// [`SegmentError`]: not this job's segment, the file system's.
    pub fn open_host(
        &mut self,
        path: &Path,
        locals: &[usize],
        ring_bytes: usize,
    ) -> Result<(), SegmentError> {
        let seg = HostSegment::open(path, locals.len(), ring_bytes)?;
        self.join(seg, locals);
        Ok(())
    }

    /// Take `seg` as the host's segment and publish this node's process id and probe word in
    /// its block (read by peers after the start-up barrier that follows).
    fn join(&mut self, seg: HostSegment, locals: &[usize]) {
        for (i, &node) in locals.iter().enumerate() {
            if let Some(l) = self.local.get_mut(node) {
                *l = Some(i);
            }
        }
        self.node_of = locals.to_vec();
        self.host = Some(seg);
        if let Some(b) = self.block(self.me) {
            b.publish(&self.probe);
            self.writers_seen.set(b.writers_version());
        }
    }

    /// `si_getid`.
    pub fn id(&self) -> usize {
        self.me
    }

    /// Node `node`'s block in the host's segment, if it is on this host.
    fn block(&self, node: usize) -> Option<Block> {
        let i = (*self.local.get(node)?)?;
        Some(self.host.as_ref()?.block(i))
    }

    /// Whether our ring in `node`'s port is reserved.
    pub fn reserved(&self, node: usize) -> bool {
        self.tx(node).is_some()
    }

    /// Before the first record to `node` (of this host): reserve our ring in its port, so a
    /// full /dev/shm is this error rather than a SIGBUS, and register with it as a writer.
    /// Nothing to do when already reserved.
    ///
    /// # Errors
    /// [`SegmentError::NoRoom`]; [`SegmentError::NotOurs`] for a node not on this host.
    pub fn reserve(&mut self, node: usize) -> Result<(), SegmentError> {
        if self.reserved(node) {
            return Ok(());
        }
        let not_here = || SegmentError::NotOurs(format!("node {node} on another host"));
        let (Some(host), Some(to), Some(me)) = (
            self.host.as_ref(),
            self.local.get(node).copied().flatten(),
            self.local.get(self.me).copied().flatten(),
        ) else {
            return Err(not_here());
        };
        host.reserve_ring(to, me)?;
        let block = host.block(to);
        let tx = Tx {
            ring: host.ring(to, me),
            bell: block.bell(),
            state: Cell::default(),
        };
        // Registered once the ring is there: the reader looks at it only after seeing the
        // registration.
        block.register_writer(me);
        if let Some(slot) = self.tx.get_mut(node) {
            *slot = Some(tx);
        }
        Ok(())
    }

    /// Look for writers that registered since the last look: their rings join those read.
    /// The nodes new to it (to probe with [`enable_pull`](Self::enable_pull)). One atomic
    /// load of our own block when nobody registered.
    pub fn refresh_senders(&mut self) -> Vec<usize> {
        let Some(mine) = self.block(self.me) else {
            return Vec::new();
        };
        let v = mine.writers_version();
        if v == self.writers_seen.get() {
            return Vec::new();
        }
        self.writers_seen.set(v);
        let (Some(host), Some(me)) = (self.host.as_ref(), self.local[self.me]) else {
            return Vec::new();
        };
        let mut new = Vec::new();
        for i in mine.writers(self.node_of.len()) {
            let Some(&node) = self.node_of.get(i) else {
                continue;
            };
            if self.rx[node].is_some() || self.forgotten[node] {
                continue;
            }
            self.rx[node] = Some(Rx {
                ring: host.ring(me, i),
                state: Cell::default(),
            });
            self.senders.push(node);
            new.push(node);
        }
        new
    }

    /// The writers read, in the order they registered.
    pub fn senders(&self) -> &[usize] {
        &self.senders
    }

    /// Read nothing more from `node` (it is out of the job).
    pub fn forget(&mut self, node: usize) {
        if let Some(f) = self.forgotten.get_mut(node) {
            *f = true;
        }
        self.senders.retain(|&s| s != node);
    }

    /// Our ring in `node`'s port, once reserved.
    fn tx(&self, node: usize) -> Option<&Tx> {
        self.tx.get(node).and_then(Option::as_ref)
    }

    /// `sender`'s ring in our port, once it registered.
    fn rx(&self, sender: usize) -> Option<&Rx> {
        self.rx.get(sender).and_then(Option::as_ref)
    }

    /// Find out whether we may pull from writer `node` and tell it through its ring in our
    /// port (it lends to us only once told yes). Whether it worked.
    ///
    /// # Errors
    /// [`PullError`]: `Denied` when this host forbids reading another process's memory (the
    /// writer is told no all the same).
    pub fn enable_pull(&self, node: usize) -> Result<bool, PullError> {
        let (Some(theirs), Some(rx)) = (self.block(node), self.rx(node)) else {
            return Ok(false);
        };
        let (addr, nonce) = theirs.probe();
        let ok = pull::probe(theirs.owner_pid(), addr, nonce);
        let said = if matches!(ok, Ok(true)) {
            ring::YES
        } else {
            ring::NO
        };
        rx.ring.pull_ok().store(said, Ordering::Release);
        ok
    }

    /// Say no to writer `node`'s loans without probing (single copy is off).
    pub fn refuse_pull(&self, node: usize) {
        if let Some(rx) = self.rx(node) {
            rx.ring.pull_ok().store(ring::NO, Ordering::Release);
        }
    }

    /// Whether `node` said whether it can pull from us ([`enable_pull`](Self::enable_pull)
    /// of us, once it saw our first record).
    pub fn lend_known(&self, node: usize) -> bool {
        self.tx(node)
            .is_some_and(|tx| tx.ring.pull_ok().load(Ordering::Acquire) != ring::UNKNOWN)
    }

    /// Whether `node` said it can pull from us.
    pub fn can_lend_to(&self, node: usize) -> bool {
        self.tx(node)
            .is_some_and(|tx| tx.ring.pull_ok().load(Ordering::Acquire) == ring::YES)
    }

    /// Writer side, before our first loan to `node`: find out whether we may write into its
    /// memory (to take chunks of its copy, `coop.rs`) and tell it through our ring. Probed
    /// once; whether we may.
    pub fn can_help(&self, node: usize) -> bool {
        let (Some(tx), Some(theirs)) = (self.tx(node), self.block(node)) else {
            return false;
        };
        match tx.ring.helper_ok().load(Ordering::Relaxed) {
            ring::YES => true,
            ring::NO => false,
            _ => {
                let (addr, nonce) = theirs.probe();
                let ok = matches!(pull::probe(theirs.owner_pid(), addr, nonce), Ok(true));
                // Before the loan's record, which publishes it (release).
                tx.ring
                    .helper_ok()
                    .store(if ok { ring::YES } else { ring::NO }, Ordering::Relaxed);
                ok
            }
        }
    }

    /// Reader side: whether writer `node` said it may write into our memory.
    pub fn helper(&self, node: usize) -> bool {
        self.rx(node)
            .is_some_and(|rx| rx.ring.helper_ok().load(Ordering::Relaxed) == ring::YES)
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
        let pid = self.block(sender).map_or(0, |b| b.owner_pid());
        if pid <= 0 {
            return Err(PullError::Gone);
        }
        pull::pull(pid, addr, into)
    }

    /// [`Si::pull`] with the sender's help: the copy is offered in chunks that it takes too,
    /// when it can (see `coop.rs`). Only for a sender that may write into our memory
    /// ([`Si::helper`]).
    ///
    /// # Errors
    /// As [`Si::pull`].
    pub fn pull_together(
        &self,
        sender: usize,
        addr: u64,
        into: &mut [MaybeUninit<u8>],
    ) -> Result<(), PullError> {
        let (Some(rx), Some(theirs)) = (self.rx(sender), self.block(sender)) else {
            return Err(PullError::Gone);
        };
        let bell = theirs.bell();
        coop::receive(
            rx.ring.coop(),
            theirs.owner_pid(),
            addr,
            into,
            || bell.ring(),
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
        match (self.tx(node), self.block(node)) {
            (Some(tx), Some(b)) => coop::help(tx.ring.coop(), b.owner_pid(), offer, src),
            _ => false,
        }
    }

    /// Per node of the job, the process id of those on this host whose memory
    /// [`converse_machine::ProcessMemory`] may reach: published in their blocks at start-up,
    /// and proved theirs by reading the probe word they published there (a pid alone could
    /// name another process: another pid namespace sharing /dev/shm, a pid reused). One
    /// system call per node of the host, at start-up.
    pub fn pids(&self) -> Vec<Option<i32>> {
        (0..self.local.len())
            .map(|node| {
                let b = self.block(node)?;
                let pid = b.owner_pid();
                let (addr, nonce) = b.probe();
                (pid > 0 && matches!(pull::probe(pid, addr, nonce), Ok(true))).then_some(pid)
            })
            .collect()
    }

    /// Whether `node`'s process has left or is gone.
    fn peer_gone(&self, node: usize) -> bool {
        let pid = self.block(node).map_or(0, |b| b.owner_pid());
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
        self.block(node).is_none_or(|b| b.is_closed())
    }

    /// Say that this node reads nothing more (at exit).
    pub fn mark_closed(&self) {
        if let Some(b) = self.block(self.me) {
            b.mark_closed();
        }
    }

    /// Largest record one write carries (0 before the segment is there).
    pub fn max_write(&self) -> usize {
        self.host.as_ref().map_or(0, |h| ring::max_record(h.cap()))
    }

    /// `si_write` without waiting: append the record `rec` to `node`'s port if its ring from
    /// us has room now (never before [`reserve`](Self::reserve)).
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

    /// `si_write`: append one record to `node`'s port (reserved), waiting for room.
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

    /// Whether any sender's ring holds a record, or a writer registered since the last look
    /// (its first record is on its way).
    pub fn any_waiting(&self) -> bool {
        self.block(self.me)
            .is_some_and(|b| b.writers_version() != self.writers_seen.get())
            || self
                .senders
                .iter()
                .filter_map(|&s| self.rx(s))
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
        if let Some(b) = self.block(self.me) {
            b.sleep(timeout, || also() || self.any_waiting());
        }
    }

    /// This node's own doorbell, for its other threads: ringing it ends a [`Si::wait`]. `None`
    /// before the segment is there.
    pub(crate) fn own_bell(&self) -> Option<OwnBell> {
        let i = self.local.get(self.me).copied().flatten()?;
        Some(self.host.as_ref()?.own_bell(i))
    }

    /// Begin an idle sleep that another thread does on [`Si::doorbell`]: from now on writers
    /// ring. The doorbell value to wait past, or `None` (and not begun) when a record is
    /// already waiting. End it with [`Si::disarm`].
    pub fn arm(&self) -> Option<u32> {
        let b = self.block(self.me)?;
        let seen = b.arm();
        if self.any_waiting() {
            b.disarm();
            return None;
        }
        Some(seen)
    }

    /// End the sleep [`Si::arm`] began.
    pub fn disarm(&self) {
        if let Some(b) = self.block(self.me) {
            b.disarm();
        }
    }

    /// This node's doorbell, for a thread that sleeps on it; valid while `self` lives.
    pub fn doorbell(&self) -> Option<Doorbell> {
        self.block(self.me).map(|b| b.doorbell_handle())
    }

    /// `si_close`: remove the segment's file (by the node that made it). Mappings stay valid,
    /// so this is done as soon as every node of the host has mapped it: a crash later leaves
    /// nothing behind.
    pub fn close(&self) {
        if let Some(h) = self.host.as_ref() {
            let _ = std::fs::remove_file(h.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Two nodes' interconnects in this process, 1 reserved toward 0.
    fn pair(name: &str) -> (Si, Si) {
        let path = PathBuf::from(format!(
            "/dev/shm/cv-arm-test-{}-{name}",
            std::process::id()
        ));
        let mut a = Si::init(0, 2);
        let mut b = Si::init(1, 2);
        a.create_host(&path, &[0, 1], 4096).expect("create");
        b.open_host(&path, &[0, 1], 4096).expect("open");
        a.close();
        b.reserve(0).expect("room");
        (a, b)
    }

    /// The sleep protocol a composite splits over two threads (`Part::arm`, the relay on the
    /// doorbell): armed, a record written rings the bell past what `arm` saw; awake, it does
    /// not; and a record already waiting makes `arm` say so instead of sleeping.
    #[test]
    fn armed_a_write_rings_the_doorbell_and_awake_it_does_not() {
        let (mut a, b) = pair("ring");
        assert!(a.any_waiting(), "a writer registered: look");
        assert_eq!(a.refresh_senders(), [1]);
        assert!(!a.any_waiting());
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

    /// A writer lends only once the reader said yes, and the reader takes its help only once
    /// the writer said it can give it.
    #[test]
    fn loans_wait_for_the_readers_probe() {
        let (mut a, b) = pair("probe");
        assert!(!b.lend_known(0) && !b.can_lend_to(0));
        assert_eq!(a.refresh_senders(), [1]);
        // One process: the probe reads our own memory, which is allowed.
        assert!(matches!(a.enable_pull(1), Ok(true)));
        assert!(b.lend_known(0) && b.can_lend_to(0));
        assert!(!a.helper(1));
        assert!(b.can_help(0));
        assert!(a.helper(1));
        a.forget(1);
        assert!(a.senders().is_empty());
    }
}
