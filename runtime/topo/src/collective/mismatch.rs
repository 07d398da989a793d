//! Finding calls that do not match: each call's signature, the ones kept to answer late
//! checks, the check a slow call makes, and failing every process's collectives.

use super::Op;
use crate::error::TopoError;
use crate::process::{Later, State};
use crate::wire::{self, Header, Kind};
use converse::Pe;
use std::time::Duration;

/// How long a collective may wait before it checks that every process called the same: it
/// checks at the second look of a timer of this period, so after one to two periods.
pub const VERIFY_AFTER: Duration = Duration::from_millis(250);

/// Signatures kept after their call ended, to answer late checks.
pub(super) const SIGS_KEPT: usize = 1024;

/// What a call says about itself: every process's must be the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sig {
    pub(super) op: u8,
    pub(super) root: u32,
    pub(super) aux: u64,
}

impl Sig {
    fn describe(self) -> String {
        let name = Op::from_u8(self.op).map_or("an unknown collective", Op::name);
        match Op::from_u8(self.op) {
            Some(Op::Scatter) => {
                format!("{name} from root {} of {} bytes each", self.root, self.aux)
            }
            Some(Op::Reduce) | Some(Op::AllReduce) => {
                format!("{name} to root {} of {} bytes", self.root, self.aux)
            }
            Some(Op::Gather) => format!("{name} to root {}", self.root),
            Some(Op::Barrier) => name.to_owned(),
            _ => format!("{name} from root {}", self.root),
        }
    }
}

/// The signatures of the last [`SIGS_KEPT`] calls, by sequence number (a ring).
pub(super) struct Sigs(Vec<Option<(u32, Sig)>>);

impl Default for Sigs {
    fn default() -> Sigs {
        Sigs(vec![None; SIGS_KEPT])
    }
}

impl Sigs {
    pub(super) fn insert(&mut self, seq: u32, sig: Sig) {
        self.0[seq as usize % SIGS_KEPT] = Some((seq, sig));
    }
    pub(super) fn get(&self, seq: &u32) -> Option<&Sig> {
        match &self.0[*seq as usize % SIGS_KEPT] {
            Some((s, sig)) if s == seq => Some(sig),
            _ => None,
        }
    }
}

impl State {
    pub(super) fn differ(&self, other: usize, theirs: Sig, mine: Sig) -> String {
        format!(
            "process {other} called {}, process {} called {}",
            theirs.describe(),
            self.me,
            mine.describe()
        )
    }

    /// A mismatch found here: fail every call on every process.
    pub(super) fn fail(&mut self, pe: &mut Pe, seq: u32, detail: String, later: &mut Later) {
        if self.coll.failed.is_some() {
            return;
        }
        let mut h = Header::new(Kind::Mismatch, self.me, self.me);
        h.seq = seq;
        let me = self.me;
        for id in (0..self.n).filter(|&i| i != me) {
            let m = wire::message_with(&h, &self.vc, detail.as_bytes());
            let hid = self.h.ctl;
            self.hop(pe, hid, id, m);
        }
        self.failed_by(TopoError::Mismatch { seq, detail }, later);
    }

    pub(crate) fn failed_by(&mut self, e: TopoError, later: &mut Later) {
        if self.coll.failed.is_some() {
            return;
        }
        self.coll.failed = Some(e.clone());
        self.coll.early.clear();
        let mut seqs: Vec<u32> = self.coll.pending.keys().collect();
        seqs.sort_unstable();
        for s in seqs {
            self.complete(s, Err(e.clone()), later);
        }
    }

    /// The periodic look: calls pending since the previous look are slow; check them.
    pub(crate) fn look_for_slow_calls(&mut self, pe: &mut Pe) {
        // At most a few checks per look, oldest first (a program may have thousands of
        // message-driven calls in flight); a checked call is not checked again.
        const CHECKS_PER_LOOK: usize = 8;
        let mut slow = Vec::new();
        for (seq, p) in self.coll.pending.iter_mut() {
            if p.looks == u8::MAX {
                continue;
            }
            p.looks = p.looks.saturating_add(1).min(2);
            if p.looks == 2 && slow.len() < CHECKS_PER_LOOK {
                p.looks = u8::MAX;
                slow.push(seq);
            }
        }
        for seq in slow {
            self.verify(pe, seq);
        }
    }

    /// A call is slow: ask every process what it called under this number.
    fn verify(&mut self, pe: &mut Pe, seq: u32) {
        let Some(p) = self.coll.pending.get(&seq) else {
            return;
        };
        if self.coll.failed.is_some() {
            return;
        }
        let mut h = Header::new(Kind::Verify, self.me, p.sig.root as usize % self.n);
        h.seq = seq;
        h.op = p.sig.op;
        h.aux = p.sig.aux;
        let body = p.sig.root.to_le_bytes();
        let me = self.me;
        for id in (0..self.n).filter(|&i| i != me) {
            let m = wire::message_with(&h, &self.vc, &body);
            let hid = self.h.ctl;
            self.hop(pe, hid, id, m);
        }
    }

    /// A mismatch or a check from another process.
    pub(crate) fn on_coll_ctl(&mut self, pe: &mut Pe, h: Header, body: &[u8], later: &mut Later) {
        match h.kind {
            Kind::Mismatch => {
                let detail = String::from_utf8_lossy(body).into_owned();
                self.failed_by(TopoError::Mismatch { seq: h.seq, detail }, later);
            }
            Kind::Verify => {
                let root = body
                    .get(..4)
                    .map_or(u32::MAX, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                let theirs = Sig {
                    op: h.op,
                    root,
                    aux: h.aux,
                };
                let from = h.src as usize;
                match self.coll.sigs.get(&h.seq) {
                    Some(&mine) if mine != theirs => {
                        let d = self.differ(from, theirs, mine);
                        self.fail(pe, h.seq, d, later);
                    }
                    Some(_) => {}
                    None => self.coll.queries.push((from, h.seq, theirs)),
                }
            }
            _ => {}
        }
    }
}
