//! No path panics on a write to stdout or stderr (issue 30, item 5): a panicking PE whose
//! stderr is full still ends the job (it hung for ever when the layer's abort used
//! `eprintln!`), charmrun with a full stderr passes the node's exit code on (not its own
//! panic's 101), and a reader that leaves early (`PROGRAM | head -1`) leaves the program to end
//! normally.

use converse_tests::run_bounded;
use std::process::{Command, Stdio};
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

/// `program args` with its stderr on /dev/full (every write fails with ENOSPC), through a
/// shell: the harness pipes the command's own stderr to read it.
fn stderr_full(program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("exec \"$0\" \"$@\" 2>/dev/full")
        .arg(program)
        .args(args);
    c
}

fn charmrun() -> String {
    let dir = std::path::Path::new(PROGRAM).parent().expect("target dir");
    dir.join("charmrun").display().to_string()
}

#[test]
fn a_panicking_pe_ends_the_job_when_stderr_is_full() {
    for args in [&["panic", "+p2"][..], &["panic", "+p4", "+ppn", "2"]] {
        let o = run_bounded(&mut stderr_full(PROGRAM, args), Duration::from_secs(30));
        assert!(!o.timed_out, "{args:?}: {o}");
        assert_eq!(o.code, Some(1), "{args:?}: {o}");
    }
}

#[test]
fn charmrun_with_a_full_stderr_passes_the_nodes_code_on() {
    let o = run_bounded(
        &mut stderr_full(
            &charmrun(),
            &["+p2", PROGRAM, "exit-code", "7", "+machine", "tcp"],
        ),
        Duration::from_secs(60),
    );
    assert!(!o.timed_out, "{o}");
    assert_eq!(o.code, Some(7), "{o}");
    let o = run_bounded(
        &mut stderr_full(&charmrun(), &["+p2", PROGRAM, "panic", "+machine", "tcp"]),
        Duration::from_secs(60),
    );
    assert!(!o.timed_out, "{o}");
    assert_eq!(o.code, Some(1), "{o}");
}

#[test]
fn a_reader_that_leaves_early_ends_nothing_but_its_pipe() {
    // `conformance hello +p4 | head -1`: the pipe's reader takes one line and leaves.
    let mut child = Command::new(PROGRAM)
        .args(["hello", "+p4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let mut out = child.stdout.take().expect("stdout");
    let mut first = [0u8; 8];
    let _ = std::io::Read::read(&mut out, &mut first);
    drop(out);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
}
