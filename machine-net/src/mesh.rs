//! Connecting every pair of nodes at start-up.
//!
//! Node `i` connects to every node below it and accepts one connection from every node above
//! it. The connecting side opens with `[secret (16 B)][its node number u32 LE]`; the accepting
//! side closes any connection that does not present the job secret and a node number it
//! expects (a stranger, or a duplicate), and goes on waiting for the real ones. Listeners are
//! open before the node table goes out, so a connection may arrive before its acceptor is
//! ready: it waits in the backlog.

use charmrun::protocol::{secrets_equal, SECRET_LEN};
use machine::{MachineError, NodeTable};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Bytes a connecting node sends first.
const INTRO: usize = SECRET_LEN + 4;

/// How long a connection may take to introduce itself.
const INTRO_TIMEOUT: Duration = Duration::from_secs(5);

/// A node's listening address as it travels in the node table.
pub fn encode_addr(a: SocketAddr) -> Vec<u8> {
    a.to_string().into_bytes()
}

/// The inverse of [`encode_addr`].
pub fn decode_addr(table: &NodeTable, node: usize) -> Result<SocketAddr, MachineError> {
    let bad =
        |why: &str| MachineError::Boot(format!("node {node}'s address in the node table {why}"));
    let info = table.node(node).ok_or_else(|| bad("is missing"))?;
    std::str::from_utf8(&info.addr)
        .map_err(|_| bad("is not text"))?
        .parse()
        .map_err(|_| bad("does not parse"))
}

/// Connections to every other node, indexed by node (`None` at `me`), and how many strangers
/// were turned away.
pub fn connect_all(
    me: usize,
    table: &NodeTable,
    listener: &TcpListener,
    secret: &[u8; SECRET_LEN],
    deadline: Instant,
) -> Result<(Vec<Option<TcpStream>>, usize), MachineError> {
    let n = table.num_nodes();
    let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut intro = [0u8; INTRO];
    intro[..SECRET_LEN].copy_from_slice(secret);
    intro[SECRET_LEN..].copy_from_slice(&(me as u32).to_le_bytes());
    for (peer, slot) in conns.iter_mut().enumerate().take(me) {
        let addr = decode_addr(table, peer)?;
        let host = table.node(peer).map_or("?", |i| i.host.as_str()).to_owned();
        let mut s = connect_retrying(addr, deadline).map_err(|e| MachineError::PeerDead {
            node: peer,
            host: host.clone(),
            reason: format!("cannot connect to {addr}: {e}"),
        })?;
        s.write_all(&intro).map_err(|e| MachineError::PeerDead {
            node: peer,
            host,
            reason: format!("introduction failed: {e}"),
        })?;
        *slot = Some(s);
    }
    let mut strangers = 0;
    let mut expected = n - me - 1;
    listener
        .set_nonblocking(true)
        .map_err(|e| MachineError::io("listener", e))?;
    while expected > 0 {
        if Instant::now() >= deadline {
            let missing: Vec<String> = (me + 1..n)
                .filter(|&p| conns[p].is_none())
                .map(|p| p.to_string())
                .collect();
            return Err(MachineError::Boot(format!(
                "nodes {} never connected",
                missing.join(", ")
            )));
        }
        let (mut s, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_readable(listener, Duration::from_millis(50));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(MachineError::io("accepting a peer", e)),
        };
        let mut got = [0u8; INTRO];
        let ok = s.set_nonblocking(false).is_ok()
            && s.set_read_timeout(Some(INTRO_TIMEOUT)).is_ok()
            && s.read_exact(&mut got).is_ok();
        let peer = u32::from_le_bytes([got[16], got[17], got[18], got[19]]) as usize;
        if !ok
            || !secrets_equal(&got[..SECRET_LEN], secret)
            || peer <= me
            || peer >= n
            || conns[peer].is_some()
        {
            strangers += 1;
            continue;
        }
        let _ = s.set_read_timeout(None);
        conns[peer] = Some(s);
        expected -= 1;
    }
    Ok((conns, strangers))
}

fn connect_retrying(addr: SocketAddr, deadline: Instant) -> std::io::Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(e),
            // The backlog can be full for a moment when a whole job connects at once.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn wait_readable(l: &TcpListener, timeout: Duration) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let _ = poll(&mut fds, PollTimeout::from(ms));
}
