//! The node's UDP socket, on which everything it receives arrives (in a job of three nodes or
//! more, its sends to peers leave from [`Senders`]' connected sockets, chosen here per
//! datagram): non-blocking, large buffers, datagrams sent from two pieces
//! (header, then the message's own bytes) so no payload is copied to prepend a header, and
//! received in batches (`recvmmsg`: one system call for many datagrams) while a burst lasts.
//!
//! The message path's system calls (`recvmmsg`, `recvfrom`, `recvmsg`, `sendmmsg`, `sendmsg`,
//! `sendto`) are libc's, not nix's: nix's `recvmmsg`/`sendmmsg` take their headers from a
//! `MultiHeaders` and build them per call from iterators (with control-message space), its
//! `recvfrom` takes no flags (we need `MSG_DONTWAIT | MSG_TRUNC`) and always converts the source
//! address, and its `sendmsg` builds a fresh `msghdr` with a control buffer per call; here the
//! receive descriptors are made once and reused, and a send writes only the entries it uses.
//! Everything off that path (socket options, polling, errno, addresses) goes through nix.

use super::link::{Landing, Transmit};
use super::senders::Senders;
use super::wire::{self, MAX_DATA_HEADER};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::socket::{sockopt, SockaddrIn, SockaddrIn6, SockaddrLike, SockaddrStorage};
use nix::sys::time::TimeSpec;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// Datagrams taken by one `recvmmsg`.
pub(super) const RECV_BATCH: usize = 8;
/// Datagrams given to one `sendmmsg`.
pub(super) const SEND_BATCH: usize = 32;
/// Receive buffer per datagram: the largest UDP payload there is.
const RECV_BUF: usize = 65536;
/// Largest UDP payload over IPv4.
const MAX_UDP_PAYLOAD: usize = 65507;

/// The node's socket.
pub(super) struct Socket {
    sock: UdpSocket,
    ring: RecvRing,
    /// The last receive found datagrams: take the next ones in a batch. After a receive that
    /// found none, the next asks for one datagram only: waiting for a ping-pong's answer,
    /// that is cheaper (`recvmmsg` tries again for a second datagram after the first).
    burst: bool,
    /// Largest IP packet to send (`udp.mtu`).
    mtu: usize,
    /// The one address this node sends to, when the socket is connected to it.
    connected: Option<SocketAddr>,
    /// Connected send sockets per peer (jobs of three nodes or more).
    senders: Option<Senders>,
    /// The peer whose send socket was last found full (`None`: this socket).
    full: Option<usize>,
}

/// The receive buffers and the kernel's descriptors of them, made once: `recvmmsg` gets the
/// same headers on every call instead of freshly zeroed arrays.
struct RecvRing {
    /// `RECV_BATCH` buffers of `RECV_BUF` bytes.
    bufs: Vec<u8>,
    /// Per datagram up to three pieces: the whole buffer; or, for a datagram expected to be a
    /// fragment whose place is known, its header, its place, and the buffer for the rest.
    iov: Box<[[libc::iovec; 3]; RECV_BATCH]>,
    hdrs: Box<[libc::mmsghdr; RECV_BATCH]>,
    names: Box<[SockaddrStorage; RECV_BATCH]>,
    /// Where an expected fragment's header lands.
    heads: Box<[[u8; MAX_DATA_HEADER]; RECV_BATCH]>,
    lens: [usize; RECV_BATCH],
    from: [Option<SocketAddr>; RECV_BATCH],
    /// The datagram landed in its place (the expected fragment came).
    placed: [bool; RECV_BATCH],
    /// Datagrams the last receive took.
    got: usize,
}

// SAFETY: the raw pointers in `iov` and `hdrs` point into `bufs`, `iov`, `names` and
// `heads` (heap memory this struct owns and never reallocates), or, during one receive call
// only, into a landing zone the caller vouches for. Moving the struct to another thread moves
// that ownership with it.
unsafe impl Send for RecvRing {}

impl RecvRing {
    fn new() -> RecvRing {
        let mut r = RecvRing {
            bufs: vec![0u8; RECV_BATCH * RECV_BUF],
            iov: Box::new(zeroed_array()),
            hdrs: Box::new(zeroed_array()),
            names: Box::new(zeroed_array()),
            heads: Box::new([[0; MAX_DATA_HEADER]; RECV_BATCH]),
            lens: [0; RECV_BATCH],
            from: [None; RECV_BATCH],
            placed: [false; RECV_BATCH],
            got: 0,
        };
        for i in 0..RECV_BATCH {
            let name = std::ptr::addr_of_mut!(r.names[i]).cast();
            let iov = r.iov[i].as_mut_ptr();
            let h = &mut r.hdrs[i].msg_hdr;
            h.msg_iov = iov;
            h.msg_name = name;
        }
        r
    }

    /// Aim slot `i` at its own buffer, or, with a landing zone, at the zone.
    fn aim(&mut self, i: usize, land: Option<&Landing>) {
        let buf = self.bufs[i * RECV_BUF..].as_mut_ptr();
        let h = &mut self.hdrs[i].msg_hdr;
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_flags = 0;
        let iov = &mut self.iov[i];
        match land {
            None => {
                iov[0] = libc::iovec {
                    iov_base: buf.cast(),
                    iov_len: RECV_BUF,
                };
                h.msg_iovlen = 1;
            }
            Some(l) => {
                let rest = MAX_DATA_HEADER + l.len;
                iov[0] = libc::iovec {
                    iov_base: self.heads[i].as_mut_ptr().cast(),
                    iov_len: MAX_DATA_HEADER,
                };
                iov[1] = libc::iovec {
                    iov_base: l.ptr.cast(),
                    iov_len: l.len,
                };
                iov[2] = libc::iovec {
                    // SAFETY: `rest <= RECV_BUF` (a fragment's place is less than a datagram).
                    iov_base: unsafe { buf.add(rest) }.cast(),
                    iov_len: RECV_BUF - rest,
                };
                h.msg_iovlen = 3;
            }
        }
    }

    /// After a receive into slot `i` aimed at `land`: whether the expected fragment came (its
    /// payload is in place). If another datagram came, its pieces are moved together into the
    /// slot's own buffer, to be read like any other. Every slot must be settled before any
    /// datagram is acted on: acting on one may write into a zone another slot's stray
    /// datagram landed in.
    fn settle(&mut self, i: usize, land: &Landing) -> bool {
        let n = self.lens[i];
        let head = &self.heads[i];
        if n == MAX_DATA_HEADER + land.len
            && self.from[i] == Some(land.from)
            && wire::fragment_of(head) == Some((land.src, land.seq, land.index))
        {
            return true;
        }
        let buf = &mut self.bufs[i * RECV_BUF..(i + 1) * RECV_BUF];
        let h = n.min(MAX_DATA_HEADER);
        buf[..h].copy_from_slice(&head[..h]);
        let in_zone = n.saturating_sub(MAX_DATA_HEADER).min(land.len);
        // SAFETY: the zone holds `land.len >= in_zone` bytes the kernel just wrote; it is not
        // this buffer.
        let zone = unsafe { std::slice::from_raw_parts(land.ptr, in_zone) };
        buf[MAX_DATA_HEADER..MAX_DATA_HEADER + in_zone].copy_from_slice(zone);
        false
    }
}

/// An array of a plain C struct, all zero (null pointers, zero lengths): a valid value for
/// the kernel's iovec, mmsghdr and sockaddr storage, whose pointers are set before use.
fn zeroed_array<T: Copy, const N: usize>() -> [T; N] {
    // SAFETY: used only for libc's plain structs, for which all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// A datagram received.
#[derive(Debug)]
pub(super) enum Arrived<'a> {
    /// Its bytes, and who sent it.
    Bytes(&'a [u8], SocketAddr),
    /// An expected fragment, received in its place: its header, its length, who sent it.
    Placed {
        /// The header.
        head: &'a [u8],
        /// The whole datagram's length.
        len: usize,
        /// Who sent it.
        from: SocketAddr,
    },
}

/// A socket address as the kernel takes it.
enum RawAddr {
    V4(SockaddrIn),
    V6(SockaddrIn6),
}

impl RawAddr {
    fn new(a: &SocketAddr) -> RawAddr {
        match *a {
            SocketAddr::V4(v4) => RawAddr::V4(v4.into()),
            SocketAddr::V6(v6) => RawAddr::V6(v6.into()),
        }
    }

    /// Pointer and length, for a `msghdr`.
    fn parts(&self) -> (*mut libc::c_void, libc::socklen_t) {
        match self {
            RawAddr::V4(a) => (a.as_ptr() as *mut libc::c_void, a.len()),
            RawAddr::V6(a) => (a.as_ptr() as *mut libc::c_void, a.len()),
        }
    }
}

/// The address the kernel wrote into `s`, if of a family we speak.
fn from_storage(s: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(sin) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4((*sin).into()));
    }
    s.as_sockaddr_in6()
        .map(|sin6| SocketAddr::V6((*sin6).into()))
}

/// What a receive system call said: `Some(n)` datagrams (or bytes), `None` for nothing now.
/// (The error number is read directly: "nothing there" is the common answer of a poll, and
/// building an `io::Error` for it costs more than the check.)
fn received(r: isize) -> io::Result<Option<usize>> {
    if r >= 0 {
        return Ok(Some(r as usize));
    }
    match Errno::last_raw() {
        // Interrupted, or an ICMP error for an earlier send (a peer's port closed): nothing
        // now, the next call tries again. Silence from that peer is what the protocol watches.
        libc::EAGAIN | libc::EINTR | libc::ECONNREFUSED => Ok(None),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// What a send system call said: how many went (0: none now).
fn sent(r: isize) -> io::Result<usize> {
    if r >= 0 {
        return Ok(r as usize);
    }
    match Errno::last_raw() {
        // Full, or interrupted: the caller tries the rest later.
        libc::EAGAIN | libc::ENOBUFS | libc::EINTR => Ok(0),
        // A local firewall dropped it, or an ICMP error of an earlier datagram surfaced: as
        // good as lost on the way, which the protocol repairs.
        libc::EPERM | libc::ECONNREFUSED => Ok(1),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

impl Socket {
    /// A non-blocking UDP socket on `ip`, any port; `mtu` caps the datagrams it sends.
    ///
    /// # Errors
    /// The OS's, when the socket cannot be made.
    pub(super) fn bind(ip: IpAddr, mtu: usize) -> io::Result<Socket> {
        let sock = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        sock.set_nonblocking(true)?;
        Ok(Socket {
            sock,
            ring: RecvRing::new(),
            burst: false,
            mtu,
            connected: None,
            senders: None,
            full: None,
        })
    }

    /// Let in only this job's datagrams to node `me` (`filter.rs`), before anyone knows the
    /// socket's address.
    ///
    /// # Errors
    /// The kernel's.
    pub(super) fn admit_only(&self, tag: u64, me: u16) -> io::Result<()> {
        super::filter::admit_only(self.sock.as_fd(), tag, me)
    }

    /// Send to peers from `senders` (connected sockets per peer) rather than from this
    /// socket, as far as they allow.
    pub(super) fn send_from(&mut self, senders: Senders) {
        self.senders = Some(senders);
    }

    /// Send sockets open now.
    pub(super) fn senders_open(&self) -> usize {
        self.senders.as_ref().map_or(0, Senders::open)
    }

    /// `peer` is out of the job: close its send socket, if it has one.
    pub(super) fn forget(&mut self, peer: usize) {
        if let Some(s) = self.senders.as_mut() {
            s.forget(peer);
        }
        if self.full == Some(peer) {
            self.full = None;
        }
    }

    /// The descriptor to send to `peer` at `to` from, and the address to give (none for a
    /// connected socket: the kernel keeps the route).
    #[inline]
    fn route(&mut self, peer: usize, to: &SocketAddr) -> (RawFd, Option<RawAddr>) {
        if let Some(fd) = self.senders.as_mut().and_then(|s| s.fd(peer, to)) {
            return (fd, None);
        }
        let addr = (self.connected != Some(*to)).then(|| RawAddr::new(to));
        (self.sock.as_raw_fd(), addr)
    }

    /// Connect the socket to `peer`, the only address this node sends to (a job of two nodes,
    /// or every datagram through a relay): the kernel then keeps the route instead of looking
    /// it up for every datagram, about 0.4 µs a message. Datagrams from elsewhere are then
    /// dropped by the kernel instead of counted by the layer.
    ///
    /// # Errors
    /// The OS's.
    pub(super) fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        self.sock.connect(peer)?;
        self.connected = Some(peer);
        Ok(())
    }

    /// The address peers send to.
    ///
    /// # Errors
    /// The OS's.
    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Ask for `bytes` of send and receive buffer (beyond the system's limit when allowed:
    /// root may), and return the receive buffer granted, in bytes of data it holds.
    ///
    /// # Errors
    /// The OS's, when even the plain request fails.
    pub(super) fn set_buffers(&self, bytes: usize) -> io::Result<usize> {
        use nix::sys::socket::{getsockopt, setsockopt};
        let fd = self.sock.as_fd();
        // The kernel takes an int.
        let want = bytes.min(i32::MAX as usize);
        if setsockopt(&fd, sockopt::RcvBufForce, &want).is_err() {
            setsockopt(&fd, sockopt::RcvBuf, &want)?;
        }
        set_sndbuf(&fd, want)?;
        // The kernel reports twice what holds data (the rest is its bookkeeping).
        Ok(getsockopt(&fd, sockopt::RcvBuf)? / 2)
    }

    /// Receive what has arrived: one datagram, or a batch while a burst lasts. The first
    /// datagrams go to the `landings` given, if they are the fragments expected there.
    /// Returns how many datagrams (0: none); look at them with [`datagram`](Self::datagram).
    ///
    /// # Safety
    /// Every landing zone must be writable for its length and not otherwise accessed until
    /// this returns (the endpoint's [`landing`](super::endpoint::Endpoint::landing) zones are,
    /// until the endpoint is next changed).
    ///
    /// # Errors
    /// The OS's, except "nothing there" and interruptions.
    pub(super) unsafe fn recv(&mut self, landings: &[Landing]) -> io::Result<usize> {
        let fd = self.sock.as_raw_fd();
        let r = &mut self.ring;
        let slots = if self.burst { RECV_BATCH } else { 1 };
        for i in 0..slots {
            r.aim(i, landings.get(i));
        }
        let n = if self.burst {
            // SAFETY: the headers point at live buffers of the lengths they give (RecvRing,
            // and the landing zones the caller vouches for).
            let k = unsafe {
                libc::recvmmsg(
                    fd,
                    r.hdrs.as_mut_ptr(),
                    RECV_BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            let k = received(k as isize)?.unwrap_or(0);
            for i in 0..k {
                r.lens[i] = r.hdrs[i].msg_len as usize;
            }
            k
        } else if landings.is_empty() {
            // The plain poll: `recvfrom` has the kernel copy in no descriptors. A connected
            // socket gets only its peer's datagrams: it asks for no source address.
            let h = &mut r.hdrs[0].msg_hdr;
            let (name, namelen) = match self.connected {
                Some(_) => (std::ptr::null_mut(), std::ptr::null_mut()),
                None => (h.msg_name.cast(), std::ptr::addr_of_mut!(h.msg_namelen)),
            };
            // SAFETY: buffer 0 has RECV_BUF bytes; the name, if asked for, is a
            // sockaddr_storage of the length given.
            let len = unsafe {
                libc::recvfrom(
                    fd,
                    r.bufs.as_mut_ptr().cast(),
                    RECV_BUF,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    name,
                    namelen,
                )
            };
            match received(len)? {
                Some(len) => {
                    // With MSG_TRUNC the length is the datagram's, even beyond the buffer.
                    if len > RECV_BUF {
                        h.msg_flags = libc::MSG_TRUNC;
                    }
                    r.lens[0] = len;
                    1
                }
                None => 0,
            }
        } else {
            // SAFETY: as above, for the first header.
            let len = unsafe { libc::recvmsg(fd, &mut r.hdrs[0].msg_hdr, libc::MSG_DONTWAIT) };
            match received(len)? {
                Some(len) => {
                    r.lens[0] = len;
                    1
                }
                None => 0,
            }
        };
        let named = self.burst || !landings.is_empty() || self.connected.is_none();
        for i in 0..n {
            if r.hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                r.lens[i] = 0;
            }
            r.from[i] = if named {
                from_storage(&r.names[i])
            } else {
                self.connected
            };
        }
        // Settle every slot before any datagram is acted on (see `settle`).
        for i in 0..n {
            r.placed[i] = match landings.get(i) {
                Some(l) if r.lens[i] > 0 => r.settle(i, l),
                _ => false,
            };
        }
        r.got = n;
        self.burst = n > 0;
        Ok(n)
    }

    /// Whether the last receive filled its batch: more may be waiting.
    pub(super) fn more(&self) -> bool {
        self.ring.got == RECV_BATCH
    }

    /// Datagram `i` of the last receive; `None` when it was truncated (larger than any of
    /// ours), empty, or from an address family we do not speak.
    pub(super) fn datagram(&self, i: usize) -> Option<Arrived<'_>> {
        let r = &self.ring;
        if i >= r.got {
            return None;
        }
        let from = r.from[i]?;
        let len = r.lens[i];
        if len == 0 {
            return None;
        }
        Some(if r.placed[i] {
            Arrived::Placed {
                head: &r.heads[i],
                len,
                from,
            }
        } else {
            Arrived::Bytes(&r.bufs[i * RECV_BUF..i * RECV_BUF + len], from)
        })
    }

    /// Block until a datagram arrives (or, with `writable`, the socket can take more), `wake`
    /// (an eventfd, say) becomes readable, or `timeout` passes. Whether `wake` is readable.
    ///
    /// # Errors
    /// The OS's, except interruptions.
    pub(super) fn wait(
        &mut self,
        writable: bool,
        wake: Option<BorrowedFd<'_>>,
        timeout: Duration,
    ) -> io::Result<bool> {
        // A full send socket of a peer is watched in its own entry; this socket's is watched
        // for room in the first.
        let full = self
            .full
            .and_then(|p| self.senders.as_ref().and_then(|s| s.socket(p)))
            .filter(|_| writable);
        let events = if writable && full.is_none() {
            PollFlags::POLLIN | PollFlags::POLLOUT
        } else {
            PollFlags::POLLIN
        };
        // Entries not needed are not passed (they only fill the array): `wake` second, a full
        // send socket last.
        let mut pfd = [
            PollFd::new(self.sock.as_fd(), events),
            PollFd::new(wake.unwrap_or(self.sock.as_fd()), PollFlags::POLLIN),
            PollFd::new(full.unwrap_or(self.sock.as_fd()), PollFlags::POLLOUT),
        ];
        let n = if full.is_some() {
            3
        } else if wake.is_some() {
            2
        } else {
            1
        };
        // A timeout beyond what the kernel's seconds hold means "a long time", not an error.
        let ts = TimeSpec::from_duration(timeout.min(Duration::from_secs(i32::MAX as u64)));
        match nix::poll::ppoll(&mut pfd[..n], Some(ts), None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        if full.is_some() && pfd[2].revents().is_some_and(|r| !r.is_empty()) {
            self.full = None;
        }
        Ok(wake.is_some()
            && pfd[1]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLIN)))
    }

    /// Send up to [`SEND_BATCH`] datagrams in one system call from `fd`; how many it took.
    fn send_some(fd: RawFd, to: Option<&RawAddr>, dgrams: &[[&[u8]; 2]]) -> io::Result<usize> {
        let (name, namelen) = to.map_or((std::ptr::null_mut(), 0), RawAddr::parts);
        let k = dgrams.len().min(SEND_BATCH);
        // Only the entries used are written: no array is zeroed per call.
        let mut iov = [MaybeUninit::<[libc::iovec; 2]>::uninit(); SEND_BATCH];
        let mut hdrs = [MaybeUninit::<libc::mmsghdr>::uninit(); SEND_BATCH];
        for i in 0..k {
            let [a, b] = dgrams[i];
            let v = iov[i].write([
                libc::iovec {
                    iov_base: a.as_ptr() as *mut libc::c_void,
                    iov_len: a.len(),
                },
                libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                },
            ]);
            // SAFETY: all-zero is a valid msghdr; the fields that matter are set below.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = name;
            h.msg_hdr.msg_namelen = namelen;
            h.msg_hdr.msg_iov = v.as_mut_ptr();
            h.msg_hdr.msg_iovlen = if b.is_empty() { 1 } else { 2 };
            hdrs[i].write(h);
        }
        let r = if k == 1 {
            // SAFETY: entry 0 was written; it points at live buffers and a valid address.
            unsafe { libc::sendmsg(fd, &hdrs[0].assume_init_ref().msg_hdr, libc::MSG_DONTWAIT) }
                .min(1)
        } else {
            // SAFETY: entries 0..k were written; they point at live buffers and a valid
            // address; the kernel only reads them (and writes msg_len).
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs.as_mut_ptr().cast(),
                    k as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            n as isize
        };
        sent(r)
    }
}

impl Transmit for Socket {
    fn transmit(
        &mut self,
        peer: usize,
        to: &SocketAddr,
        dgrams: &[[&[u8]; 2]],
    ) -> io::Result<usize> {
        let (fd, addr) = self.route(peer, to);
        let mut done = 0;
        while done < dgrams.len() {
            let rest = &dgrams[done..];
            let n = Self::send_some(fd, addr.as_ref(), rest)?;
            done += n;
            if n < rest.len().min(SEND_BATCH) {
                // The socket took part of the batch: the rest is for later.
                self.note_full(peer, fd);
                break;
            }
        }
        Ok(done)
    }

    fn transmit_one(&mut self, peer: usize, to: &SocketAddr, dgram: &[u8]) -> io::Result<bool> {
        let (fd, addr) = self.route(peer, to);
        let (name, namelen) = addr
            .as_ref()
            .map_or((std::ptr::null_mut(), 0), RawAddr::parts);
        // SAFETY: a live buffer of the length given, and a valid address of the length given
        // (`addr` lives until the call returns) or none.
        let r = unsafe {
            libc::sendto(
                fd,
                dgram.as_ptr().cast(),
                dgram.len(),
                libc::MSG_DONTWAIT,
                name.cast(),
                namelen,
            )
        };
        let took = sent(r)? > 0;
        if !took {
            self.note_full(peer, fd);
        }
        Ok(took)
    }

    fn max_datagram(&mut self, to: &SocketAddr) -> usize {
        let ip_header = if to.is_ipv4() { 20 } else { 40 };
        let path = path_mtu(to).unwrap_or(self.mtu);
        (self.mtu.min(path) - ip_header - 8).min(MAX_UDP_PAYLOAD)
    }
}

impl Socket {
    /// `fd`, the socket for `peer`, refused a datagram: a wait for room watches it.
    #[cold]
    fn note_full(&mut self, peer: usize, fd: RawFd) {
        self.full = (fd != self.sock.as_raw_fd()).then_some(peer);
    }
}

/// Ask for `bytes` of send buffer on `fd`: past the system's maximum when allowed
/// (`SO_SNDBUFFORCE`, as root), else what the system's maximum allows.
pub(super) fn set_sndbuf(fd: &impl AsFd, bytes: usize) -> io::Result<()> {
    use nix::sys::socket::setsockopt;
    // The kernel takes an int.
    let want = bytes.min(i32::MAX as usize);
    if setsockopt(fd, sockopt::SndBufForce, &want).is_err() {
        setsockopt(fd, sockopt::SndBuf, &want)?;
    }
    Ok(())
}

/// The MTU of the route to `to`, as the kernel knows it (a connected socket's `IP_MTU`).
fn path_mtu(to: &SocketAddr) -> io::Result<usize> {
    let any: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(any)?;
    s.connect(to)?;
    let mtu = if to.is_ipv4() {
        nix::sys::socket::getsockopt(&s, sockopt::IpMtu)?
    } else {
        ipv6_mtu(&s)?
    };
    usize::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

/// A connected IPv6 socket's path MTU (`IPV6_MTU`): nix 0.29 has `IpMtu` for IPv4 only, and
/// no way to declare another option without `unsafe`, so this one is libc's.
fn ipv6_mtu(s: &UdpSocket) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid fd, an int to write and its size.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU,
            std::ptr::addr_of_mut!(value).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_survive_the_kernel_form() {
        for a in ["127.0.0.1:4000", "[::1]:5000", "10.1.2.3:65535"] {
            let a: SocketAddr = a.parse().expect("address");
            let raw = RawAddr::new(&a);
            let (p, len) = raw.parts();
            // SAFETY: `p` points at a socket address of `len` readable bytes.
            let st = unsafe { SockaddrStorage::from_raw(p.cast(), Some(len)) };
            assert_eq!(st.as_ref().and_then(from_storage), Some(a));
        }
    }

    #[test]
    fn datagrams_go_through_in_two_pieces() {
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        let mut a = Socket::bind(ip, 65535).expect("bind");
        let mut b = Socket::bind(ip, 65535).expect("bind");
        let to = b.local_addr().expect("addr");
        let sent = a
            .transmit(1, &to, &[[b"head", b"body"], [b"x", b""]])
            .expect("send");
        assert_eq!(sent, 2);
        let mut got = Vec::new();
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < 2 {
            assert!(std::time::Instant::now() < end, "got only {got:?}");
            b.wait(false, None, Duration::from_secs(1)).expect("wait");
            // SAFETY: no landing zone.
            let n = unsafe { b.recv(&[]) }.expect("recv");
            for i in 0..n {
                let Some(Arrived::Bytes(d, from)) = b.datagram(i) else {
                    panic!("a whole datagram");
                };
                assert_eq!(from, a.local_addr().expect("addr"));
                got.push(d.to_vec());
            }
        }
        assert_eq!(got, vec![b"headbody".to_vec(), b"x".to_vec()]);
        assert_eq!(a.max_datagram(&to), 65507);
    }

    #[test]
    fn a_connected_socket_sends_without_an_address_and_names_its_peer() {
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        let mut a = Socket::bind(ip, 65535).expect("bind");
        let mut b = Socket::bind(ip, 65535).expect("bind");
        let (aa, ba) = (a.local_addr().expect("addr"), b.local_addr().expect("addr"));
        a.connect(ba).expect("connect");
        b.connect(aa).expect("connect");
        assert!(a.transmit_one(1, &ba, b"one").expect("send"));
        assert_eq!(a.transmit(1, &ba, &[[b"t", b"wo"]]).expect("send"), 1);
        let mut got = Vec::new();
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < 2 {
            assert!(std::time::Instant::now() < end, "got only {got:?}");
            b.wait(false, None, Duration::from_secs(1)).expect("wait");
            // SAFETY: no landing zone.
            let n = unsafe { b.recv(&[]) }.expect("recv");
            for i in 0..n {
                let Some(Arrived::Bytes(d, from)) = b.datagram(i) else {
                    panic!("a whole datagram");
                };
                assert_eq!(from, aa);
                got.push(d.to_vec());
            }
        }
        assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
    }
}
