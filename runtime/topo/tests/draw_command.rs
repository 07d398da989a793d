//! The `topo-draw` command on bad input: one line on stderr and exit code 1 (2 for a command
//! line refused), never a panic, nothing written for a trace it refuses, and output bounded
//! whatever the trace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const TOPO_DRAW: &str = env!("CARGO_BIN_EXE_topo-draw");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("topo-draw-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn draw(args: &[&Path]) -> Output {
    Command::new(TOPO_DRAW)
        .args(args)
        .output()
        .expect("topo-draw runs")
}

/// `topo-draw` refuses `args` with one line holding `want`, writing nothing to stdout.
fn refused(args: &[&Path], want: &str) {
    refused_with(args, want, 1);
}

/// `topo-draw` refuses the command line `args` (exit code 2) with one line holding `want`,
/// writing nothing to stdout.
fn usage_refused(args: &[&Path], want: &str) {
    refused_with(args, want, 2);
}

/// `topo-draw` refuses `args` with exit code `code` and one line holding `want`, writing
/// nothing to stdout.
fn refused_with(args: &[&Path], want: &str, code: i32) {
    let o = draw(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.starts_with("topo-draw: "), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: want {want:?}, got {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\0'), "{err:?}");
    assert!(o.stdout.is_empty(), "{args:?}");
}

const GOOD: &str = "topo-trace 1\nshape ring\nn 2\nedge 0 1 1\n\
                    hop op=b seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1,0\n";

#[test]
fn bad_traces_are_refused_in_one_line_and_nothing_is_written() {
    let dir = scratch("bad");
    let hop = "hop op=b seq=0 root=0 from=0 to=4 bytes=8 t=1 vc=1,0,0,0,0";
    for (name, trace, want) in [
        // A second `n` after the channels: draw.rs indexed past the layout and panicked.
        (
            "second-n",
            "topo-trace 1\nshape ring\nn 5\nedge 0 4 1\nn 2\n".to_owned(),
            ":5: 'n' again (it was given at line 3)",
        ),
        (
            "second-n-hop",
            format!("topo-trace 1\nshape ring\nn 5\n{hop}\nn 2\n"),
            ":5: 'n' again",
        ),
        (
            "version",
            "topo-trace 99\nshape ring\nn 2\n".to_owned(),
            ":1: trace format version '99'",
        ),
        (
            "weight",
            "topo-trace 1\nshape ring\nn 2\nedge 0 1 4294967297\n".to_owned(),
            ":4: '4294967297' is not a channel weight",
        ),
        // 30 bytes that asked for a picture of a million nodes (464 MB).
        (
            "million",
            "topo-trace 1\nshape ring\nn 1000000\n".to_owned(),
            ":3: 1000000 processes: a topology has 1 to 65536",
        ),
        (
            "too-large",
            "topo-trace 1\nshape ring\nn 5000\n".to_owned(),
            "a topology of 5000 processes is too large to draw: pictures show at most 4096",
        ),
        (
            "escape",
            "topo-trace 1\nshape ring\nn 2\n\u{1b}[31mred\0\n".to_owned(),
            ":4: not a line of a topology trace: '\\u{1b}[31mred\\0'",
        ),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, trace).expect("trace");
        let out = dir.join(format!("{name}.out"));
        refused(&[&p, Path::new("-o"), &out], want);
        assert!(!out.exists(), "{name}: wrote {}", out.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_endless_file_is_refused_not_read_into_memory() {
    let out = scratch("zero").join("out");
    refused(
        &[Path::new("/dev/zero"), Path::new("-o"), &out],
        "/dev/zero: it is larger than 131072 KiB",
    );
    refused(&[Path::new("/nonexistent.trace")], "/nonexistent.trace: ");
}

#[test]
fn arguments_are_checked() {
    let dir = scratch("args");
    let good = dir.join("good.tt");
    std::fs::write(&good, GOOD).expect("trace");
    let (o, a, b) = (Path::new("-o"), dir.join("a"), dir.join("b"));
    usage_refused(
        &[&good, o, &a, o, &b],
        "the argument '-o <DIR>' cannot be used multiple times",
    );
    usage_refused(
        &[&good, Path::new("--bogus")],
        "unexpected argument '--bogus'",
    );
    usage_refused(&[&good, &a], "unexpected argument");
    usage_refused(&[&good, o], "a value is required for '-o <DIR>'");
    usage_refused(&[], "required arguments were not provided: <TRACE>");
    assert!(!a.exists() && !b.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_stdout_is_an_error_and_a_closed_one_is_not() {
    let dir = scratch("stdout");
    let good = dir.join("good.tt");
    std::fs::write(&good, GOOD).expect("trace");
    // `println!` panicked on /dev/full.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let o = Command::new(TOPO_DRAW)
        .arg(&good)
        .arg("-o")
        .arg(dir.join("x"))
        .stdout(Stdio::from(full))
        .output()
        .expect("topo-draw runs");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("topo-draw: cannot write to stdout: "),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // A reader that went away before the closing line: quiet, and done.
    let mut child = Command::new(TOPO_DRAW)
        .arg(&good)
        .arg("-o")
        .arg(dir.join("y"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("topo-draw runs");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("topo-draw ends");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    assert!(dir.join("y/index.html").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn names_from_the_trace_make_safe_files_and_well_formed_svg() {
    let dir = scratch("names");
    let trace = dir.join("ctl.tt");
    std::fs::write(
        &trace,
        "topo-trace 1\nshape ring\nn 2\nedge 0 1 1\n\
         hop op=x/y\u{2}c seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1,0\n",
    )
    .expect("trace");
    let out = dir.join("out");
    let o = draw(&[&trace, Path::new("-o"), &out]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .expect("out")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "001-x_y_c-0-0.dot",
            "001-x_y_c-0-0.svg",
            "index.html",
            "topology.dot",
            "topology.svg"
        ]
    );
    for svg in ["001-x_y_c-0-0.svg", "topology.svg"] {
        let body = std::fs::read_to_string(out.join(svg)).expect("svg");
        if let Err(e) = roxmltree::Document::parse(&body) {
            panic!("{svg} is not well-formed: {e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn many_calls_make_bounded_output() {
    // 1000 processes and 500 one-hop calls wrote 218 MB in 1003 files.
    let dir = scratch("many");
    let mut trace = String::from("topo-trace 1\nshape ring\ndims 1000\ncentre 0\nn 1000\n");
    for a in 0..999 {
        trace += &format!("edge {a} {} 1\n", a + 1);
    }
    trace += "edge 0 999 1\n";
    let vc = vec!["0"; 1000].join(",");
    for k in 0..500 {
        trace += &format!("hop op=broadcast seq={k} root=0 from=0 to=1 bytes=8 t={k} vc={vc}\n");
    }
    let p = dir.join("many.tt");
    std::fs::write(&p, trace).expect("trace");
    let out = dir.join("out");
    let o = draw(&[&p, Path::new("-o"), &out]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stdout);
    assert!(said.contains("of 500 calls not drawn"), "{said}");
    let files: Vec<u64> = std::fs::read_dir(&out)
        .expect("out")
        .map(|e| e.expect("entry").metadata().expect("metadata").len())
        .collect();
    assert!(files.len() <= 3 + 2 * 100, "{} files", files.len());
    let bytes: u64 = files.iter().sum();
    assert!(bytes <= 64 << 20, "{bytes} bytes");
    let _ = std::fs::remove_dir_all(&dir);
}
