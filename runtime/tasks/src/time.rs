//! Yielding, sleeping and timeouts for tasks, on the PE's own timers (`Pe::after`).

use crate::executor::with_pe;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Let the PE run what is queued before this task goes on: the task is scheduled again behind
/// the messages already waiting at its priority.
///
/// ```no_run
/// # async fn f() {
/// for step in 0..1000 {
///     // ... a slice of a long computation ...
///     converse_tasks::yield_now().await;
/// }
/// # }
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future of [`yield_now`].
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Wait for `d` (a PE timer: the PE runs other messages and tasks meanwhile, and blocks if
/// there are none). Inside a task only.
pub fn sleep(d: Duration) -> Sleep {
    Sleep {
        deadline: Instant::now() + d,
        armed: None,
    }
}

/// The future of [`sleep`].
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited"]
pub struct Sleep {
    deadline: Instant,
    /// Once a timer is set: whether it fired, and the waker it wakes (the latest poll's).
    armed: Option<Rc<Armed>>,
}

struct Armed {
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
    /// The PE's tasks, whose quiescence detection counts the timer until it ends (`None`
    /// outside a task's poll).
    inner: Option<Rc<crate::Inner>>,
    /// The timer ended (fired, or its sleep was dropped): counted once.
    ended: Cell<bool>,
}

impl std::fmt::Debug for Armed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Armed")
            .field("fired", &self.fired.get())
            .finish_non_exhaustive()
    }
}

impl Armed {
    /// Count the timer's end for quiescence detection, once.
    fn end(&self) {
        if !self.ended.replace(true) {
            if let Some(inner) = &self.inner {
                inner.qd.borrow_mut().timers_ended += 1;
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(a) = &self.armed {
            a.end();
        }
    }
}

impl Sleep {
    /// When the sleep ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(a) = &self.armed {
            if a.fired.get() {
                return Poll::Ready(());
            }
            *a.waker.borrow_mut() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let now = Instant::now();
        if now >= self.deadline {
            return Poll::Ready(());
        }
        let inner = crate::current_inner();
        if let Some(i) = &inner {
            i.qd.borrow_mut().timers_set += 1;
        }
        let armed = Rc::new(Armed {
            fired: Cell::new(false),
            waker: RefCell::new(Some(cx.waker().clone())),
            inner,
            ended: Cell::new(false),
        });
        let timer = armed.clone();
        // A dropped sleep's timer still fires (the PE's timers cannot be taken back): it wakes
        // nobody, or a task that then finds nothing new. It is held until its deadline.
        with_pe(|pe| {
            pe.after(self.deadline - now, move |_| {
                timer.fired.set(true);
                // Ended here only if its sleep still waits; the wake-up (a message) carries
                // the work on.
                timer.end();
                let w = timer.waker.borrow_mut().take();
                if let Some(w) = w {
                    w.wake();
                }
            })
        });
        self.armed = Some(armed);
        Poll::Pending
    }
}

/// `fut`, or [`Elapsed`] if it has not finished within `d`; then `fut` is dropped, which
/// cancels what it waited for (a call's reply is dropped when it comes).
///
/// ```no_run
/// # async fn f(service: converse_tasks::ServiceId) {
/// use std::time::Duration;
/// match converse_tasks::timeout(Duration::from_secs(1), converse_tasks::call(3, &service, b"ping")).await {
///     Ok(Ok(reply)) => println!("{:?}", reply.payload()),
///     Ok(Err(e)) => eprintln!("the call failed: {e}"),
///     Err(_) => eprintln!("no reply within a second"),
/// }
/// # }
/// ```
pub fn timeout<F: Future>(d: Duration, fut: F) -> Timeout<F> {
    Timeout {
        fut: Box::pin(fut),
        sleep: sleep(d),
    }
}

/// The future of [`timeout`].
#[must_use = "a future does nothing unless awaited"]
pub struct Timeout<F: Future> {
    fut: Pin<Box<F>>,
    sleep: Sleep,
}

impl<F: Future> std::fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeout")
            .field("deadline", &self.sleep.deadline)
            .finish_non_exhaustive()
    }
}

/// A [`timeout`] ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out")]
pub struct Elapsed;

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(v) = self.fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match Pin::new(&mut self.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}
