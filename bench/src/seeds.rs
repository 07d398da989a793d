//! `bench seeds`: the seed balancers (`converse_tasks::seeds`) against the same work placed
//! statically, on an uneven load. A job of two PEs (one per process under charmrun; both in
//! this process for `local`): PE 0 enqueues 20 pieces of 2 ms, PE 1 20 of 0.1 ms, each piece
//! a spin that takes its core, and each tells PE 0 when done. With `keep` every piece runs
//! where it was enqueued — static placement, the baseline of the same run; the others move
//! them. A figure is the time from PE 0's start to the last piece done, per repetition; one
//! job per balancer per round, the balancers' order rotated by round.

use crate::report::spread;
use crate::tasks::spin;
use anyhow::Context;
use converse::Runtime;
use converse_tasks::seeds::{Balancer, Seeds};
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

const LONG_US: u64 = 2000;
const SHORT_US: u64 = 100;
const EACH: u32 = 20;

pub(crate) fn run(layers: &[String], reps: u32, rounds: u16) -> anyhow::Result<()> {
    let ideal = f64::from(EACH) * (LONG_US + SHORT_US) as f64 / 2.0 / 1e3;
    converse::input::out_line(&format!(
        "seeds: 2 PEs, PE 0 enqueues {EACH} pieces of {} ms and PE 1 {EACH} of {} ms; ms to \
         finish all, median (lowest-highest) of {rounds} rounds x {reps} repetitions; ideal \
         (work / 2) {ideal:.1} ms",
        LONG_US as f64 / 1e3,
        SHORT_US as f64 / 1e3
    ));
    converse::input::out_line(&format!(
        "{:>8} | {:<22} | {:>22} | vs static",
        "layer", "placement", "ms"
    ));
    for layer in layers {
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); Balancer::ALL.len()];
        for round in 0..usize::from(rounds) {
            for k in 0..Balancer::ALL.len() {
                let i = (k + round) % Balancer::ALL.len();
                let b = Balancer::ALL[i];
                per[i].extend(job(layer, b, reps)?);
            }
        }
        let fixed = spread(per[0].clone()).0;
        for (b, v) in Balancer::ALL.iter().zip(per) {
            let (m, lo, hi) = spread(v);
            let what = if *b == Balancer::Keep {
                "static (keep)".to_owned()
            } else {
                b.name().to_owned()
            };
            converse::input::out_line(&format!(
                "{layer:>8} | {what:<22} | {m:>10.1} ({lo:.1}-{hi:.1}) | {:>6.2}x",
                m / fixed
            ));
        }
    }
    Ok(())
}

/// One job with balancer `b`: the repetitions' times, ms.
fn job(layer: &str, b: Balancer, reps: u32) -> anyhow::Result<Vec<f64>> {
    let out = std::env::temp_dir().join(format!("bench-seeds-{}.csv", std::process::id()));
    if layer == "local" {
        let rt = Runtime::from_args(["bench", "+p2", "+quiet", "+machine", "local"])?;
        pe_main(rt, b, reps, &out)?;
    } else {
        let me = std::env::current_exe().context("finding the bench executable")?;
        let status = crate::pingpong::launcher(layer, &me, 2, 1)?
            .arg(&me)
            .args([
                "pe-seeds",
                "--balancer",
                b.name(),
                "--reps",
                &reps.to_string(),
            ])
            .arg("--out")
            .arg(&out)
            .args(["+machine", layer, "+quiet"])
            .status()
            .context("starting the job")?;
        anyhow::ensure!(status.success(), "the {layer} job failed: {status}");
    }
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let _ = std::fs::remove_file(&out);
    text.lines()
        .map(|l| l.parse::<f64>().with_context(|| format!("a time {l:?}")))
        .collect()
}

/// `bench pe-seeds`: one PE of the job; PE 0 writes one time (ms) per line to `out`.
pub(crate) fn pe_main(rt: Runtime, b: Balancer, reps: u32, out: &Path) -> anyhow::Result<()> {
    let lines = std::sync::Mutex::new(String::new());
    let l = &lines;
    let code = rt.run(move |pe| {
        let seeds = Seeds::attach(pe, b);
        let done = Rc::new(Cell::new(0u32));
        let d = done.clone();
        let done_h = pe.register("done", move |_, _| d.set(d.get() + 1));
        let piece = pe.register("piece", move |pe, msg| {
            spin(u64::from_le_bytes(
                msg.payload().try_into().unwrap_or([0; 8]),
            ));
            pe.send(0, done_h, b"");
        });
        let s = seeds.clone();
        let go = pe.register("go", move |pe, _| {
            for _ in 0..EACH {
                s.enqueue(pe, piece, &SHORT_US.to_le_bytes());
            }
        });
        pe.barrier();
        if pe.my_pe() != 0 {
            return;
        }
        for _ in 0..reps {
            done.set(0);
            let t = Instant::now();
            pe.send(1, go, b"");
            for _ in 0..EACH {
                seeds.enqueue(pe, piece, &LONG_US.to_le_bytes());
            }
            pe.run_until(|_| done.get() == 2 * EACH);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if let Ok(mut l) = l.lock() {
                *l += &format!("{ms}\n");
            }
        }
        pe.exit(0);
    })?;
    anyhow::ensure!(code == 0, "the job ended with {code}");
    // Only PE 0 has lines; the other processes must not overwrite them.
    let lines = lines.into_inner().unwrap_or_default();
    if !lines.is_empty() {
        std::fs::write(out, lines.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}
