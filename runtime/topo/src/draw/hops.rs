//! A call's hops in a picture. A channel a call used many times (a token going round a ring
//! three times uses each channel three times) gets one arrow per direction and one label
//! naming every hop over it in order — "1, 9, 17" — rather than one number per hop, which
//! would be drawn on top of each other. Labels are placed clear of the nodes and of each other.

use super::{wrap_stubs, NODE_RADIUS};
use crate::trace::{Hop, Trace};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Hop numbers a label lists in full; past this it lists the first few and the count, so a
/// channel used a thousand times still has a label a person can read.
pub const LISTED_HOPS: usize = 4;
/// The hops' colour (arrows and labels).
pub const HOP_RED: &str = "#d62728";
/// Hops an arrow's tooltip describes (ends, bytes, vector time); past this it says how many
/// more there are, so that a channel used a million times is not a tooltip of a million lines.
const DESCRIBED_HOPS: usize = 16;
/// Font size of a hop label.
const FONT: f64 = 11.0;
/// A label's estimated box: a little over what a browser's sans-serif takes at [`FONT`]
/// (digits are about 6 px wide), so that labels placed apart are apart when rendered.
const CHAR_W: f64 = 6.5;
const LABEL_H: f64 = 14.0;
/// How far the arrow runs beside its channel (so that opposite hops are two arrows).
const ARROW_OFFSET: f64 = 5.0;
/// Space between an arrow and its label.
const GAP: f64 = 4.0;
/// Bottom of the title line: labels stay below it.
const TITLE_BOTTOM: f64 = 26.0;

/// The hops of one call over one channel in one direction: one arrow and one label.
pub(super) struct Used<'a> {
    pub(super) from: usize,
    pub(super) to: usize,
    /// Each hop with its number (from 1, in the order the call's hops were sent).
    pub(super) hops: Vec<(usize, &'a Hop)>,
}

/// `hops` (in the order sent) grouped by channel and direction, in the order of first use.
pub(super) fn by_channel<'a>(hops: &[&'a Hop]) -> Vec<Used<'a>> {
    let mut at: HashMap<(usize, usize), usize> = HashMap::new();
    let mut out: Vec<Used<'a>> = Vec::new();
    for (k, &h) in hops.iter().enumerate() {
        let i = *at.entry((h.from, h.to)).or_insert_with(|| {
            out.push(Used {
                from: h.from,
                to: h.to,
                hops: Vec::new(),
            });
            out.len() - 1
        });
        if let Some(u) = out.get_mut(i) {
            u.hops.push((k + 1, h));
        }
    }
    out
}

/// The label of a channel's hops: their numbers ("1, 9, 17"), or past [`LISTED_HOPS`] the
/// first few and how many there are ("1, 9, 17, … (7 hops)").
pub fn hop_label(numbers: &[usize]) -> String {
    let shown = if numbers.len() <= LISTED_HOPS {
        numbers.len()
    } else {
        LISTED_HOPS - 1
    };
    let mut s = numbers[..shown]
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if shown < numbers.len() {
        let _ = write!(s, ", … ({} hops)", numbers.len());
    }
    s
}

/// A box on the picture, in pixels.
#[derive(Clone, Copy, Debug)]
struct Rect {
    x0: f64,
    y0: f64,
    x1: f64,
    y1: f64,
}

impl Rect {
    fn around(c: (f64, f64), w: f64, h: f64) -> Rect {
        Rect {
            x0: c.0 - w / 2.0,
            y0: c.1 - h / 2.0,
            x1: c.0 + w / 2.0,
            y1: c.1 + h / 2.0,
        }
    }

    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    /// Moved, when it can be, to lie within `w`×`h` below the title.
    fn clamped(self, w: f64, h: f64) -> Rect {
        let dx = (0.0 - self.x0).max(0.0) + (w - self.x1).min(0.0);
        let dy = (TITLE_BOTTOM - self.y0).max(0.0) + (h - self.y1).min(0.0);
        Rect {
            x0: self.x0 + dx,
            y0: self.y0 + dy,
            x1: self.x1 + dx,
            y1: self.y1 + dy,
        }
    }

    fn centre(&self) -> (f64, f64) {
        ((self.x0 + self.x1) / 2.0, (self.y0 + self.y1) / 2.0)
    }
}

/// The boxes already on the picture, bucketed by area: a large picture has thousands, and a
/// label is checked against those near it only.
#[derive(Default)]
struct Taken {
    cells: HashMap<(i64, i64), Vec<Rect>>,
}

/// Side of a bucket of [`Taken`], larger than any label.
const CELL: f64 = 128.0;
/// Boxes in a bucket past which it counts as full: where hundreds of channels cross (a fully
/// connected topology's centre) no place is free anyway, and placing a label stays cheap.
const CROWDED: usize = 64;

impl Taken {
    fn cells(r: &Rect) -> impl Iterator<Item = (i64, i64)> {
        // Positions are finite and within the picture, so the casts keep them.
        let (cx0, cx1) = ((r.x0 / CELL).floor() as i64, (r.x1 / CELL).floor() as i64);
        let (cy0, cy1) = ((r.y0 / CELL).floor() as i64, (r.y1 / CELL).floor() as i64);
        (cx0..=cx1).flat_map(move |x| (cy0..=cy1).map(move |y| (x, y)))
    }

    fn free(&self, r: &Rect) -> bool {
        Taken::cells(r).all(|c| {
            self.cells
                .get(&c)
                .is_none_or(|v| v.len() < CROWDED && v.iter().all(|o| !o.overlaps(r)))
        })
    }

    fn take(&mut self, r: Rect) {
        for c in Taken::cells(&r) {
            self.cells.entry(c).or_default().push(r);
        }
    }
}

/// Where a label of `w`×`h` may go for a hop from `p` to `q`, best first: beside its arrow,
/// on the arrow's side, at the middle, then slid along it and farther out; for a wrap-around
/// channel, past the end of the sender's stub, then beside it.
fn candidates(trace: &Trace, p: (f64, f64), q: (f64, f64), w: f64, h: f64) -> Vec<(f64, f64)> {
    let unit = |a: (f64, f64), b: (f64, f64)| {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len = dx.hypot(dy).max(1e-9);
        ((dx / len, dy / len), len)
    };
    // How far a box's centre must be from a line of normal n for the box to clear it by d.
    let clear = |n: (f64, f64), d: f64| d + n.0.abs() * w / 2.0 + n.1.abs() * h / 2.0;
    let mut out = Vec::new();
    if let Some(((p0, p1), _)) = wrap_stubs(trace, p, q) {
        let (v, len) = unit(p0, p1);
        let n = (-v.1, v.0);
        let mid = ((p0.0 + p1.0) / 2.0, (p0.1 + p1.1) / 2.0);
        for extra in [0.0, LABEL_H, 2.0 * LABEL_H] {
            let d = clear(v, GAP) + extra;
            out.push((p1.0 + v.0 * d, p1.1 + v.1 * d));
            for side in [1.0, -1.0] {
                let d = clear(n, GAP) + extra;
                out.push((mid.0 + side * n.0 * d, mid.1 + side * n.1 * d));
                out.push((
                    p1.0 + side * n.0 * d + v.0 * len / 2.0,
                    p1.1 + side * n.1 * d + v.1 * len / 2.0,
                ));
            }
        }
        return out;
    }
    let (u, len) = unit(p, q);
    let n = (-u.1, u.0);
    let mid = ((p.0 + q.0) / 2.0, (p.1 + q.1) / 2.0);
    // Along the arrow, between the nodes' discs.
    let room = (len / 2.0 - NODE_RADIUS - clear(u, 0.0)).max(0.0);
    for extra in [0.0, LABEL_H / 2.0, LABEL_H, 2.0 * LABEL_H, 3.0 * LABEL_H] {
        let d = clear(n, ARROW_OFFSET + 1.0 + GAP) + extra;
        for s in [0.0, -0.5, 0.5, -1.0, 1.0] {
            out.push((
                mid.0 + n.0 * d + u.0 * s * room,
                mid.1 + n.1 * d + u.1 * s * room,
            ));
        }
    }
    out
}

/// Write the arrows and labels of `hops` (a call's, in the order sent) into the SVG `s` of a
/// `w`×`h` picture whose processes are at `pos`; `None` as soon as `s` is longer than `limit`.
pub(super) fn write_svg(
    s: &mut String,
    trace: &Trace,
    pos: &[(f64, f64)],
    (w, h): (f64, f64),
    hops: &[&Hop],
    limit: usize,
) -> Option<()> {
    let mut taken = Taken::default();
    for &p in pos {
        let d = 2.0 * NODE_RADIUS + 2.0;
        taken.take(Rect::around(p, d, d));
    }
    // A channel's weight, drawn at its middle.
    for &(a, b, wt) in &trace.edges {
        if wt != 1 {
            let (p, q) = (pos[a], pos[b]);
            let at = ((p.0 + q.0) / 2.0 + 3.0, (p.1 + q.1) / 2.0 - 3.0);
            let wide = 6.0 * wt.to_string().len() as f64;
            taken.take(Rect {
                x0: at.0,
                y0: at.1 - 10.0,
                x1: at.0 + wide,
                y1: at.1 + 2.0,
            });
        }
    }
    for used in by_channel(hops) {
        let (p, q) = (pos[used.from], pos[used.to]);
        let mut tip = String::from("<title>");
        for (k, hop) in used.hops.iter().take(DESCRIBED_HOPS) {
            let _ = writeln!(
                tip,
                "hop {k}: {} -> {}: {} bytes, vector time {}",
                hop.from,
                hop.to,
                hop.bytes,
                hop.vc.to_text()
            );
        }
        if let Some(more) = used.hops.len().checked_sub(DESCRIBED_HOPS + 1) {
            let _ = writeln!(tip, "… and {} more hops", more + 1);
        }
        tip.push_str("</title>");
        // A hop over a wrap-around channel leaves along one stub and arrives along the other;
        // any other runs beside its channel, so that a pair of opposite hops is two arrows.
        let segments = match wrap_stubs(trace, p, q) {
            Some(((p0, p1), (q0, q1))) => vec![(p0, p1, false), (q1, q0, true)],
            None => {
                let (dx, dy) = (q.0 - p.0, q.1 - p.1);
                let len = dx.hypot(dy);
                if len < 1.0 {
                    continue;
                }
                let (ux, uy) = (dx / len, dy / len);
                let (ox, oy) = (-uy * ARROW_OFFSET, ux * ARROW_OFFSET);
                let start = (p.0 + ux * NODE_RADIUS + ox, p.1 + uy * NODE_RADIUS + oy);
                let end = (
                    q.0 - ux * (NODE_RADIUS + 2.0) + ox,
                    q.1 - uy * (NODE_RADIUS + 2.0) + oy,
                );
                vec![(start, end, true)]
            }
        };
        for (a, b, head) in segments {
            let marker = if head {
                r#" marker-end="url(#arrow)""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{HOP_RED}" stroke-width="2"{marker}>{tip}</line>"##,
                a.0, a.1, b.0, b.1
            );
        }
        let numbers: Vec<usize> = used.hops.iter().map(|(k, _)| *k).collect();
        let text = hop_label(&numbers);
        let (bw, bh) = (CHAR_W * text.chars().count() as f64, LABEL_H);
        let places: Vec<Rect> = candidates(trace, p, q, bw, bh)
            .into_iter()
            .map(|c| Rect::around(c, bw, bh).clamped(w, h))
            .collect();
        // Crowded (a hub of many channels): the first place, overlapping, rather than none.
        let Some(&place) = places.iter().find(|r| taken.free(r)).or(places.first()) else {
            continue;
        };
        taken.take(place);
        let c = place.centre();
        // The white outline keeps the numbers readable where they cross a line.
        let _ = writeln!(
            s,
            r##"<text class="hop" x="{:.1}" y="{:.1}" font-size="{FONT}" fill="{HOP_RED}" stroke="white" stroke-width="3" paint-order="stroke" text-anchor="middle" dominant-baseline="central">{text}</text>"##,
            c.0, c.1
        );
        if s.len() > limit {
            return None;
        }
    }
    Some(())
}

/// Write the hops of a call into the DOT `s`: one red edge per channel and direction, labelled
/// as in the SVG; `None` as soon as `s` is longer than `limit`.
pub(super) fn write_dot(s: &mut String, hops: &[&Hop], limit: usize) -> Option<()> {
    for used in by_channel(hops) {
        let numbers: Vec<usize> = used.hops.iter().map(|(k, _)| *k).collect();
        let _ = writeln!(
            s,
            "  {} -- {} [dir=forward color=red fontcolor=red label=\"{}\"];",
            used.from,
            used.to,
            hop_label(&numbers)
        );
        if s.len() > limit {
            return None;
        }
    }
    Some(())
}
