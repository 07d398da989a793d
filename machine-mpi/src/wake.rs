//! The MPI layer's [`Wake`]: a flag the idle loop checks before every probe, and an unpark of
//! the thread that naps in it.
//!
//! MPI has no wait that another thread could end (and under `MPI_THREAD_FUNNELED` no other
//! thread may call MPI at all), so the layer's `wait` probes and naps; its naps are
//! `park_timeout`s, which an `unpark` ends at once. A wake makes no MPI call. The flag is what
//! makes a wake sticky; the park token also is (an unpark before the park makes the park
//! return at once), so no wake falls between the flag check and the nap.
//!
//! Worst-case latency of a wake: immediate when the napping thread is the one that booted the
//! layer (which FUNNELED requires: it is the only one calling MPI); were `wait` ever called
//! from another thread, the flag is still checked after every nap, so at most one nap, which
//! the layer bounds (1 ms).

use converse_machine::Wake;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;
use std::time::Duration;

/// One node's waker, shared by the layer and the threads that wake it.
#[derive(Debug)]
pub(crate) struct MpiWaker {
    woken: AtomicBool,
    /// The thread that naps in `wait`: the one that booted the layer.
    sleeper: Thread,
}

impl MpiWaker {
    /// A waker for the calling thread's naps.
    pub(crate) fn for_this_thread() -> MpiWaker {
        MpiWaker {
            woken: AtomicBool::new(false),
            sleeper: std::thread::current(),
        }
    }

    /// Take a pending wake: whether there was one. A plain load first, so that the idle
    /// loop's check is a read while nobody wakes.
    pub(crate) fn take(&self) -> bool {
        self.woken.load(Ordering::Relaxed) && self.woken.swap(false, Ordering::AcqRel)
    }

    /// Sleep for `d` at most; a wake (from now, or one already made) ends it early. May also
    /// return early for no reason: the caller checks the flag again.
    pub(crate) fn nap(&self, d: Duration) {
        std::thread::park_timeout(d);
    }
}

impl Wake for MpiWaker {
    fn wake(&self) {
        // Only the first wake after `take` unparks: the later ones find the flag set, and the
        // park token is already there.
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.sleeper.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// The idle loop's shape: check the flag, nap, until woken or `limit`.
    fn idle(w: &MpiWaker, limit: Duration) -> Duration {
        let start = Instant::now();
        while !w.take() && start.elapsed() < limit {
            w.nap(limit);
        }
        start.elapsed()
    }

    #[test]
    fn a_wake_from_another_thread_ends_a_nap() {
        let w = Arc::new(MpiWaker::for_this_thread());
        let other = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.wake();
        });
        assert!(idle(&w, Duration::from_secs(30)) < Duration::from_secs(10));
        t.join().expect("waker thread");
    }

    #[test]
    fn a_wake_before_the_wait_ends_it_at_once_and_many_end_one() {
        let w = MpiWaker::for_this_thread();
        for _ in 0..1000 {
            w.wake();
        }
        assert!(idle(&w, Duration::from_secs(30)) < Duration::from_secs(10));
        assert!(!w.take(), "taken");
        // The stale park token costs one early nap, not a lost or a phantom wake.
        w.nap(Duration::from_secs(30));
        assert!(!w.take());
    }
}
