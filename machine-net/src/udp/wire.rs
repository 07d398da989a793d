//! The datagram header: its layout, writing it, and checking every datagram that arrives.
//!
//! ```text
//! offset size field
//!  0     1    magic (0xC5: this protocol, version 1)
//!  1     1    kind (low nibble: DATA, ACK, BYE) | flags (high nibble: FRAG, DUP, BUNDLE)
//!  2     2    source node
//!  4     2    destination node
//!  6     2    window: KiB the sender of this datagram can buffer for the receiver's data
//!  8     8    job tag (derived from the job secret)
//! 16     4    sequence number of this packet (DATA)
//! 20     4    cumulative acknowledgement: every packet below it has arrived
//! 24     4    selective acknowledgement: bit i set = packet ack+1+i has arrived
//! 28          DATA: the wire bytes of a whole message, or with BUNDLE (never with FRAG)
//!               several whole small messages, packets seq, seq+1, ..., each as
//!               u32 length, then that many wire bytes; or with FRAG:
//! 28     4      fragment index          32  4  fragment size (every fragment but the last)
//! 36     8      total wire bytes of the message, then this fragment's bytes
//! 28          ACK: u16 length, then that many bytes of further SACK bitmap (packet ack+33...)
//! ```
//!
//! All fields little-endian. Sequence numbers travel as their low 32 bits; each side widens
//! them against its own 64-bit counters ([`widen`]). The base header is 28 bytes, within the
//! 32 bytes of headroom every message has, so a message that fits one datagram is sent
//! straight from its own buffer.

use converse_machine::ENVELOPE_LEN;

/// First byte of every datagram of this protocol.
pub const MAGIC: u8 = 0xC5;
/// Bytes of the header every datagram has.
pub const BASE: usize = 28;
/// Bytes a fragment adds to the base header.
pub const FRAG_EXT: usize = 16;
/// The largest data header.
pub const MAX_DATA_HEADER: usize = BASE + FRAG_EXT;
/// Most bytes of further SACK bitmap an ACK may carry (4096 packets).
pub const MAX_SACK_EXT: usize = 512;
/// Largest message (wire bytes) a fragment may announce; the receiver allocates it.
pub const MAX_MESSAGE: u64 = 1 << 40;

const FLAG_FRAG: u8 = 0x10;
/// The sender of this datagram received a packet twice since it last said so: a packet was
/// resent that had only been late (RACK widens its reordering allowance).
const FLAG_DUP: u8 = 0x20;
/// The datagram carries several whole messages, consecutive packets from its sequence
/// number on (the layer's coalescing of small messages: one datagram, one system call and
/// one trip through the kernel for many).
pub const FLAG_BUNDLE: u8 = 0x40;
/// Bytes before each message of a bundle: its length.
pub const BUNDLE_ENTRY: usize = 4;

/// What a datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A packet of data (a whole message or one fragment), acknowledgements piggybacked.
    Data = 1,
    /// Acknowledgements only.
    Ack = 2,
    /// The sender leaves the job: stop waiting for its acknowledgements.
    Bye = 3,
}

/// Where a fragment belongs in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frag {
    /// Its number within the message, from 0.
    pub index: u32,
    /// Bytes of every fragment but the last.
    pub chunk: u32,
    /// Wire bytes of the whole message.
    pub total: u64,
}

impl Frag {
    /// Fragments of the message.
    pub fn count(&self) -> u64 {
        self.total.div_ceil(u64::from(self.chunk).max(1))
    }

    /// Byte offset of this fragment in the message, and its length.
    pub fn range(&self) -> (u64, u64) {
        let off = u64::from(self.index) * u64::from(self.chunk);
        (off, (self.total - off).min(u64::from(self.chunk)))
    }
}

/// A header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the datagram is.
    pub kind: Kind,
    /// The sending node.
    pub src: u16,
    /// The node it is for.
    pub dst: u16,
    /// KiB the sender can buffer for data from the receiver.
    pub wnd: u16,
    /// The job tag.
    pub tag: u64,
    /// This packet's sequence number (low 32 bits; DATA only).
    pub seq: u32,
    /// Cumulative acknowledgement (low 32 bits).
    pub ack: u32,
    /// Selective acknowledgement of the 32 packets after `ack`.
    pub sack: u32,
    /// Fragment position (DATA of a message that spans datagrams).
    pub frag: Option<Frag>,
    /// The sender received a packet twice since it last said so (DATA and ACK).
    pub dup: bool,
}

impl Header {
    /// Bytes this header takes (not counting an ACK's SACK extension).
    pub fn size(&self) -> usize {
        if self.frag.is_some() {
            MAX_DATA_HEADER
        } else {
            BASE
        }
    }

    /// Write the header into `out[..self.size()]`.
    ///
    /// # Panics
    /// If `out` is shorter than [`Header::size`]: callers size their buffers from it.
    pub fn write(&self, out: &mut [u8]) {
        let flags =
            if self.frag.is_some() { FLAG_FRAG } else { 0 } | if self.dup { FLAG_DUP } else { 0 };
        out[0] = MAGIC;
        out[1] = self.kind as u8 | flags;
        out[2..4].copy_from_slice(&self.src.to_le_bytes());
        out[4..6].copy_from_slice(&self.dst.to_le_bytes());
        out[6..8].copy_from_slice(&self.wnd.to_le_bytes());
        out[8..16].copy_from_slice(&self.tag.to_le_bytes());
        out[16..20].copy_from_slice(&self.seq.to_le_bytes());
        out[20..24].copy_from_slice(&self.ack.to_le_bytes());
        out[24..28].copy_from_slice(&self.sack.to_le_bytes());
        if let Some(f) = self.frag {
            out[28..32].copy_from_slice(&f.index.to_le_bytes());
            out[32..36].copy_from_slice(&f.chunk.to_le_bytes());
            out[36..44].copy_from_slice(&f.total.to_le_bytes());
        }
    }
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Not this job's: wrong magic or tag, or a source or destination outside the job.
    Foreign,
    /// This job's tag, but fields that cannot be right (lengths, kinds, fragment geometry).
    Garbage,
}

/// A checked datagram.
#[derive(Debug)]
pub struct Datagram<'a> {
    /// Its header.
    pub hdr: Header,
    /// DATA: this packet's wire bytes (a bundle's entries, with `bundle`). ACK: the SACK
    /// extension bitmap. BYE: empty.
    pub body: &'a [u8],
    /// A bundle of whole messages (see [`bundle_entries`]); checked: at least two entries,
    /// each at least an envelope long, covering the body exactly.
    pub bundle: bool,
}

/// The messages of a checked bundle's body, in packet order.
pub fn bundle_entries(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = body;
    std::iter::from_fn(move || {
        let (len, after) = rest.split_first_chunk::<BUNDLE_ENTRY>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let (entry, after) = after.split_at_checked(len)?;
        rest = after;
        Some(entry)
    })
}

/// Whether `body` is a well-formed bundle: two entries or more, each at least an envelope,
/// covering it exactly.
fn bundle_ok(body: &[u8]) -> bool {
    let mut rest = body;
    let mut n = 0u32;
    while !rest.is_empty() {
        let Some((len, after)) = rest.split_first_chunk::<BUNDLE_ENTRY>() else {
            return false;
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len < ENVELOPE_LEN || after.len() < len {
            return false;
        }
        rest = &after[len..];
        n += 1;
    }
    n >= 2
}

/// What a node expects of every datagram it accepts.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// The job tag.
    pub tag: u64,
    /// This node.
    pub me: u16,
    /// Nodes in the job.
    pub nodes: usize,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(w)
}

/// Check a datagram: magic, tag, nodes, kind, and every length and fragment field. Whatever
/// this accepts is safe to act on (indices in range, lengths consistent).
///
/// # Errors
/// [`Reject::Foreign`] for a datagram not of this job, [`Reject::Garbage`] for one that is
/// but cannot be right.
pub fn decode<'a>(b: &'a [u8], exp: &Expect) -> Result<Datagram<'a>, Reject> {
    let (hdr, at) = decode_header(b, b.len(), exp)?;
    Ok(Datagram {
        hdr,
        body: &b[at..],
        bundle: b[1] & FLAG_BUNDLE != 0,
    })
}

/// As [`decode`], for a datagram of `len` bytes of which only the first ones, `head` (at
/// least the header), are at hand: the rest was received elsewhere. Returns the header and
/// where the body starts.
///
/// # Errors
/// As [`decode`].
pub fn decode_header(head: &[u8], len: usize, exp: &Expect) -> Result<(Header, usize), Reject> {
    let b = head;
    if b.len() < BASE || len < b.len() || b[0] != MAGIC || u64_at(b, 8) != exp.tag {
        return Err(Reject::Foreign);
    }
    let (src, dst) = (u16_at(b, 2), u16_at(b, 4));
    if usize::from(src) >= exp.nodes || dst != exp.me || src == exp.me {
        return Err(Reject::Foreign);
    }
    let kind = match b[1] & 0x0F {
        1 => Kind::Data,
        2 => Kind::Ack,
        3 => Kind::Bye,
        _ => return Err(Reject::Garbage),
    };
    let flags = b[1] & 0xF0;
    let allowed = match kind {
        Kind::Data => FLAG_FRAG | FLAG_DUP | FLAG_BUNDLE,
        Kind::Ack => FLAG_DUP,
        Kind::Bye => 0,
    };
    // A bundle is never a fragment, and is checked whole: one received in place (a
    // fragment's landing zone) or of which only the header is at hand is not one.
    if flags & !allowed != 0
        || (flags & FLAG_BUNDLE != 0
            && (flags & FLAG_FRAG != 0 || len != b.len() || !bundle_ok(&b[BASE.min(len)..])))
    {
        return Err(Reject::Garbage);
    }
    let is_frag = flags & FLAG_FRAG != 0;
    let mut hdr = Header {
        kind,
        src,
        dst,
        wnd: u16_at(b, 6),
        tag: exp.tag,
        seq: u32_at(b, 16),
        ack: u32_at(b, 20),
        sack: u32_at(b, 24),
        frag: None,
        dup: flags & FLAG_DUP != 0,
    };
    let at = match kind {
        Kind::Data if is_frag => {
            if b.len() < MAX_DATA_HEADER {
                return Err(Reject::Garbage);
            }
            let f = Frag {
                index: u32_at(b, 28),
                chunk: u32_at(b, 32),
                total: u64_at(b, 36),
            };
            let ok_geometry = f.chunk > 0
                && f.total >= ENVELOPE_LEN as u64
                && f.total <= MAX_MESSAGE
                && f.count() <= u64::from(u32::MAX)
                && u64::from(f.index) < f.count();
            if !ok_geometry || f.range().1 != (len - MAX_DATA_HEADER) as u64 {
                return Err(Reject::Garbage);
            }
            hdr.frag = Some(f);
            MAX_DATA_HEADER
        }
        Kind::Data => {
            if len < BASE + ENVELOPE_LEN {
                return Err(Reject::Garbage);
            }
            BASE
        }
        Kind::Ack => {
            if b.len() < BASE + 2 {
                return Err(Reject::Garbage);
            }
            let n = usize::from(u16_at(b, BASE));
            if n > MAX_SACK_EXT || len != BASE + 2 + n {
                return Err(Reject::Garbage);
            }
            BASE + 2
        }
        Kind::Bye => {
            if len != BASE {
                return Err(Reject::Garbage);
            }
            BASE
        }
    };
    Ok((hdr, at))
}

/// The source node, sequence number and fragment index of a data fragment's header, without
/// checking the rest: what tells whether a fragment is the one expected.
pub fn fragment_of(head: &[u8]) -> Option<(u16, u32, u32)> {
    (head.len() >= MAX_DATA_HEADER
        && head[0] == MAGIC
        && head[1] & !FLAG_DUP == Kind::Data as u8 | FLAG_FRAG)
        .then(|| (u16_at(head, 2), u32_at(head, 16), u32_at(head, 28)))
}

/// The source and destination nodes of a datagram of this protocol, without checking the
/// rest: what a relay needs to forward it.
pub fn route(b: &[u8]) -> Option<(u16, u16)> {
    (b.len() >= BASE && b[0] == MAGIC).then(|| (u16_at(b, 2), u16_at(b, 4)))
}

/// The job tag: 64 bits mixed from the 16-byte job secret. Datagrams carry the tag, not the
/// secret, so the secret itself never travels in every packet.
pub fn tag(secret: &[u8]) -> u64 {
    let mut h = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in secret.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h ^= u64::from_le_bytes(w);
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
    }
    h ^ (h >> 29)
}

/// The 64-bit sequence number whose low 32 bits are `low`, nearest to `near`.
pub fn widen(low: u32, near: u64) -> u64 {
    let diff = low.wrapping_sub(near as u32) as i32;
    near.wrapping_add_signed(i64::from(diff))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXP: Expect = Expect {
        tag: 0x1234_5678_9ABC_DEF0,
        me: 1,
        nodes: 4,
    };

    fn header(kind: Kind, frag: Option<Frag>) -> Header {
        Header {
            kind,
            src: 2,
            dst: 1,
            wnd: 512,
            tag: EXP.tag,
            seq: 7,
            ack: 9,
            sack: 0b101,
            frag,
            dup: false,
        }
    }

    fn datagram(h: &Header, body: &[u8]) -> Vec<u8> {
        let mut b = vec![0; h.size()];
        h.write(&mut b);
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn data_round_trips() {
        let h = header(Kind::Data, None);
        let b = datagram(&h, &[3; ENVELOPE_LEN + 5]);
        let d = decode(&b, &EXP).expect("valid");
        assert_eq!(d.hdr, h);
        assert_eq!(d.body.len(), ENVELOPE_LEN + 5);
    }

    /// A bundle's body from its entries.
    fn entries(es: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for e in es {
            b.extend_from_slice(&(e.len() as u32).to_le_bytes());
            b.extend_from_slice(e);
        }
        b
    }

    #[test]
    fn a_bundle_round_trips_and_its_entries_are_checked() {
        let h = header(Kind::Data, None);
        let (a, c) = ([1u8; ENVELOPE_LEN], [2u8; ENVELOPE_LEN + 9]);
        let mut b = datagram(&h, &entries(&[&a, &c]));
        b[1] |= FLAG_BUNDLE;
        let d = decode(&b, &EXP).expect("valid");
        assert!(d.bundle);
        assert_eq!(d.hdr, h);
        let got: Vec<&[u8]> = bundle_entries(d.body).collect();
        assert_eq!(got, vec![&a[..], &c[..]]);
        // One entry, an entry shorter than an envelope, a length past the end, bytes left
        // over, a bundle that is also a fragment, one received in place: refused.
        let short = [3u8; ENVELOPE_LEN - 1];
        let mut bad: Vec<Vec<u8>> = vec![
            entries(&[&a]),
            entries(&[&a, &short]),
            {
                let mut e = entries(&[&a, &c]);
                e.pop();
                e
            },
            {
                let mut e = entries(&[&a, &c]);
                e.push(0);
                e
            },
        ]
        .into_iter()
        .map(|body| {
            let mut b = datagram(&h, &body);
            b[1] |= FLAG_BUNDLE;
            b
        })
        .collect();
        let mut both = b.clone();
        both[1] |= FLAG_FRAG;
        bad.push(both);
        for (i, x) in bad.iter().enumerate() {
            assert_eq!(decode(x, &EXP).err(), Some(Reject::Garbage), "case {i}");
        }
        assert_eq!(
            decode_header(&b[..BASE + 8], b.len(), &EXP).err(),
            Some(Reject::Garbage)
        );
        // Not a bundle without the flag: the same bytes are one message.
        b[1] &= !FLAG_BUNDLE;
        assert!(!decode(&b, &EXP).expect("valid").bundle);
    }

    #[test]
    fn fragment_round_trips_and_geometry_is_checked() {
        let f = Frag {
            index: 2,
            chunk: 100,
            total: 250,
        };
        let h = header(Kind::Data, Some(f));
        let d = datagram(&h, &[1; 50]);
        assert_eq!(decode(&d, &EXP).expect("valid").hdr.frag, Some(f));
        // The last fragment must be exactly the rest.
        assert_eq!(
            decode(&datagram(&h, &[1; 51]), &EXP).err(),
            Some(Reject::Garbage)
        );
        let past = header(Kind::Data, Some(Frag { index: 3, ..f }));
        assert_eq!(
            decode(&datagram(&past, &[1; 50]), &EXP).err(),
            Some(Reject::Garbage)
        );
        let zero = header(Kind::Data, Some(Frag { chunk: 0, ..f }));
        assert_eq!(
            decode(&datagram(&zero, &[]), &EXP).err(),
            Some(Reject::Garbage)
        );
    }

    #[test]
    fn foreign_datagrams_are_told_apart_from_garbage() {
        let h = header(Kind::Data, None);
        let good = datagram(&h, &[0; ENVELOPE_LEN]);
        let mut wrong_tag = good.clone();
        wrong_tag[9] ^= 1;
        assert_eq!(decode(&wrong_tag, &EXP).err(), Some(Reject::Foreign));
        let mut to_other = good.clone();
        to_other[4] = 3;
        assert_eq!(decode(&to_other, &EXP).err(), Some(Reject::Foreign));
        let mut from_self = good.clone();
        from_self[2] = 1;
        assert_eq!(decode(&from_self, &EXP).err(), Some(Reject::Foreign));
        assert_eq!(decode(&good[..BASE + 3], &EXP).err(), Some(Reject::Garbage));
        let mut bad_kind = good.clone();
        bad_kind[1] = 9;
        assert_eq!(decode(&bad_kind, &EXP).err(), Some(Reject::Garbage));
        assert_eq!(decode(&good[..5], &EXP).err(), Some(Reject::Foreign));
    }

    #[test]
    fn the_duplicate_flag_travels_on_data_and_acks_only() {
        for kind in [Kind::Data, Kind::Ack] {
            let mut h = header(kind, None);
            h.dup = true;
            let mut b = datagram(&h, &[0; ENVELOPE_LEN]);
            if kind == Kind::Ack {
                b.truncate(BASE);
                b.extend_from_slice(&0u16.to_le_bytes());
            }
            assert!(decode(&b, &EXP).expect("valid").hdr.dup);
        }
        let mut bye = datagram(&header(Kind::Bye, None), &[]);
        bye[1] |= FLAG_DUP;
        assert_eq!(decode(&bye, &EXP).err(), Some(Reject::Garbage));
    }

    #[test]
    fn ack_extension_length_must_match() {
        let h = header(Kind::Ack, None);
        let mut b = datagram(&h, &[]);
        b.extend_from_slice(&3u16.to_le_bytes());
        b.extend_from_slice(&[0xFF; 3]);
        assert_eq!(decode(&b, &EXP).expect("valid").body, &[0xFF; 3]);
        b.push(0);
        assert_eq!(decode(&b, &EXP).err(), Some(Reject::Garbage));
    }

    #[test]
    fn widening_picks_the_nearest() {
        assert_eq!(widen(5, 3), 5);
        assert_eq!(widen(u32::MAX, 1 << 32), (1 << 32) - 1);
        assert_eq!(widen(2, (1 << 32) - 3), (1 << 32) + 2);
        assert_eq!(widen(0, 0), 0);
    }

    #[test]
    fn tags_differ_per_secret() {
        assert_ne!(tag(&[0; 16]), tag(&[1; 16]));
        assert_eq!(tag(&[7; 16]), tag(&[7; 16]));
    }
}
