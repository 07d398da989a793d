//! The layer's wire format: everything it adds to a message is in the 64-bit tag of the
//! tagged send that carries it (no header bytes in front of the wire bytes).
//!
//! | bits | eager | announce | data |
//! |---|---|---|---|
//! | 63 | 0 | 0 | 1 |
//! | 62 | 0 | 1 | source node, high bit |
//! | 32..=61 | 0 | 0 | source node (30 bits) |
//! | 0..=47 | 0 | wire bytes to come | 0..=31: number of the sender's large message to this receiver, mod 2^32 |
//!
//! - **eager**: the message's wire bytes, at most `ofi.eager_kib` KiB, into one of the
//!   receives kept posted (tag 0, all bits but 63 ignored);
//! - **announce**: no bytes; the next large message from this sender is that long. The
//!   receiver posts a receive of exactly that size for the data tag, in its own buffer,
//!   which becomes the message: the provider's rendezvous moves the bytes once;
//! - **data**: the large message's wire bytes, matched exactly (source and number), so a
//!   large message of one sender never lands in another's receive.
//!
//! Sends are ordered per pair (`FI_ORDER_SAS`), so announces arrive in the order of their
//! data and the receiver numbers them as the sender did. The sender of a message is the
//! completion's source address (`FI_SOURCE`): a message from an address outside the job is
//! dropped and counted, whatever its tag says.

/// Bit 63: a large message's data.
pub(crate) const DATA: u64 = 1 << 63;
/// Bit 62 (without 63): an announce.
pub(crate) const ANNOUNCE: u64 = 1 << 62;
/// What the posted eager receives ignore: every bit but 63.
pub(crate) const EAGER_IGNORE: u64 = !DATA;
/// The largest size an announce carries.
pub(crate) const MAX_ANNOUNCED: u64 = (1 << 48) - 1;
/// The largest source node a data tag carries.
pub(crate) const MAX_NODE: usize = (1 << 31) - 1;

/// What a tag of an eager receive's completion says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Eager {
    /// The message itself.
    Message,
    /// A large message of this many wire bytes follows.
    Announce(u64),
    /// Bits no sender of this layer sets.
    Invalid,
}

/// The tag of an announce of `len` wire bytes (`len <= MAX_ANNOUNCED`).
pub(crate) fn announce(len: u64) -> u64 {
    ANNOUNCE | (len & MAX_ANNOUNCED)
}

/// The tag of large message `seq` from node `src` (`src <= MAX_NODE`).
pub(crate) fn data(src: usize, seq: u32) -> u64 {
    DATA | ((src as u64 & MAX_NODE as u64) << 32) | u64::from(seq)
}

/// Read the tag of a completion in a posted eager receive (bit 63 is 0 there).
pub(crate) fn eager(tag: u64) -> Eager {
    if tag == 0 {
        Eager::Message
    } else if tag & !MAX_ANNOUNCED == ANNOUNCE {
        Eager::Announce(tag & MAX_ANNOUNCED)
    } else {
        Eager::Invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eager_tags_read_back_and_data_tags_never_match_eager_receives() {
        assert_eq!(eager(0), Eager::Message);
        assert_eq!(eager(announce(5 << 20)), Eager::Announce(5 << 20));
        assert_eq!(
            eager(announce(MAX_ANNOUNCED)),
            Eager::Announce(MAX_ANNOUNCED)
        );
        assert_eq!(eager(1), Eager::Invalid);
        assert_eq!(eager(ANNOUNCE | (1 << 50)), Eager::Invalid);
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
