//! `bench flow`: items per second through FastFlow's blocks (converse-flow) — a 4-stage
//! pipeline (source, two pass-through stages, sink, one per PE) and a farm (source, K
//! workers, sink) — beside, in the same run:
//! - inside one process, a raw crossbeam pipeline of the same shape (four threads, bounded
//!   channels of the same window, the item an owned `Vec<u8>`): the limit of a pipeline;
//! - on every layer, the runtime's own message rate along the same path: the items sent from
//!   PE 0 through PEs 1 and 2 to PE 3 as plain runtime messages, under one credit window
//!   (the pipeline's shape, hand-written, with none of the flow's accounting).
//!
//! Each figure is the sink's rate from its first item to its last (the start-up of the job
//! is not in it); a job per kind, size and round, the kinds rotated each round.

use crate::pingpong;
use crate::report::{self, Row};
use converse::{Message, Runtime};
use converse_flow::{map, pipeline, source, stage, Ctx, Farm, Flow, Item, Node, Source};
use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

const KINDS: [&str; 4] = ["pipe", "farm", "stream", "crossbeam"];
/// The channels' window in items, the flow's default and the baselines'.
const WINDOW: u32 = converse_flow::DEFAULT_WINDOW;

/// The baselines' window for items of `size` bytes: the flow's default in items, or in
/// bytes, whichever is less (at least one item), so all three hold as much in flight.
fn window_for(size: usize) -> u32 {
    let by_bytes = converse_flow::DEFAULT_WINDOW_BYTES / size.max(1) as u64;
    (by_bytes.clamp(1, u64::from(WINDOW))) as u32
}

struct Src {
    left: u64,
    buf: Vec<u8>,
}

impl Source for Src {
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        for _ in 0..16 {
            if self.left == 0 || ctx.full() {
                break;
            }
            ctx.emit(&self.buf);
            self.left -= 1;
        }
        self.left > 0
    }
}

/// Times the stream from its first item to its last and writes the row.
struct Sink {
    what: &'static str,
    size: usize,
    items: u64,
    seen: u64,
    first: Option<Instant>,
    out: Out,
}

#[derive(Clone)]
enum Out {
    Shared(Arc<Mutex<Vec<Row>>>),
    Csv(std::path::PathBuf),
}

impl Out {
    fn put(&self, row: Row) {
        match self {
            Out::Shared(v) => {
                if let Ok(mut v) = v.lock() {
                    v.push(row);
                }
            }
            Out::Csv(p) => {
                if let Err(e) = report::write_csv(p, &[&row]) {
                    converse::input::error_line(&format!("bench flow: {e:#}"));
                }
            }
        }
    }
}

fn row(what: &str, size: usize, items: u64, first: Instant) -> Row {
    let per = first.elapsed().as_nanos() as f64 / items.saturating_sub(1).max(1) as f64;
    Row {
        what: what.into(),
        size,
        count: items,
        min_ns: per as u64,
        p50_ns: per as u64,
        p99_ns: per as u64,
        max_ns: per as u64,
        mean_ns: per,
    }
}

impl Node for Sink {
    fn svc(&mut self, _item: Item, _ctx: &mut Ctx<'_>) {
        self.seen += 1;
        let first = *self.first.get_or_insert_with(Instant::now);
        if self.seen == self.items {
            self.out.put(row(self.what, self.size, self.items, first));
        }
    }
}

/// One job of `kind` (`pipe`, `farm`, `stream`) with `items` items of `size` bytes.
fn job(rt: Runtime, kind: &'static str, size: usize, items: u64, out: &Out) -> anyhow::Result<()> {
    let code = rt.run(|pe| {
        let out = out.clone();
        let sink = move || Sink {
            what: kind,
            size,
            items,
            seen: 0,
            first: None,
            out,
        };
        let src = move || Src {
            left: items,
            buf: vec![7u8; size],
        };
        let pass = |name: &str| map(name, |item, ctx| ctx.emit_item(item));
        let flow = match kind {
            "pipe" => pipeline([
                source("src", src),
                pass("a"),
                pass("b"),
                stage("sink", sink),
            ]),
            "farm" => {
                let k = pe.num_pes();
                pipeline([
                    source("src", src),
                    Farm::new(k, |_| pass("work")).into(),
                    stage("sink", sink),
                ])
            }
            _ => return stream(pe, size, items, sink),
        };
        if let Err(e) = Flow::new(flow).start(pe) {
            pe.abort(&e.to_string());
        }
    })?;
    anyhow::ensure!(code == 0, "the {kind} job exited with {code}");
    Ok(())
}

/// The runtime's own rate along the same path: PE 0 sends each item to PE 1, each PE passes
/// it on (moving the message) to the next, the last PE takes it; a window of credits from the
/// last PE back to PE 0, given back every half window. The pipeline's shape in plain
/// messages, with no per-channel accounting.
fn stream(pe: &mut converse::Pe, size: usize, items: u64, sink: impl FnOnce() -> Sink) {
    let last = pe.num_pes() - 1;
    let window = window_for(size);
    let credit = Rc::new(Cell::new(0u32));
    let sent = Rc::new(Cell::new(0u64));
    let payload = vec![7u8; size];
    let (c, s) = (credit.clone(), sent.clone());
    let item_h = Rc::new(Cell::new(None));
    let ih = item_h.clone();
    let more = pe.register("bench-flow.credit", move |pe, m| {
        c.set(c.get() + m.arg0());
        if let Some(h) = ih.get() {
            while c.get() > 0 && s.get() < items {
                c.set(c.get() - 1);
                s.set(s.get() + 1);
                // A copy per item, as the flow's source makes (`Ctx::emit`).
                pe.send_msg(1.min(last), h, Message::from_payload(&payload));
            }
        }
    });
    let sk = RefCell::new(sink());
    let taken = Cell::new(0u32);
    let h = pe.register("bench-flow.item", move |pe, m| {
        let me = pe.my_pe();
        if me < last {
            pe.forward(me + 1, m);
            return;
        }
        let mut sk = sk.borrow_mut();
        sk.seen += 1;
        let first = *sk.first.get_or_insert_with(Instant::now);
        taken.set(taken.get() + 1);
        if taken.get() >= (window / 2).max(1) {
            let mut m = Message::new(0).with_priority(-1);
            m.set_arg0(taken.get());
            taken.set(0);
            pe.send_msg(0, more, m);
        }
        if sk.seen == sk.items {
            sk.out.put(row(sk.what, sk.size, sk.items, first));
            pe.exit(0);
        }
    });
    item_h.set(Some(h));
    if pe.my_pe() == 0 {
        // The first window, as a credit message of its own.
        let mut m = Message::new(0);
        m.set_arg0(window);
        pe.send_msg(0, more, m);
    }
}

/// The raw pipeline: four threads, bounded channels of the window, items as owned vectors.
fn crossbeam_pipe(size: usize, items: u64) -> Row {
    use crossbeam_channel::bounded;
    let w = window_for(size) as usize;
    let (tx0, rx0) = bounded::<Vec<u8>>(w);
    let (tx1, rx1) = bounded::<Vec<u8>>(w);
    let (tx2, rx2) = bounded::<Vec<u8>>(w);
    std::thread::scope(|sc| {
        sc.spawn(move || {
            let buf = vec![7u8; size];
            for _ in 0..items {
                if tx0.send(buf.clone()).is_err() {
                    break;
                }
            }
        });
        for (rx, tx) in [(rx0, tx1), (rx1, tx2)] {
            sc.spawn(move || {
                for v in rx.iter() {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            });
        }
        let sink = sc.spawn(move || {
            let mut first = None;
            let mut n = 0u64;
            for _v in rx2.iter() {
                first.get_or_insert_with(Instant::now);
                n += 1;
            }
            row("crossbeam", size, n, first.unwrap_or_else(Instant::now))
        });
        sink.join()
            .unwrap_or_else(|_| row("crossbeam", size, 0, Instant::now()))
    })
}

/// `bench pe-flow`: one PE of a launched job; the sink's PE writes the CSV.
pub(crate) fn pe_main(
    rt: Runtime,
    kind: &str,
    size: usize,
    items: u64,
    csv: &Path,
) -> anyhow::Result<()> {
    let kind = KINDS
        .iter()
        .copied()
        .find(|k| *k == kind)
        .ok_or_else(|| anyhow::anyhow!("bench pe-flow: unknown kind {kind}"))?;
    job(rt, kind, size, items, &Out::Csv(csv.to_path_buf()))
}

fn once(
    layer: &str,
    kind: &'static str,
    size: usize,
    items: u64,
    set: &[String],
) -> anyhow::Result<Row> {
    if kind == "crossbeam" {
        return Ok(crossbeam_pipe(size, items));
    }
    let rows = if layer == "local" {
        let shared = Arc::new(Mutex::new(Vec::new()));
        let mut args: Vec<&str> = vec!["bench", "+p4", "+ppn", "4", "+machine", "local", "+quiet"];
        args.extend(set.iter().map(String::as_str));
        let rt = Runtime::from_args(args)?;
        job(rt, kind, size, items, &Out::Shared(shared.clone()))?;
        let v = shared
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        v
    } else {
        let mut extra = vec!["--kind", kind];
        extra.extend(set.iter().map(String::as_str));
        pingpong::run_job(layer, &[size], items, "pe-flow", &[], &extra, 4, 1)?
    };
    rows.into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the {kind} job on {layer} wrote no figure"))
}

pub(crate) fn run(
    layers: &[String],
    sizes: &[usize],
    items: u64,
    rounds: u16,
    set: &[String],
) -> anyhow::Result<()> {
    converse::input::out_line(&format!(
        "flow: thousands of items/s at the sink, first to last item (median of {rounds} rounds of {items} items or 2 GiB, range); \
         pipe = 4 stages on 4 PEs, farm = source, {} workers, sink; stream = plain runtime messages along the pipe's path (PE 0 -> 1 -> 2 -> 3) under one window ({WINDOW} items or {} MiB); \
         crossbeam = the same pipeline as 4 threads and bounded channels of that window",
        4,
        converse_flow::DEFAULT_WINDOW_BYTES >> 20
    ));
    converse::input::out_line(&format!(
        "{:>7} {:>8} | {:>20} | {:>20} | {:>20} | {:>20} | {:>9}",
        "layer", "bytes", "pipe", "farm", "stream", "crossbeam", "pipe/raw"
    ));
    for layer in layers {
        let kinds: Vec<&'static str> = KINDS
            .iter()
            .copied()
            .filter(|k| *k != "crossbeam" || layer == "local")
            .collect();
        for &size in sizes {
            // At most 2 GiB through a job: large items need fewer to be timed.
            let items = items.min((1u64 << 31) / size.max(1) as u64).max(500);
            let mut got: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
            for r in 0..rounds as usize {
                for i in 0..kinds.len() {
                    let kind = kinds[(i + r) % kinds.len()];
                    let row = once(layer, kind, size, items, set)?;
                    let k = KINDS.iter().position(|x| *x == kind).unwrap_or(0);
                    got[k].push(1e6 / row.mean_ns.max(1e-3));
                }
            }
            let cell = |v: &Vec<f64>| -> (f64, f64, f64) {
                let mut v = v.clone();
                v.sort_by(f64::total_cmp);
                if v.is_empty() {
                    return (f64::NAN, f64::NAN, f64::NAN);
                }
                (v[v.len() / 2], v[0], v[v.len() - 1])
            };
            let c: Vec<(f64, f64, f64)> = got.iter().map(cell).collect();
            let show = |(a, lo, hi): (f64, f64, f64)| {
                if a.is_nan() {
                    "-".to_owned()
                } else {
                    let d = if a < 10.0 { 2 } else { 0 };
                    format!("{a:.d$} ({lo:.d$}-{hi:.d$})")
                }
            };
            // The raw figure: crossbeam inside a process, the runtime's stream across.
            let raw = if layer == "local" { c[3].0 } else { c[2].0 };
            converse::input::out_line(&format!(
                "{layer:>7} {size:>8} | {:>20} | {:>20} | {:>20} | {:>20} | {:>8.2}x",
                show(c[0]),
                show(c[1]),
                show(c[2]),
                show(c[3]),
                raw / c[0].0
            ));
        }
    }
    Ok(())
}
