//! `bench rate --across`: how many small messages a second one PE sends to a PE of another
//! process, with the layer's coalescing (several messages per system call: TCP's
//! `tcp.coalesce_us`) and without it (every message its own write, the layer's raw
//! per-message path), in interleaved rounds of separate 2-node jobs.
//!
//! PE 0 sends `--messages` 8-byte messages to PE 1 from a handler that sends `BURST` and then
//! posts itself again (so PE 0 polls between bursts, and the runtime's bound on what waits
//! for a peer holds it back when PE 1 falls behind); PE 1 counts them and writes the rate from
//! its first arrival to its last. A copying send per message, as most applications send.

use crate::pingpong;
use crate::report;
use converse::Runtime;
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

/// Messages PE 0's handler sends each time it runs.
const BURST: u64 = 64;

/// The setting that turns a layer's coalescing off, if it has one.
fn off_setting(layer: &str) -> Option<&'static str> {
    match layer {
        "tcp" => Some("tcp.coalesce_us=0"),
        "udp" => Some("udp.coalesce_us=0"),
        _ => None,
    }
}

/// `bench pe-rate`: one PE of a launched job; PE 1 writes the CSV.
pub(crate) fn pe_main(rt: Runtime, n: u64, csv: &Path) -> anyhow::Result<()> {
    let csv = csv.to_path_buf();
    let code = rt.run(move |pe| {
        let seen = Rc::new(Cell::new(0u64));
        let first = Rc::new(Cell::new(None::<Instant>));
        let (s, f) = (seen.clone(), first.clone());
        let csv = csv.clone();
        let count = pe.register("bench-rate.count", move |pe, _| {
            if f.get().is_none() {
                f.set(Some(Instant::now()));
            }
            s.set(s.get() + 1);
            if s.get() == n {
                let secs = f.get().map_or(0.0, |t| t.elapsed().as_secs_f64());
                // n - 1 gaps between the first arrival and the last.
                let row = crate::rate::row("rate", (n - 1).max(1), secs);
                if let Err(e) = report::write_csv(&csv, &[&row]) {
                    pe.abort(&format!("writing {}: {e}", csv.display()));
                }
                pe.exit(0);
            }
        });
        let sent = Rc::new(Cell::new(0u64));
        let burst = Rc::new(Cell::new(None));
        let b = burst.clone();
        let h = pe.register("bench-rate.burst", move |pe, _| {
            let k = BURST.min(n - sent.get());
            for _ in 0..k {
                pe.send(1, count, &[7u8; 8]);
            }
            sent.set(sent.get() + k);
            if let (true, Some(me)) = (sent.get() < n, b.get()) {
                pe.send(0, me, &[]);
            }
        });
        burst.set(Some(h));
        pe.barrier();
        if pe.my_pe() == 0 {
            pe.send(0, h, &[]);
        }
    })?;
    anyhow::ensure!(code == 0, "the rate job exited with {code}");
    Ok(())
}

/// Round trips of the lone-message check.
const PINGS: u64 = 5000;

/// The arguments of a job on `layer` with coalescing on or off.
fn job_args<'a>(layer: &str, coalesce: bool, set: &'a [String]) -> Vec<&'a str> {
    let mut extra: Vec<&str> = set.iter().map(String::as_str).collect();
    if let (false, Some(off)) = (coalesce, off_setting(layer)) {
        extra.extend(["+set", off]);
    }
    extra
}

/// One 2-node job on `layer`, coalescing on or off: messages per second at the receiver.
fn rate(layer: &str, n: u64, coalesce: bool, set: &[String]) -> anyhow::Result<f64> {
    let extra = job_args(layer, coalesce, set);
    let rows = pingpong::run_job(layer, &[8], n, "pe-rate", &[], &extra, 2, 1)?;
    let row = rows
        .first()
        .ok_or_else(|| anyhow::anyhow!("the rate job on {layer} wrote no figure"))?;
    Ok(1e9 / row.mean_ns.max(1e-3))
}

/// A lone 8 B message's one-way p50 (µs): a ping-pong job, coalescing on or off.
fn lone(layer: &str, coalesce: bool, set: &[String]) -> anyhow::Result<f64> {
    let extra = job_args(layer, coalesce, set);
    let rows = pingpong::run_job(layer, &[8], PINGS, "pe-pingpong", &[], &extra, 2, 1)?;
    let row = rows
        .first()
        .ok_or_else(|| anyhow::anyhow!("the ping-pong job on {layer} wrote no figure"))?;
    Ok(row.p50_ns as f64 / 1e3)
}

/// `f` with coalescing on and off, in the order `first_on` says: (on, off).
fn both<T>(first_on: bool, mut f: impl FnMut(bool) -> anyhow::Result<T>) -> anyhow::Result<(T, T)> {
    if first_on {
        let on = f(true)?;
        Ok((on, f(false)?))
    } else {
        let off = f(false)?;
        Ok((f(true)?, off))
    }
}

/// `bench rate --across`: per layer, `rounds` rounds of a coalescing job and a per-message
/// one, their order alternating; the median of each with its range, and the median of the
/// rounds' ratios.
pub(crate) fn run(layers: &[String], n: u64, rounds: u16, set: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(n >= 2, "--messages must be at least 2");
    converse::input::out_line(&format!(
        "rate across processes: 8 B messages/s from PE 0 to PE 1 of another process, first to \
         last arrival ({n} messages, {BURST} per handler run); coalesced = the layer's default, \
         per-message = its coalescing off (`+set tcp.coalesce_us=0`, `udp.coalesce_us=0`; a layer \
         without coalescing: the same); then a lone message: the 8 B ping-pong's one-way p50 \
         ({PINGS} round trips), each way; median of {rounds} interleaved rounds (range)"
    ));
    converse::input::out_line(&format!(
        "{:>7} | {:>22} | {:>22} | {:>20} | {:>20} | {:>20} | {:>18}",
        "layer",
        "coalesced (M/s)",
        "per-message (M/s)",
        "rate ratio",
        "lone, coalescing us",
        "lone, per-message us",
        "lone ratio"
    ));
    for layer in layers {
        let mut v: [Vec<f64>; 6] = Default::default();
        for r in 0..rounds {
            // The two ping-pongs side by side, then the two rate jobs (a ping-pong right after
            // a rate job ran slower on this machine), each pair's order alternating.
            let (pa, pb) = both(r % 2 == 0, |on| lone(layer, on, set))?;
            let (a, b) = both(r % 2 == 1, |on| rate(layer, n, on, set))?;
            for (i, x) in [a / 1e6, b / 1e6, a / b, pa, pb, pa / pb]
                .into_iter()
                .enumerate()
            {
                v[i].push(x);
            }
        }
        let show = |v: &[f64]| {
            let (m, lo, hi) = report::spread(v.to_vec());
            format!("{m:.3} ({lo:.3}-{hi:.3})")
        };
        converse::input::out_line(&format!(
            "{layer:>7} | {:>22} | {:>22} | {:>20} | {:>20} | {:>20} | {:>18}",
            show(&v[0]),
            show(&v[1]),
            show(&v[2]),
            show(&v[3]),
            show(&v[4]),
            show(&v[5])
        ));
    }
    Ok(())
}
