//! `bench smp`: SMP mode's figures, each next to its baseline from the same run.
//!
//! - **PE to PE inside one process**: the handler-driven ping-pong between two PEs of one node
//!   (`+p2 +ppn 2`, in-process layer), next to a raw two-thread hand-off through the same kind
//!   of queue (crossbeam's `SegQueue`, both threads spinning), with no runtime.
//! - **Worker to worker across processes**: PE 0 against the first PE of the other node of a
//!   `++ppn 2` job on each layer (through both communication threads), next to the same layer
//!   at `++ppn 1`.
//! - **Message rate**: K PEs of one process each sending to the next, for each K asked, next to
//!   K raw threads doing the same through `SegQueue`s.
//! - **Start-up**: `+p8 ++ppn 4` against `+p8`.

use crate::pingpong;
use crate::report::{histogram, Row};
use anyhow::Context;
use converse::Runtime;
use crossbeam_queue::SegQueue;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) fn run(
    layers: &[String],
    iters: u64,
    messages: u64,
    ks: &[usize],
) -> anyhow::Result<()> {
    let w = pingpong::warmup(iters);

    converse::input::out_line("== PE to PE inside one process, one-way p50 (us), 8 B");
    let raw = raw_handoff(8, iters, w)?;
    let rt = Runtime::from_args(["bench", "+p2", "+ppn", "2", "+quiet", "+machine", "local"])?;
    let smp = pingpong::job(rt, &[8], iters, "runtime +ppn 2", 1)?;
    let rt = Runtime::from_args(["bench", "+p2", "+quiet", "+machine", "local"])?;
    let two_nodes = pingpong::job(rt, &[8], iters, "runtime +ppn 1", 1)?;
    let p50 = |r: &[Row]| r.first().map_or(f64::NAN, |r| r.p50_ns as f64 / 1e3);
    let raw = [raw];
    converse::input::out_line(&format!(
        "{:>34} | {:>8.3}\n{:>34} | {:>8.3}   ({:.2}x raw)\n{:>34} | {:>8.3}",
        "raw SegQueue hand-off, 2 threads",
        p50(&raw),
        "runtime, 2 PEs of one node",
        p50(&smp),
        p50(&smp) / p50(&raw),
        "runtime, 2 nodes of the local layer",
        p50(&two_nodes)
    ));

    converse::input::out_line(
        "\n== Worker to worker across two processes, one-way p50 (us) and MB/s",
    );
    converse::input::out_line(&format!(
        "{:>6} | {:>9} | {:>11} | {:>11} | {:>6} | {:>10} | {:>10}",
        "layer", "size", "ppn 1 us", "ppn 2 us", "ratio", "ppn 1 MB/s", "ppn 2 MB/s"
    ));
    let sizes = [8, 1 << 20];
    for layer in layers {
        let one = pingpong::across_nodes(layer, &sizes, iters, 1)
            .with_context(|| format!("{layer} at ++ppn 1"))?;
        let two = pingpong::across_nodes(layer, &sizes, iters, 2)
            .with_context(|| format!("{layer} at ++ppn 2"))?;
        for (a, b) in one.iter().zip(&two) {
            converse::input::out_line(&format!(
                "{layer:>6} | {:>9} | {:>11.3} | {:>11.3} | {:>6.2} | {:>10.1} | {:>10.1}",
                a.size,
                a.p50_ns as f64 / 1e3,
                b.p50_ns as f64 / 1e3,
                b.p50_ns as f64 / a.p50_ns.max(1) as f64,
                a.mb_per_s(),
                b.mb_per_s()
            ));
        }
    }

    converse::input::out_line(&format!(
        "\n== Message rate: K PEs of one process, each sending {messages} 8 B messages to the next"
    ));
    converse::input::out_line(&format!(
        "{:>3} | {:>16} | {:>16} | {:>6}",
        "K", "runtime msgs/s", "raw msgs/s", "ratio"
    ));
    for &k in ks.iter().filter(|&&k| k > 0) {
        let rt_rate = runtime_rate(k, messages)?;
        let raw_rate = raw_rate(k, messages);
        converse::input::out_line(&format!(
            "{k:>3} | {rt_rate:>16.0} | {raw_rate:>16.0} | {:>6.2}",
            rt_rate / raw_rate
        ));
    }

    if let Some(layer) = layers.first() {
        converse::input::out_line(&format!(
            "\n== Start-up of a trivial 8-PE job on {layer} (median of 5, ms)"
        ));
        let me = std::env::current_exe()?;
        let charmrun = pingpong::charmrun_beside(&me)?;
        let time = |ppn: &str| {
            crate::startup::median(5, || {
                let t = Instant::now();
                let st = std::process::Command::new(&charmrun)
                    .args(["+p8", "++quiet", "++ppn", ppn])
                    .arg(&me)
                    .args(["pe-noop", "+machine", layer, "+quiet"])
                    .stdout(std::process::Stdio::null())
                    .status()?;
                anyhow::ensure!(st.success(), "trivial job at ++ppn {ppn} failed: {st}");
                Ok(t.elapsed().as_secs_f64() * 1e3)
            })
        };
        let (one, four) = (time("1")?, time("4")?);
        converse::input::out_line(&format!(
            "   ++ppn 1 (8 processes): {one:.1}\n   ++ppn 4 (2 processes): {four:.1}"
        ));
    }
    converse::input::out_line(&format!(
        "\n({iters} timed round trips per ping-pong size after {w} warm-up)"
    ));
    Ok(())
}

/// Ping-pong of `size`-byte buffers between this thread and an echo thread through two
/// `SegQueue`s, both spinning: the floor under a hand-off between two PEs of one process.
fn raw_handoff(size: usize, iters: u64, warmup: u64) -> anyhow::Result<Row> {
    let (to_b, to_a) = (
        Arc::new(SegQueue::<Vec<u8>>::new()),
        Arc::new(SegQueue::new()),
    );
    let total = iters + warmup;
    let (b_in, a_out) = (to_b.clone(), to_a.clone());
    let echo = std::thread::spawn(move || {
        for _ in 0..total {
            let m = loop {
                match b_in.pop() {
                    Some(m) => break m,
                    None => std::hint::spin_loop(),
                }
            };
            a_out.push(m);
        }
    });
    let mut h = histogram()?;
    let mut buf = vec![0u8; size];
    for i in 0..total {
        let t = Instant::now();
        to_b.push(buf);
        buf = loop {
            match to_a.pop() {
                Some(m) => break m,
                None => std::hint::spin_loop(),
            }
        };
        if i >= warmup {
            h.record((t.elapsed().as_nanos() as u64 / 2).max(1))?;
        }
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))?;
    Ok(Row::from_hist("raw-segqueue", size, &h))
}

/// K PEs of one in-process node, each sending `n` messages to the next PE (itself when K is
/// 1) and receiving as many: messages per second over the whole node.
fn runtime_rate(k: usize, n: u64) -> anyhow::Result<f64> {
    let p = format!("+p{k}");
    let ppn = k.to_string();
    let rt = Runtime::from_args(["bench", &p, "+ppn", &ppn, "+quiet", "+machine", "local"])?;
    let secs = Mutex::new(0.0f64);
    rt.run(|pe| {
        let got = Rc::new(Cell::new(0u64));
        let g = got.clone();
        let sink = pe.register("sink", move |_, _| g.set(g.get() + 1));
        pe.barrier();
        let t = Instant::now();
        let next = (pe.my_pe() + 1) % pe.num_pes();
        for _ in 0..n {
            pe.send(next, sink, &[0u8; 8]);
        }
        pe.run_until(|_| got.get() >= n);
        pe.barrier();
        if pe.my_pe() == 0 {
            if let Ok(mut s) = secs.lock() {
                *s = t.elapsed().as_secs_f64();
            }
            pe.exit(0);
        }
    })?;
    let secs = secs.into_inner().unwrap_or(0.0);
    Ok((k as u64 * n) as f64 / secs.max(1e-9))
}

/// K raw threads, each pushing `n` freshly allocated 8-byte buffers to the next thread's
/// `SegQueue` and draining its own (calling a boxed function per buffer).
fn raw_rate(k: usize, n: u64) -> f64 {
    let queues: Arc<Vec<SegQueue<Vec<u8>>>> = Arc::new((0..k).map(|_| SegQueue::new()).collect());
    let go = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..k)
        .map(|i| {
            let (q, go) = (queues.clone(), go.clone());
            std::thread::spawn(move || {
                let handler: Box<dyn Fn(Vec<u8>)> = Box::new(|m| {
                    std::hint::black_box(&m);
                });
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                let (mut sent, mut got) = (0u64, 0u64);
                while sent < n || got < n {
                    if sent < n {
                        q[(i + 1) % k].push(std::hint::black_box(vec![0u8; 8]));
                        sent += 1;
                    }
                    while let Some(m) = q[i].pop() {
                        handler(m);
                        got += 1;
                    }
                }
            })
        })
        .collect();
    let t = Instant::now();
    go.store(true, Ordering::Release);
    for th in threads {
        let _ = th.join();
    }
    (k as u64 * n) as f64 / t.elapsed().as_secs_f64().max(1e-9)
}
