//! The net layers' [`Wake`](converse_machine::Wake): an eventfd in the set a node's idle poll watches (TCP's epoll set,
//! UDP's `ppoll`), which other threads ring to end that poll.
//!
//! An eventfd's counter is what makes a wake sticky: written while the node is not polling,
//! it makes the next poll return at once. A flag next to it spares the system call of every
//! wake but the first until the node has seen it, so a crowd of workers waking one sleeping
//! node costs one `write`. The node reads the counter (resetting it) only when its poll
//! reports it, so the message path never touches it.

use converse_machine::Wake;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The node's side: the eventfd to poll, and a wake its poll saw outside `wait`.
pub struct WakeFd {
    bell: Arc<Bell>,
    /// A poll outside `wait` (the barrier's, `exit`'s) found the bell rung and reset it: the
    /// next `wait` returns at once, so the wake is not lost.
    seen: bool,
}

/// What the wakers hold: the eventfd itself (it lives as long as any of them, so a worker
/// that wakes a node that is gone writes to a live descriptor nobody reads).
struct Bell {
    fd: EventFd,
    /// Written since the node last reset the counter: further wakes need no system call.
    rung: AtomicBool,
}

impl Wake for Bell {
    fn wake(&self) {
        if !self.rung.swap(true, Ordering::AcqRel) {
            // Non-blocking; it can fail only with a counter at its maximum, which is rung.
            let _ = self.fd.write(1);
        }
    }
}

impl std::fmt::Debug for WakeFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeFd")
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl WakeFd {
    /// A fresh eventfd, not rung.
    ///
    /// # Errors
    /// The OS's (out of descriptors).
    pub fn new() -> std::io::Result<WakeFd> {
        let fd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
        Ok(WakeFd {
            bell: Arc::new(Bell {
                fd,
                rung: AtomicBool::new(false),
            }),
            seen: false,
        })
    }

    /// A handle for other threads.
    pub fn waker(&self) -> Arc<dyn Wake> {
        self.bell.clone()
    }

    /// The descriptor to poll for reading.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.bell.fd.as_fd()
    }

    /// A poll reported the descriptor readable: reset the counter, so polls block again, and
    /// remember the wake for the next [`take`](Self::take).
    pub fn reset(&mut self) {
        // Read first, then clear the flag: a wake in between finds the flag still set and
        // writes nothing, but it came before this poll's return, which answers it. The other
        // order could leave the flag set on an empty counter, and every later wake silent.
        let _ = self.bell.fd.read();
        self.bell.rung.store(false, Ordering::Release);
        self.seen = true;
    }

    /// Whether a wake was seen and not yet answered by a return of `wait`; clears it.
    pub fn take(&mut self) -> bool {
        std::mem::take(&mut self.seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

    fn readable(w: &WakeFd) -> bool {
        let mut p = [PollFd::new(w.fd(), PollFlags::POLLIN)];
        poll(&mut p, PollTimeout::ZERO).expect("poll") == 1
    }

    #[test]
    fn a_wake_stays_until_reset_and_a_later_one_rings_again() {
        let mut w = WakeFd::new().expect("eventfd");
        let h = w.waker();
        assert!(!readable(&w));
        h.wake();
        h.wake();
        assert!(readable(&w), "sticky");
        w.reset();
        assert!(!readable(&w), "reset");
        assert!(w.take());
        assert!(!w.take());
        h.wake();
        assert!(readable(&w), "a wake after a reset rings again");
    }
}
