//! A stage's outputs: choosing the next stage for each item, spending the channel's credits,
//! batching small items, and queueing what has no room yet.
//!
//! **Batches.** An item of at most [`BATCH_ITEM`] bytes is copied into the channel's batch
//! (`[arg1][length][bytes]`, `wire.rs`), sent when the stage's handler returns or at 8 KiB: a
//! runtime message costs more than copying a small item. A larger item goes as a message of
//! its own, moved, after whatever the channel's batch holds, so the channel stays in order.
//!
//! **Room.** An item goes when its channel has a credit and room in bytes (below half the
//! byte window, anything; above, what fits). What has no room waits in the stage's queue, in
//! order; while anything waits there the stage takes no input (`exec.rs`).

use crate::plan::Router;
use crate::wire::{self, Stamp};
use converse::{HandlerId, Message, Pe};
use std::collections::VecDeque;

/// Where a message for a stage goes from this job: to the stage's PE, or (each group a job
/// of its own) to this job's gateway on PE 0, which sends it on to the stage's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dest {
    Pe(usize),
    Group(usize),
}

/// Items of at most this many bytes travel several to a message (a batch per channel, sent
/// when the stage's handler returns, or at 8 KiB): copying a small item costs less
/// than a message of its own.
pub const BATCH_ITEM: usize = 1024;
/// A batch is sent once it holds this many bytes.
const BATCH_BYTES: usize = 8 << 10;

/// What a stage emits: a message to move, or bytes to copy.
pub(crate) enum Emit<'a> {
    Msg(Message),
    Bytes(&'a [u8]),
}

impl Emit<'_> {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Emit::Msg(m) => m.payload_len(),
            Emit::Bytes(b) => b.len(),
        }
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Emit::Msg(m) => m.payload(),
            Emit::Bytes(b) => b,
        }
    }

    fn into_message(self) -> Message {
        match self {
            Emit::Msg(m) => m,
            // The item must wait (no credit) or is large: it becomes a message of its own.
            Emit::Bytes(b) => Message::from_payload(b),
        }
    }
}

/// The flow's runtime handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers {
    pub(crate) item: HandlerId,
    /// A batch of small items for one stage.
    pub(crate) batch: HandlerId,
    pub(crate) ctl: HandlerId,
    /// On PE 0: an item, and a control word, for a stage of another group's job.
    pub(crate) gw_item: HandlerId,
    pub(crate) gw_ctl: HandlerId,
}

impl Handlers {
    /// Send an item (`ctl` false) or a control word to `to`.
    #[inline]
    pub(crate) fn send(&self, pe: &mut Pe, to: Dest, ctl: bool, msg: Message) {
        match (to, ctl) {
            (Dest::Pe(p), false) => pe.send_msg(p, self.item, msg),
            (Dest::Pe(p), true) => pe.send_msg(p, self.ctl, msg),
            (Dest::Group(_), false) => pe.send_msg(0, self.gw_item, msg),
            (Dest::Group(_), true) => pe.send_msg(0, self.gw_ctl, msg),
        }
    }
}

/// A stage's outputs.
pub(crate) struct Output {
    pub(crate) me: u16,
    pub(crate) h: Handlers,
    /// Per slot: destination instance and where it is.
    pub(crate) dst: Vec<(u16, Dest)>,
    pub(crate) credit: Vec<u32>,
    /// Per slot: bytes sent and not yet taken; at most `byte_window` (or one item).
    pub(crate) bytes_out: Vec<u64>,
    pub(crate) byte_window: u64,
    pub(crate) router: Option<Router>,
    /// Items beyond the credits, with their slot once chosen.
    pub(crate) queue: VecDeque<(Option<u32>, Message)>,
    pub(crate) stamps: bool,
    pub(crate) next_seq: u32,
    /// The ordered input being taken, if any.
    pub(crate) cur: Option<Stamp>,
    /// The item last emitted for `cur`, held to flag it last when `svc` returns.
    pub(crate) held: Option<Message>,
    pub(crate) dropped: u64,
    /// Per slot: the batch being filled; and the slots that have one.
    pub(crate) batch: Vec<Option<Message>>,
    pub(crate) dirty: Vec<u32>,
}

impl Output {
    pub(crate) fn emit(&mut self, pe: &mut Pe, e: Emit<'_>) {
        if let Some(st) = self.cur {
            if let Some(prev) = self.held.replace(e.into_message()) {
                let word = Stamp {
                    last: false,
                    skip: false,
                    ..st
                }
                .word();
                self.send_word(pe, Emit::Msg(prev), word);
            }
            return;
        }
        let word = if self.stamps {
            let seq = self.next_seq;
            self.next_seq = (seq + 1) & wire::SEQ_MASK;
            Stamp {
                seq,
                last: true,
                skip: false,
            }
            .word()
        } else {
            0
        };
        self.send_word(pe, e, word);
    }

    /// After an ordered input's `svc`: its last item goes out flagged last, or a skip marker
    /// when it gave nothing.
    pub(crate) fn close_input(&mut self, pe: &mut Pe) {
        let Some(st) = self.cur.take() else { return };
        match (self.held.take(), st.last) {
            (Some(m), last) => {
                let word = Stamp {
                    last,
                    skip: false,
                    ..st
                }
                .word();
                self.send_word(pe, Emit::Msg(m), word)
            }
            (None, true) => {
                let word = Stamp {
                    last: true,
                    skip: true,
                    ..st
                }
                .word();
                // An empty item: only when a worker filters an ordered item out.
                self.send_word(pe, Emit::Bytes(&[]), word)
            }
            (None, false) => {}
        }
    }

    fn send_word(&mut self, pe: &mut Pe, e: Emit<'_>, word: u32) {
        let Some(router) = self.router.as_mut() else {
            self.dropped += 1;
            return;
        };
        let mut chosen = None;
        if self.queue.is_empty() {
            chosen = router.pick(e.bytes(), &self.credit);
            if let Some(s) = chosen {
                if self.room(s, e.len()) {
                    self.send_slot(pe, s, e, word);
                    return;
                }
            }
        }
        let mut msg = e.into_message();
        msg.set_arg1(word);
        self.queue.push_back((chosen, msg));
    }

    #[inline]
    fn send_slot(&mut self, pe: &mut Pe, s: u32, e: Emit<'_>, word: u32) {
        let (d, to) = self.dst[s as usize];
        self.credit[s as usize] -= 1;
        self.bytes_out[s as usize] += e.len() as u64;
        if e.len() <= BATCH_ITEM && matches!(to, Dest::Pe(_)) {
            let b = &mut self.batch[s as usize];
            let full = {
                let m = b.get_or_insert_with(|| {
                    self.dirty.push(s);
                    Message::with_capacity(BATCH_BYTES + BATCH_ITEM + 8)
                });
                m.extend_payload(&word.to_le_bytes());
                m.extend_payload(&(e.len() as u32).to_le_bytes());
                m.extend_payload(e.bytes());
                m.payload_len() >= BATCH_BYTES
            };
            if full {
                self.flush_slot(pe, s);
            }
            return;
        }
        // What the batch holds goes first: the channel stays in order.
        self.flush_slot(pe, s);
        let mut msg = e.into_message();
        msg.set_arg0(wire::addr(d, self.me));
        msg.set_arg1(word);
        // Items and ends of a channel keep their order only at one priority.
        msg.set_priority(0);
        self.h.send(pe, to, false, msg);
    }

    /// Send slot `s`'s batch, if it has one.
    fn flush_slot(&mut self, pe: &mut Pe, s: u32) {
        if let Some(mut m) = self.batch[s as usize].take() {
            let (d, to) = self.dst[s as usize];
            m.set_arg0(wire::addr(d, self.me));
            if let Dest::Pe(p) = to {
                pe.send_msg(p, self.h.batch, m);
            }
        }
    }

    /// Send every batch: when the stage's handler is done, so a batch never waits for more.
    pub(crate) fn flush_batches(&mut self, pe: &mut Pe) {
        while let Some(s) = self.dirty.pop() {
            self.flush_slot(pe, s);
        }
    }

    /// Send what waits while there is room; whether nothing waits any more.
    pub(crate) fn flush(&mut self, pe: &mut Pe) -> bool {
        while let Some(front) = self.queue.front_mut() {
            let s = match front.0 {
                Some(s) => s,
                None => {
                    let Some(r) = self.router.as_mut() else { break };
                    match r.pick(front.1.payload(), &self.credit) {
                        Some(s) => {
                            front.0 = Some(s);
                            s
                        }
                        None => break,
                    }
                }
            };
            let len = front.1.payload_len();
            if !self.room(s, len) {
                break;
            }
            let Some((_, m)) = self.queue.pop_front() else {
                break;
            };
            let word = m.arg1();
            self.send_slot(pe, s, Emit::Msg(m), word);
        }
        self.queue.is_empty()
    }

    /// Whether slot `s` can take an item of `len` bytes now: a credit, and room in its bytes.
    /// Below half the byte window any item goes (the consumer gives bytes back only once it
    /// has taken half a window, so waiting there for room could wait for good: one small
    /// item in flight, then one larger than the rest of the window); a channel so holds at
    /// most the byte window, or half of it and one item.
    #[inline]
    fn room(&self, s: u32, len: usize) -> bool {
        let (s, len) = (s as usize, len as u64);
        let out = self.bytes_out[s];
        self.credit[s] > 0
            && (out == 0 || out < self.byte_window / 2 || out + len <= self.byte_window)
    }

    #[inline]
    pub(crate) fn blocked(&self) -> bool {
        !self.queue.is_empty()
    }

    pub(crate) fn is_blocked(&self) -> bool {
        self.blocked()
    }
}
