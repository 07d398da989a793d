//! Awaiting a message-driven API: the adapter between the libraries' callback forms (the
//! topology library's `…_then` collectives, the tree overlay's and the core's callbacks) and
//! a task, so that no library needs an `async` twin of each call.

use crate::executor::with_pe;
use converse::Pe;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The callback [`callback`] hands to a message-driven API: call it once with the result.
pub type Done<T> = Box<dyn FnOnce(&mut Pe, T)>;

/// Why a [`Completion`] has no value: the API dropped its callback without calling it (the
/// call was refused, or the job is ending and dropped what was pending).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the callback was dropped without being called")]
pub struct Dropped;

struct Slot<T> {
    value: Option<Result<T, Dropped>>,
    waker: Option<Waker>,
}

/// Wakes the waiting task with `Dropped` if the callback it is part of goes without a call.
struct Guard<T> {
    slot: Option<Rc<RefCell<Slot<T>>>>,
}

impl<T> Guard<T> {
    fn finish(&mut self, v: Result<T, Dropped>) {
        let Some(slot) = self.slot.take() else { return };
        let waker = {
            let mut s = slot.borrow_mut();
            s.value = Some(v);
            s.waker.take()
        };
        // Woken outside the borrow: a waker may poll the task at once (the executor's ready
        // list), and that poll reads the slot.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Guard<T> {
    fn drop(&mut self) {
        self.finish(Err(Dropped));
    }
}

/// Start a message-driven call and await its callback, inside a task: `start` gets the PE and
/// a [`Done`] to pass to the API; the future completes with what the API gives it, or with
/// [`Dropped`] if the API drops it uncalled. The call starts at once (not at the first poll),
/// as the blocking form would.
///
/// ```no_run
/// # async fn f() -> Result<(), converse_tasks::Dropped> {
/// // A PE timer, as a value:
/// let n = converse_tasks::callback(|pe, done| {
///     pe.after(std::time::Duration::from_millis(5), move |pe| done(pe, 42))
/// })
/// .await?;
/// assert_eq!(n, 42);
/// # Ok(()) }
/// ```
///
/// The topology library's barrier, awaited by a task instead of blocking its PE (the outer
/// `?` for a dropped callback, the inner for the barrier's own error):
///
/// ```text
/// converse_tasks::callback(|pe, done| topo.barrier_then(pe, done)).await??;
/// ```
///
/// Dropping the [`Completion`] does not cancel the call: the API still calls its callback
/// later, and the value is dropped then.
///
/// # Panics
/// Outside a task, or inside a [`with_pe`] closure (the PE is lent once at a time).
pub fn callback<T: 'static>(start: impl FnOnce(&mut Pe, Done<T>)) -> Completion<T> {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
    }));
    let mut guard = Guard {
        slot: Some(slot.clone()),
    };
    with_pe(|pe| start(pe, Box::new(move |_, v| guard.finish(Ok(v)))));
    Completion { slot }
}

/// The future of [`callback`].
#[must_use = "a future does nothing unless awaited"]
pub struct Completion<T> {
    slot: Rc<RefCell<Slot<T>>>,
}

impl<T> std::fmt::Debug for Completion<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let done = self.slot.borrow().value.is_some();
        f.debug_struct("Completion").field("done", &done).finish()
    }
}

impl<T> Future for Completion<T> {
    type Output = Result<T, Dropped>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.slot.borrow_mut();
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                // The latest poll's waker: a task may be polled through another one.
                match &s.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => s.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}
