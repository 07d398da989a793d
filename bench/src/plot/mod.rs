//! `--plot FILE.svg`: the table a subcommand prints, drawn. A figure is one or more panels side
//! by side, at most [`MAX_WIDTH`] pixels wide in all; a panel is series of (x, y) points (one
//! line and its markers per series) on linear or logarithmic axes, or bars (one per series).
//! The legend names the series below the panels, where it covers nothing: one for the figure
//! when its panels show the same series, else one under each panel. Every series looks
//! different from the others ([`style()`]). SVG only: plotters' SVG backend writes text as
//! `<text>` elements, so no font library is needed to draw.

use anyhow::Context;
use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::path::Path;

mod legend;
mod style;
#[cfg(test)]
pub(crate) use style::colour;
use style::{outline, style};

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
}

/// Width and height of one panel, in pixels, when the figure is not too wide for it.
const PANEL: (u32, u32) = (640, 480);
/// Widest a figure is, in pixels: it fits a browser window 1400 pixels wide, with the page's
/// margins, at its own size (a figure scaled down to fit would shrink its text).
pub(crate) const MAX_WIDTH: u32 = 1380;
/// Height of the figure's title line.
const TITLE_H: u32 = 40;

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

/// The legend entries of `p`'s series.
fn entries(p: &Panel) -> Vec<legend::Entry<'_>> {
    p.series
        .iter()
        .enumerate()
        .map(|(i, s)| legend::Entry {
            name: &s.name,
            style: style(i),
            bar: matches!(p.kind, Kind::Bars),
        })
        .collect()
}

/// Whether the panels show the same series (names, order and kind): one legend then serves.
fn one_legend(panels: &[Panel]) -> bool {
    panels.windows(2).all(|w| {
        matches!(
            (&w[0].kind, &w[1].kind),
            (Kind::Bars, Kind::Bars) | (Kind::Lines { .. }, Kind::Lines { .. })
        ) && w[0].series.len() == w[1].series.len()
            && w[0]
                .series
                .iter()
                .zip(&w[1].series)
                .all(|(a, b)| a.name == b.name)
    })
}

/// Width and height of the figure of `panels`, and the height of its legend band.
pub(crate) fn size(panels: &[Panel]) -> (u32, u32, u32) {
    let n = panels.len().max(1) as u32;
    let panel_w = PANEL.0.min(MAX_WIDTH / n);
    let legend_h = if one_legend(panels) {
        panels
            .first()
            .map_or(0, |p| legend::height(&entries(p), panel_w * n))
    } else {
        panels
            .iter()
            .map(|p| legend::height(&entries(p), panel_w))
            .max()
            .unwrap_or(0)
    };
    (panel_w * n, TITLE_H + PANEL.1 + legend_h, legend_h)
}

/// Draw `panels` side by side under `title` into the SVG file `path`, the legend below.
pub(crate) fn write_svg(path: &Path, title: &str, panels: &[Panel]) -> anyhow::Result<()> {
    let n = panels.len().max(1);
    let (w, h, legend_h) = size(panels);
    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(draw_err)?;
    let (_, below_title) = root.dim_in_pixel();
    let (charts, legends) = root.split_vertically(below_title.saturating_sub(legend_h));
    for (area, panel) in charts.split_evenly((1, n)).iter().zip(panels) {
        draw_panel(area, panel).with_context(|| format!("drawing '{}'", panel.title))?;
    }
    if one_legend(panels) {
        if let Some(p) = panels.first() {
            legend::draw(&legends, &entries(p))?;
        }
    } else {
        for (area, p) in legends.split_evenly((1, n)).iter().zip(panels) {
            legend::draw(area, &entries(p))?;
        }
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
            lines_or_bars(area, p, 0.0..n, 0.0..(top * 1.1).max(1e-9))
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
        let look = style(i);
        let c = look.colour;
        if bars {
            let h = s.points.first().map_or(0.0, |q| q.1);
            let x0 = i as f64 + 0.15;
            let corners = [(x0, 0.0), (x0 + 0.7, h)];
            let bar = if look.dashed {
                Rectangle::new(corners, c.stroke_width(2))
            } else {
                Rectangle::new(corners, c.filled())
            };
            chart.draw_series(std::iter::once(bar)).map_err(draw_err)?;
            continue;
        }
        let line = c.stroke_width(2);
        let points = s.points.iter().copied();
        if look.dashed {
            chart
                .draw_series(DashedLineSeries::new(points, 8, 5, line))
                .map_err(draw_err)?;
        } else {
            chart
                .draw_series(LineSeries::new(points, line))
                .map_err(draw_err)?;
        }
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|&q| EmptyElement::at(q) + Polygon::new(outline(look.marker), c.filled())),
            )
            .map_err(draw_err)?;
    }
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
mod tests;
