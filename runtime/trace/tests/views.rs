//! Projections' views of the report, read back: an in-process job of known work (PE 0 runs a
//! 6 ms handler 5 times, each inside a user bracket; PE 1 a 40 µs one 300 times, 1.5 ms apart,
//! then records a user event; PE 0 sends PE 1 ten 64 KiB messages), the `converse-trace`
//! command writes the report, and the test reads each view's figures back from the page
//! (utilization, time per handler over time, the per-PE × handler table, both histograms,
//! the user table) and renders each picture in headless Chromium to check it shows them: the
//! short handlers on the timeline (a 40 µs run in a 0.5 ms pixel), the brackets and the
//! event, the busy bins dark in the utilization map, the long handler's colour in the time
//! profile, the 64 KiB bar in the size histogram. Skipped, saying so, without Chromium.

use converse_trace::report::{
    shade, Layout, BRACKET, EVENT, IDLE, PALETTE, PLOT_W, PLOT_X, PROFILE_H, TIME_BINS, UTIL_ROW_H,
};
use converse_trace::Job;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../../../tests/src/render.rs"]
mod render;
use render::{count, near, pixel, render};

/// Runs of `long` (PE 0) and of `short` (PE 1).
const LONG_RUNS: usize = 5;
const SHORT_RUNS: usize = 300;
/// Their lengths.
const LONG: Duration = Duration::from_millis(6);
const SHORT: Duration = Duration::from_micros(40);

fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

fn record(dir: &Path) {
    let code = converse::Runtime::builder()
        .pes(2)
        .layer("local")
        .quiet(true)
        .trace_dir(Some(dir.to_path_buf()))
        .build()
        .and_then(|rt| {
            rt.run(|pe| {
                let long = pe.register("long", |pe, _| {
                    let t = Instant::now();
                    spin(LONG);
                    pe.trace_bracket("long-bracket", t);
                });
                let short = pe.register("short", |_, _| spin(SHORT));
                let bulk = pe.register("bulk", |_, _| {});
                let me = pe.my_pe();
                if me == 0 {
                    for k in 0..LONG_RUNS as u64 {
                        pe.after(Duration::from_millis(10 + 90 * k), move |pe| {
                            pe.send(0, long, &[])
                        });
                    }
                    for _ in 0..10 {
                        pe.send(1, bulk, &vec![0u8; 64 << 10]);
                    }
                } else {
                    for k in 0..SHORT_RUNS as u64 {
                        pe.after(Duration::from_micros(1500 * k + 700), move |pe| {
                            pe.send(1, short, &[])
                        });
                    }
                    pe.after(Duration::from_millis(460), |pe| pe.trace_event("done"));
                }
                pe.after(Duration::from_millis(470), |pe| {
                    pe.barrier();
                    if pe.my_pe() == 0 {
                        pe.exit(0);
                    }
                });
            })
        });
    assert_eq!(code.ok(), Some(0));
}

/// The value of attribute `name` in `tag` (one element's text).
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    tag[at..].split('"').next()
}

/// Every element of the page that has all of `has` as attribute-value pairs.
fn elements<'a>(page: &'a str, has: &[(&str, &str)]) -> Vec<&'a str> {
    page.split('<')
        .filter(|tag| has.iter().all(|(k, v)| attr(tag, k) == Some(v)))
        .collect()
}

fn num(tag: &str, name: &str) -> f64 {
    attr(tag, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {tag}"))
}

/// The `<svg class="CLASS">` picture of the page, as a file of its own for Chromium.
fn picture(page: &str, class: &str, dir: &Path) -> PathBuf {
    let from = page
        .find(&format!("<svg class=\"{class}\""))
        .unwrap_or_else(|| panic!("a {class} picture"));
    let to = from + page[from..].find("</svg>").expect("its end") + "</svg>".len();
    let path = dir.join(format!("{class}.svg"));
    std::fs::write(&path, &page[from..to]).expect("write");
    path
}

fn within(got: f64, want: f64, share: f64) -> bool {
    (got - want).abs() <= want * share
}

#[test]
fn the_views_show_the_figures_of_the_job() {
    let dir: PathBuf = std::env::temp_dir().join(format!("trace-views-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let traces = dir.join("traces");
    record(&traces);
    let html = dir.join("report.html");
    let o = Command::new(env!("CARGO_BIN_EXE_converse-trace"))
        .args(["report", &traces.display().to_string(), "-o"])
        .arg(&html)
        .output()
        .expect("converse-trace runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).expect("report written");
    let job = Job::load(&traces).expect("loads");
    let end = job.end() as f64;
    let bin = end / TIME_BINS as f64;
    let long_ns = LONG.as_nanos() as f64 * LONG_RUNS as f64;
    let short_ns = SHORT.as_nanos() as f64 * SHORT_RUNS as f64;

    // The per-PE × handler table: runs exactly, time at least what was spun (and not twice).
    let cell = |pe: &str, h: &str| {
        let c = elements(&page, &[("data-pe", pe), ("data-handler", h)]);
        assert_eq!(c.len(), 1, "one cell for PE {pe}, {h}");
        (num(c[0], "data-runs"), num(c[0], "data-ns"))
    };
    let (runs, ns) = cell("0", "long");
    assert_eq!(runs as usize, LONG_RUNS);
    assert!(ns >= long_ns && ns < 2.0 * long_ns, "{ns}");
    let (runs, ns) = cell("1", "short");
    assert_eq!(runs as usize, SHORT_RUNS);
    assert!(ns >= short_ns && ns < 3.0 * short_ns, "{ns}");
    assert_eq!(cell("1", "long").0, 0.0);

    // Utilization: PE 0's bins add up to the time in its handlers; its mean says the same.
    let pe0 = elements(&page, &[("data-row", "PE 0")]);
    assert_eq!(pe0.len(), TIME_BINS);
    let busy: f64 = pe0.iter().map(|t| num(t, "data-util") / 100.0 * bin).sum();
    assert!(within(busy, cell("0", "long").1, 0.05), "{busy} ns busy");
    let mean = elements(&page, &[("data-mean-row", "PE 0")]);
    assert!(within(num(mean[0], "data-mean") / 100.0 * end, busy, 0.02));
    // The bin in the middle of the first long run is nearly all busy; one before it idle.
    let first_long = converse_trace::summary::slices(&job)
        .into_iter()
        .find(|s| s.trace == 0 && job.traces[0].header.handler_name(s.handler) == "long")
        .expect("a run of long");
    let hot_bin = ((first_long.start + first_long.end) as f64 / 2.0 / bin) as usize;
    let util_of = |b: usize| num(pe0[b], "data-util");
    assert!(util_of(hot_bin) > 50.0, "{}", util_of(hot_bin));
    let idle_bin = (0..TIME_BINS)
        .find(|&b| util_of(b) == 0.0)
        .expect("PE 0 idle in some bin");

    // The time profile: `long`'s time over the bins is its time in the table.
    let long_bins = elements(&page, &[("data-handler", "long")]);
    let profiled: f64 = long_bins
        .iter()
        .filter(|t| attr(t, "data-bin").is_some())
        .map(|t| num(t, "data-ns"))
        .sum();
    assert!(within(profiled, cell("0", "long").1, 0.01), "{profiled}");

    // The histograms: five runs from 5 to 10 ms; ten messages from 64 to 128 KiB.
    let durations = elements(&page, &[("data-from", "5000000")]);
    assert!(
        durations
            .iter()
            .any(|t| num(t, "data-count") as usize == LONG_RUNS),
        "{durations:?}"
    );
    let sizes = elements(&page, &[("data-from", "65536")]);
    assert!(
        sizes.iter().any(|t| num(t, "data-count") == 10.0),
        "{sizes:?}"
    );
    let all_runs = converse_trace::summary::slices(&job).len() as f64;
    let counted: f64 = page
        .find("<svg class=\"durations\"")
        .map(|at| &page[at..])
        .and_then(|s| s.split("</svg>").next())
        .map(|svg| {
            elements(svg, &[])
                .iter()
                .filter(|t| attr(t, "data-count").is_some())
                .map(|t| num(t, "data-count"))
                .sum()
        })
        .unwrap_or(0.0);
    assert_eq!(counted, all_runs, "every run in one bin");

    // The user table.
    let bracket = elements(&page, &[("data-name", "long-bracket")]);
    assert_eq!(num(bracket[0], "data-count") as usize, LONG_RUNS);
    assert!(num(bracket[0], "data-ns") >= long_ns);
    let event = elements(&page, &[("data-name", "done"), ("data-kind", "event")]);
    assert_eq!(num(event[0], "data-count"), 1.0);

    // As a person sees them.
    let l = Layout::of(&job);
    let Some(img) = render(&html, l.width as u32, l.height as u32, &dir) else {
        return;
    };
    let colour_of = |name: &str| {
        let times = converse_trace::summary::handler_times(&job);
        let i = times.iter().position(|h| h.name == name).expect("ran");
        PALETTE[i.min(PALETTE.len() - 1)]
    };
    // PE 1's 40 µs runs, each in a pixel of ~0.5 ms, mostly idle: still drawn, every one.
    let row1 = l.timeline_y + l.row_h;
    let x_span = (l.timeline_x, l.timeline_x + l.timeline_w);
    // Each a bar of a third of the row at least (`MIN_BAR`): some 6 pixel rows high.
    let short_px = count(
        &img,
        x_span,
        (row1 + l.row_h * 0.36, row1 + l.row_h * 0.64),
        colour_of("short"),
    );
    assert!(
        short_px >= 4 * SHORT_RUNS,
        "{short_px} pixels of the short handler"
    );
    // And idle between them.
    let idle_px = count(
        &img,
        x_span,
        (row1 + l.row_h * 0.45, row1 + l.row_h * 0.55),
        IDLE,
    );
    assert!(idle_px >= 250, "{idle_px} pixels of idle");
    // The brackets at PE 0's foot, and the event's tick on PE 1.
    let foot = (l.timeline_y + l.row_h * 0.9, l.timeline_y + l.row_h * 0.98);
    let bracket_px = count(&img, x_span, foot, BRACKET);
    assert!(bracket_px >= 5, "{bracket_px} pixels of brackets");
    let t1 = &job.traces[1];
    let ev = t1
        .records
        .iter()
        .find(|r| r.kind == converse_trace::Kind::Event)
        .expect("the event");
    let x = l.timeline_x + job.time(1, ev) as f64 / end * l.timeline_w;
    let tick = count(
        &img,
        (x - 2.0, x + 2.0),
        (row1, row1 + l.row_h * 0.25),
        EVENT,
    );
    assert!(tick >= 2, "the event's tick: {tick} pixels");

    // The utilization map: PE 0's busy bin dark, as its number says; an idle bin white.
    let svg = picture(&page, "utilization", &dir);
    // Not much taller than the picture: a window under some 150 px is not painted whole.
    let Some(u) = render(&svg, 1100, 400, &dir) else {
        return;
    };
    let cw = PLOT_W / TIME_BINS as f64;
    let at = |b: usize| pixel(&u, PLOT_X + (b as f64 + 0.5) * cw, 40.0 + UTIL_ROW_H / 2.0);
    assert!(
        near(at(hot_bin), shade(util_of(hot_bin) / 100.0)),
        "{:?}",
        at(hot_bin)
    );
    assert_eq!(at(idle_bin), (255, 255, 255));

    // The time profile: `long`'s colour at the foot of its busiest bin.
    let svg = picture(&page, "profile", &dir);
    let Some(p) = render(&svg, 1100, 400, &dir) else {
        return;
    };
    let foot = pixel(
        &p,
        PLOT_X + (hot_bin as f64 + 0.5) * cw,
        40.0 + PROFILE_H - 2.0,
    );
    assert!(near(foot, colour_of("long")), "{foot:?}");

    // The duration histogram: a bar over the 5 to 10 ms bin, at its place among the bins.
    let svg = picture(&page, "durations", &dir);
    let text = std::fs::read_to_string(&svg).expect("written");
    let edges: Vec<&str> = elements(&text, &[])
        .into_iter()
        .filter_map(|t| attr(t, "data-from"))
        .collect();
    let k = edges
        .iter()
        .position(|&e| e == "5000000")
        .expect("a 5 ms bin");
    let bw = (PLOT_W / edges.len() as f64).min(60.0);
    let Some(d) = render(&svg, 1100, 400, &dir) else {
        return;
    };
    let foot = pixel(&d, PLOT_X + (k as f64 + 0.5) * bw, 40.0 + 160.0 - 2.0);
    assert!(near(foot, (70, 110, 160)), "{foot:?}");

    // The size histogram: a bar over the 64 KiB bin.
    let svg = picture(&page, "sizes", &dir);
    let Some(s) = render(&svg, 1100, 400, &dir) else {
        return;
    };
    let bars = count(
        &s,
        (PLOT_X, PLOT_X + PLOT_W),
        (195.0, 199.0),
        (70, 110, 160),
    );
    assert!(bars >= 2 * 20, "two bars or more drawn: {bars}");
    std::fs::remove_dir_all(&dir).ok();
}
