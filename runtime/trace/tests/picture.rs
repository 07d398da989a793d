//! The report and the JSON, checked as a person (and a viewer) would see them: an in-process
//! job traces handlers of known cost and a known communication pattern, the
//! `converse-trace` command writes the JSON and the HTML report, a JSON parser reads the
//! first, and headless Chromium renders the second: the rendered pixels must show the busy
//! handler's colour on the PEs that ran it, its bar first among the handlers, and the heaviest
//! pair of PEs darkest in the matrix. Skipped, saying so, when Chromium is not installed.

use converse_trace::report::{Layout, HOT, IDLE, PALETTE};
use converse_trace::Job;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../../../tests/src/render.rs"]
mod render;
use render::{count, near, pixel, render};

/// PEs of the recorded job.
const PES: usize = 4;

/// Run the job: every PE runs `work` (a 4 ms computation) 5 times spread over the job and
/// answers pings; PE 0 sends PE 1 forty 64 KiB messages, every PE three small ones to every
/// other PE but PE 3 to PE 2 (between siblings of the spanning tree, the runtime sends
/// nothing either).
fn record(dir: &Path) {
    let code = converse::Runtime::builder()
        .pes(PES)
        .layer("local")
        .quiet(true)
        .trace_dir(Some(dir.to_path_buf()))
        .build()
        .and_then(|rt| {
            rt.run(|pe| {
                let work = pe.register("work", |_, _| {
                    let until = Instant::now() + Duration::from_millis(4);
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                });
                let bulk = pe.register("bulk", |_, _| {});
                let ping = pe.register("ping", |_, _| {});
                let me = pe.my_pe();
                for k in 0..5u64 {
                    pe.after(Duration::from_millis(10 * k + 2), move |pe| {
                        pe.send(me, work, &[])
                    });
                }
                if me == 0 {
                    for _ in 0..40 {
                        pe.send(1, bulk, &vec![0u8; 64 << 10]);
                    }
                }
                for d in (0..PES).filter(|&d| d != me && (me, d) != (3, 2)) {
                    for _ in 0..3 {
                        pe.send(d, ping, &[1; 8]);
                    }
                }
                pe.after(Duration::from_millis(70), |pe| {
                    pe.barrier();
                    if pe.my_pe() == 0 {
                        pe.exit(0);
                    }
                });
            })
        });
    assert_eq!(code.ok(), Some(0));
}

fn command(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_converse-trace"))
        .args(args)
        .output()
        .expect("converse-trace runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn check_json(dir: &Path) {
    let text = std::fs::read_to_string(dir.join("trace.json")).expect("json written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let ev = v["traceEvents"].as_array().expect("a trace-event array");
    let named = |ph: &str, name: &str| {
        ev.iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .count()
    };
    assert_eq!(named("B", "work"), 5 * PES, "every run of work, named");
    assert_eq!(named("B", "bulk"), 40);
    assert_eq!(named("B", "ping"), 3 * (PES * (PES - 1) - 1));
    // Each slice of `work` lasts its 4 ms (a begin and the end after it on the same track).
    let mut open = std::collections::HashMap::new();
    let mut works = 0;
    for e in ev {
        let tid = e["tid"].as_u64();
        match e["ph"].as_str() {
            Some("B") => open
                .entry(tid)
                .or_insert_with(Vec::new)
                .push((e["name"].clone(), e["ts"].as_f64())),
            Some("E") => {
                let (name, from) = open.get_mut(&tid).and_then(Vec::pop).expect("a begin");
                let dur = e["ts"].as_f64().zip(from).map(|(b, a)| b - a);
                if name == "work" {
                    works += 1;
                    assert!(
                        dur.is_some_and(|d| (3900.0..40_000.0).contains(&d)),
                        "{dur:?} µs"
                    );
                }
            }
            _ => {}
        }
    }
    assert_eq!(works, 5 * PES);
    // The messages: a flow per message, the bulk ones from PE 0's track to PE 1's.
    let flows = v["otherData"]["messages_matched"].as_u64().expect("count");
    assert_eq!(ev.iter().filter(|e| e["ph"] == "s").count() as u64, flows);
    assert_eq!(v["otherData"]["sends_unmatched"], 0);
    let big = ev
        .iter()
        .filter(|e| e["name"] == "send" && e["args"]["bytes"].as_u64() > Some(65536))
        .filter(|e| e["tid"] == 0 && e["args"]["to"] == 1)
        .count();
    assert_eq!(big, 40);
}

#[test]
fn the_report_shows_the_timeline_the_handlers_and_the_matrix() {
    let dir: PathBuf = std::env::temp_dir().join(format!("trace-pic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let traces = dir.join("traces");
    record(&traces);
    let t = traces.display().to_string();
    let json = dir.join("trace.json").display().to_string();
    let html = dir.join("report.html");
    command(&["json", &t, "-o", &json]);
    command(&["report", &t, "-o", &html.display().to_string()]);
    check_json(&dir);
    let job = Job::load(&traces).expect("loads");
    let l = Layout::of(&job);
    let page = std::fs::read_to_string(&html).expect("report written");
    assert!(
        page.contains("<svg") && !page.contains("<script src"),
        "self-contained, no script from elsewhere"
    );
    assert!(!page.contains("src=\"http"), "no external file");
    let Some(img) = render(&html, l.width as u32, l.height as u32, &dir) else {
        eprintln!(
            "SKIPPED report picture check: chromium is not installed (apt-get install chromium)"
        );
        return;
    };
    // `work` is the busiest handler: the first colour, on every PE's row, and its bar first.
    let busiest = converse_trace::summary::handler_times(&job);
    assert_eq!(busiest[0].name, "work");
    let x_span = (l.timeline_x, l.timeline_x + l.timeline_w);
    for row in 0..PES {
        let y = l.timeline_y + row as f64 * l.row_h;
        let work_px = count(
            &img,
            x_span,
            (y + l.row_h * 0.3, y + l.row_h * 0.7),
            PALETTE[0],
        );
        // 5 × 4 ms of a ~75 ms job over 960 px: some 200 px per row band line.
        assert!(work_px >= 100, "PE {row}: {work_px} pixels of work");
        let idle_px = count(&img, x_span, (y + l.row_h * 0.45, y + l.row_h * 0.55), IDLE);
        assert!(idle_px >= 100, "PE {row}: {idle_px} pixels of idle");
    }
    let bar = pixel(&img, l.timeline_x + 152.0, l.handlers_y + 7.0);
    assert!(near(bar, PALETTE[0]), "first bar: {bar:?}");
    // The matrix: PE 0 → PE 1 (the bulk) is darkest, PE 3 → PE 2 (nothing) white, and a
    // few small messages (pings; each PE's `work` to itself) light but there.
    // Sampled near a cell's corner: its middle may hold the number of messages.
    let cell = |src: usize, dst: usize| {
        pixel(
            &img,
            l.matrix_x + (dst as f64 + 0.2) * l.cell,
            l.matrix_y + (src as f64 + 0.2) * l.cell,
        )
    };
    assert!(near(cell(0, 1), HOT), "0 → 1: {:?}", cell(0, 1));
    assert!(near(cell(3, 2), (255, 255, 255)), "3 → 2: {:?}", cell(3, 2));
    for (src, dst) in [(2, 3), (2, 2)] {
        let light = cell(src, dst);
        assert!(
            !near(light, (255, 255, 255)) && !near(light, HOT),
            "{src} → {dst}: a light pair shows, lighter than the heaviest: {light:?}"
        );
    }
    // To look at the picture: CONVERSE_TRACE_KEEP=1 keeps the directory (named on stderr).
    if std::env::var_os("CONVERSE_TRACE_KEEP").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        eprintln!("kept {}", dir.display());
    }
}
