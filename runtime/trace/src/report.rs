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

/// Cells a side of the matrix at most: a job of more PEs shares cells between consecutive
/// PEs, so that the picture (and the page) stays the same size whatever the job's.
pub const MATRIX_CELLS: usize = 128;

impl Layout {
    /// The layout of `job`'s picture.
    pub fn of(job: &Job) -> Layout {
        let rows = job.traces.len();
        let row_h = (600.0 / rows.max(1) as f64).clamp(4.0, 22.0);
        let timeline_y = 70.0;
        let handlers_y = timeline_y + rows as f64 * row_h + 60.0;
        let bars = summary::handler_times(job).len().min(BARS);
        let n = summary::matrix(job).grid(MATRIX_CELLS).1.max(1);
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

/// Text for the page (and its inline SVG, which is XML): markup escaped, and the control
/// characters XML 1.0 forbids even as references (all of C0 but tab, newline and carriage
/// return; U+FFFE and U+FFFF) replaced by U+FFFD, as are DEL and C1, which HTML calls errors.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
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
    // Looked up, not indexed: in a job not checked as `Job::load` does (two traces of one
    // PE), a flow's record index may belong to the other trace.
    let at = |row: usize, i: usize| {
        let r = job.traces.get(row)?.records.get(i)?;
        Some(job.time(row, r))
    };
    let step = (job.flows.matched.len() / 3000).max(1);
    for f in job.flows.matched.iter().step_by(step) {
        let (Some(&a), Some(&b)) = (row_of.get(&f.src), row_of.get(&f.dst)) else {
            continue;
        };
        if a == b {
            continue;
        }
        let (Some(ts), Some(tr)) = (at(a, f.send), at(b, f.recv)) else {
            continue;
        };
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
    let (per, n) = m.grid(MATRIX_CELLS);
    let cells = m.cells(MATRIX_CELLS);
    // A cell's PEs, as its label and title say them.
    let label = |i: usize| -> String {
        let first = m.pes.get(i * per).copied().unwrap_or(0);
        let last = m
            .pes
            .get(((i + 1) * per).min(m.pes.len()).saturating_sub(1));
        match last {
            Some(&last) if last != first => format!("PEs {first}–{last}"),
            _ => format!("PE {first}"),
        }
    };
    let most = cells
        .iter()
        .flatten()
        .map(|c| c.1)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let shared = if per > 1 {
        format!("; {per} PEs a cell, of the {} the traces name", m.pes.len())
    } else {
        String::new()
    };
    let _ = write!(
        s,
        "<text x=\"16\" y=\"{}\">bytes sent, row: from PE, column: to PE (log scale: white \
         none, lightest 1 B, darkest {}; the number: messages{shared})</text>",
        l.matrix_y - 24.0,
        human_bytes(most as u64)
    );
    for (src, row) in cells.iter().enumerate() {
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
                 stroke=\"#eee\" stroke-width=\"0.5\"><title>{} → {}: {msgs} \
                 messages, {bytes} bytes</title></rect>",
                l.matrix_x + dst as f64 * l.cell,
                l.matrix_y + src as f64 * l.cell,
                rgb(c),
                label(src),
                label(dst),
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
        // Axis labels: the first PE of each cell.
        if l.cell >= 10.0 {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\">{}</text>",
                l.matrix_x - 4.0,
                l.matrix_y + (src as f64 + 0.75) * l.cell,
                m.pes.get(src * per).copied().unwrap_or(0)
            );
        }
    }
    if l.cell >= 10.0 {
        for dst in 0..n {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                l.matrix_x + (dst as f64 + 0.5) * l.cell,
                l.matrix_y - 4.0,
                m.pes.get(dst * per).copied().unwrap_or(0)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, Trace};
    use converse::trace_format::Header;

    fn trace(pe: u32, num_pes: u32, records: Vec<Record>) -> Trace {
        Trace {
            header: Header::sample(pe, num_pes, &["work"]),
            strings: vec![],
            records,
            torn_bytes: 0,
        }
    }

    fn rec(t: u64, kind: Kind, a: u32, b: u64) -> Record {
        Record { t, kind, a, b }
    }

    /// Whether `c` may appear in an XML 1.0 document (its `Char` production).
    fn xml_char(c: char) -> bool {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
            || c >= '\u{10000}'
    }

    #[test]
    fn control_characters_in_names_leave_the_svg_well_formed() {
        assert_eq!(
            esc("a\u{1}<b>\u{1b}[31m&\"\t\u{7f}\u{9b}\u{ffff}"),
            "a\u{fffd}&lt;b&gt;\u{fffd}[31m&amp;&quot;\t\u{fffd}\u{fffd}\u{fffd}"
        );
        let mut t = trace(
            0,
            1,
            vec![
                rec(0, Kind::Span, 0, 5),
                rec(10, Kind::Begin, 16, 0),
                rec(20, Kind::End, 0, 0),
                rec(30, Kind::Begin, 99, 0),
                rec(40, Kind::End, 0, 0),
            ],
        );
        t.header.host = "host\u{0}\u{8}".into();
        t.header.layer = "layer\u{1b}".into();
        t.header.handlers = vec!["work\u{c}\u{1f}".into()];
        t.strings = vec!["boot\u{7}".into()];
        let page = html(&Job::new(vec![t]));
        let bad: Vec<char> = page.chars().filter(|&c| !xml_char(c)).collect();
        assert!(bad.is_empty(), "characters XML forbids: {bad:?}");
        assert!(
            page.contains("work\u{fffd}\u{fffd}"),
            "the name, its controls replaced"
        );
    }

    #[test]
    fn two_traces_of_one_pe_do_not_panic_the_report() {
        // What a copy of PE 0's file under another name gave: the flows index records of
        // the longer trace, the rows knew only the shorter.
        let long = trace(
            0,
            2,
            (0..5)
                .map(|t| rec(t, Kind::Mark, 0, 0))
                .chain([rec(6, Kind::Send, 1, 8)])
                .collect(),
        );
        let short = trace(0, 2, vec![rec(1, Kind::Send, 1, 8)]);
        let one = trace(
            1,
            2,
            vec![rec(2, Kind::Recv, 0, 8), rec(7, Kind::Recv, 0, 8)],
        );
        let job = Job::new(vec![long, short, one]);
        assert_eq!(job.flows.matched.len(), 2);
        assert!(html(&job).contains("<svg"));
    }

    #[test]
    fn the_page_of_a_huge_job_stays_bounded() {
        // A header claiming 4 billion PEs: the page is the size of what the trace holds.
        let page = html(&Job::new(vec![trace(
            0,
            u32::MAX,
            vec![rec(1, Kind::Send, 1 << 30, 10)],
        )]));
        assert!(page.len() < 64 << 10, "{} bytes", page.len());
        // 1000 traced PEs, each sending to every tenth: at most 128 × 128 matrix cells.
        let traces: Vec<Trace> = (0..1000)
            .map(|pe| {
                let sends = (0..1000).step_by(10).map(|d| rec(1, Kind::Send, d, 64));
                trace(pe, 1000, sends.collect())
            })
            .collect();
        let job = Job::new(traces);
        let page = html(&job);
        let cells = page.matches(" messages, ").count();
        assert_eq!(cells, 125 * 125, "8 PEs a cell");
        assert!(page.contains("8 PEs a cell, of the 1000 the traces name"));
        let l = Layout::of(&job);
        assert!(l.matrix_y + l.cell * 125.0 <= l.height);
    }
}
