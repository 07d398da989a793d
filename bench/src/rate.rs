//! The scheduler's local message rate on one PE: how many messages a PE can send to itself and
//! dispatch per second. Two shapes: a chain (each handler sends the next message, one in
//! flight) and a burst (all queued first, then drained). The baseline does the least the same
//! work needs: allocate a buffer, push it on a queue, pop it, call a boxed closure.

use crate::report::{self, Row};
use converse::{Message, Runtime};
use std::cell::Cell;
use std::collections::VecDeque;
use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

/// A row of `n` messages in `secs`: each figure the mean time per message.
pub(crate) fn row(what: &str, n: u64, secs: f64) -> Row {
    let ns = secs * 1e9 / n as f64;
    Row {
        what: what.into(),
        size: 8,
        count: n,
        min_ns: ns as u64,
        p50_ns: ns as u64,
        p99_ns: ns as u64,
        max_ns: ns as u64,
        mean_ns: ns,
    }
}

/// Allocate, queue, pop, call: the floor under a send-to-self-and-dispatch.
fn baseline(n: u64) -> f64 {
    let mut q: VecDeque<Vec<u8>> = VecDeque::new();
    let seen = Rc::new(Cell::new(0u64));
    let s = seen.clone();
    let handler: Box<dyn Fn(Vec<u8>)> = Box::new(move |m| {
        std::hint::black_box(&m);
        s.set(s.get() + 1)
    });
    let t = Instant::now();
    q.push_back(std::hint::black_box(vec![0u8; 8]));
    while let Some(m) = q.pop_front() {
        handler(m);
        if seen.get() < n {
            q.push_back(std::hint::black_box(vec![0u8; 8]));
        }
    }
    t.elapsed().as_secs_f64()
}

pub(crate) fn run(n: u64, csv: Option<&Path>, plot: Option<&Path>) -> anyhow::Result<()> {
    let base = baseline(n);
    let timings = Mutex::new((0.0f64, 0.0f64));
    let rt = Runtime::from_args(["bench", "+p1", "+quiet"])?;
    rt.run(|pe| {
        let left = Rc::new(Cell::new(n));
        let l = left.clone();
        let chain = pe.register("chain", move |pe, msg| {
            l.set(l.get() - 1);
            if l.get() > 0 {
                // A copying send, as most applications send: allocation included.
                let mut next = Message::from_payload(msg.payload());
                next.set_handler(msg.handler());
                pe.forward(0, next);
            }
        });
        let drained = Rc::new(Cell::new(0u64));
        let d = drained.clone();
        let burst = pe.register("burst", move |_, _| d.set(d.get() + 1));
        pe.barrier();

        let t = Instant::now();
        pe.send(0, chain, &[0u8; 8]);
        pe.run_until(|_| left.get() == 0);
        let chain_secs = t.elapsed().as_secs_f64();

        let t = Instant::now();
        for _ in 0..n {
            pe.send(0, burst, &[0u8; 8]);
        }
        pe.run_until(|_| drained.get() == n);
        let burst_secs = t.elapsed().as_secs_f64();

        if let Ok(mut s) = timings.lock() {
            *s = (chain_secs, burst_secs);
        }
        pe.exit(0);
    })?;
    let (chain, burst) = timings.lock().map(|s| *s).unwrap_or((0.0, 0.0));
    let rows = [
        row("runtime-chain", n, chain),
        row("runtime-burst", n, burst),
        row("raw-alloc-queue-call", n, base),
    ];
    converse::input::out_line(&format!(
        "{:>22} {:>12} {:>14}",
        "", "ns/message", "messages/s"
    ));
    for r in &rows {
        converse::input::out_line(&format!(
            "{:>22} {:>12.1} {:>14.0}",
            r.what,
            r.mean_ns,
            1e9 / r.mean_ns.max(1e-9)
        ));
    }
    converse::input::out_line(&format!(
        "(send to self + dispatch on one PE, {n} messages of 8 bytes each)"
    ));
    if let Some(p) = csv {
        report::write_csv(p, &rows.iter().collect::<Vec<_>>())?;
    }
    if let Some(p) = plot {
        let series = rows
            .iter()
            .map(|r| crate::plot::Series {
                name: r.what.clone(),
                points: vec![(0.0, 1e9 / r.mean_ns.max(1e-9))],
            })
            .collect();
        let panel = crate::plot::Panel {
            title: format!("send to self + dispatch, {n} messages of 8 B"),
            x_label: String::new(),
            y_label: "messages/s".into(),
            kind: crate::plot::Kind::Bars,
            series,
        };
        crate::plot::write_svg(p, "message rate on one PE", &[panel])?;
    }
    Ok(())
}
