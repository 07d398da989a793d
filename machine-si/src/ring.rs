//! A single-producer single-consumer ring of variable-length records, living in shared memory.
//!
//! ```text
//! | head, pulled, pull_ok (the consumer's line) | copy block (coop.rs) | data: CAP bytes ... |
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
//! All `unsafe` of the SI interconnect is here: the ring is raw memory shared with another
//! process, so it can only be reached through pointers.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes in front of a ring's data: the consumer's line, and the pair's copy block (used for
/// large messages only, and keeping the consumer's line off the data: CPUs fetch lines in
/// pairs).
pub const HEADER: usize = 128;

/// A word that says: the next record is at position 0.
const WRAP: u32 = u32::MAX;

/// A view of one ring inside a mapping.
#[derive(Clone, Copy)]
pub struct Ring {
    base: *mut u8,
    cap: usize,
}

// SAFETY: a Ring is a pointer into a shared mapping that outlives it (the segment keeps the
// mapping alive); the protocol above, not Rust ownership, keeps producer and consumer apart.
unsafe impl Send for Ring {}

/// Records start on cache-line boundaries: a small message then travels in one line, never
/// straddling two (each line is a transfer between cores).
const ALIGN: usize = 64;

/// Bytes a record of `len` bytes takes, with its 8-byte word.
fn footprint(len: usize) -> usize {
    (8 + len + ALIGN - 1) & !(ALIGN - 1)
}

impl Ring {
    /// The ring at `base`, `HEADER + cap` bytes, `cap` a power of two of at least 256.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned, point to `HEADER + cap` bytes that stay mapped as long as
    /// the ring is used, and be initialised to zero (or be a ring already in use). At most one
    /// process may produce and one consume.
    pub unsafe fn new(base: *mut u8, cap: usize) -> Ring {
        debug_assert!(cap.is_power_of_two() && cap >= 4 * ALIGN);
        Ring { base, cap }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: offset 0 is 8-aligned inside the mapping; AtomicU64 may alias shared memory.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    /// How many of the producer's lent messages (see `pull.rs`) the consumer has copied out of
    /// the producer's memory: the producer may free them. Written by the consumer only.
    pub fn pulled(&self) -> &AtomicU64 {
        // SAFETY: as for `head`, at offset 8, on the consumer's line.
        unsafe { &*(self.base.add(8) as *const AtomicU64) }
    }

    /// Non-zero when the consumer can read the producer's memory (its start-up probe worked),
    /// so the producer may lend it large messages instead of copying them into the ring.
    pub fn pull_ok(&self) -> &AtomicU32 {
        // SAFETY: as for `head`, at offset 16, on the consumer's line.
        unsafe { &*(self.base.add(16) as *const AtomicU32) }
    }

    /// The block through which the consumer shares the copy of a large lent message with the
    /// producer.
    pub fn coop(&self) -> &crate::coop::Block {
        const _: () = assert!(std::mem::size_of::<crate::coop::Block>() <= 64);
        // SAFETY: the second line of the header, 64-aligned, inside the mapping; the block is
        // atomics only, which may alias shared memory (zeroed: no copy offered).
        unsafe { &*(self.base.add(64) as *const crate::coop::Block) }
    }

    /// The word at data position `pos` (a multiple of 64).
    fn word(&self, pos: usize) -> &AtomicU32 {
        debug_assert!(pos < self.cap && pos.is_multiple_of(ALIGN));
        // SAFETY: inside the data area, 64-aligned.
        unsafe { &*(self.base.add(HEADER + pos) as *const AtomicU32) }
    }

    /// Largest record the ring takes.
    pub fn max_record(&self) -> usize {
        self.cap / 2 - ALIGN
    }

    /// Consumer: whether nothing is waiting to be read.
    pub fn is_empty(&self, c: &Consumer) -> bool {
        self.word((c.head as usize) & (self.cap - 1))
            .load(Ordering::Acquire)
            == 0
    }

    /// Producer: append the record `rec`, if there is room now.
    /// Returns `false` when the ring is too full: nothing was written. `p` is the producer's
    /// local state for this ring.
    pub fn try_push(&self, p: &mut Producer, rec: &[u8]) -> bool {
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
            p.head = self.head().load(Ordering::Acquire);
            if room > self.cap - (p.tail - p.head) as usize {
                return false;
            }
        }
        // SAFETY: [pos, pos + skip) and [at, at + need + 64) are inside the data area (modulo
        // CAP for the last line) and free: the consumer reads nothing the producer has not
        // published, and `room` counted them.
        unsafe {
            std::ptr::copy_nonoverlapping(rec.as_ptr(), self.base.add(HEADER + at + 8), len);
        }
        self.word((at + need) & (self.cap - 1))
            .store(0, Ordering::Relaxed);
        // Release: the bytes and the zeroed word after them are seen with the word.
        self.word(at).store(len as u32 + 1, Ordering::Release);
        if skip > 0 {
            // After the record it points to, so the consumer never jumps to an unwritten one.
            self.word(pos).store(WRAP, Ordering::Release);
        }
        p.tail += (skip + need) as u64;
        true
    }

    /// Consumer: the length of the next record, if one is there. Finding the ring empty
    /// publishes what was freed, so a producer waiting for room learns of it.
    pub fn peek_len(&self, c: &mut Consumer) -> Option<usize> {
        loop {
            let pos = (c.head as usize) & (self.cap - 1);
            match self.word(pos).load(Ordering::Acquire) {
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
    pub fn pop_into(&self, c: &mut Consumer, out: &mut [MaybeUninit<u8>]) {
        let pos = (c.head as usize) & (self.cap - 1);
        // SAFETY: peek_len returned this record's length and skipped any wrap marker, so a
        // published record of `out.len()` bytes starts at `pos + 8`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.add(HEADER + pos + 8),
                out.as_mut_ptr().cast::<u8>(),
                out.len(),
            );
        }
        c.head += footprint(out.len()) as u64;
        if (c.head - c.published) as usize >= self.cap / 4 {
            self.publish(c);
        }
    }

    fn publish(&self, c: &mut Consumer) {
        if c.published != c.head {
            self.head().store(c.head, Ordering::Release);
            c.published = c.head;
        }
    }
}

/// The producer's local state for one ring.
#[derive(Debug, Default, Clone, Copy)]
pub struct Producer {
    /// How far it knows the consumer is.
    head: u64,
    /// How far it has written.
    tail: u64,
}

/// The consumer's local state for one ring.
#[derive(Debug, Default, Clone, Copy)]
pub struct Consumer {
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
