//! The sending side: a message given to the provider as an eager frame (injected, or sent
//! from its own buffer and kept until the completion), or announced and sent as a large
//! message's data; what the provider cannot take yet waits per peer, in order.

use super::*;

impl OfiMachine {
    pub(super) fn send_slot(&mut self, node: usize) -> usize {
        match self.free_sends.pop() {
            Some(i) => {
                self.sends[i].node = node;
                i
            }
            None => {
                let i = self.sends.len();
                self.sends.push(SendOp {
                    op: Op::boxed(Kind::Send, i),
                    node,
                    msg: None,
                    bytes: 0,
                    large: false,
                });
                i
            }
        }
    }

    /// Hand a tagged send of `len` bytes at `buf` to the provider, with a slot whose context
    /// it gets back on completion. `Ok(None)`: not now (`-FI_EAGAIN`).
    pub(super) fn post_send(
        &mut self,
        node: usize,
        addr: sys::fi_addr_t,
        buf: *const u8,
        len: usize,
        tag: u64,
    ) -> Result<Option<usize>, MachineError> {
        let i = self.send_slot(node);
        // SAFETY: `buf` is the wire bytes of a message the caller stores in slot `i` on
        // success, so they live until the completion; the slot's context likewise.
        let rc = unsafe {
            sys::tsend(
                self.fi.ep(),
                buf.cast(),
                len,
                addr,
                tag,
                self.sends[i].op.ctx(),
            )
        };
        match rc {
            0 => Ok(Some(i)),
            EAGAIN => {
                self.free_sends.push(i);
                Ok(None)
            }
            rc => Err(self.send_error(node, rc)),
        }
    }

    pub(super) fn send_error(&self, node: usize, rc: isize) -> MachineError {
        MachineError::peer_dead(
            &self.table,
            node,
            format!("sending failed: {}", crate::fabric::errstr(rc)),
        )
    }

    /// Try to give `w` to the provider; `Ok(Some(w))` hands it back (not now).
    pub(super) fn try_send(
        &mut self,
        node: usize,
        mut w: Waiting,
    ) -> Result<Option<Waiting>, MachineError> {
        let Some(addr) = self.peers[node].addr else {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        };
        let len = w.msg.wire_len();
        let me = self.me;
        if len <= self.eager {
            let seq = self.peers[node].seq_out;
            let head = tag::Header {
                announce: false,
                src: me,
                seq,
            };
            // The header goes into the message's headroom: the frame is sent from its buffer.
            let frame = w.msg.frame_with_header(tag::HEADER);
            frame[..tag::HEADER].copy_from_slice(&head.encode());
            let (buf, flen) = (frame.as_ptr(), frame.len());
            let sent = if flen <= self.fi.inject_size() {
                // SAFETY: the frame lives across the call; inject copies it.
                match unsafe { sys::tinject(self.fi.ep(), buf.cast(), flen, addr, 0) } {
                    0 => true,
                    EAGAIN => false,
                    rc => return Err(self.send_error(node, rc)),
                }
            } else {
                match self.post_send(node, addr, buf, flen, 0)? {
                    Some(i) => {
                        let s = &mut self.sends[i];
                        s.msg = Some(w.msg);
                        s.bytes = len;
                        s.large = false;
                        self.peers[node].queued += len;
                        self.peers[node].seq_out = seq.wrapping_add(1) & tag::SEQ_MASK;
                        return Ok(None);
                    }
                    None => false,
                }
            };
            if !sent {
                return Ok(Some(w));
            }
            self.peers[node].seq_out = seq.wrapping_add(1) & tag::SEQ_MASK;
            return Ok(None);
        }
        let buf = w.msg.wire().as_ptr();
        if !w.announced {
            let seq = self.peers[node].seq_out;
            let head = tag::Header {
                announce: true,
                src: me,
                seq,
            };
            let mut word = [0u8; ANNOUNCE_LEN];
            word[..tag::HEADER].copy_from_slice(&head.encode());
            word[tag::HEADER..].copy_from_slice(&(len as u64).to_le_bytes());
            let rc = if self.fi.inject_size() >= ANNOUNCE_LEN {
                // SAFETY: the announce on the stack, which inject copies during the call.
                unsafe { sys::tinject(self.fi.ep(), word.as_ptr().cast(), ANNOUNCE_LEN, addr, 0) }
            } else {
                let i = self.send_slot(node);
                let s = &mut self.sends[i];
                s.op.word = word;
                s.msg = None;
                s.bytes = 0;
                s.large = false;
                let ptr = s.op.word.as_ptr();
                let ctx = s.op.ctx();
                // SAFETY: the announce lives in the slot's boxed context until the completion.
                match unsafe { sys::tsend(self.fi.ep(), ptr.cast(), ANNOUNCE_LEN, addr, 0, ctx) } {
                    0 => 0,
                    rc => {
                        self.free_sends.push(i);
                        rc
                    }
                }
            };
            match rc {
                0 => {
                    w.announced = true;
                    self.peers[node].seq_out = seq.wrapping_add(1) & tag::SEQ_MASK;
                }
                EAGAIN => return Ok(Some(w)),
                rc => return Err(self.send_error(node, rc)),
            }
        }
        let seq = self.peers[node].large_out;
        match self.post_send(node, addr, buf, len, tag::data(self.me, seq))? {
            Some(i) => {
                let s = &mut self.sends[i];
                s.msg = Some(w.msg);
                s.bytes = len;
                s.large = true;
                let p = &mut self.peers[node];
                p.large_out = seq.wrapping_add(1);
                p.queued += len;
                self.large_sends += 1;
                Ok(None)
            }
            None => Ok(Some(w)),
        }
    }

    /// Push what waits: sends per peer in order, receives the provider had no room for.
    pub(super) fn flush_backlog(&mut self) -> Result<(), MachineError> {
        while let Some(i) = self.repost.pop() {
            self.post_eager(i)?;
            if self.repost.last() == Some(&i) {
                break;
            }
        }
        let k = 0;
        while k < self.unposted.len() {
            let i = self.unposted[k];
            if self.post_large(i)? {
                self.unposted.remove(k);
            } else {
                break;
            }
        }
        let mut b = 0;
        while b < self.backlog.len() {
            let node = self.backlog[b];
            while let Some(w) = self.peers[node].waiting.pop_front() {
                let len = w.msg.wire_len();
                self.peers[node].queued -= len;
                if let Some(w) = self.try_send(node, w)? {
                    self.peers[node].queued += len;
                    self.peers[node].waiting.push_front(w);
                    break;
                }
            }
            if self.peers[node].waiting.is_empty() {
                self.backlog.swap_remove(b);
            } else {
                b += 1;
            }
        }
        Ok(())
    }
}
