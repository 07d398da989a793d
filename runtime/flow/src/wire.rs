//! What a flow puts on the wire: every item and every control word is one runtime message, and
//! the flow's addressing rides in the envelope's two argument words, so an item's payload is
//! the program's bytes and nothing else (a stage that passes its input on passes the very
//! buffer, [`Ctx::emit_item`](crate::Ctx::emit_item)).
//!
//! **Items**, handler `converse-flow.item`:
//!
//! | field | where | meaning |
//! |---|---|---|
//! | destination stage | `arg0` bits 16–31 | instance id of the stage the item is for |
//! | source stage | `arg0` bits 0–15 | instance id of the stage that sent it (the channel) |
//! | sequence | `arg1` bits 0–28 | an ordered farm's number for the input it derives from (wraps) |
//! | skip | `arg1` bit 29 | no item: the input of this number produced nothing |
//! | last | `arg1` bit 30 | the last message derived from this number |
//! | ordered | `arg1` bit 31 | the item travels inside an ordered farm |
//! | payload | | the item's bytes |
//!
//! **Batches**, handler `converse-flow.batch`: items of at most
//! [`BATCH_ITEM`](crate::BATCH_ITEM) bytes for one stage, sent together when the sending
//! stage's handler returns (or the batch reaches 8 KiB). `arg0` as for items; the payload is
//! each item in turn as `arg1` (u32 LE, as above), length (u32 LE), bytes. Each costs a
//! credit, as an item does.
//!
//! **Control**, handler `converse-flow.ctl`, empty payload but for a credit's (the bytes
//! taken, u64 LE); `arg0` as for items; `arg1` bits 0–7 the kind, bits 8–31 a count:
//!
//! | kind | from → to | count | meaning |
//! |---|---|---|---|
//! | 1 credit | consumer → producer | items | the consumer took that many items of the channel: they may be replaced |
//! | 2 end | producer → consumer | 0 | end of stream on the channel, after its last item (FIFO per PE pair) |
//! | 3 produce | a source → itself | 0 | call the source again (a message, so other work interleaves) |
//! | 4 finished | a stage → PE 0 | 0 | the stage has seen end of stream on every input and sent its own |
//! | 5 failed | a stage → PE 0 | dead node | report mode: an input of the stage from that node had not ended |
//!
//! Credits are sent at priority −1 (they only ever unblock); items and ends at 0, so an end
//! never overtakes an item of its channel.

/// Most stage instances a flow may have: ids are 16 bits, and `u16::MAX` is kept unused.
pub(crate) const MAX_INSTANCES: usize = u16::MAX as usize;

pub(crate) const SEQ_MASK: u32 = (1 << 29) - 1;
pub(crate) const SKIP: u32 = 1 << 29;
pub(crate) const LAST: u32 = 1 << 30;
pub(crate) const ORDERED: u32 = 1 << 31;

pub(crate) const CREDIT: u32 = 1;
pub(crate) const END: u32 = 2;
pub(crate) const PRODUCE: u32 = 3;
pub(crate) const FINISHED: u32 = 4;
pub(crate) const FAILED: u32 = 5;

/// Most a credit word can carry (24 bits); windows are capped below it.
pub(crate) const MAX_COUNT: u32 = (1 << 24) - 1;

#[inline]
pub(crate) fn addr(dst: u16, src: u16) -> u32 {
    (u32::from(dst) << 16) | u32::from(src)
}

#[inline]
pub(crate) fn dst_of(arg0: u32) -> u16 {
    (arg0 >> 16) as u16
}

#[inline]
pub(crate) fn src_of(arg0: u32) -> u16 {
    (arg0 & 0xffff) as u16
}

#[inline]
pub(crate) fn ctl(kind: u32, count: u32) -> u32 {
    kind | (count.min(MAX_COUNT) << 8)
}

#[inline]
pub(crate) fn ctl_kind(arg1: u32) -> u32 {
    arg1 & 0xff
}

#[inline]
pub(crate) fn ctl_count(arg1: u32) -> u32 {
    arg1 >> 8
}

/// An ordered item's place in its stream: `(seq, last, skip)` from `arg1`, or `None` when the
/// item is not ordered.
#[inline]
pub(crate) fn stamp_of(arg1: u32) -> Option<Stamp> {
    (arg1 & ORDERED != 0).then_some(Stamp {
        seq: arg1 & SEQ_MASK,
        last: arg1 & LAST != 0,
        skip: arg1 & SKIP != 0,
    })
}

/// An ordered item's sequence number and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) seq: u32,
    pub(crate) last: bool,
    pub(crate) skip: bool,
}

impl Stamp {
    #[inline]
    pub(crate) fn word(self) -> u32 {
        ORDERED
            | (self.seq & SEQ_MASK)
            | if self.last { LAST } else { 0 }
            | if self.skip { SKIP } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let a = addr(65534, 7);
        assert_eq!((dst_of(a), src_of(a)), (65534, 7));
        let c = ctl(CREDIT, 1000);
        assert_eq!((ctl_kind(c), ctl_count(c)), (CREDIT, 1000));
        let s = Stamp {
            seq: SEQ_MASK,
            last: true,
            skip: false,
        };
        assert_eq!(stamp_of(s.word()), Some(s));
        assert_eq!(stamp_of(0), None);
    }
}
