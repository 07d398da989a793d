//! Raw baselines: the same exchange written directly on the mechanism a layer uses, with no
//! runtime in between. The fastest a plain program gets on this machine, measured in the same
//! run as the layer.

use crate::report::{histogram, Row};
use crossbeam_channel::TryRecvError;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Ping-pong between two threads over crossbeam channels, moving the buffer (as the in-process
/// layer does), busy-polling on both sides.
pub(crate) fn crossbeam_pingpong(size: usize, iters: u64, warmup: u64) -> anyhow::Result<Row> {
    let (to_b, b_in) = crossbeam_channel::unbounded::<Vec<u8>>();
    let (to_a, a_in) = crossbeam_channel::unbounded::<Vec<u8>>();
    let total = iters + warmup;
    let echo = std::thread::spawn(move || {
        for _ in 0..total {
            let m = loop {
                match b_in.try_recv() {
                    Ok(m) => break m,
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                    Err(TryRecvError::Disconnected) => return,
                }
            };
            if to_a.send(m).is_err() {
                return;
            }
        }
    });
    let mut h = histogram()?;
    let mut buf = vec![0u8; size];
    for i in 0..total {
        let t = Instant::now();
        to_b.send(buf)?;
        buf = loop {
            match a_in.try_recv() {
                Ok(m) => break m,
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
                Err(TryRecvError::Disconnected) => anyhow::bail!("echo thread ended"),
            }
        };
        if i >= warmup {
            h.record((t.elapsed().as_nanos() as u64 / 2).max(1))?;
        }
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))?;
    Ok(Row::from_hist("raw-crossbeam", size, &h))
}

/// Ping-pong between this process and a child `bench raw-tcp-echo` over one TCP connection on
/// loopback: `TCP_NODELAY`, non-blocking sockets, busy polling on both sides — the fastest a
/// plain program gets here.
pub(crate) fn tcp_pingpong(sizes: &[usize], iters: u64, warmup: u64) -> anyhow::Result<Vec<Row>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let me = std::env::current_exe()?;
    let sizes_arg = crate::report::size_list(sizes);
    let mut child = std::process::Command::new(me)
        .args([
            "raw-tcp-echo",
            &addr.to_string(),
            &sizes_arg,
            &(iters + warmup).to_string(),
        ])
        .spawn()?;
    let (s, _) = listener.accept()?;
    let result = (|| {
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let mut s = s;
        let mut rows = Vec::new();
        for &size in sizes {
            let mut buf = vec![0u8; size.max(1)];
            let mut h = histogram()?;
            for i in 0..iters + warmup {
                let t = Instant::now();
                spin_write(&mut s, &buf[..size])?;
                spin_read(&mut s, &mut buf[..size])?;
                if i >= warmup {
                    h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
                }
            }
            rows.push(Row::from_hist("raw-tcp", size, &h));
        }
        Ok(rows)
    })();
    let _ = child.wait();
    result
}

/// The child side of [`tcp_pingpong`].
pub(crate) fn tcp_echo(addr: &str, sizes: &[usize], rounds: u64) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    for &size in sizes {
        let mut buf = vec![0u8; size.max(1)];
        for _ in 0..rounds {
            spin_read(&mut s, &mut buf[..size])?;
            spin_write(&mut s, &buf[..size])?;
        }
    }
    Ok(())
}

fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn spin_write(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Layout of the raw shared-memory baseline's mapping: a flag per direction, each on its own
/// cache line, then a payload buffer per direction.
const SHM_FLAGS: usize = 4096;

/// How long a shared-memory baseline waits for the other side before giving up.
const SHM_PATIENCE: Duration = Duration::from_secs(10);

fn shm_len(max: usize) -> usize {
    SHM_FLAGS + 2 * max.max(1)
}

struct Shm {
    map: memmap2::MmapRaw,
    max: usize,
}

impl Shm {
    fn flag(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: offsets 0 and 64 are inside the mapping and 8-aligned; atomics may alias
        // memory shared with the other process.
        unsafe { &*(self.map.as_mut_ptr().add(64 * i) as *const std::sync::atomic::AtomicU64) }
    }

    fn buf(&self, i: usize) -> *mut u8 {
        // SAFETY: both buffers lie inside the mapping (see shm_len).
        unsafe { self.map.as_mut_ptr().add(SHM_FLAGS + i * self.max.max(1)) }
    }

    /// Copy `from` into buffer `i` (the other side reads it only after the flag says so).
    fn put(&self, i: usize, from: &[u8]) {
        // SAFETY: `from.len() <= max`; the other process does not touch buffer `i` until we
        // publish it with the flag (release), and we do not until it answers.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), self.buf(i), from.len()) }
    }

    fn get(&self, i: usize, to: &mut [u8]) {
        // SAFETY: as for `put`, the flag (acquire) said the buffer is ours to read.
        unsafe { std::ptr::copy_nonoverlapping(self.buf(i), to.as_mut_ptr(), to.len()) }
    }

    /// Busy-poll until flag `i` holds `value`; an error if the other side has not answered
    /// in [`SHM_PATIENCE`] (it died, say), rather than spinning forever.
    fn spin_until(&self, i: usize, value: u64) -> anyhow::Result<()> {
        let mut spins = 0u32;
        let mut since = None;
        while self.flag(i).load(std::sync::atomic::Ordering::Acquire) != value {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1 << 16) {
                let t = *since.get_or_insert_with(Instant::now);
                anyhow::ensure!(
                    t.elapsed() < SHM_PATIENCE,
                    "the other side of the shared-memory baseline stopped answering"
                );
            }
        }
        Ok(())
    }
}

impl Shm {
    /// Map the file at `path` (at least `shm_len(max)` bytes).
    fn map(f: &std::fs::File, max: usize) -> anyhow::Result<Shm> {
        anyhow::ensure!(
            f.metadata()?.len() as usize >= shm_len(max),
            "mapping too small"
        );
        Ok(Shm {
            map: memmap2::MmapOptions::new().map_raw(f)?,
            max,
        })
    }

    /// A word next to flag `i`, on its cache line.
    fn word(&self, i: usize, k: usize) -> &std::sync::atomic::AtomicU64 {
        debug_assert!((1..8).contains(&k));
        // SAFETY: as for `flag`, within flag `i`'s cache line.
        unsafe {
            &*(self.map.as_mut_ptr().add(64 * i + 8 * k) as *const std::sync::atomic::AtomicU64)
        }
    }
}

/// Start `bench MODE PATH SIZES ROUNDS` as the other side of a shared-memory baseline, with a
/// fresh mapping between us; return once the child has mapped it (it raises flag 1 to 1).
///
/// The mapping is an anonymous memory file (`memfd`), which the child opens through
/// `/proc/PID/fd/N`: it has no name in /dev/shm, so nothing is left behind however this
/// process ends (a name removed only once the child had mapped it stayed when bench was
/// interrupted in between).
fn shm_child(
    mode: &str,
    sizes: &[usize],
    rounds: u64,
) -> anyhow::Result<(Shm, std::process::Child)> {
    use std::os::fd::AsRawFd;
    let max = sizes.iter().copied().max().unwrap_or(1);
    let fd = nix::sys::memfd::memfd_create(
        c"converse-bench-raw",
        nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC,
    )
    .map_err(|e| anyhow::anyhow!("memfd_create: {e}"))?;
    let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
    let f = std::fs::File::from(fd);
    f.set_len(shm_len(max) as u64)?;
    let shm = Shm::map(&f, max)?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([
            mode,
            &path,
            &crate::report::size_list(sizes),
            &rounds.to_string(),
        ])
        .spawn()?;
    let up = Instant::now();
    while shm.flag(1).load(std::sync::atomic::Ordering::Acquire) != 1 {
        if up.elapsed() > Duration::from_secs(10) || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the {mode} child did not start");
        }
        std::hint::spin_loop();
    }
    Ok((shm, child))
}

/// The child side: map the parent's memory file and say so (flag 1 = 1). The child dies with
/// its parent: it busy-polls, and an orphan would spin a core until its patience ran out.
fn shm_join(path: &str, sizes: &[usize]) -> anyhow::Result<Shm> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| anyhow::anyhow!("prctl(PR_SET_PDEATHSIG): {e}"))?;
    let max = sizes.iter().copied().max().unwrap_or(1);
    // Opened after the death signal is set: a parent that died before cannot be opened
    // through its /proc entry, so no orphan gets this far.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let shm = Shm::map(&f, max)?;
    shm.flag(1).store(1, std::sync::atomic::Ordering::Release);
    Ok(shm)
}

/// Ping-pong between this process and a child `bench raw-shm-echo` through one shared mapping:
/// a cache-line flag per direction and a payload buffer, busy-polling; each side copies the
/// payload in and out, as a shared-memory layer must.
pub(crate) fn shm_pingpong(sizes: &[usize], iters: u64, warmup: u64) -> anyhow::Result<Vec<Row>> {
    use std::sync::atomic::Ordering;
    let (shm, child) = shm_child("raw-shm-echo", sizes, iters + warmup)?;
    let result = (|| {
        let mut seq = 1u64;
        let mut rows = Vec::new();
        for &size in sizes {
            let mut mine = vec![7u8; size];
            let mut h = histogram()?;
            for i in 0..iters + warmup {
                seq += 1;
                let t = Instant::now();
                shm.put(0, &mine);
                shm.flag(0).store(seq, Ordering::Release);
                shm.spin_until(1, seq)?;
                shm.get(1, &mut mine);
                if i >= warmup {
                    h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
                }
            }
            rows.push(Row::from_hist("raw-shm", size, &h));
        }
        Ok(rows)
    })();
    finish_child(child, result)
}

/// Reap the baseline's child, killing it first if the exchange failed.
fn finish_child<T>(mut child: std::process::Child, result: anyhow::Result<T>) -> anyhow::Result<T> {
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    result
}

/// The child side of [`shm_pingpong`].
pub(crate) fn shm_echo(path: &str, sizes: &[usize], rounds: u64) -> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    let shm = shm_join(path, sizes)?;
    let mut seq = 1u64;
    for &size in sizes {
        let mut mine = vec![0u8; size];
        for _ in 0..rounds {
            seq += 1;
            shm.spin_until(0, seq)?;
            shm.get(0, &mut mine);
            shm.put(1, &mine);
            shm.flag(1).store(seq, Ordering::Release);
        }
    }
    Ok(())
}

/// Copy `into.len()` bytes at `from` in `pid` with `process_vm_readv`: the copy-once
/// baseline's whole transfer (one call, or more when the kernel stops short).
fn vm_read(pid: i32, from: u64, into: &mut [u8]) -> anyhow::Result<()> {
    let mut done = 0;
    while done < into.len() {
        let mut local = [std::io::IoSliceMut::new(&mut into[done..])];
        let remote = [nix::sys::uio::RemoteIoVec {
            base: from as usize + done,
            len: local[0].len(),
        }];
        let n =
            nix::sys::uio::process_vm_readv(nix::unistd::Pid::from_raw(pid), &mut local, &remote)
                .map_err(|e| anyhow::anyhow!("process_vm_readv: {e}"))?;
        anyhow::ensure!(
            n > 0,
            "process_vm_readv stopped at {done} of {} bytes",
            into.len()
        );
        done += n;
    }
    Ok(())
}

/// Ping-pong of the copy-once baseline: this process and a child `bench raw-cma-echo`, each
/// with a buffer of its own that it reuses. A side publishes its buffer's address and a
/// sequence number on its flag's cache line; the other, busy-polling, reads the bytes straight
/// from that buffer into its own with one `process_vm_readv` (the kernel's cross-memory
/// attach, one copy), then answers the same way. The floor of a single-copy path.
pub(crate) fn cma_pingpong(sizes: &[usize], iters: u64, warmup: u64) -> anyhow::Result<Vec<Row>> {
    use std::sync::atomic::Ordering;
    let (shm, child) = shm_child("raw-cma-echo", sizes, iters + warmup)?;
    let pid = child.id() as i32;
    let result = (|| {
        let mut seq = 1u64;
        let mut rows = Vec::new();
        let max = sizes.iter().copied().max().unwrap_or(1);
        let mut mine = vec![7u8; max.max(1)];
        for &size in sizes {
            let mut h = histogram()?;
            for i in 0..iters + warmup {
                seq += 1;
                let t = Instant::now();
                shm.word(0, 1)
                    .store(mine.as_ptr() as u64, Ordering::Relaxed);
                shm.flag(0).store(seq, Ordering::Release);
                shm.spin_until(1, seq)?;
                let theirs = shm.word(1, 1).load(Ordering::Relaxed);
                vm_read(pid, theirs, &mut mine[..size])?;
                if i >= warmup {
                    h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
                }
            }
            rows.push(Row::from_hist("raw-copy-once", size, &h));
        }
        // The child's buffer is read until here: now it may exit.
        shm.flag(0).store(seq + 1, Ordering::Release);
        Ok(rows)
    })();
    finish_child(child, result)
}

/// The child side of [`cma_pingpong`].
pub(crate) fn cma_echo(path: &str, sizes: &[usize], rounds: u64) -> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    let shm = shm_join(path, sizes)?;
    let parent = std::os::unix::process::parent_id() as i32;
    let max = sizes.iter().copied().max().unwrap_or(1);
    let mut mine = vec![0u8; max.max(1)];
    let mut seq = 1u64;
    for &size in sizes {
        for _ in 0..rounds {
            seq += 1;
            shm.spin_until(0, seq)?;
            let theirs = shm.word(0, 1).load(Ordering::Relaxed);
            vm_read(parent, theirs, &mut mine[..size])?;
            shm.word(1, 1)
                .store(mine.as_ptr() as u64, Ordering::Relaxed);
            shm.flag(1).store(seq, Ordering::Release);
        }
    }
    // Our buffer must outlive the parent's last read of it.
    shm.spin_until(0, seq + 1)?;
    Ok(())
}

/// Largest UDP payload on loopback: what the raw UDP baseline cuts messages into.
const UDP_CHUNK: usize = 65507;

/// Socket buffers of the raw UDP baseline: a whole message in flight must fit.
const UDP_SOCKBUF: usize = 16 << 20;

/// How long the raw UDP baseline waits for a datagram before calling it lost (it has no
/// retransmission; with large buffers and a busy-polling reader, loopback loses nothing).
const UDP_PATIENCE: Duration = Duration::from_secs(5);

/// A connected, non-blocking UDP socket on loopback with large buffers.
fn udp_socket() -> anyhow::Result<UdpSocket> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.set_nonblocking(true)?;
    // Forced sizes need root; without it the kernel's maxima apply, as for the layer.
    let size = UDP_SOCKBUF;
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBufForce, &size);
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::SndBufForce, &size);
    Ok(s)
}

/// One end of the raw UDP baseline: a connected socket (`send` / `recv`), or, as a layer
/// with one socket for all its peers must do, an unconnected one (`sendto` / `recvfrom`).
struct UdpEnd {
    s: UdpSocket,
    /// The peer, for an unconnected socket.
    to: Option<std::net::SocketAddr>,
}

impl UdpEnd {
    fn new(s: UdpSocket, peer: std::net::SocketAddr, connected: bool) -> anyhow::Result<UdpEnd> {
        if connected {
            s.connect(peer)?;
        }
        Ok(UdpEnd {
            s,
            to: (!connected).then_some(peer),
        })
    }

    fn send(&self, d: &[u8]) -> std::io::Result<usize> {
        match self.to {
            Some(to) => self.s.send_to(d, to),
            None => self.s.send(d),
        }
    }

    fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.to {
            Some(_) => self.s.recv_from(buf).map(|(n, _)| n),
            None => self.s.recv(buf),
        }
    }
}

/// Send `buf` as datagrams of at most [`UDP_CHUNK`] bytes (one empty datagram for an empty
/// message), spinning while the socket is full.
fn udp_spin_send(s: &UdpEnd, buf: &[u8]) -> std::io::Result<()> {
    let mut chunks = buf.chunks(UDP_CHUNK).peekable();
    if chunks.peek().is_none() {
        return udp_spin_send_one(s, &[]);
    }
    for c in chunks {
        udp_spin_send_one(s, c)?;
    }
    Ok(())
}

fn udp_spin_send_one(s: &UdpEnd, d: &[u8]) -> std::io::Result<()> {
    loop {
        match s.send(d) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

/// Receive a message of `buf.len()` bytes sent by [`udp_spin_send`], busy-polling.
fn udp_spin_recv(s: &UdpEnd, buf: &mut [u8]) -> anyhow::Result<()> {
    let mut got = 0;
    let mut first = true;
    let mut since = Instant::now();
    let mut polls = 0u32;
    while first || got < buf.len() {
        let end = (got + UDP_CHUNK).min(buf.len());
        match s.recv(&mut buf[got..end]) {
            Ok(n) => {
                got += n;
                first = false;
                polls = 0;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::hint::spin_loop();
                polls = polls.wrapping_add(1);
                if polls.is_multiple_of(1 << 16) {
                    anyhow::ensure!(
                        since.elapsed() < UDP_PATIENCE,
                        "the raw UDP baseline lost a datagram"
                    );
                } else if polls == 1 {
                    since = Instant::now();
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Ping-pong between this process and a child `bench raw-udp-echo` over a pair of UDP sockets
/// on loopback, busy polling on both sides; a message larger than a datagram goes as several
/// (no header, no acknowledgement, no retransmission: the fastest UDP gets here). With
/// `connected`, each socket is connected to the other (the fastest there is); without, they
/// use `sendto` / `recvfrom`, as one socket serving every peer must.
pub(crate) fn udp_pingpong(
    sizes: &[usize],
    iters: u64,
    warmup: u64,
    connected: bool,
) -> anyhow::Result<Vec<Row>> {
    let s = udp_socket()?;
    let me = std::env::current_exe()?;
    let mut child = std::process::Command::new(me)
        .args([
            "raw-udp-echo",
            &s.local_addr()?.to_string(),
            &crate::report::size_list(sizes),
            &(iters + warmup).to_string(),
        ])
        .args((!connected).then_some("--unconnected"))
        .spawn()?;
    let result = (|| {
        // The child says hello from its socket: that is its address.
        let mut hello = [0u8; 1];
        let deadline = Instant::now() + UDP_PATIENCE;
        let peer = loop {
            match s.recv_from(&mut hello) {
                Ok((_, from)) => break from,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    anyhow::ensure!(Instant::now() < deadline, "the UDP echo child is silent");
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => return Err(e.into()),
            }
        };
        let end = UdpEnd::new(s, peer, connected)?;
        let label = if connected {
            "raw-udp"
        } else {
            "raw-udp-unconnected"
        };
        let mut rows = Vec::new();
        for &size in sizes {
            let mut buf = vec![0u8; size];
            let mut h = histogram()?;
            for i in 0..iters + warmup {
                let t = Instant::now();
                udp_spin_send(&end, &buf)?;
                udp_spin_recv(&end, &mut buf)?;
                if i >= warmup {
                    h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
                }
            }
            rows.push(Row::from_hist(label, size, &h));
        }
        Ok(rows)
    })();
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    result
}

/// Whether this process may run on one core only.
fn is_pinned() -> bool {
    crate::udp::allowed_cores() == 1
}

/// The child side of [`udp_pingpong`].
pub(crate) fn udp_echo(
    addr: &str,
    sizes: &[usize],
    rounds: u64,
    connected: bool,
) -> anyhow::Result<()> {
    if crate::udp::cores() > 1 && is_pinned() {
        // The parent is pinned (by `bench udp`): take the next core, not its.
        crate::udp::pin_to(1);
    }
    let s = udp_socket()?;
    let end = UdpEnd::new(s, addr.parse()?, connected)?;
    udp_spin_send_one(&end, b"h")?;
    for &size in sizes {
        let mut buf = vec![0u8; size];
        for _ in 0..rounds {
            udp_spin_recv(&end, &mut buf)?;
            udp_spin_send(&end, &buf)?;
        }
    }
    Ok(())
}

/// libfabric's own ping-pong (`fi_pingpong` from libfabric-bin) over `provider`, reliable
/// datagram endpoints and tagged messages as the OFI layer uses them: a server and a client
/// process per size on loopback. It reports only the mean one-way time (`usec/xfer`: the
/// whole run over twice its iterations), so the row's percentiles are that mean.
///
/// # Errors
/// `fi_pingpong` missing, failing, or printing no figure.
pub(crate) fn fi_pingpong(provider: &str, sizes: &[usize], iters: u64) -> anyhow::Result<Vec<Row>> {
    use anyhow::Context;
    let mut rows = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        // A control port of its own per size: the previous server may still hold its own.
        let port = 47_600 + (std::process::id() % 1000) as u16 * 8 + k as u16 % 8;
        let args = |extra: &[&str]| {
            let mut c = std::process::Command::new("fi_pingpong");
            c.args(["-p", provider, "-e", "rdm", "-m", "tagged"])
                .args(["-I", &iters.to_string(), "-S", &size.max(1).to_string()])
                .args(extra)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c
        };
        let mut server = args(&["-B", &port.to_string()])
            .spawn()
            .context("starting fi_pingpong (Debian: libfabric-bin)")?;
        // The client fails at once while the server is not listening yet: tried again until
        // it runs (or the server has ended), for at most 5 s.
        let deadline = Instant::now() + Duration::from_secs(5);
        let client = loop {
            let out = args(&["-P", &port.to_string(), "127.0.0.1"]).output();
            let listening = matches!(server.try_wait(), Ok(None));
            match out {
                Ok(o) if !o.status.success() && listening && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other,
            }
        };
        let _ = server.kill();
        let _ = server.wait();
        let out = client.context("running fi_pingpong's client")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let us: f64 = text
            .lines()
            .filter_map(|l| l.split_whitespace().nth(6))
            .find_map(|v| v.parse().ok())
            .with_context(|| {
                format!(
                    "fi_pingpong -p {provider} -S {size} printed no figure: {}{}",
                    text,
                    String::from_utf8_lossy(&out.stderr)
                )
            })?;
        let ns = (us * 1000.0).round() as u64;
        rows.push(Row {
            what: format!("raw fi_pingpong ({provider}, mean)"),
            size,
            count: iters,
            min_ns: ns,
            p50_ns: ns,
            p99_ns: ns,
            max_ns: ns,
            mean_ns: us * 1000.0,
        });
    }
    Ok(rows)
}

/// UCX's own baseline: `ucx_perftest -t tag_lat` (UCP tagged ping-pong, busy polling) between
/// two processes on this host, over `tls` (`UCX_TLS`; `None`: the environment's, or UCX's
/// choice), one server and one client per size. It reports the one-way median and mean only,
/// so the row's other percentiles are its median. Needs `ucx_perftest` (Debian: ucx-utils).
pub(crate) fn ucx_perftest(
    tls: Option<&str>,
    sizes: &[usize],
    iters: u64,
    warmup: u64,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &size in sizes {
        // A free port: bound, read, released (the server binds it a moment later).
        let port = TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port()
            .to_string();
        let cmd = |extra: &[&str]| {
            let mut c = std::process::Command::new("ucx_perftest");
            if let Some(t) = tls {
                c.env("UCX_TLS", t);
            }
            c.args(extra).args(["-p", &port]);
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null());
            c
        };
        let mut server = cmd(&[])
            .spawn()
            .map_err(|e| anyhow::anyhow!("ucx_perftest (ucx-utils) cannot be started: {e}"))?;
        let (n, w, s) = (
            iters.to_string(),
            warmup.to_string(),
            size.max(1).to_string(),
        );
        let mut out = None;
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(100));
            let o = cmd(&["127.0.0.1", "-t", "tag_lat", "-s", &s, "-n", &n, "-w", &w]).output()?;
            if o.status.success() {
                out = Some(String::from_utf8_lossy(&o.stdout).into_owned());
                break;
            }
        }
        let _ = server.kill();
        let _ = server.wait();
        let out = out.ok_or_else(|| anyhow::anyhow!("ucx_perftest -s {s} did not run"))?;
        // "Final:  ITERS  P50  AVERAGE  OVERALL  MB/s ...", latencies in microseconds.
        let f: Vec<f64> = out
            .lines()
            .find(|l| l.trim_start().starts_with("Final:"))
            .map(|l| {
                l.split_whitespace()
                    .skip(1)
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let [count, p50, mean, ..] = f[..] else {
            anyhow::bail!("ucx_perftest -s {s}: no Final line in {out}");
        };
        let p50_ns = (p50 * 1000.0) as u64;
        rows.push(Row {
            what: "ucx_perftest".into(),
            size,
            count: count as u64,
            min_ns: p50_ns,
            p50_ns,
            p99_ns: p50_ns,
            max_ns: p50_ns,
            mean_ns: mean * 1000.0,
        });
    }
    Ok(rows)
}
