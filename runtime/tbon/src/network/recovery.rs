//! The front-end's side of failure recovery: turning it on or off, and the orphans not
//! re-connected yet. See `node/recover.rs` for what each process does.

use super::Network;
use crate::error::TbonError;
use crate::protocol::Req;
use crate::topology::Rank;

impl<'p> Network<'p> {
    /// Turn failure recovery on or off for the whole tree (MRNet's `set_FailureRecovery`; on
    /// by default, or as `MRNET_FAILURE_RECOVERY` says). Every process has the setting when
    /// this returns.
    ///
    /// On: when a process dies, its orphans (children) re-connect to their nearest surviving
    /// ancestor, taking the dead one's place among its children; streams go on over the
    /// survivors (waves that lost a part in the dead process are reported lost, once each,
    /// and later ones are whole over the processes alive); the front-end gets
    /// [`ProcessRemoved`](crate::EventKind::ProcessRemoved),
    /// [`NewParent`](crate::EventKind::NewParent) and, for each stream a dead back-end was an
    /// end-point of, [`EndpointRemoved`](crate::EventKind::EndpointRemoved) events. Off: the
    /// front-end gets `ProcessRemoved` and one
    /// [`NetworkFailed`](crate::EventKind::NetworkFailed) per stream through the dead
    /// process, whose receives and sends then fail with [`TbonError::StreamFailed`].
    ///
    /// # Errors
    /// [`TbonError::RecoveryUnavailable`] to turn it on in a job that does not survive node
    /// failures (see [`attach`](crate::attach)); [`TbonError::Role`] off the front-end;
    /// [`TbonError::JobEnded`].
    pub fn set_failure_recovery(&mut self, on: bool) -> Result<(), TbonError> {
        self.front_end("set_failure_recovery")?;
        if on && !self.pe.survives_node_failures() {
            return Err(TbonError::RecoveryUnavailable);
        }
        self.node.borrow_mut().recovery.on = on;
        if self.pe.survives_node_failures() {
            self.request(None, Req::Recovery { on })?;
        }
        Ok(())
    }

    /// Whether failure recovery is on (never in a job that does not survive node failures).
    pub fn failure_recovery(&self) -> bool {
        self.node.borrow().recovery.on
    }

    /// Ranks of the processes whose parent died and that have not re-connected to their new
    /// parent yet (MRNet's `NetworkTopology::get_OrphanNodes`): empty once recovery is
    /// complete. Front-end only (elsewhere: empty).
    pub fn orphan_nodes(&self) -> Vec<Rank> {
        self.node
            .borrow()
            .recovery
            .orphans
            .iter()
            .copied()
            .collect()
    }

    /// Ranks of the processes known here to have died.
    pub fn dead_processes(&self) -> Vec<Rank> {
        self.node.borrow().recovery.dead().iter().copied().collect()
    }
}
