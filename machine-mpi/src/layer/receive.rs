//! The MPI layer's receive side: what `advance`, `wait`, `barrier` and `exit` take off MPI,
//! in the order that keeps FIFO per pair (see `order.rs`) — released messages, awaited large
//! messages (by matched probe), then the ring of pre-posted receives — with the credit and
//! notice bookkeeping that goes with each.

use super::{MpiMachine, TAG_CREDIT, TAG_HUGE, TAG_MSG, TAG_NOTICE, TAG_PIECE};
use crate::mpi_call;
use crate::sends::LARGE;
use converse_machine::{MachineError, Message, HEADROOM};
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// A message arriving in pieces.
pub(super) struct Incoming {
    buf: Vec<u8>,
    /// Wire bytes still to come.
    missing: usize,
}

/// What [`MpiMachine::receive`] took off MPI's queue.
pub(super) enum Received {
    /// Nothing had arrived.
    Nothing,
    /// A whole message, to hand up.
    Message(Message),
    /// Credit, or a piece of a message not complete yet.
    Other,
}

impl MpiMachine {
    /// Take one message, credit or piece if one has arrived, in the order that keeps FIFO per
    /// pair (see `order.rs`): released messages first, then awaited large ones, then the
    /// ring's head.
    pub(super) fn receive(&mut self) -> Result<Received, MachineError> {
        if let Some(m) = self.order.next_ready() {
            return Ok(Received::Message(m));
        }
        // Usually empty: probed only for sources whose notice came.
        for i in 0..self.order.awaiting().len() {
            let src = self.order.awaiting()[i];
            match self.receive_large(src)? {
                Received::Nothing => {}
                Received::Other => return Ok(Received::Other),
                Received::Message(m) => {
                    for _ in 0..self.order.large_done(src) {
                        self.count_received(src)?;
                    }
                    return Ok(Received::Message(m));
                }
            }
        }
        let Some(a) = self.ring.head()? else {
            return Ok(Received::Nothing);
        };
        let src = a.src;
        match a.tag {
            TAG_MSG => {
                let m = self.ring.message(a)?;
                match self.order.small(src, m) {
                    Some(m) => {
                        self.count_received(src)?;
                        Ok(Received::Message(m))
                    }
                    // Counted when released.
                    None => Ok(Received::Other),
                }
            }
            TAG_NOTICE => {
                self.ring.skip();
                if a.count != 0 {
                    return Err(MachineError::corrupt(
                        src,
                        format!("a notice of {} bytes, not 0", a.count),
                    ));
                }
                self.count_received(src)?;
                self.order.notice(src);
                Ok(Received::Other)
            }
            TAG_CREDIT => {
                let total = self.ring.word(a, "a credit")?;
                if total > self.sent[src] {
                    return Err(MachineError::corrupt(
                        src,
                        "credit for more messages than were sent",
                    ));
                }
                self.credit[src] = self.credit[src].max(total);
                self.pump(src)?;
                Ok(Received::Other)
            }
            t => {
                self.ring.skip();
                Err(MachineError::corrupt(src, format!("unknown tag {t}")))
            }
        }
    }

    /// Take the next message of `src` on the large communicator if it has arrived: a whole
    /// message, or a huge one's header or piece.
    fn receive_large(&mut self, src: usize) -> Result<Received, MachineError> {
        let mut flag: c_int = 0;
        // SAFETY: MPI_Status is plain old data; MPI fills it.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: predefined handle.
        let mut handle = unsafe { ffi::RSMPI_MESSAGE_NULL };
        // SAFETY: out-pointers to locals; the matched probe takes the message off MPI's queue
        // so that only the Mrecv below can receive it.
        mpi_call("MPI_Improbe", unsafe {
            ffi::MPI_Improbe(
                src as c_int,
                ffi::RSMPI_ANY_TAG,
                self.large,
                &mut flag,
                &mut handle,
                &mut status,
            )
        })?;
        if flag == 0 {
            return Ok(Received::Nothing);
        }
        let tag = status.MPI_TAG;
        let mut count: c_int = 0;
        // SAFETY: `status` was filled by the probe.
        mpi_call("MPI_Get_count", unsafe {
            ffi::MPI_Get_count(&status, self.byte, &mut count)
        })?;
        let count =
            usize::try_from(count).map_err(|_| MachineError::corrupt(src, "negative count"))?;
        self.count_received(src)?;
        match tag {
            TAG_MSG => {
                // Into the buffer of a large message sent (pages mapped, where a fresh
                // megabyte faults in every page while MPI copies into it).
                let kept = if count >= LARGE {
                    self.sends.take_buffer(HEADROOM + count)
                } else {
                    None
                };
                let mut buf = kept.unwrap_or_else(|| Vec::with_capacity(HEADROOM + count));
                buf.resize(HEADROOM, 0);
                self.mrecv(&mut handle, &mut buf, count)?;
                Message::from_frame(buf, HEADROOM)
                    .map(Received::Message)
                    .map_err(|source| MachineError::Corrupt { node: src, source })
            }
            TAG_HUGE => {
                let total = self.mrecv_word(&mut handle, count, src, "a huge-message header")?;
                let total = usize::try_from(total)
                    .map_err(|_| MachineError::corrupt(src, "huge message larger than memory"))?;
                if self.incoming.get(src).is_some_and(Option::is_some) {
                    return Err(MachineError::corrupt(
                        src,
                        "a huge message started inside another",
                    ));
                }
                let mut buf = Vec::new();
                buf.try_reserve_exact(HEADROOM + total).map_err(|_| {
                    MachineError::corrupt(src, format!("cannot allocate a {total}-byte message"))
                })?;
                buf.resize(HEADROOM, 0);
                self.incoming[src] = Some(Incoming {
                    buf,
                    missing: total,
                });
                Ok(Received::Other)
            }
            TAG_PIECE => {
                let mut inc = self.incoming[src].take().ok_or_else(|| {
                    MachineError::corrupt(src, "a piece with no huge message started")
                })?;
                if count > inc.missing {
                    return Err(MachineError::corrupt(
                        src,
                        "a piece longer than its message",
                    ));
                }
                self.mrecv(&mut handle, &mut inc.buf, count)?;
                inc.missing -= count;
                if inc.missing > 0 {
                    self.incoming[src] = Some(inc);
                    return Ok(Received::Other);
                }
                Message::from_frame(inc.buf, HEADROOM)
                    .map(Received::Message)
                    .map_err(|source| MachineError::Corrupt { node: src, source })
            }
            t => Err(MachineError::corrupt(src, format!("unknown tag {t}"))),
        }
    }

    /// `MPI_Mrecv` of `count` bytes appended to `buf` (whose capacity must allow it).
    fn mrecv(
        &self,
        handle: &mut ffi::MPI_Message,
        buf: &mut Vec<u8>,
        count: usize,
    ) -> Result<(), MachineError> {
        debug_assert!(buf.capacity() - buf.len() >= count);
        let start = buf.len();
        // SAFETY: `buf` has room for `count` more bytes; MPI writes exactly the matched
        // message's `count` bytes there, after which they are initialized.
        unsafe {
            mpi_call(
                "MPI_Mrecv",
                ffi::MPI_Mrecv(
                    buf.as_mut_ptr().add(start) as *mut c_void,
                    count as c_int,
                    self.byte,
                    handle,
                    ffi::RSMPI_STATUS_IGNORE,
                ),
            )?;
            buf.set_len(start + count);
        }
        Ok(())
    }

    /// `MPI_Mrecv` of a message that must be one little-endian `u64` (`what`, for the error
    /// if it is not): checked before receiving, since a longer one would be truncated, which
    /// MPI's default error handler makes fatal before the layer could say why.
    fn mrecv_word(
        &self,
        handle: &mut ffi::MPI_Message,
        count: usize,
        src: usize,
        what: &str,
    ) -> Result<u64, MachineError> {
        if count != 8 {
            return Err(MachineError::corrupt(
                src,
                format!("{what} of {count} bytes, not 8"),
            ));
        }
        let mut word = [0u8; 8];
        // SAFETY: `word` has room for the 8 bytes the matched message holds.
        mpi_call("MPI_Mrecv", unsafe {
            ffi::MPI_Mrecv(
                word.as_mut_ptr() as *mut c_void,
                8,
                self.byte,
                handle,
                ffi::RSMPI_STATUS_IGNORE,
            )
        })?;
        Ok(u64::from_le_bytes(word))
    }

    /// Whether something is there to take: a released message, an arrival at the ring's
    /// head, or an awaited large message.
    pub(super) fn probe(&mut self) -> Result<bool, MachineError> {
        if self.order.has_ready() {
            return Ok(true);
        }
        if self.ring.head()?.is_some() {
            return Ok(true);
        }
        for &src in self.order.awaiting() {
            let mut flag: c_int = 0;
            // SAFETY: out-pointer to a local; status ignored.
            mpi_call("MPI_Iprobe", unsafe {
                ffi::MPI_Iprobe(
                    src as c_int,
                    ffi::RSMPI_ANY_TAG,
                    self.large,
                    &mut flag,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            })?;
            if flag != 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
