//! One job over two transports (`+machine si+tcp`, `si+udp`, and with the fabric features
//! `si+ofi+tcp`, `si+ucx+tcp`) on hosts made of network namespaces (`converse_tests::hosts`):
//! shared memory between the processes of a host, the network between hosts, chosen per peer;
//! `+stats` shows which pairs used what. Needs root (to create namespaces); without it the
//! tests say they were skipped.

use converse_tests::hosts::Hosts;
use converse_tests::Outcome;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `charmrun +pN ++verbose ++remote-shell SHELL ++nodelist MACHINES conformance SCENARIO
/// +machine LAYER +stats EXTRA`, on host 0.
fn job(hosts: &Hosts, machines: &str, pes: usize, scenario: &[&str], layer: &str) -> Outcome {
    job_with(hosts, machines, pes, scenario, layer, &[])
}

fn job_with(
    hosts: &Hosts,
    machines: &str,
    pes: usize,
    scenario: &[&str],
    layer: &str,
    extra: &[&str],
) -> Outcome {
    let shell = hosts.shell();
    let file = hosts.file("machines", machines);
    let mut a = vec![
        format!("+p{pes}"),
        "++verbose".into(),
        "++remote-shell".into(),
    ];
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(file.display().to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a.push(PROGRAM.into());
    a.extend(args(scenario));
    a.extend(args(&["+machine", layer, "+stats"]));
    hosts.charmrun(PROGRAM, &a)
}

/// Node `node`'s counters from its `+stats` line: (peers, messages) over shared memory, then
/// over the network.
fn counters(o: &Outcome, node: usize, layer: &str) -> ((usize, u64), (usize, u64)) {
    let head = format!("converse stats: node {node} ({layer}):");
    let line = o
        .stderr
        .lines()
        .find_map(|l| l.split_once(&head).map(|(_, rest)| rest.to_owned()))
        .unwrap_or_else(|| panic!("no counters of node {node}\n{o}"));
    // " multi.shm_peers=1 multi.net_peers=2 multi.shm_messages=12 ..."
    let field = |name: &str| -> u64 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
    };
    (
        (
            field("multi.shm_peers") as usize,
            field("multi.shm_messages"),
        ),
        (
            field("multi.net_peers") as usize,
            field("multi.net_messages"),
        ),
    )
}

/// The job tag charmrun's verbose output names.
fn tag(stderr: &str) -> String {
    stderr
        .split("job tag ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no job tag in: {stderr}"))
}

/// This job's files in /dev/shm (one file system for every namespace host here).
fn shm_files(o: &Outcome) -> Vec<String> {
    let prefix = charmrun::protocol::shm_prefix(&tag(&o.stderr));
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Two hosts, two processes each: round-robin puts nodes 0 and 2 on 10.99.0.2, 1 and 3 on
/// 10.99.0.3.
const TWO_BY_TWO: &str = "10.99.0.2\n10.99.0.3\n";

/// The conformance subset on `layer` over two hosts of two processes, each node's counters
/// saying that its one same-host peer got shared memory and its two others the network.
fn suite_on_two_hosts(tag: &str, layer: &str, net: &str) {
    let Some(hosts) = Hosts::new(tag) else { return };
    for scenario in [
        &["hello"][..],
        &["fifo"],
        &["broadcast"],
        &["reduce"],
        &["priority"],
        &["alltoall", "200000"],
        &["sizes", "8388608"],
        &["exit-code", "5"],
        &["idle"],
    ] {
        let o = job(&hosts, TWO_BY_TWO, 4, scenario, layer);
        let want = if scenario[0] == "exit-code" { 5 } else { 0 };
        if scenario[0] == "idle" {
            // PE 0's process over an idle second: blocking in one wait for both transports
            // costs next to nothing (the runtime's own check allows a quarter).
            let ms: f64 = o
                .stdout
                .split("process CPU ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no CPU figure\n{o}"));
            eprintln!("{layer} idle: {ms} ms of CPU in an idle second");
            assert!(ms < 100.0, "{o}");
        }
        assert_eq!(o.code, Some(want), "{scenario:?}: {o}");
        if scenario[0] != "exit-code" {
            assert_eq!(
                o.lines_with(&format!("conformance {}: ok", scenario[0])),
                1,
                "{o}"
            );
        }
        assert_eq!(
            o.lines_with(&format!(
                "layer {layer}: 4 PEs on 4 nodes (node 0: si to 1 peer, {net} to 2 peers)"
            )),
            1,
            "{o}"
        );
        for node in 0..4 {
            let ((si_peers, si_msgs), (net_peers, net_msgs)) = counters(&o, node, layer);
            assert_eq!((si_peers, net_peers), (1, 2), "node {node}\n{o}");
            if scenario[0] == "alltoall" {
                // Every node sends to every other: both transports carried traffic.
                assert!(si_msgs > 1000 && net_msgs > 1000, "node {node}\n{o}");
            }
        }
        assert_eq!(shm_files(&o), Vec::<String>::new(), "{o}");
    }
}

#[test]
fn si_tcp_on_two_hosts_of_two_processes_uses_shared_memory_inside_a_host_only() {
    suite_on_two_hosts("m", "si+tcp", "tcp");
}

#[test]
fn si_udp_on_two_hosts_of_two_processes_uses_shared_memory_inside_a_host_only() {
    suite_on_two_hosts("n", "si+udp", "udp");
}

/// The composites this test runs across hosts: TCP's and UDP's, and those over the fabric
/// layers compiled in, on the transport they run over Ethernet here.
fn composites() -> Vec<&'static str> {
    let mut v = vec!["si+tcp", "si+udp"];
    if cfg!(feature = "ofi") {
        v.push("si+ofi+tcp");
    }
    if cfg!(feature = "ucx") {
        v.push("si+ucx+tcp");
    }
    v
}

#[cfg(feature = "ofi")]
#[test]
fn si_ofi_tcp_on_two_hosts_of_two_processes_uses_shared_memory_inside_a_host_only() {
    suite_on_two_hosts("mo", "si+ofi+tcp", "ofi+tcp");
}

#[cfg(feature = "ucx")]
#[test]
fn si_ucx_tcp_on_two_hosts_of_two_processes_uses_shared_memory_inside_a_host_only() {
    suite_on_two_hosts("mu", "si+ucx+tcp", "ucx+tcp");
}

#[test]
fn every_node_on_one_host_is_all_shared_memory_and_each_on_its_own_all_network() {
    let Some(hosts) = Hosts::new("o") else { return };
    let o = job(&hosts, "10.99.0.2\n", 4, &["alltoall", "100000"], "si+tcp");
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance alltoall: ok"), 1, "{o}");
    assert_eq!(
        o.lines_with("(node 0: si to 3 peers, tcp to no peer)"),
        1,
        "{o}"
    );
    for node in 0..4 {
        let ((si_peers, si_msgs), (net_peers, net_msgs)) = counters(&o, node, "si+tcp");
        assert_eq!(
            (si_peers, net_peers, net_msgs),
            (3, 0, 0),
            "node {node}\n{o}"
        );
        assert!(si_msgs > 1000, "node {node}\n{o}");
    }
    assert_eq!(shm_files(&o), Vec::<String>::new(), "{o}");

    // 10.99.0.1 is charmrun's own host: three processes on three hosts.
    let o = job(
        &hosts,
        "10.99.0.1\n10.99.0.2\n10.99.0.3\n",
        3,
        &["alltoall", "100000"],
        "si+udp",
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.lines_with("(node 0: si to no peer, udp to 2 peers)"),
        1,
        "{o}"
    );
    for node in 0..3 {
        let ((si_peers, si_msgs), (net_peers, net_msgs)) = counters(&o, node, "si+udp");
        assert_eq!(
            (si_peers, si_msgs, net_peers),
            (0, 0, 2),
            "node {node}\n{o}"
        );
        assert!(net_msgs > 1000, "node {node}\n{o}");
    }
    assert_eq!(shm_files(&o), Vec::<String>::new(), "{o}");
}

#[test]
fn several_pes_per_process_run_over_both_transports() {
    let Some(hosts) = Hosts::new("p") else { return };
    for layer in composites() {
        for scenario in [&["alltoall", "100000"][..], &["node"], &["broadcast"]] {
            let o = job_with(&hosts, TWO_BY_TWO, 8, scenario, layer, &["++ppn", "2"]);
            assert_eq!(o.code, Some(0), "{layer} {scenario:?}: {o}");
            assert_eq!(
                o.lines_with(&format!("conformance {}: ok", scenario[0])),
                1,
                "{o}"
            );
            for node in 0..4 {
                let ((si_peers, _), (net_peers, _)) = counters(&o, node, layer);
                assert_eq!((si_peers, net_peers), (1, 2), "node {node}\n{o}");
            }
        }
    }
}

#[test]
fn a_process_dying_on_either_host_ends_the_job_naming_it_and_leaves_no_shared_memory() {
    let Some(hosts) = Hosts::new("q") else { return };
    // The last PE calls process::exit(3): with 4 PEs it is on the second host (10.99.0.3),
    // with 3 on the first (10.99.0.2).
    let runs = composites()
        .into_iter()
        .flat_map(|l| [(l, 4, hosts.host_ns(2)), (l, 3, hosts.host_ns(1))]);
    for (layer, pes, host) in runs {
        let o = job(&hosts, TWO_BY_TWO, pes, &["proc-exit"], layer);
        assert_eq!(o.code, Some(3), "{layer} +p{pes}: {o}");
        assert!(!o.timed_out, "{o}");
        assert!(
            o.stderr.contains(&format!("PE {} on {host}", pes - 1)),
            "{layer} +p{pes}: {o}"
        );
        assert!(
            o.stderr.contains("exited with code 3 before the job ended"),
            "{o}"
        );
        assert_eq!(shm_files(&o), Vec::<String>::new(), "{o}");
    }
}

#[test]
fn in_report_mode_a_death_on_either_transport_is_survived_and_leaves_no_shared_memory() {
    let Some(hosts) = Hosts::new("v") else { return };
    // PE 1 is PE 0's same-host peer (shared memory), PE 3 is on the other host (network).
    let runs = composites().into_iter().flat_map(|l| [(l, "1"), (l, "3")]);
    for (layer, victim) in runs {
        let o = job_with(
            &hosts,
            TWO_BY_TWO,
            4,
            &["survive", victim, "kill", "+set", "faults=report"],
            layer,
            &[],
        );
        assert_eq!(o.code, Some(0), "{layer} victim {victim}: {o}");
        assert_eq!(o.lines_with("conformance survive: ok"), 1, "{o}");
        let told = format!("told node {victim} died: ");
        assert_eq!(o.lines_with(&told), 3, "every survivor told once: {o}");
        assert!(o.stderr.contains("the job goes on without it"), "{o}");
        assert_eq!(shm_files(&o), Vec::<String>::new(), "{o}");
    }
}

#[test]
fn charmrun_without_machine_runs_si_tcp_and_says_so() {
    let Some(hosts) = Hosts::new("r") else { return };
    let shell = hosts.shell();
    let file = hosts.file("machines", TWO_BY_TWO);
    let mut a = args(&["+p4", "++remote-shell"]);
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(file.display().to_string());
    a.extend(args(&[PROGRAM, "hello"]));
    let o = hosts.charmrun(PROGRAM, &a);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.lines_with("layer si+tcp: 4 PEs on 4 nodes (node 0: si to 1 peer, tcp to 2 peers)"),
        1,
        "{o}"
    );
}
