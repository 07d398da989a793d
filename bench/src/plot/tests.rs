//! The figures' unit tests: what the SVG holds, axes and ticks, and, rendered in headless
//! Chromium, that the legend covers no point, that every series looks different and that a
//! figure of three panels fits a window 1400 pixels wide.

use super::*;

fn figure() -> Vec<Panel> {
    let sizes = [8.0, 64.0, 4096.0, 1048576.0];
    let s = |name: &str, f: f64| Series {
        name: name.into(),
        points: sizes.iter().map(|&x| (x, f * (1.0 + x / 1e3))).collect(),
    };
    vec![
        Panel {
            title: "latency".into(),
            x_label: "bytes".into(),
            y_label: "us".into(),
            kind: Kind::Lines {
                log_x: true,
                log_y: true,
            },
            series: vec![s("tcp", 10.0), s("raw-tcp", 5.0), s("tcp-layer-only", 7.0)],
        },
        Panel {
            title: "rate".into(),
            x_label: "".into(),
            y_label: "messages/s".into(),
            kind: Kind::Bars,
            series: vec![
                Series {
                    name: "chain".into(),
                    points: vec![(0.0, 3e7)],
                },
                Series {
                    name: "burst".into(),
                    points: vec![(0.0, 2e7)],
                },
            ],
        },
    ]
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

#[test]
fn a_figure_is_valid_svg_with_one_line_and_one_legend_entry_per_series() {
    let dir = std::env::temp_dir().join(format!("bench-plot-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.svg");
    write_svg(&path, "figure", &figure()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("valid XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_owned()))
        .collect();
    for name in [
        "tcp",
        "raw-tcp",
        "tcp-layer-only",
        "chain",
        "burst",
        "figure",
    ] {
        assert!(
            texts.iter().any(|t| t == name),
            "no text '{name}' in {texts:?}"
        );
    }
    // Each line series: one polyline of its data and one in its legend, in its colour.
    let polylines: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .collect();
    for i in 0..3 {
        let c = hex(colour(i));
        let n = polylines
            .iter()
            .filter(|p| {
                p.attribute("stroke")
                    .is_some_and(|s| s.eq_ignore_ascii_case(&c))
            })
            .count();
        assert_eq!(n, 2, "series {i} ({c}): {n} polylines");
    }
    // The data line of a series has one vertex per point.
    let data = polylines.iter().find(|p| {
        p.attribute("stroke")
            .is_some_and(|s| s.eq_ignore_ascii_case(&hex(colour(0))))
            && p.attribute("points")
                .is_some_and(|v| v.split_whitespace().count() == 4)
    });
    assert!(data.is_some());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn spans_are_never_empty_and_log_spans_stay_positive() {
    let r = span([0.0, 5.0].into_iter(), true);
    assert!(r.start > 0.0 && r.end > r.start);
    let r = span(std::iter::empty(), false);
    assert!(r.end > r.start);
    let r = span([3.0, 3.0].into_iter(), false);
    assert!(r.end > r.start);
}

#[test]
fn ticks_are_short() {
    assert_eq!(tick(4096.0), "4096");
    assert_eq!(tick(1.5), "1.5");
    assert_eq!(tick(2e7), "2e7");
    assert_eq!(tick(0.0), "0");
    assert_eq!(tick(1.5e7), "1.5e7");
    assert_eq!(tick(2.5e7), "2.5e7");
    assert_eq!(tick(4194304.0), "4 MiB");
    assert_eq!(tick(0.001), "1e-3");
}

#[test]
fn log_ticks_are_the_data_when_few_else_round_numbers_in_range() {
    assert_eq!(
        log_ticks(1.3..24.0, &[2.0, 4.0, 8.0, 16.0, 4.0]),
        [2.0, 4.0, 8.0, 16.0]
    );
    assert_eq!(log_ticks(1.3..24.0, &[]), [2.0, 5.0, 10.0, 20.0]);
    assert_eq!(log_ticks(5.0..5e6, &[]), [10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
    // Never empty for a range of positive values that holds a tick.
    assert!(!log_ticks(0.06..400.0, &[]).is_empty());
}

#[test]
fn series_group_by_name_in_first_seen_order() {
    let s = series_by_name([
        ("b".to_string(), 1.0, 2.0),
        ("a".to_string(), 1.0, 3.0),
        ("b".to_string(), 2.0, 4.0),
    ]);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].name, "b");
    assert_eq!(s[0].points, vec![(1.0, 2.0), (2.0, 4.0)]);
}

#[test]
fn forty_series_all_look_different() {
    // Ten colours for thirteen series gave two pairs that looked the same.
    let looks: Vec<_> = (0..40)
        .map(|i| {
            let s = style(i);
            (s.colour.0, s.colour.1, s.colour.2, s.marker, s.dashed)
        })
        .collect();
    for (i, a) in looks.iter().enumerate() {
        for (j, b) in looks.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "series {i} and {j} look the same");
        }
    }
    // The first ten keep the colours the pictures always had.
    assert_eq!(colour(0), RGBColor(31, 119, 180));
    assert_eq!((style(9).marker, style(9).dashed), (style(0).marker, false));
}

use crate::render::{pixel, render, text_boxes, Image};

/// A fresh directory for a test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("bench-plot-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Remove `dir`, unless BENCH_KEEP_PLOTS=1 asks to keep its pictures to look at.
fn clean(dir: &Path) {
    if std::env::var_os("BENCH_KEEP_PLOTS").is_none() {
        std::fs::remove_dir_all(dir).ok();
    } else {
        eprintln!("plots kept in {}", dir.display());
    }
}

/// The markers of an SVG figure, in document order: the centre and fill of each filled
/// `<circle>` or `<polygon>`.
fn markers(doc: &roxmltree::Document<'_>) -> Vec<((f64, f64), String)> {
    let num = |n: &roxmltree::Node<'_, '_>, a: &str| {
        n.attribute(a)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    doc.descendants()
        .filter_map(|n| {
            let fill = n.attribute("fill").filter(|f| f.starts_with('#'))?;
            let centre = if n.has_tag_name("circle") {
                (num(&n, "cx"), num(&n, "cy"))
            } else if n.has_tag_name("polygon") {
                let v: Vec<f64> = n
                    .attribute("points")?
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter_map(|x| x.parse().ok())
                    .collect();
                let k = (v.len() / 2).max(1) as f64;
                (
                    v.iter().step_by(2).sum::<f64>() / k,
                    v.iter().skip(1).step_by(2).sum::<f64>() / k,
                )
            } else {
                return None;
            };
            Some((centre, fill.to_ascii_uppercase()))
        })
        .collect()
}

/// The legend's box in an SVG figure: each unfilled black-bordered `<rect>`, as (x, y, w, h).
fn legend_boxes(doc: &roxmltree::Document<'_>) -> Vec<(f64, f64, f64, f64)> {
    doc.descendants()
        .filter(|n| {
            n.has_tag_name("rect")
                && n.attribute("fill") == Some("none")
                && n.attribute("stroke") == Some("#000000")
        })
        .map(|n| {
            let v = |a: &str| n.attribute(a).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            (v("x"), v("y"), v("width"), v("height"))
        })
        .collect()
}

/// The width and height an SVG figure says it is.
fn svg_size(doc: &roxmltree::Document<'_>) -> (f64, f64) {
    let v = |a: &str| {
        doc.root_element()
            .attribute(a)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    (v("width"), v("height"))
}

fn distance(a: (u8, u8, u8), b: RGBColor) -> i32 {
    let d = |x: u8, y: u8| (i32::from(x) - i32::from(y)).abs();
    d(a.0, b.0) + d(a.1, b.1) + d(a.2, b.2)
}

#[test]
fn the_legend_is_below_the_plot_and_covers_no_point() {
    // Points in every part of the plot, its corners too: wherever a legend inside the plot
    // went, it covered some.
    let every_other = |from: f64, y: fn(f64) -> f64| {
        (0..6).map(move |k| {
            let x = from + 2.0 * f64::from(k);
            (x, y(x))
        })
    };
    let series = vec![
        Series {
            name: "rising".into(),
            points: every_other(0.0, |x| x).collect(),
        },
        Series {
            name: "falling".into(),
            points: every_other(1.0, |x| 10.0 - x).collect(),
        },
        Series {
            name: "along the top".into(),
            points: every_other(0.5, |_| 10.5).collect(),
        },
        Series {
            name: "along the bottom".into(),
            points: every_other(1.5, |_| 0.3).collect(),
        },
    ];
    let panel = Panel {
        title: "points everywhere".into(),
        x_label: "x".into(),
        y_label: "y".into(),
        kind: Kind::Lines {
            log_x: false,
            log_y: false,
        },
        series,
    };
    let dir = scratch("legend");
    let path = dir.join("legend.svg");
    write_svg(&path, "a legend that covers nothing", &[panel]).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let colours: Vec<String> = (0..4).map(|i| hex(colour(i))).collect();
    let points: Vec<(f64, f64)> = markers(&doc)
        .into_iter()
        .filter(|(_, fill)| colours.contains(fill))
        .map(|(c, _)| c)
        .take(24)
        .collect();
    assert_eq!(points.len(), 24, "a marker per point");
    let boxes = legend_boxes(&doc);
    assert_eq!(boxes.len(), 1, "one legend: {boxes:?}");
    let (lx, ly, lw, lh) = boxes[0];
    let (w, h) = svg_size(&doc);
    assert!(
        lx >= 0.0 && lx + lw <= w && ly + lh <= h,
        "{:?} in {w}x{h}",
        boxes[0]
    );
    let lowest = points.iter().map(|p| p.1).fold(0.0, f64::max);
    assert!(
        ly > lowest + 20.0,
        "the legend ({ly}) is not below the plot (a point at {lowest})"
    );
    // As a person sees it: every point in a series' colour, none paled by the legend's
    // background, and the legend's border drawn.
    let Some(img) = render(&path, w as u32, h as u32, &dir) else {
        return;
    };
    for &(x, y) in &points {
        let got = pixel(&img, x, y);
        assert!(
            (0..4).any(|i| distance(got, colour(i)) < 60),
            "the point at ({x}, {y}) shows {got:?}"
        );
    }
    let dark = |x: f64, y: f64| {
        (-1..=1).any(|d| {
            let (r, g, b) = pixel(&img, x + f64::from(d), y);
            u32::from(r) + u32::from(g) + u32::from(b) < 3 * 160
        })
    };
    assert!(dark(lx, ly + lh / 2.0) && dark(lx + lw, ly + lh / 2.0));
    let names = text_boxes(&path, "text", &dir).unwrap_or_default();
    let legend_names: Vec<_> = names
        .iter()
        .filter(|t| t.0 == "rising" || t.0.starts_with("along") || t.0 == "falling")
        .collect();
    assert_eq!(legend_names.len(), 4, "{names:?}");
    for t in legend_names {
        assert!(
            t.1 > lx && t.1 + t.3 < lx + lw && t.2 > ly && t.2 + t.4 < ly + lh,
            "name {t:?} is not inside the legend {:?}",
            boxes[0]
        );
    }
    clean(&dir);
}

/// The pixels around (x, y) that are not white, and their mean colour.
fn patch(img: &Image, (x, y): (f64, f64)) -> (Vec<bool>, (f64, f64, f64)) {
    let mut mask = Vec::new();
    let mut sum = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for dy in -7..=7 {
        for dx in -7..=7 {
            let (r, g, b) = pixel(img, x + f64::from(dx), y + f64::from(dy));
            let ink = r.min(g).min(b) < 200;
            mask.push(ink);
            if ink {
                sum = (
                    sum.0 + f64::from(r),
                    sum.1 + f64::from(g),
                    sum.2 + f64::from(b),
                    sum.3 + 1.0,
                );
            }
        }
    }
    let n = sum.3.max(1.0);
    (mask, (sum.0 / n, sum.1 / n, sum.2 / n))
}

#[test]
fn twenty_series_rendered_all_look_different() {
    // Each series a level line of three points, far enough apart that a marker's
    // surroundings are its own.
    let n = 20;
    let series: Vec<Series> = (0..n)
        .map(|i| Series {
            name: format!("series {i}"),
            points: (1..=3).map(|x| (f64::from(x), i as f64)).collect(),
        })
        .collect();
    let panel = Panel {
        title: "twenty series".into(),
        x_label: "x".into(),
        y_label: "series".into(),
        kind: Kind::Lines {
            log_x: false,
            log_y: false,
        },
        series,
    };
    let dir = scratch("looks");
    let path = dir.join("looks.svg");
    write_svg(&path, "every series its own look", &[panel]).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    // Series are drawn in order, three markers each: the middle one of each.
    let centres: Vec<(f64, f64)> = markers(&doc).chunks(3).take(n).map(|m| m[1].0).collect();
    assert_eq!(centres.len(), n);
    let (w, h) = svg_size(&doc);
    let Some(img) = render(&path, w as u32, h as u32, &dir) else {
        return;
    };
    let looks: Vec<_> = centres.iter().map(|&c| patch(&img, c)).collect();
    for (i, a) in looks.iter().enumerate() {
        for (j, b) in looks.iter().enumerate().skip(i + 1) {
            let colour_apart =
                (a.1 .0 - b.1 .0).abs() + (a.1 .1 - b.1 .1).abs() + (a.1 .2 - b.1 .2).abs() > 45.0;
            let shape_apart = a.0.iter().zip(&b.0).filter(|(x, y)| x != y).count() >= 8;
            assert!(
                colour_apart || shape_apart,
                "series {i} and {j} look alike: colours {:?} and {:?}",
                a.1,
                b.1
            );
        }
    }
    clean(&dir);
}
