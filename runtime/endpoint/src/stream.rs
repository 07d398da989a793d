//! The byte streams a connection runs over: TCP (`tcp://`), a Unix socket in the abstract
//! namespace (`si://NAME`: processes of one host, no file left behind, no TCP/IP stack on the
//! way), or a reliable stream over UDP (`udp://`, see `udp/`: the program holds a Unix socket
//! whose other end an engine thread carries over datagrams), behind one type so the
//! handshake, the frames and the I/O thread are the same for all.

use std::io::{IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use crate::udp::{UdpListener, UdpStream};

/// A connected stream.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Udp(UdpStream),
}

impl Stream {
    pub(crate) fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Udp(s) => s.app.set_nonblocking(on),
        }
    }

    /// Small messages go at once (a message-driven program waits on each); nothing to set on
    /// a Unix socket (nor on UDP's: its engine sends what it has at once).
    pub(crate) fn set_nodelay(&self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nodelay(true),
            Stream::Unix(_) | Stream::Udp(_) => Ok(()),
        }
    }

    /// A peer whose host vanishes (power lost, cable pulled) sends nothing, not even a
    /// reset: TCP keep-alive probes after 10 s idle, every 5 s, and the connection ends
    /// after 3 unanswered, so every wait on it ends within about 25 s. Nothing to set on a
    /// Unix socket (a process of this host that dies closes it), nor on UDP's (its session
    /// probes after 1 s of silence and gives the peer up after 10 s).
    pub(crate) fn set_keepalive(&self) -> std::io::Result<()> {
        use nix::sys::socket::{setsockopt, sockopt};
        let Stream::Tcp(s) = self else {
            return Ok(());
        };
        let set = || -> nix::Result<()> {
            setsockopt(s, sockopt::KeepAlive, &true)?;
            setsockopt(s, sockopt::TcpKeepIdle, &10)?;
            setsockopt(s, sockopt::TcpKeepInterval, &5)?;
            setsockopt(s, sockopt::TcpKeepCount, &3)
        };
        set().map_err(std::io::Error::from)
    }

    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Udp(s) => s.app.set_read_timeout(t),
        }
    }

    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Udp(s) => s.app.set_write_timeout(t),
        }
    }

    /// Bytes written that the peer has not acknowledged yet (TCP's send queue): closing a
    /// TCP socket with unread input resets it, which drops these. 0 for the others, whose
    /// written bytes are the peer's (or its engine's) to read whatever this end does.
    pub(crate) fn unacked(&self) -> usize {
        let Stream::Tcp(s) = self else { return 0 };
        let mut n: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int; the descriptor is a TCP socket.
        let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        if rc < 0 {
            0
        } else {
            n.max(0) as usize
        }
    }

    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Udp(s) => s.app.shutdown(std::net::Shutdown::Both),
        };
    }

    /// The listener's handshake proved the secret (UDP: no longer a half-open connection).
    pub(crate) fn proven(&self) {
        if let Stream::Udp(s) = self {
            s.proven();
        }
    }

    /// What a `udp://` connection's protocol repaired (other schemes: `None`).
    pub(crate) fn udp_stats(&self) -> Option<crate::UdpStats> {
        match self {
            Stream::Udp(s) => Some(s.stats()),
            _ => None,
        }
    }

    /// Why the stream ended, when the transport knows better than "closed" (UDP: a peer
    /// silent too long, a reset, a port unreachable).
    pub(crate) fn ended_why(&self) -> Option<String> {
        match self {
            Stream::Udp(s) => s.ended_why(),
            _ => None,
        }
    }

    /// The host a connection comes from, to count its handshakes: the IP address, or
    /// `this host` for a Unix socket.
    pub(crate) fn source(&self) -> String {
        match self {
            Stream::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "unknown".into(), |a| a.ip().to_string()),
            Stream::Unix(_) => "this host".into(),
            Stream::Udp(s) => s.peer.ip().to_string(),
        }
    }

    /// Who is at the other end, for lines and events: its address, or for a Unix socket the
    /// process (the kernel's word for it).
    pub(crate) fn peer_name(&self) -> String {
        match self {
            Stream::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "an unknown address".into(), |a| a.to_string()),
            Stream::Unix(s) => {
                nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
                    .map_or_else(
                        |_| "a process of this host".into(),
                        |c| format!("process {} of this host", c.pid()),
                    )
            }
            Stream::Udp(s) => s.peer.to_string(),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Udp(s) => s.app.as_raw_fd(),
        }
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
            Stream::Udp(s) => (&s.app).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
            Stream::Udp(s) => (&s.app).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write_vectored(bufs),
            Stream::Unix(s) => (&*s).write_vectored(bufs),
            Stream::Udp(s) => (&s.app).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A listening socket.
#[derive(Debug)]
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
    Udp(UdpListener),
}

impl Listener {
    /// The next connection, if one waits (the listener is non-blocking).
    pub(crate) fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Udp(l) => l.accept().map(Stream::Udp),
        }
    }

    /// Whether dropping it would end connections it accepted (`udp://`'s engine carries
    /// them): then it is kept until they are written out, and closed with
    /// [`close_in_order`](Listener::close_in_order).
    pub(crate) fn carries_connections(&self) -> bool {
        matches!(self, Listener::Udp(_))
    }

    /// Stop listening; a `udp://` listener's connections close in order, not reset.
    pub(crate) fn close_in_order(self) {
        if let Listener::Udp(l) = self {
            l.close_in_order();
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
            Listener::Udp(l) => l.as_raw_fd(),
        }
    }
}
