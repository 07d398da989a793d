//! Large buffers kept for reuse. A fresh buffer of a megabyte is fresh memory: the kernel
//! faults its pages in one by one while the first bytes are received into it (some 250
//! faults per MiB, which cost more than receiving the message), and memory the allocator
//! hands back zeroed costs a `memset` of the whole message. When a layer is done with a large
//! message it sent (UDP: every packet acknowledged; TCP: every byte written to the socket),
//! its buffer comes here, and the next large message received goes into it, its pages
//! already mapped and nothing zeroed. A program that forwards what it receives (a ping-pong,
//! a pipeline) then receives into warm memory every time. Used by the TCP and UDP layers.

use crate::Message;

/// Buffers smaller than this are left to the allocator (it keeps them warm itself).
const MIN_BUFFER: usize = 64 << 10;
/// Buffers kept at most.
const MAX_BUFFERS: usize = 8;
/// Bytes kept at most.
const MAX_BYTES: usize = 64 << 20;

/// Large buffers of messages a layer has sent, kept to receive large messages into.
#[derive(Debug, Default)]
pub struct BufferPool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

impl BufferPool {
    /// Keep `msg`'s buffer if it is large and there is room; drop it otherwise.
    pub fn put(&mut self, msg: Message) {
        let (mut buf, _) = msg.into_frame();
        let cap = buf.capacity();
        if cap < MIN_BUFFER || self.bufs.len() >= MAX_BUFFERS || self.bytes + cap > MAX_BYTES {
            return;
        }
        buf.clear();
        self.bytes += cap;
        self.bufs.push(buf);
    }

    /// An empty buffer with room for `len` bytes (and not more than twice that, so a small
    /// message does not pin a huge buffer), if one is kept.
    pub fn take(&mut self, len: usize) -> Option<Vec<u8>> {
        let i = self
            .bufs
            .iter()
            .position(|b| b.capacity() >= len && b.capacity() / 2 <= len)?;
        let buf = self.bufs.swap_remove(i);
        self.bytes -= buf.capacity();
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_come_back_for_a_size_that_fits() {
        let mut p = BufferPool::default();
        p.put(Message::new(1 << 20));
        p.put(Message::new(100));
        assert!(p.take(3 << 20).is_none(), "too small for it");
        assert!(p.take(100).is_none(), "too large to pin for it");
        let b = p.take(1 << 20).expect("the megabyte");
        assert!(b.is_empty() && b.capacity() >= 1 << 20);
        assert!(p.take(1 << 20).is_none(), "taken once");
    }

    #[test]
    fn the_pool_is_bounded() {
        let mut p = BufferPool::default();
        for _ in 0..20 {
            p.put(Message::new(1 << 20));
        }
        let mut n = 0;
        while p.take(1 << 20).is_some() {
            n += 1;
        }
        assert_eq!(n, MAX_BUFFERS);
    }
}
