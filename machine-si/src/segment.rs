//! A node's *port*: one shared-memory file (under /dev/shm) holding a ring per sender and a
//! doorbell, a futex word writers ring when the owner may be asleep.
//!
//! ```text
//! | magic u64 | nodes u64 | ring capacity u64 | doorbell u32 | sleeping u32 |
//! | owner pid u32 | closed u32 | probe nonce u64 | probe address u64 | ...        (128 B)
//! | ring from node 0 | ring from node 1 | ...            (each ring::HEADER + capacity)
//! ```
//!
//! The owner's pid and probe word let peers read its memory for the single-copy path
//! (`pull.rs`); `closed` tells writers the owner has left and reads nothing more.

use crate::pull::ProbeWord;
use crate::ring::{self, Ring};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MAGIC: u64 = 0x5349_5f50_4f52_5431; // "SI_PORT1"
const HEADER: usize = 128;

/// A mapped port.
pub(crate) struct Segment {
    path: PathBuf,
    /// Shared with the owner's [`OwnBell`]s, which may outlive the segment on other threads.
    map: Arc<MmapRaw>,
    nodes: usize,
    cap: usize,
}

fn size(nodes: usize, cap: usize) -> usize {
    HEADER + nodes * (ring::HEADER + cap)
}

impl Segment {
    /// Create the port file at `path` (it must not exist) for `nodes` senders with rings of
    /// `cap` bytes (a power of two), readable and writable by this user only.
    ///
    /// # Errors
    /// The file system's.
    pub(crate) fn create(
        path: &Path,
        nodes: usize,
        cap: usize,
        probe: &ProbeWord,
    ) -> std::io::Result<Segment> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        // A fresh file reads as zeros: every ring starts empty. Pages are allocated on first
        // touch, so unused rings cost nothing.
        f.set_len(size(nodes, cap) as u64)?;
        let map = Arc::new(MmapOptions::new().map_raw(&f)?);
        let seg = Segment {
            path: path.to_owned(),
            map,
            nodes,
            cap,
        };
        // SAFETY: the mapping is at least HEADER bytes and page aligned; we are its only user.
        unsafe {
            let p = seg.map.as_mut_ptr() as *mut u64;
            p.add(1).write(nodes as u64);
            p.add(2).write(cap as u64);
            (p.add(4) as *mut u32).write(std::process::id());
            p.add(5).write(probe.nonce());
            p.add(6).write(probe.addr());
            std::sync::atomic::fence(Ordering::Release);
            p.write(MAGIC);
        }
        Ok(seg)
    }

    /// Map a port another node created.
    ///
    /// # Errors
    /// The file system's, or `InvalidData` when the file is not a port of this shape.
    pub(crate) fn open(path: &Path, nodes: usize) -> std::io::Result<Segment> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        let map = MmapOptions::new().map_raw(&f)?;
        let bad = |why: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {why}", path.display()),
            )
        };
        if map.len() < HEADER {
            return Err(bad("too small to be a port"));
        }
        // SAFETY: at least HEADER bytes are mapped.
        let (magic, n, cap) = unsafe {
            let p = map.as_ptr() as *const u64;
            (p.read(), p.add(1).read() as usize, p.add(2).read() as usize)
        };
        if magic != MAGIC
            || n != nodes
            || !cap.is_power_of_two()
            || cap < 256
            || map.len() < size(n, cap)
        {
            return Err(bad("not a port of this job"));
        }
        Ok(Segment {
            path: path.to_owned(),
            map: Arc::new(map),
            nodes,
            cap,
        })
    }

    /// The ring that node `from` writes into.
    pub(crate) fn ring(&self, from: usize) -> Ring {
        assert!(from < self.nodes);
        // SAFETY: the ring lies inside the mapping (checked at open/create), 64-byte aligned
        // (HEADER, ring::HEADER and cap are multiples of 64), and the mapping lives as long as
        // self; the caller keeps to one producer and one consumer per ring.
        unsafe {
            let off = HEADER + from * (ring::HEADER + self.cap);
            Ring::new(self.map.as_mut_ptr().add(off), self.cap)
        }
    }

    fn word(&self, index: usize) -> &AtomicU32 {
        // SAFETY: offsets 24 to 36 are inside the header, 4-aligned; atomics may alias shared
        // memory.
        unsafe { &*(self.map.as_mut_ptr().add(24 + 4 * index) as *const AtomicU32) }
    }

    fn doorbell(&self) -> &AtomicU32 {
        self.word(0)
    }

    fn sleeping(&self) -> &AtomicU32 {
        self.word(1)
    }

    /// The owner's process id.
    pub(crate) fn owner_pid(&self) -> i32 {
        self.word(2).load(Ordering::Relaxed) as i32
    }

    /// Where the owner's probe word is and what it holds.
    pub(crate) fn probe(&self) -> (u64, u64) {
        // SAFETY: offsets 40 and 48 are inside the header, 8-aligned; written before the magic
        // was published (release), which `open` read.
        unsafe {
            let p = self.map.as_ptr() as *const u64;
            (p.add(6).read(), p.add(5).read())
        }
    }

    /// Owner side: say that nothing more will be read from this port. Ordered before whatever
    /// the owner reads next, so a writer either sees the flag or has its record read.
    pub(crate) fn mark_closed(&self) {
        self.word(3).store(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Writer side: whether the owner has left. Ordered after the writer's last record.
    pub(crate) fn is_closed(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(3).load(Ordering::SeqCst) != 0
    }

    /// Writer side: the owner's doorbell, to ring after each record.
    pub(crate) fn bell(&self) -> Bell {
        Bell {
            base: self.map.as_mut_ptr(),
        }
    }

    /// Owner side: its own doorbell, for other threads of its process to ring (the layer's
    /// waker). It keeps the mapping alive, so it may outlive the segment.
    pub(crate) fn own_bell(&self) -> OwnBell {
        OwnBell {
            map: self.map.clone(),
        }
    }

    /// Owner side: sleep until a writer rings or `timeout` passes, unless `has_work` says there
    /// is already something to read.
    pub(crate) fn sleep(&self, timeout: Duration, has_work: impl Fn() -> bool) {
        self.sleeping().store(1, Ordering::SeqCst);
        let seen = self.doorbell().load(Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if !has_work() {
            futex_wait(self.doorbell(), seen, timeout);
        }
        self.sleeping().store(0, Ordering::Relaxed);
    }

    /// Owner side, for a sleep another thread does on [`Doorbell::wait_past`] (a composite
    /// layer's relay): say the owner sleeps, so writers ring from now on. The doorbell's
    /// value to wait past; the caller then checks for work, as [`Segment::sleep`] does.
    pub(crate) fn arm(&self) -> u32 {
        self.sleeping().store(1, Ordering::SeqCst);
        let seen = self.doorbell().load(Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        seen
    }

    /// Owner side: the sleep [`Segment::arm`] began is over.
    pub(crate) fn disarm(&self) {
        self.sleeping().store(0, Ordering::Relaxed);
    }

    /// The doorbell, for a thread that sleeps on it.
    pub(crate) fn doorbell_handle(&self) -> Doorbell {
        Doorbell {
            base: self.map.as_mut_ptr(),
        }
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// A port's doorbell as its writers hold it: a pointer into the mapping, valid as long as the
/// [`Segment`] it came from (the interconnect keeps both).
#[derive(Clone, Copy)]
pub(crate) struct Bell {
    base: *mut u8,
}

// SAFETY: a pointer into a shared mapping that outlives it; only atomics are reached through
// it.
unsafe impl Send for Bell {}

impl Bell {
    fn word(&self, index: usize) -> &AtomicU32 {
        // SAFETY: as for `Segment::word`: the header of a live mapping.
        unsafe { &*(self.base.add(24 + 4 * index) as *const AtomicU32) }
    }

    /// After publishing a record: wake the owner if it sleeps.
    pub(crate) fn ring(&self) {
        // Orders the record's publication before reading `sleeping` (the owner does the
        // mirror image), so either it sees the record or we see it asleep.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.word(1).load(Ordering::Relaxed) != 0 {
            self.word(0).fetch_add(1, Ordering::SeqCst);
            futex_wake(self.word(0));
        }
    }
}

/// A port's doorbell as its owner's other threads hold it: like [`Bell`], but owning a share of
/// the mapping, so ringing it is sound whenever it is rung.
pub(crate) struct OwnBell {
    map: Arc<MmapRaw>,
}

impl OwnBell {
    /// Wake the owner if it sleeps; as [`Bell::ring`], so whatever the caller stored before
    /// ringing is seen by the owner's `has_work` or ends its sleep.
    pub(crate) fn ring(&self) {
        Bell {
            base: self.map.as_mut_ptr(),
        }
        .ring();
    }
}

/// A port's doorbell as a thread other than the owner's main one sleeps on it: a pointer into
/// the mapping, valid as long as the port mapping it came from (whoever holds it must stop
/// using it before the interconnect is dropped).
#[derive(Clone, Copy, Debug)]
pub struct Doorbell {
    base: *mut u8,
}

// SAFETY: a pointer into a shared mapping that outlives its use; only atomics are reached
// through it.
unsafe impl Send for Doorbell {}

impl Doorbell {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: as for `Segment::word`: the header of a live mapping.
        unsafe { &*(self.base.add(24) as *const AtomicU32) }
    }

    /// Sleep until the doorbell is rung past `seen` (what the port's `arm` returned), or
    /// `timeout`. Returns at once if it already was.
    pub fn wait_past(&self, seen: u32, timeout: Duration) {
        futex_wait(self.word(), seen, timeout);
    }

    /// Its value now: it changes each time it is rung.
    pub fn value(&self) -> u32 {
        self.word().load(Ordering::SeqCst)
    }

    /// Ring it whatever the owner said: ends a [`wait_past`](Self::wait_past) (to stop the
    /// thread that sleeps on it).
    pub fn kick(&self) {
        self.word().fetch_add(1, Ordering::SeqCst);
        futex_wake(self.word());
    }
}

// The futex through libc: neither std nor nix wraps it.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the futex word is a valid, aligned u32 in a shared mapping; a shared (not
    // PRIVATE) futex, since the waker is another process. Any return (woken, timed out,
    // interrupted, value already changed) is fine: callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as for futex_wait.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1);
    }
}
