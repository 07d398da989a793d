//! The distributed mutex: Raymond's tree-based token algorithm (1989) over the topology's
//! spanning tree rooted at process 0.
//!
//! One token exists; whoever holds it may enter. Every process knows only which neighbour in
//! the tree lies toward the token (`holder`) and keeps a FIFO queue of who asked it (itself or
//! a neighbour). A request travels toward the token one tree hop at a time, at most once per
//! process until answered (`asked`); the token travels back along the same hops, each process
//! handing it to the head of its queue. So there is no central server (a request goes only
//! as far as the token), exclusion holds because there is one token, and no process starves
//! because every queue is served in order.

use crate::process::{block, Later, State, Topo};
use crate::topology::Topology;
use crate::wire::{self, Header, Kind};
use crate::TopoError;
use converse::Pe;
use std::collections::VecDeque;

type Granted = Box<dyn FnOnce(&mut Pe, Result<(), TopoError>)>;

/// One process's part of the mutex.
pub(crate) struct MutexState {
    /// Toward the token: this process, or a tree neighbour.
    holder: usize,
    using: bool,
    asked: bool,
    queue: VecDeque<usize>,
    /// This process's own waiting `lock` calls, in order.
    waiting: VecDeque<Granted>,
    /// Entries so far (for tests and the bench).
    pub entries: u64,
    /// Times this process passed the token on.
    pub passes: u64,
}

impl MutexState {
    pub(crate) fn new(topo: &Topology, me: usize) -> MutexState {
        // Initially the token is at the root: everyone's holder is its parent.
        let holder = topo.tree(0).and_then(|t| t.parent(me)).unwrap_or(me);
        MutexState {
            holder,
            using: false,
            asked: false,
            queue: VecDeque::new(),
            waiting: VecDeque::new(),
            entries: 0,
            passes: 0,
        }
    }
}

impl MutexState {
    /// The topology is lost: the token may have died with the process (or be on its way to
    /// it), so nobody here passes or asks for it again, and this process's waiting calls fail.
    pub(crate) fn lose(&mut self, e: &TopoError, later: &mut Later) {
        self.queue.clear();
        self.asked = false;
        for g in self.waiting.drain(..) {
            let e = e.clone();
            later.push(Box::new(move |pe| g(pe, Err(e))));
        }
    }
}

impl State {
    fn mutex_send(&mut self, pe: &mut Pe, kind: Kind, to: usize) {
        let h = Header::new(kind, self.me, to);
        let msg = wire::message(&h, self.tick(), 0);
        let op = if kind == Kind::MutexToken {
            "mutex_token"
        } else {
            "mutex_request"
        };
        self.record(&h, op, to, &msg);
        let hid = self.h.ctl;
        self.hop(pe, hid, to, msg);
    }

    /// Give the token to the head of the queue if this process holds it unused; ask for it
    /// if someone here waits and nobody asked yet.
    fn mutex_advance(&mut self, pe: &mut Pe, later: &mut Later) {
        let me = self.me;
        if self.mutex.holder == me && !self.mutex.using {
            if let Some(head) = self.mutex.queue.pop_front() {
                self.mutex.asked = false;
                if head == me {
                    self.mutex.using = true;
                    self.mutex.entries += 1;
                    if let Some(g) = self.mutex.waiting.pop_front() {
                        later.push(Box::new(move |pe| g(pe, Ok(()))));
                    }
                } else {
                    self.mutex.holder = head;
                    self.mutex.passes += 1;
                    self.mutex_send(pe, Kind::MutexToken, head);
                }
            }
        }
        if self.mutex.holder != me && !self.mutex.queue.is_empty() && !self.mutex.asked {
            self.mutex.asked = true;
            let to = self.mutex.holder;
            self.mutex_send(pe, Kind::MutexRequest, to);
        }
    }

    pub(crate) fn on_mutex(&mut self, pe: &mut Pe, h: Header, later: &mut Later) {
        let from = h.src as usize;
        match h.kind {
            Kind::MutexRequest => self.mutex.queue.push_back(from),
            Kind::MutexToken => self.mutex.holder = self.me,
            _ => return,
        }
        if self.lost.is_some() {
            // The topology is lost (a process died): nobody is served or asked any more.
            self.mutex.queue.clear();
            return;
        }
        self.mutex_advance(pe, later);
    }
}

impl Topo {
    /// Ask for the topology's mutex (message-driven): `then` runs when this process holds
    /// it; [`unlock`](Self::unlock) gives it up. Calls of one process are granted in order.
    pub fn lock_then(
        &self,
        pe: &mut Pe,
        then: impl FnOnce(&mut Pe, Result<(), TopoError>) + 'static,
    ) {
        // Take in requests that already arrived first, so that they queue ahead of this one: a
        // process that locks and unlocks in a loop without otherwise scheduling would keep
        // the token to itself (no one else's request reaching its queue) and starve the others.
        pe.progress();
        let mut later: Later = Vec::new();
        {
            let mut s = self.st.borrow_mut();
            if let Err(e) = s.lost() {
                drop(s);
                return then(pe, Err(e));
            }
            let me = s.me;
            s.mutex.waiting.push_back(Box::new(then));
            s.mutex.queue.push_back(me);
            s.mutex_advance(pe, &mut later);
        }
        for f in later {
            f(pe);
        }
    }

    /// Take the topology's mutex, waiting (running handlers) until it is this process's.
    ///
    /// ```no_run
    /// # use converse_topo::{attach, Topology};
    /// converse::run(|pe| {
    ///     let n = pe.num_pes();
    ///     let t = attach(pe, Topology::line(n).unwrap()).unwrap().unwrap();
    ///     t.lock(pe).unwrap();
    ///     println!("process {} holds the mutex", t.id());
    ///     t.unlock(pe).unwrap();
    ///     t.barrier(pe).unwrap();
    ///     pe.exit(0);
    /// });
    /// ```
    ///
    /// # Errors
    /// [`TopoError::ProcessDead`] when a process of the topology is out of the job (report
    /// mode), whenever it died; [`TopoError::JobEnded`].
    pub fn lock(&self, pe: &mut Pe) -> Result<(), TopoError> {
        block(pe, |pe, then| self.lock_then(pe, then))
    }

    /// Give the mutex up.
    ///
    /// # Errors
    /// [`TopoError::NotHolder`] when this process does not hold it.
    pub fn unlock(&self, pe: &mut Pe) -> Result<(), TopoError> {
        let mut later: Later = Vec::new();
        {
            let mut s = self.st.borrow_mut();
            if !s.mutex.using {
                return Err(TopoError::NotHolder(s.me));
            }
            s.mutex.using = false;
            if s.lost.is_none() {
                s.mutex_advance(pe, &mut later);
            }
        }
        for f in later {
            f(pe);
        }
        Ok(())
    }

    /// Whether this process holds the mutex now.
    pub fn holds_lock(&self) -> bool {
        self.st.borrow().mutex.using
    }

    /// How many times this process entered the mutex.
    pub fn lock_entries(&self) -> u64 {
        self.st.borrow().mutex.entries
    }

    /// How many times this process passed the mutex's token to a neighbour.
    pub fn token_passes(&self) -> u64 {
        self.st.borrow().mutex.passes
    }
}
