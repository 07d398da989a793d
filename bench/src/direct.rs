//! Layer-only ping-pong: the `Machine` trait driven directly, with no scheduler, queue,
//! handlers or collectives. Next to the raw baseline and the full runtime it splits a gap
//! between the layer's own code and the runtime above it.

use crate::report::{self, histogram, Row};
use converse_machine::{BootConfig, Message, Settings};
use std::path::Path;
use std::time::Instant;

/// One node of `bench pe-direct`: node 0 times round trips, node 1 sends back what it gets,
/// other nodes idle.
/// `settings` are the `+set` ones of the command line.
pub(crate) fn pe_main(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    csv: &Path,
    settings: Settings,
) -> anyhow::Result<()> {
    let layer = converse::find_layer(layer)?;
    let cfg = BootConfig {
        settings,
        ..BootConfig::new(2)
    };
    let mut nodes = (layer.boot)(&cfg)?;
    anyhow::ensure!(
        nodes.len() == 1,
        "the layer-only ping-pong needs one node per process"
    );
    let m = &mut nodes[0];
    let me = m.my_node();
    // A layer never sends to its own node (the runtime delivers those itself), so the
    // ping-pong needs two. Nodes beyond the first two only wait in the exit barrier: the
    // layer then serves peers that do not talk (its socket cannot be connected to one).
    anyhow::ensure!(
        m.table().num_nodes() >= 2,
        "the layer-only ping-pong needs two nodes or more (charmrun +p2)"
    );
    // A peer may leave the barrier before this node has seen it end, and send at once: what
    // arrives meanwhile is handed to the barrier's `deliver`, and is the first ping (or node
    // 0's word to an idle node). Dropped here, it hung both sides (1 run in ~1,000; in ~100
    // with `+set mpi.window=4`).
    let mut got: Option<Message> = None;
    m.barrier(&mut |x| got = Some(x))?;
    if me >= 2 {
        // Idle as a node of a job is: blocked in the layer's wait until node 0 says the
        // ping-pong is over (the exit barrier's naps would wake it every millisecond).
        let mut done = got.is_some();
        while !done {
            m.advance(&mut |_| done = true)?;
            if !done {
                m.wait(std::time::Duration::from_secs(1))?;
            }
        }
        m.barrier(&mut drop)?;
        m.exit(0)?;
        return Ok(());
    }
    let warmup = crate::pingpong::warmup(iters);
    let mut rows = Vec::new();
    for &size in sizes {
        let h = layer_pingpong(&mut **m, size, iters, warmup, &mut got)?;
        rows.push(Row::from_hist(
            &format!("{}-layer-only", layer.name),
            size,
            &h,
        ));
    }
    if me == 0 {
        for idle in 2..m.table().num_nodes() {
            m.send(idle, Message::new(0))?;
        }
    }
    m.barrier(&mut drop)?;
    if me == 0 {
        report::write_csv(csv, &rows.iter().collect::<Vec<_>>())?;
    }
    m.exit(0)?;
    Ok(())
}

/// The layer's ping-pong of `size`-byte messages between nodes 0 and 1, `warmup` round trips
/// then `iters` timed ones: node 0's one-way times (node 1's histogram stays empty). `got`
/// holds a message that arrived before the first round trip (in a barrier, say).
pub(crate) fn layer_pingpong(
    m: &mut dyn converse_machine::Machine,
    size: usize,
    iters: u64,
    warmup: u64,
    got: &mut Option<Message>,
) -> anyhow::Result<hdrhistogram::Histogram<u64>> {
    let me = m.my_node();
    let peer = 1 - me;
    let mut h = histogram()?;
    let mut msg = (me == 0).then(|| Message::new(size));
    for i in 0..iters + warmup {
        let t = Instant::now();
        if let Some(out) = msg.take() {
            m.send(peer, out)?;
        }
        while got.is_none() {
            m.advance(&mut |x| *got = Some(x))?;
            if got.is_none() {
                // As the scheduler's idle spin and the raw socket baselines poll: a core
                // shared with the other side (SMT) is left to it between polls. (The raw
                // MPI series spin inside MPI without one; measured, dropping it here made
                // no reliable difference: docs/benchmarks.md, "Across both ranks".)
                std::hint::spin_loop();
            }
        }
        let back = got.take();
        if me == 0 {
            if i >= warmup {
                h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
            }
            msg = back;
        } else if let Some(b) = back {
            m.send(peer, b)?;
        }
    }
    Ok(h)
}
