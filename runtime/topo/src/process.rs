//! A process of an attached topology: [`attach`], the [`Topo`] handle, the three runtime
//! handlers every message of the topology goes through, and point to point.
//!
//! State lives in one `Rc<RefCell<State>>` per topology per PE, shared by the handle and the
//! handlers. Nothing of the program is ever called while it is borrowed: handlers collect the
//! program's callbacks in a list and run them after, so a callback may call the topology
//! again (or block in it).

use crate::collective::Collectives;
use crate::error::TopoError;
use crate::mutex::MutexState;
use crate::topology::Topology;
use crate::trace::Hop;
use crate::vclock::{merge_tick, VectorTime};
use crate::wire::{self, Header, Kind, VISUAL};
use converse::{HandlerId, Message, Pe};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable that turns `visual` on for every call of a whole run (any value
/// but `0` or empty), as the per-call [`Topo::set_visual`] does for chosen calls.
pub const VISUAL_ENV: &str = "CONVERSE_TOPO_VISUAL";

/// Callbacks to run once the state is no longer borrowed.
pub(crate) type Later = Vec<Box<dyn FnOnce(&mut Pe)>>;

/// The handlers of one attached topology.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers {
    pub p2p: HandlerId,
    pub coll: HandlerId,
    pub ctl: HandlerId,
}

/// A received point-to-point message: who sent it, the bytes, the sender's vector time.
pub struct Received {
    from: usize,
    data: Payload,
}

impl Received {
    /// The process that sent it.
    pub fn from(&self) -> usize {
        self.from
    }

    /// The bytes sent.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The bytes, owned.
    pub fn into_payload(self) -> Payload {
        self.data
    }

    /// The sender's vector time when it sent the message.
    pub fn sent_at(&self) -> VectorTime {
        self.data.sent_at()
    }
}

impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("from", &self.from)
            .field("len", &self.data.len())
            .finish()
    }
}

/// Bytes that arrived in a message, in place (no copy out of the message they came in).
pub struct Payload {
    msg: Message,
    n: usize,
    range: std::ops::Range<usize>,
}

impl Payload {
    /// The whole body of `msg`.
    pub(crate) fn new(msg: Message, n: usize) -> Payload {
        let range = wire::body_at(n)..msg.payload_len();
        Payload { msg, n, range }
    }

    /// Part of `msg`'s payload.
    pub(crate) fn part(msg: Message, n: usize, range: std::ops::Range<usize>) -> Payload {
        Payload { msg, n, range }
    }

    /// A copy of the bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        (**self).to_vec()
    }

    /// The vector time the message carried.
    pub fn sent_at(&self) -> VectorTime {
        VectorTime(wire::vc_entries(self.msg.payload(), self.n).collect())
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.msg.payload()[self.range.clone()]
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

/// Whom a receive takes a message from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The first message from anyone (the seed's `CM_ANY`).
    Any,
    /// The first message from this process.
    Id(usize),
}

impl From<usize> for Source {
    fn from(id: usize) -> Source {
        Source::Id(id)
    }
}

impl Source {
    fn matches(self, from: usize) -> bool {
        match self {
            Source::Any => true,
            Source::Id(i) => i == from,
        }
    }
}

type Receiver = Rc<dyn Fn(&mut Pe, Received)>;

/// Point-to-point state.
#[derive(Default)]
pub(crate) struct P2p {
    mailbox: VecDeque<Received>,
    last_sender: Option<usize>,
    receiver: Option<Receiver>,
    sends: u32,
}

/// One process's state in one topology.
pub(crate) struct State {
    pub topo: Rc<Topology>,
    pub me: usize,
    pub n: usize,
    pub h: Handlers,
    pub vc: Vec<u64>,
    pub visual_all: bool,
    pub visual_next: bool,
    pub hops: Vec<Hop>,
    p2p: P2p,
    pub coll: Collectives,
    pub mutex: MutexState,
    /// Report mode: a process of the topology died; every call that talks along it fails
    /// with this (see `failure`).
    pub lost: Option<TopoError>,
}

impl State {
    /// Tick for a send and return the time to stamp on it.
    pub(crate) fn tick(&mut self) -> &[u64] {
        self.vc[self.me] += 1;
        &self.vc
    }

    /// A receive of a message carrying `payload`'s vector time.
    pub(crate) fn receive_time(&mut self, payload: &[u8]) {
        merge_tick(&mut self.vc, wire::vc_entries(payload, self.n), self.me);
    }

    /// Whether the call being made now records its hops.
    pub(crate) fn visual_now(&self) -> bool {
        self.visual_all || self.visual_next
    }

    /// The PE of process `id`.
    pub(crate) fn pe_of(&self, id: usize) -> usize {
        self.topo.pe_of(id).unwrap_or(0)
    }

    /// Record a hop if its message asks for it.
    pub(crate) fn record(&mut self, h: &Header, op: &str, to: usize, msg: &Message) {
        if h.flags & VISUAL == 0 {
            return;
        }
        let time_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.hops.push(Hop {
            op: op.to_owned(),
            seq: h.seq,
            root: if h.kind == Kind::P2p {
                h.src as usize
            } else {
                h.dst as usize
            },
            from: self.me,
            to,
            bytes: msg.payload_len().saturating_sub(wire::body_at(self.n)),
            time_ns,
            vc: VectorTime(wire::vc_entries(msg.payload(), self.n).collect()),
        });
    }

    /// Send `msg` one hop, to neighbour (or self) `to`, or to a collective's tree child (a
    /// neighbour unless the tree is not [over the channels](crate::Tree::over_channels)).
    pub(crate) fn hop(&mut self, pe: &mut Pe, h: HandlerId, to: usize, msg: Message) {
        pe.send_msg(self.pe_of(to), h, msg);
    }

    fn on_p2p(&mut self, pe: &mut Pe, msg: Message, later: &mut Later) {
        let h = match Header::read(msg.payload(), self.n) {
            Ok(h) => h,
            Err(e) => {
                return converse::input::error_line(&format!(
                    "converse-topo: process {}: {e}",
                    self.me
                ))
            }
        };
        let dst = h.dst as usize;
        if dst != self.me {
            // A routed hop: passed on as it is, the very message, with the sender's time.
            let Some(next) = self.topo.next_hop(self.me, dst) else {
                return;
            };
            self.record(&h, "send", next, &msg);
            let to = self.pe_of(next);
            pe.forward(to, msg);
            return;
        }
        self.receive_time(msg.payload());
        let r = Received {
            from: h.src as usize,
            data: Payload::new(msg, self.n),
        };
        match self.p2p.receiver.clone() {
            Some(f) => {
                self.p2p.last_sender = Some(r.from);
                later.push(Box::new(move |pe| f(pe, r)));
            }
            None => self.p2p.mailbox.push_back(r),
        }
    }

    fn on_ctl(&mut self, pe: &mut Pe, msg: Message, later: &mut Later) {
        let h = match Header::read(msg.payload(), self.n) {
            Ok(h) => h,
            Err(e) => {
                return converse::input::error_line(&format!(
                    "converse-topo: process {}: {e}",
                    self.me
                ))
            }
        };
        match h.kind {
            Kind::MutexRequest | Kind::MutexToken => {
                self.receive_time(msg.payload());
                self.on_mutex(pe, h, later);
            }
            _ => {
                let body = &msg.payload()[wire::body_at(self.n)..];
                self.on_coll_ctl(pe, h, body, later);
            }
        }
    }

    fn take(&mut self, from: Source) -> Option<Received> {
        let i = self.p2p.mailbox.iter().position(|r| from.matches(r.from))?;
        let r = self.p2p.mailbox.remove(i)?;
        self.p2p.last_sender = Some(r.from);
        Some(r)
    }
}

/// A process's handle on an attached topology: cheap to clone, usable from the start function
/// and from handlers. Every call takes the PE (`&mut Pe`), as the runtime's own calls do.
///
/// Calls come in two styles. Message-driven: `…_then(pe, …, callback)` returns at once and the
/// callback runs when the result is there. Blocking, as the seed's: the plain name runs the
/// scheduler (other handlers included) until the result is there, as
/// [`Pe::barrier`](converse::Pe::barrier) does.
#[derive(Clone)]
pub struct Topo {
    pub(crate) st: Rc<RefCell<State>>,
}

impl std::fmt::Debug for Topo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.st.borrow();
        f.debug_struct("Topo")
            .field("shape", s.topo.shape())
            .field("id", &s.me)
            .field("n", &s.n)
            .finish()
    }
}

/// Lay `topology` over the job this PE belongs to.
///
/// Every PE of the job calls it, in its start function before it first schedules, with the
/// same topology (and attaches its topologies in the same order): it registers the
/// topology's three handlers (`topo.N.p2p`, `topo.N.coll`, `topo.N.ctl` for the N-th
/// topology attached) on every PE, as the runtime requires. Processes need no start-up
/// exchange: each computes the same routes and trees from the same topology. Returns `None`
/// on a PE the topology does not use ([`Topology::on_pes`]).
///
/// ```no_run
/// use converse_topo::{attach, Topology};
/// converse::run(|pe| {
///     let n = pe.num_pes();
///     let t = attach(pe, Topology::ring(n).unwrap()).unwrap().unwrap();
///     let me = t.id();
///     t.send(pe, (me + 1) % n, format!("hello from {me}").as_bytes()).unwrap();
///     let r = t.recv(pe, (me + n - 1) % n).unwrap();
///     println!("{me} got '{}'", String::from_utf8_lossy(r.data()));
///     t.barrier(pe).unwrap();
///     pe.exit(0);
/// });
/// ```
///
/// # Errors
/// [`TopoError::Placement`] when the topology names a PE the job does not have.
pub fn attach(pe: &mut Pe, topology: Topology) -> Result<Option<Topo>, TopoError> {
    if let Some(bad) = topology.pes().iter().find(|&&p| p >= pe.num_pes()) {
        return Err(TopoError::Placement(format!(
            "the topology places a process on PE {bad}, but the job has {} PEs",
            pe.num_pes()
        )));
    }
    let instance = (0..)
        .find(|i| pe.handler(&format!("topo.{i}.p2p")).is_none())
        .unwrap_or(0);
    let cell: Rc<RefCell<Option<Rc<RefCell<State>>>>> = Rc::new(RefCell::new(None));
    let mk = |what: &'static str| {
        let c = cell.clone();
        move |pe: &mut Pe, msg: Message| {
            let st = c.borrow().clone();
            if let Some(st) = st {
                dispatch(pe, &st, msg, what);
            }
        }
    };
    let h = Handlers {
        p2p: pe.register(&format!("topo.{instance}.p2p"), mk("p2p")),
        coll: pe.register(&format!("topo.{instance}.coll"), mk("coll")),
        ctl: pe.register(&format!("topo.{instance}.ctl"), mk("ctl")),
    };
    let Some(me) = topology.id_of_pe(pe.my_pe()) else {
        return Ok(None);
    };
    let n = topology.len();
    let visual_all = std::env::var(VISUAL_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
    let topo = Rc::new(topology);
    let mutex = MutexState::new(&topo, me);
    let st = Rc::new(RefCell::new(State {
        topo,
        me,
        n,
        h,
        vc: vec![0; n],
        visual_all,
        visual_next: false,
        hops: Vec::new(),
        p2p: P2p::default(),
        coll: Collectives::default(),
        mutex,
        lost: None,
    }));
    *cell.borrow_mut() = Some(st.clone());
    // The look for slow collectives (see `collective`): one timer per topology.
    let weak = Rc::downgrade(&st);
    pe.every(crate::collective::VERIFY_AFTER, move |pe| {
        if let Some(st) = weak.upgrade() {
            if let Ok(mut s) = st.try_borrow_mut() {
                s.look_for_slow_calls(pe);
            }
        }
    });
    if pe.survives_node_failures() {
        let weak = Rc::downgrade(&st);
        pe.on_node_failure(move |pe, f| {
            let Some(st) = weak.upgrade() else {
                return;
            };
            let mut later: Later = Vec::new();
            match st.try_borrow_mut() {
                Ok(mut s) => s.on_node_failure(f, &mut later),
                // Never while the state is borrowed: nothing borrowing it runs the scheduler.
                Err(_) => converse::input::error_line(&format!(
                    "converse-topo: PE {}: missed node {}'s death (the topology was busy)",
                    pe.my_pe(),
                    f.node
                )),
            }
            for g in later {
                g(pe);
            }
        });
    }
    Ok(Some(Topo { st }))
}

/// Run one message of the topology, then the program's callbacks it made due.
fn dispatch(pe: &mut Pe, st: &Rc<RefCell<State>>, msg: Message, what: &str) {
    let mut later: Later = Vec::new();
    {
        let mut s = st.borrow_mut();
        match what {
            "p2p" => s.on_p2p(pe, msg, &mut later),
            "coll" => s.on_coll(pe, msg, &mut later),
            _ => s.on_ctl(pe, msg, &mut later),
        }
    }
    for f in later {
        f(pe);
    }
}

impl Topo {
    /// This process's id in the topology (the seed's `myID`).
    pub fn id(&self) -> usize {
        self.st.borrow().me
    }

    /// Number of processes in the topology.
    pub fn len(&self) -> usize {
        self.st.borrow().n
    }

    /// Never true: a topology has at least one process.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The topology (for its queries: neighbours, coordinates, shift, distance, trees).
    pub fn topology(&self) -> Rc<Topology> {
        self.st.borrow().topo.clone()
    }

    /// This process's neighbours.
    pub fn neighbours(&self) -> Vec<usize> {
        let s = self.st.borrow();
        s.topo.neighbours(s.me).to_vec()
    }

    /// This process's coordinates (grids, tori, lines, rings).
    pub fn coords(&self) -> Option<Vec<usize>> {
        let s = self.st.borrow();
        s.topo.coords(s.me)
    }

    /// The process `disp` steps from this one along dimension `dim` (see
    /// [`Topology::shift`]).
    pub fn shift(&self, dim: usize, disp: isize) -> Option<usize> {
        let s = self.st.borrow();
        s.topo.shift(s.me, dim, disp)
    }

    /// Hops from this process to `other`.
    pub fn distance(&self, other: usize) -> usize {
        let s = self.st.borrow();
        s.topo.distance(s.me, other)
    }

    /// This process's vector time now.
    pub fn vector_time(&self) -> VectorTime {
        VectorTime(self.st.borrow().vc.clone())
    }

    /// Record the hops of the calls made from now on (`true`) or stop (`false`): the seed's
    /// per-call `visual` argument. A collective is recorded on every process it reaches when
    /// its root's call (for broadcast and scatter) or the process's own call (for the others)
    /// had it on. [`VISUAL_ENV`] turns it on for the whole run.
    pub fn set_visual(&self, on: bool) {
        self.st.borrow_mut().visual_next = on;
    }

    /// The hops this process recorded so far.
    pub fn hops(&self) -> Vec<Hop> {
        self.st.borrow().hops.clone()
    }

    /// Send a copy of `data` to process `dest`: directly to a neighbour, routed hop by hop
    /// along a shortest path to any other. Does not wait. Messages from one process to
    /// another arrive in the order sent, however many hops they take.
    ///
    /// # Errors
    /// [`TopoError::NoSuchProcess`]; [`TopoError::ProcessDead`] once a process of the
    /// topology is out of the job (report mode).
    pub fn send(&self, pe: &mut Pe, dest: usize, data: &[u8]) -> Result<(), TopoError> {
        let mut s = self.st.borrow_mut();
        if dest >= s.n {
            return Err(TopoError::NoSuchProcess { id: dest, n: s.n });
        }
        s.lost()?;
        let mut h = Header::new(Kind::P2p, s.me, dest);
        h.seq = s.p2p.sends;
        s.p2p.sends = s.p2p.sends.wrapping_add(1);
        if s.visual_now() {
            h.flags |= VISUAL;
        }
        let me = s.me;
        let msg = wire::message_with(&h, s.tick(), data);
        let next = s.topo.next_hop(me, dest).unwrap_or(me);
        s.record(&h, "send", next, &msg);
        let hid = s.h.p2p;
        s.hop(pe, hid, next, msg);
        Ok(())
    }

    /// Wait (running the scheduler) for a message from `from` (a process id, or
    /// [`Source::Any`]) and take it. Messages from one sender are taken in the order sent.
    ///
    /// # Errors
    /// [`TopoError::NoSuchProcess`]; [`TopoError::ProcessDead`] when no message is there and
    /// a process of the topology is out of the job (report mode), even if it is waiting
    /// already; [`TopoError::JobEnded`].
    pub fn recv(&self, pe: &mut Pe, from: impl Into<Source>) -> Result<Received, TopoError> {
        let from = from.into();
        if let Source::Id(i) = from {
            let n = self.len();
            if i >= n {
                return Err(TopoError::NoSuchProcess { id: i, n });
            }
        }
        loop {
            {
                let mut s = self.st.borrow_mut();
                if let Some(r) = s.take(from) {
                    return Ok(r);
                }
                s.lost()?;
            }
            let st = self.st.clone();
            let arrived = pe.run_until(move |_| {
                let s = st.borrow();
                s.lost.is_some() || s.p2p.mailbox.iter().any(|r| from.matches(r.from))
            });
            if !arrived {
                return Err(TopoError::JobEnded);
            }
        }
    }

    /// Take a message from `from` if one is there, without waiting.
    pub fn try_recv(&self, from: impl Into<Source>) -> Option<Received> {
        self.st.borrow_mut().take(from.into())
    }

    /// The sender of the message taken last (the seed's `GetLastSenderId`).
    pub fn last_sender(&self) -> Option<usize> {
        self.st.borrow().p2p.last_sender
    }

    /// Message-driven receiving: every point-to-point message that arrives from now on goes
    /// to `f` (in arrival order) instead of waiting for [`recv`](Self::recv); `None` goes back
    /// to receiving with `recv`.
    pub fn on_receive(&self, f: Option<impl Fn(&mut Pe, Received) + 'static>) {
        self.st.borrow_mut().p2p.receiver = f.map(|f| Rc::new(f) as Receiver);
    }
}

/// Wait, running the scheduler, until a call started with `start` hands its result to the
/// callback it is given: how every blocking call is made from its message-driven twin.
pub(crate) fn block<T: 'static>(
    pe: &mut Pe,
    start: impl FnOnce(&mut Pe, Box<dyn FnOnce(&mut Pe, Result<T, TopoError>)>),
) -> Result<T, TopoError> {
    let slot: Rc<RefCell<Option<Result<T, TopoError>>>> = Rc::new(RefCell::new(None));
    let s = slot.clone();
    start(pe, Box::new(move |_, r| *s.borrow_mut() = Some(r)));
    if slot.borrow().is_none() {
        let s = slot.clone();
        pe.run_until(move |_| s.borrow().is_some());
    }
    let r = slot.borrow_mut().take();
    r.unwrap_or(Err(TopoError::JobEnded))
}
