//! The CCS wire format (Charm++'s, so its clients — CharmDebug, live Projections, the Python
//! and Java CCS clients — talk to a job as they talk to a Charm++ one). Integers are big-endian.
//!
//! A request is one TCP connection: `[auth (optional)][header][data][pe list (multicast)]`,
//! and its reply comes back on it before it closes.
//!
//! | part | bytes | meaning |
//! |---|---|---|
//! | header: `len` | 4 | length of the request's data |
//! | header: `pe` | 4 | destination: a PE (≥ 0), every PE (−1), or −N: the N PEs listed after the data |
//! | header: `handler` | 32 | handler name, ASCII, NUL-padded (at most 31 bytes used) |
//! | data | `len` | handed to the handler |
//! | pe list | 4 × N | the PEs of a multicast (`pe` = −N) |
//! | reply: `[hash]` | 20 | authenticated requests only: SHA-1 of the key and the client's reply salt |
//! | reply: `len` | 4 | length of the reply |
//! | reply: data | `len` | the handler's reply (every PE's, in PE order, for −1 and lists) |
//!
//! A request's first byte tells its kind: below `0x20` it is a header (a length under
//! 512 MiB); `0x80` starts an authenticated one (`auth.rs`).

use crate::CcsError;
use std::io::{Read, Write};

/// Bytes of a header.
pub const HEADER_LEN: usize = 40;

/// Bytes of a header's handler name field.
pub const HANDLER_LEN: usize = 32;

/// The largest request or reply accepted: far above what CCS carries (status, small
/// commands, trace windows), small enough that a stranger cannot make a job allocate more.
pub const MAX_DATA: usize = 64 << 20;

/// The most PEs a multicast may list.
pub const MAX_LIST: usize = 1 << 20;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// One PE.
    Pe(usize),
    /// Every PE of the job; the reply is every PE's, concatenated in PE order.
    All,
    /// These PEs; the reply is theirs, concatenated in this order.
    List(Vec<usize>),
}

/// A request's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Length of the data that follows.
    pub len: u32,
    /// The `pe` field as sent.
    pub pe: i32,
    /// The handler's name.
    pub handler: String,
}

impl Header {
    /// A header for `len` bytes to `dest`'s handler `handler`.
    ///
    /// # Errors
    /// [`CcsError::Request`] for a name longer than 31 bytes or with a NUL, data over
    /// [`MAX_DATA`], or a list too long.
    pub fn new(handler: &str, dest: &Dest, len: usize) -> Result<Header, CcsError> {
        if handler.len() >= HANDLER_LEN || handler.contains('\0') || handler.is_empty() {
            return Err(CcsError::Request(format!(
                "handler name '{handler}': 1 to {} bytes, no NUL",
                HANDLER_LEN - 1
            )));
        }
        if len > MAX_DATA {
            return Err(CcsError::Request(format!(
                "{len} bytes of data: at most {MAX_DATA}"
            )));
        }
        let pe = match dest {
            Dest::Pe(p) => i32::try_from(*p)
                .map_err(|_| CcsError::Request(format!("PE {p} is out of range")))?,
            Dest::All => -1,
            Dest::List(l) if l.len() < 2 || l.len() > MAX_LIST => {
                return Err(CcsError::Request(format!(
                    "a list of {} PEs: 2 to {MAX_LIST} (one PE: name it)",
                    l.len()
                )))
            }
            Dest::List(l) => -(l.len() as i32),
        };
        Ok(Header {
            len: len as u32,
            pe,
            handler: handler.to_owned(),
        })
    }

    /// The 40 bytes on the wire.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..4].copy_from_slice(&self.len.to_be_bytes());
        b[4..8].copy_from_slice(&self.pe.to_be_bytes());
        let name = self.handler.as_bytes();
        let n = name.len().min(HANDLER_LEN - 1);
        b[8..8 + n].copy_from_slice(&name[..n]);
        b
    }

    /// Read the 40 bytes back.
    ///
    /// # Errors
    /// [`CcsError::Request`] for a length over [`MAX_DATA`], a `pe` below −[`MAX_LIST`], or a
    /// name that is not printable ASCII.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, CcsError> {
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let pe = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        if len as usize > MAX_DATA {
            return Err(CcsError::Request(format!(
                "{len} bytes of data: at most {MAX_DATA}"
            )));
        }
        if pe < -(MAX_LIST as i32) {
            return Err(CcsError::Request(format!("destination {pe}")));
        }
        let raw = &b[8..];
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        let name = &raw[..end];
        if name.is_empty() || !name.iter().all(|c| c.is_ascii_graphic() || *c == b' ') {
            return Err(CcsError::Request(
                "the handler name is empty or not printable ASCII".into(),
            ));
        }
        Ok(Header {
            len,
            pe,
            handler: String::from_utf8_lossy(name).into_owned(),
        })
    }

    /// How many PEs follow the data (a multicast's list).
    pub fn list_len(&self) -> usize {
        if self.pe < -1 {
            self.pe.unsigned_abs() as usize
        } else {
            0
        }
    }
}

/// The destination of a request whose header is `h` and whose PE list (if any) is `list`,
/// in a job of `pes` PEs.
///
/// # Errors
/// [`CcsError::Request`] for a PE outside the job.
pub fn dest(h: &Header, list: &[u8], pes: usize) -> Result<Dest, CcsError> {
    let check = |p: i64| -> Result<usize, CcsError> {
        usize::try_from(p).ok().filter(|&p| p < pes).ok_or_else(|| {
            CcsError::Request(format!("PE {p} is not in the job (0 to {})", pes - 1))
        })
    };
    match h.pe {
        -1 => Ok(Dest::All),
        p if p >= 0 => Ok(Dest::Pe(check(i64::from(p))?)),
        _ => list
            .chunks_exact(4)
            .map(|c| check(i64::from(i32::from_be_bytes([c[0], c[1], c[2], c[3]]))))
            .collect::<Result<Vec<_>, _>>()
            .map(Dest::List),
    }
}

/// A multicast's PE list, as it follows the data.
pub fn encode_list(pes: &[usize]) -> Vec<u8> {
    pes.iter().flat_map(|&p| (p as i32).to_be_bytes()).collect()
}

/// Write a reply's length and data (after the hash, for an authenticated request).
///
/// # Errors
/// The socket's.
pub fn write_reply(w: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(4 + data.len());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    w.write_all(&out)?;
    w.flush()
}

/// Read a reply's length and data.
///
/// # Errors
/// [`CcsError::Io`] when the connection fails or closes first (the server refused the request
/// or its handler gave no reply), [`CcsError::Reply`] for a length over [`MAX_DATA`].
pub fn read_reply(r: &mut impl Read) -> Result<Vec<u8>, CcsError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(CcsError::closed)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_DATA {
        return Err(CcsError::Reply(format!("a reply of {len} bytes")));
    }
    let mut data = vec![0u8; len];
    r.read_exact(&mut data).map_err(CcsError::closed)?;
    Ok(data)
}

/// `ccs_getinfo`'s reply (Charm++'s): the number of nodes, then each node's PEs.
pub fn encode_info(pes_per_node: &[usize]) -> Vec<u8> {
    let mut out = (pes_per_node.len() as i32).to_be_bytes().to_vec();
    for &n in pes_per_node {
        out.extend_from_slice(&(n as i32).to_be_bytes());
    }
    out
}

/// Read `ccs_getinfo`'s reply back: each node's PEs.
///
/// # Errors
/// [`CcsError::Reply`] when it is not such a list.
pub fn decode_info(b: &[u8]) -> Result<Vec<usize>, CcsError> {
    let word = |i: usize| -> Option<i32> {
        b.get(4 * i..4 * i + 4)
            .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    };
    let bad = || CcsError::Reply("ccs_getinfo's reply is not a node list".into());
    let n = usize::try_from(word(0).ok_or_else(bad)?).map_err(|_| bad())?;
    if b.len() != 4 * (n + 1) {
        return Err(bad());
    }
    (1..=n)
        .map(|i| {
            word(i)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(bad)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_goes_and_comes_back() {
        for dest in [Dest::Pe(3), Dest::All, Dest::List(vec![0, 2, 5])] {
            let h = Header::new("converse.status", &dest, 12).expect("header");
            let back = Header::decode(&h.encode()).expect("decode");
            assert_eq!(back, h);
            let list = match &dest {
                Dest::List(l) => encode_list(l),
                _ => Vec::new(),
            };
            assert_eq!(back.list_len() * 4, list.len());
            assert_eq!(super::dest(&back, &list, 8).expect("dest"), dest);
        }
    }

    #[test]
    fn bad_headers_are_refused_with_a_reason() {
        assert!(Header::new(&"x".repeat(32), &Dest::All, 0).is_err());
        assert!(Header::new("", &Dest::All, 0).is_err());
        assert!(Header::new("a", &Dest::All, MAX_DATA + 1).is_err());
        let mut b = Header::new("a", &Dest::Pe(0), 0).expect("h").encode();
        b[8] = 0xff;
        assert!(Header::decode(&b).is_err(), "not ASCII");
        b[8] = 0;
        assert!(Header::decode(&b).is_err(), "empty");
        let h = Header::new("a", &Dest::Pe(9), 0).expect("h");
        assert!(dest(&h, &[], 4).is_err(), "PE outside the job");
        let mut b = h.encode();
        b[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Header::decode(&b).is_err(), "too long");
    }

    #[test]
    fn getinfo_lists_each_nodes_pes() {
        let b = encode_info(&[2, 2, 1]);
        assert_eq!(decode_info(&b).expect("info"), [2, 2, 1]);
        assert!(decode_info(&b[..7]).is_err());
    }
}
