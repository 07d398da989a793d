//! The synchronisation the SMP protocol (`node.rs`) is built from: the standard library's and
//! crossbeam's, or under `--cfg loom` the model checker's (tokio's pattern), so that the loom
//! tests in `node.rs` explore the interleavings of the protocol's own code, not of a copy.
//!
//! Under loom a queue is a `VecDeque` behind a count that is released by a push and acquired
//! by a look (`Fifo`): no more ordering than crossbeam's `SegQueue` gives, so the model
//! finds a wake-up that only the queue's own ordering would save. `park_timeout` is a plain `park` there: a timeout would only hide a lost
//! wake-up, which the model is to find (every thread parked is a deadlock loom reports).

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicIsize, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicIsize, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;

pub(crate) use std::sync::atomic::Ordering;

/// A multi-producer queue the protocol's threads share: crossbeam's lock-free `SegQueue`.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct Fifo<T>(crossbeam_queue::SegQueue<T>);

#[cfg(not(loom))]
impl<T> Fifo<T> {
    #[inline]
    pub(crate) fn push(&self, v: T) {
        self.0.push(v);
    }

    #[inline]
    pub(crate) fn pop(&self) -> Option<T> {
        self.0.pop()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(not(loom))]
impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo(crossbeam_queue::SegQueue::new())
    }
}

/// Under loom: a queue whose publication the model sees. `SegQueue` publishes a push with
/// read-modify-writes of its tail index and answers `is_empty` from loads of both indices
/// (`SeqCst` in crossbeam, which loom would model as acquire/release): here a count that a
/// push raises with a release and `is_empty` reads with an acquire, no stronger, so the
/// sleepers' fences are all that can order a push before a look at their flags.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Fifo<T> {
    len: loom::sync::atomic::AtomicUsize,
    q: loom::sync::Mutex<std::collections::VecDeque<T>>,
}

#[cfg(loom)]
impl<T> Fifo<T> {
    pub(crate) fn push(&self, v: T) {
        if let Ok(mut q) = self.q.lock() {
            q.push_back(v);
        }
        self.len.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn pop(&self) -> Option<T> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let v = self.q.lock().ok()?.pop_front()?;
        self.len.fetch_sub(1, Ordering::Release);
        Some(v)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }
}

#[cfg(loom)]
impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            len: loom::sync::atomic::AtomicUsize::new(0),
            q: loom::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }
}

/// The thread a sleeper parks: set by that thread the first time it sleeps, unparked by
/// whoever hands it work.
#[derive(Debug, Default)]
pub(crate) struct ThreadSlot(
    #[cfg(not(loom))] std::sync::OnceLock<std::thread::Thread>,
    #[cfg(loom)] loom::sync::Mutex<Option<loom::thread::Thread>>,
);

impl ThreadSlot {
    /// Record the calling thread as the one to unpark (once).
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn register(&self) {
        self.0.get_or_init(std::thread::current);
    }

    /// Wake the recorded thread, if there is one.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn unpark(&self) {
        if let Some(t) = self.0.get() {
            t.unpark();
        }
    }

    /// Record the calling thread as the one to unpark (once).
    #[cfg(loom)]
    pub(crate) fn register(&self) {
        if let Ok(mut t) = self.0.lock() {
            t.get_or_insert_with(loom::thread::current);
        }
    }

    /// Wake the recorded thread, if there is one.
    #[cfg(loom)]
    pub(crate) fn unpark(&self) {
        if let Ok(t) = self.0.lock() {
            if let Some(t) = t.as_ref() {
                t.unpark();
            }
        }
    }
}

/// Block the calling thread until it is unparked or `timeout` passed (spurious returns
/// allowed); a pending unpark ends it at once.
#[cfg(not(loom))]
#[inline]
pub(crate) fn park_timeout(timeout: std::time::Duration) {
    std::thread::park_timeout(timeout);
}

/// Under loom: until unparked (see the module docs).
#[cfg(loom)]
pub(crate) fn park_timeout(_: std::time::Duration) {
    loom::thread::park();
}
