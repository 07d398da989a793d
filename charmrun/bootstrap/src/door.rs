//! The door of a launcher's listener (charmrun's control port, an agent's): connections are
//! accepted, each reads one introduction frame under a deadline counted from its accept, and
//! only then is it anybody's business. What a stranger can do at the door, and what it costs:
//!
//! | a stranger | costs the launcher |
//! |---|---|
//! | connects and says nothing, or a byte now and then | a thread and a descriptor until [`INTRO_DEADLINE`] after accept, whatever it sends (the deadline is absolute, not per read) |
//! | connects again and again | at most `most` introductions are read at once; past that nothing more is accepted until one ends: the rest waits in the kernel's backlog, genuine nodes with it (delayed, never refused, never evicted) |
//! | announces a huge frame | nothing up front: the body grows as its bytes arrive, up to the frame limit |
//! | sends garbage or a wrong secret | its thread ends at once |
//!
//! A thread that cannot be made (the system's limit) drops that connection instead of ending
//! the accepting thread, which would close the door for the nodes still to come.

use crate::protocol::Kind;
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an accepted connection has to introduce itself, from its accept. A node connects
/// before it opens its layer and sends its introduction after, so this is generous: a fabric
/// layer loads its library then (libfabric loads every provider's, and Debian's pulls in
/// libinfinipath, whose constructor spends ~0.1 s of CPU calibrating a clock), and 128 such
/// nodes started at once on 2 cores took 16 s to introduce themselves.
pub const INTRO_DEADLINE: Duration = Duration::from_secs(30);

/// Serve `listener` until `open` is cleared (checked at each accept): each connection goes to
/// `introduce` on a thread of its own, at most `most` at once.
pub fn serve(
    listener: TcpListener,
    most: usize,
    open: Arc<AtomicBool>,
    introduce: impl Fn(TcpStream) + Send + Sync + 'static,
) {
    let introduce = Arc::new(introduce);
    let busy = Arc::new(AtomicUsize::new(0));
    loop {
        // At the bound: the next ones wait in the backlog until an introduction ends.
        while busy.load(Ordering::Acquire) >= most.max(1) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors and the like: do not spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if !open.load(Ordering::SeqCst) {
            return;
        }
        busy.fetch_add(1, Ordering::AcqRel);
        let (b, f) = (busy.clone(), introduce.clone());
        let spawned = std::thread::Builder::new()
            .name("introduction".into())
            .stack_size(64 << 10)
            .spawn(move || {
                f(stream);
                b.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            // The connection went with the closure; its slot is free again.
            busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Read one frame of at most `max` bytes from `s` before `deadline`: the introduction of a
/// peer not yet trusted.
///
/// # Errors
/// `TimedOut` at the deadline, `InvalidData` for a frame too large or of no known kind, the
/// socket's.
pub fn read_intro(s: &mut TcpStream, max: usize, deadline: Instant) -> io::Result<(Kind, Vec<u8>)> {
    let mut r = Until { s, deadline };
    let len = crate::protocol::read_frame_len(&mut r, max)?;
    // Grown as the bytes come, not allocated whole on the say-so of a length field.
    let mut body = Vec::new();
    (&mut r).take(len as u64).read_to_end(&mut body)?;
    if body.len() < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    crate::protocol::split_kind(body)
}

/// A stream whose reads end at a deadline, however the bytes trickle.
struct Until<'a> {
    s: &'a mut TcpStream,
    deadline: Instant,
}

impl Read for Until<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.s.set_read_timeout(Some(left))?;
        match self.s.read(buf) {
            // The socket's timeout (the deadline) ran out inside this read.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::ErrorKind::TimedOut.into()),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::Ipv4Addr;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c, s)
    }

    /// A byte at a time, slower than the deadline allows for the whole: refused at the
    /// deadline, not kept alive by each byte.
    #[test]
    fn a_trickling_stranger_is_cut_off_at_the_deadline() {
        let (mut c, mut s) = pair();
        let t = std::thread::spawn(move || {
            // A frame of 100 bytes announced, its body then a byte at a time.
            let _ = c.write_all(&100u32.to_le_bytes());
            for _ in 0..20 {
                if c.write_all(&[1]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let start = Instant::now();
        let e = read_intro(&mut s, 1 << 16, start + Duration::from_millis(300)).expect_err("cut");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(s);
        t.join().ok();
    }

    /// A frame is read whole; one that announces more than allowed is refused before any
    /// body is read.
    #[test]
    fn frames_are_read_whole_and_huge_ones_refused() {
        let (mut c, mut s) = pair();
        let mut f = 3u32.to_le_bytes().to_vec();
        f.extend([Kind::Hello as u8, 7, 8]);
        c.write_all(&f).expect("write");
        let deadline = Instant::now() + Duration::from_secs(5);
        let (k, body) = read_intro(&mut s, 1 << 16, deadline).expect("frame");
        assert_eq!((k, body), (Kind::Hello, vec![7, 8]));
        c.write_all(&u32::MAX.to_le_bytes()).expect("write");
        let e = read_intro(&mut s, 1 << 16, deadline).expect_err("too large");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
