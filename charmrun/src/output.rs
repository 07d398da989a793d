//! Watching a node process: its stdout and stderr are passed on to charmrun's own, whole lines
//! at a time, and its exit is reported — all from one thread per node, which polls both pipes
//! and a pidfd of the process.
//!
//! Each complete line is written with one call under the stream's lock, so lines from different
//! nodes never splice. Pipes are read until their end, so what a node printed just before it
//! exited is never lost.

use std::io::{Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::thread::JoinHandle;

/// A line longer than this is passed on in pieces rather than held in memory.
const MAX_LINE: usize = 1 << 20;

/// Which of charmrun's streams to write to.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    /// stdout.
    Out,
    /// stderr.
    Err,
}

/// Bytes of one pipe not yet passed on: at most a partial last line.
struct Lines {
    stream: Stream,
    prefix: String,
    pending: Vec<u8>,
}

impl Lines {
    fn new(stream: Stream, prefix: String) -> Lines {
        Lines {
            stream,
            prefix,
            pending: Vec::new(),
        }
    }

    /// Take `data`; pass on every complete line (and any over-long partial one).
    fn feed(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
        let mut start = 0;
        while let Some(i) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + i + 1;
            emit(self.stream, &self.prefix, &self.pending[start..end]);
            start = end;
        }
        if self.pending.len() - start >= MAX_LINE {
            emit(self.stream, &self.prefix, &self.pending[start..]);
            start = self.pending.len();
        }
        self.pending.drain(..start);
    }

    /// End of the pipe: pass on a last line that had no newline, ending it.
    fn finish(&mut self) {
        if !self.pending.is_empty() {
            self.pending.push(b'\n');
            emit(self.stream, &self.prefix, &self.pending);
            self.pending.clear();
        }
    }
}

fn emit(stream: Stream, prefix: &str, line: &[u8]) {
    // One write per line under the lock; an error means our own terminal is gone, and the
    // node must still not block on a full pipe, so it is ignored and reading goes on.
    let mut buf = Vec::with_capacity(prefix.len() + line.len());
    buf.extend_from_slice(prefix.as_bytes());
    buf.extend_from_slice(line);
    let _ = match stream {
        Stream::Out => {
            let mut o = std::io::stdout().lock();
            o.write_all(&buf).and_then(|()| o.flush())
        }
        Stream::Err => std::io::stderr().lock().write_all(&buf),
    };
}

/// A pidfd for `pid`: readable once the process has exited. Raw `libc` because nix 0.29 has no
/// wrapper for `pidfd_open`, and the standard library's is unstable.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the descriptor is new and ours alone.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Watch `child`: pass on its output (each line prefixed with `prefix`) and call `on_exit`
/// once with its exit status.
pub fn watch(
    mut child: Child,
    prefix: String,
    on_exit: impl FnOnce(ExitStatus) + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("node-watch".into())
        .spawn(move || {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let mut pipes: [(Option<Box<dyn ReadFd>>, Lines); 2] = [
                (
                    child.stdout.take().map(|p| Box::new(p) as Box<dyn ReadFd>),
                    Lines::new(Stream::Out, prefix.clone()),
                ),
                (
                    child.stderr.take().map(|p| Box::new(p) as Box<dyn ReadFd>),
                    Lines::new(Stream::Err, prefix),
                ),
            ];
            // Without pidfd (kernels before 5.3) the exit is noticed when both pipes have ended.
            let mut pidfd = pidfd_open(child.id());
            let mut on_exit = Some(on_exit);
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let mut fds = Vec::with_capacity(3);
                let mut who = Vec::with_capacity(3);
                for (i, (p, _)) in pipes.iter().enumerate() {
                    if let Some(p) = p {
                        fds.push(PollFd::new(p.fd(), PollFlags::POLLIN));
                        who.push(i);
                    }
                }
                if let Some(fd) = &pidfd {
                    fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                    who.push(2);
                }
                if fds.is_empty() {
                    break;
                }
                if poll(&mut fds, PollTimeout::NONE).is_err() {
                    continue;
                }
                let ready: Vec<usize> = fds
                    .iter()
                    .zip(&who)
                    .filter(|(f, _)| f.revents().is_some_and(|r| !r.is_empty()))
                    .map(|(_, &w)| w)
                    .collect();
                drop(fds);
                for w in ready {
                    if w == 2 {
                        pidfd = None;
                        let st = child.wait().unwrap_or_else(|_| exit_status(1));
                        if let Some(f) = on_exit.take() {
                            f(st);
                        }
                        continue;
                    }
                    let (pipe, lines) = &mut pipes[w];
                    let n = match pipe.as_mut().map(|p| p.read(&mut buf)) {
                        Some(Ok(n)) => n,
                        Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        _ => 0,
                    };
                    if n == 0 {
                        lines.finish();
                        *pipe = None;
                    } else {
                        lines.feed(&buf[..n]);
                    }
                }
            }
            if let Some(f) = on_exit.take() {
                f(child.wait().unwrap_or_else(|_| exit_status(1)));
            }
        })
}

fn exit_status(code: i32) -> ExitStatus {
    std::os::unix::process::ExitStatusExt::from_raw(code << 8)
}

/// A pipe end we can poll and read.
trait ReadFd: Read + Send {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_>;
}

impl ReadFd for std::process::ChildStdout {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.as_fd()
    }
}

impl ReadFd for std::process::ChildStderr {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_lines_wait_for_their_end() {
        let mut l = Lines::new(Stream::Err, String::new());
        l.feed(b"one\ntw");
        assert_eq!(l.pending, b"tw");
        l.feed(b"o\nthree");
        assert_eq!(l.pending, b"three");
        l.finish();
        assert!(l.pending.is_empty());
    }

    #[test]
    fn over_long_lines_are_passed_on_in_pieces() {
        let mut l = Lines::new(Stream::Err, String::new());
        l.feed(&vec![b'x'; MAX_LINE + 5]);
        assert!(l.pending.is_empty());
    }
}
