//! The pictures, checked as a person would see them: a job records a broadcast on a ring and
//! a reduce on a torus with `visual` on, `topo-draw` draws the trace, headless Chromium
//! renders the SVG, and the rendered pixels must show every node where its topology puts it
//! (ring: on a circle; torus: on a grid) and red route arrows; a token going round a ring three
//! times has one label per channel naming its three hops, each label readable: laid out by
//! the browser clear of the others and of the nodes, and red on the screen. Skipped, saying
//! so, when Chromium is not installed.

use converse_topo::draw::{self, NODE_FILL, NODE_RADIUS};
use converse_topo::{attach, Topology, Trace};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;

#[path = "../../../tests/src/render.rs"]
mod render;
use render::{pixel, render, text_boxes};

/// Run a local job of `pes` PEs that records one collective on `topo` and saves the trace.
fn record(pes: usize, topo: fn(usize) -> Topology, trace: &Path) {
    let path = trace.to_path_buf();
    let code = converse::Runtime::builder()
        .pes(pes)
        .layer("local")
        .quiet(true)
        .build()
        .and_then(|rt| {
            rt.run(move |pe| {
                let Ok(Some(t)) = attach(pe, topo(pes)) else {
                    pe.abort("attach failed");
                };
                t.set_visual(true);
                let r = t.broadcast(pe, 0, b"picture");
                let s = t.reduce(pe, pes - 1, &[1u8], |a, b| a[0] += b[0]);
                t.set_visual(false);
                if r.is_err() || s.is_err() || t.save_trace(pe, &path).is_err() {
                    pe.abort("recording failed");
                }
                t.barrier(pe).ok();
                if pe.my_pe() == 0 {
                    pe.exit(0);
                }
            })
        });
    assert_eq!(code.ok(), Some(0));
}

fn draw_with_the_command(trace: &Path, out: &Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_topo-draw"))
        .arg(trace)
        .arg("-o")
        .arg(out)
        .output()
        .expect("topo-draw runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn near(a: (u8, u8, u8), b: (u8, u8, u8)) -> bool {
    let d = |x: u8, y: u8| (i32::from(x) - i32::from(y)).abs();
    d(a.0, b.0) + d(a.1, b.1) + d(a.2, b.2) < 60
}

fn check_picture(
    name: &str,
    pes: usize,
    topo: fn(usize) -> Topology,
    shape_check: fn(&[(f64, f64)]),
) {
    let dir: PathBuf = std::env::temp_dir().join(format!("topo-pic-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let trace_path = dir.join("trace.txt");
    record(pes, topo, &trace_path);
    let trace = Trace::parse(
        &std::fs::read_to_string(&trace_path).expect("trace"),
        "trace",
    )
    .expect("trace parses");
    // Every process's broadcast hop but the root's arrival: n-1 hops, and as many for reduce.
    let calls = draw::calls(&trace);
    let counts: Vec<(String, usize)> = calls.iter().map(|(c, h)| (c.op.clone(), h.len())).collect();
    assert_eq!(
        counts,
        [("broadcast".into(), pes - 1), ("reduce".into(), pes - 1)]
    );
    let out = dir.join("pictures");
    draw_with_the_command(&trace_path, &out);
    let svg = out.join("001-broadcast-0-0.svg");
    assert!(
        svg.exists()
            && out.join("index.html").exists()
            && out
                .join("002-reduce-1-".to_owned() + &(pes - 1).to_string() + ".dot")
                .exists()
    );
    let (pos, (w, h)) = draw::layout(&trace);
    shape_check(&pos);
    // Wide enough for the title, which may be wider than the drawing.
    let Some(img) = render(&svg, w.max(900.0) as u32, h as u32, &dir) else {
        eprintln!(
            "SKIPPED picture check of {name}: chromium is not installed (apt-get install chromium)"
        );
        return;
    };
    // Each node's disc is where the layout put it (above its number, inside the disc).
    for (i, &(x, y)) in pos.iter().enumerate() {
        let got = pixel(&img, x, y - 11.0);
        assert!(
            near(got, NODE_FILL),
            "{name}: node {i} at ({x},{y}): pixel {got:?}"
        );
    }
    // Background between the title and the nodes is white, and the red arrows are there.
    assert!(near(pixel(&img, 2.0, h - 2.0), (255, 255, 255)));
    let red = img
        .0
        .chunks(3)
        .filter(|p| near((p[0], p[1], p[2]), (0xd6, 0x27, 0x28)))
        .count();
    assert!(
        red > 40 * (pes - 1),
        "{name}: only {red} red pixels for {} arrows",
        pes - 1
    );
    // TOPO_KEEP_PICTURES=1 keeps them to look at.
    if std::env::var_os("TOPO_KEEP_PICTURES").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        eprintln!("pictures kept in {}", out.display());
    }
}

#[test]
fn a_ring_broadcast_is_drawn_on_a_circle() {
    check_picture(
        "ring",
        8,
        |n| Topology::ring(n).expect("ring"),
        |pos| {
            let c = (
                pos.iter().map(|p| p.0).sum::<f64>() / pos.len() as f64,
                pos.iter().map(|p| p.1).sum::<f64>() / pos.len() as f64,
            );
            let r: Vec<f64> = pos.iter().map(|p| (p.0 - c.0).hypot(p.1 - c.1)).collect();
            assert!(r.iter().all(|x| (x - r[0]).abs() < 0.5), "{r:?}");
        },
    );
}

#[test]
fn a_torus_broadcast_is_drawn_on_a_grid() {
    check_picture(
        "torus",
        12,
        |_| Topology::torus2(3, 4).expect("torus"),
        |pos| {
            for (i, p) in pos.iter().enumerate() {
                assert_eq!(p.1, pos[i % 4].1 + (i / 4) as f64 * (pos[4].1 - pos[0].1));
                assert_eq!(
                    p.0,
                    pos[i / 4 * 4].0 + (i % 4) as f64 * (pos[1].0 - pos[0].0)
                );
            }
        },
    );
}

/// Run a local job of `pes` PEs that passes a token `laps` times round a ring, recording its
/// hops, and saves the trace (as the `token_ring` example does).
fn record_token_ring(pes: usize, laps: u64, trace: &Path) {
    let path = trace.to_path_buf();
    let code = converse::Runtime::builder()
        .pes(pes)
        .layer("local")
        .quiet(true)
        .build()
        .and_then(|rt| {
            rt.run(move |pe| {
                let Ok(Some(t)) = attach(pe, Topology::ring(pes).expect("ring")) else {
                    pe.abort("attach failed");
                };
                t.set_visual(true);
                let right = t.shift(0, 1).unwrap_or(t.id());
                let all = laps * pes as u64;
                let done = Rc::new(Cell::new(false));
                let (t2, d2) = (t.clone(), done.clone());
                t.on_receive(Some(
                    move |pe: &mut converse::Pe, r: converse_topo::Received| {
                        let hops = u64::from_le_bytes(r.data().try_into().unwrap_or([0; 8])) + 1;
                        if hops < all && t2.send(pe, right, &hops.to_le_bytes()).is_err() {
                            pe.abort("send failed");
                        }
                        // Each process is done once it has passed the token on its last lap.
                        if hops + pes as u64 > all {
                            d2.set(true);
                        }
                    },
                ));
                if t.id() == 0 && t.send(pe, right, &0u64.to_le_bytes()).is_err() {
                    pe.abort("send failed");
                }
                let d = done.clone();
                pe.run_until(move |_| d.get());
                t.on_receive(None::<fn(&mut converse::Pe, converse_topo::Received)>);
                t.set_visual(false);
                t.barrier(pe).ok();
                if t.save_trace(pe, &path).is_err() {
                    pe.abort("saving the trace failed");
                }
                if pe.my_pe() == 0 {
                    pe.exit(0);
                }
            })
        });
    assert_eq!(code.ok(), Some(0));
}

/// Whether two boxes (x, y, width, height) share any area.
fn overlap(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)) -> bool {
    a.0 < b.0 + b.2 && b.0 < a.0 + a.2 && a.1 < b.1 + b.3 && b.1 < a.1 + a.3
}

#[test]
fn a_token_three_times_round_a_ring_has_one_readable_label_per_channel() {
    let (pes, laps) = (8, 3);
    let dir: PathBuf = std::env::temp_dir().join(format!("topo-pic-laps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let trace_path = dir.join("trace.txt");
    record_token_ring(pes, laps, &trace_path);
    let trace = Trace::load(&trace_path).expect("the trace loads");
    let out = dir.join("pictures");
    draw_with_the_command(&trace_path, &out);
    let svg = out.join("001-send-0-0.svg");
    // In the file: one label per channel, naming the hops over it in order (hop k+1 goes from
    // k to k+1, and again a lap later), where each number was its own label drawn on the
    // others.
    let text = std::fs::read_to_string(&svg).expect("the picture");
    let doc = roxmltree::Document::parse(&text).expect("the picture is XML");
    let red = draw::HOP_RED;
    let mut labels: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("fill") == Some(red))
        .filter_map(|n| n.text().map(str::to_owned))
        .collect();
    labels.sort();
    let mut want: Vec<String> = (1..=pes)
        .map(|k| format!("{}, {}, {}", k, k + pes, k + 2 * pes))
        .collect();
    want.sort();
    assert_eq!(labels, want);
    assert_eq!(text.matches("marker-end").count(), pes);
    // As the browser lays them out: apart from each other, off the nodes, inside the picture.
    let size = |a: &str| {
        doc.root_element()
            .attribute(a)
            .and_then(|v| v.parse::<f64>().ok())
            .expect("the picture's size")
    };
    let (w, h) = (size("width"), size("height"));
    let Some(boxes) = text_boxes(&svg, &format!("text[fill=\"{red}\"]"), &dir) else {
        return;
    };
    assert_eq!(boxes.len(), pes, "{boxes:?}");
    let (pos, _) = draw::layout(&trace);
    for (i, a) in boxes.iter().enumerate() {
        let ra = (a.1, a.2, a.3, a.4);
        assert!(
            a.3 > 0.0 && a.1 >= 0.0 && a.2 >= 0.0 && a.1 + a.3 <= w && a.2 + a.4 <= h,
            "label {a:?} is not wholly inside the {w}x{h} picture"
        );
        for b in &boxes[i + 1..] {
            assert!(
                !overlap(ra, (b.1, b.2, b.3, b.4)),
                "labels {a:?} and {b:?} overlap"
            );
        }
        for (n, &(x, y)) in pos.iter().enumerate() {
            let nearest = (x.clamp(a.1, a.1 + a.3), y.clamp(a.2, a.2 + a.4));
            assert!(
                (nearest.0 - x).hypot(nearest.1 - y) > NODE_RADIUS,
                "label {a:?} covers node {n}"
            );
        }
    }
    // On the screen: every label shows in red.
    let img = render(&svg, w as u32, h as u32, &dir).expect("chromium rendered the boxes");
    for label in &boxes {
        let mut red_pixels = 0;
        for y in (label.2.ceil() as u32)..((label.2 + label.4) as u32) {
            for x in (label.1.ceil() as u32)..((label.1 + label.3) as u32) {
                // Red, or the red of a glyph's edge blended with the white page.
                let (r, g, b) = pixel(&img, x.into(), y.into());
                if i32::from(r) - i32::from(g.max(b)) > 50 {
                    red_pixels += 1;
                }
            }
        }
        assert!(red_pixels > 40, "label {label:?}: {red_pixels} red pixels");
    }
    if std::env::var_os("TOPO_KEEP_PICTURES").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        eprintln!("pictures kept in {}", out.display());
    }
}
