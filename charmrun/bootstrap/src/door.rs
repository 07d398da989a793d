//! The door of a launcher's listener (charmrun's control port, an agent's): connections are
//! accepted, each has its introduction frame read under a deadline counted from its accept,
//! and only then is it anybody's business. One thread does it all: it accepts, and reads every
//! waiting connection's introduction as its bytes come (epoll), so a job of N nodes costs the
//! launcher no thread per node while they start. What a stranger can do at the door, and what
//! it costs:
//!
//! | a stranger | costs the launcher |
//! |---|---|
//! | connects and says nothing, or a byte now and then | a descriptor and a buffer until [`INTRO_DEADLINE`] after accept, whatever it sends (the deadline is absolute, not per read) |
//! | connects again and again | at most `most` introductions are read at once; past that nothing more is accepted until one ends: the rest waits in the kernel's backlog, genuine nodes with it (delayed, never refused, never evicted) |
//! | announces a huge frame | nothing up front: the body grows as its bytes arrive, up to the frame limit |
//! | sends garbage or a wrong secret | its connection is judged at once |
//!
//! Exactly the introduction frame is read from a connection, never a byte past it: what the
//! peer sends next is for whoever takes the connection.

use crate::protocol::Kind;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an accepted connection has to introduce itself, from its accept. A node connects
/// before it opens its layer and sends its introduction after, so this is generous: a fabric
/// layer loads its library then (libfabric loads every provider's, and Debian's pulls in
/// libinfinipath, whose constructor spends ~0.1 s of CPU calibrating a clock), and 128 such
/// nodes started at once on 2 cores took 16 s to introduce themselves.
pub const INTRO_DEADLINE: Duration = Duration::from_secs(30);

/// A connection's introduction as the door read it: the frame, or why there is none
/// (`TimedOut` at the deadline, `UnexpectedEof`, `InvalidData` for a length out of range or a
/// kind unknown, the socket's error).
pub type Intro = io::Result<(Kind, Vec<u8>)>;

/// The listener's epoll token (connections are numbered from 0).
const LISTENER: u64 = u64::MAX;

/// How soon a listener that could not be put back into the epoll set is tried again.
const RETRY: Duration = Duration::from_millis(10);

/// A connection whose introduction is being read.
struct Waiting {
    stream: TcpStream,
    deadline: Instant,
    /// The length field, then the body, as they come.
    len: [u8; 4],
    got_len: usize,
    body: Vec<u8>,
    /// The body's length, once the length field is whole.
    want: Option<usize>,
}

impl Waiting {
    /// Read what has come, never past the frame: `Some` once the frame is whole or the
    /// connection failed.
    fn read(&mut self, max: usize) -> Option<Intro> {
        let mut chunk = [0u8; 4096];
        loop {
            let room = match self.want {
                None => 4 - self.got_len,
                Some(n) => (n - self.body.len()).min(chunk.len()),
            };
            let into = match self.want {
                None => &mut self.len[self.got_len..],
                Some(_) => &mut chunk[..room],
            };
            match self.stream.read(into) {
                Ok(0) => return Some(Err(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => match self.want {
                    None => {
                        self.got_len += n;
                        if self.got_len == 4 {
                            let len = u32::from_le_bytes(self.len) as usize;
                            if len == 0 || len > max.min(crate::protocol::MAX_FRAME) {
                                return Some(Err(io::Error::new(
                                    io::ErrorKind::InvalidData,
                                    format!("an introduction of {len} bytes"),
                                )));
                            }
                            self.want = Some(len);
                        }
                    }
                    Some(want) => {
                        // Grown as the bytes come, not allocated whole on the say-so of a
                        // length field.
                        self.body.extend_from_slice(&chunk[..n]);
                        if self.body.len() == want {
                            return Some(crate::protocol::split_kind(std::mem::take(
                                &mut self.body,
                            )));
                        }
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Serve `listener` until `open` is cleared (checked at each accept): each connection's
/// introduction (a frame of at most `max` bytes, within `deadline` of its accept:
/// [`INTRO_DEADLINE`] but in tests) is read, at most `most` at once, and the connection
/// (blocking again) goes to `judge` with it, on this thread: `judge` must not block.
pub fn serve(
    listener: TcpListener,
    most: usize,
    max: usize,
    deadline: Duration,
    open: Arc<AtomicBool>,
    judge: impl Fn(TcpStream, Intro),
) {
    let most = most.max(1);
    let epoll = match Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(target: "charmrun", "the launcher's door cannot open (epoll: {e}); nobody can connect");
            return;
        }
    };
    if listener.set_nonblocking(true).is_err()
        || epoll
            .add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
            .is_err()
    {
        tracing::warn!(target: "charmrun", "the launcher's door cannot watch its listener; nobody can connect");
        return;
    }
    let mut waiting: HashMap<u64, Waiting> = HashMap::new();
    let mut next = 0u64;
    let mut listening = true;
    let mut events = vec![EpollEvent::empty(); 64];
    loop {
        // A listener that could not go back into the set (below) is retried every 10 ms.
        let retry = (waiting.len() < most && !listening).then(|| Instant::now() + RETRY);
        let timeout = waiting
            .values()
            .map(|w| w.deadline)
            .chain(retry)
            .min()
            .map_or(EpollTimeout::NONE, |d| {
                let ms = d
                    .saturating_duration_since(Instant::now())
                    .as_nanos()
                    .div_ceil(1_000_000);
                EpollTimeout::from(ms.min(60_000) as u16)
            });
        let n = match epoll.wait(&mut events, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(_) => {
                // Out of memory and the like: do not spin.
                std::thread::sleep(Duration::from_millis(10));
                0
            }
        };
        for e in &events[..n] {
            let token = e.data();
            if token == LISTENER {
                while waiting.len() < most {
                    let stream = match listener.accept() {
                        Ok((s, _)) => s,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        // One connection's trouble (reset before it was taken): the next.
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                            ) =>
                        {
                            continue
                        }
                        Err(_) => {
                            // Out of descriptors and the like: do not spin.
                            std::thread::sleep(Duration::from_millis(10));
                            break;
                        }
                    };
                    if !open.load(Ordering::SeqCst) {
                        return;
                    }
                    let watched = stream.set_nonblocking(true).and_then(|()| {
                        epoll
                            .add(&stream, EpollEvent::new(EpollFlags::EPOLLIN, next))
                            .map_err(io::Error::from)
                    });
                    if let Err(e) = watched {
                        // Judged (and so counted) like any connection that did not introduce
                        // itself.
                        hand_over(stream, Err(e), &judge);
                        continue;
                    }
                    waiting.insert(
                        next,
                        Waiting {
                            stream,
                            deadline: Instant::now() + deadline,
                            len: [0; 4],
                            got_len: 0,
                            body: Vec::new(),
                            want: None,
                        },
                    );
                    next += 1;
                }
                continue;
            }
            let Some(w) = waiting.get_mut(&token) else {
                continue;
            };
            if let Some(intro) = w.read(max) {
                if let Some(w) = waiting.remove(&token) {
                    let _ = epoll.delete(&w.stream);
                    hand_over(w.stream, intro, &judge);
                }
            }
        }
        // Introductions not made in time.
        let now = Instant::now();
        let late: Vec<u64> = waiting
            .iter()
            .filter(|(_, w)| w.deadline <= now)
            .map(|(&t, _)| t)
            .collect();
        for t in late {
            if let Some(w) = waiting.remove(&t) {
                let _ = epoll.delete(&w.stream);
                hand_over(w.stream, Err(io::ErrorKind::TimedOut.into()), &judge);
            }
        }
        // At the bound the listener leaves the set (it would be ready for ever): the rest
        // waits in the kernel's backlog until an introduction ends.
        let below = waiting.len() < most;
        if below != listening {
            let r = if below {
                epoll.add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
            } else {
                epoll.delete(&listener)
            };
            if r.is_ok() {
                listening = below;
            }
        }
    }
}

/// Give a connection to `judge`, blocking again (its new owner reads it with blocking calls).
fn hand_over(stream: TcpStream, intro: Intro, judge: &impl Fn(TcpStream, Intro)) {
    let intro = match stream.set_nonblocking(false) {
        Ok(()) => intro,
        Err(e) => Err(e),
    };
    judge(stream, intro);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::Ipv4Addr;

    /// A door serving on a thread of its own; its verdicts come on the channel.
    fn door(
        most: usize,
        deadline: Duration,
    ) -> (
        std::net::SocketAddr,
        std::sync::mpsc::Receiver<(TcpStream, Intro)>,
    ) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let addr = l.local_addr().expect("addr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            serve(
                l,
                most,
                1 << 16,
                deadline,
                Arc::new(AtomicBool::new(true)),
                move |s, i| {
                    let _ = tx.send((s, i));
                },
            );
        });
        (addr, rx)
    }

    fn frame(kind: Kind, body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32 + 1).to_le_bytes().to_vec();
        f.push(kind as u8);
        f.extend_from_slice(body);
        f
    }

    /// A byte at a time, slower than the deadline allows for the whole: judged timed out at
    /// the deadline, not kept alive by each byte.
    #[test]
    fn a_trickling_stranger_is_cut_off_at_the_deadline() {
        let (addr, rx) = door(8, Duration::from_millis(300));
        let mut c = TcpStream::connect(addr).expect("connect");
        let start = Instant::now();
        let t = std::thread::spawn(move || {
            let _ = c.write_all(&100u32.to_le_bytes());
            for _ in 0..20 {
                if c.write_all(&[1]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let (_, intro) = rx.recv_timeout(Duration::from_secs(5)).expect("a verdict");
        assert_eq!(intro.expect_err("cut").kind(), io::ErrorKind::TimedOut);
        let took = start.elapsed();
        // Not before the deadline; well before the bytes would have ended (a loaded machine
        // may be late, never early).
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(10),
            "{took:?}"
        );
        t.join().ok();
    }

    /// Frames come whole however they trickle, and exactly the frame is read: the bytes after
    /// it are still in the socket for the connection's new owner. A frame announcing more than
    /// allowed is refused before any body is read.
    #[test]
    fn frames_are_read_whole_and_nothing_past_them() {
        let (addr, rx) = door(8, Duration::from_secs(5));
        let mut c = TcpStream::connect(addr).expect("connect");
        let mut bytes = frame(Kind::Hello, &[7, 8, 9]);
        bytes.extend(frame(Kind::Barrier, &[]));
        for b in &bytes[..6] {
            c.write_all(&[*b]).expect("write");
            std::thread::sleep(Duration::from_millis(5));
        }
        c.write_all(&bytes[6..]).expect("write");
        let (mut s, intro) = rx.recv_timeout(Duration::from_secs(5)).expect("a verdict");
        assert_eq!(intro.expect("a frame"), (Kind::Hello, vec![7, 8, 9]));
        let next = crate::protocol::read_frame(&mut s).expect("the next frame, still there");
        assert_eq!(next, (Kind::Barrier, vec![]));

        let mut c2 = TcpStream::connect(addr).expect("connect");
        c2.write_all(&u32::MAX.to_le_bytes()).expect("write");
        let (_, intro) = rx.recv_timeout(Duration::from_secs(5)).expect("a verdict");
        assert_eq!(
            intro.expect_err("too large").kind(),
            io::ErrorKind::InvalidData
        );
        drop(c);
    }

    /// At the bound, later connections wait in the backlog (not refused) and are read once a
    /// place frees; a connection that closes early is judged as such.
    #[test]
    fn at_the_bound_the_rest_waits_and_is_read_later() {
        let (addr, rx) = door(1, Duration::from_millis(400));
        let _silent = TcpStream::connect(addr).expect("connect");
        std::thread::sleep(Duration::from_millis(50));
        let mut genuine = TcpStream::connect(addr).expect("connect");
        genuine.write_all(&frame(Kind::Hello, &[1])).expect("write");
        let (_, first) = rx.recv_timeout(Duration::from_secs(5)).expect("a verdict");
        assert_eq!(
            first.expect_err("the silent one").kind(),
            io::ErrorKind::TimedOut
        );
        let (_, second) = rx.recv_timeout(Duration::from_secs(5)).expect("a verdict");
        assert_eq!(
            second.expect("read once a place freed"),
            (Kind::Hello, vec![1])
        );
        let early = TcpStream::connect(addr).expect("connect");
        drop(early);
        let (_, third) = rx.recv_timeout(Duration::from_secs(5)).expect("a verdict");
        assert_eq!(
            third.expect_err("closed").kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
