//! The raw MPI baselines, between ranks 0 and 1 of a job started by `mpirun -n 2 bench
//! raw-mpi ...`, no runtime: `raw-mpi`, plain rsmpi blocking send and receive into one reused
//! buffer per size; and `raw-mpi-probe`, the same receiving as a program must when it does not
//! know the size coming (matched probe, allocate, matched receive), which is what a layer
//! under a message-driven runtime does; and `raw-mpi-prepost`, the MPI layer's own design for
//! small messages without the layer (see [`prepost_series`]): what that design costs in MPI
//! itself, so the layer's figure can be split into MPI's part and the layer's.

use crate::report::{self, histogram, Row};
use mpi::collective::CommunicatorCollectives;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::topology::Communicator;
use std::path::Path;
use std::time::Instant;

/// One rank of the baseline; rank 0 times round trips and writes the CSV.
pub(crate) fn rank_main(sizes: &[usize], iters: u64, csv: &Path) -> anyhow::Result<()> {
    let universe = mpi::initialize().ok_or_else(|| anyhow::anyhow!("MPI already initialized"))?;
    let world = universe.world();
    anyhow::ensure!(world.size() == 2, "the raw MPI ping-pong wants 2 ranks");
    let me = world.rank();
    let peer = world.process_at_rank(1 - me);
    let warmup = crate::pingpong::warmup(iters);
    let mut rows = Vec::new();
    // One series per way of receiving; `receive` replaces `buf` with what came.
    let mut series = |what: &str, receive: &dyn Fn(&mut Vec<u8>)| -> anyhow::Result<()> {
        for &size in sizes {
            let mut buf = vec![0u8; size];
            let mut h = histogram()?;
            world.barrier();
            for i in 0..iters + warmup {
                let t = Instant::now();
                if me == 0 {
                    peer.send(&buf[..]);
                    receive(&mut buf);
                    if i >= warmup {
                        h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
                    }
                } else {
                    receive(&mut buf);
                    peer.send(&buf[..]);
                }
            }
            rows.push(Row::from_hist(what, size, &h));
        }
        Ok(())
    };
    series("raw-mpi", &|buf| {
        peer.receive_into(&mut buf[..]);
    })?;
    series("raw-mpi-probe", &|buf| {
        (*buf, _) = peer.matched_probe().matched_receive_vec::<u8>();
    })?;
    rows.extend(prepost_series(&world, sizes, iters, warmup)?);
    if me == 0 {
        report::write_csv(csv, &rows.iter().collect::<Vec<_>>())?;
    }
    Ok(())
}

/// Receives posted ahead in the layer's ring (`machine-mpi/src/prepost.rs`): this many.
const RING: usize = 32;
/// And this large: the layer's default small-message limit, rounded up.
const RING_BYTES: usize = 64 << 10;

/// `raw-mpi-prepost`: the MPI layer's small-message path, written plainly on a duplicate of
/// the world communicator. A ring of [`RING`] persistent receives for any source and tag, the
/// oldest tested with `MPI_Test`; what came is copied into a buffer of its own (a message must
/// own its bytes), and the receive is restarted before the next test (after the reply, as the
/// layer does); a reply is an `MPI_Isend`. No credit, no order
/// keeping, no runtime. Sizes above [`RING_BYTES`] are left out (the layer probes for those,
/// and for payloads a little under it, whose envelope takes them past its limit).
fn prepost_series(
    world: &mpi::topology::SimpleCommunicator,
    sizes: &[usize],
    iters: u64,
    warmup: u64,
) -> anyhow::Result<Vec<Row>> {
    use mpi::ffi;
    use mpi::raw::AsRaw;
    use std::os::raw::{c_int, c_void};
    let comm_owner = world.duplicate();
    let comm = comm_owner.as_raw();
    let me = world.rank();
    let peer = 1 - me;
    // SAFETY: predefined handles, read once MPI is initialized.
    let (byte, null) = unsafe { (ffi::RSMPI_UINT8_T, ffi::RSMPI_REQUEST_NULL) };
    let mut bufs: Vec<Vec<u8>> = (0..RING).map(|_| vec![0u8; RING_BYTES]).collect();
    let mut ring = vec![null; RING];
    for (buf, req) in bufs.iter_mut().zip(ring.iter_mut()) {
        // SAFETY: the buffer holds RING_BYTES and outlives the request (the ring is
        // cancelled and freed below, before `bufs` is dropped).
        unsafe {
            ffi::MPI_Recv_init(
                buf.as_mut_ptr() as *mut c_void,
                RING_BYTES as c_int,
                byte,
                ffi::RSMPI_ANY_SOURCE,
                ffi::RSMPI_ANY_TAG,
                comm,
                req,
            );
            ffi::MPI_Start(req);
        }
    }
    let mut head = 0;
    // The receive taken last, restarted before the ring's next test.
    let mut unposted: Option<usize> = None;
    let mut send = null;
    let mut out: Vec<u8> = Vec::new();
    let mut rows = Vec::new();
    for &size in sizes.iter().filter(|&&s| s <= RING_BYTES) {
        // Rank 1's last reply of the size before may still be reading `out`.
        // SAFETY: `send` is this rank's own request, or null.
        unsafe { ffi::MPI_Wait(&mut send, ffi::RSMPI_STATUS_IGNORE) };
        out.clear();
        out.resize(size, 0);
        let mut h = histogram()?;
        world.barrier();
        for i in 0..iters + warmup {
            let t = Instant::now();
            if me == 0 {
                // SAFETY: `out` is not dropped or changed until this send is waited for.
                unsafe { isend(&out, peer, comm, byte, &mut send) };
            }
            let mut flag: c_int = 0;
            // SAFETY: MPI_Status is plain old data; MPI fills it.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            let mut count: c_int = 0;
            // SAFETY: `unposted` is an inactive receive of the ring (taken, not restarted); the
            // head is then an active one; out-pointers to locals; once complete it has `count`
            // bytes in its buffer; `send` is a request of this rank's (or null).
            let got = unsafe {
                if let Some(u) = unposted.take() {
                    ffi::MPI_Start(&mut ring[u]);
                }
                while flag == 0 {
                    ffi::MPI_Test(&mut ring[head], &mut flag, &mut status);
                }
                ffi::MPI_Get_count(&status, byte, &mut count);
                let got = bufs[head][..count.max(0) as usize].to_vec();
                // The peer answered, or answers, what this rank sent: that send is done, so its
                // buffer may go (waiting for a completed request makes no progress call).
                ffi::MPI_Wait(&mut send, ffi::RSMPI_STATUS_IGNORE);
                got
            };
            unposted = Some(head);
            head = (head + 1) % RING;
            out = got;
            if me == 1 {
                // SAFETY: as above.
                unsafe { isend(&out, peer, comm, byte, &mut send) };
            } else if i >= warmup {
                h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
            }
        }
        rows.push(Row::from_hist("raw-mpi-prepost", size, &h));
    }
    world.barrier();
    // SAFETY: the last send is this rank's own; every receive of the ring but `unposted` is
    // active (cancelled and waited for), all are then inactive and freed, their buffers alive.
    unsafe {
        ffi::MPI_Wait(&mut send, ffi::RSMPI_STATUS_IGNORE);
        for (i, req) in ring.iter_mut().enumerate() {
            if unposted != Some(i) {
                ffi::MPI_Cancel(req);
                ffi::MPI_Wait(req, ffi::RSMPI_STATUS_IGNORE);
            }
            ffi::MPI_Request_free(req);
        }
    }
    drop(bufs);
    Ok(rows)
}

/// `MPI_Isend` of `buf` to `peer` with tag 1.
///
/// # Safety
/// MPI is initialized and `buf` stays alive and unchanged until `send` completes.
unsafe fn isend(
    buf: &[u8],
    peer: i32,
    comm: mpi::ffi::MPI_Comm,
    byte: mpi::ffi::MPI_Datatype,
    send: &mut mpi::ffi::MPI_Request,
) {
    // SAFETY: the caller's promise.
    unsafe {
        mpi::ffi::MPI_Isend(
            buf.as_ptr() as *const std::os::raw::c_void,
            buf.len() as std::os::raw::c_int,
            byte,
            peer,
            1,
            comm,
            send,
        );
    }
}
