//! The host's segment: one shared-memory file (under /dev/shm) per host of a job, holding a
//! block per node of the host (its doorbell, a futex word writers ring when the owner may be
//! asleep, and who writes to it) and a ring per ordered pair of the host's nodes.
//!
//! ```text
//! | magic u64 | nodes u64 | ring capacity u64 | ...                                  (128 B)
//! | node block 0 | node block 1 | ...                                  (BLOCK bytes each)
//! | ring to 0 from 0 | ring to 0 from 1 | ... | ring to 1 from 0 | ...  (ring::HEADER + cap)
//! ```
//!
//! A node block (offsets in bytes; every field but the probe is an atomic u32 or u64):
//!
//! | at | field | written by |
//! |---|---|---|
//! | 0 | doorbell: bumped and futex-woken by a writer that finds the owner asleep | writers |
//! | 4 | sleeping: the owner may block on the doorbell | owner |
//! | 8 | owner's process id (for the single-copy path, `pull.rs`) | owner, at start-up |
//! | 12 | closed: the owner reads nothing more | owner, at exit |
//! | 16 | writers: bumped each time a node registers as a writer | writers |
//! | 24 | probe nonce u64, 32: probe address u64 (`pull.rs`) | owner, at start-up |
//! | 64 | a bit per node of the host: it writes to this node (u64 words) | writers |
//!
//! The file is sized for every pair but sparse: only the header and the blocks are reserved
//! at start-up (`posix_fallocate`), and a pair's ring when its writer first writes
//! ([`HostSegment::reserve_ring`]), so a full /dev/shm is a clear error at that moment rather
//! than a SIGBUS when a page is first touched, and a job pays memory only for the pairs that
//! talk. One file and one mapping per node, whatever the number of nodes: start-up costs each
//! node a constant number of system calls (it grew with the square of the nodes when each node
//! had a file of its own that every other mapped).

use crate::pull::ProbeWord;
use crate::ring::{self, Ring};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MAGIC: u64 = 0x5349_5f48_4f53_5431; // "SI_HOST1"
const HEADER: usize = 128;

/// Most bytes a host segment may span: its mapping must fit a process's address space (128 TiB
/// on x86-64) with room to spare, since every node of the host maps it whole.
const MAX_SIZE: u64 = 1 << 45;

/// Bytes of a node block for `nodes` nodes on the host: the words, then the writers' bits.
fn block_size(nodes: usize) -> usize {
    (64 + nodes.div_ceil(64) * 8).next_multiple_of(64)
}

/// Where the rings begin.
fn rings_at(nodes: usize) -> usize {
    HEADER + nodes * block_size(nodes)
}

/// The whole segment's size, if it fits [`MAX_SIZE`].
fn size(nodes: usize, cap: usize) -> Option<u64> {
    let pairs = (nodes as u64).checked_mul(nodes as u64)?;
    let rings = pairs.checked_mul((ring::HEADER + cap) as u64)?;
    let total = rings.checked_add(rings_at(nodes) as u64)?;
    (total <= MAX_SIZE).then_some(total)
}

/// Why the segment could not be made or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentError {
    /// /dev/shm has no room for what must be reserved.
    #[error(
        "{path}: no room in {dir} for {what}: it needs {need} KiB, {free} KiB are free (make \
         room there, lower si.ring_kib, or use a network layer)"
    )]
    NoRoom {
        /// The segment.
        path: String,
        /// Its directory.
        dir: String,
        /// What was being reserved.
        what: String,
        /// KiB needed.
        need: u64,
        /// KiB free when it failed.
        free: u64,
    },
    /// The host's nodes and rings do not fit one mapping.
    #[error(
        "{nodes} nodes on one host with rings of {ring_kib} KiB (si.ring_kib) need more than \
         {max_tib} TiB of shared memory address space; lower si.ring_kib or use fewer nodes \
         per host (++ppn)"
    )]
    TooLarge {
        /// Nodes on the host.
        nodes: usize,
        /// The ring size.
        ring_kib: usize,
        /// The limit.
        max_tib: u64,
    },
    /// A file that is not this job's segment.
    #[error("{0}: not this job's shared-memory segment")]
    NotOurs(String),
    /// The file system's.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// A mapped host segment.
pub(crate) struct HostSegment {
    path: PathBuf,
    /// Kept to reserve rings in it.
    file: File,
    /// Shared with the owner's [`OwnBell`]s, which may outlive the segment on other threads.
    map: Arc<MmapRaw>,
    nodes: usize,
    cap: usize,
}

impl HostSegment {
    /// Create the segment at `path` (it must not exist) for `nodes` nodes with rings of `cap`
    /// bytes (a power of two), readable and writable by this user only, and reserve its
    /// header and node blocks.
    ///
    /// # Errors
    /// [`SegmentError::NoRoom`] when /dev/shm cannot hold the blocks,
    /// [`SegmentError::TooLarge`], or the file system's.
    pub(crate) fn create(
        path: &Path,
        nodes: usize,
        cap: usize,
    ) -> Result<HostSegment, SegmentError> {
        let too_large = || SegmentError::TooLarge {
            nodes,
            ring_kib: cap / 1024,
            max_tib: MAX_SIZE >> 40,
        };
        let len = size(nodes, cap).ok_or_else(too_large)?;
        let io = |e| SegmentError::Io(path.display().to_string(), e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        // Sparse: a fresh file reads as zeros (every ring empty, every block clear) and
        // takes room only where reserved.
        file.set_len(len).map_err(io)?;
        let seg = HostSegment::map(path, file, nodes, cap)?;
        seg.reserve(0, rings_at(nodes), || {
            format!("the blocks of {nodes} nodes")
        })?;
        // SAFETY: the mapping is at least HEADER bytes, page aligned, reserved; nobody else
        // reads it before the magic is published.
        unsafe {
            let p = seg.map.as_mut_ptr() as *mut u64;
            p.add(1).write(nodes as u64);
            p.add(2).write(cap as u64);
            std::sync::atomic::fence(Ordering::Release);
            p.write(MAGIC);
        }
        Ok(seg)
    }

    /// Map the segment another node of the host created for `nodes` nodes and rings of `cap`
    /// bytes.
    ///
    /// # Errors
    /// [`SegmentError::NotOurs`] for a file of another shape, or the file system's.
    pub(crate) fn open(path: &Path, nodes: usize, cap: usize) -> Result<HostSegment, SegmentError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| SegmentError::Io(path.display().to_string(), e))?;
        let seg = HostSegment::map(path, file, nodes, cap)?;
        // SAFETY: `map` checked the length covers the header; the creator reserved it and
        // published the magic last (release; read here with the fence after).
        let (magic, n, c) = unsafe {
            let p = seg.map.as_ptr() as *const u64;
            let magic = p.read_volatile();
            std::sync::atomic::fence(Ordering::Acquire);
            (magic, p.add(1).read() as usize, p.add(2).read() as usize)
        };
        if magic != MAGIC || n != nodes || c != cap {
            return Err(SegmentError::NotOurs(path.display().to_string()));
        }
        Ok(seg)
    }

    fn map(path: &Path, file: File, nodes: usize, cap: usize) -> Result<HostSegment, SegmentError> {
        let not_ours = || SegmentError::NotOurs(path.display().to_string());
        let want = size(nodes, cap).ok_or_else(not_ours)?;
        let io = |e| SegmentError::Io(path.display().to_string(), e);
        if file.metadata().map_err(io)?.len() != want {
            return Err(not_ours());
        }
        let map = Arc::new(MmapOptions::new().map_raw(&file).map_err(io)?);
        Ok(HostSegment {
            path: path.to_owned(),
            file,
            map,
            nodes,
            cap,
        })
    }

    /// Reserve `[at, at + len)` of the file, or say how much room there was.
    fn reserve(
        &self,
        at: usize,
        len: usize,
        what: impl Fn() -> String,
    ) -> Result<(), SegmentError> {
        // SAFETY: a valid open descriptor; the range is inside the file (callers' offsets
        // come from the layout above).
        let rc = unsafe {
            libc::posix_fallocate(self.file.as_raw_fd(), at as libc::off_t, len as libc::off_t)
        };
        match rc {
            0 => Ok(()),
            libc::ENOSPC => {
                let dir = self
                    .path
                    .parent()
                    .unwrap_or(Path::new("/dev/shm"))
                    .to_owned();
                // The field types differ between targets: widened, whatever they are.
                #[allow(clippy::unnecessary_cast)]
                let free = nix::sys::statvfs::statvfs(&dir).map_or(0, |s| {
                    s.blocks_available() as u64 * s.fragment_size() as u64
                });
                Err(SegmentError::NoRoom {
                    path: self.path.display().to_string(),
                    dir: dir.display().to_string(),
                    what: what(),
                    need: (len as u64).div_ceil(1024),
                    free: free / 1024,
                })
            }
            e => Err(SegmentError::Io(
                self.path.display().to_string(),
                std::io::Error::from_raw_os_error(e),
            )),
        }
    }

    fn ring_at(&self, to: usize, from: usize) -> usize {
        rings_at(self.nodes) + (to * self.nodes + from) * (ring::HEADER + self.cap)
    }

    /// Reserve the ring node `from` (of the host) writes into node `to`'s, before its first
    /// record.
    ///
    /// # Errors
    /// [`SegmentError::NoRoom`] when /dev/shm cannot hold it.
    pub(crate) fn reserve_ring(&self, to: usize, from: usize) -> Result<(), SegmentError> {
        self.reserve(self.ring_at(to, from), ring::HEADER + self.cap, || {
            format!(
                "a ring of {} KiB (si.ring_kib) between two nodes",
                self.cap / 1024
            )
        })
    }

    /// The ring that node `from` writes into node `to`'s (indices on the host).
    pub(crate) fn ring(&self, to: usize, from: usize) -> Ring {
        assert!(to < self.nodes && from < self.nodes);
        // SAFETY: the ring lies inside the mapping (the size checked at map), 64-byte aligned
        // (HEADER, the blocks, ring::HEADER and cap are multiples of 64), and the mapping lives
        // as long as self; the caller keeps to one producer and one consumer per ring.
        unsafe { Ring::new(self.map.as_mut_ptr().add(self.ring_at(to, from)), self.cap) }
    }

    /// Node `i`'s block (an index on the host).
    pub(crate) fn block(&self, i: usize) -> Block {
        assert!(i < self.nodes);
        // SAFETY: inside the mapping's reserved blocks, 64-aligned.
        let base = unsafe {
            self.map
                .as_mut_ptr()
                .add(HEADER + i * block_size(self.nodes))
        };
        Block { base }
    }

    /// Node `i`'s doorbell as its other threads hold it, owning a share of the mapping.
    pub(crate) fn own_bell(&self, i: usize) -> OwnBell {
        OwnBell {
            map: self.map.clone(),
            at: HEADER + i * block_size(self.nodes),
        }
    }

    /// Bytes of each ring.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// A node's block (see the module's table): a pointer into the mapping, valid as long as the
/// [`HostSegment`] it came from (the interconnect keeps both).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    base: *mut u8,
}

// SAFETY: a pointer into a shared mapping that outlives it; only atomics (and the probe, read
// after the start-up barrier) are reached through it.
unsafe impl Send for Block {}

impl Block {
    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: the block's first line, 4-aligned; atomics may alias shared memory.
        unsafe { &*(self.base.add(at) as *const AtomicU32) }
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: inside the block, 8-aligned.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }

    fn doorbell(&self) -> &AtomicU32 {
        self.word(0)
    }

    fn sleeping(&self) -> &AtomicU32 {
        self.word(4)
    }

    /// Owner, at start-up: publish its process id and probe word (read by writers after the
    /// barrier that follows).
    pub(crate) fn publish(&self, probe: &ProbeWord) {
        self.word(8).store(std::process::id(), Ordering::Relaxed);
        self.word64(24).store(probe.nonce(), Ordering::Relaxed);
        self.word64(32).store(probe.addr(), Ordering::Release);
    }

    /// The owner's process id.
    pub(crate) fn owner_pid(&self) -> i32 {
        self.word(8).load(Ordering::Relaxed) as i32
    }

    /// Where the owner's probe word is and what it holds.
    pub(crate) fn probe(&self) -> (u64, u64) {
        let addr = self.word64(32).load(Ordering::Acquire);
        (addr, self.word64(24).load(Ordering::Relaxed))
    }

    /// Owner side: say that nothing more will be read. Ordered before whatever the owner
    /// reads next, so a writer either sees the flag or has its record read.
    pub(crate) fn mark_closed(&self) {
        self.word(12).store(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Writer side: whether the owner has left. Ordered after the writer's last record.
    pub(crate) fn is_closed(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(12).load(Ordering::SeqCst) != 0
    }

    /// Writer side, once, before its first record: say that node `from` (of the host) writes
    /// to this node. The bit, then the count the owner watches (release: whoever sees the
    /// count changed sees the bit).
    pub(crate) fn register_writer(&self, from: usize) {
        self.word64(64 + 8 * (from / 64))
            .fetch_or(1 << (from % 64), Ordering::Relaxed);
        self.word(16).fetch_add(1, Ordering::Release);
    }

    /// Owner side: the count of registrations; it changes when a writer registers.
    pub(crate) fn writers_version(&self) -> u32 {
        self.word(16).load(Ordering::Acquire)
    }

    /// Owner side: the nodes (of the host, below `nodes`) registered as writers.
    pub(crate) fn writers(&self, nodes: usize) -> impl Iterator<Item = usize> + '_ {
        (0..nodes.div_ceil(64)).flat_map(move |w| {
            let bits = self.word64(64 + 8 * w).load(Ordering::Acquire);
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| w * 64 + b)
                .filter(move |&i| i < nodes)
        })
    }

    /// Writer side: the owner's doorbell, to ring after each record.
    pub(crate) fn bell(&self) -> Bell {
        Bell { base: self.base }
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
    /// value to wait past; the caller then checks for work, as [`Block::sleep`] does.
    pub(crate) fn arm(&self) -> u32 {
        self.sleeping().store(1, Ordering::SeqCst);
        let seen = self.doorbell().load(Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        seen
    }

    /// Owner side: the sleep [`Block::arm`] began is over.
    pub(crate) fn disarm(&self) {
        self.sleeping().store(0, Ordering::Relaxed);
    }

    /// The doorbell, for a thread that sleeps on it.
    pub(crate) fn doorbell_handle(&self) -> Doorbell {
        Doorbell { base: self.base }
    }
}

/// A node's doorbell as its writers hold it: a pointer into the mapping, valid as long as the
/// [`HostSegment`] it came from (the interconnect keeps both).
#[derive(Clone, Copy)]
pub(crate) struct Bell {
    base: *mut u8,
}

// SAFETY: a pointer into a shared mapping that outlives it; only atomics are reached through
// it.
unsafe impl Send for Bell {}

impl Bell {
    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: as for `Block::word`: the block of a live mapping.
        unsafe { &*(self.base.add(at) as *const AtomicU32) }
    }

    /// After publishing a record: wake the owner if it sleeps.
    pub(crate) fn ring(&self) {
        // Orders the record's publication before reading `sleeping` (the owner does the
        // mirror image), so either it sees the record or we see it asleep.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.word(4).load(Ordering::Relaxed) != 0 {
            self.word(0).fetch_add(1, Ordering::SeqCst);
            futex_wake(self.word(0));
        }
    }
}

/// A node's doorbell as its owner's other threads hold it: like [`Bell`], but owning a share of
/// the mapping, so ringing it is sound whenever it is rung.
pub(crate) struct OwnBell {
    map: Arc<MmapRaw>,
    at: usize,
}

impl OwnBell {
    /// Wake the owner if it sleeps; as [`Bell::ring`], so whatever the caller stored before
    /// ringing is seen by the owner's `has_work` or ends its sleep.
    pub(crate) fn ring(&self) {
        Bell {
            // SAFETY: the block's offset inside the mapping this holds.
            base: unsafe { self.map.as_mut_ptr().add(self.at) },
        }
        .ring();
    }
}

/// A node's doorbell as a thread other than the owner's main one sleeps on it: a pointer into
/// the mapping, valid as long as the mapping it came from (whoever holds it must stop using it
/// before the interconnect is dropped).
#[derive(Clone, Copy, Debug)]
pub struct Doorbell {
    base: *mut u8,
}

// SAFETY: a pointer into a shared mapping that outlives its use; only atomics are reached
// through it.
unsafe impl Send for Doorbell {}

impl Doorbell {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: as for `Block::word`: the block of a live mapping.
        unsafe { &*(self.base as *const AtomicU32) }
    }

    /// Sleep until the doorbell is rung past `seen` (what the node's `arm` returned), or
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

#[cfg(test)]
mod tests {
    use super::*;

    fn path(name: &str) -> PathBuf {
        PathBuf::from(format!(
            "/dev/shm/cv-seg-test-{}-{name}",
            std::process::id()
        ))
    }

    /// The layout's pieces never overlap and every ring is 64-byte aligned, at sizes around
    /// a bitmap word's edge.
    #[test]
    fn blocks_and_rings_are_laid_out_apart_and_aligned() {
        for nodes in [1usize, 2, 63, 64, 65, 200] {
            assert!(64 + nodes.div_ceil(64) * 8 <= block_size(nodes));
            assert_eq!(rings_at(nodes) % 64, 0);
            assert!(size(nodes, 4096).is_some());
        }
        assert!(size(1 << 16, 1 << 30).is_none(), "refused, not wrapped");
    }

    /// A writer registers once; the owner sees the count change and the writer's bit.
    #[test]
    fn a_registered_writer_is_seen_by_the_owner() {
        let p = path("register");
        let seg = HostSegment::create(&p, 70, 4096).expect("create");
        let other = HostSegment::open(&p, 70, 4096).expect("open");
        std::fs::remove_file(&p).ok();
        let owner = seg.block(3);
        let v = owner.writers_version();
        assert_eq!(owner.writers(70).count(), 0);
        other.reserve_ring(3, 66).expect("room");
        other.block(3).register_writer(66);
        other.block(3).register_writer(1);
        assert_ne!(owner.writers_version(), v);
        assert_eq!(owner.writers(70).collect::<Vec<_>>(), [1, 66]);
        assert!(
            HostSegment::open(&path("absent"), 70, 4096).is_err(),
            "no such segment"
        );
    }
}
