//! What a program writes: stages ([`Node`]), the source ([`Source`]), the items they pass
//! ([`Item`]) and the handle they emit through ([`Ctx`]).

use crate::exec::Output;
use converse::{Message, Pe};

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
    /// the PE stays responsive; emit a handful per call, not the whole stream.
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool;
}

/// An item of the stream: the bytes of one message, owned. Passing it on with
/// [`Ctx::emit_item`] moves the buffer (between PEs of one process, by pointer).
#[derive(Debug)]
pub struct Item {
    pub(crate) msg: Message,
}

impl Item {
    /// An item holding a copy of `bytes`.
    pub fn new(bytes: &[u8]) -> Item {
        Item {
            msg: Message::from_payload(bytes),
        }
    }

    /// An item from a little-endian `u64`.
    pub fn from_u64(x: u64) -> Item {
        Item::new(&x.to_le_bytes())
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        self.msg.payload()
    }

    /// Its bytes, to change in place.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.msg.payload_mut()
    }

    /// The item as a little-endian `u64`, if it is 8 bytes long.
    pub fn u64(&self) -> Option<u64> {
        self.bytes().try_into().ok().map(u64::from_le_bytes)
    }

    /// The message that carries it.
    pub fn into_message(self) -> Message {
        self.msg
    }
}

impl From<Message> for Item {
    fn from(msg: Message) -> Item {
        Item { msg }
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
        // One allocation and copy: the bytes are the stage's, and the item must own them.
        self.out.emit(self.pe, Message::from_payload(bytes));
    }

    /// Emit a `u64` (little-endian) as a new item.
    pub fn emit_u64(&mut self, x: u64) {
        self.emit(&x.to_le_bytes());
    }

    /// Emit an item, moving its buffer (no copy).
    pub fn emit_item(&mut self, item: Item) {
        self.out.emit(self.pe, item.msg);
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
