//! Copying a large lent message with the sender's help. The kernel's cross-process copy is
//! slow per page (it pins each page, then copies), and one `process_vm_readv` of a few MiB
//! keeps one core busy while the sender's core waits. So the receiver offers the copy as
//! chunks in a block both can reach (in its port, next to the pair's ring): it copies chunks
//! from the sender's buffer, and the sender, when it is between handlers, takes chunks too and
//! writes them into the receiver's buffer (`process_vm_writev`). Two cores copy at once; a busy
//! sender simply takes none.
//!
//! ```text
//! block (one cache line): claim u64 = generation << 40 | next offset, done u64 (bytes the
//!                         sender finished), dest u64, src u64, len u64, failed u64
//! ```
//!
//! Each copy has a new generation; a chunk is taken by a compare-and-swap that checks it, so a
//! sender that read an old offer can never take a chunk of a newer one. The receiver waits for
//! every chunk the sender took before it uses its buffer, and does not offer the next copy
//! before then: the sender never writes into a buffer that is gone. A sender whose write fails
//! says so (`failed`), and the receiver copies everything itself.

use crate::pull::{self, PullError};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes one claim takes, for a copy of `len` bytes: an eighth, so that two cores share it
/// evenly, but at least 128 KiB, so that a system call's cost stays small next to its copy,
/// and at most 512 KiB (measured best from 256 KiB to 4 MiB messages).
fn chunk(len: usize) -> usize {
    ((len / 8) & !4095).clamp(MIN_CHUNK, 512 << 10)
}

/// The smallest chunk: a copy smaller than two is not worth sharing.
pub const MIN_CHUNK: usize = 128 << 10;

/// Polls of the sender's progress before yielding the core between polls.
const SPINS: u32 = 4096;

const GEN_SHIFT: u32 = 40;
const OFFSET: u64 = (1 << GEN_SHIFT) - 1;
const GENERATION: u64 = (1 << (64 - GEN_SHIFT)) - 1;

/// The shared block of one sender/receiver pair.
#[repr(C)]
pub struct Block {
    claim: AtomicU64,
    done: AtomicU64,
    dest: AtomicU64,
    src: AtomicU64,
    len: AtomicU64,
    failed: AtomicU64,
}

// By hand: a block of atomics in shared memory; printing them would race with their users.
impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block").finish_non_exhaustive()
    }
}

/// A copy on offer, as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    generation: u64,
    /// Where the bytes are, in the sender's memory.
    pub src: u64,
    /// Where they go, in the receiver's.
    pub dest: u64,
    /// How many.
    pub len: usize,
}

impl Block {
    /// Take the next chunk of copy `generation` (of `len` bytes): its offset and length.
    fn claim(&self, generation: u64, len: usize) -> Option<(usize, usize)> {
        let mut cur = self.claim.load(Ordering::Acquire);
        loop {
            let off = (cur & OFFSET) as usize;
            if cur >> GEN_SHIFT != generation || off >= len {
                return None;
            }
            let n = chunk(len).min(len - off);
            match self.claim.compare_exchange_weak(
                cur,
                cur + n as u64,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((off, n)),
                Err(now) => cur = now,
            }
        }
    }

    /// Take every chunk of copy `generation` that is left, so that nobody starts another.
    /// Returns how far chunks had been taken (by either side) before.
    fn close(&self, generation: u64, len: usize) -> usize {
        let mut cur = self.claim.load(Ordering::Acquire);
        while cur >> GEN_SHIFT == generation && ((cur & OFFSET) as usize) < len {
            let all = (generation << GEN_SHIFT) | len as u64;
            match self
                .claim
                .compare_exchange_weak(cur, all, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return (cur & OFFSET) as usize,
                Err(now) => cur = now,
            }
        }
        len
    }

    /// Receiver: wait until the sender has finished the `bytes` it took (being copied right
    /// now, tens of microseconds a chunk). Spin, then yield: a sender preempted on our core
    /// would otherwise wait for our time slice to end. False if the sender went away first.
    fn wait_for_sender(&self, bytes: usize, gone: impl Fn() -> bool) -> bool {
        let mut spins = 0u32;
        while (self.done.load(Ordering::Acquire) as usize) < bytes {
            spins = spins.wrapping_add(1);
            if spins < SPINS {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            if spins.is_multiple_of(64) && gone() {
                return false;
            }
        }
        true
    }

    /// Sender: the copy on offer, if chunks of it are left.
    pub fn offered(&self) -> Option<Offer> {
        let cur = self.claim.load(Ordering::Acquire);
        let generation = cur >> GEN_SHIFT;
        // Read after the claim word that published them (acquire); a newer offer made
        // meanwhile changes the claim word, so the claim that follows would fail.
        let len = self.len.load(Ordering::Relaxed) as usize;
        if generation == 0 || (cur & OFFSET) as usize >= len {
            return None;
        }
        Some(Offer {
            generation,
            src: self.src.load(Ordering::Relaxed),
            dest: self.dest.load(Ordering::Relaxed),
            len,
        })
    }
}

/// Receiver: copy `into.len()` bytes at `addr` in process `pid` into `into`, offering chunks
/// to the sender through `block`. `wake` rings the sender's doorbell, so that a sender asleep
/// comes to help; `gone` says whether the sender has died or left (checked while waiting for
/// its chunks). On success every byte of `into` is initialised.
///
/// # Errors
/// As [`pull::pull`]; [`PullError::Gone`] when the sender goes while it holds chunks.
pub fn receive(
    block: &Block,
    pid: i32,
    addr: u64,
    into: &mut [MaybeUninit<u8>],
    wake: impl Fn(),
    gone: impl Fn() -> bool,
) -> Result<(), PullError> {
    let len = into.len();
    // Generations count 1..2^24 and wrap (0 means no offer yet).
    let generation = (((block.claim.load(Ordering::Relaxed) >> GEN_SHIFT) + 1) & GENERATION).max(1);
    block.dest.store(into.as_ptr() as u64, Ordering::Relaxed);
    block.src.store(addr, Ordering::Relaxed);
    block.len.store(len as u64, Ordering::Relaxed);
    block.done.store(0, Ordering::Relaxed);
    block.failed.store(0, Ordering::Relaxed);
    block
        .claim
        .store(generation << GEN_SHIFT, Ordering::Release);
    wake();
    let mut mine = 0;
    let mut copied = Ok(());
    while let Some((off, n)) = block.claim(generation, len) {
        mine += n;
        copied = pull::pull(pid, addr + off as u64, &mut into[off..off + n]);
        if copied.is_err() {
            break;
        }
    }
    // No more chunks for anyone (they are all taken unless we stopped on an error); the
    // sender's are waited for, so that it never writes into a buffer we no longer hold.
    let taken = block.close(generation, len);
    if !block.wait_for_sender(taken - mine, gone) {
        return Err(PullError::Gone);
    }
    copied?;
    if block.failed.load(Ordering::Acquire) != 0 {
        // Some chunk of the sender's never arrived: all of it, again, from here.
        pull::pull(pid, addr, into)?;
    }
    Ok(())
}

/// Sender: copy chunks of `offer` into the receiver (`pid`) until none are left. `src` must be
/// the bytes the offer names, in our memory (a buffer we lent the receiver). Whether any chunk
/// was copied.
pub fn help(block: &Block, pid: i32, offer: Offer, src: &[u8]) -> bool {
    let mut helped = false;
    while let Some((off, n)) = block.claim(offer.generation, offer.len) {
        if pull::push(pid, &src[off..off + n], offer.dest + off as u64).is_err() {
            block.failed.store(1, Ordering::Release);
        }
        block.done.fetch_add(n as u64, Ordering::Release);
        helped = true;
    }
    helped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> Block {
        Block {
            claim: AtomicU64::new(0),
            done: AtomicU64::new(0),
            dest: AtomicU64::new(0),
            src: AtomicU64::new(0),
            len: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    #[test]
    fn chunks_are_taken_once_and_only_from_the_current_offer() {
        let b = block();
        assert_eq!(b.offered(), None);
        const CHUNK: usize = MIN_CHUNK;
        b.len.store((3 * CHUNK + 5) as u64, Ordering::Relaxed);
        b.claim.store(7 << GEN_SHIFT, Ordering::Release);
        let offer = b.offered().expect("offer");
        assert_eq!(offer.len, 3 * CHUNK + 5);
        let mut got = Vec::new();
        while let Some(c) = b.claim(7, offer.len) {
            got.push(c);
        }
        assert_eq!(
            got,
            vec![
                (0, CHUNK),
                (CHUNK, CHUNK),
                (2 * CHUNK, CHUNK),
                (3 * CHUNK, 5)
            ]
        );
        assert_eq!(b.offered(), None, "nothing left");
        // A newer offer: the old generation takes nothing from it.
        b.claim.store(8 << GEN_SHIFT, Ordering::Release);
        assert_eq!(b.claim(7, offer.len), None);
        assert_eq!(b.claim(8, offer.len), Some((0, CHUNK)));
        assert_eq!(chunk(64 << 20), 512 << 10);
        assert_eq!(chunk(1 << 20), CHUNK);
    }

    /// `receive` of `src` (`len` bytes) into a fresh buffer with a thread helping.
    fn shared_copy(b: &Block, src: u64, len: usize) -> Result<Vec<u8>, PullError> {
        let me = std::process::id() as i32;
        let mut dest = vec![MaybeUninit::<u8>::uninit(); len];
        let stop = std::sync::atomic::AtomicBool::new(false);
        let result = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(offer) = b.offered() {
                        // SAFETY: the test's source range, valid or not, is only read by the
                        // kernel (a fault is an error, not a crash).
                        let src = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
                        help(b, me, offer, src);
                    }
                }
            });
            let r = receive(b, me, src, &mut dest, || {}, || false);
            stop.store(true, Ordering::Relaxed);
            r
        });
        // SAFETY: on success receive initialised every byte.
        result.map(|()| dest.iter().map(|b| unsafe { b.assume_init() }).collect())
    }

    #[test]
    fn a_copy_that_fails_part_way_ends_with_the_error() {
        // Two MiB mapped, the second half unreadable: chunks there fail for both sides, and
        // the receiver must neither hang nor return while the helper still writes.
        let len = 2 << 20;
        // SAFETY: a fresh anonymous mapping, unmapped at the end of the test.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: the second half of our own mapping.
        unsafe {
            libc::mprotect(
                map.cast::<u8>().add(len / 2).cast(),
                len / 2,
                libc::PROT_NONE,
            )
        };
        let b = block();
        for _ in 0..3 {
            match shared_copy(&b, map as u64, len) {
                Err(PullError::Fault(_)) | Err(PullError::Denied(_)) => {}
                other => panic!("{:?}", other.map(|v| v.len())),
            }
        }
        // SAFETY: our mapping, no longer used.
        unsafe { libc::munmap(map, len) };
    }

    #[test]
    fn generations_wrap_around() {
        let b = block();
        b.claim.store(GENERATION << GEN_SHIFT, Ordering::Release);
        let src: Vec<u8> = (0..3 * MIN_CHUNK).map(|i| (i % 253) as u8).collect();
        match shared_copy(&b, src.as_ptr() as u64, src.len()) {
            Ok(got) => assert!(got == src),
            Err(PullError::Denied(_)) => return,
            Err(e) => panic!("{e}"),
        }
        assert_eq!(b.claim.load(Ordering::Relaxed) >> GEN_SHIFT, 1);
    }

    #[test]
    fn a_copy_shared_with_a_helping_thread_arrives_whole() {
        // Both sides in one process (pid = ours): the receiver copies some chunks, a helper
        // thread the others; every byte must arrive, whoever copied it.
        let src: Vec<u8> = (0..5 * MIN_CHUNK + 123).map(|i| (i % 251) as u8).collect();
        let b = block();
        for _ in 0..3 {
            match shared_copy(&b, src.as_ptr() as u64, src.len()) {
                Ok(got) => assert!(got == src),
                Err(PullError::Denied(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
}
