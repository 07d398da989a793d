//! Front-end, failure recovery: the packets it sends to single back-ends
//! ([`Network::send_to_backend`](crate::Network::send_to_backend)), kept so that none is lost
//! with an internal process that dies holding it.
//!
//! A singlecast packet passes the processes between the front-end and its back-end without
//! any stream state there, so unlike a stream's packets no window on the way keeps it. The
//! front-end keeps one instead:
//!
//! - With recovery on, each packet to a back-end that is not its own child is numbered (per
//!   back-end, from 1) and kept in a window shared by all back-ends, bounded like a stream's
//!   ([`WINDOW`] packets, [`WINDOW_BYTES`] bytes).
//! - When a process above a back-end dies, the back-end *waits*: what is sent to it stays in
//!   the window, unsent, so it cannot overtake what is given again.
//! - When the orphan above it has re-connected (`Reparented`), every kept packet of the
//!   back-end goes again, in order, along the new path; the back-end takes each number once
//!   (`StreamState::first_sight_once`), so those that had arrived are not delivered twice.
//! - A packet that must leave the window before it was ever sent (more than the window
//!   waited) is lost: the back-end's next receive on its stream says so
//!   ([`TbonError::WaveLost`]).

use super::attached::{send_to, To};
use super::data::{WINDOW, WINDOW_BYTES};
use super::Node;
use crate::error::TbonError;
use crate::events::EventKind;
use crate::packet::Packet;
use crate::topology::Rank;
use converse::{Message, Pe};
use std::collections::{BTreeSet, HashMap, VecDeque};

/// One packet kept.
struct Kept {
    be: Rank,
    seq: u32,
    msg: Message,
    /// Whether it went out at least once.
    sent: bool,
}

/// The front-end's singlecast window (see the module docs).
#[derive(Default)]
pub(crate) struct Singlecasts {
    /// The last number given, per back-end.
    seq: HashMap<Rank, u32>,
    window: VecDeque<Kept>,
    bytes: usize,
    /// Back-ends below a dead process, until the orphan above them re-connects.
    waiting: BTreeSet<Rank>,
}

impl Singlecasts {
    fn next_seq(&mut self, be: Rank) -> u32 {
        let s = self.seq.entry(be).or_insert(0);
        // Never 0, which means "unnumbered" to the back-end.
        *s = s.wrapping_add(1).max(1);
        *s
    }
}

impl Node {
    /// The child through which back-end `be` is reached now.
    pub(super) fn single_route(&self, be: Rank) -> Option<To> {
        let place = self.place.as_ref()?;
        place
            .children
            .iter()
            .find(|c| c.be.contains(&be))
            .map(|c| c.to())
    }

    /// Front-end: send packet `p` to back-end `be` on its singlecast stream, numbering and
    /// keeping it when an internal process on its way may die with it.
    pub(super) fn send_single(&mut self, pe: &mut Pe, be: Rank, mut p: Packet) {
        let Some(place) = &self.place else { return };
        let direct = place.children.iter().any(|c| c.rank == be);
        // A back-end adopted by the front-end itself still waits for what is given again.
        if !self.recovery.on || (direct && !self.single.waiting.contains(&be)) {
            if let Some(to) = self.single_route(be) {
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
        let seq = self.single.next_seq(be);
        p.set_seq(seq);
        let msg = p.into_message(&[]);
        let send_now = !self.single.waiting.contains(&be);
        // A copy stays (a message is its own buffer): the price of never losing one, paid
        // only with recovery on and an internal process on the way.
        self.single.bytes += msg.payload_len();
        self.single.window.push_back(Kept {
            be,
            seq,
            msg: msg.clone(),
            sent: send_now,
        });
        self.trim_single_window();
        if send_now {
            if let Some(to) = self.single_route(be) {
                send_to(pe, &self.h, &self.attach, to, self.h.down, msg);
            }
        }
    }

    /// Keep the window in its bounds; a packet that leaves it unsent is lost, and said so.
    fn trim_single_window(&mut self) {
        while self.single.window.len() > WINDOW || self.single.bytes > WINDOW_BYTES {
            let Some(old) = self.single.window.pop_front() else {
                break;
            };
            self.single.bytes -= old.msg.payload_len();
            if old.sent {
                continue;
            }
            let why = format!(
                "packet {} to back-end {} was dropped: more than the front-end keeps ({WINDOW} \
                 packets, {} MiB) waited while a process above it was replaced",
                old.seq,
                old.be,
                WINDOW_BYTES >> 20
            );
            self.event(EventKind::WaveLost, Some(old.be), Some(old.be), why.clone());
            self.failures
                .entry(old.be)
                .or_default()
                .push_back(TbonError::WaveLost {
                    stream: old.be,
                    reason: why,
                });
        }
    }

    /// Front-end: processes `newly` died; the back-ends below them (in the tree as made) wait
    /// until the orphans above them re-connect. Dead back-ends' packets go.
    pub(super) fn single_hold(&mut self, newly: &[Rank]) {
        if !self.recovery.on {
            return;
        }
        let Some(place) = &self.place else { return };
        let orig = place.orig.clone();
        let dead = self.recovery.dead().clone();
        for &r in newly {
            let Some(i) = orig.find_rank(r) else { continue };
            for be in orig.backends_below(i) {
                if !dead.contains(&be) {
                    self.single.waiting.insert(be);
                }
            }
        }
        let before = self.single.window.len();
        self.single.waiting.retain(|be| !dead.contains(be));
        self.single.window.retain(|k| !dead.contains(&k.be));
        if self.single.window.len() != before {
            self.single.bytes = self.single.window.iter().map(|k| k.msg.payload_len()).sum();
        }
    }

    /// Front-end: the orphan `rank` re-connected; the back-ends below it that waited get
    /// every kept packet again, in order, along the new path.
    pub(super) fn single_release(&mut self, pe: &mut Pe, rank: Rank) {
        let Some(place) = &self.place else { return };
        let Some(i) = place.orig.find_rank(rank) else {
            return;
        };
        let below: Vec<Rank> = place
            .orig
            .backends_below(i)
            .into_iter()
            .filter(|be| self.single.waiting.contains(be))
            .collect();
        if below.is_empty() {
            return;
        }
        for be in &below {
            self.single.waiting.remove(be);
        }
        let h = self.h.down;
        let mut out = Vec::new();
        for k in self
            .single
            .window
            .iter_mut()
            .filter(|k| below.contains(&k.be))
        {
            k.sent = true;
            out.push((k.be, k.msg.clone()));
        }
        tracing::debug!(target: "tbon", rank, packets = out.len(), "singlecast packets given again after a re-connection");
        for (be, m) in out {
            if let Some(to) = self.single_route(be) {
                send_to(pe, &self.h, &self.attach, to, h, m);
            }
        }
    }
}
