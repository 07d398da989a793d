//! Connections between nodes, opened on first use, one per direction.
//!
//! Node `i` sends to node `j` only on a connection `i` opened, and receives from `j` only on
//! one `j` opened. FIFO per pair then follows from TCP's, two nodes opening towards each other
//! at once cannot collide, and a job pays only for the pairs that talk.
//!
//! A connection opens with `[secret (16 B)][sender's node number u32 LE]`. The accepting side
//! reads exactly those 20 bytes (never more: frames follow at once) and closes any connection
//! that does not present the job secret and a node number it has not seen yet: a stranger.

use charmrun::protocol::{secrets_equal, SECRET_LEN};
use machine::{MachineError, NodeTable};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Bytes a connecting node sends first.
pub const INTRO: usize = SECRET_LEN + 4;

/// How long an accepted connection may take to introduce itself before it is closed.
pub const INTRO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long opening a connection to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's listening address as it travels in the node table.
pub fn encode_addr(a: SocketAddr) -> Vec<u8> {
    a.to_string().into_bytes()
}

/// The inverse of [`encode_addr`].
///
/// # Errors
/// [`MachineError::Boot`] when the table's entry is missing or malformed.
pub fn decode_addr(table: &NodeTable, node: usize) -> Result<SocketAddr, MachineError> {
    let bad =
        |why: &str| MachineError::Boot(format!("node {node}'s address in the node table {why}"));
    let info = table.node(node).ok_or_else(|| bad("is missing"))?;
    std::str::from_utf8(&info.addr)
        .map_err(|_| bad("is not text"))?
        .parse()
        .map_err(|_| bad("does not parse"))
}

/// Open the connection from `me` to `addr` and introduce ourselves; returned non-blocking.
///
/// # Errors
/// The socket's, as text for a `PeerDead`.
pub fn open(addr: SocketAddr, me: usize, secret: &[u8; SECRET_LEN]) -> Result<TcpStream, String> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut s = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("cannot connect to {addr}: {e}"))
            }
            // A full backlog refuses for a moment when many nodes connect at once.
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let mut intro = [0u8; INTRO];
    intro[..SECRET_LEN].copy_from_slice(secret);
    intro[SECRET_LEN..].copy_from_slice(&(me as u32).to_le_bytes());
    s.set_nodelay(true)
        .and_then(|()| s.write_all(&intro))
        .and_then(|()| s.set_nonblocking(true))
        .map_err(|e| format!("introducing ourselves to {addr}: {e}"))?;
    Ok(s)
}

/// An accepted connection that has not finished introducing itself.
pub struct Pending {
    pub stream: TcpStream,
    got: [u8; INTRO],
    have: usize,
    since: Instant,
}

/// What became of a pending connection.
pub enum Intro {
    /// Still waiting for bytes.
    Waiting(Pending),
    /// A node of the job: this one.
    Node(usize, TcpStream),
    /// Not one of ours (wrong secret, bad node number, silence, error): closed.
    Stranger,
}

impl Pending {
    /// A freshly accepted (non-blocking) connection.
    pub fn new(stream: TcpStream) -> Pending {
        Pending {
            stream,
            got: [0; INTRO],
            have: 0,
            since: Instant::now(),
        }
    }

    /// Read what has come of the introduction and judge it. `known(n)` says whether node `n`
    /// already has a connection to us.
    pub fn advance(
        mut self,
        secret: &[u8; SECRET_LEN],
        nodes: usize,
        known: impl Fn(usize) -> bool,
    ) -> Intro {
        while self.have < INTRO {
            match self.stream.read(&mut self.got[self.have..]) {
                Ok(0) => return Intro::Stranger,
                Ok(n) => self.have += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return if self.since.elapsed() > INTRO_TIMEOUT {
                        Intro::Stranger
                    } else {
                        Intro::Waiting(self)
                    };
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Intro::Stranger,
            }
        }
        let node =
            u32::from_le_bytes([self.got[16], self.got[17], self.got[18], self.got[19]]) as usize;
        if !secrets_equal(&self.got[..SECRET_LEN], secret) || node >= nodes || known(node) {
            return Intro::Stranger;
        }
        Intro::Node(node, self.stream)
    }
}
