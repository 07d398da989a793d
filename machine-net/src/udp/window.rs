//! The send side towards one peer: messages cut into numbered packets, the sliding window of
//! packets in flight, acknowledgements (cumulative and selective), loss detection,
//! retransmission and congestion control.
//!
//! Every packet gets the next 64-bit sequence number when its message is queued, so a message
//! of `n` packets owns `n` consecutive numbers. What may be in flight is bounded three ways:
//! - **window** (packets): no packet beyond `una + window`, the receiver's reassembly span;
//! - **flow control** (bytes): no more in flight than the receiver says it can buffer (its
//!   socket buffer's share for us, advertised in every datagram it sends);
//! - **congestion** (bytes): a window that grows while acknowledgements come and halves on
//!   loss, so a receiver whose socket buffer overflowed sees fewer packets, not a storm.
//!
//! Loss is found by time, as RACK does: a packet is lost when one sent after it (by more than
//! a quarter of the minimum RTT, to allow some reordering) has been acknowledged. A packet
//! nothing later has answered is found by the retransmission timeout, which backs off, deems
//! everything in flight lost and restarts the congestion window at two packets: the oldest goes
//! at once, the rest only as acknowledgements come back. A descheduled peer therefore costs
//! two packets per timeout, not a window of retransmissions; when its acknowledgement shows
//! the originals had arrived, the cut and the loss marks are undone.

use super::pool::Pool;
use super::rtt::{RtoBounds, Rtt};
use super::wire::{Frag, Header, BASE, MAX_DATA_HEADER, MAX_MESSAGE};
use machine::Message;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Initial congestion window, in packets (RFC 6928's ten).
const INITIAL_CWND_PACKETS: usize = 10;

/// What a datagram costs in a socket buffer beyond its bytes (Linux charges each its
/// `sk_buff` and shared info, about this much): a small datagram takes far more buffer than
/// its size, and flow control must count it so.
const SKB_OVERHEAD: usize = 768;

/// A message, queued or partly acknowledged.
struct OutMsg {
    msg: Message,
    /// Sequence number of its first packet.
    first: u64,
    /// Its packets.
    n: u64,
    /// Wire bytes per fragment; 0 when the message fits one datagram.
    chunk: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Sent, not yet answered.
    InFlight,
    /// Selectively acknowledged: arrived, waiting for the packets before it.
    Sacked,
    /// Deemed lost: waiting in the retransmission queue.
    Lost,
}

/// RACK's reference: the packet sent last (by time, then number) of those known to have
/// arrived, and its round trip.
#[derive(Debug, Clone, Copy)]
struct Rack {
    sent_at: Instant,
    seq: u64,
    rtt: Duration,
}

/// A packet that has been sent at least once.
struct Pkt {
    /// When it was last sent.
    sent_at: Instant,
    /// What it occupies in the receiver's socket buffer: its bytes and the kernel's
    /// bookkeeping.
    len: u32,
    /// Times retransmitted.
    retx: u16,
    state: State,
}

/// Why a message cannot be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

/// What an acknowledgement did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AckEffect {
    /// The cumulative acknowledgement advanced.
    pub progress: bool,
    /// Packets were found lost (they wait for retransmission).
    pub lost: bool,
    /// The acknowledgement acknowledged packets never sent: ignored.
    pub invalid: bool,
}

/// The send side towards one peer.
pub struct SendWindow {
    msgs: VecDeque<OutMsg>,
    /// Sequence number after the last queued packet.
    end: u64,
    /// Oldest unacknowledged packet.
    una: u64,
    /// Next packet never sent.
    nxt: u64,
    /// Packets `una .. nxt`.
    pkts: VecDeque<Pkt>,
    /// Packets to retransmit, oldest first (entries may be stale: checked when taken).
    lost: VecDeque<u64>,
    /// Socket-buffer bytes in flight (sent, not acknowledged, not deemed lost).
    flight: usize,
    /// Packets in flight.
    in_flight: usize,
    /// Congestion window and slow-start threshold, packets.
    cwnd: usize,
    ssthresh: usize,
    /// Packets acknowledged towards the next congestion-avoidance increment.
    cwnd_credit: usize,
    /// Bytes the peer can buffer for us (its last advertisement).
    peer_wnd: usize,
    /// Packets beyond `una` we may send.
    window: u64,
    /// Largest datagram to this peer.
    dgram_max: usize,
    /// The most recently sent packet known to have arrived (RACK).
    rack: Option<Rack>,
    /// When packets that RACK suspects will have had time to arrive, if any.
    reo_timer: Option<Instant>,
    /// RACK's reordering allowance in quarters of the minimum RTT (RFC 8985's reo_wnd_mult):
    /// widened when the peer reports duplicates, back to one after 16 recoveries.
    reo_mult: u32,
    /// No further widening until `una` passes this (once per window).
    reo_widened_until: u64,
    /// Congestion cuts since the allowance was last widened.
    recoveries: u32,
    /// Since when the tail-loss probe timer runs (the last send or progress), if it does.
    tlp_from: Option<Instant>,
    /// A tail-loss probe went out and nothing has been acknowledged since.
    tlp_sent: bool,
    /// The peer's longest acknowledgement delay: a lone packet's answer may take that long.
    ack_delay: Duration,
    /// No further congestion cut until `una` passes this (one cut per window of loss).
    recovery_end: u64,
    /// When the retransmission timer started, if packets are outstanding.
    rto_from: Option<Instant>,
    /// The last time an acknowledgement made progress, or the first packet went out.
    progress_at: Instant,
    /// Send the oldest lost packet even if the windows are full (after a timeout).
    probe: bool,
    /// Before a timeout cut the congestion window: (probe, cwnd, ssthresh), to undo it if
    /// the timeout proves spurious.
    undo: Option<(u64, usize, usize)>,
    rtt: Rtt,
    /// Packets retransmitted, for the statistics.
    pub retransmits: u64,
    /// Timeouts, for the statistics.
    pub timeouts: u64,
    /// Tail-loss probes, for the statistics.
    pub probes: u64,
}

impl SendWindow {
    /// A window towards a peer whose datagrams may be `dgram_max` bytes long and who delays
    /// its acknowledgements by up to `ack_delay`.
    pub fn new(
        window: usize,
        dgram_max: usize,
        bounds: RtoBounds,
        ack_delay: Duration,
        now: Instant,
    ) -> SendWindow {
        let cwnd = INITIAL_CWND_PACKETS.min(window);
        SendWindow {
            msgs: VecDeque::new(),
            end: 0,
            una: 0,
            nxt: 0,
            pkts: VecDeque::new(),
            lost: VecDeque::new(),
            flight: 0,
            in_flight: 0,
            cwnd,
            ssthresh: usize::MAX,
            cwnd_credit: 0,
            peer_wnd: INITIAL_CWND_PACKETS * dgram_max,
            window: window as u64,
            dgram_max,
            rack: None,
            reo_timer: None,
            reo_mult: 1,
            reo_widened_until: 0,
            recoveries: 0,
            tlp_from: None,
            tlp_sent: false,
            ack_delay,
            recovery_end: 0,
            rto_from: None,
            progress_at: now,
            probe: false,
            undo: None,
            rtt: Rtt::new(bounds),
            retransmits: 0,
            timeouts: 0,
            probes: 0,
        }
    }

    /// Queue a message: it gets the next sequence numbers.
    ///
    /// # Errors
    /// [`TooLarge`] for a message beyond what a fragment header can announce.
    pub fn push(&mut self, msg: Message) -> Result<(), TooLarge> {
        let len = msg.wire_len();
        if len as u64 > MAX_MESSAGE {
            return Err(TooLarge);
        }
        let (n, chunk) = if BASE + len <= self.dgram_max {
            (1, 0)
        } else {
            let chunk = self.dgram_max - MAX_DATA_HEADER;
            (len.div_ceil(chunk) as u64, chunk as u32)
        };
        self.msgs.push_back(OutMsg {
            msg,
            first: self.end,
            n,
            chunk,
        });
        self.end += n;
        Ok(())
    }

    /// Nothing queued, nothing unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.una == self.end
    }

    /// Packets are in flight or waiting for retransmission.
    pub fn outstanding(&self) -> bool {
        self.una < self.nxt
    }

    /// There is something to send, if the windows allow.
    pub fn has_work(&self) -> bool {
        self.nxt < self.end || !self.lost.is_empty()
    }

    /// Oldest unacknowledged packet and the next never sent (for the statistics and tests).
    pub fn bounds(&self) -> (u64, u64) {
        (self.una, self.nxt)
    }

    /// The RTT estimator.
    pub fn rtt(&self) -> &Rtt {
        &self.rtt
    }

    /// When the retransmission timer expires, if it runs.
    pub fn rto_deadline(&self) -> Option<Instant> {
        self.rto_from.map(|t| t + self.rtt.rto())
    }

    /// When the tail-loss probe is due, if it may go: about two round trips after the last
    /// packet went or the last acknowledgement came (plus the peer's acknowledgement delay
    /// when a lone packet is out), once per flight.
    fn tlp_deadline(&self) -> Option<Instant> {
        if self.tlp_sent || self.una == self.nxt {
            return None;
        }
        let srtt = self.rtt.srtt()?;
        let lone = if self.in_flight <= 1 {
            self.ack_delay
        } else {
            Duration::ZERO
        };
        self.tlp_from.map(|t| t + 2 * srtt + lone)
    }

    /// The earliest of this window's timers: retransmission timeout, tail-loss probe,
    /// RACK's reordering allowance.
    pub fn deadline(&self) -> Option<Instant> {
        [self.rto_deadline(), self.tlp_deadline(), self.reo_timer]
            .into_iter()
            .flatten()
            .min()
    }

    /// Run the timers that are due at `now`.
    pub fn on_timer(&mut self, now: Instant) {
        if self.reo_timer.is_some_and(|t| t <= now) {
            self.reo_timer = None;
            if self.detect_losses(now) {
                self.congestion_cut();
            }
        }
        if self.rto_deadline().is_some_and(|t| t <= now) {
            self.on_timeout(now);
        } else if self.tlp_deadline().is_some_and(|t| t <= now) {
            self.tail_probe();
        }
    }

    /// The tail-loss probe: nothing has been heard for two round trips, so the last packet
    /// in flight goes again (whatever the windows say). Its acknowledgement tells which of
    /// the packets before it are missing, and RACK resends those, long before the
    /// retransmission timeout would. Not a sign of congestion: the window stays.
    fn tail_probe(&mut self) {
        self.tlp_sent = true;
        self.probes += 1;
        let Some(i) = self.pkts.iter().rposition(|p| p.state == State::InFlight) else {
            return;
        };
        let p = &mut self.pkts[i];
        p.state = State::Lost;
        self.flight -= p.len as usize;
        self.in_flight -= 1;
        self.lost.push_front(self.una + i as u64);
        self.probe = true;
    }

    /// The last progress: an acknowledgement that advanced, or the first packet sent after
    /// none was outstanding.
    pub fn progress_at(&self) -> Instant {
        self.progress_at
    }

    fn pkt(&self, seq: u64) -> &Pkt {
        &self.pkts[(seq - self.una) as usize]
    }

    fn pkt_mut(&mut self, seq: u64) -> &mut Pkt {
        &mut self.pkts[(seq - self.una) as usize]
    }

    /// The message holding packet `seq`, and the packet's index in it.
    fn locate(&self, seq: u64) -> (&OutMsg, u64) {
        let i = self.msgs.partition_point(|m| m.first <= seq) - 1;
        let m = &self.msgs[i];
        (m, seq - m.first)
    }

    /// Datagram bytes of packet `seq` (header included).
    fn datagram_len(&self, seq: u64) -> usize {
        let (m, i) = self.locate(seq);
        if m.n == 1 {
            BASE + m.msg.wire_len()
        } else {
            let f = frag_of(m, i);
            MAX_DATA_HEADER + f.range().1 as usize
        }
    }

    /// Packet `seq`'s fragment position (none for a whole message) and its bytes.
    pub fn datagram(&self, seq: u64) -> (Option<Frag>, &[u8]) {
        let (m, i) = self.locate(seq);
        if m.n == 1 {
            return (None, m.msg.wire());
        }
        let f = frag_of(m, i);
        let (off, len) = f.range();
        (Some(f), &m.msg.wire()[off as usize..(off + len) as usize])
    }

    /// Packet `seq` as one datagram, `hdr` written into its message's headroom, when it is a
    /// whole message (`None` for a fragment, whose header goes separately).
    pub fn frame(&mut self, seq: u64, hdr: &Header) -> Option<&[u8]> {
        let i = self.msgs.partition_point(|m| m.first <= seq) - 1;
        let m = &mut self.msgs[i];
        if m.n != 1 {
            return None;
        }
        let f = m.msg.frame_with_header(BASE);
        hdr.write(&mut f[..BASE]);
        Some(f)
    }

    fn room(&self, len: usize) -> bool {
        // One packet may always be in flight, however small the windows: a datagram larger
        // than the peer's advertisement must still get through.
        self.in_flight == 0 || (self.in_flight < self.cwnd && self.flight + len <= self.peer_wnd)
    }

    /// Choose up to `max` packets to send now (retransmissions first), appending their
    /// sequence numbers to `out`, and count them as sent at `now`. Packets the socket then
    /// does not take must be given back with [`unsend`](Self::unsend).
    pub fn take(&mut self, out: &mut Vec<u64>, max: usize, now: Instant) {
        let start = out.len();
        while out.len() - start < max {
            if let Some(&seq) = self.lost.front() {
                if seq < self.una || self.pkt(seq).state != State::Lost {
                    self.lost.pop_front();
                    continue;
                }
                let len = self.pkt(seq).len as usize;
                if !self.probe && !self.room(len) {
                    break;
                }
                self.probe = false;
                self.lost.pop_front();
                let p = self.pkt_mut(seq);
                p.state = State::InFlight;
                p.retx = p.retx.saturating_add(1);
                p.sent_at = now;
                self.flight += len;
                self.in_flight += 1;
                self.retransmits += 1;
                out.push(seq);
                continue;
            }
            if self.nxt < self.end && self.nxt - self.una < self.window {
                let len = self.datagram_len(self.nxt) + SKB_OVERHEAD;
                if !self.room(len) {
                    break;
                }
                if self.una == self.nxt {
                    self.progress_at = now;
                }
                self.pkts.push_back(Pkt {
                    sent_at: now,
                    len: len as u32,
                    retx: 0,
                    state: State::InFlight,
                });
                self.flight += len;
                self.in_flight += 1;
                out.push(self.nxt);
                self.nxt += 1;
                continue;
            }
            break;
        }
        if out.len() > start {
            if self.rto_from.is_none() {
                self.rto_from = Some(now);
            }
            self.tlp_from = Some(now);
        }
    }

    /// The packets taken last have left: a batch of large datagrams takes the kernel a while
    /// to copy, and the tail-loss probe must count its two round trips from when the last
    /// one went, not from before the system call.
    pub fn left(&mut self, now: Instant) {
        if self.tlp_from.is_some() {
            self.tlp_from = Some(now);
        }
    }

    /// Give back packets [`take`](Self::take) chose but the socket did not take (in the order
    /// they were taken).
    pub fn unsend(&mut self, seqs: &[u64]) {
        for &seq in seqs.iter().rev() {
            let len = self.pkt(seq).len as usize;
            self.flight -= len;
            self.in_flight -= 1;
            if seq + 1 == self.nxt && self.pkt(seq).retx == 0 {
                self.pkts.pop_back();
                self.nxt -= 1;
            } else {
                let p = self.pkt_mut(seq);
                p.state = State::Lost;
                p.retx = p.retx.saturating_sub(1);
                self.retransmits = self.retransmits.saturating_sub(1);
                self.lost.push_front(seq);
            }
        }
        if self.una == self.nxt {
            self.rto_from = None;
        }
    }

    /// Take an acknowledgement: every packet below `ack` has arrived, and so have the packets
    /// `sacked` yields (in increasing order); the peer can buffer `wnd` bytes for us. Messages
    /// now wholly acknowledged give their buffers to `pool`.
    pub fn on_ack(
        &mut self,
        ack: u64,
        sacked: impl Iterator<Item = u64>,
        wnd: usize,
        now: Instant,
        pool: &mut Pool,
    ) -> AckEffect {
        let mut fx = AckEffect::default();
        // The RTT sample: from the latest-sent packet this acknowledgement newly reports (the
        // one that made the peer answer; an older one newly reported waited for a lost
        // acknowledgement or a hole before it, which would inflate the estimate), and only
        // if it was sent once (Karn: the answer to a retransmission could answer either copy).
        let mut sample: Option<(Instant, u16)> = None;
        if ack > self.nxt {
            fx.invalid = true;
            return fx;
        }
        self.peer_wnd = wnd.max(self.dgram_max);
        let rack_before = self.rack.map(|r| (r.sent_at, r.seq));
        // Packets this acknowledgement newly reports.
        let mut acked = 0usize;
        if ack > self.una {
            let mut original_after_probe = false;
            let probe = self.undo.map(|u| u.0);
            while self.una < ack {
                let Some(p) = self.pkts.pop_front() else {
                    break;
                };
                match p.state {
                    State::InFlight => {
                        self.flight -= p.len as usize;
                        self.in_flight -= 1;
                    }
                    State::Sacked | State::Lost => {}
                }
                if p.state != State::Sacked {
                    acked += 1;
                    if sample.is_none_or(|(t, _)| p.sent_at > t) {
                        sample = Some((p.sent_at, p.retx));
                    }
                }
                if p.retx == 0 && probe.is_some_and(|s| self.una > s) {
                    original_after_probe = true;
                }
                self.note_delivered(p.sent_at, self.una, p.retx, now);
                self.una += 1;
            }
            self.rtt.reset_backoff();
            if let Some((seq, cwnd, ssthresh)) = self.undo {
                if self.una > seq {
                    if original_after_probe {
                        // Packets sent once, after the probe's original, arrived: the peer
                        // was slow, not the network lossy.
                        self.undo_timeout(cwnd, ssthresh);
                    }
                    self.undo = None;
                }
            }
            while self.msgs.front().is_some_and(|m| m.first + m.n <= self.una) {
                if let Some(m) = self.msgs.pop_front() {
                    pool.put(m.msg);
                }
            }
            self.progress_at = now;
            self.rto_from = (self.una < self.nxt).then_some(now);
            self.tlp_from = Some(now);
            self.tlp_sent = false;
            fx.progress = true;
        }
        for seq in sacked {
            if seq < self.una || seq >= self.nxt {
                continue;
            }
            let i = (seq - self.una) as usize;
            let p = &mut self.pkts[i];
            match p.state {
                State::Sacked => continue,
                State::InFlight => {
                    self.flight -= p.len as usize;
                    self.in_flight -= 1;
                }
                State::Lost => {}
            }
            p.state = State::Sacked;
            acked += 1;
            let p = &self.pkts[i];
            let (sent_at, retx) = (p.sent_at, p.retx);
            if sample.is_none_or(|(t, _)| sent_at > t) {
                sample = Some((sent_at, retx));
            }
            self.note_delivered(sent_at, seq, retx, now);
        }
        if let Some((t, 0)) = sample {
            self.rtt.sample(now.saturating_duration_since(t));
        }
        if self.rack.map(|r| (r.sent_at, r.seq)) != rack_before {
            fx.lost = self.detect_losses(now);
        }
        if fx.lost {
            self.congestion_cut();
        } else if acked > 0 && self.una >= self.recovery_end {
            if self.cwnd < self.ssthresh {
                self.cwnd += acked;
            } else {
                // One packet more per window acknowledged.
                self.cwnd_credit += acked;
                if self.cwnd_credit >= self.cwnd {
                    self.cwnd_credit -= self.cwnd;
                    self.cwnd += 1;
                }
            }
            self.cwnd = self.cwnd.min(self.window as usize);
        }
        fx
    }

    /// Loss: halve the congestion window, once per window of packets (the losses of one
    /// flight are one event).
    fn congestion_cut(&mut self) {
        if self.una >= self.recovery_end {
            self.ssthresh = (self.cwnd / 2).max(2);
            self.cwnd = self.ssthresh;
            self.recovery_end = self.nxt;
            self.recoveries += 1;
            if self.recoveries >= 16 {
                self.reo_mult = 1;
                self.recoveries = 0;
            }
        }
    }

    /// The peer received a packet twice: one we deemed lost was only late (or a probe went
    /// early). Widen RACK's reordering allowance by a quarter of the minimum RTT, once per
    /// window, up to the smoothed RTT (RFC 8985's DSACK rule).
    pub fn on_duplicate_report(&mut self) {
        if self.una >= self.reo_widened_until {
            self.reo_mult = (self.reo_mult + 1).min(64);
            self.reo_widened_until = self.nxt;
            self.recoveries = 0;
        }
    }

    /// RACK: remember the packet sent last (by time, then number) of those known to have
    /// arrived, and its round trip. Only a packet sent once counts: the answer to a
    /// retransmitted one may be the original's (a descheduled peer reading it late), and
    /// taking the retransmission's time would condemn every original still on its way. A lost
    /// retransmission is found when a packet sent once after it arrives, or by the timeout.
    fn note_delivered(&mut self, sent_at: Instant, seq: u64, retx: u16, now: Instant) {
        if retx == 0
            && self
                .rack
                .is_none_or(|r| (sent_at, seq) > (r.sent_at, r.seq))
        {
            self.rack = Some(Rack {
                sent_at,
                seq,
                rtt: now.saturating_duration_since(sent_at),
            });
        }
    }

    /// RACK (RFC 8985): a packet in flight sent before the reference packet (by time, then
    /// number) is lost once it has had the reference's round trip plus a reordering allowance
    /// (a quarter of the minimum RTT, widened when the peer reports duplicates, never above
    /// the smoothed RTT) to arrive; one that still has time sets the reordering timer.
    /// Whether any was found lost.
    fn detect_losses(&mut self, now: Instant) -> bool {
        let Some(rack) = self.rack else {
            return false;
        };
        let quarter = self.rtt.min_rtt().unwrap_or(Duration::ZERO) / 4;
        let allowance = (quarter * self.reo_mult).min(self.rtt.srtt().unwrap_or(Duration::ZERO));
        let mut any = false;
        let mut timer: Option<Instant> = None;
        for (i, p) in self.pkts.iter_mut().enumerate() {
            let seq = self.una + i as u64;
            if p.state != State::InFlight || (p.sent_at, seq) >= (rack.sent_at, rack.seq) {
                continue;
            }
            let due = p.sent_at + rack.rtt + allowance;
            if due <= now {
                p.state = State::Lost;
                self.flight -= p.len as usize;
                self.in_flight -= 1;
                self.lost.push_back(seq);
                any = true;
            } else if timer.is_none_or(|t| due < t) {
                timer = Some(due);
            }
        }
        self.reo_timer = timer;
        any
    }

    /// The retransmission timer expired: every packet in flight is deemed lost (as TCP
    /// does), the oldest goes again at once whatever the windows say, the rest follow as the
    /// congestion window, restarted small, allows; the timeout doubles. If the timeout proves
    /// spurious (packets sent once, after the oldest, are acknowledged), the cut and the loss
    /// marks are undone.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.una == self.nxt {
            self.rto_from = None;
            return;
        }
        self.timeouts += 1;
        self.rtt.back_off();
        self.reo_timer = None;
        self.lost.clear();
        for (i, p) in self.pkts.iter_mut().enumerate() {
            if p.state == State::InFlight {
                p.state = State::Lost;
                self.flight -= p.len as usize;
                self.in_flight -= 1;
            }
            if p.state == State::Lost {
                self.lost.push_back(self.una + i as u64);
            }
        }
        if self.undo.is_none() {
            self.undo = Some((self.una, self.cwnd, self.ssthresh));
        }
        self.ssthresh = (self.cwnd / 2).max(2);
        self.cwnd = 2;
        self.recovery_end = self.nxt;
        self.probe = true;
        self.rto_from = Some(now);
    }

    /// The last timeout was spurious: restore the congestion window, and put back in flight
    /// the packets only the timeout had deemed lost.
    fn undo_timeout(&mut self, cwnd: usize, ssthresh: usize) {
        self.cwnd = self.cwnd.max(cwnd);
        self.ssthresh = ssthresh;
        self.recovery_end = self.una;
        for p in self.pkts.iter_mut() {
            if p.state == State::Lost && p.retx == 0 {
                p.state = State::InFlight;
                self.flight += p.len as usize;
                self.in_flight += 1;
            }
        }
    }

    /// The peer left: forget everything queued for it.
    pub fn clear(&mut self) {
        self.msgs.clear();
        self.pkts.clear();
        self.lost.clear();
        self.una = self.end;
        self.nxt = self.end;
        self.flight = 0;
        self.in_flight = 0;
        self.rto_from = None;
        self.reo_timer = None;
        self.tlp_from = None;
    }
}

fn frag_of(m: &OutMsg, index: u64) -> Frag {
    Frag {
        index: index as u32,
        chunk: m.chunk,
        total: m.msg.wire_len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: RtoBounds = RtoBounds {
        min: Duration::from_millis(1),
        max: Duration::from_secs(1),
        initial: Duration::from_millis(20),
    };

    fn window(dgram_max: usize) -> (SendWindow, Instant) {
        let now = Instant::now();
        (
            SendWindow::new(64, dgram_max, BOUNDS, Duration::from_micros(500), now),
            now,
        )
    }

    fn take_all(w: &mut SendWindow, now: Instant) -> Vec<u64> {
        let mut v = Vec::new();
        w.take(&mut v, 1000, now);
        v
    }

    #[test]
    fn a_small_message_is_one_packet_a_large_one_is_cut() {
        let (mut w, now) = window(1000);
        w.push(Message::from_payload(&[1; 10])).expect("fits");
        w.push(Message::from_payload(&[2; 3000])).expect("fits");
        let sent = take_all(&mut w, now);
        // 3024 wire bytes in chunks of 956: 4 fragments.
        assert_eq!(sent, vec![0, 1, 2, 3, 4]);
        assert_eq!(w.datagram(0).0, None);
        let (f, body) = w.datagram(4);
        let f = f.expect("a fragment");
        assert_eq!((f.index, f.chunk, f.total), (3, 956, 3024));
        assert_eq!(body.len(), 3024 - 3 * 956);
    }

    #[test]
    fn cumulative_ack_frees_messages_and_samples_rtt() {
        let (mut w, now) = window(1000);
        w.push(Message::from_payload(&[1; 10])).expect("fits");
        take_all(&mut w, now);
        let fx = w.on_ack(
            1,
            std::iter::empty(),
            1 << 20,
            now + Duration::from_micros(50),
            &mut Pool::default(),
        );
        assert!(fx.progress && !fx.lost);
        assert!(w.is_idle());
        assert_eq!(w.rtt().srtt(), Some(Duration::from_micros(50)));
        assert_eq!(w.rto_deadline(), None);
    }

    #[test]
    fn an_ack_beyond_what_was_sent_is_ignored() {
        let (mut w, now) = window(1000);
        w.push(Message::from_payload(&[1; 10])).expect("fits");
        take_all(&mut w, now);
        assert!(
            w.on_ack(5, std::iter::empty(), 1 << 20, now, &mut Pool::default())
                .invalid
        );
        assert_eq!(w.bounds(), (0, 1));
    }

    #[test]
    fn a_hole_below_later_sacked_packets_is_retransmitted() {
        let (mut w, now) = window(1000);
        for _ in 0..4 {
            w.push(Message::from_payload(&[1; 10])).expect("fits");
        }
        for s in 0..4 {
            let mut v = Vec::new();
            w.take(&mut v, 1, now + Duration::from_millis(s));
        }
        let later = now + Duration::from_millis(10);
        // 0 arrived, 1 did not, 2 and 3 did.
        let fx = w.on_ack(1, [2, 3].into_iter(), 1 << 20, later, &mut Pool::default());
        assert!(fx.lost);
        assert_eq!(take_all(&mut w, later), vec![1]);
        assert_eq!(w.retransmits, 1);
        w.on_ack(4, std::iter::empty(), 1 << 20, later, &mut Pool::default());
        assert!(w.is_idle());
    }

    #[test]
    fn timeout_resends_the_oldest_first_and_the_rest_slowly() {
        let (mut w, now) = window(1000);
        for _ in 0..5 {
            w.push(Message::from_payload(&[1; 900])).expect("fits");
        }
        take_all(&mut w, now);
        let t = w.rto_deadline().expect("timer runs");
        w.on_timeout(t);
        // The oldest whatever the windows say, then as many as two packets' worth allow.
        assert_eq!(take_all(&mut w, t), vec![0, 1]);
        // Doubled.
        assert_eq!(
            w.rto_deadline().map(|d| d - t),
            Some(Duration::from_millis(40))
        );
    }

    #[test]
    fn the_window_bounds_packets_in_flight_and_queued_ones_wait() {
        let now = Instant::now();
        let mut w = SendWindow::new(4, 1000, BOUNDS, Duration::from_micros(500), now);
        for _ in 0..10 {
            w.push(Message::from_payload(&[1; 10])).expect("fits");
        }
        assert_eq!(take_all(&mut w, now).len(), 4);
        assert!(w.has_work());
        w.on_ack(2, std::iter::empty(), 1 << 20, now, &mut Pool::default());
        assert_eq!(take_all(&mut w, now), vec![4, 5]);
    }

    #[test]
    fn unsent_packets_go_back_in_order() {
        let (mut w, now) = window(1000);
        for _ in 0..3 {
            w.push(Message::from_payload(&[1; 10])).expect("fits");
        }
        let v = take_all(&mut w, now);
        w.unsend(&v[1..]);
        assert_eq!(w.bounds(), (0, 1));
        assert_eq!(take_all(&mut w, now), vec![1, 2]);
    }

    #[test]
    fn flow_control_keeps_one_packet_going_even_with_a_tiny_window() {
        let (mut w, now) = window(1000);
        for _ in 0..2 {
            w.push(Message::from_payload(&[1; 900])).expect("fits");
        }
        assert_eq!(take_all(&mut w, now), vec![0, 1]);
        // The peer can buffer almost nothing: with a packet in flight, no other goes.
        w.on_ack(1, std::iter::empty(), 10, now, &mut Pool::default());
        w.push(Message::from_payload(&[1; 900])).expect("fits");
        assert_eq!(take_all(&mut w, now), Vec::<u64>::new());
        // With none in flight, one goes however small the window.
        w.on_ack(2, std::iter::empty(), 10, now, &mut Pool::default());
        assert_eq!(take_all(&mut w, now), vec![2]);
    }

    #[test]
    fn a_lost_tail_is_probed_after_two_round_trips_not_the_timeout() {
        let (mut w, t0) = window(1000);
        for _ in 0..4 {
            w.push(Message::from_payload(&[1; 10])).expect("fits");
        }
        let mut first = Vec::new();
        w.take(&mut first, 1, t0);
        let t1 = t0 + Duration::from_micros(100);
        w.on_ack(1, std::iter::empty(), 1 << 20, t1, &mut Pool::default());
        assert_eq!(take_all(&mut w, t1), vec![1, 2, 3]);
        // Nothing more is heard: the probe is due long before the 1 ms timeout.
        let due = w.deadline().expect("a timer runs");
        assert!(due < w.rto_deadline().expect("timeout runs"));
        assert_eq!(due - t1, Duration::from_micros(200));
        w.on_timer(due);
        assert_eq!(take_all(&mut w, due), vec![3], "the last packet goes again");
        assert_eq!((w.retransmits, w.timeouts), (1, 0));
        // Once per flight: the next timer is the timeout.
        assert_eq!(w.deadline(), w.rto_deadline());
    }

    #[test]
    fn a_packet_overtaken_in_the_same_burst_is_lost_once_it_had_its_round_trip() {
        let (mut w, t0) = window(1000);
        for _ in 0..4 {
            w.push(Message::from_payload(&[1; 10])).expect("fits");
        }
        assert_eq!(take_all(&mut w, t0).len(), 4);
        // 0 arrived, 1 not (yet), 2 and 3 did: all four went at the same instant, so 1 is
        // suspect but gets a reordering allowance (a quarter of the minimum RTT) first.
        let t1 = t0 + Duration::from_micros(100);
        let fx = w.on_ack(1, [2, 3].into_iter(), 1 << 20, t1, &mut Pool::default());
        assert!(!fx.lost);
        let due = w.deadline().expect("the reordering timer");
        assert_eq!(due - t0, Duration::from_micros(125));
        w.on_timer(due);
        assert_eq!(take_all(&mut w, due), vec![1]);
    }

    #[test]
    fn reported_duplicates_widen_the_reordering_allowance() {
        let (mut w, t0) = window(1000);
        for _ in 0..4 {
            w.push(Message::from_payload(&[1; 10])).expect("fits");
        }
        take_all(&mut w, t0);
        let mut pool = Pool::default();
        // One round trip measured, then the peer says a packet came twice.
        w.on_ack(
            1,
            std::iter::empty(),
            1 << 20,
            t0 + Duration::from_micros(100),
            &mut pool,
        );
        w.on_duplicate_report();
        w.on_duplicate_report(); // once per window: no further widening
        let t1 = t0 + Duration::from_micros(100);
        w.on_ack(2, [3].into_iter(), 1 << 20, t1, &mut pool);
        // Two quarters of the 100 µs minimum RTT now, not one.
        assert_eq!(
            w.deadline().map(|d| d - t0),
            Some(Duration::from_micros(150))
        );
    }
}
