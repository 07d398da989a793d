//! Jobs across hosts made of network namespaces (`converse_tests::hosts`). Needs root (to
//! create namespaces); without it the tests say they were skipped.

use converse_tests::hosts::Hosts;
use converse_tests::run_bounded;
use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_job_spans_hosts_from_a_machine_file_round_robin() {
    let Some(hosts) = Hosts::new("a") else { return };
    let shell = hosts.shell();
    let machines = hosts.file("machines", "10.99.0.2\n10.99.0.3\n");
    let mut a = args(&["+p4", "++verbose", "++remote-shell"]);
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(machines.display().to_string());
    a.extend(args(&[PROGRAM, "alltoall", "100000", "+machine", "tcp"]));
    let o = hosts.charmrun(PROGRAM, &a);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance alltoall: ok"), 1, "{o}");
    // Round-robin in file order: PEs 0 and 2 on the first host, 1 and 3 on the second.
    for (pe, host) in [
        (0, "10.99.0.2"),
        (1, "10.99.0.3"),
        (2, "10.99.0.2"),
        (3, "10.99.0.3"),
    ] {
        assert!(
            o.stderr.contains(&format!("PE {pe} connected from {host}")),
            "PE {pe} on {host}\n{o}"
        );
    }
}

#[test]
fn a_charm_nodelist_places_nodes_and_the_suite_runs_across_hosts() {
    let Some(hosts) = Hosts::new("b") else { return };
    let shell = hosts.shell();
    let nodelist = hosts.file(
        "nodelist",
        "# two hosts, and one in another group that must not be used\ngroup main\n  host 10.99.0.3 ++cpus 2\n  host 10.99.0.2\ngroup spare\n  host 10.99.0.1\n",
    );
    for scenario in [
        &["hello"][..],
        &["broadcast"],
        &["reduce"],
        &["fifo"],
        &["sizes", "8388608"],
    ] {
        let mut a = args(&["+p3", "++verbose", "++remote-shell"]);
        a.push(shell.display().to_string());
        a.push("++nodelist".into());
        a.push(nodelist.display().to_string());
        a.push(PROGRAM.into());
        a.extend(args(scenario));
        a.extend(args(&["+machine", "tcp"]));
        let o = hosts.charmrun(PROGRAM, &a);
        assert_eq!(o.code, Some(0), "{scenario:?}: {o}");
        assert_eq!(
            o.lines_with(&format!("conformance {}: ok", scenario[0])),
            1,
            "{o}"
        );
        // `++cpus 2`: the first host takes two processes in a row, as in Charm++.
        assert!(o.stderr.contains("PE 0 connected from 10.99.0.3"), "{o}");
        assert!(o.stderr.contains("PE 1 connected from 10.99.0.3"), "{o}");
        assert!(o.stderr.contains("PE 2 connected from 10.99.0.2"), "{o}");
    }
}

#[test]
fn a_host_named_localhost_next_to_remote_ones_gets_a_routable_address() {
    let Some(hosts) = Hosts::new("d") else { return };
    let shell = hosts.shell();
    // "localhost" is charmrun's own host (10.99.0.1); its node must listen where the node on
    // 10.99.0.2 can reach it, not on 127.0.0.1.
    let machines = hosts.file("machines", "localhost\n10.99.0.2\n");
    let mut a = args(&["+p2", "++verbose", "++remote-shell"]);
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(machines.display().to_string());
    a.extend(args(&[PROGRAM, "alltoall", "20000", "+machine", "tcp"]));
    let o = hosts.charmrun(PROGRAM, &a);
    assert_eq!(o.code, Some(0), "{o}");
    assert!(o.stderr.contains("PE 0 connected from 10.99.0.1"), "{o}");
    assert_eq!(o.lines_with("conformance alltoall: ok"), 1, "{o}");
}

#[test]
fn the_job_secret_is_not_on_the_remote_command_line() {
    let Some(hosts) = Hosts::new("e") else { return };
    let shell = hosts.shell();
    let machines = hosts.file("machines", "10.99.0.2\n");
    let mut a = args(&["+p1", "++remote-shell"]);
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(machines.display().to_string());
    a.extend(args(&[PROGRAM, "hello", "+machine", "tcp"]));
    let o = hosts.charmrun(PROGRAM, &a);
    assert_eq!(o.code, Some(0), "{o}");
    let logged = std::fs::read_to_string(hosts.dir.join("shell-args.log")).unwrap_or_default();
    assert!(
        logged.contains("CONVERSE_NODE=0"),
        "the log shows the command: {logged}"
    );
    assert!(
        !logged.contains("CONVERSE_SECRET="),
        "secret on the command line: {logged}"
    );
}

#[test]
fn an_unreachable_host_is_one_clear_error() {
    let Some(hosts) = Hosts::new("c") else { return };
    let shell = hosts.shell();
    // 10.99.0.9 is on the subnet but nobody is there: the remote shell cannot reach it.
    let machines = hosts.file("machines", "10.99.0.2\n10.99.0.9\n");
    let mut a = args(&["+p2", "++timeout", "20", "++remote-shell"]);
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(machines.display().to_string());
    a.extend(args(&[PROGRAM, "hello", "+machine", "tcp"]));
    let o = hosts.charmrun(PROGRAM, &a);
    assert_ne!(o.code, Some(0), "{o}");
    assert!(!o.timed_out, "{o}");
    assert!(
        o.stderr
            .contains("PE 1 on 10.99.0.9 exited with code 255 before connecting to charmrun"),
        "{o}"
    );
}

#[test]
fn the_si_layer_refuses_a_job_that_spans_hosts() {
    let Some(hosts) = Hosts::new("f") else { return };
    let shell = hosts.shell();
    let machines = hosts.file("machines", "10.99.0.2\n10.99.0.3\n");
    let mut a = args(&["+p2", "++remote-shell"]);
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(machines.display().to_string());
    a.extend(args(&[PROGRAM, "hello", "+machine", "si"]));
    let o = hosts.charmrun(PROGRAM, &a);
    assert_ne!(o.code, Some(0), "{o}");
    assert!(!o.timed_out, "{o}");
    assert!(
        o.stderr
            .contains("the si layer is shared memory on one host, but this job spans hosts"),
        "{o}"
    );
}

const TBON: &str = env!("CARGO_BIN_EXE_tbon");
const TBON_CREATE: &str = env!("CARGO_BIN_EXE_tbon_create");

#[test]
fn a_tree_overlay_follows_the_hosts_its_topology_file_names() {
    let Some(hosts) = Hosts::new("g") else { return };
    let shell = hosts.shell();
    let machines = hosts.file("machines", "10.99.0.2\n10.99.0.3\n");
    // Nodes take their namespace's name as host name: h1 is 10.99.0.2, h2 is 10.99.0.3.
    let (h1, h2) = (hosts.host_ns(1), hosts.host_ns(2));
    let topo = hosts.file(
        "tree.top",
        &format!("{h1}:0 => {h2}:0 {h1}:1 ;\n{h2}:0 => {h2}:1 {h1}:2 ;\n{h1}:1 => {h2}:2 ;\n"),
    );
    // charmrun on host 0 runs `tbon SCENARIO file:TOPOLOGY` on the machines.
    let run = |scenario: &str, pes: usize, topo: &std::path::Path| {
        let mut a = args(&[&format!("+p{pes}"), "++remote-shell"]);
        a.push(shell.display().to_string());
        a.push("++nodelist".into());
        a.push(machines.display().to_string());
        a.push(TBON.into());
        a.push(scenario.into());
        a.push(format!("file:{}", topo.display()));
        a.extend(args(&["+machine", "tcp", "+quiet"]));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &hosts.host_ns(0)])
            .arg(converse_tests::charmrun_path(TBON))
            .args(&a);
        run_bounded(&mut cmd, Duration::from_secs(90))
    };
    for (scenario, pes) in [("reduce", 6), ("subset", 6), ("topology", 7)] {
        let o = run(scenario, pes, &topo);
        assert_eq!(o.code, Some(0), "{scenario}: {o}");
        assert_eq!(o.lines_with(&format!("tbon {scenario}: ok")), 1, "{o}");
    }
    // A topology naming a host the job is not on is refused, naming it.
    let stranger = hosts.file("stranger.top", &format!("{h1}:0 => elsewhere:0 ;\n"));
    let o = run("reduce", 2, &stranger);
    assert_eq!(o.code, Some(3), "{o}");
    assert!(
        o.stderr
            .contains("elsewhere:0 is on host elsewhere, which has no PE"),
        "{o}"
    );
}

#[test]
fn a_front_end_makes_its_network_on_the_hosts_of_its_topology() {
    let Some(hosts) = Hosts::new("h") else { return };
    let shell = hosts.shell();
    // The front-end runs on host 0; internal processes on 10.99.0.2, back-ends on both.
    let topo = hosts.file(
        "tree.top",
        "localhost:0 => 10.99.0.2:0 10.99.0.2:1 ;\n10.99.0.2:0 => 10.99.0.3:0 10.99.0.3:1 ;\n10.99.0.2:1 => 10.99.0.2:2 10.99.0.3:2 ;\n",
    );
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &hosts.host_ns(0), TBON_CREATE, "teardown"])
        .arg(format!("file:{}", topo.display()))
        .args(["3", "tcp"])
        .arg(&shell);
    let o = run_bounded(&mut cmd, Duration::from_secs(120));
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("tbon_create: ok"), 1, "{o}");
    let logged = std::fs::read_to_string(hosts.dir.join("shell-args.log")).unwrap_or_default();
    for host in ["10.99.0.2", "10.99.0.3"] {
        assert!(logged.contains(host), "nothing started on {host}: {logged}");
    }
}
