//! One `udp://` connection's protocol, sans I/O: a reliable, ordered byte stream over
//! datagrams that may be lost, duplicated or reordered — what TCP gives the other schemes.
//! Bytes in from the program ([`Session::write`]), datagrams out ([`Session::transmit`]);
//! datagrams in ([`Session::receive`]), bytes out in order ([`Session::ready`]); the caller
//! says what time it is, so tests run it over a simulated network.
//!
//! - **Sequence numbers** are byte offsets (u64: they never wrap). A datagram carries the
//!   cumulative acknowledgement and the receive window of its sender.
//! - **Reliability**: the receiver holds early segments (within its window) until the gap
//!   before them fills, drops duplicates, and acknowledges at once what came out of order
//!   (each such ACK a duplicate one for the sender). The sender retransmits the first
//!   unacknowledged segment after three duplicate ACKs, and again at each partial ACK until
//!   the loss is repaired (NewReno); after a retransmission timeout (RFC 6298 from measured
//!   round trips, Karn's rule, doubling) it goes back to the first unacknowledged byte.
//! - **Bounded memory**: what the sender holds (sent and unacknowledged, or not yet sent) is
//!   at most `send_buffer`; what the receiver holds (in order for the program, or early) at
//!   most `recv_buffer`, and it advertises only what is left, so a program that stops
//!   reading closes the window and the sender stops, as TCP's does (probing a closed window
//!   until it opens). A congestion window (slow start, halving on loss) keeps a sender from
//!   flooding a path.
//! - **A peer that vanishes**: each side sends a probe after `keepalive` without sending
//!   anything, which the other answers; a peer heard from for `dead_after` is gone
//!   ([`Session::ended`] says why).
//! - **Ending**: a program that closes its side has its bytes delivered, then a `CLOSE`
//!   (retransmitted until acknowledged); `RESET` ends a connection at once.
//!
//! The datagram (all integers little-endian):
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | magic `CVEU` | not this protocol otherwise (dropped) |
//! | 4 | kind u8 | 1 `OPEN`, 2 `OPENED`, 3 `DATA`, 4 `ACK`, 5 `PROBE`, 6 `CLOSE`, 7 `RESET`, 8 `COOKIE` |
//! | 5 | version u8 (2) | 1 had no `COOKIE`: its datagrams are dropped |
//! | 6..14 | connection u64 | chosen at random by the connector: tells a connection from an earlier one from the same address, and a stranger cannot guess it |
//! | 14..22 | seq u64 | `DATA`: offset of its first byte; `CLOSE`: the stream's end; `COOKIE`: the cookie; `OPEN`: 0, then the cookie echoed |
//! | 22..30 | ack u64 | every byte before it received |
//! | 30..34 | window u32 | bytes the sender of this datagram takes beyond `ack` |
//! | 34.. | payload | `DATA` only |
//!
//! `OPEN` (connector, repeated until answered) asks the listener for a connection. The
//! listener answers a first `OPEN` (`seq` 0, or a cookie it did not make or that expired)
//! with `COOKIE`, keeping nothing: the cookie is a keyed hash of the connector's address, the
//! connection id and the time (`udp/mod.rs`), so only a connector that receives datagrams at
//! its address can echo it, and `OPEN`s from forged addresses cost the listener no memory.
//! The connector repeats `OPEN` with the cookie in `seq`; only that one makes a connection,
//! which `OPENED` answers (the listener repeats it for a repeated `OPEN`). `PROBE` asks for
//! an `ACK`.
//! `CLOSE` takes one sequence number after the stream's last byte, so its acknowledgement is
//! `ack = seq + 1`. A listener answers a datagram of a connection it does not know with
//! `RESET` (one for one, never more bytes than came). The handshake of the endpoint protocol
//! (`wire.rs`: the secret proved both ways) runs over the stream as over TCP.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Most pieces of early data one connection holds (see `Session::hold_early`).
const EARLY_SEGMENTS_MAX: usize = 8192;

/// Most acknowledgements one connection owes at once (one datagram says them all).
const ACKS_OWED_MAX: u32 = 64;

/// Magic of every datagram.
pub(crate) const MAGIC: &[u8; 4] = b"CVEU";
/// The protocol's version.
pub(crate) const VERSION: u8 = 2;
/// Bytes before a datagram's payload.
pub(crate) const HEADER: usize = 34;

pub(crate) const OPEN: u8 = 1;
pub(crate) const OPENED: u8 = 2;
pub(crate) const DATA: u8 = 3;
pub(crate) const ACK: u8 = 4;
pub(crate) const PROBE: u8 = 5;
pub(crate) const CLOSE: u8 = 6;
pub(crate) const RESET: u8 = 7;
pub(crate) const COOKIE: u8 = 8;

/// A datagram's header, as decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: u8,
    pub(crate) conn: u64,
    pub(crate) seq: u64,
    pub(crate) ack: u64,
    pub(crate) wnd: u32,
}

impl Header {
    pub(crate) fn write(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(MAGIC);
        out[4] = self.kind;
        out[5] = VERSION;
        out[6..14].copy_from_slice(&self.conn.to_le_bytes());
        out[14..22].copy_from_slice(&self.seq.to_le_bytes());
        out[22..30].copy_from_slice(&self.ack.to_le_bytes());
        out[30..34].copy_from_slice(&self.wnd.to_le_bytes());
    }

    /// The header and payload of a datagram of this protocol, or `None` (not ours: dropped).
    pub(crate) fn decode(b: &[u8]) -> Option<(Header, &[u8])> {
        if b.len() < HEADER || &b[..4] != MAGIC || b[5] != VERSION {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let h = Header {
            kind: b[4],
            conn: u64_at(6),
            seq: u64_at(14),
            ack: u64_at(22),
            wnd: u32::from_le_bytes(b[30..34].try_into().unwrap_or_default()),
        };
        if !(OPEN..=COOKIE).contains(&h.kind) || (h.kind != DATA && b.len() != HEADER) {
            return None;
        }
        Some((h, &b[HEADER..]))
    }
}

/// The tunables of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Config {
    /// Payload bytes per datagram (the path's datagram size less the header).
    pub(crate) mss: usize,
    /// Bytes the sender holds, sent and unacknowledged or waiting.
    pub(crate) send_buffer: usize,
    /// Bytes the receiver holds, for the program or early.
    pub(crate) recv_buffer: usize,
    /// The most window advertised (the socket's receive buffer share: more would be dropped
    /// by the kernel).
    pub(crate) max_window: usize,
    /// Silence on this side after which a probe goes.
    pub(crate) keepalive: Duration,
    /// Silence of the peer after which it is gone.
    pub(crate) dead_after: Duration,
    pub(crate) min_rto: Duration,
    pub(crate) max_rto: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mss: 1400 - HEADER,
            send_buffer: 2 << 20,
            recv_buffer: 2 << 20,
            max_window: 2 << 20,
            keepalive: Duration::from_secs(1),
            dead_after: Duration::from_secs(10),
            min_rto: Duration::from_millis(20),
            max_rto: Duration::from_secs(1),
        }
    }
}

/// Where a connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// The connector waits for `OPENED`.
    Opening,
    Open,
    /// Over: why, for the program (`None`: both sides closed it in order).
    Ended(Option<String>),
}

/// The send side's retransmission timer and round-trip estimate (RFC 6298).
#[derive(Debug)]
struct Rtt {
    srtt: Option<Duration>,
    var: Duration,
    rto: Duration,
}

impl Rtt {
    fn sample(&mut self, r: Duration, cfg: &Config) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.var = r / 2;
            }
            Some(s) => {
                let d = s.abs_diff(r);
                self.var = (self.var * 3 + d) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
        let base = self.srtt.unwrap_or(r) + (self.var * 4).max(Duration::from_micros(100));
        self.rto = base.clamp(cfg.min_rto, cfg.max_rto);
    }
}

/// Counters of what a `udp://` connection's protocol repaired, from its start
/// ([`Connection::udp_stats`](crate::Connection::udp_stats)): they tell a program (and the
/// tests) that the network did damage and the stream mended it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct UdpStats {
    /// Data datagrams sent again (fast retransmit, or after a timeout).
    pub retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Data datagrams received that held nothing new.
    pub duplicates: u64,
    /// Data datagrams received ahead of a gap (held until it fills).
    pub early: u64,
    /// Data datagrams (or parts) received beyond the window advertised, dropped.
    pub beyond_window: u64,
}

/// One connection's protocol state.
#[derive(Debug)]
pub(crate) struct Session {
    conn: u64,
    cfg: Config,
    state: State,
    // Send side: `out` holds the bytes from `una` on (unacknowledged, then unsent).
    out: VecDeque<u8>,
    una: u64,
    nxt: u64,
    /// The furthest byte ever sent (below it, a send is a retransmission: not timed).
    high: u64,
    /// The peer takes bytes below this (its ack plus its window).
    edge: u64,
    cwnd: usize,
    ssthresh: usize,
    rtt: Rtt,
    backoff: u32,
    rto_at: Option<Instant>,
    /// A segment being timed: its end and when it left (none while retransmitting: Karn).
    timed: Option<(u64, Instant)>,
    dupacks: u32,
    /// In loss recovery until `una` reaches this.
    recover: Option<u64>,
    /// The segment at `una` goes again before anything new.
    resend_una: bool,
    /// The program has closed its side: a `CLOSE` follows its bytes.
    closing: bool,
    /// When the `CLOSE` goes (again), once every byte is acknowledged.
    close_at: Option<Instant>,
    close_sent: bool,
    close_acked: bool,
    // Receive side.
    rcv_nxt: u64,
    ready: VecDeque<u8>,
    early: BTreeMap<u64, Vec<u8>>,
    early_bytes: usize,
    /// The peer's `CLOSE` came (after all its bytes).
    peer_closed: bool,
    /// Pure ACKs owed (several after segments out of order: each is a duplicate ACK).
    acks_owed: u32,
    /// The window last advertised, to send an update when the program has made room.
    told_wnd: usize,
    /// When this side last sent, and last heard the peer.
    sent_at: Instant,
    heard: Instant,
    probe_at: Option<Instant>,
    open_at: Option<Instant>,
    /// The connector's: the listener's cookie to echo in `OPEN` (0 until one came).
    cookie: u64,
    pub(crate) stats: UdpStats,
}

impl Session {
    /// The connector's side of connection `conn`: `OPEN` goes first.
    pub(crate) fn connect(conn: u64, cfg: Config, now: Instant) -> Session {
        let mut s = Session::new(conn, cfg, now);
        s.state = State::Opening;
        s.open_at = Some(now);
        s
    }

    /// The listener's side, after an `OPEN`: `OPENED` goes first.
    pub(crate) fn accept(conn: u64, cfg: Config, now: Instant) -> Session {
        let mut s = Session::new(conn, cfg, now);
        s.open_at = Some(now);
        s
    }

    fn new(conn: u64, cfg: Config, now: Instant) -> Session {
        Session {
            conn,
            state: State::Open,
            out: VecDeque::new(),
            una: 0,
            nxt: 0,
            high: 0,
            edge: cfg.mss as u64,
            cwnd: 10 * cfg.mss,
            ssthresh: usize::MAX,
            rtt: Rtt {
                srtt: None,
                var: Duration::ZERO,
                rto: Duration::from_millis(200).clamp(cfg.min_rto, cfg.max_rto),
            },
            backoff: 0,
            rto_at: None,
            timed: None,
            dupacks: 0,
            recover: None,
            resend_una: false,
            closing: false,
            close_at: None,
            close_sent: false,
            close_acked: false,
            rcv_nxt: 0,
            ready: VecDeque::new(),
            early: BTreeMap::new(),
            early_bytes: 0,
            peer_closed: false,
            acks_owed: 0,
            told_wnd: 0,
            sent_at: now,
            heard: now,
            probe_at: None,
            open_at: None,
            cookie: 0,
            stats: UdpStats::default(),
            cfg,
        }
    }

    pub(crate) fn conn(&self) -> u64 {
        self.conn
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// Why the connection is over, once it is (`Some(None)`: closed in order by both).
    pub(crate) fn ended(&self) -> Option<Option<&str>> {
        match &self.state {
            State::Ended(why) => Some(why.as_deref()),
            _ => None,
        }
    }

    fn end(&mut self, why: Option<String>) {
        if !matches!(self.state, State::Ended(_)) {
            self.state = State::Ended(why);
            self.out.clear();
            self.early.clear();
            self.early_bytes = 0;
        }
    }

    /// End it for a reason found outside the protocol (the socket's error).
    pub(crate) fn fail(&mut self, why: String) {
        self.end(Some(why));
    }

    /// Bytes the program may write now.
    pub(crate) fn room(&self) -> usize {
        if self.closing || matches!(self.state, State::Ended(_)) {
            return 0;
        }
        self.cfg.send_buffer.saturating_sub(self.out.len())
    }

    /// Take bytes the program writes, as many as there is room for; returns how many.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.room());
        self.out.extend(&bytes[..n]);
        n
    }

    /// The program has closed its side: its bytes go, then `CLOSE`.
    pub(crate) fn close(&mut self) {
        self.closing = true;
        // What comes for it from now is taken and dropped (nobody reads it), so the peer
        // is not stalled on a window that never opens.
        self.ready.clear();
    }

    /// The bytes in order for the program (two slices: the ring's halves).
    pub(crate) fn ready(&self) -> (&[u8], &[u8]) {
        self.ready.as_slices()
    }

    /// Whether every byte the peer sent before its `CLOSE` has been handed to the program.
    pub(crate) fn peer_done(&self) -> bool {
        self.peer_closed && self.ready.is_empty()
    }

    /// The program took `n` of the [`ready`](Self::ready) bytes.
    pub(crate) fn consume(&mut self, n: usize) {
        self.ready.drain(..n.min(self.ready.len()));
        // Room made: say so if the peer may be held back by what it was told.
        let w = self.window();
        if self.told_wnd < self.cfg.mss.min(self.cfg.max_window) && w >= self.cfg.mss
            || w >= self.told_wnd + self.cfg.recv_buffer.min(self.cfg.max_window) / 2
        {
            self.acks_owed = self.acks_owed.max(1);
        }
    }

    /// The window this side advertises.
    fn window(&self) -> usize {
        self.cfg
            .recv_buffer
            .saturating_sub(self.ready.len() + self.early_bytes)
            .min(self.cfg.max_window)
    }

    /// Take a datagram of this connection (its `conn` checked by the caller).
    pub(crate) fn receive(&mut self, h: &Header, payload: &[u8], now: Instant) {
        if matches!(self.state, State::Ended(_)) {
            return;
        }
        self.heard = now;
        match h.kind {
            RESET => return self.end(Some("it reset the connection".into())),
            OPEN => {
                // Our OPENED was lost: it goes again.
                self.open_at = Some(now);
                return;
            }
            COOKIE => {
                if self.state == State::Opening && h.seq != 0 {
                    // The listener keeps nothing until its cookie comes back: at once.
                    self.cookie = h.seq;
                    self.open_at = Some(now);
                }
                // Not an answer that the connection is open (nor an ACK of anything).
                return;
            }
            OPENED => {}
            PROBE => self.acks_owed = self.acks_owed.max(1),
            _ => {}
        }
        if self.state == State::Opening {
            // OPENED, or anything else the listener sends, says it is open.
            self.state = State::Open;
            self.open_at = None;
            self.backoff = 0;
        }
        if h.kind != OPEN {
            self.on_ack(h, now);
        }
        if matches!(self.state, State::Ended(_)) {
            return;
        }
        match h.kind {
            DATA => self.on_data(h.seq, payload),
            CLOSE => {
                if h.seq == self.rcv_nxt && !self.peer_closed {
                    self.peer_closed = true;
                    self.rcv_nxt += 1;
                }
                self.acks_owed = self.acks_owed.max(1);
                if self.peer_closed && self.closing && self.close_acked {
                    self.end(None);
                }
            }
            _ => {}
        }
    }

    fn on_data(&mut self, seq: u64, payload: &[u8]) {
        if payload.is_empty() {
            return;
        }
        // Saturating: `seq` is the peer's word, and one near `u64::MAX` must not overflow
        // (it lies beyond any window, and is dropped below).
        let end = seq.saturating_add(payload.len() as u64);
        if end <= self.rcv_nxt || self.peer_closed {
            // Ours already: the peer missed our ACK.
            self.stats.duplicates += 1;
            self.acks_owed = self.acks_owed.max(1);
            return;
        }
        // Beyond what this side said it takes: the excess is dropped. The edge counts what
        // the program has not read, not the early bytes: those lie below it, each held once
        // (below), so they never take more than the buffer whatever a peer sends.
        let edge = self.rcv_nxt
            + (self.cfg.recv_buffer.saturating_sub(self.ready.len())).min(self.cfg.max_window)
                as u64;
        if seq >= edge {
            self.stats.beyond_window += 1;
            self.acks_owed = self.acks_owed.max(1);
            return;
        }
        let take = &payload[..(edge.min(end) - seq) as usize];
        if seq <= self.rcv_nxt {
            let skip = (self.rcv_nxt - seq) as usize;
            self.accept_in_order(&take[skip..]);
            // Early segments now reached.
            while let Some((&s, _)) = self.early.first_key_value() {
                if s > self.rcv_nxt {
                    break;
                }
                let Some((s, seg)) = self.early.pop_first() else {
                    break;
                };
                self.early_bytes -= seg.len();
                let e = s + seg.len() as u64;
                if e > self.rcv_nxt {
                    let skip = (self.rcv_nxt - s) as usize;
                    self.accept_in_order(&seg[skip..]);
                }
            }
            self.acks_owed = self.acks_owed.max(1);
        } else {
            self.stats.early += 1;
            // Held until the gap fills. Every early one is acknowledged at once: a duplicate
            // ACK.
            self.hold_early(seq, take);
            self.acks_owed = self.acks_owed.saturating_add(1).min(ACKS_OWED_MAX);
        }
    }

    /// Hold early bytes `b` (from `seq`) where nothing is held yet: a byte is held once
    /// however segments overlap, and at most [`EARLY_SEGMENTS_MAX`] pieces are (a peer
    /// sending tiny pieces would otherwise cost more in bookkeeping than in bytes).
    fn hold_early(&mut self, seq: u64, b: &[u8]) {
        let end = seq + b.len() as u64;
        let mut at = seq;
        // What the piece before `seq` already covers.
        if let Some((&ps, pv)) = self.early.range(..=seq).next_back() {
            at = at.max(ps + pv.len() as u64);
        }
        while at < end {
            let next = self
                .early
                .range(at..)
                .next()
                .map(|(&ns, nv)| (ns, ns + nv.len() as u64));
            let stop = next.map_or(end, |(ns, _)| ns.min(end));
            if stop > at {
                if self.early.len() >= EARLY_SEGMENTS_MAX {
                    self.stats.beyond_window += 1;
                    return;
                }
                let piece = b[(at - seq) as usize..(stop - seq) as usize].to_vec();
                self.early_bytes += piece.len();
                self.early.insert(at, piece);
            }
            at = match next {
                Some((ns, ne)) if ns < end => ne.max(stop),
                _ => end,
            };
        }
    }

    fn accept_in_order(&mut self, b: &[u8]) {
        self.rcv_nxt += b.len() as u64;
        if !self.closing {
            self.ready.extend(b);
        }
    }

    fn on_ack(&mut self, h: &Header, now: Instant) {
        // The peer acknowledges at most what was sent (and the CLOSE's one number).
        let ack = h
            .ack
            .min(self.high.max(self.nxt) + u64::from(self.close_sent));
        let old_edge = self.edge;
        self.edge = self.edge.max(ack + u64::from(h.wnd));
        if ack > self.una {
            let data_end = self.una + self.out.len() as u64;
            let acked = (ack.min(data_end) - self.una) as usize;
            self.out.drain(..acked);
            if self.close_sent && ack > data_end {
                self.close_acked = true;
                self.close_at = None;
            }
            self.una = ack.min(data_end);
            self.nxt = self.nxt.max(self.una);
            if let Some((end, at)) = self.timed {
                if ack >= end {
                    self.rtt
                        .sample(now.saturating_duration_since(at), &self.cfg);
                    self.timed = None;
                }
            }
            self.backoff = 0;
            self.dupacks = 0;
            match self.recover {
                Some(r) if self.una < r => {
                    // A partial ACK: the next hole goes at once (NewReno).
                    self.resend_una = true;
                }
                Some(_) => {
                    self.recover = None;
                    self.cwnd = self.ssthresh;
                }
                None => {
                    if self.cwnd < self.ssthresh {
                        self.cwnd += acked;
                    } else {
                        self.cwnd += (self.cfg.mss * acked / self.cwnd.max(1)).max(1);
                    }
                    self.cwnd = self.cwnd.min(self.cfg.send_buffer.max(self.cfg.mss));
                }
            }
            self.rto_at = (self.nxt > self.una).then(|| now + self.rto());
            if self.closing && self.close_acked && self.peer_closed {
                self.end(None);
            }
        } else if h.kind == ACK && ack == self.una && self.nxt > self.una && self.edge == old_edge {
            self.dupacks += 1;
            if self.dupacks == 3 && self.recover.is_none() {
                self.recover = Some(self.nxt);
                self.ssthresh = ((self.nxt - self.una) as usize / 2).max(2 * self.cfg.mss);
                self.cwnd = self.ssthresh;
                // Counted when it goes (`transmit`).
                self.resend_una = true;
            }
        }
    }

    fn rto(&self) -> Duration {
        (self.rtt.rto * 2u32.saturating_pow(self.backoff)).min(self.cfg.max_rto)
    }

    /// The next time [`on_timers`](Self::on_timers) has something to do.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        if matches!(self.state, State::Ended(_)) {
            return None;
        }
        let keep = self.sent_at + self.cfg.keepalive;
        let dead = self.heard + self.cfg.dead_after;
        [
            self.rto_at,
            self.probe_at,
            self.open_at,
            self.close_at,
            Some(keep),
            Some(dead),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Run what is due: a retransmission timeout, a probe, the dead peer.
    pub(crate) fn on_timers(&mut self, now: Instant) {
        if matches!(self.state, State::Ended(_)) {
            return;
        }
        if now >= self.heard + self.cfg.dead_after {
            let secs = self.cfg.dead_after.as_secs_f64();
            return self.end(Some(format!(
                "it sent nothing for {secs:.0} s (udp: no answer to probes)"
            )));
        }
        if self.rto_at.is_some_and(|t| now >= t) {
            self.stats.timeouts += 1;
            let flight = (self.nxt - self.una) as usize;
            self.ssthresh = (flight / 2).max(2 * self.cfg.mss);
            self.cwnd = self.cfg.mss;
            // Back to the first unacknowledged byte; what the peer already holds it drops.
            self.nxt = self.una;
            self.recover = None;
            self.dupacks = 0;
            self.timed = None;
            self.backoff = (self.backoff + 1).min(16);
            self.rto_at = (self.nxt < self.high).then(|| now + self.rto());
        }
    }

    /// The next datagram to send, written into `buf` (at least [`HEADER`] + mss bytes);
    /// returns its length, or `None` when nothing is to go now.
    pub(crate) fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if matches!(self.state, State::Ended(_)) {
            return None;
        }
        let mut h = Header {
            kind: ACK,
            conn: self.conn,
            seq: self.nxt,
            ack: self.rcv_nxt,
            wnd: self.window() as u32,
        };
        if self.state == State::Opening {
            if self.open_at.is_some_and(|t| now >= t) {
                self.open_at = Some(now + self.rto());
                self.backoff = (self.backoff + 1).min(16);
                h.kind = OPEN;
                h.seq = self.cookie;
                return Some(self.sent(h, buf, now));
            }
            return None;
        }
        if self.open_at.take().is_some() {
            h.kind = OPENED;
            return Some(self.sent(h, buf, now));
        }
        let end = self.una + self.out.len() as u64;
        if self.resend_una && self.una < end {
            self.resend_una = false;
            self.stats.retransmits += 1;
            self.timed = None;
            let len = self.cfg.mss.min(self.out.len());
            h.kind = DATA;
            h.seq = self.una;
            self.nxt = self.nxt.max(self.una + len as u64);
            self.rto_at = Some(now + self.rto());
            return Some(self.sent_data(h, buf, 0, len, now));
        }
        self.resend_una = false;
        let flight = (self.nxt - self.una) as usize;
        let allowed = (self.edge.saturating_sub(self.una) as usize).min(self.cwnd);
        if self.nxt < end && flight < allowed {
            let len = self
                .cfg
                .mss
                .min((end - self.nxt) as usize)
                .min(allowed - flight);
            h.kind = DATA;
            h.seq = self.nxt;
            let from = (self.nxt - self.una) as usize;
            if self.nxt >= self.high {
                self.timed.get_or_insert((self.nxt + len as u64, now));
            } else {
                // Going back after a timeout: bytes sent before.
                self.stats.retransmits += 1;
            }
            self.nxt += len as u64;
            self.high = self.high.max(self.nxt);
            if self.rto_at.is_none() {
                self.rto_at = Some(now + self.rto());
            }
            return Some(self.sent_data(h, buf, from, len, now));
        }
        // Data waits on a closed window, nothing in flight: probe it.
        let blocked = self.nxt < end && flight == 0;
        if self.closing && self.una == end && !self.close_acked {
            // All delivered: the CLOSE, again until acknowledged.
            if self.close_at.is_none_or(|t| now >= t) {
                self.close_sent = true;
                self.backoff = (self.backoff + 1).min(16);
                self.close_at = Some(now + self.rto());
                h.kind = CLOSE;
                h.seq = end;
                return Some(self.sent(h, buf, now));
            }
        }
        let idle = now >= self.sent_at + self.cfg.keepalive;
        let probe_due = self.probe_at.is_some_and(|t| now >= t);
        if !blocked {
            // The window opened (or nothing waits): a probe due from before would keep
            // `next_timer` in the past, and the engine polling without sleeping.
            self.probe_at = None;
        } else if self.probe_at.is_none() {
            self.probe_at = Some(now + self.rto());
        }
        if (blocked && probe_due) || idle {
            if blocked {
                self.backoff = (self.backoff + 1).min(16);
                self.probe_at = Some(now + self.rto());
            } else {
                self.probe_at = None;
            }
            h.kind = PROBE;
            return Some(self.sent(h, buf, now));
        }
        if self.acks_owed > 0 {
            self.acks_owed -= 1;
            return Some(self.sent(h, buf, now));
        }
        None
    }

    fn sent(&mut self, h: Header, buf: &mut [u8], now: Instant) -> usize {
        h.write(buf);
        self.sent_at = now;
        self.told_wnd = h.wnd as usize;
        if h.kind != OPEN {
            // The ACK fields ride on it: none owed beyond the duplicates.
            self.acks_owed = self.acks_owed.saturating_sub(u32::from(h.kind != ACK));
        }
        HEADER
    }

    fn sent_data(
        &mut self,
        h: Header,
        buf: &mut [u8],
        from: usize,
        len: usize,
        now: Instant,
    ) -> usize {
        self.sent(h, buf, now);
        // The ring's two halves, cut to `from..from + len` (a range of a `VecDeque` has no
        // slices of its own on stable Rust).
        let (a, b) = self.out.as_slices();
        let mut at = HEADER;
        for (part, start) in [(a, 0), (b, a.len())] {
            let lo = from.max(start) - start;
            let hi = (from + len).min(start + part.len()).saturating_sub(start);
            if lo < hi {
                buf[at..at + hi - lo].copy_from_slice(&part[lo..hi]);
                at += hi - lo;
            }
        }
        HEADER + len
    }

    /// Whether the connection is over for this side: ended, or closed by its program and
    /// that acknowledged (a later datagram of the peer gets a `RESET`).
    pub(crate) fn done(&self) -> bool {
        matches!(self.state, State::Ended(_))
            || self.closing && self.close_acked
            // Both closed, and the peer's CLOSE acknowledged.
            || self.closing && self.peer_closed && self.acks_owed == 0
    }
}

/// A connection's id and a listener's cookies: random.
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // Without the kernel's randomness the time is a poor but working id (a connection is
    // still proved by the secret).
    if crate::secret::random(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        return t ^ u64::from(std::process::id()) << 32;
    }
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated network between two sessions: each datagram may be lost, duplicated or
    /// delayed past later ones (a seeded generator, so a failure repeats).
    struct Net {
        rng: u64,
        loss: u32,
        dup: u32,
        reorder: u32,
        /// In flight: (arrival time, to the listener?, bytes).
        wire: Vec<(Instant, bool, Vec<u8>)>,
        now: Instant,
    }

    impl Net {
        fn new(seed: u64, loss: u32, dup: u32, reorder: u32) -> Net {
            Net {
                rng: seed | 1,
                loss,
                dup,
                reorder,
                wire: Vec::new(),
                now: Instant::now(),
            }
        }

        fn roll(&mut self) -> u32 {
            // xorshift64
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            (self.rng % 100) as u32
        }

        fn put(&mut self, to_l: bool, d: &[u8]) {
            if self.roll() < self.loss {
                return;
            }
            let copies = if self.roll() < self.dup { 2 } else { 1 };
            for _ in 0..copies {
                let delay = if self.roll() < self.reorder {
                    3_000
                } else {
                    100
                };
                self.wire
                    .push((self.now + Duration::from_micros(delay), to_l, d.to_vec()));
            }
        }

        /// Send what each side has, deliver what is due, advance time a little.
        fn step(&mut self, c: &mut Session, l: &mut Session) {
            let mut buf = vec![0u8; HEADER + 2000];
            for (s, to_l) in [(&mut *c, true), (&mut *l, false)] {
                s.on_timers(self.now);
                while let Some(n) = s.transmit(self.now, &mut buf) {
                    let d = buf[..n].to_vec();
                    self.put(to_l, &d);
                }
            }
            self.now += Duration::from_micros(50);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) =
                self.wire.drain(..).partition(|(t, _, _)| *t <= now);
            self.wire = later;
            for (_, to_l, d) in due {
                let (h, p) = Header::decode(&d).expect("ours");
                assert_eq!(h.conn, 7);
                if to_l {
                    l.receive(&h, p, now);
                } else {
                    c.receive(&h, p, now);
                }
            }
        }
    }

    fn cfg() -> Config {
        Config {
            mss: 1000,
            send_buffer: 64 << 10,
            recv_buffer: 64 << 10,
            max_window: 64 << 10,
            ..Config::default()
        }
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 253) as u8).collect()
    }

    /// `bytes` from the connector to the listener and back over `net`, within `steps`.
    fn exchange(net: &mut Net, bytes: usize, steps: usize) -> (Session, Session) {
        let mut c = Session::connect(7, cfg(), net.now);
        let mut l = Session::accept(7, cfg(), net.now);
        let data = pattern(bytes);
        let (mut put_c, mut put_l) = (0, 0);
        let (mut got_c, mut got_l) = (Vec::new(), Vec::new());
        for _ in 0..steps {
            if c.state() == &State::Open {
                put_c += c.write(&data[put_c..]);
            }
            put_l += l.write(&data[put_l..]);
            net.step(&mut c, &mut l);
            for (s, got) in [(&mut c, &mut got_c), (&mut l, &mut got_l)] {
                let (a, b) = s.ready();
                let n = a.len() + b.len();
                got.extend_from_slice(a);
                got.extend_from_slice(b);
                s.consume(n);
            }
            if got_c.len() == bytes && got_l.len() == bytes {
                break;
            }
        }
        assert!(got_l == data, "listener got {} of {bytes}", got_l.len());
        assert!(got_c == data, "connector got {} of {bytes}", got_c.len());
        (c, l)
    }

    #[test]
    fn a_clean_network_carries_a_mebibyte_each_way() {
        let mut net = Net::new(1, 0, 0, 0);
        let (c, l) = exchange(&mut net, 1 << 20, 100_000);
        assert_eq!(c.stats.retransmits + l.stats.retransmits, 0);
    }

    #[test]
    fn loss_reordering_and_duplicates_are_repaired() {
        for seed in 1..6 {
            let mut net = Net::new(seed, 10, 10, 10);
            let (c, l) = exchange(&mut net, 300_000, 2_000_000);
            assert!(c.stats.retransmits + c.stats.timeouts > 0);
            assert!(l.stats.duplicates + c.stats.duplicates > 0);
            assert!(l.stats.early + c.stats.early > 0);
        }
    }

    #[test]
    fn a_lost_open_and_opened_are_repeated() {
        let mut net = Net::new(3, 60, 0, 0);
        exchange(&mut net, 10_000, 2_000_000);
    }

    #[test]
    fn a_reader_that_stops_closes_the_window_and_the_sender_holds() {
        let mut net = Net::new(5, 0, 0, 0);
        let mut c = Session::connect(7, cfg(), net.now);
        let mut l = Session::accept(7, cfg(), net.now);
        let data = pattern(1 << 20);
        let mut put = 0;
        // The listener's program reads nothing for a simulated 5 s.
        for _ in 0..100_000 {
            put += c.write(&data[put..]);
            net.step(&mut c, &mut l);
        }
        let (a, b) = l.ready();
        assert_eq!(a.len() + b.len(), 64 << 10, "the receiver holds its buffer");
        assert!(put <= (128 << 10) + 1000, "the sender took {put}");
        assert_eq!(
            c.room(),
            0,
            "the sender's buffer is full: the program is held"
        );
        assert_eq!(c.ended(), None, "a stalled reader is not a dead peer");
        // It reads again: everything arrives.
        let mut got = Vec::new();
        for _ in 0..200_000 {
            put += c.write(&data[put..]);
            net.step(&mut c, &mut l);
            let (a, b) = l.ready();
            let n = a.len() + b.len();
            got.extend_from_slice(a);
            got.extend_from_slice(b);
            l.consume(n);
            if got.len() == data.len() {
                break;
            }
        }
        assert!(got == data, "got {}", got.len());
    }

    #[test]
    fn a_peer_that_vanishes_is_gone_after_dead_after() {
        let mut net = Net::new(9, 0, 0, 0);
        let mut c = Session::connect(7, cfg(), net.now);
        let mut l = Session::accept(7, cfg(), net.now);
        for _ in 0..100 {
            net.step(&mut c, &mut l);
        }
        // An idle connection stays up on its probes.
        for _ in 0..(30_000_000 / 50) / 100 {
            net.now += Duration::from_micros(50 * 99);
            net.step(&mut c, &mut l);
        }
        assert_eq!(c.state(), &State::Open);
        assert_eq!(l.state(), &State::Open);
        // The listener vanishes: the connector gives up after 10 s.
        c.write(b"anyone?");
        let mut buf = vec![0u8; 4000];
        let t0 = net.now;
        while c.ended().is_none() {
            net.now += Duration::from_millis(5);
            c.on_timers(net.now);
            while c.transmit(net.now, &mut buf).is_some() {}
            assert!(net.now < t0 + Duration::from_secs(11));
        }
        assert!(net.now >= t0 + Duration::from_secs(9));
        let why = c.ended().flatten().unwrap_or_default().to_string();
        assert!(why.contains("sent nothing for 10 s"), "{why}");
    }

    #[test]
    fn closing_delivers_everything_then_ends_both() {
        let mut net = Net::new(11, 10, 5, 5);
        let mut c = Session::connect(7, cfg(), net.now);
        let mut l = Session::accept(7, cfg(), net.now);
        let data = pattern(200_000);
        let mut put = 0;
        let mut got = Vec::new();
        for _ in 0..2_000_000 {
            if c.state() == &State::Open {
                put += c.write(&data[put..]);
                if put == data.len() {
                    c.close();
                }
            }
            net.step(&mut c, &mut l);
            let (a, b) = l.ready();
            let n = a.len() + b.len();
            got.extend_from_slice(a);
            got.extend_from_slice(b);
            l.consume(n);
            if l.peer_done() {
                l.close();
            }
            if c.done() && l.done() {
                break;
            }
        }
        assert!(got == data);
        assert!(l.done() && c.done());
    }

    #[test]
    fn a_reset_ends_it_and_foreign_bytes_are_not_ours() {
        let now = Instant::now();
        let mut c = Session::connect(7, cfg(), now);
        let mut buf = [0u8; HEADER];
        Header {
            kind: RESET,
            conn: 7,
            seq: 0,
            ack: 0,
            wnd: 0,
        }
        .write(&mut buf);
        let (h, p) = Header::decode(&buf).expect("ours");
        c.receive(&h, p, now);
        assert_eq!(c.ended(), Some(Some("it reset the connection")));
        for bad in [&b"GET / HTTP/1.0\r\n\r\n"[..], &[0xff; 40], &buf[..20]] {
            assert!(Header::decode(bad).is_none());
        }
        let mut odd = buf;
        odd[4] = 99;
        assert!(Header::decode(&odd).is_none());
    }

    #[test]
    fn a_cookie_is_echoed_in_the_next_open_and_opens_nothing() {
        let now = Instant::now();
        let mut c = Session::connect(7, cfg(), now);
        let mut buf = [0u8; HEADER + 1000];
        let n = c.transmit(now, &mut buf).expect("the first OPEN");
        let (h, _) = Header::decode(&buf[..n]).expect("ours");
        assert_eq!((h.kind, h.seq), (OPEN, 0));
        assert_eq!(
            c.transmit(now, &mut buf),
            None,
            "repeated only after a while"
        );
        let cookie = Header {
            kind: COOKIE,
            conn: 7,
            seq: 0xC00C1E,
            ack: 5,
            wnd: 0,
        };
        c.receive(&cookie, &[], now);
        assert_eq!(c.state(), &State::Opening, "a cookie is not an answer");
        let n = c.transmit(now, &mut buf).expect("the echo, at once");
        let (h, _) = Header::decode(&buf[..n]).expect("ours");
        assert_eq!((h.kind, h.seq), (OPEN, 0xC00C1E));
    }

    #[test]
    fn sequence_numbers_and_acks_at_the_edge_of_u64_are_dropped_not_overflowed() {
        let now = Instant::now();
        let mut l = Session::accept(7, cfg(), now);
        for (seq, ack) in [(u64::MAX - 1, 0), (u64::MAX, u64::MAX), (0, u64::MAX)] {
            let h = Header {
                kind: DATA,
                conn: 7,
                seq,
                ack,
                wnd: u32::MAX,
            };
            l.receive(&h, b"abcd", now);
        }
        let (a, b) = l.ready();
        assert_eq!(a.len() + b.len(), 4, "only the bytes at offset 0 are taken");
        assert_eq!(l.ended(), None);
    }

    #[test]
    fn overlapping_early_segments_are_held_once_and_never_past_the_buffer() {
        let now = Instant::now();
        let mut l = Session::accept(7, cfg(), now);
        let data = pattern(70_000);
        let seg = |l: &mut Session, seq: usize, len: usize| {
            let h = Header {
                kind: DATA,
                conn: 7,
                seq: seq as u64,
                ack: 0,
                wnd: u32::MAX,
            };
            let end = (seq + len).min(data.len());
            l.receive(&h, &data[seq..end], now);
        };
        // A hostile peer: 10,000 overlapping segments of 32 KiB at every offset from 1, and
        // tiny ones between; byte 0 never comes.
        seg(&mut l, 1, 32 << 10);
        let mut reach = 1 + (32 << 10);
        for i in 0..10_000 {
            let (at, len) = (1 + i * 7 % 40_000, if i % 3 == 0 { 1 } else { 32 << 10 });
            seg(&mut l, at, len);
            reach = usize::max(reach, at + len);
        }
        assert!(l.early_bytes <= cfg().recv_buffer, "{} held", l.early_bytes);
        assert!(l.early.len() <= EARLY_SEGMENTS_MAX);
        // The gap filled: what was held is the stream, byte for byte, up to the buffer.
        seg(&mut l, 0, 1);
        let (a, b) = l.ready();
        let got: Vec<u8> = a.iter().chain(b).copied().collect();
        assert_eq!(got.len(), reach.min(cfg().recv_buffer));
        assert_eq!(got[..], data[..got.len()]);
    }
}
