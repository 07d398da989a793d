//! The receiving side: the eager receives kept posted, frames taken in their pair's order,
//! large messages received into buffers of their own and delivered in their turn.

use super::*;

impl OfiMachine {
    /// Post eager receive `i` (again).
    pub(super) fn post_eager(&mut self, i: usize) -> Result<(), MachineError> {
        let r = &mut self.rx[i];
        // The frame lands with its header in the last bytes of the headroom, its wire bytes
        // where a message's are.
        // SAFETY: the buffer and context live in `self.rx[i]` until the receive completes
        // or the endpoint is closed (Drop order); `HEADER + eager` bytes from
        // `HEADROOM - HEADER` are in it.
        let rc = unsafe {
            sys::trecv(
                self.fi.ep(),
                r.buf.as_mut_ptr().add(HEADROOM - tag::HEADER).cast(),
                tag::HEADER + self.eager,
                sys::ADDR_UNSPEC,
                0,
                0,
                r.op.ctx(),
            )
        };
        match rc {
            0 => Ok(()),
            EAGAIN => {
                self.repost.push(i);
                Ok(())
            }
            rc => Err(io("posting a receive (fi_trecv)", rc)),
        }
    }

    /// Post large receive `i`.
    pub(super) fn post_large(&mut self, i: usize) -> Result<bool, MachineError> {
        let l = &mut self.large[i];
        let len = l.buf.len() - HEADROOM;
        // SAFETY: the buffer and context live in `self.large[i]` until the receive completes
        // (its slot is not reused before) or the endpoint is closed.
        let rc = unsafe {
            sys::trecv(
                self.fi.ep(),
                l.buf.as_mut_ptr().add(HEADROOM).cast(),
                len,
                sys::ADDR_UNSPEC,
                l.tag,
                0,
                l.op.ctx(),
            )
        };
        match rc {
            0 => {
                l.posted = true;
                Ok(true)
            }
            EAGAIN => Ok(false),
            rc => Err(io("posting a large message's receive (fi_trecv)", rc)),
        }
    }

    pub(super) fn node_of(&self, src: sys::fi_addr_t) -> Option<usize> {
        usize::try_from(src)
            .ok()
            .and_then(|a| self.by_addr.get(a).copied())
            .filter(|&n| n != usize::MAX)
    }

    pub(super) fn eager_in(
        &mut self,
        i: usize,
        e: &sys::fi_cq_tagged_entry,
        src: sys::fi_addr_t,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        let b = &self.rx[i].buf;
        let head = (e.len >= tag::HEADER)
            .then(|| {
                let mut h = [0u8; tag::HEADER];
                h.copy_from_slice(&b[HEADROOM - tag::HEADER..HEADROOM]);
                tag::Header::decode(h)
            })
            .flatten()
            .filter(|h| {
                self.peers
                    .get(h.src)
                    .is_some_and(|p| p.addr.is_some() && !p.gone)
            });
        let Some(t) = head.filter(|_| self.node_of(src).is_some()) else {
            // From outside the job (an address not in the vector, or a header no node of the
            // job writes), or from a peer out of it: dropped, counted.
            self.strangers += 1;
            tracing::debug!(target: "ofi", src, len = e.len, "message from outside the job dropped");
            return self.post_eager(i);
        };
        let (node, seq) = (t.src, t.seq);
        let len = (e.len - tag::HEADER).min(self.eager);
        let early = if !t.announce {
            {
                let m = if len > self.eager / 2 {
                    // Over half the buffer: hand the buffer itself over (no copy) and post a
                    // fresh one.
                    let mut buf = std::mem::replace(
                        &mut self.rx[i].buf,
                        converse_machine::zeroed(HEADROOM + self.eager),
                    );
                    buf.truncate(HEADROOM + len);
                    Message::from_frame(buf, HEADROOM)
                } else {
                    // The one copy of a small message, into a buffer of its size: a message
                    // may wait long in a queue, and an eager buffer is `ofi.eager_kib`.
                    Message::from_wire(&self.rx[i].buf[HEADROOM..HEADROOM + len])
                };
                self.post_eager(i)?;
                let m = m.map_err(|source| MachineError::Corrupt { node, source })?;
                Early::Message(m)
            }
        } else {
            let word = self.rx[i].buf[HEADROOM..HEADROOM + 8].try_into().ok();
            self.post_eager(i)?;
            let size = match word {
                Some(w) if len == 8 => usize::try_from(u64::from_le_bytes(w)).unwrap_or(usize::MAX),
                _ => {
                    return Err(MachineError::corrupt(
                        node,
                        format!("an announce of {len} bytes (8 expected)"),
                    ))
                }
            };
            {
                if size <= self.eager || size < ENVELOPE_LEN {
                    return Err(MachineError::corrupt(
                        node,
                        format!(
                            "an announce of a {size}-byte message, which would have gone eagerly \
                             (limit {} B)",
                            self.eager
                        ),
                    ));
                }
                Early::Announce(size)
            }
        };
        self.arrive(node, seq, early, deliver, delivered)
    }

    /// Eager message or announce number `seq` from `node`: taken now if it is the one due
    /// (with those after it that came early), else kept until it is.
    pub(super) fn arrive(
        &mut self,
        node: usize,
        seq: u32,
        a: Early,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        let p = &mut self.peers[node];
        let ahead = seq.wrapping_sub(p.seq_in) & tag::SEQ_MASK;
        if ahead == 0 && p.early.is_empty() {
            // The common case: in order, nothing early.
            p.seq_in = p.seq_in.wrapping_add(1) & tag::SEQ_MASK;
            return self.take(node, a, deliver, delivered);
        }
        if ahead >= tag::REORDER_WINDOW {
            return Err(MachineError::corrupt(
                node,
                format!("message number {seq} where {} was due", p.seq_in),
            ));
        }
        tracing::trace!(target: "ofi", node, seq, due = p.seq_in, "arrived early");
        let ahead = ahead as usize;
        if p.early.len() <= ahead {
            p.early.resize_with(ahead + 1, || None);
        }
        if p.early[ahead].is_some() {
            return Err(MachineError::corrupt(
                node,
                format!("message number {seq} twice"),
            ));
        }
        p.early[ahead] = Some(a);
        while matches!(self.peers[node].early.front(), Some(Some(_))) {
            let p = &mut self.peers[node];
            let Some(Some(a)) = p.early.pop_front() else {
                break;
            };
            p.seq_in = p.seq_in.wrapping_add(1) & tag::SEQ_MASK;
            self.take(node, a, deliver, delivered)?;
        }
        Ok(())
    }

    /// An eager message or announce in its turn.
    pub(super) fn take(
        &mut self,
        node: usize,
        a: Early,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        match a {
            Early::Message(m) => {
                if self.peers[node].held.is_empty() {
                    deliver(m);
                    *delivered += 1;
                } else {
                    self.peers[node].held.push_back(Held::Ready(m));
                }
                Ok(())
            }
            Early::Announce(size) => self.announced(node, size),
        }
    }

    /// A large message of `size` wire bytes from `node` is coming: post its receive.
    pub(super) fn announced(&mut self, node: usize, size: usize) -> Result<(), MachineError> {
        let seq = self.peers[node].large_in;
        self.peers[node].large_in = seq.wrapping_add(1);
        let t = tag::data(node, seq);
        let buf = converse_machine::zeroed(HEADROOM + size);
        let i = match self.free_large.pop() {
            Some(i) => {
                let l = &mut self.large[i];
                l.node = node;
                l.tag = t;
                l.buf = buf;
                l.posted = false;
                l.done = false;
                l.abandoned = false;
                i
            }
            None => {
                let i = self.large.len();
                self.large.push(LargeOp {
                    op: Op::boxed(Kind::Large, i),
                    node,
                    tag: t,
                    buf,
                    posted: false,
                    done: false,
                    abandoned: false,
                });
                i
            }
        };
        self.large_recvs += 1;
        self.peers[node].held.push_back(Held::Large(i));
        if !self.unposted.is_empty() || !self.post_large(i)? {
            self.unposted.push(i);
        }
        Ok(())
    }

    /// The large messages still coming from `node`, which is out of the job: those not
    /// posted yet are dropped; those posted are cancelled (`fi_cancel`) and stop counting at
    /// once, so `in_transfer` does not stay true for a message that will never end (a dead
    /// sender's, on shm). Each slot is freed when its completion, cancelled or not, comes.
    pub(super) fn abandon_large(&mut self, node: usize) {
        let unposted = std::mem::take(&mut self.unposted);
        for i in unposted {
            if self.large[i].node == node {
                self.large[i].done = true;
                self.large_recvs -= 1;
                self.abandoned += 1;
                self.release_large(i);
            } else {
                self.unposted.push(i);
            }
        }
        for i in 0..self.large.len() {
            let l = &mut self.large[i];
            if l.node != node || !l.posted || l.done || l.abandoned {
                continue;
            }
            l.abandoned = true;
            self.large_recvs -= 1;
            self.abandoned += 1;
            // SAFETY: the open endpoint; the context is the posted receive's, which stays in
            // `self.large[i]` (with its buffer) until its completion or the endpoint's close.
            let rc = unsafe { sys::cancel(self.fi.ep(), l.op.ctx()) };
            // Not found (already matched, or done): its completion comes anyway.
            tracing::debug!(target: "ofi", peer = node, slot = i, rc, "large receive cancelled");
        }
    }

    pub(super) fn release_large(&mut self, i: usize) {
        self.large[i].buf = Vec::new();
        self.free_large.push(i);
    }

    /// Deliver what is ready at the front of `node`'s held arrivals, in order.
    pub(super) fn drain(
        &mut self,
        node: usize,
        deliver: &mut dyn FnMut(Message),
        delivered: &mut usize,
    ) -> Result<(), MachineError> {
        loop {
            let m = match self.peers[node].held.front() {
                Some(Held::Ready(_)) => match self.peers[node].held.pop_front() {
                    Some(Held::Ready(m)) => m,
                    _ => unreachable!("front was Ready"),
                },
                Some(&Held::Large(i)) if self.large[i].done => {
                    self.peers[node].held.pop_front();
                    let buf = std::mem::take(&mut self.large[i].buf);
                    self.free_large.push(i);
                    Message::from_frame(buf, HEADROOM)
                        .map_err(|source| MachineError::Corrupt { node, source })?
                }
                _ => return Ok(()),
            };
            deliver(m);
            *delivered += 1;
        }
    }
}
