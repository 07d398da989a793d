//! Process topologies on whole jobs: every class (fully connected, stars, line, ring, 2-D
//! grids and tori including 1×N, a 3-D torus, a weighted arbitrary graph) with 1, 2, 7 and 16
//! processes, on the in-process layer and under charmrun on TCP, UDP and shared memory:
//! routed point to point (FIFO per pair, receive from one or any, last sender, vector
//! times, hops only on channels), every collective from several roots, blocking and
//! message-driven, the mutex (exclusion checked by a monitor, every requester served);
//! mismatched collectives end as errors on every process; bad matrix files are one-line
//! errors.

use converse_tests::{Launcher, Outcome};
use std::time::Duration;

const TOPO: &str = env!("CARGO_BIN_EXE_topo");

fn scenario(l: &Launcher, args: &[&str], pes: usize) -> Outcome {
    let o = l.run(TOPO, pes, args, Duration::from_secs(120));
    assert!(
        o.code == Some(0) && o.lines_with(&format!("topo {}: ok", args[0])) == 1,
        "{args:?} on {pes} PEs via {l:?}:\n{o}"
    );
    o
}

/// The topology crate's examples, each with arguments and what it prints when right.
const EXAMPLES: [(&str, &[&str], &str); 4] = [
    ("token_ring", &["3"], "token went 3 times round 6 processes"),
    ("jacobi_torus", &[], "matches the serial computation"),
    ("scatter_gather", &["100"], "gathered: ok"),
    ("mutex_counter", &["5"], "counter = 30 (want 30): ok"),
];

/// `target/<profile>/examples/NAME`, built by `cargo test --workspace` or
/// `cargo build --release -p converse-topo --examples`.
fn example(name: &str) -> String {
    let p = std::path::Path::new(TOPO)
        .with_file_name("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --release -p converse-topo --examples`",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

/// Run an example as `launcher` runs programs, with the charmrun built next to the tests
/// (the examples live in a directory of their own).
fn run_example(l: &Launcher, path: &str, pes: usize, args: &[&str]) -> Outcome {
    let mut c = match l {
        Launcher::Charmrun { machine, opts } => {
            let mut c = std::process::Command::new(converse_tests::charmrun_path(TOPO));
            c.arg(format!("+p{pes}"))
                .args(opts)
                .arg(path)
                .args(args)
                .args(["+machine", machine]);
            c
        }
        _ => l.command(path, pes, args),
    };
    converse_tests::run_bounded(&mut c, Duration::from_secs(120))
}

macro_rules! topo_suite {
    ($modname:ident, $launcher:expr) => {
        mod $modname {
            use super::*;

            fn launcher() -> Launcher {
                $launcher
            }

            #[test]
            fn every_class_at_1_2_7_and_16_processes() {
                for pes in [1, 2, 7, 16] {
                    scenario(&launcher(), &["all"], pes);
                }
            }

            #[test]
            fn the_examples_check_their_results() {
                let l = launcher();
                for (name, args, want) in EXAMPLES {
                    let o = run_example(&l, &example(name), 6, args);
                    assert!(
                        o.code == Some(0) && o.stdout.contains(want),
                        "{name} via {l:?}:\n{o}"
                    );
                }
            }

            #[test]
            fn mismatched_collectives_are_errors_naming_processes() {
                let o = scenario(&launcher(), &["mismatch"], 7);
                assert!(
                    o.stdout.contains("process 2 called reduce to root 2"),
                    "{o}"
                );
                assert!(o.stdout.contains("of 4 bytes each"), "{o}");
                assert!(o.stdout.contains("called broadcast from root 6"), "{o}");
                assert!(o.stdout.contains("called gather to root 0"), "{o}");
            }
        }
    };
}

topo_suite!(local, Launcher::Direct { machine: "local" });
topo_suite!(
    tcp,
    Launcher::Charmrun {
        machine: "tcp",
        opts: vec![]
    }
);
topo_suite!(
    udp,
    Launcher::Charmrun {
        machine: "udp",
        opts: vec![]
    }
);
topo_suite!(
    si,
    Launcher::Charmrun {
        machine: "si",
        opts: vec![]
    }
);

#[test]
fn every_call_recorded_for_a_whole_run() {
    let l = Launcher::Direct { machine: "local" };
    let mut c = l.command(TOPO, 7, &["all"]);
    c.env("CONVERSE_TOPO_VISUAL", "1");
    let o = converse_tests::run_bounded(&mut c, Duration::from_secs(120));
    assert!(
        o.code == Some(0) && o.lines_with("topo all: ok") == 1,
        "{o}"
    );
    // With the setting, process 0 records its barriers' and mutex hops too, not only the
    // calls the scenario marks: more hops than without.
    let plain = scenario(&l, &["all"], 7);
    let hops = |o: &Outcome| -> usize {
        o.stdout
            .lines()
            .filter_map(|l| l.split("recorded ").nth(1))
            .filter_map(|r| r.split_whitespace().next()?.parse::<usize>().ok())
            .sum()
    };
    assert!(hops(&o) > hops(&plain), "{} vs {}", hops(&o), hops(&plain));
}

#[test]
fn matrix_files_good_and_bad() {
    let l = Launcher::Direct { machine: "local" };
    let dir = std::env::temp_dir().join(format!("topo-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cases = [
        ("good", "0 2 0 1\n2 0 3 0\n0 3 0 1\n1 0 1 0\n", None),
        ("tall", "0 1 1\n1 0 1\n", Some("not square")),
        (
            "cut",
            "0 1 0 0\n1 0 0 0\n0 0 0 1\n0 0 1 0\n",
            Some("process 2 cannot be reached"),
        ),
        ("garbage", "PK\u{3}\u{4}\u{0}binary junk\n", Some(":1: ")),
    ];
    for (name, text, want) in cases {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        let o = l.run(
            TOPO,
            4,
            &["matrix", p.to_str().unwrap_or("")],
            Duration::from_secs(60),
        );
        match want {
            None => assert!(
                o.code == Some(0) && o.lines_with("topo matrix: ok") == 1,
                "{o}"
            ),
            Some(w) => {
                let line: Vec<&str> = o
                    .stderr
                    .lines()
                    .filter(|l| l.starts_with("topo: "))
                    .collect();
                assert!(
                    o.code == Some(1) && line.len() == 1 && line[0].contains(w),
                    "{name}: {o}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// How many survivors of `topo survive` said their call reported PE 2's process dead. (The
/// reason is whoever saw the death first: charmrun, the signal; or the layer, the connection
/// closed.)
fn survivors_told(o: &Outcome) -> usize {
    o.stdout
        .lines()
        .filter(|l| {
            l.starts_with("topo survive: PE ")
                && l.contains("process 2 of the topology (PE 2, node ")
        })
        .count()
}

/// Report mode: a process that dies in the middle of the topology's calls — the mutex (held
/// or wanted, its token anywhere), routed sends through it, every collective — makes each
/// survivor's call return `ProcessDead` naming it, never a hang. The victim kills itself at
/// several moments into each loop; with `++ppn 2` its node takes a second PE with it.
#[test]
fn a_death_in_report_mode_fails_every_waiting_call_naming_the_process() {
    for (what, ppn) in [("mutex", 1), ("collectives", 1), ("route", 1), ("mutex", 2)] {
        for delay in ["0", "150", "600"] {
            let inner = Launcher::Charmrun {
                machine: "tcp",
                opts: vec![],
            };
            let l = inner.with_ppn(ppn);
            let o = l.run(
                TOPO,
                4,
                &["survive", what, delay, "+set", "faults=report"],
                Duration::from_secs(60),
            );
            let told = survivors_told(&o);
            // Survivors: PEs 0, 1, 3 at one PE per node; PEs 0, 1 at two.
            let want = if ppn == 1 { 3 } else { 2 };
            assert!(
                o.code == Some(0) && o.lines_with("topo survive: ok") == 1 && told == want,
                "{what} at {delay} ms, ppn {ppn}: {told} of {want} survivors told:\n{o}"
            );
        }
    }
}

/// The same, at many more moments: a death anywhere inside an iteration of each kind of
/// call (an iteration is a few round trips, so moments 1 to 58 ms after the start fall at
/// different points of it: holding the token or waiting for it, mid-route, mid-collective).
#[test]
fn a_death_at_any_moment_of_the_topologys_calls_is_reported() {
    let l = Launcher::Charmrun {
        machine: "tcp",
        opts: vec![],
    };
    let mut runs = 0;
    for what in ["mutex", "collectives", "route"] {
        for delay in ["1", "4", "9", "13", "22", "31", "45", "58"] {
            let o = l.run(
                TOPO,
                4,
                &["survive", what, delay, "+set", "faults=report"],
                Duration::from_secs(60),
            );
            let told = survivors_told(&o);
            assert!(
                o.code == Some(0) && o.lines_with("topo survive: ok") == 1 && told == 3,
                "{what} at {delay} ms: {told} of 3 survivors told:\n{o}"
            );
            runs += 1;
        }
    }
    assert_eq!(runs, 24);
}

/// The run: `mutex_counter` on 8 nodes in report mode, node 3 killed from outside at
/// 0.5 s. It used to wait for ever; now the survivors' `lock` fails naming process 3 and the
/// job ends with that error, well inside the limit.
#[test]
fn mutex_counter_ends_with_an_error_when_a_node_is_killed() {
    let path = example("mutex_counter");
    let mut c = std::process::Command::new(converse_tests::charmrun_path(TOPO));
    c.args([
        "+p8",
        &path,
        "3000",
        "+machine",
        "tcp",
        "+set",
        "faults=report",
    ]);
    let job = converse_tests::Running::start(&mut c, Duration::from_secs(60)).expect("starts");
    let nodes = converse_tests::wait_for_nodes(job.pid(), 8, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    let victim = *nodes.get(3).expect("node 3's process");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    let o = job.finish();
    assert!(
        o.code != Some(0)
            && o.stderr
                .contains("process 3 of the topology (PE 3, node 3) is out of the job"),
        "{o}"
    );
}
