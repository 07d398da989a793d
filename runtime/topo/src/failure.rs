//! A process of the topology dies while the job goes on (report mode, `faults=report`): the
//! topology is lost on every process that survives.
//!
//! Without report mode a death ends the job and nothing here runs. With it, the runtime tells
//! every surviving PE (its failure callbacks, after every message from the dead node has been
//! dispatched); [`attach`](crate::attach) registers one per topology. If the dead node held a
//! process of the topology, every call waiting on it fails with
//! [`TopoError::ProcessDead`](crate::TopoError::ProcessDead), and so does every later call that
//! talks along it: a blocked `recv`, `lock`, or collective returns the error instead of
//! waiting for a process that will never answer (or for a live one that itself waited on the
//! dead one). That is the mismatch's rule (one failure fails the topology everywhere), so a
//! program has one way to learn either, and a survivor never hangs.
//!
//! What stays: queries (neighbours, routes, trees), the vector time, the recorded hops, and
//! messages that had arrived (`recv` and `try_recv` still take them).

use crate::process::{Later, State};
use crate::TopoError;
use converse::NodeFailure;

impl State {
    /// Node `f.node` is out of the job: if it held a process of this topology, fail every
    /// waiting call and remember why, for the calls to come.
    pub(crate) fn on_node_failure(&mut self, f: &NodeFailure, later: &mut Later) {
        if self.lost.is_some() {
            return;
        }
        let Some((process, pe)) = f
            .pes
            .clone()
            .filter_map(|pe| self.topo.id_of_pe(pe).map(|id| (id, pe)))
            .min()
        else {
            return;
        };
        let e = TopoError::ProcessDead {
            process,
            pe,
            node: f.node,
            reason: f.reason.clone(),
        };
        self.lost = Some(e.clone());
        self.mutex.lose(&e, later);
        self.failed_by(e, later);
    }

    /// Why the topology can no longer be talked along, if it cannot.
    pub(crate) fn lost(&self) -> Result<(), TopoError> {
        match &self.lost {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}
