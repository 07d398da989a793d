//! One-sided transfers (Charm++'s zero-copy `CkNcpyBuffer`, Mercury's bulk handles, GASNet's
//! put/get): a PE registers memory as a [`Region`] and hands its small [`RegionHandle`] to
//! others inside an ordinary message; a PE holding a handle *gets* a range of the region into
//! its own memory or *puts* its bytes into it, and a callback on the initiating PE says when
//! the transfer is complete; a put may also run a notification handler on the region's PE.
//!
//! **Two paths, one contract.** Over messages, on every layer (the reference implementation
//! GASNet keeps for conduits without RDMA, and Mercury's emulation on two-sided plugins): a
//! get is a request to the region's PE answered with the bytes, a put carries its bytes to
//! it. **Direct** (`direct.rs`), where the layer reaches the other process's memory
//! ([`converse_machine::Rma`]: si and the composites with it), from `onesided.direct_put_kib`
//! for puts and `onesided.direct_get_kib` for gets (both off by default: on the host
//! measured, SI's own large-message path was as fast or faster): the request
//! carries the address of the initiator's buffer, and the region's PE copies between it and
//! the region with one kernel copy (no copy into or out of a message). **Shared**, for puts
//! between the PEs of one process (an SMP node's, the in-process layer's) from
//! `onesided.shared_put_kib` (4 KiB): the
//! put's buffer is lent through a table of the process, and the region's PE copies it into
//! the region, one plain copy. MPI RMA and the fabric layers' RDMA need an asynchronous form
//! of the layer's contract that is not written yet; there, transfers go over messages.
//!
//! **The contract** (what a native path must keep too):
//! - *Ordering*: a get or put is ordered with the initiator's messages to the region's PE as a
//!   message would be: everything the initiator sent that PE before the transfer was handled
//!   before the transfer reads or writes the region, and the region's PE sees a put's bytes in
//!   every handler that runs after its notification. A get reads the region at one moment,
//!   between two of its owner's handlers; a put writes it likewise: an owner's handler never
//!   sees half a transfer.
//! - *Completion*: the initiator's callback runs once, on the initiating PE, from its
//!   scheduler: for a get with the bytes (a [`Got`], in the message they came in), for a put once they are in the region (the put's own
//!   buffer is handed back), or with an [`RmaError`].
//! - *Ownership*: a put's buffer is moved into the transfer and handed back at completion, and
//!   a get's bytes arrive in a buffer of their own, so safe code cannot touch either while the
//!   transfer is in flight. A region's memory belongs to the PE's table from registration to
//!   [`Pe::deregister_region`], which hands it back; the owner reads and writes it between its
//!   handlers ([`Pe::region`], [`Pe::region_mut`]).
//! - *Errors*: a range outside the region, a handle of a deregistered region (or one from
//!   another job: generations start at random), a PE outside the job: the callback gets the
//!   error, and no byte outside a region is ever read or written. In report mode, a transfer
//!   whose PE dies fails with [`RmaError::PeDied`]; one started towards a dead PE fails
//!   without anything sent. An answer is taken only from the PE asked and of the kind asked.
//! - *What may block*: nothing — `get` and `put` return at once; the callback comes later,
//!   from the scheduler, even for a transfer refused at once.
//!
//! | message (system handler `OneSided`) | `arg0` | payload |
//! |---|---|---|
//! | get request | [`GET`] | request id u64, region id u32, generation u32, offset u64, length u64 |
//! | get answer | [`GOT`] | request id u64, status u8, the bytes |
//! | put | [`PUT`] | request id u64, region id u32, generation u32, offset u64, notify handler u64 (`u64::MAX`: none), the bytes |
//! | put answer | [`PUT_DONE`] | request id u64, status u8 |
//! | a PE to itself | [`REFUSED`] | request id u64: a transfer refused before it was sent, its callback due |
//! | direct get, direct put | 5, 6 | see `direct.rs` |
//!
//! Status: 0 done, 1 no such region (stale), 2 out of range; for direct transfers 3 copied,
//! 4 copy refused (sent again over messages), 5 copy faulted. A put's notification is a message
//! to the handler named, run on the region's PE, its payload a [`PutNotice`].

mod direct;
mod serve;

use crate::lifecycle::SystemHandler;
use crate::pe::{HandlerId, Pe};
use converse_machine::bytes::ByteReader;
use converse_machine::Message;
use std::collections::HashMap;
use std::ops::Range;

/// `arg0` of a get request.
pub(crate) const GET: u32 = 0;
/// `arg0` of a get's answer.
pub(crate) const GOT: u32 = 1;
/// `arg0` of a put.
pub(crate) const PUT: u32 = 2;
/// `arg0` of a put's answer.
pub(crate) const PUT_DONE: u32 = 3;
/// `arg0` of a PE's note to itself: a transfer refused before it was sent (payload: its id).
pub(crate) const REFUSED: u32 = 4;

const DONE: u8 = 0;
const STALE: u8 = 1;
const OUT_OF_RANGE: u8 = 2;

const NO_NOTIFY: u64 = u64::MAX;

/// Why a transfer failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RmaError {
    /// The region is not registered on its PE (deregistered since, or the handle is not one
    /// of this job's).
    #[error("region {region} of PE {pe} is not registered (deregistered, or never was)")]
    Stale {
        /// The region's PE.
        pe: usize,
        /// Its id there.
        region: u32,
    },
    /// The range asked for is not inside the region.
    #[error("bytes {start}..{end} are outside region {region} of PE {pe} ({len} bytes)")]
    OutOfRange {
        /// The region's PE.
        pe: usize,
        /// Its id there.
        region: u32,
        /// The range asked for.
        start: u64,
        /// Its end.
        end: u64,
        /// The region's length.
        len: u64,
    },
    /// The region's PE died first (report mode).
    #[error("PE {pe} died before the transfer completed: {reason}")]
    PeDied {
        /// The PE.
        pe: usize,
        /// What the runtime was told.
        reason: String,
    },
    /// The handle names a PE outside the job.
    #[error("PE {0} is not a PE of this job")]
    NoSuchPe(usize),
    /// A handle's bytes that are not one.
    #[error("not a region handle ({0} bytes)")]
    NotAHandle(usize),
    /// The region's PE could not copy the bytes straight to or from this PE's memory (its
    /// process faulted on the address: a defect, reported rather than raised).
    #[error("PE {pe} could not copy the bytes to or from this PE's memory")]
    Copy {
        /// The region's PE.
        pe: usize,
    },
}

/// A registered region, held by the PE that registered it: the only way to reach or
/// deregister its memory. Not `Send`: it is the PE's. Dropping it leaves the memory
/// registered until the job ends (its handles keep working); deregister it to have it back.
#[derive(Debug)]
pub struct Region {
    id: u32,
    gen: u32,
    _pe_local: std::marker::PhantomData<*const ()>,
}

/// What others need to get from or put into a region: small and `Copy`, it travels inside
/// messages ([`to_bytes`](Self::to_bytes), [`from_bytes`](Self::from_bytes)).
///
/// ```
/// # use converse::RegionHandle;
/// # fn f(h: RegionHandle) {
/// let bytes = h.to_bytes();
/// assert_eq!(RegionHandle::from_bytes(&bytes).unwrap(), h);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionHandle {
    pe: u32,
    id: u32,
    gen: u32,
    len: u64,
}

impl RegionHandle {
    /// Bytes of a handle's wire form.
    pub const LEN: usize = 20;

    /// The wire form: PE u32, region id u32, generation u32, length u64 (little-endian).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&self.pe.to_le_bytes());
        b[4..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..12].copy_from_slice(&self.gen.to_le_bytes());
        b[12..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// A handle from its wire form (the first [`LEN`](Self::LEN) bytes of `b`).
    ///
    /// # Errors
    /// [`RmaError::NotAHandle`] if `b` is shorter.
    pub fn from_bytes(b: &[u8]) -> Result<RegionHandle, RmaError> {
        let mut r = ByteReader::new(b);
        let bad = |_| RmaError::NotAHandle(b.len());
        Ok(RegionHandle {
            pe: r.u32().map_err(bad)?,
            id: r.u32().map_err(bad)?,
            gen: r.u32().map_err(bad)?,
            len: r.u64().map_err(bad)?,
        })
    }

    /// The region's PE.
    pub fn pe(&self) -> usize {
        self.pe as usize
    }

    /// The region's length in bytes (all its parts).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The payload of a put's notification, as its handler on the region's PE reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutNotice {
    /// The PE that put.
    pub from: usize,
    /// The region written.
    pub region: RegionHandle,
    /// Where the bytes went, in the region.
    pub range: Range<u64>,
}

impl PutNotice {
    const LEN: usize = 4 + RegionHandle::LEN + 16;

    /// The notice a notification handler got.
    ///
    /// # Errors
    /// [`RmaError::NotAHandle`] if `msg` is not a put's notification.
    pub fn parse(msg: &Message) -> Result<PutNotice, RmaError> {
        let p = msg.payload();
        let bad = |_| RmaError::NotAHandle(p.len());
        let mut r = ByteReader::new(p);
        let from = r.u32().map_err(bad)? as usize;
        let region = RegionHandle::from_bytes(r.take(RegionHandle::LEN).map_err(bad)?)?;
        let start = r.u64().map_err(bad)?;
        let end = r.u64().map_err(bad)?;
        Ok(PutNotice {
            from,
            region,
            range: start..end,
        })
    }
}

/// A registered region's memory: its parts, and where each starts in the region.
struct Slot {
    gen: u32,
    parts: Vec<Vec<u8>>,
    starts: Vec<u64>,
    len: u64,
}

impl Slot {
    /// The pieces of the parts that `range` (inside the region) covers: (part, offset in it,
    /// length), in order.
    fn pieces(&self, range: Range<u64>) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        // The last part starting at or before the range (a binary search: regions of many
        // parts cost no scan from the first).
        let first = self
            .starts
            .partition_point(|&s| s <= range.start)
            .saturating_sub(1);
        (first..self.parts.len())
            .take_while(move |&i| self.starts[i] < range.end)
            .filter_map(move |i| {
                let (s, l) = (self.starts[i], self.parts[i].len() as u64);
                let (from, to) = (range.start.max(s), range.end.min(s + l));
                (from < to).then(|| (i, (from - s) as usize, (to - from) as usize))
            })
    }
}

/// The bytes a get brought: they stay in the message they came in (no copy on this side);
/// read them as a slice, or [`into_vec`](Got::into_vec).
pub struct Got {
    /// Always `Some` but in `drop`.
    msg: Option<Message>,
    /// Where a direct get's buffer goes back when the program is done with it.
    warm: Option<std::sync::Arc<direct::Warm>>,
}

impl Got {
    fn new(msg: Message) -> Got {
        Got {
            msg: Some(msg),
            warm: None,
        }
    }
}

impl Drop for Got {
    fn drop(&mut self) {
        if let (Some(w), Some(m)) = (&self.warm, self.msg.take()) {
            w.put(m);
        }
    }
}

impl Got {
    /// The bytes, in a `Vec` of their own (one copy).
    pub fn into_vec(self) -> Vec<u8> {
        self.to_vec()
    }
}

impl std::ops::Deref for Got {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.msg
            .as_ref()
            .and_then(|m| m.payload().get(9..))
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Got").field("bytes", &self.len()).finish()
    }
}

type GetDone = Box<dyn FnOnce(&mut Pe, Result<Got, RmaError>)>;
type PutDone = Box<dyn FnOnce(&mut Pe, Result<Vec<u8>, RmaError>)>;

/// A transfer this PE started and waits on.
enum Pending {
    Get {
        pe: usize,
        region: u32,
        range: Range<u64>,
        /// A direct get's buffer, which the region's PE copies into (payload: 9 bytes, as a
        /// get's answer, then the bytes, so it becomes the `Got`).
        into: Option<Message>,
        done: GetDone,
    },
    Put {
        pe: usize,
        region: u32,
        gen: u32,
        range: Range<u64>,
        data: Vec<u8>,
        /// How its bytes go: for a shared put, `data` is empty, the buffer lent.
        path: direct::Path,
        notify: u64,
        done: PutDone,
    },
}

/// A PE's regions and the transfers it has under way.
#[derive(Default)]
pub(crate) struct OneSided {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Generations only grow (from a random start, wrapping after 2^32 registrations), so a
    /// handle of a deregistered region never names its successor.
    next_gen: u32,
    /// Transfers refused before anything was sent, their callbacks due from the scheduler.
    refused: HashMap<u64, RmaError>,
    pending: HashMap<u64, Pending>,
    next_req: u64,
    /// How this PE reaches other PEs' memory for direct transfers.
    direct: direct::Direct,
}

impl OneSided {
    /// With gets and puts direct from `min` bytes (`[get, put, shared put]`) where `layer`
    /// reaches, and puts shared between the PEs of this process.
    pub(crate) fn new(
        layer: Option<std::sync::Arc<dyn converse_machine::Rma>>,
        my_node: usize,
        min: [u64; 3],
    ) -> OneSided {
        let mut os = OneSided::default();
        os.direct = direct::Direct::new(layer, my_node, min);
        os
    }
}

impl Drop for OneSided {
    /// The PE leaves with transfers pending (an SMP worker leaves before its node's layer
    /// barrier, while peers may still be handling its requests): a direct transfer's buffer
    /// may still be copied into or out of by another process, so it is leaked, not freed; a
    /// shared put's buffer is taken back out of the process's table.
    fn drop(&mut self) {
        for (_, p) in self.pending.drain() {
            match p {
                Pending::Get { into: Some(m), .. } => std::mem::forget(m),
                Pending::Put {
                    data,
                    path: direct::Path::Direct,
                    ..
                } => std::mem::forget(data),
                Pending::Put {
                    path: direct::Path::Shared(key),
                    ..
                } => drop(direct::take_back(key)),
                _ => {}
            }
        }
    }
}

fn system() -> HandlerId {
    HandlerId(SystemHandler::OneSided.id())
}

impl Pe {
    /// Register `parts` (one buffer, or several: a non-contiguous region, addressed as their
    /// concatenation) for others to get from and put into. The memory is the PE's table's
    /// until [`deregister_region`](Pe::deregister_region) hands it back.
    ///
    /// ```no_run
    /// converse::run(|pe| {
    ///     let r = pe.register_region(vec![vec![7u8; 1 << 20]]);
    ///     let handle = pe.region_handle(&r); // send handle.to_bytes() to whoever gets from it
    ///     # let _ = handle;
    /// });
    /// ```
    pub fn register_region(&mut self, parts: Vec<Vec<u8>>) -> Region {
        let os = &mut self.onesided;
        if os.next_gen == 0 {
            // A random start: a handle from another job (or an earlier run, handed over an
            // endpoint) names no region of this one, short of a 1 in 2^32 chance.
            os.next_gen = random_u32() | 1;
        }
        os.next_gen = os.next_gen.wrapping_add(1).max(1);
        let gen = os.next_gen;
        let mut starts = Vec::with_capacity(parts.len());
        let mut len = 0u64;
        for p in &parts {
            starts.push(len);
            len += p.len() as u64;
        }
        let slot = Slot {
            gen,
            parts,
            starts,
            len,
        };
        let id = match os.free.pop() {
            Some(id) => {
                os.slots[id as usize] = Some(slot);
                id
            }
            None => {
                os.slots.push(Some(slot));
                (os.slots.len() - 1) as u32
            }
        };
        Region {
            id,
            gen,
            _pe_local: std::marker::PhantomData,
        }
    }

    /// The handle of `region`, to send to others.
    pub fn region_handle(&self, region: &Region) -> RegionHandle {
        let len = self.slot(region.id, region.gen).map_or(0, |s| s.len);
        RegionHandle {
            pe: self.my_pe as u32,
            id: region.id,
            gen: region.gen,
            len,
        }
    }

    /// The region's memory, its parts in order (read between handlers: no transfer is ever
    /// half done then).
    pub fn region(&self, region: &Region) -> &[Vec<u8>] {
        self.slot(region.id, region.gen)
            .map_or(&[][..], |s| &s.parts[..])
    }

    /// The region's memory, to change: its parts as slices, so their lengths (which its
    /// handles and every range check count on) cannot change.
    pub fn region_mut(&mut self, region: &Region) -> Vec<&mut [u8]> {
        match self.onesided.slots.get_mut(region.id as usize) {
            Some(Some(s)) if s.gen == region.gen => {
                s.parts.iter_mut().map(|p| &mut p[..]).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Deregister `region` and have its memory back. Transfers from other PEs that arrive
    /// later fail with [`RmaError::Stale`].
    pub fn deregister_region(&mut self, region: Region) -> Vec<Vec<u8>> {
        let os = &mut self.onesided;
        match os.slots.get_mut(region.id as usize) {
            Some(slot @ Some(_)) if slot.as_ref().is_some_and(|s| s.gen == region.gen) => {
                let s = slot.take().map(|s| s.parts).unwrap_or_default();
                os.free.push(region.id);
                s
            }
            _ => Vec::new(),
        }
    }

    fn slot(&self, id: u32, gen: u32) -> Option<&Slot> {
        match self.onesided.slots.get(id as usize) {
            Some(Some(s)) if s.gen == gen => Some(s),
            _ => None,
        }
    }

    /// Get bytes `range` of the region `from` names into a buffer of their own; `done` runs on
    /// this PE with them, or why not (module docs: the contract). Returns at once.
    pub fn get<F>(&mut self, from: &RegionHandle, range: Range<u64>, done: F)
    where
        F: FnOnce(&mut Pe, Result<Got, RmaError>) + 'static,
    {
        let pe = from.pe();
        let checked = self.check_target(from, &range);
        let id = self.next_request();
        let len = range.end.saturating_sub(range.start);
        let path = self.path_of(&checked, pe, len, false);
        // The buffer the region's PE copies into, laid out as a get's answer: a warm one an
        // earlier get's program is done with, if there is one (fresh memory costs a page
        // fault per 4 KiB in the copy, more than the copy itself). Its size comes from the
        // handle, which only the region's PE can check: one that cannot be had goes over
        // messages, where the answer is sized by the region.
        let into = match path {
            direct::Path::Direct => usize::try_from(len)
                .ok()
                .and_then(|n| n.checked_add(9))
                .and_then(|n| self.onesided.direct.warm().take(n)),
            _ => None,
        };
        let (m, into) = if let Some(mut into) = into {
            let addr = into.payload_mut()[9..].as_mut_ptr() as u64;
            let mut m = Message::with_capacity(direct::GET_LEN);
            m.extend_payload(&direct::get_request(id, from, range.start, len, addr));
            m.set_arg0(direct::GET_DIRECT);
            (m, Some(into))
        } else {
            let mut m = Message::with_capacity(HEAD);
            m.extend_payload(&head(id, from, range.start, len));
            m.set_arg0(GET);
            (m, None)
        };
        self.onesided.pending.insert(
            id,
            Pending::Get {
                pe,
                region: from.id,
                range,
                into,
                done: Box::new(done),
            },
        );
        match checked {
            Ok(()) => self.send_msg(pe, system(), m),
            Err(e) => self.refuse_transfer(id, e),
        }
    }

    /// Put `data` into the region `to` names, from byte `offset` on; `done` runs on this PE
    /// with `data` handed back once the bytes are in the region, or why not. With `notify`, the
    /// region's PE runs that handler after writing them (its payload a [`PutNotice`]).
    /// Returns at once.
    pub fn put<F>(
        &mut self,
        to: &RegionHandle,
        offset: u64,
        data: Vec<u8>,
        notify: Option<HandlerId>,
        done: F,
    ) where
        F: FnOnce(&mut Pe, Result<Vec<u8>, RmaError>) + 'static,
    {
        let pe = to.pe();
        let range = offset..offset.saturating_add(data.len() as u64);
        let checked = self.check_target(to, &range);
        let id = self.next_request();
        let notify = notify.map_or(NO_NOTIFY, |h| u64::from(h.raw()));
        let len = data.len() as u64;
        let mut data = data;
        let mut path = self.path_of(&checked, pe, len, true);
        let m = match path {
            direct::Path::Message => put_message(id, to, offset, notify, &data),
            _ => {
                // No copy on this side: the region's PE copies out of `data`, which the
                // pending transfer holds (or the process's table lends) until it answers.
                let (kind, where_) = match path {
                    direct::Path::Direct => (direct::PUT_DIRECT, data.as_ptr() as u64),
                    _ => {
                        let key = direct::lend(std::mem::take(&mut data));
                        path = direct::Path::Shared(key);
                        (direct::PUT_SHARED, key)
                    }
                };
                let mut m = Message::with_capacity(direct::PUT_LEN);
                m.extend_payload(&direct::put_request(id, to, offset, notify, where_, len));
                m.set_arg0(kind);
                m
            }
        };
        self.onesided.pending.insert(
            id,
            Pending::Put {
                pe,
                region: to.id,
                gen: to.gen,
                range,
                data,
                path,
                notify,
                done: Box::new(done),
            },
        );
        match checked {
            Ok(()) => self.send_msg(pe, system(), m),
            Err(e) => self.refuse_transfer(id, e),
        }
    }

    /// A transfer refused before anything was sent: its callback runs from the scheduler, as
    /// every completion does (never inside `get` or `put`, where its caller may hold state
    /// the callback needs).
    fn refuse_transfer(&mut self, id: u64, e: RmaError) {
        self.onesided.refused.insert(id, e);
        let mut m = Message::with_capacity(8);
        m.extend_payload(&id.to_le_bytes());
        m.set_arg0(REFUSED);
        let me = self.my_pe;
        self.send_msg(me, system(), m);
    }

    /// How a get (or put) of `len` bytes with `pe`'s region goes, if it passed the checks.
    fn path_of(
        &mut self,
        checked: &Result<(), RmaError>,
        pe: usize,
        len: u64,
        put: bool,
    ) -> direct::Path {
        if checked.is_err() || pe == self.my_pe {
            return direct::Path::Message;
        }
        let node = self.node_of(pe);
        let d = &mut self.onesided.direct;
        if put {
            d.put_path(node, len)
        } else {
            d.get_path(node, len)
        }
    }

    /// One-sided transfers this PE started whose bytes were not carried in messages: copied
    /// straight between its memory and the region's PE's (`onesided.direct_get_kib`,
    /// `onesided.direct_put_kib`), or a put's buffer lent to a PE of this process. For tests
    /// and tools that check which path a layer takes.
    pub fn direct_transfers(&self) -> u64 {
        self.onesided.direct.done
    }

    fn next_request(&mut self) -> u64 {
        let id = self.onesided.next_req;
        self.onesided.next_req += 1;
        id
    }

    /// What can be refused before anything is sent.
    fn check_target(&self, h: &RegionHandle, range: &Range<u64>) -> Result<(), RmaError> {
        let pe = h.pe();
        if pe >= self.num_pes() {
            return Err(RmaError::NoSuchPe(pe));
        }
        if range.start > range.end || range.end > h.len {
            return Err(RmaError::OutOfRange {
                pe,
                region: h.id,
                start: range.start,
                end: range.end,
                len: h.len,
            });
        }
        if !self.is_alive(pe) {
            return Err(RmaError::PeDied {
                pe,
                reason: format!("node {} is out of the job", self.node_of(pe)),
            });
        }
        Ok(())
    }

    /// The system handler `OneSided`.
    pub(crate) fn on_onesided(&mut self, msg: Message) {
        let from = msg.src_pe() as usize;
        let mut r = ByteReader::new(msg.payload());
        let Ok(id) = r.u64() else {
            return self.drop_message(&msg, "a one-sided message without its request id");
        };
        match msg.arg0() {
            kind @ (GET | direct::GET_DIRECT) => self.serve_get(kind, from, id, &mut r, &msg),
            kind @ (PUT | direct::PUT_DIRECT | direct::PUT_SHARED) => {
                self.serve_put(kind, from, id, &mut r, &msg)
            }
            REFUSED => {
                let e = self.onesided.refused.remove(&id);
                let p = self.onesided.pending.remove(&id);
                if let (Some(e), Some(p)) = (e, p) {
                    match p {
                        Pending::Get { done, .. } => done(self, Err(e)),
                        Pending::Put { done, .. } => done(self, Err(e)),
                    }
                }
            }
            GOT | PUT_DONE => {
                let status = r.u8().unwrap_or(STALE);
                // The answer must come from the PE asked, and be of the kind asked.
                let matches = self.onesided.pending.get(&id).is_some_and(|p| match p {
                    Pending::Get { pe, .. } => *pe == from && msg.arg0() == GOT,
                    Pending::Put { pe, .. } => *pe == from && msg.arg0() == PUT_DONE,
                });
                if !matches || self.onesided.refused.contains_key(&id) {
                    return; // failed already (its PE died), or not an answer to it
                }
                let Some(p) = self.onesided.pending.remove(&id) else {
                    return;
                };
                self.complete(id, p, status, msg);
            }
            _ => self.drop_message(&msg, "a one-sided message of an unknown kind"),
        }
    }

    /// A transfer's answer came: run its callback (or, for a direct put the region's PE may
    /// not copy, send it again as a message).
    fn complete(&mut self, id: u64, p: Pending, status: u8, msg: Message) {
        match p {
            Pending::Get {
                pe,
                region,
                range,
                into,
                done,
            } => {
                let r = match (status, into) {
                    // Copied into our buffer, which becomes the `Got`.
                    (direct::COPIED, Some(into)) => {
                        self.onesided.direct.done += 1;
                        Ok(Got {
                            msg: Some(into),
                            warm: Some(self.onesided.direct.warm()),
                        })
                    }
                    (direct::FAULTED, _) => Err(RmaError::Copy { pe }),
                    // The bytes stay in the message they came in.
                    (_, _) => outcome(status, pe, region, &range).map(|()| Got::new(msg)),
                };
                done(self, r);
            }
            Pending::Put {
                pe,
                region,
                gen,
                range,
                data,
                path: direct::Path::Direct,
                notify,
                done,
            } if status == direct::REFUSED_COPY => {
                // Again, over messages; and so every later transfer to that node.
                let node = self.node_of(pe);
                self.onesided.direct.refused_by(node);
                let to = RegionHandle {
                    pe: pe as u32,
                    id: region,
                    gen,
                    len: range.end,
                };
                let m = put_message(id, &to, range.start, notify, &data);
                self.onesided.pending.insert(
                    id,
                    Pending::Put {
                        pe,
                        region,
                        gen,
                        range,
                        data,
                        path: direct::Path::Message,
                        notify,
                        done,
                    },
                );
                self.send_msg(pe, system(), m);
            }
            Pending::Put {
                pe,
                region,
                range,
                mut data,
                path,
                done,
                ..
            } => {
                if let direct::Path::Shared(key) = path {
                    data = direct::take_back(key).unwrap_or_default();
                }
                if status == DONE && path != direct::Path::Message {
                    self.onesided.direct.done += 1;
                }
                let r = if status == direct::FAULTED {
                    Err(RmaError::Copy { pe })
                } else {
                    outcome(status, pe, region, &range).map(|()| data)
                };
                done(self, r);
            }
        }
    }

    /// PEs died (report mode): the transfers waiting on them fail, in the order started.
    pub(crate) fn onesided_on_death(&mut self, pes: Range<usize>, reason: &str) {
        let mut ids: Vec<u64> = self
            .onesided
            .pending
            .iter()
            .filter(|(_, p)| match p {
                Pending::Get { pe, .. } | Pending::Put { pe, .. } => pes.contains(pe),
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            let Some(p) = self.onesided.pending.remove(&id) else {
                continue;
            };
            let died = |pe| RmaError::PeDied {
                pe,
                reason: reason.to_string(),
            };
            // A direct transfer's buffer is kept, not freed: the dying process may still be
            // copying into or out of it.
            match p {
                Pending::Get { pe, into, done, .. } => {
                    if let Some(into) = into {
                        self.onesided.direct.bury(Box::new(into));
                    }
                    done(self, Err(died(pe)));
                }
                Pending::Put {
                    pe,
                    data,
                    path,
                    done,
                    ..
                } => {
                    match path {
                        direct::Path::Direct => self.onesided.direct.bury(Box::new(data)),
                        direct::Path::Shared(key) => drop(direct::take_back(key)),
                        direct::Path::Message => {}
                    }
                    done(self, Err(died(pe)));
                }
            }
        }
    }
}

/// A put's message: its head, then its bytes.
fn put_message(id: u64, to: &RegionHandle, offset: u64, notify: u64, data: &[u8]) -> Message {
    let mut m = Message::with_capacity(HEAD + data.len());
    m.extend_payload(&head(id, to, offset, notify));
    // The one copy of the bytes on this side: into the message the layer sends.
    m.extend_payload(data);
    m.set_arg0(PUT);
    m
}

/// 32 random bits (the standard library's per-process random hash keys: no dependency).
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish() as u32
}

/// An answer of a request id and a status only.
fn status_message(id: u64, status: u8) -> Message {
    let mut m = Message::with_capacity(9);
    m.extend_payload(&id.to_le_bytes());
    m.extend_payload(&[status]);
    m
}

fn outcome(status: u8, pe: usize, region: u32, range: &Range<u64>) -> Result<(), RmaError> {
    match status {
        DONE => Ok(()),
        OUT_OF_RANGE => Err(RmaError::OutOfRange {
            pe,
            region,
            start: range.start,
            end: range.end,
            // The handle said more than the region has: the caller's handle is not this
            // region's (checked against its length before sending).
            len: 0,
        }),
        _ => Err(RmaError::Stale { pe, region }),
    }
}

/// Bytes of a get or put request before a put's data.
const HEAD: usize = 32;

/// The fixed part of a get or put request, on the stack (no allocation): request id, region
/// id, generation, offset, and the length (get) or the notify handler (put).
fn head(id: u64, h: &RegionHandle, off: u64, last: u64) -> [u8; HEAD] {
    let mut b = [0u8; HEAD];
    b[..8].copy_from_slice(&id.to_le_bytes());
    b[8..12].copy_from_slice(&h.id.to_le_bytes());
    b[12..16].copy_from_slice(&h.gen.to_le_bytes());
    b[16..24].copy_from_slice(&off.to_le_bytes());
    b[24..32].copy_from_slice(&last.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(lens: &[usize]) -> Slot {
        let parts: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0; l]).collect();
        let mut starts = Vec::new();
        let mut len = 0;
        for p in &parts {
            starts.push(len);
            len += p.len() as u64;
        }
        Slot {
            gen: 1,
            parts,
            starts,
            len,
        }
    }

    fn covered(s: &Slot, r: Range<u64>) -> Vec<(usize, usize, usize)> {
        s.pieces(r).filter(|p| p.2 > 0).collect()
    }

    #[test]
    fn pieces_cover_ranges_across_parts() {
        let s = slot(&[10, 0, 5, 20]);
        assert_eq!(covered(&s, 0..10), vec![(0, 0, 10)]);
        assert_eq!(covered(&s, 8..12), vec![(0, 8, 2), (2, 0, 2)]);
        assert_eq!(covered(&s, 12..35), vec![(2, 2, 3), (3, 0, 20)]);
        assert_eq!(covered(&s, 15..16), vec![(3, 0, 1)]);
        assert_eq!(covered(&s, 3..3), vec![]);
        let total: usize = covered(&s, 0..35).iter().map(|p| p.2).sum();
        assert_eq!(total, 35);
    }

    #[test]
    fn handles_and_notices_round_trip() {
        let h = RegionHandle {
            pe: 3,
            id: 9,
            gen: 77,
            len: 1 << 40,
        };
        assert_eq!(RegionHandle::from_bytes(&h.to_bytes()), Ok(h));
        assert_eq!(
            RegionHandle::from_bytes(&h.to_bytes()[..19]),
            Err(RmaError::NotAHandle(19))
        );
    }
}
