//! The zoomable timeline, checked as a person sees it: an in-process SMP job (2 nodes of 2
//! PEs, so two communication threads) in which PE 0 runs hundreds of 40 µs handlers spread
//! over a second and one 40 ms handler inside a user bracket, followed by a user event; the
//! `converse-trace` command writes the report, and headless Chromium renders the page whole
//! and zoomed (through the `#t0=..&t1=..` address). The pixels must show the short handlers on
//! PE 0's row in the whole job's view (which a rule showing only handlers busy at least a
//! quarter of a column would hide, as the test works out from the trace), the long handler
//! across the zoomed view, the bracket and the event, and the communication threads' rows.
//! Skipped, saying so, when Chromium is not installed.

use converse_trace::{summary, Job};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../../../tests/src/render.rs"]
mod render;
use render::{dump_dom, near, pixel, render_url, Image};

const PES: usize = 4;
const PES_PER_NODE: usize = 2;
const TICKS: u64 = 300;
const TICK: Duration = Duration::from_micros(40);
const LONG: Duration = Duration::from_millis(40);

fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// PE 0 runs `tick` every 4 ms (each also sends PE 2, on the other node, a small message:
/// work for both communication threads) and `long` once, half-way.
fn record(dir: &Path) {
    let code = converse::Runtime::builder()
        .pes(PES)
        .pes_per_node(PES_PER_NODE)
        .layer("local")
        .quiet(true)
        .trace_dir(Some(dir.to_path_buf()))
        .build()
        .and_then(|rt| {
            rt.run(|pe| {
                let ping = pe.register("ping", |_, _| {});
                let tick = pe.register("tick", move |pe, _| {
                    spin(TICK);
                    pe.send(2, ping, &[0; 64]);
                });
                let long = pe.register("long", |pe, _| {
                    let since = Instant::now();
                    spin(LONG);
                    pe.trace_bracket("solve", since);
                    pe.trace_event("solved");
                });
                if pe.my_pe() == 0 {
                    for k in 0..TICKS {
                        pe.after(Duration::from_micros(2_000 + 4_000 * k), move |pe| {
                            pe.send(0, tick, &[])
                        });
                    }
                    pe.after(Duration::from_micros(600_500), move |pe| {
                        pe.send(0, long, &[])
                    });
                }
                pe.after(Duration::from_millis(1_250), |pe| {
                    pe.barrier();
                    if pe.my_pe() == 0 {
                        pe.exit(0);
                    }
                });
            })
        });
    assert_eq!(code.ok(), Some(0));
}

fn command(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_converse-trace"))
        .args(args)
        .output()
        .expect("converse-trace runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The value of attribute `name` in the first tag starting with `tag` in `html`.
fn attr(html: &str, tag: &str, name: &str) -> f64 {
    let from = html.find(tag).unwrap_or_else(|| panic!("no {tag}"));
    let end = from + html[from..].find('>').expect("the tag's end");
    let t = &html[from..end];
    let key = format!(" {name}=\"");
    let at = t.find(&key).unwrap_or_else(|| panic!("no {name} in {t}")) + key.len();
    let v = &t[at..at + t[at..].find('"').expect("the value's end")];
    v.parse().unwrap_or_else(|_| panic!("{name}={v}"))
}

/// The canvas's layout, from its attributes (and, once the script ran, its place on the page).
struct Geometry {
    page_y: f64,
    left: f64,
    plot_w: f64,
    axis_h: f64,
    row_h: f64,
    band_top: f64,
    band_h: f64,
    bracket_top: f64,
    height: f64,
}

impl Geometry {
    fn of(dom: &str) -> Geometry {
        let a = |n| attr(dom, "<canvas id=\"zoom-canvas\"", n);
        Geometry {
            page_y: a("data-page-y"),
            left: a("data-left"),
            plot_w: a("data-plot-w"),
            axis_h: a("data-axis-h"),
            row_h: a("data-row-h"),
            band_top: a("data-band-top"),
            band_h: a("data-band-h"),
            bracket_top: a("data-bracket-top"),
            height: a("height"),
        }
    }

    /// The page's y of `dy` below the top of row `row`.
    fn y(&self, row: usize, dy: f64) -> f64 {
        self.page_y + self.axis_h + row as f64 * self.row_h + dy
    }

    /// Plot columns (0..plot_w) with a pixel of colour `c` between page rows `y0..y1`.
    fn columns(&self, img: &Image, (y0, y1): (f64, f64), c: (u8, u8, u8)) -> Vec<usize> {
        (0..self.plot_w as usize)
            .filter(|&k| {
                let x = self.left + k as f64;
                let mut y = y0;
                while y < y1 {
                    if near(pixel(img, x, y), c) {
                        return true;
                    }
                    y += 1.0;
                }
                false
            })
            .collect()
    }

    /// Columns of row `row`'s handler band with colour `c`.
    fn band(&self, img: &Image, row: usize, c: (u8, u8, u8)) -> Vec<usize> {
        let top = self.y(row, self.band_top);
        self.columns(img, (top, top + self.band_h), c)
    }
}

/// The data the page embeds for its script.
fn data(page: &str) -> Value {
    let tag = "<script type=\"application/json\" id=\"zoom-data\">";
    let from = page.find(tag).expect("the zoom data") + tag.len();
    let to = from + page[from..].find("</script>").expect("its end");
    serde_json::from_str(&page[from..to]).expect("valid JSON")
}

/// The colour the page gives handler (or other name) `name`.
fn colour(d: &Value, name: &str) -> (u8, u8, u8) {
    let names = d["names"].as_array().expect("names");
    let i = names.iter().position(|n| n == name).expect("the name");
    pal(d, d["ncol"][i].as_u64().expect("colour") as usize)
}

/// Colour `i` of the page's palette (the handlers', then the communication threads' turns,
/// brackets, events).
fn pal(d: &Value, i: usize) -> (u8, u8, u8) {
    let v = |k: usize| d["pal"][i][k].as_u64().expect("rgb") as u8;
    (v(0), v(1), v(2))
}

/// Per plot column of the view [t0, t1] of PE 0's row: the handler with most time in it, and
/// whether handlers were busy at least a quarter of it.
fn columns_of(job: &Job, (t0, t1): (f64, f64), w: usize) -> Vec<Option<(String, bool)>> {
    let per = (t1 - t0) / w as f64;
    let mut by: Vec<std::collections::HashMap<String, f64>> = vec![Default::default(); w];
    let slices = summary::slices(job);
    for s in slices.iter().filter(|s| s.trace == 0 && s.depth == 0) {
        let name = job.traces[0].header.handler_name(s.handler);
        let (a, b) = ((s.start as f64).max(t0), (s.end as f64).min(t1));
        if b < a {
            continue;
        }
        let c0 = ((a - t0) / per) as usize;
        let c1 = (((b - t0) / per) as usize).min(w - 1);
        let c0 = c0.min(c1);
        for (c, m) in by.iter_mut().enumerate().take(c1 + 1).skip(c0) {
            let d = b.min(t0 + (c + 1) as f64 * per) - a.max(t0 + c as f64 * per);
            *m.entry(name.clone()).or_default() += d.max(1e-3);
        }
    }
    by.into_iter()
        .map(|m| {
            let total: f64 = m.values().sum();
            m.into_iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(n, _)| (n, total >= 0.25 * per))
        })
        .collect()
}

#[test]
fn the_zoomable_timeline_shows_short_handlers_the_long_one_zoomed_brackets_events_and_comm() {
    let dir: PathBuf = std::env::temp_dir().join(format!("trace-zoom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let traces = dir.join("traces");
    record(&traces);
    let html = dir.join("report.html");
    command(&[
        "report",
        &traces.display().to_string(),
        "-o",
        &html.display().to_string(),
    ]);
    let job = Job::load(&traces).expect("loads");
    assert_eq!(
        job.comm.len(),
        PES / PES_PER_NODE,
        "a communication thread's trace per node"
    );
    let page = std::fs::read_to_string(&html).expect("report written");
    assert!(!page.contains("<script src") && !page.contains("src=\"http"));
    let d = data(&page);
    let end = job.end() as f64;
    assert_eq!(d["end"].as_f64(), Some(end));
    let rows = d["rows"].as_array().expect("rows");
    let labels: Vec<&str> = rows.iter().filter_map(|r| r["label"].as_str()).collect();
    assert_eq!(
        labels,
        ["PE 0", "PE 1", "PE 2", "PE 3", "node 0 comm", "node 1 comm"]
    );
    let url = format!("file://{}", html.display());
    let Some(dom) = dump_dom(&url, 1100, 900, &dir) else {
        eprintln!(
            "SKIPPED zoom picture check: chromium is not installed (apt-get install chromium)"
        );
        return;
    };
    let g = Geometry::of(&dom);
    // The script ran and shows the whole job.
    assert_eq!(attr(&dom, "<canvas id=\"zoom-canvas\"", "data-t0"), 0.0);
    assert_eq!(attr(&dom, "<canvas id=\"zoom-canvas\"", "data-t1"), end);
    let (w, h) = (1100, (g.page_y + g.height + 20.0) as u32);
    let img = render_url(&url, w, h, &dir, "whole").expect("rendered");
    let tick = colour(&d, "tick");
    let long = colour(&d, "long");
    assert!(!near(tick, long));

    // (a) The short handlers on PE 0's row, whole job: wherever `tick` ran most, though in
    // nearly every such column handlers were busy far less than a quarter of it.
    let cols = columns_of(&job, (0.0, end), g.plot_w as usize);
    let ticks: Vec<usize> = (0..cols.len())
        .filter(|&k| matches!(&cols[k], Some((n, _)) if n == "tick"))
        .collect();
    let naive = ticks
        .iter()
        .filter(|&&k| matches!(&cols[k], Some((_, true))))
        .count();
    assert!(
        ticks.len() >= 150,
        "{} columns where tick ran most",
        ticks.len()
    );
    assert!(
        naive * 5 < ticks.len(),
        "a 'busy a quarter of the column' rule shows {naive} of those {} columns",
        ticks.len()
    );
    let shown = g.band(&img, 0, tick);
    let hit = ticks.iter().filter(|k| shown.contains(k)).count();
    assert!(
        hit * 10 >= ticks.len() * 9,
        "tick shown in {hit} of the {} columns where it ran most",
        ticks.len()
    );

    // (c) The communication threads' rows: their turns moving PE 0's messages to PE 2.
    let comm = pal(&d, 10);
    for node in 0..PES / PES_PER_NODE {
        let n = g.band(&img, PES + node, comm).len();
        assert!(n >= 20, "node {node} comm: {n} columns of turns");
    }
    assert!(g.band(&img, 1, comm).is_empty(), "no turns on a PE's row");

    // (d) The bracket under PE 0's row and the event above it, whole job.
    let bracket = colour(&d, "solve");
    let event = colour(&d, "solved");
    let bracket_band = |img: &Image| {
        let top = g.y(0, g.bracket_top);
        g.columns(img, (top, top + 3.0), bracket)
    };
    let event_strip = |img: &Image| g.columns(img, (g.y(0, 0.0), g.y(0, 4.0)), event);
    let b = bracket_band(&img);
    assert!(!b.is_empty(), "the bracket");
    assert!(!event_strip(&img).is_empty(), "the event");
    assert!(bracket_band(&img).len() < 100 && g.band(&img, 1, bracket).is_empty());

    // (b) Zoomed on the long handler (and 10% either side): it fills most of the row, the
    // bracket runs under it, the event marks its end.
    let l = summary::slices(&job)
        .into_iter()
        .find(|s| s.trace == 0 && job.traces[0].header.handler_name(s.handler) == "long")
        .expect("long ran");
    let d_ = (l.end - l.start) as f64;
    let (t0, t1) = (l.start as f64 - 0.1 * d_, l.end as f64 + 0.1 * d_);
    let zoomed = format!("{url}#t0={}&t1={}", t0 as i64, t1 as i64);
    let img = render_url(&zoomed, w, h, &dir, "zoomed").expect("rendered");
    let wide = g.band(&img, 0, long).len() as f64;
    assert!(
        wide >= 0.75 * g.plot_w,
        "long across {wide} of {} columns",
        g.plot_w
    );
    let under = bracket_band(&img).len() as f64;
    assert!(under >= 0.75 * g.plot_w, "bracket across {under} columns");
    let marks = event_strip(&img);
    let end_col = (l.end as f64 - t0) / (t1 - t0) * g.plot_w;
    assert!(
        marks.iter().any(|&k| (k as f64 - end_col).abs() < 30.0),
        "the event near column {end_col}: {marks:?}"
    );
    // (e) The controls, driven by a probe script appended to a copy of the page: the
    // pointer over the long handler names it; "zoom in" halves the window around its middle
    // and puts it in the address; the wheel zooms out by a quarter; a drag pans.
    let col = ((l.start + l.end) as f64 / 2.0 / end * g.plot_w).round();
    let probe = format!(
        "<script>(function () {{ var cv = document.getElementById('zoom-canvas'), \
         d = cv.dataset, b = cv.getBoundingClientRect(), out = [];\
         function ev(type, x, more) {{ var o = {{ clientX: b.left + x, clientY: b.top + {y}, \
         bubbles: true, cancelable: true }}; for (var k in more) o[k] = more[k]; \
         cv.dispatchEvent(type === 'wheel' ? new WheelEvent(type, o) : new MouseEvent(type, o)); }}\
         function win() {{ out.push(d.t0 + ' ' + d.t1); }}\
         ev('mousemove', {x}); out.push(document.getElementById('zoom-info').textContent);\
         document.getElementById('zoom-in').click(); win(); out.push(location.hash);\
         ev('wheel', {x}, {{ deltaY: 100 }}); win();\
         ev('mousedown', {x}); ev('mousemove', {x} - {step}); ev('mouseup', {x} - {step}); win();\
         var p = document.createElement('pre'); p.id = 'probe'; \
         p.textContent = out.join('\\n'); document.body.appendChild(p); }}());</script>",
        x = g.left + col,
        y = g.axis_h + g.band_top + g.band_h - 2.0,
        step = g.plot_w / 10.0,
    );
    let probed = dir.join("probed.html");
    std::fs::write(&probed, page.replace("</body>", &format!("{probe}</body>"))).expect("write");
    let dom = dump_dom(&format!("file://{}", probed.display()), w, h, &dir).expect("dumped");
    let from = dom.find("<pre id=\"probe\">").expect("the probe ran") + 16;
    let text = &dom[from..from + dom[from..].find("</pre>").expect("its end")];
    let lines: Vec<&str> = text.lines().collect();
    let window = |k: usize| -> (f64, f64) {
        let mut v = lines[k]
            .split(' ')
            .map(|x| x.parse::<f64>().expect("a time"));
        (v.next().expect("t0"), v.next().expect("t1"))
    };
    assert!(
        lines.len() == 5 && lines[0].starts_with("PE 0 @ ") && lines[0].contains("long: at "),
        "{text}"
    );
    let (a, b) = window(1);
    assert!(
        ((b - a) - end / 2.0).abs() < end * 1e-6,
        "zoomed in: {text}"
    );
    // The dump escapes the text's `&`.
    assert_eq!(lines[2], format!("#t0={}&amp;t1={}", a.round(), b.round()));
    let (a2, b2) = window(3);
    assert!(
        ((b2 - a2) - (b - a) * 1.25).abs() < end * 1e-6,
        "wheel: {text}"
    );
    let (a3, b3) = window(4);
    let moved = (a3 - a2) / (b2 - a2);
    assert!((moved - 0.1).abs() < 0.01 && b3 > b2, "drag: {text}");

    // To look at the pictures: CONVERSE_TRACE_KEEP=1 keeps the directory (named on stderr).
    if std::env::var_os("CONVERSE_TRACE_KEEP").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        eprintln!("kept {}", dir.display());
    }
}
