//! A single-producer single-consumer ring of variable-length records, living in shared memory.
//!
//! ```text
//! | tail (producer, cache line) | head, pulled, pull_ok (consumer, cache line) | data: CAP bytes |
//! record: [len u32][pad u32][len bytes][padding to 64]   wrap marker: len = u32::MAX
//! ```
//!
//! `head` and `tail` only grow (byte counts); a position is the count modulo `CAP`. The producer
//! writes a record's bytes, then publishes it by storing the new tail with release ordering;
//! the consumer reads the tail with acquire ordering, copies the record out, then frees the
//! space by storing the new head with release ordering. A record never wraps: if it does not fit
//! before the end, the producer leaves a wrap marker there and starts again at 0.
//!
//! Each side keeps both counters in local copies and shares its own sparingly, because
//! every read of a line the other side touched is a cache-line transfer between cores: the
//! producer never reads `tail` back (the consumer polling it takes the line away) and re-reads
//! `head` only when the ring looks full; the consumer publishes `head` only when it finds the
//! ring empty or has freed a quarter of it. Per message that leaves the record and `tail`, as
//! a plain flag-and-buffer exchange has.
//!
//! All `unsafe` of the SI interconnect is here: the ring is raw memory shared with another
//! process, so it can only be reached through pointers.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of a ring's two counters (each on its own cache line, so producer and consumer do not
/// share one).
pub const HEADER: usize = 128;

const WRAP: u32 = u32::MAX;

/// A view of one ring inside a mapping.
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

/// Bytes a record of `len` bytes takes, with its 8-byte length word.
fn footprint(len: usize) -> usize {
    (8 + len + ALIGN - 1) & !(ALIGN - 1)
}

impl Ring {
    /// The ring at `base`, `HEADER + cap` bytes, `cap` a power of two of at least 64.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned, point to `HEADER + cap` bytes that stay mapped as long as
    /// the ring is used, and be initialised to zero (or be a ring already in use). At most one
    /// process may produce and one consume.
    pub unsafe fn new(base: *mut u8, cap: usize) -> Ring {
        debug_assert!(cap.is_power_of_two() && cap >= 64);
        Ring { base, cap }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: offset 0 is 8-aligned inside the mapping; AtomicU64 may alias shared memory.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: as for `tail`, at offset 64.
        unsafe { &*(self.base.add(64) as *const AtomicU64) }
    }

    /// How many of the producer's lent messages (see `pull.rs`) the consumer has copied out of
    /// the producer's memory: the producer may free them. Written by the consumer only.
    pub fn pulled(&self) -> &AtomicU64 {
        // SAFETY: as for `tail`, at offset 72, on the consumer's line.
        unsafe { &*(self.base.add(72) as *const AtomicU64) }
    }

    /// Non-zero when the consumer can read the producer's memory (its start-up probe worked),
    /// so the producer may lend it large messages instead of copying them into the ring.
    pub fn pull_ok(&self) -> &AtomicU32 {
        // SAFETY: as for `tail`, at offset 80, on the consumer's line.
        unsafe { &*(self.base.add(80) as *const AtomicU32) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the data area follows the header inside the mapping.
        unsafe { self.base.add(HEADER) }
    }

    /// Largest record the ring takes.
    pub fn max_record(&self) -> usize {
        self.cap / 2 - ALIGN
    }

    /// Consumer: whether nothing is waiting to be read (`head`: the consumer's own count).
    pub fn is_empty(&self, head: &Consumer) -> bool {
        head.head == self.tail().load(Ordering::Acquire)
    }

    /// Producer: append a record made of `parts` (concatenated), if there is room now.
    /// Returns `false` when the ring is too full: nothing was written. `p` is the producer's
    /// local state for this ring.
    pub fn try_push(&self, p: &mut Producer, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert!(len <= self.max_record());
        let need = footprint(len);
        // Our own copy: reading the shared counter would wait for the line to come back from
        // the consumer, who polls it (a cache miss before every record).
        let tail = p.tail;
        let pos = (tail as usize) & (self.cap - 1);
        let to_end = self.cap - pos;
        let (skip, at) = if need > to_end { (to_end, 0) } else { (0, pos) };
        if skip + need > self.cap - (tail - p.head) as usize {
            // Looks full with what we knew: learn how far the consumer really is.
            p.head = self.head().load(Ordering::Acquire);
            if skip + need > self.cap - (tail - p.head) as usize {
                return false;
            }
        }
        // SAFETY: [pos, pos + 8) and [at, at + need) are inside the data area and free: the
        // consumer does not read past the published tail, and `free` counted them.
        unsafe {
            if skip > 0 {
                (self.data().add(pos) as *mut u32).write(WRAP);
            }
            let rec = self.data().add(at);
            (rec as *mut u32).write(len as u32);
            let mut off = 8;
            for p in parts {
                std::ptr::copy_nonoverlapping(p.as_ptr(), rec.add(off), p.len());
                off += p.len();
            }
        }
        p.tail = tail + (skip + need) as u64;
        self.tail().store(p.tail, Ordering::Release);
        true
    }

    /// Consumer: the length of the next record, if one is there. Finding the ring empty
    /// publishes what was freed, so a producer waiting for room learns of it.
    pub fn peek_len(&self, c: &mut Consumer) -> Option<usize> {
        loop {
            if c.head == c.tail {
                c.tail = self.tail().load(Ordering::Acquire);
                if c.head == c.tail {
                    self.publish(c);
                    return None;
                }
            }
            let pos = (c.head as usize) & (self.cap - 1);
            // SAFETY: a published record (or wrap marker) starts at `pos`.
            let len = unsafe { (self.data().add(pos) as *const u32).read() };
            if len != WRAP {
                return Some(len as usize);
            }
            c.head += (self.cap - pos) as u64;
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
                self.data().add(pos + 8),
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
    /// How far it has written (the shared `tail` is only ever stored, never read back).
    tail: u64,
}

/// The consumer's local state for one ring.
#[derive(Debug, Default, Clone, Copy)]
pub struct Consumer {
    /// How far it has read.
    head: u64,
    /// How far it has told the producer.
    published: u64,
    /// How far it knows the producer has written.
    tail: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Mem([u8; HEADER + 256]);

    #[test]
    fn records_round_trip_across_the_wrap() {
        let mut mem = Box::new(Mem([0; HEADER + 256]));
        // SAFETY: zeroed, aligned, lives for the test.
        let r = unsafe { Ring::new(mem.0.as_mut_ptr(), 256) };
        let (mut p, mut c) = (Producer::default(), Consumer::default());
        let mut next_in = 0u8;
        let mut next_out = 0u8;
        for round in 0..200usize {
            let len = (round * 37) % r.max_record();
            let rec = vec![next_in; len];
            if r.try_push(&mut p, &[&rec]) {
                next_in = next_in.wrapping_add(1);
            }
            while let Some(l) = r.peek_len(&mut c) {
                let mut out = vec![MaybeUninit::uninit(); l];
                r.pop_into(&mut c, &mut out);
                // SAFETY: pop_into initialised every byte.
                let out: Vec<u8> = out.iter().map(|b| unsafe { b.assume_init() }).collect();
                assert!(out.iter().all(|&b| b == next_out), "round {round}");
                next_out = next_out.wrapping_add(1);
            }
        }
        assert_eq!(next_in, next_out);
    }

    #[test]
    fn a_full_ring_refuses_and_nothing_is_lost() {
        let mut mem = Box::new(Mem([0; HEADER + 256]));
        // SAFETY: zeroed, aligned, lives for the test.
        let r = unsafe { Ring::new(mem.0.as_mut_ptr(), 256) };
        let (mut p, mut c) = (Producer::default(), Consumer::default());
        let mut pushed = 0u8;
        while r.try_push(&mut p, &[&[pushed; 20]]) {
            pushed += 1;
        }
        assert!(pushed > 0);
        for i in 0..pushed {
            let l = r.peek_len(&mut c).expect("record");
            let mut out = vec![MaybeUninit::uninit(); l];
            r.pop_into(&mut c, &mut out);
            // SAFETY: pop_into initialised every byte.
            let out: Vec<u8> = out.iter().map(|b| unsafe { b.assume_init() }).collect();
            assert_eq!(out, vec![i; 20]);
        }
        assert!(r.peek_len(&mut c).is_none());
        assert!(r.is_empty(&c));
        // What the consumer freed reaches the producer: the ring takes as much again.
        let mut again = 0u8;
        while r.try_push(&mut p, &[&[again; 20]]) {
            again += 1;
        }
        assert_eq!(again, pushed);
    }
}
