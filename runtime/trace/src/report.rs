//! The HTML report: one self-contained page (no script, no external file) holding one SVG
//! picture — the per-PE timeline with the messages between PEs, the time per handler, the
//! PE×PE communication matrix as a heat map — and tables of the same figures below it.
//!
//! The timeline is drawn per pixel column: a column of a PE's row takes the colour of the
//! handler that ran longest in it when handlers ran at least a quarter of the column's time,
//! else light grey when the PE was mostly idle there. So the picture stays the same size
//! whatever the trace's length, and a busy PE looks busy at any zoom.

use crate::summary::{self, HandlerTime};
use crate::{Job, Kind};
use converse::trace_format::human_bytes;
use std::fmt::Write;

/// Colours of the handlers, in the order of [`summary::handler_times`] (the busiest first);
/// handlers past the palette share its last colour.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (188, 189, 34),
    (23, 190, 207),
    (90, 90, 90),
];

/// The colour of idle time on the timeline.
pub const IDLE: (u8, u8, u8) = (215, 215, 215);

/// The colour of the layer's boot on the timeline.
pub const BOOT: (u8, u8, u8) = (180, 205, 230);

/// The matrix's colour for the busiest pair (others fade toward white).
pub const HOT: (u8, u8, u8) = (178, 24, 43);

/// Where the picture puts things, in pixels of the SVG (which starts at the page's top left).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    /// Width of the picture.
    pub width: f64,
    /// Height of the picture.
    pub height: f64,
    /// Left edge of the timeline's drawing area.
    pub timeline_x: f64,
    /// Top of the first PE's row.
    pub timeline_y: f64,
    /// Width of the timeline's drawing area (time 0 to the job's end).
    pub timeline_w: f64,
    /// Height of a PE's row.
    pub row_h: f64,
    /// Rows (PEs).
    pub rows: usize,
    /// Top of the handler bars.
    pub handlers_y: f64,
    /// Left edge of the matrix.
    pub matrix_x: f64,
    /// Top of the matrix.
    pub matrix_y: f64,
    /// Side of one matrix cell.
    pub cell: f64,
}

/// Handler bars drawn (the busiest ones).
const BARS: usize = 10;

impl Layout {
    /// The layout of `job`'s picture.
    pub fn of(job: &Job) -> Layout {
        let rows = job.traces.len();
        let row_h = (600.0 / rows.max(1) as f64).clamp(4.0, 22.0);
        let timeline_y = 70.0;
        let handlers_y = timeline_y + rows as f64 * row_h + 60.0;
        let bars = summary::handler_times(job).len().min(BARS);
        let n = summary::matrix(job).len().max(1);
        let cell = (360.0 / n as f64).clamp(2.0, 36.0);
        let matrix_y = handlers_y + bars as f64 * 18.0 + 70.0;
        Layout {
            width: 1100.0,
            height: matrix_y + cell * n as f64 + 40.0,
            timeline_x: 110.0,
            timeline_y,
            timeline_w: 960.0,
            row_h,
            rows,
            handlers_y,
            matrix_x: 110.0,
            matrix_y,
            cell,
        }
    }
}

fn rgb(c: (u8, u8, u8)) -> String {
    format!("rgb({},{},{})", c.0, c.1, c.2)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

/// The colour index of each handler name (busiest first).
fn colours(times: &[HandlerTime]) -> std::collections::HashMap<String, usize> {
    times
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name.clone(), i.min(PALETTE.len() - 1)))
        .collect()
}

/// The report page for `job`.
pub fn html(job: &Job) -> String {
    let times = summary::handler_times(job);
    let mut page = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>converse trace</title>\
         <style>body{margin:0;font-family:sans-serif}table{border-collapse:collapse;margin:16px}\
         td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head><body>\n",
    );
    page += &svg(job, &times);
    page += "\n<h3 style=\"margin-left:16px\">PEs</h3><table><tr><th>PE</th><th>node</th>\
             <th>host</th><th>sent</th><th>bytes sent</th><th>received</th><th>idle</th></tr>";
    let idle = summary::idle(job);
    let end = job.end() as f64;
    for (i, t) in job.traces.iter().enumerate() {
        let (mut sent, mut bytes, mut recv) = (0u64, 0u64, 0u64);
        for r in &t.records {
            match r.kind {
                Kind::Send => {
                    sent += 1;
                    bytes += r.b
                }
                Kind::Recv => recv += 1,
                _ => {}
            }
        }
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{sent}</td><td>{}</td><td>{recv}</td>\
             <td>{:.1}%</td></tr>",
            t.header.pe,
            t.header.node,
            esc(&t.header.host),
            human_bytes(bytes),
            100.0 * idle[i] as f64 / end
        );
    }
    page += "</table>\n<h3 style=\"margin-left:16px\">Handlers</h3><table><tr><th>handler</th>\
             <th>runs</th><th>time (self)</th><th>mean</th></tr>";
    for h in &times {
        let _ = write!(
            page,
            "<tr><td style=\"text-align:left\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&h.name),
            h.runs,
            ms(h.self_ns as f64),
            ms(h.self_ns as f64 / h.runs.max(1) as f64)
        );
    }
    page += "</table>\n";
    let f = &job.flows;
    let _ = writeln!(
        page,
        "<p style=\"margin:16px\">{} messages matched send to receive; {} sends and {} receives \
         without their other end.</p>",
        f.matched.len(),
        f.unmatched_sends.len(),
        f.unmatched_recvs.len()
    );
    for w in &job.warnings {
        let _ = writeln!(page, "<p style=\"margin:16px;color:#a00\">{}</p>", esc(w));
    }
    page += "</body></html>\n";
    page
}

/// The picture.
fn svg(job: &Job, times: &[HandlerTime]) -> String {
    let l = Layout::of(job);
    let col = colours(times);
    let end = job.end() as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" style=\"display:block\" font-family=\"sans-serif\" \
         font-size=\"12\"><rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>",
        w = l.width,
        h = l.height
    );
    let first = job.traces.first().map(|t| &t.header);
    let _ = write!(
        s,
        "<text x=\"16\" y=\"28\" font-size=\"18\">converse trace: {} PEs on {} nodes, layer {}, \
         {}</text><text x=\"16\" y=\"50\">timeline (colour: the handler that ran most in each \
         pixel; grey: idle; blue-grey: the layer's boot; lines: messages)</text>",
        job.traces.len(),
        first.map_or(0, |h| h.num_nodes),
        esc(first.map_or("?", |h| h.layer.as_str())),
        ms(end)
    );
    timeline(&mut s, job, &l, &col, end);
    // Time per handler.
    let _ = write!(
        s,
        "<text x=\"16\" y=\"{}\">time per handler (self time, all PEs)</text>",
        l.handlers_y - 14.0
    );
    let most = times.first().map_or(1, |h| h.self_ns.max(1)) as f64;
    for (i, h) in times.iter().take(BARS).enumerate() {
        let y = l.handlers_y + i as f64 * 18.0;
        let w = (h.self_ns as f64 / most * 700.0).max(1.0);
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{}\" y=\"{y}\" width=\"{w:.1}\" height=\"14\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{} ({} runs)</text>",
            l.timeline_x + 140.0,
            y + 11.0,
            esc(&h.name),
            l.timeline_x + 150.0,
            rgb(PALETTE[i.min(PALETTE.len() - 1)]),
            l.timeline_x + 155.0 + w,
            y + 11.0,
            ms(h.self_ns as f64),
            h.runs
        );
    }
    matrix(&mut s, job, &l);
    s += "</svg>";
    s
}

fn timeline(
    s: &mut String,
    job: &Job,
    l: &Layout,
    col: &std::collections::HashMap<String, usize>,
    end: f64,
) {
    let cols = l.timeline_w as usize;
    let per_col = end / cols as f64;
    let x_of = |t: i64| l.timeline_x + (t as f64 / end * l.timeline_w).clamp(0.0, l.timeline_w);
    for (i, t) in job.traces.iter().enumerate() {
        let y = l.timeline_y + i as f64 * l.row_h;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"{}\">PE {}</text>",
            l.timeline_x - 8.0,
            y + l.row_h * 0.75,
            l.row_h.min(12.0),
            t.header.pe
        );
        // The layer's boot, before the PE began: a band under everything else.
        for r in t.records.iter().filter(|r| r.kind == Kind::Span) {
            let (from, to) = (job.time(i, r), job.time(i, r) + r.b as i64);
            let _ = write!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\">\
                 <title>{}</title></rect>",
                x_of(from),
                y + l.row_h * 0.25,
                (x_of(to) - x_of(from)).max(1.0),
                l.row_h * 0.5,
                rgb(BOOT),
                esc(t.string(r.a))
            );
        }
        // Per column: time per colour, and idle time.
        let mut busy = vec![[0f64; PALETTE.len()]; cols];
        let mut idle = vec![0f64; cols];
        let spread = |from: i64, to: i64, mut add: Box<dyn FnMut(usize, f64) + '_>| {
            let (a, b) = (from.max(0) as f64, to.max(0) as f64);
            let (c0, c1) = (
                ((a / per_col) as usize).min(cols - 1),
                ((b / per_col) as usize).min(cols - 1),
            );
            for c in c0..=c1 {
                let lo = a.max(c as f64 * per_col);
                let hi = b.min((c + 1) as f64 * per_col);
                if hi > lo {
                    add(c, hi - lo);
                }
            }
        };
        let mut open: Vec<(usize, i64)> = Vec::new();
        for r in &t.records {
            let at = job.time(i, r);
            match r.kind {
                Kind::Begin => {
                    // A nested handler takes over the time from its parent.
                    if let Some(&(c, from)) = open.last() {
                        spread(from, at, Box::new(|k, d| busy[k][c] += d));
                    }
                    let c = col.get(&t.header.handler_name(r.a)).copied().unwrap_or(0);
                    open.push((c, at));
                }
                Kind::End => {
                    if let Some((c, from)) = open.pop() {
                        spread(from, at, Box::new(|k, d| busy[k][c] += d));
                    }
                    if let Some(last) = open.last_mut() {
                        last.1 = at;
                    }
                }
                Kind::Idle => spread(at, at + r.b as i64, Box::new(|k, d| idle[k] += d)),
                _ => {}
            }
        }
        // Runs of equal columns become one rectangle each.
        let colour_of = |k: usize| -> Option<(u8, u8, u8)> {
            let (best, t) =
                busy[k]
                    .iter()
                    .enumerate()
                    .fold((0, 0.0), |m, (c, &t)| if t > m.1 { (c, t) } else { m });
            let total: f64 = busy[k].iter().sum();
            if total >= 0.25 * per_col && t > 0.0 {
                Some(PALETTE[best])
            } else if idle[k] >= 0.5 * per_col {
                Some(IDLE)
            } else {
                None
            }
        };
        let mut k = 0;
        while k < cols {
            let c = colour_of(k);
            let mut j = k + 1;
            while j < cols && colour_of(j) == c {
                j += 1;
            }
            if let Some(c) = c {
                let (h, dy) = if c == IDLE {
                    (l.row_h * 0.3, l.row_h * 0.35)
                } else {
                    (l.row_h * 0.8, l.row_h * 0.1)
                };
                let _ = write!(
                    s,
                    "<rect x=\"{}\" y=\"{:.1}\" width=\"{}\" height=\"{h:.1}\" fill=\"{}\"/>",
                    l.timeline_x + k as f64,
                    y + dy,
                    j - k,
                    rgb(c)
                );
            }
            k = j;
        }
    }
    // Messages: a line from the send to the receive (at most a few thousand).
    let row_of: std::collections::HashMap<u32, usize> = job
        .traces
        .iter()
        .enumerate()
        .map(|(i, t)| (t.header.pe, i))
        .collect();
    let step = (job.flows.matched.len() / 3000).max(1);
    for f in job.flows.matched.iter().step_by(step) {
        let (Some(&a), Some(&b)) = (row_of.get(&f.src), row_of.get(&f.dst)) else {
            continue;
        };
        if a == b {
            continue;
        }
        let (ts, tr) = (
            job.time(a, &job.traces[a].records[f.send]),
            job.time(b, &job.traces[b].records[f.recv]),
        );
        let _ = write!(
            s,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\" \
             stroke-opacity=\"0.3\" stroke-width=\"0.6\"/>",
            x_of(ts),
            l.timeline_y + (a as f64 + 0.5) * l.row_h,
            x_of(tr),
            l.timeline_y + (b as f64 + 0.5) * l.row_h
        );
    }
    // Time axis.
    let axis_y = l.timeline_y + l.rows as f64 * l.row_h + 4.0;
    let _ = write!(
        s,
        "<line x1=\"{}\" y1=\"{axis_y}\" x2=\"{}\" y2=\"{axis_y}\" stroke=\"black\"/>",
        l.timeline_x,
        l.timeline_x + l.timeline_w
    );
    for q in 0..=4 {
        let x = l.timeline_x + l.timeline_w * q as f64 / 4.0;
        let _ = write!(
            s,
            "<text x=\"{x}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
            axis_y + 14.0,
            ms(end * q as f64 / 4.0)
        );
    }
}

fn matrix(s: &mut String, job: &Job, l: &Layout) {
    let m = summary::matrix(job);
    let n = m.len();
    let most = m.iter().flatten().map(|c| c.1).max().unwrap_or(0).max(1) as f64;
    let _ = write!(
        s,
        "<text x=\"16\" y=\"{}\">bytes sent, row: from PE, column: to PE (log scale: white \
         none, lightest 1 B, darkest {}; the number: messages)</text>",
        l.matrix_y - 24.0,
        human_bytes(most as u64)
    );
    for (src, row) in m.iter().enumerate() {
        for (dst, &(msgs, bytes)) in row.iter().enumerate() {
            // Logarithmic: a pair of a few small messages still shows next to a bulk transfer
            // (a tenth of the colour at least).
            let f = if bytes == 0 {
                0.0
            } else {
                0.1 + 0.9 * (bytes as f64).ln_1p() / most.ln_1p()
            };
            let mix = |hot: u8| (255.0 - f * (255.0 - f64::from(hot))).round() as u8;
            let c = (mix(HOT.0), mix(HOT.1), mix(HOT.2));
            let _ = write!(
                s,
                "<rect x=\"{}\" y=\"{}\" width=\"{c_}\" height=\"{c_}\" fill=\"{}\" \
                 stroke=\"#eee\" stroke-width=\"0.5\"><title>PE {src} → PE {dst}: {msgs} \
                 messages, {bytes} bytes</title></rect>",
                l.matrix_x + dst as f64 * l.cell,
                l.matrix_y + src as f64 * l.cell,
                rgb(c),
                c_ = l.cell
            );
            if l.cell >= 24.0 && msgs > 0 {
                let ink = if f > 0.6 { "white" } else { "black" };
                let _ = write!(
                    s,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\" \
                     fill=\"{ink}\">{msgs}</text>",
                    l.matrix_x + (dst as f64 + 0.5) * l.cell,
                    l.matrix_y + (src as f64 + 0.5) * l.cell + 3.5
                );
            }
        }
        if l.cell >= 10.0 {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\">{src}</text>",
                l.matrix_x - 4.0,
                l.matrix_y + (src as f64 + 0.75) * l.cell
            );
        }
    }
    if l.cell >= 10.0 {
        for dst in 0..n {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{dst}</text>",
                l.matrix_x + (dst as f64 + 0.5) * l.cell,
                l.matrix_y - 4.0
            );
        }
    }
}
