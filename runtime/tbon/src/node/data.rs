//! Data: packets coming down (filtered, then routed by back-end range to the children) and
//! going up (grouped into waves by the stream's synchronizer, filtered, sent to the parent or
//! delivered to the front-end's inbox), and the timers of timeout synchronization.

use super::attached::send_to;
use super::{after_handler, Child, Node, Role};
use crate::events::EventKind;
use crate::filter::{Filter, FilterContext, TFILTER_NULL};
use crate::packet::Packet;
use crate::perf::{Context, Counters};
use crate::protocol::Ctl;
use crate::stream::{StreamSpec, FIRST_USER_STREAM};
use crate::sync::SyncMode;
use crate::topology::Rank;
use converse::Message;
use converse::Pe;
use std::cell::RefCell;
use std::rc::Weak;
use std::time::Instant;

/// The tag of the packet that stands for a wave a filter failed on (below the first
/// application tag, so no program can send one).
const WAVE_FAILED_TAG: i32 = i32::MIN + 1;

/// The tag of the packet that stands for a wave that lost a part in a process that died
/// (failure recovery): one batch, so waves above stay aligned.
pub(super) const WAVE_LOST_TAG: i32 = i32::MIN + 2;

/// Packets a process keeps, per stream, of what it sent down lately to children that may
/// die (internal ones): what their orphans may have missed, given to them on adoption. An
/// internal process that falls further behind than this and dies leaves its orphans
/// without the packets in between.
pub(super) const WINDOW: usize = 1024;

/// At most this many bytes of packets in a stream's window (then fewer than [`WINDOW`]
/// packets), so that large broadcasts do not pile up.
pub(super) const WINDOW_BYTES: usize = 16 << 20;

/// While a child is being adopted the window may grow to this many windows, no more.
const ADOPTING_SLACK: usize = 4;

/// Which way a filter works.
#[derive(Clone, Copy)]
enum Dir {
    Up,
    Down,
    /// The program's synchronization filter.
    Sync,
}

impl Node {
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
                // Its own singlecast stream is numbered per packet by the front-end.
                let new = if sid < FIRST_USER_STREAM {
                    st.first_sight_once(p.seq())
                } else {
                    st.first_sight(p.seq())
                };
                if !new {
                    return;
                }
                st.perf.count(Context::Recv, 1, p.data_len() as u64);
            }
            return self.deliver(sid, p);
        }
        if sid < FIRST_USER_STREAM && !self.streams.contains_key(&sid) {
            // A back-end's singlecast stream: towards the child that has it, unfiltered.
            if let Some(to) = self.single_route(sid) {
                send_to(
                    pe,
                    &self.h,
                    &self.attach,
                    to,
                    self.h.down,
                    p.into_message(&[]),
                );
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
        if !st.first_sight(p.seq()) {
            return;
        }
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
        let seq = p.seq();
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
            q.set_seq(seq);
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
            Dir::Sync => match &st.sync_filter {
                Some(f) => (f.clone(), &mut st.sync_state, st.sync_params.as_ref()),
                None => return Ok(()),
            },
        };
        let mut cx = FilterContext {
            packets_in: input,
            packets_out: out,
            packets_out_reverse: rev,
            state,
            params,
            info: &place.info,
        };
        run_filter(&*f, &mut cx, &mut st.perf)
    }

    /// Send a packet to the children of the stream that lead to `dests` (all: empty).
    fn route_down(&mut self, pe: &mut Pe, sid: u32, p: Packet, dests: &[Rank]) {
        let (Some(place), Some(st)) = (&self.place, self.streams.get_mut(&sid)) else {
            return;
        };
        // Derived, not stored: recovery may be turned on or off after the stream was made.
        let keep_window = self.recovery.on && st.internal_kid;
        let mut targets = st
            .kids
            .iter()
            .map(|&k| &place.children[k])
            .filter(|c| !c.adopting)
            .filter(|c| dests.is_empty() || dests.iter().any(|d| c.be.contains(d)));
        let (seq, bytes) = (p.seq(), p.data_len() as u64);
        let msg = p.into_message(dests);
        if keep_window && seq != 0 {
            st.window_bytes += msg.payload_len();
            st.window.push_back((seq, msg.clone()));
            // While an orphan is being adopted its replay may need more than the window; but
            // not without limit (an orphan that never says `Adopted` must not make this grow):
            // past four windows the oldest go, and an orphan that far behind sees lost waves.
            let slack = if place.children.iter().any(|c| c.adopting) {
                ADOPTING_SLACK
            } else {
                1
            };
            while st.window.len() > WINDOW * slack || st.window_bytes > WINDOW_BYTES * slack {
                let Some((_, old)) = st.window.pop_front() else {
                    break;
                };
                st.window_bytes -= old.payload_len();
            }
        }
        let Some(mut cur) = targets.next().map(Child::to) else {
            return;
        };
        st.perf.count(Context::Send, 1, bytes);
        // Every child but the last gets a copy; the last gets the message itself.
        for next in targets {
            send_to(pe, &self.h, &self.attach, cur, self.h.down, msg.clone());
            cur = next.to();
        }
        send_to(pe, &self.h, &self.attach, cur, self.h.down, msg);
    }

    /// A packet from a child comes up to this process.
    pub(crate) fn on_up(&mut self, pe: &mut Pe, msg: Message, weak: &Weak<RefCell<Node>>) {
        self.on_up_from(pe, msg, None, weak);
    }

    /// A packet comes up from a child PE (`ext` `None`: the runtime stamped which), or from
    /// attached back-end `ext` through its connection.
    pub(crate) fn on_up_from(
        &mut self,
        pe: &mut Pe,
        msg: Message,
        ext: Option<Rank>,
        weak: &Weak<RefCell<Node>>,
    ) {
        let src = msg.src_pe() as usize;
        let from = || match ext {
            Some(r) => format!("attached back-end {r}"),
            None => format!("PE {src}"),
        };
        let mut p = match Packet::from_message(msg) {
            Ok(p) => p,
            Err(e) => {
                let why = format!("a packet coming up from {}: {e}", from());
                return self.refuse(pe, None, why);
            }
        };
        let sid = p.stream_id();
        let Some(place) = &self.place else { return };
        let child = match ext {
            Some(r) => {
                // A program outside the job: its packets say who sent them as the leaf
                // knows it, and it sends only on its streams and its own singlecast.
                p.set_src_rank(r);
                if sid < FIRST_USER_STREAM && sid != r {
                    let why = format!("a packet on another back-end's stream from {}", from());
                    return self.refuse(pe, Some(sid), why);
                }
                // What only the overlay's own processes may say: the overlay's tags (a lost
                // or failed wave's marker would replace the others' data), a weight other
                // than one, a batch left open (its packets would pile up here).
                if p.tag() < crate::error::FIRST_APPLICATION_TAG || p.weight() != 1 || p.more() {
                    let why = format!(
                        "a packet from {} with tag {}, weight {} or an open batch",
                        from(),
                        p.tag(),
                        p.weight()
                    );
                    return self.refuse(pe, Some(sid), why);
                }
                place
                    .children
                    .iter()
                    .position(|c| c.rank == r && c.ext.is_some())
            }
            None => place.children.iter().position(|c| c.pe == src),
        };
        let Some(child) = child else {
            if self.held_back(src) {
                // An orphan adopted here before this process learned of the death.
                let more = p.more();
                return self
                    .recovery
                    .hold(p.into_message_with(&[], more), super::Kind::Up);
            }
            let why = format!("a packet from {}, not a child", from());
            return self.refuse(pe, Some(sid), why);
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
        let Some(slot) = st
            .kids
            .iter()
            .position(|&k| k == child)
            .map(|i| st.slots[i])
        else {
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
        } else if st.sync.recovered() && st.sync.mode() == SyncMode::WaitForAll {
            self.wave = wave;
            return self.take_ready(pe, sid);
        } else if let Some(due) = st.sync.deadline() {
            if !st.timer {
                st.timer = true;
                self.arm(pe, sid, due, weak);
            }
        }
        wave.clear();
        self.wave = wave;
        self.release_states(pe, sid);
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
        self.release_states(pe, sid);
        if let Some(st) = self.streams.get_mut(&sid) {
            if let (Some(due), false) = (st.sync.deadline(), st.timer) {
                st.timer = true;
                self.arm(pe, sid, due, weak);
            }
        }
    }

    /// Run the upstream filter on a wave; send what it gives up (and back down).
    pub(super) fn wave_up(&mut self, pe: &mut Pe, sid: u32, wave: &mut Vec<Packet>) {
        let Some(st) = self.streams.get_mut(&sid) else {
            return;
        };
        if st.perf.any() {
            let bytes: u64 = wave.iter().map(|p| p.data_len() as u64).sum();
            st.perf
                .count(Context::SyncFilterOut, wave.len() as u64, bytes);
        }
        if st.sync_filter.is_some() && !self.sync_wave(pe, sid, wave) {
            return;
        }
        let Some(st) = self.streams.get_mut(&sid) else {
            return;
        };
        if st.up_id == TFILTER_NULL {
            // The wave goes on as one batch.
            let last = wave.len().saturating_sub(1);
            for (i, p) in wave.drain(..).enumerate() {
                self.send_up_batch(pe, sid, p, i < last);
            }
            return;
        }
        // A wave that failed (or was lost) below stays one such wave, so waves above stay
        // aligned.
        if let Some(i) = wave
            .iter()
            .position(|p| p.tag() == WAVE_FAILED_TAG || p.tag() == WAVE_LOST_TAG)
        {
            let marker = wave.swap_remove(i);
            wave.retain(|p| p.tag() != WAVE_FAILED_TAG && p.tag() != WAVE_LOST_TAG);
            // The marker first: what a filter that exports its state gives follows it.
            self.send_up(pe, sid, marker);
            self.absorb(pe, sid, wave);
            wave.clear();
            return;
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

    /// What arrived of a wave lost in a failure, or failed below (`wave`, markers taken out):
    /// a filter that exports its state takes it in, and what it gives goes up as state (see
    /// [`on_state`](Node::on_state)) while the wave's marker goes on in the wave's place, so
    /// the front-end still gets what came of it; other filters never see it.
    pub(super) fn absorb(&mut self, pe: &mut Pe, sid: u32, wave: &mut Vec<Packet>) {
        let Some(st) = self.streams.get(&sid) else {
            return;
        };
        if wave.is_empty() || st.up_id == TFILTER_NULL || !st.up.exports_state() {
            wave.clear();
            return;
        }
        let (mut out, mut rev) = (Vec::new(), Vec::new());
        let result = self.apply(sid, Dir::Up, wave, &mut out, &mut rev);
        wave.clear();
        // A failure needs no word: the wave is lost either way, and its marker says so.
        if result.is_ok() {
            self.state_up(pe, sid, out, rev);
        }
    }

    /// Most exported states one stream may hold back for a child's earlier batches.
    const PENDING_STATES_MAX: usize = 1024;

    /// An orphan's exported filter state on stream `sid` (or what the filters between it and
    /// here made of it) comes up from child PE `src`. It is filtered as a wave of its own,
    /// outside the synchronizer (so the stream's waves stay aligned), once every batch that
    /// child sent before it has been taken into a wave (so nothing older overwrites it), and
    /// what comes of it goes on up the same way; at the front-end the program receives it.
    pub(crate) fn on_state(&mut self, pe: &mut Pe, src: usize, sid: u32, wire: Vec<Vec<u8>>) {
        let Some(place) = &self.place else { return };
        let child = place
            .children
            .iter()
            .position(|c| c.pe == src && c.ext.is_none());
        let Some(st) = self.streams.get(&sid).filter(|st| !st.closed) else {
            // The stream closed meanwhile (or never reached here): the state is for nobody.
            return;
        };
        let slot = child
            .and_then(|c| st.kids.iter().position(|&k| k == c))
            .map(|i| st.slots[i]);
        let Some(slot) = slot.filter(|_| sid >= FIRST_USER_STREAM) else {
            let why = format!("filter state on stream {sid} from PE {src}, not a child in it");
            return self.refuse(pe, Some(sid), why);
        };
        let mut wave = Vec::with_capacity(wire.len());
        for b in &wire {
            match Packet::from_wire(b) {
                // The overlay's own markers are not state.
                Ok(p) if p.tag() == WAVE_FAILED_TAG || p.tag() == WAVE_LOST_TAG => {
                    let why = format!("filter state from PE {src} tagged as a marker");
                    return self.refuse(pe, Some(sid), why);
                }
                Ok(mut p) => {
                    p.set_stream_id(sid);
                    wave.push(p);
                }
                Err(e) => {
                    let why = format!("filter state from PE {src}: {e}");
                    return self.refuse(pe, Some(sid), why);
                }
            }
        }
        if wave.is_empty() {
            return;
        }
        let Some(st) = self.streams.get_mut(&sid) else {
            return;
        };
        let (taken, held) = (st.sync.batches_taken(slot), st.sync.batches_held(slot));
        if held == 0 {
            return self.run_state(pe, sid, wave);
        }
        if st.pending_states.len() >= Self::PENDING_STATES_MAX {
            let why = format!("too much filter state from PE {src} held back");
            return self.refuse(pe, Some(sid), why);
        }
        st.pending_states.push((slot, taken + held, wave));
    }

    /// Run the exported states of stream `sid` whose child's earlier batches have all been
    /// taken into waves now.
    pub(super) fn release_states(&mut self, pe: &mut Pe, sid: u32) {
        let Some(st) = self.streams.get_mut(&sid) else {
            return;
        };
        if st.pending_states.is_empty() {
            return;
        }
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut st.pending_states)
            .into_iter()
            .partition(|(slot, at, _)| st.sync.batches_taken(*slot) >= *at);
        st.pending_states = keep;
        for (_, _, wave) in due {
            self.run_state(pe, sid, wave);
        }
    }

    /// Filter exported state `wave` of stream `sid` and pass what comes of it on.
    fn run_state(&mut self, pe: &mut Pe, sid: u32, mut wave: Vec<Packet>) {
        let Some(st) = self.streams.get(&sid).filter(|st| !st.closed) else {
            return;
        };
        let (mut out, mut rev) = (Vec::new(), Vec::new());
        if st.up_id == TFILTER_NULL {
            out = wave;
        } else if let Err(e) = self.apply(sid, Dir::Up, &mut wave, &mut out, &mut rev) {
            return self.report_error(pe, sid, e, EventKind::FilterFailed);
        }
        self.state_up(pe, sid, out, rev);
    }

    /// Send what a filter gave for exported state up as state (at the front-end, to the
    /// program), and what it gave in reverse down the stream.
    fn state_up(&mut self, pe: &mut Pe, sid: u32, mut out: Vec<Packet>, rev: Vec<Packet>) {
        for q in &mut out {
            q.set_stream_id(sid);
        }
        match self.place.as_ref().and_then(|p| p.parent_pe) {
            Some(parent) if !out.is_empty() => {
                let ctl = Ctl::State {
                    stream: sid,
                    packets: out.iter().map(|q| q.wire().to_vec()).collect(),
                };
                pe.send(parent, self.h.ctl, &ctl.encode());
            }
            Some(_) => {}
            None => {
                for q in out {
                    self.deliver(sid, q);
                }
            }
        }
        for mut q in rev {
            q.set_stream_id(sid);
            self.route_down(pe, sid, q, &[]);
        }
    }

    /// The program's synchronization filter takes the packets that came (each as it came):
    /// what it gives becomes the wave, in `wave`; `false` when it gives nothing yet. A
    /// marker of a failed or lost wave below passes it by, so the front-end still learns of
    /// it; a failure of the filter itself is reported and what it was given is dropped.
    fn sync_wave(&mut self, pe: &mut Pe, sid: u32, wave: &mut Vec<Packet>) -> bool {
        if wave
            .iter()
            .any(|p| p.tag() == WAVE_FAILED_TAG || p.tag() == WAVE_LOST_TAG)
        {
            return true;
        }
        let mut released = std::mem::take(&mut self.out);
        let mut rev = std::mem::take(&mut self.rev);
        let result = self.apply(sid, Dir::Sync, wave, &mut released, &mut rev);
        wave.clear();
        rev.clear();
        self.rev = rev;
        if let Err(e) = result {
            released.clear();
            self.out = released;
            self.report_error(pe, sid, e, EventKind::FilterFailed);
            return false;
        }
        wave.append(&mut released);
        self.out = released;
        !wave.is_empty()
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
                    st.up_sent += u64::from(!more);
                }
                pe.send_msg(parent, self.h.up, p.into_message_with(&[], more));
            }
            None => self.deliver(sid, p),
        }
    }

    /// A packet for the program on this process.
    pub(super) fn deliver(&mut self, sid: u32, p: Packet) {
        if p.tag() == WAVE_FAILED_TAG {
            let (rank, why): (Rank, String) = p
                .unpack("%ud %s")
                .unwrap_or((Rank::MAX, "a filter failed".into()));
            return self.record_error(sid, rank, why, EventKind::FilterFailed);
        }
        if p.tag() == WAVE_LOST_TAG {
            // It stays in the inbox, in its wave's place: a receive turns it into an error.
            self.wave_lost_event(sid, &p);
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
    pub(crate) fn fe_send(&mut self, pe: &mut Pe, sid: u32, mut p: Packet, dests: &[Rank]) {
        if sid < FIRST_USER_STREAM && !self.streams.contains_key(&sid) {
            return self.send_single(pe, sid, p);
        }
        if let Some(st) = self.streams.get_mut(&sid) {
            // Numbered, so that an orphan adopted after a failure is given what it missed.
            st.down_seq += 1;
            p.set_seq(st.down_seq);
        }
        self.downstream(pe, sid, p, dests);
    }
}

/// Run a filter on a wave, checking the formats it takes and timing it when asked.
fn run_filter(
    f: &dyn Filter,
    cx: &mut FilterContext<'_>,
    perf: &mut Counters,
) -> Result<(), String> {
    let input = &*cx.packets_in;
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
    let r = f.run(cx).map_err(|e| e.0);
    if let Some((start, cpu)) = timing {
        perf.filter_ran(start, cpu);
    }
    if perf.any() {
        let out = &*cx.packets_out;
        let bytes: u64 = out.iter().map(|p| p.data_len() as u64).sum();
        perf.count(Context::FilterOut, out.len() as u64, bytes);
    }
    r
}
