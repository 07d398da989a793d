//! Connections between nodes: one per pair, opened on first use, always by the lower-numbered
//! node, and used both ways (so replies carry TCP's acknowledgements, and FIFO per pair is
//! TCP's own).
//!
//! When the higher-numbered node is first to send, it opens a short *request* connection to
//! the lower one and queues its messages; the lower node answers by opening the pair's
//! connection, and the queue goes out on it. Two nodes reaching for each other at once
//! therefore still end up with one connection.
//!
//! A connection opens with `[secret (16 B)][word u32 LE]`, the word being the sender's node
//! number, with the top bit set for a request. The accepting side reads exactly those 20 bytes
//! (never more: frames follow at once) and closes any connection that does not present the job
//! secret and a node number that may open this kind of connection to it: a stranger.

use converse_bootstrap::protocol::{secrets_equal, SECRET_LEN};
use converse_machine::{MachineError, NodeTable};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Bytes a connecting node sends first.
pub(crate) const INTRO: usize = SECRET_LEN + 4;

/// How long an accepted connection may take to introduce itself before it is closed.
pub(crate) const INTRO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long opening a connection to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Refused connections, in a row, after which a peer is taken for dead: with the pauses
/// doubling from [`FIRST_PAUSE`], about 75 ms after the first.
const REFUSALS_MEAN_DEAD: u32 = 5;

/// The pause after a first failed connect; it doubles after each, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause between two connects to one peer.
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// A node's listening address as it travels in the node table.
pub(crate) fn encode_addr(a: SocketAddr) -> Vec<u8> {
    a.to_string().into_bytes()
}

/// The inverse of [`encode_addr`].
///
/// # Errors
/// [`MachineError::Boot`] when the table's entry is missing or malformed.
pub(crate) fn decode_addr(table: &NodeTable, node: usize) -> Result<SocketAddr, MachineError> {
    let bad =
        |why: &str| MachineError::Boot(format!("node {node}'s address in the node table {why}"));
    let info = table.node(node).ok_or_else(|| bad("is missing"))?;
    std::str::from_utf8(&info.addr)
        .map_err(|_| bad("is not text"))?
        .parse()
        .map_err(|_| bad("does not parse"))
}

/// Top bit of the introduction's word: "connect back to me".
const REQUEST: u32 = 1 << 31;

/// What an introduction asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// This is the pair's connection.
    Data,
    /// Open the pair's connection to me.
    Request,
}

/// Open a connection from `me` to `addr` and introduce it as `kind`; returned non-blocking.
///
/// # Errors
/// The socket's, as text for a `PeerDead`.
pub(crate) fn open(
    addr: SocketAddr,
    me: usize,
    kind: Kind,
    secret: &[u8; SECRET_LEN],
) -> Result<TcpStream, String> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut pause = FIRST_PAUSE;
    let mut refused = 0;
    let mut s = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("cannot connect to {addr}: {e}"))
            }
            // Every node listens before any learns the table, and Linux drops a connection
            // to a full backlog rather than refusing it: a refusal is a process gone (its
            // port closed). A few, spaced out, and it is dead: the caller reports it instead
            // of knocking on its port for the whole timeout.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                refused += 1;
                if refused >= REFUSALS_MEAN_DEAD {
                    return Err(format!("cannot connect to {addr}: {e} ({refused} times)"));
                }
            }
            // Anything else (a backlog full for a moment when many nodes connect at once, a
            // route not there yet) may pass: try again until the deadline.
            Err(_) => {}
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    };
    let mut intro = [0u8; INTRO];
    intro[..SECRET_LEN].copy_from_slice(secret);
    let word = me as u32 | if kind == Kind::Request { REQUEST } else { 0 };
    intro[SECRET_LEN..].copy_from_slice(&word.to_le_bytes());
    s.set_nodelay(true)
        .and_then(|()| s.write_all(&intro))
        .and_then(|()| s.set_nonblocking(true))
        .map_err(|e| format!("introducing ourselves to {addr}: {e}"))?;
    Ok(s)
}

/// An accepted connection that has not finished introducing itself.
pub(crate) struct Pending {
    pub stream: TcpStream,
    got: [u8; INTRO],
    have: usize,
    since: Instant,
}

/// What became of a pending connection.
pub(crate) enum Intro {
    /// Still waiting for bytes.
    Waiting(Pending),
    /// A node of the job: this one, asking for this.
    Node(usize, Kind, TcpStream),
    /// Not one of ours (wrong secret, bad node number, silence, error): closed.
    Stranger,
}

impl Pending {
    /// A freshly accepted (non-blocking) connection.
    pub(crate) fn new(stream: TcpStream) -> Pending {
        Pending {
            stream,
            got: [0; INTRO],
            have: 0,
            since: Instant::now(),
        }
    }

    /// How long since it was accepted.
    pub(crate) fn silent_for(&self) -> Duration {
        self.since.elapsed()
    }

    /// Read what has come of the introduction and judge it. `allowed(n, kind)` says whether
    /// node `n` may open such a connection to us now.
    pub(crate) fn advance(
        mut self,
        secret: &[u8; SECRET_LEN],
        nodes: usize,
        allowed: impl Fn(usize, Kind) -> bool,
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
        let word = u32::from_le_bytes([self.got[16], self.got[17], self.got[18], self.got[19]]);
        let kind = if word & REQUEST != 0 {
            Kind::Request
        } else {
            Kind::Data
        };
        let node = (word & !REQUEST) as usize;
        if !secrets_equal(&self.got[..SECRET_LEN], secret) || node >= nodes || !allowed(node, kind)
        {
            return Intro::Stranger;
        }
        Intro::Node(node, kind, self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nobody listens on any more (the peer's process is gone) is given up after a few
    /// refusals, well before the timeout, saying it was refused: the caller reports the peer
    /// dead rather than knocking for 10 s (the tree overlay's `chain` recovery took 10 s in
    /// most runs that way).
    #[test]
    fn a_closed_port_is_given_up_after_a_few_refusals() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        drop(l);
        let start = Instant::now();
        let e = open(addr, 0, Kind::Data, &[0; SECRET_LEN]).expect_err("nobody listens");
        assert!(e.contains("refused") && e.contains("5 times"), "{e}");
        assert!(
            start.elapsed() < CONNECT_TIMEOUT / 4,
            "{:?}",
            start.elapsed()
        );
    }
}
