//! The node's one UDP socket: non-blocking, large buffers, datagrams in and out in batches
//! (`recvmmsg` / `sendmmsg`: one system call for many datagrams), each datagram sent from two
//! pieces (header, then the message's own bytes) so no payload is copied to prepend a header.

use super::endpoint::Transmit;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Datagrams taken by one `recvmmsg`.
pub const RECV_BATCH: usize = 8;
/// Datagrams given to one `sendmmsg`.
pub const SEND_BATCH: usize = 32;
/// Receive buffer per datagram: the largest UDP payload there is.
const RECV_BUF: usize = 65536;
/// Largest UDP payload over IPv4.
const MAX_UDP_PAYLOAD: usize = 65507;

/// The node's socket.
pub struct Socket {
    sock: UdpSocket,
    /// `RECV_BATCH` buffers of `RECV_BUF` bytes, allocated once.
    bufs: Vec<u8>,
    lens: [usize; RECV_BATCH],
    from: [Option<SocketAddr>; RECV_BATCH],
    /// Largest IP packet to send (`udp.mtu`).
    mtu: usize,
}

/// A socket address as the kernel takes it.
struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

fn raw_addr(a: &SocketAddr) -> RawAddr {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { std::ptr::write(std::ptr::addr_of_mut!(storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(std::ptr::addr_of_mut!(storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    RawAddr {
        storage,
        len: len as libc::socklen_t,
    }
}

fn from_raw(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: &libc::sockaddr_in = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                sin.sin_addr.s_addr.to_ne_bytes().into(),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: &libc::sockaddr_in6 =
                unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                sin6.sin6_addr.s6_addr.into(),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn setsockopt_int(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: a valid fd and a pointer to an int of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::addr_of!(value).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt_int(fd: i32, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: a valid fd, an int to write and its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
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

impl Socket {
    /// A non-blocking UDP socket on `ip`, any port; `mtu` caps the datagrams it sends.
    ///
    /// # Errors
    /// The OS's, when the socket cannot be made.
    pub fn bind(ip: IpAddr, mtu: usize) -> io::Result<Socket> {
        let sock = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        sock.set_nonblocking(true)?;
        Ok(Socket {
            sock,
            bufs: vec![0; RECV_BATCH * RECV_BUF],
            lens: [0; RECV_BATCH],
            from: [None; RECV_BATCH],
            mtu,
        })
    }

    /// The address peers send to.
    ///
    /// # Errors
    /// The OS's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Ask for `bytes` of send and receive buffer (beyond the system's limit when allowed:
    /// root may), and return the receive buffer granted, in bytes of data it holds.
    ///
    /// # Errors
    /// The OS's, when even the plain request fails.
    pub fn set_buffers(&self, bytes: usize) -> io::Result<usize> {
        let fd = self.sock.as_raw_fd();
        let want = i32::try_from(bytes).unwrap_or(i32::MAX);
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if setsockopt_int(fd, libc::SOL_SOCKET, force, want).is_err() {
                setsockopt_int(fd, libc::SOL_SOCKET, plain, want)?;
            }
        }
        // The kernel reports twice what holds data (the rest is its bookkeeping).
        let got = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?;
        Ok(usize::try_from(got).unwrap_or(0) / 2)
    }

    /// Receive what has arrived, up to a batch; how many datagrams (0: none). Look at them
    /// with [`datagram`](Self::datagram).
    ///
    /// # Errors
    /// The OS's, except "nothing there" and interruptions.
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        // SAFETY: zeroed iovec / mmsghdr / sockaddr_storage are valid (null pointers, zero
        // lengths) and every pointer is set below before the call.
        let mut iov: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
        let mut hdrs: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
        let mut names: [MaybeUninit<libc::sockaddr_storage>; RECV_BATCH] =
            [MaybeUninit::zeroed(); RECV_BATCH];
        let base = self.bufs.as_mut_ptr();
        for i in 0..RECV_BATCH {
            // SAFETY: the buffer holds RECV_BATCH * RECV_BUF bytes.
            iov[i].iov_base = unsafe { base.add(i * RECV_BUF) }.cast();
            iov[i].iov_len = RECV_BUF;
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
            hdrs[i].msg_hdr.msg_name = names[i].as_mut_ptr().cast();
            hdrs[i].msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        let n = loop {
            // SAFETY: the headers point at live buffers of the lengths given.
            let r = unsafe {
                libc::recvmmsg(
                    self.sock.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    RECV_BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier send (a peer's port closed): not ours to act
                // on here; silence from that peer is what the protocol watches.
                io::ErrorKind::ConnectionRefused => continue,
                _ => return Err(e),
            }
        };
        for i in 0..n {
            let truncated = hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.lens[i] = if truncated {
                0
            } else {
                hdrs[i].msg_len as usize
            };
            // SAFETY: zero-initialized and possibly filled by the kernel: initialized either way.
            self.from[i] = from_raw(unsafe { names[i].assume_init_ref() });
        }
        Ok(n)
    }

    /// Datagram `i` of the last batch and where it came from; `None` when it was truncated
    /// (larger than any of ours) or came from an address family we do not speak.
    pub fn datagram(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        let from = (*self.from.get(i)?)?;
        let len = self.lens[i];
        (len > 0).then(|| (&self.bufs[i * RECV_BUF..i * RECV_BUF + len], from))
    }

    /// Block until a datagram arrives (or, with `writable`, the socket can take more), or
    /// `timeout` passes.
    ///
    /// # Errors
    /// The OS's, except interruptions.
    pub fn wait(&self, writable: bool, timeout: Duration) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN | if writable { libc::POLLOUT } else { 0 },
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Transmit for Socket {
    fn transmit(&mut self, to: &SocketAddr, dgrams: &[[&[u8]; 2]]) -> io::Result<usize> {
        let addr = raw_addr(to);
        let mut done = 0;
        while done < dgrams.len() {
            let batch = &dgrams[done..dgrams.len().min(done + SEND_BATCH)];
            // SAFETY: zeroed iovec / mmsghdr are valid; every pointer is set below.
            let mut iov: [[libc::iovec; 2]; SEND_BATCH] = unsafe { std::mem::zeroed() };
            let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
            for (i, d) in batch.iter().enumerate() {
                for (j, part) in d.iter().enumerate() {
                    iov[i][j].iov_base = part.as_ptr() as *mut libc::c_void;
                    iov[i][j].iov_len = part.len();
                }
                hdrs[i].msg_hdr.msg_iov = iov[i].as_mut_ptr();
                hdrs[i].msg_hdr.msg_iovlen = 2;
                hdrs[i].msg_hdr.msg_name = std::ptr::addr_of!(addr.storage) as *mut libc::c_void;
                hdrs[i].msg_hdr.msg_namelen = addr.len;
            }
            // SAFETY: the headers point at live, readable buffers of the lengths given and at
            // a valid address; the kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    batch.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                done += r as usize;
                if (r as usize) < batch.len() {
                    // The socket took part of the batch: the rest is for later.
                    return Ok(done);
                }
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => return Ok(done),
                Some(libc::EINTR) => {}
                // A local firewall dropped it, or an ICMP error of an earlier datagram
                // surfaced: as good as lost on the way, which the protocol repairs.
                Some(libc::EPERM) | Some(libc::ECONNREFUSED) => done += 1,
                _ => return Err(e),
            }
        }
        Ok(done)
    }

    fn max_datagram(&mut self, to: &SocketAddr) -> usize {
        let ip_header = if to.is_ipv4() { 20 } else { 40 };
        let path = path_mtu(to).unwrap_or(self.mtu);
        (self.mtu.min(path) - ip_header - 8).min(MAX_UDP_PAYLOAD)
    }
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
    let (level, name) = if to.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mtu = getsockopt_int(s.as_raw_fd(), level, name)?;
    usize::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_survive_the_kernel_form() {
        for a in ["127.0.0.1:4000", "[::1]:5000", "10.1.2.3:65535"] {
            let a: SocketAddr = a.parse().expect("address");
            assert_eq!(from_raw(&raw_addr(&a).storage), Some(a));
        }
    }

    #[test]
    fn datagrams_go_through_in_two_pieces() {
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        let mut a = Socket::bind(ip, 65535).expect("bind");
        let mut b = Socket::bind(ip, 65535).expect("bind");
        let to = b.local_addr().expect("addr");
        let sent = a
            .transmit(&to, &[[b"head", b"body"], [b"x", b""]])
            .expect("send");
        assert_eq!(sent, 2);
        b.wait(false, Duration::from_secs(5)).expect("wait");
        let mut got = Vec::new();
        while got.len() < 2 {
            let n = b.recv_batch().expect("recv");
            for i in 0..n {
                let (d, from) = b.datagram(i).expect("whole datagram");
                assert_eq!(from, a.local_addr().expect("addr"));
                got.push(d.to_vec());
            }
        }
        assert_eq!(got, vec![b"headbody".to_vec(), b"x".to_vec()]);
        assert_eq!(a.max_datagram(&to), 65507);
    }
}
