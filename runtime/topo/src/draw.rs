//! Pictures of a topology and of the routes its calls took: SVG (a page a person opens in a
//! browser) and DOT (for Graphviz).
//!
//! Processes are laid out by the topology's own geometry: a ring on a circle, a line in a row,
//! a grid or torus as a grid (row-major, process 0 at the upper left; a 3-D or larger one as
//! side-by-side 2-D panels of its last two dimensions), a star around its centre, others on a
//! circle. Channels are grey (a torus's wrap-around channels are dashed stubs at both ends); each recorded hop of a
//! call is a red arrow numbered in the order the hops were sent.

use crate::trace::{Hop, Trace};
use std::collections::BTreeMap;
use std::fmt::Write as _;

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

    /// A file-name-safe name.
    pub fn file_stem(&self) -> String {
        format!("{}-{}-{}", self.op, self.seq, self.root)
    }
}

/// The calls of a trace, each with its hops in the order sent (then by sender).
pub fn calls(trace: &Trace) -> BTreeMap<Call, Vec<Hop>> {
    let mut m: BTreeMap<Call, Vec<Hop>> = BTreeMap::new();
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
        .push(h.clone());
    }
    for hops in m.values_mut() {
        hops.sort_by_key(|h| (h.time_ns, h.vc.entries().iter().sum::<u64>(), h.from));
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

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG of the topology, with `call`'s hops as numbered arrows when given.
pub fn svg(trace: &Trace, call: Option<(&Call, &[Hop])>) -> String {
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
<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d62728"/></marker></defs>
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
    // Hops, numbered in order, each pulled a little to the side so that a pair of opposite
    // hops shows as two arrows; a hop over a wrap-around channel leaves along one stub and
    // arrives along the other.
    if let Some((_, hops)) = call {
        for (k, hop) in hops.iter().enumerate() {
            let (p, q) = (pos[hop.from], pos[hop.to]);
            let tip = format!(
                "<title>{} -> {}: {} bytes, vector time {}</title>",
                hop.from,
                hop.to,
                hop.bytes,
                hop.vc.to_text()
            );
            let (segments, label_at) = match wrap_stubs(trace, p, q) {
                Some(((p0, p1), (q0, q1))) => (vec![(p0, p1, false), (q1, q0, true)], p1),
                None => {
                    let (dx, dy) = (q.0 - p.0, q.1 - p.1);
                    let len = (dx * dx + dy * dy).sqrt();
                    if len < 1.0 {
                        continue;
                    }
                    let (ux, uy) = (dx / len, dy / len);
                    let (ox, oy) = (-uy * 5.0, ux * 5.0);
                    let start = (p.0 + ux * NODE_RADIUS + ox, p.1 + uy * NODE_RADIUS + oy);
                    let end = (
                        q.0 - ux * (NODE_RADIUS + 2.0) + ox,
                        q.1 - uy * (NODE_RADIUS + 2.0) + oy,
                    );
                    let mid = (
                        (start.0 + end.0) / 2.0 + ox * 2.0,
                        (start.1 + end.1) / 2.0 + oy * 2.0,
                    );
                    (vec![(start, end, true)], mid)
                }
            };
            for (u, v, head) in segments {
                let marker = if head {
                    r#" marker-end="url(#arrow)""#
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#d62728" stroke-width="2"{marker}>{tip}</line>"##,
                    u.0, u.1, v.0, v.1
                );
            }
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#d62728" text-anchor="middle" dominant-baseline="central">{}</text>"##,
                label_at.0,
                label_at.1,
                k + 1
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// The DOT of the topology, with `call`'s hops as numbered red edges when given.
pub fn dot(trace: &Trace, call: Option<(&Call, &[Hop])>) -> String {
    let (pos, _) = layout(trace);
    let mut s = String::from("graph topology {\n  node [shape=circle style=filled fillcolor=\"#4a90d9\" fontcolor=white];\n");
    if let Some((c, _)) = call {
        let _ = writeln!(s, "  label=\"{}\";", c.title().replace('"', "'"));
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
        for (k, h) in hops.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {} -- {} [dir=forward color=red fontcolor=red label=\"{}\"];",
                h.from,
                h.to,
                k + 1
            );
        }
    }
    s.push_str("}\n");
    s
}

/// An HTML page holding the topology and one picture per call, in call order.
pub fn page(trace: &Trace) -> String {
    let mut s = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>topology routes</title></head>\n<body style=\"font-family:sans-serif\">\n",
    );
    s += &svg(trace, None);
    for (c, hops) in calls(trace) {
        let _ = writeln!(s, "<h3>{}</h3>", escape(&c.title()));
        s += &svg(trace, Some((&c, &hops)));
    }
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Topology, VectorTime};

    fn hop(op: &str, seq: u32, from: usize, to: usize, t: u64) -> Hop {
        Hop {
            op: op.into(),
            seq,
            root: 0,
            from,
            to,
            bytes: 8,
            time_ns: t,
            vc: VectorTime(vec![0; 4]),
        }
    }

    #[test]
    fn layouts_follow_geometry() {
        let ring = Trace::new(&Topology::ring(8).unwrap(), vec![]);
        let (pos, _) = layout(&ring);
        // On a circle: every node equally far from the centre.
        let c = (
            pos.iter().map(|p| p.0).sum::<f64>() / 8.0,
            pos.iter().map(|p| p.1).sum::<f64>() / 8.0,
        );
        let d: Vec<f64> = pos
            .iter()
            .map(|p| ((p.0 - c.0).powi(2) + (p.1 - c.1).powi(2)).sqrt())
            .collect();
        assert!(d.iter().all(|x| (x - d[0]).abs() < 0.01), "{d:?}");
        // Process 0 at the top.
        assert!(pos[0].1 < pos[2].1 && (pos[0].0 - c.0).abs() < 0.01);
        let grid = Trace::new(&Topology::torus2(3, 4).unwrap(), vec![]);
        let (pos, _) = layout(&grid);
        assert_eq!(pos[0].1, pos[3].1);
        assert!(pos[4].1 > pos[0].1 && pos[4].0 == pos[0].0);
        let t3 = Trace::new(&Topology::torus(&[2, 2, 2]).unwrap(), vec![]);
        let (pos, _) = layout(&t3);
        assert!(pos[4].0 > pos[1].0, "the second panel is to the right");
    }

    #[test]
    fn a_hostile_trace_draws_without_panicking() {
        let t = Trace::parse(
            "topo-trace 1\nshape torus\ndims 0 3\ncentre 9\nn 3\nedge 0 2 1\n",
            "t",
        )
        .unwrap();
        assert_eq!(layout(&t).0.len(), 3);
        assert!(svg(&t, None).contains("</svg>"));
        let s = Trace::parse("topo-trace 1\nshape star\ncentre 9\nn 2\n", "t").unwrap();
        assert_eq!(layout(&s).0.len(), 2);
    }

    #[test]
    fn svg_and_dot_hold_nodes_edges_and_numbered_hops() {
        let t = Topology::ring(4).unwrap();
        let trace = Trace::new(
            &t,
            vec![
                hop("broadcast", 0, 0, 1, 5),
                hop("broadcast", 0, 0, 3, 4),
                hop("send", 0, 2, 1, 9),
            ],
        );
        let cs = calls(&trace);
        assert_eq!(cs.len(), 2, "the sends are one picture");
        let (c, hops) = cs.iter().next().unwrap();
        assert_eq!(c.op, "broadcast");
        // In the order sent.
        assert_eq!((hops[0].to, hops[1].to), (3, 1));
        let s = svg(&trace, Some((c, hops)));
        assert_eq!(s.matches("<circle").count(), 4);
        assert_eq!(s.matches("marker-end").count(), 2);
        assert!(s.contains(">1</text>") && s.contains(">2</text>"));
        let d = dot(&trace, Some((c, hops)));
        assert!(
            d.contains("0 -- 3 [dir=forward color=red fontcolor=red label=\"1\"]"),
            "{d}"
        );
        assert_eq!(d.matches(" -- ").count(), 4 + 2);
        let p = page(&trace);
        assert_eq!(p.matches("<svg").count(), 3);
    }
}
