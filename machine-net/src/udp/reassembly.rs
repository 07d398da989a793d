//! The receive side from one peer: duplicate suppression, packets held until the ones before
//! them arrive, fragments put together, messages handed up in sequence order, and what to
//! acknowledge.
//!
//! A packet is accepted when its sequence number lies in `[nxt, nxt + window)` and that slot
//! is empty; anything below `nxt` or in a filled slot is a duplicate (answered with an
//! acknowledgement at once: ours may have been lost), anything beyond is dropped. A message
//! that fits one datagram is copied once, from the receive buffer into its own buffer. A
//! fragmented one gets a single buffer of its full size when its first fragment to arrive —
//! whichever — announces the size, and every fragment is copied straight to its place in it,
//! so out-of-order fragments cost no extra copy. Delivery walks the filled slots from `nxt`
//! and hands up a message when its last packet is passed: FIFO per sender, exactly once.

use super::wire::{widen, Frag};
use converse_machine::BufferPool as Pool;
use converse_machine::{Message, HEADROOM};
use std::collections::VecDeque;

/// A received packet waiting for the ones before it.
enum Slot {
    Empty,
    /// A whole message.
    Whole(Message),
    /// A fragment, already in its message's buffer.
    Frag,
}

/// A message being put together.
struct Partial {
    first: u64,
    n: u64,
    chunk: u32,
    total: u64,
    /// `HEADROOM` zero bytes, then room reserved for the message's wire bytes: filled
    /// fragment by fragment (never zeroed first: every byte is written by exactly one
    /// fragment before the buffer's length covers it).
    buf: Vec<u8>,
    /// Wire bytes written so far.
    filled: u64,
}

impl Partial {
    /// Room for a message of `total` wire bytes (a kept buffer from `pool` if one fits), or
    /// `None` when memory cannot be had (the size comes from outside: it must not abort the
    /// process).
    fn new(first: u64, f: &Frag, pool: &mut Pool) -> Option<Partial> {
        let total = usize::try_from(f.total).ok()?;
        let need = HEADROOM.checked_add(total)?;
        let mut buf = match pool.take(need) {
            Some(b) => b,
            None => {
                let mut b = Vec::new();
                b.try_reserve_exact(need).ok()?;
                b
            }
        };
        buf.resize(HEADROOM, 0);
        Some(Partial {
            first,
            n: f.count(),
            chunk: f.chunk,
            total: f.total,
            buf,
            filled: 0,
        })
    }

    /// Where fragment `index` goes: a pointer into the reserved room and its length.
    fn region(&mut self, index: u64) -> (*mut u8, usize) {
        let f = Frag {
            index: index as u32,
            chunk: self.chunk,
            total: self.total,
        };
        let (off, len) = f.range();
        // SAFETY: `off + len <= total` (fragment geometry), inside the reserved capacity.
        let p = unsafe { self.buf.as_mut_ptr().add(HEADROOM + off as usize) };
        (p, len as usize)
    }

    /// Copy fragment `index` (`bytes`, its exact length) into its place.
    fn put(&mut self, index: u64, bytes: &[u8]) {
        let (p, len) = self.region(index);
        debug_assert_eq!(len, bytes.len());
        // SAFETY: `p` has room for `len` bytes (see `region`); `bytes` is another buffer.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, len.min(bytes.len())) };
        self.filled += len as u64;
    }

    /// Fragment `index` was written in place (by the kernel, straight from the socket).
    fn placed(&mut self, index: u64) {
        self.filled += self.region(index).1 as u64;
    }

    /// The whole message, once every byte is there.
    fn finish(mut self) -> Option<Message> {
        if self.filled != self.total {
            return None;
        }
        // SAFETY: every fragment of the message was written once (each packet is accepted
        // once, and the fragments of one geometry tile `0..total` exactly): all `total` bytes
        // after the headroom are initialized, within the reserved capacity.
        unsafe { self.buf.set_len(HEADROOM + self.total as usize) };
        Message::from_frame(self.buf, HEADROOM).ok()
    }
}

/// How a data packet's bytes came.
#[derive(Debug, Clone, Copy)]
pub(super) enum Body<'a> {
    /// In the receive buffer: to be copied where they belong.
    Bytes(&'a [u8]),
    /// Already in place: the kernel wrote the fragment where [`RecvWindow::holes`] said.
    Placed,
}

/// Where a missing fragment goes: for the socket to receive it there.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hole {
    /// The packet.
    pub seq: u64,
    /// Its fragment index.
    pub index: u32,
    /// Its place in the message's buffer.
    pub ptr: *mut u8,
    /// Its exact length.
    pub len: usize,
}

/// What became of a data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arrival {
    /// New: kept (and handed up if its turn came).
    Accepted,
    /// Already had it.
    Duplicate,
    /// Too far ahead of the window.
    OutOfWindow,
    /// Contradicts what the peer said before (fragment geometry): dropped.
    Inconsistent,
}

/// The receive side from one peer.
pub(super) struct RecvWindow {
    /// Next packet expected in order.
    nxt: u64,
    /// Packets `nxt .. nxt + slots.len()`.
    slots: VecDeque<Slot>,
    window: u64,
    /// Messages being put together, by first packet.
    partials: VecDeque<Partial>,
    /// Packets accepted since an acknowledgement last went to the peer.
    pub unacked: u32,
    /// An acknowledgement should go at once (a duplicate or a gap was seen).
    pub ack_now: bool,
    /// A packet came twice since an acknowledgement last went: the next one says so.
    pub dup_seen: bool,
}

impl RecvWindow {
    /// A receive side accepting up to `window` packets ahead.
    pub(super) fn new(window: usize) -> RecvWindow {
        RecvWindow {
            nxt: 0,
            slots: VecDeque::new(),
            window: window as u64,
            partials: VecDeque::new(),
            unacked: 0,
            ack_now: false,
            dup_seen: false,
        }
    }

    /// The next packet expected in order (what the cumulative acknowledgement says).
    pub(super) fn nxt(&self) -> u64 {
        self.nxt
    }

    /// Whether a message is part-way in: some of its fragments here, the rest to come.
    pub(super) fn assembling(&self) -> bool {
        !self.partials.is_empty()
    }

    /// A data packet with sequence number `seq` (low 32 bits) arrived. Hands up, in order,
    /// every message it completes. A large message being put together takes its buffer from
    /// `pool` when one fits.
    pub(super) fn on_data(
        &mut self,
        seq: u32,
        frag: Option<Frag>,
        body: Body<'_>,
        pool: &mut Pool,
        deliver: &mut dyn FnMut(Message),
    ) -> (Arrival, usize) {
        let seq = widen(seq, self.nxt);
        if seq < self.nxt || seq.wrapping_sub(self.nxt) >= 1 << 63 {
            self.ack_now = true;
            self.dup_seen = true;
            return (Arrival::Duplicate, 0);
        }
        let off = seq - self.nxt;
        if off >= self.window {
            return (Arrival::OutOfWindow, 0);
        }
        let off = off as usize;
        if off < self.slots.len() && !matches!(self.slots[off], Slot::Empty) {
            self.ack_now = true;
            self.dup_seen = true;
            return (Arrival::Duplicate, 0);
        }
        let slot = match (frag, body) {
            (None, Body::Bytes(body)) => {
                if self.partial_covering(seq).is_some() {
                    return (Arrival::Inconsistent, 0);
                }
                match Message::from_wire(body) {
                    Ok(m) => Slot::Whole(m),
                    Err(_) => return (Arrival::Inconsistent, 0),
                }
            }
            (Some(f), body) => {
                let Some(i) = self.partial_for(seq, &f, pool) else {
                    return (Arrival::Inconsistent, 0);
                };
                match body {
                    Body::Bytes(b) => self.partials[i].put(u64::from(f.index), b),
                    Body::Placed => self.partials[i].placed(u64::from(f.index)),
                }
                Slot::Frag
            }
            (None, Body::Placed) => return (Arrival::Inconsistent, 0),
        };
        if self.slots.len() <= off {
            self.slots.resize_with(off + 1, || Slot::Empty);
        }
        self.slots[off] = slot;
        self.unacked += 1;
        let delivered = self.deliver_in_order(deliver);
        if !self.slots.is_empty() {
            // A gap: tell the sender at once which packets came, so it can resend the hole.
            self.ack_now = true;
        }
        (Arrival::Accepted, delivered)
    }

    /// The next fragments still missing of the messages being put together, up to `max`,
    /// each given to `f`: for the socket to receive them straight into place.
    pub(super) fn holes(&mut self, max: usize, mut f: impl FnMut(Hole)) {
        let end = self.nxt + self.window;
        let mut given = 0;
        for p in self.partials.iter_mut() {
            let from = p.first.max(self.nxt);
            let to = (p.first + p.n).min(end);
            for seq in from..to {
                if given >= max {
                    return;
                }
                let off = (seq - self.nxt) as usize;
                if off < self.slots.len() && !matches!(self.slots[off], Slot::Empty) {
                    continue;
                }
                let index = seq - p.first;
                let (ptr, len) = p.region(index);
                f(Hole {
                    seq,
                    index: index as u32,
                    ptr,
                    len,
                });
                given += 1;
            }
        }
    }

    /// The partial message packet `seq` belongs to, if any.
    fn partial_covering(&self, seq: u64) -> Option<usize> {
        self.partials
            .iter()
            .position(|p| p.first <= seq && seq < p.first + p.n)
    }

    /// The partial message fragment `f` (packet `seq`) belongs to, made when it is the first
    /// of its message to arrive; `None` when the fragment contradicts what is known.
    fn partial_for(&mut self, seq: u64, f: &Frag, pool: &mut Pool) -> Option<usize> {
        let first = seq.checked_sub(u64::from(f.index))?;
        let n = f.count();
        if let Some(i) = self.partial_covering(seq) {
            let p = &self.partials[i];
            return (p.first == first && p.chunk == f.chunk && p.total == f.total).then_some(i);
        }
        // A new message: it must start at or after `nxt` (its earlier packets would have been
        // seen), overlap no other message and no whole one already held.
        if first < self.nxt
            || self
                .partials
                .iter()
                .any(|p| p.first < first + n && first < p.first + p.n)
        {
            return None;
        }
        let held_whole = self
            .slots
            .iter()
            .enumerate()
            .skip((first - self.nxt) as usize)
            .take(n.min(usize::MAX as u64) as usize)
            .any(|(_, s)| matches!(s, Slot::Whole(_)));
        if held_whole {
            return None;
        }
        // A size no allocation can hold cannot be a real message's: dropped like garbage.
        let partial = Partial::new(first, f, pool)?;
        let at = self.partials.partition_point(|p| p.first < first);
        self.partials.insert(at, partial);
        Some(at)
    }

    fn deliver_in_order(&mut self, deliver: &mut dyn FnMut(Message)) -> usize {
        let mut n = 0;
        while matches!(self.slots.front(), Some(s) if !matches!(s, Slot::Empty)) {
            let Some(slot) = self.slots.pop_front() else {
                break;
            };
            let seq = self.nxt;
            self.nxt += 1;
            match slot {
                Slot::Whole(m) => {
                    deliver(m);
                    n += 1;
                }
                Slot::Frag => {
                    let last = self
                        .partials
                        .front()
                        .is_some_and(|p| p.first <= seq && seq + 1 == p.first + p.n);
                    if last {
                        // Every packet of it came before this one (delivery is in order), each
                        // checked against the same geometry: the buffer is full.
                        if let Some(m) = self.partials.pop_front().and_then(Partial::finish) {
                            deliver(m);
                            n += 1;
                        }
                    }
                }
                Slot::Empty => {}
            }
        }
        n
    }

    /// The cumulative acknowledgement and the SACK bits of the 32 packets after it.
    pub(super) fn ack_fields(&self) -> (u64, u32) {
        let mut bits = 0u32;
        for (i, s) in self.slots.iter().skip(1).take(32).enumerate() {
            if !matches!(s, Slot::Empty) {
                bits |= 1 << i;
            }
        }
        (self.nxt, bits)
    }

    /// Write the SACK bits beyond the first 32 (packet `nxt + 33` on) into `out`; returns
    /// the bytes used (none when nothing is held that far ahead).
    pub(super) fn sack_ext(&self, out: &mut [u8]) -> usize {
        if self.slots.len() <= 33 {
            return 0;
        }
        let bits = self.slots.len() - 33;
        let bytes = bits.div_ceil(8).min(out.len());
        out[..bytes].fill(0);
        for (i, s) in self.slots.iter().skip(33).take(bytes * 8).enumerate() {
            if !matches!(s, Slot::Empty) {
                out[i / 8] |= 1 << (i % 8);
            }
        }
        bytes
    }

    /// An acknowledgement went to the peer (alone or on data).
    pub(super) fn acked(&mut self) {
        self.unacked = 0;
        self.ack_now = false;
        self.dup_seen = false;
    }

    /// Whether anything received is not yet acknowledged.
    pub(super) fn owes_ack(&self) -> bool {
        self.unacked > 0 || self.ack_now
    }
}

/// The packets an acknowledgement says arrived beyond the cumulative one, in order: bit `i`
/// of `sack` is packet `ack + 1 + i`, bit `j` of `ext` is packet `ack + 33 + j`.
pub(super) fn sacked(ack: u64, sack: u32, ext: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let first = (0..32u64)
        .filter(move |i| sack & (1 << i) != 0)
        .map(move |i| ack + 1 + i);
    let rest = ext.iter().enumerate().flat_map(move |(byte, b)| {
        (0..8u64)
            .filter(move |bit| b & (1 << bit) != 0)
            .map(move |bit| ack + 33 + byte as u64 * 8 + bit)
    });
    first.chain(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, len: usize) -> Message {
        let mut m = Message::from_payload(&vec![tag; len]);
        m.set_handler(u32::from(tag));
        m
    }

    fn collect(w: &mut RecvWindow, seq: u32, frag: Option<Frag>, body: &[u8]) -> Vec<Message> {
        let mut got = Vec::new();
        w.on_data(
            seq,
            frag,
            Body::Bytes(body),
            &mut Pool::default(),
            &mut |m| got.push(m),
        );
        got
    }

    #[test]
    fn in_order_packets_are_handed_up_at_once() {
        let mut w = RecvWindow::new(16);
        let m = msg(1, 5);
        assert_eq!(collect(&mut w, 0, None, m.wire()), vec![m]);
        assert_eq!(w.ack_fields(), (1, 0));
        assert!(!w.ack_now);
    }

    #[test]
    fn out_of_order_packets_wait_and_are_sacked() {
        let mut w = RecvWindow::new(16);
        let (a, b, c) = (msg(1, 5), msg(2, 5), msg(3, 5));
        assert!(collect(&mut w, 2, None, c.wire()).is_empty());
        assert!(collect(&mut w, 1, None, b.wire()).is_empty());
        assert_eq!(w.ack_fields(), (0, 0b11));
        assert!(w.ack_now);
        assert_eq!(collect(&mut w, 0, None, a.wire()), vec![a, b, c]);
        assert_eq!(w.ack_fields(), (3, 0));
    }

    #[test]
    fn duplicates_are_dropped_and_answered() {
        let mut w = RecvWindow::new(16);
        let m = msg(1, 5);
        collect(&mut w, 0, None, m.wire());
        w.acked();
        let (a, n) = w.on_data(
            0,
            None,
            Body::Bytes(m.wire()),
            &mut Pool::default(),
            &mut |_| panic!("delivered twice"),
        );
        assert_eq!((a, n), (Arrival::Duplicate, 0));
        assert!(w.ack_now);
        collect(&mut w, 5, None, m.wire());
        let (a, _) = w.on_data(
            5,
            None,
            Body::Bytes(m.wire()),
            &mut Pool::default(),
            &mut |_| panic!("delivered twice"),
        );
        assert_eq!(a, Arrival::Duplicate);
    }

    #[test]
    fn packets_beyond_the_window_are_dropped() {
        let mut w = RecvWindow::new(4);
        let (a, _) = w.on_data(
            4,
            None,
            Body::Bytes(msg(1, 1).wire()),
            &mut Pool::default(),
            &mut |_| {},
        );
        assert_eq!(a, Arrival::OutOfWindow);
        let (a, _) = w.on_data(
            u32::MAX / 4,
            None,
            Body::Bytes(msg(1, 1).wire()),
            &mut Pool::default(),
            &mut |_| {},
        );
        assert_eq!(a, Arrival::OutOfWindow);
    }

    #[test]
    fn fragments_in_any_order_make_one_message() {
        let m = msg(9, 1000);
        let wire = m.wire();
        let chunk = 300u32;
        let total = wire.len() as u64;
        let frag = |i: u32| Frag {
            index: i,
            chunk,
            total,
        };
        let part = |i: u32| {
            let (o, l) = frag(i).range();
            &wire[o as usize..(o + l) as usize]
        };
        // A whole message before it, then the 4 fragments at packets 1..=4, in a shuffled order.
        let mut w = RecvWindow::new(16);
        let first = msg(1, 3);
        for i in [3u32, 1, 2] {
            assert!(collect(&mut w, 1 + i, Some(frag(i)), part(i)).is_empty());
        }
        assert_eq!(collect(&mut w, 0, None, first.wire()), vec![first]);
        assert_eq!(collect(&mut w, 1, Some(frag(0)), part(0)), vec![m]);
        assert_eq!(w.ack_fields(), (5, 0));
    }

    #[test]
    fn a_fragment_contradicting_its_message_is_refused() {
        let mut w = RecvWindow::new(16);
        let f = Frag {
            index: 1,
            chunk: 100,
            total: 250,
        };
        collect(&mut w, 3, Some(f), &[0; 100]);
        let other = Frag { total: 260, ..f };
        let (a, _) = w.on_data(
            4,
            Some(Frag { index: 2, ..other }),
            Body::Bytes(&[0; 60]),
            &mut Pool::default(),
            &mut |_| {},
        );
        assert_eq!(a, Arrival::Inconsistent);
        // A whole message where the fragmented one's packets go.
        let (a, _) = w.on_data(
            2,
            None,
            Body::Bytes(msg(1, 1).wire()),
            &mut Pool::default(),
            &mut |_| {},
        );
        assert_eq!(a, Arrival::Inconsistent);
        // A fragment claiming its message started before what was already delivered.
        let (a, _) = w.on_data(
            0,
            Some(Frag { index: 5, ..f }),
            Body::Bytes(&[]),
            &mut Pool::default(),
            &mut |_| {},
        );
        assert_eq!(a, Arrival::Inconsistent);
    }

    #[test]
    fn sack_bits_beyond_32_go_in_the_extension() {
        let mut w = RecvWindow::new(128);
        for s in [1u32, 33, 40] {
            collect(&mut w, s, None, msg(1, 1).wire());
        }
        let (ack, bits) = w.ack_fields();
        assert_eq!((ack, bits), (0, 1));
        let mut ext = [0u8; 16];
        let n = w.sack_ext(&mut ext);
        let got: Vec<u64> = sacked(ack, bits, &ext[..n]).collect();
        assert_eq!(got, vec![1, 33, 40]);
    }
}
