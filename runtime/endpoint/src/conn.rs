//! One connection, as the job's side holds it: the socket, the bounded queue of what waits to
//! be written, the count of bytes handed to the PE and not yet handled; and the handshake,
//! which both sides run blocking with a deadline (a listener runs it on a thread of its own,
//! so a stranger who sends nothing holds only that thread, until the deadline).

use crate::secret::{random, same, Secret, NONCE_LEN, PROOF_LEN};
use crate::stream::Stream;
use crate::wire::{self, MAX_HEAD};
use crate::EndpointError;
use std::collections::VecDeque;
use std::io::{IoSlice, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Run the listener's side of the handshake on `s` (blocking, until `deadline`).
///
/// # Errors
/// Why the connection was refused, for the listener's line: the other side is not a client
/// of this protocol, holds another secret, or was too slow.
pub(crate) fn accept_handshake(
    s: &Stream,
    secret: &Secret,
    deadline: Instant,
) -> Result<(), String> {
    let mut nonce = [0u8; NONCE_LEN];
    random(&mut nonce).map_err(|e| e.to_string())?;
    let mut hello = [0u8; wire::HELLO_LEN];
    hello[..4].copy_from_slice(wire::MAGIC);
    hello[4] = wire::VERSION;
    hello[5..].copy_from_slice(&nonce);
    write_by(s, &hello, deadline)?;
    let mut auth = [0u8; wire::AUTH_LEN];
    read_by(s, &mut auth, deadline)?;
    if &auth[..4] != wire::MAGIC {
        return Err("it does not speak the endpoint protocol".into());
    }
    if auth[4] != wire::VERSION {
        let why = format!(
            "protocol version {} (this side speaks {})",
            auth[4],
            wire::VERSION
        );
        let _ = refuse(s, &why, deadline);
        return Err(why);
    }
    if !same(
        &secret.proof(wire::CONNECT, &nonce),
        &auth[5..5 + PROOF_LEN],
    ) {
        let _ = refuse(s, "wrong secret", deadline);
        return Err("wrong secret".into());
    }
    let mut theirs = [0u8; NONCE_LEN];
    theirs.copy_from_slice(&auth[5 + PROOF_LEN..]);
    let mut ok = [0u8; wire::ACCEPT_LEN];
    ok[1..].copy_from_slice(&secret.proof(wire::LISTEN, &theirs));
    write_by(s, &ok, deadline)
}

fn refuse(s: &Stream, why: &str, deadline: Instant) -> Result<(), String> {
    let mut m = vec![1u8];
    m.extend_from_slice(&(why.len() as u16).to_le_bytes());
    m.extend_from_slice(why.as_bytes());
    write_by(s, &m, deadline)
}

/// Run the connector's side of the handshake (blocking, until `deadline`).
///
/// # Errors
/// [`EndpointError::Refused`] with the listener's reason, or [`EndpointError::Unreachable`]
/// if what answered is not a listener of this protocol holding the same secret.
pub(crate) fn connect_handshake(
    s: &Stream,
    secret: &Secret,
    addr: &str,
    deadline: Instant,
) -> Result<(), EndpointError> {
    let unreachable = |why: String| EndpointError::Unreachable {
        addr: addr.to_string(),
        why,
    };
    let mut hello = [0u8; wire::HELLO_LEN];
    read_by(s, &mut hello, deadline).map_err(unreachable)?;
    if &hello[..4] != wire::MAGIC {
        return Err(unreachable(
            "what answers there is not a converse endpoint".into(),
        ));
    }
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&hello[5..]);
    let mut mine = [0u8; NONCE_LEN];
    random(&mut mine)?;
    let mut auth = [0u8; wire::AUTH_LEN];
    auth[..4].copy_from_slice(wire::MAGIC);
    auth[4] = wire::VERSION;
    auth[5..5 + PROOF_LEN].copy_from_slice(&secret.proof(wire::CONNECT, &nonce));
    auth[5 + PROOF_LEN..].copy_from_slice(&mine);
    write_by(s, &auth, deadline).map_err(unreachable)?;
    let mut status = [0u8; 1];
    read_by(s, &mut status, deadline).map_err(unreachable)?;
    if status[0] != 0 {
        let mut len = [0u8; 2];
        let mut why = String::from("refused");
        if read_by(s, &mut len, deadline).is_ok() {
            let mut text = vec![0u8; u16::from_le_bytes(len) as usize];
            if read_by(s, &mut text, deadline).is_ok() {
                why = String::from_utf8_lossy(&text).into_owned();
            }
        }
        return Err(EndpointError::Refused {
            addr: addr.to_string(),
            why,
        });
    }
    let mut proof = [0u8; PROOF_LEN];
    read_by(s, &mut proof, deadline).map_err(unreachable)?;
    if !same(&secret.proof(wire::LISTEN, &mine), &proof) {
        return Err(unreachable(
            "the listener there does not hold this secret".into(),
        ));
    }
    Ok(())
}

fn left(deadline: Instant) -> Result<Duration, String> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err("the handshake took too long".into())
    } else {
        Ok(d)
    }
}

fn read_by(s: &Stream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        s.set_read_timeout(Some(left(deadline)?))
            .map_err(|e| e.to_string())?;
        let mut r = s;
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err("it closed the connection during the handshake".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err("the handshake took too long".into())
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

fn write_by(s: &Stream, buf: &[u8], deadline: Instant) -> Result<(), String> {
    s.set_write_timeout(Some(left(deadline)?))
        .map_err(|e| e.to_string())?;
    let mut w = s;
    w.write_all(buf).map_err(|e| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            "the handshake took too long".to_string()
        } else {
            e.to_string()
        }
    })
}

/// Why a send was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The peer's queue holds its limit of bytes: it is not reading as fast as it is sent
    /// to. Try again after its [`PeerEvent::Drained`](crate::PeerEvent::Drained).
    #[error("peer {peer}'s queue is full ({queued} bytes waiting)")]
    Full {
        /// The peer.
        peer: u32,
        /// Bytes waiting for it.
        queued: usize,
    },
    /// The peer has gone (its [`PeerEvent::Left`](crate::PeerEvent::Left) is on its way, or
    /// came), or never was.
    #[error("peer {0} is gone")]
    Gone(u32),
    /// A handler name longer than the wire's limit.
    #[error("a handler name of {0} bytes (the limit is 65535)")]
    NameTooLong(usize),
    /// Data longer than a frame can carry (4 GiB less its head).
    #[error("a message of {0} bytes (a frame carries less than 4 GiB)")]
    TooLarge(usize),
}

/// What waits to be written to a peer.
#[derive(Debug, Default)]
pub(crate) struct Out {
    /// Whole frames; the first may be partly written.
    pub(crate) queue: VecDeque<Vec<u8>>,
    /// Bytes of the first frame already written.
    pub(crate) done: usize,
    /// Bytes in the queue, less `done`.
    pub(crate) bytes: usize,
    /// A send was refused as full since the queue last emptied: the program waits for a
    /// `Drained` event.
    pub(crate) refused: bool,
}

/// A connection, shared by the PE (which writes to it) and its I/O thread (which reads, and
/// writes what the PE queued).
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) peer: u32,
    pub(crate) stream: Stream,
    /// Who is at the other end (an address, or a process of this host).
    pub(crate) remote: String,
    /// Why the lock: the PE and the I/O thread both write; frames must not interleave.
    pub(crate) out: Mutex<Out>,
    /// Bytes handed to the PE's mailbox and not yet handled.
    pub(crate) inbound: AtomicUsize,
    /// The I/O thread stopped reading it: `inbound` reached its limit.
    pub(crate) paused: AtomicBool,
    /// Gone: nothing more is written or read.
    pub(crate) closed: AtomicBool,
    /// The I/O thread may read it (false while an accepted peer's Joined is being posted).
    pub(crate) ready: AtomicBool,
}

/// What a send asks of the I/O thread.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// All written: nothing to do.
    Written,
    /// Some waits in the queue: the I/O thread must watch for the socket to take more.
    Queued,
}

impl Conn {
    pub(crate) fn new(peer: u32, stream: Stream) -> std::io::Result<Conn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay()?;
        stream.set_keepalive()?;
        let remote = stream.peer_name();
        Ok(Conn {
            peer,
            stream,
            remote,
            out: Mutex::new(Out::default()),
            inbound: AtomicUsize::new(0),
            paused: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            ready: AtomicBool::new(true),
        })
    }

    /// Send one frame: written at once if nothing waits before it (one `writev`, the
    /// message's one system call), else queued behind what waits. `limit`: refuse with
    /// [`SendError::Full`] if this many bytes already wait (`None`: never refuse — replies,
    /// which a peer's own calls bound).
    pub(crate) fn send(
        &self,
        kind: u8,
        id: u64,
        name: &[u8],
        data: &[u8],
        limit: Option<usize>,
    ) -> Result<Sent, SendError> {
        if name.len() > wire::MAX_NAME {
            return Err(SendError::NameTooLong(name.len()));
        }
        if data.len() > wire::MAX_DATA {
            return Err(SendError::TooLarge(data.len()));
        }
        let mut head = [0u8; MAX_HEAD];
        let h = wire::head(&mut head, kind, id, name.len(), data.len());
        let total = h + name.len() + data.len();
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return Err(SendError::Gone(self.peer));
        }
        if let Some(limit) = limit {
            if out.bytes >= limit {
                out.refused = true;
                return Err(SendError::Full {
                    peer: self.peer,
                    queued: out.bytes,
                });
            }
        }
        let mut written = 0;
        if out.queue.is_empty() {
            let parts = [
                IoSlice::new(&head[..h]),
                IoSlice::new(name),
                IoSlice::new(data),
            ];
            loop {
                match (&self.stream).write_vectored(&parts) {
                    Ok(n) => written = n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    // A dead socket: the I/O thread sees it too and says Left.
                    Err(_) => return Err(SendError::Gone(self.peer)),
                }
                break;
            }
            if written == total {
                return Ok(Sent::Written);
            }
        }
        // The rest waits: one copy, since the caller's buffer is not ours to keep.
        let mut rest = Vec::with_capacity(total - written);
        let mut skip = written;
        for part in [&head[..h], name, data] {
            let from = skip.min(part.len());
            rest.extend_from_slice(&part[from..]);
            skip -= from;
        }
        out.bytes += rest.len();
        out.queue.push_back(rest);
        Ok(Sent::Queued)
    }

    /// Write what waits, as far as the socket takes it (the I/O thread, when the socket is
    /// writable). Returns whether the queue emptied after a refusal (a `Drained` event is
    /// due), or an error if the socket is dead.
    pub(crate) fn flush(&self) -> std::io::Result<bool> {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        while !out.queue.is_empty() {
            let n = {
                let mut parts: Vec<IoSlice<'_>> = Vec::with_capacity(out.queue.len().min(64));
                for (i, f) in out.queue.iter().take(64).enumerate() {
                    parts.push(IoSlice::new(if i == 0 { &f[out.done..] } else { f }));
                }
                match (&self.stream).write_vectored(&parts) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) => return Err(e),
                }
            };
            out.bytes -= n;
            let mut n = n + out.done;
            out.done = 0;
            while let Some(f) = out.queue.front() {
                if n >= f.len() {
                    n -= f.len();
                    out.queue.pop_front();
                } else {
                    out.done = n;
                    break;
                }
            }
        }
        Ok(std::mem::take(&mut out.refused))
    }

    /// Bytes that may wait for the peer before it is no longer read and a reply to it ends
    /// the connection: four times what a send may queue, so only replies it does not read
    /// (its own calls', which sends cannot refuse) get there.
    pub(crate) fn reply_cap(&self, limits: &crate::Limits) -> usize {
        limits.queue_bytes.saturating_mul(4)
    }

    /// Bytes waiting to be written.
    pub(crate) fn waiting(&self) -> usize {
        let out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // A queued frame of 0 bytes cannot be: `bytes` is 0 exactly when the queue is empty.
        out.bytes
    }
}
