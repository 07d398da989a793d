//! The receiving side: UCX's unexpected queue probed, each message received into a buffer
//! of its own that becomes the message, handed up in its source's order; strangers drained.

use super::*;

/// A started receive: its buffer (the headroom, with room behind it for the wire bytes) and,
/// while it runs, its request.
pub(super) struct Recv {
    pub(super) req: Option<Req>,
    pub(super) frame: Vec<u8>,
    /// Wire bytes UCX writes behind the headroom.
    len: usize,
}

impl Recv {
    /// The message, once UCX completed the receive successfully.
    pub(super) fn into_message(self, node: usize) -> Result<Message, MachineError> {
        let mut frame = self.frame;
        debug_assert!(frame.len() == HEADROOM && frame.capacity() >= HEADROOM + self.len);
        // SAFETY: the capacity holds HEADROOM + len bytes (reserved in `probe`); the first
        // HEADROOM are initialized (resized with zeros), and UCX wrote the `len` after them: a
        // receive completes successfully only when the whole message landed (a shorter buffer
        // would have failed it as truncated).
        unsafe { frame.set_len(HEADROOM + self.len) };
        Message::from_frame(frame, HEADROOM)
            .map_err(|source| MachineError::Corrupt { node, source })
    }
}

impl UcxMachine {
    /// Hand up, per source, the receives at the front of its queue that completed.
    pub(super) fn deliver_ready(
        &mut self,
        deliver: &mut dyn FnMut(Message),
    ) -> Result<usize, MachineError> {
        let mut n = 0;
        let mut i = 0;
        while i < self.receiving.len() {
            let node = self.receiving[i];
            let p = &mut self.peers[node];
            let mut failure = None;
            while let Some(r) = p.recvs.front() {
                if let Some(req) = r.req {
                    let s = req.status();
                    if s == sys::UCS_INPROGRESS {
                        break;
                    }
                    req.free();
                    self.recvs_out -= 1;
                    if s != sys::UCS_OK {
                        failure = Some(s);
                        // What follows from it cannot be handed up in order: dropped with it.
                        for r in p.recvs.drain(..).skip(1) {
                            if let Some(q) = r.req {
                                self.graveyard.push((q, Held::Frame(r.frame)));
                                self.recvs_out -= 1;
                            }
                        }
                        break;
                    }
                }
                let Some(r) = p.recvs.pop_front() else { break };
                deliver(r.into_message(node)?);
                n += 1;
            }
            if p.recvs.is_empty() {
                self.receiving.swap_remove(i);
            } else {
                i += 1;
            }
            if let Some(s) = failure {
                if local_failure(s) {
                    return Err(ucx_err("a UCX receive failed", s));
                }
                self.mark_dead(
                    node,
                    format!("a receive from it failed: {}", sys::status_text(s)),
                );
            }
        }
        Ok(n)
    }

    /// Receive a message nobody of this job sent (or one from a forgotten peer), and drop it.
    /// Into a few bytes whatever its claimed length (it comes from outside: no allocation of
    /// its size): UCX ends a longer one as truncated and discards the rest.
    pub(super) fn drain(&mut self, msg: sys::ucp_tag_message_h, len: usize) {
        self.stats.strangers += 1;
        let mut junk = zeroed(DRAIN_BYTES);
        // SAFETY: `junk` has DRAIN_BYTES bytes, at least the count passed; kept in the
        // graveyard while its request runs; the handle came from the probe, received once.
        let r = unsafe { self.msg_recv(junk.as_mut_ptr(), len.min(DRAIN_BYTES), msg) };
        if !r.is_null() && !sys::ptr_is_err(r) {
            self.graveyard.push((Req(r), Held::Frame(junk)));
        }
    }

    /// `ucp_tag_msg_recv_nbx` of a probed message into `buf`.
    ///
    /// # Safety
    /// `buf` has `len` writable bytes that stay put until the returned request completes (or
    /// the worker is destroyed); `msg` came from `ucp_tag_probe_nb` with remove set, unused.
    #[inline]
    unsafe fn msg_recv(
        &self,
        buf: *mut u8,
        len: usize,
        msg: sys::ucp_tag_message_h,
    ) -> sys::ucs_status_ptr_t {
        // SAFETY: all-zero is a valid ucp_request_param_t: no field named, contiguous bytes,
        // no callback (completion is polled with ucp_request_check_status).
        let param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's promises; the worker is live.
        unsafe { sys::ucp_tag_msg_recv_nbx(self.ucp.worker, buf.cast(), len, msg, &param) }
    }

    /// Take in what arrived: probe UCX's unexpected queue, start each message's receive into
    /// its own buffer, hand up those that completed and are first of their source.
    pub(super) fn probe(
        &mut self,
        deliver: &mut dyn FnMut(Message),
    ) -> Result<usize, MachineError> {
        let (mut n, mut taken, mut bytes) = (0, 0, 0);
        while taken < BATCH && bytes < BATCH_BYTES {
            // SAFETY: all-zero is a valid ucp_tag_recv_info_t (written by the probe).
            let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
            // SAFETY: the worker is live; tag mask 0 matches every message; remove=1: the
            // handle is ours to receive exactly once (below, or `drain`).
            let h = unsafe { sys::ucp_tag_probe_nb(self.ucp.worker, 0, 0, 1, &mut info) };
            if h.is_null() {
                break;
            }
            taken += 1;
            let (tag, len) = (info.sender_tag, info.length);
            let src = (tag & NODE_BITS) as usize;
            if tag & !NODE_BITS != self.stamp
                || src >= self.peers.len()
                || src == self.me
                || self.peers[src].gone
            {
                self.drain(h, len);
                continue;
            }
            if len < ENVELOPE_LEN {
                self.drain(h, len);
                return Err(MachineError::corrupt(
                    src,
                    format!("a message of {len} bytes, shorter than an envelope"),
                ));
            }
            bytes += len;
            // Not zeroed: UCX writes every byte. A large one into a kept buffer if one fits.
            let whole = HEADROOM + len;
            let mut frame = match self.pool.take(whole) {
                Some(b) => b,
                None => {
                    let mut b = Vec::new();
                    if b.try_reserve_exact(whole).is_err() {
                        self.drain(h, len);
                        return Err(MachineError::io(
                            format!("receiving a message of {len} bytes from node {src}"),
                            std::io::ErrorKind::OutOfMemory.into(),
                        ));
                    }
                    b
                }
            };
            frame.resize(HEADROOM, 0);
            // SAFETY: `frame` has capacity for HEADROOM + len bytes, so `len` from HEADROOM on;
            // it is moved into the peer's queue (its heap buffer does not move) until the
            // request completes, or kept in the graveyard; `h` is the probe's, received once.
            let r = unsafe { self.msg_recv(frame.as_mut_ptr().add(HEADROOM), len, h) };
            if sys::ptr_is_err(r) {
                let s = sys::ptr_status(r);
                if local_failure(s) {
                    return Err(ucx_err("starting a UCX receive", s));
                }
                self.mark_dead(
                    src,
                    format!("a receive from it failed: {}", sys::status_text(s)),
                );
                return self.report().map(|()| n);
            }
            self.stats.receives += 1;
            let p = &mut self.peers[src];
            let recv = Recv {
                req: (!r.is_null()).then_some(Req(r)),
                frame,
                len,
            };
            if recv.req.is_none() && p.recvs.is_empty() {
                // Complete (eager) and first of its source: straight up.
                deliver(recv.into_message(src)?);
                n += 1;
                continue;
            }
            if recv.req.is_some() {
                self.recvs_out += 1;
                self.stats.receives_held += 1;
            }
            if p.recvs.is_empty() {
                self.receiving.push(src);
            }
            p.recvs.push_back(recv);
        }
        Ok(n)
    }

    /// Whether something waits to be taken in: a message in UCX's unexpected queue.
    pub(super) fn arrived(&self) -> bool {
        // SAFETY: all-zero is a valid ucp_tag_recv_info_t.
        let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
        // SAFETY: the worker is live; remove=0 only looks.
        !unsafe { sys::ucp_tag_probe_nb(self.ucp.worker, 0, 0, 0, &mut info) }.is_null()
    }
}
