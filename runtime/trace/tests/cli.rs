//! The `converse-trace` command on input it must refuse or outputs that fail: each ends with
//! one line on stderr and its exit code (2 for a command line refused, 1 for the rest), never
//! a panic.

use converse::trace_format::Header;
use converse_trace::{Kind, Record, Trace};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const CMD: &str = env!("CARGO_BIN_EXE_converse-trace");

/// A fresh directory for one test.
fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trace-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// PE `pe`'s trace in a job of `num_pes`: `handlers` runs of handler 16, a message to PE 0.
fn trace(pe: u32, num_pes: u32, handlers: u64) -> Trace {
    let mut records = vec![Record {
        t: 0,
        kind: Kind::Send,
        a: 0,
        b: 8,
    }];
    for i in 0..handlers {
        records.push(Record {
            t: 10 * i + 1,
            kind: Kind::Begin,
            a: 16,
            b: 0,
        });
        records.push(Record {
            t: 10 * i + 5,
            kind: Kind::End,
            a: 0,
            b: 0,
        });
    }
    Trace {
        header: Header::sample(pe, num_pes, &["work"]),
        strings: vec![],
        records,
        torn_bytes: 0,
    }
}

fn write(dir: &Path, file: &str, t: &Trace) -> PathBuf {
    let p = dir.join(file);
    std::fs::write(&p, t.to_bytes()).expect("write trace");
    p
}

fn run(args: &[&str]) -> Output {
    Command::new(CMD).args(args).output().expect("runs")
}

/// The command failed with exit code 1 and one line on stderr, which it returns.
fn one_line_error(o: &Output) -> String {
    one_line_error_code(o, 1)
}

/// The command refused its command line: exit code 2, one line on stderr (returned), nothing
/// on stdout.
fn one_line_usage_error(o: &Output) -> String {
    let err = one_line_error_code(o, 2);
    assert!(err.starts_with("converse-trace: "), "{err}");
    assert!(o.stdout.is_empty(), "{o:?}");
    err
}

/// The command failed with exit code `code` and one line on stderr, which it returns.
fn one_line_error_code(o: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn an_option_the_command_does_not_use_is_refused() {
    let d = fresh_dir("option");
    write(&d, "trace.0.bin", &trace(0, 1, 1));
    let dir = d.display().to_string();
    let file = d.join("out.txt");
    let err = one_line_usage_error(&run(&["check", &dir, "-o", &file.display().to_string()]));
    assert!(err.contains("takes no -o"), "{err}");
    assert!(!file.exists(), "nothing written");
    for args in [
        &["json", &dir, "-o", "a", "-o", "b"][..],
        &["check", &dir, "--bogus"],
        &["frobnicate", &dir],
        &["check", &dir, &dir],
        &["check"],
        &[],
        &["live", "127.0.0.1:1", &dir, "--secs", "0"],
        &["live", "127.0.0.1:1", &dir, "--key", "zz"],
        &["live", "127.0.0.1:1"],
    ] {
        one_line_usage_error(&run(args));
    }
    // A directory whose name starts with '-' follows `--`, as clap's tip says.
    let err = one_line_usage_error(&run(&["check", "-x"]));
    assert!(err.contains("-- -x"), "{err}");
    // A key file that cannot be read is an error of the run, not of the command line.
    let err = one_line_error(&run(&[
        "live",
        "127.0.0.1:1",
        &dir,
        "--key-file",
        "/nonexistent/keys",
    ]));
    assert!(err.contains("/nonexistent/keys"), "{err}");
    assert!(run(&["check", &dir]).status.success());
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn two_traces_of_one_pe_are_one_line_naming_both() {
    let d = fresh_dir("same-pe");
    let first = write(&d, "trace.0.bin", &trace(0, 2, 1));
    write(&d, "trace.1.bin", &trace(1, 2, 1));
    // A copy of PE 0's file under PE 5's name.
    let second = write(&d, "trace.5.bin", &trace(0, 2, 1));
    let html = d.join("x.html").display().to_string();
    let err = one_line_error(&run(&["report", &d.display().to_string(), "-o", &html]));
    assert!(
        err.contains(&first.display().to_string()) && err.contains(&second.display().to_string()),
        "{err}"
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn the_report_of_a_job_claiming_billions_of_pes_is_the_size_of_its_traces() {
    let d = fresh_dir("huge");
    write(&d, "trace.0.bin", &trace(0, u32::MAX, 3));
    write(&d, "trace.1.bin", &trace(1, u32::MAX, 3));
    let html = d.join("x.html");
    let o = run(&[
        "report",
        &d.display().to_string(),
        "-o",
        &html.display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("2 of the job's 4294967295 PEs"), "{err}");
    let size = std::fs::metadata(&html).expect("written").len();
    assert!(size < 64 << 10, "{size} bytes");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_reader_that_stops_ends_the_json_quietly_and_a_full_disk_is_one_line() {
    let d = fresh_dir("pipe");
    // Some megabytes of JSON: more than a pipe holds.
    write(&d, "trace.0.bin", &trace(0, 1, 50_000));
    let dir = d.display().to_string();
    let mut child = Command::new(CMD)
        .args(["json", &dir])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let mut head = [0u8; 100];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut head)
        .expect("the start of the JSON");
    // The read end is closed: the command's next writes fail with EPIPE.
    let o = child.wait_with_output().expect("ends");
    assert!(head.starts_with(b"{\""));
    assert_eq!(
        o.status.code(),
        Some(141),
        "as cat's SIGPIPE: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Another write error is said.
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        for cmd in ["json", "check"] {
            let o = Command::new(CMD)
                .args([cmd, &dir])
                .stdout(full.try_clone().expect("dup"))
                .output()
                .expect("runs");
            let err = one_line_error(&o);
            assert!(err.contains("cannot write to stdout"), "{err}");
        }
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn endless_and_corrupt_files_are_one_line_errors() {
    let d = fresh_dir("bad-files");
    let dir = d.display().to_string();
    std::os::unix::fs::symlink("/dev/zero", d.join("trace.0.bin")).expect("symlink");
    let err = one_line_error(&run(&["check", &dir]));
    assert!(err.contains("not a regular file"), "{err}");
    // A whole chunk with a record of no kind: corruption, not a torn chunk.
    let mut bytes = trace(0, 1, 1).to_bytes();
    let kind = bytes.len() - 4;
    bytes[kind..].copy_from_slice(&99u32.to_le_bytes());
    std::fs::remove_file(d.join("trace.0.bin")).expect("rm");
    std::fs::write(d.join("trace.0.bin"), &bytes).expect("write");
    let err = one_line_error(&run(&["check", &dir]));
    assert!(err.contains("unknown record kind 99"), "{err}");
    std::fs::remove_dir_all(&d).ok();
}
