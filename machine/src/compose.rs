//! What a layer provides to take part in a composition: one job over several transports
//! (shared memory inside a host, the network between hosts; `+machine si+tcp`).
//!
//! A composite layer owns the launcher's control connection and the node table; each part
//! moves messages for the peers the composite gives it, and is *driven*: the composite runs
//! the job's one barrier and tells the launcher the job's one exit, so a part never does
//! either itself. A part's own [`Machine::barrier`] and [`Machine::exit`] are therefore never
//! called in a composition; these two methods are what remains of them.

use crate::contract::Machine;
use crate::error::MachineError;

/// A layer that a composite layer can drive as one of its transports.
///
/// Besides this trait, a part's boot comes in two phases that its own plain boot also uses:
/// *open* (make the listener, socket or port; give the node-info bytes that say how peers
/// reach it) and *connect* (given its share of the node table and the composite's control
/// connection, finish and return the `Machine`). docs/porting.md says more.
pub trait Part: Machine {
    /// The exit barrier starts (`true`) or ended (`false`): a part that changes how it runs
    /// meanwhile does so here (UDP acknowledges at once, so that peers finish their sends).
    /// The composite then calls [`advance`](Machine::advance) until every node is in.
    fn barrier_mode(&mut self, on: bool) {
        let _ = on;
    }

    /// Report mode (see the contract's "Report mode"): `node` is out of the job, as the
    /// composite decided (charmrun reported it, or a part found it dead). Release what is held
    /// for it (queued output, a message part-way in, its connection or window) and drop what it
    /// still sends; the composite sends it nothing more. A part that holds nothing per peer
    /// need not override it.
    fn forget(&mut self, node: usize) {
        let _ = node;
    }

    /// Everything [`exit`](Machine::exit) does but telling the launcher: flush what is
    /// queued for peers (for a bounded time), release the interconnect. Called once, after
    /// the composite's barrier; no other method is called after it.
    ///
    /// # Errors
    /// As [`Machine::exit`].
    fn leave(&mut self) -> Result<(), MachineError>;
}
