//! The seam between the protocol, which touches no socket, and whatever carries its
//! datagrams (the node's socket, or a simulated network in tests): where datagrams go
//! ([`Transmit`]), and where a datagram the protocol expects should land ([`Landing`]) so the
//! kernel receives a large message's fragments straight into its buffer.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

/// Where datagrams go.
pub trait Transmit {
    /// Send datagrams to node `peer` at `to`, each the concatenation of its two parts, in
    /// order. Returns how many were taken (a prefix of `dgrams`); fewer than all means the
    /// socket is full for now. (`peer` lets a socket keep a connected socket per peer.)
    ///
    /// # Errors
    /// A failure that is not "full" (the OS's).
    fn transmit(
        &mut self,
        peer: usize,
        to: &SocketAddr,
        dgrams: &[[&[u8]; 2]],
    ) -> io::Result<usize>;

    /// Send one datagram held in one piece; whether the socket took it. (A socket may do
    /// this more cheaply than a batch: no descriptor array for the kernel to copy in.)
    ///
    /// # Errors
    /// As [`transmit`](Self::transmit).
    fn transmit_one(&mut self, peer: usize, to: &SocketAddr, dgram: &[u8]) -> io::Result<bool> {
        self.transmit(peer, to, &[[dgram, &[]]]).map(|n| n == 1)
    }

    /// The largest datagram (UDP payload) worth sending to `to`.
    fn max_datagram(&mut self, to: &SocketAddr) -> usize;

    /// When a batch handed over at `began` had left: the clock, read again, for a socket (a
    /// large batch takes the kernel a while); `began` itself for a carrier with a clock of its
    /// own (a simulated network must not mix in the real one).
    fn left_at(&self, began: Instant) -> Instant {
        let _ = began;
        Instant::now()
    }
}

/// A place where a datagram is expected: the missing fragment `index` (packet `seq`) of a
/// message from node `src` at `from`, to be received straight into `ptr .. ptr + len`.
#[derive(Debug, Clone, Copy)]
pub struct Landing {
    /// The peer's address.
    pub from: SocketAddr,
    /// The peer's node number.
    pub src: u16,
    /// The packet's sequence number (low 32 bits).
    pub seq: u32,
    /// Its fragment index.
    pub index: u32,
    /// Its place in the message's buffer, valid until the endpoint is next changed.
    pub ptr: *mut u8,
    /// Its exact length.
    pub len: usize,
}

impl Landing {
    /// No place.
    pub const NONE: Landing = Landing {
        from: SocketAddr::V4(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::UNSPECIFIED,
            0,
        )),
        src: 0,
        seq: 0,
        index: 0,
        ptr: std::ptr::null_mut(),
        len: 0,
    };
}
