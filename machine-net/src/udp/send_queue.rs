//! The messages queued towards one peer and their numbering: every packet gets the next
//! 64-bit sequence number when its message is queued, so a message of `n` packets owns `n`
//! consecutive numbers, and any packet's datagram can be found (and rebuilt for a
//! retransmission) from its number alone. A message stays until all its packets are
//! acknowledged; its buffer then goes to the pool, to receive a large message into.

use super::wire::{Frag, Header, BASE, MAX_DATA_HEADER, MAX_MESSAGE};
use converse_machine::BufferPool as Pool;
use converse_machine::Message;
use std::collections::VecDeque;

/// Why a message cannot be queued: it is beyond what a fragment header can announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the message is larger than a fragment header can announce")]
pub(super) struct TooLarge;

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

impl OutMsg {
    fn frag(&self, index: u64) -> Frag {
        Frag {
            index: index as u32,
            chunk: self.chunk,
            total: self.msg.wire_len() as u64,
        }
    }
}

/// The messages towards one peer, numbered into packets.
pub(super) struct SendQueue {
    msgs: VecDeque<OutMsg>,
    /// Sequence number after the last queued packet.
    end: u64,
    /// Largest datagram to this peer.
    dgram_max: usize,
    /// Wire bytes of the messages held (queued or not wholly acknowledged).
    bytes: usize,
}

impl SendQueue {
    /// An empty queue towards a peer whose datagrams may be `dgram_max` bytes long.
    pub(super) fn new(dgram_max: usize) -> SendQueue {
        SendQueue {
            msgs: VecDeque::new(),
            end: 0,
            dgram_max,
            bytes: 0,
        }
    }

    /// Largest datagram to this peer.
    pub(super) fn dgram_max(&self) -> usize {
        self.dgram_max
    }

    /// Wire bytes of the messages held: queued, or sent and not wholly acknowledged.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Sequence number after the last queued packet.
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// Queue a message: it gets the next sequence numbers.
    ///
    /// # Errors
    /// [`TooLarge`] for a message beyond what a fragment header can announce.
    pub(super) fn push(&mut self, msg: Message) -> Result<(), TooLarge> {
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
        self.bytes += len;
        self.msgs.push_back(OutMsg {
            msg,
            first: self.end,
            n,
            chunk,
        });
        self.end += n;
        Ok(())
    }

    /// The index of the message holding packet `seq` (which must be queued).
    ///
    /// Every message holds a packet at least, so it is at most `seq - front.first` messages
    /// in: there when every message before it is one packet (small messages: one comparison),
    /// else found by a binary search of that prefix only. The packets asked for are in flight,
    /// near the front, while the queue behind them may hold a million messages (a sender far
    /// ahead of its window): a search of the whole queue cost a fifth of a sender's time.
    #[inline]
    fn index_of(&self, seq: u64) -> usize {
        let Some(front) = self.msgs.front() else {
            return 0;
        };
        let d = usize::try_from(seq.saturating_sub(front.first)).unwrap_or(usize::MAX);
        if self.msgs.get(d).is_some_and(|m| m.first == seq) {
            return d;
        }
        // The last message whose first packet is at or before `seq`, within 0..=d.
        let (mut lo, mut hi) = (0, d.saturating_add(1).min(self.msgs.len()));
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.msgs[mid].first <= seq {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The message holding packet `seq`, and the packet's index in it.
    fn locate(&self, seq: u64) -> (&OutMsg, u64) {
        let m = &self.msgs[self.index_of(seq)];
        (m, seq - m.first)
    }

    /// Datagram bytes of packet `seq` (header included).
    pub(super) fn datagram_len(&self, seq: u64) -> usize {
        let (m, i) = self.locate(seq);
        if m.n == 1 {
            BASE + m.msg.wire_len()
        } else {
            MAX_DATA_HEADER + m.frag(i).range().1 as usize
        }
    }

    /// Packet `seq`'s fragment position (none for a whole message) and its bytes.
    pub(super) fn datagram(&self, seq: u64) -> (Option<Frag>, &[u8]) {
        let (m, i) = self.locate(seq);
        if m.n == 1 {
            return (None, m.msg.wire());
        }
        let f = m.frag(i);
        let (off, len) = f.range();
        (Some(f), &m.msg.wire()[off as usize..(off + len) as usize])
    }

    /// Packet `seq` as one datagram, `hdr` written into its message's headroom, when it is a
    /// whole message (`None` for a fragment, whose header goes separately).
    pub(super) fn frame(&mut self, seq: u64, hdr: &Header) -> Option<&[u8]> {
        let i = self.index_of(seq);
        let m = &mut self.msgs[i];
        if m.n != 1 {
            return None;
        }
        let f = m.msg.frame_with_header(BASE);
        hdr.write(&mut f[..BASE]);
        Some(f)
    }

    /// Every packet below `una` is acknowledged: messages now wholly acknowledged give their
    /// buffers to `pool`.
    pub(super) fn release(&mut self, una: u64, pool: &mut Pool) {
        while self.msgs.front().is_some_and(|m| m.first + m.n <= una) {
            if let Some(m) = self.msgs.pop_front() {
                self.bytes -= m.msg.wire_len();
                pool.put(m.msg);
            }
        }
    }

    /// Forget every message (the numbering goes on from [`end`](Self::end)).
    pub(super) fn clear(&mut self) {
        self.msgs.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_message_is_one_packet_a_large_one_is_cut() {
        let mut q = SendQueue::new(1000);
        q.push(Message::from_payload(&[1; 10])).expect("fits");
        q.push(Message::from_payload(&[2; 3000])).expect("fits");
        // 3024 wire bytes in chunks of 956: 4 fragments.
        assert_eq!(q.end(), 5);
        assert_eq!(q.datagram(0).0, None);
        assert_eq!(q.datagram_len(0), BASE + 34);
        let (f, body) = q.datagram(4);
        let f = f.expect("a fragment");
        assert_eq!((f.index, f.chunk, f.total), (3, 956, 3024));
        assert_eq!(body.len(), 3024 - 3 * 956);
        assert_eq!(q.datagram_len(4), MAX_DATA_HEADER + body.len());
    }

    #[test]
    fn every_packet_is_found_in_its_message_among_small_and_cut_ones() {
        let mut q = SendQueue::new(1000);
        // Small, cut (4 packets), small, small, cut, small...: each packet's message found
        // by the quick look and by the search of the prefix alike.
        let mut want = Vec::new();
        for i in 0..200u8 {
            let len = if i % 7 == 3 { 3000 } else { 10 };
            let before = q.end();
            q.push(Message::from_payload(&vec![i; len])).expect("fits");
            for seq in before..q.end() {
                want.push((seq, i, seq - before));
            }
        }
        let mut pool = Pool::default();
        for release in [0, 37, 38, 101] {
            q.release(release, &mut pool);
            for &(seq, i, k) in want.iter().filter(|w| w.0 >= release) {
                let (m, idx) = q.locate(seq);
                assert_eq!((m.msg.payload()[0], idx), (i, k), "packet {seq}");
            }
        }
    }

    #[test]
    fn only_a_whole_message_is_framed_in_its_headroom() {
        let mut q = SendQueue::new(1000);
        q.push(Message::from_payload(&[1; 10])).expect("fits");
        q.push(Message::from_payload(&[2; 3000])).expect("fits");
        let hdr = Header {
            kind: super::super::wire::Kind::Data,
            src: 0,
            dst: 1,
            wnd: 1,
            tag: 7,
            seq: 0,
            ack: 0,
            sack: 0,
            frag: None,
            dup: false,
        };
        let len = q.frame(0, &hdr).map(<[u8]>::len);
        assert_eq!(len, Some(BASE + 34));
        assert!(q.frame(2, &hdr).is_none());
    }

    #[test]
    fn release_frees_only_wholly_acknowledged_messages() {
        let mut q = SendQueue::new(1000);
        q.push(Message::from_payload(&[1; 10])).expect("fits");
        q.push(Message::from_payload(&[2; 3000])).expect("fits");
        let mut pool = Pool::default();
        q.release(3, &mut pool);
        // The fragmented message (packets 1..5) is still there.
        assert_eq!(q.datagram(4).0.map(|f| f.index), Some(3));
        q.release(5, &mut pool);
        assert!(q.msgs.is_empty());
    }

    #[test]
    fn an_empty_message_still_takes_a_packet() {
        let mut q = SendQueue::new(1000);
        assert_eq!(q.push(Message::from_payload(&[])), Ok(()));
        assert_eq!(q.end(), 1);
    }
}
