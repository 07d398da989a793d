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
//! The datagrams and their header are tabulated in [`packet`](super::packet).

use super::packet::{Header, ACK, CLOSE, COOKIE, DATA, HEADER, OPEN, OPENED, PROBE, RESET};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Most pieces of early data one connection holds (see `Session::hold_early`).
const EARLY_SEGMENTS_MAX: usize = 8192;

/// Most acknowledgements one connection owes at once (one datagram says them all).
const ACKS_OWED_MAX: u32 = 64;

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
mod tests;
