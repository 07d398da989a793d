//! Synchronization filters (the guide's section 2.4): how a process groups the packets its
//! children send up a stream into waves before the transformation filter sees them.
//!
//! - [`SyncMode::WaitForAll`]: a wave is one packet from every child taking part in the
//!   stream; packets that come early wait in per-child queues, so waves never mix rounds.
//! - [`SyncMode::DontWait`]: every packet is a wave of its own, at once.
//! - [`SyncMode::Timeout`]: a complete wave as soon as there is one; otherwise everything
//!   received, once the timeout has passed since the first packet that came after the last
//!   output. A timeout of zero behaves as `DontWait` (as MRNet's does).
//!
//! A [`Synchronizer`] is a plain state machine: the overlay feeds it packets with the time and
//! asks it, when its deadline comes, for what is due.

use crate::packet::Packet;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A synchronization mode, set per stream (and per process, for heterogeneous streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// One packet from every child (`SFILTER_WAITFORALL`), the default.
    #[default]
    WaitForAll,
    /// Every packet at once (`SFILTER_DONTWAIT`).
    DontWait,
    /// A complete wave, or what came within the timeout (`SFILTER_TIMEOUT`); the timeout is a
    /// stream parameter (see `Network::set_filter_params`), 0 until set.
    Timeout,
}

impl SyncMode {
    /// Its number on the wire and in heterogeneous placement strings.
    pub fn id(self) -> u32 {
        match self {
            SyncMode::WaitForAll => 0,
            SyncMode::DontWait => 1,
            SyncMode::Timeout => 2,
        }
    }

    /// The mode numbered `id`.
    pub fn from_id(id: u32) -> Option<SyncMode> {
        Some(match id {
            0 => SyncMode::WaitForAll,
            1 => SyncMode::DontWait,
            2 => SyncMode::Timeout,
            _ => return None,
        })
    }

    /// The mode named `name` (`waitforall`, `dontwait`, `timeout`, with or without the
    /// `SFILTER_` prefix, any case) or numbered `name`.
    pub fn from_name(name: &str) -> Option<SyncMode> {
        if let Ok(id) = name.parse::<u32>() {
            return SyncMode::from_id(id);
        }
        let n = name.to_ascii_lowercase();
        let n = n.strip_prefix("sfilter_").unwrap_or(&n);
        Some(match n {
            "waitforall" | "wait_for_all" => SyncMode::WaitForAll,
            "dontwait" | "dont_wait" => SyncMode::DontWait,
            "timeout" => SyncMode::Timeout,
            _ => return None,
        })
    }
}

/// The MRNet name of [`SyncMode::WaitForAll`].
pub const SFILTER_WAITFORALL: SyncMode = SyncMode::WaitForAll;
/// The MRNet name of [`SyncMode::DontWait`].
pub const SFILTER_DONTWAIT: SyncMode = SyncMode::DontWait;
/// The MRNet name of [`SyncMode::Timeout`].
pub const SFILTER_TIMEOUT: SyncMode = SyncMode::Timeout;

/// What one child has sent that is not in a wave yet.
#[derive(Debug)]
struct ChildQueue {
    packets: VecDeque<Packet>,
    /// Sizes of the complete batches at the front of `packets`.
    batches: VecDeque<usize>,
    /// Packets after those: a batch still coming.
    open: usize,
    /// The wave its first queued batch (or, with none queued, its next one) belongs to.
    front: u64,
    /// One past the last wave it contributes to: set when it dies.
    hi: u64,
    /// Adopted after a failure, and its count of batches sent not known yet.
    pending: bool,
    /// Adopted: where the dead child it stands in for stopped contributing.
    pred_end: u64,
    /// Its complete batches taken out so far (into waves, lost waves or timeouts).
    taken: u64,
}

impl ChildQueue {
    fn new() -> ChildQueue {
        ChildQueue {
            packets: VecDeque::new(),
            batches: VecDeque::new(),
            open: 0,
            front: 1,
            hi: u64::MAX,
            pending: false,
            pred_end: 1,
            taken: 0,
        }
    }

    /// Whether it must give a batch for wave `w`.
    fn owes(&self, w: u64) -> bool {
        self.front <= w && w < self.hi
    }
}

/// What [`Synchronizer::take_ready`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// A whole wave, in the output.
    Wave,
    /// A wave that lost a contribution in a process that died: what came of it is in the
    /// output, for a filter that keeps the stream's history to take in; nothing of it goes
    /// on.
    Lost,
}

/// Groups one process's incoming packets of one stream into waves.
///
/// A child's contribution to a wave is a *batch*: the packets its own filter gave for one
/// wave of its own, in one go (a back-end's batch is one packet; a null filter passes a whole
/// wave on as one batch). Every packet of a batch but the last says "more follows", so a
/// parent waits for whole batches: with wait-for-all, a wave is one batch from each child,
/// however many packets each one holds, and waves stay aligned on trees of uneven depth.
#[derive(Debug)]
pub struct Synchronizer {
    mode: SyncMode,
    timeout: Duration,
    queues: Vec<ChildQueue>,
    /// Children with at least one complete batch.
    waiting: usize,
    /// When the first batch since the last output came (timeout mode).
    first_at: Option<Instant>,
    /// Waves given out (wait-for-all): the next one is `out + 1`.
    out: u64,
    /// A child died or was adopted: waves are made by number (see
    /// [`take_ready`](Synchronizer::take_ready)), not by the fast path.
    recovered: bool,
    /// Waves that lost a contribution in a dead process.
    lost: Vec<std::ops::Range<u64>>,
}

impl Synchronizer {
    /// A synchronizer for `children` children (slots `0 .. children`).
    pub fn new(mode: SyncMode, children: usize) -> Synchronizer {
        Synchronizer {
            mode,
            timeout: Duration::ZERO,
            queues: (0..children).map(|_| ChildQueue::new()).collect(),
            waiting: 0,
            first_at: None,
            out: 0,
            recovered: false,
            lost: Vec::new(),
        }
    }

    /// Its mode.
    pub fn mode(&self) -> SyncMode {
        self.mode
    }

    /// Set the timeout of [`SyncMode::Timeout`].
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Packets held, over all children.
    pub fn held(&self) -> usize {
        self.queues.iter().map(|q| q.packets.len()).sum()
    }

    /// Take packet `p` from child `slot` (`more`: another packet of the same batch follows);
    /// a wave that is complete goes to `out` (appended), and the return says whether one did.
    /// Reads the clock only in timeout mode (a clock read is not free in every VM).
    pub fn push(&mut self, slot: usize, p: Packet, more: bool, out: &mut Vec<Packet>) -> bool {
        let now = match self.mode {
            SyncMode::Timeout => Some(Instant::now()),
            _ => None,
        };
        self.push_at(slot, p, more, now, out)
    }

    /// As [`push`](Synchronizer::push), at time `now` (which timeout mode needs).
    pub fn push_at(
        &mut self,
        slot: usize,
        p: Packet,
        more: bool,
        now: Option<Instant>,
        out: &mut Vec<Packet>,
    ) -> bool {
        let no_wait = self.mode == SyncMode::DontWait
            || (self.mode == SyncMode::Timeout && self.timeout.is_zero());
        if no_wait || (!self.recovered && self.queues.len() <= 1 && self.held() == 0 && !more) {
            if !more {
                self.out += 1;
            }
            out.push(p);
            return true;
        }
        let Some(q) = self.queues.get_mut(slot) else {
            // Not a child of this stream: the caller checks, so this is only a safety net.
            out.push(p);
            return true;
        };
        q.packets.push_back(p);
        q.open += 1;
        if more {
            return false;
        }
        if q.batches.is_empty() {
            self.waiting += 1;
        }
        q.batches.push_back(std::mem::take(&mut q.open));
        if self.recovered && self.mode == SyncMode::WaitForAll {
            // The caller takes whole waves with `take_ready`.
            return false;
        }
        let need = if self.recovered {
            // Other modes after a failure: a wave is a batch from every child alive.
            self.queues.iter().filter(|q| q.hi == u64::MAX).count()
        } else {
            self.queues.len()
        };
        if self.waiting >= need {
            self.pop_wave(out);
            if self.mode == SyncMode::Timeout {
                self.first_at = now.filter(|_| self.waiting > 0);
            }
            return true;
        }
        if self.mode == SyncMode::Timeout && self.first_at.is_none() {
            self.first_at = now;
        }
        false
    }

    /// One batch from every child.
    fn pop_wave(&mut self, out: &mut Vec<Packet>) {
        for q in &mut self.queues {
            if let Some(n) = q.batches.pop_front() {
                out.extend(q.packets.drain(..n));
                q.front += 1;
                q.taken += 1;
            }
        }
        self.out += 1;
        self.waiting = self.queues.iter().filter(|q| !q.batches.is_empty()).count();
    }

    /// Complete batches of child `slot` taken out so far, into waves (whole or lost) or at a
    /// timeout.
    pub fn batches_taken(&self, slot: usize) -> u64 {
        self.queues.get(slot).map_or(0, |q| q.taken)
    }

    /// Complete batches of child `slot` held, not taken out yet.
    pub fn batches_held(&self, slot: usize) -> u64 {
        self.queues.get(slot).map_or(0, |q| q.batches.len() as u64)
    }

    // ----- failure recovery -----

    /// Whether a child died or was adopted here: waves are then taken with
    /// [`take_ready`](Synchronizer::take_ready) after every push and every change.
    pub fn recovered(&self) -> bool {
        self.recovered
    }

    /// Waves given out so far (wait-for-all: the number of the last one).
    pub fn waves_out(&self) -> u64 {
        self.out
    }

    /// Child `slot` died: the whole batches it sent still count (each for the wave it
    /// belongs to), a batch it was part-way through is dropped, and no wave after those
    /// waits for it.
    pub fn child_died(&mut self, slot: usize) {
        self.recovered = true;
        let Some(q) = self.queues.get_mut(slot) else {
            return;
        };
        if q.hi != u64::MAX {
            return;
        }
        let keep: usize = q.batches.iter().sum();
        q.packets.truncate(keep);
        q.open = 0;
        q.hi = if q.pending {
            // It never said where it was: it gives nothing, and its own stand-ins start
            // where the child it stood in for stopped.
            q.front = q.pred_end;
            q.pred_end
        } else {
            q.front + q.batches.len() as u64
        };
        q.pending = false;
    }

    /// A child adopted after a failure, standing in for the dead child in `slot` (its
    /// ancestor there): a new slot, whose waves are known once it says how many batches it
    /// had sent ([`announce`](Synchronizer::announce)); until then no wave is made.
    pub fn adopt(&mut self, slot: usize) -> usize {
        self.recovered = true;
        let pred_end = self.queues.get(slot).map_or(self.out + 1, |q| q.hi);
        let mut q = ChildQueue::new();
        // Only wait-for-all numbers waves; other modes take the new child's batches as
        // they come.
        q.pending = self.mode == SyncMode::WaitForAll;
        q.pred_end = pred_end.min(u64::MAX - 1);
        q.front = q.pred_end;
        self.queues.push(q);
        self.queues.len() - 1
    }

    /// Adopted child `slot` had sent `sent` batches (to its old parent, or before the stream
    /// reached it): its next is for wave `sent + 1`, and waves from where the dead child
    /// stopped up to that one lost its subtree's part.
    pub fn announce(&mut self, slot: usize, sent: u64) {
        let Some(q) = self.queues.get_mut(slot) else {
            return;
        };
        if !q.pending {
            return;
        }
        q.pending = false;
        let next = sent + 1;
        if self.mode == SyncMode::WaitForAll && next > q.pred_end {
            self.lost.push(q.pred_end..next);
        }
        q.front = next.max(q.pred_end);
        // Batches that came before the announcement (none: it is sent first) would be
        // numbered from here on.
    }

    /// Whether some adopted child has not said where it is yet.
    pub fn waiting_for_adopted(&self) -> bool {
        self.queues.iter().any(|q| q.pending)
    }

    /// After a failure: the next wave if it can be made now (its packets appended to `out`),
    /// or said lost. Wait-for-all makes wave `n` of batch `n` of every child that owes it
    /// (a dead child owes the waves it sent whole; an adopted one those from its count on).
    /// Other modes make waves as before, over the children alive: this gives nothing.
    pub fn take_ready(&mut self, out: &mut Vec<Packet>) -> Option<Ready> {
        if !self.recovered
            || self.mode != SyncMode::WaitForAll
            || self.queues.iter().any(|q| q.pending)
        {
            return None;
        }
        let w = self.out + 1;
        let mut lost = self.lost.iter().any(|r| r.contains(&w));
        let mut owed = false;
        for q in &self.queues {
            if q.owes(w) {
                owed = true;
                if q.batches.is_empty() {
                    return None;
                }
            }
        }
        if !owed && !lost {
            // Nobody alive owes anything: every child is dead, or ahead of a wave nobody owes.
            let ahead = self
                .queues
                .iter()
                .filter(|q| q.hi > q.front)
                .map(|q| q.front)
                .min();
            match ahead {
                // A wave nobody owes while later ones are coming: said lost, so the waves
                // above stay aligned.
                Some(f) if f > w => lost = true,
                _ => return None,
            }
        }
        for q in &mut self.queues {
            if q.owes(w) {
                if let Some(n) = q.batches.pop_front() {
                    out.extend(q.packets.drain(..n));
                    q.taken += 1;
                }
                q.front += 1;
            }
        }
        self.out = w;
        self.waiting = self.queues.iter().filter(|q| !q.batches.is_empty()).count();
        self.lost.retain(|r| r.end > w + 1);
        if lost {
            return Some(Ready::Lost);
        }
        Some(Ready::Wave)
    }

    /// When [`poll`](Synchronizer::poll) will have something to give, if ever. A timeout too
    /// long for the clock (a parameter packet may say anything) never falls due: only whole
    /// waves go on, as without a timeout.
    pub fn deadline(&self) -> Option<Instant> {
        match self.mode {
            SyncMode::Timeout => self.first_at.and_then(|t| t.checked_add(self.timeout)),
            _ => None,
        }
    }

    /// At `now`: if the timeout has passed, every complete batch held goes to `out`, child by
    /// child in the order each sent; whether anything did.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<Packet>) -> bool {
        match self.deadline() {
            Some(d) if d <= now => {}
            _ => return false,
        }
        self.first_at = None;
        let before = out.len();
        for q in &mut self.queues {
            q.taken += q.batches.len() as u64;
            let n: usize = q.batches.drain(..).sum();
            out.extend(q.packets.drain(..n));
        }
        self.waiting = 0;
        out.len() > before
    }

    /// Whatever is held, for a stream that closes.
    pub fn drain(&mut self, out: &mut Vec<Packet>) {
        for q in &mut self.queues {
            out.extend(q.packets.drain(..));
            q.batches.clear();
            q.open = 0;
        }
        self.waiting = 0;
        self.first_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(v: i32) -> Packet {
        Packet::new(1, 100, "%d", v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn vals(v: &[Packet]) -> Vec<i32> {
        v.iter()
            .map(|p| p.unpack::<i32>("%d").unwrap_or(-1))
            .collect()
    }

    #[test]
    fn wait_for_all_makes_whole_waves_in_order() {
        let now = Instant::now();
        let mut s = Synchronizer::new(SyncMode::WaitForAll, 3);
        let mut out = Vec::new();
        assert!(!s.push_at(0, pkt(1), false, Some(now), &mut out));
        assert!(!s.push_at(0, pkt(11), false, Some(now), &mut out));
        assert!(!s.push_at(2, pkt(3), false, Some(now), &mut out));
        assert!(s.push_at(1, pkt(2), false, Some(now), &mut out));
        assert_eq!(vals(&out), [1, 2, 3]);
        out.clear();
        assert!(!s.push_at(2, pkt(13), false, Some(now), &mut out));
        assert!(s.push_at(1, pkt(12), false, Some(now), &mut out));
        assert_eq!(vals(&out), [11, 12, 13]);
        assert_eq!(s.held(), 0);
        assert_eq!(s.deadline(), None);
    }

    #[test]
    fn a_batch_counts_as_one_contribution() {
        let now = Instant::now();
        let mut s = Synchronizer::new(SyncMode::WaitForAll, 2);
        let mut out = Vec::new();
        // Child 0 passes on a wave of three packets; child 1 sends one.
        assert!(!s.push_at(0, pkt(1), true, Some(now), &mut out));
        assert!(!s.push_at(0, pkt(2), true, Some(now), &mut out));
        assert!(!s.push_at(1, pkt(10), false, Some(now), &mut out));
        assert!(s.push_at(0, pkt(3), false, Some(now), &mut out));
        assert_eq!(vals(&out), [1, 2, 3, 10]);
        assert_eq!(s.held(), 0);
        // A lone child's batch also waits for its end.
        let mut one = Synchronizer::new(SyncMode::WaitForAll, 1);
        out.clear();
        assert!(!one.push_at(0, pkt(1), true, Some(now), &mut out));
        assert!(one.push_at(0, pkt(2), false, Some(now), &mut out));
        assert_eq!(vals(&out), [1, 2]);
    }

    #[test]
    fn dont_wait_passes_each_packet() {
        let mut s = Synchronizer::new(SyncMode::DontWait, 4);
        let mut out = Vec::new();
        for i in 0..4 {
            assert!(s.push_at(i, pkt(i as i32), false, Some(Instant::now()), &mut out));
        }
        assert_eq!(vals(&out), [0, 1, 2, 3]);
    }

    #[test]
    fn timeout_gives_a_whole_wave_early_or_what_came_when_due() {
        let t0 = Instant::now();
        let mut s = Synchronizer::new(SyncMode::Timeout, 3);
        s.set_timeout(Duration::from_millis(100));
        let mut out = Vec::new();
        assert!(!s.push_at(0, pkt(1), false, Some(t0), &mut out));
        assert!(!s.push_at(
            2,
            pkt(3),
            false,
            Some(t0 + Duration::from_millis(50)),
            &mut out
        ));
        assert_eq!(s.deadline(), Some(t0 + Duration::from_millis(100)));
        assert!(!s.poll(t0 + Duration::from_millis(99), &mut out));
        assert!(s.poll(t0 + Duration::from_millis(100), &mut out));
        assert_eq!(vals(&out), [1, 3]);
        assert_eq!(s.deadline(), None);
        out.clear();
        // A complete wave does not wait for the timeout.
        let t1 = t0 + Duration::from_secs(1);
        assert!(!s.push_at(0, pkt(4), false, Some(t1), &mut out));
        assert!(!s.push_at(1, pkt(5), false, Some(t1), &mut out));
        assert!(s.push_at(2, pkt(6), false, Some(t1), &mut out));
        assert_eq!(vals(&out), [4, 5, 6]);
        assert_eq!(s.deadline(), None);
    }

    #[test]
    fn a_timeout_past_the_clocks_end_never_falls_due() {
        // `Instant + Duration::MAX` panics.
        let t0 = Instant::now();
        let mut s = Synchronizer::new(SyncMode::Timeout, 2);
        s.set_timeout(Duration::MAX);
        let mut out = Vec::new();
        assert!(!s.push_at(0, pkt(1), false, Some(t0), &mut out));
        assert_eq!(s.deadline(), None);
        assert!(!s.poll(t0 + Duration::from_secs(3600), &mut out));
        assert!(s.push_at(1, pkt(2), false, Some(t0), &mut out));
        assert_eq!(vals(&out), [1, 2]);
    }

    #[test]
    fn a_zero_timeout_does_not_wait() {
        let mut s = Synchronizer::new(SyncMode::Timeout, 2);
        let mut out = Vec::new();
        assert!(s.push_at(1, pkt(7), false, Some(Instant::now()), &mut out));
        assert_eq!(vals(&out), [7]);
    }

    /// Every wave ready now, as (Ready, values).
    fn ready(s: &mut Synchronizer) -> Vec<(Ready, Vec<i32>)> {
        let mut got = Vec::new();
        loop {
            let mut out = Vec::new();
            match s.take_ready(&mut out) {
                Some(r) => got.push((r, vals(&out))),
                None => return got,
            }
        }
    }

    #[test]
    fn batches_held_and_taken_are_counted_per_child() {
        let mut s = Synchronizer::new(SyncMode::WaitForAll, 2);
        let mut out = Vec::new();
        s.push_at(0, pkt(1), false, None, &mut out);
        s.push_at(0, pkt(2), true, None, &mut out);
        // A batch begun is not held yet; a whole one is.
        assert_eq!((s.batches_held(0), s.batches_taken(0)), (1, 0));
        s.push_at(0, pkt(3), false, None, &mut out);
        assert_eq!((s.batches_held(0), s.batches_taken(0)), (2, 0));
        s.push_at(1, pkt(10), false, None, &mut out);
        assert_eq!(vals(&out), [1, 10]);
        assert_eq!((s.batches_held(0), s.batches_taken(0)), (1, 1));
        assert_eq!((s.batches_held(1), s.batches_taken(1)), (0, 1));
        assert_eq!((s.batches_held(7), s.batches_taken(7)), (0, 0));
    }

    #[test]
    fn a_dead_back_end_counts_for_what_it_sent_whole_and_no_more() {
        let mut s = Synchronizer::new(SyncMode::WaitForAll, 3);
        let mut out = Vec::new();
        for v in [1, 2, 3] {
            s.push_at(0, pkt(v), false, None, &mut out);
        }
        s.push_at(1, pkt(10), false, None, &mut out);
        // Part of a batch, then death: the part is dropped.
        s.push_at(1, pkt(99), true, None, &mut out);
        s.push_at(2, pkt(100), false, None, &mut out);
        assert_eq!(vals(&out), [1, 10, 100]);
        s.child_died(1);
        assert!(s.recovered());
        assert_eq!(ready(&mut s), []);
        s.push_at(2, pkt(200), false, None, &mut out);
        s.push_at(2, pkt(300), false, None, &mut out);
        assert_eq!(
            ready(&mut s),
            [(Ready::Wave, vec![2, 200]), (Ready::Wave, vec![3, 300])]
        );
        assert_eq!(s.waves_out(), 3);
    }

    #[test]
    fn orphans_of_a_dead_internal_child_line_up_by_their_counts() {
        // Child 0 a back-end; child 1 an internal process that forwarded waves 1 and 2 and
        // died; its two children are adopted: `a` had sent 4 batches, `b` 3.
        let mut s = Synchronizer::new(SyncMode::WaitForAll, 2);
        let mut out = Vec::new();
        s.push_at(1, pkt(10), false, None, &mut out);
        s.push_at(1, pkt(20), false, None, &mut out);
        for v in 1..=5 {
            s.push_at(0, pkt(v), false, None, &mut out);
        }
        assert_eq!(s.waves_out(), 2);
        out.clear();
        s.child_died(1);
        let a = s.adopt(1);
        let b = s.adopt(1);
        assert!(s.waiting_for_adopted());
        assert_eq!(ready(&mut s), []);
        s.announce(a, 4);
        assert_eq!(ready(&mut s), []);
        s.announce(b, 3);
        // Wave 3: a's part died with its parent; wave 4: a's too. What did come of them
        // (child 0's, then b's part) is handed out with the lost wave, for a filter that keeps
        // history.
        assert_eq!(ready(&mut s), [(Ready::Lost, vec![3])]);
        s.push_at(b, pkt(400), false, None, &mut out);
        assert_eq!(ready(&mut s), [(Ready::Lost, vec![4, 400])]);
        s.push_at(a, pkt(500), false, None, &mut out);
        s.push_at(b, pkt(5000), false, None, &mut out);
        assert_eq!(ready(&mut s), [(Ready::Wave, vec![5, 500, 5000])]);
        s.push_at(0, pkt(6), false, None, &mut out);
        s.push_at(a, pkt(600), false, None, &mut out);
        s.push_at(b, pkt(6000), false, None, &mut out);
        assert_eq!(ready(&mut s), [(Ready::Wave, vec![6, 600, 6000])]);
    }

    #[test]
    fn an_orphan_that_dies_before_it_speaks_hands_on_its_place() {
        let mut s = Synchronizer::new(SyncMode::WaitForAll, 2);
        let mut out = Vec::new();
        s.push_at(0, pkt(1), false, None, &mut out);
        s.push_at(1, pkt(10), false, None, &mut out);
        s.child_died(1);
        let o = s.adopt(1);
        s.child_died(o);
        let g = s.adopt(o);
        s.announce(g, 1);
        s.push_at(0, pkt(2), false, None, &mut out);
        s.push_at(g, pkt(20), false, None, &mut out);
        out.clear();
        assert_eq!(ready(&mut s), [(Ready::Wave, vec![2, 20])]);
    }

    #[test]
    fn other_modes_go_on_over_the_children_alive() {
        let mut s = Synchronizer::new(SyncMode::Timeout, 2);
        s.set_timeout(Duration::from_secs(60));
        let mut out = Vec::new();
        s.child_died(1);
        let o = s.adopt(1);
        assert!(!s.waiting_for_adopted());
        assert!(!s.push_at(0, pkt(1), false, Some(Instant::now()), &mut out));
        assert!(s.push_at(o, pkt(2), false, Some(Instant::now()), &mut out));
        assert_eq!(vals(&out), [1, 2]);
    }

    #[test]
    fn names_and_ids() {
        for m in [SyncMode::WaitForAll, SyncMode::DontWait, SyncMode::Timeout] {
            assert_eq!(SyncMode::from_id(m.id()), Some(m));
        }
        assert_eq!(
            SyncMode::from_name("SFILTER_DONTWAIT"),
            Some(SyncMode::DontWait)
        );
        assert_eq!(SyncMode::from_name("2"), Some(SyncMode::Timeout));
        assert_eq!(SyncMode::from_name("sometimes"), None);
    }
}
