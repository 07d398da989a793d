//! The layer's wire format: an 8-byte header in front of an eager message's wire bytes
//! (written into the message's headroom, so the frame is sent from the message's own buffer),
//! and the tag of a large message's data.
//!
//! Eager frame (tag 0, into one of the receives kept posted):
//!
//! | offset | field | type |
//! |---:|---|---|
//! | 0 | source node | u32 LE |
//! | 4 | sequence number of the pair's eager frames, mod 2^24 | u24 LE |
//! | 7 | kind: 0 message, 1 announce | u8 |
//! | 8 | message: its wire bytes (at most `ofi.eager_kib` KiB); announce: the wire length of the sender's next large message, u64 LE | |
//!
//! Data of a large message (tag below, received into a buffer of exactly the announced size,
//! which becomes the message: the provider's rendezvous moves the bytes once):
//!
//! | bits of the tag | field |
//! |---|---|
//! | 63 | 1 |
//! | 32..=62 | source node (31 bits) |
//! | 0..=31 | number of the sender's large message to this receiver, mod 2^32 |
//!
//! Sends are matched in order per pair (`FI_ORDER_SAS`), but a provider may write their
//! completions out of order (shm completes an injected frame before a larger one sent before
//! it, whose bytes it is still copying), so the receiver takes eager frames in the order of
//! their sequence numbers, and what follows an announce waits for its large message. The
//! header names the sender because shm's completions named source addresses that were not
//! the ones inserted for it; the address (`FI_SOURCE`) only tells a node of the job from a
//! stranger (`FI_ADDR_NOTAVAIL`: dropped and counted). (Tags carried all this at first: with
//! tags other than 0, shm lost a frame in a 4-node all-to-all.)

/// Bytes of the eager header.
pub(crate) const HEADER: usize = 8;
/// Bit 63: a large message's data.
pub(crate) const DATA: u64 = 1 << 63;
/// The largest source node a data tag or header carries.
pub(crate) const MAX_NODE: usize = (1 << 31) - 1;
/// Sequence numbers are this many bits.
pub(crate) const SEQ_BITS: u32 = 24;
/// Their mask.
pub(crate) const SEQ_MASK: u32 = (1 << SEQ_BITS) - 1;
/// How far ahead of the one due an eager frame may arrive: far less than the sequence
/// numbers' wrap.
pub(crate) const REORDER_WINDOW: u32 = 1 << 22;

/// What an eager header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) announce: bool,
    pub(crate) src: usize,
    pub(crate) seq: u32,
}

impl Header {
    pub(crate) fn encode(self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[..4].copy_from_slice(&(self.src as u32).to_le_bytes());
        let word = (self.seq & SEQ_MASK) | (u32::from(self.announce) << SEQ_BITS);
        b[4..].copy_from_slice(&word.to_le_bytes());
        b
    }

    /// `None`: a kind no sender of this layer writes, or a node number out of range.
    pub(crate) fn decode(b: [u8; HEADER]) -> Option<Header> {
        let src = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let word = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let announce = match word >> SEQ_BITS {
            0 => false,
            1 => true,
            _ => return None,
        };
        (src <= MAX_NODE).then_some(Header {
            announce,
            src,
            seq: word & SEQ_MASK,
        })
    }
}

/// The tag of large message `seq` from node `src` (`src <= MAX_NODE`).
pub(crate) fn data(src: usize, seq: u32) -> u64 {
    DATA | ((src as u64 & MAX_NODE as u64) << 32) | u64::from(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_and_bad_kinds_are_refused() {
        for (announce, src, seq) in [(false, 0, 0), (true, 5, 7), (false, MAX_NODE, SEQ_MASK)] {
            let h = Header { announce, src, seq };
            assert_eq!(Header::decode(h.encode()), Some(h));
        }
        let mut b = Header {
            announce: false,
            src: 1,
            seq: 2,
        }
        .encode();
        b[7] = 2;
        assert_eq!(Header::decode(b), None);
        let mut b = Header {
            announce: false,
            src: 1,
            seq: 2,
        }
        .encode();
        b[3] = 0x80;
        assert_eq!(Header::decode(b), None);
    }

    #[test]
    fn data_tags_name_source_and_number() {
        for (src, seq) in [(0, 0), (7, 1), (MAX_NODE, u32::MAX)] {
            let t = data(src, seq);
            assert_ne!(
                t & DATA,
                0,
                "eager receives (tag 0, exact) never match data"
            );
            assert_eq!((t >> 32) & MAX_NODE as u64, src as u64);
            assert_eq!(t as u32, seq);
        }
        assert_ne!(data(1, 5), data(2, 5));
        assert_ne!(data(1, 5), data(1, 6));
    }
}
