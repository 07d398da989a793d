//! Pre-posted receives for small messages: a ring of persistent receives (`MPI_Recv_init(ANY_SOURCE,
//! ANY_TAG)`), tested in the order they were started and restarted after they are taken (at
//! the next look at the ring).
//! Persistent: restarting a request costs less than posting a new one (no request to allocate
//! and free per message).
//!
//! A message that finds a posted receive is copied once, by MPI, into that receive's buffer;
//! one that finds none waits in MPI's unexpected queue and costs a second copy (and, received
//! by probe, a probe and a size query). With receives always posted, a small message is
//! matched as it lands.
//!
//! **Order.** MPI matches a message with the first posted receive that fits, so the ring's
//! receives fill in post order, in the order messages are matched, and messages from one source
//! are matched in the order it sent them. The ring is taken from its head only: the head is the
//! oldest match, and a later receive that completes first (it cannot, for messages under the
//! eager limit, but MPI does not promise it) waits behind it. Re-posting a taken receive puts
//! it at the tail, so the ring stays in post order.

use crate::mpi_call;
use converse_machine::{MachineError, Message, HEADROOM};
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// Received messages up to this many wire bytes are copied out of the ring's buffer into a
/// buffer of their own size; larger ones take the ring's buffer (shrunk to their size), and the
/// receive gets a new one. A copy of a few KiB costs less than allocating a ring-sized buffer,
/// shrinking it and re-binding the persistent receive to it (measured, layer alone, one-way
/// p50, two interleaved pairs: 512 B 0.49 and 0.41 µs copied against 0.52 and 0.50 taken;
/// 2 KiB 0.71 and 0.57 against 0.69 and 0.67, no clear difference).
const COPY_MAX: usize = 4096;

/// What the head of the ring received.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    pub(crate) src: usize,
    pub(crate) tag: c_int,
    /// Bytes received.
    pub(crate) count: usize,
}

/// The ring of pre-posted receives of one node.
pub(crate) struct Prepost {
    requests: Vec<ffi::MPI_Request>,
    /// `bufs[i]` is what `requests[i]` receives into, at offset [`HEADROOM`]: a buffer handed
    /// up whole is a message frame already.
    bufs: Vec<Vec<u8>>,
    /// The oldest posted receive.
    head: usize,
    /// What the head received, once `MPI_Test` said it completed (the request is then
    /// inactive, and is restarted after the arrival is taken).
    arrived: Option<Arrival>,
    /// A receive taken and not restarted yet: it is restarted at the next look at the ring,
    /// not as it is taken, so `MPI_Start` (about a fifth of a small message's receive path)
    /// is off the path from an arrival to its handler and the handler's reply. Until then the
    /// ring has one receive fewer posted; it stays in post order, since the receive is
    /// restarted before any other is taken.
    unposted: Option<usize>,
    /// Largest message a receive takes.
    max: usize,
    comm: ffi::MPI_Comm,
    byte: ffi::MPI_Datatype,
}

impl Prepost {
    /// Post `count` receives of up to `max` bytes each on `comm`.
    ///
    /// # Errors
    /// [`MachineError::Io`] if `MPI_Recv_init` or `MPI_Start` fails.
    pub(crate) fn start(
        count: usize,
        max: usize,
        comm: ffi::MPI_Comm,
        byte: ffi::MPI_Datatype,
    ) -> Result<Prepost, MachineError> {
        let mut ring = Prepost {
            // SAFETY: MPI_REQUEST_NULL is a predefined handle.
            requests: vec![unsafe { ffi::RSMPI_REQUEST_NULL }; count],
            bufs: (0..count).map(|_| ring_buffer(max)).collect(),
            head: 0,
            arrived: None,
            unposted: None,
            max,
            comm,
            byte,
        };
        for i in 0..count {
            ring.init(i)?;
            ring.post(i)?;
        }
        Ok(ring)
    }

    /// `MPI_Recv_init` into buffer `i` (the request is bound to that buffer's address).
    fn init(&mut self, i: usize) -> Result<(), MachineError> {
        let buf = &mut self.bufs[i];
        debug_assert!(buf.capacity() >= HEADROOM + self.max);
        // SAFETY: the buffer has room for `HEADROOM + max` bytes and stays in `self.bufs`, not
        // moved or freed, while the request exists (it is replaced only in `message`, after the
        // request completed and was freed, and `cancel` frees every request first).
        mpi_call("MPI_Recv_init", unsafe {
            ffi::MPI_Recv_init(
                buf.as_mut_ptr().add(HEADROOM) as *mut c_void,
                self.max as c_int,
                self.byte,
                ffi::RSMPI_ANY_SOURCE,
                ffi::RSMPI_ANY_TAG,
                self.comm,
                &mut self.requests[i],
            )
        })
    }

    /// Start receive `i` (inactive: made by `init` or completed).
    fn post(&mut self, i: usize) -> Result<(), MachineError> {
        // SAFETY: an inactive persistent request of this ring.
        mpi_call("MPI_Start", unsafe {
            ffi::MPI_Start(&mut self.requests[i])
        })
    }

    /// What the oldest receive got, if it has completed. Asking drives MPI's progress engine.
    /// The arrival stays at the head until taken with [`message`](Self::message) or
    /// [`word`](Self::word) (or dropped with [`skip`](Self::skip)).
    ///
    /// # Errors
    /// [`MachineError::Io`] if `MPI_Start` (restarting the receive taken before), `MPI_Test`
    /// or `MPI_Get_count` fails.
    pub(crate) fn head(&mut self) -> Result<Option<Arrival>, MachineError> {
        if self.arrived.is_some() {
            return Ok(self.arrived);
        }
        self.repost()?;
        if self.requests.is_empty() {
            return Ok(None);
        }
        let mut flag: c_int = 0;
        // SAFETY: MPI_Status is plain old data; MPI fills it.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: an active request of this ring; out-pointers to locals.
        mpi_call("MPI_Test", unsafe {
            ffi::MPI_Test(&mut self.requests[self.head], &mut flag, &mut status)
        })?;
        if flag == 0 {
            return Ok(None);
        }
        let mut count: c_int = 0;
        // SAFETY: `status` was filled by the completed receive.
        mpi_call("MPI_Get_count", unsafe {
            ffi::MPI_Get_count(&status, self.byte, &mut count)
        })?;
        let src = status.MPI_SOURCE as usize;
        let count =
            usize::try_from(count).map_err(|_| MachineError::corrupt(src, "negative count"))?;
        self.arrived = Some(Arrival {
            src,
            tag: status.MPI_TAG,
            count,
        });
        Ok(self.arrived)
    }

    /// Take the head's arrival as a message; its receive is restarted at the next look at the
    /// ring.
    ///
    /// # Errors
    /// [`MachineError::Corrupt`] if the bytes are not a message (too short for an envelope),
    /// [`MachineError::Io`] if (for a message handed up in the ring's buffer)
    /// `MPI_Request_free` or `MPI_Recv_init` fails.
    pub(crate) fn message(&mut self, a: Arrival) -> Result<Message, MachineError> {
        let i = self.head;
        let buf = &mut self.bufs[i];
        let msg = if a.count <= COPY_MAX {
            // The one allocation per small message: the message must own its bytes, and the
            // ring's buffer must stay posted.
            // SAFETY: the head's receive completed with `count` bytes.
            Message::from_wire(unsafe { received(buf, a.count) })
        } else {
            // The request is bound to the buffer handed up: it goes, and a new one is made for
            // the new buffer.
            // SAFETY: a completed (inactive) persistent request of this ring.
            mpi_call("MPI_Request_free", unsafe {
                ffi::MPI_Request_free(&mut self.requests[i])
            })?;
            let mut whole = std::mem::replace(buf, ring_buffer(self.max));
            // SAFETY: MPI wrote `count` bytes after the headroom; the headroom was zeroed when
            // the buffer was made.
            unsafe { whole.set_len(HEADROOM + a.count) };
            // A ring buffer is sized for the largest small message: a message handed up keeps
            // only its own size (shrinking reallocates in place, no copy), so a queue of small
            // messages does not hold ring-sized buffers.
            whole.shrink_to_fit();
            self.init(i)?;
            Message::from_frame(whole, HEADROOM)
        };
        self.advance();
        msg.map_err(|source| MachineError::Corrupt {
            node: a.src,
            source,
        })
    }

    /// Take the head's arrival as one little-endian `u64` (`what`, for the error when it is
    /// not 8 bytes); its receive is restarted at the next look at the ring.
    ///
    /// # Errors
    /// [`MachineError::Corrupt`] if it is not 8 bytes.
    pub(crate) fn word(&mut self, a: Arrival, what: &str) -> Result<u64, MachineError> {
        let mut word = [0u8; 8];
        let ok = a.count == 8;
        if ok {
            // SAFETY: the head's receive completed with 8 bytes.
            word.copy_from_slice(unsafe { received(&self.bufs[self.head], 8) });
        }
        self.advance();
        if !ok {
            return Err(MachineError::corrupt(
                a.src,
                format!("{what} of {} bytes, not 8", a.count),
            ));
        }
        Ok(u64::from_le_bytes(word))
    }

    /// Drop the head's arrival (its bytes are not needed); its receive is restarted at the next
    /// look at the ring.
    pub(crate) fn skip(&mut self) {
        self.advance();
    }

    /// Move the head on; its receive is restarted at the next look at the ring.
    fn advance(&mut self) {
        // An arrival is only seen through `head`, which restarts the receive taken before
        // first: none is unposted here (one would be restarted after this one, out of order).
        debug_assert!(self.unposted.is_none(), "a receive left unposted");
        self.arrived = None;
        let i = self.head;
        self.head = (i + 1) % self.requests.len();
        self.unposted = Some(i);
    }

    /// Restart the receive taken last, if it is not yet.
    #[inline]
    fn repost(&mut self) -> Result<(), MachineError> {
        if let Some(i) = self.unposted {
            // Still unposted if the start fails: the request stays inactive, never tested.
            self.post(i)?;
            self.unposted = None;
        }
        Ok(())
    }

    /// Cancel every started receive, wait for each, and free them all (at exit, before
    /// `MPI_Finalize`, which must not find receives still posted into buffers about to be
    /// freed).
    ///
    /// # Errors
    /// [`MachineError::Io`] if `MPI_Cancel`, `MPI_Wait` or `MPI_Request_free` fails.
    pub(crate) fn cancel(&mut self) -> Result<(), MachineError> {
        // Inactive, and only freed: an arrived head, and a receive taken and not restarted.
        let unposted = self.unposted.take();
        for (i, r) in self.requests.iter_mut().enumerate() {
            let inactive = (self.arrived.is_some() && i == self.head) || unposted == Some(i);
            if !inactive {
                // SAFETY: an active receive request of this ring. A receive that matched a
                // message meanwhile completes normally; one that did not completes as cancelled.
                unsafe {
                    mpi_call("MPI_Cancel", ffi::MPI_Cancel(r))?;
                    mpi_call("MPI_Wait", ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE))?;
                }
            }
            // SAFETY: an inactive persistent request of this ring.
            mpi_call("MPI_Request_free", unsafe { ffi::MPI_Request_free(r) })?;
        }
        self.requests.clear();
        self.bufs.clear();
        self.arrived = None;
        Ok(())
    }
}

/// A receive buffer: zeroed headroom, room for `max` bytes after it.
fn ring_buffer(max: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADROOM + max);
    b.resize(HEADROOM, 0);
    b
}

/// The `count` bytes MPI wrote after the headroom of `buf`. The buffer's length stays the
/// headroom (the bytes are in its spare capacity), so a buffer handed up whole is sized by
/// `set_len` and one never handed up is never resized.
///
/// # Safety
/// A receive into `buf` has completed with `count` bytes, so they are initialized.
unsafe fn received(buf: &Vec<u8>, count: usize) -> &[u8] {
    debug_assert!(buf.capacity() >= HEADROOM + count);
    // SAFETY: in the buffer's capacity, initialized by the completed receive (the caller's
    // promise).
    unsafe { std::slice::from_raw_parts(buf.as_ptr().add(HEADROOM), count) }
}
