//! Calls with replies: a request to a service on another PE (or this one) whose reply
//! completes a future.
//!
//! A call is one message to the service's handler, with the call's slot and generation in the
//! envelope's argument words; the reply is one message back to this crate's reply handler,
//! naming the same. Nothing else travels: a call costs what a hand-written send and reply
//! handler cost, plus a slab lookup on each side. The task awaiting a call is recorded by its
//! slot and generation when its waker is one of this PE's executor's (no atomic reference
//! count taken and given back per call, and its wake-up goes straight to the executor); any
//! other waker (a call polled by hand, or by another executor) is cloned, as usual.
//!
//! | message | handler | arg0 | arg1 | payload |
//! |---|---|---|---|---|
//! | request | the service's | call slot | call generation, top bit set | the request |
//! | reply | `converse-tasks.reply` | call slot | call generation | the reply |
//! | no answer | `converse-tasks.unanswered` | call slot | call generation | none |
//! | (local) dropped token | `converse-tasks.dropped` | call slot | call generation | caller PE, u32 LE |
//!
//! **Cancellation.** Dropping a [`Call`] (directly, through [`timeout`](crate::timeout), or by
//! aborting its task) frees its slot; a reply that comes later finds another generation there,
//! or nothing, and is dropped and counted ([`CallStats::late_replies`]) — never delivered to
//! another call. **Deaths** (report mode): a pending call to a PE of a node that dies completes
//! with [`CallError::PeDied`], and a call made to one afterwards fails at once.

use crate::executor::{own_task, Exec};
use crate::Inner;
use converse::{HandlerId, Message, NodeFailure, Pe};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The top bit of a request's `arg1`: it is a call (a plain send to a service has it clear).
const CALL: u32 = 1 << 31;

/// Why a call has no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The called PE's node is out of the job (report mode).
    #[error("PE {pe} died before it replied: {reason}")]
    PeDied {
        /// The PE called.
        pe: usize,
        /// Why its node is out, as the runtime was told.
        reason: String,
    },
    /// The service dropped the call's [`Reply`] without answering.
    #[error("PE {pe} dropped the call without replying")]
    Unanswered {
        /// The PE called.
        pe: usize,
    },
}

/// Counters of one PE's calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Calls cancelled (dropped) before their reply came.
    pub cancelled: u64,
    /// Replies that came for a call no longer waiting (cancelled, timed out), and were
    /// dropped.
    pub late_replies: u64,
}

enum State {
    Waiting(Waiter),
    Done(Result<Message, CallError>),
}

/// Who waits for a call's reply: nobody yet, a task of this PE's executor (by slot,
/// generation and priority: woken without a waker's reference counts), or another waker.
enum Waiter {
    None,
    Task(u32, u32, i32),
    Other(Waker),
}

impl Waiter {
    /// Become the waiter `waker` stands for (unless it is that already: no clone then).
    fn register(&mut self, waker: &Waker, exec: &Exec) {
        *self = match own_task(waker, exec) {
            Some((id, gen, prio)) => Waiter::Task(id, gen, prio),
            None if matches!(self, Waiter::Other(w) if w.will_wake(waker)) => return,
            None => Waiter::Other(waker.clone()),
        };
    }

    fn wake(self, exec: &Exec) {
        match self {
            Waiter::None => {}
            Waiter::Task(id, gen, prio) => exec.wake_task(id, gen, prio),
            Waiter::Other(w) => w.wake(),
        }
    }
}

struct Pending {
    gen: u32,
    dest: usize,
    /// `None`: the slot is free.
    state: Option<State>,
}

/// The pending calls of one PE.
#[derive(Default)]
pub(crate) struct CallTable {
    slots: RefCell<Vec<Pending>>,
    free: RefCell<Vec<u32>>,
    stats: Cell<CallStats>,
}

impl CallTable {
    fn open(&self, dest: usize) -> (u32, u32) {
        let mut slots = self.slots.borrow_mut();
        let id = match self.free.borrow_mut().pop() {
            Some(id) => id,
            None => {
                slots.push(Pending {
                    gen: 0,
                    dest,
                    state: None,
                });
                (slots.len() - 1) as u32
            }
        };
        let p = &mut slots[id as usize];
        p.dest = dest;
        p.state = Some(State::Waiting(Waiter::None));
        (id, p.gen)
    }

    /// Free slot `id` (the call completed and was taken, or was dropped).
    fn close(&self, p: &mut Pending, id: u32) {
        p.state = None;
        // 31 bits: a request carries the generation with [`CALL`] set.
        p.gen = p.gen.wrapping_add(1) & !CALL;
        self.free.borrow_mut().push(id);
    }

    /// Complete call `(id, gen)` with `r`, if it still waits (waking its waiter, a task of
    /// `exec` or another); otherwise count a late reply.
    pub(crate) fn complete(&self, exec: &Exec, id: u32, gen: u32, r: Result<Message, CallError>) {
        let waiter = {
            let mut slots = self.slots.borrow_mut();
            match slots.get_mut(id as usize) {
                Some(p) if p.gen == gen && matches!(p.state, Some(State::Waiting(_))) => {
                    match p.state.replace(State::Done(r)) {
                        Some(State::Waiting(w)) => w,
                        _ => Waiter::None,
                    }
                }
                _ => {
                    let mut s = self.stats.get();
                    s.late_replies += 1;
                    self.stats.set(s);
                    Waiter::None
                }
            }
        };
        waiter.wake(exec);
    }

    /// A node died: every call waiting on one of its PEs fails.
    pub(crate) fn node_failed(&self, exec: &Exec, f: &NodeFailure) {
        let mut wakers = Vec::new();
        {
            let mut slots = self.slots.borrow_mut();
            for p in slots.iter_mut() {
                if f.pes.contains(&p.dest) && matches!(p.state, Some(State::Waiting(_))) {
                    let r = Err(CallError::PeDied {
                        pe: p.dest,
                        reason: f.reason.clone(),
                    });
                    if let Some(State::Waiting(w)) = p.state.replace(State::Done(r)) {
                        wakers.push(w);
                    }
                }
            }
        }
        for w in wakers {
            w.wake(exec);
        }
    }

    pub(crate) fn stats(&self) -> CallStats {
        self.stats.get()
    }
}

/// A service: a handler registered with [`Tasks::serve`](crate::Tasks::serve) that answers
/// calls. Registered on every PE in the same order, so the id names the same service
/// everywhere.
#[derive(Clone)]
pub struct ServiceId {
    pub(crate) h: HandlerId,
    pub(crate) inner: Rc<Inner>,
}

impl std::fmt::Debug for ServiceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ServiceId").field(&self.h).finish()
    }
}

impl ServiceId {
    /// Call this service on PE `dest` with a copy of `payload`, from a handler or the start
    /// function (inside a task, [`call`] says the same without the PE).
    ///
    /// # Panics
    /// When `dest` is not a PE of the job.
    pub fn call(&self, pe: &mut Pe, dest: usize, payload: &[u8]) -> Call {
        self.call_msg(pe, dest, Message::from_payload(payload))
    }

    /// As [`call`](Self::call), giving `msg` away (its priority is kept).
    ///
    /// # Panics
    /// When `dest` is not a PE of the job.
    pub fn call_msg(&self, pe: &mut Pe, dest: usize, mut msg: Message) -> Call {
        let calls = &self.inner.calls;
        if !pe.is_alive(dest) {
            let reason = format!("node {} is out of the job", pe.node_of(dest));
            let (id, gen) = calls.open(dest);
            calls.complete(
                &self.inner.exec,
                id,
                gen,
                Err(CallError::PeDied { pe: dest, reason }),
            );
            return Call {
                inner: self.inner.clone(),
                id,
                gen,
                done: false,
            };
        }
        let (id, gen) = calls.open(dest);
        msg.set_arg0(id);
        msg.set_arg1(gen | CALL);
        pe.send_msg(dest, self.h, msg);
        Call {
            inner: self.inner.clone(),
            id,
            gen,
            done: false,
        }
    }
}

/// Call `service` on PE `dest` with a copy of `payload`; the future completes with the reply.
/// Inside a task only (see [`with_pe`](crate::with_pe)).
///
/// # Panics
/// Outside a task, or when `dest` is not a PE of the job.
pub fn call(dest: usize, service: &ServiceId, payload: &[u8]) -> Call {
    crate::with_pe(|pe| service.call(pe, dest, payload))
}

/// A pending call: completes with the reply, or with a [`CallError`]. Dropping it cancels the
/// call (see the module docs).
#[must_use = "a call's reply is dropped unless the call is awaited"]
pub struct Call {
    inner: Rc<Inner>,
    id: u32,
    gen: u32,
    /// The reply was taken: the slot is free (and may be another call's).
    done: bool,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("slot", &self.id)
            .field("done", &self.done)
            .finish()
    }
}

impl Future for Call {
    type Output = Result<Message, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.done {
            // Polled after it completed: a programming error in a combinator; answer as a
            // fused future would, never with another call's reply.
            return Poll::Pending;
        }
        let calls = &self.inner.calls;
        let mut slots = calls.slots.borrow_mut();
        let p = &mut slots[self.id as usize];
        debug_assert_eq!(p.gen, self.gen);
        // Still waiting: the waiter is updated in place (the state, with its result's room, is
        // not moved out and back).
        if let Some(State::Waiting(w)) = &mut p.state {
            w.register(cx.waker(), &self.inner.exec);
            return Poll::Pending;
        }
        match p.state.take() {
            Some(State::Done(r)) => {
                calls.close(p, self.id);
                drop(slots);
                self.done = true;
                Poll::Ready(r)
            }
            _ => {
                let mut w = Waiter::None;
                w.register(cx.waker(), &self.inner.exec);
                p.state = Some(State::Waiting(w));
                Poll::Pending
            }
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let calls = &self.inner.calls;
        let mut slots = calls.slots.borrow_mut();
        if let Some(p) = slots.get_mut(self.id as usize) {
            if p.gen == self.gen && p.state.is_some() {
                if matches!(p.state, Some(State::Waiting(_))) {
                    let mut s = calls.stats.get();
                    s.cancelled += 1;
                    calls.stats.set(s);
                }
                calls.close(p, self.id);
            }
        }
    }
}

/// The right to answer one call: given to the service's handler with the request, answered
/// now or kept and answered later ([`send`](Reply::send)). Dropped unanswered, the caller gets
/// [`CallError::Unanswered`].
pub struct Reply {
    caller: usize,
    id: u32,
    gen: u32,
    inner: Rc<Inner>,
    answered: bool,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

impl Reply {
    /// The token for `msg`, if it is a call.
    pub(crate) fn new(inner: Rc<Inner>, msg: &Message) -> Option<Reply> {
        (msg.arg1() & CALL != 0).then(|| Reply {
            caller: msg.src_pe() as usize,
            id: msg.arg0(),
            gen: msg.arg1() & !CALL,
            inner,
            answered: false,
        })
    }

    /// The PE that made the call.
    pub fn caller(&self) -> usize {
        self.caller
    }

    /// Answer with a copy of `payload`.
    pub fn send(self, pe: &mut Pe, payload: &[u8]) {
        self.send_msg(pe, Message::from_payload(payload));
    }

    /// Answer with `msg`, giving it away (a request message may be answered with itself).
    pub fn send_msg(mut self, pe: &mut Pe, mut msg: Message) {
        self.answered = true;
        msg.set_arg0(self.id);
        msg.set_arg1(self.gen);
        pe.send_msg(self.caller, self.inner.reply_h, msg);
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        // No PE here to send with: the PE's own mailbox runs the refusal as a message.
        let mut m = Message::from_payload(&(self.caller as u32).to_le_bytes());
        m.set_arg0(self.id);
        m.set_arg1(self.gen);
        self.inner.exec.mailbox.post(self.inner.dropped_h, m);
    }
}

/// `converse-tasks.dropped`, on the serving PE: tell the caller its call goes unanswered.
pub(crate) fn on_dropped(inner: &Inner, pe: &mut Pe, msg: Message) {
    let Ok(bytes) = <[u8; 4]>::try_from(msg.payload()) else {
        return;
    };
    let caller = u32::from_le_bytes(bytes) as usize;
    let mut m = Message::new(0);
    m.set_arg0(msg.arg0());
    m.set_arg1(msg.arg1());
    if caller < pe.num_pes() {
        pe.send_msg(caller, inner.unanswered_h, m);
    }
}
