//! One TCP connection to a peer node: length-prefixed frames out and in.
//!
//! A frame is `[u32 length LE][wire bytes]`; the length prefix is written into the message's
//! headroom, so a send is one `write` of the message's own buffer. Sends the socket cannot
//! take now are queued and later flushed with `writev`, several frames per call.
//!
//! **Coalescing** ([`Coalesce`]): the first frame of a turn (see [`Conn::send`]) is written at
//! once, so a lone message leaves as it did; a frame sent soon after a write of the same
//! turn is held instead, and the frames held go out together, in one `writev`, when the
//! layer is flushed (after the handler that sent them, at every poll), when they reach
//! [`Coalesce::bytes`] or [`IOV_MAX`] frames, or when the socket is busy anyway. A burst of
//! small messages then costs a system call per 64 of them instead of one each.
//!
//! Receiving reads as much as the socket has into a 64 KiB buffer and cuts frames out of it:
//! a small message is copied once from there into its own buffer (one `memcpy` costs far less
//! than one `read` per message); a large one gets its own buffer as soon as its length is
//! known and the rest of it is read straight into that buffer, so its payload is never copied.
//! That buffer is one a large message sent earlier was in (the layer's [`Pool`]: its pages are
//! mapped already), else fresh; either way it is never zeroed first, since the socket writes
//! every byte of it.

use converse_machine::BufferPool as Pool;
use converse_machine::{Message, ENVELOPE_LEN, HEADROOM};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Bytes of the length prefix.
pub(crate) const FRAME_HEADER: usize = 4;

/// Size of the receive buffer.
const READ_BUF: usize = 64 << 10;

/// Bytes one [`Conn::receive`] takes at most before it returns: a socket buffer's worth or
/// so, so that what a receiver takes in per poll is bounded and its runtime can stop polling
/// when it is too far behind (`sched.max_queued_mib`).
const RECEIVE_BUDGET: usize = 4 << 20;

/// Frames of at least this many bytes are read straight into their own buffer.
const BIG: usize = 16 << 10;

/// Most frames handed to one `writev`.
pub(crate) const IOV_MAX: usize = 64;

/// How a connection holds small frames back to write several with one `writev`: the TCP
/// layer's `tcp.coalesce_us` and `tcp.coalesce_kib`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Coalesce {
    /// A frame sent within this long of the connection's last write, in the same turn, is
    /// held; zero turns coalescing off. What makes a send part of a burst: a handler that
    /// sends once, computes, and sends again sends each at once (a frame already held waits
    /// for the flush, though: the end of the handler at the latest).
    pub(crate) within: Duration,
    /// Held bytes at which the frames held are written at once (a large message is never
    /// held for long).
    pub(crate) bytes: usize,
}

#[cfg(test)]
impl Coalesce {
    /// Never hold a frame: every send is written at once, as before coalescing.
    pub(crate) const OFF: Coalesce = Coalesce {
        within: Duration::ZERO,
        bytes: 0,
    };
}

/// Why a connection cannot go on.
#[derive(Debug)]
pub(crate) enum ConnError {
    /// The peer closed it or it broke.
    Gone(String),
    /// The peer sent a frame that cannot be one of ours.
    Corrupt(converse_machine::WireError),
}

/// A connection to one peer.
pub(crate) struct Conn {
    stream: TcpStream,
    /// Frames waiting for the socket; the front one may be partly written.
    out: VecDeque<Message>,
    /// Bytes of the front frame already written.
    out_off: usize,
    /// Wire bytes of the frames in `out`, for the runtime's bound on what waits for a peer.
    out_bytes: usize,
    /// The socket took less than it was given at the last write: `out` waits for it to
    /// drain (the layer watches it for writability). Otherwise what `out` holds is held on
    /// purpose, to be coalesced.
    blocked: bool,
    /// The layer's turn ([`Conn::send`]) of this connection's last write, and when that was
    /// (read only with coalescing on).
    turn: u64,
    last_write: Option<Instant>,
    /// Write system calls that took bytes, and frames written whole: `+stats`' measure of
    /// coalescing (a counter add each, no more).
    writes: u64,
    frames: u64,
    /// Receive buffer, allocated on the first receive: a peer that never sends costs nothing.
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    /// A large frame being read in place: its buffer, whose length is what is filled so far
    /// (headroom included), and the length it will have when the frame is whole.
    big: Option<(Vec<u8>, usize)>,
}

impl Conn {
    /// Wrap a connected, non-blocking stream.
    pub(crate) fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            out: VecDeque::new(),
            out_off: 0,
            out_bytes: 0,
            blocked: false,
            turn: u64::MAX,
            last_write: None,
            writes: 0,
            frames: 0,
            inbuf: Vec::new(),
            in_start: 0,
            in_end: 0,
            big: None,
        }
    }

    /// The socket.
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Wire bytes of the frames waiting for the socket.
    pub(crate) fn queued(&self) -> usize {
        self.out_bytes
    }

    /// Whether a frame is part-way in: some of its bytes read, the rest to come.
    pub(crate) fn mid_frame(&self) -> bool {
        self.big.is_some() || self.in_end > self.in_start
    }

    /// Whether frames wait: for the socket, or held to be coalesced.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Write system calls that took bytes, and frames written whole, so far.
    pub(crate) fn written(&self) -> (u64, u64) {
        (self.writes, self.frames)
    }

    /// Whether frames wait for the socket to drain (not merely held): the layer then watches
    /// it for writability.
    pub(crate) fn blocked(&self) -> bool {
        self.blocked
    }

    /// Send a message. Never blocks. A large message's buffer, once written, goes to `pool`.
    ///
    /// `turn` is the layer's count of flushes (each poll, each flush after a handler): the
    /// first frame of a turn is written at once if nothing is queued before it, as is one
    /// sent longer than `co.within` after this connection's last write; a later one is held
    /// (see the module's docs) until the next flush, or until what is held reaches
    /// `co.bytes` or [`IOV_MAX`] frames. A frame the socket cannot take now is queued.
    ///
    /// # Errors
    /// [`ConnError::Gone`] when the socket is broken.
    pub(crate) fn send(
        &mut self,
        mut msg: Message,
        pool: &mut Pool,
        turn: u64,
        co: Coalesce,
    ) -> Result<(), ConnError> {
        let len = u32::try_from(msg.wire_len())
            .map_err(|_| ConnError::Gone("message larger than 4 GiB".into()))?;
        let frame = msg.frame_with_header(FRAME_HEADER);
        frame[..FRAME_HEADER].copy_from_slice(&len.to_le_bytes());
        if self.out.is_empty() && !self.holds(turn, co) {
            // The common case: one write syscall per message, from the message's own buffer.
            loop {
                match self.stream.write(frame) {
                    Ok(n) if n == frame.len() => {
                        self.writes += 1;
                        self.frames += 1;
                        self.wrote(turn, co);
                        // Small buffers are dropped there (one comparison); large ones kept.
                        pool.put(msg);
                        return Ok(());
                    }
                    Ok(n) => {
                        self.writes += 1;
                        self.out_off = n;
                        self.blocked = true;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.out_off = 0;
                        self.blocked = true;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ConnError::Gone(e.to_string())),
                }
            }
        }
        self.out_bytes += msg.wire_len();
        self.out.push_back(msg);
        if !self.blocked && (self.out_bytes >= co.bytes || self.out.len() >= IOV_MAX) {
            self.flush(pool, turn, co)?;
        }
        Ok(())
    }

    /// Whether a frame sent now, with nothing queued, is held: coalescing is on, and this
    /// connection was written to in this turn, shortly before.
    #[inline]
    fn holds(&self, turn: u64, co: Coalesce) -> bool {
        self.turn == turn
            && !co.within.is_zero()
            && self.last_write.is_some_and(|t| t.elapsed() < co.within)
    }

    /// A write went out whole: remember the turn, and (coalescing on) the time, which the
    /// next send of this turn compares with — a clock read (vDSO, no system call) per write,
    /// against the write's system call.
    #[inline]
    fn wrote(&mut self, turn: u64, co: Coalesce) {
        self.turn = turn;
        if !co.within.is_zero() {
            self.last_write = Some(Instant::now());
        }
    }

    /// Write queued and held frames until the socket is full or nothing is left; large
    /// buffers written go to `pool`.
    ///
    /// # Errors
    /// [`ConnError::Gone`] when the socket is broken.
    pub(crate) fn flush(
        &mut self,
        pool: &mut Pool,
        turn: u64,
        co: Coalesce,
    ) -> Result<(), ConnError> {
        if self.out.is_empty() {
            return Ok(());
        }
        while !self.out.is_empty() {
            let mut iov: [IoSlice<'_>; IOV_MAX] = [IoSlice::new(&[]); IOV_MAX];
            let mut k = 0;
            for (i, m) in self.out.iter_mut().take(IOV_MAX).enumerate() {
                let f: &[u8] = m.frame_with_header(FRAME_HEADER);
                iov[i] = IoSlice::new(if i == 0 { &f[self.out_off..] } else { f });
                k = i + 1;
            }
            let written = match self.stream.write_vectored(&iov[..k]) {
                Ok(0) => return Err(ConnError::Gone("socket accepts no data".into())),
                Ok(n) => {
                    self.writes += 1;
                    n
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ConnError::Gone(e.to_string())),
            };
            let mut left = written;
            while left > 0 {
                let Some(front) = self.out.front_mut() else {
                    break;
                };
                let rest = front.wire_len() + FRAME_HEADER - self.out_off;
                if left >= rest {
                    left -= rest;
                    self.out_bytes -= front.wire_len();
                    self.frames += 1;
                    if let Some(m) = self.out.pop_front() {
                        pool.put(m);
                    }
                    self.out_off = 0;
                } else {
                    self.out_off += left;
                    left = 0;
                }
            }
        }
        self.blocked = false;
        self.wrote(turn, co);
        Ok(())
    }

    /// Read what the socket has and hand up every complete message. Returns how many. A
    /// large frame is read into a buffer from `pool` when one fits.
    ///
    /// # Errors
    /// [`ConnError::Gone`] at end of stream or on a socket error; [`ConnError::Corrupt`] for a
    /// frame too short to hold an envelope.
    pub(crate) fn receive(
        &mut self,
        deliver: &mut dyn FnMut(Message),
        pool: &mut Pool,
    ) -> Result<usize, ConnError> {
        if self.inbuf.is_empty() {
            self.inbuf = vec![0u8; READ_BUF];
        }
        let mut n = 0;
        let mut taken = 0;
        loop {
            n += self.cut_frames(deliver, pool)?;
            let (result, room) = match &mut self.big {
                Some((buf, whole)) => {
                    let room = *whole - buf.len();
                    (read_uninit(&self.stream, buf, room), room)
                }
                None => {
                    if self.in_start > 0 {
                        self.inbuf.copy_within(self.in_start..self.in_end, 0);
                        self.in_end -= self.in_start;
                        self.in_start = 0;
                    }
                    let target = &mut self.inbuf[self.in_end..];
                    (self.stream.read(target), target.len())
                }
            };
            let got = match result {
                Ok(0) => return Err(ConnError::Gone("connection closed".into())),
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ConnError::Gone(e.to_string())),
            };
            match self.big.take() {
                Some((buf, whole)) if buf.len() == whole => {
                    deliver(Message::from_frame(buf, HEADROOM).map_err(ConnError::Corrupt)?);
                    n += 1;
                }
                Some(part) => self.big = Some(part),
                None => self.in_end += got,
            }
            taken += got;
            // The socket had less than we asked for: it is drained for now (another read would
            // only say so, at the price of a syscall per message). Or this call has taken its
            // share: a sender as fast as these reads would otherwise keep one call going, and
            // everything it sent would be taken into this process, however far behind its
            // handlers are (the rest stays in the socket; epoll is level-triggered).
            if got < room || taken >= RECEIVE_BUDGET {
                n += self.cut_frames(deliver, pool)?;
                return Ok(n);
            }
        }
    }

    /// Hand up the complete frames in the buffer; start a large one in its own buffer.
    fn cut_frames(
        &mut self,
        deliver: &mut dyn FnMut(Message),
        pool: &mut Pool,
    ) -> Result<usize, ConnError> {
        let mut n = 0;
        while self.big.is_none() {
            let avail = &self.inbuf[self.in_start..self.in_end];
            let Some((len, rest)) = avail.split_first_chunk::<FRAME_HEADER>() else {
                break;
            };
            let len = u32::from_le_bytes(*len) as usize;
            if len < ENVELOPE_LEN {
                return Err(ConnError::Corrupt(converse_machine::WireError::Truncated {
                    len,
                    need: ENVELOPE_LEN,
                }));
            }
            if rest.len() >= len {
                let msg = Message::from_wire(&rest[..len]).map_err(ConnError::Corrupt)?;
                self.in_start += FRAME_HEADER + len;
                deliver(msg);
                n += 1;
            } else if len >= BIG || FRAME_HEADER + len > READ_BUF {
                let whole = HEADROOM + len;
                let mut buf = match pool.take(whole) {
                    Some(b) => b,
                    None => {
                        // The length comes from the peer: a size memory cannot hold ends the
                        // connection rather than the process.
                        let mut b = Vec::new();
                        b.try_reserve_exact(whole).map_err(|_| {
                            ConnError::Gone(format!("no memory for a frame of {len} bytes"))
                        })?;
                        b
                    }
                };
                buf.resize(HEADROOM, 0);
                buf.extend_from_slice(rest);
                self.in_start = 0;
                self.in_end = 0;
                self.big = Some((buf, whole));
            } else {
                break;
            }
        }
        Ok(n)
    }
}

/// Read up to `want` bytes from `stream` into `buf`'s spare capacity, growing its length by
/// what came.
///
/// `libc::recv` rather than `Read::read` or nix's `recv`: both take an initialized slice, and
/// initializing a large frame's buffer first is the `memset` of the whole message this
/// avoids (std's `read_buf` for uninitialized memory is not stable). `recv`, as std's socket
/// `read` is, not `read`: it skips the file layer.
fn read_uninit(stream: &TcpStream, buf: &mut Vec<u8>, want: usize) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    let want = want.min(spare.len());
    // SAFETY: the kernel writes at most `want` bytes at `spare`'s start, all inside the
    // allocation; it reads none of them.
    let r = unsafe { libc::recv(stream.as_raw_fd(), spare.as_mut_ptr().cast(), want, 0) };
    let got = usize::try_from(r).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the first `got <= want` spare bytes were just written by `read`.
    unsafe { buf.set_len(buf.len() + got) };
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    /// A connected pair: our `Conn` and the raw peer end.
    fn pair() -> (Conn, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let peer = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (ours, _) = l.accept().expect("accept");
        ours.set_nonblocking(true).expect("nonblocking");
        (Conn::new(ours), peer)
    }

    /// Receive until `n` messages came or a few seconds passed.
    fn receive_until(c: &mut Conn, n: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = 0;
        while got < n && Instant::now() < deadline {
            got += c
                .receive(&mut |_| {}, &mut Pool::default())
                .expect("receive");
        }
        got
    }

    #[test]
    fn a_frame_half_in_is_mid_frame_until_its_rest_comes() {
        let (mut c, mut peer) = pair();
        assert!(!c.mid_frame());
        let msg = Message::from_payload(&[7u8; 1000]);
        let mut frame = (msg.wire_len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(msg.wire());
        peer.write_all(&frame[..500]).expect("first half");
        // The first half arrives: read, nothing complete, the frame is part-way in.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !c.mid_frame() && Instant::now() < deadline {
            assert_eq!(
                c.receive(&mut |_| {}, &mut Pool::default())
                    .expect("receive"),
                0
            );
        }
        assert!(c.mid_frame());
        peer.write_all(&frame[500..]).expect("second half");
        assert_eq!(receive_until(&mut c, 1), 1);
        assert!(!c.mid_frame());
    }

    /// A large frame of distinct bytes, as the peer writes it.
    fn big_frame(len: usize) -> (Vec<u8>, Vec<u8>) {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let msg = Message::from_payload(&payload);
        let mut frame = (msg.wire_len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(msg.wire());
        (frame, payload)
    }

    /// Receive into `pool` until one message came (the peer writes from another thread).
    fn receive_one(c: &mut Conn, pool: &mut Pool) -> Message {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = None;
        while got.is_none() && Instant::now() < deadline {
            c.receive(&mut |m| got = Some(m), pool).expect("receive");
        }
        got.expect("a message within 5 s")
    }

    #[test]
    fn a_large_frame_arrives_intact_in_a_fresh_buffer() {
        let (mut c, mut peer) = pair();
        let (frame, payload) = big_frame(100 << 10);
        // Written from this thread as the socket takes it: no writer thread.
        peer.set_nonblocking(true).expect("nonblocking");
        let (mut off, mut got) = (0, None);
        let mut pool = Pool::default();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.is_none() && Instant::now() < deadline {
            match peer.write(&frame[off..]) {
                Ok(k) => off += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("peer write: {e}"),
            }
            c.receive(&mut |m| got = Some(m), &mut pool)
                .expect("receive");
        }
        let m = got.expect("the message within 5 s");
        assert_eq!(m.payload(), &payload[..]);
    }

    #[test]
    fn a_large_frame_is_read_into_the_buffer_of_a_large_message_sent() {
        let (mut c, mut peer) = pair();
        let mut pool = Pool::default();
        // A large message sent on this connection leaves its buffer to the pool.
        let sent = Message::from_payload(&[9u8; 100 << 10]);
        let sent_at = sent.wire().as_ptr() as usize - HEADROOM;
        c.send(sent, &mut pool, 0, Coalesce::OFF).expect("send");
        while c.has_output() {
            let mut sink = vec![0u8; 100 << 10];
            let _ = peer.read(&mut sink).expect("peer reads");
            c.flush(&mut pool, 0, Coalesce::OFF).expect("flush");
        }
        let (frame, payload) = big_frame(100 << 10);
        let writer = std::thread::spawn(move || peer.write_all(&frame).map(|()| peer));
        let m = receive_one(&mut c, &mut pool);
        assert_eq!(m.payload(), &payload[..]);
        let (buf, _) = m.into_frame();
        assert_eq!(
            buf.as_ptr() as usize,
            sent_at,
            "the sent message's buffer, reused"
        );
        writer.join().expect("writer").expect("write");
    }

    /// Minor page faults of this thread so far.
    fn minor_faults() -> i64 {
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
            .expect("getrusage")
            .minor_page_faults()
    }

    #[test]
    fn a_receiver_of_large_messages_only_faults_no_fresh_pages_per_message() {
        // A buffer the handler dropped is memory the allocator hands out again, pages mapped;
        // a fresh (or zeroed) buffer per message would fault in all of its 26 pages. One
        // thread writes and reads in turn, and little: the tests beside it keep their core.
        let (mut c, mut peer) = pair();
        peer.set_nonblocking(true).expect("nonblocking");
        let (frame, _) = big_frame(100 << 10);
        let (n, warm_up) = (24, 6);
        let mut pool = Pool::default();
        let (mut got, mut faults, mut counted) = (0, 0, 0);
        let (mut written, mut off) = (0, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while got < n && Instant::now() < deadline {
            // One frame at a time, so that each receive finds about one message.
            let target = (got + 1).min(n);
            while written < target {
                match peer.write(&frame[off..]) {
                    Ok(k) => {
                        off += k;
                        if off == frame.len() {
                            (written, off) = (written + 1, 0);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("peer write: {e}"),
                }
            }
            let (at, before) = (minor_faults(), got);
            c.receive(
                &mut |m| {
                    got += 1;
                    drop(m);
                },
                &mut pool,
            )
            .expect("receive");
            if before >= warm_up {
                faults += minor_faults() - at;
                counted += got - before;
            }
        }
        assert_eq!(got, n, "every message came");
        assert!(
            faults < counted as i64 * 4,
            "{faults} page faults over {counted} messages of 100 KiB"
        );
    }

    /// Frames on the peer's side of a connection, cut from what it read.
    fn frames_read(peer: &mut TcpStream, want: usize) -> Vec<Vec<u8>> {
        peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let mut bytes = Vec::new();
        let mut frames = Vec::new();
        while frames.len() < want {
            let mut buf = [0u8; 4096];
            let n = peer.read(&mut buf).expect("peer reads within 5 s");
            assert!(n > 0, "the connection closed");
            bytes.extend_from_slice(&buf[..n]);
            while bytes.len() >= FRAME_HEADER {
                let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
                if bytes.len() < FRAME_HEADER + len {
                    break;
                }
                frames.push(bytes[FRAME_HEADER..FRAME_HEADER + len].to_vec());
                bytes.drain(..FRAME_HEADER + len);
            }
        }
        frames
    }

    const ON: Coalesce = Coalesce {
        within: Duration::from_secs(60),
        bytes: 16 << 10,
    };

    #[test]
    fn the_first_frame_of_a_turn_leaves_at_once_and_the_rest_wait_for_the_flush() {
        let (mut c, mut peer) = pair();
        let mut pool = Pool::default();
        c.send(Message::from_payload(b"first"), &mut pool, 1, ON)
            .expect("send");
        assert!(
            !c.has_output(),
            "the first frame of a turn is written at once"
        );
        for i in 0..10u8 {
            c.send(Message::from_payload(&[i; 8]), &mut pool, 1, ON)
                .expect("send");
        }
        assert!(
            c.has_output() && !c.blocked(),
            "later ones are held, not blocked"
        );
        assert_eq!(c.queued(), 10 * Message::from_payload(&[0; 8]).wire_len());
        assert_eq!(frames_read(&mut peer, 1).len(), 1);
        c.flush(&mut pool, 1, ON).expect("flush");
        assert!(!c.has_output());
        let got = frames_read(&mut peer, 10);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(&f[f.len() - 8..], &[i as u8; 8], "in order");
        }
        // A new turn: its first frame is written at once again.
        c.send(Message::from_payload(b"next"), &mut pool, 2, ON)
            .expect("send");
        assert!(!c.has_output());
    }

    #[test]
    fn held_frames_go_out_at_the_frame_or_byte_bound_and_never_with_coalescing_off() {
        let (mut c, mut peer) = pair();
        let mut pool = Pool::default();
        for _ in 0..IOV_MAX + 1 {
            c.send(Message::from_payload(&[1; 8]), &mut pool, 7, ON)
                .expect("send");
        }
        // The first, then a writev of IOV_MAX once that many were held.
        assert!(!c.has_output(), "{} bytes held", c.queued());
        assert_eq!(frames_read(&mut peer, IOV_MAX + 1).len(), IOV_MAX + 1);
        // A large message is not held past its send.
        c.send(Message::from_payload(&[2; 20 << 10]), &mut pool, 7, ON)
            .expect("send");
        assert!(!c.has_output() || c.blocked());
        // Off: every frame is written at once, whatever the turn.
        let (mut c, _peer) = pair();
        for _ in 0..3 {
            c.send(Message::from_payload(&[3; 8]), &mut pool, 9, Coalesce::OFF)
                .expect("send");
            assert!(!c.has_output());
        }
    }

    #[test]
    fn a_send_long_after_the_last_write_leaves_at_once() {
        let (mut c, _peer) = pair();
        let mut pool = Pool::default();
        let soon = Coalesce {
            within: Duration::from_millis(20),
            bytes: 16 << 10,
        };
        c.send(Message::from_payload(b"a"), &mut pool, 3, soon)
            .expect("send");
        std::thread::sleep(Duration::from_millis(40));
        c.send(Message::from_payload(b"b"), &mut pool, 3, soon)
            .expect("send");
        assert!(
            !c.has_output(),
            "a handler that computed between sends is not held"
        );
    }
}
