//! Projections' views of the report, each its own SVG picture: utilization over time (per
//! PE, per node, per communication thread), time per handler over time, and histograms of
//! handler durations and message sizes.
//!
//! Every drawn figure carries its number in `data-` attributes and a `<title>` (the tooltip),
//! so that what a person hovers and what a test reads back are the figures drawn.

use super::{esc, ms, rgb, PALETTE};
use crate::profile::{self, Bins, Histogram};
use crate::Job;
use converse::trace_format::human_bytes;
use std::collections::HashMap;
use std::fmt::Write;

/// Time bins of the over-time views.
pub const TIME_BINS: usize = 100;

/// Rows of the utilization map at most: a job of more PEs shares rows between consecutive
/// PEs (their mean), so that the page stays the same size whatever the job's.
pub const UTIL_ROWS: usize = 64;

/// The utilization map's colour for a fully busy cell (idle is white).
pub const BUSY: (u8, u8, u8) = (8, 48, 107);

/// Where the over-time views put the time axis: left edge and width, in SVG pixels.
pub const PLOT_X: f64 = 170.0;
/// Width of the over-time views' plots.
pub const PLOT_W: f64 = 800.0;
/// Height of a utilization row.
pub const UTIL_ROW_H: f64 = 14.0;
/// Height of the handler profile's plot (100% of the PEs' time).
pub const PROFILE_H: f64 = 200.0;

/// The colour of a utilization of `f` (0 to 1).
pub fn shade(f: f64) -> (u8, u8, u8) {
    let f = f.clamp(0.0, 1.0);
    let mix = |hot: u8| (255.0 - f * (255.0 - f64::from(hot))).round() as u8;
    (mix(BUSY.0), mix(BUSY.1), mix(BUSY.2))
}

fn svg_open(s: &mut String, w: f64, h: f64, class: &str) {
    let _ = write!(
        s,
        "<svg class=\"{class}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" \
         height=\"{h}\" viewBox=\"0 0 {w} {h}\" style=\"display:block\" \
         font-family=\"sans-serif\" font-size=\"12\"><rect width=\"{w}\" height=\"{h}\" \
         fill=\"white\"/>"
    );
}

/// A time axis under a plot whose top is `y`.
fn time_axis(s: &mut String, y: f64, end: f64) {
    let _ = write!(
        s,
        "<line x1=\"{PLOT_X}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"black\"/>",
        PLOT_X + PLOT_W
    );
    for q in 0..=4 {
        let x = PLOT_X + PLOT_W * f64::from(q) / 4.0;
        let _ = write!(
            s,
            "<line x1=\"{x}\" y1=\"{y}\" x2=\"{x}\" y2=\"{}\" stroke=\"black\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
            y + 4.0,
            y + 16.0,
            ms(end * f64::from(q) / 4.0)
        );
    }
}

/// One row of the utilization map.
struct Row {
    label: String,
    util: Vec<f64>,
}

/// The mean of `rows`' utilizations, bin by bin.
fn mean(rows: &[&Vec<f64>], n: usize) -> Vec<f64> {
    let k = rows.len().max(1) as f64;
    (0..n)
        .map(|b| {
            rows.iter()
                .map(|r| r.get(b).copied().unwrap_or(0.0))
                .sum::<f64>()
                / k
        })
        .collect()
}

/// The rows: PEs (grouped past [`UTIL_ROWS`]), nodes when a node has several PEs, and the
/// communication threads.
fn util_rows(job: &Job, bins: Bins) -> Vec<Row> {
    let per_pe = profile::utilization(job, bins);
    let mut rows = Vec::new();
    let per = per_pe.len().div_ceil(UTIL_ROWS).max(1);
    for (g, chunk) in per_pe.chunks(per).enumerate() {
        let first = job.traces.get(g * per).map_or(0, |t| t.header.pe);
        let last = job
            .traces
            .get(g * per + chunk.len() - 1)
            .map_or(first, |t| t.header.pe);
        let label = if chunk.len() > 1 {
            format!("PEs {first}–{last}")
        } else {
            format!("PE {first}")
        };
        let refs: Vec<&Vec<f64>> = chunk.iter().collect();
        rows.push(Row {
            label,
            util: mean(&refs, bins.n),
        });
    }
    let nodes = profile::node_utilization(job, &per_pe);
    if nodes.len() < job.traces.len() {
        let per = nodes.len().div_ceil(UTIL_ROWS / 2).max(1);
        for chunk in nodes.chunks(per) {
            let (first, last) = (chunk[0].0, chunk[chunk.len() - 1].0);
            let label = if chunk.len() > 1 {
                format!("nodes {first}–{last}")
            } else {
                format!("node {first}")
            };
            let refs: Vec<&Vec<f64>> = chunk.iter().map(|n| &n.2).collect();
            rows.push(Row {
                label,
                util: mean(&refs, bins.n),
            });
        }
    }
    let comm = profile::comm_utilization(job, bins);
    let per = comm.len().div_ceil(UTIL_ROWS / 2).max(1);
    for (g, chunk) in comm.chunks(per).enumerate() {
        let label = if chunk.len() > 1 {
            format!(
                "{} threads from node {}",
                chunk.len(),
                job.comm.get(g * per).map_or(0, |t| t.header.pe)
            )
        } else {
            job.comm
                .get(g * per)
                .map_or_else(String::new, profile::comm_label)
        };
        let refs: Vec<&Vec<f64>> = chunk.iter().collect();
        rows.push(Row {
            label,
            util: mean(&refs, bins.n),
        });
    }
    rows
}

/// Utilization over time: a row per PE (node, communication thread), a column per time bin,
/// darker for busier; the row's mean on its right.
pub(super) fn utilization(job: &Job) -> String {
    let bins = Bins::of(job, TIME_BINS);
    let rows = util_rows(job, bins);
    let top = 40.0;
    let h = top + rows.len() as f64 * UTIL_ROW_H + 40.0;
    let mut s = String::new();
    svg_open(&mut s, 1100.0, h, "utilization");
    let _ = write!(
        s,
        "<text x=\"16\" y=\"22\">utilization over time: the share of each of {} bins of {} \
         spent in handlers (communication threads: moving messages); white idle, darkest \
         100%; right: the mean</text>",
        bins.n,
        ms(bins.width)
    );
    let cw = PLOT_W / bins.n as f64;
    for (k, row) in rows.iter().enumerate() {
        let y = top + k as f64 * UTIL_ROW_H;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">{}</text>",
            PLOT_X - 6.0,
            y + UTIL_ROW_H - 3.0,
            esc(&row.label)
        );
        for (b, &u) in row.util.iter().enumerate() {
            let from = b as f64 * bins.width;
            let _ = write!(
                s,
                "<rect x=\"{:.2}\" y=\"{y}\" width=\"{:.2}\" height=\"{}\" fill=\"{}\" \
                 data-row=\"{}\" data-bin=\"{b}\" data-util=\"{:.1}\"><title>{}, {}–{}: \
                 {:.0}%</title></rect>",
                PLOT_X + b as f64 * cw,
                cw + 0.3,
                UTIL_ROW_H - 1.0,
                rgb(shade(u)),
                esc(&row.label),
                100.0 * u,
                esc(&row.label),
                ms(from),
                ms(from + bins.width),
                100.0 * u
            );
        }
        let avg = row.util.iter().sum::<f64>() / bins.n as f64;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" font-size=\"11\" data-mean-row=\"{}\" \
             data-mean=\"{:.1}\">{:.0}%</text>",
            PLOT_X + PLOT_W + 8.0,
            y + UTIL_ROW_H - 3.0,
            esc(&row.label),
            100.0 * avg,
            100.0 * avg
        );
    }
    time_axis(
        &mut s,
        top + rows.len() as f64 * UTIL_ROW_H + 2.0,
        job.end() as f64,
    );
    s += "</svg>";
    s
}

/// Time per handler over time: per time bin, a bar stacked by handler, its height the share
/// of all PEs' time spent in each (the busiest handlers each a colour, the rest together).
pub(super) fn handler_profile(job: &Job, colours: &HashMap<String, usize>) -> String {
    let bins = Bins::of(job, TIME_BINS);
    // The palette's last colour stands for every handler past it.
    let mut names: Vec<(String, usize)> = colours.iter().map(|(n, &c)| (n.clone(), c)).collect();
    names.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let name_list: Vec<String> = names.iter().map(|n| n.0.clone()).collect();
    let prof = profile::handler_profile(job, bins, &name_list);
    let shown = PALETTE.len();
    let legend_rows = shown.min(names.len()).div_ceil(4);
    let top = 40.0;
    let h = top + PROFILE_H + 40.0 + legend_rows as f64 * 18.0 + 10.0;
    let mut s = String::new();
    svg_open(&mut s, 1100.0, h, "profile");
    let _ = write!(
        s,
        "<text x=\"16\" y=\"22\">time per handler over time: per bin of {}, the share of \
         the {} PEs' time in each handler (self time)</text>",
        ms(bins.width),
        job.traces.len()
    );
    let full = bins.width * job.traces.len().max(1) as f64;
    let cw = PLOT_W / bins.n as f64;
    for q in 0..=4 {
        let y = top + PROFILE_H * (1.0 - f64::from(q) / 4.0);
        let _ = write!(
            s,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\">{}%</text>",
            PLOT_X,
            PLOT_X + PLOT_W,
            PLOT_X - 6.0,
            y + 3.0,
            25 * q
        );
    }
    for (b, per) in prof.iter().enumerate() {
        let mut y = top + PROFILE_H;
        // One bar per colour, the palette's order from the bottom.
        let mut by_colour = vec![0f64; shown];
        for (k, &ns) in per.iter().enumerate() {
            by_colour[names[k].1.min(shown - 1)] += ns;
        }
        for (c, &ns) in by_colour.iter().enumerate() {
            if ns <= 0.0 {
                continue;
            }
            let hgt = (ns / full * PROFILE_H).min(y - top);
            y -= hgt;
            let who = if c == shown - 1 && names.len() > shown {
                "the other handlers".to_owned()
            } else {
                names
                    .iter()
                    .find(|n| n.1 == c)
                    .map_or_else(String::new, |n| n.0.clone())
            };
            let _ = write!(
                s,
                "<rect x=\"{:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{hgt:.2}\" fill=\"{}\" \
                 data-bin=\"{b}\" data-handler=\"{}\" data-ns=\"{ns:.0}\"><title>{}: {} in \
                 {}–{}</title></rect>",
                PLOT_X + b as f64 * cw,
                cw + 0.3,
                rgb(PALETTE[c]),
                esc(&who),
                esc(&who),
                ms(ns),
                ms(b as f64 * bins.width),
                ms((b + 1) as f64 * bins.width)
            );
        }
    }
    time_axis(&mut s, top + PROFILE_H + 2.0, job.end() as f64);
    // The legend, under the plot: it covers nothing.
    for (k, (name, c)) in names.iter().take(shown).enumerate() {
        let x = PLOT_X + (k % 4) as f64 * 200.0;
        let y = top + PROFILE_H + 40.0 + (k / 4) as f64 * 18.0;
        let label = if *c == shown - 1 && names.len() > shown {
            format!("{} other handlers", names.len() - (shown - 1))
        } else {
            name.clone()
        };
        let _ = write!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>",
            y - 10.0,
            rgb(PALETTE[*c]),
            x + 16.0,
            y,
            esc(&label)
        );
    }
    s += "</svg>";
    s
}

/// A histogram's bar chart, `label` naming each bin by its lower edge.
fn histogram(
    s: &mut String,
    title: &str,
    what: &str,
    h: &Histogram,
    label: impl Fn(u64) -> String,
) {
    const W: f64 = 1100.0;
    const TOP: f64 = 40.0;
    const PLOT_H: f64 = 160.0;
    svg_open(s, W, TOP + PLOT_H + 60.0, what);
    let _ = write!(
        s,
        "<text x=\"16\" y=\"22\">{} ({} in all)</text>",
        esc(title),
        h.total()
    );
    let most = h.counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let n = h.counts.len().max(1) as f64;
    let bw = (PLOT_W / n).min(60.0);
    for (k, (&edge, &count)) in h.edges.iter().zip(&h.counts).enumerate() {
        let x = PLOT_X + k as f64 * bw;
        let hgt = count as f64 / most * PLOT_H;
        let y = TOP + PLOT_H - hgt;
        let name = match h.edges.get(k + 1) {
            Some(&next) => format!("{} to {}", label(edge), label(next)),
            None => format!("{} and over", label(edge)),
        };
        let _ = write!(
            s,
            "<rect x=\"{:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{hgt:.2}\" \
             fill=\"rgb(70,110,160)\" data-from=\"{edge}\" data-count=\"{count}\"><title>{}: \
             {count}</title></rect>",
            x + 1.0,
            bw - 2.0,
            esc(&name)
        );
        if count > 0 {
            let _ = write!(
                s,
                "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\" font-size=\"10\">{count}\
                 </text>",
                x + bw / 2.0,
                y - 3.0
            );
        }
        // Every other label when they would touch.
        if bw >= 40.0 || k % 2 == 0 {
            let _ = write!(
                s,
                "<text x=\"{:.2}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                x + bw / 2.0,
                TOP + PLOT_H + 16.0,
                esc(&label(edge))
            );
        }
    }
    let _ = write!(
        s,
        "<line x1=\"{PLOT_X}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"black\"/>\
         <text x=\"{PLOT_X}\" y=\"{}\" font-size=\"10\">bins by lower edge</text></svg>",
        PLOT_X + bw * n,
        TOP + PLOT_H + 36.0,
        y = TOP + PLOT_H
    );
}

/// A bin edge of whole units as a person writes it: `0`, `500 ns`, `2 µs`, `50 ms`, `1 s`.
fn round_time(ns: u64) -> String {
    match ns {
        0 => "0".into(),
        n if n >= 1_000_000_000 && n % 1_000_000_000 == 0 => format!("{} s", n / 1_000_000_000),
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{} ms", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{} µs", n / 1_000),
        n => format!("{n} ns"),
    }
}

/// Histograms of handler durations and of message sizes.
pub(super) fn histograms(job: &Job) -> String {
    let mut s = String::new();
    histogram(
        &mut s,
        "handler durations (begin to end, every run)",
        "durations",
        &profile::duration_histogram(job),
        round_time,
    );
    histogram(
        &mut s,
        "message sizes (wire bytes, every send)",
        "sizes",
        &profile::size_histogram(job),
        human_bytes,
    );
    s
}
