//! The zoomable timeline: a `<canvas>` drawn by a small inline script from the job's slices,
//! embedded in the page as JSON (no library, no server: it works opened from a file).
//!
//! One row per PE (its handlers' self time, idle periods, user brackets under the row, user
//! events above it), then one per SMP node's communication thread (its turns moving messages,
//! its waits). Each pixel column of the visible window takes the colour of the handler with
//! the most time in it, and a column where any handler ran at all gets a bar of at least
//! [`MIN_BAR`] pixels (its height otherwise the busy share of the column): a 40 µs handler in a
//! view of a second still shows, which a "busy a quarter of the column" rule would hide.

// The overview's colours, so that a thing looks the same in both timelines.
use super::{esc, ms, rgb, BOOT, BRACKET, COMM, EVENT, IDLE, PALETTE};
use crate::{Job, Kind};
use std::collections::HashMap;
use std::fmt::Write;

/// Width of the row labels, left of the plot, px.
const LEFT: u32 = 90;
/// Width of the plot (one column per pixel), px.
const PLOT_W: u32 = 960;
/// Height of the time axis above the rows, px.
const AXIS_H: u32 = 28;
/// Height of a row, px: an event strip, the handler band, the bracket band.
const ROW_H: u32 = 26;
/// Height of the event strip at the top of a row, px.
const EVENT_H: u32 = 5;
/// Top of the handler band within a row, px.
const BAND_TOP: u32 = 5;
/// Height of the handler band, px.
const BAND_H: u32 = 14;
/// Top of the bracket band within a row, px.
const BRACKET_TOP: u32 = 20;
/// Height of the bracket band, px.
const BRACKET_H: u32 = 4;
/// The smallest bar of a column where something ran, px.
const MIN_BAR: u32 = 4;
/// Rows drawn at most: past it the page names the rows left out.
const MAX_ROWS: usize = 400;
/// Slices, idle periods, brackets and events embedded at most over the page; past it each row
/// keeps its first ones, and the page says so.
const MAX_ITEMS: usize = 2_000_000;

/// Colour indices past the palette's (in the page's `pal`).
const COMM_C: usize = PALETTE.len();
const BRACKET_C: usize = PALETTE.len() + 1;
const EVENT_C: usize = PALETTE.len() + 2;

/// One row's items, times in ns on the job's time line, names as indices into [`Names`].
#[derive(Debug, Default)]
struct Row {
    label: String,
    /// Handler self-time pieces (or a communication thread's turns): start, end, name.
    slices: Vec<(i64, i64, usize)>,
    /// Idle periods.
    idle: Vec<(i64, i64)>,
    /// The layer's boot.
    boot: Vec<(i64, i64)>,
    /// User brackets: start, end, name.
    brackets: Vec<(i64, i64, usize)>,
    /// User events: time, name.
    events: Vec<(i64, usize)>,
    /// Items from here on were left out to bound the page.
    cut: Option<i64>,
}

impl Row {
    fn len(&self) -> usize {
        self.slices.len()
            + self.idle.len()
            + self.boot.len()
            + self.brackets.len()
            + self.events.len()
    }

    /// Keep the items starting before the time of the `keep`-th one.
    fn cut_to(&mut self, keep: usize) {
        let mut starts: Vec<i64> = (self.slices.iter().map(|s| s.0))
            .chain(self.idle.iter().map(|s| s.0))
            .chain(self.boot.iter().map(|s| s.0))
            .chain(self.brackets.iter().map(|s| s.0))
            .chain(self.events.iter().map(|s| s.0))
            .collect();
        if keep >= starts.len() {
            return;
        }
        let (_, &mut at, _) = starts.select_nth_unstable(keep);
        self.slices.retain(|s| s.0 < at);
        self.idle.retain(|s| s.0 < at);
        self.boot.retain(|s| s.0 < at);
        self.brackets.retain(|s| s.0 < at);
        self.events.retain(|s| s.0 < at);
        self.cut = Some(at);
    }
}

/// The names the rows use, each with its colour index.
#[derive(Default)]
struct Names {
    list: Vec<(String, usize)>,
    index: HashMap<(String, usize), usize>,
}

impl Names {
    fn of(&mut self, name: &str, colour: usize) -> usize {
        let key = (name.to_owned(), colour);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        self.list.push(key.clone());
        self.index.insert(key, self.list.len() - 1);
        self.list.len() - 1
    }
}

fn pe_row(job: &Job, i: usize, colours: &HashMap<String, usize>, names: &mut Names) -> Row {
    let t = &job.traces[i];
    let mut row = Row {
        label: format!("PE {}", t.header.pe),
        ..Row::default()
    };
    // (name, start of its current piece): a nested handler takes over its parent's time,
    // which resumes when it ends.
    let mut open: Vec<(usize, i64)> = Vec::new();
    let mut last = i64::MIN;
    for r in &t.records {
        let at = job.time(i, r);
        last = last.max(at);
        match r.kind {
            Kind::Begin => {
                if let Some(&(n, from)) = open.last() {
                    row.slices.push((from, at.max(from), n));
                }
                let name = t.header.handler_name(r.a);
                let c = colours.get(&name).copied().unwrap_or(PALETTE.len() - 1);
                open.push((names.of(&name, c), at));
            }
            Kind::End => {
                if let Some((n, from)) = open.pop() {
                    row.slices.push((from, at.max(from), n));
                }
                if let Some(parent) = open.last_mut() {
                    parent.1 = at;
                }
            }
            Kind::Idle => {
                let to = until(at, r.b);
                row.idle.push((at, to));
                // Idle inside a handler (a nested scheduler loop) is not the handler's time.
                if let Some(top) = open.last_mut() {
                    row.slices.push((top.1, at.max(top.1), top.0));
                    top.1 = to;
                }
            }
            Kind::Span => row.boot.push((at, until(at, r.b))),
            Kind::Bracket => {
                let n = names.of(t.string(r.a), BRACKET_C);
                row.brackets.push((at, until(at, r.b), n));
            }
            Kind::Event => row.events.push((at, names.of(t.string(r.a), EVENT_C))),
            _ => {}
        }
    }
    // Handlers still running when the trace ends (the process was killed) end at its last
    // event; their parents had no time of their own after the innermost began.
    if let Some((n, from)) = open.pop() {
        row.slices.push((from, last.max(from), n));
    }
    sort(&mut row);
    row
}

/// `d` ns after `at`, however large the (perhaps damaged) duration.
fn until(at: i64, d: u64) -> i64 {
    at.saturating_add(i64::try_from(d).unwrap_or(i64::MAX))
}

fn comm_row(job: &Job, i: usize, names: &mut Names) -> Row {
    let t = &job.comm[i];
    let mut row = Row {
        label: format!("node {} comm", t.header.pe),
        ..Row::default()
    };
    for r in &t.records {
        let at = job.comm_time(i, r);
        let to = until(at, r.b);
        match r.kind {
            Kind::Span => row.slices.push((at, to, names.of(t.string(r.a), COMM_C))),
            Kind::Idle => row.idle.push((at, to)),
            _ => {}
        }
    }
    sort(&mut row);
    row
}

/// The script finds what covers a time by binary search: each list by start (brackets are
/// recorded when they end, so not in that order).
fn sort(row: &mut Row) {
    row.slices.sort_by_key(|s| s.0);
    row.idle.sort_by_key(|s| s.0);
    row.boot.sort_by_key(|s| s.0);
    row.brackets.sort_by_key(|s| s.0);
    row.events.sort_by_key(|s| s.0);
}

/// JSON text that is safe inside a `<script>` element: no `<` (so no `</script>` or `<!--`),
/// and none of the line separators older script parsers refuse in strings. These appear only
/// inside strings, where the escapes mean the same characters.
fn script_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out += "\\u003c",
            '>' => out += "\\u003e",
            '&' => out += "\\u0026",
            '\u{2028}' => out += "\\u2028",
            '\u{2029}' => out += "\\u2029",
            c => out.push(c),
        }
    }
    out
}

/// A list as one flat array, each item's start the difference from the previous item's
/// (small numbers, a smaller page).
fn flat<const N: usize>(out: &mut String, items: impl Iterator<Item = [i64; N]>) {
    out.push('[');
    let mut prev = 0i64;
    for (k, item) in items.enumerate() {
        if k > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", item[0].wrapping_sub(prev));
        prev = item[0];
        for v in &item[1..] {
            let _ = write!(out, ",{v}");
        }
    }
    out.push(']');
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The rows of `job` and the JSON the script reads, bounded to `max_items` items.
fn data(job: &Job, colours: &HashMap<String, usize>, max_items: usize) -> (Vec<Row>, String) {
    let mut names = Names::default();
    let mut rows: Vec<Row> = (0..job.traces.len().min(MAX_ROWS))
        .map(|i| pe_row(job, i, colours, &mut names))
        .collect();
    let comm_rows = job.comm.len().min(MAX_ROWS - rows.len());
    rows.extend((0..comm_rows).map(|i| comm_row(job, i, &mut names)));
    let total: usize = rows.iter().map(Row::len).sum();
    if total > max_items {
        let per = (max_items / rows.len().max(1)).max(1);
        for r in &mut rows {
            r.cut_to(per);
        }
    }
    let mut s = format!("{{\"end\":{},\"pal\":[", job.end());
    let pal = PALETTE.iter().chain(&[COMM, BRACKET, EVENT]);
    for (k, c) in pal.enumerate() {
        let _ = write!(
            s,
            "{}[{},{},{}]",
            if k > 0 { "," } else { "" },
            c.0,
            c.1,
            c.2
        );
    }
    let _ = write!(
        s,
        "],\"idle\":[{},{},{}],\"boot\":[{},{},{}],\"names\":[",
        IDLE.0, IDLE.1, IDLE.2, BOOT.0, BOOT.1, BOOT.2
    );
    for (k, (n, _)) in names.list.iter().enumerate() {
        if k > 0 {
            s.push(',');
        }
        s += &json_str(n);
    }
    s += "],\"ncol\":[";
    for (k, (_, c)) in names.list.iter().enumerate() {
        let _ = write!(s, "{}{c}", if k > 0 { "," } else { "" });
    }
    s += "],\"rows\":[";
    for (k, r) in rows.iter().enumerate() {
        if k > 0 {
            s.push(',');
        }
        let _ = write!(s, "{{\"label\":{},\"s\":", json_str(&r.label));
        flat(
            &mut s,
            r.slices
                .iter()
                .map(|&(a, b, n)| [a, b.saturating_sub(a), n as i64]),
        );
        s += ",\"i\":";
        flat(
            &mut s,
            r.idle.iter().map(|&(a, b)| [a, b.saturating_sub(a)]),
        );
        s += ",\"k\":";
        flat(
            &mut s,
            r.boot.iter().map(|&(a, b)| [a, b.saturating_sub(a)]),
        );
        s += ",\"b\":";
        flat(
            &mut s,
            r.brackets
                .iter()
                .map(|&(a, b, n)| [a, b.saturating_sub(a), n as i64]),
        );
        s += ",\"e\":";
        flat(&mut s, r.events.iter().map(|&(a, n)| [a, n as i64]));
        match r.cut {
            Some(c) => {
                let _ = write!(s, ",\"cut\":{c}}}");
            }
            None => s += ",\"cut\":null}",
        }
    }
    s += "]}";
    (rows, script_safe(&s))
}

/// The script: decodes the rows, draws the visible window, zooms and pans.
const SCRIPT: &str = include_str!("zoom.js");

/// The zoomable timeline's part of the page.
pub(super) fn section(job: &Job, colours: &HashMap<String, usize>) -> String {
    section_bounded(job, colours, MAX_ITEMS)
}

fn section_bounded(job: &Job, colours: &HashMap<String, usize>, max_items: usize) -> String {
    let (rows, json) = data(job, colours, max_items);
    let end = job.end();
    let mut s = format!(
        "\n<div id=\"zoom\" style=\"margin-top:16px;font-size:13px\">\
         <h3 style=\"margin:0 16px 4px\">Timeline (zoomable)</h3>\
         <p style=\"margin:0 16px 6px\">Mouse wheel: zoom around the pointer; drag: pan; the \
         pointer over a row names what ran there. Colour: the handler with the most time in \
         the pixel column; a column where any handler ran gets a bar at least {MIN_BAR} px \
         high (the full band when it was busy all the column's time), so short handlers never \
         vanish. \
         Thin grey: idle; under a row: user brackets; marks above it: user events. The \
         page's address ending in <code>#t0=NS&amp;t1=NS</code> (ns from the job's start) \
         opens that window.</p>\
         <noscript><p style=\"margin:0 16px\">(The zoomable timeline needs JavaScript.)</p>\
         </noscript><div style=\"margin:0 16px 6px\">\
         <button type=\"button\" id=\"zoom-in\">zoom in</button> \
         <button type=\"button\" id=\"zoom-out\">zoom out</button> \
         <button type=\"button\" id=\"zoom-all\">whole job</button> \
         <span id=\"zoom-window\"></span></div>"
    );
    let height = AXIS_H + rows.len() as u32 * ROW_H + 8;
    let width = LEFT + PLOT_W + 20;
    let _ = write!(
        s,
        "<canvas id=\"zoom-canvas\" width=\"{width}\" height=\"{height}\" \
         style=\"display:block;width:{width}px;height:{height}px;cursor:grab\" \
         data-left=\"{LEFT}\" data-plot-w=\"{PLOT_W}\" data-axis-h=\"{AXIS_H}\" \
         data-row-h=\"{ROW_H}\" data-event-h=\"{EVENT_H}\" data-band-top=\"{BAND_TOP}\" \
         data-band-h=\"{BAND_H}\" data-bracket-top=\"{BRACKET_TOP}\" \
         data-bracket-h=\"{BRACKET_H}\" data-min-bar=\"{MIN_BAR}\" data-rows=\"{}\" \
         data-end=\"{end}\"></canvas>\
         <div id=\"zoom-info\" style=\"margin:4px 16px;font-family:monospace;\
         min-height:1.3em;white-space:pre\"></div>",
        rows.len()
    );
    legend(&mut s, colours);
    let left_out = (job.traces.len() + job.comm.len()).saturating_sub(rows.len());
    if left_out > 0 {
        let _ = write!(
            s,
            "<p style=\"margin:4px 16px;color:#a00\">This timeline shows the first {MAX_ROWS} \
             rows (PEs, then communication threads): {left_out} more are left out.</p>"
        );
    }
    let cut: Vec<&Row> = rows.iter().filter(|r| r.cut.is_some()).collect();
    if !cut.is_empty() {
        let total = (job.traces.iter().chain(&job.comm))
            .map(|t| t.records.len())
            .sum::<usize>();
        let per = (max_items / rows.len().max(1)).max(1);
        let _ = write!(
            s,
            "<p style=\"margin:4px 16px;color:#a00\">The job has more than {max_items} \
             slices, idle periods, brackets and events ({total} records): to keep the page \
             small this timeline keeps only the first {per} of each row; cut rows are shaded \
             pink after their cut: "
        );
        for (k, r) in cut.iter().take(20).enumerate() {
            let _ = write!(
                s,
                "{}{} after {}",
                if k > 0 { ", " } else { "" },
                esc(&r.label),
                ms(r.cut.unwrap_or(0) as f64)
            );
        }
        if cut.len() > 20 {
            let _ = write!(s, " and {} more rows", cut.len() - 20);
        }
        s += ".</p>";
    }
    let _ = writeln!(
        s,
        "<script type=\"application/json\" id=\"zoom-data\">{json}</script>\
         <script>{SCRIPT}</script></div>"
    );
    s
}

fn legend(s: &mut String, colours: &HashMap<String, usize>) {
    let mut by: Vec<(usize, &str)> = colours.iter().map(|(n, &c)| (c, n.as_str())).collect();
    by.sort_unstable();
    let swatch = |s: &mut String, c: (u8, u8, u8), what: &str| {
        let _ = write!(
            s,
            "<span style=\"margin-right:14px;white-space:nowrap\"><span style=\"display:\
             inline-block;width:10px;height:10px;background:{}\"></span> {what}</span>",
            rgb(c)
        );
    };
    s.push_str("<div style=\"margin:4px 16px 8px;line-height:1.6\">");
    let last = PALETTE.len() - 1;
    for &(c, name) in by.iter().filter(|(c, _)| *c < last) {
        swatch(s, PALETTE[c], &esc(name));
    }
    match by.iter().filter(|(c, _)| *c >= last).count() {
        0 => {}
        1 => swatch(s, PALETTE[last], &esc(by[by.len() - 1].1)),
        n => swatch(s, PALETTE[last], &format!("{n} other handlers")),
    }
    swatch(s, IDLE, "idle");
    swatch(s, BOOT, "the layer's boot");
    swatch(s, COMM, "communication thread moving messages");
    swatch(s, BRACKET, "user bracket");
    swatch(s, EVENT, "user event");
    s.push_str("</div>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, Trace};
    use converse::trace_format::Header;

    fn trace(pe: u32, handlers: &[&str], strings: &[&str], records: Vec<Record>) -> Trace {
        Trace {
            header: Header::sample(pe, 2, handlers),
            strings: strings.iter().map(|s| (*s).to_owned()).collect(),
            records,
            torn_bytes: 0,
        }
    }

    fn rec(t: u64, kind: Kind, a: u32, b: u64) -> Record {
        Record { t, kind, a, b }
    }

    fn data_text(section: &str) -> &str {
        let from = section.find("id=\"zoom-data\">").expect("the data element")
            + "id=\"zoom-data\">".len();
        let to = from + section[from..].find("</script>").expect("its end");
        &section[from..to]
    }

    fn parse(section: &str) -> serde_json::Value {
        serde_json::from_str(data_text(section)).expect("valid JSON")
    }

    fn colours_of(job: &Job) -> HashMap<String, usize> {
        super::super::colours(&crate::summary::handler_times(job))
    }

    #[test]
    fn names_cannot_end_the_script_and_the_data_is_json() {
        let evil = "</script><script>alert(1)</script>\u{2028}<!--";
        let t = trace(
            0,
            &[evil],
            &[evil, "ev\u{0}\"'"],
            vec![
                rec(0, Kind::Begin, 16, 0),
                rec(10, Kind::Bracket, 0, 5),
                rec(12, Kind::Event, 1, 0),
                rec(40, Kind::End, 0, 0),
            ],
        );
        let job = Job::new(vec![t]);
        let s = section(&job, &colours_of(&job));
        // Two scripts, each ended once: the data and the code.
        assert_eq!(s.matches("</script").count(), 2, "{s}");
        assert!(!s.contains("<!--"));
        assert!(!data_text(&s).contains(['<', '\u{2028}']));
        let v = parse(&s);
        let names: Vec<&str> = v["names"]
            .as_array()
            .expect("names")
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        assert!(names.contains(&evil), "{names:?}");
        assert!(names.contains(&"ev\u{0}\"'"));
        let row = &v["rows"][0];
        // One slice from 0 for 40 ns, a bracket 10..15, an event at 12 (starts delta-coded).
        assert_eq!((&row["s"][0], &row["s"][1]), (&0.into(), &40.into()));
        assert_eq!((&row["b"][0], &row["b"][1]), (&10.into(), &5.into()));
        assert_eq!(row["e"][0], 12);
        assert!(row["cut"].is_null());
    }

    #[test]
    fn nested_handlers_take_over_their_parents_time() {
        let t = trace(
            0,
            &["outer", "inner"],
            &[],
            vec![
                rec(0, Kind::Begin, 16, 0),
                rec(10, Kind::Begin, 17, 0),
                rec(40, Kind::End, 0, 0),
                rec(100, Kind::End, 0, 0),
                rec(150, Kind::Idle, 0, 50),
            ],
        );
        let job = Job::new(vec![t]);
        let mut names = Names::default();
        let row = pe_row(&job, 0, &colours_of(&job), &mut names);
        let by_name: Vec<(i64, i64, &str)> = row
            .slices
            .iter()
            .map(|&(a, b, n)| (a, b, names.list[n].0.as_str()))
            .collect();
        assert_eq!(
            by_name,
            [(0, 10, "outer"), (10, 40, "inner"), (40, 100, "outer")]
        );
        assert_eq!(row.idle, [(150, 200)]);
    }

    #[test]
    fn odd_traces_do_not_panic() {
        let empty = Job::new(vec![]);
        assert!(section(&empty, &HashMap::new()).contains("<canvas"));
        // One record; a handler never ended; a handler ending before it began; an end
        // without a begin; a bracket reaching past the end of time.
        let odd = [
            vec![rec(5, Kind::Mark, 0, 0)],
            vec![rec(5, Kind::Begin, 16, 0), rec(9, Kind::Begin, 17, 0)],
            vec![rec(9, Kind::Begin, 16, 0), rec(3, Kind::End, 0, 0)],
            vec![rec(0, Kind::End, 0, 0), rec(1, Kind::Bracket, 7, u64::MAX)],
            vec![],
        ];
        for records in odd {
            let job = Job::new(vec![trace(0, &["a", "b"], &[], records)]);
            let s = section(&job, &colours_of(&job));
            parse(&s);
        }
        // A handler never ended: its piece ends at the last event, its parent's has none.
        let job = Job::new(vec![trace(
            0,
            &["a", "b"],
            &[],
            vec![rec(5, Kind::Begin, 16, 0), rec(9, Kind::Begin, 17, 0)],
        )]);
        let row = pe_row(&job, 0, &HashMap::new(), &mut Names::default());
        assert_eq!(
            row.slices.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
            [(0, 4), (4, 4)]
        );
        // Communication threads only.
        let mut comm = trace(0, &[], &["turn"], vec![rec(3, Kind::Span, 0, 2)]);
        comm.header.pe = 0;
        let job = Job::with_comm(vec![], vec![comm]);
        let v = parse(&section(&job, &HashMap::new()));
        assert_eq!(v["rows"][0]["label"], "node 0 comm");
        assert_eq!(v["ncol"][0], COMM_C);
    }

    #[test]
    fn a_large_job_keeps_the_first_items_of_each_row_and_says_so() {
        let many: Vec<Record> = (0..1000u64)
            .flat_map(|k| {
                [
                    rec(k * 10, Kind::Begin, 16, 0),
                    rec(k * 10 + 5, Kind::End, 0, 0),
                ]
            })
            .collect();
        let job = Job::new(vec![
            trace(0, &["a"], &[], many.clone()),
            trace(1, &["a"], &[], many),
        ]);
        let s = section_bounded(&job, &colours_of(&job), 600);
        let v = parse(&s);
        for row in v["rows"].as_array().expect("rows") {
            assert_eq!(row["s"].as_array().expect("slices").len(), 300 * 3);
            assert_eq!(row["cut"], 3000);
        }
        assert!(
            s.contains("keeps only the first 300 of each row") && s.contains("PE 0 after 3.0 µs"),
            "{s}"
        );
        // Below the bound nothing is cut, nothing said.
        let s = section(&job, &colours_of(&job));
        assert!(!s.contains("keeps only"));
        assert!(parse(&s)["rows"][0]["cut"].is_null());
    }
}
