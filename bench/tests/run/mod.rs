//! Running `bench` from a test: bounded in time, its process group killed when it is not done.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A fresh directory for one test's files.
pub(crate) fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bench-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Run bench with `args`, killed (with its process group) after `secs`; its stdout. Fails the
/// test if bench fails.
pub(crate) fn bench(args: &[&str], secs: u64) -> String {
    let (status, out, err) = bench_status(args, secs);
    assert!(status.success(), "bench {args:?}: {status}\n{out}\n{err}");
    out
}

/// Run bench with `args`, killed (with its process group) after `secs`: how it exited, its
/// stdout and its stderr.
pub(crate) fn bench_status(args: &[&str], secs: u64) -> (ExitStatus, String, String) {
    use std::os::unix::process::CommandExt;
    // Tests of one file run as threads of one process: a count, not the arguments, keeps
    // their output files apart.
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::temp_dir().join(format!(
        "bench-test-out-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let (out, err) = (base.with_extension("out"), base.with_extension("err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("bench starts");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            panic!("bench {args:?} took over {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &PathBuf| {
        let t = std::fs::read_to_string(p).unwrap_or_default();
        let _ = std::fs::remove_file(p);
        t
    };
    (status, read(&out), read(&err))
}
