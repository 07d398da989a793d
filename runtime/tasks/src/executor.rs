//! The PE's executor: tasks in a slab, each polled by a message to the PE's own run handler.
//!
//! A task is polled only when a message naming it (its slot and the slot's generation in the
//! envelope's argument words) runs, so tasks are scheduled exactly as handlers are: by the PE's
//! scheduler, by priority, between messages, with no second thread; a PE with nothing to run
//! blocks as it always does. A wake-up posts that message through the PE's
//! [`Mailbox`](converse::Mailbox), from whatever thread wakes it; a task already scheduled is
//! not scheduled twice (a flag per task), and a message for a slot that has since been reused
//! (another generation) is dropped.
//!
//! Costs per wake-up from another thread or handler: one message allocation (24 bytes of
//! envelope, no payload) and a lock-free push and pop; per poll, one slab lookup. A task is one
//! allocation for its future, one for its waker and one for its join state.
//!
//! **Woken in a row.** While this crate's own handlers run (a task's poll, a reply), a task of
//! the same PE spawned or woken there (a joiner whose task just finished, a caller whose reply
//! just came) is not sent a message: it goes to the executor's *ready* list, which the handler
//! polls before it returns — the message's allocation and trip through the queue saved, as
//! Converse's `CthAwaken` puts a thread on the scheduler's queue without a message. A queued
//! message of better priority is never passed: the handler stops at a task such a message
//! beats ([`Pe::should_yield`]; one of equal priority may be passed, as the order among equal
//! priorities from different sources is not kept anyway), after [`IN_A_ROW`] polls, or when
//! the job or the loop is ending; what is left is sent run messages then. Only wakes made in
//! the handler's own scheduler loop go there ([`converse::scheduler_depth`]): one made inside
//! a nested loop (a `run_until` in a task) is a message. And while a task's code runs (which
//! may itself enter a nested loop, or `Pe::progress`, and wait there for a task still ready),
//! one *drain* message is kept in flight whenever the ready list is not empty: whichever loop
//! runs it polls what is ready. So a ready task always has a message in flight that will poll
//! it, as quiescence detection needs, except inside a reply's handler between the wake and the
//! poll, where no other handler can run. A task waking itself (`yield_now`) always gets a
//! message, so that it lets others run.

use converse::{HandlerId, Mailbox, Message, Pe};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

type BoxFuture = Pin<Box<dyn Future<Output = ()>>>;

/// How many woken tasks one of this crate's handlers polls in a row before it leaves the rest
/// to run messages: about what a scheduler batch runs between two polls of the layer.
pub(crate) const IN_A_ROW: usize = 32;

/// The slot number of a drain message: it names no task, it polls the ready list.
const DRAIN: u32 = u32::MAX;

/// What a task's waker holds: where to post its run message, and whether one is on its way.
struct TaskWake {
    /// The executor's address: compared with [`LOCAL`]'s, never followed from here.
    exec: usize,
    mailbox: Mailbox,
    run: HandlerId,
    id: u32,
    gen: u32,
    prio: i32,
    /// A run message is posted and not yet taken: further wakes until then add nothing.
    scheduled: AtomicBool,
}

impl std::task::Wake for TaskWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            let readied = with_local_exec(self.exec, |exec| exec.ready_unless_polling(self));
            if readied != Some(true) {
                // The one allocation per wake-up: the message that makes the scheduler poll
                // the task.
                post_run(&self.mailbox, self.run, self.id, self.gen, self.prio);
            }
        }
    }
}

/// Post the message that makes the scheduler poll task `(id, gen)`.
fn post_run(mailbox: &Mailbox, run: HandlerId, id: u32, gen: u32, prio: i32) {
    let mut m = Message::new(0);
    m.set_arg0(id);
    m.set_arg1(gen);
    m.set_priority(prio);
    mailbox.post(run, m);
}

/// Run `f` with the executor at address `key` if one of its handlers runs on this thread, in
/// the scheduler loop it began in.
fn with_local_exec<R>(key: usize, f: impl FnOnce(&Exec) -> R) -> Option<R> {
    let (p, depth) = LOCAL.with(|l| l.get());
    if p.is_null() || p as usize != key || converse::scheduler_depth() != depth {
        return None;
    }
    // SAFETY: `LOCAL` holds an executor only while `Exec::with_local` runs on this thread,
    // borrowing it for that long (and puts back the previous value when it returns or
    // unwinds), so `p` points at a live `Exec` here.
    Some(f(unsafe { &*p }))
}

/// One slot of the slab.
#[derive(Default)]
struct Slot {
    gen: u32,
    /// The future, out of the slot while it is being polled.
    fut: Option<BoxFuture>,
    wake: Option<Arc<TaskWake>>,
    waker: Option<Waker>,
    /// The task is being polled (its future is out of the slot).
    polling: bool,
    /// A run message came while it was being polled (a nested scheduler loop ran it): poll
    /// again once the current poll returns.
    repoll: bool,
    /// Aborted while being polled: dropped once the poll returns.
    aborted: bool,
}

/// The executor of one PE (shared by its handlers and the [`Tasks`](crate::Tasks) handle).
pub(crate) struct Exec {
    /// Tasks woken in a row: (slot, generation, priority), polled before the handler returns.
    ready: RefCell<VecDeque<(u32, u32, i32)>>,
    /// Polls running (a task's code, which may enter a nested loop) on this PE.
    polls: Cell<u32>,
    /// A drain message is in flight.
    drain_posted: Cell<bool>,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<u32>>,
    pub(crate) run: Cell<Option<HandlerId>>,
    pub(crate) mailbox: Mailbox,
    /// Tasks alive (spawned, not finished nor aborted).
    live: Cell<usize>,
}

thread_local! {
    /// The PE whose task is being polled on this thread (null outside a poll, and while
    /// [`with_pe`] lends it out).
    static CURRENT: Cell<*mut Pe> = const { Cell::new(std::ptr::null_mut()) };
    /// The executor whose handler runs on this thread, and the scheduler depth it runs at.
    static LOCAL: Cell<(*const Exec, u32)> = const { Cell::new((std::ptr::null(), 0)) };
}

/// Run `f` with the PE of the task being polled: how code inside a task sends, registers
/// timers or reads the PE's numbers.
///
/// ```no_run
/// # async fn inside_a_task() {
/// let me = converse_tasks::with_pe(|pe| pe.my_pe());
/// # }
/// ```
///
/// # Panics
/// Outside a task (no task is being polled on this thread), or from inside another `with_pe`
/// (the PE is lent once at a time): both are mistakes in the program.
pub fn with_pe<R>(f: impl FnOnce(&mut Pe) -> R) -> R {
    let p = CURRENT.with(|c| c.replace(std::ptr::null_mut()));
    assert!(
        !p.is_null(),
        "converse_tasks::with_pe called outside a task, or from inside another with_pe"
    );
    // Put back even if `f` unwinds, so a caught panic leaves the PE usable.
    struct Restore(*mut Pe);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(p);
    // SAFETY: `p` was set by `poll_task` from the `&mut Pe` its handler holds, which it does
    // not touch until the poll returns; taking it out of the cell means no second `&mut` can
    // be made from it meanwhile.
    f(unsafe { &mut *p })
}

/// Whether a task is being polled on this thread (so [`with_pe`] may be called).
pub fn in_task() -> bool {
    CURRENT.with(|c| !c.get().is_null())
}

impl Exec {
    pub(crate) fn new(mailbox: Mailbox) -> Exec {
        Exec {
            ready: RefCell::new(VecDeque::new()),
            polls: Cell::new(0),
            drain_posted: Cell::new(false),
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            run: Cell::new(None),
            mailbox,
            live: Cell::new(0),
        }
    }

    /// Tasks alive on this PE.
    pub(crate) fn live(&self) -> usize {
        self.live.get()
    }

    /// Put `fut` in a slot and schedule its first poll (a message to this PE). Returns the
    /// slot and its generation.
    pub(crate) fn spawn(&self, pe: &mut Pe, prio: i32, fut: BoxFuture) -> (u32, u32) {
        let Some(run) = self.run.get() else {
            unreachable!("the run handler is registered by Tasks::attach before any spawn")
        };
        let id = match self.free.borrow_mut().pop() {
            Some(id) => id,
            None => {
                let mut slots = self.slots.borrow_mut();
                slots.push(Slot::default());
                (slots.len() - 1) as u32
            }
        };
        let mut slots = self.slots.borrow_mut();
        let slot = &mut slots[id as usize];
        let wake = Arc::new(TaskWake {
            exec: self as *const Exec as usize,
            mailbox: self.mailbox.clone(),
            run,
            id,
            gen: slot.gen,
            prio,
            scheduled: AtomicBool::new(true),
        });
        slot.waker = Some(Waker::from(wake.clone()));
        slot.wake = Some(wake);
        slot.fut = Some(fut);
        let gen = slot.gen;
        drop(slots);
        self.live.set(self.live.get() + 1);
        let local = with_local_exec(self as *const Exec as usize, |_| ()).is_some();
        if local {
            self.push_ready((id, gen, prio));
        } else {
            let mut m = Message::new(0);
            m.set_arg0(id);
            m.set_arg1(gen);
            m.set_priority(prio);
            let me = pe.my_pe();
            pe.send_msg(me, run, m);
        }
        (id, gen)
    }

    /// Ready `wake`'s task to be polled in a row, unless it is the task being polled (a task
    /// that wakes itself yields, so it gets a message). Whether it was readied.
    fn ready_unless_polling(&self, wake: &TaskWake) -> bool {
        let polling = self
            .slots
            .try_borrow()
            .map_or(true, |s| s.get(wake.id as usize).is_none_or(|s| s.polling));
        if !polling {
            self.push_ready((wake.id, wake.gen, wake.prio));
        }
        !polling
    }

    /// Put a task on the ready list; while a task's code runs, make sure a drain message is in
    /// flight (that code may wait for this task in a nested loop).
    fn push_ready(&self, entry: (u32, u32, i32)) {
        self.ready.borrow_mut().push_back(entry);
        if self.polls.get() > 0 {
            self.ensure_drain(entry.2);
        }
    }

    /// Post a drain message at `prio` unless one is in flight.
    fn ensure_drain(&self, prio: i32) {
        if self.drain_posted.get() {
            return;
        }
        if let Some(run) = self.run.get() {
            self.drain_posted.set(true);
            post_run(&self.mailbox, run, DRAIN, 0, prio);
        }
    }

    /// Run `f` (one of this crate's handlers) with wakes of this executor's tasks readied
    /// instead of messaged, then poll the ready tasks in a row (see the module docs).
    pub(crate) fn with_local<R>(&self, pe: &mut Pe, f: impl FnOnce(&mut Pe) -> R) -> R {
        let prev = LOCAL.with(|l| l.replace((self as *const Exec, converse::scheduler_depth())));
        // Put back when done or unwinding; whatever is still ready then is sent messages.
        struct Restore<'a>(&'a Exec, (*const Exec, u32));
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                LOCAL.with(|l| l.set(self.1));
                self.0.message_ready();
            }
        }
        let _restore = Restore(self, prev);
        let r = f(pe);
        for _ in 0..IN_A_ROW {
            let (next, waiting) = {
                let mut ready = self.ready.borrow_mut();
                let next = match ready.front() {
                    Some(&(_, _, prio)) if !pe.should_yield(prio) => ready.pop_front(),
                    _ => None,
                };
                (next, ready.front().map(|e| e.2))
            };
            let Some((id, gen, _)) = next else { break };
            // The task's code may wait, in a nested loop, for one still on the list.
            if let Some(prio) = waiting {
                self.ensure_drain(prio);
            }
            self.poll(pe, id, gen);
        }
        r
    }

    /// Send every ready task its run message (the in-a-row polling stopped).
    fn message_ready(&self) {
        let Some(run) = self.run.get() else { return };
        let ready: Vec<_> = match self.ready.try_borrow_mut() {
            Ok(mut r) if !r.is_empty() => r.drain(..).collect(),
            _ => return,
        };
        for (id, gen, prio) in ready {
            post_run(&self.mailbox, run, id, gen, prio);
        }
    }

    /// The run handler: poll the task the message names, if it is still that task, and the
    /// tasks that readies.
    pub(crate) fn run(&self, pe: &mut Pe, msg: &Message) {
        let (id, gen) = (msg.arg0(), msg.arg1());
        if id == DRAIN {
            self.drain_posted.set(false);
            return self.with_local(pe, |_| ());
        }
        self.with_local(pe, |pe| self.poll(pe, id, gen));
    }

    /// Poll task `(id, gen)`, if it is still that task.
    fn poll(&self, pe: &mut Pe, id: u32, gen: u32) {
        let (mut fut, waker, wake) = {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(id as usize) else {
                return;
            };
            if slot.gen != gen {
                return; // a wake of a task that has finished since
            }
            if slot.polling {
                slot.repoll = true;
                return;
            }
            // Taken out, not cloned (two reference counts fewer per poll); put back after.
            let (Some(fut), Some(waker), Some(wake)) =
                (slot.fut.take(), slot.waker.take(), slot.wake.take())
            else {
                return;
            };
            slot.polling = true;
            (fut, waker, wake)
        };
        loop {
            // Cleared before the poll: a wake during it schedules the task again.
            wake.scheduled.store(false, Ordering::Release);
            let mut cx = Context::from_waker(&waker);
            let prev = CURRENT.with(|c| c.replace(pe as *mut Pe));
            struct Restore(*mut Pe);
            impl Drop for Restore {
                fn drop(&mut self) {
                    CURRENT.with(|c| c.set(self.0));
                }
            }
            let restore = Restore(prev);
            // If the poll unwinds (a panic the program catches), the task is gone: its slot is
            // freed rather than left "being polled" for ever.
            struct Unwind<'a>(&'a Exec, u32, bool);
            impl Drop for Unwind<'_> {
                fn drop(&mut self) {
                    self.0.polls.set(self.0.polls.get().saturating_sub(1));
                    if self.2 {
                        if let Ok(mut slots) = self.0.slots.try_borrow_mut() {
                            if let Some(slot) = slots.get_mut(self.1 as usize) {
                                slot.polling = false;
                                slot.fut = None;
                                self.0.release(slot, self.1);
                            }
                        }
                    }
                }
            }
            self.polls.set(self.polls.get() + 1);
            let mut unwind = Unwind(self, id, true);
            let done = fut.as_mut().poll(&mut cx).is_ready();
            unwind.2 = false;
            drop(unwind);
            drop(restore);
            let mut slots = self.slots.borrow_mut();
            let slot = &mut slots[id as usize];
            if done || slot.aborted {
                slot.polling = false;
                slot.aborted = false;
                slot.repoll = false;
                self.release(slot, id);
                drop(slots);
                // The future's destructors may use the executor (cancel calls, drop handles).
                drop(fut);
                return;
            }
            if std::mem::take(&mut slot.repoll) {
                continue;
            }
            slot.polling = false;
            slot.fut = Some(fut);
            slot.waker = Some(waker);
            slot.wake = Some(wake);
            return;
        }
    }

    /// Free `slot` (its task finished or was aborted): a later run message for it is stale.
    fn release(&self, slot: &mut Slot, id: u32) {
        slot.gen = slot.gen.wrapping_add(1);
        slot.wake = None;
        slot.waker = None;
        self.free.borrow_mut().push(id);
        self.live.set(self.live.get() - 1);
    }

    /// Drop task `(id, gen)` without running it further. Returns whether it was alive.
    pub(crate) fn abort(&self, id: u32, gen: u32) -> bool {
        let fut = {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(id as usize) else {
                return false;
            };
            if slot.gen != gen {
                return false;
            }
            if slot.polling {
                // Aborted from inside its own poll (or a nested loop of it): dropped when the
                // poll returns.
                slot.aborted = true;
                return true;
            }
            let fut = slot.fut.take();
            self.release(slot, id);
            fut
        };
        drop(fut);
        true
    }
}

/// The shared state of a task and its [`JoinHandle`].
pub(crate) struct JoinState<T> {
    pub(crate) out: Option<Result<T, crate::TaskError>>,
    pub(crate) done: bool,
    pub(crate) joiner: Option<Waker>,
}

impl<T> JoinState<T> {
    pub(crate) fn finish(&mut self, out: Result<T, crate::TaskError>) {
        if self.done {
            return;
        }
        self.done = true;
        self.out = Some(out);
        if let Some(w) = self.joiner.take() {
            w.wake();
        }
    }
}

/// A spawned task: await it (from another task) for its output, or look at it from a handler
/// or the start function. Dropping the handle detaches the task (it runs on); see
/// [`abort`](JoinHandle::abort).
pub struct JoinHandle<T> {
    pub(crate) state: Rc<RefCell<JoinState<T>>>,
    pub(crate) exec: Rc<Exec>,
    pub(crate) id: u32,
    pub(crate) gen: u32,
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle")
            .field("task", &self.id)
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> JoinHandle<T> {
    /// Whether the task has finished (or was aborted).
    pub fn is_finished(&self) -> bool {
        self.state.borrow().done
    }

    /// The task's output, once it has finished (taken: a second call gets `None`).
    pub fn take(&self) -> Option<Result<T, crate::TaskError>> {
        self.state.borrow_mut().out.take()
    }

    /// Stop the task: its future is dropped where it waits (its pending calls are cancelled,
    /// their replies dropped when they come) and the handle's output is
    /// [`TaskError::Aborted`](crate::TaskError::Aborted). Nothing happens to a task that has
    /// finished already.
    pub fn abort(&self) {
        if self.exec.abort(self.id, self.gen) {
            self.state
                .borrow_mut()
                .finish(Err(crate::TaskError::Aborted));
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, crate::TaskError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.state.borrow_mut();
        if s.done {
            return Poll::Ready(s.out.take().unwrap_or(Err(crate::TaskError::Taken)));
        }
        s.joiner = Some(cx.waker().clone());
        Poll::Pending
    }
}
