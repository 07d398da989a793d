//! One node's side of the protocol with every peer: datagrams in, messages out in order,
//! acknowledgements, timers, dead peers. It touches no socket: datagrams leave through a
//! [`Transmit`] (the real socket, or a simulated link in tests), and the caller says what time
//! it is, so the whole protocol runs the same in a unit test as in a job.
//!
//! Acknowledgements ride on data whenever data goes back. A pure ACK goes when a gap or a
//! duplicate was seen (the sender needs to know now), when two or more packets came in one
//! receive batch with nothing going back, or when the delayed-ACK timer expires: half the RTT
//! measured to that peer, at most `udp.ack_delay_us`, so a reply computed within that time
//! carries the acknowledgement for free.

use super::config::Config;
use super::link::{Landing, Transmit};
use super::reassembly::{sacked, Arrival, Body, RecvWindow};
use super::window::SendWindow;
use super::wire::{
    self, Expect, Header, Kind, Reject, BASE, BUNDLE_ENTRY, FLAG_BUNDLE, MAX_DATA_HEADER,
    MAX_SACK_EXT,
};
use converse_machine::BufferPool as Pool;
use converse_machine::Message;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Counters, the layer's `udp.*` counters (`+stats`, traces).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams sent (data, acknowledgements, farewells).
    pub sent: u64,
    /// Pure acknowledgements sent.
    pub acks: u64,
    /// Datagrams received and accepted as this job's.
    pub received: u64,
    /// Of those, fragments the kernel wrote straight into their message's buffer.
    pub placed: u64,
    /// Data packets that had already arrived.
    pub duplicates: u64,
    /// Data packets beyond the receive window.
    pub out_of_window: u64,
    /// Datagrams not of this job (magic, tag, node numbers, source address): dropped.
    pub foreign: u64,
    /// Datagrams with this job's tag but impossible fields: dropped.
    pub garbage: u64,
}

/// Why the endpoint cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A peer has left the job.
    #[error("node {node} is gone: {reason}")]
    Dead {
        /// The peer.
        node: usize,
        /// What was seen.
        reason: String,
    },
    /// A peer with data outstanding has sent nothing for `udp.dead_after_s`.
    #[error("node {node} sent nothing for {secs:.1} s with {unacked} packet(s) unacknowledged")]
    Silent {
        /// The peer.
        node: usize,
        /// Seconds of silence.
        secs: f64,
        /// Packets it has not acknowledged.
        unacked: u64,
    },
    /// A message to `node` is larger than the protocol can carry.
    #[error("a message of {len} bytes to node {node} is larger than the udp layer carries")]
    TooLarge {
        /// The peer.
        node: usize,
        /// Its wire bytes.
        len: usize,
    },
    /// The socket failed.
    #[error("the UDP socket: {0}")]
    Io(#[from] io::Error),
}

/// Shortest delayed-ACK timer.
const MIN_ACK_DELAY: Duration = Duration::from_micros(20);

/// Packets received from a peer in one batch that earn a pure ACK at once.
const ACK_EVERY: u32 = 2;

/// Wire bytes of the largest message put in a bundle with others: small messages are what a
/// datagram each costs most for; a larger one is copied for less gain.
pub const BUNDLE_MAX: usize = 1024;

/// Copies of a farewell sent (it is not acknowledged: a lost one costs a peer its exit wait).
const BYE_COPIES: usize = 2;

/// One peer.
struct Peer {
    /// Where its datagrams go.
    to: SocketAddr,
    /// Where its datagrams must come from: the address they came from last, of the two it
    /// may send from (so a landing zone expects the right one).
    from: SocketAddr,
    /// The other address it may send from: its send sockets' (see `senders.rs`) while
    /// `from` is its socket's, or the reverse.
    alt: Option<SocketAddr>,
    /// Created on first use (it needs the path's datagram size).
    tx: Option<SendWindow>,
    rx: RecvWindow,
    /// When a datagram of it last arrived.
    heard: Instant,
    /// When a delayed acknowledgement is due.
    ack_due: Option<Instant>,
    /// Whether it is still in the job.
    state: PeerState,
    /// It is on the list of peers to look at after this batch.
    dirty: bool,
}

/// Where a peer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerState {
    /// In the job.
    Live,
    /// It said goodbye (it left the job normally): nothing more is sent to it.
    Left,
    /// Out of the job (report mode, [`Endpoint::forget`]): nothing more is sent to it, and
    /// what it still sends is dropped.
    Dead,
}

impl Peer {
    /// It said goodbye or is out of the job: nothing more goes to it.
    #[inline]
    fn gone(&self) -> bool {
        self.state != PeerState::Live
    }

    /// Out of the job: what it still sends is dropped.
    #[inline]
    fn dead(&self) -> bool {
        self.state == PeerState::Dead
    }
}

/// One node's protocol state with all its peers.
pub struct Endpoint {
    exp: Expect,
    cfg: Config,
    peers: Vec<Peer>,
    /// Peers to look at after a receive batch (acknowledgements owed, windows opened).
    dirty: Vec<usize>,
    /// The earliest timer of any peer, if one runs (may be early: then nothing is due).
    next_timer: Option<Instant>,
    /// The socket refused datagrams: some peers wait for it to drain.
    blocked: bool,
    /// Acknowledge every packet at once (in a barrier and at exit: peers wait on it).
    eager: bool,
    /// KiB this node can buffer for each peer (advertised in every datagram).
    wnd_kib: u16,
    seqs: Vec<u64>,
    headers: Vec<[u8; MAX_DATA_HEADER]>,
    /// The bodies of the bundles of one batch (reused: no allocation once warm).
    bundles: Vec<Vec<u8>>,
    ackbuf: Vec<u8>,
    /// The peer whose fragments arrive: where the next datagrams will likely go.
    filling: Option<usize>,
    /// Large buffers of messages sent and acknowledged, for large messages received.
    pool: Pool,
    /// Counters.
    pub stats: Stats,
}

// By hand: per-peer windows and buffers would flood a log; the peer count says what it is.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Node `me` of a job whose nodes are at `addrs` (`me`'s own entry unused), stamping and
    /// checking `tag`; `rcvbuf` is the data the socket's receive buffer holds.
    pub fn new(
        me: u16,
        addrs: &[SocketAddr],
        tag: u64,
        cfg: Config,
        rcvbuf: usize,
        now: Instant,
    ) -> Endpoint {
        let peers = addrs
            .iter()
            .map(|&a| Peer {
                to: cfg.via.unwrap_or(a),
                from: cfg.via.unwrap_or(a),
                alt: None,
                tx: None,
                rx: RecvWindow::new(cfg.window),
                heard: now,
                ack_due: None,
                state: PeerState::Live,
                dirty: false,
            })
            .collect();
        // The socket's buffer is shared by every peer that may send at once.
        let share = rcvbuf / addrs.len().saturating_sub(1).max(1);
        Endpoint {
            exp: Expect {
                tag,
                me,
                nodes: addrs.len(),
            },
            peers,
            dirty: Vec::new(),
            next_timer: None,
            blocked: false,
            eager: false,
            wnd_kib: (share >> 10).clamp(1, usize::from(u16::MAX)) as u16,
            seqs: Vec::with_capacity(crate::udp::socket::SEND_BATCH),
            headers: vec![[0; MAX_DATA_HEADER]; crate::udp::socket::SEND_BATCH],
            bundles: vec![Vec::new(); crate::udp::socket::SEND_BATCH],
            ackbuf: vec![0; BASE + 2 + MAX_SACK_EXT],
            filling: None,
            pool: Pool::default(),
            stats: Stats::default(),
            cfg,
        }
    }

    /// Peer `p` may also send from `addr` (its connected send sockets' address), as well as
    /// from its socket's.
    pub fn also_from(&mut self, p: usize, addr: SocketAddr) {
        if let Some(peer) = self.peers.get_mut(p) {
            peer.alt = Some(addr);
        }
    }

    /// The earliest time a timer may need attention.
    pub fn next_timer(&self) -> Option<Instant> {
        self.next_timer
    }

    /// Whether sends wait for the socket to drain.
    pub fn blocked(&self) -> bool {
        self.blocked
    }

    /// Acknowledge every packet at once (`true`: in a barrier and at exit, where peers wait on
    /// our acknowledgements), or let them wait for data to ride on (`false`).
    pub fn set_eager(&mut self, eager: bool) {
        self.eager = eager;
    }

    fn arm(&mut self, t: Instant) {
        if self.next_timer.is_none_or(|n| t < n) {
            self.next_timer = Some(t);
        }
    }

    fn mark(&mut self, p: usize) {
        if !self.peers[p].dirty {
            self.peers[p].dirty = true;
            self.dirty.push(p);
        }
    }

    fn window_of<'a>(
        peers: &'a mut [Peer],
        cfg: &Config,
        p: usize,
        tx: &mut dyn Transmit,
        now: Instant,
    ) -> &'a mut SendWindow {
        let peer = &mut peers[p];
        let to = peer.to;
        peer.tx.get_or_insert_with(|| {
            let max = tx.max_datagram(&to).max(MAX_DATA_HEADER + 64);
            SendWindow::new(cfg.window, max, cfg.rto, cfg.ack_delay, now)
        })
    }

    /// Queue `msg` for peer `p` and send what the windows allow now.
    ///
    /// # Errors
    /// [`Failure::Dead`] when the peer has left the job, [`Failure::TooLarge`],
    /// [`Failure::Io`].
    pub fn send(
        &mut self,
        p: usize,
        msg: Message,
        now: Instant,
        tx: &mut dyn Transmit,
    ) -> Result<(), Failure> {
        self.queue(p, msg, now, tx)?;
        self.pump(p, now, tx)
    }

    /// Put `msg` in peer `p`'s window, numbered, not yet sent.
    fn queue(
        &mut self,
        p: usize,
        msg: Message,
        now: Instant,
        tx: &mut dyn Transmit,
    ) -> Result<(), Failure> {
        if self.peers[p].gone() {
            return Err(Failure::Dead {
                node: p,
                reason: "it has left the job".into(),
            });
        }
        let len = msg.wire_len();
        Self::window_of(&mut self.peers, &self.cfg, p, tx, now)
            .push(msg)
            .map_err(|_| Failure::TooLarge { node: p, len })
    }

    /// As [`send`](Self::send), but what the window lets go leaves at the next
    /// [`flush`](Self::flush), together with what is sent meanwhile (runs of small messages
    /// bundled in one datagram): the layer's coalescing of a burst
    /// (`udp.coalesce_us`).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_later(
        &mut self,
        p: usize,
        msg: Message,
        now: Instant,
        tx: &mut dyn Transmit,
    ) -> Result<(), Failure> {
        self.queue(p, msg, now, tx)?;
        self.mark(p);
        Ok(())
    }

    /// Take one datagram that arrived from `from`; hand up the messages it completes.
    /// Returns how many were handed up. Anything wrong with the datagram is counted and
    /// dropped, never an error.
    pub fn receive(
        &mut self,
        bytes: &[u8],
        from: SocketAddr,
        now: Instant,
        deliver: &mut dyn FnMut(Message),
    ) -> usize {
        match wire::decode(bytes, &self.exp) {
            Ok(d) if d.bundle => self.accept_bundle(&d.hdr, d.body, from, now, deliver),
            Ok(d) => self.accept(&d.hdr, Body::Bytes(d.body), d.body, from, now, deliver),
            Err(r) => {
                self.reject(r);
                0
            }
        }
    }

    /// Take a data fragment the socket received straight into its place (one of the
    /// [`landing`](Self::landing) zones): `head` is its header, `len` its whole length.
    /// Returns how many messages were handed up.
    pub fn receive_placed(
        &mut self,
        head: &[u8],
        len: usize,
        from: SocketAddr,
        now: Instant,
        deliver: &mut dyn FnMut(Message),
    ) -> usize {
        match wire::decode_header(head, len, &self.exp) {
            Ok((h, _)) if h.kind == Kind::Data && h.frag.is_some() => {
                self.stats.placed += 1;
                self.accept(&h, Body::Placed, &[], from, now, deliver)
            }
            Ok(_) => {
                self.stats.garbage += 1;
                0
            }
            Err(r) => {
                self.reject(r);
                0
            }
        }
    }

    fn reject(&mut self, r: Reject) {
        match r {
            Reject::Foreign => self.stats.foreign += 1,
            Reject::Garbage => self.stats.garbage += 1,
        }
    }

    /// A checked bundle from `from`: its messages are packets `h.seq`, `h.seq + 1`, ...; the
    /// first goes through [`accept`](Self::accept) (the sender's address, its
    /// acknowledgements), the others straight to the receive window if it did.
    fn accept_bundle(
        &mut self,
        h: &Header,
        body: &[u8],
        from: SocketAddr,
        now: Instant,
        deliver: &mut dyn FnMut(Message),
    ) -> usize {
        let mut entries = wire::bundle_entries(body);
        let Some(first) = entries.next() else {
            return 0;
        };
        let received = self.stats.received;
        let mut delivered = self.accept(h, Body::Bytes(first), first, from, now, deliver);
        if self.stats.received == received {
            // Not taken from that address: neither are the rest.
            return delivered;
        }
        let p = usize::from(h.src);
        for (i, entry) in entries.enumerate() {
            let seq = h.seq.wrapping_add(i as u32 + 1);
            let (arrival, n) =
                self.peers[p]
                    .rx
                    .on_data(seq, None, Body::Bytes(entry), &mut self.pool, deliver);
            delivered += n;
            match arrival {
                Arrival::Accepted => {}
                Arrival::Duplicate => self.stats.duplicates += 1,
                Arrival::OutOfWindow => self.stats.out_of_window += 1,
                Arrival::Inconsistent => self.stats.garbage += 1,
            }
        }
        delivered
    }

    /// A checked datagram from `from`: data (`body`), acknowledgements (`ext`: an ACK's
    /// SACK extension), farewell.
    fn accept(
        &mut self,
        h: &Header,
        body: Body<'_>,
        ext: &[u8],
        from: SocketAddr,
        now: Instant,
        deliver: &mut dyn FnMut(Message),
    ) -> usize {
        let p = usize::from(h.src);
        if from != self.peers[p].from || self.peers[p].dead() {
            let peer = &mut self.peers[p];
            if peer.alt != Some(from) || peer.dead() {
                self.stats.foreign += 1;
                return 0;
            }
            // The peer sends from its other address now (a peer sends to us from one, so
            // this happens once): expect that one first.
            peer.alt = Some(std::mem::replace(&mut peer.from, from));
        }
        self.stats.received += 1;
        let peer = &mut self.peers[p];
        peer.heard = now;
        let mut delivered = 0;
        match h.kind {
            Kind::Data => {
                let (arrival, n) = peer
                    .rx
                    .on_data(h.seq, h.frag, body, &mut self.pool, deliver);
                delivered = n;
                match arrival {
                    Arrival::Accepted => {}
                    Arrival::Duplicate => self.stats.duplicates += 1,
                    Arrival::OutOfWindow => self.stats.out_of_window += 1,
                    Arrival::Inconsistent => self.stats.garbage += 1,
                }
                if h.frag.is_some() {
                    self.filling = Some(p);
                }
                self.on_ack_fields(p, h, &[], now);
            }
            Kind::Ack => self.on_ack_fields(p, h, ext, now),
            Kind::Bye => {
                let peer = &mut self.peers[p];
                if peer.state == PeerState::Live {
                    peer.state = PeerState::Left;
                }
                if let Some(tx) = peer.tx.as_mut() {
                    tx.clear();
                }
            }
        }
        self.mark(p);
        delivered
    }

    /// Report mode: peer `p` is out of the job. What is queued for it or unacknowledged by it
    /// is dropped, a message part-way reassembled from it is released, its timers stop, and
    /// whatever it still sends (a stopped process that wakes, a partitioned host) is dropped
    /// like a stranger's datagram.
    pub fn forget(&mut self, p: usize) {
        let Some(peer) = self.peers.get_mut(p) else {
            return;
        };
        peer.state = PeerState::Dead;
        peer.ack_due = None;
        if let Some(tx) = peer.tx.as_mut() {
            tx.clear();
        }
        peer.rx = RecvWindow::new(self.cfg.window);
        if self.filling == Some(p) {
            self.filling = None;
        }
    }

    /// Where the next datagrams are likely to belong: the missing fragments of the peer that
    /// sent the last fragment, written to `out`; returns how many. The socket receives
    /// datagrams there, so a large message's payload is copied once, by the kernel.
    pub fn landing(&mut self, out: &mut [Landing]) -> usize {
        let Some(p) = self.filling else {
            return 0;
        };
        let from = self.peers[p].from;
        let mut n = 0;
        self.peers[p].rx.holes(out.len(), |h| {
            out[n] = Landing {
                from,
                src: p as u16,
                seq: h.seq as u32,
                index: h.index,
                ptr: h.ptr,
                len: h.len,
            };
            n += 1;
        });
        if n == 0 {
            self.filling = None;
        }
        n
    }

    fn on_ack_fields(&mut self, p: usize, h: &Header, ext: &[u8], now: Instant) {
        let Some(tx) = self.peers[p].tx.as_mut() else {
            return;
        };
        let (una, _) = tx.bounds();
        let ack = wire::widen(h.ack, una);
        let wnd = usize::from(h.wnd) << 10;
        let fx = tx.on_ack(ack, sacked(ack, h.sack, ext), wnd, now, &mut self.pool);
        if h.dup {
            tx.on_duplicate_report();
        }
        if fx.invalid {
            self.stats.garbage += 1;
        }
    }

    /// After a batch of datagrams: send what acknowledgements opened the windows for,
    /// acknowledgements owed, and start delayed-ACK timers.
    ///
    /// # Errors
    /// [`Failure::Io`].
    pub fn flush(&mut self, now: Instant, tx: &mut dyn Transmit) -> Result<(), Failure> {
        while let Some(p) = self.dirty.pop() {
            self.peers[p].dirty = false;
            if self.peers[p].gone() {
                continue;
            }
            self.pump(p, now, tx)?;
            let peer = &mut self.peers[p];
            if !peer.rx.owes_ack() {
                continue;
            }
            if self.eager || peer.rx.ack_now || peer.rx.unacked >= ACK_EVERY {
                self.send_ack(p, tx)?;
            } else if peer.ack_due.is_none() {
                let delay = self.ack_delay(p);
                self.peers[p].ack_due = Some(now + delay);
                self.arm(now + delay);
            }
        }
        Ok(())
    }

    fn ack_delay(&self, p: usize) -> Duration {
        let srtt = self.peers[p]
            .tx
            .as_ref()
            .and_then(|t| t.rtt().srtt())
            .unwrap_or(self.cfg.ack_delay);
        (srtt / 2).clamp(MIN_ACK_DELAY.min(self.cfg.ack_delay), self.cfg.ack_delay)
    }

    /// Send to peer `p` what the windows allow: retransmissions, then new packets, in batches
    /// (runs of consecutive whole messages of at most [`BUNDLE_MAX`] bytes in one datagram),
    /// each carrying our acknowledgement of its data.
    fn pump(&mut self, p: usize, now: Instant, tx: &mut dyn Transmit) -> Result<(), Failure> {
        loop {
            let peer = &mut self.peers[p];
            let Some(w) = peer.tx.as_mut() else {
                return Ok(());
            };
            if !w.has_work() {
                break;
            }
            self.seqs.clear();
            w.take(&mut self.seqs, self.headers.len(), now);
            if self.seqs.is_empty() {
                break;
            }
            let (ack, sack) = peer.rx.ack_fields();
            let mut hdr = Header {
                kind: Kind::Data,
                src: self.exp.me,
                dst: p as u16,
                wnd: self.wnd_kib,
                tag: self.exp.tag,
                seq: 0,
                ack: ack as u32,
                sack,
                frag: None,
                dup: peer.rx.dup_seen,
            };
            let k = self.seqs.len();
            if k == 1 {
                // The common case, a message of one datagram: its header goes into the
                // message's headroom and the datagram leaves in one piece from its buffer.
                hdr.seq = self.seqs[0] as u32;
                if let Some(frame) = w.frame(self.seqs[0], &hdr) {
                    let sent = tx.transmit_one(p, &peer.to, frame)?;
                    if sent {
                        self.stats.sent += 1;
                        peer.rx.acked();
                        peer.ack_due = None;
                    } else {
                        w.unsend(&self.seqs);
                        self.blocked = true;
                        break;
                    }
                    continue;
                }
            }
            // Datagram d carries packets seqs[span[d].0 ..][.. span[d].1]: one, or a bundle of
            // consecutive whole small messages (one copy each into the bundle's body, against
            // a datagram's trip through two kernels each).
            let mut span = [(0usize, 0usize); crate::udp::socket::SEND_BATCH];
            // No bundles with coalescing off (`udp.coalesce_us=0`): a datagram per message.
            let room = if self.cfg.coalesce.is_zero() {
                0
            } else {
                w.dgram_max().saturating_sub(BASE)
            };
            let mut nd = 0;
            let mut i = 0;
            while i < k {
                let seq = self.seqs[i];
                let mut j = i;
                let mut size = 0;
                while room > 0 && j < k && self.seqs[j] == seq + (j - i) as u64 {
                    let (frag, body) = w.datagram(self.seqs[j]);
                    if frag.is_some()
                        || body.len() > BUNDLE_MAX
                        || size + BUNDLE_ENTRY + body.len() > room
                    {
                        break;
                    }
                    size += BUNDLE_ENTRY + body.len();
                    j += 1;
                }
                hdr.seq = seq as u32;
                if j - i >= 2 {
                    let b = &mut self.bundles[nd];
                    b.clear();
                    for &s in &self.seqs[i..j] {
                        let body = w.datagram(s).1;
                        b.extend_from_slice(&(body.len() as u32).to_le_bytes());
                        b.extend_from_slice(body);
                    }
                    hdr.frag = None;
                    hdr.write(&mut self.headers[nd]);
                    self.headers[nd][1] |= FLAG_BUNDLE;
                    span[nd] = (i, j - i);
                    i = j;
                } else {
                    hdr.frag = w.datagram(seq).0;
                    hdr.write(&mut self.headers[nd]);
                    span[nd] = (i, 1);
                    i += 1;
                }
                nd += 1;
            }
            let mut dgrams: [[&[u8]; 2]; crate::udp::socket::SEND_BATCH] =
                [[&[], &[]]; crate::udp::socket::SEND_BATCH];
            for d in 0..nd {
                let (first, n) = span[d];
                dgrams[d] = if n > 1 {
                    [&self.headers[d][..BASE], &self.bundles[d][..]]
                } else {
                    let (frag, body) = w.datagram(self.seqs[first]);
                    let hlen = if frag.is_some() {
                        MAX_DATA_HEADER
                    } else {
                        BASE
                    };
                    [&self.headers[d][..hlen], body]
                };
            }
            let sent = tx.transmit(p, &peer.to, &dgrams[..nd])?;
            // A second clock reading for a batch (not for a lone datagram): see `left`.
            w.left(tx.left_at(now));
            self.stats.sent += sent as u64;
            if sent > 0 {
                peer.rx.acked();
                peer.ack_due = None;
            }
            if sent < nd {
                w.unsend(&self.seqs[span[sent].0..]);
                self.blocked = true;
                break;
            }
        }
        if let Some(t) = self.peers[p].tx.as_ref().and_then(|w| w.deadline()) {
            self.arm(t);
            self.arm(self.peers[p].heard.max(self.progress_at(p)) + self.cfg.dead_after);
        }
        Ok(())
    }

    fn progress_at(&self, p: usize) -> Instant {
        self.peers[p]
            .tx
            .as_ref()
            .map_or(self.peers[p].heard, |w| w.progress_at())
    }

    /// A pure acknowledgement to peer `p`, with SACK bits for everything held.
    fn send_ack(&mut self, p: usize, tx: &mut dyn Transmit) -> Result<(), Failure> {
        let peer = &mut self.peers[p];
        let (ack, sack) = peer.rx.ack_fields();
        let nxt = peer.tx.as_ref().map_or(0, |w| w.bounds().1);
        let h = Header {
            kind: Kind::Ack,
            src: self.exp.me,
            dst: p as u16,
            wnd: self.wnd_kib,
            tag: self.exp.tag,
            seq: nxt as u32,
            ack: ack as u32,
            sack,
            frag: None,
            dup: peer.rx.dup_seen,
        };
        h.write(&mut self.ackbuf);
        let n = peer.rx.sack_ext(&mut self.ackbuf[BASE + 2..]);
        self.ackbuf[BASE..BASE + 2].copy_from_slice(&(n as u16).to_le_bytes());
        if tx.transmit_one(p, &peer.to, &self.ackbuf[..BASE + 2 + n])? {
            peer.rx.acked();
            peer.ack_due = None;
            self.stats.sent += 1;
            self.stats.acks += 1;
        } else {
            self.blocked = true;
        }
        Ok(())
    }

    /// Run the timers that are due: delayed acknowledgements, retransmission timeouts, dead
    /// peers. Cheap when none is: call it whenever convenient.
    ///
    /// # Errors
    /// [`Failure::Silent`] naming the first silent peer; [`Failure::Io`].
    pub fn on_timers(&mut self, now: Instant, tx: &mut dyn Transmit) -> Result<(), Failure> {
        if self.next_timer.is_none_or(|t| t > now) {
            return Ok(());
        }
        self.next_timer = None;
        for p in 0..self.peers.len() {
            if self.peers[p].gone() {
                continue;
            }
            if self.peers[p].ack_due.is_some_and(|t| t <= now) {
                self.send_ack(p, tx)?;
            }
            if let Some(t) = self.peers[p].ack_due {
                self.arm(t);
            }
            let heard = self.peers[p].heard;
            let Some(w) = self.peers[p].tx.as_mut() else {
                continue;
            };
            if !w.outstanding() {
                continue;
            }
            let silent_since = heard.max(w.progress_at());
            let silence = now.saturating_duration_since(silent_since);
            if silence >= self.cfg.dead_after {
                let (una, nxt) = w.bounds();
                return Err(Failure::Silent {
                    node: p,
                    secs: silence.as_secs_f64(),
                    unacked: nxt - una,
                });
            }
            if w.deadline().is_some_and(|t| t <= now) {
                // Per timeout, not per packet: at trace level, for a lossy network's story.
                tracing::trace!(target: "udp", peer = p, "retransmission timeout");
                w.on_timer(now);
            }
            self.pump(p, now, tx)?;
        }
        Ok(())
    }

    /// Try again the peers that waited for the socket to drain.
    ///
    /// # Errors
    /// [`Failure::Io`].
    pub fn retry(&mut self, now: Instant, tx: &mut dyn Transmit) -> Result<(), Failure> {
        self.blocked = false;
        for p in 0..self.peers.len() {
            let work = self.peers[p].tx.as_ref().is_some_and(|w| w.has_work());
            if work && !self.peers[p].gone() {
                self.pump(p, now, tx)?;
            }
            if self.peers[p].rx.ack_now {
                self.send_ack(p, tx)?;
            }
        }
        Ok(())
    }

    /// Wire bytes held for peer `p`: queued, or sent and not yet acknowledged.
    pub fn held(&self, p: usize) -> usize {
        self.peers
            .get(p)
            .and_then(|peer| peer.tx.as_ref())
            .map_or(0, SendWindow::held)
    }

    /// Whether a message is part-way through: the socket refused datagrams, packets wait for
    /// a window to open (a message part-way out: acknowledgements to come will let the rest
    /// go), or a message is part-way reassembled (its other fragments are on the way). Sent
    /// packets merely waiting for their acknowledgement do not count: what comes next is the
    /// peer's answer, not the rest of a message. A walk over the peers: only asked when idle.
    pub fn in_transfer(&self) -> bool {
        self.blocked
            || self.peers.iter().any(|p| {
                !p.gone() && (p.rx.assembling() || p.tx.as_ref().is_some_and(SendWindow::has_work))
            })
    }

    /// Silence, with data outstanding, after which this endpoint's peers take it for dead.
    pub fn dead_after(&self) -> std::time::Duration {
        self.cfg.dead_after
    }

    /// Every message sent has been acknowledged, or its peer has left.
    pub fn settled(&self) -> bool {
        self.peers
            .iter()
            .all(|p| p.gone() || p.tx.as_ref().is_none_or(|w| w.is_idle()))
    }

    /// Tell every peer we exchanged anything with that we leave.
    pub fn say_bye(&mut self, tx: &mut dyn Transmit) {
        for p in 0..self.peers.len() {
            let peer = &self.peers[p];
            if peer.gone() || (peer.tx.is_none() && peer.rx.nxt() == 0) {
                continue;
            }
            let h = Header {
                kind: Kind::Bye,
                src: self.exp.me,
                dst: p as u16,
                wnd: 0,
                tag: self.exp.tag,
                seq: 0,
                ack: peer.rx.nxt() as u32,
                sack: 0,
                frag: None,
                dup: false,
            };
            let mut b = [0u8; BASE];
            h.write(&mut b);
            for _ in 0..BYE_COPIES {
                // Best effort: the job is over.
                if tx.transmit(p, &peer.to, &[[&b, &[]]]).is_ok() {
                    self.stats.sent += 1;
                }
            }
        }
    }

    /// A datagram through the relay (`udp.via`) that tells it where this node is: from us,
    /// to us. The relay learns our address from it and forwards nothing.
    ///
    /// # Errors
    /// The socket's.
    pub fn announce(&mut self, tx: &mut dyn Transmit) -> io::Result<()> {
        let Some(via) = self.cfg.via else {
            return Ok(());
        };
        let h = Header {
            kind: Kind::Bye,
            src: self.exp.me,
            dst: self.exp.me,
            wnd: 0,
            tag: self.exp.tag,
            seq: 0,
            ack: 0,
            sack: 0,
            frag: None,
            dup: false,
        };
        let mut b = [0u8; BASE];
        h.write(&mut b);
        // To the relay: as to our own node, for which no socket is ever connected.
        tx.transmit(usize::from(self.exp.me), &via, &[[&b, &[]]])
            .map(|_| ())
    }

    /// Packets retransmitted, timeouts and tail-loss probes, summed over peers.
    pub fn retransmissions(&self) -> (u64, u64, u64) {
        self.peers
            .iter()
            .filter_map(|p| p.tx.as_ref())
            .fold((0, 0, 0), |(r, t, p), w| {
                (r + w.retransmits, t + w.timeouts, p + w.probes)
            })
    }
}

#[cfg(test)]
mod tests;
