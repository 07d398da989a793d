//! The pictures, checked as a person would see them: a job records a broadcast on a ring and
//! a reduce on a torus with `visual` on, `topo-draw` draws the trace, headless Chromium
//! renders the SVG, and the rendered pixels must show every node where its topology puts it
//! (ring: on a circle; torus: on a grid) and red route arrows. Skipped, saying so, when
//! Chromium is not installed.

use converse_topo::draw::{self, NODE_FILL};
use converse_topo::{attach, Topology, Trace};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../../tests/src/render.rs"]
mod render;
use render::{pixel, render};

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
