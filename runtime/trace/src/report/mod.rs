//! The HTML report, Projections' views on one self-contained page (no external file, no
//! server): the overview picture (per-PE and communication-thread timeline with brackets,
//! events and messages; time per handler; the PE×PE matrix), a timeline that zooms (a canvas
//! drawn by the page's own small script, `zoom.rs`), utilization over time, the time profile,
//! histograms (`views.rs`), and tables.
//!
//! Both timelines are drawn per pixel column: a column takes the colour of the handler that
//! ran most in it, and a column where any handler ran shows it, however short (see
//! [`MIN_BAR`]). So a picture stays the same size whatever the trace's length, and a busy PE
//! looks busy at any zoom.

mod overview;
mod views;
mod zoom;

pub use overview::MIN_BAR;
pub use views::{shade, BUSY, PLOT_W, PLOT_X, PROFILE_H, TIME_BINS, UTIL_ROWS, UTIL_ROW_H};

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

/// The colour of a communication thread's turns that moved messages.
pub const COMM: (u8, u8, u8) = (0, 109, 119);

/// The colour of the program's brackets, a band at the foot of their PE's row.
pub const BRACKET: (u8, u8, u8) = (84, 39, 143);

/// The colour of the program's events, a tick at the top of their PE's row.
pub const EVENT: (u8, u8, u8) = (230, 0, 126);

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
        // The PEs, then the communication threads.
        let rows = job.traces.len() + job.comm.len();
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
    summary::human_time(ns)
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
    page += &overview::svg(job, &times);
    let col = colours(&times);
    page += &zoom::section(job, &col);
    page += "\n<h3 style=\"margin-left:16px\">Utilization</h3>";
    page += &views::utilization(job);
    page += "\n<h3 style=\"margin-left:16px\">Time profile</h3>";
    page += &views::handler_profile(job, &col);
    page += "\n<h3 style=\"margin-left:16px\">Histograms</h3>";
    page += &views::histograms(job);
    page += "\n<h3 style=\"margin-left:16px\">PEs</h3><table><tr><th>PE</th><th>node</th>\
             <th>host</th><th>sent</th><th>bytes sent</th><th>received</th><th>idle</th></tr>";
    let idle = summary::idle(job);
    let end = job.end() as f64;
    // As the per-PE × handler table: consecutive PEs share a row past TABLE_ROWS.
    let per = job.traces.len().div_ceil(TABLE_ROWS).max(1);
    for (g, group) in job.traces.chunks(per).enumerate() {
        let (mut sent, mut bytes, mut recv) = (0u64, 0u64, 0u64);
        for r in group.iter().flat_map(|t| &t.records) {
            match r.kind {
                Kind::Send => {
                    sent += 1;
                    bytes = bytes.saturating_add(r.b);
                }
                Kind::Recv => recv += 1,
                _ => {}
            }
        }
        let span = |f: &dyn Fn(&crate::Trace) -> String| match (group.first(), group.last()) {
            (Some(a), Some(b)) if f(a) != f(b) => format!("{}–{}", f(a), f(b)),
            (Some(a), _) => f(a),
            _ => String::new(),
        };
        let idle_ns: u64 = idle[g * per..g * per + group.len()].iter().sum();
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{sent}</td><td>{}</td><td>{recv}</td>\
             <td>{:.1}%</td></tr>",
            span(&|t| t.header.pe.to_string()),
            span(&|t| t.header.node.to_string()),
            esc(&span(&|t| t.header.host.clone())),
            human_bytes(bytes),
            100.0 * idle_ns as f64 / end / group.len() as f64
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
    pe_handler_table(&mut page, job);
    user_table(&mut page, job);
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

/// Handlers shown as columns of the per-PE table (the busiest; the rest summed).
const TABLE_HANDLERS: usize = 12;

/// Rows of the per-PE table at most.
pub const TABLE_ROWS: usize = 256;

/// Each PE's self time (and runs) per handler: Projections' usage profile as a table.
fn pe_handler_table(page: &mut String, job: &Job) {
    let t = crate::profile::pe_handlers(job);
    if t.names.is_empty() {
        return;
    }
    let shown = t.names.len().min(TABLE_HANDLERS);
    let rest = t.names.len() - shown;
    *page += "<h3 style=\"margin-left:16px\">Time per PE and handler (self time, runs)</h3>\
              <table class=\"pe-handlers\"><tr><th>PE</th>";
    for n in &t.names[..shown] {
        let _ = write!(page, "<th>{}</th>", esc(n));
    }
    if rest > 0 {
        let _ = write!(page, "<th>{rest} others</th>");
    }
    *page += "</tr>";
    // Past TABLE_ROWS PEs, consecutive PEs share a row (their sums), so that the page stays
    // bounded whatever the job's size.
    let per = t.cells.len().div_ceil(TABLE_ROWS).max(1);
    let pe_of = |i: usize| job.traces.get(i).map_or(0, |t| t.header.pe);
    for (g, rows) in t.cells.chunks(per).enumerate() {
        let (first, last) = (pe_of(g * per), pe_of(g * per + rows.len() - 1));
        let pe = if rows.len() > 1 {
            format!("{first}–{last}")
        } else {
            first.to_string()
        };
        let row: Vec<(u64, u64)> = (0..t.names.len())
            .map(|k| {
                rows.iter().fold((0u64, 0u64), |a, r| {
                    (a.0 + r[k].0, a.1.saturating_add(r[k].1))
                })
            })
            .collect();
        let _ = write!(page, "<tr><td>{pe}</td>");
        let mut cell = |runs: u64, ns: u64, name: &str| {
            let text = if runs == 0 {
                "–".to_owned()
            } else {
                format!("{} ({runs})", ms(ns as f64))
            };
            let _ = write!(
                page,
                "<td data-pe=\"{pe}\" data-handler=\"{}\" data-ns=\"{ns}\" \
                 data-runs=\"{runs}\">{text}</td>",
                esc(name)
            );
        };
        for (k, &(runs, ns)) in row.iter().enumerate().take(shown) {
            cell(runs, ns, &t.names[k]);
        }
        if rest > 0 {
            let (runs, ns) = row[shown..]
                .iter()
                .fold((0u64, 0u64), |a, &(r, n)| (a.0 + r, a.1.saturating_add(n)));
            cell(runs, ns, "others");
        }
        *page += "</tr>";
    }
    *page += "</table>\n";
}

/// The program's user events and brackets (`Pe::trace_event`, `Pe::trace_bracket`).
fn user_table(page: &mut String, job: &Job) {
    let stats = crate::profile::user_stats(job);
    if stats.is_empty() {
        return;
    }
    *page += "<h3 style=\"margin-left:16px\">User events and brackets</h3>\
              <table class=\"user\"><tr><th>name</th><th>kind</th><th>times</th>\
              <th>PEs</th><th>total time</th><th>mean</th></tr>";
    for u in &stats {
        let (kind, total, mean) = if u.bracket {
            (
                "bracket",
                ms(u.total_ns as f64),
                ms(u.total_ns as f64 / u.count.max(1) as f64),
            )
        } else {
            ("event", "–".into(), "–".into())
        };
        let _ = write!(
            page,
            "<tr data-name=\"{}\" data-kind=\"{kind}\" data-count=\"{}\" data-ns=\"{}\">\
             <td style=\"text-align:left\">{}</td><td>{kind}</td><td>{}</td><td>{}</td>\
             <td>{total}</td><td>{mean}</td></tr>",
            esc(&u.name),
            u.count,
            u.total_ns,
            esc(&u.name),
            u.count,
            u.pes
        );
    }
    *page += "</table>\n";
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
    fn impossible_times_are_clamped_not_overflowed() {
        // What a corrupt file may say: durations of 2^64 - 1 ns, times far past any job, a
        // base at the end of time. CI runs it in the dev profile too, where an overflow panics.
        let mut t = trace(
            0,
            2,
            vec![
                rec(u64::MAX / 2, Kind::Begin, 16, 0),
                rec(u64::MAX / 2 + 1, Kind::Idle, 0, u64::MAX),
                rec(u64::MAX / 2 + 2, Kind::Bracket, 0, u64::MAX),
                rec(u64::MAX / 2 + 3, Kind::Event, 0, 0),
                rec(u64::MAX / 2 + 4, Kind::Send, 1, u64::MAX),
                rec(u64::MAX / 2 + 5, Kind::End, 0, 0),
            ],
        );
        t.strings = vec!["x".into()];
        let mut other = trace(1, 2, vec![rec(0, Kind::Recv, 0, u64::MAX)]);
        other.header.mono_base = u64::MAX;
        let job = Job::new(vec![t, other]);
        assert!(
            job.warnings.iter().any(|w| w.contains("clamped")),
            "{:?}",
            job.warnings
        );
        assert!(html(&job).contains("<svg"));
        assert!(crate::chrome::json(&job).is_object());
        let bins = crate::profile::Bins::of(&job, 10);
        assert_eq!(crate::profile::utilization(&job, bins).len(), 2);
        assert!(crate::profile::user_stats(&job).len() == 2);
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
        // The PE table: four PEs a row, 250 rows.
        assert!(page.contains("<tr><td>0–3</td>") && page.contains("<tr><td>996–999</td>"));
        assert!(!page.contains("<tr><td>5</td>"));
        let l = Layout::of(&job);
        assert!(l.matrix_y + l.cell * 125.0 <= l.height);
    }
}
