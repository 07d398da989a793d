//! `bench tasks`: what the tasks crate's convenience costs. In one job of two PEs (PE 0 times,
//! PE 1 answers), in rounds whose blocks alternate:
//!
//! - a hand-written round trip: PE 0 sends 8 bytes to a handler on PE 1 that sends them back
//!   to a handler on PE 0, which sends the next (the same work a call does, written by hand);
//! - a call with reply: a task on PE 0 awaits `call(1, echo, 8 bytes)`, one after another;
//!   and again with each reply's message sent as the next request (`call_msg`), which is what
//!   the hand-written round trip does with its one message;
//! - spawn + join of an empty task, from inside a task; a `yield_now` switch.
//!
//! Layer `self`: the same in a job of one PE (in this process) whose calls and round trips go to
//! itself — what a call's bookkeeping costs with no second PE, no wake-up and no wire (and a
//! single thread, so `valgrind --tool=callgrind` counts it exactly). `--what` keeps some of the
//! blocks only.
//!
//! Beside them, measured in this process: a tokio current-thread runtime's spawn + join of an
//! empty task, and a round trip between two threads over crossbeam channels. Every figure is
//! per operation, the median over rounds with its range.

use crate::report::spread;
use anyhow::Context;
use converse::{Pe, Runtime};
use converse_tasks::{call, yield_now, Tasks};
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

/// The blocks, by `--what` name then title.
pub(crate) const KINDS: [&str; 5] = ["hand", "call", "spawn", "yield", "reused"];
const WHAT: [&str; 5] = [
    "hand-written round trip",
    "call with reply",
    "spawn + join",
    "yield",
    "call, message reused",
];

/// `--what`'s names as block numbers; an unknown one refused.
pub(crate) fn kinds(what: &[String]) -> anyhow::Result<Vec<usize>> {
    what.iter()
        .map(|w| {
            KINDS
                .iter()
                .position(|k| k == w)
                .with_context(|| format!("--what: no block '{w}' (one of {})", KINDS.join(", ")))
        })
        .collect()
}

/// Print a row: median (range) ns per operation.
fn print_row(layer: &str, what: &str, v: Vec<f64>, beside: Option<f64>) {
    let (m, lo, hi) = spread(v);
    let ratio = beside.map_or(String::new(), |b| format!("{:>6.2}x", m / b));
    converse::input::out_line(&format!(
        "{layer:>8} | {what:<24} | {m:>10.0} ({lo:.0}-{hi:.0}) | {ratio}"
    ));
}

pub(crate) fn run(
    layers: &[String],
    what: &[String],
    iters: u64,
    rounds: u16,
) -> anyhow::Result<()> {
    let kinds = kinds(what)?;
    let (tokio_spawn, crossbeam_rt) = raw(iters, rounds)?;
    converse::input::out_line(&format!(
        "tasks: ns per operation, median (lowest-highest) over {rounds} rounds of {iters}; \
         a call beside the hand-written round trip of the same layer and job"
    ));
    converse::input::out_line(&format!("{:>8} | {:<24} | {:>22} |", "layer", "what", "ns"));
    print_row("raw", "tokio spawn + join", tokio_spawn, None);
    print_row("raw", "crossbeam round trip", crossbeam_rt, None);
    for layer in layers {
        let out = std::env::temp_dir().join(format!("bench-tasks-{}.csv", std::process::id()));
        if layer == "local" || layer == "self" {
            let pes = if layer == "self" { "+p1" } else { "+p2" };
            let rt = Runtime::from_args(["bench", pes, "+quiet", "+machine", "local"])?;
            pe_main(rt, &kinds, iters, rounds, &out)?;
        } else {
            let me = std::env::current_exe().context("finding the bench executable")?;
            let status = crate::pingpong::launcher(layer, &me, 2, 1)?
                .arg(&me)
                .args(["pe-tasks", "--iters", &iters.to_string()])
                .arg("--what")
                .arg(what.join(","))
                .args(["--rounds", &rounds.to_string(), "--out"])
                .arg(&out)
                .args(["+machine", layer, "+quiet"])
                .status()
                .context("starting the job")?;
            anyhow::ensure!(status.success(), "the {layer} job failed: {status}");
        }
        let text =
            std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
        let _ = std::fs::remove_file(&out);
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); WHAT.len()];
        for line in text.lines() {
            let mut f = line.split(',');
            let (Some(i), Some(ns)) = (f.next(), f.next()) else {
                continue;
            };
            let (i, ns): (usize, f64) = (i.parse()?, ns.parse()?);
            if let Some(v) = per.get_mut(i) {
                v.push(ns);
            }
        }
        let hand = (!per[0].is_empty()).then(|| spread(per[0].clone()).0);
        for (i, v) in per.into_iter().enumerate() {
            if kinds.contains(&i) {
                print_row(layer, WHAT[i], v, hand.filter(|_| i == 1 || i == 4));
            }
        }
    }
    // The pool's figure only with every block (a run of some is a look at those).
    if kinds.len() == KINDS.len() {
        pool(rounds)?;
    }
    Ok(())
}

/// The raw baselines: tokio spawn + join, crossbeam round trip; ns per operation per round.
fn raw(iters: u64, rounds: u16) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("a tokio runtime")?;
    let (mut spawns, mut trips) = (Vec::new(), Vec::new());
    let (to_echo, echo_in) = crossbeam_channel::bounded::<u64>(1);
    let (to_main, main_in) = crossbeam_channel::bounded::<u64>(1);
    let echo = std::thread::spawn(move || {
        while let Ok(v) = echo_in.recv() {
            if to_main.send(v).is_err() {
                break;
            }
        }
    });
    for _ in 0..rounds {
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..iters {
                let _ = tokio::spawn(async {}).await;
            }
        });
        spawns.push(t.elapsed().as_nanos() as f64 / iters as f64);
        let t = Instant::now();
        for i in 0..iters {
            to_echo.send(i)?;
            main_in.recv()?;
        }
        trips.push(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    drop(to_echo);
    let _ = echo.join();
    Ok((spawns, trips))
}

/// `bench pe-tasks`: one PE of the job; PE 0 writes `index,ns` lines to `out`.
pub(crate) fn pe_main(
    rt: Runtime,
    kinds: &[usize],
    iters: u64,
    rounds: u16,
    out: &Path,
) -> anyhow::Result<()> {
    let lines = std::sync::Mutex::new(String::new());
    let l = &lines;
    let code = rt.run(move |pe| {
        let tasks = Tasks::attach(pe);
        let echo = tasks.serve(pe, "echo", |pe, req, reply| reply.send_msg(pe, req));
        let left = Rc::new(Cell::new(0u64));
        let back = Rc::new(Cell::new(None));
        let (lf, bk) = (left.clone(), back.clone());
        // PE 1 answers; in a job of one PE (`self`), PE 0 itself.
        let peer = 1.min(pe.num_pes() - 1);
        let ping = pe.register("ping", move |pe, msg| {
            if let Some(h) = bk.get() {
                pe.send_msg(0, h, msg);
            }
        });
        let pong = pe.register("pong", move |pe, msg| {
            lf.set(lf.get() - 1);
            if lf.get() > 0 {
                pe.send_msg(peer, ping, msg);
            }
        });
        back.set(Some(pong));
        pe.barrier();
        if pe.my_pe() != 0 {
            return;
        }
        for round in 0..rounds {
            for k in 0..kinds.len() {
                // Blocks in an order rotated by round.
                let which = kinds[(k + round as usize) % kinds.len()];
                let ns = block(pe, &tasks, &echo, &left, (peer, ping), which, iters);
                if let Ok(mut l) = l.lock() {
                    *l += &format!("{which},{ns}\n");
                }
            }
        }
        pe.exit(0);
    })?;
    anyhow::ensure!(code == 0, "the job ended with {code}");
    let lines = lines.into_inner().unwrap_or_default();
    if !lines.is_empty() {
        std::fs::write(out, lines.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

/// One timed block of `iters` operations of kind `which`: ns per operation. Not inlined, so
/// that `valgrind --tool=callgrind --toggle-collect='*tasks::block*'` counts the blocks alone.
#[inline(never)]
fn block(
    pe: &mut Pe,
    tasks: &Tasks,
    echo: &converse_tasks::ServiceId,
    left: &Rc<Cell<u64>>,
    (peer, ping): (usize, converse::HandlerId),
    which: usize,
    iters: u64,
) -> f64 {
    let t = Instant::now();
    match which {
        0 => {
            left.set(iters);
            pe.send(peer, ping, &[0u8; 8]);
            pe.run_until(|_| left.get() == 0);
        }
        1 => {
            let echo = echo.clone();
            let _ = tasks.block_on(pe, async move {
                for _ in 0..iters {
                    let _ = call(peer, &echo, &[0u8; 8]).await;
                }
            });
        }
        2 => {
            let _ = tasks.block_on(pe, async move {
                for _ in 0..iters {
                    let _ = converse_tasks::spawn(async {}).await;
                }
            });
        }
        4 => {
            let echo = echo.clone();
            let _ = tasks.block_on(pe, async move {
                let mut m = converse::Message::from_payload(&[0u8; 8]);
                for _ in 0..iters {
                    match converse_tasks::with_pe(|pe| echo.call_msg(pe, peer, m)).await {
                        Ok(r) => m = r,
                        Err(_) => return,
                    }
                }
            });
        }
        _ => {
            let _ = tasks.block_on(pe, async move {
                for _ in 0..iters {
                    yield_now().await;
                }
            });
        }
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

/// Spin for `us` microseconds: a piece of work that takes its core.
pub(crate) fn spin(us: u64) {
    let t = Instant::now();
    while t.elapsed().as_micros() < u128::from(us) {
        std::hint::spin_loop();
    }
}

/// The node's shared pool against static placement on an uneven load: 20 pieces of 2 ms and
/// 20 of 0.1 ms on a node of two PEs (`+p2 +ppn 2`, in this process). Static: PE 0 gets every
/// long piece, PE 1 every short one (as a fixed block split of unsorted work can). Shared:
/// every piece in the node's pool ([`Tasks::spawn_shared`]). Prints each's time to finish
/// all, median (range) over `rounds`, beside the ideal (total work / 2).
pub(crate) fn pool(rounds: u16) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    const LONG_US: u64 = 2000;
    const SHORT_US: u64 = 100;
    const EACH: u64 = 20;
    let times = Mutex::new((Vec::new(), Vec::new()));
    // One counter for both PEs (the start function runs once per PE).
    let done = Arc::new(AtomicU64::new(0));
    let rt = Runtime::from_args(["bench", "+p2", "+ppn", "2", "+quiet", "+machine", "local"])?;
    let code = rt.run(|pe| {
        let tasks = Tasks::attach(pe);
        // The last piece wakes PE 0 (which may sleep while another PE finishes the work).
        let nudge = pe.register("nudge", |_, _| {});
        let finish = move |pe: &mut Pe, done: &AtomicU64| {
            if done.fetch_add(1, Ordering::AcqRel) + 1 == 2 * EACH && pe.my_pe() != 0 {
                pe.send(0, nudge, b"");
            }
        };
        let d = done.clone();
        let work = pe.register("work", move |pe, msg| {
            spin(u64::from_le_bytes(
                msg.payload().try_into().unwrap_or([0; 8]),
            ));
            finish(pe, &d);
        });
        pe.barrier();
        if pe.my_pe() != 0 {
            return;
        }
        for _ in 0..rounds {
            done.store(0, Ordering::Release);
            let t = Instant::now();
            for _ in 0..EACH {
                pe.send(0, work, &LONG_US.to_le_bytes());
                pe.send(1, work, &SHORT_US.to_le_bytes());
            }
            pe.run_until(|_| done.load(Ordering::Acquire) == 2 * EACH);
            let fixed = t.elapsed().as_secs_f64() * 1e3;
            done.store(0, Ordering::Release);
            let t = Instant::now();
            for _ in 0..EACH {
                for us in [LONG_US, SHORT_US] {
                    let d = done.clone();
                    tasks.spawn_shared(pe, move |pe| {
                        spin(us);
                        finish(pe, &d);
                    });
                }
            }
            pe.run_until(|_| done.load(Ordering::Acquire) == 2 * EACH);
            let shared = t.elapsed().as_secs_f64() * 1e3;
            if let Ok(mut v) = times.lock() {
                v.0.push(fixed);
                v.1.push(shared);
            }
        }
        pe.exit(0);
    })?;
    anyhow::ensure!(code == 0, "the pool job ended with {code}");
    let (fixed, shared) = times.into_inner().unwrap_or_default();
    let ideal = (EACH * (LONG_US + SHORT_US)) as f64 / 2.0 / 1e3;
    let (f, flo, fhi) = spread(fixed);
    let (s, slo, shi) = spread(shared);
    converse::input::out_line(&format!(
        "shared pool, uneven load on a node of 2 PEs ({EACH} pieces of {} ms and {EACH} of {} ms), \
         ms to finish all, median (range) of {rounds}:",
        LONG_US as f64 / 1e3,
        SHORT_US as f64 / 1e3
    ));
    converse::input::out_line(&format!(
        "   static placement  {f:>7.1} ({flo:.1}-{fhi:.1})"
    ));
    converse::input::out_line(&format!(
        "   shared pool       {s:>7.1} ({slo:.1}-{shi:.1})   {:.2}x static",
        s / f
    ));
    converse::input::out_line(&format!("   ideal (work / 2)  {ideal:>7.1}"));
    Ok(())
}
