//! Round-trip time and the retransmission timeout derived from it, as RFC 6298 computes them:
//! a smoothed RTT and its variation from samples (Karn's rule: never from a retransmitted
//! packet, whose acknowledgement could answer either copy), RTO = SRTT + 4·RTTVAR within
//! bounds, doubled on every expiry until an acknowledgement makes progress.
//!
//! The timeout follows what the path really does: a peer that is descheduled now and then
//! (a busy machine) shows up as variation, which raises the timeout, instead of as a storm of
//! retransmissions on a fixed short timer.

use std::time::Duration;

/// The timeout's bounds and starting value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtoBounds {
    /// Never below this.
    pub min: Duration,
    /// Never above this, backoff included.
    pub max: Duration,
    /// Before the first sample.
    pub initial: Duration,
}

/// One peer's RTT estimator.
#[derive(Debug, Clone)]
pub(super) struct Rtt {
    bounds: RtoBounds,
    /// Smoothed RTT, ns; `None` before the first sample.
    srtt: Option<u64>,
    /// RTT variation, ns.
    rttvar: u64,
    /// Smallest sample seen, ns.
    min_rtt: u64,
    /// Expiries since the last progress: the timeout is doubled this many times.
    backoff: u32,
}

/// Clock granularity G of RFC 6298: the variation term is never below it.
const GRANULARITY_NS: u64 = 10_000;

impl Rtt {
    /// An estimator with no sample yet.
    pub(super) fn new(bounds: RtoBounds) -> Rtt {
        Rtt {
            bounds,
            srtt: None,
            rttvar: 0,
            min_rtt: u64::MAX,
            backoff: 0,
        }
    }

    /// Take a sample (from a packet sent once).
    pub(super) fn sample(&mut self, rtt: Duration) {
        let r = rtt.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.min_rtt = self.min_rtt.min(r);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
    }

    /// The timeout now, backoff included.
    pub(super) fn rto(&self) -> Duration {
        let base = match self.srtt {
            None => self.bounds.initial,
            Some(s) => Duration::from_nanos(s + (4 * self.rttvar).max(GRANULARITY_NS)),
        };
        let base = base.clamp(self.bounds.min, self.bounds.max);
        base.saturating_mul(1 << self.backoff.min(16))
            .min(self.bounds.max)
    }

    /// The timeout expired: double it.
    pub(super) fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(16);
    }

    /// An acknowledgement made progress: the path works, stop doubling.
    pub(super) fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// The smoothed RTT, if measured.
    pub(super) fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// The smallest RTT measured, if any.
    pub(super) fn min_rtt(&self) -> Option<Duration> {
        (self.min_rtt != u64::MAX).then(|| Duration::from_nanos(self.min_rtt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: RtoBounds = RtoBounds {
        min: Duration::from_micros(200),
        max: Duration::from_secs(1),
        initial: Duration::from_millis(20),
    };

    #[test]
    fn starts_at_the_initial_timeout() {
        assert_eq!(Rtt::new(B).rto(), Duration::from_millis(20));
    }

    #[test]
    fn first_sample_sets_srtt_and_half_variation() {
        let mut r = Rtt::new(B);
        r.sample(Duration::from_millis(10));
        assert_eq!(r.srtt(), Some(Duration::from_millis(10)));
        // 10 ms + 4 * 5 ms
        assert_eq!(r.rto(), Duration::from_millis(30));
    }

    #[test]
    fn steady_samples_converge_and_respect_the_minimum() {
        let mut r = Rtt::new(B);
        for _ in 0..100 {
            r.sample(Duration::from_micros(30));
        }
        assert_eq!(r.srtt(), Some(Duration::from_micros(30)));
        assert_eq!(r.rto(), Duration::from_micros(200));
    }

    #[test]
    fn jitter_raises_the_timeout() {
        let mut calm = Rtt::new(B);
        let mut jumpy = Rtt::new(B);
        for i in 0..50 {
            calm.sample(Duration::from_micros(500));
            jumpy.sample(Duration::from_micros(if i % 2 == 0 { 100 } else { 900 }));
        }
        assert!(jumpy.rto() > calm.rto() * 2, "{jumpy:?} vs {calm:?}");
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum_and_resets() {
        let mut r = Rtt::new(B);
        r.back_off();
        assert_eq!(r.rto(), Duration::from_millis(40));
        for _ in 0..20 {
            r.back_off();
        }
        assert_eq!(r.rto(), Duration::from_secs(1));
        r.reset_backoff();
        assert_eq!(r.rto(), Duration::from_millis(20));
    }
}
