//! A single-producer single-consumer ring of variable-length records, living in shared memory.
//!
//! ```text
//! | head, pulled, pull_ok, helper_ok (the consumer's line) | copy block (coop.rs) | data ... |
//! record: [word u32][pad u32][len bytes][padding to 64]
//!         word: 0 = nothing here yet, len + 1 = a record, u32::MAX = wrap marker
//! ```
//!
//! Positions are byte counts that only grow, taken modulo `CAP`; records start on 64-byte
//! boundaries and never wrap: one that does not fit before the end goes to 0, a wrap marker
//! left where it would have started.
//!
//! A record publishes itself: the producer writes its bytes, then its word with release
//! ordering; the consumer polls the word where the next record will start, with acquire
//! ordering. So a small message costs one cache line moving between the cores, the line it is
//! in, and no shared tail counter besides (a flag-and-buffer exchange moves two). For the
//! consumer to see 0 where nothing has been published yet, not a word left from an earlier lap,
//! the producer zeroes the word after each record before publishing it, and always keeps one
//! line free for that.
//!
//! The consumer frees space by storing its `head` with release ordering, sparingly: when it
//! finds the ring empty or has freed a quarter of it. The producer keeps its own copy and
//! re-reads `head` only when the ring looks full, since every read of a line the other side
//! wrote is a transfer between cores.
//!
//! The protocol is written against [`Memory`]: in the layer, [`Mapped`], the shared mapping
//! itself (every access compiles to the same loads, stores and copies as plain pointer code);
//! under `--cfg loom`, a model of the same lines whose interleavings the `loom` tests explore.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes in front of a ring's data: the consumer's line, and the pair's copy block (used for
/// large messages only, and keeping the consumer's line off the data: CPUs fetch lines in
/// pairs).
pub(crate) const HEADER: usize = 128;

/// [`Ring::pull_ok`], [`Ring::helper_ok`]: not probed yet.
pub(crate) const UNKNOWN: u32 = 0;
/// The probe worked.
pub(crate) const YES: u32 = 1;
/// The probe failed.
pub(crate) const NO: u32 = 2;

/// A word that says: the next record is at position 0.
const WRAP: u32 = u32::MAX;

/// Records start on cache-line boundaries: a small message then travels in one line, never
/// straddling two (each line is a transfer between cores).
const ALIGN: usize = 64;

/// Largest record a ring of `cap` bytes takes.
pub(crate) fn max_record(cap: usize) -> usize {
    cap / 2 - ALIGN
}

/// Bytes a record of `len` bytes takes, with its 8-byte word.
fn footprint(len: usize) -> usize {
    (8 + len + ALIGN - 1) & !(ALIGN - 1)
}

/// Where a ring lives: the consumer's `head` and the data area, whose words (the first four
/// bytes of each line) are read and written atomically. Positions are data offsets.
pub(crate) trait Memory {
    /// The consumer's published position.
    fn load_head(&self, order: Ordering) -> u64;
    /// Publish the consumer's position.
    fn store_head(&self, head: u64, order: Ordering);
    /// The word of the line at `pos` (a multiple of 64 below the capacity).
    fn load_word(&self, pos: usize, order: Ordering) -> u32;
    /// Set the word of the line at `pos`.
    fn store_word(&self, pos: usize, word: u32, order: Ordering);
    /// Producer: copy `bytes` to data offset `at`.
    ///
    /// # Safety
    /// `[at, at + bytes.len())` lies inside the data area and the consumer reads none of it
    /// until a word published after this call says so.
    unsafe fn write(&self, at: usize, bytes: &[u8]);
    /// Consumer: copy `out.len()` bytes at data offset `at` into `out`, initialising it.
    ///
    /// # Safety
    /// `[at, at + out.len())` lies inside the data area and holds a record the producer
    /// published (its word was read with acquire ordering) and will not overwrite before the
    /// consumer publishes a head past it.
    unsafe fn read(&self, at: usize, out: &mut [MaybeUninit<u8>]);
}

/// A ring's memory in a shared mapping: `HEADER` bytes, then the data.
#[derive(Clone, Copy)]
pub(crate) struct Mapped {
    base: *mut u8,
}

// SAFETY: a pointer into a shared mapping that outlives it (the segment keeps the mapping
// alive); the protocol above, not Rust ownership, keeps producer and consumer apart.
unsafe impl Send for Mapped {}

impl Mapped {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: offset 0 is 8-aligned inside the mapping (`Ring::new`'s contract); atomics
        // may alias memory another process reaches too.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    fn word(&self, pos: usize) -> &AtomicU32 {
        // SAFETY: the callers' positions are 64-aligned and inside the data area (checked in
        // debug builds by `Ring::word_at`), which `Ring::new`'s contract keeps mapped.
        unsafe { &*(self.base.add(HEADER + pos) as *const AtomicU32) }
    }
}

impl Memory for Mapped {
    #[inline(always)]
    fn load_head(&self, order: Ordering) -> u64 {
        self.head().load(order)
    }

    #[inline(always)]
    fn store_head(&self, head: u64, order: Ordering) {
        self.head().store(head, order);
    }

    #[inline(always)]
    fn load_word(&self, pos: usize, order: Ordering) -> u32 {
        self.word(pos).load(order)
    }

    #[inline(always)]
    fn store_word(&self, pos: usize, word: u32, order: Ordering) {
        self.word(pos).store(word, order);
    }

    #[inline(always)]
    unsafe fn write(&self, at: usize, bytes: &[u8]) {
        // SAFETY: the caller's contract: inside the data area, not read concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(HEADER + at), bytes.len());
        }
    }

    #[inline(always)]
    unsafe fn read(&self, at: usize, out: &mut [MaybeUninit<u8>]) {
        // SAFETY: the caller's contract: inside the data area, published, not overwritten.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.add(HEADER + at),
                out.as_mut_ptr().cast::<u8>(),
                out.len(),
            );
        }
    }
}

/// A view of one ring.
#[derive(Clone, Copy)]
pub(crate) struct Ring<M = Mapped> {
    mem: M,
    cap: usize,
}

impl Ring<Mapped> {
    /// The ring at `base`, `HEADER + cap` bytes, `cap` a power of two of at least 256.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned, point to `HEADER + cap` bytes that stay mapped as long as
    /// the ring is used, and be initialised to zero (or be a ring already in use). At most one
    /// process may produce and one consume.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize) -> Ring {
        Ring::with_memory(Mapped { base }, cap)
    }

    /// How many of the producer's lent messages (see `pull.rs`) the consumer has copied out of
    /// the producer's memory: the producer may free them. Written by the consumer only.
    pub(crate) fn pulled(&self) -> &AtomicU64 {
        // SAFETY: offset 8 of the consumer's line, 8-aligned, inside the mapping; atomics may
        // alias shared memory.
        unsafe { &*(self.mem.base.add(8) as *const AtomicU64) }
    }

    /// Whether the consumer can read the producer's memory, as the consumer's probe found
    /// when the producer first wrote ([`UNKNOWN`], [`YES`], [`NO`]): the producer lends it
    /// large messages instead of copying them into the ring only once it is `YES`.
    pub(crate) fn pull_ok(&self) -> &AtomicU32 {
        // SAFETY: as for `pulled`, at offset 16.
        unsafe { &*(self.mem.base.add(16) as *const AtomicU32) }
    }

    /// Whether the producer can write into the consumer's memory, as the producer's probe
    /// found before its first loan ([`UNKNOWN`], [`YES`], [`NO`]): the consumer shares the copy
    /// of a large loan with it only when `YES` (`coop.rs`). Written by the producer only.
    pub(crate) fn helper_ok(&self) -> &AtomicU32 {
        // SAFETY: as for `pulled`, at offset 20.
        unsafe { &*(self.mem.base.add(20) as *const AtomicU32) }
    }

    /// The block through which the consumer shares the copy of a large lent message with the
    /// producer.
    pub(crate) fn coop(&self) -> &crate::coop::Block {
        const _: () = assert!(std::mem::size_of::<crate::coop::Block>() <= 64);
        // SAFETY: the second line of the header, 64-aligned, inside the mapping; the block is
        // atomics only, which may alias shared memory (zeroed: no copy offered).
        unsafe { &*(self.mem.base.add(64) as *const crate::coop::Block) }
    }
}

impl<M: Memory> Ring<M> {
    /// The ring in `mem`, of `cap` bytes of data (a power of two of at least 256).
    fn with_memory(mem: M, cap: usize) -> Ring<M> {
        debug_assert!(cap.is_power_of_two() && cap >= 4 * ALIGN);
        Ring { mem, cap }
    }

    /// Check a word's position (debug builds).
    #[inline(always)]
    fn word_at(&self, pos: usize) -> usize {
        debug_assert!(pos < self.cap && pos.is_multiple_of(ALIGN));
        pos
    }

    /// Largest record the ring takes.
    pub(crate) fn max_record(&self) -> usize {
        max_record(self.cap)
    }

    /// Consumer: whether nothing is waiting to be read.
    pub(crate) fn is_empty(&self, c: &Consumer) -> bool {
        self.mem.load_word(
            self.word_at((c.head as usize) & (self.cap - 1)),
            Ordering::Acquire,
        ) == 0
    }

    /// Producer: append the record `rec`, if there is room now.
    /// Returns `false` when the ring is too full: nothing was written. `p` is the producer's
    /// local state for this ring.
    pub(crate) fn try_push(&self, p: &mut Producer, rec: &[u8]) -> bool {
        let len = rec.len();
        debug_assert!(len <= self.max_record());
        let need = footprint(len);
        let pos = (p.tail as usize) & (self.cap - 1);
        let to_end = self.cap - pos;
        let (skip, at) = if need > to_end { (to_end, 0) } else { (0, pos) };
        // One line more than the record: where the next word, zeroed, goes.
        let room = skip + need + ALIGN;
        if room > self.cap - (p.tail - p.head) as usize {
            // Looks full with what we knew: learn how far the consumer really is.
            p.head = self.mem.load_head(Ordering::Acquire);
            if room > self.cap - (p.tail - p.head) as usize {
                return false;
            }
        }
        // SAFETY: [pos, pos + skip) and [at, at + need + 64) are inside the data area (modulo
        // CAP for the last line) and free: the consumer reads nothing the producer has not
        // published, and `room` counted them.
        unsafe { self.mem.write(at + 8, rec) };
        self.mem.store_word(
            self.word_at((at + need) & (self.cap - 1)),
            0,
            Ordering::Relaxed,
        );
        // Release: the bytes and the zeroed word after them are seen with the word.
        self.mem
            .store_word(self.word_at(at), len as u32 + 1, Ordering::Release);
        if skip > 0 {
            // After the record it points to, so the consumer never jumps to an unwritten one.
            self.mem
                .store_word(self.word_at(pos), WRAP, Ordering::Release);
        }
        p.tail += (skip + need) as u64;
        true
    }

    /// Consumer: the length of the next record, if one is there. Finding the ring empty
    /// publishes what was freed, so a producer waiting for room learns of it.
    pub(crate) fn peek_len(&self, c: &mut Consumer) -> Option<usize> {
        loop {
            let pos = (c.head as usize) & (self.cap - 1);
            match self.mem.load_word(self.word_at(pos), Ordering::Acquire) {
                0 => {
                    self.publish(c);
                    return None;
                }
                WRAP => c.head += (self.cap - pos) as u64,
                w => return Some(w as usize - 1),
            }
        }
    }

    /// Consumer: copy the next record (whose length [`peek_len`](Self::peek_len) gave) into
    /// `out`, which must be exactly that long, and free its space. Every byte of `out` is
    /// initialised afterwards (so it may be fresh, unzeroed memory).
    pub(crate) fn pop_into(&self, c: &mut Consumer, out: &mut [MaybeUninit<u8>]) {
        let pos = (c.head as usize) & (self.cap - 1);
        // SAFETY: peek_len returned this record's length and skipped any wrap marker, so a
        // published record of `out.len()` bytes starts at `pos + 8`; the producer leaves it
        // alone until `publish` below says it is read.
        unsafe { self.mem.read(pos + 8, out) };
        c.head += footprint(out.len()) as u64;
        if (c.head - c.published) as usize >= self.cap / 4 {
            self.publish(c);
        }
    }

    fn publish(&self, c: &mut Consumer) {
        if c.published != c.head {
            self.mem.store_head(c.head, Ordering::Release);
            c.published = c.head;
        }
    }
}

/// The producer's local state for one ring.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Producer {
    /// How far it knows the consumer is.
    head: u64,
    /// How far it has written.
    tail: u64,
}

/// The consumer's local state for one ring.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Consumer {
    /// How far it has read.
    head: u64,
    /// How far it has told the producer.
    published: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Mem([u8; HEADER + 256]);

    /// A zeroed ring of 256 bytes, with fresh producer and consumer states.
    fn ring() -> (Box<Mem>, Ring, Producer, Consumer) {
        let mut mem = Box::new(Mem([0; HEADER + 256]));
        // SAFETY: zeroed, aligned, and the box outlives the ring in every test.
        let r = unsafe { Ring::new(mem.0.as_mut_ptr(), 256) };
        (mem, r, Producer::default(), Consumer::default())
    }

    /// The next record, if any.
    fn pop(r: &Ring, c: &mut Consumer) -> Option<Vec<u8>> {
        let l = r.peek_len(c)?;
        let mut out = vec![MaybeUninit::uninit(); l];
        r.pop_into(c, &mut out);
        // SAFETY: pop_into initialised every byte.
        Some(out.iter().map(|b| unsafe { b.assume_init() }).collect())
    }

    #[test]
    fn records_round_trip_across_the_wrap() {
        let (_mem, r, mut p, mut c) = ring();
        let mut next_in = 0u8;
        let mut next_out = 0u8;
        for round in 0..200usize {
            let len = (round * 37) % r.max_record();
            let rec = vec![next_in; len];
            if r.try_push(&mut p, &rec) {
                next_in = next_in.wrapping_add(1);
            }
            while let Some(out) = pop(&r, &mut c) {
                assert!(out.iter().all(|&b| b == next_out), "round {round}");
                next_out = next_out.wrapping_add(1);
            }
        }
        assert_eq!(next_in, next_out);
    }

    #[test]
    fn old_laps_never_read_as_records() {
        // Bursts of records of every length written over many laps, read back in bursts of
        // other sizes: stale bytes from an earlier lap must never pass for a record.
        let (_mem, r, mut p, mut c) = ring();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let (mut wrote, mut read) = (0u32, 0u32);
        for _ in 0..20_000 {
            for _ in 0..rand(4) {
                let len = 4 + rand(r.max_record() - 3);
                let mut rec = vec![0xa5; len];
                rec[..4].copy_from_slice(&wrote.to_le_bytes());
                if r.try_push(&mut p, &rec) {
                    wrote += 1;
                }
            }
            for _ in 0..rand(4) {
                let Some(out) = pop(&r, &mut c) else { break };
                assert_eq!(out[..4], read.to_le_bytes());
                assert!(out[4..].iter().all(|&b| b == 0xa5));
                read += 1;
            }
        }
        assert!(read > 10_000, "{read}");
    }

    #[test]
    fn a_full_ring_refuses_and_nothing_is_lost() {
        let (_mem, r, mut p, mut c) = ring();
        let mut pushed = 0u8;
        while r.try_push(&mut p, &[pushed; 20]) {
            pushed += 1;
        }
        assert!(pushed > 0);
        for i in 0..pushed {
            let out = pop(&r, &mut c).expect("record");
            assert_eq!(out, vec![i; 20]);
        }
        assert!(r.peek_len(&mut c).is_none());
        assert!(r.is_empty(&c));
        // What the consumer freed reaches the producer: the ring takes as much again.
        let mut again = 0u8;
        while r.try_push(&mut p, &[again; 20]) {
            again += 1;
        }
        assert_eq!(again, pushed);
    }
}

/// The ring's protocol model-checked: `loom` runs a producer and a consumer through every
/// interleaving and every outcome its memory model allows for relaxed and acquire/release
/// accesses, and reports unsynchronised accesses to record bytes as races. (Checked to catch
/// a record word stored relaxed, a head published relaxed, and a next word not zeroed.) Run
/// with
/// `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p converse-si --lib loom`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicU32, AtomicU64};
    use loom::sync::Arc;

    /// One line of the model: its first four bytes are the word, atomic, as in the mapping
    /// (so bytes a record leaves there read back as that line's word on a later lap); the
    /// rest plain memory, whose unsynchronised use loom reports as a data race.
    struct Line {
        word: AtomicU32,
        rest: UnsafeCell<[u8; ALIGN - 4]>,
    }

    /// A ring's memory on the heap, in loom's atomics and cells.
    struct Model {
        head: AtomicU64,
        lines: Vec<Line>,
    }

    // SAFETY: shared between the model's producer and consumer exactly as the mapping is
    // between processes; loom itself checks the cells' accesses for races.
    unsafe impl Sync for Model {}
    // SAFETY: as above.
    unsafe impl Send for Model {}

    impl Model {
        fn new(cap: usize) -> Model {
            Model {
                head: AtomicU64::new(0),
                lines: (0..cap / ALIGN)
                    .map(|_| Line {
                        word: AtomicU32::new(0),
                        rest: UnsafeCell::new([0; ALIGN - 4]),
                    })
                    .collect(),
            }
        }

        /// The pieces of `[at, at + len)` line by line: (line, offset in it, offset in the
        /// range, length).
        fn pieces(at: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> {
            let mut done = 0;
            std::iter::from_fn(move || {
                (done < len).then(|| {
                    let off = (at + done) % ALIGN;
                    let n = (ALIGN - off).min(len - done);
                    let piece = ((at + done) / ALIGN, off, done, n);
                    done += n;
                    piece
                })
            })
        }
    }

    impl Memory for Model {
        fn load_head(&self, order: Ordering) -> u64 {
            self.head.load(order)
        }

        fn store_head(&self, head: u64, order: Ordering) {
            self.head.store(head, order);
        }

        fn load_word(&self, pos: usize, order: Ordering) -> u32 {
            self.lines[pos / ALIGN].word.load(order)
        }

        fn store_word(&self, pos: usize, word: u32, order: Ordering) {
            self.lines[pos / ALIGN].word.store(word, order);
        }

        unsafe fn write(&self, at: usize, bytes: &[u8]) {
            for (l, off, from, n) in Model::pieces(at, bytes.len()) {
                let line = &self.lines[l];
                let src = &bytes[from..from + n];
                let in_word = 4usize.saturating_sub(off).min(n);
                if in_word > 0 {
                    // Plain bytes over the word, as the real copy writes them.
                    let mut w = line.word.load(Ordering::Relaxed).to_le_bytes();
                    w[off..off + in_word].copy_from_slice(&src[..in_word]);
                    line.word.store(u32::from_le_bytes(w), Ordering::Relaxed);
                }
                if n > in_word {
                    let start = off + in_word - 4;
                    line.rest.with_mut(|r| {
                        // SAFETY: loom checks that no other access to the cell overlaps.
                        let r = unsafe { &mut *r };
                        r[start..start + n - in_word].copy_from_slice(&src[in_word..]);
                    });
                }
            }
        }

        unsafe fn read(&self, at: usize, out: &mut [MaybeUninit<u8>]) {
            for (l, off, to, n) in Model::pieces(at, out.len()) {
                let line = &self.lines[l];
                let dst = &mut out[to..to + n];
                let in_word = 4usize.saturating_sub(off).min(n);
                if in_word > 0 {
                    let w = line.word.load(Ordering::Relaxed).to_le_bytes();
                    for (d, s) in dst[..in_word].iter_mut().zip(&w[off..]) {
                        d.write(*s);
                    }
                }
                if n > in_word {
                    let start = off + in_word - 4;
                    line.rest.with(|r| {
                        // SAFETY: loom checks that no other access to the cell overlaps.
                        let r = unsafe { &*r };
                        for (d, s) in dst[in_word..].iter_mut().zip(&r[start..]) {
                            d.write(*s);
                        }
                    });
                }
            }
        }
    }

    /// Record `i`: its length, then bytes that say which record and where in it they are.
    fn record(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|k| (i * 31 + k) as u8).collect()
    }

    /// The smallest ring (four lines). With these lengths the first two records fill it; the
    /// third (two lines) does not fit before the end, so it waits for an empty ring and goes
    /// to 0 behind a wrap marker; the later ones go round again, over lines whose word
    /// position earlier records' bytes covered; one is the largest record the ring takes, one
    /// is empty.
    const CAP: usize = 4 * ALIGN;
    const LENGTHS: [usize; 5] = [20, 64, 60, 0, 20];

    #[test]
    fn loom_records_arrive_in_order_and_whole_across_wrap_and_full_ring() {
        // Every interleaving, no preemption bound (about 2 s): the model is small enough.
        let mut b = loom::model::Builder::new();
        b.preemption_bound = None;
        b.check(|| {
            let ring = Arc::new(Ring::with_memory(Model::new(CAP), CAP));
            assert_eq!(ring.max_record(), 64);
            let mut p = Producer::default();
            // Fill the ring before the consumer starts: the producer must find it full.
            let mut sent = 0;
            while ring.try_push(&mut p, &record(sent, LENGTHS[sent])) {
                sent += 1;
            }
            assert!(sent < LENGTHS.len(), "the ring never filled");
            let consumer = {
                let ring = Arc::clone(&ring);
                loom::thread::spawn(move || {
                    let mut c = Consumer::default();
                    for (i, &len) in LENGTHS.iter().enumerate() {
                        let got = loop {
                            if let Some(l) = ring.peek_len(&mut c) {
                                break l;
                            }
                            loom::thread::yield_now();
                        };
                        assert_eq!(got, len, "record {i}");
                        let mut out = vec![MaybeUninit::uninit(); got];
                        ring.pop_into(&mut c, &mut out);
                        // SAFETY: pop_into initialised every byte.
                        let out: Vec<u8> = out.iter().map(|b| unsafe { b.assume_init() }).collect();
                        assert_eq!(out, record(i, len), "record {i}");
                    }
                    assert!(ring.peek_len(&mut c).is_none());
                })
            };
            for (i, &len) in LENGTHS.iter().enumerate().skip(sent) {
                while !ring.try_push(&mut p, &record(i, len)) {
                    loom::thread::yield_now();
                }
            }
            consumer.join().expect("consumer");
        });
    }
}
