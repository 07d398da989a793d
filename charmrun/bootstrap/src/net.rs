//! Socket helpers shared by charmrun and the layers it starts.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;

/// A TCP listener on `ip`, any port, with room for `backlog` pending connections. The standard
/// library's listener has a fixed backlog; a job connecting all at once needs more.
///
/// # Errors
/// The socket calls'.
pub fn listener(ip: IpAddr, backlog: i32) -> io::Result<TcpListener> {
    use nix::sys::socket::{
        bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
        SockaddrStorage,
    };
    let family = if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    bind(
        fd.as_raw_fd(),
        &SockaddrStorage::from(SocketAddr::new(ip, 0)),
    )?;
    listen(&fd, Backlog::new(backlog).unwrap_or(Backlog::MAXCONN))?;
    Ok(TcpListener::from(fd))
}
