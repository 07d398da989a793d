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

use crate::communicator::Communicator;
use crate::error::TbonError;
use crate::events::{run_callbacks, Event, EventKind, Events};
use crate::filter::{builtin, Filter, FilterId, FilterState, TopologyLocalInfo, TFILTER_NULL};
use crate::packet::Packet;
use crate::perf::{Aggregate, Context, Counters, Report};
use crate::protocol::{Ctl, Req};
use crate::stream::{FilterType, StreamSpec, FIRST_USER_STREAM};
use crate::sync::{SyncMode, Synchronizer};
use crate::topology::{Rank, Topology};
use converse::Message;
use converse::{HandlerId, Pe};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// The tag of the packet that stands for a wave a filter failed on (below the first
/// application tag, so no program can send one).
const WAVE_FAILED_TAG: i32 = i32::MIN + 1;

/// Which way a filter works.
#[derive(Clone, Copy)]
enum Dir {
    Up,
    Down,
}

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

/// A child of this process.
#[derive(Debug, Clone)]
pub(crate) struct Child {
    pub pe: usize,
    pub rank: Rank,
    /// Back-end ranks below it.
    pub be: Range<Rank>,
}

/// This process's place in the tree, known once the plan has come.
pub(crate) struct Place {
    pub topo: Rc<Topology>,
    pub pes: Rc<[usize]>,
    pub role: Role,
    pub info: TopologyLocalInfo,
    pub parent_pe: Option<usize>,
    pub children: Vec<Child>,
}

/// One stream on one process.
pub(crate) struct StreamState {
    pub endpoints: Rc<[Rank]>,
    /// Indices into `Place::children` of the children taking part, in order.
    pub kids: Vec<usize>,
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
}

impl Drop for StreamState {
    /// Filters whose state is not Rust-owned (loaded ones) free it, however the stream ends.
    fn drop(&mut self) {
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
    waiting: usize,
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
    /// Packets dropped because they did not decode or named no stream here.
    pub refused: u64,
    /// Per-stream data notification descriptors (MRNet's `Stream::get_DataNotificationFd`).
    pub stream_fds: HashMap<u32, nix::sys::eventfd::EventFd>,
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
            refused: 0,
            stream_fds: HashMap::new(),
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

    // ----- the plan -----

    /// Take the plan, and pass it (`raw`) on down the tree: the connections it opens, from
    /// each parent to its children, are the ones the tree's traffic uses.
    fn take_plan(
        &mut self,
        pe: &mut Pe,
        tree: Vec<(crate::topology::ProcName, Option<usize>)>,
        pes: Vec<usize>,
        raw: &[u8],
    ) {
        if self.place.is_some() {
            return;
        }
        let Some(topo) = Topology::from_parents(tree) else {
            self.abandoned = Some("the front-end sent a tree that is not breadth-first".into());
            return;
        };
        if pes.len() != topo.num_nodes() || pes.iter().any(|&p| p >= pe.num_pes()) {
            self.abandoned = Some("the front-end sent a plan for other PEs".into());
            return;
        }
        let me = pes.iter().position(|&p| p == pe.my_pe());
        let place = match me {
            None => Place {
                topo: Rc::new(topo),
                pes: pes.into(),
                role: Role::Spare,
                info: TopologyLocalInfo::default(),
                parent_pe: None,
                children: Vec::new(),
            },
            Some(i) => {
                let n = &topo.nodes()[i];
                let role = if i == 0 {
                    Role::FrontEnd
                } else if n.num_children() == 0 {
                    Role::BackEnd
                } else {
                    Role::Internal
                };
                let children: Vec<Child> = n
                    .children()
                    .iter()
                    .map(|&c| Child {
                        pe: pes[c],
                        rank: topo.nodes()[c].rank(),
                        be: topo.nodes()[c].backend_ranks(),
                    })
                    .collect();
                let info = TopologyLocalInfo {
                    rank: n.rank(),
                    parent: n.parent().map(|p| topo.nodes()[p].rank()),
                    children: children.iter().map(|c| c.rank).collect(),
                    num_backends_below: n.backend_ranks().len(),
                    num_nodes: topo.num_nodes(),
                    num_backends: topo.num_backends(),
                    depth: n.depth(),
                };
                Place {
                    parent_pe: n.parent().map(|p| pes[p]),
                    children,
                    role,
                    info,
                    topo: Rc::new(topo),
                    pes: pes.into(),
                }
            }
        };
        let spare = place.role == Role::Spare;
        for c in &place.children {
            pe.send(c.pe, self.h.ctl, raw);
        }
        if place.role == Role::FrontEnd {
            // PEs outside the tree learn that they are spares straight from the front-end.
            let used: std::collections::HashSet<usize> = place.pes.iter().copied().collect();
            for p in (0..pe.num_pes()).filter(|p| !used.contains(p)) {
                pe.send(p, self.h.ctl, raw);
            }
        }
        self.place = Some(place);
        if !spare {
            self.maybe_ready(pe);
        }
    }

    /// Report up once this process and every child are in.
    fn maybe_ready(&mut self, pe: &mut Pe) {
        let Some(place) = &self.place else { return };
        if self.ready || self.ready_from < place.children.len() {
            return;
        }
        self.ready = true;
        match place.parent_pe {
            Some(parent) => pe.send(parent, self.h.ctl, &Ctl::Ready.encode()),
            None => {
                let n = place.topo.num_nodes();
                self.event(
                    EventKind::NetworkReady,
                    None,
                    None,
                    format!("all {n} processes of the network are in"),
                );
            }
        }
    }

    /// Messages held until the plan, to run now.
    pub(crate) fn take_early(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.early)
    }

    // ----- streams -----

    /// The state of a stream on this process, made from its spec.
    fn make_stream(
        &mut self,
        endpoints: Rc<[Rank]>,
        spec: &StreamSpec,
    ) -> Result<StreamState, String> {
        let (rank, kids) = {
            let place = self.place.as_ref().ok_or("no plan yet")?;
            let kids = place
                .children
                .iter()
                .enumerate()
                .filter(|(_, c)| intersects(&endpoints, &c.be))
                .map(|(i, _)| i)
                .collect::<Vec<_>>();
            (place.info.rank, kids)
        };
        let (up_id, down_id) = (spec.up.get(rank), spec.down.get(rank));
        let up = self
            .filter(up_id)
            .ok_or_else(|| format!("filter {up_id} is not loaded here"))?;
        let down = self
            .filter(down_id)
            .ok_or_else(|| format!("filter {down_id} is not loaded here"))?;
        let mode = SyncMode::from_id(spec.sync.get(rank)).unwrap_or_default();
        let sync = Synchronizer::new(mode, kids.len());
        Ok(StreamState {
            endpoints,
            kids,
            up,
            up_id,
            down,
            down_id,
            sync,
            up_state: None,
            down_state: None,
            up_params: None,
            down_params: None,
            perf: Counters::default(),
            closed: false,
            timer: false,
        })
    }

    /// Make stream `id` here and pass its creation on to the children taking part.
    pub(crate) fn open_stream(
        &mut self,
        pe: &mut Pe,
        id: u32,
        endpoints: Vec<Rank>,
        spec: StreamSpec,
    ) {
        let endpoints: Rc<[Rank]> = endpoints.into();
        let st = match self.make_stream(endpoints.clone(), &spec) {
            Ok(st) => st,
            Err(why) => {
                // Nothing of this stream will work here; the front-end hears why.
                let null =
                    StreamSpec::homogeneous(TFILTER_NULL, SyncMode::WaitForAll, TFILTER_NULL);
                self.report_error(pe, id, why, EventKind::FilterLoadFailed);
                match self.make_stream(endpoints.clone(), &null) {
                    Ok(st) => st,
                    Err(_) => return,
                }
            }
        };
        let ctl = Ctl::NewStream {
            id,
            endpoints: endpoints.to_vec(),
            spec,
        }
        .encode();
        self.to_kids(pe, &st.kids, &ctl);
        self.streams.insert(id, st);
    }

    /// Send a control message to some children (indices into the place's children).
    fn to_kids(&self, pe: &mut Pe, kids: &[usize], body: &[u8]) {
        let Some(place) = &self.place else { return };
        for &k in kids {
            pe.send(place.children[k].pe, self.h.ctl, body);
        }
    }

    fn close_stream(&mut self, pe: &mut Pe, id: u32) {
        let role = self.role();
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        if st.closed {
            return;
        }
        st.closed = true;
        // Packets held for a wave are for nobody now.
        let mut held = Vec::new();
        st.sync.drain(&mut held);
        st.up.clone().drop_state(&mut st.up_state);
        st.down.clone().drop_state(&mut st.down_state);
        let kids = st.kids.clone();
        self.to_kids(pe, &kids, &Ctl::Close { id }.encode());
        if role == Role::Internal {
            // The front-end and back-ends keep theirs: the program may still ask about it.
            // (Its filters' state was freed above; dropping it frees nothing twice.)
            self.streams.remove(&id);
        }
    }

    fn set_params(&mut self, pe: &mut Pe, id: u32, which: FilterType, bytes: Vec<u8>) {
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        let kids = st.kids.clone();
        match Packet::from_wire(&bytes) {
            Ok(p) => match which {
                FilterType::UpstreamSync => {
                    let ms = timeout_ms(&p);
                    st.sync.set_timeout(Duration::from_millis(ms));
                }
                FilterType::UpstreamTrans => st.up_params = Some(p),
                FilterType::DownstreamTrans => st.down_params = Some(p),
            },
            Err(e) => {
                let why = format!("filter parameters for stream {id}: {e}");
                self.refuse(pe, Some(id), why);
                return;
            }
        }
        let ctl = Ctl::Params {
            id,
            which,
            packet: bytes,
        }
        .encode();
        self.to_kids(pe, &kids, &ctl);
    }

    // ----- data -----

    /// A packet comes down to this process.
    pub(crate) fn on_down(&mut self, pe: &mut Pe, msg: Message) {
        let p = match Packet::from_message(msg) {
            Ok(p) => p,
            Err(e) => return self.refuse(pe, None, format!("a packet coming down: {e}")),
        };
        let sid = p.stream_id();
        let Some(place) = &self.place else { return };
        if place.role == Role::BackEnd {
            if !self.streams.contains_key(&sid) {
                if sid != place.info.rank {
                    return self.refuse(
                        pe,
                        Some(sid),
                        format!("a packet for stream {sid}, unknown here"),
                    );
                }
                self.open_singlecast(sid);
            }
            if let Some(st) = self.streams.get_mut(&sid) {
                st.perf.count(Context::Recv, 1, p.data_len() as u64);
            }
            return self.deliver(sid, p);
        }
        if sid < FIRST_USER_STREAM && !self.streams.contains_key(&sid) {
            // A back-end's singlecast stream: towards the child that has it, unfiltered.
            let target = place.children.iter().position(|c| c.be.contains(&sid));
            if let Some(k) = target {
                let pe_k = place.children[k].pe;
                pe.send_msg(pe_k, self.h.down, p.into_message(&[]));
            }
            return;
        }
        let dests: Vec<Rank> = if p.has_route() {
            p.route().collect()
        } else {
            Vec::new()
        };
        let Some(st) = self.streams.get_mut(&sid) else {
            return self.refuse(
                pe,
                Some(sid),
                format!("a packet for stream {sid}, unknown here"),
            );
        };
        st.perf.count(Context::Recv, 1, p.data_len() as u64);
        self.downstream(pe, sid, p, &dests);
    }

    /// Run the downstream filter on `p` and send what it gives down (and back up).
    fn downstream(&mut self, pe: &mut Pe, sid: u32, p: Packet, dests: &[Rank]) {
        let Some(st) = self.streams.get_mut(&sid) else {
            return;
        };
        if st.down_id == TFILTER_NULL {
            return self.route_down(pe, sid, p, dests);
        }
        let mut input = std::mem::take(&mut self.wave);
        input.push(p);
        let (mut out, mut rev) = (std::mem::take(&mut self.out), std::mem::take(&mut self.rev));
        let result = self.apply(sid, Dir::Down, &mut input, &mut out, &mut rev);
        input.clear();
        self.wave = input;
        if let Err(e) = result {
            self.report_error(pe, sid, e, EventKind::FilterFailed);
        }
        for mut q in out.drain(..) {
            q.set_stream_id(sid);
            self.route_down(pe, sid, q, dests);
        }
        for mut q in rev.drain(..) {
            q.set_stream_id(sid);
            self.send_up(pe, sid, q);
        }
        self.out = out;
        self.rev = rev;
    }

    /// Run stream `sid`'s filter of direction `dir` on `input`.
    fn apply(
        &mut self,
        sid: u32,
        dir: Dir,
        input: &mut Vec<Packet>,
        out: &mut Vec<Packet>,
        rev: &mut Vec<Packet>,
    ) -> Result<(), String> {
        // Disjoint fields: the place's info is lent while the stream is borrowed mutably.
        let (Some(place), Some(st)) = (&self.place, self.streams.get_mut(&sid)) else {
            return Ok(());
        };
        let (f, state, params) = match dir {
            Dir::Up => (st.up.clone(), &mut st.up_state, st.up_params.as_ref()),
            Dir::Down => (st.down.clone(), &mut st.down_state, st.down_params.as_ref()),
        };
        run_filter(
            &*f,
            input,
            out,
            rev,
            state,
            params,
            &place.info,
            &mut st.perf,
        )
    }

    /// Send a packet to the children of the stream that lead to `dests` (all: empty).
    fn route_down(&mut self, pe: &mut Pe, sid: u32, p: Packet, dests: &[Rank]) {
        let (Some(place), Some(st)) = (&self.place, self.streams.get_mut(&sid)) else {
            return;
        };
        let mut targets = st
            .kids
            .iter()
            .map(|&k| &place.children[k])
            .filter(|c| dests.is_empty() || dests.iter().any(|d| c.be.contains(d)));
        let Some(mut cur) = targets.next() else {
            return;
        };
        st.perf.count(Context::Send, 1, p.data_len() as u64);
        // Every child but the last gets a copy; the last gets the message itself.
        let msg = p.into_message(dests);
        for next in targets {
            pe.send_msg(cur.pe, self.h.down, msg.clone());
            cur = next;
        }
        pe.send_msg(cur.pe, self.h.down, msg);
    }

    /// A packet from a child comes up to this process.
    pub(crate) fn on_up(&mut self, pe: &mut Pe, msg: Message, weak: &Weak<RefCell<Node>>) {
        let src = msg.src_pe() as usize;
        let p = match Packet::from_message(msg) {
            Ok(p) => p,
            Err(e) => {
                return self.refuse(pe, None, format!("a packet coming up from PE {src}: {e}"))
            }
        };
        let sid = p.stream_id();
        let Some(place) = &self.place else { return };
        let Some(child) = place.children.iter().position(|c| c.pe == src) else {
            return self.refuse(
                pe,
                Some(sid),
                format!("a packet from PE {src}, not a child"),
            );
        };
        if sid < FIRST_USER_STREAM && !self.streams.contains_key(&sid) {
            // Singlecast: straight on up, unfiltered.
            return self.send_up(pe, sid, p);
        }
        let Some(st) = self.streams.get_mut(&sid).filter(|st| !st.closed) else {
            // A stream closed while its packets were on their way up: they are for nobody.
            self.refused += 1;
            return;
        };
        let Some(slot) = st.kids.iter().position(|&k| k == child) else {
            return self.refuse(
                pe,
                Some(sid),
                format!("a packet on stream {sid} from a child not in it"),
            );
        };
        let bytes = p.data_len() as u64;
        st.perf.count(Context::Recv, 1, bytes);
        st.perf.count(Context::SyncFilterIn, 1, bytes);
        let more = p.more();
        let mut wave = std::mem::take(&mut self.wave);
        if st.sync.push(slot, p, more, &mut wave) {
            self.wave_up(pe, sid, &mut wave);
        } else if let Some(due) = st.sync.deadline() {
            if !st.timer {
                st.timer = true;
                self.arm(pe, sid, due, weak);
            }
        }
        wave.clear();
        self.wave = wave;
    }

    fn arm(&self, pe: &mut Pe, sid: u32, due: Instant, weak: &Weak<RefCell<Node>>) {
        let weak = weak.clone();
        let delay = due.saturating_duration_since(Instant::now());
        pe.after(delay, move |pe| {
            if let Some(node) = weak.upgrade() {
                node.borrow_mut().on_timer(pe, sid, &weak);
                after_handler(&node);
            }
        });
    }

    fn on_timer(&mut self, pe: &mut Pe, sid: u32, weak: &Weak<RefCell<Node>>) {
        let Some(st) = self.streams.get_mut(&sid) else {
            return;
        };
        st.timer = false;
        let mut wave = std::mem::take(&mut self.wave);
        if st.sync.poll(Instant::now(), &mut wave) {
            self.wave_up(pe, sid, &mut wave);
        }
        wave.clear();
        self.wave = wave;
        if let Some(st) = self.streams.get_mut(&sid) {
            if let (Some(due), false) = (st.sync.deadline(), st.timer) {
                st.timer = true;
                self.arm(pe, sid, due, weak);
            }
        }
    }

    /// Run the upstream filter on a wave; send what it gives up (and back down).
    fn wave_up(&mut self, pe: &mut Pe, sid: u32, wave: &mut Vec<Packet>) {
        let Some(st) = self.streams.get_mut(&sid) else {
            return;
        };
        if st.perf.any() {
            let bytes: u64 = wave.iter().map(|p| p.data_len() as u64).sum();
            st.perf
                .count(Context::SyncFilterOut, wave.len() as u64, bytes);
        }
        if st.up_id == TFILTER_NULL {
            // The wave goes on as one batch.
            let last = wave.len().saturating_sub(1);
            for (i, p) in wave.drain(..).enumerate() {
                self.send_up_batch(pe, sid, p, i < last);
            }
            return;
        }
        // A wave that failed below stays one failed wave, so waves above stay aligned.
        if let Some(i) = wave.iter().position(|p| p.tag() == WAVE_FAILED_TAG) {
            let marker = wave.swap_remove(i);
            wave.clear();
            return self.send_up(pe, sid, marker);
        }
        let (mut out, mut rev) = (std::mem::take(&mut self.out), std::mem::take(&mut self.rev));
        let result = self.apply(sid, Dir::Up, wave, &mut out, &mut rev);
        wave.clear();
        if let Err(e) = result {
            // The parent still gets one packet for this wave: a marker saying it failed.
            out.clear();
            rev.clear();
            let rank = self.my_rank();
            match Packet::new(sid, WAVE_FAILED_TAG, "%ud %s", (rank, e.as_str())) {
                Ok(m) => out.push(m),
                Err(_) => self.report_error(pe, sid, e, EventKind::FilterFailed),
            }
        }
        let last = out.len().saturating_sub(1);
        for (i, mut q) in out.drain(..).enumerate() {
            q.set_stream_id(sid);
            self.send_up_batch(pe, sid, q, i < last);
        }
        for mut q in rev.drain(..) {
            q.set_stream_id(sid);
            self.route_down(pe, sid, q, &[]);
        }
        self.out = out;
        self.rev = rev;
    }

    /// Send a packet to the parent, or (at the front-end) to the program.
    pub(crate) fn send_up(&mut self, pe: &mut Pe, sid: u32, p: Packet) {
        self.send_up_batch(pe, sid, p, false);
    }

    /// As [`send_up`](Node::send_up), `more` saying whether another packet of the same batch
    /// (the output of one wave) follows.
    fn send_up_batch(&mut self, pe: &mut Pe, sid: u32, p: Packet, more: bool) {
        let Some(place) = &self.place else { return };
        match place.parent_pe {
            Some(parent) => {
                if let Some(st) = self.streams.get_mut(&sid) {
                    st.perf.count(Context::Send, 1, p.data_len() as u64);
                }
                pe.send_msg(parent, self.h.up, p.into_message_with(&[], more));
            }
            None => self.deliver(sid, p),
        }
    }

    /// A packet for the program on this process.
    fn deliver(&mut self, sid: u32, p: Packet) {
        if p.tag() == WAVE_FAILED_TAG {
            let (rank, why): (Rank, String) = p
                .unpack("%ud %s")
                .unwrap_or((Rank::MAX, "a filter failed".into()));
            return self.record_error(sid, rank, why, EventKind::FilterFailed);
        }
        if let Some(fd) = self.stream_fds.get(&sid) {
            // A failed write loses a wake-up (the counter is full), never the packet.
            let _ = fd.write(1);
        }
        if self.events.data_wanted() {
            let rank = p.src_rank();
            let tag = p.tag();
            self.event(
                EventKind::PacketArrived,
                Some(sid),
                Some(rank),
                format!("a packet with tag {tag}"),
            );
        }
        self.inbox.push(sid, p);
    }

    /// A back-end's own singlecast stream, made on first use.
    pub(crate) fn open_singlecast(&mut self, sid: u32) {
        let spec = StreamSpec::homogeneous(TFILTER_NULL, SyncMode::DontWait, TFILTER_NULL);
        if let Ok(st) = self.make_stream(vec![sid].into(), &spec) {
            self.streams.insert(sid, st);
        }
    }

    /// The front-end sends `p` down stream `sid` to `dests` (all its end-points: empty).
    pub(crate) fn fe_send(&mut self, pe: &mut Pe, sid: u32, p: Packet, dests: &[Rank]) {
        if sid < FIRST_USER_STREAM && !self.streams.contains_key(&sid) {
            let Some(place) = &self.place else { return };
            if let Some(c) = place.children.iter().find(|c| c.be.contains(&sid)) {
                pe.send_msg(c.pe, self.h.down, p.into_message(&[]));
            }
            return;
        }
        self.downstream(pe, sid, p, dests);
    }

    // ----- control -----

    pub(crate) fn on_ctl(&mut self, pe: &mut Pe, msg: &Message) {
        let Some(ctl) = Ctl::decode(msg.payload()) else {
            return self.refuse(
                pe,
                None,
                format!(
                    "a control message from PE {} that does not decode",
                    msg.src_pe()
                ),
            );
        };
        match ctl {
            Ctl::Plan { tree, pes } => self.take_plan(pe, tree, pes, msg.payload()),
            Ctl::Abandon { reason } => self.abandoned = Some(reason),
            Ctl::Ready => {
                self.ready_from += 1;
                self.maybe_ready(pe);
            }
            Ctl::NewStream {
                id,
                endpoints,
                spec,
            } => {
                if self.role() == Role::BackEnd {
                    let spec0 =
                        StreamSpec::homogeneous(TFILTER_NULL, SyncMode::DontWait, TFILTER_NULL);
                    if let Ok(st) = self.make_stream(endpoints.into(), &spec0) {
                        self.streams.insert(id, st);
                    }
                } else {
                    self.open_stream(pe, id, endpoints, spec);
                }
            }
            Ctl::Close { id } => self.close_stream(pe, id),
            Ctl::Params { id, which, packet } => self.set_params(pe, id, which, packet),
            Ctl::Request { req, scope, what } => self.on_request(pe, req, scope, what),
            Ctl::Ack {
                req,
                errors,
                report,
            } => self.on_ack(pe, req, errors, report),
            Ctl::Error {
                stream,
                rank,
                reason,
                kind,
            } => match self.place.as_ref().and_then(|p| p.parent_pe) {
                Some(parent) => pe.send(parent, self.h.ctl, msg.payload()),
                None => self.record_error(stream, rank, reason, kind),
            },
        }
    }

    /// Do a request here, pass it to the children in scope, and acknowledge when they have.
    pub(crate) fn on_request(&mut self, pe: &mut Pe, req: u32, scope: Option<u32>, what: Req) {
        let rank = self.my_rank();
        let mut errors = Vec::new();
        let mut report = Report::Nothing;
        let mut how = Aggregate::Concat;
        let kids: Vec<usize> = match scope {
            Some(sid) => self
                .streams
                .get(&sid)
                .map(|s| s.kids.clone())
                .unwrap_or_default(),
            None => (0..self.place.as_ref().map_or(0, |p| p.children.len())).collect(),
        };
        match &what {
            Req::Load { id, path, name } => match crate::dynfilter::load(path, name) {
                Ok(f) => {
                    self.filters.insert(*id, (name.clone(), Rc::new(f)));
                }
                Err(e) => {
                    self.event(EventKind::FilterLoadFailed, None, Some(rank), e.clone());
                    errors.push((rank, e));
                }
            },
            Req::Shutdown => {
                self.shut_down = true;
                self.event(
                    EventKind::ShutDown,
                    None,
                    None,
                    "the front-end shut the network down".into(),
                );
            }
            Req::PerfSet { metric, ctx, on } => {
                for (_, st) in self.scoped(scope) {
                    st.perf.set(*metric, *ctx, *on);
                }
            }
            Req::PerfCollect {
                metric,
                ctx,
                how: h,
            } => {
                how = *h;
                if let Some(v) = self
                    .scoped(scope)
                    .next()
                    .map(|(_, st)| st.perf.take(*metric, *ctx))
                {
                    report = Report::one(rank, v, how);
                }
            }
            Req::PerfPrint { metric, ctx } => {
                let lines: Vec<String> = self
                    .scoped(scope)
                    .map(|(id, st)| {
                        format!(
                            "tbon: rank {rank} stream {id} {} {}: {}",
                            metric.name(),
                            ctx.name(),
                            st.perf.take(*metric, *ctx)
                        )
                    })
                    .collect();
                for l in lines {
                    eprintln!("{l}");
                }
            }
        }
        let pending = Pending {
            waiting: kids.len(),
            errors,
            report,
            how,
        };
        if kids.is_empty() {
            return self.finish_request(pe, req, pending);
        }
        let body = Ctl::Request { req, scope, what }.encode();
        self.to_kids(pe, &kids, &body);
        self.requests.insert(req, pending);
    }

    /// The streams a request's scope names here (one stream, or all).
    fn scoped(&mut self, scope: Option<u32>) -> impl Iterator<Item = (&u32, &mut StreamState)> {
        self.streams
            .iter_mut()
            .filter(move |(id, _)| scope.is_none_or(|s| s == **id))
    }

    fn on_ack(&mut self, pe: &mut Pe, req: u32, errors: Vec<(Rank, String)>, report: Report) {
        let Some(p) = self.requests.get_mut(&req) else {
            return self.refuse(
                pe,
                None,
                format!("an acknowledgement of request {req}, not in progress"),
            );
        };
        p.errors.extend(errors);
        let how = p.how;
        p.report.merge(report, how);
        p.waiting = p.waiting.saturating_sub(1);
        if p.waiting == 0 {
            if let Some(p) = self.requests.remove(&req) {
                self.finish_request(pe, req, p);
            }
        }
    }

    fn finish_request(&mut self, pe: &mut Pe, req: u32, p: Pending) {
        match self.place.as_ref().and_then(|pl| pl.parent_pe) {
            Some(parent) => {
                let ack = Ctl::Ack {
                    req,
                    errors: p.errors,
                    report: p.report,
                };
                pe.send(parent, self.h.ctl, &ack.encode());
            }
            None => {
                self.outcomes.insert(
                    req,
                    Outcome {
                        errors: p.errors,
                        report: p.report,
                        how: p.how,
                    },
                );
            }
        }
    }

    /// How many back-ends the tree has (0 before the plan arrived).
    pub(crate) fn num_backends(&self) -> usize {
        self.place.as_ref().map_or(0, |p| p.topo.num_backends())
    }

    /// The broadcast communicator's end-points.
    pub(crate) fn all_backends(&self) -> Communicator {
        Communicator::all(self.num_backends())
    }
}

/// Run a filter on a wave, checking the formats it takes and timing it when asked.
#[allow(clippy::too_many_arguments)]
fn run_filter(
    f: &dyn Filter,
    input: &mut Vec<Packet>,
    out: &mut Vec<Packet>,
    rev: &mut Vec<Packet>,
    state: &mut FilterState,
    params: Option<&Packet>,
    info: &TopologyLocalInfo,
    perf: &mut Counters,
) -> Result<(), String> {
    if let Some(fmt) = f.format() {
        if let Some(bad) = input.iter().find(|p| !p.has_format(fmt)) {
            return Err(format!(
                "the filter takes \"{fmt}\", but a packet from rank {} holds \"{}\"",
                bad.src_rank(),
                bad.format_string()
            ));
        }
    }
    if perf.any() {
        let bytes: u64 = input.iter().map(|p| p.data_len() as u64).sum();
        perf.count(Context::FilterIn, input.len() as u64, bytes);
    }
    let timing = perf
        .timing()
        .then(|| (Instant::now(), crate::perf::thread_cpu()));
    let r = f.run(input, out, rev, state, params, info).map_err(|e| e.0);
    if let Some((start, cpu)) = timing {
        perf.filter_ran(start, cpu);
    }
    if perf.any() {
        let bytes: u64 = out.iter().map(|p| p.data_len() as u64).sum();
        perf.count(Context::FilterOut, out.len() as u64, bytes);
    }
    r
}

/// Whether a sorted list of ranks has one in `r`.
fn intersects(sorted: &[Rank], r: &Range<Rank>) -> bool {
    let i = sorted.partition_point(|&x| x < r.start);
    sorted.get(i).is_some_and(|&x| x < r.end)
}

/// The timeout a synchronization-parameters packet gives, in milliseconds (any one integer).
fn timeout_ms(p: &Packet) -> u64 {
    match p.values().first().and_then(crate::codec::Value::as_f64) {
        Some(v) if v > 0.0 => v as u64,
        _ => 0,
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
enum Kind {
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

fn run_one(n: &mut Node, pe: &mut Pe, msg: Message, kind: Kind, weak: &Weak<RefCell<Node>>) {
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
    fn range_intersection() {
        let eps = [1, 4, 9];
        assert!(intersects(&eps, &(0..2)));
        assert!(!intersects(&eps, &(2..4)));
        assert!(intersects(&eps, &(2..5)));
        assert!(!intersects(&eps, &(10..20)));
        assert!(!intersects(&[], &(0..5)));
    }

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
