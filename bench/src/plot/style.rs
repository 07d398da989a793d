//! How a series looks: a colour of matplotlib's "tab10", and after ten series the colours
//! again with another marker shape and a dashed line, so that a figure of up to 40 series has
//! no two that look alike (a tbon figure has 13).

use plotters::prelude::*;

/// Distinct colours, in series order (matplotlib's "tab10").
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The shape drawn at each point of a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
}

/// Markers in the order the rounds of ten colours take them.
const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
];

/// How series `i` looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Style {
    pub colour: RGBColor,
    pub marker: Marker,
    /// A dashed line (and a hollow bar) rather than a solid one.
    pub dashed: bool,
}

/// The look of series `i`: the colours in order, each round of ten with the next marker,
/// every other round dashed.
pub(crate) fn style(i: usize) -> Style {
    let round = i / COLOURS.len();
    Style {
        colour: COLOURS[i % COLOURS.len()],
        marker: MARKERS[round % MARKERS.len()],
        dashed: round % 2 == 1,
    }
}

/// The colour of series `i`.
#[cfg(test)]
pub(crate) fn colour(i: usize) -> RGBColor {
    style(i).colour
}

/// Half the size of a marker, in pixels: large enough that a square and a circle differ.
const MARKER_R: i32 = 5;

/// `m`'s outline around (0, 0), in pixels: every marker is a polygon (a circle of 16 sides), so
/// one element type draws them all (`EmptyElement::at(point) + Polygon::new(outline, fill)`).
pub(crate) fn outline(m: Marker) -> Vec<(i32, i32)> {
    let r = MARKER_R;
    match m {
        Marker::Circle => (0..16)
            .map(|k| {
                let a = f64::from(k) * std::f64::consts::PI / 8.0;
                let r = f64::from(r) - 0.5;
                ((r * a.cos()).round() as i32, (r * a.sin()).round() as i32)
            })
            .collect(),
        Marker::Square => vec![
            (-r + 1, -r + 1),
            (r - 1, -r + 1),
            (r - 1, r - 1),
            (-r + 1, r - 1),
        ],
        Marker::Triangle => vec![(0, -r - 1), (r + 1, r - 1), (-r - 1, r - 1)],
        Marker::Diamond => vec![(0, -r - 1), (r + 1, 0), (0, r + 1), (-r - 1, 0)],
    }
}
