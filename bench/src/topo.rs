//! Process topologies (converse-topo): broadcast, reduce and gather of small and large
//! messages over every topology class, next to the runtime's own spanning-tree broadcast and
//! reduction on the same PEs in the same job; and the distributed mutex's lock+unlock rate
//! with 2, 4 and 8 contending PEs.
//!
//! Broadcast is measured twice: blocking (each call waits for its data) and message-driven
//! (`bcast-md`: all calls made at once, callbacks counting), which is how the runtime's own
//! broadcast is driven.
//!
//! `bench topo` launches one job per PE count (`bench pe-topo`: directly for the in-process
//! layer, under charmrun for the others), whose PE 0 prints the rows.

use anyhow::Context;
use converse::{ops, HandlerId, Pe, ReduceTarget};
use converse_topo::{attach, Topo, Topology};
use std::cell::Cell;
use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

/// What `bench topo` measures.
pub(crate) struct Params<'a> {
    pub pes: &'a [usize],
    pub sizes: &'a [usize],
    pub iters: usize,
    pub contenders: &'a [usize],
    pub locks: usize,
    pub layer: &'a str,
}

/// Launch the jobs and pass their rows on.
pub(crate) fn run(p: &Params<'_>) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    converse::input::out_line(&format!(
        "topology collectives on layer {} ({} iterations each; time per operation, the root's \
         view from the first call to the end of a barrier after the last; 'runtime' = the \
         runtime's own k-ary tree broadcast/reduction on the same PEs, gather compared with a \
         concatenating reduction)",
        p.layer, p.iters
    ));
    converse::input::out_line(&format!(
        "{:>4} {:<18} {:>4} {:>6} {:>9} {:>12} {:>12} {:>7}",
        "PEs", "class", "diam", "height", "op", "bytes", "topo us", "vs rt"
    ));
    let sizes: Vec<String> = p.sizes.iter().map(usize::to_string).collect();
    let sizes = sizes.join(",");
    for &n in p.pes {
        job(&me, p.layer, n, &["coll", &sizes, &p.iters.to_string()])?;
    }
    converse::input::out_line(
        "\ndistributed mutex (Raymond's token over the spanning tree): lock+unlock per second",
    );
    converse::input::out_line(&format!(
        "{:>4} {:<18} {:>14} {:>14}",
        "PEs", "class", "lock+unlock/s", "token moves/s"
    ));
    for &c in p.contenders {
        job(&me, p.layer, c, &["mutex", "0", &p.locks.to_string()])?;
    }
    Ok(())
}

/// Run `bench pe-topo ARGS` on `n` PEs, its output through.
fn job(me: &std::path::Path, layer: &str, n: usize, args: &[&str]) -> anyhow::Result<()> {
    let mut c = if layer == "local" {
        let mut c = Command::new(me);
        c.arg("pe-topo").args(args).arg(format!("+p{n}"));
        c
    } else {
        let mut c = Command::new(crate::pingpong::charmrun_beside(me)?);
        c.arg(format!("+p{n}")).arg(me).arg("pe-topo").args(args);
        c
    };
    c.args(["+machine", layer, "+quiet"]);
    let status = c.status().context("starting a topology job")?;
    anyhow::ensure!(status.success(), "the {n}-PE job failed: {status}");
    Ok(())
}

/// The classes measured on `n` PEs.
fn classes(n: usize) -> Vec<(String, Topology)> {
    let rows = (1..=n)
        .filter(|&r| n.is_multiple_of(r) && r * r <= n)
        .max()
        .unwrap_or(1);
    let complete: Vec<Vec<u32>> = (0..n)
        .map(|i| (0..n).map(|j| u32::from(i != j)).collect())
        .collect();
    let mut sparse = vec![vec![0u32; n]; n];
    for (i, j) in (0..n).flat_map(|i| [(i, (i + 1) % n), (i, (i + 5) % n)]) {
        if i != j {
            let w = 1 + ((i * 7 + j * 3) % 5) as u32;
            sparse[i][j] = w;
            sparse[j][i] = w;
        }
    }
    let d3 = if n.is_multiple_of(4) {
        vec![2, 2, n / 4]
    } else {
        vec![1, 1, n]
    };
    let v = vec![
        ("full".to_string(), Topology::fully_connected(n)),
        (
            "arbitrary-complete".into(),
            Topology::from_matrix(&complete),
        ),
        ("arbitrary-sparse".into(), Topology::from_matrix(&sparse)),
        ("star".into(), Topology::star(n, 0)),
        ("line".into(), Topology::line(n)),
        ("ring".into(), Topology::ring(n)),
        (
            format!("grid {rows}x{}", n / rows),
            Topology::grid2(rows, n / rows),
        ),
        (
            format!("torus {rows}x{}", n / rows),
            Topology::torus2(rows, n / rows),
        ),
        (
            format!("torus {}x{}x{}", d3[0], d3[1], d3[2]),
            Topology::torus(&d3),
        ),
    ];
    v.into_iter()
        .filter_map(|(name, t)| t.ok().map(|t| (name, t)))
        .collect()
}

/// A PE of a `bench topo` job.
pub(crate) fn pe_main(
    rt: converse::Runtime,
    mode: &str,
    sizes: &[usize],
    iters: usize,
) -> anyhow::Result<()> {
    let code = rt.run(|pe| {
        let n = pe.num_pes();
        // The runtime's own collectives' handlers: count arrivals.
        let got = Rc::new(Cell::new(0usize));
        let g = got.clone();
        let h = pe.register("bench.topo.arrive", move |_, _| g.set(g.get() + 1));
        let mut ts: Vec<(String, Topo)> = Vec::new();
        let list = if mode == "mutex" {
            vec![
                ("full".to_string(), Topology::fully_connected(n)),
                ("line".to_string(), Topology::line(n)),
            ]
            .into_iter()
            .filter_map(|(k, t)| t.ok().map(|t| (k, t)))
            .collect()
        } else {
            classes(n)
        };
        for (name, t) in list {
            match attach(pe, t) {
                Ok(Some(t)) => ts.push((name, t)),
                Ok(None) => {}
                Err(e) => pe.abort(&e.to_string()),
            }
        }
        if mode == "mutex" {
            for (name, t) in &ts {
                pe.barrier();
                let start = Instant::now();
                for _ in 0..iters {
                    if t.lock(pe).and_then(|_| t.unlock(pe)).is_err() {
                        pe.abort("mutex failed");
                    }
                }
                pe.barrier();
                let secs = start.elapsed().as_secs_f64();
                // Token moves over the whole job: how often the lock really changed hands.
                let passes = t
                    .all_reduce(pe, &t.token_passes().to_le_bytes(), ops::sum_u64)
                    .ok()
                    .and_then(|v| v.try_into().ok())
                    .map_or(0, u64::from_le_bytes);
                pe.barrier();
                if pe.my_pe() == 0 {
                    let rate = (iters * n) as f64 / secs;
                    converse::input::out_line(&format!("{n:>4} {name:<18} {rate:>14.0} {:>14.0}", passes as f64 / secs));
                }
            }
        } else {
            for &size in sizes {
                let base = runtime_times(pe, h, &got, size, iters);
                for (name, t) in &ts {
                    let topo = t.topology();
                    let (diam, height) = (topo.diameter(), topo.tree(0).map_or(0, |t| t.height()));
                    let ops = ["broadcast", "bcast-md", "reduce", "gather"];
                    for (op, k) in ops.into_iter().zip([0, 0, 1, 2]) {
                        let us = topo_time(pe, t, op, size, iters);
                        if pe.my_pe() == 0 {
                            converse::input::out_line(&format!("{n:>4} {name:<18} {diam:>4} {height:>6} {op:>9} {size:>12} {us:>12.1} {:>6.2}x",
                                us / base[k]));
                        }
                    }
                }
                if pe.my_pe() == 0 {
                    converse::input::out_line(&format!("{n:>4} {:<18} {:>4} {:>6} {:>9} {size:>12} {:>12.1}\n{n:>4} {:<18} {:>4} {:>6} {:>9} {size:>12} {:>12.1}\n{n:>4} {:<18} {:>4} {:>6} {:>9} {size:>12} {:>12.1}",
                        "runtime", "-", "-", "broadcast", base[0], "runtime", "-", "-", "reduce", base[1], "runtime", "-", "-", "concat-red", base[2]));
                }
            }
        }
        pe.barrier();
        if pe.my_pe() == 0 {
            pe.exit(0);
        }
    })?;
    anyhow::ensure!(code == 0, "exit code {code}");
    Ok(())
}

/// Microseconds per operation of the runtime's broadcast, reduction and concatenating
/// reduction (its nearest to a gather), rooted at PE 0.
fn runtime_times(
    pe: &mut Pe,
    h: HandlerId,
    got: &Rc<Cell<usize>>,
    size: usize,
    iters: usize,
) -> [f64; 3] {
    let data = vec![1u8; size];
    let mut out = [0.0; 3];
    for (k, slot) in out.iter_mut().enumerate() {
        // Arrivals are counted, never reset: a broadcast may be run here while this PE still
        // waits in the barrier before it.
        let before = got.get();
        pe.barrier();
        let start = Instant::now();
        for _ in 0..iters {
            match k {
                0 if pe.my_pe() == 0 => pe.broadcast_all(h, &data),
                0 => {}
                1 => pe.reduce(&data, ops::sum_u64, ReduceTarget::Root(h)),
                _ => pe.reduce(&data, ops::concat, ReduceTarget::Root(h)),
            }
        }
        // Every PE waits for what reaches it: all broadcasts; PE 0 all reductions.
        let want = before
            + match k {
                0 => iters,
                _ if pe.my_pe() == 0 => iters,
                _ => 0,
            };
        let g = got.clone();
        pe.run_until(move |_| g.get() >= want);
        pe.barrier();
        *slot = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    }
    out
}

/// Microseconds per operation of one topology collective rooted at process 0.
fn topo_time(pe: &mut Pe, t: &Topo, op: &str, size: usize, iters: usize) -> f64 {
    let data = vec![1u8; size];
    pe.barrier();
    let start = Instant::now();
    if op == "bcast-md" {
        // Message-driven: every call made at once, their callbacks counting; the runtime's
        // broadcast is measured the same way.
        let done = Rc::new(Cell::new(0usize));
        for _ in 0..iters {
            let d = done.clone();
            t.broadcast_then(pe, 0, &data, move |pe, r| {
                if r.is_err() {
                    pe.abort("broadcast failed");
                }
                d.set(d.get() + 1);
            });
        }
        let d = done.clone();
        pe.run_until(move |_| d.get() == iters);
        pe.barrier();
        return start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    }
    for _ in 0..iters {
        let r = match op {
            "broadcast" => t.broadcast(pe, 0, &data).map(|_| ()),
            "reduce" => t.reduce(pe, 0, &data, ops::sum_u64).map(|_| ()),
            _ => t.gather(pe, 0, &data).map(|_| ()),
        };
        if let Err(e) = r {
            pe.abort(&e.to_string());
        }
    }
    pe.barrier();
    start.elapsed().as_secs_f64() * 1e6 / iters as f64
}
