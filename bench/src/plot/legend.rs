//! A figure's legend, below its panels: inside a panel it covered points wherever it went (a
//! corner the data leaves free for one run is where the next run's points are). Entries are
//! laid out in as many columns as the width takes, each a sample of its series (line and
//! marker, or bar) and its name.

use super::style::{outline, Style};
use super::{draw_err, Area};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Font size of the names, as plotters takes it: its SVG says 1.24 times less, 12 px.
const FONT: u32 = 15;
/// Estimated width of a character of a name: a little over what a browser's sans-serif takes
/// at 12 px, so that a long name does not run into the next column.
const CHAR_W: f64 = 7.0;
/// Height of an entry.
const ROW_H: u32 = 20;
/// Width of an entry's sample.
const SAMPLE_W: u32 = 36;
/// Space between the sample and the name, and between columns.
const SPACE: u32 = 8;
/// Space between the legend's border and its entries, and above the legend.
const PAD: u32 = 8;

/// One entry: a series' name and look.
pub(crate) struct Entry<'a> {
    pub name: &'a str,
    pub style: Style,
    /// A bar's sample (a box) rather than a line's.
    pub bar: bool,
}

/// How `entries` are laid out in an area `width` wide: columns, rows and a column's width.
fn grid(entries: &[Entry<'_>], width: u32) -> (u32, u32, u32) {
    let longest = entries
        .iter()
        .map(|e| e.name.chars().count())
        .max()
        .unwrap_or(0);
    let col_w = SAMPLE_W + SPACE + (CHAR_W * longest as f64).ceil() as u32 + 2 * SPACE;
    let n = entries.len().max(1) as u32;
    let cols = (width.saturating_sub(2 * PAD + 2 * SPACE) / col_w).clamp(1, n);
    (cols, n.div_ceil(cols), col_w)
}

/// The height the legend of `entries` takes in an area `width` wide: none for no entries.
pub(crate) fn height(entries: &[Entry<'_>], width: u32) -> u32 {
    if entries.is_empty() {
        return 0;
    }
    let (_, rows, _) = grid(entries, width);
    rows * ROW_H + 2 * PAD + 2 * PAD
}

/// Draw the legend of `entries` at the top of `area`, centred, in a white box with a black
/// border; entries run down the columns, in series order.
pub(crate) fn draw(area: &Area<'_>, entries: &[Entry<'_>]) -> anyhow::Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let (w, _) = area.dim_in_pixel();
    let (cols, rows, col_w) = grid(entries, w);
    let box_w = cols * col_w + 2 * PAD;
    let x0 = (w.saturating_sub(box_w) / 2) as i32;
    let y0 = PAD as i32;
    let corner = (x0 + box_w as i32, y0 + (rows * ROW_H + 2 * PAD) as i32);
    area.draw(&Rectangle::new([(x0, y0), corner], WHITE.filled()))
        .map_err(draw_err)?;
    area.draw(&Rectangle::new([(x0, y0), corner], BLACK.stroke_width(1)))
        .map_err(draw_err)?;
    let font = ("sans-serif", FONT)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, e) in entries.iter().enumerate() {
        let (col, row) = (i as u32 / rows, i as u32 % rows);
        let x = x0 + (PAD + SPACE + col * col_w) as i32;
        let y = y0 + (PAD + row * ROW_H + ROW_H / 2) as i32;
        let c = e.style.colour;
        let mid = x + SAMPLE_W as i32 / 2;
        if e.bar {
            let corners = [(mid - 7, y - 6), (mid + 7, y + 6)];
            let sample = if e.style.dashed {
                Rectangle::new(corners, c.stroke_width(2))
            } else {
                Rectangle::new(corners, c.filled())
            };
            area.draw(&sample).map_err(draw_err)?;
        } else {
            let end = x + SAMPLE_W as i32;
            let line = c.stroke_width(2);
            if e.style.dashed {
                // Short dashes either side of the marker, as the series' line.
                for (a, b) in [
                    (x, x + 5),
                    (x + 9, x + 14),
                    (end - 14, end - 9),
                    (end - 5, end),
                ] {
                    area.draw(&PathElement::new(vec![(a, y), (b, y)], line))
                        .map_err(draw_err)?;
                }
            } else {
                area.draw(&PathElement::new(vec![(x, y), (end, y)], line))
                    .map_err(draw_err)?;
            }
            area.draw(
                &(EmptyElement::at((mid, y)) + Polygon::new(outline(e.style.marker), c.filled())),
            )
            .map_err(draw_err)?;
        }
        area.draw(&Text::new(
            e.name.to_owned(),
            (x + (SAMPLE_W + SPACE) as i32, y),
            font.clone(),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}
