//! `bench onesided`: a get and a put of N bytes beside the same N bytes sent as a message, on
//! each layer, in the same job: each operation moves N bytes one way and an empty message the
//! other (the message is answered by an empty one; a get's request is empty, a put's answer
//! is), and is timed from its start to its completion on PE 0. The three alternate per size
//! and round, so the machine's speed state is the same for all three.
//!
//! Where the layer reaches the other process's memory (si), gets and puts from
//! `onesided.direct_get_kib` and `onesided.direct_put_kib` on are copied directly
//! (runtime/src/onesided/direct.rs); the same job is run again with both settings above
//! every size, so the table shows both paths
//! from the same round, and beside them the raw mechanism of the layer in the same round:
//! the copy-once ping-pong's one-way time (`process_vm_readv`, si) or a raw TCP stream's
//! (tcp), each N bytes one way, as a get's bytes go.

use crate::pingpong;
use crate::report::{self, histogram, Row};
use converse::{Message, Pe, RegionHandle, Runtime};
use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

const KINDS: [&str; 3] = ["message", "get", "put"];

/// Time one operation of `kind` and `size` on PE 0, against PE 1's region `h`.
fn once(
    pe: &mut Pe,
    kind: usize,
    data: &[u8],
    h: &RegionHandle,
    ball: converse::HandlerId,
    back: &Rc<Cell<bool>>,
    spare: &Rc<RefCell<Option<Vec<u8>>>>,
) -> u64 {
    let size = data.len();
    let done = Rc::new(Cell::new(false));
    let t = Instant::now();
    match kind {
        0 => {
            back.set(false);
            // The program's bytes copied into the message, as a put copies them: a fresh
            // zeroed message would be pages never touched, which cost nothing to read.
            pe.send_msg(1, ball, Message::from_payload(data));
            let b = back.clone();
            pe.run_until(|_| b.get());
        }
        1 => {
            let d = done.clone();
            pe.get(h, 0..size as u64, move |_pe, r| {
                assert!(r.is_ok_and(|b| b.len() == size), "a get failed");
                d.set(true);
            });
            let d = done.clone();
            pe.run_until(|_| d.get());
        }
        _ => {
            let d = done.clone();
            // The program's buffer goes into the put and comes back with its completion, to
            // be used again: as a program that puts from one buffer repeatedly would.
            let mut buf = spare.borrow_mut().take().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(data);
            let s = spare.clone();
            pe.put(h, 0, buf, None, move |_pe, r| {
                match r {
                    Ok(b) => *s.borrow_mut() = Some(b),
                    Err(e) => panic!("a put failed: {e}"),
                }
                d.set(true);
            });
            let d = done.clone();
            pe.run_until(|_| d.get());
        }
    }
    t.elapsed().as_nanos() as u64
}

/// The job: PE 1 registers a region of the largest size and answers messages with an empty
/// one; PE 0 times `iters` of each kind per size. PE 0's rows (what: the kind).
pub(crate) fn job(rt: Runtime, sizes: &[usize], iters: u64) -> anyhow::Result<Vec<Row>> {
    let result = Mutex::new(Vec::new());
    let max = sizes.iter().copied().max().unwrap_or(0);
    let code = rt.run(|pe| {
        let handle: Rc<RefCell<Option<RegionHandle>>> = Rc::default();
        let h2 = handle.clone();
        let got = pe.register("onesided.handle", move |_pe, m| {
            *h2.borrow_mut() = RegionHandle::from_bytes(m.payload()).ok();
        });
        let back = Rc::new(Cell::new(false));
        let b2 = back.clone();
        let answer = pe.register("onesided.answer", move |_pe, _m| b2.set(true));
        let ball = pe.register("onesided.ball", move |pe, _m| pe.send(0, answer, b""));
        if pe.my_pe() == 1 {
            let r = pe.register_region(vec![(0..max).map(|i| (i % 253) as u8).collect()]);
            let h = pe.region_handle(&r);
            pe.send(0, got, &h.to_bytes());
            // Dropped, it stays registered for the whole job (regions deregister only by
            // `deregister_region`).
            let _registered = r;
        }
        if pe.my_pe() != 0 {
            return;
        }
        let hh = handle.clone();
        pe.run_until(|_| hh.borrow().is_some());
        let Some(h) = *handle.borrow() else { return };
        let mut rows = Vec::new();
        let data: Vec<u8> = (0..max).map(|i| (i % 251) as u8).collect();
        let spare: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
        for &size in sizes {
            let mut hists: Vec<_> = (0..3)
                .map(|_| histogram().unwrap_or_else(|e| pe.abort(&e.to_string())))
                .collect();
            for i in 0..iters + pingpong::warmup(iters) {
                for k in 0..3 {
                    // Rotated, so no kind always runs right after another.
                    let kind = (k + i as usize) % 3;
                    let ns = once(pe, kind, &data[..size], &h, ball, &back, &spare);
                    if i >= pingpong::warmup(iters) {
                        hists[kind].saturating_record(ns.max(1));
                    }
                }
            }
            for (k, hist) in hists.iter().enumerate() {
                rows.push(Row::from_hist(KINDS[k], size, hist));
            }
        }
        if let Ok(mut r) = result.lock() {
            *r = rows;
        }
        pe.exit(0);
    })?;
    anyhow::ensure!(code == 0, "the one-sided job exited with {code}");
    Ok(result.into_inner().unwrap_or_default())
}

/// `bench pe-onesided`: one PE of a launched job; PE 0 writes the CSV.
pub(crate) fn pe_main(rt: Runtime, sizes: &[usize], iters: u64, csv: &Path) -> anyhow::Result<()> {
    let rows = job(rt, sizes, iters)?;
    if !rows.is_empty() {
        report::write_csv(csv, &rows.iter().collect::<Vec<_>>())?;
    }
    Ok(())
}

/// Every threshold above every size: the message path only.
const MESSAGES_ONLY: [&str; 6] = [
    "+set",
    "onesided.direct_get_kib=4294967296",
    "+set",
    "onesided.direct_put_kib=4294967296",
    "+set",
    "onesided.shared_put_kib=4294967296",
];

/// One job on `layer`; with `messages_only`, its transfers kept on messages. PE 0's rows, the
/// message path's kinds renamed `get-msg` and `put-msg`.
fn on_layer(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    messages_only: bool,
) -> anyhow::Result<Vec<Row>> {
    let set: &[&str] = if messages_only { &MESSAGES_ONLY } else { &[] };
    let mut rows = if layer == "local" {
        let mut args = vec!["bench", "+p2", "+machine", "local", "+quiet"];
        args.extend_from_slice(set);
        job(Runtime::from_args(args)?, sizes, iters)?
    } else {
        pingpong::run_job(layer, sizes, iters, "pe-onesided", &[], set, 2, 1)?
    };
    if messages_only {
        rows.retain(|r| r.what != "message");
        for r in &mut rows {
            r.what = format!("{}-msg", r.what);
        }
    }
    Ok(rows)
}

/// The layer's raw mechanism in this round, N bytes one way (`raw` rows), if it has one here.
fn raw(layer: &str, sizes: &[usize], iters: u64) -> anyhow::Result<Vec<Row>> {
    let warm = pingpong::warmup(iters);
    let mut rows = match layer {
        "si" => crate::raw::cma_pingpong(sizes, iters, warm)?,
        "tcp" => crate::raw::tcp_pingpong(sizes, iters, warm)?,
        _ => Vec::new(),
    };
    for r in &mut rows {
        r.what = "raw".into();
    }
    Ok(rows)
}

pub(crate) fn run(
    layers: &[String],
    sizes: &[usize],
    iters: u64,
    rounds: u16,
) -> anyhow::Result<()> {
    converse::input::out_line(&format!(
        "onesided: N bytes one way and an empty message back, from start to completion on PE 0, \
         µs p50 (median of {rounds} rounds of {iters}, range); get and put as the runtime \
         chooses (direct from onesided.direct_get_kib/direct_put_kib where the layer can), get-msg and put-msg kept \
         on messages; raw: the layer's mechanism, N bytes one way (si: process_vm_readv \
         ping-pong; tcp: raw TCP stream)"
    ));
    converse::input::out_line(&format!(
        "{:>7} {:>9} | {:>20} | {:>20} | {:>20} | {:>20} | {:>20} | {:>20} | {:>7} {:>7} {:>7}",
        "layer",
        "bytes",
        "message",
        "get",
        "put",
        "get-msg",
        "put-msg",
        "raw",
        "get/msg",
        "put/msg",
        "get/raw"
    ));
    for layer in layers {
        let mut got: Vec<Vec<Row>> = Vec::new();
        for _ in 0..rounds {
            // The three measurements of a round back to back, so they share its speed state.
            let mut round = on_layer(layer, sizes, iters, false)?;
            round.extend(on_layer(layer, sizes, iters, true)?);
            round.extend(raw(layer, sizes, iters)?);
            got.push(round);
        }
        for &size in sizes {
            let cell = |kind: &str| report::p50_over_rounds(&got, kind, Some(size));
            let [m, g, p, gm, pm, r] =
                ["message", "get", "put", "get-msg", "put-msg", "raw"].map(cell);
            let show = |(a, lo, hi): (f64, f64, f64)| {
                if a.is_nan() {
                    "-".to_string()
                } else {
                    format!("{a:.1} ({lo:.1}-{hi:.1})")
                }
            };
            converse::input::out_line(&format!(
                "{layer:>7} {size:>9} | {:>20} | {:>20} | {:>20} | {:>20} | {:>20} | {:>20} | {:>6.2}x {:>6.2}x {:>6.2}x",
                show(m),
                show(g),
                show(p),
                show(gm),
                show(pm),
                show(r),
                g.0 / m.0,
                p.0 / m.0,
                g.0 / r.0
            ));
        }
    }
    Ok(())
}
