//! The MRNet paper's micro-benchmarks (section 4.1) on the tree overlay: instantiation latency
//! (from the front-end's call until every process is started and connected), one broadcast
//! followed by one sum reduction (round trip), and reduction throughput over a stream of waves;
//! for a flat tree and two-level trees of fan-out 4 and 8, over growing numbers of back-ends.
//! The front-end makes each network itself (`create_network_fe`) with `bench tbon-be` as the
//! back-end program; best of N runs, as the paper reports.
//!
//! Each overlay figure is taken with failure recovery on (the default: the job runs in report
//! mode) and off, side by side, since recovery must cost nothing while nothing fails; with
//! `--kill`, the time from killing an internal process of a 4x8 tree to the first correct wave
//! over the survivors (`tbon_kill.rs`).
//!
//! Next to it, measured in the same run, the raw flat baseline: what a tool without an overlay
//! does — start B processes that connect back over TCP, write a request to each and read each
//! one's answer, and read a stream of values from each.

use anyhow::Context;
use converse_tbon::{
    self as tbon, topology::Entry, ProcName, SyncMode, TbonError, Topology, TFILTER_NULL,
    TFILTER_SUM,
};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUND: i32 = 100;
const WAVES: i32 = 101;

/// A tree shape the benchmark compares.
#[derive(Clone, Copy)]
enum Shape {
    Flat,
    TwoLevel(usize),
}

impl Shape {
    fn name(self) -> String {
        match self {
            Shape::Flat => "flat".into(),
            Shape::TwoLevel(k) => format!("2-level/{k}"),
        }
    }

    /// The tree for `b` back-ends: flat, or ceil(b/k) internal processes of up to k back-ends.
    fn tree(self, b: usize) -> Result<Topology, TbonError> {
        let fe = ProcName::new("localhost", 0);
        let mut next = 1;
        let mut name = || {
            next += 1;
            ProcName::new("localhost", next - 1)
        };
        let entries = match self {
            Shape::Flat => vec![Entry {
                parent: fe,
                children: (0..b).map(|_| name()).collect(),
                line: None,
            }],
            Shape::TwoLevel(k) => {
                let groups = b.div_ceil(k);
                let internal: Vec<ProcName> = (0..groups).map(|_| name()).collect();
                let mut e = vec![Entry {
                    parent: fe,
                    children: internal.clone(),
                    line: None,
                }];
                for (g, p) in internal.into_iter().enumerate() {
                    let here = k.min(b - g * k);
                    e.push(Entry {
                        parent: p,
                        children: (0..here).map(|_| name()).collect(),
                        line: None,
                    });
                }
                e
            }
        };
        Ok(Topology::from_entries(&entries)?)
    }
}

/// One run's figures.
#[derive(Clone, Copy, Default)]
struct Figures {
    create_ms: f64,
    round_trip_us: f64,
    waves_per_s: f64,
}

/// Keep the best of each figure.
fn best(runs: &[Figures]) -> Figures {
    Figures {
        create_ms: runs
            .iter()
            .map(|f| f.create_ms)
            .fold(f64::INFINITY, f64::min),
        round_trip_us: runs
            .iter()
            .map(|f| f.round_trip_us)
            .fold(f64::INFINITY, f64::min),
        waves_per_s: runs.iter().map(|f| f.waves_per_s).fold(0.0, f64::max),
    }
}

pub(crate) struct Params<'a> {
    pub backends: &'a [usize],
    pub layers: &'a [String],
    /// Failure recovery settings to measure (on, off).
    pub recovery: &'a [bool],
    pub runs: usize,
    pub rounds: usize,
    pub waves: usize,
    pub csv: Option<&'a Path>,
    pub plot: Option<&'a Path>,
}

pub(crate) fn run(p: &Params<'_>) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let me = me.to_string_lossy().into_owned();
    let shapes = [Shape::Flat, Shape::TwoLevel(4), Shape::TwoLevel(8)];
    let mut rows: Vec<(String, String, usize, bool, Figures, Figures)> = Vec::new();
    converse::input::out_line(&format!(
        "{:>5} {:>10} {:>4} {:>4} | {:>9} {:>9} | {:>10} {:>10} | {:>10} {:>10}",
        "layer",
        "tree",
        "BEs",
        "rec",
        "create ms",
        "raw ms",
        "rtt us",
        "raw us",
        "waves/s",
        "raw /s"
    ));
    for &b in p.backends {
        let raw = best(
            &(0..p.runs)
                .map(|_| raw_flat(&me, b, p.rounds, p.waves))
                .collect::<anyhow::Result<Vec<_>>>()?,
        );
        for (layer, shape, recovery) in p.layers.iter().flat_map(|l| {
            shapes
                .iter()
                .flat_map(move |s| p.recovery.iter().map(move |r| (l, *s, *r)))
        }) {
            if let Shape::TwoLevel(k) = shape {
                if b <= k {
                    continue;
                }
            }
            let topo = shape.tree(b)?;
            let runs = (0..p.runs)
                .map(|_| overlay(&topo, &me, layer, recovery, p.rounds, p.waves))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let f = best(&runs);
            converse::input::out_line(&format!("{:>5} {:>10} {:>4} {:>4} | {:>9.1} {:>9.1} | {:>10.1} {:>10.1} | {:>10.0} {:>10.0}",
                layer,
                shape.name(),
                b,
                if recovery { "on" } else { "off" },
                f.create_ms,
                raw.create_ms,
                f.round_trip_us,
                raw.round_trip_us,
                f.waves_per_s,
                raw.waves_per_s));
            rows.push((layer.clone(), shape.name(), b, recovery, f, raw));
        }
    }
    converse::input::out_line(&format!(
        "(best of {} runs; rtt: median of {} broadcast+sum round trips; waves/s: {} waves of one \
         int per back-end; raw: B processes connected to the front-end by TCP, no overlay)",
        p.runs, p.rounds, p.waves
    ));
    if let Some(path) = p.csv {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(
            f,
            "layer,tree,backends,recovery,create_ms,raw_create_ms,round_trip_us,raw_round_trip_us,waves_per_s,raw_waves_per_s"
        )?;
        for (l, t, b, rec, o, r) in &rows {
            writeln!(
                f,
                "{l},{t},{b},{rec},{:.2},{:.2},{:.1},{:.1},{:.0},{:.0}",
                o.create_ms,
                r.create_ms,
                o.round_trip_us,
                r.round_trip_us,
                o.waves_per_s,
                r.waves_per_s
            )?;
        }
    }
    if let Some(path) = p.plot {
        crate::plot::write_svg(
            path,
            "tree overlay (MRNet micro-benchmarks) against back-ends",
            &figure(&rows),
        )?;
    }
    Ok(())
}

/// The table as three panels against back-ends, one line per (layer, tree) and one for the
/// raw flat baseline: instantiation, round trip, reduction throughput. Rows with failure
/// recovery off are lines of their own, named so.
fn figure(rows: &[(String, String, usize, bool, Figures, Figures)]) -> [crate::plot::Panel; 3] {
    let panel = |title: &str, unit: &str, y: fn(&Figures) -> f64| {
        let mut raw: Vec<(f64, f64)> = Vec::new();
        let mut points = Vec::new();
        for (l, t, b, rec, o, r) in rows {
            let off = if *rec { "" } else { " (recovery off)" };
            points.push((format!("{l} {t}{off}"), *b as f64, y(o)));
            if !raw.iter().any(|q| q.0 == *b as f64) {
                raw.push((*b as f64, y(r)));
            }
        }
        let mut series = crate::plot::series_by_name(points);
        series.push(crate::plot::Series {
            name: "raw flat TCP".into(),
            points: raw,
        });
        crate::plot::Panel {
            title: title.into(),
            x_label: "back-ends".into(),
            y_label: unit.into(),
            kind: crate::plot::Kind::Lines {
                log_x: true,
                log_y: true,
            },
            series,
        }
    };
    [
        panel("instantiation", "ms", |f| f.create_ms),
        panel("broadcast + sum round trip", "us", |f| f.round_trip_us),
        panel("reduction throughput", "waves/s", |f| f.waves_per_s),
    ]
}

/// One run on the overlay: make the network, time round trips and waves, tear it down.
fn overlay(
    topo: &Topology,
    me: &str,
    layer: &str,
    recovery: bool,
    rounds: usize,
    waves: usize,
) -> anyhow::Result<Figures> {
    let t0 = Instant::now();
    let b = topo.num_backends() as i32;
    let mut settings = tbon::create::Settings::new(me, &["tbon-be"]);
    settings.layer = layer.to_owned();
    settings.failure_recovery = Some(recovery);
    let f = tbon::create_network_fe_with(
        topo,
        &settings,
        tbon::Options::default,
        |net| -> Result<Figures, TbonError> {
            let create_ms = t0.elapsed().as_secs_f64() * 1e3;
            let comm = net.broadcast_communicator();
            let s = net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)?;
            let round_trip_us = median_us(rounds, || {
                net.send(&s, ROUND, "", ())?;
                let v: i32 = net.recv_on(&s)?.unpack("%d")?;
                if v != b {
                    return Err(TbonError::Usage(format!("round trip sum {v}, want {b}")));
                }
                Ok(())
            })?;
            let t = Instant::now();
            net.send(&s, WAVES, "%d", waves as i32)?;
            for _ in 0..waves {
                let v: i32 = net.recv_on(&s)?.unpack("%d")?;
                if v != b {
                    return Err(TbonError::Usage(format!("wave sum {v}, want {b}")));
                }
            }
            let waves_per_s = waves as f64 / t.elapsed().as_secs_f64();
            Ok(Figures {
                create_ms,
                round_trip_us,
                waves_per_s,
            })
        },
    );
    Ok(f.and_then(|r| r)?)
}

/// `bench tbon-be`: the back-end program. Answers a round with 1, a wave request with that
/// many 1s.
pub(crate) fn backend() -> std::process::ExitCode {
    tbon::run_backend(|net| loop {
        let (s, p) = net.recv()?;
        match p.tag() {
            ROUND => net.send(&s, ROUND, "%d", 1)?,
            WAVES => {
                let n: i32 = p.unpack("%d")?;
                for _ in 0..n {
                    net.send(&s, WAVES, "%d", 1)?;
                }
            }
            _ => {}
        }
    })
}

/// The median time of `rounds` calls of `one`, in microseconds, after a tenth as many to warm
/// up (connections open on first use).
fn median_us<E>(rounds: usize, mut one: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds + rounds / 10 {
        let t = Instant::now();
        one()?;
        if i >= rounds / 10 {
            times.push(t.elapsed());
        }
    }
    times.sort_unstable();
    Ok(times
        .get(times.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6))
}

/// One run of the raw flat baseline.
fn raw_flat(me: &str, b: usize, rounds: usize, waves: usize) -> anyhow::Result<Figures> {
    let t0 = Instant::now();
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?.to_string();
    let mut kids = Vec::with_capacity(b);
    for _ in 0..b {
        kids.push(
            Command::new(me)
                .args(["tbon-raw-child", &addr])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()?,
        );
    }
    let mut socks = Vec::with_capacity(b);
    for _ in 0..b {
        let (s, _) = l.accept()?;
        s.set_nodelay(true)?;
        socks.push(s);
    }
    let create_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut word = [0u8; 4];
    let round_trip_us = median_us(rounds, || -> anyhow::Result<()> {
        for s in &mut socks {
            s.write_all(&[1, 0, 0, 0, 0])?;
        }
        let mut sum = 0u32;
        for s in &mut socks {
            s.read_exact(&mut word)?;
            sum += u32::from_le_bytes(word);
        }
        anyhow::ensure!(sum as usize == b, "raw round trip sum {sum}");
        Ok(())
    })?;
    let t = Instant::now();
    let mut cmd = [2u8, 0, 0, 0, 0];
    cmd[1..].copy_from_slice(&(waves as u32).to_le_bytes());
    for s in &mut socks {
        s.write_all(&cmd)?;
    }
    // Each child streams its values; the front-end folds wave i from every child's i-th value,
    // reading through a buffer per child as a tool would.
    let mut readers: Vec<std::io::BufReader<&TcpStream>> =
        socks.iter().map(std::io::BufReader::new).collect();
    for _ in 0..waves {
        let mut sum = 0u32;
        for r in &mut readers {
            r.read_exact(&mut word)?;
            sum += u32::from_le_bytes(word);
        }
        anyhow::ensure!(sum as usize == b, "raw wave sum {sum}");
    }
    let waves_per_s = waves as f64 / t.elapsed().as_secs_f64();
    drop(readers);
    for s in &mut socks {
        s.write_all(&[0, 0, 0, 0, 0])?;
    }
    for mut k in kids {
        k.wait()?;
    }
    Ok(Figures {
        create_ms,
        round_trip_us,
        waves_per_s,
    })
}

/// `bench tbon-raw-child ADDR`: the raw baseline's back-end. Commands are 5 bytes: 1 (answer
/// one value), 2 + count (stream that many values), 0 (leave).
pub(crate) fn raw_child(addr: &str) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(600)))?;
    let mut cmd = [0u8; 5];
    loop {
        s.read_exact(&mut cmd)?;
        match cmd[0] {
            1 => s.write_all(&1u32.to_le_bytes())?,
            2 => {
                let n = u32::from_le_bytes([cmd[1], cmd[2], cmd[3], cmd[4]]) as usize;
                let mut w = std::io::BufWriter::new(&s);
                for _ in 0..n {
                    w.write_all(&1u32.to_le_bytes())?;
                }
                w.flush()?;
            }
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figure_has_a_line_per_layer_and_tree_and_one_raw_line_per_panel() {
        let f = |x: f64| Figures {
            create_ms: x,
            round_trip_us: 10.0 * x,
            waves_per_s: 1000.0 / x,
        };
        let rows: Vec<_> = [
            (8, "flat"),
            (8, "2-level/4"),
            (16, "flat"),
            (16, "2-level/4"),
        ]
        .into_iter()
        .flat_map(|(b, t)| {
            ["tcp", "si"].map(|l| (l.to_string(), t.to_string(), b, true, f(b as f64), f(1.0)))
        })
        .collect();
        for p in figure(&rows) {
            let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "tcp flat",
                    "si flat",
                    "tcp 2-level/4",
                    "si 2-level/4",
                    "raw flat TCP"
                ],
                "{}",
                p.title
            );
            // One point per back-end count on every line, the raw one too (once per count).
            assert!(p.series.iter().all(|s| s.points.len() == 2), "{}", p.title);
        }
    }

    use crate::render;

    #[test]
    fn the_figure_of_thirteen_lines_fits_a_window_1400_wide_its_text_legible() {
        // Two layers, three trees, recovery on and off, and the raw line: 13 lines a panel.
        let f = |b: usize, k: f64| Figures {
            create_ms: k * b as f64,
            round_trip_us: 10.0 * k * b as f64,
            waves_per_s: 1e5 / (k * b as f64),
        };
        let mut rows = Vec::new();
        for b in [16, 32] {
            for (k, (l, t, rec)) in ["tcp", "si"]
                .into_iter()
                .flat_map(|l| {
                    ["flat", "2-level/4", "2-level/8"]
                        .into_iter()
                        .flat_map(move |t| [true, false].map(move |r| (l, t, r)))
                })
                .enumerate()
            {
                let k = 1.0 + k as f64 / 4.0;
                rows.push((l.to_string(), t.to_string(), b, rec, f(b, k), f(b, 0.5)));
            }
        }
        let panels = figure(&rows);
        assert!(panels.iter().all(|p| p.series.len() == 13));
        let dir = std::env::temp_dir().join(format!("bench-tbon-figure-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tbon.svg");
        crate::plot::write_svg(&path, "tree overlay against back-ends", &panels).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap();
        let svg = doc.root_element();
        let attr = |a: &str| svg.attribute(a).unwrap_or("");
        let (w, h): (u32, u32) = (
            attr("width").parse().unwrap(),
            attr("height").parse().unwrap(),
        );
        // Three panels of 640 pixels made a figure 1920 wide: cut off in a 1400 window.
        assert!(w <= 1400, "{w} pixels wide");
        // Drawn at its own size, not scaled down, and no text smaller than 10 pixels.
        assert_eq!(attr("viewBox"), format!("0 0 {w} {h}"));
        for t in doc.descendants().filter(|n| n.has_tag_name("text")) {
            let size: f64 = t.attribute("font-size").unwrap_or("0").parse().unwrap();
            assert!(size >= 10.0, "{:?} at {size} px", t.text());
        }
        // As a person sees it in a wide window: nothing past 1400 pixels.
        let Some(wide) = render::render(&path, 2000, h, &dir) else {
            return;
        };
        let ink = |p: &[u8]| p.iter().any(|&c| c < 235);
        let rightmost = wide
            .0
            .chunks(3)
            .enumerate()
            .filter(|(_, p)| ink(p))
            .map(|(i, _)| i % 2000)
            .max()
            .unwrap_or(0);
        assert!(rightmost < 1400, "drawn up to x = {rightmost}");
        // In a window 1400 wide: the last panel's lines, in every colour, inside it.
        let img = render::render(&path, 1400, h, &dir).unwrap();
        let (_, _, legend_h) = crate::plot::size(&panels);
        let last_panel =
            |x: usize, y: usize| 3 * x >= 2 * w as usize && y < (h - legend_h) as usize;
        for i in 0..10 {
            let c = crate::plot::colour(i);
            let seen = img
                .0
                .chunks(3)
                .enumerate()
                .filter(|(k, p)| {
                    last_panel(k % 1400, k / 1400)
                        && u32::from(p[0].abs_diff(c.0))
                            + u32::from(p[1].abs_diff(c.1))
                            + u32::from(p[2].abs_diff(c.2))
                            < 40
                })
                .count();
            assert!(seen > 20, "colour {i}: {seen} pixels in the last panel");
        }
        // The legend's names, as laid out, apart from each other and inside the window.
        let names: Vec<_> = render::text_boxes(&path, "text", &dir)
            .unwrap()
            .into_iter()
            .filter(|t| panels[0].series.iter().any(|s| s.name == t.0))
            .collect();
        assert_eq!(names.len(), 13, "{names:?}");
        for (i, a) in names.iter().enumerate() {
            assert!(a.1 >= 0.0 && a.1 + a.3 <= 1400.0, "{a:?}");
            for b in &names[i + 1..] {
                let apart =
                    a.1 + a.3 <= b.1 || b.1 + b.3 <= a.1 || a.2 + a.4 <= b.2 || b.2 + b.4 <= a.2;
                assert!(apart, "{a:?} and {b:?} overlap");
            }
        }
        if std::env::var_os("BENCH_KEEP_PLOTS").is_none() {
            std::fs::remove_dir_all(&dir).ok();
        } else {
            eprintln!("plots kept in {}", dir.display());
        }
    }
}
