//! Raw baselines: the same exchange written directly on the mechanism a layer uses, with no
//! runtime in between. The fastest a plain program gets on this machine, measured in the same
//! run as the layer.

use crate::report::{histogram, Row};
use crossbeam_channel::TryRecvError;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

/// Ping-pong between two threads over crossbeam channels, moving the buffer (as the in-process
/// layer does), busy-polling on both sides.
pub fn crossbeam_pingpong(size: usize, iters: u64, warmup: u64) -> anyhow::Result<Row> {
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
pub fn tcp_pingpong(sizes: &[usize], iters: u64, warmup: u64) -> anyhow::Result<Vec<Row>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let me = std::env::current_exe()?;
    let sizes_arg = sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
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
pub fn tcp_echo(addr: &str, sizes: &[usize], rounds: u64) -> anyhow::Result<()> {
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
