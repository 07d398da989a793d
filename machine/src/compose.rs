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
use std::sync::Arc;
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

    // ---- the composable idle protocol ----
    //
    // A composite sleeps for its two parts in one place: the network part's `wait` (its sockets
    // and timers), ended by its `Wake`. The other part lets a thread of the composite's sleep
    // on its `Bell` for it, armed around each sleep (Mercury's `poll_get_fd` /
    // `poll_try_wait`): `arm`, publish the sleep to that thread, `arrived`, sleep, `disarm`.

    /// A bell another thread may sleep on for this part, rung when something arrives while the
    /// part is armed ([`arm`](Self::arm)). Asked once, at start-up. The default, `None`: the
    /// part is polled instead (a composite then wakes at least every [`Armed::Poll`]).
    fn bell(&self) -> Option<Arc<dyn Bell>> {
        None
    }

    /// Before an idle sleep done for this part elsewhere: do what [`wait`](Transport::wait)
    /// would do first, and say whether to sleep. [`Armed::Bell`]: from now until
    /// [`disarm`](Self::disarm), an arrival rings the bell past `seen`. The default, for a
    /// part without a bell: [`Armed::Poll`] every [`NAP`].
    fn arm(&mut self) -> Armed {
        Armed::Poll { within: NAP }
    }

    /// Whether something arrived since [`arm`](Self::arm): asked once the sleep has been
    /// published to the thread that sleeps on the bell, since what came before that could ring
    /// nobody. The default, for a part without a bell: `false`.
    fn arrived(&self) -> bool {
        false
    }

    /// The sleep [`arm`](Self::arm) began is over.
    fn disarm(&mut self) {}
}

/// What a part says before an idle sleep done for it elsewhere ([`Part::arm`]).
// Not `non_exhaustive`: a new way to be armed (an fd, say) must be handled by every composite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Armed {
    /// Something is there, or the part did work meanwhile: do not sleep.
    Ready,
    /// Sleep, at most `within` (output waits for room its peers free without telling); the
    /// part's [`Bell`] rings past `seen` when something arrives.
    Bell {
        /// The bell's value when the part said it sleeps.
        seen: u32,
        /// The longest the sleep may last; `None`: as long as the caller likes.
        within: Option<Duration>,
    },
    /// The part cannot be woken: look again within this long.
    Poll {
        /// The longest the sleep may last.
        within: Duration,
    },
}

/// A word another thread can sleep on until a part's arrivals ring it ([`Part::bell`]; SI's
/// doorbell, a futex word in its shared-memory port).
pub trait Bell: Send + Sync {
    /// Its value now: it changes each time it is rung.
    fn value(&self) -> u32;

    /// Sleep until it has been rung past `seen`, or `timeout`; at once if it already was.
    fn wait_past(&self, seen: u32, timeout: Duration);

    /// Ring it whatever the part said (to end the sleep of the thread on it, when it stops).
    fn kick(&self);
}
