//! What a launched layer implements: the mechanics of its transport, driven by a launcher
//! session that owns the life cycle.
//!
//! A layer started by a launcher (charmrun, or an MPI launcher for a composite's network part)
//! does not talk to the launcher itself. The session (`converse-bootstrap`'s `Session`) owns
//! the boot prologue, the job's barrier, exit, abort and report-mode death handling, once for
//! every layer; a layer is a [`Part`] that it drives: alone (a plain layer is the one-part
//! case), or as one transport of a composite (`+machine si+tcp`: shared memory inside a host,
//! the network between hosts), where each part moves messages for the peers the composite
//! gives it.

use crate::contract::Transport;
use crate::error::MachineError;
use std::time::Duration;

/// How long [`Part::nap`] sleeps by default: the barrier's loop looks at the launcher's
/// release about this often.
pub const NAP: Duration = Duration::from_millis(1);

/// A layer's transport as a launcher session drives it (see the module docs).
///
/// Besides this trait, a part's boot comes in two phases (`converse-bootstrap`'s `Open`):
/// *open* (make the listener, socket or port; give the node-info bytes that say how peers
/// reach it) and *connect* (given its share of the node table, finish and return the part).
/// docs/porting.md says more.
pub trait Part: Transport {
    /// One short sleep of the exit barrier's loop (about [`NAP`]): return when something may
    /// have arrived or the nap is over. A [`Wake`](crate::Wake) it sees must stay pending, so
    /// that the next [`wait`](Transport::wait) returns at once. The default waits [`NAP`].
    ///
    /// # Errors
    /// As [`Transport::wait`].
    fn nap(&mut self) -> Result<(), MachineError> {
        self.wait(NAP)
    }

    /// The exit barrier starts (`true`) or ended (`false`): a part that changes how it runs
    /// meanwhile does so here (UDP acknowledges at once, so that peers finish their sends).
    /// The session then calls [`advance`](Transport::advance) and [`nap`](Self::nap) until
    /// every node is in.
    fn barrier_mode(&mut self, on: bool) {
        let _ = on;
    }

    /// Report mode (see the contract's "Report mode"): `node` is out of the job, as the
    /// session decided (the launcher reported it, or a part found it dead). Release what is
    /// held for it (queued output, a message part-way in, its connection or window) and drop
    /// what it still sends; nothing more is sent to it. A part that holds nothing per peer
    /// need not override it.
    fn forget(&mut self, node: usize) {
        let _ = node;
    }

    /// Everything [`exit`](crate::Machine::exit) does but telling the launcher: flush what is
    /// queued for peers (for a bounded time), release the interconnect. Called once, after
    /// the job's barrier; no other method is called after it.
    ///
    /// # Errors
    /// As [`Machine::exit`](crate::Machine::exit).
    fn leave(&mut self) -> Result<(), MachineError>;
}
