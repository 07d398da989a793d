//! The idle spin, one for the scheduler and the SMP communication thread: after the last
//! work, keep polling for a while (a reply is often microseconds away, and a wake-up costs
//! more), reading the clock only every few turns (reading it costs more than a poll), then
//! block.

use std::time::{Duration, Instant};

/// Turns of an idle spin between two readings of the clock.
const CLOCK_EVERY: u32 = 32;

/// Where a thread is in its idle spin.
#[derive(Debug, Default)]
pub(crate) struct IdleSpin {
    /// When the current idle period began (the first clock reading in it).
    since: Option<Instant>,
    turns: u32,
}

/// An idle turn that read the clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look {
    /// The clock's reading.
    pub(crate) now: Instant,
}

impl IdleSpin {
    /// Work was done: the next idle turn begins a new idle period.
    #[inline]
    pub(crate) fn busy(&mut self) {
        self.since = None;
    }

    /// One idle turn: `None` while the spin goes on without the clock (the caller pauses a
    /// moment and polls again), else the clock's reading.
    #[inline]
    pub(crate) fn turn(&mut self) -> Option<Look> {
        self.turns = self.turns.wrapping_add(1);
        if self.since.is_some() && !self.turns.is_multiple_of(CLOCK_EVERY) {
            return None;
        }
        Some(Look {
            now: Instant::now(),
        })
    }

    /// How long this idle period has lasted at `look`, and whether `look` began it.
    #[inline]
    pub(crate) fn idle_for(&mut self, look: Look) -> (Duration, bool) {
        match self.since {
            Some(since) => (look.now - since, false),
            None => {
                self.since = Some(look.now);
                (Duration::ZERO, true)
            }
        }
    }

    /// The thread blocked and is still idle: the next turn reads the clock and blocks again
    /// at once, rather than spinning a few dozen turns first.
    #[inline]
    pub(crate) fn blocked(&mut self) {
        self.turns = CLOCK_EVERY - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_read_at_once_then_every_few_turns_and_after_a_block() {
        let mut s = IdleSpin::default();
        let first = s.turn().expect("a new idle period reads the clock");
        assert!(s.idle_for(first).1, "it began the period");
        let reads = (0..CLOCK_EVERY * 4).filter(|_| s.turn().is_some()).count();
        assert_eq!(reads, 4);
        s.blocked();
        assert!(
            s.turn().is_some(),
            "after a block the clock is read at once"
        );
        let later = s.turn().map(|l| s.idle_for(l));
        assert!(later.is_none_or(|(_, first)| !first));
        s.busy();
        let again = s.turn().expect("a new period");
        assert!(s.idle_for(again).1);
    }
}
