//! Code that waits, on a converse PE: `async` tasks run by the PE's own scheduler, calls with
//! replies, timers, timeouts and cancellation.
//!
//! Every handler runs to completion; a program that needs an answer from another PE splits its
//! logic into a send and a second handler. A *task* is the other way (Converse's threads,
//! Charm++'s `[threaded]` and `[sync]` methods, Argobots' ULTs, Margo's blocking
//! `margo_forward`): an `async` block that can wait for a reply, a timer or another task while
//! the PE goes on running messages.
//!
//! - **Tasks are messages.** A task is polled when a message naming it runs on its PE (see
//!   `executor.rs`): the scheduler that runs handlers runs tasks, by the same priorities, on the
//!   same thread, and a PE with nothing to do blocks as before. A task never runs on two PEs,
//!   and never moves: its future is not `Send` (it may hold `Rc`s of the PE's state), so
//!   Argobots' *migrate* has no equivalent here.
//! - **Stackless**, not Cth-style stackful threads: a task costs one allocation (its future,
//!   then its output) and a few words, not a stack; a switch is a poll, not a context switch; and Rust's
//!   borrow rules keep working across waits. The price is `async`/`.await` in the code that
//!   waits. (`bench tasks` gives the figures.)
//! - **Calls with replies** ([`Tasks::serve`], [`call`]): see [`Call`]'s module for the wire
//!   format, cancellation and what a death does.
//! - **Awaiting a library's callback** ([`callback`]): any message-driven call (the topology
//!   library's `…_then` collectives, a PE timer) becomes a future, so libraries need no `async`
//!   twin of each call.
//! - **Waiting together**: `sync` is tokio's `sync` module (mutex, notify, channels, oneshot),
//!   which needs no tokio runtime — its primitives wake the task that waits, through this
//!   executor, and cost what they cost under tokio (tens of nanoseconds uncontended).
//!
//! ```no_run
//! use converse_tasks::{call, Tasks};
//! converse::run(|pe| {
//!     let tasks = Tasks::attach(pe);
//!     let square = tasks.serve(pe, "square", |pe, req, reply| {
//!         let x = u64::from_le_bytes(req.payload().try_into().unwrap_or([0; 8]));
//!         reply.send(pe, &(x * x).to_le_bytes());
//!     });
//!     if pe.my_pe() == 0 {
//!         let n = pe.num_pes();
//!         tasks.spawn(pe, async move {
//!             let mut sum = 0;
//!             for p in 0..n {
//!                 let r = call(p, &square, &(p as u64).to_le_bytes()).await.expect("reply");
//!                 sum += u64::from_le_bytes(r.payload().try_into().unwrap_or([0; 8]));
//!             }
//!             println!("sum of squares: {sum}");
//!             converse_tasks::with_pe(|pe| pe.exit(0));
//!         });
//!     }
//! });
//! ```
//!
//! - **Seeds** ([`seeds`]): messages that may run on any PE, placed and moved by a balancer
//!   (Converse's `CldEnqueue` and seed balancers: random, neighbour diffusion, work stealing).
//!
//! **Attach on every PE.** [`Tasks::attach`] and [`Tasks::serve`] register handlers, so every
//! PE calls them in the same order, before it first schedules (as for any handler).

mod call;
mod callback;
mod executor;
mod expect;
mod quiescence;
pub mod seeds;
mod shared;
mod time;

pub use call::{call, Call, CallError, CallStats, Reply, ServiceId};
pub use callback::{callback, Completion, Done, Dropped};
pub use executor::{in_task, with_pe, JoinHandle};
pub use expect::{Inbox, Recv};
pub use time::{sleep, timeout, yield_now, Elapsed, Sleep, Timeout, YieldNow};
/// Task-aware mutex, notify, channels and oneshot: tokio's, which need no tokio runtime.
pub use tokio::sync;

use converse::{HandlerId, Message, Pe};
use executor::{Exec, TaskCell};
use std::cell::{Cell, OnceCell, RefCell};
use std::future::Future;
use std::rc::Rc;

/// Why a task has no output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// [`JoinHandle::abort`] stopped it.
    #[error("the task was aborted")]
    Aborted,
    /// The job ended before the task finished ([`Tasks::block_on`]).
    #[error("the job ended before the task finished")]
    JobEnded,
    /// Its output was taken already ([`JoinHandle::take`]).
    #[error("the task's output was taken already")]
    Taken,
}

/// What one PE's tasks and calls share.
pub(crate) struct Inner {
    pub(crate) exec: Rc<Exec>,
    pub(crate) calls: call::CallTable,
    pub(crate) reply_h: HandlerId,
    pub(crate) unanswered_h: HandlerId,
    pub(crate) dropped_h: HandlerId,
    pub(crate) qd: RefCell<quiescence::Detector>,
    pub(crate) qd_h: quiescence::Handlers,
    pub(crate) shared_h: HandlerId,
}

thread_local! {
    /// The [`Inner`] of the PE whose task is being polled on this thread, for [`spawn`].
    static CURRENT: Cell<*const Inner> = const { Cell::new(std::ptr::null()) };
}

/// One PE's tasks: spawn them, serve calls. A cheap handle (clone it into tasks).
#[derive(Clone)]
pub struct Tasks {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("live", &self.inner.exec.live())
            .finish_non_exhaustive()
    }
}

impl Tasks {
    /// Set up tasks on this PE: registers this crate's handlers (`converse-tasks.*`), so every
    /// PE calls it, at the same point of its registrations.
    pub fn attach(pe: &mut Pe) -> Tasks {
        let exec = Rc::new(Exec::new(pe.mailbox()));
        // The handlers need the shared state, which needs their ids: registered in two steps.
        // Set once, then only read: a handler borrows the shared state from it without a
        // reference count or a borrow flag per message.
        let slot: Rc<OnceCell<Rc<Inner>>> = Rc::new(OnceCell::new());
        let s = slot.clone();
        let run = pe.register("converse-tasks.run", move |pe, msg| {
            if let Some(inner) = s.get() {
                as_current(inner, || inner.exec.run(pe, &msg));
            }
        });
        let s = slot.clone();
        // The caller's task, woken by the reply, is polled in this handler (`with_local`): a
        // call costs the two messages a hand-written request and reply cost.
        let reply_h = pe.register("converse-tasks.reply", move |pe, msg| {
            if let Some(inner) = s.get() {
                let (id, gen) = (msg.arg0(), msg.arg1());
                as_current(inner, || {
                    inner
                        .exec
                        .with_local(pe, |_| inner.calls.complete(&inner.exec, id, gen, Ok(msg)))
                });
            }
        });
        let s = slot.clone();
        let unanswered_h = pe.register("converse-tasks.unanswered", move |pe, msg| {
            if let Some(inner) = s.get() {
                let from = msg.src_pe() as usize;
                as_current(inner, || {
                    inner.exec.with_local(pe, |_| {
                        inner.calls.complete(
                            &inner.exec,
                            msg.arg0(),
                            msg.arg1(),
                            Err(CallError::Unanswered { pe: from }),
                        )
                    })
                });
            }
        });
        let s = slot.clone();
        let dropped_h = pe.register("converse-tasks.dropped", move |pe, msg| {
            if let Some(inner) = s.get() {
                call::on_dropped(inner, pe, msg);
            }
        });
        let s = slot.clone();
        let probe = pe.register("converse-tasks.qd-probe", move |pe, msg| {
            if let Some(inner) = s.get() {
                quiescence::on_probe(inner, pe, &msg);
            }
        });
        let s = slot.clone();
        let report = pe.register("converse-tasks.qd-report", move |pe, msg| {
            if let Some(inner) = s.get() {
                quiescence::on_report(inner, pe, &msg);
            }
        });
        let shared_h = pe.register("converse-tasks.shared", |pe, msg| shared::run(pe, &msg));
        exec.run.set(Some(run));
        let inner = Rc::new(Inner {
            exec,
            calls: call::CallTable::default(),
            reply_h,
            unanswered_h,
            dropped_h,
            qd: RefCell::default(),
            qd_h: quiescence::Handlers { probe, report },
            shared_h,
        });
        let _ = slot.set(inner.clone());
        if pe.survives_node_failures() {
            let weak = Rc::downgrade(&inner);
            pe.on_node_failure(move |_pe, f| {
                if let Some(inner) = weak.upgrade() {
                    inner.calls.node_failed(&inner.exec, f);
                }
            });
        }
        Tasks { inner }
    }

    /// Run `fut` as a task on this PE, at priority 0. Its first poll comes as a message, after
    /// what is already queued — or, spawned from inside a task, before the spawning task's
    /// handler returns, unless a queued message of better priority waits (see the executor's
    /// "woken in a row"); or at once, inside the poll of a task that awaits its handle before
    /// it started (the executor's "a join runs a task not yet started").
    pub fn spawn<F>(&self, pe: &mut Pe, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.spawn_with_priority(pe, 0, fut)
    }

    /// [`spawn`](Self::spawn) at priority `prio` (smaller runs first, as for messages): every
    /// poll of the task is scheduled at it.
    pub fn spawn_with_priority<F>(&self, pe: &mut Pe, prio: i32, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        // The task's one allocation: the future, then its output. A large future is boxed
        // apart, so that a handle kept after the task finished keeps only the output, not
        // the future's size: one allocation more for those only.
        let cell: (Rc<dyn executor::Task>, Rc<dyn executor::Join<F::Output>>) =
            if std::mem::size_of::<F>() > executor::INLINE_FUTURE {
                let c = Rc::new(TaskCell::new(Box::pin(fut)));
                (c.clone(), c)
            } else {
                let c = Rc::new(TaskCell::new(fut));
                (c.clone(), c)
            };
        let (id, gen) = self.inner.exec.spawn(pe, prio, cell.0);
        JoinHandle {
            cell: cell.1,
            exec: self.inner.exec.clone(),
            id,
            gen,
        }
    }

    /// Work for any PE of this node (SMP mode: the node's PEs share one pool): `work` runs on
    /// the first PE of the node free to take it (Charm++'s node queue), and may spawn tasks
    /// there; a task, once started, stays on its PE. Its closure is `Send` since the PE that
    /// runs it is not known yet. With one PE per node it runs on this PE, as a message would.
    ///
    /// ```no_run
    /// # fn f(pe: &mut converse::Pe, tasks: &converse_tasks::Tasks) {
    /// for chunk in 0..100u64 {
    ///     tasks.spawn_shared(pe, move |pe| {
    ///         // ... compute `chunk` on whichever PE of the node got here first ...
    ///         let _ = (chunk, pe.my_pe());
    ///     });
    /// }
    /// # }
    /// ```
    pub fn spawn_shared(&self, pe: &mut Pe, work: impl FnOnce(&mut Pe) + Send + 'static) {
        shared::post(pe, self.inner.shared_h, 0, Box::new(work));
    }

    /// Run `fut` as a task and run the PE's scheduler until it finishes (other messages and
    /// tasks run meanwhile): how a start function or a handler waits for a task.
    ///
    /// # Errors
    /// [`TaskError::JobEnded`] if the job ends first (or
    /// [`exit_scheduler`](Pe::exit_scheduler) is called); [`TaskError::Aborted`] if the task
    /// is aborted.
    pub fn block_on<F>(&self, pe: &mut Pe, fut: F) -> Result<F::Output, TaskError>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let h = self.spawn(pe, fut);
        if !pe.run_until(|_| h.is_finished()) {
            h.abort();
            return Err(TaskError::JobEnded);
        }
        h.take().unwrap_or(Err(TaskError::Taken))
    }

    /// Register `name` as a service on this PE: `f` gets each call's request and the
    /// [`Reply`] to answer it with (now, or later from anywhere on this PE). Every PE
    /// registers the same services in the same order.
    pub fn serve<F>(&self, pe: &mut Pe, name: &str, f: F) -> ServiceId
    where
        F: Fn(&mut Pe, Message, Reply) + 'static,
    {
        let inner = self.inner.clone();
        let h = pe.register(name, move |pe, msg| {
            // A plain send to a service is not a call: no caller waits, and answering it
            // could complete an unrelated call of the sender's.
            if let Some(reply) = Reply::new(inner.clone(), &msg) {
                f(pe, msg, reply)
            }
        });
        ServiceId {
            h,
            inner: self.inner.clone(),
        }
    }

    /// Run `f` on this PE once the whole job is quiescent: no message in flight anywhere and
    /// no task scheduled (see the detection's module docs for the algorithm and its cost).
    /// Every PE may ask; each gets its own callback once.
    pub fn on_quiescence(&self, pe: &mut Pe, f: impl FnOnce(&mut Pe) + 'static) {
        quiescence::on_quiescence(&self.inner, pe, Box::new(f));
    }

    /// A future that completes once the job is quiescent, for a task to await (the awaiting
    /// task itself is not work in flight while it waits).
    pub fn quiescence(&self, pe: &mut Pe) -> Quiescence {
        let state = Rc::new(RefCell::new((false, None::<std::task::Waker>)));
        let s = state.clone();
        self.on_quiescence(pe, move |_| {
            let mut st = s.borrow_mut();
            st.0 = true;
            if let Some(w) = st.1.take() {
                w.wake();
            }
        });
        Quiescence { state }
    }

    /// Register `name` as a handler whose messages tasks receive ([`Inbox::recv`],
    /// [`recv_from`](Inbox::recv_from), [`recv_matching`](Inbox::recv_matching)): expected
    /// receives, for protocols that wait for a given message. Every PE registers the same
    /// names in the same order.
    pub fn expect(&self, pe: &mut Pe, name: &str) -> Inbox {
        Inbox::register(pe, name)
    }

    /// Tasks alive on this PE (spawned, neither finished nor aborted).
    pub fn live(&self) -> usize {
        self.inner.exec.live()
    }

    /// This PE's call counters.
    pub fn call_stats(&self) -> CallStats {
        self.inner.calls.stats()
    }
}

/// The future of [`Tasks::quiescence`].
#[must_use = "a future does nothing unless awaited"]
pub struct Quiescence {
    state: Rc<RefCell<(bool, Option<std::task::Waker>)>>,
}

impl std::fmt::Debug for Quiescence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quiescence")
            .field("reached", &self.state.borrow().0)
            .finish()
    }
}

impl Future for Quiescence {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let mut st = self.state.borrow_mut();
        if st.0 {
            return std::task::Poll::Ready(());
        }
        st.1 = Some(cx.waker().clone());
        std::task::Poll::Pending
    }
}

/// Run `f` with `inner` as the tasks of this thread ([`current_inner`]): around every place
/// tasks are polled (the run handler, and the reply handlers, which poll the caller woken).
fn as_current<R>(inner: &Rc<Inner>, f: impl FnOnce() -> R) -> R {
    let prev = CURRENT.with(|c| c.replace(Rc::as_ptr(inner)));
    // Put back even if a poll unwinds, so the pointer never outlives `inner`.
    struct Restore(*const Inner);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(prev);
    f()
}

/// The tasks of the PE whose task is being polled on this thread, if any.
pub(crate) fn current_inner() -> Option<Rc<Inner>> {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return None;
    }
    // SAFETY: set by the run handler from `Rc::as_ptr` of the `Rc<Inner>` in its `OnceCell`,
    // which the handler's closure keeps (and the PE keeps the closure, cloned for the call)
    // for the whole poll, during which this runs (restored on unwind); one more strong count
    // makes the returned `Rc`.
    unsafe {
        Rc::increment_strong_count(p);
        Some(Rc::from_raw(p))
    }
}

/// Spawn a task on the PE of the task being polled (from inside a task; outside one, use
/// [`Tasks::spawn`]).
///
/// # Panics
/// Outside a task.
pub fn spawn<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let Some(inner) = current_inner() else {
        panic!("converse_tasks::spawn called outside a task");
    };
    let tasks = Tasks { inner };
    with_pe(|pe| tasks.spawn(pe, fut))
}
