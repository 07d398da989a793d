//! The examples as whole jobs on the in-process layer: each checks its own result and says
//! so on one line (the token ring also saves a trace that `topo-draw` draws).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn example(name: &str) -> PathBuf {
    let p = std::path::Path::new(env!("CARGO_BIN_EXE_topo-draw"))
        .with_file_name("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} is not built: cargo build --release -p converse-topo --examples",
        p.display()
    );
    p
}

/// Run an example on `pes` PEs, killed after 60 s; its stdout.
fn run(name: &str, pes: usize, args: &[&str]) -> String {
    let mut child = Command::new(example(name))
        .args(args)
        .args([&format!("+p{pes}"), "+machine", "local", "+quiet"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("example starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("{name} on {pes} PEs did not end in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().expect("output");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{name} on {pes} PEs: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn token_ring_goes_round_and_its_trace_draws() {
    let dir = std::env::temp_dir().join(format!("topo-ring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let trace = dir.join("ring.trace");
    for pes in [1, 2, 7] {
        let out = run(
            "token_ring",
            pes,
            &["4", "--trace", trace.to_str().unwrap_or("")],
        );
        assert!(
            out.contains(&format!("token went 4 times round {pes} processes")),
            "{out}"
        );
        assert_eq!(
            out.lines().filter(|l| l.contains(" host ")).count(),
            pes,
            "{out}"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_topo-draw"))
        .arg(&trace)
        .arg("-o")
        .arg(dir.join("pics"))
        .output()
        .expect("topo-draw");
    assert!(o.status.success());
    let svg = std::fs::read_to_string(dir.join("pics/001-send-0-0.svg")).expect("svg");
    // 4 rounds of 7 hops: an arrow per channel, labelled with the 4 hops over it.
    assert_eq!(svg.matches("marker-end").count(), 7);
    for k in 1..=7 {
        let label = format!(">{}, {}, {}, {}</text>", k, k + 7, k + 14, k + 21);
        assert!(svg.contains(&label), "no {label} in {svg}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn jacobi_on_a_torus_matches_the_serial_computation() {
    for pes in [1, 4, 6] {
        let out = run("jacobi_torus", pes, &[]);
        assert!(out.contains("matches the serial computation"), "{out}");
    }
    let out = run("jacobi_torus", 6, &["3", "2", "5", "9"]);
    assert!(
        out.contains("on a 3x2 torus, 15x10 cells, 9 steps") && out.contains("matches"),
        "{out}"
    );
}

#[test]
fn scatter_work_gather_comes_back_right() {
    for pes in [1, 5, 8] {
        let out = run("scatter_gather", pes, &["300"]);
        assert!(out.contains("gathered: ok"), "{out}");
    }
}

#[test]
fn no_increment_is_lost_under_the_mutex() {
    for pes in [1, 3, 8] {
        let out = run("mutex_counter", pes, &["10"]);
        assert!(
            out.contains(&format!("counter = {} (want {}): ok", 10 * pes, 10 * pes)),
            "{out}"
        );
    }
}

/// Bad arguments are refused, not replaced by defaults: the job ends at once with exit code 2
/// and one line on stderr saying why. `token_ring 0` used to go round for ever, `jacobi_torus
/// 3 3` on 4 PEs to read 3 3 as B and STEPS, and `scatter_gather` of a huge count to abort on
/// its allocation.
#[test]
fn bad_arguments_are_refused_in_one_line() {
    let cases: [(&str, &[&str], &str); 4] = [
        (
            "token_ring",
            &["0"],
            "ROUNDS must be a whole number from 1 to",
        ),
        (
            "jacobi_torus",
            &["3", "3"],
            "ROWS × COLS must be the number of PEs, 4",
        ),
        ("scatter_gather", &["99999999999999"], "PER_PROCESS must be"),
        ("mutex_counter", &["-1"], "TIMES must be a whole number"),
    ];
    for (name, args, want) in cases {
        let mut child = Command::new(example(name))
            .args(args)
            .args(["+p4", "+machine", "local", "+quiet"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("example starts");
        // A refusal is immediate: 20 s is only there so that a hang fails the test.
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                child.kill().ok();
                child.wait().ok();
                panic!("{name} {args:?} did not end in 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = child.wait_with_output().expect("output");
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{name} {args:?}: {err}");
        assert!(
            err.starts_with(&format!("{name}: ")) && err.contains(want),
            "{name} {args:?}: {err}"
        );
        assert!(out.is_empty(), "{name} {args:?} started anyway: {out}");
    }
}
