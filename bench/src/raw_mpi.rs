//! The raw MPI baselines, between ranks 0 and 1 of a job started by `mpirun -n 2 bench
//! raw-mpi ...`, no runtime: `raw-mpi`, plain rsmpi blocking send and receive into one reused
//! buffer per size; and `raw-mpi-probe`, the same receiving as a program must when it does not
//! know the size coming (matched probe, allocate, matched receive), which is what a layer
//! under a message-driven runtime does.

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
    if me == 0 {
        report::write_csv(csv, &rows.iter().collect::<Vec<_>>())?;
    }
    Ok(())
}
