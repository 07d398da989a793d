//! Whole flows in one process (the in-process layer, several PEs): what each building block
//! delivers, end of stream, ordering, bounded channels, and the errors of a bad shape or bad
//! groups.

use converse_flow::{
    map, pipeline, source, stage, AllToAll, Block, Ctx, Farm, Flow, Groups, Item, Node, Source,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Numbers 1..=n, a few per call.
struct Numbers {
    next: u64,
    n: u64,
    produced: Option<Arc<AtomicU64>>,
}

impl Source for Numbers {
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        for _ in 0..4 {
            if self.next > self.n {
                return false;
            }
            ctx.emit_u64(self.next);
            if let Some(p) = &self.produced {
                p.fetch_add(1, Ordering::SeqCst);
            }
            self.next += 1;
        }
        self.next <= self.n
    }
}

fn numbers(n: u64) -> Block {
    source("numbers", move || Numbers {
        next: 1,
        n,
        produced: None,
    })
}

/// Collects every item (as u64) and counts `end` calls.
struct Collect {
    out: Arc<Mutex<Vec<u64>>>,
    ends: Arc<AtomicUsize>,
}

impl Node for Collect {
    fn svc(&mut self, item: Item, _ctx: &mut Ctx<'_>) {
        if let Ok(mut v) = self.out.lock() {
            v.push(item.u64().unwrap_or(u64::MAX));
        }
    }
    fn end(&mut self, _ctx: &mut Ctx<'_>) {
        self.ends.fetch_add(1, Ordering::SeqCst);
    }
}

struct Sink {
    out: Arc<Mutex<Vec<u64>>>,
    ends: Arc<AtomicUsize>,
}

impl Sink {
    fn new() -> Sink {
        Sink {
            out: Arc::default(),
            ends: Arc::default(),
        }
    }
    fn block(&self) -> Block {
        let (out, ends) = (self.out.clone(), self.ends.clone());
        stage("sink", move || Collect { out, ends })
    }
    fn items(&self) -> Vec<u64> {
        self.out.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Run `build()` as a flow on `pes` PEs of the in-process layer; the job's exit code.
fn run(pes: usize, build: impl Fn() -> Flow + Sync) -> i32 {
    converse::Runtime::builder()
        .pes(pes)
        .layer("local")
        .quiet(true)
        .build()
        .and_then(|rt| {
            rt.run(move |pe| {
                if let Err(e) = build().start(pe) {
                    if pe.my_pe() == 0 {
                        eprintln!("{e}");
                    }
                    pe.exit(2);
                }
            })
        })
        .unwrap_or(-1)
}

fn square(_: usize) -> Block {
    map("square", |item, ctx| {
        let x = item.u64().unwrap_or(0);
        ctx.emit_u64(x * x);
    })
}

#[test]
fn a_farm_squares_every_number_once() {
    let sink = Sink::new();
    let code = run(4, || {
        Flow::new(pipeline([
            numbers(5000),
            Farm::new(3, square).into(),
            sink.block(),
        ]))
    });
    assert_eq!(code, 0);
    let mut got = sink.items();
    got.sort_unstable();
    let want: Vec<u64> = (1..=5000u64).map(|x| x * x).collect();
    assert_eq!(got, want);
    assert_eq!(
        sink.ends.load(Ordering::SeqCst),
        1,
        "end ran once, after every worker ended"
    );
}

/// Workers that take a while on some items and give 0, 1 or 2 items for each.
fn uneven(_: usize) -> Block {
    map("uneven", |item, ctx| {
        let x = item.u64().unwrap_or(0);
        if x % 7 == 0 {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_micros(200) {
                std::hint::spin_loop();
            }
        }
        match x % 3 {
            0 => {}
            1 => ctx.emit_item(item),
            _ => {
                ctx.emit_u64(x * 1000);
                ctx.emit_u64(x * 1000 + 1);
            }
        }
    })
}

fn uneven_serial(n: u64) -> Vec<u64> {
    (1..=n)
        .flat_map(|x| match x % 3 {
            0 => vec![],
            1 => vec![x],
            _ => vec![x * 1000, x * 1000 + 1],
        })
        .collect()
}

#[test]
fn an_ordered_farm_delivers_in_input_order_whatever_its_workers_emit() {
    for on_demand in [false, true] {
        let sink = Sink::new();
        let code = run(4, || {
            let farm = Farm::new(3, uneven).ordered();
            let farm = if on_demand { farm.on_demand() } else { farm };
            Flow::new(pipeline([numbers(3000), farm.into(), sink.block()])).window(4)
        });
        assert_eq!(code, 0);
        assert_eq!(sink.items(), uneven_serial(3000), "on_demand {on_demand}");
    }
}

#[test]
fn an_ordered_farm_keeps_order_through_worker_pipelines_and_an_emitter() {
    let sink = Sink::new();
    let code = run(3, || {
        let farm = Farm::new(2, |i| {
            pipeline([
                uneven(i),
                map("plus", |item, ctx| {
                    let x = item.u64().unwrap_or(0);
                    if x % 5 != 0 {
                        ctx.emit_u64(x + 1);
                    }
                }),
            ])
        })
        .emitter(map("emitter", |item, ctx| ctx.emit_item(item)))
        .collector(map("collector", |item, ctx| ctx.emit_item(item)))
        .ordered();
        Flow::new(pipeline([numbers(2000), farm.into(), sink.block()])).window(2)
    });
    assert_eq!(code, 0);
    let want: Vec<u64> = uneven_serial(2000)
        .into_iter()
        .filter(|x| x % 5 != 0)
        .map(|x| x + 1)
        .collect();
    assert_eq!(sink.items(), want);
}

#[test]
fn an_all_to_all_routes_every_item_to_the_right_worker_its_function_names() {
    let seen: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let ends = Arc::new(AtomicUsize::new(0));
    let code = run(4, || {
        let (seen, ends) = (seen.clone(), ends.clone());
        let a2a = AllToAll::new(
            2,
            |_| map("left", |item, ctx| ctx.emit_item(item)),
            3,
            move |j| {
                let (seen, ends) = (seen.clone(), ends.clone());
                stage("right", move || Right { j, seen, ends })
            },
        )
        .route(|bytes, n| {
            let x = u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
            (x % n as u64) as usize
        });
        Flow::new(pipeline([numbers(900), a2a.into()]))
    });
    assert_eq!(code, 0);
    let mut got = seen.lock().map(|v| v.clone()).unwrap_or_default();
    got.sort_unstable_by_key(|&(_, x)| x);
    assert_eq!(got.len(), 900);
    for (k, &(j, x)) in got.iter().enumerate() {
        assert_eq!(x, k as u64 + 1);
        assert_eq!(j, (x % 3) as usize, "item {x} went to right[{j}]");
    }
    assert_eq!(
        ends.load(Ordering::SeqCst),
        3,
        "each right worker ended once"
    );
}

struct Right {
    j: usize,
    seen: Arc<Mutex<Vec<(usize, u64)>>>,
    ends: Arc<AtomicUsize>,
}

impl Node for Right {
    fn svc(&mut self, item: Item, _ctx: &mut Ctx<'_>) {
        if let Ok(mut v) = self.seen.lock() {
            v.push((self.j, item.u64().unwrap_or(0)));
        }
    }
    fn end(&mut self, _ctx: &mut Ctx<'_>) {
        self.ends.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn nested_blocks_compose_farms_of_pipelines_and_a_farm_inside_a_farm() {
    let sink = Sink::new();
    let code = run(4, || {
        let inner = |_: usize| -> Block {
            Farm::new(2, |_| {
                map("inner", |item, ctx| {
                    let x = item.u64().unwrap_or(0);
                    ctx.emit_u64(x + 1);
                })
            })
            .on_demand()
            .into()
        };
        let outer = Farm::new(2, move |i| pipeline([square(i), inner(i)]));
        Flow::new(pipeline([numbers(1000), outer.into(), sink.block()]))
    });
    assert_eq!(code, 0);
    let mut got = sink.items();
    got.sort_unstable();
    let want: Vec<u64> = (1..=1000u64).map(|x| x * x + 1).collect();
    assert_eq!(got, want);
}

/// A sink that takes its time (`pause` per item): the source may not get far ahead of it.
struct Slow {
    produced: Arc<AtomicU64>,
    taken: u64,
    worst: Arc<AtomicU64>,
    pause: std::time::Duration,
}

impl Node for Slow {
    fn svc(&mut self, _item: Item, _ctx: &mut Ctx<'_>) {
        self.taken += 1;
        let ahead = self
            .produced
            .load(Ordering::SeqCst)
            .saturating_sub(self.taken);
        self.worst.fetch_max(ahead, Ordering::SeqCst);
        std::thread::sleep(self.pause);
    }
}

#[test]
fn a_slow_stage_holds_the_source_back_to_the_channels_windows() {
    let produced = Arc::new(AtomicU64::new(0));
    let worst = Arc::new(AtomicU64::new(0));
    let code = run(3, || {
        let (p, p2, w) = (produced.clone(), produced.clone(), worst.clone());
        Flow::new(pipeline([
            source("numbers", move || Numbers {
                next: 1,
                n: 3000,
                produced: Some(p),
            }),
            map("pass", |item, ctx| ctx.emit_item(item)),
            stage("slow", move || Slow {
                produced: p2,
                taken: 0,
                worst: w,
                pause: std::time::Duration::from_micros(100),
            }),
        ]))
        .window(8)
    });
    assert_eq!(code, 0);
    // Two channels of 8, what the source emits in one call (4) and one burst of calls
    // (16 × 4) before it sees it is blocked: far below the 3,000 of an unbounded line.
    let worst = worst.load(Ordering::SeqCst);
    assert!(
        worst <= 2 * 8 + 16 * 4 + 2,
        "the source got {worst} items ahead"
    );
}

fn shape_error(pes: usize, build: impl Fn() -> Flow + Sync) -> String {
    // Compiling needs no job: start a one-PE job and catch the error it returns.
    let msg = Arc::new(Mutex::new(String::new()));
    let m = msg.clone();
    let code = converse::Runtime::builder()
        .pes(pes)
        .layer("local")
        .quiet(true)
        .build()
        .and_then(|rt| {
            rt.run(move |pe| match build().start(pe) {
                Ok(_) => pe.exit(0),
                Err(e) => {
                    if let Ok(mut s) = m.lock() {
                        *s = e.to_string();
                    }
                    pe.exit(3)
                }
            })
        })
        .unwrap_or(-1);
    let s = msg.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(code, if s.is_empty() { 0 } else { 3 });
    s
}

#[test]
fn blocks_that_make_no_flow_are_refused_with_the_reason() {
    type Build = Box<dyn Fn() -> Flow + Sync>;
    let cases: Vec<(Build, &str)> = vec![
        (
            Box::new(|| Flow::new(pipeline([square(0), numbers(3)]))),
            "begins with a source",
        ),
        (
            Box::new(|| Flow::new(pipeline([numbers(3), Farm::new(0, square).into()]))),
            "without workers",
        ),
        (
            Box::new(|| Flow::new(pipeline([numbers(3), square(0), square(0)]))),
            "two stages are named 'square'",
        ),
        (
            Box::new(|| {
                Flow::new(pipeline([
                    numbers(3),
                    Farm::new(2, square).into(),
                    Farm::new(2, uneven).ordered().into(),
                ]))
            }),
            "must follow a single stage",
        ),
        (
            Box::new(|| {
                Flow::new(pipeline([
                    numbers(3),
                    Farm::new(2, |i| Farm::new(2, move |k| square(i * 2 + k)).into())
                        .ordered()
                        .into(),
                ]))
            }),
            "stages or pipelines of stages",
        ),
        (
            Box::new(|| Flow::new(pipeline([numbers(3), numbers(4)]))),
            "only be the first stage",
        ),
    ];
    for (build, says) in cases {
        let e = shape_error(1, build);
        assert!(e.contains(says), "{e}");
    }
}

fn grouped(text: &str) -> Flow {
    let g = Groups::parse(text).expect("groups parse");
    Flow::new(pipeline([
        numbers(10),
        Farm::new(2, square).into(),
        map("sink", |_, _| {}),
    ]))
    .groups(g)
}

#[test]
fn groups_that_do_not_fit_the_flow_or_the_job_are_refused() {
    for (text, says) in [
        (
            "group A pes 0\nplace A numbers sink\n",
            "stage square[0] is in no group",
        ),
        (
            "group A pes 0\nplace A numbers square* sink nothing\n",
            "'nothing' matches no stage",
        ),
        (
            "group A pes 0-3\nplace A *\n",
            "names PE 2, but the job has 2 PEs",
        ),
        ("group A nodes 5\nplace A *\n", "names node 5"),
        (
            "group A pes 0\ngroup B pes 1\nplace A *\nplace B sink\n",
            "stage sink is placed in group A (line 3) and in group B (line 4)",
        ),
    ] {
        let e = shape_error(2, || grouped(text));
        assert!(e.contains(says), "{text}: {e}");
    }
    assert_eq!(
        shape_error(2, || grouped(
            "group A pes 0\ngroup B pes 1\nplace A numbers\nplace B square* sink\n"
        )),
        ""
    );
}

#[test]
fn a_split_program_places_each_group_on_its_pes_and_names_its_connections() {
    let g = Groups::parse(
        "group G1 pes 0\ngroup G2 pes 1-2\ngroup G3 pes 3\nplace G1 numbers\nplace G2 square*\nplace G3 sink\n",
    )
    .expect("parses");
    let plan: Arc<Mutex<String>> = Arc::default();
    let sink = Sink::new();
    let code = converse::Runtime::builder()
        .pes(4)
        .layer("local")
        .quiet(true)
        .build()
        .and_then(|rt| {
            rt.run(|pe| {
                let flow = Flow::new(pipeline([
                    numbers(100),
                    Farm::new(2, square).into(),
                    sink.block(),
                ]))
                .groups(g.clone())
                .on_done(move |pe| pe.exit(0))
                .on_error(|pe, _| pe.exit(1))
                .window(4);
                match flow.start(pe) {
                    Ok(p) if pe.my_pe() == 0 => {
                        if let Ok(mut s) = plan.lock() {
                            *s = p.describe();
                        }
                    }
                    Ok(_) => {}
                    Err(_) => pe.exit(2),
                }
            })
        })
        .unwrap_or(-1);
    assert_eq!(code, 0);
    let text = plan.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(text.contains("stage numbers on PE 0 (group G1)"), "{text}");
    assert!(
        text.contains("stage square[0] on PE 1 (group G2)"),
        "{text}"
    );
    assert!(
        text.contains("stage square[1] on PE 2 (group G2)"),
        "{text}"
    );
    assert!(text.contains("stage sink on PE 3 (group G3)"), "{text}");
    assert!(text.contains("G1 -> G2: 2 external channels"), "{text}");
    assert!(text.contains("G2 -> G3: 2 external channels"), "{text}");
    assert_eq!(sink.items().len(), 100);
}

/// Item `i`: small (batched) or large (a message of its own) by turns, its bytes telling `i`.
fn mixed(i: u64) -> Vec<u8> {
    let len = if i.is_multiple_of(3) {
        3000
    } else {
        8 + (i % 5) as usize
    };
    let mut v = vec![(i % 251) as u8; len];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

struct Mixed {
    next: u64,
    n: u64,
}

impl Source for Mixed {
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        while self.next < self.n && !ctx.full() {
            ctx.emit(&mixed(self.next));
            self.next += 1;
            if self.next.is_multiple_of(7) {
                break;
            }
        }
        self.next < self.n
    }
}

#[test]
fn small_and_large_items_keep_their_order_and_bytes_through_batches() {
    let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let code = run(3, || {
        let g = got.clone();
        Flow::new(pipeline([
            source("mixed", || Mixed { next: 0, n: 5000 }),
            map("pass", |item, ctx| ctx.emit_item(item)),
            map("sink", move |item, _ctx| {
                if let Ok(mut v) = g.lock() {
                    v.push(item.bytes().to_vec());
                }
            }),
        ]))
        .window(16)
    });
    assert_eq!(code, 0);
    let got = got.lock().map(|v| v.clone()).unwrap_or_default();
    assert_eq!(got.len(), 5000);
    for (i, b) in got.iter().enumerate() {
        assert_eq!(b, &mixed(i as u64), "item {i}");
    }
}

struct Big {
    left: u64,
    produced: Arc<AtomicU64>,
}

impl Source for Big {
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        while self.left > 0 && !ctx.full() {
            ctx.emit(&[7u8; 64 << 10]);
            self.produced.fetch_add(1, Ordering::SeqCst);
            self.left -= 1;
        }
        self.left > 0
    }
}

#[test]
fn a_channel_of_large_items_holds_its_bytes_not_its_items() {
    let produced = Arc::new(AtomicU64::new(0));
    let worst = Arc::new(AtomicU64::new(0));
    let code = run(2, || {
        let (p, p2, w) = (produced.clone(), produced.clone(), worst.clone());
        Flow::new(pipeline([
            source("big", move || Big {
                left: 300,
                produced: p,
            }),
            stage("slow", move || Slow {
                produced: p2,
                taken: 0,
                worst: w,
                pause: std::time::Duration::from_micros(200),
            }),
        ]))
        .window_bytes(256 << 10)
    });
    assert_eq!(code, 0);
    // 256 KiB of 64 KiB items in flight, and the one the source emitted when it found no
    // room: the item window (512) never comes into it.
    let worst = worst.load(Ordering::SeqCst);
    assert!(
        worst <= 4 + 2,
        "the source got {worst} items of 64 KiB ahead"
    );
}

struct SmallThenLarge {
    next: u64,
    n: u64,
}

impl Source for SmallThenLarge {
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        // One small item, then one larger than the whole byte window, by turns.
        let len = if self.next.is_multiple_of(2) {
            8
        } else {
            100 << 10
        };
        let mut v = vec![0u8; len];
        v[..8].copy_from_slice(&self.next.to_le_bytes());
        ctx.emit(&v);
        self.next += 1;
        self.next < self.n
    }
}

#[test]
fn an_item_larger_than_the_byte_window_after_a_small_one_still_goes() {
    let got = Arc::new(AtomicU64::new(0));
    let code = run(2, || {
        let g = got.clone();
        Flow::new(pipeline([
            source("mixed", || SmallThenLarge { next: 0, n: 200 }),
            map("sink", move |item, _ctx| {
                let i = u64::from_le_bytes(item.bytes()[..8].try_into().unwrap_or([0; 8]));
                // In order: the count so far is the item's number.
                if g.load(Ordering::SeqCst) == i {
                    g.fetch_add(1, Ordering::SeqCst);
                }
            }),
        ]))
        .window_bytes(64 << 10)
    });
    assert_eq!(code, 0);
    assert_eq!(got.load(Ordering::SeqCst), 200);
}
