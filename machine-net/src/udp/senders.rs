//! Connected send sockets, one per peer, for a node of a job of three nodes or more.
//!
//! A datagram sent with an address (`sendto` on the node's one unconnected socket) costs the
//! kernel a route lookup each time, about 0.5 µs on loopback; a connected socket keeps its
//! route. The node's socket cannot be connected to several peers, and connected sockets
//! sharing its address would take their peer's datagrams from it (Linux delivers a datagram
//! to the socket whose four-tuple matches best), leaving several sockets to read. So the
//! send sockets get an address of their own: all are bound, with `SO_REUSEADDR`, to one
//! second port of the node's IP, each connected to one peer's receiving address. Nobody sends
//! to that port (peers send to the node's socket), so the send sockets never receive and the
//! node still reads one socket; a peer learns the port from the node table and accepts
//! datagrams from it as from the node's socket.
//!
//! A socket is opened on the first send to a peer, up to `udp.connected_peers` of them;
//! beyond the limit (or if one cannot be opened) the peer is sent to from the node's socket,
//! with an address. A peer out of the job has its socket closed.

use super::socket::set_sndbuf;
use nix::sys::socket::{
    bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

/// A peer's sending state.
enum Slot {
    /// Not sent to yet.
    Untried,
    /// Its connected socket, and the address it is connected to.
    Open(UdpSocket, SocketAddr),
    /// Sent to from the node's socket: beyond the limit, a socket that could not be opened,
    /// or a peer out of the job.
    Off,
}

/// The node's send sockets.
pub(super) struct Senders {
    /// Holds the port while no peer has a socket (never connected, never read; its receive
    /// buffer is the smallest there is, so a stray datagram costs nothing). Only kept.
    _anchor: UdpSocket,
    /// Where the sockets are bound: the node's IP, the second port.
    local: SocketAddr,
    /// Send buffer asked for per socket, bytes (the node socket's).
    sndbuf: usize,
    /// Per node.
    slots: Vec<Slot>,
    /// Sockets open.
    open: usize,
    /// Most sockets open at once (`udp.connected_peers`).
    limit: usize,
}

/// A UDP socket on `local` that other sockets may share (`SO_REUSEADDR`), non-blocking.
/// The anchor (`anchor: true`) binds a port of its own first and allows sharing only then:
/// bound with `SO_REUSEADDR` already set, it could be given a port another node's anchor holds
/// (Linux does not count a port held by a socket that allows sharing as taken).
fn shared_socket(local: SocketAddr, anchor: bool) -> io::Result<UdpSocket> {
    let family = if local.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    if !anchor {
        setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    }
    // Nothing is ever read from these sockets: the kernel's smallest receive buffer.
    setsockopt(&fd, sockopt::RcvBuf, &0)?;
    bind(fd.as_raw_fd(), &SockaddrStorage::from(local))?;
    if anchor {
        setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    }
    Ok(UdpSocket::from(fd))
}

impl Senders {
    /// Bind the anchor on `ip`, any port, for a job of `nodes` nodes; peers' sockets will ask
    /// for `sndbuf` bytes of send buffer, and at most `limit` will be open.
    ///
    /// # Errors
    /// The OS's, when the anchor cannot be made.
    pub(super) fn bind(
        ip: IpAddr,
        nodes: usize,
        sndbuf: usize,
        limit: usize,
    ) -> io::Result<Senders> {
        let anchor = shared_socket(SocketAddr::new(ip, 0), true)?;
        let local = anchor.local_addr()?;
        Ok(Senders {
            _anchor: anchor,
            local,
            sndbuf,
            slots: (0..nodes).map(|_| Slot::Untried).collect(),
            open: 0,
            limit,
        })
    }

    /// The address the send sockets send from.
    pub(super) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Sockets open now.
    pub(super) fn open(&self) -> usize {
        self.open
    }

    /// The socket to send to `peer` at `to` from, connected to it: opened now if this is the
    /// first send to it and the limit allows; `None` to send from the node's socket.
    #[inline]
    pub(super) fn fd(&mut self, peer: usize, to: &SocketAddr) -> Option<RawFd> {
        match self.slots.get(peer)? {
            Slot::Open(s, a) if a == to => Some(s.as_raw_fd()),
            Slot::Untried => self.open_for(peer, to),
            _ => None,
        }
    }

    /// First send to `peer`: connect a socket to it, within the limit.
    #[cold]
    fn open_for(&mut self, peer: usize, to: &SocketAddr) -> Option<RawFd> {
        if self.open >= self.limit {
            self.slots[peer] = Slot::Off;
            return None;
        }
        match self.connect(to) {
            Ok(s) => {
                let fd = s.as_raw_fd();
                self.slots[peer] = Slot::Open(s, *to);
                self.open += 1;
                Some(fd)
            }
            Err(e) => {
                // Out of descriptors, say: this peer is sent to from the node's socket.
                tracing::debug!(target: "udp", peer, "no connected socket: {e}");
                self.slots[peer] = Slot::Off;
                None
            }
        }
    }

    fn connect(&self, to: &SocketAddr) -> io::Result<UdpSocket> {
        let s = shared_socket(self.local, false)?;
        set_sndbuf(&s, self.sndbuf)?;
        connect(s.as_raw_fd(), &SockaddrStorage::from(*to))?;
        Ok(s)
    }

    /// `peer` is out of the job: close its socket; its place may go to another peer.
    pub(super) fn forget(&mut self, peer: usize) {
        if let Some(slot) = self.slots.get_mut(peer) {
            if matches!(slot, Slot::Open(..)) {
                self.open -= 1;
            }
            *slot = Slot::Off;
        }
    }

    /// `peer`'s socket, if open.
    pub(super) fn socket(&self, peer: usize) -> Option<BorrowedFd<'_>> {
        match self.slots.get(peer)? {
            Slot::Open(s, _) => Some(s.as_fd()),
            _ => None,
        }
    }
}

/// The default of `udp.connected_peers`: a quarter of the process's descriptor limit
/// (`RLIMIT_NOFILE`, soft), at most 256, so that the rest of the program keeps most of them.
pub(super) fn default_limit() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    usize::try_from(soft / 4).unwrap_or(usize::MAX).min(256)
}

#[cfg(test)]
mod tests {
    use super::super::link::Transmit;
    use super::super::socket::{Arrived, Socket};
    use super::*;
    use std::time::{Duration, Instant};

    fn ip() -> IpAddr {
        "127.0.0.1".parse().expect("ip")
    }

    /// A node's socket that sends from connected sockets, for a job of `nodes`.
    fn node_with_senders(nodes: usize, limit: usize) -> (Socket, SocketAddr) {
        let mut s = Socket::bind(ip(), 65535).expect("bind");
        let senders = Senders::bind(ip(), nodes, 1 << 20, limit).expect("senders");
        let from = senders.local_addr();
        s.send_from(senders);
        (s, from)
    }

    /// Node `a` of a 3-node job, sending from connected sockets (`limit` at most), its send
    /// port and its own address; and two plain peers, `b` and `c`, with their addresses.
    struct Trio {
        a: Socket,
        a_sends: SocketAddr,
        a_addr: SocketAddr,
        b: Socket,
        b_addr: SocketAddr,
        c: Socket,
        c_addr: SocketAddr,
    }

    fn trio(limit: usize) -> Trio {
        let (a, a_sends) = node_with_senders(3, limit);
        let a_addr = a.local_addr().expect("addr");
        let b = Socket::bind(ip(), 65535).expect("bind");
        let c = Socket::bind(ip(), 65535).expect("bind");
        let (b_addr, c_addr) = (b.local_addr().expect("addr"), c.local_addr().expect("addr"));
        Trio {
            a,
            a_sends,
            a_addr,
            b,
            b_addr,
            c,
            c_addr,
        }
    }

    /// The next datagram `s` receives, and where it came from.
    fn next(s: &mut Socket) -> (Vec<u8>, SocketAddr) {
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < end, "nothing arrived");
            s.wait(false, None, Duration::from_millis(100))
                .expect("wait");
            // SAFETY: no landing zone.
            if unsafe { s.recv(&[]) }.expect("recv") > 0 {
                let Some(Arrived::Bytes(d, from)) = s.datagram(0) else {
                    panic!("a whole datagram");
                };
                return (d.to_vec(), from);
            }
        }
    }

    #[test]
    fn each_peer_is_sent_to_from_the_send_port_and_receives_on_its_one_socket() {
        let mut t = trio(2);
        assert_eq!(t.a_sends.ip(), t.a_addr.ip());
        assert_ne!(t.a_sends.port(), t.a_addr.port());
        assert!(t.a.transmit_one(1, &t.b_addr, b"to b").expect("send"));
        assert_eq!(
            t.a.transmit(2, &t.c_addr, &[[b"to ", b"c"]]).expect("send"),
            1
        );
        assert_eq!(next(&mut t.b), (b"to b".to_vec(), t.a_sends));
        assert_eq!(next(&mut t.c), (b"to c".to_vec(), t.a_sends));
        assert_eq!(t.a.senders_open(), 2);
        // The peers answer to the node's socket: it gets their datagrams, not the send
        // sockets connected to them.
        assert!(t.b.transmit_one(0, &t.a_addr, b"from b").expect("send"));
        assert!(t.c.transmit_one(0, &t.a_addr, b"from c").expect("send"));
        let mut got = [next(&mut t.a), next(&mut t.a)];
        got.sort();
        assert_eq!(
            got,
            [
                (b"from b".to_vec(), t.b_addr),
                (b"from c".to_vec(), t.c_addr)
            ]
        );
    }

    #[test]
    fn past_the_limit_a_peer_is_sent_to_from_the_nodes_socket() {
        let mut t = trio(1);
        assert!(t.a.transmit_one(1, &t.b_addr, b"1").expect("send"));
        assert!(t.a.transmit_one(2, &t.c_addr, b"2").expect("send"));
        assert_eq!(next(&mut t.b).1, t.a_sends);
        assert_eq!(next(&mut t.c).1, t.a_addr);
        assert_eq!(t.a.senders_open(), 1);
    }

    #[test]
    fn a_forgotten_peers_socket_is_closed_and_its_place_given_to_another() {
        let mut t = trio(1);
        assert!(t.a.transmit_one(1, &t.b_addr, b"1").expect("send"));
        assert_eq!(next(&mut t.b).1, t.a_sends);
        t.a.forget(1);
        assert_eq!(t.a.senders_open(), 0);
        assert!(t.a.transmit_one(2, &t.c_addr, b"2").expect("send"));
        assert_eq!(next(&mut t.c).1, t.a_sends);
        // A forgotten peer gets no socket again (what is still sent to it, a farewell say,
        // leaves from the node's socket).
        assert!(t.a.transmit_one(1, &t.b_addr, b"3").expect("send"));
        assert_eq!(next(&mut t.b).1, t.a_addr);
        assert_eq!(t.a.senders_open(), 1);
    }

    /// 500 anchors (half a default descriptor limit): were a port that allows sharing free
    /// to be handed out again, some 4–5 of them would collide (measured with 2,000 and the
    /// anchor bound with `SO_REUSEADDR` set: 58 collisions).
    #[test]
    fn two_nodes_of_a_host_get_send_ports_of_their_own() {
        let anchors: Vec<Senders> = (0..500)
            .map(|_| Senders::bind(ip(), 3, 1 << 16, 1).expect("senders"))
            .collect();
        let mut ports: Vec<u16> = anchors.iter().map(|s| s.local_addr().port()).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(
            ports.len(),
            anchors.len(),
            "a send port was handed out twice"
        );
    }
}
