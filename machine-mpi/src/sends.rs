//! Sends in flight: each posted `MPI_Isend` with the message whose buffer it reads.
//!
//! MPI reads a send buffer until the request completes, so the [`Message`] stays here, next to
//! its request, until `MPI_Testsome` reports the request done; only then is the buffer freed.
//! Requests sit in one contiguous array so a single `MPI_Testsome` call checks them all.
//! The buffer of a large message whose send is done goes to a [`BufferPool`], to receive a
//! large message into (its pages mapped already).

use crate::mpi_call;
use converse_machine::{BufferPool, MachineError, Message};
use mpi::ffi;
use std::os::raw::c_int;
use std::sync::Arc;

/// What a send request reads from, kept alive until the request completes. Never read: holding
/// it is the point.
#[allow(dead_code)]
pub(crate) enum Keep {
    /// A whole message.
    One(Message),
    /// A message sent in pieces: each piece's request holds a reference, and the buffer is
    /// freed when the last piece completes, whatever order MPI completes them in.
    Shared(Arc<Message>),
    /// Nothing: a send of no bytes (a notice).
    Nothing,
}

/// Sends from this many bytes count as large: beyond the eager limits of MPI's usual transports
/// (Open MPI: 4 KiB in shared memory, 64 KiB over TCP), MPI moves them by rendezvous, so their
/// data is still on its way after `MPI_Isend` returns and needs this rank's progress calls.
pub(crate) use crate::LARGE;

impl Keep {
    /// Whether the send that reads it is [`LARGE`]: a whole message that large, or a piece of
    /// a huge one (pieces are at least 4 KiB and usually far larger).
    fn is_large(&self) -> bool {
        match self {
            Keep::One(m) => m.wire_len() >= LARGE,
            Keep::Shared(_) => true,
            Keep::Nothing => false,
        }
    }
}

/// The posted sends of one node.
pub(crate) struct InFlight {
    requests: Vec<ffi::MPI_Request>,
    /// `messages[i]` holds the buffer `requests[i]` reads.
    messages: Vec<Keep>,
    /// Scratch for `MPI_Testsome`'s answer, kept to avoid an allocation per call.
    done: Vec<c_int>,
    /// How many of the sends are [`LARGE`].
    large: usize,
    /// Buffers of large messages whose sends are done.
    pool: BufferPool,
}

impl InFlight {
    /// An empty set.
    pub(crate) fn new() -> InFlight {
        InFlight {
            requests: Vec::new(),
            messages: Vec::new(),
            done: Vec::new(),
            large: 0,
            pool: BufferPool::default(),
        }
    }

    /// How many sends are in flight.
    pub(crate) fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether every send has completed.
    pub(crate) fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// How many [`LARGE`] sends are in flight (not yet reported complete by
    /// [`complete`](Self::complete)).
    pub(crate) fn large(&self) -> usize {
        self.large
    }

    /// Keep `request` (already posted) and the message it reads until it completes.
    pub(crate) fn push(&mut self, request: ffi::MPI_Request, msg: Keep) {
        self.large += usize::from(msg.is_large());
        self.requests.push(request);
        self.messages.push(msg);
    }

    /// Ask MPI which sends have completed (this also drives MPI's progress engine) and free
    /// their buffers. Returns how many completed.
    ///
    /// # Errors
    /// [`MachineError::Io`] if `MPI_Testsome` fails.
    pub(crate) fn complete(&mut self) -> Result<usize, MachineError> {
        if self.requests.is_empty() {
            return Ok(0);
        }
        let n = self.requests.len();
        self.done.resize(n, 0);
        let mut count: c_int = 0;
        // SAFETY: both arrays hold `n` elements; statuses are ignored.
        mpi_call("MPI_Testsome", unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                self.requests.as_mut_ptr(),
                &mut count,
                self.done.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        })?;
        // MPI_UNDEFINED (negative) means no active request was left: every one was done.
        if count <= 0 {
            return Ok(0);
        }
        let done = &mut self.done[..count as usize];
        // Remove from the back so earlier indices stay valid under swap_remove.
        done.sort_unstable_by(|a, b| b.cmp(a));
        for &i in done.iter() {
            let i = i as usize;
            self.requests.swap_remove(i);
            let keep = self.messages.swap_remove(i);
            if keep.is_large() {
                self.large -= 1;
                if let Keep::One(m) = keep {
                    self.pool.put(m);
                }
            }
        }
        Ok(count as usize)
    }

    /// An empty buffer with room for `len` bytes, from a large message sent, if one is kept.
    pub(crate) fn take_buffer(&mut self, len: usize) -> Option<Vec<u8>> {
        self.pool.take(len)
    }

    /// Give up on what is still in flight at exit: cancel the requests and leak their buffers,
    /// since MPI may still read them until it is finalized.
    pub(crate) fn abandon(&mut self) -> usize {
        let n = self.requests.len();
        for r in &mut self.requests {
            // SAFETY: a valid, active request. Cancelling a send may not be supported; the
            // request is then left to MPI_Finalize.
            unsafe {
                ffi::MPI_Cancel(r);
            }
        }
        self.requests.clear();
        self.large = 0;
        for m in self.messages.drain(..) {
            std::mem::forget(m);
        }
        n
    }
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight::new()
    }
}
