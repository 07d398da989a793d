//! Logs (`CONVERSE_LOG`) on whole jobs: every line names who wrote it (node and PE, a node's
//! communication thread, charmrun), the filter picks targets, nothing shows when it is unset,
//! charmrun passes it on (also through a remote shell), and a malformed one is refused on one
//! line before anything starts. Every job is bounded in time.

use converse_tests::{run_bounded, Launcher, Outcome};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn limit() -> Duration {
    Duration::from_secs(60)
}

fn launcher(machine: &'static str, opts: &[&str]) -> Launcher {
    Launcher::Charmrun {
        machine,
        opts: opts.iter().map(|s| s.to_string()).collect(),
    }
}

/// `hello` on `pes` PEs under `l`, with `CONVERSE_LOG` as given (removed when `None`).
fn hello(l: &Launcher, pes: usize, log: Option<&str>) -> Outcome {
    let mut c = l.command(PROGRAM, pes, &["hello"]);
    c.env_remove("MRNET_DEBUG_LEVEL");
    match log {
        Some(v) => c.env("CONVERSE_LOG", v),
        None => c.env_remove("CONVERSE_LOG"),
    };
    let o = run_bounded(&mut c, limit());
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
    o
}

/// One log line, cut into its parts: `TIME [WHO] LEVEL TARGET: MESSAGE`.
#[derive(Debug)]
struct Line<'a> {
    who: &'a str,
    level: &'a str,
    target: &'a str,
}

fn parse(line: &str) -> Option<Line<'_>> {
    let (_time, rest) = line.split_once(" [")?;
    let (who, rest) = rest.split_once("] ")?;
    let (level, rest) = rest.split_once(' ')?;
    let (target, _msg) = rest.split_once(": ")?;
    ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]
        .contains(&level)
        .then_some(Line { who, level, target })
}

/// Every line of stderr as a log line; a line that is not one fails the test.
fn log_lines(o: &Outcome) -> Vec<Line<'_>> {
    o.stderr
        .lines()
        .map(|l| parse(l).unwrap_or_else(|| panic!("not a log line: {l:?}\n{o}")))
        .collect()
}

fn whos<'a>(lines: &[Line<'a>]) -> BTreeSet<&'a str> {
    lines.iter().map(|l| l.who).collect()
}

#[test]
fn debug_lines_name_node_and_pe_and_the_communication_threads() {
    // Two nodes of two PEs: PE threads, communication threads, charmrun.
    let smp = Launcher::Smp {
        inner: Box::new(launcher("tcp", &[])),
        ppn: 2,
    };
    let o = hello(&smp, 4, Some("debug"));
    let lines = log_lines(&o);
    let who = whos(&lines);
    for pe in 0..4 {
        let me = format!("node {} pe {pe}", pe / 2);
        assert!(who.contains(me.as_str()), "no line of {me}: {who:?}\n{o}");
    }
    for node in 0..2 {
        let comm = format!("node {node} comm");
        assert!(
            who.contains(comm.as_str()),
            "no line of {comm}: {who:?}\n{o}"
        );
    }
    assert!(who.contains("charmrun"), "{who:?}\n{o}");
    // A line of a node process names its node: never the bare process id.
    assert!(who.iter().all(|w| !w.starts_with("pid ")), "{who:?}\n{o}");
    let targets: BTreeSet<&str> = lines.iter().map(|l| l.target).collect();
    for t in ["converse", "tcp", "charmrun"] {
        assert!(targets.contains(t), "no {t} line: {targets:?}\n{o}");
    }
    assert!(lines.iter().all(|l| l.level != "TRACE"), "{o}");
}

#[test]
fn one_pe_per_node_names_node_and_pe_and_a_target_filter_keeps_only_its_target() {
    let o = hello(&launcher("udp", &[]), 2, Some("udp=debug,converse=debug"));
    let lines = log_lines(&o);
    let who = whos(&lines);
    for pe in 0..2 {
        let me = format!("node {pe} pe {pe}");
        assert!(who.contains(me.as_str()), "no line of {me}: {who:?}\n{o}");
    }
    let targets: BTreeSet<&str> = lines.iter().map(|l| l.target).collect();
    assert_eq!(
        targets,
        BTreeSet::from(["converse", "udp"]),
        "only the asked targets\n{o}"
    );
    // The layer's own lines name their node (the socket opens before any PE runs).
    for node in 0..2 {
        assert!(
            lines
                .iter()
                .any(|l| l.target == "udp" && l.who.starts_with(&format!("node {node}"))),
            "no udp line of node {node}\n{o}"
        );
    }
}

#[test]
fn unset_or_at_its_default_nothing_is_printed_beyond_the_programs_output() {
    for log in [None, Some("warn")] {
        let o = hello(&launcher("tcp", &[]), 3, log);
        assert!(o.stderr.is_empty(), "CONVERSE_LOG={log:?}\n{o}");
        for l in o.stdout.lines() {
            assert!(
                l.starts_with("hello from PE")
                    || l.starts_with("conformance hello")
                    || l.starts_with("Converse>"),
                "CONVERSE_LOG={log:?}: unexpected line {l:?}\n{o}"
            );
        }
    }
}

#[test]
fn charmrun_passes_the_filter_on_through_a_remote_shell_and_its_agents() {
    let dir = std::env::temp_dir().join(format!("converse-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    // A "remote shell" that runs the command here without the variable: the nodes see it only
    // if charmrun put it on the remote command line, as it must for a real other host.
    let shell = dir.join("fake-ssh");
    std::fs::write(&shell, "#!/bin/sh\nexec env -u CONVERSE_LOG sh -c \"$2\"\n")
        .expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shell, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let nodelist = dir.join("nodelist");
    std::fs::write(&nodelist, "localhost\n").expect("write nodelist");
    let (shell, nodelist) = (shell.display().to_string(), nodelist.display().to_string());
    // Nodes started by the remote shell, and by an agent the remote shell started.
    for agents in [false, true] {
        let mut opts = vec!["++nodelist", &nodelist, "++remote-shell", &shell];
        if agents {
            opts.push("++agents");
        }
        let o = hello(
            &launcher("tcp", &opts),
            2,
            Some("converse=debug,charmrun=debug"),
        );
        let who = whos(&log_lines(&o));
        for pe in 0..2 {
            let me = format!("node {pe} pe {pe}");
            assert!(who.contains(me.as_str()), "no line of {me}: {who:?}\n{o}");
        }
        assert_eq!(who.contains("charmrun agent 0"), agents, "{who:?}\n{o}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A malformed filter: one line naming the variable, a non-zero exit, and no output of the
/// program (nothing was started).
fn check_refused(o: &Outcome, prefix: &str) {
    assert!(!o.timed_out, "{o}");
    assert!(matches!(o.code, Some(c) if c != 0), "{o}");
    assert!(o.stdout.is_empty(), "{o}");
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{o}");
    assert!(
        lines[0].starts_with(prefix) && lines[0].contains("CONVERSE_LOG=\"udp=loud\""),
        "{o}"
    );
}

#[test]
fn a_malformed_filter_is_refused_on_one_line_by_charmrun_and_by_a_program() {
    let mut c = launcher("tcp", &[]).command(PROGRAM, 2, &["hello"]);
    c.env("CONVERSE_LOG", "udp=loud");
    check_refused(&run_bounded(&mut c, limit()), "charmrun: ");
    // A program started without charmrun refuses it too.
    let mut c = Command::new(PROGRAM);
    c.args(["hello", "+p2", "+machine", "local"])
        .env("CONVERSE_LOG", "udp=loud");
    check_refused(&run_bounded(&mut c, limit()), "conformance: error: ");
}

/// A front-end that makes its own network (charmrun in its process) on `tbon_create`.
fn network(env: &[(&str, &str)]) -> Outcome {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tbon_create"));
    c.args(["teardown", "g:2x2", "1"])
        .env_remove("CONVERSE_LOG")
        .env_remove("MRNET_DEBUG_LEVEL")
        .envs(env.iter().copied());
    let o = run_bounded(&mut c, limit());
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("tbon_create: ok"), 1, "{o}");
    o
}

#[test]
fn the_tree_overlay_logs_from_every_process_and_mrnet_debug_level_is_its_alias() {
    // g:2x2: the front-end, two internal processes, four back-ends: seven nodes.
    let o = network(&[("CONVERSE_LOG", "tbon=debug,charmrun=debug")]);
    let lines = log_lines(&o);
    for node in 0..7 {
        let me = format!("node {node} pe {node}");
        assert!(
            lines.iter().any(|l| l.target == "tbon" && l.who == me),
            "no tbon line of {me}\n{o}"
        );
    }
    // The launcher runs inside the front-end's process, on a thread that says so.
    assert!(
        lines
            .iter()
            .any(|l| l.target == "charmrun" && l.who == "charmrun"),
        "{o}"
    );
    let o = network(&[("MRNET_DEBUG_LEVEL", "3")]);
    let lines = log_lines(&o);
    assert!(!lines.is_empty(), "{o}");
    assert!(lines.iter().all(|l| l.target == "tbon"), "{o}");
    assert!(network(&[]).stderr.is_empty());
}

#[test]
fn open_mpi_is_told_to_pass_the_filter_on_with_x() {
    let dir = std::env::temp_dir().join(format!("converse-logs-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    // A launcher that says it is Open MPI's and only records how it was called.
    let args = dir.join("args");
    let fake = dir.join("mpiexec");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'mpiexec (Open MPI) 4.1.4'; exit 0; fi\necho \"$*\" >> '{}'\n",
            args.display()
        ),
    )
    .expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let fake = fake.display().to_string();
    // The job handed to the launcher (the MPI layer), and agents started through it (tcp).
    for layer in [&[][..], &["+machine", "tcp"][..]] {
        let mut c = Command::new(converse_tests::charmrun_path(PROGRAM));
        c.args([
            "++mpiexec",
            "++remote-shell",
            &fake,
            "+p2",
            PROGRAM,
            "hello",
        ])
        .args(layer)
        .env("CONVERSE_LOG", "warn");
        let o = run_bounded(&mut c, limit());
        assert!(!o.timed_out, "{o}");
    }
    let calls = std::fs::read_to_string(&args).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls.iter().all(|c| c.contains("-x CONVERSE_LOG ")),
        "{calls:?}"
    );
}
