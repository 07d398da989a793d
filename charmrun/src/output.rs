//! Watching a node process: its stdout and stderr are passed on to charmrun's own, whole lines
//! at a time, and its exit is reported.
//!
//! The job's end never waits behind its output: the process's exit is reported at once by the
//! reaping thread ([`crate::reap`], one for all nodes); a thread of the node's own polls both
//! pipes and writes what they bring. A write blocks as long as charmrun's reader does not read (a pager, a terminal
//! paused with Ctrl-S): then the node's pipe fills and the node itself waits, and nothing is
//! dropped. Only a reader that is gone (`EPIPE`) makes charmrun stop writing a stream; the
//! pipes are still read (and what they bring dropped), so that no node blocks forever.
//!
//! Lines from different nodes never splice: every complete line is written whole, with one
//! call, under one lock shared by stdout and stderr (they may be the same file). A line is
//! held until its newline up to [`MAX_LINE`] bytes; a longer one is split there, each piece
//! ending with [`SPLIT_MARK`], so the split is visible.
//!
//! Pipes are read until their end, so what a node printed just before it exited is never lost.
//! When the job is over (see [`watch`]'s `job_over`) a pipe that stays quiet for `QUIET` is
//! let go: whatever still holds it open escaped the job's process groups.
//!
//! Whoever waits for the output may give up on it instead ([`Watcher::give_up`]: a job that is
//! being ended does not wait for ever on a reader that does not read). Nothing more is written
//! then, and [`Watcher::unwritten`] counts what never was. A thread blocked in a write to such a
//! reader cannot be made to return: it is left, and ends with charmrun.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A line longer than this is passed on in pieces rather than held in memory.
pub const MAX_LINE: usize = 64 << 20;

/// What ends each piece of a line split at [`MAX_LINE`].
pub const SPLIT_MARK: &[u8] = b" [charmrun: line longer than 64 MiB split here]\n";

/// After the job is over, how long a pipe may stay quiet before it is let go.
const QUIET: Duration = Duration::from_millis(300);

/// After the job is over, the longest the pipes are waited on in all (see `forward`).
const FINAL_DRAIN: Duration = Duration::from_secs(5);

/// The most written with one call. A write blocked for good may have put part of its piece in
/// a pipe: [`Watcher::unwritten`] counts that part too, so it may be this much too high.
/// Pieces as large as a pipe holds by default: smaller ones cost throughput to a pipe.
const PIECE: usize = 64 << 10;

/// Held for every write of node output, to either stream.
static WRITING: Mutex<()> = Mutex::new(());

/// While a job starts, the error lines already printed (for [`collapse_repeats`]): `None`
/// when lines are not being collapsed.
static REPEATS: Mutex<Option<Vec<Repeated>>> = Mutex::new(None);

/// A line printed once, and how many more times other nodes printed it.
type Repeated = (Vec<u8>, u64);

/// The most distinct lines remembered for [`collapse_repeats`]; past it, lines pass as they
/// come.
const MAX_REMEMBERED: usize = 64;

/// From now until [`repeats_over`], an error line that one node already printed is not
/// printed again for another, only counted: a start-up error that every node of a large job
/// hits (a bad runtime argument, a missing library) is one line, not one per node.
pub fn collapse_repeats() {
    if let Ok(mut r) = REPEATS.lock() {
        *r = Some(Vec::new());
    }
}

/// Stop collapsing; for each line that others repeated, what to say of them (`charmrun: 1023
/// more nodes printed the same line: ...`).
pub fn repeats_over() -> Vec<String> {
    let seen = REPEATS.lock().ok().and_then(|mut r| r.take());
    seen.unwrap_or_default()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(line, n)| {
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            let short: String = text.chars().take(100).collect();
            let more = if short.len() < text.len() { "…" } else { "" };
            let who = if n == 1 { "node" } else { "nodes" };
            format!("charmrun: {n} more {who} printed the same line: {short}{more}")
        })
        .collect()
}

/// `bytes` (whole lines) without the lines already printed while they are collapsed.
fn without_repeats(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut guard = REPEATS.lock().ok()?;
    let seen = guard.as_mut()?;
    let mut out = Vec::with_capacity(bytes.len());
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        match seen.iter_mut().find(|(l, _)| l == line) {
            Some((_, n)) => *n += 1,
            None => {
                if seen.len() < MAX_REMEMBERED {
                    seen.push((line.to_vec(), 0));
                }
                out.extend_from_slice(line);
            }
        }
    }
    Some(out)
}

/// Set once a stream's reader is gone (`EPIPE`): nothing more is written to it.
static OUT_GONE: AtomicBool = AtomicBool::new(false);
static ERR_GONE: AtomicBool = AtomicBool::new(false);

/// Which of charmrun's streams to write to.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    /// stdout.
    Out,
    /// stderr.
    Err,
}

/// The last few lines a process wrote to its stderr, kept while they are passed on: what a
/// remote shell said when its node or agent never connected.
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<std::collections::VecDeque<String>>>);

impl Tail {
    /// Lines kept.
    pub const KEEP: usize = 4;

    fn push(&self, bytes: &[u8]) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if t.len() == Self::KEEP {
                t.pop_front();
            }
            t.push_back(String::from_utf8_lossy(line).chars().take(300).collect());
        }
    }

    /// The lines kept, oldest first.
    pub fn lines(&self) -> Vec<String> {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.iter().cloned().collect()
    }
}

/// What one process's output thread shares with whoever waits for it: how much of its output
/// charmrun holds, and whether that is still wanted.
#[derive(Debug, Default)]
struct Held {
    /// Bytes handed to [`emit`] and not yet written (nor dropped for a reader that is gone).
    queued: AtomicU64,
    /// Bytes of partial lines, held until their newline.
    partial: AtomicU64,
    /// Set when whoever waits gave up on this output: nothing more is read or written.
    given_up: AtomicBool,
}

/// Bytes of one pipe not yet passed on: at most a partial last line.
struct Lines {
    stream: Stream,
    prefix: String,
    pending: Vec<u8>,
    /// The next bytes continue a line that was split.
    continues: bool,
    /// Set while this node's output waits to be written (see [`Watcher::busy`]).
    busy: Arc<AtomicBool>,
    /// Where to keep its last lines, if anywhere.
    tail: Option<Tail>,
    /// Shared with the [`Watcher`]: `pending` is counted in its `partial`.
    held: Arc<Held>,
}

impl Lines {
    fn new(stream: Stream, prefix: String, busy: Arc<AtomicBool>, held: Arc<Held>) -> Lines {
        Lines {
            stream,
            prefix,
            pending: Vec::new(),
            continues: false,
            busy,
            tail: None,
            held,
        }
    }

    fn emit(&self, bytes: &[u8]) {
        if let Some(t) = &self.tail {
            t.push(bytes);
        }
        self.busy.store(true, Ordering::SeqCst);
        emit(self.stream, bytes, &self.held);
        self.busy.store(false, Ordering::SeqCst);
    }

    /// Take `data`; pass on every complete line (and an over-long partial one) in one write.
    fn feed(&mut self, data: &[u8]) {
        let before = self.pending.len();
        let out = self.take(data);
        self.count_pending(before);
        if !out.is_empty() {
            self.emit(&out);
        }
    }

    /// `pending` held `before` bytes: count the change in `held.partial`.
    fn count_pending(&self, before: usize) {
        let now = self.pending.len();
        if now > before {
            self.held
                .partial
                .fetch_add((now - before) as u64, Ordering::SeqCst);
        } else {
            self.held
                .partial
                .fetch_sub((before - now) as u64, Ordering::SeqCst);
        }
    }

    /// What `feed` writes: every complete line of what is pending plus `data`, prefixed.
    fn take(&mut self, data: &[u8]) -> Vec<u8> {
        let old = self.pending.len();
        self.pending.extend_from_slice(data);
        let mut out = Vec::new();
        let mut start = 0;
        // A newline can only be in what is new: `pending` held no complete line.
        let mut from = old;
        while let Some(i) = self.pending[from..].iter().position(|&b| b == b'\n') {
            let end = from + i + 1;
            self.put(&mut out, start, end, false);
            start = end;
            from = end;
        }
        if self.pending.len() - start >= MAX_LINE {
            let end = start + MAX_LINE;
            self.put(&mut out, start, end, true);
            start = end;
        }
        self.pending.drain(..start);
        out
    }

    fn put(&mut self, out: &mut Vec<u8>, start: usize, end: usize, split: bool) {
        if !self.continues {
            out.extend_from_slice(self.prefix.as_bytes());
        }
        out.extend_from_slice(&self.pending[start..end]);
        if split {
            out.extend_from_slice(SPLIT_MARK);
        }
        self.continues = split;
    }

    /// End of the pipe: pass on a last line that had no newline, ending it.
    fn finish(&mut self) {
        if !self.pending.is_empty() {
            let before = self.pending.len();
            self.pending.push(b'\n');
            let mut out = Vec::new();
            let end = self.pending.len();
            self.put(&mut out, 0, end, false);
            self.pending.clear();
            self.count_pending(before);
            self.emit(&out);
        }
    }
}

/// Write whole lines to `stream`, blocking as long as its reader makes us; counted in
/// `held.queued` until written.
fn emit(stream: Stream, bytes: &[u8], held: &Held) {
    let gone = match stream {
        Stream::Out => &OUT_GONE,
        Stream::Err => &ERR_GONE,
    };
    if gone.load(Ordering::Relaxed) {
        return;
    }
    let collapsed = match stream {
        Stream::Err => without_repeats(bytes),
        Stream::Out => None,
    };
    let bytes = collapsed.as_deref().unwrap_or(bytes);
    if bytes.is_empty() {
        return;
    }
    // Counted before waiting for the lock: a thread waiting behind one blocked for good holds
    // these bytes too.
    held.queued.fetch_add(bytes.len() as u64, Ordering::SeqCst);
    let _writing = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    // Given up on while waiting: the bytes stay counted as never written.
    if held.given_up.load(Ordering::SeqCst) {
        return;
    }
    // Under the standard streams' own locks, so that nothing else in the process writes in
    // between; to their file descriptors, in pieces, so that what was written is known (see
    // `PIECE`).
    let r = match stream {
        Stream::Out => {
            let mut o = std::io::stdout().lock();
            // Whatever else was printed to stdout and is still buffered goes first.
            o.flush().and_then(|()| write_counted(&o, bytes, held))
        }
        Stream::Err => write_counted(std::io::stderr().lock(), bytes, held),
    };
    // Other errors (a full disk, say) lose this write but not the next.
    if r.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
        gone.store(true, Ordering::Relaxed);
    }
}

/// Write all of `bytes` to `fd` in pieces of at most [`PIECE`], taking each piece off
/// `held.queued` once written, and all that is left on an error (those bytes are lost, not
/// held).
fn write_counted(fd: impl AsFd, bytes: &[u8], held: &Held) -> std::io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        let r = match nix::unistd::write(&fd, &rest[..rest.len().min(PIECE)]) {
            Ok(0) => Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => Ok(n),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => Err(std::io::Error::from(e)),
        };
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                held.queued.fetch_sub(rest.len() as u64, Ordering::SeqCst);
                return Err(e);
            }
        };
        held.queued.fetch_sub(n as u64, Ordering::SeqCst);
        rest = &rest[n..];
    }
    Ok(())
}

/// Write `line` (one line of charmrun's own, newline included, shorter than `PIPE_BUF`) to
/// stderr if stderr takes it within `wait`; whether it did. For what charmrun says once it has
/// given up on its output: stderr may be the very pipe nobody reads, and a plain write to it
/// would block for good — as would taking the stderr lock an output thread blocked there holds.
pub fn say_within(line: &str, wait: Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    // Under the output lock if it can be had now, so that no node's line is split by this
    // one; an output thread blocked in a write holds it for good.
    let _writing = match WRITING.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    let err = std::io::stderr();
    let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::ZERO);
    let mut fds = [PollFd::new(err.as_fd(), PollFlags::POLLOUT)];
    if !matches!(poll(&mut fds, timeout), Ok(n) if n > 0) {
        return false;
    }
    // A pipe with room takes a write shorter than PIPE_BUF whole, without blocking.
    nix::unistd::write(&err, line.as_bytes()).is_ok_and(|n| n == line.len())
}

/// The output side of a watched node.
pub struct Watcher {
    /// The thread passing its output on.
    pub thread: JoinHandle<()>,
    /// Set while some of its output waits to be written: charmrun's reader is slow, and the
    /// node may be blocked on its own full pipe, so it is not lingering.
    pub busy: Arc<AtomicBool>,
    held: Arc<Held>,
    /// Its pipes, for what is still in them once its output is given up on.
    pipes: Vec<Arc<File>>,
    /// Disconnected when the thread is done.
    done: crossbeam_channel::Receiver<()>,
}

impl Watcher {
    /// Wait until the thread has passed everything on and is done (true), or `deadline`
    /// passes (false).
    pub fn done_by(&self, deadline: Instant) -> bool {
        matches!(
            self.done.recv_deadline(deadline),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        )
    }

    /// Stop passing its output on: nothing more is read from the pipes or written, except
    /// what a write already under way still takes (a write blocked for good is left so).
    pub fn give_up(&self) {
        self.held.given_up.store(true, Ordering::SeqCst);
    }

    /// Bytes of its output not written (yet): waiting to be, held in partial lines, and still
    /// in its pipes. Once [`give_up`](Self::give_up) was called, what never will be, but for
    /// the part of a piece a write blocked for good may have put in a pipe (see `PIECE`).
    pub fn unwritten(&self) -> u64 {
        self.held.queued.load(Ordering::SeqCst)
            + self.held.partial.load(Ordering::SeqCst)
            + self.pipes.iter().map(|p| unread(p)).sum::<u64>()
    }
}

/// Bytes in a pipe not read yet (0 if that cannot be told).
fn unread(pipe: &File) -> u64 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD stores one int through the pointer, which points to a live int; the
    // descriptor is open for as long as `pipe` is borrowed.
    let r = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
    if r == 0 {
        u64::try_from(n).unwrap_or(0)
    } else {
        0
    }
}

// By hand: it holds sockets, threads and handles, which have no useful text form.
impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

/// Watch `child`: report its exit status to `on_exit` as soon as it exits, and pass on its
/// output (each line prefixed with `prefix`) on a thread of its own. Once `job_over` is set,
/// the output thread ends when its pipes end or stay quiet for `QUIET`.
///
/// # Errors
/// When a thread cannot be started.
pub fn watch(
    child: Child,
    prefix: String,
    job_over: Arc<AtomicBool>,
    on_exit: impl FnOnce(ExitStatus) + Send + 'static,
) -> std::io::Result<Watcher> {
    watch_keeping(child, prefix, job_over, None, on_exit)
}

/// As [`watch`], keeping the last lines of its stderr in `tail`.
///
/// # Errors
/// When a thread cannot be started.
pub fn watch_keeping(
    mut child: Child,
    prefix: String,
    job_over: Arc<AtomicBool>,
    tail: Option<Tail>,
    on_exit: impl FnOnce(ExitStatus) + Send + 'static,
) -> std::io::Result<Watcher> {
    let busy = Arc::new(AtomicBool::new(false));
    let held = Arc::new(Held::default());
    let mut err_lines = Lines::new(Stream::Err, prefix.clone(), busy.clone(), held.clone());
    err_lines.tail = tail;
    let file = |fd: OwnedFd| Arc::new(File::from(fd));
    let out = child.stdout.take().map(|p| file(p.into()));
    let err = child.stderr.take().map(|p| file(p.into()));
    let kept = out.iter().chain(&err).cloned().collect();
    let pipes: [(Option<Arc<File>>, Lines); 2] = [
        (
            out,
            Lines::new(Stream::Out, prefix.clone(), busy.clone(), held.clone()),
        ),
        (err, err_lines),
    ];
    let (done_tx, done) = crossbeam_channel::bounded::<()>(0);
    let output = {
        let held = held.clone();
        std::thread::Builder::new()
            .name("node-output".into())
            .spawn(move || {
                let _done = done_tx;
                forward(pipes, &job_over, &held)
            })?
    };
    // On error the output thread ends with the pipes, once the caller kills the process.
    crate::reap::on_exit(child, on_exit)?;
    Ok(Watcher {
        thread: output,
        busy,
        held,
        pipes: kept,
        done,
    })
}

/// Pass on what the pipes bring until they end (or, once `job_over`, stay quiet, or until
/// `held.given_up`).
fn forward(mut pipes: [(Option<Arc<File>>, Lines); 2], job_over: &AtomicBool, held: &Held) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut buf = vec![0u8; 64 << 10];
    let tick = PollTimeout::try_from(QUIET.as_millis() as i32).unwrap_or(PollTimeout::NONE);
    // Time spent waiting on the pipes since the job ended (writes to a slow reader do not
    // count: output is never dropped while the reader lives).
    let mut waited_after = Duration::ZERO;
    loop {
        let mut fds = Vec::with_capacity(2);
        let mut who = Vec::with_capacity(2);
        for (i, (p, _)) in pipes.iter().enumerate() {
            if let Some(p) = p {
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
                who.push(i);
            }
        }
        // Given up on: what is left stays where it is, counted (see `Watcher::unwritten`).
        if fds.is_empty() || held.given_up.load(Ordering::SeqCst) {
            return;
        }
        // Checked before polling: a pipe quiet for a whole tick after the job is over is let go.
        let over = job_over.load(Ordering::SeqCst);
        let polled = Instant::now();
        let r = poll(&mut fds, tick);
        if over {
            waited_after += polled.elapsed();
        }
        // Something that escaped the job's process groups and keeps printing must not keep
        // charmrun alive: after FINAL_DRAIN of waiting, the pipes are let go, quiet or not.
        let r = if over && waited_after >= FINAL_DRAIN {
            Ok(0)
        } else {
            r
        };
        match r {
            Ok(0) if over => {
                for (p, lines) in &mut pipes {
                    if p.take().is_some() {
                        lines.finish();
                    }
                }
                return;
            }
            Ok(_) => {}
            Err(_) => continue,
        }
        let ready: Vec<usize> = fds
            .iter()
            .zip(&who)
            .filter(|(f, _)| f.revents().is_some_and(|r| !r.is_empty()))
            .map(|(_, &w)| w)
            .collect();
        drop(fds);
        if held.given_up.load(Ordering::SeqCst) {
            return;
        }
        for w in ready {
            let (pipe, lines) = &mut pipes[w];
            let n = match pipe.as_deref().map(|mut p| p.read(&mut buf)) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_lines_wait_for_their_end() {
        let mut l = Lines::new(Stream::Err, "P: ".into(), Arc::default(), Arc::default());
        assert_eq!(l.take(b"one\ntw"), b"P: one\n");
        assert_eq!(l.pending, b"tw");
        assert_eq!(l.take(b"o\nthree"), b"P: two\n");
        assert_eq!(l.pending, b"three");
        assert_eq!(l.take(b"\nfour\nfive\n"), b"P: three\nP: four\nP: five\n");
        assert!(l.pending.is_empty());
    }

    #[test]
    fn long_lines_stay_whole_up_to_the_limit() {
        let mut l = Lines::new(Stream::Err, String::new(), Arc::default(), Arc::default());
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..3 {
            assert!(l.take(&chunk).is_empty());
        }
        let out = l.take(b"\n");
        assert_eq!(out.len(), (3 << 20) + 1);
    }

    #[test]
    fn over_long_lines_are_split_visibly() {
        let mut l = Lines::new(Stream::Err, "P: ".into(), Arc::default(), Arc::default());
        let out = l.take(&vec![b'x'; MAX_LINE + 5]);
        assert!(out.starts_with(b"P: xxx"));
        assert!(out.ends_with(SPLIT_MARK));
        assert_eq!(out.len(), 3 + MAX_LINE + SPLIT_MARK.len());
        assert_eq!(l.pending.len(), 5);
        // The rest of the line carries no prefix: it is the same line.
        assert_eq!(l.take(b"\n"), b"xxxxx\n");
        assert_eq!(l.take(b"y\n"), b"P: y\n");
    }

    #[test]
    fn a_tail_keeps_the_last_lines() {
        let t = Tail::default();
        t.push(b"one\ntwo\n");
        t.push(b"three\nfour\nfive\n");
        assert_eq!(t.lines(), ["two", "three", "four", "five"]);
    }
}
