//! The scheduler's message queue: integer priorities, smaller first, FIFO among equals.
//!
//! Most messages carry the default priority 0, so those go to a plain ring buffer and only
//! prioritized ones pay for the heap (Converse's queue makes the same split). Both structures
//! keep their allocations between messages, so a push/pop pair allocates nothing once warm.

use converse_machine::Message;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// The scheduler queue of one PE.
#[derive(Default)]
pub(crate) struct Queue {
    zero: VecDeque<Message>,
    prio: BinaryHeap<Entry>,
    /// Arrival counter, to keep FIFO order among equal non-zero priorities inside the heap.
    seq: u64,
    /// Wire bytes of the messages held: the scheduler stops taking in arrivals above
    /// `sched.max_queued_mib` (an add and a subtract per message, no atomics: one thread).
    bytes: usize,
}

struct Entry {
    prio: i32,
    seq: u64,
    msg: Message,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // BinaryHeap pops the greatest: the greatest entry is the smallest (priority, seq).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.prio, other.seq).cmp(&(self.prio, self.seq))
    }
}

impl Queue {
    /// Enqueue by the message's own priority.
    #[inline]
    pub(crate) fn push(&mut self, msg: Message) {
        self.bytes += msg.wire_len();
        let prio = msg.priority();
        if prio == 0 {
            self.zero.push_back(msg);
        } else {
            self.seq += 1;
            self.prio.push(Entry {
                prio,
                seq: self.seq,
                msg,
            });
        }
    }

    /// The next message to run: negative priorities, then 0 (FIFO), then positive.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Message> {
        let m = match self.prio.peek() {
            Some(e) if e.prio < 0 || self.zero.is_empty() => self.prio.pop().map(|e| e.msg),
            _ => self.zero.pop_front(),
        }?;
        self.bytes -= m.wire_len();
        Some(m)
    }

    /// Wire bytes of the messages held.
    #[inline]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The priority of the message [`pop`](Self::pop) would return.
    #[inline]
    pub(crate) fn peek_priority(&self) -> Option<i32> {
        match self.prio.peek() {
            Some(e) if e.prio < 0 || self.zero.is_empty() => Some(e.prio),
            _ => self.zero.front().map(|_| 0),
        }
    }

    /// Drop everything (at job exit).
    pub(crate) fn clear(&mut self) {
        self.zero.clear();
        self.prio.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(prio: i32, tag: u8) -> Message {
        Message::from_payload(&[tag]).with_priority(prio)
    }

    #[test]
    fn priority_order_with_fifo_among_equals() {
        let mut q = Queue::default();
        let input = [
            (5, 0),
            (0, 1),
            (-3, 2),
            (5, 3),
            (0, 4),
            (-3, 5),
            (i32::MIN, 6),
            (i32::MAX, 7),
        ];
        for (p, t) in input {
            q.push(msg(p, t));
        }
        let mut order = Vec::new();
        while let Some(p) = q.peek_priority() {
            let m = q.pop().unwrap();
            assert_eq!(m.priority(), p);
            order.push(m.payload()[0]);
        }
        assert_eq!(order, vec![6, 2, 5, 1, 4, 0, 3, 7]);
        assert!(q.pop().is_none());
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn interleaved_push_pop_keeps_order() {
        let mut q = Queue::default();
        q.push(msg(1, 0));
        q.push(msg(0, 1));
        let one = msg(0, 0).wire_len();
        assert_eq!(q.bytes(), 2 * one);
        assert_eq!(q.pop().map(|m| m.payload()[0]), Some(1));
        assert_eq!(q.bytes(), one);
        q.push(msg(-1, 2));
        q.push(msg(1, 3));
        let order: Vec<u8> = std::iter::from_fn(|| q.pop())
            .map(|m| m.payload()[0])
            .collect();
        assert_eq!(order, vec![2, 0, 3]);
    }
}
