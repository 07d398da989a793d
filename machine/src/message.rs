//! The message buffer and the envelope codec.
//!
//! A [`Message`] is one heap buffer laid out as
//!
//! ```text
//! | headroom (layer header) | envelope (24 B) | payload ... |
//!                           ^ head
//! ```
//!
//! The *wire bytes* of a message are the envelope followed by the payload: that is what a layer
//! must carry from one node to another, byte for byte. The headroom in front lets a layer write
//! its own packet header right before the wire bytes and hand the whole frame to the interconnect
//! in one piece, so no layer copies a payload to prepend a header. On the receiving side a layer
//! reads a whole frame into one `Vec<u8>` and wraps it with [`Message::from_frame`]; the handler
//! then sees the payload in place, without another copy.
//!
//! The envelope is the runtime's per-message header, shared by every layer:
//!
//! | offset | field     | type | meaning                                              |
//! |-------:|-----------|------|------------------------------------------------------|
//! | 0      | handler   | u32  | handler id to run at the destination                 |
//! | 4      | src_pe    | u32  | PE that sent it (a broadcast's root, for broadcasts)  |
//! | 8      | dst_pe    | u32  | PE the message is for (a node may host several PEs)   |
//! | 12     | priority  | i32  | scheduling priority, smaller runs first, 0 default  |
//! | 16     | arg0      | u32  | reserved for the runtime and its libraries           |
//! | 20     | arg1      | u32  | reserved for the runtime and its libraries           |
//!
//! All fields are little-endian.

use crate::error::WireError;

/// Bytes reserved in front of the envelope of every message the runtime builds, for a layer's
/// own packet header. A layer whose header is larger still works (see
/// [`Message::frame_with_header`]) but pays a copy; keep layer headers within this.
pub const HEADROOM: usize = 32;

/// Size of the envelope that starts the wire bytes of every message.
pub const ENVELOPE_LEN: usize = 24;

const OFF_HANDLER: usize = 0;
const OFF_SRC: usize = 4;
const OFF_DST: usize = 8;
const OFF_PRIO: usize = 12;
const OFF_ARG0: usize = 16;
const OFF_ARG1: usize = 20;

/// An owned message: envelope plus payload, with headroom for a layer header.
///
/// ```
/// use converse_machine::Message;
/// let mut m = Message::from_payload(b"hello");
/// m.set_priority(-1);
/// assert_eq!(m.payload(), b"hello");
/// assert_eq!(m.priority(), -1);
/// assert_eq!(m.wire().len(), converse_machine::ENVELOPE_LEN + 5);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    buf: Vec<u8>,
    /// Start of the envelope in `buf`; everything before it is headroom.
    head: usize,
}

impl Message {
    /// A message with a zero-filled payload of `len` bytes, to be written through
    /// [`payload_mut`](Self::payload_mut).
    pub fn new(len: usize) -> Message {
        Message {
            buf: zeroed(HEADROOM + ENVELOPE_LEN + len),
            head: HEADROOM,
        }
    }

    /// A message whose payload is a copy of `payload` (the one copy of a "sync send").
    pub fn from_payload(payload: &[u8]) -> Message {
        let mut buf = Vec::with_capacity(HEADROOM + ENVELOPE_LEN + payload.len());
        buf.resize(HEADROOM + ENVELOPE_LEN, 0);
        buf.extend_from_slice(payload);
        Message {
            buf,
            head: HEADROOM,
        }
    }

    /// A message from received wire bytes (envelope then payload), copied once into a buffer
    /// of its own with headroom in front: for layers that receive several messages into one
    /// buffer and cut them out.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when `wire` is too short to hold an envelope.
    pub fn from_wire(wire: &[u8]) -> Result<Message, WireError> {
        let mut buf = Vec::with_capacity(HEADROOM + wire.len());
        buf.resize(HEADROOM, 0);
        buf.extend_from_slice(wire);
        Message::from_frame(buf, HEADROOM)
    }

    /// An empty-payload message with room for `capacity` payload bytes, to be filled with
    /// [`extend_payload`](Self::extend_payload) without reallocating.
    pub fn with_capacity(capacity: usize) -> Message {
        let mut buf = Vec::with_capacity(HEADROOM + ENVELOPE_LEN + capacity);
        buf.resize(HEADROOM + ENVELOPE_LEN, 0);
        Message {
            buf,
            head: HEADROOM,
        }
    }

    /// Wrap a received frame: `frame[offset..]` are the wire bytes (envelope then payload),
    /// `frame[..offset]` is whatever the layer read in front of them (its own header), which
    /// becomes headroom. No byte is copied.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when the frame is too short to hold an envelope after `offset`.
    pub fn from_frame(frame: Vec<u8>, offset: usize) -> Result<Message, WireError> {
        if frame.len() < offset.saturating_add(ENVELOPE_LEN) {
            return Err(WireError::Truncated {
                len: frame.len().saturating_sub(offset),
                need: ENVELOPE_LEN,
            });
        }
        Ok(Message {
            buf: frame,
            head: offset,
        })
    }

    /// The payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf[self.head + ENVELOPE_LEN..]
    }

    /// The payload, writable in place.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.head + ENVELOPE_LEN;
        &mut self.buf[start..]
    }

    /// Length of the payload in bytes.
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.buf.len() - self.head - ENVELOPE_LEN
    }

    /// Append bytes to the payload (may reallocate if the capacity is exceeded).
    pub fn extend_payload(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Shorten the payload to `len` bytes; no effect if it is already shorter.
    pub fn truncate_payload(&mut self, len: usize) {
        self.buf.truncate(self.head + ENVELOPE_LEN + len);
    }

    /// The wire bytes: envelope then payload. This is what a layer transports.
    #[inline]
    pub fn wire(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    /// Length of the wire bytes.
    #[inline]
    pub fn wire_len(&self) -> usize {
        self.buf.len() - self.head
    }

    /// The frame a layer sends: `header_len` bytes for the layer's header (to be written through
    /// the returned slice's first `header_len` bytes) followed by the wire bytes.
    ///
    /// Uses the headroom, so it costs nothing when `header_len <= HEADROOM` (always true for
    /// messages the runtime builds). A message received with less headroom than asked is moved
    /// once into a bigger buffer: the only copy here, and only on that slow path.
    pub fn frame_with_header(&mut self, header_len: usize) -> &mut [u8] {
        if self.head < header_len {
            let mut buf = Vec::with_capacity(header_len + self.wire_len());
            buf.resize(header_len, 0);
            buf.extend_from_slice(&self.buf[self.head..]);
            self.buf = buf;
            self.head = header_len;
        }
        let start = self.head - header_len;
        &mut self.buf[start..]
    }

    /// The envelope as bytes (for layers that want to inspect or checksum it).
    #[inline]
    pub fn envelope(&self) -> &[u8] {
        &self.buf[self.head..self.head + ENVELOPE_LEN]
    }

    #[inline]
    fn get_u32(&self, off: usize) -> u32 {
        let p = self.head + off;
        // One bounds check for the field rather than one per byte (a byte at a time, they
        // were a tenth of a same-PE round trip's instructions). Every constructor and mutator
        // keeps a whole envelope at `head`, so neither the slice nor the chunk fails.
        match self.buf[p..p + 4].first_chunk::<4>() {
            Some(b) => u32::from_le_bytes(*b),
            None => unreachable!("a 4-byte slice has a 4-byte chunk"),
        }
    }

    #[inline]
    fn put_u32(&mut self, off: usize, v: u32) {
        let p = self.head + off;
        self.buf[p..p + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Handler id to run at the destination.
    #[inline]
    pub fn handler(&self) -> u32 {
        self.get_u32(OFF_HANDLER)
    }
    /// Set the handler id.
    #[inline]
    pub fn set_handler(&mut self, h: u32) {
        self.put_u32(OFF_HANDLER, h)
    }
    /// PE that sent the message.
    #[inline]
    pub fn src_pe(&self) -> u32 {
        self.get_u32(OFF_SRC)
    }
    /// Set the sending PE.
    #[inline]
    pub fn set_src_pe(&mut self, pe: u32) {
        self.put_u32(OFF_SRC, pe)
    }
    /// PE the message is addressed to.
    #[inline]
    pub fn dst_pe(&self) -> u32 {
        self.get_u32(OFF_DST)
    }
    /// Set the destination PE.
    #[inline]
    pub fn set_dst_pe(&mut self, pe: u32) {
        self.put_u32(OFF_DST, pe)
    }
    /// Scheduling priority: smaller values run first, equal values in arrival order.
    #[inline]
    pub fn priority(&self) -> i32 {
        self.get_u32(OFF_PRIO) as i32
    }
    /// Set the scheduling priority.
    #[inline]
    pub fn set_priority(&mut self, prio: i32) {
        self.put_u32(OFF_PRIO, prio as u32)
    }
    /// Builder form of [`set_priority`](Self::set_priority).
    pub fn with_priority(mut self, prio: i32) -> Message {
        self.set_priority(prio);
        self
    }
    /// First argument word, reserved for the runtime's system handlers and its libraries
    /// (a task's slot, a call's id).
    #[inline]
    pub fn arg0(&self) -> u32 {
        self.get_u32(OFF_ARG0)
    }
    /// Set the first argument word.
    #[inline]
    pub fn set_arg0(&mut self, v: u32) {
        self.put_u32(OFF_ARG0, v)
    }
    /// Second argument word, reserved as [`arg0`](Self::arg0) is.
    #[inline]
    pub fn arg1(&self) -> u32 {
        self.get_u32(OFF_ARG1)
    }
    /// Set the second argument word.
    #[inline]
    pub fn set_arg1(&mut self, v: u32) {
        self.put_u32(OFF_ARG1, v)
    }

    /// Give the buffer back: `(frame, head)`, where `frame[head..]` are the wire bytes.
    pub fn into_frame(self) -> (Vec<u8>, usize) {
        (self.buf, self.head)
    }
}

/// Buffers below this size are zeroed by hand; larger ones come from `calloc`.
const CALLOC_FROM: usize = 64 << 10;

/// A zero-filled buffer of `n` bytes, allocated the cheap way for its size: small ones through
/// `malloc` and a memset, since glibc's `calloc` skips the per-thread cache (a slow path on
/// every message, seen as `_int_free` in profiles); large ones through `calloc`, which gets
/// fresh zero pages without touching them.
// `vec![0; n]` is exactly the calloc this avoids for small buffers.
#[allow(clippy::slow_vector_initialization)]
pub fn zeroed(n: usize) -> Vec<u8> {
    if n < CALLOC_FROM {
        let mut v = Vec::with_capacity(n);
        v.resize(n, 0);
        v
    } else {
        vec![0; n]
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("handler", &self.handler())
            .field("src_pe", &self.src_pe())
            .field("dst_pe", &self.dst_pe())
            .field("priority", &self.priority())
            .field("payload_len", &self.payload_len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_fields_round_trip() {
        let mut m = Message::from_payload(&[1, 2, 3]);
        m.set_handler(7);
        m.set_src_pe(1);
        m.set_dst_pe(u32::MAX);
        m.set_priority(i32::MIN);
        m.set_arg0(9);
        m.set_arg1(10);
        assert_eq!(
            (
                m.handler(),
                m.src_pe(),
                m.dst_pe(),
                m.priority(),
                m.arg0(),
                m.arg1()
            ),
            (7, 1, u32::MAX, i32::MIN, 9, 10)
        );
        assert_eq!(m.payload(), &[1, 2, 3]);
    }

    #[test]
    fn frame_uses_headroom_without_moving_payload() {
        let mut m = Message::from_payload(b"abc");
        let before = m.payload().as_ptr();
        let frame = m.frame_with_header(8);
        frame[..8].copy_from_slice(&[0xAA; 8]);
        assert_eq!(frame.len(), 8 + ENVELOPE_LEN + 3);
        assert_eq!(m.payload().as_ptr(), before);
    }

    #[test]
    fn received_frame_is_wrapped_in_place() {
        let mut src = Message::from_payload(b"payload");
        src.set_handler(3);
        let mut frame = vec![0xEE; 4];
        frame.extend_from_slice(src.wire());
        let m = Message::from_frame(frame, 4).expect("frame holds an envelope");
        assert_eq!(m.handler(), 3);
        assert_eq!(m.payload(), b"payload");
    }

    #[test]
    fn short_frame_is_an_error_not_a_panic() {
        assert!(Message::from_frame(vec![0; 10], 0).is_err());
        assert!(Message::from_frame(vec![0; 30], 10).is_err());
        assert!(Message::from_frame(vec![0; 3], usize::MAX).is_err());
    }

    #[test]
    fn too_little_headroom_is_grown_once() {
        let src = Message::from_payload(b"xyz");
        let m = Message::from_frame(src.wire().to_vec(), 0).expect("valid");
        let mut m2 = m.clone();
        let f = m2.frame_with_header(HEADROOM + 8);
        assert_eq!(f.len(), HEADROOM + 8 + ENVELOPE_LEN + 3);
        assert_eq!(m2.payload(), b"xyz");
    }
}
