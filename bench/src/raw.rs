//! Raw baselines: the same exchange written directly on the mechanism a layer uses, with no
//! runtime in between. The fastest a plain program gets on this machine, measured in the same
//! run as the layer.

use crate::report::{histogram, Row};
use crossbeam_channel::TryRecvError;
use std::time::Instant;

/// Ping-pong between two threads over crossbeam channels, moving the buffer (as the in-process
/// layer does), busy-polling on both sides.
pub fn crossbeam_pingpong(size: usize, iters: u64, warmup: u64) -> anyhow::Result<Row> {
    let (to_b, b_in) = crossbeam_channel::unbounded::<Vec<u8>>();
    let (to_a, a_in) = crossbeam_channel::unbounded::<Vec<u8>>();
    let total = iters + warmup;
    let echo = std::thread::spawn(move || {
        for _ in 0..total {
            let m = loop {
                match b_in.try_recv() {
                    Ok(m) => break m,
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                    Err(TryRecvError::Disconnected) => return,
                }
            };
            if to_a.send(m).is_err() {
                return;
            }
        }
    });
    let mut h = histogram()?;
    let mut buf = vec![0u8; size];
    for i in 0..total {
        let t = Instant::now();
        to_b.send(buf)?;
        buf = loop {
            match a_in.try_recv() {
                Ok(m) => break m,
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
                Err(TryRecvError::Disconnected) => anyhow::bail!("echo thread ended"),
            }
        };
        if i >= warmup {
            h.record((t.elapsed().as_nanos() as u64 / 2).max(1))?;
        }
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))?;
    Ok(Row::from_hist("raw-crossbeam", size, &h))
}
