//! One-sided transfers copied straight between two processes' memory, where the layer can
//! ([`converse_machine::Rma`]: SI's cross-memory attach), and puts between the PEs of one
//! process (an SMP node's, the in-process layer's), whose buffer is lent to the region's PE
//! through a table of this process instead of copied into a message ([`PUT_SHARED`]): one
//! plain copy, into the region (from `onesided.shared_put_kib`). A get between PEs of one process is already one copy over
//! messages (into the answer, which moves by pointer).
//!
//! The request still travels as a message, so the transfer keeps its place among the
//! initiator's messages; the region's PE does the one copy in the handler that takes it
//! (between two of its handlers, as over messages) and answers with a message of no bytes:
//!
//! | message (system handler `OneSided`) | `arg0` | payload |
//! |---|---|---|
//! | direct get | [`GET_DIRECT`] | as a get request, then the address of the initiator's buffer u64 |
//! | direct put | [`PUT_DIRECT`] | as a put's head, then the address of the initiator's bytes u64, their length u64 |
//! | shared put | [`PUT_SHARED`] | as a put's head, then the key its buffer is lent under u64, its length u64 |
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
use converse_machine::{Message, Rma, RmaFault};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Buffers smaller than this are left to the allocator, which keeps them warm itself.
const WARM_MIN: usize = 64 << 10;
/// Buffers kept at most.
const WARM_BUFFERS: usize = 4;
/// Bytes kept at most.
const WARM_BYTES: usize = 64 << 20;

/// Buffers of direct gets the program is done with ([`Got`](super::Got) brings them back
/// when dropped), for the next direct get: mapped and written before, so the copy into them
/// takes no page faults and nothing is zeroed. Bounded; shared with the `Got`s (which may
/// go to other threads), hence the lock, taken once per large get.
#[derive(Default)]
pub(crate) struct Warm(Mutex<Vec<Message>>);

impl Warm {
    /// A message whose payload is `len` bytes: a kept one if one fits (its bytes are stale,
    /// to be overwritten), a zeroed one otherwise; `None` when `len` bytes cannot be had (a
    /// size from a handle that is not the region's).
    pub(crate) fn take(&self, len: usize) -> Option<Message> {
        let kept = self.0.lock().ok().and_then(|mut v| {
            let i = v
                .iter()
                .position(|m| m.payload_len() >= len && m.payload_len() / 2 <= len)?;
            Some(v.swap_remove(i))
        });
        match kept {
            Some(mut m) => {
                m.truncate_payload(len);
                Some(m)
            }
            None => {
                // Asked of the allocator first, without touching a page: `Message::new`
                // aborts the process when it cannot have them.
                let total =
                    len.checked_add(converse_machine::HEADROOM + converse_machine::ENVELOPE_LEN)?;
                Vec::<u8>::new().try_reserve_exact(total).ok()?;
                Some(Message::new(len))
            }
        }
    }

    /// Keep `m` for a later get, if it is large and there is room.
    pub(crate) fn put(&self, m: Message) {
        let len = m.payload_len();
        if len < WARM_MIN {
            return;
        }
        if let Ok(mut v) = self.0.lock() {
            let bytes: usize = v.iter().map(Message::payload_len).sum();
            if v.len() < WARM_BUFFERS && bytes + len <= WARM_BYTES {
                v.push(m);
            }
        }
    }
}

/// `arg0` of a direct get.
pub(crate) const GET_DIRECT: u32 = 5;
/// `arg0` of a direct put.
pub(crate) const PUT_DIRECT: u32 = 6;
/// `arg0` of a put between PEs of one process.
pub(crate) const PUT_SHARED: u32 = 7;

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

/// Buffers of puts between PEs of this process, by key, while the region's PE copies out of
/// them ([`PUT_SHARED`]): the buffer itself crosses, not a copy, and no address does. Keys
/// are unique in the process (several in-process jobs may run at once). Only the putter
/// removes its key ([`take_back`]: at the answer, at a death, or when it leaves), so nothing
/// stays in the table after its put; `None` while the region's PE has the buffer.
type Lent = std::collections::HashMap<u64, Option<Vec<u8>>>;
static SHARED: std::sync::LazyLock<Mutex<Lent>> = std::sync::LazyLock::new(Mutex::default);
static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Hand `data` to a PE of this process; its key.
pub(crate) fn lend(data: Vec<u8>) -> u64 {
    let key = NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut t) = SHARED.lock() {
        t.insert(key, Some(data));
    }
    key
}

/// The region's PE: the buffer lent under `key`, if it is there (its slot stays, empty).
pub(crate) fn borrow(key: u64) -> Option<Vec<u8>> {
    SHARED.lock().ok()?.get_mut(&key)?.take()
}

/// The region's PE: put a borrowed buffer back, if its putter still waits for it (else it is
/// dropped here).
pub(crate) fn give_back(key: u64, data: Vec<u8>) {
    if let Ok(mut t) = SHARED.lock() {
        if let Some(slot) = t.get_mut(&key) {
            *slot = Some(data);
        }
    }
}

/// The putter: its buffer back, and its key out of the table.
pub(crate) fn take_back(key: u64) -> Option<Vec<u8>> {
    SHARED.lock().ok()?.remove(&key).flatten()
}

/// How a transfer's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// In messages.
    Message,
    /// Copied by the region's PE between its region and the initiator's memory ([`Rma`]).
    Direct,
    /// A put between PEs of this process: its buffer lent under this key.
    Shared(u64),
}

/// How this PE reaches other PEs' memory.
#[derive(Default)]
pub(crate) struct Direct {
    /// The layer's, for other nodes.
    layer: Option<Arc<dyn Rma>>,
    my_node: usize,
    /// Bytes from which a get and a put go direct across processes, and a put is shared
    /// in the process (`onesided.direct_get_kib`, `onesided.direct_put_kib`,
    /// `onesided.shared_put_kib`); 0: never (a PE made without [`Direct::new`]).
    min: [u64; 3],
    /// Nodes whose PEs refused a direct put: later transfers to them go as messages.
    refused: HashSet<usize>,
    /// Buffers of direct transfers whose region's PE died: kept, not freed (module docs).
    graveyard: Vec<Box<dyn std::any::Any>>,
    /// Transfers completed direct or shared (counted at their answer: one refused and sent
    /// again over messages is not).
    pub(crate) done: u64,
    warm: Arc<Warm>,
}

impl Direct {
    pub(crate) fn new(layer: Option<Arc<dyn Rma>>, my_node: usize, min: [u64; 3]) -> Direct {
        let mut d = Direct::default();
        d.layer = layer;
        d.my_node = my_node;
        d.min = min.map(|m| m.max(1));
        d
    }

    /// Whether `node`'s PEs are threads of this process.
    pub(crate) fn in_process(&self, node: usize) -> bool {
        node == self.my_node || self.layer.as_ref().is_some_and(|l| l.in_this_process(node))
    }

    /// What reaches `node`'s memory in another process, if anything.
    pub(crate) fn route(&self, node: usize) -> Option<&dyn Rma> {
        if self.in_process(node) {
            return None;
        }
        let r = self.layer.as_deref()?;
        r.reaches(node).then_some(r)
    }

    fn direct(&self, node: usize, len: u64, min: u64) -> bool {
        min > 0 && len >= min && !self.refused.contains(&node) && self.route(node).is_some()
    }

    /// How a get of `len` bytes from a PE of `node` goes. Between PEs of this process it
    /// stays a message: the region's PE copies the bytes into it once, and the message moves
    /// by pointer.
    pub(crate) fn get_path(&self, node: usize, len: u64) -> Path {
        if self.direct(node, len, self.min[0]) {
            Path::Direct
        } else {
            Path::Message
        }
    }

    /// How a put of `len` bytes to a PE of `node` goes (a shared one's key not drawn yet:
    /// 0).
    pub(crate) fn put_path(&self, node: usize, len: u64) -> Path {
        if self.in_process(node) {
            if self.min[2] > 0 && len >= self.min[2] {
                Path::Shared(0)
            } else {
                Path::Message
            }
        } else if self.direct(node, len, self.min[1]) {
            Path::Direct
        } else {
            Path::Message
        }
    }

    /// `node`'s PEs refused a direct put.
    pub(crate) fn refused_by(&mut self, node: usize) {
        self.refused.insert(node);
    }

    /// The warm buffers of direct gets.
    pub(crate) fn warm(&self) -> Arc<Warm> {
        self.warm.clone()
    }

    /// Keep a buffer a dead PE may still be copying into or out of.
    pub(crate) fn bury(&mut self, b: Box<dyn std::any::Any>) {
        self.graveyard.push(b);
    }
}

impl Drop for Direct {
    /// What was buried stays so when the PE leaves: leaked, since the dying process may
    /// still be copying.
    fn drop(&mut self) {
        std::mem::forget(std::mem::take(&mut self.graveyard));
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
        // A fault, or one a later contract names: the initiator gets an error, not bytes.
        Err(e) => {
            tracing::warn!(target: "converse", "one-sided: {e}");
            FAULTED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_buffers_come_back_bounded_and_sized() {
        let w = Warm::default();
        for _ in 0..10 {
            w.put(Message::new(1 << 20));
        }
        w.put(Message::new(100)); // too small to keep
        let kept = w.0.lock().map(|v| v.len()).unwrap_or(0);
        assert_eq!(kept, WARM_BUFFERS);
        // A fitting one comes back cut to the length asked; a much smaller ask gets a fresh
        // one (a small get does not pin a large buffer).
        assert_eq!(w.take(600 << 10).map(|m| m.payload_len()), Some(600 << 10));
        assert_eq!(w.take(100).map(|m| m.payload_len()), Some(100));
        // A size no allocator has is refused, not an abort.
        assert!(w.take(usize::MAX - 4).is_none());
        assert!(w.take(isize::MAX as usize).is_none());
        let kept = w.0.lock().map(|v| v.len()).unwrap_or(0);
        assert_eq!(kept, WARM_BUFFERS - 1);
    }

    #[test]
    fn paths_follow_the_thresholds_and_the_process() {
        let layer: Arc<dyn Rma> = Arc::new(converse_machine::ProcessMemory::new(vec![
            Some(std::process::id() as i32),
            None,
            Some(i32::MAX), // another process of this host
        ]));
        let d = Direct::new(Some(layer), 1, [64, 1024, 4]);
        // Node 0 is this process (in-process layer): puts lend from 4 B, gets stay messages.
        assert_eq!(d.put_path(0, 4), Path::Shared(0));
        assert_eq!(d.put_path(0, 3), Path::Message);
        assert_eq!(d.get_path(0, 1 << 20), Path::Message);
        // This node too, whatever the layer says of it.
        assert_eq!(d.put_path(1, 4), Path::Shared(0));
        // Another process: direct from the thresholds.
        assert_eq!(d.get_path(2, 64), Path::Direct);
        assert_eq!(d.get_path(2, 63), Path::Message);
        assert_eq!(d.put_path(2, 1024), Path::Direct);
        assert_eq!(d.put_path(2, 1023), Path::Message);
        // Not reached by the layer: messages.
        assert_eq!(d.put_path(3, 1 << 20), Path::Message);
        // A PE made without thresholds never leaves messages.
        let none = Direct::default();
        assert_eq!(none.put_path(0, 1 << 30), Path::Message);
    }
}
