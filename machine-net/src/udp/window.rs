//! The send side towards one peer: what may go now, and what an acknowledgement or a timer
//! changes. It composes the pieces, each in its own file:
//! - [`SendQueue`]: messages queued and numbered into packets (a message of `n` packets owns
//!   `n` consecutive sequence numbers), their datagrams;
//! - [`Flight`]: the packets sent and not cumulatively acknowledged, each in flight,
//!   selectively acknowledged or lost, and the retransmission queue;
//! - [`Congestion`]: the congestion window;
//! - [`LossDetector`]: RACK, the tail-loss probe and the retransmission timeout.
//!
//! What may be in flight is bounded three ways:
//! - **window** (packets): no packet beyond `una + window`, the receiver's reassembly span;
//! - **flow control** (bytes): no more in flight than the receiver says it can buffer (its
//!   socket buffer's share for us, advertised in every datagram it sends);
//! - **congestion** (packets): a window that grows while acknowledgements come and halves on
//!   loss, so a receiver whose socket buffer overflowed sees fewer packets, not a storm.
//!
//! A timeout deems everything in flight lost and restarts the congestion window at two
//! packets: the oldest goes at once, the rest only as acknowledgements come back. A
//! descheduled peer therefore costs two packets per timeout, not a window of retransmissions;
//! when its acknowledgement shows the originals had arrived, the cut and the loss marks are
//! undone.

use super::congestion::{Congestion, INITIAL_CWND_PACKETS};
use super::flight::{Flight, State};
use super::loss::LossDetector;
use super::rtt::{RtoBounds, Rtt};
use super::send_queue::{SendQueue, TooLarge};
use super::wire::{Frag, Header};
use converse_machine::BufferPool as Pool;
use converse_machine::Message;
use std::time::{Duration, Instant};

/// What a datagram costs in a socket buffer beyond its bytes (Linux charges each its
/// `sk_buff` and shared info, about this much): a small datagram takes far more buffer than
/// its size, and flow control must count it so.
const SKB_OVERHEAD: usize = 768;

/// What an acknowledgement did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct AckEffect {
    /// The cumulative acknowledgement advanced.
    pub progress: bool,
    /// Packets were found lost (they wait for retransmission).
    pub lost: bool,
    /// The acknowledgement acknowledged packets never sent: ignored.
    pub invalid: bool,
}

/// The send side towards one peer.
pub(super) struct SendWindow {
    queue: SendQueue,
    flight: Flight,
    cc: Congestion,
    loss: LossDetector,
    /// Bytes the peer can buffer for us (its last advertisement).
    peer_wnd: usize,
    /// Packets beyond `una` we may send.
    window: u64,
    /// The last time an acknowledgement made progress, or the first packet went out.
    progress_at: Instant,
    /// Send the oldest lost packet even if the windows are full (after a timeout or a
    /// tail-loss probe).
    probe: bool,
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
    pub(super) fn new(
        window: usize,
        dgram_max: usize,
        bounds: RtoBounds,
        ack_delay: Duration,
        now: Instant,
    ) -> SendWindow {
        SendWindow {
            queue: SendQueue::new(dgram_max),
            flight: Flight::default(),
            cc: Congestion::new(window),
            loss: LossDetector::new(bounds, ack_delay),
            peer_wnd: INITIAL_CWND_PACKETS * dgram_max,
            window: window as u64,
            progress_at: now,
            probe: false,
            retransmits: 0,
            timeouts: 0,
            probes: 0,
        }
    }

    /// Queue a message: it gets the next sequence numbers.
    ///
    /// # Errors
    /// [`TooLarge`] for a message beyond what a fragment header can announce.
    pub(super) fn push(&mut self, msg: Message) -> Result<(), TooLarge> {
        self.queue.push(msg)
    }

    /// Nothing queued, nothing unacknowledged.
    pub(super) fn is_idle(&self) -> bool {
        self.flight.una() == self.queue.end()
    }

    /// Wire bytes held for the peer: messages queued or not wholly acknowledged.
    pub(super) fn held(&self) -> usize {
        self.queue.bytes()
    }

    /// Packets are in flight or waiting for retransmission.
    pub(super) fn outstanding(&self) -> bool {
        self.flight.outstanding()
    }

    /// There is something to send, if the windows allow.
    pub(super) fn has_work(&self) -> bool {
        self.flight.nxt() < self.queue.end() || self.flight.has_lost()
    }

    /// Oldest unacknowledged packet and the next never sent (for the statistics and tests).
    pub(super) fn bounds(&self) -> (u64, u64) {
        (self.flight.una(), self.flight.nxt())
    }

    /// The RTT estimator.
    pub(super) fn rtt(&self) -> &Rtt {
        self.loss.rtt()
    }

    /// When the retransmission timer expires, if it runs.
    #[cfg(test)]
    pub(super) fn rto_deadline(&self) -> Option<Instant> {
        self.loss.rto_deadline()
    }

    /// The earliest of this window's timers: retransmission timeout, tail-loss probe,
    /// RACK's reordering allowance.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.loss.deadline(&self.flight)
    }

    /// Run the timers that are due at `now`.
    pub(super) fn on_timer(&mut self, now: Instant) {
        if self.loss.reo_due(now) && self.loss.detect(&mut self.flight, now) {
            self.congestion_cut();
        }
        if self.loss.rto_deadline().is_some_and(|t| t <= now) {
            self.on_timeout(now);
        } else if self
            .loss
            .tlp_deadline(&self.flight)
            .is_some_and(|t| t <= now)
        {
            self.tail_probe();
        }
    }

    /// The tail-loss probe: nothing has been heard for two round trips, so the last packet
    /// in flight goes again (whatever the windows say). Its acknowledgement tells which of
    /// the packets before it are missing, and RACK resends those, long before the
    /// retransmission timeout would. Not a sign of congestion: the window stays.
    fn tail_probe(&mut self) {
        self.loss.on_tail_probe();
        self.probes += 1;
        if self.flight.lose_last() {
            self.probe = true;
        }
    }

    /// The last progress: an acknowledgement that advanced, or the first packet sent after
    /// none was outstanding.
    pub(super) fn progress_at(&self) -> Instant {
        self.progress_at
    }

    /// Packet `seq`'s fragment position (none for a whole message) and its bytes.
    pub(super) fn datagram(&self, seq: u64) -> (Option<Frag>, &[u8]) {
        self.queue.datagram(seq)
    }

    /// The largest datagram towards the peer.
    pub(super) fn dgram_max(&self) -> usize {
        self.queue.dgram_max()
    }

    /// Packet `seq` as one datagram, `hdr` written into its message's headroom, when it is a
    /// whole message (`None` for a fragment, whose header goes separately).
    pub(super) fn frame(&mut self, seq: u64, hdr: &Header) -> Option<&[u8]> {
        self.queue.frame(seq, hdr)
    }

    fn room(&self, len: usize) -> bool {
        // One packet may always be in flight, however small the windows: a datagram larger
        // than the peer's advertisement must still get through.
        let count = self.flight.count();
        count == 0 || (count < self.cc.cwnd() && self.flight.bytes() + len <= self.peer_wnd)
    }

    /// Choose up to `max` packets to send now (retransmissions first), appending their
    /// sequence numbers to `out`, and count them as sent at `now`. Packets the socket then
    /// does not take must be given back with [`unsend`](Self::unsend).
    pub(super) fn take(&mut self, out: &mut Vec<u64>, max: usize, now: Instant) {
        let start = out.len();
        while out.len() - start < max {
            if let Some((seq, len)) = self.flight.first_lost() {
                if !self.probe && !self.room(len) {
                    break;
                }
                self.probe = false;
                self.flight.resend_first_lost(now);
                self.retransmits += 1;
                out.push(seq);
                continue;
            }
            let nxt = self.flight.nxt();
            if nxt < self.queue.end() && nxt - self.flight.una() < self.window {
                let len = self.queue.datagram_len(nxt) + SKB_OVERHEAD;
                if !self.room(len) {
                    break;
                }
                if !self.flight.outstanding() {
                    self.progress_at = now;
                }
                out.push(self.flight.send_new(len, now));
                continue;
            }
            break;
        }
        if out.len() > start {
            self.loss.on_sent(now);
        }
    }

    /// The packets taken last have left: a batch of large datagrams takes the kernel a while
    /// to copy, and the tail-loss probe must count its two round trips from when the last
    /// one went, not from before the system call.
    pub(super) fn left(&mut self, now: Instant) {
        self.loss.left(now);
    }

    /// Give back packets [`take`](Self::take) chose but the socket did not take (in the order
    /// they were taken).
    pub(super) fn unsend(&mut self, seqs: &[u64]) {
        let retransmissions = self.flight.unsend(seqs);
        self.retransmits = self.retransmits.saturating_sub(retransmissions);
        if !self.flight.outstanding() {
            self.loss.stop_rto();
        }
    }

    /// Take an acknowledgement: every packet below `ack` has arrived, and so have the packets
    /// `sacked` yields (in increasing order); the peer can buffer `wnd` bytes for us. Messages
    /// now wholly acknowledged give their buffers to `pool`.
    pub(super) fn on_ack(
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
        if ack > self.flight.nxt() {
            fx.invalid = true;
            return fx;
        }
        self.peer_wnd = wnd.max(self.queue.dgram_max());
        // RACK's reference moved: losses are looked for.
        let mut rack_moved = false;
        // Packets this acknowledgement newly reports.
        let mut acked = 0usize;
        if ack > self.flight.una() {
            let probe = self.cc.timeout_probe();
            let mut original_after_probe = false;
            let loss = &mut self.loss;
            self.flight.advance(ack, |seq, p| {
                if p.state != State::Sacked {
                    acked += 1;
                    if sample.is_none_or(|(t, _)| p.sent_at > t) {
                        sample = Some((p.sent_at, p.retx));
                    }
                }
                if p.retx == 0 && probe.is_some_and(|s| seq > s) {
                    original_after_probe = true;
                }
                rack_moved |= loss.on_delivered(p.sent_at, seq, p.retx, now);
            });
            let una = self.flight.una();
            // Packets sent once, after the timeout's oldest, arrived: the peer was slow, not
            // the network lossy.
            if self.cc.judge_timeout(una, original_after_probe) {
                self.flight.unlose_originals();
            }
            self.queue.release(una, pool);
            self.progress_at = now;
            self.loss.on_progress(now, self.flight.outstanding());
            fx.progress = true;
        }
        for seq in sacked {
            let Some((sent_at, retx)) = self.flight.sack(seq) else {
                continue;
            };
            acked += 1;
            if sample.is_none_or(|(t, _)| sent_at > t) {
                sample = Some((sent_at, retx));
            }
            rack_moved |= self.loss.on_delivered(sent_at, seq, retx, now);
        }
        if let Some((t, 0)) = sample {
            self.loss.sample_rtt(now.saturating_duration_since(t));
        }
        if rack_moved {
            fx.lost = self.loss.detect(&mut self.flight, now);
        }
        if fx.lost {
            self.congestion_cut();
        } else {
            self.cc.on_acked(acked, self.flight.una());
        }
        fx
    }

    /// Loss: the congestion window halves (once per window of packets).
    fn congestion_cut(&mut self) {
        if self.cc.on_loss(self.flight.una(), self.flight.nxt()) {
            self.loss.on_recovery();
        }
    }

    /// The peer received a packet twice: one we deemed lost was only late (or a probe went
    /// early); RACK allows more reordering.
    pub(super) fn on_duplicate_report(&mut self) {
        self.loss
            .on_duplicate_report(self.flight.una(), self.flight.nxt());
    }

    /// The retransmission timer expired: every packet in flight is deemed lost (as TCP
    /// does), the oldest goes again at once whatever the windows say, the rest follow as the
    /// congestion window, restarted small, allows; the timeout doubles. If the timeout proves
    /// spurious (packets sent once, after the oldest, are acknowledged), the cut and the loss
    /// marks are undone.
    pub(super) fn on_timeout(&mut self, now: Instant) {
        if !self.flight.outstanding() {
            self.loss.stop_rto();
            return;
        }
        self.timeouts += 1;
        self.loss.on_timeout(now);
        self.flight.lose_all();
        self.cc.on_timeout(self.flight.una(), self.flight.nxt());
        self.probe = true;
    }

    /// The peer left: forget everything queued for it.
    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.flight.clear(self.queue.end());
        self.loss.clear();
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
