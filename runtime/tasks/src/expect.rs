//! Expected receives: a handler whose messages wait for a task to take them — the next one,
//! the next from a given PE, or the next that matches a predicate (Mercury's expected
//! messages, MPI's receive by source and tag).

use crate::CallError;
use converse::{HandlerId, Message, Pe};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct State {
    arrived: VecDeque<Message>,
    /// Tasks waiting for an arrival; each looks again at every arrival.
    waiting: Vec<Waker>,
}

/// A handler whose messages are received by tasks: see [`Tasks::expect`](crate::Tasks::expect).
///
/// Messages nobody has received yet are held here, in arrival order, however many come: a
/// program that sends to an inbox faster than its tasks receive grows it (the flow control of
/// the PE's own queue does not reach past the handler).
#[derive(Clone)]
pub struct Inbox {
    h: HandlerId,
    state: Rc<RefCell<State>>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("handler", &self.h)
            .field("held", &self.state.borrow().arrived.len())
            .finish()
    }
}

impl Inbox {
    pub(crate) fn register(pe: &mut Pe, name: &str) -> Inbox {
        let state: Rc<RefCell<State>> = Rc::default();
        let s = state.clone();
        let h = pe.register(name, move |_pe, msg| {
            let waiting = {
                let mut st = s.borrow_mut();
                st.arrived.push_back(msg);
                std::mem::take(&mut st.waiting)
            };
            for w in waiting {
                w.wake();
            }
        });
        // Report mode: a death wakes every waiting receive, so one waiting on a PE of the
        // dead node ends with an error (`recv_from`).
        if pe.survives_node_failures() {
            let s = std::rc::Rc::downgrade(&state);
            pe.on_node_failure(move |_pe, _f| {
                if let Some(s) = s.upgrade() {
                    let waiting = std::mem::take(&mut s.borrow_mut().waiting);
                    for w in waiting {
                        w.wake();
                    }
                }
            });
        }
        Inbox { h, state }
    }

    /// The handler to send to (on any PE: it is registered everywhere).
    pub fn handler(&self) -> HandlerId {
        self.h
    }

    /// Messages held, not received yet.
    pub fn len(&self) -> usize {
        self.state.borrow().arrived.len()
    }

    /// Whether no message is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next message, whoever sent it.
    pub fn recv(&self) -> Recv<fn(&Message) -> bool> {
        self.recv_matching(|_| true)
    }

    /// The next message from PE `src` (others stay held, in order, for other receives). In
    /// report mode, once `src`'s node is out of the job and nothing from it is held, the
    /// receive ends with [`CallError::PeDied`] instead of waiting for ever.
    pub fn recv_from(&self, src: usize) -> Recv<impl Fn(&Message) -> bool> {
        Recv {
            state: self.state.clone(),
            pred: move |m: &Message| m.src_pe() as usize == src,
            from: Some(src),
        }
    }

    /// The oldest held message for which `pred` is true (others stay held, in order).
    pub fn recv_matching<P: Fn(&Message) -> bool>(&self, pred: P) -> Recv<P> {
        Recv {
            state: self.state.clone(),
            pred,
            from: None,
        }
    }

    /// The oldest held message for which `pred` is true, if one is held now.
    pub fn try_recv_matching(&self, pred: impl Fn(&Message) -> bool) -> Option<Message> {
        let mut st = self.state.borrow_mut();
        let i = st.arrived.iter().position(pred)?;
        st.arrived.remove(i)
    }
}

/// The future of the [`Inbox`] receives. Dropped, it takes nothing.
#[must_use = "a future does nothing unless awaited"]
pub struct Recv<P> {
    state: Rc<RefCell<State>>,
    pred: P,
    /// The one PE it waits on (`recv_from`): its death ends the wait.
    from: Option<usize>,
}

impl<P> std::fmt::Debug for Recv<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recv").finish_non_exhaustive()
    }
}

impl<P: Fn(&Message) -> bool> Future for Recv<P> {
    /// The message; an error only for [`Inbox::recv_from`] a PE that died.
    type Output = Result<Message, CallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.state.borrow_mut();
        if let Some(i) = st.arrived.iter().position(&self.pred) {
            if let Some(m) = st.arrived.remove(i) {
                return Poll::Ready(Ok(m));
            }
        }
        if let Some(src) = self.from {
            let dead = if crate::in_task() {
                crate::with_pe(|pe| (!pe.is_alive(src)).then(|| pe.node_of(src)))
            } else {
                None
            };
            if let Some(node) = dead {
                return Poll::Ready(Err(CallError::PeDied {
                    pe: src,
                    reason: format!("node {node} is out of the job"),
                }));
            }
        }
        // Once per task: a receive polled again (or one dropped and made anew) does not pile
        // up wakers.
        if !st.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            st.waiting.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
