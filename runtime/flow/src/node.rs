//! What a program writes: stages ([`Node`]), the source ([`Source`]), the items they pass
//! ([`Item`]) and the handle they emit through ([`Ctx`]).

use crate::output::{Emit, Output};
use converse::{Message, Pe};
use std::rc::Rc;

/// A stage (FastFlow's `ff_node_t`): takes one item at a time and emits zero or more.
///
/// The flow calls [`start`](Node::start) once before the first item, [`svc`](Node::svc) for
/// every item, and [`end`](Node::end) once every input channel has ended (FastFlow's
/// `svc_end` on end-of-stream); after `end` returns, end of stream goes on to the next stages.
/// All three run on the stage's PE, from its scheduler, like a handler: they must not run the
/// scheduler themselves (no [`Pe::barrier`] inside), and a stage that computes for long holds
/// only its own PE.
pub trait Node {
    /// Before the first item (may emit).
    fn start(&mut self, _ctx: &mut Ctx<'_>) {}
    /// One item: emit what it becomes through `ctx` (nothing, to filter it out).
    fn svc(&mut self, item: Item, ctx: &mut Ctx<'_>);
    /// Every input has ended (may emit: a reduction's result, say).
    fn end(&mut self, _ctx: &mut Ctx<'_>) {}
}

/// The first stage: makes the stream (FastFlow's first node, whose `svc` is called with no
/// task until it returns `EOS`).
pub trait Source {
    /// Before the first call of `next`.
    fn start(&mut self, _ctx: &mut Ctx<'_>) {}
    /// Emit the next few items and say whether more will come (`false`: end of stream). The
    /// flow calls again while the next stages have room, each call a message of its own, so
    /// the PE stays responsive; emit a handful per call, not the whole stream, and stop early
    /// when [`Ctx::full`] says the next stages have no room.
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool;
}

/// An item of the stream, owned. A large item is the bytes of one message, and passing it on
/// with [`Ctx::emit_item`] moves the buffer (between PEs of one process, by pointer); small
/// items travel several to a message ([`BATCH_ITEM`](crate::BATCH_ITEM)) and are copied
/// into the next one, which costs less than a message each.
#[derive(Debug)]
pub struct Item {
    pub(crate) p: Payload,
}

/// Where an item's bytes are.
#[derive(Debug)]
pub(crate) enum Payload {
    /// A message of its own.
    Whole(Message),
    /// Part of a batch: the batch, the bytes' offset and length in its payload, and the
    /// item's `arg1` word.
    Part(Rc<Message>, u32, u32, u32),
}

impl Payload {
    #[inline]
    pub(crate) fn word(&self) -> u32 {
        match self {
            Payload::Whole(m) => m.arg1(),
            Payload::Part(_, _, _, w) => *w,
        }
    }

    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Payload::Whole(m) => m.payload(),
            Payload::Part(b, off, len, _) => {
                &b.payload()[*off as usize..(*off as usize + *len as usize)]
            }
        }
    }
}

impl Item {
    /// An item holding a copy of `bytes`.
    pub fn new(bytes: &[u8]) -> Item {
        Item {
            p: Payload::Whole(Message::from_payload(bytes)),
        }
    }

    /// An item from a little-endian `u64`.
    pub fn from_u64(x: u64) -> Item {
        Item::new(&x.to_le_bytes())
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        self.p.bytes()
    }

    /// Its bytes, to change in place (an item that came in a batch is copied out first).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if let Payload::Part(..) = self.p {
            self.p = Payload::Whole(Message::from_payload(self.p.bytes()));
        }
        match &mut self.p {
            Payload::Whole(m) => m.payload_mut(),
            Payload::Part(..) => &mut [],
        }
    }

    /// The item as a little-endian `u64`, if it is 8 bytes long.
    pub fn u64(&self) -> Option<u64> {
        self.bytes().try_into().ok().map(u64::from_le_bytes)
    }

    /// The item as a message of its own.
    pub fn into_message(self) -> Message {
        match self.p {
            Payload::Whole(m) => m,
            Payload::Part(..) => Message::from_payload(self.p.bytes()),
        }
    }
}

impl From<Message> for Item {
    fn from(msg: Message) -> Item {
        Item {
            p: Payload::Whole(msg),
        }
    }
}

/// What a stage emits through, and its view of the job.
pub struct Ctx<'a> {
    pub(crate) pe: &'a mut Pe,
    pub(crate) out: &'a mut Output,
    pub(crate) name: &'a str,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("stage", &self.name)
            .finish_non_exhaustive()
    }
}

impl Ctx<'_> {
    /// Emit a copy of `bytes` as a new item.
    pub fn emit(&mut self, bytes: &[u8]) {
        // One copy: into the batch for the next stage, or (a large item) into a message.
        self.out.emit(self.pe, Emit::Bytes(bytes));
    }

    /// Emit a `u64` (little-endian) as a new item.
    pub fn emit_u64(&mut self, x: u64) {
        self.emit(&x.to_le_bytes());
    }

    /// Emit an item, moving its buffer (no copy).
    pub fn emit_item(&mut self, item: Item) {
        match item.p {
            Payload::Whole(m) => self.out.emit(self.pe, Emit::Msg(m)),
            p @ Payload::Part(..) => self.out.emit(self.pe, Emit::Bytes(p.bytes())),
        }
    }

    /// Whether the next stages hold all they may take from this one: what is emitted now
    /// waits in this stage's own queue (memory the windows do not bound). A source that
    /// emits several items per call checks it and returns early; it is called again once
    /// there is room.
    pub fn full(&self) -> bool {
        self.out.is_blocked()
    }

    /// This stage's name (a replicated worker's with its index).
    pub fn name(&self) -> &str {
        self.name
    }

    /// The PE the stage runs on, for anything else a handler may do (send, time, exit).
    pub fn pe(&mut self) -> &mut Pe {
        self.pe
    }
}
