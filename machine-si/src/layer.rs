//! The machine layer on the Simple Interconnect, written as the porting slides write it.
//!
//! ```text
//! DeliverViaNetwork(msg, node):            CommunicationServer():
//!   si_write(node, header{size, source})     while si_read(port, header):
//!   si_write(node, payload)                     buf = alloc(header.size)
//!                                                read payload into buf (in pieces)
//!                                                hand buf up
//! ```
//!
//! A message goes one of three ways, the header's `kind` saying which (the record format is
//! tabulated in `layer/record.rs`):
//! - **whole**: one that fits a record goes as a single record (header then wire bytes), read
//!   straight into the message's own buffer with the header landing in its headroom;
//! - **lent** (single copy): from `si.single_copy_from` bytes (by default 256 KiB when we can
//!   also write into the receiver's memory and help with the copy, `coop.rs`; else 1.25 MiB),
//!   when the receiver can read our memory (it probes when it first sees us write), the record holds the header
//!   and the address of our buffer; the receiver allocates the message and copies the bytes
//!   straight out of our buffer (`process_vm_readv`), then counts it pulled. We keep the
//!   message until that count covers it, so nothing is freed while it may be read;
//! - **pieces**: any other larger one goes as the header record followed by pieces of 16 KiB,
//!   read straight into its buffer (two copies, into the ring and out of it, overlapping).
//!
//! Per pair, records are read in the order they were written and a loan is pulled when its
//! record is read, so FIFO holds across the three ways. A full ring never blocks `send`: what
//! does not fit waits in a queue per peer and goes out from `advance`, so two nodes writing to
//! each other cannot deadlock.

use crate::interconnect::Si;
use crate::wake::SiWaker;
use converse_bootstrap::client::LaunchEnv;
use converse_machine::{
    Armed, Bell, Layer, MachineError, Message, NodeTable, Part, Transport, Wake,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod boot;
mod receive;
mod record;

pub use self::boot::{boot, SiOpen};
use receive::Incoming;
use record::{header, Kind, HEADER, LENT_RECORD};

/// The registry entry for this layer.
pub const LAYER: Layer = Layer {
    name: "si",
    summary: "the Simple Interconnect on shared memory: one host, processes started by charmrun",
    boot,
    launched: LaunchEnv::present,
    settings: boot::SETTINGS,
    check: |s| boot::SiSettings::parse(s).map(drop),
    describe: converse_machine::no_description,
};

/// Largest record the layer writes: a larger message goes as pieces of this size, so that the
/// receiver copies one piece out while the sender copies the next one in (16 KiB measured best
/// from 64 KiB to 4 MiB; one record per message would copy in, then out, with no overlap).
const PIECE: usize = 16 << 10;

/// How long an idle node with queued output sleeps before trying again: the peer frees ring
/// space without telling us.
const BACKLOG_NAP: Duration = Duration::from_micros(50);

/// How long `exit` keeps pushing what is still queued for peers (and waiting for them to pull
/// what we lent): the job is over, so not forever.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// Size from which a lent message is copied with the sender's help, when it may write into
/// our memory: two chunks, so that there is something to share.
const COOP_FROM: usize = 2 * crate::coop::MIN_CHUNK;

/// [`SiMachine::lend_from`] of a peer that has not said yet whether it can pull from us.
const LEND_UNDECIDED: usize = 0;

/// Buffers of sent messages kept for receiving (each at most a piece): a node that sends as
/// much as it receives then allocates and frees nothing per small message.
const SPARES: usize = 16;

/// Most messages handed up from one sender per `advance`, so one busy sender cannot starve
/// the others or the scheduler.
const BUDGET: usize = 256;

/// A message on its way out: whole, in pieces, or lent.
struct Outgoing {
    msg: Message,
    /// Lend it (single copy) rather than copy it into the ring.
    lend: bool,
    header_sent: bool,
    /// Bytes of the wire form already written.
    offset: usize,
}

/// One node of an SI job.
pub struct SiMachine {
    me: usize,
    table: NodeTable,
    si: Si,
    /// Most wire bytes one record carries after the header (a piece).
    chunk: usize,
    /// Per peer: the wire size from which a message to it is lent (`usize::MAX`: never, it
    /// cannot pull from us; [`LEND_UNDECIDED`] until it has said whether it can).
    lend_from: Vec<usize>,
    /// `si.single_copy_from`, if set.
    lend_setting: Option<usize>,
    /// Whether to probe the writers that register (single copy not off, not denied here).
    probe_pulls: bool,
    /// Whether large copies are shared with their senders (`si.copy_together`).
    coop: bool,
    out: Vec<VecDeque<Outgoing>>,
    /// Peers with something in `out`.
    backlog: Vec<usize>,
    /// Per peer: messages lent to it and not yet known to be pulled, oldest first.
    lent: Vec<VecDeque<Message>>,
    /// Per peer: wire bytes in `out` and `lent`, what the runtime bounds.
    held: Vec<usize>,
    /// Per peer: how many messages were ever lent to it.
    loans: Vec<u64>,
    /// Peers with something in `lent`.
    lending: Vec<usize>,
    incoming: Vec<Option<Incoming>>,
    /// Buffers of small messages sent, kept to receive small messages into.
    spares: Vec<Vec<u8>>,
    /// Ends `wait` from other threads: a flag its sleep checks and our own doorbell.
    waker: Arc<SiWaker>,
}

// By hand: the fields are the layer's working state (sockets, queues, buffers); the node
// number says which one it is.
impl std::fmt::Debug for SiMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiMachine")
            .field("node", &self.me)
            .finish_non_exhaustive()
    }
}

impl SiMachine {
    /// [`Transport::advance`].
    fn advance_all(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        if !self.backlog.is_empty() {
            self.flush_backlog();
        }
        if !self.lending.is_empty() {
            self.help_receivers();
            self.reclaim();
        }
        // One load of our own block's registration count when nobody new writes to us.
        let new = self.si.refresh_senders();
        if !new.is_empty() {
            self.new_senders(&new);
        }
        let mut i = 0;
        while let Some(&s) = self.si.senders().get(i) {
            n += self.receive_from(s, deliver, BUDGET)?;
            i += 1;
        }
        Ok(n)
    }

    /// `DeliverViaNetwork`: write as much of `o` to `node` as its ring takes now; whether it
    /// all went.
    fn deliver(&self, node: usize, o: &mut Outgoing) -> bool {
        if !o.header_sent && !o.lend && o.msg.wire_len() <= self.chunk {
            // The whole message in one record, the header written into the message's headroom
            // so that the record is one contiguous copy.
            let size = o.msg.wire_len();
            let frame = o.msg.frame_with_header(HEADER);
            frame[..HEADER].copy_from_slice(&header(Kind::Whole, size, self.me));
            // Whether it went or not, `o` is not looked at again but to be sent again whole.
            return self.si.try_write(node, frame);
        }
        let wire = o.msg.wire();
        if !o.header_sent {
            if o.lend {
                let mut rec = [0u8; LENT_RECORD];
                rec[..HEADER].copy_from_slice(&header(Kind::Lent, wire.len(), self.me));
                rec[HEADER..].copy_from_slice(&(wire.as_ptr() as u64).to_le_bytes());
                return self.si.try_write(node, &rec);
            }
            if !self
                .si
                .try_write(node, &header(Kind::Pieces, wire.len(), self.me))
            {
                return false;
            }
            o.header_sent = true;
        }
        while o.offset < wire.len() {
            let end = (o.offset + self.chunk).min(wire.len());
            if !self.si.try_write(node, &wire[o.offset..end]) {
                return false;
            }
            o.offset = end;
        }
        true
    }

    /// `o` went out whole: keep it if it was lent, else it is done with.
    fn sent(&mut self, node: usize, o: Outgoing) {
        if o.lend {
            if self.lent[node].is_empty() {
                self.lending.push(node);
            }
            self.held[node] += o.msg.wire_len();
            self.lent[node].push_back(o.msg);
            self.loans[node] += 1;
        } else if self.spares.len() < SPARES && o.msg.wire_len() <= PIECE {
            // Its buffer receives the next small message: no free now, no malloc then.
            self.spares.push(o.msg.into_frame().0);
        }
    }

    /// A buffer with room for `need` bytes, empty: a spare one when the last kept fits.
    fn spare(&mut self, need: usize) -> Vec<u8> {
        match self.spares.pop() {
            Some(mut b) if b.capacity() >= need => {
                b.clear();
                b
            }
            other => {
                // Too small for this one: kept for the next.
                self.spares.extend(other);
                Vec::with_capacity(need)
            }
        }
    }

    fn flush_backlog(&mut self) {
        let mut i = 0;
        while i < self.backlog.len() {
            let node = self.backlog[i];
            let mut q = std::mem::take(&mut self.out[node]);
            while let Some(o) = q.front_mut() {
                if !self.deliver(node, o) {
                    break;
                }
                if let Some(o) = q.pop_front() {
                    self.held[node] -= o.msg.wire_len();
                    self.sent(node, o);
                }
            }
            let empty = q.is_empty();
            self.out[node] = q;
            if empty {
                self.backlog.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Free the lent messages their receivers have pulled.
    fn reclaim(&mut self) {
        let mut i = 0;
        while i < self.lending.len() {
            let node = self.lending[i];
            let pulled = self.si.pulled_by(node);
            let q = &mut self.lent[node];
            // Loans are pulled in the order they were made.
            while self.loans[node] - (q.len() as u64) < pulled {
                let Some(m) = q.pop_front() else { break };
                self.held[node] -= m.wire_len();
            }
            if q.is_empty() {
                self.lending.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Take chunks of the copies our receivers offer to share (of messages we lent them).
    /// Whether any was copied.
    fn help_receivers(&self) -> bool {
        let mut helped = false;
        for &node in &self.lending {
            let Some(offer) = self.si.offered(node) else {
                continue;
            };
            // Only ever our own loan to that node, whatever the block says.
            let loan = self.lent[node]
                .iter()
                .map(Message::wire)
                .find(|w| w.as_ptr() as u64 == offer.src && w.len() == offer.len);
            if let Some(src) = loan {
                helped |= self.si.help(node, offer, src);
            }
        }
        helped
    }

    /// Whether something is still queued for, or lent to, a peer that has not left.
    fn owes_peers(&self) -> bool {
        self.backlog
            .iter()
            .chain(&self.lending)
            .any(|&node| !self.si.peer_closed(node))
    }

    /// Read and drop whatever peers still send (the job is over), so that their own exit
    /// flushes end too; a peer that is gone has nothing more to read.
    fn drain_and_drop(&mut self) {
        let new = self.si.refresh_senders();
        for &node in &new {
            // Nothing will be lent to a node that is leaving.
            self.si.refuse_pull(node);
        }
        let mut i = 0;
        while let Some(&s) = self.si.senders().get(i) {
            let _ = self.receive_from(s, &mut |_| {}, 1 << 20);
            i += 1;
        }
    }
}

impl Transport for SiMachine {
    fn layer(&self) -> &'static str {
        "si"
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        if node == self.me || node >= self.lend_from.len() {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        if !self.si.reserved(node) {
            // Once per peer: the ring is reserved now, so a full /dev/shm is this error.
            self.si.reserve(node).map_err(|e| {
                MachineError::io(
                    format!("si: the ring to node {node}"),
                    std::io::Error::other(e.to_string()),
                )
            })?;
        }
        let lend_from = self.lend_threshold(node);
        let mut o = Outgoing {
            lend: msg.wire_len() >= lend_from,
            msg,
            header_sent: false,
            offset: 0,
        };
        // Behind anything already queued for this peer, to keep the order.
        if self.out[node].is_empty() && self.deliver(node, &mut o) {
            self.sent(node, o);
        } else {
            if self.out[node].is_empty() {
                self.backlog.push(node);
            }
            self.held[node] += o.msg.wire_len();
            self.out[node].push_back(o);
        }
        Ok(())
    }

    fn queued(&self, node: usize) -> usize {
        self.held.get(node).copied().unwrap_or(0)
    }

    fn in_transfer(&self) -> bool {
        // Out: pieces (or whole records) wait for ring room the receiver is freeing, or a lent
        // buffer waits to be pulled (the receiver may offer us chunks of the copy, which we
        // take sooner polling than woken). In: a message read in pieces, the rest to come.
        !self.backlog.is_empty()
            || !self.lending.is_empty()
            || self.incoming.iter().any(Option::is_some)
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        self.advance_all(deliver)
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        Some(self.waker.clone())
    }

    fn rma(&self) -> Option<Arc<dyn converse_machine::Rma>> {
        // The host's nodes, by the process ids they published in the segment: a one-sided
        // transfer between them is one copy by the kernel (`converse_machine::rma`).
        Some(Arc::new(converse_machine::ProcessMemory::new(
            self.si.pids(),
        )))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        // Messages lent (large ones the receiver copies from our memory) is the count the
        // layer already keeps; the rest went through the rings.
        vec![("si.lent", self.loans.iter().sum())]
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        // Idle is when a receiver's copy of our loan gets our help (it rings us to offer it).
        if !self.lending.is_empty() && self.help_receivers() {
            return Ok(());
        }
        let t = if self.backlog.is_empty() {
            timeout
        } else {
            timeout.min(BACKLOG_NAP)
        };
        let waker = &self.waker;
        self.si.wait_unless(t, || waker.pending());
        // A wake is answered by this return (the barrier's and exit's naps leave it pending).
        waker.take();
        Ok(())
    }
}

impl Part for SiMachine {
    /// The port's doorbell: writers ring it while this node says it sleeps.
    fn bell(&self) -> Option<Arc<dyn Bell>> {
        self.si
            .doorbell()
            .map(|d| Arc::new(SiBell(d)) as Arc<dyn Bell>)
    }

    /// What `wait` does first (help a receiver copy a loan), then the port's own sleep
    /// protocol, split in two: say it sleeps, and look once more.
    fn arm(&mut self) -> Armed {
        if !self.lending.is_empty() && self.help_receivers() {
            return Armed::Ready;
        }
        match self.si.arm() {
            None => Armed::Ready,
            // Output waiting for ring room, which peers free without telling us: not long.
            Some(seen) => Armed::Bell {
                seen,
                within: (!self.backlog.is_empty()).then_some(BACKLOG_NAP),
            },
        }
    }

    fn arrived(&self) -> bool {
        self.si.any_waiting()
    }

    fn disarm(&mut self) {
        self.si.disarm();
    }

    fn nap(&mut self) -> Result<(), MachineError> {
        // Not `wait`: a wake stays pending for the next one.
        self.si.wait(Duration::from_millis(1));
        Ok(())
    }

    fn forget(&mut self, node: usize) {
        if node >= self.out.len() {
            return;
        }
        tracing::debug!(target: "si", peer = node, "peer out of the job");
        self.out[node].clear();
        self.backlog.retain(|&p| p != node);
        self.lending.retain(|&p| p != node);
        // A peer charmrun calls dead may not have ended yet and may still be copying out of
        // a buffer we lent it: as in `drop`, those buffers are leaked, not freed (at most
        // what the runtime lets us hold for one peer, once per death).
        for m in self.lent[node].drain(..) {
            std::mem::forget(m);
        }
        self.held[node] = 0;
        // What it wrote and we have not read, and a message part-way in, are dropped: it is
        // no longer read from.
        self.incoming[node] = None;
        self.si.forget(node);
    }

    fn leave(&mut self) -> Result<(), MachineError> {
        // What is still queued goes out, and what we lent gets pulled, if the peers take it
        // soon (they drain their ports in their own exit); a peer that has left takes nothing.
        let deadline = Instant::now() + EXIT_FLUSH;
        loop {
            if !self.backlog.is_empty() {
                self.flush_backlog();
            }
            self.help_receivers();
            self.reclaim();
            self.drain_and_drop();
            if !self.owes_peers() || Instant::now() >= deadline {
                break;
            }
            self.si.wait(Duration::from_micros(100));
        }
        // From here a writer either sees us closed or has its record read (and its loan
        // counted) by this last drain.
        self.si.mark_closed();
        self.drain_and_drop();
        Ok(())
    }
}

impl Drop for SiMachine {
    fn drop(&mut self) {
        self.si.mark_closed();
        // A peer may still be copying out of a buffer we lent it (it left the exit flush late,
        // or this node is leaving on an error): such buffers must stay valid as long as this
        // process lives, so they are leaked rather than freed.
        for q in &mut self.lent {
            for m in q.drain(..) {
                std::mem::forget(m);
            }
        }
    }
}

/// The port's doorbell as a [`Bell`] a composite's relay thread sleeps on.
struct SiBell(crate::interconnect::Doorbell);

// SAFETY: the doorbell is a pointer into this node's port mapping, which outlives the relay
// that uses it (the composite stops its relay before the part goes); only an atomic word and
// the futex calls on it are reached through it, which any thread may make.
unsafe impl Sync for SiBell {}

impl Bell for SiBell {
    fn value(&self) -> u32 {
        self.0.value()
    }

    fn wait_past(&self, seen: u32, timeout: Duration) {
        self.0.wait_past(seen, timeout);
    }

    fn kick(&self) {
        self.0.kick();
    }
}
