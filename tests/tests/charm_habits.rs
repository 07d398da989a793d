//! charmrun as a Charm++ user drives it: `++nodegroup`, `++runscript`, `++usehostname`,
//! `++scalable-start`, `+setcpuaffinity`, `++debug` and `++debug-no-pause`, on real jobs over
//! the TCP layer. Every job is bounded in time and its process group killed at the end.

use converse_tests::{run_bounded, scratch, script, Outcome, Running};
use std::process::Command;
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn charmrun() -> Command {
    Command::new(converse_tests::charmrun_path(PROGRAM))
}

fn limit() -> Duration {
    Duration::from_secs(60)
}

/// `charmrun ARGS` bounded.
fn run(args: &[&str]) -> Outcome {
    run_bounded(charmrun().args(args), limit())
}

/// A "remote shell" that notes the host it was asked for in `hosts`, then runs the command
/// here (the secret still comes on its standard input).
fn noting_shell(dir: &std::path::Path) -> String {
    let hosts = dir.join("hosts");
    script(
        dir,
        "noting-ssh",
        &format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nexec sh -c \"$2\"\n",
            hosts.display()
        ),
    )
}

fn noted_hosts(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("hosts"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether `tool` runs here; if not, the test says it was skipped (CI installs them).
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: {tool} is not installed");
    }
    ok
}

#[test]
fn a_nodegroup_picks_its_hosts_and_an_unknown_one_is_named() {
    let dir = scratch("nodegroup");
    let shell = noting_shell(&dir);
    let nodelist = dir.join("nodelist");
    std::fs::write(
        &nodelist,
        "group main\n host no-such-host.invalid\ngroup here\n host localhost\n",
    )
    .expect("write nodelist");
    let nodelist = nodelist.display().to_string();
    let o = run(&[
        "+p2",
        "++nodelist",
        &nodelist,
        "++nodegroup",
        "here",
        "++remote-shell",
        &shell,
        PROGRAM,
        "hello",
        "+machine",
        "tcp",
    ]);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
    assert_eq!(noted_hosts(&dir), ["localhost", "localhost"], "{o}");
    // A group the file lacks, and a group without a nodelist: one line each, exit 2.
    let o = run(&[
        "+p2",
        "++nodelist",
        &nodelist,
        "++nodegroup",
        "gpu",
        PROGRAM,
    ]);
    assert_eq!(o.code, Some(2), "{o}");
    assert_eq!(
        o.stderr.trim(),
        format!("charmrun: {nodelist}: no hosts in group 'gpu' (its groups: main, here)")
    );
    let o = run(&["+p2", "++nodegroup", "here", PROGRAM]);
    assert_eq!(o.code, Some(2), "{o}");
    assert_eq!(o.stderr.lines().count(), 1, "{o}");
    assert!(o.stderr.contains("++nodegroup"), "{o}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scalable_start_is_one_agent_per_host() {
    let dir = scratch("scalable");
    let shell = noting_shell(&dir);
    let nodelist = dir.join("nodelist");
    std::fs::write(&nodelist, "localhost\n").expect("write nodelist");
    let nodelist = nodelist.display().to_string();
    let o = run(&[
        "+p3",
        "++nodelist",
        &nodelist,
        "++scalable-start",
        "++remote-shell",
        &shell,
        PROGRAM,
        "hello",
        "+machine",
        "tcp",
    ]);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
    // Three nodes on one host, one remote shell (its agent starts the three).
    assert_eq!(noted_hosts(&dir), ["localhost"], "{o}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_runscript_starts_every_node_and_a_missing_one_is_refused() {
    let dir = scratch("runscript");
    let ran = dir.join("ran");
    let wrapper = script(
        &dir,
        "wrap.sh",
        &format!(
            "#!/bin/sh\necho \"node $CONVERSE_NODE\" >> '{}'\nexec \"$@\"\n",
            ran.display()
        ),
    );
    let o = run(&[
        "+p3",
        "++runscript",
        &wrapper,
        PROGRAM,
        "hello",
        "+machine",
        "tcp",
    ]);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
    let mut nodes: Vec<String> = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["node 0", "node 1", "node 2"], "{o}");
    let o = run(&["+p2", "++runscript", "/nonexistent/wrap.sh", PROGRAM]);
    assert_eq!(o.code, Some(2), "{o}");
    assert_eq!(o.stderr.lines().count(), 1, "{o}");
    assert!(o.stderr.contains("++runscript /nonexistent/wrap.sh"), "{o}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usehostname_gives_nodes_this_hosts_name_and_setcpuaffinity_pins() {
    let dir = scratch("usehostname");
    // A remote shell that keeps the command it is given, then runs it here.
    let lines = dir.join("lines");
    let shell = script(
        &dir,
        "keeping-ssh",
        &format!(
            "#!/bin/sh\necho \"$2\" >> '{}'\nexec sh -c \"$2\"\n",
            lines.display()
        ),
    );
    let nodelist = dir.join("nodelist");
    std::fs::write(&nodelist, "localhost\n").expect("write nodelist");
    let nodelist = nodelist.display().to_string();
    let o = run(&[
        "+p2",
        "++nodelist",
        &nodelist,
        "++remote-shell",
        &shell,
        "++usehostname",
        PROGRAM,
        "hello",
        "+machine",
        "tcp",
        "+setcpuaffinity",
    ]);
    let kept = std::fs::read_to_string(&lines).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    // Both nodes were told to reach charmrun by this host's name, not by an address.
    assert_eq!(
        kept.matches(&format!("CONVERSE_CHARMRUN={host}:")).count(),
        2,
        "{kept}"
    );
    // The banner says where the PEs went: pinned, not "+set cpuaffinity".
    assert!(o.stdout.contains("PEs pinned to cores"), "{o}");
}

#[test]
fn a_wrapper_that_exits_0_does_not_hide_a_failing_node() {
    let dir = scratch("wrapper-code");
    // Runs the program without `exec` and says all is well.
    let wrapper = script(&dir, "hide.sh", "#!/bin/sh\n\"$@\"\nexit 0\n");
    let o = run(&[
        "+p2",
        "++runscript",
        &wrapper,
        PROGRAM,
        "exit-code",
        "3",
        "+machine",
        "tcp",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.code, Some(3), "{o}");
}

#[test]
fn debug_no_pause_prints_where_a_node_crashed() {
    if !have("gdb") {
        return;
    }
    let o = run_bounded(
        charmrun().args([
            "+p2",
            "++debug-no-pause",
            PROGRAM,
            "segv",
            "+machine",
            "tcp",
        ]),
        Duration::from_secs(120),
    );
    let all = format!("{}{}", o.stdout, o.stderr);
    // As a shell reports a death by SIGSEGV, after the backtrace.
    assert_eq!(o.code, Some(139), "{o}");
    assert!(all.contains("SIGSEGV"), "{o}");
    assert!(all.contains("crash_here_for_the_debugger"), "{o}");
    // A job that does not crash runs to its end under gdb as without it.
    let o = run_bounded(
        charmrun().args([
            "+p2",
            "++debug-no-pause",
            PROGRAM,
            "hello",
            "+machine",
            "tcp",
        ]),
        Duration::from_secs(120),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
}

#[test]
fn debug_waits_for_gdb_on_every_node_then_runs() {
    if !have("gdb") || !have("gdbserver") {
        return;
    }
    let job = Running::start(
        charmrun().args(["+p2", "++debug", PROGRAM, "hello", "+machine", "tcp"]),
        Duration::from_secs(180),
    )
    .expect("start charmrun");
    // Each node's gdbserver says where it listens; the job waits meanwhile.
    let deadline = Instant::now() + Duration::from_secs(60);
    let ports = loop {
        let text = format!("{}{}", job.stdout_so_far(), job.stderr_so_far());
        let ports: Vec<String> = text
            .lines()
            .filter_map(|l| l.split("Listening on port ").nth(1))
            .filter(|p| p.trim().parse::<u16>().is_ok())
            .map(|p| p.trim().to_owned())
            .collect();
        if ports.len() == 2 || Instant::now() > deadline {
            break ports;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ports.len(), 2, "{}", job.stderr_so_far());
    assert!(
        job.stderr_so_far()
            .contains("attach from its host with: gdb"),
        "{}",
        job.stderr_so_far()
    );
    assert!(
        !job.stdout_so_far().contains("conformance hello"),
        "ran before a debugger attached"
    );
    // Attach to each node and let it run, as a person would type it.
    let gdbs: Vec<_> = ports
        .iter()
        .map(|port| {
            Command::new("gdb")
                .args(["-q", "-batch", "-ex"])
                .arg(format!("target remote :{port}"))
                .args(["-ex", "continue", PROGRAM])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start gdb")
        })
        .collect();
    let o = job.finish();
    for mut g in gdbs {
        let _ = g.kill();
        let _ = g.wait();
    }
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
}
