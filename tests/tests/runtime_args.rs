//! Runtime arguments, layer choice and start-up output, on whole programs.
//!
//! Written for a build without the MPI layer (the default): its expectations name the default
//! variant and layers.
#![cfg(not(feature = "mpi"))]

use converse_tests::run_bounded;
use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn run(args: &[&str]) -> converse_tests::Outcome {
    run_bounded(Command::new(PROGRAM).args(args), Duration::from_secs(30))
}

#[test]
fn banner_names_variant_and_layer() {
    let o = run(&["hello", "+p2"]);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.lines_with("Converse> variant multicore, layer local: 2 PEs on 2 nodes"),
        1,
        "{o}"
    );
    let quiet = run(&["hello", "+p2", "+quiet"]);
    assert_eq!(quiet.lines_with("Converse>"), 0, "{quiet}");
    // Grammar: one of each is singular.
    let one = run(&["hello", "+p1"]);
    assert_eq!(
        one.lines_with("Converse> variant multicore, layer local: 1 PE on 1 node,"),
        1,
        "{one}"
    );
}

#[test]
fn version_flag_says_what_is_compiled_in() {
    let o = run(&["+version"]);
    assert_eq!(o.code, Some(0), "{o}");
    assert!(
        o.stdout.contains(
            "variant multicore, layers compiled in: local, tcp, udp, si (default: local)"
        ),
        "{o}"
    );
}

#[test]
fn runtime_arguments_are_removed_before_the_program_sees_them() {
    // "exit-code 7" only works if +p and +machine are gone from the program's arguments.
    let o = run(&["+p", "2", "exit-code", "+machine", "local", "7", "+quiet"]);
    assert_eq!(o.code, Some(7), "{o}");
}

#[test]
fn a_layer_not_compiled_in_is_a_clear_error() {
    let o = run(&["hello", "+machine", "mpi"]);
    assert_eq!(o.code, Some(2), "{o}");
    assert!(
        o.stderr
            .contains("layer 'mpi' is not compiled into this program"),
        "{o}"
    );
    let o = run(&["hello", "+machine", "carrier-pigeon"]);
    assert!(o.stderr.contains("unknown layer 'carrier-pigeon'"), "{o}");
}

#[test]
fn bad_runtime_arguments_are_one_line_errors() {
    for args in [
        vec!["hello", "+p0"],
        vec!["hello", "+p", "many"],
        vec!["hello", "+bogus"],
        vec!["hello", "+set", "sched.batch=zero"],
        vec!["hello", "+ppn", "0"],
        vec!["hello", "+set", "udp.dead_after_s=nan"],
        vec!["hello", "+set", "sched.spin_us=inf"],
    ] {
        let o = run(&args);
        assert_eq!(o.code, Some(2), "{args:?}: {o}");
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {o}");
        assert!(!o.stderr.contains("panicked"), "{args:?}: {o}");
    }
}

#[test]
fn a_malformed_setting_of_a_layer_not_in_use_is_refused() {
    // The job runs on the local layer: each of these would pass unseen until the day the
    // layer it belongs to is used.
    for (key, value) in [
        ("si.ring_kib", "3"),
        ("si.copy_together", "maybe"),
        ("si.single_copy_from", "big"),
        ("udp.window", "2"),
        ("udp.mtu", "abc"),
        ("stats", "maybe"),
    ] {
        let set = format!("{key}={value}");
        let o = run(&["hello", "+machine", "local", "+set", &set]);
        assert_eq!(o.code, Some(2), "{set}: {o}");
        assert_eq!(o.stderr.lines().count(), 1, "{set}: {o}");
        assert!(o.stderr.contains(key), "{set}: names the key: {o}");
        assert_eq!(o.lines_with("said hello"), 0, "{set}: {o}");
    }
}

#[test]
fn settings_from_the_command_line_are_accepted() {
    // No spinning at all before blocking: every message wakes a blocked PE, and still arrives.
    let o = run(&[
        "sizes",
        "+p2",
        "+set",
        "sched.spin_us=0",
        "+set",
        "tree.branching=2",
        "100000",
    ]);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance sizes: ok"), 1, "{o}");
}

#[test]
fn started_by_mpirun_without_the_mpi_layer_is_a_clear_error() {
    // What Open MPI's mpirun puts in each rank's environment; without the MPI layer every rank
    // would otherwise run alone as a one-PE job.
    let o = run_bounded(
        Command::new(PROGRAM)
            .arg("hello")
            .env("OMPI_COMM_WORLD_SIZE", "4")
            .env("OMPI_COMM_WORLD_RANK", "1"),
        Duration::from_secs(30),
    );
    assert_ne!(o.code, Some(0), "{o}");
    assert!(
        o.stderr.contains("started by an MPI launcher") && o.stderr.contains("has no MPI layer"),
        "{o}"
    );
    assert_eq!(o.stderr.lines().count(), 1, "one line: {o}");
    assert_eq!(o.lines_with("hello from PE"), 0, "{o}");
}

#[test]
fn an_unknown_setting_is_refused_naming_the_known_ones() {
    let o = run(&["hello", "+set", "nosuch.key=1"]);
    assert_eq!(o.code, Some(2), "{o}");
    assert_eq!(o.stderr.lines().count(), 1, "one line: {o}");
    assert!(
        o.stderr
            .contains("setting nosuch.key: no such setting (known: ")
            && o.stderr.contains("sched.spin_us")
            && o.stderr.contains("udp.mtu"),
        "{o}"
    );
    assert_eq!(o.lines_with("hello from PE"), 0, "{o}");
}

/// A near miss is named: a layer, a setting, a runtime argument, a charmrun option.
#[test]
fn a_mistyped_name_says_what_was_meant() {
    for (args, want) in [
        (
            &["hello", "+machine", "tpc"][..],
            "unknown layer 'tpc' (did you mean tcp?)",
        ),
        (
            &["hello", "+set", "sched.spinus=3"][..],
            "no such setting (did you mean sched.spin_us? known: ",
        ),
        (
            &["hello", "+pn", "2"][..],
            "unknown runtime argument '+pn' (did you mean +p?)",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.code, Some(2), "{args:?}: {o}");
        assert!(o.stderr.contains(want), "{args:?}: want {want:?}\n{o}");
        assert_eq!(o.stderr.lines().count(), 1, "one line: {o}");
    }
    let o = converse_tests::run_bounded(
        Command::new(converse_tests::charmrun_path(PROGRAM)).args(["++pnn", "2", PROGRAM]),
        Duration::from_secs(30),
    );
    assert!(
        o.stderr
            .contains("unknown option '++pnn' (did you mean ++ppn?)"),
        "{o}"
    );
    // `+help`: the runtime arguments, then the settings; exit 0.
    let o = run(&["+help"]);
    assert_eq!(o.code, Some(0), "{o}");
    assert!(
        o.stdout.starts_with("runtime arguments") && o.stdout.contains("sched.idle_max_ms"),
        "{o}"
    );
}

#[test]
fn the_local_layer_under_charmrun_is_refused_at_once() {
    let charmrun = converse_tests::charmrun_path(PROGRAM);
    let o = run_bounded(
        Command::new(charmrun).args(["+p4", PROGRAM, "hello", "+machine", "local"]),
        Duration::from_secs(30),
    );
    assert_ne!(o.code, Some(0), "{o}");
    // charmrun refuses it itself; a node started some other way is refused by the runtime.
    assert!(o.stderr.contains("+machine local runs"), "{o}");
    assert_eq!(o.lines_with("hello from PE"), 0, "{o}");
}

/// `srun` without PMI (`MpiDefault=none`) sets only its own task variables: a program without
/// the MPI layer must say so, not run as N separate one-PE jobs (issue 30, item 7).
#[test]
fn srun_tasks_without_an_mpi_layer_are_refused_in_one_line() {
    let o = run_bounded(
        Command::new(PROGRAM)
            .arg("hello")
            .env("SLURM_STEP_NUM_TASKS", "4")
            .env("SLURM_PROCID", "1"),
        Duration::from_secs(30),
    );
    assert_eq!(o.code, Some(2), "{o}");
    assert_eq!(o.stderr.lines().count(), 1, "{o}");
    assert!(o.stderr.contains("SLURM_STEP_NUM_TASKS=4"), "{o}");
    assert_eq!(o.lines_with("hello from PE"), 0, "{o}");
}

/// Report mode on the in-process layer was accepted and the job then exited 3 with no
/// message: refused up front, as the MPI layer refuses it (issue 30, item 7).
#[test]
fn report_mode_on_the_local_layer_is_refused_up_front() {
    let o = run(&["hello", "+p2", "+set", "faults=report"]);
    assert_ne!(o.code, Some(0), "{o}");
    assert_eq!(o.stderr.lines().count(), 1, "{o}");
    assert!(o.stderr.contains("setting faults: the local layer"), "{o}");
}

/// The `+settings` listing: every setting, with its bounds and default, and exit 0.
#[test]
fn settings_lists_every_setting_with_its_default() {
    let o = run(&["+settings"]);
    assert_eq!(o.code, Some(0), "{o}");
    for key in [
        "sched.spin_us",
        "udp.window",
        "si.ring_kib",
        "mpi.window",
        "faults",
    ] {
        assert_eq!(
            o.stdout.lines().filter(|l| l.starts_with(key)).count(),
            1,
            "{key}: {o}"
        );
    }
    assert!(o.stdout.contains("4..=4096; default 128"), "{o}");
}

/// The test program's own arguments are bounded (issue 30, item 11): a 1 TiB line, an endless
/// flood and a victim that is no PE are refused in one line, at once.
#[test]
fn the_test_programs_arguments_are_bounded() {
    for args in [
        &["print", "1", "1099511627776", "+p2"][..],
        &["flood", "999999999999", "+p2"],
        &["survive", "99", "+p2"],
    ] {
        let o = run(args);
        assert_eq!(o.code, Some(2), "{args:?}: {o}");
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {o}");
    }
}

/// `+help` and `+version` through charmrun describe the program once: charmrun runs it once
/// and starts no job (each node would print the same, then leave before connecting).
#[test]
fn help_and_version_through_charmrun_print_once() {
    let charmrun = converse_tests::charmrun_path(PROGRAM);
    for (flag, needle) in [
        ("+version", "layers compiled in"),
        ("+help", "runtime arguments"),
    ] {
        let o = run_bounded(
            Command::new(&charmrun).args(["+p3", PROGRAM, "hello", flag, "+machine", "tcp"]),
            Duration::from_secs(30),
        );
        assert_eq!(o.code, Some(0), "{flag}: {o}");
        assert_eq!(o.lines_with(needle), 1, "{flag}: {o}");
        assert!(!o.stderr.contains("before connecting"), "{flag}: {o}");
    }
}
