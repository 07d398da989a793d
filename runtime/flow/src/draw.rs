//! A picture of a (split) flow: every stage a box in the colour of its group, laid out left
//! to right by its distance from the source, with its PE; channels inside a group in grey,
//! *external* channels between groups in red and *internal* ones in purple, both dashed (the
//! thesis's figures 6.2 and 7.2 colour them so). SVG, text left as text.

use crate::plan::{Connection, Plan};
use std::fmt::Write;

/// Box size and spacing, in pixels.
const BOX_W: f64 = 130.0;
const BOX_H: f64 = 44.0;
const GAP_X: f64 = 70.0;
const GAP_Y: f64 = 22.0;
const MARGIN: f64 = 20.0;
/// Room above the boxes for the legend.
const TOP: f64 = 56.0;

/// Group fills, in group order (then again); stages of no group are white.
pub const GROUP_FILLS: [(u8, u8, u8); 6] = [
    (0xae, 0xd6, 0xf1),
    (0xab, 0xeb, 0xc6),
    (0xf9, 0xe7, 0x9f),
    (0xf5, 0xb7, 0xb1),
    (0xd7, 0xbd, 0xe2),
    (0xcc, 0xd1, 0xd1),
];
/// External channels (between levels of the pipeline).
pub const EXTERNAL: (u8, u8, u8) = (0xd6, 0x27, 0x28);
/// Internal channels (a block split horizontally).
pub const INTERNAL: (u8, u8, u8) = (0x7d, 0x3c, 0x98);
const INSIDE: (u8, u8, u8) = (0x88, 0x88, 0x88);

fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Plan {
    /// Where each stage's box is drawn (its centre), and the picture's width and height.
    pub fn layout(&self) -> (Vec<(f64, f64)>, (f64, f64)) {
        let n = self.insts.len();
        // Column: the longest path from a source (the graph has no cycles).
        let mut col = vec![0usize; n];
        let mut order: Vec<usize> = (0..n).collect();
        // Instances are numbered in compile order, producers mostly first; relax until stable.
        for _ in 0..n {
            let mut changed = false;
            for &i in &order {
                for &(d, _) in &self.insts[i].outs {
                    let d = d as usize;
                    if col[d] < col[i] + 1 {
                        col[d] = col[i] + 1;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        order.sort_by_key(|&i| (col[i], i));
        let cols = col.iter().copied().max().map_or(0, |m| m + 1);
        let mut rows = vec![0usize; cols];
        let mut pos = vec![(0.0, 0.0); n];
        for &i in &order {
            let c = col[i];
            pos[i] = (
                MARGIN + BOX_W / 2.0 + c as f64 * (BOX_W + GAP_X),
                TOP + BOX_H / 2.0 + rows[c] as f64 * (BOX_H + GAP_Y),
            );
            rows[c] += 1;
        }
        let tall = rows.iter().copied().max().unwrap_or(1) as f64;
        let w = 2.0 * MARGIN + cols as f64 * BOX_W + cols.saturating_sub(1) as f64 * GAP_X;
        let h = TOP + tall * (BOX_H + GAP_Y) + MARGIN;
        (pos, (w.max(420.0), h))
    }

    /// The picture, as SVG.
    pub fn to_svg(&self) -> String {
        let (pos, (w, h)) = self.layout();
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        s.push_str(r#"<rect x="0" y="0" width="100%" height="100%" fill="white"/>"#);
        for (k, c) in [("ext", EXTERNAL), ("int", INTERNAL), ("in", INSIDE)] {
            let _ = write!(
                s,
                r#"<defs><marker id="arrow-{k}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{}"/></marker></defs>"#,
                hex(c)
            );
        }
        // Legend: groups, then the two kinds of crossing channel.
        let mut x = MARGIN;
        for (g, name) in self.group_names.iter().enumerate() {
            let _ = write!(
                s,
                r#"<rect x="{x}" y="12" width="14" height="14" fill="{}" stroke="black"/><text x="{}" y="24">{}</text>"#,
                hex(GROUP_FILLS[g % GROUP_FILLS.len()]),
                x + 20.0,
                esc(name)
            );
            x += 30.0 + 7.5 * name.len() as f64;
        }
        if !self.group_names.is_empty() {
            for (label, c) in [("external", EXTERNAL), ("internal", INTERNAL)] {
                let _ = write!(
                    s,
                    r#"<line x1="{x}" y1="19" x2="{}" y2="19" stroke="{}" stroke-width="3" stroke-dasharray="6,3"/><text x="{}" y="24">{label}</text>"#,
                    x + 24.0,
                    hex(c),
                    x + 30.0
                );
                x += 100.0;
            }
        }
        // Channels under the boxes.
        for (i, inst) in self.insts.iter().enumerate() {
            for &(d, _) in &inst.outs {
                let d = d as usize;
                let (a, b) = (pos[i], pos[d]);
                let kind = match (inst.group, self.insts[d].group) {
                    (Some(x), Some(y)) if x != y => Some(if inst.level == self.insts[d].level {
                        Connection::Internal
                    } else {
                        Connection::External
                    }),
                    _ => None,
                };
                let (c, k, dash, width) = match kind {
                    Some(Connection::External) => {
                        (EXTERNAL, "ext", r#" stroke-dasharray="8,4""#, 3)
                    }
                    Some(Connection::Internal) => {
                        (INTERNAL, "int", r#" stroke-dasharray="8,4""#, 3)
                    }
                    None => (INSIDE, "in", "", 1),
                };
                // From the right edge to the left edge (or bottom to top within a column).
                let (x1, y1, x2, y2) = if (a.0 - b.0).abs() < 1.0 {
                    let dir = if b.1 > a.1 { 1.0 } else { -1.0 };
                    (a.0, a.1 + dir * BOX_H / 2.0, b.0, b.1 - dir * BOX_H / 2.0)
                } else {
                    (a.0 + BOX_W / 2.0, a.1, b.0 - BOX_W / 2.0, b.1)
                };
                let _ = write!(
                    s,
                    r#"<line class="channel" x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{}" stroke-width="{width}"{dash} marker-end="url(#arrow-{k})"/>"#,
                    hex(c)
                );
            }
        }
        for (i, inst) in self.insts.iter().enumerate() {
            let (cx, cy) = pos[i];
            let fill = inst
                .group
                .map_or((255, 255, 255), |g| GROUP_FILLS[g % GROUP_FILLS.len()]);
            let _ = write!(
                s,
                r#"<rect class="stage" x="{}" y="{}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{}" stroke="black"/><text x="{cx}" y="{}" text-anchor="middle" font-weight="bold">{}</text><text x="{cx}" y="{}" text-anchor="middle">PE {}</text>"#,
                cx - BOX_W / 2.0,
                cy - BOX_H / 2.0,
                hex(fill),
                cy - 3.0,
                esc(&inst.name),
                cy + 13.0,
                inst.pe
            );
        }
        s.push_str("</svg>\n");
        s
    }
}
