//! The runtime's own collectives at scale (issue 31, item 5): broadcast, reduction and
//! barrier over 2 to hundreds of PEs, in one process or across processes, next to a raw floor
//! measured in the same run.
//!
//! Per job (`bench pe-coll`, one per layer, `++ppn` and PE count), PE 0 prints one row:
//! - **round**: one broadcast from PE 0 whose handler, on every PE, contributes to a sum
//!   reduction back to PE 0 — the MRNet paper's round trip; median over the iterations;
//! - **bcast** and **reduce**: time per operation of `iters` of them issued at once, the
//!   root's view from the first call to the end of a barrier after the last (how a
//!   message-driven program drives them);
//! - **barrier**: time per barrier of `iters` in a row;
//! - **csw/round** and **csw/bcast**: context switches of every PE thread per round and per
//!   broadcast issued at once (`getrusage` of each thread, summed over PEs; communication
//!   threads not counted): on a host with fewer cores than PEs, each is a PE waking or a
//!   spinning PE's yield that handed its core over.
//!
//! The raw floor, for the in-process layer only: the same k-ary tree of plain threads that
//! block on crossbeam channels, a round down and a sum up, no runtime.

use anyhow::Context;
use converse::{ops, ReduceTarget};
use std::cell::{Cell, RefCell};
use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

/// What `bench coll` measures.
pub(crate) struct Params<'a> {
    pub layers: &'a [String],
    pub pes: &'a [usize],
    pub ppn: &'a [usize],
    pub iters: usize,
    pub rounds: usize,
    pub extra: &'a [String],
}

/// The columns of a row, after layer, ppn and PEs.
const COLUMNS: [&str; 8] = [
    "round us",
    "bcast us",
    "csw/bcast",
    "reduce us",
    "barrier us",
    "csw/round",
    "raw us",
    "ratio",
];

/// Launch one job per layer, `++ppn` and PE count, `rounds` times over (each round the whole
/// sweep, so that a slow phase of the machine falls on every configuration alike); print
/// each cell's median over the rounds and, with more than one round, its range.
pub(crate) fn run(p: &Params<'_>) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    converse::input::out_line(&format!(
        "runtime collectives ({} iterations each; round = broadcast from PE 0 then a sum \
         reduction back, median; bcast/reduce = per operation of {0} issued at once; \
         barrier = per barrier of {0} in a row; csw = context switches of the PE threads per \
         round or broadcast; raw = the same tree of plain threads on crossbeam channels, \
         median round; each cell the median of {} rounds{})",
        p.iters,
        p.rounds,
        if p.rounds > 1 { ", [range]" } else { "" }
    ));
    let mut head = format!("{:<6} {:>4} {:>5}", "layer", "ppn", "PEs");
    for c in COLUMNS {
        head.push_str(&format!(" {c:>10}"));
    }
    converse::input::out_line(&head);
    let mut configs = Vec::new();
    for layer in p.layers {
        for &ppn in p.ppn {
            for &n in p.pes.iter().filter(|&&n| n % ppn == 0) {
                configs.push((layer.as_str(), ppn, n));
            }
        }
    }
    let mut got: Vec<Vec<Vec<f64>>> = vec![Vec::new(); configs.len()];
    for round in 0..p.rounds {
        for (k, &(layer, ppn, n)) in configs.iter().enumerate() {
            let row = job(&me, layer, n, ppn, p.iters, p.extra)?;
            if p.rounds > 1 {
                converse::input::out_line(&format!(
                    "  (round {}: {layer} ppn {ppn} {n} PEs: {})",
                    round + 1,
                    row.iter()
                        .map(|v| if v.is_nan() {
                            "-".into()
                        } else {
                            format!("{v:.1}")
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
            }
            got[k].push(row);
        }
    }
    for (k, &(layer, ppn, n)) in configs.iter().enumerate() {
        let mut line = format!("{layer:<6} {ppn:>4} {n:>5}");
        for (c, name) in COLUMNS.iter().enumerate() {
            let mut v: Vec<f64> = got[k].iter().filter_map(|r| r.get(c).copied()).collect();
            v.retain(|x| !x.is_nan());
            v.sort_by(f64::total_cmp);
            // Ratios want two decimals, times and counts one.
            let d = if *name == "ratio" { 2 } else { 1 };
            let cell = match (v.first(), v.get(v.len() / 2), v.last()) {
                (Some(lo), Some(mid), Some(hi)) if p.rounds > 1 => {
                    format!("{mid:.d$} [{lo:.d$}-{hi:.d$}]")
                }
                (_, Some(mid), _) => format!("{mid:.d$}"),
                _ => "-".into(),
            };
            line.push_str(&format!(" {cell:>10}"));
        }
        converse::input::out_line(&line);
    }
    Ok(())
}

/// Run `bench pe-coll` on `n` PEs; its row's columns (NaN where it has none).
fn job(
    me: &std::path::Path,
    layer: &str,
    n: usize,
    ppn: usize,
    iters: usize,
    extra: &[String],
) -> anyhow::Result<Vec<f64>> {
    let mut c = if layer == "local" {
        let mut c = Command::new(me);
        c.args(["pe-coll", &iters.to_string()])
            .arg(format!("+p{n}"))
            .arg(format!("+ppn{ppn}"));
        c
    } else {
        let mut c = Command::new(crate::pingpong::charmrun_beside(me)?);
        c.arg(format!("+p{n}"));
        if ppn > 1 {
            c.args(["++ppn", &ppn.to_string()]);
        }
        c.arg(me).args(["pe-coll", &iters.to_string()]);
        c
    };
    c.args(["+machine", layer, "+quiet"]).args(extra);
    c.stderr(std::process::Stdio::inherit());
    let out = c.output().context("starting a collectives job")?;
    anyhow::ensure!(
        out.status.success(),
        "the {n}-PE job on {layer} failed: {}",
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with(layer))
        .with_context(|| format!("the {n}-PE job on {layer} printed no row: {text}"))?;
    Ok(line
        .split_whitespace()
        .skip(3)
        .map(|w| w.parse().unwrap_or(f64::NAN))
        .collect())
}

/// Context switches (voluntary and not) of the calling thread so far.
fn thread_switches() -> u64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0, |u| {
        (u.voluntary_context_switches() + u.involuntary_context_switches()) as u64
    })
}

/// A PE of a `bench coll` job.
pub(crate) fn pe_main(rt: converse::Runtime, iters: usize) -> anyhow::Result<()> {
    let code = rt.run(|pe| {
        let n = pe.num_pes();
        let ppn = pe.num_pes() / pe.num_nodes();
        // Arrivals of broadcasts and of reductions' results, counted, never reset: a
        // broadcast may run here while this PE still waits in the barrier before it.
        let got = Rc::new(Cell::new(0usize));
        let g = got.clone();
        let arrive = pe.register("bench.coll.arrive", move |_, _| g.set(g.get() + 1));
        let sums = Rc::new(Cell::new(0usize));
        let s = sums.clone();
        let summed = pe.register("bench.coll.summed", move |_, _| s.set(s.get() + 1));
        // A round: the broadcast's handler contributes to the reduction back to PE 0.
        let answered = Rc::new(Cell::new(0usize));
        let a = answered.clone();
        let answer = pe.register("bench.coll.answer", move |pe, _| {
            a.set(a.get() + 1);
            pe.reduce(&1u64.to_le_bytes(), ops::sum_u64, ReduceTarget::Root(summed));
        });
        let all_csw = Rc::new(RefCell::new(None));
        let a = all_csw.clone();
        let csw_sum = pe.register("bench.coll.csw", move |_, m| {
            let w = |i: usize| {
                m.payload()
                    .get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes)
            };
            *a.borrow_mut() = Some([w(0), w(1)]);
        });
        let data = [1u8; 8];
        let mut rounds = Vec::with_capacity(iters);
        // Warm up: the first rounds touch every queue and page.
        pe.barrier();
        let total = iters + iters / 10;
        let csw0 = thread_switches();
        if pe.my_pe() == 0 {
            for i in 0..total {
                let start = Instant::now();
                pe.broadcast_all(answer, &data);
                let s = sums.clone();
                pe.run_until(move |_| s.get() > i);
                if i >= iters / 10 {
                    rounds.push(start.elapsed().as_secs_f64() * 1e6);
                }
            }
        } else {
            // The rounds are PE 0's: here each broadcast's handler answers it.
            let a = answered.clone();
            pe.run_until(move |_| a.get() >= total);
        }
        let csw_rounds = thread_switches() - csw0;
        // Operations issued at once.
        let mut per_op = [0.0f64; 3];
        let mut csw_bcast = 0;
        for (k, slot) in per_op.iter_mut().enumerate() {
            let before = got.get();
            pe.barrier();
            let start = Instant::now();
            let csw0 = thread_switches();
            for _ in 0..iters {
                match k {
                    0 if pe.my_pe() == 0 => pe.broadcast_all(arrive, &data),
                    0 => {}
                    1 => pe.reduce(&data, ops::sum_u64, ReduceTarget::Root(arrive)),
                    _ => {
                        pe.barrier();
                    }
                }
            }
            let want = before
                + match k {
                    0 => iters,
                    1 if pe.my_pe() == 0 => iters,
                    _ => 0,
                };
            let g = got.clone();
            pe.run_until(move |_| g.get() >= want);
            if k == 0 {
                csw_bcast = thread_switches() - csw0;
            }
            pe.barrier();
            *slot = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
        }
        let mut both = csw_rounds.to_le_bytes().to_vec();
        both.extend_from_slice(&csw_bcast.to_le_bytes());
        pe.reduce(&both, ops::sum_u64, ReduceTarget::Root(csw_sum));
        if pe.my_pe() == 0 {
            let a = all_csw.clone();
            pe.run_until(move |_| a.borrow().is_some());
        }
        if pe.my_pe() == 0 {
            rounds.sort_by(f64::total_cmp);
            let round = rounds.get(rounds.len() / 2).copied().unwrap_or(0.0);
            let [csw, csw_b] = all_csw.borrow().unwrap_or([0, 0]);
            let (csw, csw_b) = (csw as f64 / total as f64, csw_b as f64 / iters as f64);
            let (raw, ratio) = if pe.layer() == "local" && ppn == 1 {
                let raw = raw_round(n, RAW_BRANCHING, iters);
                (format!("{raw:.1}"), format!("{:.2}", round / raw))
            } else {
                ("-".into(), "-".into())
            };
            converse::input::out_line(&format!(
                "{:<6} {:>4} {:>5} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10} {:>10}",
                pe.layer(),
                ppn,
                n,
                round,
                per_op[0],
                csw_b,
                per_op[1],
                per_op[2],
                csw,
                raw,
                ratio
            ));
            pe.exit(0);
        }
    })?;
    anyhow::ensure!(code == 0, "exit code {code}");
    Ok(())
}

/// The runtime's default `tree.branching`, for the raw tree (a `+set tree.branching` passed
/// to the jobs changes theirs, not this).
const RAW_BRANCHING: usize = 4;

/// Median microseconds of a round (down a `k`-ary tree of `n` plain threads, a sum back up)
/// with no runtime: each thread blocks on its crossbeam channel, as an idle PE blocks.
fn raw_round(n: usize, k: usize, iters: usize) -> f64 {
    use crossbeam_channel::{unbounded, Receiver, Sender};
    let (down_tx, down_rx): (Vec<Sender<u64>>, Vec<Receiver<u64>>) =
        (0..n).map(|_| unbounded()).unzip();
    let (up_tx, up_rx): (Vec<Sender<u64>>, Vec<Receiver<u64>>) =
        (0..n).map(|_| unbounded()).unzip();
    let total = iters + iters / 10;
    let kids = |me: usize| converse::tree_children(0, me, n, k).collect::<Vec<_>>();
    let parent = |me: usize| converse::tree_parent(0, me, n, k);
    std::thread::scope(|s| {
        for me in 1..n {
            let (down, up) = (down_rx[me].clone(), up_rx[me].clone());
            let kids_down: Vec<Sender<u64>> =
                kids(me).iter().map(|&c| down_tx[c].clone()).collect();
            let to_parent = parent(me).map(|p| up_tx[p].clone());
            s.spawn(move || {
                for _ in 0..total {
                    let Ok(v) = down.recv() else { return };
                    for k in &kids_down {
                        let _ = k.send(v);
                    }
                    let mut sum = 1;
                    for _ in 0..kids_down.len() {
                        sum += up.recv().unwrap_or(0);
                    }
                    if let Some(p) = &to_parent {
                        let _ = p.send(sum);
                    }
                }
            });
        }
        let kids0: Vec<Sender<u64>> = kids(0).iter().map(|&c| down_tx[c].clone()).collect();
        let mut rounds = Vec::with_capacity(iters);
        for i in 0..total {
            let start = Instant::now();
            for k in &kids0 {
                let _ = k.send(1);
            }
            let mut sum = 1;
            for _ in 0..kids0.len() {
                sum += up_rx[0].recv().unwrap_or(0);
            }
            debug_assert_eq!(sum as usize, n);
            if i >= iters / 10 {
                rounds.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        rounds.sort_by(f64::total_cmp);
        rounds.get(rounds.len() / 2).copied().unwrap_or(0.0)
    })
}
