//! A single-producer single-consumer ring of variable-length records, living in shared memory.
//!
//! ```text
//! | tail (producer, cache line) | head (consumer, cache line) | data: CAP bytes ... |
//! record: [len u32][pad u32][len bytes][padding to 8]    wrap marker: len = u32::MAX
//! ```
//!
//! `head` and `tail` only grow (byte counts); a position is the count modulo `CAP`. The producer
//! writes a record's bytes, then publishes it by storing the new tail with release ordering;
//! the consumer reads the tail with acquire ordering, copies the record out, then frees the
//! space by storing the new head with release ordering. A record never wraps: if it does not fit
//! before the end, the producer leaves a wrap marker there and starts again at 0.
//!
//! All `unsafe` of the SI interconnect is here: the ring is raw memory shared with another
//! process, so it can only be reached through pointers.

use std::sync::atomic::{AtomicU64, Ordering};

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

fn round8(n: usize) -> usize {
    (n + 7) & !7
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

    fn data(&self) -> *mut u8 {
        // SAFETY: the data area follows the header inside the mapping.
        unsafe { self.base.add(HEADER) }
    }

    /// Largest record the ring takes.
    pub fn max_record(&self) -> usize {
        self.cap / 2 - 8
    }

    /// Whether nothing is waiting to be read.
    pub fn is_empty(&self) -> bool {
        self.head().load(Ordering::Relaxed) == self.tail().load(Ordering::Acquire)
    }

    /// Producer: append a record made of `parts` (concatenated), if there is room now.
    /// Returns `false` when the ring is too full: nothing was written.
    pub fn try_push(&self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert!(len <= self.max_record());
        let need = 8 + round8(len);
        let tail = self.tail().load(Ordering::Relaxed);
        let head = self.head().load(Ordering::Acquire);
        let free = self.cap - (tail - head) as usize;
        let pos = (tail as usize) & (self.cap - 1);
        let to_end = self.cap - pos;
        let (skip, at) = if need > to_end { (to_end, 0) } else { (0, pos) };
        if skip + need > free {
            return false;
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
        self.tail()
            .store(tail + (skip + need) as u64, Ordering::Release);
        true
    }

    /// Consumer: the length of the next record, if one is there.
    pub fn peek_len(&self) -> Option<usize> {
        let mut head = self.head().load(Ordering::Relaxed);
        loop {
            let tail = self.tail().load(Ordering::Acquire);
            if head == tail {
                return None;
            }
            let pos = (head as usize) & (self.cap - 1);
            // SAFETY: a published record (or wrap marker) starts at `pos`.
            let len = unsafe { (self.data().add(pos) as *const u32).read() };
            if len != WRAP {
                return Some(len as usize);
            }
            head += (self.cap - pos) as u64;
            self.head().store(head, Ordering::Release);
        }
    }

    /// Consumer: copy the next record (whose length [`peek_len`](Self::peek_len) gave) into
    /// `out`, which must be exactly that long, and free its space.
    pub fn pop_into(&self, out: &mut [u8]) {
        let head = self.head().load(Ordering::Relaxed);
        let pos = (head as usize) & (self.cap - 1);
        // SAFETY: peek_len returned this record's length and skipped any wrap marker, so a
        // published record of `out.len()` bytes starts at `pos + 8`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data().add(pos + 8), out.as_mut_ptr(), out.len());
        }
        self.head()
            .store(head + (8 + round8(out.len())) as u64, Ordering::Release);
    }
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
        let mut next_in = 0u8;
        let mut next_out = 0u8;
        for round in 0..200usize {
            let len = (round * 37) % r.max_record();
            let rec = vec![next_in; len];
            if r.try_push(&[&rec]) {
                next_in = next_in.wrapping_add(1);
            }
            while let Some(l) = r.peek_len() {
                let mut out = vec![0; l];
                r.pop_into(&mut out);
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
        let mut pushed = 0u8;
        while r.try_push(&[&[pushed; 20]]) {
            pushed += 1;
        }
        assert!(pushed > 0);
        for i in 0..pushed {
            let l = r.peek_len().expect("record");
            let mut out = vec![0; l];
            r.pop_into(&mut out);
            assert_eq!(out, vec![i; 20]);
        }
        assert!(r.is_empty());
    }
}
