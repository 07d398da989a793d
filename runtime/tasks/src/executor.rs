//! The PE's executor: tasks in a slab, each polled by a message to the PE's own run handler.
//!
//! A task is polled only when a message naming it (its slot and the slot's generation in the
//! envelope's argument words) runs, so tasks are scheduled exactly as handlers are: by the PE's
//! scheduler, by priority, between messages, with no second thread; a PE with nothing to run
//! blocks as it always does. A wake-up posts that message through the PE's
//! [`Mailbox`](converse::Mailbox), from whatever thread wakes it; a task already scheduled is
//! not scheduled twice (a flag per task), and a message for a slot that has since been reused
//! (another generation) is dropped. A call's reply wakes its task by slot and generation
//! ([`Exec::wake_task`], see [`own_task`]) through the same flag, with no waker in hand.
//!
//! Costs per wake-up from another thread or handler: one message allocation (24 bytes of
//! envelope, no payload) and a lock-free push and pop; per poll, one slab lookup. A task is one
//! allocation ([`TaskCell`]: its future, then its output, shared with its [`JoinHandle`]; a
//! future larger than [`INLINE_FUTURE`] is boxed apart, so a kept handle does not keep its
//! size); its
//! waker is the slot's, kept from the slot's previous task when nothing else held it (else one
//! more allocation). The future is dropped where it lies as soon as it finishes or is
//! aborted, not when the handle goes.
//!
//! **A join runs a task not yet started.** Awaiting the [`JoinHandle`] of a task whose first
//! poll is still waiting on the ready list polls it at once, inside the joiner's poll
//! ([`Exec::run_joined`]): the joiner could do nothing until it ends, and an empty or short
//! task then costs no suspension, wake-up or second poll of the joiner (Argobots' join yields
//! to a ready target the same way). Those polls count in the row below, give way to a queued
//! message of better priority, and nest at most [`JOINED_DEPTH`] deep.
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
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

/// A task as the slab holds it: its future and its output in one allocation ([`TaskCell`]),
/// shared with its [`JoinHandle`].
pub(crate) type TaskRef = Rc<dyn Task>;

/// What the executor does with a task, whatever its future's type.
pub(crate) trait Task {
    /// Poll the future once: `Ready` once it has finished (its output kept for the handle, the
    /// future dropped where it lies).
    fn poll_task(&self, cx: &mut Context<'_>) -> Poll<()>;
    /// Drop the future where it lies, if it has not finished (aborted, or the executor is
    /// gone): its destructors run now, not when the last handle goes.
    fn drop_future(&self);
}

/// A task's one allocation: the future, then its output until the handle takes it.
pub(crate) struct TaskCell<F: Future> {
    /// `None` once finished or dropped. Never moved out: the future is pinned here.
    fut: RefCell<Option<F>>,
    join: RefCell<JoinState<F::Output>>,
}

impl<F: Future> TaskCell<F> {
    pub(crate) fn new(fut: F) -> TaskCell<F> {
        TaskCell {
            fut: RefCell::new(Some(fut)),
            join: RefCell::new(JoinState {
                out: None,
                done: false,
                joiner: None,
            }),
        }
    }
}

impl<F: Future> Task for TaskCell<F> {
    fn poll_task(&self, cx: &mut Context<'_>) -> Poll<()> {
        // Busy only if the future's own code reaches its task again (a destructor aborting
        // it): nothing to poll then.
        let Ok(mut slot) = self.fut.try_borrow_mut() else {
            return Poll::Pending;
        };
        let Some(fut) = slot.as_mut() else {
            return Poll::Ready(());
        };
        // SAFETY: the future lives inside this cell's `Rc` allocation, which never moves, and
        // leaves it only by being dropped in place (`*slot = None`), never by a move.
        let fut = unsafe { Pin::new_unchecked(fut) };
        let Poll::Ready(v) = fut.poll(cx) else {
            return Poll::Pending;
        };
        *slot = None;
        drop(slot);
        self.join.borrow_mut().finish(Ok(v));
        Poll::Ready(())
    }

    fn drop_future(&self) {
        if let Ok(mut slot) = self.fut.try_borrow_mut() {
            *slot = None;
        }
    }
}

/// The handle's side of a [`TaskCell`], whatever its future's type.
pub(crate) trait Join<T> {
    fn join(&self) -> &RefCell<JoinState<T>>;
}

impl<F: Future> Join<F::Output> for TaskCell<F> {
    fn join(&self) -> &RefCell<JoinState<F::Output>> {
        &self.join
    }
}

/// How many woken tasks one of this crate's handlers polls in a row before it leaves the rest
/// to run messages: about what a scheduler batch runs between two polls of the layer.
pub(crate) const IN_A_ROW: usize = 32;

/// Futures larger than this (bytes) are boxed apart from their task's cell: the cell lives
/// as long as a handle does, and should not keep a finished future's size with it.
pub(crate) const INLINE_FUTURE: usize = 256;

/// How deep joins may nest polls of the tasks they join ([`Exec::run_joined`]).
const JOINED_DEPTH: u32 = 8;

/// How far from the back of the ready list a joined task's entry is looked for: where a task
/// spawned just before it is joined is.
const JOINED_LOOKBACK: usize = 4;

/// The slot number of a drain message: it names no task, it polls the ready list.
const DRAIN: u32 = u32::MAX;

/// What a task's waker holds: where to post its run message, and whether one is on its way.
struct TaskWake {
    /// The executor's address: compared with [`LOCAL`]'s, never followed from here.
    exec: usize,
    mailbox: Mailbox,
    run: HandlerId,
    id: u32,
    /// The slot's task of this generation. Atomic only so that the slot can reuse this waker
    /// for its next task: it is changed only when the slot holds the waker's only references.
    gen: AtomicU32,
    prio: AtomicI32,
    /// A run message is posted and not yet taken: further wakes until then add nothing.
    scheduled: AtomicBool,
}

/// The vtable of every task's [`Waker`]: the executor's own, rather than `std::task::Wake`'s,
/// so that [`own_task`] can tell one of its wakers from another's by the vtable's address and
/// read the task it names (a call then records the task, not a clone of its waker).
static VTABLE: RawWakerVTable = RawWakerVTable::new(clone_raw, wake_raw, wake_by_ref_raw, drop_raw);

// The vtable's four functions: `p` is what `waker_of` made, `Arc::into_raw` of a `TaskWake`,
// and each waker holds one strong reference (clone adds one, wake and drop give theirs back).
unsafe fn clone_raw(p: *const ()) -> RawWaker {
    // SAFETY: `p` is a live `Arc<TaskWake>`'s pointer (the waker being cloned holds it).
    unsafe { Arc::increment_strong_count(p.cast::<TaskWake>()) };
    RawWaker::new(p, &VTABLE)
}

unsafe fn wake_raw(p: *const ()) {
    // SAFETY: the waker gives its reference up: taken back here, dropped after the wake.
    unsafe { Arc::from_raw(p.cast::<TaskWake>()) }.wake_by_ref();
}

unsafe fn wake_by_ref_raw(p: *const ()) {
    // SAFETY: the waker lent for this call holds a reference, so the `TaskWake` is alive.
    unsafe { &*p.cast::<TaskWake>() }.wake_by_ref();
}

unsafe fn drop_raw(p: *const ()) {
    // SAFETY: the waker gives its reference up, once.
    drop(unsafe { Arc::from_raw(p.cast::<TaskWake>()) });
}

// A waker may be sent to and woken from any thread: its `TaskWake` must allow that.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<TaskWake>();
};

/// The waker of `wake`'s task (holding one reference).
fn waker_of(wake: Arc<TaskWake>) -> Waker {
    // SAFETY: the vtable's functions treat the pointer as `Arc::into_raw` of a `TaskWake`,
    // which it is, and are thread-safe as `TaskWake` is `Send + Sync`.
    unsafe { Waker::from_raw(RawWaker::new(Arc::into_raw(wake).cast(), &VTABLE)) }
}

/// A task of `exec`'s, by slot, generation and priority, if `waker` is one of its tasks'
/// wakers: what a call records instead of cloning the waker (two atomic reference counts
/// fewer per call), to wake it through [`Exec::wake_task`].
pub(crate) fn own_task(waker: &Waker, exec: &Exec) -> Option<(u32, u32, i32)> {
    let w = task_wake_of(waker)?;
    (w.exec == exec as *const Exec as usize).then(|| {
        (
            w.id,
            w.gen.load(Ordering::Relaxed),
            w.prio.load(Ordering::Relaxed),
        )
    })
}

/// The `TaskWake` behind `waker`, if it is one of an executor's task wakers.
fn task_wake_of(waker: &Waker) -> Option<&TaskWake> {
    // SAFETY: a waker with this vtable was made by `waker_of`, so its data is a live
    // `TaskWake` (the waker holds a reference to it for as long as it is borrowed).
    std::ptr::eq(waker.vtable(), &VTABLE).then(|| unsafe { &*waker.data().cast::<TaskWake>() })
}

impl TaskWake {
    fn wake_by_ref(&self) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            let readied = with_local_exec(self.exec, |exec| exec.ready_unless_polling(self));
            if readied != Some(true) {
                // The one allocation per wake-up: the message that makes the scheduler poll
                // the task.
                let (gen, prio) = (
                    self.gen.load(Ordering::Relaxed),
                    self.prio.load(Ordering::Relaxed),
                );
                post_run(&self.mailbox, self.run, self.id, gen, prio);
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
    /// The task, out of the slot while it is being polled.
    fut: Option<TaskRef>,
    /// The task's waker; kept by a free slot for its next task when no one else holds it,
    /// which saves that task an allocation (see [`Exec::release`]).
    wake: Option<Arc<TaskWake>>,
    waker: Option<Waker>,
    /// Polled at least once ([`JoinHandle`]'s poll runs a task not yet started at once).
    started: bool,
    /// The task is being polled (its future is out of the slot).
    polling: bool,
    /// A run message came while it was being polled (a nested scheduler loop ran it): poll
    /// again once the current poll returns.
    repoll: bool,
    /// Aborted while being polled: dropped once the poll returns.
    aborted: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The executor is going (the job ended) with tasks unfinished: their futures go now,
        // in place, as boxed ones would — the cell itself may live on in a handle that
        // another future, dropped later, holds.
        if let Some(t) = self.fut.take() {
            t.drop_future();
        }
    }
}

/// The executor of one PE (shared by its handlers and the [`Tasks`](crate::Tasks) handle).
pub(crate) struct Exec {
    /// Tasks woken in a row: (slot, generation, priority), polled before the handler returns.
    ready: RefCell<VecDeque<(u32, u32, i32)>>,
    /// Polls running (a task's code, which may enter a nested loop) on this PE.
    polls: Cell<u32>,
    /// A drain message is in flight.
    drain_posted: Cell<bool>,
    /// Polls made in a row in the running handler of this crate (up to [`IN_A_ROW`]),
    /// counting those a join makes ([`Exec::run_joined`]).
    row: Cell<usize>,
    /// Joins running their task inside the joiner's poll, nested.
    joined_depth: Cell<u32>,
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
            row: Cell::new(0),
            joined_depth: Cell::new(0),
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
    pub(crate) fn spawn(&self, pe: &mut Pe, prio: i32, task: TaskRef) -> (u32, u32) {
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
        match (&slot.wake, &slot.waker) {
            (Some(wake), Some(_)) => {
                // The previous task's waker, which nothing else holds (see `release`).
                wake.gen.store(slot.gen, Ordering::Relaxed);
                wake.prio.store(prio, Ordering::Relaxed);
                wake.scheduled.store(true, Ordering::Relaxed);
            }
            _ => {
                let wake = Arc::new(TaskWake {
                    exec: self as *const Exec as usize,
                    mailbox: self.mailbox.clone(),
                    run,
                    id,
                    gen: AtomicU32::new(slot.gen),
                    prio: AtomicI32::new(prio),
                    scheduled: AtomicBool::new(true),
                });
                slot.waker = Some(waker_of(wake.clone()));
                slot.wake = Some(wake);
            }
        }
        slot.fut = Some(task);
        slot.started = false;
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

    /// Wake task `(id, gen)`, as its waker would (recorded by [`own_task`]); nothing if the slot
    /// holds another task by now.
    pub(crate) fn wake_task(&self, id: u32, gen: u32, prio: i32) {
        let Ok(slots) = self.slots.try_borrow() else {
            // Borrowed mutably only for moments in which no task is woken (spawn, abort, a
            // poll's bookkeeping): not reached, but a run message is always a correct wake-up.
            if let Some(run) = self.run.get() {
                post_run(&self.mailbox, run, id, gen, prio);
            }
            return;
        };
        // The slot's `TaskWake` stays in it even while the task is polled, so this is the
        // waker's own wake, its `scheduled` flag included (once per poll, however many wakes).
        if let Some(wake) = slots
            .get(id as usize)
            .filter(|s| s.gen == gen)
            .and_then(|s| s.wake.as_ref())
        {
            wake.wake_by_ref();
        }
    }

    /// Ready `wake`'s task to be polled in a row, unless it is the task being polled (a task
    /// that wakes itself yields, so it gets a message). Whether it was readied.
    fn ready_unless_polling(&self, wake: &TaskWake) -> bool {
        let polling = self
            .slots
            .try_borrow()
            .map_or(true, |s| s.get(wake.id as usize).is_none_or(|s| s.polling));
        if !polling {
            let (gen, prio) = (
                wake.gen.load(Ordering::Relaxed),
                wake.prio.load(Ordering::Relaxed),
            );
            self.push_ready((wake.id, gen, prio));
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
        struct Restore<'a>(&'a Exec, (*const Exec, u32), usize);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                LOCAL.with(|l| l.set(self.1));
                self.0.row.set(self.2);
                self.0.message_ready();
            }
        }
        // A nested loop (inside a task's poll) counts its own row; the outer one's goes on after.
        let _restore = Restore(self, prev, self.row.replace(0));
        let r = f(pe);
        while self.row.get() < IN_A_ROW {
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
        loop {
            // Borrowed per entry: posting may run nothing of ours, but need not be trusted to.
            let next = match self.ready.try_borrow_mut() {
                Ok(mut r) => r.pop_front(),
                Err(_) => None,
            };
            let Some((id, gen, prio)) = next else { return };
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
        let (fut, waker) = {
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
            if slot.fut.is_none() || slot.waker.is_none() {
                return;
            }
            // Taken out, not cloned (two reference counts fewer per poll); put back after. The
            // `TaskWake` stays, for a wake by slot during the poll (`wake_task`).
            let (Some(fut), Some(waker)) = (slot.fut.take(), slot.waker.take()) else {
                return;
            };
            slot.polling = true;
            slot.started = true;
            (fut, waker)
        };
        self.row.set(self.row.get() + 1);
        loop {
            // Cleared before the poll: a wake during it schedules the task again.
            if let Some(w) = task_wake_of(&waker) {
                w.scheduled.store(false, Ordering::Release);
            }
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
            struct Unwind<'a>(&'a Exec, u32, bool, &'a TaskRef);
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
                        self.3.drop_future();
                    }
                }
            }
            self.polls.set(self.polls.get() + 1);
            let mut unwind = Unwind(self, id, true, &fut);
            let done = fut.poll_task(&mut cx).is_ready();
            unwind.2 = false;
            drop(unwind);
            drop(restore);
            let mut slots = self.slots.borrow_mut();
            let slot = &mut slots[id as usize];
            if done || slot.aborted {
                slot.polling = false;
                slot.aborted = false;
                slot.repoll = false;
                slot.waker = Some(waker);
                self.release(slot, id);
                drop(slots);
                // The future's destructors may use the executor (cancel calls, drop handles).
                fut.drop_future();
                return;
            }
            if std::mem::take(&mut slot.repoll) {
                continue;
            }
            slot.polling = false;
            slot.fut = Some(fut);
            slot.waker = Some(waker);
            return;
        }
    }

    /// Free `slot` (its task finished or was aborted): a later run message for it is stale.
    /// Its waker is kept for the slot's next task if the slot holds its only two references
    /// (`wake` and `waker`): then no one can wake it with the old generation, nor clone it
    /// meanwhile (a clone needs a reference), so the next task may renumber it.
    fn release(&self, slot: &mut Slot, id: u32) {
        slot.gen = slot.gen.wrapping_add(1);
        let reusable = slot.waker.is_some()
            && slot
                .wake
                .as_ref()
                .is_some_and(|w| Arc::strong_count(w) == 2);
        // Whatever another thread did with its clone before dropping it comes before the
        // renumbering (without this, at worst a stale wake would poll the next task once).
        std::sync::atomic::fence(Ordering::Acquire);
        if !reusable {
            slot.wake = None;
            slot.waker = None;
        }
        self.free.borrow_mut().push(id);
        self.live.set(self.live.get() - 1);
    }

    /// Poll task `(id, gen)` now, inside the poll of the task that joins it, if it has not
    /// started yet: its first poll was only waiting on the ready list behind the joiner, which
    /// can do nothing until it ends (Argobots' join yields to a ready target the same way).
    /// An empty or short task then costs the joiner no suspension, no wake-up and no second
    /// poll. Not done — the task runs in its turn — unless it was readied by this executor's
    /// running handler (its entry among the last few on the ready list, taken off so that
    /// none goes stale there), this handler has polls left in its row ([`IN_A_ROW`], which
    /// these count in), no queued message of better priority waits, and fewer than
    /// [`JOINED_DEPTH`] such polls are nested (a chain of joins is not a chain of stack frames).
    ///
    /// A panic in the task polled here unwinds through the joiner's poll too (the runtime
    /// ends the job on a panic; a program that catches panics loses both tasks).
    pub(crate) fn run_joined(&self, id: u32, gen: u32) {
        if with_local_exec(self as *const Exec as usize, |_| ()).is_none()
            || self.row.get() >= IN_A_ROW
            || self.joined_depth.get() >= JOINED_DEPTH
        {
            return;
        }
        let fresh = self.slots.try_borrow().is_ok_and(|slots| {
            slots
                .get(id as usize)
                .is_some_and(|s| s.gen == gen && !s.started && !s.polling && s.fut.is_some())
        });
        if !fresh {
            return;
        }
        let entry = {
            let Ok(ready) = self.ready.try_borrow() else {
                return;
            };
            let n = ready.len();
            ready
                .iter()
                .rev()
                .take(JOINED_LOOKBACK)
                .position(|e| e.0 == id && e.1 == gen)
                .map(|back| (n - 1 - back, ready[n - 1 - back].2))
        };
        let Some((at, prio)) = entry else { return };
        with_pe(|pe| {
            if pe.should_yield(prio) {
                return;
            }
            self.ready.borrow_mut().remove(at);
            self.joined_depth.set(self.joined_depth.get() + 1);
            struct Depth<'a>(&'a Cell<u32>);
            impl Drop for Depth<'_> {
                fn drop(&mut self) {
                    self.0.set(self.0.get().saturating_sub(1));
                }
            }
            let _depth = Depth(&self.joined_depth);
            self.poll(pe, id, gen);
        });
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
        if let Some(t) = fut {
            t.drop_future();
        }
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
    /// The task's cell (its output, and its future until it finishes).
    pub(crate) cell: Rc<dyn Join<T>>,
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
        self.cell.join().borrow().done
    }

    /// The task's output, once it has finished (taken: a second call gets `None`).
    pub fn take(&self) -> Option<Result<T, crate::TaskError>> {
        self.cell.join().borrow_mut().out.take()
    }

    /// Stop the task: its future is dropped where it waits (its pending calls are cancelled,
    /// their replies dropped when they come) and the handle's output is
    /// [`TaskError::Aborted`](crate::TaskError::Aborted). Nothing happens to a task that has
    /// finished already.
    pub fn abort(&self) {
        if self.exec.abort(self.id, self.gen) {
            self.cell
                .join()
                .borrow_mut()
                .finish(Err(crate::TaskError::Aborted));
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, crate::TaskError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.is_finished() && in_task() {
            // A waker left from an earlier poll would wake this task while it runs the other
            // (a message, and a poll for nothing): it is registered again below if needed.
            {
                let mut s = self.cell.join().borrow_mut();
                if s.joiner.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.joiner = None;
                }
            }
            self.exec.run_joined(self.id, self.gen);
        }
        let mut s = self.cell.join().borrow_mut();
        if s.done {
            return Poll::Ready(s.out.take().unwrap_or(Err(crate::TaskError::Taken)));
        }
        // Kept if it is the same waker (the same task joining again): no reference count.
        if !s.joiner.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.joiner = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}
