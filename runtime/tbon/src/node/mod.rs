//! One process of the tree, as runtime handlers: what it does with packets coming down and
//! going up, with control messages, and with the timers of timeout synchronization.
//!
//! Three handlers per PE: `tbon.down` (a packet towards the back-ends), `tbon.up` (a packet
//! towards the front-end; the runtime stamps which child sent it) and `tbon.ctl` (control, see
//! `protocol.rs`). Their state is one [`Node`] behind an `Rc<RefCell<_>>`, shared with the
//! [`Network`](crate::Network) the program holds; handlers never run while the program holds a
//! borrow, since both run on the PE's one thread and the program borrows only between
//! scheduler calls.
//!
//! **Routing.** Back-end ranks are consecutive within each subtree, so a process sends a
//! downstream packet to each child whose range holds one of the packet's destinations (the
//! stream's end-points, or the packet's own subset), with a range check per child. The
//! message that came in is the one that goes on: the last child gets it, the others a copy
//! each, and its destination trailer is rewritten in place.
//!
//! **Order.** The runtime keeps messages between two PEs in order, so a stream's creation
//! reaches every process before its first packet, and its closing after its last.
//!
//! This file holds the node's state and the handlers' way in; what the node does is in one
//! file per concern: `plan.rs` (its place in the tree), `streams.rs` (opening, closing and
//! parameters), `data.rs` (packets down and up, waves, filters) and `control.rs` (requests and
//! their acknowledgements).

mod attached;
mod control;
mod data;
mod plan;
mod recover;
mod singlecast;
mod streams;

pub use attached::EXT_QUEUE_BYTES;
pub(crate) use attached::{endpoints, listen};
pub(crate) use recover::{lost_wave, Recovery};

use crate::builtin::builtin;
use crate::communicator::Communicator;
use crate::error::TbonError;
use crate::events::{run_callbacks, Event, EventKind, Events};
use crate::filter::{Filter, FilterId, FilterState, TopologyLocalInfo};
use crate::packet::Packet;
use crate::perf::{Aggregate, Counters, Report};
use crate::protocol::Ctl;
use crate::stream::{StreamSpec, FIRST_USER_STREAM};
use crate::sync::Synchronizer;
use crate::topology::{Rank, Topology};
use converse::Message;
use converse::{HandlerId, Pe};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::rc::{Rc, Weak};

/// What a process is in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The root.
    FrontEnd,
    /// Neither root nor leaf.
    Internal,
    /// A leaf: an end-point of streams.
    BackEnd,
    /// A PE the tree does not use.
    Spare,
}

/// The overlay's handler ids on this PE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers {
    pub down: HandlerId,
    pub up: HandlerId,
    pub ctl: HandlerId,
}

/// The back-end ranks below a child: a range while they are consecutive (every tree made
/// from a topology, so routing is a range check), the exact ranks once back-ends attached
/// under ranks of their own choosing.
#[derive(Debug, Clone)]
pub(crate) enum BeSet {
    Range(Range<Rank>),
    Exact(Rc<[Rank]>),
}

impl BeSet {
    /// Node `i`'s back-ends in `topo`.
    pub(crate) fn of(topo: &Topology, i: usize) -> BeSet {
        match topo.backend_ranks_exact(i) {
            Some(v) => BeSet::Exact(v.into()),
            None => BeSet::Range(topo.nodes()[i].backend_ranks()),
        }
    }

    pub(crate) fn contains(&self, r: &Rank) -> bool {
        match self {
            BeSet::Range(x) => x.contains(r),
            BeSet::Exact(v) => v.binary_search(r).is_ok(),
        }
    }

    /// Whether any of `sorted` is in the set.
    pub(crate) fn meets(&self, sorted: &[Rank]) -> bool {
        match self {
            BeSet::Range(r) => {
                let i = sorted.partition_point(|&x| x < r.start);
                sorted.get(i).is_some_and(|&x| x < r.end)
            }
            BeSet::Exact(v) => {
                // Both sorted: a merge walk.
                let (mut a, mut b) = (0, 0);
                while a < sorted.len() && b < v.len() {
                    match sorted[a].cmp(&v[b]) {
                        std::cmp::Ordering::Less => a += 1,
                        std::cmp::Ordering::Greater => b += 1,
                        std::cmp::Ordering::Equal => return true,
                    }
                }
                false
            }
        }
    }
}

/// A PE that is no PE: the entry of an attached back-end in a plan's table of PEs (it is a
/// process outside the job, reached through its connection).
pub(crate) const NO_PE: usize = usize::MAX;

/// A child of this process.
#[derive(Debug, Clone)]
pub(crate) struct Child {
    /// Its PE ([`NO_PE`] for an attached back-end).
    pub pe: usize,
    /// An attached back-end: its connection to this process.
    pub ext: Option<converse_endpoint::Peer>,
    pub rank: Rank,
    /// Back-end ranks below it.
    pub be: BeSet,
    /// Adopted after a failure and not yet heard from (its `Adopted`): nothing is routed to
    /// it until then, so what it missed reaches it first, in order.
    pub adopting: bool,
}

/// This process's place in the tree, known once the plan has come.
pub(crate) struct Place {
    /// The tree as it is now (after failures, without the processes that died).
    pub topo: Rc<Topology>,
    /// The tree as it was made: `pes` is by its node indices.
    pub orig: Rc<Topology>,
    pub pes: Rc<[usize]>,
    pub role: Role,
    pub info: TopologyLocalInfo,
    pub parent_pe: Option<usize>,
    pub children: Vec<Child>,
}

/// One stream on one process.
pub(crate) struct StreamState {
    pub endpoints: Rc<[Rank]>,
    /// How it was made (given again to a process adopted after a failure that missed it).
    spec: StreamSpec,
    /// Its filter parameters as set, in order (given again likewise).
    params: Vec<(crate::stream::FilterType, Vec<u8>)>,
    /// Indices into `Place::children` of the children taking part, in order.
    pub kids: Vec<usize>,
    /// The synchronizer's slot of each of `kids` (the same index until a failure).
    slots: Vec<usize>,
    /// The child rank of each synchronizer slot.
    slot_rank: Vec<Rank>,
    /// Front-end, failure recovery off: the process whose death broke the stream.
    pub failed: Option<Rank>,
    /// Front-end: the sequence number of the last packet sent down.
    down_seq: u32,
    /// The highest sequence number seen coming down.
    down_seen: u32,
    /// Batches sent up.
    pub up_sent: u64,
    /// Packets sent down lately (with recovery on, where a child is internal): what an
    /// orphaned subtree may have missed, to give it again.
    window: VecDeque<(u32, Message)>,
    /// Payload bytes held in `window`.
    window_bytes: usize,
    /// A child of this stream is an internal process: with recovery on, what goes down is
    /// kept in `window` for its orphans, should it die.
    internal_kid: bool,
    /// A synchronization filter of the program's (its id at least
    /// [`FIRST_USER_FILTER`](crate::FIRST_USER_FILTER)): run on each packet as it comes (the
    /// synchronizer does not wait), it holds packets in its state and gives the waves the
    /// transformation filter sees.
    sync_filter: Option<Rc<dyn Filter>>,
    sync_state: FilterState,
    sync_params: Option<Packet>,
    up: Rc<dyn Filter>,
    up_id: FilterId,
    down: Rc<dyn Filter>,
    down_id: FilterId,
    sync: Synchronizer,
    up_state: FilterState,
    down_state: FilterState,
    up_params: Option<Packet>,
    down_params: Option<Packet>,
    pub perf: Counters,
    pub closed: bool,
    timer: bool,
    /// Exported filter state from a child (`Ctl::State`) waiting for the batches that child
    /// sent before it to be taken into waves: (its slot, the count of its batches taken that
    /// releases it, the packets).
    pending_states: Vec<(usize, u64, Vec<Packet>)>,
}

impl StreamState {
    /// A packet numbered `seq` comes down: whether it is new here (then it is counted as
    /// seen). One given twice across a re-parenting (the dead parent's and the new parent's
    /// replay) is not; an unnumbered one (0) always is.
    fn first_sight(&mut self, seq: u32) -> bool {
        if seq == 0 {
            return true;
        }
        if seq < self.down_seen {
            return false;
        }
        self.down_seen = seq;
        true
    }

    /// As [`first_sight`](Self::first_sight), where every packet has a number of its own (a
    /// back-end's singlecast stream, numbered by the front-end, no filter on the way): one
    /// given again after a re-connection is not new even if it was the last seen.
    fn first_sight_once(&mut self, seq: u32) -> bool {
        if seq == 0 {
            return true;
        }
        if seq <= self.down_seen {
            return false;
        }
        self.down_seen = seq;
        true
    }
}

impl Drop for StreamState {
    /// Filters whose state is not Rust-owned (loaded ones) free it, however the stream ends.
    fn drop(&mut self) {
        if let Some(f) = &self.sync_filter {
            f.drop_state(&mut self.sync_state);
        }
        self.up.drop_state(&mut self.up_state);
        self.down.drop_state(&mut self.down_state);
    }
}

/// Packets delivered to the program, per stream, numbered in arrival order so that a receive
/// on any stream takes the oldest: it looks at each stream's first packet (programs have few
/// streams), which keeps delivery free of any structure that allocates per packet.
#[derive(Default)]
pub(crate) struct Inbox {
    by_stream: HashMap<u32, VecDeque<(u64, Packet)>>,
    seq: u64,
    /// Packets held, over all streams.
    len: usize,
}

impl Inbox {
    fn push(&mut self, stream: u32, p: Packet) {
        self.seq += 1;
        self.len += 1;
        self.by_stream
            .entry(stream)
            .or_default()
            .push_back((self.seq, p));
    }

    pub(crate) fn pop(&mut self, stream: u32) -> Option<Packet> {
        let (_, p) = self.by_stream.get_mut(&stream)?.pop_front()?;
        self.len -= 1;
        Some(p)
    }

    pub(crate) fn pop_any(&mut self) -> Option<(u32, Packet)> {
        let stream = self
            .by_stream
            .iter()
            .filter_map(|(s, q)| q.front().map(|(seq, _)| (*seq, *s)))
            .min()?
            .1;
        self.pop(stream).map(|p| (stream, p))
    }

    pub(crate) fn has(&self, stream: u32) -> bool {
        self.by_stream.get(&stream).is_some_and(|q| !q.is_empty())
    }

    pub(crate) fn has_any(&self) -> bool {
        self.len > 0
    }
}

/// A request in progress at this process: acknowledgements expected from children.
struct Pending {
    /// Ranks of the children whose acknowledgement has not come (a child that dies is taken
    /// off, so no request waits for the dead).
    waiting: Vec<Rank>,
    errors: Vec<(Rank, String)>,
    report: Report,
    how: Aggregate,
}

/// What a finished request gave the front-end.
pub(crate) struct Outcome {
    pub errors: Vec<(Rank, String)>,
    pub report: Report,
    pub how: Aggregate,
}

/// The overlay's state on one PE.
pub(crate) struct Node {
    pub h: Handlers,
    pub place: Option<Place>,
    /// Why the front-end could not make the network, if it could not.
    pub abandoned: Option<String>,
    /// Messages that came before the plan, in order, with their handler.
    early: Vec<Message>,
    pub streams: HashMap<u32, StreamState>,
    pub inbox: Inbox,
    pub filters: HashMap<FilterId, (String, Rc<dyn Filter>)>,
    pub events: Events,
    pub data_events: bool,
    ready_from: usize,
    pub ready: bool,
    pub shut_down: bool,
    requests: HashMap<u32, Pending>,
    pub outcomes: HashMap<u32, Outcome>,
    pub next_stream: u32,
    pub next_req: u32,
    pub next_filter: FilterId,
    /// Filter failures per stream, for the front-end's next receive on it.
    pub failures: HashMap<u32, VecDeque<TbonError>>,
    /// Streams whose closing or failure the front-end's any-stream receive has reported
    /// (once each).
    pub told_any: std::collections::BTreeSet<u32>,
    /// Packets dropped because they did not decode or named no stream here.
    pub refused: u64,
    /// Per-stream data notification descriptors (MRNet's `Stream::get_DataNotificationFd`).
    pub stream_fds: HashMap<u32, nix::sys::eventfd::EventFd>,
    /// Failure recovery: what died, what waits for re-connection.
    pub recovery: Recovery,
    /// Front-end, failure recovery: singlecast packets kept for back-ends below an internal
    /// process.
    single: singlecast::Singlecasts,
    /// Attach mode: the secret, a leaf's listener and its attached back-ends.
    pub attach: attached::AttachState,
    /// Scratch vectors reused for every wave, so a wave allocates no vector.
    wave: Vec<Packet>,
    out: Vec<Packet>,
    rev: Vec<Packet>,
}

impl Node {
    pub(crate) fn new(h: Handlers) -> Node {
        Node {
            h,
            place: None,
            abandoned: None,
            early: Vec::new(),
            streams: HashMap::new(),
            inbox: Inbox::default(),
            filters: HashMap::new(),
            events: Events::default(),
            data_events: false,
            ready_from: 0,
            ready: false,
            shut_down: false,
            requests: HashMap::new(),
            outcomes: HashMap::new(),
            next_stream: FIRST_USER_STREAM,
            next_req: 1,
            next_filter: crate::filter::FIRST_USER_FILTER,
            failures: HashMap::new(),
            told_any: std::collections::BTreeSet::new(),
            refused: 0,
            stream_fds: HashMap::new(),
            recovery: Recovery::default(),
            single: singlecast::Singlecasts::default(),
            attach: attached::AttachState::default(),
            wave: Vec::new(),
            out: Vec::new(),
            rev: Vec::new(),
        }
    }

    /// The filter with id `id`, if known here.
    pub(crate) fn filter(&mut self, id: FilterId) -> Option<Rc<dyn Filter>> {
        if let Some((_, f)) = self.filters.get(&id) {
            return Some(f.clone());
        }
        let f = builtin(id)?;
        let name = crate::filter::BUILTIN_NAMES
            .get(id as usize)
            .copied()
            .unwrap_or("?");
        self.filters.insert(id, (name.to_owned(), f.clone()));
        Some(f)
    }

    pub(crate) fn role(&self) -> Role {
        self.place.as_ref().map_or(Role::Spare, |p| p.role)
    }

    fn my_rank(&self) -> Rank {
        self.place.as_ref().map_or(Rank::MAX, |p| p.info.rank)
    }

    /// This process's rank (`Rank::MAX` before the plan).
    pub(crate) fn my_rank_pub(&self) -> Rank {
        self.my_rank()
    }

    /// Record an event (and wake whoever waits on its descriptor).
    pub(crate) fn event(
        &mut self,
        kind: EventKind,
        stream: Option<u32>,
        rank: Option<Rank>,
        msg: String,
    ) {
        self.events.push(Event {
            kind,
            stream,
            rank,
            message: msg,
        });
    }

    /// A packet or message that cannot be used: counted, and the front-end told.
    fn refuse(&mut self, pe: &mut Pe, stream: Option<u32>, why: String) {
        self.refused += 1;
        self.report_error(
            pe,
            stream.unwrap_or(u32::MAX),
            why,
            EventKind::PacketRefused,
        );
    }

    /// A failure on `stream` here: the front-end records it for the stream's next receive
    /// and raises an error event; other processes send it up.
    fn report_error(&mut self, pe: &mut Pe, stream: u32, reason: String, kind: EventKind) {
        tracing::debug!(target: "tbon", stream, ?kind, "error: {reason}");
        let rank = self.my_rank();
        match self.place.as_ref().and_then(|p| p.parent_pe) {
            Some(parent) => {
                let ctl = Ctl::Error {
                    stream,
                    rank,
                    reason,
                    kind,
                };
                pe.send(parent, self.h.ctl, &ctl.encode());
            }
            None => self.record_error(stream, rank, reason, kind),
        }
    }

    fn record_error(&mut self, stream: u32, rank: Rank, reason: String, kind: EventKind) {
        if kind == EventKind::FilterFailed && self.streams.contains_key(&stream) {
            self.failures
                .entry(stream)
                .or_default()
                .push_back(TbonError::Filter {
                    stream,
                    rank,
                    reason: reason.clone(),
                });
        }
        let s = (stream != u32::MAX).then_some(stream);
        self.event(kind, s, Some(rank), reason);
    }

    /// The back-end ranks of the tree as made and as grown (attached back-ends), dead ones
    /// included: the ranks a communicator may name.
    pub(crate) fn backend_ranks(&self) -> Rc<[Rank]> {
        let Some(place) = &self.place else {
            return Rc::from(Vec::new());
        };
        let o = &place.orig;
        o.backends().iter().map(|&i| o.nodes()[i].rank()).collect()
    }

    /// Whether `rank` is a back-end of the tree (dead or alive).
    pub(crate) fn is_backend(&self, rank: Rank) -> bool {
        self.place.as_ref().is_some_and(|p| {
            rank < crate::topology::FIRST_INTERNAL_RANK && p.orig.find_rank(rank).is_some()
        })
    }

    /// The broadcast communicator's end-points: every back-end alive.
    pub(crate) fn all_backends(&self) -> Communicator {
        let mut c = Communicator::all(self.backend_ranks());
        if self.recovery.any_dead() {
            c.retain(|r| !self.recovery.dead().contains(&r));
        }
        c
    }
}

/// After a handler: run the event callbacks it caused, with no borrow of the node held (a
/// callback may register or remove callbacks).
pub(crate) fn after_handler(node: &Rc<RefCell<Node>>) {
    loop {
        let taken = node.borrow_mut().events.take_calls();
        let Some((events, mut cbs)) = taken else {
            return;
        };
        run_callbacks(&events, &mut cbs);
        let mut n = node.borrow_mut();
        let data = n.data_events;
        n.events.restore(cbs, data);
    }
}

/// Register the overlay's handlers on `pe` and make its node.
pub(crate) fn install(pe: &mut Pe) -> Result<Rc<RefCell<Node>>, TbonError> {
    if pe.handler("tbon.down").is_some() {
        return Err(TbonError::AlreadyAttached);
    }
    let cell: Rc<RefCell<Option<Rc<RefCell<Node>>>>> = Rc::new(RefCell::new(None));
    let c = cell.clone();
    let down = pe.register("tbon.down", move |pe, msg| {
        if let Some(node) = c.borrow().as_ref() {
            dispatch(pe, node, msg, Kind::Down);
        }
    });
    let c = cell.clone();
    let up = pe.register("tbon.up", move |pe, msg| {
        if let Some(node) = c.borrow().as_ref() {
            dispatch(pe, node, msg, Kind::Up);
        }
    });
    let c = cell.clone();
    let ctl = pe.register("tbon.ctl", move |pe, msg| {
        if let Some(node) = c.borrow().as_ref() {
            dispatch(pe, node, msg, Kind::Ctl);
        }
    });
    let node = Rc::new(RefCell::new(Node::new(Handlers { down, up, ctl })));
    *cell.borrow_mut() = Some(node.clone());
    Ok(node)
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Down,
    Up,
    Ctl,
}

/// Run one message on the node: held until the plan (but the plan itself), then in order.
fn dispatch(pe: &mut Pe, node: &Rc<RefCell<Node>>, msg: Message, kind: Kind) {
    {
        let mut n = node.borrow_mut();
        let first = msg.payload().first().copied();
        let is_plan = matches!(kind, Kind::Ctl)
            && (first == Some(crate::protocol::PLAN_TAG)
                || first == Some(crate::protocol::ABANDON_TAG));
        if n.place.is_none() && !is_plan {
            n.early.push(msg);
            return;
        }
        let weak = Rc::downgrade(node);
        run_one(&mut n, pe, msg, kind, &weak);
        if is_plan && n.place.is_some() {
            let early = n.take_early();
            let h = n.h;
            for m in early {
                let k = if m.handler() == h.down.raw() {
                    Kind::Down
                } else if m.handler() == h.up.raw() {
                    Kind::Up
                } else {
                    Kind::Ctl
                };
                run_one(&mut n, pe, m, k, &weak);
            }
        }
    }
    after_handler(node);
}

pub(super) fn run_one(
    n: &mut Node,
    pe: &mut Pe,
    msg: Message,
    kind: Kind,
    weak: &Weak<RefCell<Node>>,
) {
    match kind {
        Kind::Down => n.on_down(pe, msg),
        Kind::Up => n.on_up(pe, msg, weak),
        Kind::Ctl => n.on_ctl(pe, &msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_keeps_both_orders_without_leaking() {
        let mut i = Inbox::default();
        let p = |v: i32| Packet::new(1, 100, "%d", v).unwrap_or_else(|e| panic!("{e}"));
        i.push(1, p(1));
        i.push(2, p(2));
        i.push(1, p(3));
        assert_eq!(i.pop(1).and_then(|p| p.unpack::<i32>("%d").ok()), Some(1));
        assert_eq!(i.pop_any().map(|(s, _)| s), Some(2));
        assert_eq!(i.pop_any().map(|(s, _)| s), Some(1));
        assert!(!i.has_any());
        for k in 0..1000 {
            i.push(1, p(k));
            i.push(2, p(k));
            i.pop(1);
        }
        assert_eq!(i.len, 1000);
        assert_eq!(i.pop_any().map(|(s, _)| s), Some(2));
    }
}
