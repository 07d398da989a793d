//! How a PE reaches the interconnect: by owning its node's layer (one PE per process, today's
//! path: no extra thread, no extra hop), or through its node's communication thread (SMP mode).

use crate::node::NodeShared;
use converse_machine::{Machine, MachineError, Message};
use std::sync::Arc;
use std::time::Duration;

/// A PE's way to the interconnect.
pub(crate) enum Link {
    /// The PE is its node's only PE and drives the layer itself.
    Own(Box<dyn Machine>),
    /// The PE is worker `rank` of a node whose communication thread drives the layer.
    Worker {
        /// What the node's threads share.
        node: Arc<NodeShared>,
        /// This PE's rank in the node.
        rank: usize,
    },
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Link::Own(m) => write!(f, "Own({})", m.layer()),
            Link::Worker { node, rank } => write!(f, "Worker(node {}, rank {rank})", node.node),
        }
    }
}

impl Link {
    /// The layer's name.
    pub(crate) fn layer(&self) -> &'static str {
        match self {
            Link::Own(m) => m.layer(),
            Link::Worker { node, .. } => node.layer,
        }
    }

    /// The layer's direct copies to other nodes' memory, if it has them (asked once, when
    /// the PE starts).
    pub(crate) fn rma(&self) -> Option<Arc<dyn converse_machine::Rma>> {
        match self {
            Link::Own(m) => m.rma(),
            Link::Worker { node, .. } => node.rma.clone(),
        }
    }

    /// Wire bytes held for `node` on their way out.
    #[inline]
    pub(crate) fn queued(&self, node: usize) -> usize {
        match self {
            Link::Own(m) => m.queued(node),
            Link::Worker { node: n, .. } => n.held(node),
        }
    }

    /// The layer's counters ([`Transport::counters`]); none for a worker, whose communication
    /// thread owns the layer.
    pub(crate) fn counters(&self) -> Vec<(&'static str, u64)> {
        match self {
            Link::Own(m) => m.counters(),
            Link::Worker { .. } => Vec::new(),
        }
    }

    /// See [`Transport::max_unpolled`]. A worker's inbox has no protocol to keep running.
    pub(crate) fn max_unpolled(&self) -> Option<Duration> {
        match self {
            Link::Own(m) => m.max_unpolled(),
            Link::Worker { .. } => None,
        }
    }

    /// Whether a message is part-way through the layer (see
    /// [`Transport::in_transfer`]). A worker never sees the layer: its communication thread
    /// spins for transfers instead.
    pub(crate) fn in_transfer(&self) -> bool {
        match self {
            Link::Own(m) => m.in_transfer(),
            Link::Worker { .. } => false,
        }
    }

    /// Take in what arrived for this PE.
    #[inline]
    pub(crate) fn advance(
        &mut self,
        deliver: &mut dyn FnMut(Message),
    ) -> Result<usize, MachineError> {
        match self {
            Link::Own(m) => m.advance(deliver),
            Link::Worker { node, rank } => {
                let Some(inbox) = node.inboxes.get(*rank) else {
                    return Ok(0);
                };
                // Bounded, so that a flood from siblings cannot keep this PE from dispatching.
                let mut n = 0;
                let mut from_elsewhere = 0;
                let mut from_siblings = 0;
                while n < INBOX_BATCH {
                    let Some(m) = inbox.pop() else { break };
                    if node.is_remote(&m) {
                        from_elsewhere += m.wire_len();
                    } else {
                        from_siblings += m.wire_len();
                    }
                    deliver(m);
                    n += 1;
                }
                node.taken(from_elsewhere);
                inbox.taken_from_siblings(from_siblings);
                Ok(n)
            }
        }
    }

    /// The longest single block of this PE when idle: `idle_max` for a PE that waits in the
    /// layer (a layer's wait may need the scheduler back now and then); far longer for a
    /// worker, whose every arrival (inbox, node queue, exit) unparks it, so that an idle SMP
    /// node's workers do not wake a hundred times a second for nothing.
    pub(crate) fn idle_cap(&self, idle_max: Duration) -> Duration {
        match self {
            Link::Own(_) => idle_max,
            Link::Worker { .. } => WORKER_IDLE_MAX.max(idle_max),
        }
    }

    /// Block until something may have arrived for this PE, or `timeout`.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        match self {
            Link::Own(m) => m.wait(timeout),
            Link::Worker { node, rank } => {
                node.worker_sleep(*rank, timeout);
                Ok(())
            }
        }
    }
}

/// Longest single park of an idle worker (see [`Link::idle_cap`]).
const WORKER_IDLE_MAX: Duration = Duration::from_secs(1);

/// Since when arrivals are held back in the layer (a PE's queue, or an SMP node's inboxes, is
/// over `sched.max_queued_mib`), for the one poll per [`Transport::max_unpolled`] that still
/// happens then. Shared by the scheduler and the communication thread.
#[derive(Debug, Default)]
pub(crate) struct HeldBack {
    since: Option<std::time::Instant>,
}

impl HeldBack {
    /// Arrivals are held back: whether the layer must be advanced all the same now, having
    /// gone unpolled for `most` (never, for a layer without such a limit).
    #[cold]
    pub(crate) fn take_turn(&mut self, most: Option<Duration>) -> bool {
        let Some(most) = most else { return false };
        let now = std::time::Instant::now();
        let since = *self.since.get_or_insert(now);
        if now - since < most {
            return false;
        }
        self.since = Some(now);
        true
    }

    /// Arrivals are taken in again.
    #[inline]
    pub(crate) fn end(&mut self) {
        self.since = None;
    }
}

/// Most messages a worker takes from its inbox per poll.
const INBOX_BATCH: usize = 256;
