//! Failure recovery on one process: what it does when the runtime reports a node's death
//! (report mode), and when an orphan re-connects to it.
//!
//! **Learning of a death.** Every process of the tree registers a failure callback. When it
//! runs, the process adds the dead processes to the set it knows and recomputes the tree
//! from the one it was made with ([`Topology::without`](crate::Topology::without): orphans go
//! to their nearest surviving ancestor, in the dead one's place). The new tree depends only on
//! the set, so processes that learn of several deaths in different orders agree on it.
//!
//! - A process whose parent changed sends its new parent `Adopted`: per stream, the highest
//!   sequence number it has seen coming down and how many batches it has sent up.
//! - A process that gained children (it adopted orphans) marks them *adopting*: its
//!   synchronizer gives each a slot standing in for the dead child it descends from, whose
//!   waves are known once the orphan says how many batches it had sent; nothing is routed
//!   down to it meanwhile (the packets stay in the stream's window).
//! - Every dead child's slot stops waiting for it ([`Synchronizer::child_died`]): the batches
//!   it sent whole still count.
//! - Requests in progress stop waiting for dead children.
//! - Messages from an orphan that arrive before this process learned of the death that made
//!   it its parent are held, then run in their order once it has.
//!
//! - After `Adopted`, an orphan sends its new parent, per stream whose upstream filter
//!   exports it ([`Filter::get_state`](crate::Filter::get_state)), its filter state as a
//!   packet (`State`); each process above runs its filter on it alone, outside the
//!   synchronizer, once the batches that child sent before it are taken into waves, and
//!   passes the result on up the same way; the front-end's program receives it.
//! - What arrives of a wave lost in the failure goes to no one but a filter that exports its
//!   state: the wave's marker goes on, then what the filter gave, as state; so that state
//!   misses nothing that reached its process, and the front-end gets what came of it.
//!
//! **An orphan's `Adopted`.** The new parent gives it, in order: the streams it missed
//! (`NewStream` and their parameters), the closing of streams it still has and that are gone
//! here, and every packet of the stream's window after the last one it saw; then routes it
//! the stream's traffic as to any child, and tells the front-end (`Reparented`, an event).
//!
//! **With recovery off** the front-end is told (events), every stream through the dead process
//! fails (its receives return [`TbonError::StreamFailed`](crate::TbonError::StreamFailed)),
//! requests stop waiting for it, and nobody re-connects.
//!
//! [`Synchronizer::child_died`]: crate::Synchronizer::child_died

use super::streams::is_internal;
use super::BeSet;
use super::{run_one, Kind, Node, Place, Role};
use crate::error::TbonError;
use crate::events::EventKind;
use crate::packet::Packet;
use crate::protocol::Ctl;
use crate::stream::FIRST_USER_STREAM;
use crate::sync::Ready;
use crate::topology::Rank;
use converse::{Message, NodeFailure, Pe};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::{Rc, Weak};

/// One process's failure recovery state.
#[derive(Default)]
pub(crate) struct Recovery {
    /// Failure recovery is on (set by the front-end for the whole tree; needs report mode).
    pub on: bool,
    /// Ranks of the processes known to have died.
    dead: BTreeSet<Rank>,
    /// Messages from PEs that are not (yet) children here, in arrival order.
    held: Vec<(Kind, Message)>,
    /// Front-end: orphans not re-connected yet (MRNet's `get_OrphanNodes`).
    pub orphans: BTreeSet<Rank>,
    /// Front-end: re-connections heard of before the death that caused them.
    early: Vec<Rank>,
}

/// Most messages held from PEs that are not children yet (orphans that wrote before this
/// process learnt of the death that makes it their parent).
const HELD_MAX: usize = 1 << 16;

impl Recovery {
    /// Keep a message from a PE that is not a child here yet.
    pub(crate) fn hold(&mut self, msg: Message, kind: Kind) {
        self.held.push((kind, msg));
    }

    /// Whether any process is known to have died.
    pub(crate) fn any_dead(&self) -> bool {
        !self.dead.is_empty()
    }

    /// Count `rank` dead without the rest of a death's handling: an attached back-end this
    /// process never had in its tree.
    pub(crate) fn mark_dead(&mut self, rank: Rank) {
        self.dead.insert(rank);
    }

    /// Ranks of the processes known to have died.
    pub(crate) fn dead(&self) -> &BTreeSet<Rank> {
        &self.dead
    }
}

impl Node {
    /// Front-end: why back-end `be`'s singlecast stream can bring nothing more, if it cannot
    /// — the back-end died, or (failure recovery off) a process above it did. Singlecast
    /// streams keep no state here, so without this a receive on one waited for ever.
    pub(crate) fn singlecast_cut(&self, be: Rank) -> Option<TbonError> {
        if self.recovery.dead.contains(&be) {
            return Some(TbonError::DeadBackEnd(be));
        }
        if self.recovery.on {
            return None;
        }
        let orig = &self.place.as_ref()?.orig;
        self.recovery
            .dead
            .iter()
            .copied()
            .find(|&r| {
                orig.find_rank(r)
                    .is_some_and(|i| BeSet::of(orig, i).contains(&be))
            })
            .map(|r| TbonError::StreamFailed {
                stream: be,
                rank: r,
            })
    }

    /// A process of `dead` on this process's path to the front-end (in the tree as made), if
    /// there is one.
    fn cut_off_by(&self, dead: &[Rank]) -> Option<Rank> {
        let orig = &self.place.as_ref()?.orig;
        let nodes = orig.nodes();
        let mut at = orig.find_rank(self.my_rank())?;
        while let Some(up) = nodes[at].parent() {
            let r = nodes[up].rank();
            if dead.contains(&r) {
                return Some(r);
            }
            at = up;
        }
        None
    }

    /// Front-end, any-stream receive: a stream closed (its last back-end died) or failed
    /// (recovery off) that it has not reported yet; reported once each, after every packet
    /// and failure of the stream was taken.
    pub(crate) fn untold_end(&self) -> Option<(u32, TbonError)> {
        self.streams.iter().find_map(|(&id, st)| {
            if self.told_any.contains(&id) || self.inbox.has(id) {
                return None;
            }
            if st.closed {
                return Some((id, TbonError::StreamClosed(id)));
            }
            st.failed
                .map(|rank| (id, TbonError::StreamFailed { stream: id, rank }))
        })
    }

    /// Whether a message from PE `src` (not a child here) waits: with recovery on, it may be
    /// an orphan's, sent before this process learned of the death that makes it its parent.
    pub(super) fn held_back(&self, src: usize) -> bool {
        let Some(place) = &self.place else {
            return false;
        };
        self.recovery.on
            // Bounded: past this, a stranger's messages are refused as without recovery.
            && self.recovery.held.len() < HELD_MAX
            && place.role != Role::Spare
            && Some(src) != place.parent_pe
            && !place.children.iter().any(|c| c.pe == src)
            && self.rank_of_pe(src).is_some()
    }

    /// The rank of the tree process on PE `pe`.
    pub(crate) fn rank_of_pe(&self, pe: usize) -> Option<Rank> {
        let place = self.place.as_ref()?;
        let i = place.pes.iter().position(|&p| p == pe)?;
        Some(place.orig.nodes()[i].rank())
    }

    /// The runtime says a node died.
    pub(crate) fn on_failure(
        &mut self,
        pe: &mut Pe,
        failure: &NodeFailure,
        weak: &Weak<RefCell<Node>>,
    ) {
        let Some(place) = &self.place else {
            // Waiting for the plan: only the front-end's death is sure to mean it never
            // comes (a death on the way down is the front-end's to tell, see below).
            if failure.pes.clone().any(|p| p == 0) && self.abandoned.is_none() {
                self.abandoned = Some(format!(
                    "the front-end (PE 0) died before the network was made ({})",
                    failure.reason
                ));
            }
            return;
        };
        if place.role == Role::Spare {
            return;
        }
        let mut newly: Vec<Rank> = failure
            .pes
            .clone()
            .filter_map(|p| self.rank_of_pe(p))
            .collect();
        // Back-ends attached to a process that died went with their connection.
        newly.extend(self.attached_below(&newly));
        self.ranks_lost_at(pe, newly, &failure.reason, failure.pes.start, Some(weak));
    }

    /// Attached back-ends left (their connections ended), for `reason`: the tree is made
    /// again without them, as after a node failure with recovery on, whatever recovery's
    /// setting — in attach mode back-ends come and go while nothing of the job has died, and
    /// the streams go on over the others.
    pub(crate) fn ranks_lost(
        &mut self,
        pe: &mut Pe,
        newly: Vec<Rank>,
        reason: &str,
        weak: Option<&Weak<RefCell<Node>>>,
    ) {
        self.ranks_lost_at(pe, newly, reason, super::NO_PE, weak);
    }

    /// Processes of the tree are gone: PEs that died (`first_pe` the first of them), or
    /// attached back-ends that left (`first_pe` is `NO_PE`).
    fn ranks_lost_at(
        &mut self,
        pe: &mut Pe,
        mut newly: Vec<Rank>,
        reason: &str,
        first_pe: usize,
        weak: Option<&Weak<RefCell<Node>>>,
    ) {
        let left = first_pe == super::NO_PE;
        let Some(place) = &self.place else { return };
        if place.role == Role::Spare {
            return;
        }
        // A back-end that left may never have been taken (its attach refused or unanswered).
        newly.retain(|r| {
            !self.recovery.dead.contains(r) && (!left || place.orig.find_rank(*r).is_some())
        });
        newly.dedup();
        if newly.is_empty() {
            return;
        }
        self.recovery.dead.extend(newly.iter().copied());
        let fe = place.role == Role::FrontEnd;
        let old = place.topo.clone();
        // A leaf whose way to the front-end lost a process: what it said that way may be lost.
        // (Not `is_attach_point`: a leaf that has had a back-end has children in its tree.)
        let path_lost = if !fe && !left && !self.attach.pending_is_empty() {
            let mut at = old.find_rank(place.info.rank);
            let mut hit = None;
            while let Some(i) = at {
                let r = old.nodes()[i].rank();
                if r != place.info.rank && newly.contains(&r) {
                    hit = Some(r);
                    break;
                }
                at = old.nodes()[i].parent();
            }
            hit
        } else {
            None
        };
        if fe && !self.ready && self.abandoned.is_none() {
            // Its report would never come: the network cannot be made (attach says why).
            let on_pe = self
                .place
                .as_ref()
                .and_then(|p| {
                    p.orig
                        .find_rank(newly[0])
                        .and_then(|i| p.pes.get(i).copied())
                })
                .unwrap_or(first_pe);
            let reason = format!(
                "process {} (PE {on_pe}) died while the network was being made ({reason})",
                newly[0]
            );
            self.abandon(pe, reason);
        }
        if fe {
            let what = if self.recovery.on {
                "failure recovery re-connects its children"
            } else {
                "failure recovery is off"
            };
            for &r in &newly {
                let msg = if left {
                    format!("attached back-end {r} left: {reason}")
                } else {
                    format!("process {r} died ({reason}); {what}")
                };
                self.event(EventKind::ProcessRemoved, None, Some(r), msg);
            }
        }
        if !self.recovery.on && !left {
            if fe {
                self.fail_streams(&newly, reason);
            } else if let Some(r) = self.cut_off_by(&newly) {
                // Nothing from the front-end reaches this process again, its shutdown
                // request included: its waits end now, as a shutdown's would.
                self.attach_path_lost(pe, r, true, None);
                self.shut_down = true;
                self.event(
                    EventKind::ShutDown,
                    None,
                    Some(r),
                    format!(
                        "process {r} above this one died ({reason}) and failure recovery is off: cut off from the front-end"
                    ),
                );
            }
            self.forget_dead_in_requests(pe, &newly);
            return;
        }
        let Some(place) = self.place.take() else {
            return;
        };
        let new = if self.recovery.on {
            Rc::new(place.orig.without(&self.recovery.dead))
        } else {
            // Attached back-ends left, recovery off: the tree as it is, less them (made
            // again from every death it would re-parent orphans that never re-connect).
            let gone: std::collections::BTreeSet<Rank> = newly.iter().copied().collect();
            Rc::new(place.topo.without(&gone))
        };
        let mut fresh = Place::build(new, place.orig.clone(), place.pes.clone(), pe.my_pe());
        self.patch_children(&mut fresh, &place, true);
        let parent_changed = fresh.parent_pe != place.parent_pe;
        self.place = Some(fresh);
        let mut reconnected = Vec::new();
        if fe {
            self.single_hold(&newly);
            reconnected = self.note_orphans(&old, &newly);
            self.drop_dead_endpoints(&newly);
        }
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for &id in &ids {
            self.restream(id);
        }
        self.forget_dead_in_requests(pe, &newly);
        if parent_changed {
            self.tell_new_parent(pe);
        }
        if let Some(r) = path_lost {
            self.attach_path_lost(pe, r, false, weak);
        }
        for r in reconnected {
            self.single_release(pe, r);
        }
        if let Some(weak) = weak {
            self.replay_held(pe, weak);
        }
        for id in ids {
            self.take_ready(pe, id);
        }
    }

    /// Front-end: the network cannot be made. Told to every live process, not down the tree:
    /// those below a dead process wait for a plan that went through it, and those placed
    /// would wait for a network that is never made.
    pub(super) fn abandon(&mut self, pe: &mut Pe, reason: String) {
        let msg = Ctl::Abandon {
            reason: reason.clone(),
        }
        .encode();
        let live: Vec<usize> = (1..pe.num_pes()).filter(|&p| pe.is_alive(p)).collect();
        for p in live {
            pe.send(p, self.h.ctl, &msg);
        }
        self.abandoned = Some(reason);
    }

    /// Front-end: the live children of the processes that died are orphans until their
    /// `Reparented` comes (which may have come first).
    /// Returns the orphans whose re-connection was heard of first.
    fn note_orphans(&mut self, old: &crate::Topology, newly: &[Rank]) -> Vec<Rank> {
        let mut early = Vec::new();
        for &r in newly {
            let Some(i) = old.find_rank(r) else { continue };
            for &c in old.nodes()[i].children() {
                let cr = old.nodes()[c].rank();
                if self.recovery.dead.contains(&cr) {
                    continue;
                }
                if let Some(at) = self.recovery.early.iter().position(|&e| e == cr) {
                    self.recovery.early.swap_remove(at);
                    early.push(cr);
                } else {
                    self.recovery.orphans.insert(cr);
                }
            }
        }
        let dead = &self.recovery.dead;
        self.recovery.orphans.retain(|r| !dead.contains(r));
        early
    }

    /// Front-end: dead back-ends leave the streams they were end-points of, each with an
    /// event; a stream left with none is closed.
    fn drop_dead_endpoints(&mut self, newly: &[Rank]) {
        let mut events = Vec::new();
        for (&id, st) in &mut self.streams {
            if id < FIRST_USER_STREAM {
                continue;
            }
            let gone: Vec<Rank> = newly
                .iter()
                .copied()
                .filter(|r| !is_internal(*r) && st.endpoints.binary_search(r).is_ok())
                .collect();
            if gone.is_empty() {
                continue;
            }
            let left: Vec<Rank> = st
                .endpoints
                .iter()
                .copied()
                .filter(|r| !gone.contains(r))
                .collect();
            st.endpoints = left.into();
            let closing = st.endpoints.is_empty() && !st.closed;
            if closing {
                st.closed = true;
            }
            for r in gone {
                let msg = if closing {
                    format!("back-end {r} died: stream {id} lost its last end-point and is closed")
                } else {
                    format!("back-end {r} died: stream {id} goes on over its other end-points")
                };
                events.push((id, r, msg));
            }
        }
        for (id, r, msg) in events {
            self.event(EventKind::EndpointRemoved, Some(id), Some(r), msg);
        }
    }

    /// Front-end, recovery off: a stream made through a process already dead fails at once.
    pub(crate) fn fail_if_through_dead(&mut self) {
        if self.recovery.on || self.recovery.dead.is_empty() {
            return;
        }
        let dead: Vec<Rank> = self.recovery.dead.iter().copied().collect();
        self.fail_streams(&dead, "before the stream was made");
    }

    /// Front-end, recovery off: every stream through a dead process fails.
    fn fail_streams(&mut self, newly: &[Rank], reason: &str) {
        let Some(place) = &self.place else { return };
        let orig = place.orig.clone();
        let mut failed = Vec::new();
        for (&id, st) in &mut self.streams {
            if id < FIRST_USER_STREAM || st.closed || st.failed.is_some() {
                continue;
            }
            let hit = newly.iter().copied().find(|&r| {
                orig.find_rank(r)
                    .is_some_and(|i| BeSet::of(&orig, i).meets(&st.endpoints))
            });
            if let Some(r) = hit {
                st.failed = Some(r);
                failed.push((id, r));
            }
        }
        for (id, r) in failed {
            self.failures
                .entry(id)
                .or_default()
                .push_back(TbonError::StreamFailed {
                    stream: id,
                    rank: r,
                });
            self.event(
                EventKind::NetworkFailed,
                Some(id),
                Some(r),
                format!(
                    "process {r} died ({reason}) and failure recovery is off: stream {id} fails"
                ),
            );
        }
    }

    /// Stream `id`'s children and synchronizer slots after the tree changed.
    fn restream(&mut self, id: u32) {
        let (Some(place), Some(st)) = (&self.place, self.streams.get_mut(&id)) else {
            return;
        };
        let dead = &self.recovery.dead;
        for (slot, r) in st.slot_rank.iter().enumerate() {
            if dead.contains(r) {
                st.sync.child_died(slot);
            }
        }
        let kids: Vec<usize> = place
            .children
            .iter()
            .enumerate()
            .filter(|(_, c)| c.be.meets(&st.endpoints))
            .map(|(i, _)| i)
            .collect();
        // Attach mode: a leaf alive whose attached back-ends of the stream all left gives
        // nothing more: its slot ends as a dead child's would, or every later wave would
        // wait for it. (Safe there: the leaf's `Detached` comes after its last batch, on the
        // same channel. A PE's death is told apart from its children's messages, so in a
        // tree of PEs a child's last batch could come after its slot ended, and be lost.)
        if self.attach.secret.is_some() {
            for (slot, r) in st.slot_rank.iter().enumerate() {
                let in_stream = kids.iter().any(|&k| place.children[k].rank == *r);
                if !in_stream && !dead.contains(r) {
                    st.sync.child_died(slot);
                }
            }
        }
        let mut slots = Vec::with_capacity(kids.len());
        for &k in &kids {
            let r = place.children[k].rank;
            if let Some(s) = st.slot_rank.iter().rposition(|&x| x == r) {
                slots.push(s);
                continue;
            }
            // Adopted: it stands in for the nearest ancestor that had a slot here.
            let mut up = place.orig.parent_rank(r);
            let mut stand = usize::MAX;
            while let Some(a) = up {
                if let Some(s) = st.slot_rank.iter().rposition(|&x| x == a) {
                    stand = s;
                    break;
                }
                up = place.orig.parent_rank(a);
            }
            slots.push(st.sync.adopt(stand));
            st.slot_rank.push(r);
        }
        st.internal_kid = kids.iter().any(|&k| is_internal(place.children[k].rank));
        st.kids = kids;
        st.slots = slots;
    }

    /// This process was orphaned: tell its new parent where it is on each stream.
    fn tell_new_parent(&mut self, pe: &mut Pe) {
        let Some(place) = &self.place else { return };
        let Some(parent) = place.parent_pe else {
            return;
        };
        let mut streams: Vec<(u32, u32, u64)> = self
            .streams
            .iter()
            .filter(|(&id, _)| id >= FIRST_USER_STREAM)
            .map(|(&id, st)| (id, st.down_seen, st.up_sent))
            .collect();
        streams.sort_unstable();
        let ctl = Ctl::Adopted {
            rank: place.info.rank,
            streams,
        };
        pe.send(parent, self.h.ctl, &ctl.encode());
        // Then what its filters hold (the guide's `_get_state`), stream by stream: what it
        // took in and its dead parent never passed on is in there.
        let mut ids: Vec<u32> = self
            .streams
            .keys()
            .copied()
            .filter(|&id| id >= FIRST_USER_STREAM)
            .collect();
        ids.sort_unstable();
        for id in ids {
            // A back-end runs no filter; a filter that never ran has nothing to hand on.
            let Some(st) = self
                .streams
                .get(&id)
                .filter(|st| !st.closed && st.up_state.is_some())
            else {
                continue;
            };
            let Some(mut p) = st.up.get_state(&st.up_state, id) else {
                continue;
            };
            p.set_stream_id(id);
            p.set_src_rank(place.info.rank);
            let ctl = Ctl::State {
                stream: id,
                packets: vec![p.wire().to_vec()],
            };
            pe.send(parent, self.h.ctl, &ctl.encode());
        }
    }

    /// Run the held messages whose senders are children (or the parent) now.
    fn replay_held(&mut self, pe: &mut Pe, weak: &Weak<RefCell<Node>>) {
        if self.recovery.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.recovery.held);
        for (kind, msg) in held {
            let src = msg.src_pe() as usize;
            if self.held_back(src) {
                self.recovery.held.push((kind, msg));
            } else {
                run_one(self, pe, msg, kind, weak);
            }
        }
    }

    /// An orphan re-connected here: give it what it missed, then its share of the traffic.
    pub(super) fn on_adopted(&mut self, pe: &mut Pe, rank: Rank, known: &[(u32, u32, u64)]) {
        let h = self.h;
        let Some(place) = self.place.as_mut() else {
            return;
        };
        let Some(ci) = place.children.iter().position(|c| c.rank == rank) else {
            return;
        };
        if !place.children[ci].adopting {
            return;
        }
        place.children[ci].adopting = false;
        let (cpe, cbe) = (place.children[ci].pe, place.children[ci].be.clone());
        let my_rank = place.info.rank;
        let mut ids: Vec<u32> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        for id in &ids {
            let Some(st) = self.streams.get_mut(id) else {
                continue;
            };
            let Some(pos) = st.kids.iter().position(|&k| k == ci) else {
                continue;
            };
            if st.closed {
                continue;
            }
            let slot = st.slots[pos];
            let (seen, sent) = match known.iter().find(|(k, _, _)| k == id) {
                Some(&(_, seen, sent)) => (seen, sent),
                None => {
                    let made = Ctl::NewStream {
                        id: *id,
                        endpoints: st.endpoints.to_vec(),
                        spec: st.spec.clone(),
                    };
                    pe.send(cpe, h.ctl, &made.encode());
                    for (which, bytes) in &st.params {
                        let ctl = Ctl::Params {
                            id: *id,
                            which: *which,
                            packet: bytes.clone(),
                        };
                        pe.send(cpe, h.ctl, &ctl.encode());
                    }
                    (0, 0)
                }
            };
            st.sync.announce(slot, sent);
            for (seq, m) in &st.window {
                if *seq <= seen {
                    continue;
                }
                let wanted = Packet::from_message(m.clone()).is_ok_and(|p| {
                    let mut route = p.route().peekable();
                    route.peek().is_none() || route.any(|d| cbe.contains(&d))
                });
                if wanted {
                    pe.send_msg(cpe, h.down, m.clone());
                }
            }
        }
        for &(id, _, _) in known {
            let gone = self.streams.get(&id).is_none_or(|st| st.closed);
            if id >= FIRST_USER_STREAM && gone {
                pe.send(cpe, h.ctl, &Ctl::Close { id }.encode());
            }
        }
        match self.place.as_ref().and_then(|p| p.parent_pe) {
            Some(parent) => {
                let ctl = Ctl::Reparented {
                    rank,
                    parent: my_rank,
                };
                pe.send(parent, h.ctl, &ctl.encode());
            }
            None => self.reparented(pe, rank, my_rank),
        }
        for id in ids {
            self.take_ready(pe, id);
        }
    }

    /// A `Reparented` on its way to the front-end.
    pub(super) fn on_reparented(&mut self, pe: &mut Pe, rank: Rank, parent: Rank, msg: &Message) {
        match self.place.as_ref().and_then(|p| p.parent_pe) {
            Some(up) => pe.send(up, self.h.ctl, msg.payload()),
            None => self.reparented(pe, rank, parent),
        }
    }

    /// Front-end: orphan `rank` is connected to `parent`.
    fn reparented(&mut self, pe: &mut Pe, rank: Rank, parent: Rank) {
        if self.recovery.orphans.remove(&rank) {
            self.single_release(pe, rank);
        } else {
            self.recovery.early.push(rank);
        }
        self.event(
            EventKind::NewParent,
            None,
            Some(rank),
            format!("rank {rank} re-connected to its new parent, rank {parent}"),
        );
    }

    /// After a failure: every wave of stream `id` that can be made now (or is known lost).
    pub(super) fn take_ready(&mut self, pe: &mut Pe, id: u32) {
        loop {
            let Some(st) = self.streams.get_mut(&id) else {
                return;
            };
            if st.closed || !st.sync.recovered() {
                return;
            }
            let mut wave = std::mem::take(&mut self.wave);
            match st.sync.take_ready(&mut wave) {
                Some(Ready::Wave) => self.wave_up(pe, id, &mut wave),
                Some(Ready::Lost) => {
                    // The marker first: what the filter gives for the wave follows it.
                    self.send_lost(pe, id);
                    self.absorb(pe, id, &mut wave);
                }
                None => {
                    wave.clear();
                    self.wave = wave;
                    return self.release_states(pe, id);
                }
            }
            wave.clear();
            self.wave = wave;
        }
    }

    /// A wave lost a part in a dead process: one marker goes up in its place (at the
    /// front-end, into the inbox, where a receive finds it in the wave's place).
    fn send_lost(&mut self, pe: &mut Pe, id: u32) {
        let rank = self.my_rank();
        let why = "a part of it was in a process that died";
        if let Ok(marker) = Packet::new(id, super::data::WAVE_LOST_TAG, "%ud %s", (rank, why)) {
            self.send_up(pe, id, marker);
        }
    }

    /// Front-end: a wave of stream `id` was lost (its marker `p` goes to the inbox).
    pub(super) fn wave_lost_event(&mut self, id: u32, p: &Packet) {
        let (rank, why) = lost_reason(p);
        self.event(EventKind::WaveLost, Some(id), Some(rank), why);
    }
}

/// What a lost wave's marker says: where it was found lost, and why.
fn lost_reason(p: &Packet) -> (Rank, String) {
    p.unpack::<(Rank, String)>("%ud %s")
        .unwrap_or((Rank::MAX, "a process died".into()))
}

/// The error a receive gives for a lost wave's marker, or `None` for any other packet.
pub(crate) fn lost_wave(id: u32, p: &Packet) -> Option<TbonError> {
    if p.tag() != super::data::WAVE_LOST_TAG {
        return None;
    }
    let (rank, why) = lost_reason(p);
    Some(TbonError::WaveLost {
        stream: id,
        reason: format!("{why} (found at rank {rank})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_waves_marker_is_an_error_naming_where_and_other_packets_are_not() {
        let why = "a part of it was in a process that died";
        let marker = Packet::new(7, super::super::data::WAVE_LOST_TAG, "%ud %s", (5u32, why))
            .unwrap_or_else(|e| panic!("{e}"));
        match lost_wave(7, &marker) {
            Some(TbonError::WaveLost { stream, reason }) => {
                assert_eq!(stream, 7);
                assert!(
                    reason.contains(why) && reason.contains("rank 5"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        let data = Packet::new(7, 100, "%d", 1).unwrap_or_else(|e| panic!("{e}"));
        assert!(lost_wave(7, &data).is_none());
    }

    #[test]
    fn held_messages_keep_their_order() {
        let mut r = Recovery::default();
        assert!(!r.any_dead());
        for i in 0..3u8 {
            r.hold(Message::from_payload(&[i]), Kind::Up);
        }
        let order: Vec<u8> = r.held.iter().map(|(_, m)| m.payload()[0]).collect();
        assert_eq!(order, [0, 1, 2]);
    }
}
