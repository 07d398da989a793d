//! One thread waits for the exit of every child process charmrun (or an agent) starts.
//!
//! A thread per child blocked in `waitpid` cost a thread's creation, its stack and its exit per
//! node: at `+p32` on one host a tenth of the threads the job made, all made while the job
//! starts, when the host's cores are busiest. Here each child is watched through a pidfd
//! (`pidfd_open`, Linux 5.3), which becomes readable when the child exits; one thread polls
//! them all, reaps the child that exited (its `wait` cannot block then) and reports its status
//! at once. The report never waits behind output: the output threads are others.
//!
//! Where a pidfd cannot be had (an older kernel, out of descriptors) the child gets a thread of
//! its own, as before, so an exit is never missed.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::sync::{Mutex, OnceLock};

/// What is told a child's exit status.
pub type OnExit = Box<dyn FnOnce(ExitStatus) + Send>;

/// A child being waited for: its pidfd, the child (reaped with `wait`), and its report.
type Watched = (OwnedFd, Child, OnExit);

/// The children handed to the reaping thread and not yet taken by it, and its doorbell.
struct Reaper {
    handed: Mutex<Vec<Watched>>,
    bell: EventFd,
}

/// The reaping thread's shared half: `None` when it could not be started (each child then
/// gets a thread of its own).
static REAPER: OnceLock<Option<&'static Reaper>> = OnceLock::new();

/// Call `on_exit` with `child`'s exit status as soon as it exits, from the reaping thread (or,
/// where a pidfd cannot be had, from a thread of the child's own). `on_exit` must not block
/// for long: every other child's report waits behind it.
///
/// # Errors
/// When neither a pidfd nor a thread can be had for the child.
pub fn on_exit(
    child: Child,
    on_exit: impl FnOnce(ExitStatus) + Send + 'static,
) -> std::io::Result<()> {
    let on_exit: OnExit = Box::new(on_exit);
    let reaper = REAPER.get_or_init(start);
    match (reaper, pidfd(&child)) {
        (Some(r), Some(fd)) => {
            if let Ok(mut h) = r.handed.lock() {
                h.push((fd, child, on_exit));
                drop(h);
                // An eventfd's count only grows until read: a ring before the thread polls is
                // not lost.
                let _ = r.bell.arm();
                return Ok(());
            }
            by_thread(child, on_exit)
        }
        _ => by_thread(child, on_exit),
    }
}

/// The fallback: a thread blocked in `wait` for this child alone.
fn by_thread(mut child: Child, on_exit: OnExit) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("node-exit".into())
        .spawn(move || on_exit(child.wait().unwrap_or_else(|_| exit_status(1))))
        .map(drop)
}

/// A pidfd for `child`, which is not reaped yet (only its `wait` reaps it), so its pid is
/// still its own even if it has exited.
fn pidfd(child: &Child) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(child.id()).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it touches
    // no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: the descriptor was just returned to us and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Start the reaping thread; `None` if it cannot be.
fn start() -> Option<&'static Reaper> {
    let bell = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).ok()?;
    // Lives as long as the process: there is one, and the thread holds it.
    let r: &'static Reaper = Box::leak(Box::new(Reaper {
        handed: Mutex::new(Vec::new()),
        bell,
    }));
    std::thread::Builder::new()
        .name("charmrun-reap".into())
        .stack_size(256 << 10)
        .spawn(move || reap(r))
        .ok()?;
    Some(r)
}

/// The reaping thread: wait until a child exits or another is handed over.
fn reap(r: &'static Reaper) {
    let mut mine: Vec<Watched> = Vec::new();
    loop {
        if let Ok(mut h) = r.handed.lock() {
            mine.append(&mut h);
        }
        let ready: Vec<bool> = {
            let mut fds = Vec::with_capacity(mine.len() + 1);
            fds.push(PollFd::new(r.bell.as_fd(), PollFlags::POLLIN));
            fds.extend(
                mine.iter()
                    .map(|(fd, _, _)| PollFd::new(fd.as_fd(), PollFlags::POLLIN)),
            );
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    // Not expected of our descriptors (out of memory, say): never a spin.
                    drop(fds);
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
            }
            fds.iter()
                .map(|f| f.revents().is_some_and(|e| !e.is_empty()))
                .collect()
        };
        if ready[0] {
            // Reset the count (non-blocking: a spurious wake finds it 0).
            let _ = r.bell.read();
        }
        // From the back, so that removing one leaves the others' places as polled.
        for i in (0..mine.len()).rev() {
            if ready[i + 1] {
                let (fd, mut child, report) = mine.swap_remove(i);
                drop(fd);
                match child.try_wait() {
                    Ok(Some(status)) => tell(report, status),
                    // Its pidfd says it exited, but a tracer (`gdb -p`, `strace -p`) holds the
                    // zombie until it lets go: waiting here would hold every other child's
                    // report back, so this one is waited for on a thread of its own.
                    Ok(None) => {
                        if let Err(e) = by_thread(child, report) {
                            tracing::warn!(target: "charmrun", "cannot wait for a traced child: {e}");
                        }
                    }
                    Err(_) => tell(report, exit_status(1)),
                }
            }
        }
    }
}

/// Report an exit; a report that panics ends only itself, not the reaping of every other
/// child (of this job, and of the jobs after it in a launcher embedded in a program).
fn tell(report: OnExit, status: ExitStatus) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| report(status)));
}

fn exit_status(code: i32) -> ExitStatus {
    std::os::unix::process::ExitStatusExt::from_raw(code << 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    /// Many children exiting in any order, some before they are handed over: each report
    /// comes once, with its own status.
    #[test]
    fn every_exit_is_reported_once_with_its_status() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for code in 0..20 {
            let child = Command::new("sh")
                .arg("-c")
                .arg(format!("sleep 0.0{}; exit {code}", code % 3))
                .spawn()
                .expect("spawn sh");
            if code % 4 == 0 {
                // Already exited when handed over.
                std::thread::sleep(Duration::from_millis(40));
            }
            let tx = tx.clone();
            on_exit(child, move |st| {
                let _ = tx.send((code, st.code()));
            })
            .expect("watched");
        }
        let mut seen: Vec<_> = (0..20)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("an exit"))
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).map(|c| (c, Some(c))).collect::<Vec<_>>());
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "reported twice"
        );
    }
}
