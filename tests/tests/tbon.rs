//! The tree overlay on whole jobs: every scenario of the `tbon` program on flat, two- and
//! three-level and k-nomial trees, on the in-process layer, on TCP and on shared memory under
//! charmrun; bad
//! topologies; a front-end that makes its own network (IntegerAddition, and 200 networks of
//! 32 back-ends made and torn down in one process).

use converse_tests::{run_bounded, Launcher, Outcome};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const TBON: &str = env!("CARGO_BIN_EXE_tbon");
const CREATE: &str = env!("CARGO_BIN_EXE_tbon_create");

/// `target/<profile>/examples/NAME`: the overlay's examples (the filter library, the
/// IntegerAddition programs), built by `cargo test --workspace` or
/// `cargo build --release -p converse-tbon --examples`.
fn example(name: &str) -> String {
    let p: PathBuf = std::path::Path::new(TBON)
        .with_file_name("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --release -p converse-tbon --examples` (or test the \
         whole workspace)",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

fn filters() -> String {
    example("libtbon_filters.so")
}

/// Run a scenario and require its "ok".
fn scenario(l: &Launcher, name: &str, topo: &str, pes: usize) -> Outcome {
    let lib = filters();
    let o = l.run(TBON, pes, &[name, topo, &lib], Duration::from_secs(120));
    assert!(
        o.code == Some(0) && o.lines_with(&format!("tbon {name}: ok")) == 1,
        "{name} on {topo} ({pes} PEs) via {l:?}:\n{o}"
    );
    o
}

/// Flat, two-level, three-level and k-nomial trees, with the PEs each needs (one spare).
const TREES: [(&str, usize); 4] = [("g:6", 8), ("g:2x3", 9), ("g:2x2x2", 16), ("k:2@8", 8)];

macro_rules! overlay_suite {
    ($launcher:expr, $trees:expr) => {
        fn launcher() -> converse_tests::Launcher {
            $launcher
        }

        fn on_every_tree(name: &str) {
            for (topo, pes) in $trees {
                super::scenario(&launcher(), name, topo, pes);
            }
        }

        #[test]
        fn every_built_in_filter_reduces_right() {
            on_every_tree("reduce");
        }

        #[test]
        fn wait_for_all_dont_wait_and_timeout() {
            on_every_tree("sync");
        }

        #[test]
        fn filters_placed_per_rank() {
            on_every_tree("hetero");
        }

        #[test]
        fn destination_subsets_singlecast_and_communicators() {
            on_every_tree("subset");
        }

        #[test]
        fn back_ends_see_a_stream_closed() {
            on_every_tree("close");
        }

        #[test]
        fn a_user_filter_loaded_from_a_library() {
            on_every_tree("load");
        }

        #[test]
        fn bad_tags_formats_and_failing_filters_are_clear_errors() {
            on_every_tree("errors");
        }

        #[test]
        fn events_callbacks_and_notification_descriptors() {
            on_every_tree("events");
        }

        #[test]
        fn performance_data_through_the_tree() {
            on_every_tree("perf");
        }

        #[test]
        fn topology_queries_and_files() {
            on_every_tree("topology");
        }

        #[test]
        fn user_filters_with_state_parameters_and_reverse_packets() {
            on_every_tree("userfilters");
        }

        #[test]
        fn shutdown_reaches_every_process() {
            on_every_tree("shutdown");
        }
    };
}

mod local {
    overlay_suite!(
        converse_tests::Launcher::Direct { machine: "local" },
        super::TREES
    );
}

mod tcp {
    overlay_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "tcp",
            opts: vec![]
        },
        [("g:2x3", 9), ("g:2x2x2", 15)]
    );
}

mod si {
    overlay_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "si",
            opts: vec![]
        },
        [("g:2x3", 9)]
    );
}

#[test]
fn a_bad_topology_file_names_its_line() {
    let dir = std::env::temp_dir().join(format!("tbon-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let cases = [
        ("fe:0 => a:0 b:0 ;\nb:0 => c:0\n", ":3: expected ';'"),
        (
            "fe:0 => x:0 ;\na:0 => b:0 ;\nb:0 => a:0 ;\n",
            "a:0 is its own descendant",
        ),
        (
            "fe:0 => a:0 ;\nx:0 => a:0 ;\n",
            ":2: a:0 already has the parent fe:0 (line 1)",
        ),
        ("fe:0 => a:0 ;\nx:0 => y:0 ;\n", "2 roots"),
        ("fe:0 => a:zero ;\n", ":1: expected an instance number"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let f = dir.join(format!("bad{i}.top"));
        let _ = std::fs::write(&f, text);
        let topo = format!("file:{}", f.display());
        let o = Launcher::Direct { machine: "local" }.run(
            TBON,
            4,
            &["reduce", &topo],
            Duration::from_secs(60),
        );
        assert_eq!(o.code, Some(3), "{text:?}\n{o}");
        assert!(o.stderr.contains(want), "{text:?}: want {want:?}\n{o}");
        assert!(o.stderr.contains(&f.display().to_string()), "{o}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tree_larger_than_the_job_is_refused() {
    let o = Launcher::Direct { machine: "local" }.run(
        TBON,
        5,
        &["reduce", "b:4x4"],
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(3), "{o}");
    assert!(
        o.stderr
            .contains("it has 21 processes but the job has 5 PE(s)"),
        "{o}"
    );
}

#[test]
fn a_tree_without_back_ends_is_refused_not_run() {
    // A front-end alone used to wait forever for replies nobody would send.
    let dir = std::env::temp_dir().join(format!("tbon-lone-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let lone = dir.join("lone.top");
    let _ = std::fs::write(&lone, "localhost:0 => ;\n");
    let want = "a tree overlay needs at least one back-end";
    let topo = format!("file:{}", lone.display());
    let o = Launcher::Direct { machine: "local" }.run(
        TBON,
        2,
        &["reduce", &topo],
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(3), "{o}");
    assert!(o.stderr.contains(want), "{o}");
    let (fe, be) = (
        example("integer_addition_fe"),
        example("integer_addition_be"),
    );
    let lone = lone.to_string_lossy().into_owned();
    for (topo, want) in [
        (lone.as_str(), want),
        ("k:2@1", "a tree of 1 process(es) has no back-end"),
    ] {
        let o = run_bounded(
            Command::new(&fe).args([topo, &be, &filters()]),
            Duration::from_secs(60),
        );
        assert!(o.code.is_some_and(|c| c != 0), "{topo}\n{o}");
        assert!(o.stderr.contains(want), "{topo}: want {want:?}\n{o}");
        assert_eq!(o.stderr.trim().lines().count(), 1, "one line: {topo}\n{o}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn integer_addition_as_in_appendix_b() {
    let (fe, be) = (
        example("integer_addition_fe"),
        example("integer_addition_be"),
    );
    for (topo, backends) in [("g:4x8", 32), ("g:3", 3), ("k:2@6", 4)] {
        let o = run_bounded(
            Command::new(&fe).args([topo, &be, &filters()]),
            Duration::from_secs(120),
        );
        assert_eq!(o.code, Some(0), "{topo}\n{o}");
        assert_eq!(o.lines_with("Success!"), 5, "{topo}\n{o}");
        assert_eq!(
            o.lines_with("Processing PROT_EXIT"),
            backends,
            "{topo}\n{o}"
        );
    }
}

/// An internal process dies before the plan went through it (report mode): the front-end's
/// attach fails naming it, and every other process's wait ends too — those below it waited
/// for ever for a plan that never came, those placed for a network that is never made.
#[test]
fn a_death_before_the_plan_passed_ends_every_attach() {
    for machine in ["tcp", "si"] {
        let l = Launcher::Charmrun {
            machine,
            opts: vec![],
        };
        // PE 1 holds the first internal process of g:2x3 (processes map to PEs in order).
        let o = l.run(
            TBON,
            9,
            &["plandeath", "g:2x3", "1", "+set", "faults=report"],
            Duration::from_secs(60),
        );
        assert!(
            o.code == Some(0) && o.lines_with("tbon plandeath: ok") == 1,
            "{machine}:\n{o}"
        );
        // Three back-ends below the dead process never had a place; the others had.
        assert_eq!(
            o.stdout.matches("not attached: ").count(),
            3,
            "{machine}:\n{o}"
        );
        assert_eq!(
            o.stdout.matches("placed, then Ok").count(),
            4,
            "{machine}:\n{o}"
        );
    }
}

#[test]
fn the_front_end_says_clearly_why_it_cannot_make_its_network() {
    let (fe, be) = (
        example("integer_addition_fe"),
        example("integer_addition_be"),
    );
    // charmrun names this host as its nodes do.
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let cannot_start = format!("cannot start node 1 on {host}");
    let cases: [(&[&str], &str); 4] = [
        (
            &["g:2", &be, "/nonexistent/lib.so"],
            "cannot load filter library /nonexistent/lib.so",
        ),
        (&["g:2", "/nonexistent/be", "x.so"], &cannot_start),
        (
            &["/nonexistent.top", &be, "x.so"],
            "cannot read topology file /nonexistent.top",
        ),
        (&["g:0", &be, "x.so"], "bad tree spec 'g:0'"),
    ];
    for (args, want) in cases {
        let o = run_bounded(Command::new(&fe).args(args), Duration::from_secs(60));
        assert!(o.code.is_some_and(|c| c != 0), "{args:?}\n{o}");
        assert!(o.stderr.contains(want), "{args:?}: want {want:?}\n{o}");
        assert_eq!(
            o.stderr.trim().lines().count(),
            1,
            "one line: {args:?}\n{o}"
        );
    }
    // A back-end program started by hand says what it is.
    let o = run_bounded(Command::new(&be).arg("+quiet"), Duration::from_secs(60));
    assert_eq!(o.code, Some(1), "{o}");
    assert!(o.stderr.contains("its front-end starts it"), "{o}");
}

#[test]
fn two_hundred_networks_of_32_back_ends_made_and_torn_down() {
    let o = run_bounded(
        Command::new(CREATE).args(["teardown", "g:4x8", "200"]),
        Duration::from_secs(600),
    );
    assert!(!o.timed_out, "{o}");
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("tbon_create: ok"), 1, "{o}");
}

#[test]
fn networks_on_shared_memory_made_and_torn_down() {
    let o = run_bounded(
        Command::new(CREATE).args(["teardown", "g:4x8", "50", "si"]),
        Duration::from_secs(300),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("tbon_create: ok"), 1, "{o}");
}

#[test]
fn the_equivalence_class_filter_of_the_paper() {
    let o = run_bounded(
        Command::new(example("tbon_equivalence")).args(["+p13", "+quiet"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.lines_with("9 back-ends in 3 equivalence classes"),
        1,
        "{o}"
    );
    assert_eq!(o.lines_with("checksum matches"), 3, "{o}");
}

#[test]
fn the_histogram_filter_of_the_paper_adds_up_every_back_ends_bins() {
    let o = run_bounded(
        Command::new(example("tbon_histogram")).args(["+p13", "+quiet"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.lines_with("9 back-ends, 7477 samples in range: the histogram matches"),
        1,
        "{o}"
    );
}

/// A synchronization filter loaded from a library decides the waves: pairs of answers, so a
/// 2x3 tree's third answer per internal process waits for the next round.
#[test]
fn a_loaded_synchronization_filter_makes_the_waves() {
    let o = run_bounded(
        Command::new(example("tbon_sync_filter")).args(["+p9", "+quiet"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.lines_with("group synchronization: waves [4, 4, 4] from 12 answers"),
        1,
        "{o}"
    );
}

/// The paper's clock-skew detection: every back-end's skew against the front-end, composed
/// hop by hop through the tree, against skews known by construction (up to ±500 ms apart).
/// The bound is on correctness (a sign or a hop wrong would be off by hundreds of ms), not on
/// speed: the accuracy figures are in docs/benchmarks.md.
#[test]
fn clock_skews_found_through_the_tree_are_the_true_ones() {
    let o = run_bounded(
        Command::new(example("tbon_clock_skew")).args(["+p13", "+quiet"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(0), "{o}");
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("clock skew over 9 back-ends"))
        .unwrap_or_else(|| panic!("no summary:\n{o}"));
    let number_after = |key: &str| -> f64 {
        line.split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::MAX)
    };
    // Microseconds; 10 ms is far below the smallest skew between two ranks (1 ms steps
    // hundreds apart) yet far above any scheduling delay of a loaded machine.
    assert!(number_after("tree mean error ") < 10_000.0, "{line}");
    assert!(number_after("direct mean error ") < 10_000.0, "{line}");
}

/// The guide's HeterogeneousFilters example: `max` below the front-end and `sum` at it give
/// the sum of the subtrees' maxima; with `--by-name` (MRNet's `rank_backends = false`) the
/// back-ends are ranked by their names among every process's, as MRNet ranks them.
#[test]
fn heterogeneous_filters_example_places_filters_per_rank() {
    let prog = example("heterogeneous_filters");
    for (args, ranks, maxima) in [
        (&["g:2x3"][..], "[0, 1, 2, 3, 4, 5]", 9),
        (&["g:2x3", "--by-name"][..], "[3, 4, 5, 6, 7, 8]", 15),
        // Ten processes: names compare as text, so localhost:10 comes before localhost:2.
        (
            &["g:3x3", "--by-name"][..],
            "[2, 3, 4, 7, 8, 9, 10, 11, 12]",
            28,
        ),
    ] {
        let o = run_bounded(Command::new(&prog).args(args), Duration::from_secs(90));
        assert!(
            o.code == Some(0) && o.lines_with("heterogeneous_filters: ok") == 1,
            "{args:?}\n{o}"
        );
        assert_eq!(o.lines_with(&format!("back-end ranks: {ranks}")), 1, "{o}");
        assert_eq!(
            o.lines_with(&format!("sum of subtree maxima {maxima} (want {maxima})")),
            3,
            "{o}"
        );
    }
}

/// The guide's PerformanceData example: data collected over every stream at once, per rank,
/// one packet per wave from every back-end.
#[test]
fn performance_data_example_collects_every_stream() {
    let o = run_bounded(
        Command::new(example("performance_data")).arg("g:2x3"),
        Duration::from_secs(90),
    );
    assert!(
        o.code == Some(0) && o.lines_with("performance_data: ok") == 1,
        "{o}"
    );
    assert_eq!(
        o.lines_with("packets sent by rank: 0:4 1:4 2:4 3:4 4:4 5:4 "),
        1,
        "{o}"
    );
    assert_eq!(
        o.lines_with("packets sent by rank: 0:2 1:2 2:2 3:2 4:2 5:2 "),
        1,
        "{o}"
    );
    assert_eq!(o.lines_with("over 9 ranks"), 2, "{o}");
}

/// The guide's FaultRecovery example: an internal process killed mid-stream is reported
/// removed, its four orphans get new parents, and ten whole waves follow.
#[test]
fn fault_recovery_example_survives_an_internal_death() {
    let o = run_bounded(
        Command::new(example("fault_recovery")).arg("g:2x4"),
        Duration::from_secs(120),
    );
    assert!(
        o.code == Some(0) && o.lines_with("fault_recovery: ok") == 1,
        "{o}"
    );
    assert_eq!(o.lines_with("event ProcessRemoved"), 1, "{o}");
    assert_eq!(o.lines_with("event NewParent"), 4, "{o}");
    assert_eq!(
        o.lines_with("(want 36)"),
        o.lines_with("sum 36 (want 36)"),
        "{o}"
    );
    assert_eq!(
        o.lines_with("10 whole after the death; the tree has 10 of 11 processes, orphans left: []"),
        1,
        "{o}"
    );
}

/// Appendix G settings from the environment: each process of the network logs to a file of
/// its own in `MRNET_DEBUG_LOG_DIRECTORY` (nothing on stderr), and a malformed setting is
/// refused in one line before anything starts.
#[test]
fn mrnet_settings_from_the_environment() {
    let dir = converse_tests::scratch("tbon-log-dir");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("log dir");
    let prog = example("heterogeneous_filters");
    let o = run_bounded(
        Command::new(&prog)
            .arg("g:2x3")
            .env("MRNET_DEBUG_LOG_DIRECTORY", &dir)
            .env("MRNET_DEBUG_LEVEL", "3")
            .env_remove("CONVERSE_LOG"),
        Duration::from_secs(90),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert!(!o.stderr.contains("tbon:"), "logs went to stderr:\n{o}");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read log dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(files.len(), 9, "one log per process: {files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        assert!(text.contains("DEBUG tbon:"), "{}: {text}", f.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
    for (key, value, want) in [
        ("MRNET_STARTUP_TIMEOUT", "soon", "a whole number of seconds"),
        ("XPLAT_RESOLVE_HOSTS", "yes", "it takes 1 or 0"),
        (
            "MRNET_DEBUG_LOG_DIRECTORY",
            "relative/dir",
            "an absolute path",
        ),
    ] {
        let o = run_bounded(
            Command::new(&prog).arg("g:2").env(key, value),
            Duration::from_secs(30),
        );
        assert_eq!(o.code, Some(1), "{key}={value}\n{o}");
        assert!(o.stderr.contains(key) && o.stderr.contains(want), "{o}");
        assert_eq!(o.stderr.trim().lines().count(), 1, "one line\n{o}");
    }
}

/// `runtime/tbon/mrnet_tests.sh`, MRNet's `mrnet_tests.sh` for the overlay's examples.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../runtime/tbon/mrnet_tests.sh"
);

/// Where the script finds the examples, topgen and charmrun (checked built).
fn build_dir() -> String {
    for p in ["fault_recovery", "no_backend_instantiation_be"] {
        example(p);
    }
    let charmrun = converse_tests::charmrun_path(TBON);
    charmrun
        .parent()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every example on every tree of the script, on this host (`-l`).
#[test]
fn mrnet_tests_script_runs_every_example_here() {
    let o = run_bounded(
        Command::new(SCRIPT).args(["-l", "-b", &build_dir(), "-t", "60"]),
        Duration::from_secs(600),
    );
    assert!(
        o.code == Some(0) && o.lines_with("15 passed, 0 failed") == 1,
        "{o}"
    );
    assert_eq!(o.lines_with("PASS "), 15, "{o}");
    // Bad usage is refused in one line, before anything runs.
    let o = run_bounded(
        Command::new(SCRIPT).args(["-r", "/no/such/hosts"]),
        Duration::from_secs(10),
    );
    assert_eq!(o.code, Some(2), "{o}");
    assert!(o.stderr.contains("cannot read the host file"), "{o}");
}

/// The script with a host file (`-r`), across two namespace hosts: the front-end on host 0,
/// every other process on hosts 1 and 2, started through the remote shell `XPLAT_RSH`
/// names. Needs root (skips otherwise).
#[test]
fn mrnet_tests_script_runs_across_the_hosts_of_a_host_file() {
    use converse_tests::netns::Hosts;
    let Some(hosts) = Hosts::new("mts", 3) else {
        return;
    };
    let list = format!("{}:4\n{}:4\n", Hosts::addr(1), Hosts::addr(2));
    let hostfile = hosts.file("hosts", &list);
    let mut cmd = hosts.on_host0(std::path::Path::new(SCRIPT));
    cmd.arg("-r")
        .arg(&hostfile)
        .args(["-b", &build_dir(), "-t", "90"])
        .env("XPLAT_RSH", hosts.shell());
    let o = run_bounded(&mut cmd, Duration::from_secs(900));
    assert!(
        o.code == Some(0) && o.lines_with("15 passed, 0 failed") == 1,
        "{o}"
    );
    // Both hosts ran processes, through the remote shell.
    let shell_log = std::fs::read_to_string(hosts.dir.join("shell-args.log")).unwrap_or_default();
    for h in [1, 2] {
        assert!(
            shell_log.lines().any(|l| l.starts_with(&Hosts::addr(h))),
            "host {h} not used:\n{shell_log}"
        );
    }
}
