//! One-sided transfers copied straight between two processes' memory, where the layer can
//! ([`converse_machine::Rma`]: SI's and the in-process layer's cross-memory attach) and
//! between the PEs of one SMP node (the same, to this process).
//!
//! The request still travels as a message, so the transfer keeps its place among the
//! initiator's messages; the region's PE does the one copy in the handler that takes it
//! (between two of its handlers, as over messages) and answers with a message of no bytes:
//!
//! | message (system handler `OneSided`) | `arg0` | payload |
//! |---|---|---|
//! | direct get | [`GET_DIRECT`] | as a get request, then the address of the initiator's buffer u64 |
//! | direct put | [`PUT_DIRECT`] | as a put's head, then the address of the initiator's bytes u64, their length u64 |
//!
//! A get is answered by [`GOT`](super::GOT) with status [`COPIED`] (the bytes are in the
//! initiator's buffer) or, when the copy was not permitted, with the bytes as over messages.
//! A put is answered by [`PUT_DONE`](super::PUT_DONE), with status [`REFUSED_COPY`] when the
//! copy was not permitted: the initiator then sends it again as a message (and sends every
//! later transfer to that node so), so its bytes reach the region after the initiator's
//! messages sent in between, the one place where a direct transfer orders differently.
//!
//! The initiator's buffer is held in the pending transfer until the answer: nothing else
//! touches it. If the region's PE dies first (report mode), the buffer is kept to the end of
//! the job instead of freed, since a dying process may still be copying into it.

use super::{head, HEAD};
use converse_machine::{ProcessMemory, Rma, RmaFault};
use std::collections::HashSet;
use std::sync::Arc;

/// `arg0` of a direct get.
pub(crate) const GET_DIRECT: u32 = 5;
/// `arg0` of a direct put.
pub(crate) const PUT_DIRECT: u32 = 6;

/// Status of a direct get's answer: the bytes are in the initiator's buffer.
pub(crate) const COPIED: u8 = 3;
/// Status of a direct put's answer: the region's PE may not reach the initiator's memory.
pub(crate) const REFUSED_COPY: u8 = 4;
/// Status: the copy faulted (an address the initiator does not hold: never one it sent).
pub(crate) const FAULTED: u8 = 5;

/// Bytes of a direct get request.
pub(crate) const GET_LEN: usize = HEAD + 8;
/// Bytes of a direct put request.
pub(crate) const PUT_LEN: usize = HEAD + 16;

/// How this PE reaches other PEs' memory.
#[derive(Default)]
pub(crate) struct Direct {
    /// The layer's, for other nodes.
    layer: Option<Arc<dyn Rma>>,
    /// This process's, for the PEs of this node.
    own: Option<ProcessMemory>,
    my_node: usize,
    /// Bytes from which a transfer goes direct (`onesided.direct_kib`); 0 until set up, so a
    /// PE made without [`Direct::new`] stays on messages.
    min: u64,
    /// Nodes whose PEs refused a direct put: later transfers to them go as messages.
    refused: HashSet<usize>,
    /// Buffers of direct transfers whose region's PE died: kept, not freed (module docs).
    graveyard: Vec<Box<dyn std::any::Any>>,
    /// Transfers started direct.
    pub(crate) started: u64,
}

impl Direct {
    pub(crate) fn new(
        layer: Option<Arc<dyn Rma>>,
        my_node: usize,
        nodes: usize,
        min: u64,
    ) -> Direct {
        Direct {
            layer,
            own: Some(ProcessMemory::this_process(nodes)),
            my_node,
            min: min.max(1),
            ..Direct::default()
        }
    }

    /// What reaches `node`'s memory, if anything.
    pub(crate) fn route(&self, node: usize) -> Option<&dyn Rma> {
        let r: &dyn Rma = if node == self.my_node {
            self.own.as_ref()?
        } else {
            self.layer.as_deref()?
        };
        r.reaches(node).then_some(r)
    }

    /// Whether a transfer of `len` bytes to `node` goes direct.
    pub(crate) fn takes(&self, node: usize, len: u64) -> bool {
        self.min > 0
            && len >= self.min
            && !self.refused.contains(&node)
            && self.route(node).is_some()
    }

    /// `node`'s PEs refused a direct put.
    pub(crate) fn refused_by(&mut self, node: usize) {
        self.refused.insert(node);
    }

    /// Keep a buffer a dead PE may still be copying into or out of.
    pub(crate) fn bury(&mut self, b: Box<dyn std::any::Any>) {
        self.graveyard.push(b);
    }
}

/// A direct get's request: a get's head, then where the bytes go.
pub(crate) fn get_request(
    id: u64,
    h: &crate::RegionHandle,
    off: u64,
    len: u64,
    into: u64,
) -> [u8; GET_LEN] {
    let mut b = [0u8; GET_LEN];
    b[..HEAD].copy_from_slice(&head(id, h, off, len));
    b[HEAD..].copy_from_slice(&into.to_le_bytes());
    b
}

/// A direct put's request: a put's head, then where its bytes are and how many.
pub(crate) fn put_request(
    id: u64,
    h: &crate::RegionHandle,
    off: u64,
    notify: u64,
    from: u64,
    len: u64,
) -> [u8; PUT_LEN] {
    let mut b = [0u8; PUT_LEN];
    b[..HEAD].copy_from_slice(&head(id, h, off, notify));
    b[HEAD..HEAD + 8].copy_from_slice(&from.to_le_bytes());
    b[HEAD + 8..].copy_from_slice(&len.to_le_bytes());
    b
}

/// The status a copy's outcome answers with.
pub(crate) fn status_of(r: Result<(), RmaFault>, done: u8) -> u8 {
    match r {
        Ok(()) => done,
        // Not reachable from here after all (another view of the host than the
        // initiator's), or not permitted: the initiator falls back to messages.
        Err(RmaFault::Unreachable(_) | RmaFault::Denied { .. }) => REFUSED_COPY,
        // The initiator is gone: nobody reads the answer.
        Err(RmaFault::Gone(_)) => FAULTED,
        Err(e @ RmaFault::Fault { .. }) => {
            tracing::warn!(target: "converse", "one-sided: {e}");
            FAULTED
        }
    }
}
