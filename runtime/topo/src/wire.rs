//! The layout of a topology message's payload: a fixed header, the sender's vector time,
//! then the body.
//!
//! ```text
//! [kind u8][flags u8][op u8][0 u8][src u32][dst u32][seq u32][aux u64]  24 bytes
//! [vector time: n × u64]
//! [body]
//! ```
//! All little-endian. `src` is the process that sent this hop's content (the origin of a
//! routed point-to-point message), `dst` the final destination, or a collective's root.

use crate::error::TopoError;
use converse::Message;

/// Bytes of the fixed header.
pub(crate) const HEADER: usize = 24;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Point to point, routed hop by hop.
    P2p = 1,
    /// A collective's data.
    Coll = 2,
    /// A collective mismatch found somewhere: every process fails its collectives.
    Mismatch = 3,
    /// "What did you call as collective `seq`?": sent by a process whose collective is slow,
    /// so that a mismatch that sends nobody a message is still found.
    Verify = 4,
    /// Mutex: a request toward the token.
    MutexRequest = 5,
    /// Mutex: the token.
    MutexToken = 6,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::P2p,
            2 => Kind::Coll,
            3 => Kind::Mismatch,
            4 => Kind::Verify,
            5 => Kind::MutexRequest,
            6 => Kind::MutexToken,
            _ => return None,
        })
    }
}

/// Flag: record this message's hops (the call was made with `visual` on).
pub(crate) const VISUAL: u8 = 1;
/// Flag: the downward half of an all-reduce.
pub(crate) const DOWN: u8 = 2;

/// The fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub op: u8,
    pub src: u32,
    pub dst: u32,
    pub seq: u32,
    pub aux: u64,
}

impl Header {
    pub(crate) fn new(kind: Kind, src: usize, dst: usize) -> Header {
        Header {
            kind,
            flags: 0,
            op: 0,
            src: src as u32,
            dst: dst as u32,
            seq: 0,
            aux: 0,
        }
    }

    fn write(&self, b: &mut [u8]) {
        b[0] = self.kind as u8;
        b[1] = self.flags;
        b[2] = self.op;
        b[3] = 0;
        b[4..8].copy_from_slice(&self.src.to_le_bytes());
        b[8..12].copy_from_slice(&self.dst.to_le_bytes());
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.aux.to_le_bytes());
    }

    /// The header of a payload of a topology of `n` processes.
    pub(crate) fn read(p: &[u8], n: usize) -> Result<Header, TopoError> {
        if p.len() < HEADER + 8 * n {
            return Err(TopoError::Corrupt(format!(
                "{} bytes, shorter than a header and a vector time of {n}",
                p.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
        let kind = Kind::from_u8(p[0])
            .ok_or_else(|| TopoError::Corrupt(format!("unknown kind {}", p[0])))?;
        let mut aux = [0u8; 8];
        aux.copy_from_slice(&p[16..24]);
        let h = Header {
            kind,
            flags: p[1],
            op: p[2],
            src: u32_at(4),
            dst: u32_at(8),
            seq: u32_at(12),
            aux: u64::from_le_bytes(aux),
        };
        if h.src as usize >= n || (h.dst as usize >= n && kind != Kind::Mismatch) {
            return Err(TopoError::Corrupt(format!(
                "process {} or {} is not one of the {n}",
                h.src, h.dst
            )));
        }
        Ok(h)
    }
}

/// Where the body starts in a payload of a topology of `n` processes.
pub(crate) fn body_at(n: usize) -> usize {
    HEADER + 8 * n
}

/// A message with `header`, vector time `vc` and room for `body_len` body bytes, which the
/// caller fills from [`body_at`].
pub(crate) fn message(header: &Header, vc: &[u64], body_len: usize) -> Message {
    let at = body_at(vc.len());
    let mut m = Message::new(at + body_len);
    let p = m.payload_mut();
    header.write(&mut p[..HEADER]);
    write_vc(p, vc);
    m
}

/// A message with `header`, `vc` and `body`.
pub(crate) fn message_with(header: &Header, vc: &[u64], body: &[u8]) -> Message {
    let mut m = message(header, vc, body.len());
    let at = body_at(vc.len());
    m.payload_mut()[at..].copy_from_slice(body);
    m
}

/// Overwrite a payload's vector time (a message forwarded as a new send).
pub(crate) fn write_vc(p: &mut [u8], vc: &[u64]) {
    for (i, v) in vc.iter().enumerate() {
        let at = HEADER + 8 * i;
        p[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// Overwrite a payload's header.
pub(crate) fn write_header(p: &mut [u8], h: &Header) {
    h.write(&mut p[..HEADER]);
}

/// A payload's vector time, entry by entry.
pub(crate) fn vc_entries(p: &[u8], n: usize) -> impl Iterator<Item = u64> + '_ {
    (0..n).map(move |i| {
        let at = HEADER + 8 * i;
        let mut b = [0u8; 8];
        b.copy_from_slice(&p[at..at + 8]);
        u64::from_le_bytes(b)
    })
}

/// A bundle: segments for several processes in one body, as a scatter sends down and a
/// gather sends up: `[count u32][(id u32, len u32) × count][bytes of each, in order]`.
pub(crate) fn bundle<'a>(parts: impl Iterator<Item = (usize, &'a [u8])> + Clone) -> Vec<u8> {
    let count = parts.clone().count();
    let bytes: usize = parts.clone().map(|p| p.1.len()).sum();
    let mut b = Vec::with_capacity(4 + 8 * count + bytes);
    b.extend_from_slice(&(count as u32).to_le_bytes());
    for (id, d) in parts.clone() {
        b.extend_from_slice(&(id as u32).to_le_bytes());
        b.extend_from_slice(&(d.len() as u32).to_le_bytes());
    }
    for (_, d) in parts {
        b.extend_from_slice(d);
    }
    b
}

/// The segments of a bundle, by process id.
///
/// # Errors
/// [`TopoError::Corrupt`] when the lengths do not add up or an id is not below `n`.
pub(crate) fn unbundle(b: &[u8], n: usize) -> Result<Vec<(usize, &[u8])>, TopoError> {
    let bad = |why: &str| TopoError::Corrupt(format!("bundle: {why}"));
    let word = |i: usize| -> Result<usize, TopoError> {
        b.get(i..i + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as usize)
            .ok_or_else(|| bad("cut short"))
    };
    let count = word(0)?;
    if count > n {
        return Err(bad("more segments than processes"));
    }
    let mut at = 4 + 8 * count;
    let mut v = Vec::with_capacity(count);
    for k in 0..count {
        let id = word(4 + 8 * k)?;
        let len = word(8 + 8 * k)?;
        let end = at.checked_add(len).ok_or_else(|| bad("length overflows"))?;
        if id >= n {
            return Err(bad("a process that is not in the topology"));
        }
        let d = b.get(at..end).ok_or_else(|| bad("cut short"))?;
        v.push((id, d));
        at = end;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_vector_time_round_trip() {
        let mut h = Header::new(Kind::Coll, 2, 3);
        h.flags = VISUAL;
        h.op = 4;
        h.seq = 77;
        h.aux = u64::MAX - 1;
        let m = message_with(&h, &[1, 2, 3, 4], b"body");
        let p = m.payload();
        assert_eq!(Header::read(p, 4).unwrap(), h);
        assert_eq!(vc_entries(p, 4).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(&p[body_at(4)..], b"body");
        assert!(Header::read(&p[..10], 4).is_err());
        // A source beyond the topology is refused.
        assert!(Header::read(p, 2).is_err());
    }

    #[test]
    fn bundles_round_trip_and_refuse_lies() {
        let parts = [(3usize, &b"abc"[..]), (1, b""), (0, b"xy")];
        let b = bundle(parts.iter().copied());
        assert_eq!(unbundle(&b, 4).unwrap(), parts);
        assert!(unbundle(&b[..b.len() - 1], 4).is_err());
        assert!(unbundle(&b, 3).is_err());
        assert!(unbundle(&[255, 255, 255, 255], 4).is_err());
        assert!(unbundle(&[], 4).is_err());
    }
}
