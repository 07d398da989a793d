//! The datagram of a `udp://` connection, and its header's encoding: the wire format that
//! [`Session`](super::session::Session) speaks (all integers little-endian):
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | magic `CVEU` | not this protocol otherwise (dropped) |
//! | 4 | kind u8 | 1 `OPEN`, 2 `OPENED`, 3 `DATA`, 4 `ACK`, 5 `PROBE`, 6 `CLOSE`, 7 `RESET`, 8 `COOKIE` |
//! | 5 | version u8 (2) | 1 had no `COOKIE`: its datagrams are dropped |
//! | 6..14 | connection u64 | chosen at random by the connector: tells a connection from an earlier one from the same address, and a stranger cannot guess it |
//! | 14..22 | seq u64 | `DATA`: offset of its first byte; `CLOSE`: the stream's end; `COOKIE`: the cookie; `OPEN`: 0, then the cookie echoed |
//! | 22..30 | ack u64 | every byte before it received |
//! | 30..34 | window u32 | bytes the sender of this datagram takes beyond `ack` |
//! | 34.. | payload | `DATA` only |
//!
//! `OPEN` (connector, repeated until answered) asks the listener for a connection. The
//! listener answers a first `OPEN` (`seq` 0, or a cookie it did not make or that expired)
//! with `COOKIE`, keeping nothing: the cookie is a keyed hash of the connector's address, the
//! connection id and the time (`udp/mod.rs`), so only a connector that receives datagrams at
//! its address can echo it, and `OPEN`s from forged addresses cost the listener no memory.
//! The connector repeats `OPEN` with the cookie in `seq`; only that one makes a connection,
//! which `OPENED` answers (the listener repeats it for a repeated `OPEN`). `PROBE` asks for
//! an `ACK`.
//! `CLOSE` takes one sequence number after the stream's last byte, so its acknowledgement is
//! `ack = seq + 1`. A listener answers a datagram of a connection it does not know with
//! `RESET` (one for one, never more bytes than came). The handshake of the endpoint protocol
//! (`wire.rs`: the secret proved both ways) runs over the stream as over TCP.

/// Magic of every datagram.
pub(crate) const MAGIC: &[u8; 4] = b"CVEU";
/// The protocol's version.
pub(crate) const VERSION: u8 = 2;
/// Bytes before a datagram's payload.
pub(crate) const HEADER: usize = 34;

pub(crate) const OPEN: u8 = 1;
pub(crate) const OPENED: u8 = 2;
pub(crate) const DATA: u8 = 3;
pub(crate) const ACK: u8 = 4;
pub(crate) const PROBE: u8 = 5;
pub(crate) const CLOSE: u8 = 6;
pub(crate) const RESET: u8 = 7;
pub(crate) const COOKIE: u8 = 8;

/// A datagram's header, as decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: u8,
    pub(crate) conn: u64,
    pub(crate) seq: u64,
    pub(crate) ack: u64,
    pub(crate) wnd: u32,
}

impl Header {
    pub(crate) fn write(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(MAGIC);
        out[4] = self.kind;
        out[5] = VERSION;
        out[6..14].copy_from_slice(&self.conn.to_le_bytes());
        out[14..22].copy_from_slice(&self.seq.to_le_bytes());
        out[22..30].copy_from_slice(&self.ack.to_le_bytes());
        out[30..34].copy_from_slice(&self.wnd.to_le_bytes());
    }

    /// A datagram of header only, for a connection the engine holds no session of (a
    /// `COOKIE`, a `RESET`): `seq` is its one field of meaning.
    pub(crate) fn control(kind: u8, conn: u64, seq: u64) -> [u8; HEADER] {
        let mut d = [0u8; HEADER];
        Header {
            kind,
            conn,
            seq,
            ack: 0,
            wnd: 0,
        }
        .write(&mut d);
        d
    }

    /// The header and payload of a datagram of this protocol, or `None` (not ours: dropped).
    pub(crate) fn decode(b: &[u8]) -> Option<(Header, &[u8])> {
        if b.len() < HEADER || &b[..4] != MAGIC || b[5] != VERSION {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let h = Header {
            kind: b[4],
            conn: u64_at(6),
            seq: u64_at(14),
            ack: u64_at(22),
            wnd: u32::from_le_bytes(b[30..34].try_into().unwrap_or_default()),
        };
        if !(OPEN..=COOKIE).contains(&h.kind) || (h.kind != DATA && b.len() != HEADER) {
            return None;
        }
        Some((h, &b[HEADER..]))
    }
}
