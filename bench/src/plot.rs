//! `--plot FILE.svg`: the table a subcommand prints, drawn. A figure is one or more panels side
//! by side; a panel is series of (x, y) points (one line and its markers per series, named in
//! the legend) on linear or logarithmic axes, or bars (one per series). SVG only: plotters'
//! SVG backend writes text as `<text>` elements, so no font library is needed to draw.

use anyhow::Context;
use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::path::Path;

/// One named line of a panel.
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// What a panel shows.
pub(crate) enum Kind {
    /// Lines of points; the flags say which axes are logarithmic.
    Lines { log_x: bool, log_y: bool },
    /// One bar per series, its height the series' first point's y (log-scaled when asked).
    Bars,
}

/// One chart of a figure.
pub(crate) struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: Kind,
    pub series: Vec<Series>,
    /// Where the legend goes: a corner the data leaves free.
    pub legend: SeriesLabelPosition,
}

/// Width and height of one panel, in pixels.
const PANEL: (u32, u32) = (640, 480);

/// Distinct colours, in series order (matplotlib's "tab10").
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of series `i`.
pub(crate) fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Group `(name, x, y)` triples into series, in the order names first appear.
pub(crate) fn series_by_name(points: impl IntoIterator<Item = (String, f64, f64)>) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for (name, x, y) in points {
        match out.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, y)),
            None => out.push(Series {
                name,
                points: vec![(x, y)],
            }),
        }
    }
    out
}

/// Draw `panels` side by side under `title` into the SVG file `path`.
pub(crate) fn write_svg(path: &Path, title: &str, panels: &[Panel]) -> anyhow::Result<()> {
    let n = panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (PANEL.0 * n, PANEL.1 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(draw_err)?;
    for (area, panel) in root.split_evenly((1, n as usize)).iter().zip(panels) {
        draw_panel(area, panel).with_context(|| format!("drawing '{}'", panel.title))?;
    }
    root.present()
        .map_err(draw_err)
        .with_context(|| format!("writing {}", path.display()))
}

fn draw_err<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e}")
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_panel(area: &Area<'_>, p: &Panel) -> anyhow::Result<()> {
    let pts = || p.series.iter().flat_map(|s| s.points.iter().copied());
    match p.kind {
        Kind::Bars => {
            let top = pts().map(|(_, y)| y).fold(0.0, f64::max);
            let n = p.series.len().max(1) as f64;
            // Room above the tallest bar for the legend in a top corner.
            lines_or_bars(area, p, 0.0..n, 0.0..(top * 1.3).max(1e-9))
        }
        Kind::Lines { log_x, log_y } => {
            let (x, y) = (
                span(pts().map(|q| q.0), log_x),
                span(pts().map(|q| q.1), log_y),
            );
            // plotters' own log ticks leave a range of less than a decade nearly bare (2 to 16
            // PEs: one tick, at 10) and crowd one of two decades: ours are chosen below.
            let xs: Vec<f64> = pts().map(|q| q.0).collect();
            let (kx, ky) = (log_ticks(x.clone(), &xs), log_ticks(y.clone(), &[]));
            match (log_x, log_y) {
                (true, true) => lines_or_bars(
                    area,
                    p,
                    x.log_scale().with_key_points(kx),
                    y.log_scale().with_key_points(ky),
                ),
                (true, false) => lines_or_bars(area, p, x.log_scale().with_key_points(kx), y),
                (false, true) => lines_or_bars(area, p, x, y.log_scale().with_key_points(ky)),
                (false, false) => lines_or_bars(area, p, x, y),
            }
        }
    }
}

/// The ticks of a log axis over `range`: the data's own values when they are few (message
/// sizes, PE counts: the values a reader looks up), else 1, 2, 5 times the powers of ten when
/// the range spans little more than two decades, else the powers of ten alone.
fn log_ticks(range: std::ops::Range<f64>, data: &[f64]) -> Vec<f64> {
    let mut mine: Vec<f64> = data
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    mine.sort_by(f64::total_cmp);
    mine.dedup();
    if (2..=8).contains(&mine.len()) {
        return mine;
    }
    let (lo, hi) = (range.start.max(f64::MIN_POSITIVE), range.end);
    let steps: &[f64] = if hi / lo <= 300.0 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        out.extend(
            steps
                .iter()
                .map(|s| s * decade)
                .filter(|v| (lo..=hi).contains(v)),
        );
        decade *= 10.0;
    }
    out
}

/// The range an axis shows: the data's, with a margin; from 0 on a linear axis of positive
/// values, so heights compare; never empty, never below 0 on a log axis.
fn span(v: impl Iterator<Item = f64>, log: bool) -> std::ops::Range<f64> {
    let (lo, hi) = v
        .filter(|x| x.is_finite() && (!log || *x > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
    if !lo.is_finite() {
        return if log { 1.0..10.0 } else { 0.0..1.0 };
    }
    if log {
        (lo / 1.5)..(hi * 1.5).max(lo * 2.0)
    } else {
        let lo = if lo >= 0.0 { 0.0 } else { lo * 1.1 };
        lo..(hi * 1.1).max(lo + 1e-9)
    }
}

fn lines_or_bars<X, Y>(area: &Area<'_>, p: &Panel, x: X, y: Y) -> anyhow::Result<()>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(draw_err)?;
    let bars = matches!(p.kind, Kind::Bars);
    let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
    let bar_label = |x: &f64| {
        // Bars sit at i + 0.5; a tick there is the series' name, elsewhere nothing.
        let i = x.floor();
        if bars && (x - i - 0.5).abs() < 1e-6 && i >= 0.0 {
            names
                .get(i as usize)
                .map_or(String::new(), |s| s.to_string())
        } else if bars {
            String::new()
        } else {
            tick(*x)
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&p.x_label)
        .y_desc(&p.y_label)
        .x_label_formatter(&bar_label)
        .y_label_formatter(&|v| tick(*v))
        .label_style(("sans-serif", 13));
    if bars {
        mesh.x_labels(2 * names.len() + 1).disable_x_mesh();
    }
    mesh.draw().map_err(draw_err)?;
    for (i, s) in p.series.iter().enumerate() {
        let c = colour(i);
        let drawn = if bars {
            let h = s.points.first().map_or(0.0, |q| q.1);
            let x0 = i as f64 + 0.15;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x0 + 0.7, h)],
                    c.filled(),
                )))
                .map_err(draw_err)?
        } else {
            chart
                .draw_series(s.points.iter().map(|&q| Circle::new(q, 3, c.filled())))
                .map_err(draw_err)?;
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                .map_err(draw_err)?
        };
        let entry = drawn.label(s.name.as_str());
        if bars {
            entry.legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        } else {
            entry.legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
            });
        }
    }
    chart
        .configure_series_labels()
        .position(p.legend.clone())
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// A tick label: short, without trailing zeros (1, 64, 4096, 1.5e7), whole MiB as such (the
/// message sizes of the tables).
fn tick(v: f64) -> String {
    let a = v.abs();
    const MIB: f64 = 1048576.0;
    if a == 0.0 {
        "0".into()
    } else if a >= MIB && (a / MIB).fract() == 0.0 {
        format!("{} MiB", v / MIB)
    } else if !(1e-2..1e6).contains(&a) {
        // Two significant digits: 1.5e7 and 2e7 are different ticks.
        let s = format!("{v:.1e}");
        s.replace(".0e", "e")
    } else if a >= 100.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure() -> Vec<Panel> {
        let sizes = [8.0, 64.0, 4096.0, 1048576.0];
        let s = |name: &str, f: f64| Series {
            name: name.into(),
            points: sizes.iter().map(|&x| (x, f * (1.0 + x / 1e3))).collect(),
        };
        vec![
            Panel {
                title: "latency".into(),
                x_label: "bytes".into(),
                y_label: "us".into(),
                kind: Kind::Lines {
                    log_x: true,
                    log_y: true,
                },
                series: vec![s("tcp", 10.0), s("raw-tcp", 5.0), s("tcp-layer-only", 7.0)],
                legend: SeriesLabelPosition::UpperLeft,
            },
            Panel {
                title: "rate".into(),
                x_label: "".into(),
                y_label: "messages/s".into(),
                kind: Kind::Bars,
                series: vec![
                    Series {
                        name: "chain".into(),
                        points: vec![(0.0, 3e7)],
                    },
                    Series {
                        name: "burst".into(),
                        points: vec![(0.0, 2e7)],
                    },
                ],
                legend: SeriesLabelPosition::UpperRight,
            },
        ]
    }

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    #[test]
    fn a_figure_is_valid_svg_with_one_line_and_one_legend_entry_per_series() {
        let dir = std::env::temp_dir().join(format!("bench-plot-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.svg");
        write_svg(&path, "figure", &figure()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("valid XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(|t| t.trim().to_owned()))
            .collect();
        for name in [
            "tcp",
            "raw-tcp",
            "tcp-layer-only",
            "chain",
            "burst",
            "figure",
        ] {
            assert!(
                texts.iter().any(|t| t == name),
                "no text '{name}' in {texts:?}"
            );
        }
        // Each line series: one polyline of its data and one in its legend, in its colour.
        let polylines: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .collect();
        for i in 0..3 {
            let c = hex(colour(i));
            let n = polylines
                .iter()
                .filter(|p| {
                    p.attribute("stroke")
                        .is_some_and(|s| s.eq_ignore_ascii_case(&c))
                })
                .count();
            assert_eq!(n, 2, "series {i} ({c}): {n} polylines");
        }
        // The data line of a series has one vertex per point.
        let data = polylines.iter().find(|p| {
            p.attribute("stroke")
                .is_some_and(|s| s.eq_ignore_ascii_case(&hex(colour(0))))
                && p.attribute("points")
                    .is_some_and(|v| v.split_whitespace().count() == 4)
        });
        assert!(data.is_some());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn spans_are_never_empty_and_log_spans_stay_positive() {
        let r = span([0.0, 5.0].into_iter(), true);
        assert!(r.start > 0.0 && r.end > r.start);
        let r = span(std::iter::empty(), false);
        assert!(r.end > r.start);
        let r = span([3.0, 3.0].into_iter(), false);
        assert!(r.end > r.start);
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(4096.0), "4096");
        assert_eq!(tick(1.5), "1.5");
        assert_eq!(tick(2e7), "2e7");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(1.5e7), "1.5e7");
        assert_eq!(tick(2.5e7), "2.5e7");
        assert_eq!(tick(4194304.0), "4 MiB");
        assert_eq!(tick(0.001), "1e-3");
    }

    #[test]
    fn log_ticks_are_the_data_when_few_else_round_numbers_in_range() {
        assert_eq!(
            log_ticks(1.3..24.0, &[2.0, 4.0, 8.0, 16.0, 4.0]),
            [2.0, 4.0, 8.0, 16.0]
        );
        assert_eq!(log_ticks(1.3..24.0, &[]), [2.0, 5.0, 10.0, 20.0]);
        assert_eq!(log_ticks(5.0..5e6, &[]), [10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
        // Never empty for a range of positive values that holds a tick.
        assert!(!log_ticks(0.06..400.0, &[]).is_empty());
    }

    #[test]
    fn series_group_by_name_in_first_seen_order() {
        let s = series_by_name([
            ("b".to_string(), 1.0, 2.0),
            ("a".to_string(), 1.0, 3.0),
            ("b".to_string(), 2.0, 4.0),
        ]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "b");
        assert_eq!(s[0].points, vec![(1.0, 2.0), (2.0, 4.0)]);
    }
}
