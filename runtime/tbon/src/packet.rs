//! Packets: a stream id, a tag and data elements described by a format string, in a compact
//! binary form that travels as the payload of one runtime message.
//!
//! ```text
//! | stream u32 | tag i32 | src rank u32 | weight u32 | n u8 | n type codes | data ... | route |
//! route: | destination u32 ... | sequence u32 | count u32 (bit 31: more of this batch) |
//! ```
//!
//! All numbers are little-endian. The data elements are in the [`codec`](crate::codec)'s wire
//! form, which also turns Rust values into them and back. The *route* trailer is the overlay's
//! (destinations of a downstream packet, see `node/data.rs`); it sits at the end so that the
//! overlay can rewrite it in place when it passes a packet on, never copying the data. The
//! sequence number is the front-end's count of packets sent down the stream (0 for packets
//! that do not come from it), by which an orphaned subtree is given, after a failure, what it
//! missed (see `node/recover.rs`).
//!
//! A packet received from the network keeps the message it came in: forwarding it, or handing
//! it to a filter or the program, copies nothing. Its structure is checked once on arrival, so
//! unpacking never reads past the data, whatever bytes a peer sent.

use crate::codec::{validate, Out, Reader};
use crate::codec::{FromElement, Pack, Unpack};
use crate::format::{Format, FormatError};
use crate::value::Value;
use converse::Message;
use std::fmt;

/// Bytes of the fixed header in front of the type codes.
pub(crate) const HEADER_LEN: usize = 17;

/// Bytes of the smallest route trailer (no destination list).
pub(crate) const TRAILER_MIN: usize = 8;

/// What is wrong with a packet, or with what a program tried to pack or unpack.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// The format string does not parse.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// More or fewer values than the format has elements.
    #[error("format \"{format}\" has {expected} element(s), but {found} value(s) were given")]
    Count {
        /// The format string.
        format: String,
        /// Elements in the format.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// A value (or a requested Rust type) of another type than the format says.
    #[error("element {index} of \"{format}\": expected {expected}, found {found}")]
    Type {
        /// 1-based element number.
        index: usize,
        /// The format string.
        format: String,
        /// What the format says, e.g. "%d (signed 32-bit integer)".
        expected: String,
        /// What was given, e.g. "%f (single-precision float)".
        found: String,
    },
    /// Unpacking with another format than the packet's.
    #[error("unpacking with \"{requested}\", but the packet holds \"{actual}\"")]
    FormatMismatch {
        /// The format asked for.
        requested: String,
        /// The packet's own format.
        actual: String,
    },
    /// A value that cannot be packed or unpacked as it is.
    #[error("element {index}: {reason}")]
    Value {
        /// 1-based element number.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Bytes that are not a packet.
    #[error("malformed packet: {0}")]
    Malformed(String),
}

/// A packet: stream id, tag, source rank and data elements of a known format.
///
/// ```
/// use converse_tbon::Packet;
/// let p = Packet::new(7, 100, "%d %s %af", (32i32, "hi", vec![1.5f32, 2.5])).unwrap();
/// let (n, s, v): (i32, String, Vec<f32>) = p.unpack("%d %s %af").unwrap();
/// assert_eq!((n, s.as_str(), v), (32, "hi", vec![1.5, 2.5]));
/// // Asking for other types is an error that says what is there.
/// let e = p.unpack::<(i32, f64, Vec<f32>)>("%d %lf %af").unwrap_err();
/// assert!(e.to_string().contains("the packet holds \"%d %s %af\""), "{e}");
/// ```
#[derive(Clone, PartialEq)]
pub struct Packet {
    msg: Message,
    /// End of the packet in the payload (the route trailer follows).
    end: usize,
    stream: u32,
    tag: i32,
    src: u32,
    weight: u32,
    nelems: u8,
    /// The route trailer says another packet of the same batch follows (see `sync.rs`).
    more: bool,
    /// The front-end's sequence number of a packet going down (0: none).
    seq: u32,
}

/// The route trailer's bit for "another packet of this batch follows"; the rest is the count
/// of destinations.
const MORE: u32 = 1 << 31;

impl Packet {
    /// A packet for stream `stream_id` with `tag`, holding `values` as `format` describes.
    ///
    /// # Errors
    /// [`PacketError`] when the format does not parse or the values do not match it, saying
    /// which element was expected to be what.
    pub fn new(
        stream_id: u32,
        tag: i32,
        format: &str,
        values: impl Pack,
    ) -> Result<Packet, PacketError> {
        let f = Format::parse(format)?;
        Packet::with_format(stream_id, tag, &f, &values)
    }

    /// As [`new`](Packet::new), with a parsed format.
    ///
    /// # Errors
    /// As [`new`](Packet::new).
    pub fn with_format(
        stream_id: u32,
        tag: i32,
        format: &Format,
        values: &dyn Pack,
    ) -> Result<Packet, PacketError> {
        values.check_format(format)?;
        let capacity = HEADER_LEN + format.len() + values.packed_len();
        Ok(Packet::build(stream_id, tag, format, capacity, |out| {
            values.pack_into(out)
        }))
    }

    /// A packet whose data `fill` writes; it must write exactly what `format` describes.
    pub(crate) fn build(
        stream_id: u32,
        tag: i32,
        format: &Format,
        capacity: usize,
        fill: impl FnOnce(&mut Out<'_>),
    ) -> Packet {
        let mut msg = Message::with_capacity(capacity + TRAILER_MIN);
        write_header(&mut msg, stream_id, tag, 0, 1, format);
        fill(&mut Out::new(&mut msg));
        let end = msg.payload_len();
        msg.extend_payload(&[0; TRAILER_MIN]);
        Packet {
            msg,
            end,
            stream: stream_id,
            tag,
            src: 0,
            weight: 1,
            nelems: format.len() as u8,
            more: false,
            seq: 0,
        }
    }

    /// A packet of the given wire bytes (as [`wire`](Packet::wire) gives them), copied.
    ///
    /// # Errors
    /// [`PacketError::Malformed`] when the bytes are not a packet.
    pub fn from_wire(bytes: &[u8]) -> Result<Packet, PacketError> {
        let mut msg = Message::with_capacity(bytes.len() + TRAILER_MIN);
        msg.extend_payload(bytes);
        msg.extend_payload(&[0; TRAILER_MIN]);
        Packet::from_message(msg)
    }

    /// The packet a message carries (payload: packet, then route trailer), checked once.
    pub(crate) fn from_message(msg: Message) -> Result<Packet, PacketError> {
        let p = msg.payload();
        let bad = |w: &str| PacketError::Malformed(w.to_owned());
        let (rest, n) = p
            .split_last_chunk::<4>()
            .ok_or_else(|| bad("shorter than its route trailer"))?;
        let word = u32::from_le_bytes(*n);
        let (rest, seq) = rest
            .split_last_chunk::<4>()
            .ok_or_else(|| bad("shorter than its route trailer"))?;
        let seq = u32::from_le_bytes(*seq);
        let more = word & MORE != 0;
        let n = (word & !MORE) as usize;
        let route = n
            .checked_mul(4)
            .filter(|&r| r <= rest.len())
            .ok_or_else(|| bad("its route trailer is longer than the packet"))?;
        let end = rest.len() - route;
        let b = &p[..end];
        let word = |at: usize| -> Result<[u8; 4], PacketError> {
            b.get(at..at + 4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| bad("shorter than a packet header"))
        };
        let stream = u32::from_le_bytes(word(0)?);
        let tag = i32::from_le_bytes(word(4)?);
        let src = u32::from_le_bytes(word(8)?);
        let weight = u32::from_le_bytes(word(12)?);
        let nelems = *b
            .get(16)
            .ok_or_else(|| bad("shorter than a packet header"))?;
        let codes = b
            .get(HEADER_LEN..HEADER_LEN + nelems as usize)
            .ok_or_else(|| bad("shorter than its type codes"))?;
        validate(codes, &b[HEADER_LEN + nelems as usize..])?;
        Ok(Packet {
            msg,
            end,
            stream,
            tag,
            src,
            weight,
            nelems,
            more,
            seq,
        })
    }

    /// The stream this packet travels on.
    pub fn stream_id(&self) -> u32 {
        self.stream
    }

    /// The tag given when it was sent.
    pub fn tag(&self) -> i32 {
        self.tag
    }

    /// Set the tag.
    pub fn set_tag(&mut self, tag: i32) {
        self.tag = tag;
        self.msg.payload_mut()[4..8].copy_from_slice(&tag.to_le_bytes());
    }

    /// Set the stream id.
    pub fn set_stream_id(&mut self, id: u32) {
        self.stream = id;
        self.msg.payload_mut()[0..4].copy_from_slice(&id.to_le_bytes());
    }

    /// The rank of the process that made it: a back-end for data going up, the front-end for
    /// data coming down, the node whose filter produced it for filter output.
    pub fn src_rank(&self) -> u32 {
        self.src
    }

    /// Set [`src_rank`](Packet::src_rank): a filter that makes a packet says whose it is, as
    /// the built-in filters do with their process's rank (`cx.info.rank`), so that a filter
    /// above can tell its children's packets apart. (A back-end's packets are stamped with
    /// its rank when sent, whatever they said.)
    pub fn set_src_rank(&mut self, rank: u32) {
        self.src = rank;
        self.msg.payload_mut()[8..12].copy_from_slice(&rank.to_le_bytes());
    }

    /// How many back-end contributions this packet stands for (1 unless a filter combined
    /// several and said so, as the average filter does).
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Set [`weight`](Packet::weight).
    pub fn set_weight(&mut self, w: u32) {
        self.weight = w;
        self.msg.payload_mut()[12..16].copy_from_slice(&w.to_le_bytes());
    }

    /// The wire type codes of the elements.
    pub(crate) fn codes(&self) -> &[u8] {
        &self.msg.payload()[HEADER_LEN..HEADER_LEN + self.nelems as usize]
    }

    /// The format of its data.
    pub fn format(&self) -> Format {
        // The codes were checked on arrival or made from a parsed format.
        Format::from_codes(self.codes()).unwrap_or_default()
    }

    /// The format string of its data (`"%d %af"`).
    pub fn format_string(&self) -> String {
        self.format().to_string()
    }

    /// Whether its format is `format` (no allocation).
    pub fn has_format(&self, format: &Format) -> bool {
        self.codes().len() == format.len() && self.codes().iter().copied().eq(format.codes())
    }

    /// The data bytes (after header and type codes).
    pub(crate) fn data(&self) -> &[u8] {
        &self.msg.payload()[HEADER_LEN + self.nelems as usize..self.end]
    }

    /// The data bytes, writable in place (same layout, so same length).
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        let start = HEADER_LEN + self.nelems as usize;
        &mut self.msg.payload_mut()[start..self.end]
    }

    /// The packet's wire bytes: header, codes and data (no route).
    pub fn wire(&self) -> &[u8] {
        &self.msg.payload()[..self.end]
    }

    /// Size of its data in bytes.
    pub fn data_len(&self) -> usize {
        self.data().len()
    }

    /// Unpack the data as `format` says into Rust values.
    ///
    /// # Errors
    /// [`PacketError::FormatMismatch`] when `format` is not the packet's own;
    /// [`PacketError::Type`] when the Rust types asked for do not hold the format's elements.
    pub fn unpack<T: Unpack>(&self, format: &str) -> Result<T, PacketError> {
        let f = Format::parse(format)?;
        if !self.has_format(&f) {
            return Err(PacketError::FormatMismatch {
                requested: f.to_string(),
                actual: self.format_string(),
            });
        }
        T::unpack(&mut Reader::new(self.data()), &f)
    }

    /// Every element as a [`Value`].
    pub fn values(&self) -> Vec<Value> {
        let f = self.format();
        let mut r = Reader::new(self.data());
        (0..f.len())
            .map_while(|i| Value::read_elem(&mut r, i, &f).ok())
            .collect()
    }

    /// The message, its route trailer replaced by `dests` (empty: none), ready to send.
    pub(crate) fn into_message(self, dests: &[u32]) -> Message {
        self.into_message_with(dests, false)
    }

    /// The message, its route trailer replaced by `dests` and the "more of this batch
    /// follows" mark.
    pub(crate) fn into_message_with(mut self, dests: &[u32], more: bool) -> Message {
        self.msg.truncate_payload(self.end);
        for d in dests {
            self.msg.extend_payload(&d.to_le_bytes());
        }
        self.msg.extend_payload(&self.seq.to_le_bytes());
        let word = dests.len() as u32 | if more { MORE } else { 0 };
        self.msg.extend_payload(&word.to_le_bytes());
        self.msg
    }

    /// Whether another packet of the same batch follows this one.
    pub(crate) fn more(&self) -> bool {
        self.more
    }

    /// The front-end's sequence number of a packet going down its stream (0: none).
    pub(crate) fn seq(&self) -> u32 {
        self.seq
    }

    /// Set the sequence number (kept when the packet is passed on).
    pub(crate) fn set_seq(&mut self, seq: u32) {
        self.seq = seq;
    }

    /// The route trailer's destinations (empty: every end-point of the stream).
    pub(crate) fn route(&self) -> impl Iterator<Item = u32> + '_ {
        let p = self.msg.payload();
        p[self.end..p.len() - TRAILER_MIN]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// Whether the route trailer names destinations.
    pub(crate) fn has_route(&self) -> bool {
        self.msg.payload_len() > self.end + TRAILER_MIN
    }
}

fn write_header(msg: &mut Message, stream: u32, tag: i32, src: u32, weight: u32, f: &Format) {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&stream.to_le_bytes());
    h[4..8].copy_from_slice(&tag.to_le_bytes());
    h[8..12].copy_from_slice(&src.to_le_bytes());
    h[12..16].copy_from_slice(&weight.to_le_bytes());
    h[16] = f.len() as u8;
    msg.extend_payload(&h);
    for c in f.codes() {
        msg.extend_payload(&[c]);
    }
}

impl fmt::Debug for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet")
            .field("stream", &self.stream)
            .field("tag", &self.tag)
            .field("src", &self.src)
            .field("format", &self.format_string())
            .field("values", &self.values())
            .finish()
    }
}

/// The last format string a sender used and its parse: a program sends the same few formats
/// over and over, and parsing allocates. One per sender (a [`Network`](crate::Network), an
/// attached back-end).
#[derive(Debug, Default)]
pub(crate) struct LastFormat(Option<(String, Format)>);

impl LastFormat {
    /// A packet of `values` as `format` says, the format parsed only when it changed.
    pub(crate) fn packet(
        &mut self,
        id: u32,
        tag: i32,
        format: &str,
        values: &dyn crate::codec::Pack,
    ) -> Result<Packet, PacketError> {
        let f = match &self.0 {
            Some((s, f)) if s == format => f,
            _ => &self.0.insert((format.to_owned(), Format::parse(format)?)).1,
        };
        Packet::with_format(id, tag, f, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Large;
    use crate::format::{BaseType, ElemType};
    use proptest::prelude::*;

    type Everything = (
        i8,
        u8,
        i16,
        u16,
        i32,
        u32,
        i64,
        u64,
        f32,
        f64,
        String,
        Vec<i32>,
    );

    #[test]
    fn every_type_round_trips() {
        let p = Packet::new(
            3,
            101,
            "%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s %ad",
            (
                -1i8,
                2u8,
                -3i16,
                4u16,
                -5i32,
                6u32,
                -7i64,
                8u64,
                9.5f32,
                10.25f64,
                "eleven",
                vec![12, 13],
            ),
        )
        .expect("pack");
        let got: Everything = p
            .unpack("%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s %ad")
            .expect("unpack");
        assert_eq!(got.0, -1);
        assert_eq!(got.9, 10.25);
        assert_eq!(got.10, "eleven");
        assert_eq!(got.11, [12, 13]);
        assert_eq!((p.stream_id(), p.tag(), p.weight()), (3, 101, 1));
        let again = Packet::from_wire(p.wire()).expect("decode");
        assert_eq!(again.values(), p.values());
    }

    #[test]
    fn arrays_of_every_kind_and_large_arrays() {
        let strs = vec!["a".to_string(), "".into(), "ccc".into()];
        let p = Packet::new(
            1,
            100,
            "%as %Alf %auc",
            (strs.clone(), Large(vec![1.0f64, 2.0]), vec![7u8; 3]),
        )
        .expect("pack");
        let (s, Large(d), u): (Vec<String>, Large<Vec<f64>>, Vec<u8>) =
            p.unpack("%as %Alf %auc").expect("unpack");
        assert_eq!((s, d, u), (strs, vec![1.0, 2.0], vec![7, 7, 7]));
    }

    #[test]
    fn mismatches_name_expected_and_found() {
        let e = Packet::new(1, 100, "%d %f", (1i32, 2.0f64)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "element 2 of \"%d %f\": expected %f (single-precision float), found %lf \
             (double-precision float)"
        );
        let e = Packet::new(1, 100, "%d %d", 1i32).unwrap_err();
        assert!(
            e.to_string().contains("has 2 element(s), but 1 value(s)"),
            "{e}"
        );
        let e = Packet::new(1, 100, "%d", (1i32, 2i32)).unwrap_err();
        assert!(matches!(e, PacketError::Count { expected: 1, .. }), "{e}");
        let p = Packet::new(1, 100, "%d %ad", (1i32, vec![2i32])).expect("pack");
        let e = p.unpack::<(i32, Vec<u32>)>("%d %ad").unwrap_err();
        assert!(
            e.to_string().contains(
                "expected %ad (array of signed 32-bit integer), found a Rust type holding %aud"
            ),
            "{e}"
        );
        let e = p.unpack::<(i32, i32)>("%d %d").unwrap_err();
        assert!(
            e.to_string()
                .contains("unpacking with \"%d %d\", but the packet holds \"%d %ad\""),
            "{e}"
        );
        assert!(matches!(
            Packet::new(1, 100, "%z", 1i32),
            Err(PacketError::Format(_))
        ));
    }

    #[test]
    fn dynamic_values_are_checked_too() {
        let f = Format::parse("%d %ald").expect("format");
        let good = vec![
            Value::Int(1),
            Value::Array(ElemType::array(BaseType::Long), vec![Value::Long(2)]),
        ];
        let p = Packet::with_format(1, 100, &f, &good).expect("pack");
        assert_eq!(p.values(), good);
        let bad = vec![
            Value::Int(1),
            Value::Array(ElemType::array(BaseType::Long), vec![Value::Int(2)]),
        ];
        let e = Packet::with_format(1, 100, &f, &bad).unwrap_err();
        assert!(
            e.to_string().contains("an item of a %ald array is %d"),
            "{e}"
        );
    }

    #[test]
    fn the_route_trailer_is_rewritten_in_place() {
        let p = Packet::new(1, 100, "%s", "data").expect("pack");
        let m = p.into_message(&[3, 9]);
        let p = Packet::from_message(m).expect("decode");
        assert_eq!(p.route().collect::<Vec<_>>(), [3, 9]);
        assert!(p.has_route());
        let p = Packet::from_message(p.into_message(&[])).expect("decode");
        assert!(!p.has_route());
        assert_eq!(p.unpack::<String>("%s").ok().as_deref(), Some("data"));
        assert!(!p.more());
        let p = Packet::from_message(p.into_message_with(&[4], true)).expect("decode");
        assert!(p.more());
        assert_eq!(p.route().collect::<Vec<_>>(), [4]);
        let mut p = p;
        p.set_seq(77);
        let p = Packet::from_message(p.into_message(&[5, 6])).expect("decode");
        assert_eq!((p.seq(), p.route().collect::<Vec<_>>()), (77, vec![5, 6]));
    }

    #[test]
    fn truncations_and_lies_are_malformed() {
        let p = Packet::new(1, 100, "%s %ad", ("abc", vec![1i32, 2])).expect("pack");
        let w = p.wire().to_vec();
        for len in 0..w.len() {
            assert!(Packet::from_wire(&w[..len]).is_err(), "len {len}");
        }
        let mut extra = w.clone();
        extra.push(0);
        assert!(Packet::from_wire(&extra).is_err());
        let mut huge = w.clone();
        // The array count (after header, 2 codes, "abc" with its length) says 2^32-1 items.
        let at = HEADER_LEN + 2 + 4 + 3;
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Packet::from_wire(&huge).is_err());
    }

    proptest! {
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(p) = Packet::from_wire(&bytes) {
                let _ = p.values();
                let _ = p.format_string();
            }
            let mut m = Message::with_capacity(bytes.len());
            m.extend_payload(&bytes);
            if let Ok(p) = Packet::from_message(m) {
                let _ = p.route().count();
                let _ = p.values();
            }
        }

        #[test]
        fn garbage_after_a_valid_header_never_panics(
            codes in proptest::collection::vec(0u8..0x30, 0..6),
            data in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let mut b = vec![0u8; HEADER_LEN];
            b[16] = codes.len() as u8;
            b.extend_from_slice(&codes);
            b.extend_from_slice(&data);
            if let Ok(p) = Packet::from_wire(&b) {
                let v = p.values();
                prop_assert_eq!(v.len(), codes.len());
            }
        }
    }
}
