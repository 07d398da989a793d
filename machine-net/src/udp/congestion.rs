//! The congestion window towards one peer, in packets: it starts at ten (RFC 6928), grows by
//! one per packet acknowledged below the slow-start threshold and by one per window above it,
//! halves once per window of loss, and restarts at two on a timeout, so a receiver whose
//! socket buffer overflowed sees fewer packets, not a storm. A timeout that proves spurious
//! (the peer was slow, not the network lossy) is undone.

/// Initial congestion window, in packets (RFC 6928's ten).
pub(super) const INITIAL_CWND_PACKETS: usize = 10;

/// The congestion controller towards one peer.
#[derive(Debug, Clone)]
pub(super) struct Congestion {
    /// Congestion window, packets.
    cwnd: usize,
    /// Slow-start threshold, packets.
    ssthresh: usize,
    /// Packets acknowledged towards the next congestion-avoidance increment.
    credit: usize,
    /// No further cut until `una` passes this (one cut per window of loss).
    recovery_end: u64,
    /// The window never grows beyond this (the sliding window's span).
    max: usize,
    /// Before a timeout cut the window: (the oldest packet then, cwnd, ssthresh), to undo it
    /// if the timeout proves spurious.
    undo: Option<(u64, usize, usize)>,
}

impl Congestion {
    /// A controller whose window never exceeds `max` packets.
    pub(super) fn new(max: usize) -> Congestion {
        Congestion {
            cwnd: INITIAL_CWND_PACKETS.min(max),
            ssthresh: usize::MAX,
            credit: 0,
            recovery_end: 0,
            max,
            undo: None,
        }
    }

    /// The congestion window, packets.
    pub(super) fn cwnd(&self) -> usize {
        self.cwnd
    }

    /// Loss found while the oldest unacknowledged packet is `una` and the next to send `nxt`:
    /// halve the window, once per window of packets (the losses of one flight are one event).
    /// Whether this began a new recovery.
    pub(super) fn on_loss(&mut self, una: u64, nxt: u64) -> bool {
        if una < self.recovery_end {
            return false;
        }
        self.ssthresh = (self.cwnd / 2).max(2);
        self.cwnd = self.ssthresh;
        self.recovery_end = nxt;
        true
    }

    /// `acked` packets were newly acknowledged with no loss found, the oldest unacknowledged
    /// now `una`: grow, unless still recovering from a loss.
    pub(super) fn on_acked(&mut self, acked: usize, una: u64) {
        if acked == 0 || una < self.recovery_end {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += acked;
        } else {
            // One packet more per window acknowledged.
            self.credit += acked;
            if self.credit >= self.cwnd {
                self.credit -= self.cwnd;
                self.cwnd += 1;
            }
        }
        self.cwnd = self.cwnd.min(self.max);
    }

    /// The retransmission timer expired with `una .. nxt` outstanding: restart at two
    /// packets, remembering the window before the first of a run of timeouts.
    pub(super) fn on_timeout(&mut self, una: u64, nxt: u64) {
        if self.undo.is_none() {
            self.undo = Some((una, self.cwnd, self.ssthresh));
        }
        self.ssthresh = (self.cwnd / 2).max(2);
        self.cwnd = 2;
        self.recovery_end = nxt;
    }

    /// The packet that was oldest at the last timeout, while it may still prove spurious.
    pub(super) fn timeout_probe(&self) -> Option<u64> {
        self.undo.map(|u| u.0)
    }

    /// The cumulative acknowledgement moved `una` on: once it passes the packet that was
    /// oldest at the timeout, the timeout is judged; if `spurious` (packets sent once, after
    /// that one, arrived), the window before it comes back. Whether it was undone.
    pub(super) fn judge_timeout(&mut self, una: u64, spurious: bool) -> bool {
        let Some((seq, cwnd, ssthresh)) = self.undo else {
            return false;
        };
        if una <= seq {
            return false;
        }
        self.undo = None;
        if spurious {
            self.cwnd = self.cwnd.max(cwnd);
            self.ssthresh = ssthresh;
            self.recovery_end = una;
        }
        spurious
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_ten_packets_or_the_window() {
        assert_eq!(Congestion::new(64).cwnd(), 10);
        assert_eq!(Congestion::new(4).cwnd(), 4);
    }

    #[test]
    fn slow_start_grows_per_packet_up_to_the_window() {
        let mut c = Congestion::new(64);
        c.on_acked(5, 5);
        assert_eq!(c.cwnd(), 15);
        c.on_acked(100, 105);
        assert_eq!(c.cwnd(), 64);
    }

    #[test]
    fn loss_halves_once_per_window() {
        let mut c = Congestion::new(64);
        assert!(c.on_loss(0, 10));
        assert_eq!(c.cwnd(), 5);
        // Another loss of the same flight: no second cut.
        assert!(!c.on_loss(9, 12));
        assert_eq!(c.cwnd(), 5);
        // Past the flight, the next loss cuts again, never below two.
        assert!(c.on_loss(10, 20));
        assert_eq!(c.cwnd(), 2);
        assert!(c.on_loss(20, 30));
        assert_eq!(c.cwnd(), 2);
    }

    #[test]
    fn no_growth_while_recovering_then_one_packet_per_window() {
        let mut c = Congestion::new(64);
        c.on_loss(0, 10);
        c.on_acked(3, 9);
        assert_eq!(c.cwnd(), 5, "still recovering");
        // Above the threshold (5): five packets acknowledged earn one more.
        for una in 10..14 {
            c.on_acked(1, una);
        }
        assert_eq!(c.cwnd(), 5);
        c.on_acked(1, 14);
        assert_eq!(c.cwnd(), 6);
    }

    #[test]
    fn a_timeout_restarts_at_two_and_a_spurious_one_is_undone() {
        let mut c = Congestion::new(64);
        c.on_acked(10, 10);
        c.on_timeout(10, 30);
        assert_eq!(c.cwnd(), 2);
        assert_eq!(c.timeout_probe(), Some(10));
        // The acknowledgement has not passed the probe: nothing judged yet.
        assert!(!c.judge_timeout(10, true));
        assert!(c.judge_timeout(11, true));
        assert_eq!(c.cwnd(), 20);
        assert_eq!(c.timeout_probe(), None);
    }

    #[test]
    fn a_real_timeout_keeps_the_cut() {
        let mut c = Congestion::new(64);
        c.on_timeout(0, 10);
        assert!(!c.judge_timeout(1, false));
        assert_eq!(c.cwnd(), 2);
        assert_eq!(c.timeout_probe(), None);
    }
}
