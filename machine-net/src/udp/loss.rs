//! Loss detection towards one peer, by time, and the timers that drive it:
//! - **RACK** (RFC 8985): a packet is lost when one sent after it has been acknowledged and it
//!   has had that packet's round trip plus a reordering allowance (a quarter of the minimum
//!   RTT, widened when the peer reports duplicates) to arrive;
//! - the **tail-loss probe**: when nothing is heard for about two round trips, the last packet
//!   goes again, so its acknowledgement shows RACK what is missing long before a timeout;
//! - the **retransmission timeout** (RFC 6298, from [`Rtt`]): everything in flight is deemed
//!   lost, and the timeout doubles until an acknowledgement makes progress.
//!
//! The detector decides; the packets' states are kept by the [`Flight`] it is handed.

use super::flight::Flight;
use super::rtt::{RtoBounds, Rtt};
use std::time::{Duration, Instant};

/// Congestion cuts after which a widened reordering allowance goes back to one quarter.
const RECOVERIES_TO_NARROW: u32 = 16;

/// Most quarters of the minimum RTT the reordering allowance may widen to.
const MAX_REO_MULT: u32 = 64;

/// RACK's reference: the packet sent last (by time, then number) of those known to have
/// arrived, and its round trip.
#[derive(Debug, Clone, Copy)]
struct Rack {
    sent_at: Instant,
    seq: u64,
    rtt: Duration,
}

/// The loss detector towards one peer.
#[derive(Debug, Clone)]
pub(super) struct LossDetector {
    /// The most recently sent packet known to have arrived.
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
    /// When the retransmission timer started, if packets are outstanding.
    rto_from: Option<Instant>,
    rtt: Rtt,
}

impl LossDetector {
    /// A detector with the timeout's `bounds`, towards a peer that delays its
    /// acknowledgements by up to `ack_delay`.
    pub(super) fn new(bounds: RtoBounds, ack_delay: Duration) -> LossDetector {
        LossDetector {
            rack: None,
            reo_timer: None,
            reo_mult: 1,
            reo_widened_until: 0,
            recoveries: 0,
            tlp_from: None,
            tlp_sent: false,
            ack_delay,
            rto_from: None,
            rtt: Rtt::new(bounds),
        }
    }

    /// The RTT estimator.
    pub(super) fn rtt(&self) -> &Rtt {
        &self.rtt
    }

    /// An RTT sample (from a packet sent once).
    pub(super) fn sample_rtt(&mut self, rtt: Duration) {
        self.rtt.sample(rtt);
    }

    /// When the retransmission timer expires, if it runs.
    pub(super) fn rto_deadline(&self) -> Option<Instant> {
        self.rto_from.map(|t| t + self.rtt.rto())
    }

    /// When the tail-loss probe is due, if it may go: about two round trips after the last
    /// packet went or the last acknowledgement came (plus the peer's acknowledgement delay
    /// when a lone packet is out), once per flight.
    pub(super) fn tlp_deadline(&self, flight: &Flight) -> Option<Instant> {
        if self.tlp_sent || !flight.outstanding() {
            return None;
        }
        let srtt = self.rtt.srtt()?;
        let lone = if flight.count() <= 1 {
            self.ack_delay
        } else {
            Duration::ZERO
        };
        self.tlp_from.map(|t| t + 2 * srtt + lone)
    }

    /// The earliest timer: retransmission timeout, tail-loss probe, RACK's reordering
    /// allowance.
    pub(super) fn deadline(&self, flight: &Flight) -> Option<Instant> {
        [
            self.rto_deadline(),
            self.tlp_deadline(flight),
            self.reo_timer,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether the reordering timer is due at `now` (it stops: detection sets it anew).
    pub(super) fn reo_due(&mut self, now: Instant) -> bool {
        if self.reo_timer.is_some_and(|t| t <= now) {
            self.reo_timer = None;
            return true;
        }
        false
    }

    /// Packets went at `now`: the retransmission timer starts if it did not run, the
    /// tail-loss probe's restarts.
    pub(super) fn on_sent(&mut self, now: Instant) {
        if self.rto_from.is_none() {
            self.rto_from = Some(now);
        }
        self.tlp_from = Some(now);
    }

    /// The packets sent last have left the host at `now` (see
    /// [`SendWindow::left`](super::window::SendWindow::left)).
    pub(super) fn left(&mut self, now: Instant) {
        if self.tlp_from.is_some() {
            self.tlp_from = Some(now);
        }
    }

    /// Nothing is outstanding any more: no timeout to wait for.
    pub(super) fn stop_rto(&mut self) {
        self.rto_from = None;
    }

    /// The cumulative acknowledgement advanced at `now`: the path works (no more backoff),
    /// the timers restart from now, and a new tail-loss probe may go.
    pub(super) fn on_progress(&mut self, now: Instant, outstanding: bool) {
        self.rtt.reset_backoff();
        self.rto_from = outstanding.then_some(now);
        self.tlp_from = Some(now);
        self.tlp_sent = false;
    }

    /// The tail-loss probe is going: no other until an acknowledgement makes progress.
    pub(super) fn on_tail_probe(&mut self) {
        self.tlp_sent = true;
    }

    /// The retransmission timer expired at `now` (with packets outstanding): the timeout
    /// doubles and restarts; RACK's suspicions are moot, everything is deemed lost.
    pub(super) fn on_timeout(&mut self, now: Instant) {
        self.rtt.back_off();
        self.reo_timer = None;
        self.rto_from = Some(now);
    }

    /// A congestion cut began a new recovery: after enough of them, a widened reordering
    /// allowance narrows again.
    pub(super) fn on_recovery(&mut self) {
        self.recoveries += 1;
        if self.recoveries >= RECOVERIES_TO_NARROW {
            self.reo_mult = 1;
            self.recoveries = 0;
        }
    }

    /// The peer received a packet twice: one we deemed lost was only late (or a probe went
    /// early). Widen RACK's reordering allowance by a quarter of the minimum RTT, once per
    /// window (`una .. nxt` now), up to the smoothed RTT (RFC 8985's DSACK rule).
    pub(super) fn on_duplicate_report(&mut self, una: u64, nxt: u64) {
        if una >= self.reo_widened_until {
            self.reo_mult = (self.reo_mult + 1).min(MAX_REO_MULT);
            self.reo_widened_until = nxt;
            self.recoveries = 0;
        }
    }

    /// Packet `seq`, sent at `sent_at` and retransmitted `retx` times, is known at `now` to
    /// have arrived: it becomes RACK's reference if it was sent last. Whether it did.
    ///
    /// Only a packet sent once counts: the answer to a retransmitted one may be the
    /// original's (a descheduled peer reading it late), and taking the retransmission's time
    /// would condemn every original still on its way. A lost retransmission is found when a
    /// packet sent once after it arrives, or by the timeout.
    pub(super) fn on_delivered(
        &mut self,
        sent_at: Instant,
        seq: u64,
        retx: u16,
        now: Instant,
    ) -> bool {
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
            return true;
        }
        false
    }

    /// RACK: a packet in flight sent before the reference packet (by time, then number) is
    /// lost once it has had the reference's round trip plus the reordering allowance (never
    /// above the smoothed RTT) to arrive; one that still has time sets the reordering timer.
    /// Whether any was found lost.
    pub(super) fn detect(&mut self, flight: &mut Flight, now: Instant) -> bool {
        let Some(rack) = self.rack else {
            return false;
        };
        let quarter = self.rtt.min_rtt().unwrap_or(Duration::ZERO) / 4;
        let allowance = (quarter * self.reo_mult).min(self.rtt.srtt().unwrap_or(Duration::ZERO));
        let mut timer: Option<Instant> = None;
        let any = flight.lose_where(|seq, sent_at| {
            if (sent_at, seq) >= (rack.sent_at, rack.seq) {
                return false;
            }
            let due = sent_at + rack.rtt + allowance;
            if due <= now {
                return true;
            }
            if timer.is_none_or(|t| due < t) {
                timer = Some(due);
            }
            false
        });
        self.reo_timer = timer;
        any
    }

    /// The peer left: no timer runs.
    pub(super) fn clear(&mut self) {
        self.rto_from = None;
        self.reo_timer = None;
        self.tlp_from = None;
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

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// `n` packets sent at `t0`, and a detector that has measured a 100 µs round trip.
    fn setup(n: u64) -> (LossDetector, Flight, Instant) {
        let t0 = Instant::now();
        let mut f = Flight::default();
        for _ in 0..n {
            f.send_new(100, t0);
        }
        let mut d = LossDetector::new(BOUNDS, us(500));
        d.on_sent(t0);
        d.sample_rtt(us(100));
        (d, f, t0)
    }

    #[test]
    fn nothing_is_lost_before_anything_arrived() {
        let (mut d, mut f, t0) = setup(3);
        assert!(!d.detect(&mut f, t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_packet_sent_before_an_acknowledged_one_is_lost_after_its_allowance() {
        let (mut d, mut f, t0) = setup(3);
        // Packet 2 (same send time, later number) arrived after 100 µs; 0 and 1 are suspect.
        let t1 = t0 + us(100);
        assert!(f.sack(2).is_some());
        assert!(d.on_delivered(t0, 2, 0, t1));
        assert!(!d.detect(&mut f, t1));
        // A quarter of the 100 µs minimum RTT later, they are lost.
        assert_eq!(d.deadline(&f).map(|t| t - t0), Some(us(125)));
        assert!(d.reo_due(t0 + us(125)));
        assert!(d.detect(&mut f, t0 + us(125)));
        assert_eq!(f.count(), 0);
    }

    #[test]
    fn a_retransmission_never_becomes_the_reference() {
        let (mut d, _, t0) = setup(1);
        assert!(!d.on_delivered(t0, 0, 1, t0 + us(100)));
        assert!(d.on_delivered(t0, 0, 0, t0 + us(100)));
        // An older packet does not replace a newer reference.
        assert!(!d.on_delivered(t0 - us(1), 5, 0, t0 + us(100)));
    }

    #[test]
    fn duplicates_widen_the_allowance_once_per_window_and_recoveries_narrow_it() {
        let (mut d, mut f, t0) = setup(3);
        d.on_duplicate_report(0, 3);
        d.on_duplicate_report(0, 3);
        f.sack(2);
        d.on_delivered(t0, 2, 0, t0 + us(100));
        d.detect(&mut f, t0 + us(100));
        // Two quarters now, not three.
        assert_eq!(d.deadline(&f).map(|t| t - t0), Some(us(150)));
        for _ in 0..RECOVERIES_TO_NARROW {
            d.on_recovery();
        }
        d.detect(&mut f, t0 + us(100));
        assert_eq!(d.deadline(&f).map(|t| t - t0), Some(us(125)));
    }

    #[test]
    fn the_tail_probe_is_due_two_round_trips_after_the_last_send_once_per_flight() {
        let (mut d, f, t0) = setup(3);
        assert_eq!(d.tlp_deadline(&f).map(|t| t - t0), Some(us(200)));
        d.on_tail_probe();
        assert_eq!(d.tlp_deadline(&f), None);
        d.on_progress(t0 + us(300), true);
        assert_eq!(d.tlp_deadline(&f).map(|t| t - t0), Some(us(500)));
    }

    #[test]
    fn a_lone_packet_waits_also_for_the_delayed_ack() {
        let (d, f, t0) = setup(1);
        assert_eq!(d.tlp_deadline(&f).map(|t| t - t0), Some(us(700)));
    }

    #[test]
    fn the_timeout_backs_off_and_progress_resets_it() {
        let (mut d, _, t0) = setup(1);
        let rto = d.rtt().rto();
        assert_eq!(d.rto_deadline(), Some(t0 + rto));
        d.on_timeout(t0 + rto);
        assert_eq!(d.rto_deadline(), Some(t0 + rto + 2 * rto));
        d.on_progress(t0 + 4 * rto, false);
        assert_eq!(d.rto_deadline(), None);
        assert_eq!(d.rtt().rto(), rto);
    }
}
