//! The SI layer's record format: what a record in a sender's ring holds.
//!
//! Every message starts with a 16-byte header (the slides' `si_header`, with the way it
//! travels added); the record's length tells the kind, and the header must agree.
//!
//! | bytes | field | meaning |
//! |---:|---|---|
//! | 0..8 | size | the message's wire length (u64 LE), at most [`MAX_MESSAGE`] |
//! | 8..12 | source | the sending node (u32 LE); must be the ring's owner |
//! | 12..16 | kind | [`Kind`] (u32 LE) |
//!
//! | kind | record | what follows |
//! |---|---|---|
//! | 1 whole | header + wire bytes (`len > LENT_RECORD`: the wire bytes hold a 24-byte envelope) | nothing |
//! | 2 pieces | the header alone (`len == HEADER`) | records of wire bytes, a piece each (16 KiB less the header, or less on a small ring) but the last |
//! | 3 lent | header + u64 LE address of the sender's buffer (`len == LENT_RECORD`) | nothing: the receiver copies from the sender's memory |

/// The slides' `si_header` (payload size, source node) and how the payload travels.
pub(super) const HEADER: usize = 16;

/// A lent message's record: its header and the address of the sender's buffer.
pub(super) const LENT_RECORD: usize = HEADER + 8;

/// How a message travels (the header's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Header and wire bytes in one record (up to a piece).
    Whole = 1,
    /// The header alone; pieces of the wire bytes follow.
    Pieces = 2,
    /// The header and the address of the sender's buffer, to be pulled from.
    Lent = 3,
}

/// Largest message size a header may announce (the runtime's frames are far smaller).
pub(super) const MAX_MESSAGE: u64 = 1 << 40;

/// The header of a message of `size` wire bytes from `src`, travelling as `kind`.
pub(super) fn header(kind: Kind, size: usize, src: usize) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&(size as u64).to_le_bytes());
    h[8..12].copy_from_slice(&(src as u32).to_le_bytes());
    h[12..].copy_from_slice(&(kind as u32).to_le_bytes());
    h
}

/// A header's (size, source, kind).
pub(super) fn parse_header(h: &[u8]) -> (u64, u32, u32) {
    let word = |r: std::ops::Range<usize>| {
        h.get(r)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes)
    };
    let size = h
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    (size, word(8..12), word(12..16))
}
