//! The wire format of a connection: a handshake, then frames, both directions alike.
//!
//! **Handshake** (the listener speaks first; all of it within the handshake deadline):
//!
//! | from | bytes | meaning |
//! |---|---|---|
//! | listener | `CVEP`, version u8 (1), nonce (16) | who it is, and a challenge |
//! | connector | `CVEP`, version u8, proof (20), nonce (16) | proof = SHA-1(`connect`, secret, listener's nonce) |
//! | listener | 0, proof (20) | accepted; proof = SHA-1(`listen`, secret, connector's nonce): the job holds the secret too |
//! | listener | 1, reason length u16 LE, reason (UTF-8) | refused (wrong secret, other version); the connection closes |
//!
//! **Frames**: `[body length u32 LE][body]`, the body one of:
//!
//! | kind u8 | then | meaning |
//! |---|---|---|
//! | 1 `MSG` | name length u16 LE, name, data (the rest) | a message for the handler of that name |
//! | 2 `CALL` | id u64 LE, name length u16 LE, name, data | a call: the handler's reply comes back as `REPLY` with the same id |
//! | 3 `REPLY` | id u64 LE, status u8, data | status 0: answered; 1: no handler of that name; 2: dropped unanswered |
//!
//! A body longer than the reader's limit, shorter than its kind's fixed part, of an unknown
//! kind, or with a name that is not UTF-8 ends the connection (an event for the other side's
//! program, not the end of its job). Going away is closing the connection: there is no
//! goodbye frame.

use crate::secret::{NONCE_LEN, PROOF_LEN};

/// Magic of the handshake's first two messages.
pub(crate) const MAGIC: &[u8; 4] = b"CVEP";
/// The protocol's version.
pub(crate) const VERSION: u8 = 1;
/// Bytes of the listener's hello.
pub(crate) const HELLO_LEN: usize = 4 + 1 + NONCE_LEN;
/// Bytes of the connector's answer.
pub(crate) const AUTH_LEN: usize = 4 + 1 + PROOF_LEN + NONCE_LEN;
/// Bytes of the listener's acceptance.
pub(crate) const ACCEPT_LEN: usize = 1 + PROOF_LEN;
/// The labels of the two proofs.
pub(crate) const CONNECT: &[u8] = b"connect";
pub(crate) const LISTEN: &[u8] = b"listen";

pub(crate) const MSG: u8 = 1;
pub(crate) const CALL: u8 = 2;
pub(crate) const REPLY: u8 = 3;

/// A reply's status.
pub(crate) const ANSWERED: u8 = 0;
pub(crate) const NO_HANDLER: u8 = 1;
pub(crate) const UNANSWERED: u8 = 2;

/// Longest handler name (its length is a u16).
pub const MAX_NAME: usize = u16::MAX as usize;

/// Longest data a frame carries: its body length is a u32, which the head and the longest
/// name share.
pub(crate) const MAX_DATA: usize = u32::MAX as usize - MAX_HEAD - MAX_NAME;

/// Bytes before the name and data of a frame, the most any kind has: length, kind, id, name
/// length.
pub(crate) const MAX_HEAD: usize = 4 + 1 + 8 + 2;

/// The head of a frame (everything before its name and data), written into `out`; returns its
/// length. `id` is used by `CALL` and `REPLY` (whose "name" is the status byte).
pub(crate) fn head(
    out: &mut [u8; MAX_HEAD],
    kind: u8,
    id: u64,
    name_len: usize,
    data_len: usize,
) -> usize {
    let (fixed, body) = match kind {
        MSG => (1 + 2, 1 + 2 + name_len + data_len),
        CALL => (1 + 8 + 2, 1 + 8 + 2 + name_len + data_len),
        _ => (1 + 8, 1 + 8 + name_len + data_len),
    };
    out[..4].copy_from_slice(&(body as u32).to_le_bytes());
    out[4] = kind;
    let mut at = 5;
    if kind != MSG {
        out[at..at + 8].copy_from_slice(&id.to_le_bytes());
        at += 8;
    }
    if kind != REPLY {
        out[at..at + 2].copy_from_slice(&(name_len as u16).to_le_bytes());
        at += 2;
    }
    debug_assert_eq!(at, 4 + fixed);
    at
}

/// A frame as read, borrowing the reader's buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    Msg {
        name: &'a str,
        data: &'a [u8],
    },
    Call {
        id: u64,
        name: &'a str,
        data: &'a [u8],
    },
    Reply {
        id: u64,
        status: u8,
        data: &'a [u8],
    },
}

/// Why a connection's bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadFrame(pub(crate) String);

/// Frames out of a byte stream, sans I/O: bytes go in with [`FrameReader::space`] and
/// [`FrameReader::filled`], frames come out of [`FrameReader::next`].
#[derive(Debug)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    /// Where the unread bytes start and end.
    start: usize,
    end: usize,
    /// The longest body accepted.
    limit: usize,
}

/// Bytes read at a time when no frame is waiting for more.
const CHUNK: usize = 64 * 1024;

impl FrameReader {
    pub(crate) fn new(limit: usize) -> FrameReader {
        FrameReader {
            buf: vec![0; CHUNK],
            start: 0,
            end: 0,
            limit,
        }
    }

    /// Room to read into: the buffer grows only as far as the frame being read needs (a
    /// declared length is not trusted with an allocation before its bytes come).
    pub(crate) fn space(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            // After a large frame, the buffer goes back to its usual size: a connection that
            // once carried 256 MiB does not keep it.
            if self.buf.len() > 4 * CHUNK {
                self.buf = vec![0; CHUNK];
            }
        }
        let want = match self.declared() {
            Some(body) => (4 + body).min(self.end - self.start + 4 * CHUNK).max(CHUNK),
            None => CHUNK,
        };
        if self.buf.len() - self.start < want {
            // Move what is unread to the front before growing.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < want {
                self.buf.resize(want, 0);
            }
        }
        if self.end == self.buf.len() {
            let more = self.buf.len() + CHUNK;
            self.buf.resize(more, 0);
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into [`space`](Self::space).
    pub(crate) fn filled(&mut self, n: usize) {
        self.end += n;
    }

    fn declared(&self) -> Option<usize> {
        let b = self.buf.get(self.start..self.start + 4)?;
        if self.end - self.start < 4 {
            return None;
        }
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// The next whole frame, if one is in.
    pub(crate) fn next(&mut self) -> Result<Option<Frame<'_>>, BadFrame> {
        let Some(body_len) = self.declared() else {
            return Ok(None);
        };
        if body_len > self.limit {
            return Err(BadFrame(format!(
                "a frame of {body_len} bytes, over the limit of {}",
                self.limit
            )));
        }
        if self.end - self.start < 4 + body_len {
            return Ok(None);
        }
        let at = self.start + 4;
        self.start = at + body_len;
        parse(&self.buf[at..at + body_len]).map(Some)
    }
}

fn parse(body: &[u8]) -> Result<Frame<'_>, BadFrame> {
    let short = |k: &str| BadFrame(format!("a {k} frame of {} bytes is too short", body.len()));
    let (&kind, rest) = body.split_first().ok_or_else(|| short("empty"))?;
    let u64_at =
        |b: &[u8]| -> Option<u64> { Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)) };
    fn named(b: &[u8], short: BadFrame) -> Result<(&str, &[u8]), BadFrame> {
        let len = match b.get(..2) {
            Some(l) => u16::from_le_bytes([l[0], l[1]]) as usize,
            None => return Err(short),
        };
        let name = b.get(2..2 + len).ok_or(short)?;
        let name = std::str::from_utf8(name)
            .map_err(|_| BadFrame("a handler name that is not UTF-8".into()))?;
        Ok((name, &b[2 + len..]))
    }
    match kind {
        MSG => {
            let (name, data) = named(rest, short("MSG"))?;
            Ok(Frame::Msg { name, data })
        }
        CALL => {
            let id = u64_at(rest).ok_or_else(|| short("CALL"))?;
            let (name, data) = named(&rest[8..], short("CALL"))?;
            Ok(Frame::Call { id, name, data })
        }
        REPLY => {
            let id = u64_at(rest).ok_or_else(|| short("REPLY"))?;
            let status = *rest.get(8).ok_or_else(|| short("REPLY"))?;
            Ok(Frame::Reply {
                id,
                status,
                data: &rest[9..],
            })
        }
        k => Err(BadFrame(format!("a frame of unknown kind {k}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, id: u64, name: &[u8], data: &[u8]) -> Vec<u8> {
        let mut h = [0u8; MAX_HEAD];
        let n = head(&mut h, kind, id, name.len(), data.len());
        let mut v = h[..n].to_vec();
        v.extend_from_slice(name);
        v.extend_from_slice(data);
        v
    }

    fn feed(r: &mut FrameReader, mut bytes: &[u8], step: usize) {
        while !bytes.is_empty() {
            let space = r.space();
            let n = step.min(space.len()).min(bytes.len());
            space[..n].copy_from_slice(&bytes[..n]);
            r.filled(n);
            bytes = &bytes[n..];
        }
    }

    #[test]
    fn frames_round_trip_whole_and_byte_by_byte() {
        let big = vec![0xabu8; 300_000];
        let mut stream = frame(MSG, 0, b"produce", b"item 1");
        stream.extend(frame(CALL, 42, b"sum", &big));
        stream.extend(frame(REPLY, 42, &[ANSWERED], b"ok"));
        stream.extend(frame(MSG, 0, b"", b""));
        for step in [1, 7, 4096, usize::MAX] {
            let mut r = FrameReader::new(1 << 20);
            let mut got = Vec::new();
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let n = step.min(rest.len());
                feed(&mut r, &rest[..n], n);
                rest = &rest[n..];
                while let Some(f) = r.next().unwrap() {
                    got.push(format!("{f:?}").len());
                    match f {
                        Frame::Call { id, name, data } => {
                            assert_eq!((id, name, data.len()), (42, "sum", big.len()))
                        }
                        Frame::Reply { id, status, data } => {
                            assert_eq!((id, status, data), (42, ANSWERED, &b"ok"[..]))
                        }
                        Frame::Msg { .. } => {}
                    }
                }
            }
            assert_eq!(got.len(), 4, "step {step}");
        }
    }

    #[test]
    fn bad_frames_are_refused_with_a_reason() {
        for (bytes, needle) in [
            (frame(MSG, 0, b"x", &vec![0; 2000]), "over the limit"),
            (vec![1, 0, 0, 0, 9], "unknown kind 9"),
            (vec![0, 0, 0, 0], "too short"),
            (vec![3, 0, 0, 0, MSG, 5, 0], "too short"),
            (vec![5, 0, 0, 0, CALL, 1, 2, 3, 4], "too short"),
            (vec![5, 0, 0, 0, MSG, 2, 0, 0xff, 0xfe], "not UTF-8"),
        ] {
            let mut r = FrameReader::new(1024);
            feed(&mut r, &bytes, usize::MAX);
            let e = r.next().unwrap_err();
            assert!(e.0.contains(needle), "{bytes:?}: {}", e.0);
        }
    }

    #[test]
    fn a_declared_length_is_not_an_allocation() {
        let mut r = FrameReader::new(usize::MAX);
        feed(&mut r, &u32::MAX.to_le_bytes(), 4);
        assert!(r.next().unwrap().is_none());
        assert!(r.space().len() <= 6 * CHUNK);
    }
}
