//! Pictures of a topology and of the routes its calls took: SVG (a page a person opens in a
//! browser) and DOT (for Graphviz).
//!
//! Processes are laid out by the topology's own geometry: a ring on a circle, a line in a row,
//! a grid or torus as a grid (row-major, process 0 at the upper left; a 3-D or larger one as
//! side-by-side 2-D panels of its last two dimensions), a star around its centre, others on a
//! circle. Channels are grey (a torus's wrap-around channels are dashed stubs at both ends).
//! The hops of a call are red arrows, one per channel and direction used, numbered in the
//! order the hops were sent: a channel used again (a token going round a ring three times)
//! keeps one arrow and one label naming all its hops, "1, 9, 17", or past [`LISTED_HOPS`] the
//! first few and the count. Labels are placed clear of the nodes and of each other.
//!
//! What `topo-draw` writes is bounded ([`drawing`]): a trace of more than [`MAX_PROCESSES`]
//! processes or [`MAX_CHANNELS`] channels is refused (no one can read such a picture), and of
//! its calls only the first [`MAX_CALL_PICTURES`] are drawn, fewer when their pictures would take
//! the output past [`MAX_OUTPUT_BYTES`]; the page says how many were left out.

use crate::error::TopoError;
use crate::trace::{Hop, Trace};
use std::collections::BTreeMap;
use std::fmt::Write as _;

mod hops;
pub use hops::{hop_label, HOP_RED, LISTED_HOPS};

/// Pixels between neighbouring grid positions.
const STEP: f64 = 80.0;
/// Margin around the drawing.
const MARGIN: f64 = 40.0;
/// Node radius.
pub const NODE_RADIUS: f64 = 16.0;
/// Node fill colour (what a picture test looks for).
pub const NODE_FILL: (u8, u8, u8) = (0x4a, 0x90, 0xd9);
/// Height of the title line above the drawing.
const TITLE: f64 = 40.0;

/// Most processes [`drawing`] draws: a 64 × 64 torus. A picture of more nodes is too large to
/// read, and each picture repeats every node.
pub const MAX_PROCESSES: usize = 4096;
/// Most channels [`drawing`] draws: a 3-D torus of that many processes has 12,288, a fully
/// connected topology of 181 processes 16,290.
pub const MAX_CHANNELS: usize = 16384;
/// Most per-call pictures [`drawing`] makes (each an SVG and a DOT file and a part of the page).
pub const MAX_CALL_PICTURES: usize = 100;
/// Most bytes of all the files [`drawing`] makes together. The topology's own picture of the
/// largest topology drawn (at most [`MAX_PROCESSES`] and [`MAX_CHANNELS`]) takes about 6 MiB
/// of it, twice (its file and the page); calls are drawn into the rest.
pub const MAX_OUTPUT_BYTES: usize = 64 << 20;
/// Bytes kept for the page's last lines (the note on calls left out, the closing tags).
const PAGE_TAIL: usize = 512;
/// Characters of an operation's name a file name keeps: names stay under file systems' limit.
const STEM_OP_CHARS: usize = 48;

/// One call's hops, as pictures group them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    /// The operation (`broadcast`, `send`, ...).
    pub op: String,
    /// Its number.
    pub seq: u32,
    /// Root or origin.
    pub root: usize,
}

impl Call {
    /// A title for the picture.
    pub fn title(&self) -> String {
        match self.op.as_str() {
            "send" => "point-to-point sends".to_owned(),
            op if op.starts_with("mutex") => format!("{op} (mutex traffic)"),
            op => format!("{op} #{} (root {})", self.seq, self.root),
        }
    }

    /// A file-name-safe name: the operation's name (from the trace, so anything but white
    /// space) keeps letters, digits, `.`, `_` and `-`, others become `_` (a `/` would name a
    /// directory), and at most 48 characters of it are kept.
    pub fn file_stem(&self) -> String {
        let op: String = self
            .op
            .chars()
            .take(STEM_OP_CHARS)
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{op}-{}-{}", self.seq, self.root)
    }
}

/// The calls of a trace, each with its hops in the order sent (then by sender).
pub fn calls(trace: &Trace) -> BTreeMap<Call, Vec<Hop>> {
    calls_of(trace)
        .into_iter()
        .map(|(c, hops)| (c, hops.into_iter().cloned().collect()))
        .collect()
}

/// [`calls`], the hops borrowed: a large trace's hops are not all copied to be drawn.
fn calls_of(trace: &Trace) -> BTreeMap<Call, Vec<&Hop>> {
    let mut m: BTreeMap<Call, Vec<&Hop>> = BTreeMap::new();
    for h in &trace.hops {
        // Mutex messages and point-to-point sends are one story per trace each, not one
        // picture per message.
        let (seq, root) = if h.op.starts_with("mutex") || h.op == "send" {
            (0, 0)
        } else {
            (h.seq, h.root)
        };
        m.entry(Call {
            op: if h.op.starts_with("mutex") {
                "mutex".into()
            } else {
                h.op.clone()
            },
            seq,
            root,
        })
        .or_default()
        .push(h);
    }
    for hops in m.values_mut() {
        // Saturating: a trace's vector time may hold any u64, and a sum that overflows would
        // panic where overflow is checked.
        hops.sort_by_key(|h| {
            let causal =
                h.vc.entries()
                    .iter()
                    .fold(0u64, |a, &x| a.saturating_add(x));
            (h.time_ns, causal, h.from)
        });
    }
    m
}

/// The position of every process in the picture, in pixels (the title line above
/// included), and the picture's size.
pub fn layout(trace: &Trace) -> (Vec<(f64, f64)>, (f64, f64)) {
    let n = trace.n;
    let unit: Vec<(f64, f64)> = match trace.shape.as_str() {
        "line" => (0..n).map(|i| (i as f64, 0.0)).collect(),
        // (A trace file with a zero extent is not a grid: drawn as a line rather than trusted.)
        "grid" | "torus" if !trace.dims.is_empty() && !trace.dims.contains(&0) => {
            grid_units(&trace.dims, n)
        }
        "star" => {
            let others: Vec<usize> = (0..n).filter(|&i| i != trace.centre).collect();
            let r = radius_units(others.len());
            let mut v = vec![(r, r); n];
            for (k, &i) in others.iter().enumerate() {
                v[i] = on_circle(k, others.len(), r);
            }
            v
        }
        _ => {
            let r = radius_units(n);
            (0..n).map(|i| on_circle(i, n, r)).collect()
        }
    };
    let maxx = unit.iter().map(|p| p.0).fold(0.0, f64::max);
    let maxy = unit.iter().map(|p| p.1).fold(0.0, f64::max);
    let pos = unit
        .iter()
        .map(|&(x, y)| (MARGIN + x * STEP, TITLE + MARGIN + y * STEP))
        .collect();
    let size = (
        2.0 * MARGIN + maxx * STEP,
        TITLE + 2.0 * MARGIN + maxy * STEP,
    );
    (pos, size)
}

/// Grid positions: the last two dimensions as rows and columns, earlier ones as panels.
fn grid_units(dims: &[usize], n: usize) -> Vec<(f64, f64)> {
    let (rows, cols) = match dims {
        [c] => (1, *c),
        [.., r, c] => (*r, *c),
        [] => (1, n),
    };
    let per = rows.saturating_mul(cols).max(1);
    (0..n)
        .map(|i| {
            let panel = i / per;
            let r = (i % per) / cols;
            let c = i % cols;
            ((panel as f64) * (cols as f64 + 1.0) + c as f64, r as f64)
        })
        .collect()
}

/// A circle's radius (in grid steps) that keeps neighbours a step apart.
fn radius_units(k: usize) -> f64 {
    if k <= 1 {
        0.0
    } else {
        (k as f64 / (2.0 * std::f64::consts::PI)).max(1.0)
    }
}

/// Position k of `k_all` on a circle of radius `r` (grid steps) centred at (r, r), clockwise
/// from the top.
fn on_circle(k: usize, k_all: usize, r: f64) -> (f64, f64) {
    if k_all <= 1 {
        return (r, r);
    }
    let a = -std::f64::consts::FRAC_PI_2 + 2.0 * std::f64::consts::PI * k as f64 / k_all as f64;
    (r + r * a.cos(), r + r * a.sin())
}

/// For a wrap-around channel of a grid-like layout (its ends more than a step apart), the
/// two stubs that stand for it: from each end outward, away from the other end.
type Seg = ((f64, f64), (f64, f64));
fn wrap_stubs(trace: &Trace, p: (f64, f64), q: (f64, f64)) -> Option<(Seg, Seg)> {
    let grid = matches!(trace.shape.as_str(), "grid" | "torus" | "line");
    let (dx, dy) = (q.0 - p.0, q.1 - p.1);
    let len = (dx * dx + dy * dy).sqrt();
    if !grid || len <= 1.5 * STEP {
        return None;
    }
    let (ux, uy) = (dx / len, dy / len);
    let stub = |c: (f64, f64), sx: f64, sy: f64| {
        (
            (c.0 + sx * NODE_RADIUS, c.1 + sy * NODE_RADIUS),
            (
                c.0 + sx * (NODE_RADIUS + 20.0),
                c.1 + sy * (NODE_RADIUS + 20.0),
            ),
        )
    };
    Some((stub(p, -ux, -uy), stub(q, ux, uy)))
}

/// Text for an SVG or HTML element's content or attribute. XML 1.0 allows no control
/// character but tab, line feed and carriage return, not even as a character reference, nor
/// U+FFFE and U+FFFF: those (from a trace's names) become U+FFFD, so the picture still parses.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Text for a DOT quoted string: `"` and `\\` escaped, control characters U+FFFD (Graphviz
/// reads the file as lines).
fn dot_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The SVG of the topology, with `call`'s hops as numbered arrows when given.
pub fn svg(trace: &Trace, call: Option<(&Call, &[Hop])>) -> String {
    let call = call.map(|(c, hops)| (c, hops.iter().collect::<Vec<_>>()));
    svg_within(
        trace,
        call.as_ref().map(|(c, h)| (*c, h.as_slice())),
        usize::MAX,
    )
    .unwrap_or_default()
}

/// [`svg`], or `None` as soon as it is longer than `limit` bytes (a call of a million hops is
/// not drawn whole only to find it does not fit).
fn svg_within(trace: &Trace, call: Option<(&Call, &[&Hop])>, limit: usize) -> Option<String> {
    let (pos, (w, h)) = layout(trace);
    let title = match call {
        Some((c, hops)) => format!(
            "{} topology of {}: {} — {} hops",
            trace.shape,
            trace.n,
            c.title(),
            hops.len()
        ),
        None => format!("{} topology of {} processes", trace.shape, trace.n),
    };
    // Wide enough for the title too (about 7 px a character at 14 px).
    let w = w.max(16.0 + 7.5 * title.chars().count() as f64);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{HOP_RED}"/></marker></defs>
<rect x="0" y="0" width="{w:.0}" height="{h:.0}" fill="white"/>
"##
    );
    let _ = writeln!(
        s,
        r#"<text x="8" y="20" font-size="14" fill="black">{}</text>"#,
        escape(&title)
    );
    // Channels. A torus's wrap-around channel would run over the nodes between its ends, so
    // it is drawn as two dashed stubs leaving each end outward, as torus pictures usually do.
    for &(a, b, wt) in &trace.edges {
        let (p, q) = (pos[a], pos[b]);
        if let Some(((p0, p1), (q0, q1))) = wrap_stubs(trace, p, q) {
            for (u, v) in [(p0, p1), (q0, q1)] {
                let _ = writeln!(
                    s,
                    r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#bbbbbb" stroke-width="1.5" stroke-dasharray="4 3"/>"##,
                    u.0, u.1, v.0, v.1
                );
            }
        } else {
            let _ = writeln!(
                s,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#bbbbbb" stroke-width="1.5"/>"##,
                p.0, p.1, q.0, q.1
            );
        }
        if wt != 1 {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#777777">{wt}</text>"##,
                (p.0 + q.0) / 2.0 + 3.0,
                (p.1 + q.1) / 2.0 - 3.0
            );
        }
    }
    // Nodes.
    let (r, g, b) = NODE_FILL;
    for (i, p) in pos.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="{NODE_RADIUS}" fill="#{r:02x}{g:02x}{b:02x}" stroke="#1a4f8a" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" font-size="11" fill="white" text-anchor="middle" dominant-baseline="central">{i}</text>"##,
            p.0, p.1, p.0, p.1
        );
    }
    if let Some((_, hops)) = call {
        hops::write_svg(&mut s, trace, &pos, (w, h), hops, limit)?;
    }
    s.push_str("</svg>\n");
    (s.len() <= limit).then_some(s)
}

/// The DOT of the topology, with `call`'s hops as numbered red edges when given.
pub fn dot(trace: &Trace, call: Option<(&Call, &[Hop])>) -> String {
    let call = call.map(|(c, hops)| (c, hops.iter().collect::<Vec<_>>()));
    dot_within(
        trace,
        call.as_ref().map(|(c, h)| (*c, h.as_slice())),
        usize::MAX,
    )
    .unwrap_or_default()
}

/// [`dot`], or `None` as soon as it is longer than `limit` bytes.
fn dot_within(trace: &Trace, call: Option<(&Call, &[&Hop])>, limit: usize) -> Option<String> {
    let (pos, _) = layout(trace);
    let mut s = String::from("graph topology {\n  node [shape=circle style=filled fillcolor=\"#4a90d9\" fontcolor=white];\n");
    if let Some((c, _)) = call {
        let _ = writeln!(s, "  label=\"{}\";", dot_escape(&c.title()));
    }
    for (i, p) in pos.iter().enumerate() {
        // Positions in inches for `neato -n`, y upward.
        let _ = writeln!(s, "  {i} [pos=\"{:.2},{:.2}!\"];", p.0 / 72.0, -p.1 / 72.0);
    }
    for &(a, b, w) in &trace.edges {
        let _ = writeln!(
            s,
            "  {a} -- {b} [color=gray{}];",
            if w != 1 {
                format!(" label={w}")
            } else {
                String::new()
            }
        );
    }
    if let Some((_, hops)) = call {
        hops::write_dot(&mut s, hops, limit)?;
    }
    s.push_str("}\n");
    (s.len() <= limit).then_some(s)
}

/// What `topo-draw` writes: every file's name and body, in order, all made before the first is
/// written (so that a trace that cannot be drawn leaves no half-written directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drawing {
    /// (file name, body): `index.html`, `topology.svg`, `topology.dot`, then for each call
    /// drawn `NNN-OP-SEQ-ROOT.svg` and `.dot`.
    pub files: Vec<(String, String)>,
    /// The trace's calls.
    pub calls: usize,
    /// Those drawn: the first ones, up to [`MAX_CALL_PICTURES`] and [`MAX_OUTPUT_BYTES`].
    pub drawn: usize,
}

/// Whether `trace` can be drawn: at most [`MAX_PROCESSES`] processes and [`MAX_CHANNELS`]
/// channels, and every channel and hop between its processes (as [`Trace::parse`] ensures; a
/// trace built in code may not).
///
/// # Errors
/// [`TopoError::Invalid`] saying which limit it passes or what is not a process.
pub fn check(trace: &Trace) -> Result<(), TopoError> {
    let n = trace.n;
    let outside = |a: usize, b: usize, what: &str| {
        Err(TopoError::Invalid(format!(
            "{what} {a}-{b} is not between two of the {n} processes"
        )))
    };
    if let Some(&(a, b, _)) = trace.edges.iter().find(|e| e.0 >= n || e.1 >= n) {
        return outside(a, b, "channel");
    }
    if let Some(h) = trace.hops.iter().find(|h| h.from >= n || h.to >= n) {
        return outside(h.from, h.to, "hop");
    }
    if trace.n > MAX_PROCESSES {
        return Err(TopoError::Invalid(format!(
            "a topology of {} processes is too large to draw: pictures show at most {MAX_PROCESSES}",
            trace.n
        )));
    }
    if trace.edges.len() > MAX_CHANNELS {
        return Err(TopoError::Invalid(format!(
            "a topology of {} channels is too large to draw: pictures show at most {MAX_CHANNELS}",
            trace.edges.len()
        )));
    }
    Ok(())
}

/// The files that show `trace`: an HTML page holding the topology and one picture per call,
/// in call order, and each picture as SVG and DOT. At most [`MAX_OUTPUT_BYTES`] in all: calls
/// are drawn in order while their pictures fit and [`MAX_CALL_PICTURES`] are not reached, and
/// the page says how many were left out.
///
/// # Errors
/// Those of [`check`].
pub fn drawing(trace: &Trace) -> Result<Drawing, TopoError> {
    check(trace)?;
    let all = calls_of(trace);
    let topo_svg = svg(trace, None);
    let topo_dot = dot(trace, None);
    let mut page = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>topology routes</title></head>\n<body style=\"font-family:sans-serif\">\n",
    );
    page += &topo_svg;
    // The page holds every picture again, so each SVG counts twice.
    let mut used = page.len() + topo_svg.len() + topo_dot.len() + PAGE_TAIL;
    let mut files = vec![
        ("topology.svg".to_owned(), topo_svg),
        ("topology.dot".to_owned(), topo_dot),
    ];
    let mut drawn = 0;
    for (k, (c, hops)) in all.iter().enumerate().take(MAX_CALL_PICTURES) {
        let heading = format!("<h3>{}</h3>\n", escape(&c.title()));
        let left = MAX_OUTPUT_BYTES.saturating_sub(used + heading.len());
        let Some(picture) = svg_within(trace, Some((c, hops)), left / 2) else {
            break;
        };
        let left = left - 2 * picture.len();
        let Some(graph) = dot_within(trace, Some((c, hops)), left) else {
            break;
        };
        used += heading.len() + 2 * picture.len() + graph.len();
        page += &heading;
        page += &picture;
        let stem = format!("{:03}-{}", k + 1, c.file_stem());
        files.push((format!("{stem}.svg"), picture));
        files.push((format!("{stem}.dot"), graph));
        drawn += 1;
    }
    if drawn < all.len() {
        let _ = writeln!(
            page,
            "<p>{} more calls are not drawn: at most {MAX_CALL_PICTURES} calls are, in at most {} MiB of pictures.</p>",
            all.len() - drawn,
            MAX_OUTPUT_BYTES >> 20
        );
    }
    page.push_str("</body></html>\n");
    files.insert(0, ("index.html".to_owned(), page));
    Ok(Drawing {
        files,
        calls: all.len(),
        drawn,
    })
}

#[cfg(test)]
mod tests;
