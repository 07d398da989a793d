//! FIFO per pair across the two ways a message comes in (sans-IO: no MPI here, so its tests
//! run in every build).
//!
//! Small messages arrive in pre-posted receives on one communicator; large ones are received
//! by probe on another. MPI keeps a sender's messages in order only within one communicator,
//! so a large message is announced by a *notice* in the small stream, at the place it was
//! sent. This record turns the two streams back into one per source:
//!
//! ```text
//! ring, in post order:   a1  [notice a]  a2  b1  a3        (a, b: sources)
//!                         |      |        |   |   |
//! delivered at once:     a1      |        |   b1  |
//! held for a:                  Large     a2      a3   -> released, in order, once a's large
//!                                                        message has been received
//! ```
//!
//! A source with nothing held delivers straight through; one whose oldest held entry is a
//! notice is *awaiting*, and the layer probes the large communicator for that source only.
//! Held small messages are not counted for credit until released, so the sender's window
//! bounds how many can be held.

use std::collections::VecDeque;

/// One held entry of a source.
#[derive(Debug)]
enum Held<M> {
    /// A small message that came after an unreceived large one.
    Small(M),
    /// A notice: the large message sent at this place has not been received yet.
    Large,
}

/// The per-source hold queues, and the messages released from them.
#[derive(Debug)]
pub(crate) struct Order<M> {
    held: Vec<VecDeque<Held<M>>>,
    /// Sources whose oldest held entry is a notice, in the order they began waiting.
    awaiting: Vec<usize>,
    /// Released small messages, oldest first: delivered before anything new is looked at.
    ready: VecDeque<M>,
}

impl<M> Order<M> {
    /// Nothing held, for `sources` sources.
    pub(crate) fn new(sources: usize) -> Order<M> {
        Order {
            held: (0..sources).map(|_| VecDeque::new()).collect(),
            awaiting: Vec::new(),
            ready: VecDeque::new(),
        }
    }

    /// A small message from `src` came off the ring: returned to be delivered now when nothing
    /// from `src` is held, held (and `None` returned) otherwise.
    pub(crate) fn small(&mut self, src: usize, m: M) -> Option<M> {
        let q = &mut self.held[src];
        if q.is_empty() {
            Some(m)
        } else {
            q.push_back(Held::Small(m));
            None
        }
    }

    /// A notice from `src` came off the ring: its large message comes next from `src`.
    pub(crate) fn notice(&mut self, src: usize) {
        let q = &mut self.held[src];
        if q.is_empty() {
            self.awaiting.push(src);
        }
        q.push_back(Held::Large);
    }

    /// Sources whose next message is a large one, to probe for.
    pub(crate) fn awaiting(&self) -> &[usize] {
        &self.awaiting
    }

    /// The large message `src` was awaiting has been received whole (the caller delivers it):
    /// release what `src` sent after it, up to its next notice. Returns how many small
    /// messages were released (for credit).
    ///
    /// Calling it for a source that awaits nothing is a no-op returning 0 (the caller checks
    /// [`awaiting`](Self::awaiting) first).
    pub(crate) fn large_done(&mut self, src: usize) -> usize {
        let q = &mut self.held[src];
        if !matches!(q.front(), Some(Held::Large)) {
            return 0;
        }
        q.pop_front();
        let mut released = 0;
        while let Some(Held::Small(_)) = q.front() {
            if let Some(Held::Small(m)) = q.pop_front() {
                self.ready.push_back(m);
                released += 1;
            }
        }
        if q.is_empty() {
            self.awaiting.retain(|&s| s != src);
        }
        released
    }

    /// The oldest released message, if any.
    pub(crate) fn next_ready(&mut self) -> Option<M> {
        self.ready.pop_front()
    }

    /// Whether released messages wait to be taken.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Whether anything is held or released and not yet taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.awaiting.is_empty() && self.ready.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One arrival off the ring, from `src`: a small message number, or `None` for a notice;
    /// what may be delivered at once is appended to `log`.
    fn arrive(order: &mut Order<u32>, log: &mut Vec<(usize, u32)>, src: usize, item: Option<u32>) {
        match item {
            Some(m) => {
                if let Some(m) = order.small(src, m) {
                    log.push((src, m));
                }
            }
            None => order.notice(src),
        }
    }

    #[test]
    fn nothing_held_delivers_straight_through() {
        let mut o = Order::new(2);
        assert_eq!(o.small(0, 1), Some(1));
        assert_eq!(o.small(1, 2), Some(2));
        assert!(o.is_empty());
        assert!(o.awaiting().is_empty());
    }

    #[test]
    fn messages_after_a_notice_wait_for_the_large_one_and_keep_their_order() {
        let mut o = Order::new(2);
        let mut log = Vec::new();
        for (src, item) in [
            (0, Some(1)),
            (0, None),
            (0, Some(2)),
            (1, Some(10)),
            (0, Some(3)),
        ] {
            arrive(&mut o, &mut log, src, item);
        }
        // Source 1 is not held back by source 0's large message.
        assert_eq!(log, vec![(0, 1), (1, 10)]);
        assert_eq!(o.awaiting(), &[0]);
        // The large message (100) is delivered by the caller, then what followed it.
        log.push((0, 100));
        assert_eq!(o.large_done(0), 2);
        assert!(o.has_ready());
        while let Some(m) = o.next_ready() {
            log.push((0, m));
        }
        assert_eq!(log, vec![(0, 1), (1, 10), (0, 100), (0, 2), (0, 3)]);
        assert!(!o.has_ready());
        assert!(o.is_empty());
    }

    #[test]
    fn back_to_back_large_messages_release_only_up_to_the_next_notice() {
        let mut o = Order::new(1);
        let mut log = Vec::new();
        for item in [None, Some(1), None, Some(2)] {
            arrive(&mut o, &mut log, 0, item);
        }
        assert!(log.is_empty());
        assert_eq!(o.large_done(0), 1);
        assert_eq!(o.next_ready(), Some(1));
        assert_eq!(o.next_ready(), None);
        // Still awaiting the second large message; message 2 stays held.
        assert_eq!(o.awaiting(), &[0]);
        assert_eq!(o.small(0, 3), None);
        assert_eq!(o.large_done(0), 2);
        assert_eq!(o.next_ready(), Some(2));
        assert_eq!(o.next_ready(), Some(3));
        assert!(o.is_empty());
    }

    #[test]
    fn a_large_message_with_nothing_after_it_clears_the_source() {
        let mut o: Order<u32> = Order::new(3);
        o.notice(2);
        o.notice(1);
        assert_eq!(o.awaiting(), &[2, 1]);
        assert_eq!(o.large_done(2), 0);
        assert_eq!(o.awaiting(), &[1]);
        assert_eq!(o.small(2, 7), Some(7));
        // Not awaited: nothing happens.
        assert_eq!(o.large_done(0), 0);
        assert_eq!(o.large_done(1), 0);
        assert!(o.is_empty());
    }
}
