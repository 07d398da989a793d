//! Reading another process's memory with `process_vm_readv`: the single-copy path for large
//! messages. The sender keeps its message and passes only its address; the receiver copies the
//! bytes straight from the sender's buffer into its own, one copy in the kernel instead of one
//! into a ring and one out of it.
//!
//! The kernel allows it when the reader may ptrace the sender (same user, and Yama's
//! `ptrace_scope` permits it) and no seccomp filter forbids the call, so [`probe`] tries it
//! once per pair at start-up on a word whose value the owner published; a pair where it fails
//! keeps to the rings.

use std::mem::MaybeUninit;

/// Why a read of a peer's memory failed.
#[derive(Debug, thiserror::Error)]
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
    fn from_errno(e: std::io::Error) -> PullError {
        match e.raw_os_error() {
            Some(libc::ESRCH) => PullError::Gone,
            Some(libc::EPERM | libc::EACCES | libc::ENOSYS) => PullError::Denied(e),
            Some(libc::EFAULT) => PullError::Fault(e),
            _ => PullError::Other(e),
        }
    }
}

/// Copy `into.len()` bytes from address `from` in process `pid` into `into`. On success every
/// byte of `into` is initialised.
///
/// # Errors
/// [`PullError`], by what the kernel said.
pub fn pull(pid: i32, from: u64, into: &mut [MaybeUninit<u8>]) -> Result<(), PullError> {
    transfer(pid, into.as_mut_ptr().cast(), from, into.len(), false)
}

/// Copy `from` into process `pid`'s memory at address `to` (`process_vm_writev`): how a
/// sender helps its receiver copy a message it lent (see `coop.rs`).
///
/// # Errors
/// [`PullError`], by what the kernel said.
pub fn push(pid: i32, from: &[u8], to: u64) -> Result<(), PullError> {
    transfer(pid, from.as_ptr().cast_mut(), to, from.len(), true)
}

/// Move `len` bytes between `local` (ours) and `remote` (in `pid`), in either direction.
fn transfer(
    pid: i32,
    local: *mut u8,
    remote: u64,
    len: usize,
    write: bool,
) -> Result<(), PullError> {
    let mut done = 0usize;
    // The kernel may copy less than asked (it stops at the first page it cannot reach): go on
    // from there, so a short copy that is not a fault still completes.
    while done < len {
        let l = libc::iovec {
            iov_base: local.wrapping_add(done).cast(),
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `l` describes memory we own, writable when we read into it (the callers
        // hold it borrowed for the call); the kernel checks the remote range.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
            } else {
                libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
            }
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(PullError::Fault(std::io::Error::other(format!(
                    "copy stopped after {done} of {len} bytes"
                ))))
            }
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(PullError::from_errno(e));
                }
            }
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
