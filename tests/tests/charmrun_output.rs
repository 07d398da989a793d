//! charmrun's output: every line a node prints reaches charmrun's stdout whole and once —
//! just before an exit, while the reader of charmrun's stdout stalls, in lines of megabytes
//! from several nodes at once — prefixed by PE on request, and without the banner under
//! `++quiet`; a reader that goes away does not keep the job from ending. Real jobs over the TCP
//! layer, each bounded in time with its process group killed at the end.

use converse_tests::Launcher;
use std::process::Command;
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn tcp(opts: &[&str]) -> Launcher {
    Launcher::Charmrun {
        machine: "tcp",
        opts: opts.iter().map(|s| s.to_string()).collect(),
    }
}

fn limit() -> Duration {
    Duration::from_secs(60)
}

#[test]
fn output_printed_just_before_exit_is_never_lost() {
    for _ in 0..3 {
        let o = tcp(&[]).run(PROGRAM, 8, &["hello"], limit());
        assert_eq!(o.code, Some(0), "{o}");
        for pe in 0..8 {
            assert_eq!(o.lines_with(&format!("hello from PE {pe} of 8")), 1, "{o}");
        }
        assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
        // Whole lines only: every line is one of the expected ones.
        for l in o.stdout.lines() {
            assert!(
                l.starts_with("hello from PE")
                    || l.starts_with("conformance hello")
                    || l.starts_with("Converse>"),
                "spliced line {l:?}\n{o}"
            );
        }
    }
}

#[test]
fn output_can_be_prefixed_by_pe() {
    let o = tcp(&["++prefix"]).run(PROGRAM, 3, &["hello"], limit());
    assert_eq!(o.code, Some(0), "{o}");
    for pe in 0..3 {
        assert_eq!(
            o.lines_with(&format!("PE {pe}: hello from PE {pe} of 3")),
            1,
            "{o}"
        );
    }
}

#[test]
fn quiet_leaves_out_the_banner_and_keeps_the_programs_output() {
    let loud = tcp(&[]).run(PROGRAM, 2, &["hello"], limit());
    assert_eq!(loud.code, Some(0), "{loud}");
    assert_eq!(loud.lines_with("Converse>"), 1, "{loud}");
    let o = tcp(&["++quiet"]).run(PROGRAM, 2, &["hello"], limit());
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("Converse>"), 0, "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
    assert!(o.stderr.is_empty(), "{o}");
}

/// Run `cmd` with a reader of its stdout that waits `stall` before reading, then reads
/// `keep` bytes at most and closes the pipe (`None`: reads to the end). Bounded by `limit`:
/// then the whole tree is killed. Returns the exit code, stdout read, stderr and the time
/// taken.
fn run_with_reader(
    cmd: &mut Command,
    stall: Duration,
    keep: Option<usize>,
    limit: Duration,
) -> (Option<i32>, String, String, Duration) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start charmrun");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let out = std::thread::spawn(move || {
        std::thread::sleep(stall);
        let mut s = Vec::new();
        match keep {
            None => {
                let _ = out.read_to_end(&mut s);
            }
            Some(n) => {
                let _ = (&mut out).take(n as u64).read_to_end(&mut s);
            }
        }
        String::from_utf8_lossy(&s).into_owned()
    });
    let code = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st.code(),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                converse_tests::kill_tree(child.id());
                let _ = child.wait();
                break None;
            }
        }
    };
    let took = start.elapsed();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    (code, out, err, took)
}

/// How often each `print PE p line k` line of `pes` PEs and `lines` lines each appears in
/// `out`, checking each is whole (`width` x's): the counts of the wrong ones too.
fn print_counts(out: &str, pes: usize, lines: usize, width: usize) -> (Vec<usize>, usize) {
    let mut counts = vec![0usize; pes * lines];
    let mut bad = 0;
    for l in out.lines().filter(|l| l.contains("print PE")) {
        let parsed = l.strip_prefix("print PE ").and_then(|r| {
            let mut w = r.splitn(4, ' ');
            let pe: usize = w.next()?.parse().ok()?;
            let _ = w.next().filter(|&x| x == "line")?;
            let k: usize = w.next()?.parse().ok()?;
            let tail = w.next()?;
            (pe < pes && k < lines && tail.len() == width && tail.bytes().all(|b| b == b'x'))
                .then_some(pe * lines + k)
        });
        match parsed {
            Some(i) => counts[i] += 1,
            None => bad += 1,
        }
    }
    (counts, bad)
}

#[test]
fn output_is_never_dropped_while_the_reader_stalls() {
    // 4 PEs x 3000 lines of ~120 B: far more than the pipes hold while nobody reads.
    let (pes, lines, width) = (4, 3000, 100);
    let (code, out, err, _) = run_with_reader(
        &mut tcp(&[]).command(PROGRAM, pes, &["print", "3000", "100"]),
        Duration::from_secs(4),
        None,
        limit(),
    );
    assert_eq!(code, Some(0), "stderr: {err}");
    let (counts, bad) = print_counts(&out, pes, lines, width);
    assert_eq!(bad, 0, "spliced or foreign lines; stderr: {err}");
    let missing = counts.iter().filter(|&&c| c == 0).count();
    let doubled = counts.iter().filter(|&&c| c > 1).count();
    assert_eq!((missing, doubled), (0, 0), "stderr: {err}");
    assert!(out.contains("conformance print: ok"), "stderr: {err}");
}

#[test]
fn a_reader_that_goes_away_still_lets_the_job_end_properly() {
    let (code, out, err, took) = run_with_reader(
        &mut tcp(&[]).command(PROGRAM, 4, &["print", "3000", "100"]),
        Duration::ZERO,
        Some(1000),
        limit(),
    );
    assert_eq!(out.len(), 1000);
    assert_eq!(code, Some(0), "stderr: {err}");
    assert!(
        took < Duration::from_secs(30),
        "took {took:?}; stderr: {err}"
    );
}

#[test]
fn lines_of_2_mib_from_two_nodes_stay_whole() {
    let width = 2 << 20;
    let o = tcp(&[]).run(PROGRAM, 2, &["print", "3", &width.to_string()], limit());
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let (counts, bad) = print_counts(&o.stdout, 2, 3, width);
    assert_eq!(bad, 0, "spliced lines; stderr: {}", o.stderr);
    assert!(counts.iter().all(|&c| c == 1), "{counts:?}; {}", o.stderr);
}

/// A job whose reader stalls for good: it read until the job's first `print` line, then holds
/// the pipe and reads no more. Dropping it kills whatever is left of the job.
struct Stalled {
    child: std::process::Child,
    /// charmrun's stdout, held unread (`None`: the job printed nothing in time).
    stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
    err: Option<std::thread::JoinHandle<String>>,
    /// The node processes, once all had started.
    nodes: Vec<u32>,
}

impl Stalled {
    fn start(cmd: &mut Command, nodes: usize) -> Stalled {
        use std::io::{BufRead, Read};
        use std::os::unix::process::CommandExt;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("start charmrun");
        let mut err = child.stderr.take().expect("stderr");
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let out = child.stdout.take().expect("stdout");
        // Read on a thread, so that a job that never prints cannot keep the test waiting.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = std::io::BufReader::new(out);
            let mut line = String::new();
            while !line.contains("print PE") {
                line.clear();
                if out.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
            }
            let _ = tx.send(out);
        });
        let pid = child.id();
        let mut job = Stalled {
            child,
            stdout: None,
            err: Some(err),
            nodes: Vec::new(),
        };
        job.nodes = converse_tests::wait_for_children(pid, nodes, Duration::from_secs(20));
        job.stdout = rx.recv_timeout(Duration::from_secs(30)).ok();
        // Output flows: a moment more, and the nodes have filled every pipe on the way.
        std::thread::sleep(Duration::from_secs(1));
        job
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig);
    }

    /// Wait up to `limit` for charmrun to exit: its code (`None` if it had to be killed) and
    /// its stderr.
    fn wait(&mut self, limit: Duration) -> (Option<i32>, String) {
        let end = Instant::now() + limit;
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break st.code(),
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
                _ => {
                    converse_tests::kill_tree(self.child.id());
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        let err = self
            .err
            .take()
            .and_then(|e| e.join().ok())
            .unwrap_or_default();
        (code, err)
    }

    /// The nodes still alive `limit` after now, if any.
    fn nodes_left(&self, limit: Duration) -> Vec<u32> {
        let end = Instant::now() + limit;
        loop {
            let left: Vec<u32> = self
                .nodes
                .iter()
                .copied()
                .filter(|&p| converse_tests::alive(p))
                .collect();
            if left.is_empty() || Instant::now() >= end {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            converse_tests::kill_tree(self.child.id());
            let _ = self.child.wait();
        }
        for &p in &self.nodes {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A job that prints without end, 4 nodes.
fn endless(opts: &[&str]) -> Command {
    tcp(opts).command(PROGRAM, 4, &["print", "1000000", "100"])
}

#[test]
fn an_interrupted_job_ends_while_the_reader_stalls() {
    let mut job = Stalled::start(&mut endless(&[]), 4);
    assert_eq!(job.nodes.len(), 4);
    assert!(job.stdout.is_some(), "the job printed nothing");
    let t = Instant::now();
    job.signal(nix::sys::signal::Signal::SIGINT);
    let (code, err) = job.wait(Duration::from_secs(40));
    let took = t.elapsed();
    // The grace for output (5 s) and a margin: not the reader's time.
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}; stderr: {err}"
    );
    assert_eq!(code, Some(130), "stderr: {err}");
    assert!(
        err.contains("interrupted by signal 2; ending the job"),
        "{err}"
    );
    assert!(err.contains("bytes of the job's output"), "{err}");
    assert_eq!(job.nodes_left(Duration::ZERO), Vec::<u32>::new(), "{err}");
}

#[test]
fn a_second_interrupt_ends_charmrun_at_once() {
    let mut job = Stalled::start(&mut endless(&[]), 4);
    assert_eq!(job.nodes.len(), 4);
    assert!(job.stdout.is_some(), "the job printed nothing");
    job.signal(nix::sys::signal::Signal::SIGINT);
    // The job is being ended, and charmrun waits for its reader.
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    job.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, err) = job.wait(Duration::from_secs(40));
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "took {took:?}; stderr: {err}"
    );
    assert_eq!(code, Some(128 + 15), "stderr: {err}");
    assert_eq!(
        job.nodes_left(Duration::from_secs(10)),
        Vec::<u32>::new(),
        "{err}"
    );
}

#[test]
fn the_time_limit_ends_a_job_whose_reader_stalls() {
    let start = Instant::now();
    let mut job = Stalled::start(&mut endless(&["++timelimit", "3"]), 4);
    assert_eq!(job.nodes.len(), 4);
    assert!(job.stdout.is_some(), "the job printed nothing");
    let (code, err) = job.wait(Duration::from_secs(40));
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "took {took:?}; stderr: {err}"
    );
    assert_eq!(code, Some(124), "stderr: {err}");
    assert!(err.contains("++timelimit of 3 s reached"), "{err}");
    assert!(err.contains("bytes of the job's output"), "{err}");
    assert_eq!(job.nodes_left(Duration::ZERO), Vec::<u32>::new(), "{err}");
}
