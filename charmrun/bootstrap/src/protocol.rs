//! The control protocol between charmrun and the nodes it starts.
//!
//! Every node opens one TCP connection to charmrun's control port and keeps it for the whole
//! job. Frames are `[u32 length LE][u8 kind][body]`, `length` counting kind and body.
//!
//! | kind | direction | body | meaning |
//! |---|---|---|---|
//! | `HELLO` | node → charmrun | secret (16 B), node u32, pid u32, host (u32 len + UTF-8), info (rest) | I am node `node` of this job; reach me with `info` |
//! | `TABLE` | charmrun → node | encoded [`NodeTable`](converse_machine::NodeTable) | everyone is in: here is the job |
//! | `BARRIER` | node → charmrun | empty | I reached the barrier |
//! | `RELEASE` | charmrun → node | empty | everyone reached it |
//! | `ENDING` | node → charmrun | i32 code | I am leaving the job normally with this code |
//! | `ABORT` | node → charmrun | UTF-8 reason | end the job now |
//! | `DIE` | charmrun → node | UTF-8 reason | the job is over: exit at once |
//! | `HEARTBEAT` | node → charmrun | empty | I still answer (every [`HEARTBEAT_INTERVAL`], from the node's watchdog, not its PEs) |
//! | `AGENT` | agent → charmrun | charmrun's `agent::wire::AgentHello` | I am agent `a` of this job, on this host |
//! | `PLAN` | charmrun → agent | charmrun's `agent::wire::Plan` | start these nodes here |
//! | `RELAY` | both | node u32, kind u8, body | a node's frame, through its host's agent |
//! | `EXITED` | agent → charmrun, relayed | raw wait status i32 | the node's process exited |
//! | `CLOSED` | agent → charmrun, relayed | empty | the node's connection to its agent closed |
//! | `LOST` | agent → charmrun | nodes (u32 count, u32 each), why (str) | an agent below this one is gone, with these nodes |
//! | `SURVIVE` | node → charmrun | empty | this job reports a node's death to the survivors instead of ending (`+set faults=report`) |
//! | `DEAD` | charmrun → node | node u32, why (UTF-8, rest) | that node is out of the job: it died, or was ended for being lost or silent |
//! | `SUSPECT` | node → charmrun | node u32, why (UTF-8, rest) | my connection to that node failed: end it and tell the others (report mode) |
//! | `BCAST` | node → charmrun, then charmrun → every node | the blob | the root of a broadcast gives its blob; charmrun hands it to every node still in the job, the root too, in the order the roots' frames came |
//!
//! An agent (`charmrun ++agent`, one per host) is to its nodes what charmrun is: they connect
//! to it with the same frames. It relays them to charmrun over its one connection, and sends
//! the node table, `DIE` (to the agent: end every node here) and barrier releases down.
//! Agents below an agent (a tree) connect to it as it connects to charmrun; it passes their
//! frames up and charmrun's down unchanged. Barriers are gathered on the way: an agent sends
//! one `BARRIER` of its own once its nodes and the agents below it all have, and gets one
//! `RELEASE` for all of them. Heartbeats too: an agent sends one `HEARTBEAT` of its own every
//! interval, its body naming the nodes of its tree that have gone silent (as `LOST`'s).
//!
//! A node that sends nothing for `++hang-timeout` (a stopped or frozen process) ends the job.
//! A node whose control connection closes exits at once: nothing of a job outlives its
//! charmrun.

use std::io::{self, Read, Write};

use converse_machine::bytes::{ByteReader, ByteWriter};
pub use converse_machine::launch::{secret_from_hex, shm_prefix, SECRET_LEN};

/// How often a node's watchdog tells charmrun it still answers.
pub const HEARTBEAT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Largest control frame accepted: a node table for a very big job fits many times over, and a
/// stranger cannot make us allocate more.
pub const MAX_FRAME: usize = 64 << 20;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Node introduces itself.
    Hello = 1,
    /// The node table.
    Table = 2,
    /// Node reached the barrier.
    Barrier = 3,
    /// Barrier complete.
    Release = 4,
    /// Node leaves with an exit code.
    Ending = 5,
    /// Node aborts the job.
    Abort = 6,
    /// Charmrun ends the job.
    Die = 7,
    /// Node still answers.
    Heartbeat = 8,
    /// An agent introduces itself.
    Agent = 9,
    /// What an agent starts.
    Plan = 10,
    /// A node's frame through its agent.
    Relay = 11,
    /// A node's process exited (relayed).
    Exited = 12,
    /// A node's connection to its agent closed (relayed).
    Closed = 13,
    /// An agent below is gone, and its nodes with it.
    Lost = 14,
    /// The job reports deaths instead of ending.
    Survive = 15,
    /// A node is out of the job (report mode).
    Dead = 16,
    /// A node's peer seems dead to it (report mode).
    Suspect = 17,
    /// A broadcast's blob: from its root up, then to every node.
    Bcast = 18,
}

impl Kind {
    /// The kind of byte `b`, if it is one.
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Table,
            3 => Kind::Barrier,
            4 => Kind::Release,
            5 => Kind::Ending,
            6 => Kind::Abort,
            7 => Kind::Die,
            8 => Kind::Heartbeat,
            9 => Kind::Agent,
            10 => Kind::Plan,
            11 => Kind::Relay,
            12 => Kind::Exited,
            13 => Kind::Closed,
            14 => Kind::Lost,
            15 => Kind::Survive,
            16 => Kind::Dead,
            17 => Kind::Suspect,
            18 => Kind::Bcast,
            _ => return None,
        })
    }
}

/// The body of a `DEAD` or `SUSPECT` frame: the node, then why.
pub fn node_why(node: usize, why: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + why.len());
    b.extend_from_slice(&(node as u32).to_le_bytes());
    b.extend_from_slice(why.as_bytes());
    b
}

/// Decode [`node_why`]'s body; `None` when too short.
pub fn parse_node_why(body: &[u8]) -> Option<(usize, String)> {
    let (node, why) = body.split_first_chunk::<4>()?;
    Some((
        u32::from_le_bytes(*node) as usize,
        String::from_utf8_lossy(why).into_owned(),
    ))
}

/// Write one frame.
///
/// # Errors
/// The socket's.
pub fn write_frame(w: &mut impl Write, kind: Kind, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len() + 1)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "control frame too large"))?;
    let mut buf = Vec::with_capacity(5 + body.len());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.push(kind as u8);
    buf.extend_from_slice(body);
    w.write_all(&buf)
}

/// Read one frame.
///
/// # Errors
/// The socket's; `InvalidData` for an unknown kind or a length out of range.
pub fn read_frame(r: &mut impl Read) -> io::Result<(Kind, Vec<u8>)> {
    read_frame_limited(r, MAX_FRAME)
}

/// Read one frame of at most `max` bytes (for peers not yet trusted).
///
/// # Errors
/// As [`read_frame`].
pub fn read_frame_limited(r: &mut impl Read, max: usize) -> io::Result<(Kind, Vec<u8>)> {
    let len = read_frame_len(r, max)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    split_kind(body)
}

/// Read a frame's length field: a length from 1 to `max` (and [`MAX_FRAME`]).
///
/// # Errors
/// `InvalidData` for a length out of range; the reader's.
pub fn read_frame_len(r: &mut impl Read, max: usize) -> io::Result<usize> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > max.min(MAX_FRAME) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control frame of {len} bytes"),
        ));
    }
    Ok(len)
}

/// A frame's kind and body, from what followed its length (at least one byte).
///
/// # Errors
/// `InvalidData` for a kind that is not one of [`Kind`].
pub fn split_kind(mut body: Vec<u8>) -> io::Result<(Kind, Vec<u8>)> {
    let first = body.first().copied().unwrap_or(0);
    let kind = Kind::from_u8(first).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control frame kind {first}"),
        )
    })?;
    body.remove(0);
    Ok((kind, body))
}

/// The whole frame at the front of `buf`, the bytes of a connection read so far (the sans-IO
/// form of [`read_frame`], for a reader serving many connections from one thread), and how
/// many bytes of `buf` it took: `None` until the frame is whole. The caller drops the bytes
/// taken (once for all the frames of a read: dropping them per frame would move the rest each
/// time).
///
/// # Errors
/// `InvalidData` for a length out of range (known from the first four bytes) or a kind unknown.
pub fn take_frame(buf: &[u8]) -> io::Result<Option<(usize, Kind, Vec<u8>)>> {
    let Some(len) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(*len) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control frame of {len} bytes"),
        ));
    }
    let Some(frame) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    let (kind, body) = split_kind(frame.to_vec())?;
    Ok(Some((4 + len, kind, body)))
}

/// A node's introduction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The job secret the node was given.
    pub secret: [u8; SECRET_LEN],
    /// Which node it is.
    pub node: u32,
    /// Its process id (on its host).
    pub pid: u32,
    /// Its host name.
    pub host: String,
    /// Layer-specific: how to reach it.
    pub info: Vec<u8>,
}

impl Hello {
    /// Encode as a `HELLO` body.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.host.len() + self.info.len());
        b.extend_from_slice(&self.secret);
        b.put_u32(self.node);
        b.put_u32(self.pid);
        b.put_str(&self.host);
        b.extend_from_slice(&self.info);
        b
    }

    /// Decode a `HELLO` body; `None` if it is not one.
    pub fn decode(b: &[u8]) -> Option<Hello> {
        let mut r = ByteReader::new(b);
        Some(Hello {
            secret: r.array().ok()?,
            node: r.u32().ok()?,
            pid: r.u32().ok()?,
            host: r.str().ok()?.to_owned(),
            info: r.rest().to_vec(),
        })
    }
}

/// Compare secrets in time independent of where they differ.
pub fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Hex form of a secret, for the environment.
pub fn secret_to_hex(s: &[u8; SECRET_LEN]) -> String {
    hex(s)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from the system's random source.
fn random<const N: usize>() -> Result<[u8; N], getrandom::Error> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b)?;
    Ok(b)
}

/// A fresh job tag: 8 random bytes in hex. Not secret: it names the job's files.
///
/// # Errors
/// When the system's random source cannot be read.
pub fn new_tag() -> Result<String, getrandom::Error> {
    Ok(hex(&random::<8>()?))
}

/// A fresh random secret.
///
/// # Errors
/// When the system's random source cannot be read.
pub fn new_secret() -> Result<[u8; SECRET_LEN], getrandom::Error> {
    random()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_truncations() {
        let h = Hello {
            secret: [7; SECRET_LEN],
            node: 3,
            pid: 1234,
            host: "host-a".into(),
            info: vec![1, 2, 3, 4, 5, 6],
        };
        let b = h.encode();
        assert_eq!(Hello::decode(&b), Some(h));
        for len in 0..(SECRET_LEN + 12 + 6) {
            assert_eq!(Hello::decode(&b[..len]), None, "len {len}");
        }
    }

    /// Frames taken from bytes as they come, a byte at a time or all at once, are the frames
    /// written, in order, and nothing is left; a bad length or kind is an error at once.
    #[test]
    fn frames_are_taken_whole_from_bytes_as_they_come() {
        let mut wire = Vec::new();
        write_frame(&mut wire, Kind::Barrier, &[]).expect("write");
        write_frame(&mut wire, Kind::Ending, &7i32.to_le_bytes()).expect("write");
        write_frame(&mut wire, Kind::Bcast, &[9; 300]).expect("write");
        let want = vec![
            (Kind::Barrier, vec![]),
            (Kind::Ending, 7i32.to_le_bytes().to_vec()),
            (Kind::Bcast, vec![9; 300]),
        ];
        for step in [1, 3, 5, wire.len()] {
            let (mut buf, mut got) = (Vec::new(), Vec::new());
            for piece in wire.chunks(step) {
                buf.extend_from_slice(piece);
                let mut at = 0;
                while let Some((used, k, body)) = take_frame(&buf[at..]).expect("good frames") {
                    got.push((k, body));
                    at += used;
                }
                buf.drain(..at);
            }
            assert_eq!(got, want, "bytes {step} at a time");
            assert!(buf.is_empty());
        }
        assert!(take_frame(&0u32.to_le_bytes()).is_err());
        assert!(take_frame(&u32::MAX.to_le_bytes()).is_err());
        assert!(take_frame(&[1, 0, 0, 0, 250]).is_err());
        assert!(matches!(take_frame(&[5, 0, 0]), Ok(None)));
        assert!(matches!(take_frame(&[5, 0, 0, 0, 1]), Ok(None)));
    }

    #[test]
    fn frames_round_trip_and_bad_frames_are_errors() {
        let mut buf = Vec::new();
        write_frame(&mut buf, Kind::Ending, &3i32.to_le_bytes()).expect("write");
        let (k, body) = read_frame(&mut buf.as_slice()).expect("read");
        assert_eq!((k, body), (Kind::Ending, 3i32.to_le_bytes().to_vec()));
        for bad in [
            &[0u8, 0, 0, 0][..],
            &[1, 0, 0, 0, 99],
            &[0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(read_frame(&mut &bad[..]).is_err());
        }
    }

    #[test]
    fn secrets() {
        let s = new_secret().expect("random source");
        assert_eq!(secret_from_hex(&secret_to_hex(&s)), Some(s));
        assert_eq!(secret_from_hex("zz"), None);
        assert!(secrets_equal(&s, &s));
        assert!(!secrets_equal(&s, &[0; SECRET_LEN]));
    }
}
