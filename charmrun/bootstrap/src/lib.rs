//! The node side of a launcher, and the launcher session every launched layer runs in.
//!
//! GASNet-EX keeps its conduits apart from the way a job is started behind a small spawner
//! interface; this crate is that wall. A layer depends on it, never on the launcher:
//!
//! - [`Bootstrap`]: what a node needs of whatever started it — the exchange of the node table,
//!   a barrier, a broadcast, deaths reported (report mode), the exit code, abort. [`client::Control`] is
//!   charmrun's implementation; one over PMI or `srun`'s environment would be another.
//! - [`session`]: the launcher session written once. A layer implements only its transport's
//!   mechanics ([`Part`](converse_machine::Part)) and its two boot phases ([`session::Open`]);
//!   [`session::boot`] runs the prologue (reach the launcher, open, exchange, connect) and
//!   [`session::Launched`] makes the part a [`Machine`](converse_machine::Machine): the job's
//!   barrier, exit, abort and report-mode death bookkeeping live there and nowhere else.
//! - [`compose`]: the composite as a combinator, one job over two layers' parts (shared memory
//!   inside a host, a network between hosts: `si+tcp`, `si+udp`, `si+mpi`), itself a
//!   [`session::Open`], so the session runs it like any layer.
//! - [`protocol`]: charmrun's control protocol (both sides use it), [`net`] its listener,
//!   [`cleanup`] the files a node must remove if it ends where no destructor runs.

pub mod cleanup;
pub mod client;
pub mod compose;
mod deaths;
pub mod door;
pub mod net;
pub mod protocol;
pub mod session;

use converse_machine::{MachineError, NodeTable, Wake};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// In a barrier, how long a layer's failure (a peer's connection closing, say) waits for the
/// release that would explain it: peers released first leave first, and that is no death.
pub const BARRIER_GRACE: Duration = Duration::from_secs(2);

/// What a node needs of the launcher that started it (GASNet's spawner interface).
///
/// Implemented by charmrun's client ([`client::Control`]); a launcher that offers the same
/// (PMI, an MPI library's own start-up) can implement it too, and every layer runs under it
/// unchanged. Calls come from the node's communication thread, except [`abort`](Self::abort),
/// which may come from any thread; an implementation that needs a thread of its own (charmrun's
/// watchdog, which ends the process when the launcher goes away) starts it in
/// [`exchange`](Self::exchange).
pub trait Bootstrap: Send + Sync + std::fmt::Debug {
    /// This host's address on the route to the launcher: where peers can reach this node too.
    /// Layers bind their listener or socket on it.
    fn local_ip(&self) -> IpAddr;

    /// Introduce this node with its layer `info` (how peers reach it), and return the node
    /// table: every node's info, in node order, the same on every node. Called once.
    ///
    /// # Errors
    /// [`MachineError::Boot`] when the launcher refuses this node or goes away;
    /// [`MachineError::Aborted`] when it ends the job meanwhile.
    fn exchange(&mut self, info: Vec<u8>) -> Result<NodeTable, MachineError>;

    /// Say this node reached the barrier; the ticket to wait with ([`released`](Self::released)).
    ///
    /// # Errors
    /// [`MachineError::Io`] when the launcher cannot be told.
    fn barrier_begin(&self) -> Result<u64, MachineError>;

    /// Whether the barrier of `ticket` is complete, waiting for it up to `timeout`.
    fn released(&self, ticket: u64, timeout: Duration) -> bool;

    /// Ring `waker` whenever a barrier is released, so that a node waiting in the barrier
    /// while it keeps its layer moving (a nap in the layer's wait, not on the launcher) sees
    /// the release at once, not at the nap's end. A launcher whose release no other thread
    /// learns of (MPI's, an `MPI_Ibarrier` the node's own thread polls) need not: the default
    /// does nothing.
    fn wake_on_release(&self, waker: Arc<dyn Wake>) {
        let _ = waker;
    }

    /// A broadcast: node `root` gives `blob` (the others' `blob` is not read), and every node
    /// returns it. Collective: every node calls the same broadcasts in the same order.
    ///
    /// # Errors
    /// [`MachineError::PeerDead`] when `root` is out of the job before its blob came (report
    /// mode; otherwise its death ends the job); [`MachineError::Io`] when the launcher cannot
    /// be told; [`MachineError::InvalidNode`] for a root outside the job.
    fn broadcast(&self, root: usize, blob: &[u8]) -> Result<Vec<u8>, MachineError>;

    /// Ask that a node's death be reported to the survivors instead of ending the job
    /// (`faults=report`), ringing `waker` whenever one is, so that a layer blocked in its wait
    /// looks at [`next_death`](Self::next_death). Every node of a job asks the same.
    ///
    /// # Errors
    /// [`MachineError::Io`] when the launcher cannot be told.
    fn report_deaths(&self, waker: Arc<dyn Wake>) -> Result<(), MachineError>;

    /// The next death the launcher reported that this reader (its `cursor`, from 0) has not
    /// seen: the node and why. Called on every `advance` in report mode, so one atomic load
    /// when there is none.
    fn next_death(&self, cursor: &mut usize) -> Option<(usize, String)>;

    /// This node's link to `node` failed (`why`), in report mode: the launcher ends that node,
    /// if it still runs, and reports its death to every survivor. Best effort.
    fn suspect(&self, node: usize, why: &str);

    /// Tell the launcher this node leaves the job normally with `code`.
    ///
    /// # Errors
    /// [`MachineError::Io`] when it cannot be told.
    fn ending(&self, code: i32) -> Result<(), MachineError>;

    /// End the job: say why in one line naming this node, have the launcher end every other
    /// node, and exit this process non-zero.
    fn abort(&self, reason: &str) -> !;

    /// Block until every node reached the barrier.
    ///
    /// # Errors
    /// As [`barrier_begin`](Self::barrier_begin).
    fn barrier(&self) -> Result<(), MachineError> {
        let ticket = self.barrier_begin()?;
        while !self.released(ticket, Duration::from_secs(3600)) {}
        Ok(())
    }

    /// A barrier for a layer that must keep its interconnect moving while it waits: calls
    /// `step` (push queued sends, answer peers, keep what arrives, then wait a moment for
    /// activity) until every node has arrived.
    ///
    /// A `step` error right when peers are released is expected: a peer released first may
    /// already have left and closed its end. It counts only if the release does not follow
    /// within [`BARRIER_GRACE`].
    ///
    /// # Errors
    /// `step`'s error when the barrier did not complete; [`MachineError::Io`] when the
    /// launcher cannot be told.
    fn barrier_while(
        &self,
        step: &mut dyn FnMut() -> Result<(), MachineError>,
    ) -> Result<(), MachineError> {
        let ticket = self.barrier_begin()?;
        loop {
            if let Err(e) = step() {
                return if self.released(ticket, BARRIER_GRACE) {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            if self.released(ticket, Duration::ZERO) {
                return Ok(());
            }
        }
    }
}
