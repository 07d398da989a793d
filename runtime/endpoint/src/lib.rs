//! Open jobs: a PE listens on an address string and programs started apart connect to it —
//! another converse job, or a plain process using this crate without charmrun — and exchange
//! messages and calls with replies, naming the handler by name (Mercury's addresses and RPCs,
//! FastFlow's distributed groups, MRNet's attach mode all rest on this).
//!
//! - **Addresses** ([`Address`]): `tcp://HOST:PORT`, `udp://HOST:PORT` (a reliable stream of
//!   the crate's own over datagrams: one UDP socket per listener, peers told apart by source
//!   address; ordered, windowed, fragments, keepalive; a listener keeps no state for an
//!   `OPEN` until its cookie comes back), and `si://NAME` between processes of
//!   one host; other schemes are refused with one line naming the address and what this
//!   build offers.
//! - **Secrets** ([`Secret`]): a listener accepts only programs that prove its secret (never
//!   sent: a challenge each way), which it prints or writes to a file only its owner reads.
//!   Strangers and wrong secrets are refused with a line on the job's stderr (at most one a
//!   second) and the job goes on.
//! - **In a job** ([`Endpoints`]): `listen`, `connect`, handlers by name (`on`), `send`,
//!   `call` with a reply, and [`PeerEvent`]s: a peer joined, left (an event, never the end of
//!   the job), or drained after a refused send.
//! - **In a plain process** ([`Connection`]): connect, send, call, receive, reply — blocking,
//!   with timeouts; over `udp://`, [`Connection::udp_stats`] counts what the protocol
//!   repaired ([`UdpStats`]).
//! - **Bounds** ([`Limits`]): per connection, what waits to be written, what was read and not
//!   yet handled, and the largest message; a stalled peer stops its sender (refused sends) or
//!   is no longer read (TCP's window, or UDP's session's, stops it), so neither side's memory
//!   grows without bound.
//!
//! **Ordering.** Messages and calls from one side of a connection are handled in the order
//! sent; there is no ordering between connections. Delivery is at most once: a connection
//! that ends may have lost what was in flight, and a program that needs more (the
//! `producer`/`consumer` examples) acknowledges and resends by sequence number.
//!
//! The path of a message in: the PE's I/O thread reads the socket, copies the frame into a
//! message once and posts it to the PE's mailbox; the PE runs the handler. Out: the PE writes
//! the socket itself (one `writev`) when nothing waits, else queues and rings the I/O thread.
//! The wire format is tabulated in `wire.rs`, the I/O thread's messages to its PE in `io.rs`.

mod address;
mod client;
mod conn;
mod io;
mod job;
mod secret;
mod stream;
mod udp;
mod wire;

pub use address::{Address, AVAILABLE};
pub use client::{Connection, Received};
pub use conn::SendError;
pub use io::MAX_HANDSHAKES;
pub use job::{CallError, Endpoints, Incoming, Peer, PeerEvent};
pub use secret::Secret;
pub use udp::UdpStats;
pub use wire::MAX_NAME;

use std::time::Duration;

/// What can go wrong with an address, a secret or a connection: each one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// An address string this build cannot use.
    #[error("{addr}: {why}")]
    Address {
        /// The address string.
        addr: String,
        /// Why, naming what is available.
        why: String,
    },
    /// Nothing answered there, or not a listener holding the secret.
    #[error("{addr} is unreachable: {why}")]
    Unreachable {
        /// The address string.
        addr: String,
        /// Why.
        why: String,
    },
    /// The listener refused the connection (wrong secret, another protocol version).
    #[error("{addr} refused the connection: {why}")]
    Refused {
        /// The address string.
        addr: String,
        /// The listener's reason.
        why: String,
    },
    /// The socket could not be bound.
    #[error("cannot listen on {addr}: {why}")]
    Listen {
        /// The address string.
        addr: String,
        /// Why.
        why: String,
    },
    /// A secret that cannot be read or parsed.
    #[error("{0}")]
    Secret(String),
    /// The connection ended.
    #[error("the connection to {addr} ended: {why}")]
    Closed {
        /// The address string.
        addr: String,
        /// Why.
        why: String,
    },
    /// The other side has no handler of that name (a call's answer).
    #[error("{addr} has no handler '{name}'")]
    NoHandler {
        /// The address string.
        addr: String,
        /// The handler's name.
        name: String,
    },
    /// The other side's handler dropped the call without a reply.
    #[error("{addr}'s handler '{name}' dropped the call without a reply")]
    Unanswered {
        /// The address string.
        addr: String,
        /// The handler's name.
        name: String,
    },
    /// A call's reply did not come in time.
    #[error("no reply from {addr}'s handler '{name}' within {secs} s")]
    Timeout {
        /// The address string.
        addr: String,
        /// The handler's name.
        name: String,
        /// The time waited.
        secs: f64,
    },
    /// The operating system refused something else.
    #[error("{0}")]
    Io(String),
}

impl From<SendError> for EndpointError {
    fn from(e: SendError) -> EndpointError {
        EndpointError::Io(e.to_string())
    }
}

/// Bounds of one PE's connections (each applies per connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes waiting to be written to a peer before sends are refused (a message larger than
    /// this is still taken when nothing waits).
    pub queue_bytes: usize,
    /// Bytes read from a peer and not yet handled by the PE before the peer is no longer read.
    pub inbound_bytes: usize,
    /// The largest frame taken from a peer; a larger one ends the connection.
    pub max_message: usize,
    /// How long a handshake (and a connect) may take.
    pub handshake: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            queue_bytes: 8 << 20,
            inbound_bytes: 8 << 20,
            max_message: 256 << 20,
            handshake: Duration::from_secs(10),
        }
    }
}
