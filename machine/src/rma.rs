//! Direct access to other processes' memory: the optional one-sided half of the contract.
//!
//! The runtime's one-sided transfers (`converse`'s `Pe::get`/`Pe::put`) always work over
//! messages. A layer that can also copy bytes straight between the memory of two of the job's
//! processes offers it through [`Transport::rma`](crate::Transport::rma), and the runtime then
//! moves a large transfer in one copy instead of two or three:
//!
//! - the request still travels as a message, so the transfer keeps its place among the
//!   initiator's messages (the ordering contract of one-sided transfers is the messages');
//! - the region's PE, in the handler that takes the request, copies between its region and
//!   the initiator's buffer with [`Rma::write`] (a get) or [`Rma::read`] (a put), then answers
//!   with a message of no bytes. The copy happens between two of the owner's handlers, as
//!   over messages, so no lock is needed and the owner never sees half a transfer.
//!
//! So the initiator's buffer is the only memory reached from outside, and only while the
//! runtime holds it for the transfer (safe code cannot touch it then). Its address travels in
//! the request; the process written to or read from is the one the layer knows (and, for
//! SI, proved at start-up) for the node the request came from, never a process id from the
//! wire.
//!
//! [`ProcessMemory`] implements it with Linux's cross-memory attach (`process_vm_readv` and
//! `process_vm_writev`, CMA in Charm++'s and MPI's terms), for processes on one host: the SI
//! layer offers it for its host's nodes, the in-process layer for all (its nodes are threads
//! of one process, which [`Rma::in_this_process`] says, so that the runtime copies plainly
//! there, as between the PEs of one SMP node). A layer with RDMA of its own (a fabric's
//! `fi_read`, UCX's rkeys) needs an asynchronous form that completes from `advance`; this
//! synchronous one is what CMA, a shared segment or XPMEM give.
//!
//! Measured on a 2-core virtual machine (docs/benchmarks.md), the kernel's page-by-page copy
//! did not reliably beat SI's own paths (rings in cache; large messages copied by both
//! processes at once), so the runtime's defaults leave it off (`onesided.direct_put_kib`,
//! `onesided.direct_get_kib`): a setting turns it on where a host's figures say so.

use crate::error::MachineError;
use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::io::{IoSlice, IoSliceMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a direct copy failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RmaFault {
    /// The layer cannot reach that node's memory (another host, or no such node).
    #[error("node {0}'s memory is not reachable from here")]
    Unreachable(usize),
    /// The node's process is gone.
    #[error("node {0}'s process is gone")]
    Gone(usize),
    /// The host does not allow it (ptrace rules, seccomp): the runtime falls back to
    /// messages, and [`Rma::reaches`] says no from then on.
    #[error("reading or writing node {node}'s memory is not permitted here ({why})")]
    Denied {
        /// The node.
        node: usize,
        /// What the kernel said.
        why: std::io::Error,
    },
    /// The remote range is not mapped in that process (a bad address: never the case for an
    /// address the runtime sent, which names a buffer it holds for the transfer).
    #[error("node {node}'s memory at {addr:#x} ({len} bytes) is not there ({why})")]
    Fault {
        /// The node.
        node: usize,
        /// The remote address.
        addr: u64,
        /// The bytes asked for.
        len: usize,
        /// What the kernel said.
        why: std::io::Error,
    },
}

impl From<RmaFault> for MachineError {
    fn from(f: RmaFault) -> MachineError {
        MachineError::io("a direct memory copy", std::io::Error::other(f.to_string()))
    }
}

/// Direct copies between this process's memory and another node's (see the module docs).
///
/// # Contract
/// - *Synchronous*: `read` and `write` return when every byte has moved, or with the fault;
///   nothing needs [`advance`](crate::Transport::advance) to complete.
/// - *Any thread*: the runtime calls it from the PE thread that runs the handler taking the
///   request, which in SMP mode is not the thread driving the layer; so it is `Send + Sync`
///   and obtained once, at start-up ([`Transport::rma`](crate::Transport::rma)).
/// - *Remote memory*: the remote address names memory of the node's process that its
///   runtime holds for the transfer until it hears back; the implementation checks nothing
///   about it but what the kernel (or hardware) checks, and must never reach any process but
///   the one it knows for `node`.
/// - *Faults*: a fault is returned, never raised (no signal, no panic); after a
///   [`RmaFault::Denied`], [`reaches`](Rma::reaches) answers `false` for that node.
pub trait Rma: Send + Sync {
    /// Whether `node`'s memory can be read and written from this process. `false` for
    /// this process's own node only when the layer cannot do it at all (the runtime handles
    /// its own node itself).
    fn reaches(&self, node: usize) -> bool;

    /// Whether `node`'s PEs are threads of this very process (the in-process layer): the
    /// runtime then moves a transfer's bytes with a plain copy, cheaper than any call.
    /// The default: `false`.
    fn in_this_process(&self, node: usize) -> bool {
        let _ = node;
        false
    }

    /// Copy `into.iter().map(len).sum()` bytes from address `remote` in `node`'s memory into
    /// `into`, filled in order (a scatter: a region's parts).
    ///
    /// # Errors
    /// [`RmaFault`].
    fn read(&self, node: usize, remote: u64, into: &mut [&mut [u8]]) -> Result<(), RmaFault>;

    /// Copy `from`, in order (a gather), into `node`'s memory from address `remote` on.
    ///
    /// # Errors
    /// [`RmaFault`].
    fn write(&self, node: usize, from: &[&[u8]], remote: u64) -> Result<(), RmaFault>;
}

/// Most local vectors one call takes (Linux's `IOV_MAX`); a region of more parts takes
/// several calls.
const IOV_MAX: usize = 1024;

/// [`Rma`] by cross-memory attach (`process_vm_readv`/`process_vm_writev`) for the nodes whose
/// process ids it was given: the kernel copies straight between the two address spaces,
/// one copy, no shared segment. The kernel allows it when this process may ptrace the other
/// (same user, Yama's `ptrace_scope` and seccomp permitting); a node where it is denied once
/// is not tried again.
#[derive(Debug)]
pub struct ProcessMemory {
    pids: Vec<Option<Pid>>,
    denied: Vec<AtomicBool>,
}

impl ProcessMemory {
    /// For nodes `0..pids.len()`: `Some(pid)` for those this process may reach.
    pub fn new(pids: Vec<Option<i32>>) -> ProcessMemory {
        let denied = pids.iter().map(|_| AtomicBool::new(false)).collect();
        ProcessMemory {
            pids: pids.into_iter().map(|p| p.map(Pid::from_raw)).collect(),
            denied,
        }
    }

    /// Every one of `nodes` nodes in this very process (the in-process layer; a node's own
    /// PEs in SMP mode).
    pub fn this_process(nodes: usize) -> ProcessMemory {
        let me = std::process::id() as i32;
        ProcessMemory::new(vec![Some(me); nodes])
    }

    fn pid(&self, node: usize) -> Result<Pid, RmaFault> {
        match (self.pids.get(node), self.denied.get(node)) {
            (Some(Some(pid)), Some(d)) if !d.load(Ordering::Relaxed) => Ok(*pid),
            _ => Err(RmaFault::Unreachable(node)),
        }
    }

    fn fault(&self, node: usize, addr: u64, len: usize, e: Errno) -> RmaFault {
        match e {
            Errno::ESRCH => RmaFault::Gone(node),
            Errno::EPERM | Errno::EACCES | Errno::ENOSYS => {
                if let Some(d) = self.denied.get(node) {
                    d.store(true, Ordering::Relaxed);
                }
                RmaFault::Denied {
                    node,
                    why: e.into(),
                }
            }
            _ => RmaFault::Fault {
                node,
                addr,
                len,
                why: e.into(),
            },
        }
    }
}

/// Run `copy(remote, parts)` over `lens` (the local parts' lengths) until every byte moved:
/// each call gets at most [`IOV_MAX`] local parts as `(index, offset in it)` pieces, and the
/// kernel may move fewer bytes than asked (it stops at the first page it cannot reach), so
/// a short copy goes on from where it stopped.
fn copy_all(
    lens: &[usize],
    remote: u64,
    mut copy: impl FnMut(RemoteIoVec, &[(usize, usize)]) -> nix::Result<usize>,
) -> Result<(), (Errno, u64, usize)> {
    let (mut part, mut at) = (0usize, 0usize);
    let mut addr = remote;
    let mut pieces = Vec::with_capacity(lens.len().min(IOV_MAX));
    loop {
        while part < lens.len() && at >= lens[part] {
            part += 1;
            at = 0;
        }
        if part == lens.len() {
            return Ok(());
        }
        pieces.clear();
        let mut len = 0usize;
        let mut o = at;
        for (i, &l) in lens.iter().enumerate().skip(part).take(IOV_MAX) {
            if l > o {
                pieces.push((i, o));
                len += l - o;
            }
            o = 0;
        }
        let r = RemoteIoVec {
            base: addr as usize,
            len,
        };
        match copy(r, &pieces) {
            Ok(0) => return Err((Errno::EFAULT, addr, len)),
            Ok(mut n) => {
                addr += n as u64;
                while n > 0 {
                    let step = (lens[part] - at).min(n);
                    at += step;
                    n -= step;
                    if at == lens[part] {
                        part += 1;
                        at = 0;
                    }
                }
            }
            Err(Errno::EINTR) => {}
            Err(e) => return Err((e, addr, len)),
        }
    }
}

impl Rma for ProcessMemory {
    fn reaches(&self, node: usize) -> bool {
        self.pid(node).is_ok()
    }

    fn in_this_process(&self, node: usize) -> bool {
        matches!(self.pids.get(node), Some(Some(p)) if p.as_raw() as u32 == std::process::id())
    }

    fn read(&self, node: usize, remote: u64, into: &mut [&mut [u8]]) -> Result<(), RmaFault> {
        let pid = self.pid(node)?;
        let lens: Vec<usize> = into.iter().map(|p| p.len()).collect();
        copy_all(&lens, remote, |r, pieces| {
            // The vectors borrow `into` for one call each: rebuilt per call (a call per
            // 1,024 parts at most, and one in the usual case of a contiguous buffer).
            let mut local: Vec<IoSliceMut<'_>> = Vec::with_capacity(pieces.len());
            let mut rest = &mut into[..];
            let mut skipped = 0;
            for &(i, o) in pieces {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(i - skipped + 1);
                skipped = i + 1;
                rest = tail;
                if let Some(p) = head.last_mut() {
                    local.push(IoSliceMut::new(&mut p[o..]));
                }
            }
            process_vm_readv(pid, &mut local, &[r])
        })
        .map_err(|(e, addr, len)| self.fault(node, addr, len, e))
    }

    fn write(&self, node: usize, from: &[&[u8]], remote: u64) -> Result<(), RmaFault> {
        let pid = self.pid(node)?;
        let lens: Vec<usize> = from.iter().map(|p| p.len()).collect();
        copy_all(&lens, remote, |r, pieces| {
            let local: Vec<IoSlice<'_>> = pieces
                .iter()
                .map(|&(i, o)| IoSlice::new(&from[i][o..]))
                .collect();
            process_vm_writev(pid, &local, &[r])
        })
        .map_err(|(e, addr, len)| self.fault(node, addr, len, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permitted(r: Result<(), RmaFault>) -> bool {
        match r {
            Ok(()) => true,
            // A host that forbids the call (seccomp) is what the message path is for.
            Err(RmaFault::Denied { .. }) => false,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn scatter_and_gather_within_this_process() {
        let m = ProcessMemory::this_process(2);
        let src: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (mut a, mut b, mut c) = (vec![0u8; 10], vec![0u8; 0], vec![0u8; 99_990]);
        let mut parts: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
        if !permitted(m.read(1, src.as_ptr() as u64, &mut parts)) {
            return;
        }
        let joined: Vec<u8> = [&a[..], &b[..], &c[..]].concat();
        assert_eq!(joined, src);
        let mut dst = vec![0u8; src.len()];
        m.write(0, &[&src[..5], &[], &src[5..]], dst.as_mut_ptr() as u64)
            .expect("write");
        assert_eq!(dst, src);
    }

    #[test]
    fn more_parts_than_one_call_takes() {
        let m = ProcessMemory::this_process(1);
        let src: Vec<u8> = (0..3000u32).map(|i| (i % 7) as u8).collect();
        let mut out: Vec<Vec<u8>> = (0..3000).map(|_| vec![0u8; 1]).collect();
        let mut parts: Vec<&mut [u8]> = out.iter_mut().map(|v| &mut v[..]).collect();
        if !permitted(m.read(0, src.as_ptr() as u64, &mut parts)) {
            return;
        }
        assert_eq!(out.concat(), src);
    }

    #[test]
    fn faults_are_returned_and_unknown_nodes_refused() {
        let m = ProcessMemory::new(vec![Some(std::process::id() as i32), None]);
        let mut buf = [0u8; 64];
        match m.read(0, 8, &mut [&mut buf[..]]) {
            Err(RmaFault::Fault { addr: 8, .. } | RmaFault::Denied { .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(!m.reaches(1) && !m.reaches(7));
        assert!(matches!(
            m.write(1, &[&buf[..]], 0),
            Err(RmaFault::Unreachable(1))
        ));
        // No process has pid i32::MAX (pid_max is at most 2^22).
        let gone = ProcessMemory::new(vec![Some(i32::MAX)]);
        assert!(matches!(
            gone.write(0, &[&buf[..]], buf.as_ptr() as u64),
            Err(RmaFault::Gone(0))
        ));
    }
}
