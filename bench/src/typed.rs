//! `bench typed`: a ping-pong of one plain-old-data struct (a sequence number and three
//! `f64`s, 32 bytes) in the same job three ways, alternating per iteration so they share the
//! machine's speed state: **bytes**, encoded and decoded by hand with `to_le_bytes` /
//! `from_le_bytes` through the byte API (the baseline: what a program wrote before typed
//! messages); **pod**, the typed API with the `Pod` codec; **serde**, the typed API with the
//! `Serde` codec (postcard). Each is a round trip timed on PE 0, halved.

use crate::pingpong;
use crate::report::{self, histogram, Row};
use converse::typed::{Pod, Serde, Typed};
use converse::{HandlerId, Pe, Runtime};
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

const KINDS: [&str; 3] = ["bytes", "pod", "serde"];

/// The ball: what a physics code would send (a step and a position).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    bytemuck::Pod,
    bytemuck::Zeroable,
    serde::Serialize,
    serde::Deserialize,
)]
#[repr(C)]
struct Ball {
    seq: u64,
    x: f64,
    y: f64,
    z: f64,
}

/// The ball's bytes by hand, as the byte API's programs write them.
fn encode(b: &Ball) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&b.seq.to_le_bytes());
    out[8..16].copy_from_slice(&b.x.to_le_bytes());
    out[16..24].copy_from_slice(&b.y.to_le_bytes());
    out[24..].copy_from_slice(&b.z.to_le_bytes());
    out
}

fn decode(p: &[u8]) -> Option<Ball> {
    let w = |i: usize| -> Option<[u8; 8]> { p.get(i * 8..i * 8 + 8)?.try_into().ok() };
    Some(Ball {
        seq: u64::from_le_bytes(w(0)?),
        x: f64::from_le_bytes(w(1)?),
        y: f64::from_le_bytes(w(2)?),
        z: f64::from_le_bytes(w(3)?),
    })
}

/// The handlers of both PEs: each kind's ball goes to PE 1 and comes back to PE 0, where
/// `back` says it did.
struct Handlers {
    bytes: HandlerId,
    pod: Typed<Pod<Ball>>,
    serde: Typed<Serde<Ball>>,
}

fn register(pe: &mut Pe, back: &Rc<Cell<u64>>) -> Handlers {
    // PE 0's returns: the sequence number seen.
    let b = back.clone();
    let bytes_back = pe.register("typed.bytes-back", move |_pe, m| {
        b.set(decode(m.payload()).map_or(0, |x| x.seq));
    });
    let b = back.clone();
    let pod_back = pe.register_typed::<Pod<Ball>, _>("typed.pod-back", move |_pe, x| b.set(x.seq));
    let b = back.clone();
    let serde_back =
        pe.register_typed::<Serde<Ball>, _>("typed.serde-back", move |_pe, x| b.set(x.seq));
    // PE 1's: answer with the ball, moved one step.
    let bytes = pe.register("typed.bytes", move |pe, m| {
        if let Some(mut x) = decode(m.payload()) {
            x.x += 1.0;
            pe.send(0, bytes_back, &encode(&x));
        }
    });
    let pod = pe.register_typed::<Pod<Ball>, _>("typed.pod", move |pe, mut x| {
        x.x += 1.0;
        pe.send_typed(0, pod_back, &x);
    });
    let serde = pe.register_typed::<Serde<Ball>, _>("typed.serde", move |pe, mut x| {
        x.x += 1.0;
        pe.send_typed(0, serde_back, &x);
    });
    Handlers { bytes, pod, serde }
}

/// The job: PE 0 times `iters` round trips of each kind. PE 0's rows.
pub(crate) fn job(rt: Runtime, iters: u64) -> anyhow::Result<Vec<Row>> {
    let result = Mutex::new(Vec::new());
    let code = rt.run(|pe| {
        let back = Rc::new(Cell::new(0u64));
        let h = register(pe, &back);
        pe.barrier();
        if pe.my_pe() != 0 {
            return;
        }
        let mut hists: Vec<_> = (0..3)
            .map(|_| histogram().unwrap_or_else(|e| pe.abort(&e.to_string())))
            .collect();
        let mut seq = 0u64;
        for i in 0..iters + pingpong::warmup(iters) {
            for k in 0..3 {
                // Rotated, so no kind always runs right after another.
                let kind = (k + i as usize) % 3;
                seq += 1;
                let ball = Ball {
                    seq,
                    x: seq as f64,
                    y: 0.5,
                    z: -0.5,
                };
                let t = Instant::now();
                match kind {
                    0 => pe.send(1, h.bytes, &encode(&ball)),
                    1 => pe.send_typed(1, h.pod, &ball),
                    _ => pe.send_typed(1, h.serde, &ball),
                }
                let b = back.clone();
                pe.run_until(|_| b.get() == seq);
                if i >= pingpong::warmup(iters) {
                    hists[kind].saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
                }
            }
        }
        let rows: Vec<Row> = hists
            .iter()
            .enumerate()
            .map(|(k, hist)| Row::from_hist(KINDS[k], 32, hist))
            .collect();
        if let Ok(mut r) = result.lock() {
            *r = rows;
        }
        pe.exit(0);
    })?;
    anyhow::ensure!(code == 0, "the typed job exited with {code}");
    Ok(result.into_inner().unwrap_or_default())
}

/// `bench pe-typed`: one PE of a launched job; PE 0 writes the CSV.
pub(crate) fn pe_main(rt: Runtime, iters: u64, csv: &Path) -> anyhow::Result<()> {
    let rows = job(rt, iters)?;
    if !rows.is_empty() {
        report::write_csv(csv, &rows.iter().collect::<Vec<_>>())?;
    }
    Ok(())
}

fn on_layer(layer: &str, iters: u64) -> anyhow::Result<Vec<Row>> {
    if layer == "local" {
        let rt = Runtime::from_args(["bench", "+p2", "+machine", "local", "+quiet"])?;
        return job(rt, iters);
    }
    pingpong::run_job(layer, &[32], iters, "pe-typed", &[], &[], 2, 1)
}

pub(crate) fn run(layers: &[String], iters: u64, rounds: u16) -> anyhow::Result<()> {
    converse::input::out_line(&format!(
        "typed: a 32-byte struct ping-pong, one way, µs p50 (median of {rounds} rounds of \
         {iters}, range); bytes: encoded by hand through the byte API (the baseline); pod and \
         serde: the typed API's codecs"
    ));
    converse::input::out_line(&format!(
        "{:>7} | {:>18} | {:>18} | {:>18} | {:>9} {:>11}",
        "layer", "bytes", "pod", "serde", "pod/bytes", "serde/bytes"
    ));
    for layer in layers {
        let mut got: Vec<Vec<Row>> = Vec::new();
        for _ in 0..rounds {
            got.push(on_layer(layer, iters)?);
        }
        let cell = |kind: &str| report::p50_over_rounds(&got, kind, None);
        let [b, p, s] = KINDS.map(cell);
        let show = |(a, lo, hi): (f64, f64, f64)| format!("{a:.3} ({lo:.3}-{hi:.3})");
        converse::input::out_line(&format!(
            "{layer:>7} | {:>18} | {:>18} | {:>18} | {:>8.2}x {:>10.2}x",
            show(b),
            show(p),
            show(s),
            p.0 / b.0,
            s.0 / b.0
        ));
    }
    Ok(())
}
