//! Report mode's record of which peers are out of the job.

use crate::Bootstrap;
use converse_machine::{MachineError, NodeTable, Wake};
use std::sync::Arc;

/// A node's record of which peers are out of the job, for a layer in report mode
/// (`faults=report`, see the `Machine` contract): it merges what the launcher reports with what
/// the layer finds itself, so that each death is reported to the runtime once.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeadPeers {
    /// Report mode: deaths are reported, not fatal. Off, nothing here is used.
    report: bool,
    /// How many of the launcher's reports have been read.
    cursor: usize,
    dead: Vec<bool>,
}

impl DeadPeers {
    /// For a job of `nodes` nodes; `report` says whether it is in report mode.
    pub(crate) fn new(report: bool, nodes: usize) -> DeadPeers {
        DeadPeers {
            report,
            cursor: 0,
            dead: vec![false; if report { nodes } else { 0 }],
        }
    }

    /// Whether deaths are reported rather than fatal.
    #[inline]
    pub(crate) fn reporting(&self) -> bool {
        self.report
    }

    /// Whether `node` is out of the job.
    #[inline]
    pub(crate) fn is_dead(&self, node: usize) -> bool {
        self.dead.get(node).copied().unwrap_or(false)
    }

    /// The next death the launcher reported that this node has not recorded yet (it is recorded
    /// now): the layer releases what it holds for that node and reports it. One atomic load
    /// when there is none.
    #[inline]
    pub(crate) fn reported(&mut self, ctl: &dyn Bootstrap) -> Option<(usize, String)> {
        if !self.report {
            return None;
        }
        while let Some((node, why)) = ctl.next_death(&mut self.cursor) {
            if let Some(d) = self.dead.get_mut(node).filter(|d| !**d) {
                *d = true;
                return Some((node, why));
            }
        }
        None
    }

    /// Report mode for a layer of `nodes` nodes: ask the launcher to report deaths, and ring
    /// `waker` (the one that ends the layer's wait) when it does.
    ///
    /// # Errors
    /// [`MachineError::Io`] when the launcher cannot be told.
    pub(crate) fn start(
        ctl: &dyn Bootstrap,
        nodes: usize,
        waker: Arc<dyn Wake>,
    ) -> Result<DeadPeers, MachineError> {
        ctl.report_deaths(waker)?;
        Ok(DeadPeers::new(true, nodes))
    }

    /// A send to `node` is refused once it is out of the job (report mode).
    ///
    /// # Errors
    /// [`MachineError::PeerDead`] for a node out of the job.
    #[inline]
    pub(crate) fn check(&self, table: &NodeTable, node: usize) -> Result<(), MachineError> {
        if self.is_dead(node) {
            return Err(MachineError::peer_dead(table, node, "it is out of the job"));
        }
        Ok(())
    }

    /// Report mode: whether the layer's error `e` is a peer's death to report. If so, the
    /// death is recorded, the launcher is told (unless the node is `leaving`: in the exit barrier
    /// peers released first close as they leave, which is no death), and the node returned
    /// for the layer to release ([`Part::forget`](converse_machine::Part::forget)); the error itself is the
    /// report to the runtime.
    pub(crate) fn judge(
        &mut self,
        ctl: &dyn Bootstrap,
        leaving: bool,
        e: &MachineError,
    ) -> Option<usize> {
        match e {
            MachineError::PeerDead { node, reason, .. } if self.report => {
                if !leaving {
                    self.found(ctl, *node, reason);
                }
                Some(*node)
            }
            _ => None,
        }
    }

    /// One step of a layer's exit barrier: in report mode a death then changes nothing
    /// (the launcher counts the dead as arrived); other errors stay errors.
    ///
    /// # Errors
    /// `r`'s, but a peer's death in report mode.
    pub(crate) fn in_barrier(&self, r: Result<usize, MachineError>) -> Result<(), MachineError> {
        match r {
            Err(MachineError::PeerDead { .. }) if self.report => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// The layer found `node` dead itself (`why`): record it and tell the launcher, which ends
    /// that node and tells the others. Whether it was news (a death is reported once).
    pub(crate) fn found(&mut self, ctl: &dyn Bootstrap, node: usize, why: &str) -> bool {
        match self.dead.get_mut(node) {
            Some(d) if !*d => {
                *d = true;
                ctl.suspect(node, why);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use converse_machine::NodeInfo;

    fn table(n: usize) -> NodeTable {
        let nodes = (0..n)
            .map(|i| NodeInfo {
                first_pe: i,
                num_pes: 1,
                host: "h".into(),
                addr: Vec::new(),
            })
            .collect();
        NodeTable::new(nodes).expect("table")
    }

    #[test]
    fn off_report_mode_nothing_is_dead_and_deaths_stay_errors() {
        let d = DeadPeers::default();
        let t = table(3);
        assert!(!d.reporting() && !d.is_dead(1) && !d.is_dead(99));
        assert!(d.check(&t, 1).is_ok());
        let e = MachineError::peer_dead(&t, 1, "gone");
        assert!(matches!(
            d.in_barrier(Err(e)),
            Err(MachineError::PeerDead { node: 1, .. })
        ));
    }

    #[test]
    fn in_report_mode_a_recorded_death_refuses_sends_and_passes_the_barrier() {
        let mut d = DeadPeers::new(true, 3);
        let t = table(3);
        d.dead[2] = true;
        assert!(d.is_dead(2) && !d.is_dead(1));
        assert!(matches!(
            d.check(&t, 2),
            Err(MachineError::PeerDead { node: 2, .. })
        ));
        assert!(d.check(&t, 1).is_ok());
        let e = MachineError::peer_dead(&t, 2, "gone");
        assert!(d.in_barrier(Err(e)).is_ok());
        let other = MachineError::Boot("x".into());
        assert!(d.in_barrier(Err(other)).is_err());
        assert!(d.in_barrier(Ok(3)).is_ok());
    }
}
