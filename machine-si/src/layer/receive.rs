//! The SI layer's receive side, the slides' `CommunicationServer`: read each sender's ring
//! record by record, whole messages into buffers of their own (a spare one when it fits),
//! pieces onto the message they belong to, lent messages copied out of the sender's memory.

use super::record::{parse_header, Kind, HEADER, LENT_RECORD, MAX_MESSAGE};
use super::{SiMachine, COOP_FROM};
use crate::pull::PullError;
use converse_machine::{MachineError, Message, HEADROOM};

/// A message being read in pieces: `buf` holds the headroom and the bytes read so far, and
/// has room for the rest.
pub(super) struct Incoming {
    buf: Vec<u8>,
    /// Wire bytes still to come.
    left: usize,
}

impl SiMachine {
    /// Check a header read from `s`'s ring: the kind its record's length implies, the sender
    /// it came through. Its size.
    fn check_header(&self, s: usize, h: &[u8], kind: Kind) -> Result<u64, MachineError> {
        let (size, src, k) = parse_header(h);
        if k != kind as u32 || src as usize != s || size > MAX_MESSAGE {
            return Err(MachineError::corrupt(
                s,
                format!("header (kind {k}, source {src}, {size} bytes) in a {kind:?} record"),
            ));
        }
        Ok(size)
    }

    /// An empty buffer for a message of `size` wire bytes from `s`: the headroom, and room
    /// for the rest, not zeroed (it is about to be overwritten).
    fn buffer(&self, s: usize, size: usize) -> Result<Vec<u8>, MachineError> {
        let mut buf = Vec::new();
        // The size comes from another process: a failed allocation is an error, not an abort.
        buf.try_reserve_exact(HEADROOM + size).map_err(|_| {
            MachineError::io(
                format!("allocating {size} bytes for a message from node {s}"),
                std::io::ErrorKind::OutOfMemory.into(),
            )
        })?;
        buf.resize(HEADROOM, 0);
        Ok(buf)
    }

    /// Read `s`'s next record (`len` bytes, `buf` has room for them) onto the end of `buf`.
    fn read_into(&self, s: usize, buf: &mut Vec<u8>, len: usize) -> Result<(), MachineError> {
        let at = buf.len();
        if !self.si.read_uninit(s, &mut buf.spare_capacity_mut()[..len]) {
            return Err(MachineError::InvalidNode {
                node: s,
                nodes: self.table.num_nodes(),
            });
        }
        // SAFETY: read_uninit initialised the `len` bytes after `at`.
        unsafe { buf.set_len(at + len) };
        Ok(())
    }

    /// A lent message of `size` wire bytes at `addr` in `s`'s memory, copied into a buffer of
    /// its own.
    fn pull_message(&self, s: usize, addr: u64, size: u64) -> Result<Message, MachineError> {
        let size = size as usize;
        let need = HEADROOM + size;
        let mut buf = self.buffer(s, size)?;
        let into = &mut buf.spare_capacity_mut()[..size];
        // A sender that may write into our memory takes chunks of a large copy too.
        let copied = if size >= COOP_FROM && self.coop && self.si.helper(s) {
            self.si.pull_together(s, addr, into)
        } else {
            self.si.pull(s, addr, into)
        };
        copied.map_err(|e| match e {
            PullError::Gone => MachineError::peer_dead(
                &self.table,
                s,
                "its process is gone (while copying a message it lent)",
            ),
            PullError::Fault(e) => {
                MachineError::corrupt(s, format!("it lent {size} bytes we cannot read: {e}"))
            }
            e => MachineError::io(
                format!("copying a message node {s} lent"),
                std::io::Error::other(e),
            ),
        })?;
        // SAFETY: `pull` initialised the `size` bytes after the headroom.
        unsafe { buf.set_len(need) };
        Message::from_frame(buf, HEADROOM).map_err(|e| MachineError::Corrupt { node: s, source: e })
    }

    /// `CommunicationServer` for one sender: hand up what its ring holds, at most `budget`.
    pub(super) fn receive_from(
        &mut self,
        s: usize,
        deliver: &mut dyn FnMut(Message),
        budget: usize,
    ) -> Result<usize, MachineError> {
        let mut n = 0;
        while n < budget {
            let Some(len) = self.si.peek(s) else { break };
            match self.incoming[s].take() {
                // A record's length says which kind it is; the header must agree.
                None if len == LENT_RECORD => {
                    let mut rec = [0u8; LENT_RECORD];
                    self.si.read(s, &mut rec);
                    let size = self.check_header(s, &rec[..HEADER], Kind::Lent)?;
                    let addr = u64::from_le_bytes(rec[HEADER..].try_into().unwrap_or([0; 8]));
                    let msg = self.pull_message(s, addr, size)?;
                    self.si.mark_pulled(s);
                    deliver(msg);
                    n += 1;
                }
                None if len > HEADER => {
                    // Header and whole message in one record: read it so that the header
                    // lands in the headroom and the message's wire bytes right after.
                    // `len` is at most a record, never more than the ring: a size we chose.
                    let mut buf = self.spare(HEADROOM - HEADER + len);
                    buf.resize(HEADROOM - HEADER, 0);
                    self.read_into(s, &mut buf, len)?;
                    let size =
                        self.check_header(s, &buf[HEADROOM - HEADER..HEADROOM], Kind::Whole)?;
                    if size as usize != len - HEADER {
                        return Err(MachineError::corrupt(
                            s,
                            format!("header says {size} bytes, record holds {}", len - HEADER),
                        ));
                    }
                    deliver(
                        Message::from_frame(buf, HEADROOM)
                            .map_err(|e| MachineError::Corrupt { node: s, source: e })?,
                    );
                    n += 1;
                }
                None if len == HEADER => {
                    let mut h = [0u8; HEADER];
                    self.si.read(s, &mut h);
                    let size = self.check_header(s, &h, Kind::Pieces)?;
                    if (size as usize) <= self.chunk {
                        return Err(MachineError::corrupt(
                            s,
                            format!("a message of {size} bytes announced in pieces"),
                        ));
                    }
                    self.incoming[s] = Some(Incoming {
                        buf: self.buffer(s, size as usize)?,
                        left: size as usize,
                    });
                }
                None => {
                    return Err(MachineError::corrupt(
                        s,
                        format!("record of {len} bytes where a header was expected"),
                    ));
                }
                Some(mut inc) => {
                    if len > inc.left {
                        let left = inc.left;
                        return Err(MachineError::corrupt(
                            s,
                            format!("a piece of {len} bytes where {left} were left"),
                        ));
                    }
                    self.read_into(s, &mut inc.buf, len)?;
                    inc.left -= len;
                    if inc.left == 0 {
                        deliver(
                            Message::from_frame(inc.buf, HEADROOM)
                                .map_err(|e| MachineError::Corrupt { node: s, source: e })?,
                        );
                        n += 1;
                    } else {
                        self.incoming[s] = Some(inc);
                    }
                }
            }
        }
        Ok(n)
    }
}
