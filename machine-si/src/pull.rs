//! Reading another process's memory with `process_vm_readv`: the single-copy path for large
//! messages. The sender keeps its message and passes only its address; the receiver copies the
//! bytes straight from the sender's buffer into its own, one copy in the kernel instead of one
//! into a ring and one out of it.
//!
//! The kernel allows it when the reader may ptrace the sender (same user, and Yama's
//! `ptrace_scope` permits it) and no seccomp filter forbids the call, so [`probe`] tries it
//! once per pair at start-up on a word whose value the owner published; a pair where it fails
//! keeps to the rings.

use nix::errno::Errno;
use nix::sys::uio::{process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSlice;
use std::mem::MaybeUninit;

/// Why a read of a peer's memory failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// No such process any more (`ESRCH`): the peer died or left.
    #[error("its process is gone")]
    Gone,
    /// The kernel does not let us (`EPERM`, `EACCES`: ptrace rules; `ENOSYS`: not built in or
    /// filtered by seccomp).
    #[error("reading its memory is not permitted here ({0})")]
    Denied(std::io::Error),
    /// The address range is not readable in the peer (`EFAULT`), or the read stopped short.
    #[error("the range it named is not readable ({0})")]
    Fault(std::io::Error),
    /// Anything else the call reported.
    #[error("process_vm_readv/writev: {0}")]
    Other(std::io::Error),
}

impl PullError {
    fn from_errno(e: Errno) -> PullError {
        match e {
            Errno::ESRCH => PullError::Gone,
            Errno::EPERM | Errno::EACCES | Errno::ENOSYS => PullError::Denied(e.into()),
            Errno::EFAULT => PullError::Fault(e.into()),
            _ => PullError::Other(e.into()),
        }
    }
}

/// Copy `into.len()` bytes from address `from` in process `pid` into `into`. On success every
/// byte of `into` is initialised.
///
/// Through libc rather than nix: nix's `process_vm_readv` takes `IoSliceMut`, that is
/// initialised `&mut [u8]`, and `into` is deliberately fresh memory (a large message's buffer;
/// zeroing it first would be one more pass over every byte).
///
/// # Errors
/// [`PullError`], by what the kernel said.
pub fn pull(pid: i32, from: u64, into: &mut [MaybeUninit<u8>]) -> Result<(), PullError> {
    let local = into.as_mut_ptr().cast::<libc::c_void>();
    copy_all(from, into.len(), |done, remote| {
        let l = libc::iovec {
            iov_base: local.wrapping_byte_add(done),
            iov_len: remote.len,
        };
        let r = libc::iovec {
            iov_base: remote.base as *mut libc::c_void,
            iov_len: remote.len,
        };
        // SAFETY: `l` is the rest of `into`, memory we hold exclusively for the call and
        // which the kernel only writes; the kernel checks the remote range itself.
        let n = unsafe { libc::process_vm_readv(pid, &l, 1, &r, 1, 0) };
        Errno::result(n).map(|n| n as usize)
    })
}

/// Copy `from` into process `pid`'s memory at address `to` (`process_vm_writev`): how a
/// sender helps its receiver copy a message it lent (see `coop.rs`).
///
/// # Errors
/// [`PullError`], by what the kernel said.
pub fn push(pid: i32, from: &[u8], to: u64) -> Result<(), PullError> {
    let pid = Pid::from_raw(pid);
    copy_all(to, from.len(), |done, remote| {
        process_vm_writev(pid, &[IoSlice::new(&from[done..])], &[remote])
    })
}

/// Run `copy(done, remote)` until all `len` bytes at `remote` (in the other process) have
/// moved: the kernel may copy less than asked (it stops at the first page it cannot reach),
/// so a short copy that is not a fault goes on from where it stopped. `copy` moves the bytes
/// from offset `done` on and says how many it moved.
fn copy_all(
    remote: u64,
    len: usize,
    mut copy: impl FnMut(usize, RemoteIoVec) -> nix::Result<usize>,
) -> Result<(), PullError> {
    let mut done = 0usize;
    while done < len {
        let r = RemoteIoVec {
            base: (remote as usize).wrapping_add(done),
            len: len - done,
        };
        match copy(done, r) {
            Ok(0) => {
                return Err(PullError::Fault(std::io::Error::other(format!(
                    "copy stopped after {done} of {len} bytes"
                ))))
            }
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(PullError::from_errno(e)),
        }
    }
    Ok(())
}

/// Whether we may read `pid`'s memory: read the word at `addr`, which its owner said holds
/// `nonce`. A match also proves `pid` is the process that published it.
///
/// # Errors
/// [`PullError`]: `Denied` means this host forbids the single-copy path.
pub fn probe(pid: i32, addr: u64, nonce: u64) -> Result<bool, PullError> {
    let mut word = [MaybeUninit::<u8>::uninit(); 8];
    pull(pid, addr, &mut word)?;
    // SAFETY: `pull` succeeded, so all 8 bytes are initialised.
    let bytes: [u8; 8] = unsafe { std::mem::transmute(word) };
    Ok(u64::from_ne_bytes(bytes) == nonce)
}

/// A word only this process holds: its value and address go into our port for peers to
/// [`probe`].
pub struct ProbeWord(Box<u64>);

// By hand: the word's address is all there is, and it means nothing in a log.
impl std::fmt::Debug for ProbeWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeWord").finish_non_exhaustive()
    }
}

impl ProbeWord {
    /// A word holding a fresh random value.
    pub fn new() -> ProbeWord {
        use std::hash::{BuildHasher, Hasher};
        // std's hasher keys are random per process: a nonce without another dependency.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        ProbeWord(Box::new(h.finish()))
    }

    /// Its value.
    pub fn nonce(&self) -> u64 {
        *self.0
    }

    /// Its address in this process.
    pub fn addr(&self) -> u64 {
        std::ptr::from_ref::<u64>(&*self.0) as u64
    }
}

impl Default for ProbeWord {
    fn default() -> Self {
        ProbeWord::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_reads_its_own_probe_word() {
        let w = ProbeWord::new();
        let me = std::process::id() as i32;
        match probe(me, w.addr(), w.nonce()) {
            Ok(ok) => assert!(ok),
            // A host that forbids the call altogether (seccomp) is what the fallback is for.
            Err(PullError::Denied(_)) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(!matches!(probe(me, w.addr(), w.nonce() ^ 1), Ok(true)));
    }

    #[test]
    fn errors_are_told_apart() {
        let v = vec![5u8; 100_000];
        let me = std::process::id() as i32;
        let mut out = vec![MaybeUninit::uninit(); v.len()];
        match pull(me, v.as_ptr() as u64, &mut out) {
            Ok(()) => {
                // SAFETY: pull initialised every byte.
                assert!(out.iter().all(|b| unsafe { b.assume_init() } == 5));
                assert!(matches!(pull(me, 8, &mut out), Err(PullError::Fault(_))));
                // No process has pid i32::MAX (pid_max is at most 2^22).
                assert!(matches!(
                    pull(i32::MAX, v.as_ptr() as u64, &mut out),
                    Err(PullError::Gone)
                ));
            }
            Err(PullError::Denied(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
}
