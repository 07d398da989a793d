//! The packets towards one peer that have been sent at least once and not yet cumulatively
//! acknowledged (`una .. nxt`), each in flight, selectively acknowledged or deemed lost, and
//! the retransmission queue of the lost ones. It keeps the counts flow and congestion control
//! read (bytes and packets in flight) true through every change of state; *when* a packet is
//! lost is the loss detector's question ([`super::loss`]), not this ledger's.

use std::collections::VecDeque;
use std::time::Instant;

/// Where a packet stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Sent, not yet answered.
    InFlight,
    /// Selectively acknowledged: arrived, waiting for the packets before it.
    Sacked,
    /// Deemed lost: waiting in the retransmission queue.
    Lost,
}

/// A packet that has been sent at least once.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pkt {
    /// When it was last sent.
    pub sent_at: Instant,
    /// What it occupies in the receiver's socket buffer: its bytes and the kernel's
    /// bookkeeping.
    pub len: u32,
    /// Times retransmitted.
    pub retx: u16,
    /// Where it stands.
    pub state: State,
}

/// The ledger of packets sent and not cumulatively acknowledged.
#[derive(Debug, Default)]
pub(super) struct Flight {
    /// Oldest unacknowledged packet.
    una: u64,
    /// Next packet never sent.
    nxt: u64,
    /// Packets `una .. nxt`.
    pkts: VecDeque<Pkt>,
    /// Packets to retransmit, oldest first (entries may be stale: checked when taken).
    lost: VecDeque<u64>,
    /// Socket-buffer bytes in flight (sent, not acknowledged, not deemed lost).
    bytes: usize,
    /// Packets in flight.
    count: usize,
}

impl Flight {
    /// Oldest unacknowledged packet.
    pub(super) fn una(&self) -> u64 {
        self.una
    }

    /// Next packet never sent.
    pub(super) fn nxt(&self) -> u64 {
        self.nxt
    }

    /// Socket-buffer bytes in flight.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Packets in flight (not acknowledged, not deemed lost).
    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// Packets are in flight or waiting for retransmission.
    pub(super) fn outstanding(&self) -> bool {
        self.una < self.nxt
    }

    /// Packets wait for retransmission (possibly only stale entries).
    pub(super) fn has_lost(&self) -> bool {
        !self.lost.is_empty()
    }

    fn pkt(&self, seq: u64) -> &Pkt {
        &self.pkts[(seq - self.una) as usize]
    }

    fn pkt_mut(&mut self, seq: u64) -> &mut Pkt {
        &mut self.pkts[(seq - self.una) as usize]
    }

    /// Packet `nxt` goes for the first time, occupying `len` bytes; its sequence number.
    pub(super) fn send_new(&mut self, len: usize, now: Instant) -> u64 {
        self.pkts.push_back(Pkt {
            sent_at: now,
            len: len as u32,
            retx: 0,
            state: State::InFlight,
        });
        self.bytes += len;
        self.count += 1;
        self.nxt += 1;
        self.nxt - 1
    }

    /// The oldest packet waiting for retransmission and its length, dropping stale entries
    /// (packets acknowledged or back in flight since).
    pub(super) fn first_lost(&mut self) -> Option<(u64, usize)> {
        while let Some(&seq) = self.lost.front() {
            if seq < self.una || self.pkt(seq).state != State::Lost {
                self.lost.pop_front();
                continue;
            }
            return Some((seq, self.pkt(seq).len as usize));
        }
        None
    }

    /// Retransmit the packet [`first_lost`](Self::first_lost) returned: in flight again,
    /// sent at `now`.
    pub(super) fn resend_first_lost(&mut self, now: Instant) {
        let Some(seq) = self.lost.pop_front() else {
            return;
        };
        let p = self.pkt_mut(seq);
        p.state = State::InFlight;
        p.retx = p.retx.saturating_add(1);
        p.sent_at = now;
        let len = p.len as usize;
        self.bytes += len;
        self.count += 1;
    }

    /// Give back packets just taken to send but not sent (in the order they were taken): a
    /// new packet becomes unsent again, a retransmission goes back to the head of the
    /// retransmission queue. Returns how many were retransmissions.
    pub(super) fn unsend(&mut self, seqs: &[u64]) -> u64 {
        let mut retransmissions = 0;
        for &seq in seqs.iter().rev() {
            let len = self.pkt(seq).len as usize;
            self.bytes -= len;
            self.count -= 1;
            if seq + 1 == self.nxt && self.pkt(seq).retx == 0 {
                self.pkts.pop_back();
                self.nxt -= 1;
            } else {
                let p = self.pkt_mut(seq);
                p.state = State::Lost;
                p.retx = p.retx.saturating_sub(1);
                retransmissions += 1;
                self.lost.push_front(seq);
            }
        }
        retransmissions
    }

    /// The cumulative acknowledgement `ack` (at most `nxt`): every packet below it arrived.
    /// `each` sees each packet leaving the ledger with its sequence number, oldest first.
    pub(super) fn advance(&mut self, ack: u64, mut each: impl FnMut(u64, &Pkt)) {
        while self.una < ack {
            let Some(p) = self.pkts.pop_front() else {
                break;
            };
            if p.state == State::InFlight {
                self.bytes -= p.len as usize;
                self.count -= 1;
            }
            each(self.una, &p);
            self.una += 1;
        }
    }

    /// Packet `seq` arrived, as a SACK says: if it is in the ledger and was not known to have
    /// arrived, it is marked so, and its send time and retransmissions are returned.
    pub(super) fn sack(&mut self, seq: u64) -> Option<(Instant, u16)> {
        if seq < self.una || seq >= self.nxt {
            return None;
        }
        let p = &mut self.pkts[(seq - self.una) as usize];
        match p.state {
            State::Sacked => return None,
            State::InFlight => {
                self.bytes -= p.len as usize;
                self.count -= 1;
            }
            State::Lost => {}
        }
        p.state = State::Sacked;
        Some((p.sent_at, p.retx))
    }

    /// Deem lost every packet in flight for which `is_lost(seq, sent_at)` says so, queueing
    /// them for retransmission in order after those already queued. Whether any was.
    pub(super) fn lose_where(&mut self, mut is_lost: impl FnMut(u64, Instant) -> bool) -> bool {
        let mut any = false;
        for (i, p) in self.pkts.iter_mut().enumerate() {
            let seq = self.una + i as u64;
            if p.state == State::InFlight && is_lost(seq, p.sent_at) {
                p.state = State::Lost;
                self.bytes -= p.len as usize;
                self.count -= 1;
                self.lost.push_back(seq);
                any = true;
            }
        }
        any
    }

    /// Deem the last packet in flight lost and put it first in the retransmission queue (the
    /// tail-loss probe). Whether there was one.
    pub(super) fn lose_last(&mut self) -> bool {
        let Some(i) = self.pkts.iter().rposition(|p| p.state == State::InFlight) else {
            return false;
        };
        let p = &mut self.pkts[i];
        p.state = State::Lost;
        self.bytes -= p.len as usize;
        self.count -= 1;
        self.lost.push_front(self.una + i as u64);
        true
    }

    /// Deem every packet in flight lost (a timeout): the retransmission queue becomes every
    /// lost packet, oldest first.
    pub(super) fn lose_all(&mut self) {
        self.lost.clear();
        for (i, p) in self.pkts.iter_mut().enumerate() {
            if p.state == State::InFlight {
                p.state = State::Lost;
                self.bytes -= p.len as usize;
                self.count -= 1;
            }
            if p.state == State::Lost {
                self.lost.push_back(self.una + i as u64);
            }
        }
    }

    /// Put back in flight the lost packets never retransmitted (a timeout proved spurious:
    /// they were only late). Their queue entries go stale.
    pub(super) fn unlose_originals(&mut self) {
        for p in self.pkts.iter_mut() {
            if p.state == State::Lost && p.retx == 0 {
                p.state = State::InFlight;
                self.bytes += p.len as usize;
                self.count += 1;
            }
        }
    }

    /// Forget every packet: the next to send is `end`.
    pub(super) fn clear(&mut self, end: u64) {
        self.pkts.clear();
        self.lost.clear();
        self.una = end;
        self.nxt = end;
        self.bytes = 0;
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(n: u64, len: usize) -> (Flight, Instant) {
        let now = Instant::now();
        let mut f = Flight::default();
        for i in 0..n {
            assert_eq!(f.send_new(len, now), i);
        }
        (f, now)
    }

    #[test]
    fn sending_counts_packets_and_bytes_in_flight() {
        let (f, _) = sent(3, 100);
        assert_eq!((f.una(), f.nxt(), f.count(), f.bytes()), (0, 3, 3, 300));
        assert!(f.outstanding());
    }

    #[test]
    fn a_cumulative_ack_frees_packets_oldest_first() {
        let (mut f, _) = sent(4, 100);
        let mut seen = Vec::new();
        f.advance(2, |seq, _| seen.push(seq));
        assert_eq!(seen, vec![0, 1]);
        assert_eq!((f.una(), f.count(), f.bytes()), (2, 2, 200));
        f.advance(4, |_, _| {});
        assert!(!f.outstanding());
    }

    #[test]
    fn a_sack_counts_once_and_only_inside_the_ledger() {
        let (mut f, now) = sent(3, 100);
        assert_eq!(f.sack(1), Some((now, 0)));
        assert_eq!(f.sack(1), None, "already known");
        assert_eq!(f.sack(3), None, "never sent");
        assert_eq!((f.count(), f.bytes()), (2, 200));
        // A sacked packet leaving with the cumulative ACK is not counted out twice.
        f.advance(2, |_, _| {});
        assert_eq!((f.count(), f.bytes()), (1, 100));
    }

    #[test]
    fn lost_packets_are_resent_in_order_and_stale_entries_skipped() {
        let (mut f, now) = sent(4, 100);
        assert!(f.lose_where(|seq, _| seq == 1 || seq == 2));
        assert_eq!((f.count(), f.bytes()), (2, 200));
        // 1 arrived after all: its queue entry is stale.
        f.sack(1);
        assert_eq!(f.first_lost(), Some((2, 100)));
        f.resend_first_lost(now);
        assert_eq!(f.first_lost(), None);
        assert_eq!((f.count(), f.bytes()), (3, 300));
    }

    #[test]
    fn the_tail_probe_takes_the_last_packet_in_flight_first() {
        let (mut f, _) = sent(3, 100);
        f.lose_where(|seq, _| seq == 0);
        f.sack(2);
        assert!(f.lose_last());
        assert_eq!(f.first_lost(), Some((1, 100)));
    }

    #[test]
    fn a_timeout_loses_everything_in_flight_and_undoing_restores_originals() {
        let (mut f, now) = sent(3, 100);
        f.lose_where(|seq, _| seq == 0);
        f.resend_first_lost(now);
        f.lose_all();
        assert_eq!((f.count(), f.bytes()), (0, 0));
        assert_eq!(f.first_lost(), Some((0, 100)));
        f.unlose_originals();
        // 1 and 2 were sent once: back in flight; 0 was retransmitted: still lost.
        assert_eq!((f.count(), f.bytes()), (2, 200));
        assert_eq!(f.first_lost(), Some((0, 100)));
    }

    #[test]
    fn unsent_packets_go_back_new_ones_unnumbered_retransmissions_queued() {
        let (mut f, now) = sent(3, 100);
        f.lose_where(|seq, _| seq == 0);
        f.resend_first_lost(now);
        assert_eq!(f.unsend(&[0, 2]), 1);
        assert_eq!(f.nxt(), 2);
        assert_eq!((f.count(), f.bytes()), (1, 100));
        assert_eq!(f.first_lost(), Some((0, 100)));
    }

    #[test]
    fn clearing_forgets_everything() {
        let (mut f, _) = sent(3, 100);
        f.lose_all();
        f.clear(7);
        assert_eq!((f.una(), f.nxt(), f.count(), f.bytes()), (7, 7, 0, 0));
        assert!(!f.has_lost());
    }
}
