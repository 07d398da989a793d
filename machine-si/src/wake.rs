//! The SI layer's [`Wake`]: a flag that the idle sleep's predicate checks, and this node's own
//! doorbell, rung as a writer rings it, so that a sleeping node wakes.
//!
//! The flag is what makes a wake sticky: it stays set until a `wait` returns because of it, and
//! a `wait` that finds it set does not sleep. Only the first wake after a `wait` took it rings
//! the doorbell (a futex wake, and only when the node sleeps): later ones find the flag set.

use crate::segment::OwnBell;
use converse_machine::Wake;
use std::sync::atomic::{AtomicBool, Ordering};

/// One node's waker, shared by the layer and the threads that wake it.
pub(crate) struct SiWaker {
    bell: OwnBell,
    woken: AtomicBool,
}

impl SiWaker {
    pub(crate) fn new(bell: OwnBell) -> SiWaker {
        SiWaker {
            bell,
            woken: AtomicBool::new(false),
        }
    }

    /// Whether a wake is pending (the sleep's predicate: sequentially consistent, to pair
    /// with the doorbell's fences).
    pub(crate) fn pending(&self) -> bool {
        self.woken.load(Ordering::SeqCst)
    }

    /// Take a pending wake: whether there was one. A wake that comes after `wait` decided to
    /// return and before this is answered by that return.
    pub(crate) fn take(&self) -> bool {
        self.woken.swap(false, Ordering::SeqCst)
    }
}

impl Wake for SiWaker {
    fn wake(&self) {
        // The flag before the bell (the bell's fence orders them): a node about to sleep
        // either sees the flag or is seen asleep and woken.
        if !self.woken.swap(true, Ordering::SeqCst) {
            self.bell.ring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interconnect::Si;
    use std::time::{Duration, Instant};

    /// A one-node interconnect whose port file (named `name`) is removed at once (the
    /// mapping stays).
    fn one_node(name: &str) -> Si {
        let path = format!("/dev/shm/converse-si-{name}-{}", std::process::id());
        let mut si = Si::init(0, 1);
        si.create_host(std::path::Path::new(&path), &[0], 4096)
            .expect("segment");
        si.close();
        si
    }

    #[test]
    fn a_wake_ends_a_sleep_and_one_before_it_keeps_it_from_starting() {
        let si = one_node("wake-ends-sleep");
        let w = std::sync::Arc::new(SiWaker::new(si.own_bell().expect("open")));
        let start = Instant::now();
        std::thread::scope(|s| {
            let w = &w;
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                w.wake();
            });
            // Spurious returns are allowed: sleep again until the wake is seen.
            while !w.take() && start.elapsed() < Duration::from_secs(10) {
                si.wait_unless(Duration::from_secs(30), || w.pending());
            }
        });
        assert!(start.elapsed() < Duration::from_secs(10), "woken promptly");
        w.wake();
        w.wake();
        let start = Instant::now();
        si.wait_unless(Duration::from_secs(30), || w.pending());
        assert!(start.elapsed() < Duration::from_secs(10), "did not sleep");
        assert!(w.take());
        assert!(!w.take(), "two wakes before a wait end one");
    }

    #[test]
    fn the_waker_outlives_the_port() {
        let si = one_node("waker-outlives");
        let w = SiWaker::new(si.own_bell().expect("open"));
        drop(si);
        // The mapping is the waker's too: ringing is still sound.
        w.wake();
        assert!(w.take());
    }
}
