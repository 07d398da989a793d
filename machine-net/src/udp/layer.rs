//! The UDP layer as a [`Machine`]: one process per node, started by charmrun, one UDP socket
//! per node to receive on (and, in a job of three nodes or more, a connected send socket per
//! peer: `senders.rs`), the protocol of [`super::endpoint`] on it.
//!
//! Start-up is the TCP layer's: connect back to charmrun, bind the socket on the address that
//! routes to charmrun, send that address as this node's info, receive the node table. The
//! scheduler's poll loop drives everything else: `advance` takes datagrams in batches and runs
//! due timers; an idle node blocks in `ppoll` on its one socket until a datagram comes or its
//! next timer is due (no timer runs while nothing is outstanding, so an idle job sleeps), or
//! until another thread rings the eventfd of its [`waker`](Transport::waker), polled with it.

use super::config::Config;
use super::endpoint::{Endpoint, Failure};
use super::link::Landing;
use super::senders::Senders;
use super::socket::{Arrived, Socket, RECV_BATCH};
use super::wire;
use crate::mesh;
use crate::wake::WakeFd;
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::session::{self, Open};
use converse_bootstrap::Bootstrap;
use converse_machine::{
    BootConfig, Layer, Machine, MachineError, Message, NodeTable, Part, Transport, Wake,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The registry entry for this layer.
pub const LAYER: Layer = Layer {
    name: "udp",
    summary: "one process per node started by charmrun, UDP datagrams with retransmission",
    boot,
    launched: LaunchEnv::present,
    settings: super::config::SETTINGS,
    check: |s| Config::from_settings(s).map(drop),
    describe: converse_machine::no_description,
};

/// Receive batches taken by one `advance` at most: then the scheduler gets to dispatch.
const MAX_BATCHES: usize = 8;

/// How long `exit` keeps trying to get what it sent acknowledged.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// Empty polls between two looks at the clock for due timers.
const CLOCK_EVERY: u32 = 16;

/// Longest single sleep while waiting in the exit barrier or in `exit`.
const NAP: Duration = Duration::from_millis(1);

/// Largest message held for coalescing: a message of several datagrams leaves at once.
const HOLD_MAX: usize = 16 << 10;

/// Messages held at which they leave at once (a batch of packets the endpoint takes).
const HOLD_MOST: usize = super::socket::SEND_BATCH;

/// One node of a UDP job.
pub struct UdpMachine {
    me: usize,
    table: NodeTable,
    sock: Socket,
    ep: Endpoint,
    /// Polls in a row that found nothing (see `CLOCK_EVERY`).
    empty_polls: u32,
    /// Polled with the socket when idle: other threads ring it to end `wait`.
    wake: WakeFd,
    /// `udp.coalesce_us` (see [`Transport::flush`]): a small message sent this soon after
    /// the last one to its peer, in the same turn, is held until the flush.
    coalesce: Duration,
    /// Flushes so far (each `advance`, each `flush`).
    turn: u64,
    /// Per peer: the turn of the last send that left at once, and when.
    last: Vec<(u64, Option<Instant>)>,
    /// Messages held for the next flush.
    held: usize,
}

// By hand: the fields are the layer's working state (sockets, queues, buffers); the node
// number says which one it is.
impl std::fmt::Debug for UdpMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpMachine")
            .field("node", &self.me)
            .finish_non_exhaustive()
    }
}

/// Boot: connect back to charmrun, bind the socket, learn the table.
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun or when start-up fails;
/// [`MachineError::Setting`] for a bad `udp.*` setting.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<UdpOpen>(LAYER.name, cfg)
}

/// A UDP node between the two phases of its boot ([`Open`]): its socket is bound, and
/// [`info`](Open::info) says where peers reach it.
pub struct UdpOpen {
    conf: Config,
    sock: Socket,
    rcvbuf: usize,
    addr: std::net::SocketAddr,
    /// Per-peer connected send sockets, bound but not yet connected (a job of three nodes or
    /// more, without a relay, `udp.connected_peers` above 0).
    senders: Option<Senders>,
}

// By hand: the socket has no useful text form.
impl std::fmt::Debug for UdpOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpOpen")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Open for UdpOpen {
    type Part = UdpMachine;

    /// Bind the node's socket on the address that routes to the launcher, with the `udp.*`
    /// settings ([`Config::from_settings`]). A job of more nodes than the protocol numbers
    /// is refused ([`MachineError::Boot`]).
    fn open(
        cfg: &BootConfig,
        env: &LaunchEnv,
        launcher: &dyn Bootstrap,
    ) -> Result<UdpOpen, MachineError> {
        let conf = Config::from_settings(&cfg.settings)?;
        if env.num_nodes > usize::from(u16::MAX) {
            return Err(MachineError::Boot(format!(
                "the udp layer numbers nodes in 16 bits; {} nodes are too many",
                env.num_nodes
            )));
        }
        let sock = Socket::bind(launcher.local_ip(), conf.mtu)
            .map_err(|e| MachineError::io("opening the node's UDP socket", e))?;
        // Strangers' datagrams stay out of the receive buffer; a kernel without socket filters
        // leaves the check to the layer alone, as before.
        if let Err(e) = sock.admit_only(wire::tag(&env.secret), env.node as u16) {
            tracing::debug!(target: "udp", "no socket filter: {e}");
        }
        let rcvbuf = sock
            .set_buffers(conf.sockbuf)
            .map_err(|e| MachineError::io("sizing the UDP socket's buffers", e))?;
        let addr = sock
            .local_addr()
            .map_err(|e| MachineError::io("the UDP socket's address", e))?;
        tracing::debug!(target: "udp", %addr, rcvbuf, mtu = conf.mtu, "socket open");
        // Two nodes connect the one socket, a relay takes everything: no send sockets then.
        let senders = if env.num_nodes >= 3 && conf.via.is_none() && conf.connected_peers > 0 {
            Senders::bind(addr.ip(), env.num_nodes, conf.sockbuf, conf.connected_peers)
                .map_err(|e| tracing::debug!(target: "udp", "no send sockets: {e}"))
                .ok()
        } else {
            None
        };
        Ok(UdpOpen {
            conf,
            sock,
            rcvbuf,
            addr,
            senders,
        })
    }

    /// This node's info for the node table: the socket's address, and the port its send
    /// sockets send from if it has them (`IP:PORT` or `IP:PORT/PORT`).
    fn info(&self) -> Vec<u8> {
        match &self.senders {
            Some(s) => format!("{}/{}", self.addr, s.local_addr().port()).into_bytes(),
            None => mesh::encode_addr(self.addr),
        }
    }

    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        _: &dyn Bootstrap,
    ) -> Result<UdpMachine, MachineError> {
        let UdpOpen {
            conf,
            mut sock,
            rcvbuf,
            addr,
            senders,
        } = self;
        // Each node's socket, and where its send sockets send from.
        let (addrs, sends_from): (Vec<_>, Vec<_>) = (0..table.num_nodes())
            .map(|n| {
                if n == env.node {
                    Ok((addr, None))
                } else {
                    decode_info(&table, n)
                }
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let via = conf.via;
        let coalesce = conf.coalesce;
        let mut ep = Endpoint::new(
            env.node as u16,
            &addrs,
            wire::tag(&env.secret),
            conf,
            rcvbuf,
            Instant::now(),
        );
        for (p, from) in sends_from.iter().enumerate() {
            if let Some(from) = from {
                ep.also_from(p, *from);
            }
        }
        ep.announce(&mut sock)
            .map_err(|e| MachineError::io("announcing this node to the relay", e))?;
        if let Some(s) = senders {
            sock.send_from(s);
        }
        // One address to send to (the relay, or the other node of two): connect to it.
        let only = match via {
            Some(relay) => Some(relay),
            None if addrs.len() == 2 => Some(addrs[1 - env.node]),
            None => None,
        };
        if let Some(peer) = only {
            sock.connect(peer)
                .map_err(|e| MachineError::io("connecting the UDP socket to its one peer", e))?;
        }
        let wake = WakeFd::new().map_err(|e| MachineError::io("creating the node's eventfd", e))?;
        Ok(UdpMachine {
            me: env.node,
            table,
            sock,
            ep,
            empty_polls: 0,
            wake,
            coalesce,
            turn: 0,
            last: vec![(u64::MAX, None); addrs.len()],
            held: 0,
        })
    }
}

/// Node `node`'s info in the table ([`UdpOpen::info`]): its socket's address, and the
/// address its send sockets send from, if it has them.
///
/// # Errors
/// [`MachineError::Boot`] when the entry is missing or malformed.
fn decode_info(
    table: &NodeTable,
    node: usize,
) -> Result<(SocketAddr, Option<SocketAddr>), MachineError> {
    let bad =
        |why: &str| MachineError::Boot(format!("node {node}'s address in the node table {why}"));
    let info = table.node(node).ok_or_else(|| bad("is missing"))?;
    let text = std::str::from_utf8(&info.addr).map_err(|_| bad("is not text"))?;
    let (main, port) = match text.split_once('/') {
        Some((main, port)) => (main, Some(port)),
        None => (text, None),
    };
    let addr: SocketAddr = main.parse().map_err(|_| bad("does not parse"))?;
    let from = port
        .map(|p| match p.parse::<u16>() {
            Ok(p) if p != 0 => Ok(SocketAddr::new(addr.ip(), p)),
            _ => Err(bad("has no send port after '/'")),
        })
        .transpose()?;
    Ok((addr, from))
}

impl UdpMachine {
    fn failure(&self, f: Failure) -> MachineError {
        tracing::debug!(target: "udp", "the protocol failed: {f}");
        match f {
            Failure::Dead { node, reason } => MachineError::peer_dead(&self.table, node, reason),
            Failure::Silent { node, secs, .. } => MachineError::PeerSilent {
                node,
                host: self
                    .table
                    .node(node)
                    .map_or("?", |n| n.host.as_str())
                    .to_owned(),
                secs,
                setting: "udp.dead_after_s",
            },
            Failure::TooLarge { node, len } => MachineError::Io {
                context: format!("sending a message of {len} bytes to node {node}"),
                source: std::io::Error::other("larger than the udp layer carries (1 TiB)"),
            },
            Failure::Io(e) => MachineError::io("the UDP socket", e),
        }
    }

    /// Take what the socket has (a bounded number of batches), run due timers, retry sends
    /// the socket refused. Messages completed go to `deliver`.
    fn progress(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, Failure> {
        self.turn = self.turn.wrapping_add(1);
        let mut n = 0;
        let mut now = None;
        if self.held > 0 {
            // What a handler held for coalescing leaves before anything is taken in.
            self.held = 0;
            let t = Instant::now();
            self.ep.flush(t, &mut self.sock)?;
            now = Some(t);
        }
        let mut landings = [Landing::NONE; RECV_BATCH];
        for _ in 0..MAX_BATCHES {
            let zones = self.ep.landing(&mut landings);
            // SAFETY: the zones are the endpoint's, untouched by it until the datagrams are
            // handed to it below.
            let k = unsafe { self.sock.recv(&landings[..zones]) }?;
            if k == 0 {
                break;
            }
            // One clock reading per batch: for RTT samples and the peers' last-heard times.
            let t = Instant::now();
            now = Some(t);
            for i in 0..k {
                n += match self.sock.datagram(i) {
                    Some(Arrived::Bytes(bytes, from)) => self.ep.receive(bytes, from, t, deliver),
                    Some(Arrived::Placed { head, len, from }) => {
                        self.ep.receive_placed(head, len, from, t, deliver)
                    }
                    None => {
                        self.ep.stats.garbage += 1;
                        0
                    }
                };
            }
            if !self.sock.more() {
                break;
            }
        }
        if let Some(t) = now {
            self.ep.flush(t, &mut self.sock)?;
        }
        if let Some(due) = self.ep.next_timer() {
            // The clock is read only while a timer runs (data outstanding or an ACK owed), and
            // by an empty poll only every CLOCK_EVERY: the timers are tens of microseconds at
            // the least, a poll a fraction of one.
            self.empty_polls = if now.is_some() {
                0
            } else {
                self.empty_polls.wrapping_add(1)
            };
            if now.is_some() || self.empty_polls.is_multiple_of(CLOCK_EVERY) {
                let t = now.unwrap_or_else(Instant::now);
                if t >= due {
                    self.ep.on_timers(t, &mut self.sock)?;
                }
            }
        }
        if self.ep.blocked() {
            self.ep
                .retry(now.unwrap_or_else(Instant::now), &mut self.sock)?;
        }
        Ok(n)
    }

    /// Send what is held for coalescing.
    fn flush_held(&mut self, now: Instant) -> Result<(), MachineError> {
        self.held = 0;
        self.ep
            .flush(now, &mut self.sock)
            .map_err(|f| self.failure(f))
    }

    /// Sleep until a datagram comes, the next timer, a wake, or `limit`. A wake seen is reset
    /// and kept for the next `wait` (see [`WakeFd::take`]).
    fn pause(&mut self, limit: Duration) -> Result<(), MachineError> {
        let mut t = limit;
        if let Some(due) = self.ep.next_timer() {
            t = t.min(due.saturating_duration_since(Instant::now()));
        }
        if t.is_zero() {
            return Ok(());
        }
        let rung = self
            .sock
            .wait(self.ep.blocked(), Some(self.wake.fd()), t)
            .map_err(|e| MachineError::io("waiting on the UDP socket", e))?;
        if rung {
            self.wake.reset();
        }
        Ok(())
    }
}

impl Transport for UdpMachine {
    fn layer(&self) -> &'static str {
        LAYER.name
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        if node >= self.table.num_nodes() || node == self.me {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        // The clock stamps the packets for RTT samples and the retransmission timer.
        let now = Instant::now();
        let (turn, at) = self.last[node];
        let hold = turn == self.turn
            && !self.coalesce.is_zero()
            && msg.wire_len() <= HOLD_MAX
            && at.is_some_and(|t| now.saturating_duration_since(t) < self.coalesce);
        let r = if hold {
            self.held += 1;
            let r = self.ep.send_later(node, msg, now, &mut self.sock);
            if r.is_ok() && self.held >= HOLD_MOST {
                return self.flush_held(now);
            }
            r
        } else {
            self.last[node] = (self.turn, Some(now));
            self.ep.send(node, msg, now, &mut self.sock)
        };
        r.map_err(|f| self.failure(f))
    }

    /// The messages held for coalescing leave (bundled); a new turn begins.
    #[inline]
    fn flush(&mut self) -> Result<(), MachineError> {
        self.turn = self.turn.wrapping_add(1);
        if self.held == 0 {
            return Ok(());
        }
        self.flush_held(Instant::now())
    }

    fn queued(&self, node: usize) -> usize {
        self.ep.held(node)
    }

    fn in_transfer(&self) -> bool {
        self.ep.in_transfer()
    }

    /// Acknowledgements go out from `advance` only: a tenth of `udp.dead_after_s`, so a node
    /// that holds back a flood stays well inside its peers' patience.
    fn max_unpolled(&self) -> Option<std::time::Duration> {
        Some(self.ep.dead_after() / 10)
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        self.progress(deliver).map_err(|f| self.failure(f))
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        Some(self.wake.waker())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.ep.stats;
        let (retransmits, timeouts, probes) = self.ep.retransmissions();
        vec![
            ("udp.datagrams_sent", s.sent),
            ("udp.acks_sent", s.acks),
            ("udp.retransmits", retransmits),
            ("udp.timeouts", timeouts),
            ("udp.tail_probes", probes),
            ("udp.datagrams_received", s.received),
            ("udp.duplicates", s.duplicates),
            ("udp.beyond_window", s.out_of_window),
            ("udp.strangers_dropped", s.foreign),
            ("udp.garbage_dropped", s.garbage),
            ("udp.peers_connected", self.sock.senders_open() as u64),
        ]
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        // Nothing held for coalescing sleeps with this node (the runtime polls before it
        // waits, which flushes; this is for any other caller).
        if self.held > 0 {
            self.flush_held(Instant::now())?;
        }
        if self.wake.take() {
            // Woken during the barrier's nap, and not answered yet.
            return Ok(());
        }
        let r = self.pause(timeout);
        // A wake this pause saw is answered by this return.
        self.wake.take();
        r
    }
}

impl Part for UdpMachine {
    fn nap(&mut self) -> Result<(), MachineError> {
        self.pause(NAP)
    }

    fn forget(&mut self, node: usize) {
        tracing::debug!(target: "udp", peer = node, "peer out of the job");
        self.ep.forget(node);
        self.sock.forget(node);
    }

    fn barrier_mode(&mut self, on: bool) {
        // Acknowledge at once: a peer's last sends are then settled without waiting for
        // the delayed acknowledgement.
        self.ep.set_eager(on);
    }

    fn leave(&mut self) -> Result<(), MachineError> {
        // Get what we sent acknowledged if the peers answer soon (a peer that says goodbye
        // answers for everything); keep acknowledging theirs meanwhile. The job is over:
        // what arrives now is dropped, and not forever.
        self.ep.set_eager(true);
        let deadline = Instant::now() + EXIT_FLUSH;
        while !self.ep.settled() && Instant::now() < deadline {
            if self.progress(&mut |_| {}).is_err() {
                break;
            }
            let _ = self.pause(NAP);
        }
        self.ep.say_bye(&mut self.sock);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use converse_machine::NodeInfo;

    fn table(infos: &[&str]) -> NodeTable {
        NodeTable::new(
            infos
                .iter()
                .enumerate()
                .map(|(n, i)| NodeInfo {
                    first_pe: n,
                    num_pes: 1,
                    host: "h".into(),
                    addr: i.as_bytes().to_vec(),
                })
                .collect(),
        )
        .expect("table")
    }

    #[test]
    fn node_info_names_the_socket_and_the_send_port() {
        let t = table(&["127.0.0.1:4000", "127.0.0.1:4001/4002", "[::1]:5000/5001"]);
        let a = |s: &str| s.parse::<SocketAddr>().expect("addr");
        assert_eq!(decode_info(&t, 0).ok(), Some((a("127.0.0.1:4000"), None)));
        assert_eq!(
            decode_info(&t, 1).ok(),
            Some((a("127.0.0.1:4001"), Some(a("127.0.0.1:4002"))))
        );
        assert_eq!(
            decode_info(&t, 2).ok(),
            Some((a("[::1]:5000"), Some(a("[::1]:5001"))))
        );
        for bad in [
            "127.0.0.1:4000/",
            "127.0.0.1:4000/x",
            "127.0.0.1:4000/0",
            "nowhere/1",
        ] {
            let e = decode_info(&table(&[bad]), 0).err().map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains("node 0's address")),
                "{bad}: {e:?}"
            );
        }
        assert!(decode_info(&t, 3).is_err());
    }
}
