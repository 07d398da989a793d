//! The overview picture: the per-PE timeline (with the communication threads' tracks, user
//! brackets and events, and the messages between PEs), the time per handler, and the PE×PE
//! communication matrix as a heat map.

use super::{
    colours, esc, ms, rgb, Layout, BARS, BOOT, BRACKET, COMM, EVENT, HOT, IDLE, MATRIX_CELLS,
    PALETTE,
};
use crate::summary::{self, HandlerTime};
use crate::{Job, Kind};
use converse::trace_format::human_bytes;
use std::fmt::Write;

/// The picture.
pub(super) fn svg(job: &Job, times: &[HandlerTime]) -> String {
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
        "<text x=\"16\" y=\"28\" font-size=\"18\">converse trace: {} on {}, layer {}, \
         {}</text><text x=\"16\" y=\"46\" font-size=\"11\">timeline: per pixel, the handler \
         that ran most, as tall as its share of the pixel's time (a third at least: short \
         handlers never vanish); grey: idle; blue-grey: the layer's boot;</text>\
         <text x=\"16\" y=\"60\" font-size=\"11\">purple foot: user brackets; pink ticks: \
         user events; teal rows: communication threads; lines: messages</text>",
        summary::plural(job.traces.len() as u64, "PE"),
        summary::plural(first.map_or(0, |h| h.num_nodes), "node"),
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
             <text x=\"{}\" y=\"{}\">{} ({})</text>",
            l.timeline_x + 140.0,
            y + 11.0,
            esc(&h.name),
            l.timeline_x + 150.0,
            rgb(PALETTE[i.min(PALETTE.len() - 1)]),
            l.timeline_x + 155.0 + w,
            y + 11.0,
            ms(h.self_ns as f64),
            summary::plural(h.runs, "run")
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
    // Add the interval `from..to` to the columns it covers, column by column.
    let spread = |from: i64, to: i64, add: &mut dyn FnMut(usize, f64)| {
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
        let mut open: Vec<(usize, i64)> = Vec::new();
        for r in &t.records {
            let at = job.time(i, r);
            match r.kind {
                Kind::Begin => {
                    // A nested handler takes over the time from its parent.
                    if let Some(&(c, from)) = open.last() {
                        spread(from, at, &mut |k, d| busy[k][c] += d);
                    }
                    let c = col.get(&t.header.handler_name(r.a)).copied().unwrap_or(0);
                    open.push((c, at));
                }
                Kind::End => {
                    if let Some((c, from)) = open.pop() {
                        spread(from, at, &mut |k, d| busy[k][c] += d);
                    }
                    if let Some(last) = open.last_mut() {
                        last.1 = at;
                    }
                }
                Kind::Idle => {
                    spread(at, at + r.b as i64, &mut |k, d| idle[k] += d);
                    // Idle inside a handler (a nested scheduler loop) is not its time.
                    if let Some(top) = open.last_mut() {
                        let (c, from) = *top;
                        spread(from, at, &mut |k, d| busy[k][c] += d);
                        top.1 = at + r.b as i64;
                    }
                }
                _ => {}
            }
        }
        columns(s, l, y, &busy, &idle, per_col, &|c| PALETTE[c]);
        // The program's brackets as a band at the row's foot, its events as ticks on top;
        // per pixel column, as handlers are, so the picture's size does not follow their
        // number. (column → (time in brackets, the name of the one with most, its time);
        // column → (events, the first's name).)
        let mut brackets: Vec<(f64, u32, f64)> = vec![(0.0, 0, 0.0); cols];
        let mut events: Vec<(u64, u32)> = vec![(0, 0); cols];
        for r in &t.records {
            let at = job.time(i, r);
            match r.kind {
                Kind::Bracket => spread(at, at + r.b as i64, &mut |k, d| {
                    let c = &mut brackets[k];
                    c.0 += d;
                    if d > c.2 {
                        (c.1, c.2) = (r.a, d);
                    }
                }),
                Kind::Event => {
                    let k = ((at.max(0) as f64 / per_col) as usize).min(cols - 1);
                    if events[k].0 == 0 {
                        events[k].1 = r.a;
                    }
                    events[k].0 += 1;
                }
                _ => {}
            }
        }
        let mut k = 0;
        while k < cols {
            let name = |k: usize| (brackets[k].0 > 0.0).then_some(brackets[k].1);
            let (first, mut j) = (name(k), k + 1);
            while j < cols && name(j) == first {
                j += 1;
            }
            if let Some(n) = first {
                let _ = write!(
                    s,
                    "<rect x=\"{}\" y=\"{:.1}\" width=\"{}\" height=\"{:.1}\" fill=\"{}\">\
                     <title>bracket {}</title></rect>",
                    l.timeline_x + k as f64,
                    y + l.row_h * 0.86,
                    j - k,
                    (l.row_h * 0.14).max(1.0),
                    rgb(BRACKET),
                    esc(t.string(n))
                );
            }
            k = j;
        }
        for (k, &(n, first)) in events.iter().enumerate().filter(|e| e.1 .0 > 0) {
            let more = if n > 1 {
                format!(" and {} more", n - 1)
            } else {
                String::new()
            };
            let _ = write!(
                s,
                "<rect x=\"{}\" y=\"{y:.1}\" width=\"2\" height=\"{:.1}\" fill=\"{}\">\
                 <title>event {}{more}</title></rect>",
                l.timeline_x + k as f64 - 0.5,
                (l.row_h * 0.3).max(1.0),
                rgb(EVENT),
                esc(t.string(first))
            );
        }
    }
    // The communication threads, a row each under the PEs: their turns that moved messages.
    for (i, t) in job.comm.iter().enumerate() {
        let y = l.timeline_y + (job.traces.len() + i) as f64 * l.row_h;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"{}\">{}</text>",
            l.timeline_x - 8.0,
            y + l.row_h * 0.75,
            l.row_h.min(12.0),
            esc(&crate::profile::comm_label(t))
        );
        let mut busy = vec![[0f64; PALETTE.len()]; cols];
        let mut idle = vec![0f64; cols];
        for r in &t.records {
            let at = job.comm_time(i, r);
            match r.kind {
                Kind::Span => spread(at, at + r.b as i64, &mut |k, d| busy[k][0] += d),
                Kind::Idle => spread(at, at + r.b as i64, &mut |k, d| idle[k] += d),
                _ => {}
            }
        }
        columns(s, l, y, &busy, &idle, per_col, &|_| COMM);
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

/// A column's bar: its colour and its height in eighths of the bar's full height.
type Bar = ((u8, u8, u8), u8);

/// Share of its row a column with any handler time gets at least, so that a handler far
/// shorter than a column still shows (Projections' timeline hides such work when zoomed out).
pub const MIN_BAR: f64 = 0.35;

/// Draw one row's columns: grey where the row was mostly idle; where anything ran, a bar of
/// the colour that ran most (`colour` of its index), as tall as the share of the column's time
/// spent running, but never under [`MIN_BAR`] of the row. Runs of equal columns become one
/// rectangle each.
fn columns(
    s: &mut String,
    l: &Layout,
    y: f64,
    busy: &[[f64; PALETTE.len()]],
    idle: &[f64],
    per_col: f64,
    colour: &dyn Fn(usize) -> (u8, u8, u8),
) {
    let cols = busy.len();
    let runs = |s: &mut String, of: &dyn Fn(usize) -> Option<Bar>| {
        let mut k = 0;
        while k < cols {
            let c = of(k);
            let mut j = k + 1;
            while j < cols && of(j) == c {
                j += 1;
            }
            if let Some((c, eighths)) = c {
                let h = l.row_h * 0.8 * f64::from(eighths) / 8.0;
                let _ = write!(
                    s,
                    "<rect x=\"{}\" y=\"{:.1}\" width=\"{}\" height=\"{h:.1}\" fill=\"{}\"/>",
                    l.timeline_x + k as f64,
                    y + (l.row_h - h) / 2.0,
                    j - k,
                    rgb(c)
                );
            }
            k = j;
        }
    };
    // Idle first, under the bars: a column both busy and idle shows both.
    runs(s, &|k| (idle[k] >= 0.5 * per_col).then_some((IDLE, 3)));
    runs(s, &|k| {
        let (best, t) = busy[k]
            .iter()
            .enumerate()
            .fold((0, 0.0), |m, (c, &t)| if t > m.1 { (c, t) } else { m });
        let total: f64 = busy[k].iter().sum();
        // In eighths of the bar, so that near-equal columns still make one rectangle.
        let share = (total / per_col).clamp(MIN_BAR, 1.0);
        (t > 0.0).then(|| (colour(best), (share * 8.0).round() as u8))
    });
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
