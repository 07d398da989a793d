//! The composite node: its intra-host part (shared memory) to the peers on its host, its
//! network part to the others; a [`Part`] itself, which the launcher session drives as it
//! drives a plain layer.

use super::plan::{self, Route};
use super::relay::Relay;
use converse_machine::{Armed, MachineError, Message, NodeTable, Part, Transport, Wake};
use std::sync::Arc;
use std::time::Duration;

/// Without a network [`Wake`] to ring from the relay (or a bell to sleep on), the longest
/// network wait while same-host peers may write: their messages wait at most this long.
const NO_WAKER_SLICE: Duration = Duration::from_millis(1);

/// Advances after the network part last handed up a message during which it is polled on
/// every advance, as a network layer alone would be.
const NET_HOT: u32 = 1024;

/// Otherwise the network part is polled on every this many advances only: its poll is a
/// system call per socket, shared memory's a cache line per peer, so a same-host exchange
/// would otherwise spend its time asking sockets that have nothing. A message from another
/// host waits at most this many (sub-microsecond) polls, then the network is hot again.
const NET_COLD_EVERY: u32 = 64;

/// Messages and wire bytes sent over one transport.
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    messages: u64,
    bytes: u64,
}

/// One node of a composite job.
pub struct MultiMachine<A: Part, B: Part> {
    net_name: &'static str,
    me: usize,
    /// The job's table as charmrun sent it (each node's composite info).
    table: NodeTable,
    /// Per node: the transport this node reaches it by.
    route: Vec<Route>,
    shm_peers: usize,
    net_peers: usize,
    /// The intra-host part (shared memory).
    si: A,
    /// The network part.
    net: B,
    /// Index 0: shared memory; 1: the network.
    sent: [Sent; 2],
    /// Advances since the network part last handed up a message (see `NET_HOT`).
    since_net: u32,
    relay: Option<Relay>,
}

// By hand: the parts' working state has no useful text form.
impl<A: Part, B: Part> std::fmt::Debug for MultiMachine<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiMachine")
            .field("net", &self.net_name)
            .field("node", &self.me)
            .finish_non_exhaustive()
    }
}

impl<A: Part, B: Part> MultiMachine<A, B> {
    /// A node over `si` and `net`, reaching each node as `route` says.
    pub(crate) fn new(
        table: NodeTable,
        route: Vec<Route>,
        si: A,
        net: B,
    ) -> Result<MultiMachine<A, B>, MachineError> {
        let (shm_peers, net_peers) = plan::peers(&route);
        // One blocking wait for both: the network part's, with the relay ringing it for the
        // intra-host part's bell. Only needed when both have peers.
        let relay = match (shm_peers > 0 && net_peers > 0, net.waker(), si.bell()) {
            (true, Some(wake), Some(bell)) => Some(
                Relay::start(bell, wake)
                    .map_err(|e| MachineError::io("starting the composite's relay thread", e))?,
            ),
            _ => None,
        };
        Ok(MultiMachine {
            net_name: net.layer(),
            me: si.my_node(),
            table,
            route,
            shm_peers,
            net_peers,
            si,
            net,
            sent: [Sent::default(); 2],
            since_net: 0,
            relay,
        })
    }

    fn invalid(&self, node: usize) -> MachineError {
        MachineError::InvalidNode {
            node,
            nodes: self.table.num_nodes(),
        }
    }

    /// Both parts' arrivals.
    fn advance_both(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        if self.shm_peers > 0 {
            n += self.si.advance(deliver)?;
        }
        if self.net_peers > 0 {
            self.since_net = self.since_net.saturating_add(1);
            if self.shm_peers == 0
                || self.since_net < NET_HOT
                || self.since_net.is_multiple_of(NET_COLD_EVERY)
            {
                let k = self.net.advance(deliver)?;
                if k > 0 {
                    self.since_net = 0;
                }
                n += k;
            } else {
                // Not read this time, but what it holds to coalesce leaves (a counter and an
                // emptiness check when nothing is held).
                self.net.flush()?;
            }
        }
        Ok(n)
    }
}

impl<A: Part, B: Part> Transport for MultiMachine<A, B> {
    /// The network part's: the launcher session names the composite.
    fn layer(&self) -> &'static str {
        self.net_name
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    #[inline]
    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        let bytes = msg.wire_len() as u64;
        match self.route.get(node) {
            Some(Route::Shm) => {
                self.sent[0].messages += 1;
                self.sent[0].bytes += bytes;
                self.si.send(node, msg)
            }
            Some(Route::Net) => {
                self.sent[1].messages += 1;
                self.sent[1].bytes += bytes;
                self.net.send(node, msg)
            }
            _ => Err(self.invalid(node)),
        }
    }

    #[inline]
    fn queued(&self, node: usize) -> usize {
        match self.route.get(node) {
            Some(Route::Shm) => self.si.queued(node),
            Some(Route::Net) => self.net.queued(node),
            _ => 0,
        }
    }

    #[inline]
    fn flush(&mut self) -> Result<(), MachineError> {
        if self.net_peers > 0 {
            self.net.flush()?;
        }
        if self.shm_peers > 0 {
            self.si.flush()?;
        }
        Ok(())
    }

    fn in_transfer(&self) -> bool {
        (self.shm_peers > 0 && self.si.in_transfer())
            || (self.net_peers > 0 && self.net.in_transfer())
    }

    fn max_unpolled(&self) -> Option<std::time::Duration> {
        let si = self.si.max_unpolled().filter(|_| self.shm_peers > 0);
        let net = self.net.max_unpolled().filter(|_| self.net_peers > 0);
        si.into_iter().chain(net).min()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = vec![
            ("multi.shm_peers", self.shm_peers as u64),
            ("multi.net_peers", self.net_peers as u64),
            ("multi.shm_messages", self.sent[0].messages),
            ("multi.shm_bytes", self.sent[0].bytes),
            ("multi.net_messages", self.sent[1].messages),
            ("multi.net_bytes", self.sent[1].bytes),
        ];
        c.extend(self.si.counters());
        c.extend(self.net.counters());
        c
    }

    fn rma(&self) -> Option<Arc<dyn converse_machine::Rma>> {
        // The intra-host part's: it reaches exactly the nodes of this host, whatever route
        // their messages take; transfers to other hosts stay on messages.
        self.si.rma().filter(|_| self.shm_peers > 0)
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        // The wait that `wait` blocks in.
        if self.net_peers == 0 {
            self.si.waker()
        } else {
            self.net.waker()
        }
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        self.advance_both(deliver)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        if self.net_peers == 0 {
            return self.si.wait(timeout);
        }
        if self.shm_peers == 0 {
            return self.net.wait(timeout);
        }
        // The composable idle protocol (`Part::arm`): the intra-host part says it sleeps and
        // how, the relay sleeps on its bell, the node in the network part's wait.
        let (seen, t) = match self.si.arm() {
            Armed::Ready => return Ok(()),
            Armed::Bell { seen, within } => (seen, within.map_or(timeout, |w| timeout.min(w))),
            // The part cannot be woken: look at it again within its bound.
            Armed::Poll { within } => {
                self.since_net = 0;
                return self.net.wait(timeout.min(within));
            }
        };
        let Some(relay) = self.relay.as_mut() else {
            // No way to end the network wait from the bell: bounded slices, so that a
            // same-host message waits at most one.
            self.si.disarm();
            self.since_net = 0;
            return self.net.wait(t.min(NO_WAKER_SLICE));
        };
        relay.arm(seen);
        // A record written before the relay could see this sleep rang nobody: look once more.
        if self.si.arrived() {
            self.si.disarm();
            relay.disarm();
            return Ok(());
        }
        let r = self.net.wait(t);
        self.si.disarm();
        relay.disarm();
        // Whichever ended the wait, the network is asked at once.
        self.since_net = 0;
        r
    }
}

impl<A: Part, B: Part> Part for MultiMachine<A, B> {
    fn barrier_mode(&mut self, on: bool) {
        self.si.barrier_mode(on);
        self.net.barrier_mode(on);
    }

    /// The part that reaches `node` forgets it.
    fn forget(&mut self, node: usize) {
        match self.route.get(node) {
            Some(Route::Shm) => self.si.forget(node),
            Some(Route::Net) => self.net.forget(node),
            _ => {}
        }
    }

    fn leave(&mut self) -> Result<(), MachineError> {
        if let Some(mut r) = self.relay.take() {
            r.stop();
        }
        let shm = self.si.leave();
        let net = self.net.leave();
        shm.and(net)
    }
}

impl<A: Part, B: Part> Drop for MultiMachine<A, B> {
    fn drop(&mut self) {
        // The relay sleeps on the SI port's mapping: it ends before the port is unmapped.
        if let Some(mut r) = self.relay.take() {
            r.stop();
        }
    }
}
