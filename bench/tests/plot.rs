//! `bench ... --plot FILE.svg`, checked from outside: short runs of the subcommands write valid
//! SVG holding one line per series the table shows (named in the legend), and headless
//! Chromium renders one into a picture with the series' colours on a white page. The render is
//! skipped, saying so, when Chromium is not installed.

use std::path::{Path, PathBuf};

#[path = "../../tests/src/render.rs"]
mod render;
mod run;
use render::{render, Image};
use run::{bench, dir};

/// The trimmed texts of an SVG and the stroke colours of its polylines (one entry each).
fn svg_parts(path: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(path).expect("the plot was written");
    let doc = roxmltree::Document::parse(&text).expect("the plot is valid XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_owned()))
        .collect();
    let strokes = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter_map(|n| n.attribute("stroke").map(str::to_ascii_uppercase))
        .collect();
    (texts, strokes)
}

/// The legend's box of an SVG plot (its one unfilled black-bordered rect, as x, y, width,
/// height), the lowest of its points (filled markers in the palette's colours, its legend's
/// samples aside) and the plot's width and height.
fn legend_and_points(path: &Path) -> ((f64, f64, f64, f64), f64, (f64, f64)) {
    let text = std::fs::read_to_string(path).expect("the plot was written");
    let doc = roxmltree::Document::parse(&text).expect("the plot is valid XML");
    let num = |n: &roxmltree::Node<'_, '_>, a: &str| {
        n.attribute(a)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let boxes: Vec<_> = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("rect")
                && n.attribute("fill") == Some("none")
                && n.attribute("stroke") == Some("#000000")
        })
        .map(|n| {
            (
                num(&n, "x"),
                num(&n, "y"),
                num(&n, "width"),
                num(&n, "height"),
            )
        })
        .collect();
    assert_eq!(boxes.len(), 1, "one legend: {boxes:?}");
    let legend = boxes[0];
    let ys: Vec<f64> = doc
        .descendants()
        .filter(|n| {
            (n.has_tag_name("polygon") || n.has_tag_name("circle"))
                && n.attribute("fill")
                    .is_some_and(|f| PALETTE.iter().any(|c| c.eq_ignore_ascii_case(f)))
        })
        .filter_map(|n| {
            if n.has_tag_name("circle") {
                return Some(num(&n, "cy"));
            }
            let v: Vec<f64> = n
                .attribute("points")?
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter_map(|x| x.parse().ok())
                .collect();
            Some(v.iter().skip(1).step_by(2).sum::<f64>() / (v.len() / 2).max(1) as f64)
        })
        .filter(|&y| y < legend.1 || y > legend.1 + legend.3)
        .collect();
    assert!(!ys.is_empty(), "no points");
    let root = doc.root_element();
    (
        legend,
        ys.iter().copied().fold(0.0, f64::max),
        (num(&root, "width"), num(&root, "height")),
    )
}

/// The first colours of the plots' palette, as the SVG writes them.
const PALETTE: [&str; 3] = ["#1F77B4", "#FF7F0E", "#2CA02C"];

#[test]
fn pingpong_plot_has_a_latency_and_a_bandwidth_line_per_path() {
    let d = dir("pingpong");
    let svg = d.join("pp.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    bench(
        &[
            "pingpong",
            "--layer",
            "local",
            "--sizes",
            "8,4096,65536",
            "--iters",
            "200",
            "--plot",
            &svg_arg,
        ],
        120,
    );
    let (texts, strokes) = svg_parts(&svg);
    for t in [
        "runtime on local",
        "raw-crossbeam",
        "one-way latency (p50)",
        "bandwidth",
        "message size (bytes)",
    ] {
        assert!(texts.iter().any(|x| x == t), "no '{t}' in {texts:?}");
    }
    // Two series on two panels: per series its data line on each panel and its line in the
    // legend the panels share.
    for c in &PALETTE[..2] {
        let n = strokes.iter().filter(|s| *s == c).count();
        assert_eq!(n, 3, "polylines in {c}: {n}");
    }
    assert!(!strokes.iter().any(|s| s == PALETTE[2]), "a third series");
    // The legend is below the panels, under every point: it covers none.
    let (legend, lowest_point, (w, h)) = legend_and_points(&svg);
    assert!(
        legend.1 > lowest_point && legend.1 + legend.3 <= h,
        "legend {legend:?}, lowest point at {lowest_point}, {w}x{h}"
    );
    if let Some(img) = render(&svg, w as u32, h as u32, &d) {
        let blue = count_near(&img, (31, 119, 180));
        let orange = count_near(&img, (255, 127, 14));
        let white = count_near(&img, (255, 255, 255));
        let total = img.1 as usize * img.2 as usize;
        assert!(
            blue > 200 && orange > 200,
            "lines: {blue} blue, {orange} orange pixels"
        );
        assert!(white > total / 2, "a white page: {white} of {total}");
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn rate_plot_has_one_bar_per_row() {
    let d = dir("rate");
    let svg = d.join("rate.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    bench(&["rate", "--messages", "20000", "--plot", &svg_arg], 60);
    let (texts, _) = svg_parts(&svg);
    for t in [
        "runtime-chain",
        "runtime-burst",
        "raw-alloc-queue-call",
        "messages/s",
    ] {
        assert!(texts.iter().any(|x| x == t), "no '{t}' in {texts:?}");
    }
    let text = std::fs::read_to_string(&svg).expect("svg");
    let doc = roxmltree::Document::parse(&text).expect("valid XML");
    // A bar and a legend swatch per row, filled with its colour.
    for c in PALETTE {
        let n = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|n| {
                n.attribute("fill")
                    .is_some_and(|f| f.eq_ignore_ascii_case(c))
            })
            .count();
        assert_eq!(n, 2, "rects in {c}: {n}");
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn startup_plot_has_the_job_and_its_floor_against_pes() {
    let me = PathBuf::from(env!("CARGO_BIN_EXE_bench"));
    if !me.with_file_name("charmrun").is_file() {
        eprintln!("SKIPPED: no charmrun next to bench (cargo build --release -p charmrun)");
        return;
    }
    let d = dir("startup");
    let svg = d.join("startup.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    bench(&["startup", "--pes", "1,2", "--plot", &svg_arg], 120);
    let (texts, strokes) = svg_parts(&svg);
    for t in ["charmrun job (tcp)", "fork/exec + connect back", "PEs"] {
        assert!(texts.iter().any(|x| x == t), "no '{t}' in {texts:?}");
    }
    for c in &PALETTE[..2] {
        assert_eq!(strokes.iter().filter(|s| *s == c).count(), 2, "{c}");
    }
    std::fs::remove_dir_all(&d).ok();
}

/// How many pixels are within a small distance of `rgb`.
fn count_near(img: &Image, rgb: (u8, u8, u8)) -> usize {
    let d = |x: u8, y: u8| (i32::from(x) - i32::from(y)).abs();
    img.0
        .chunks(3)
        .filter(|p| d(p[0], rgb.0) + d(p[1], rgb.1) + d(p[2], rgb.2) < 40)
        .count()
}
