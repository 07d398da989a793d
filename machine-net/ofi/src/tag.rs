//! The layer's wire format: everything it adds to a message is in the 64-bit tag of the
//! tagged send that carries it (no header bytes in front of the wire bytes).
//!
//! | bits | eager | announce | data |
//! |---|---|---|---|
//! | 63 | 0 | 0 | 1 |
//! | 62 | 0 | 1 | 32..=62: source node (31 bits) |
//! | 47..=61 | 0 | 0 | \ |
//! | 16..=46 | source node (31 bits) | source node | \ |
//! | 0..=15 | sequence number | sequence number | 0..=31: number of the sender's large message to this receiver, mod 2^32 |
//!
//! - **eager**: the message's wire bytes, at most `ofi.eager_kib` KiB, into one of the
//!   receives kept posted (tag 0, all bits but 63 ignored);
//! - **announce**: 8 bytes, the wire length (u64 LE) of the sender's next large message. The
//!   receiver posts a receive of exactly that size for the data tag, in its own buffer,
//!   which becomes the message: the provider's rendezvous moves the bytes once;
//! - **data**: the large message's wire bytes, matched exactly (source and number), so a
//!   large message of one sender never lands in another's receive.
//!
//! Sends are matched in order per pair (`FI_ORDER_SAS`), but a provider may write their
//! completions out of order (shm completes an injected message before a larger one sent
//! before it, whose bytes it is still copying): eager messages and announces carry the
//! pair's sequence number (mod 2^16), and the receiver takes them in that order. They carry
//! their source node too: shm's completions name a source address that is not always the
//! one the receiver inserted for that node, so the address (`FI_SOURCE`) only tells a node of
//! the job (any address in the vector) from a stranger (`FI_ADDR_NOTAVAIL`: dropped and
//! counted).

/// Bit 63: a large message's data.
pub(crate) const DATA: u64 = 1 << 63;
/// Bit 62 (without 63): an announce.
pub(crate) const ANNOUNCE: u64 = 1 << 62;
/// What the posted eager receives ignore: every bit but 63.
pub(crate) const EAGER_IGNORE: u64 = !DATA;
/// The largest source node a data tag carries.
pub(crate) const MAX_NODE: usize = (1 << 31) - 1;
/// How far ahead of the one due an eager message or announce may arrive: far more than any
/// provider has completions out of order, far less than the sequence numbers' wrap.
pub(crate) const REORDER_WINDOW: u16 = 1 << 14;

/// What a tag of an eager receive's completion says: announce or message, source node,
/// sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Eager {
    pub(crate) announce: bool,
    pub(crate) src: usize,
    pub(crate) seq: u16,
}

const SRC_SHIFT: u32 = 16;
/// Bits 47..=61, which no sender sets.
const RESERVED: u64 = ((1 << 62) - 1) & !((1 << 47) - 1);

/// The tag of an eager message (`announce`: of an announce) from `src` (`src <= MAX_NODE`),
/// number `seq`.
pub(crate) fn eager_tag(announce: bool, src: usize, seq: u16) -> u64 {
    (if announce { ANNOUNCE } else { 0 })
        | ((src as u64 & MAX_NODE as u64) << SRC_SHIFT)
        | u64::from(seq)
}

/// The tag of large message `seq` from node `src` (`src <= MAX_NODE`).
pub(crate) fn data(src: usize, seq: u32) -> u64 {
    DATA | ((src as u64 & MAX_NODE as u64) << 32) | u64::from(seq)
}

/// Read the tag of a completion in a posted eager receive (bit 63 is 0 there); `None`: bits
/// no sender of this layer sets.
pub(crate) fn eager(tag: u64) -> Option<Eager> {
    if tag & (DATA | RESERVED) != 0 {
        return None;
    }
    Some(Eager {
        announce: tag & ANNOUNCE != 0,
        src: ((tag >> SRC_SHIFT) & MAX_NODE as u64) as usize,
        seq: tag as u16,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eager_tags_read_back_and_data_tags_never_match_eager_receives() {
        for (announce, src, seq) in [(false, 0, 0), (true, 5, 7), (false, MAX_NODE, u16::MAX)] {
            assert_eq!(
                eager(eager_tag(announce, src, seq)),
                Some(Eager { announce, src, seq })
            );
        }
        assert_eq!(eager(1 << 50), None);
        assert_eq!(eager(DATA), None);
        // Eager receives match tag 0 with all bits but 63 ignored: a data tag has bit 63.
        for (src, seq) in [(0, 0), (7, 1), (MAX_NODE, u32::MAX)] {
            let t = data(src, seq);
            assert_ne!(
                t & !EAGER_IGNORE,
                0,
                "data tag {t:#x} would match an eager receive"
            );
            assert_eq!((t >> 32) & MAX_NODE as u64, src as u64);
            assert_eq!(t as u32, seq);
        }
        assert_ne!(data(1, 5), data(2, 5));
        assert_ne!(data(1, 5), data(1, 6));
    }
}
