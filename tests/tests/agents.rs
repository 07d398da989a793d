//! Jobs started through agents (`charmrun ++agents`: one remote shell per host, which starts
//! charmrun as the host's agent; `++mpiexec` for the net layers: agents started by a batch
//! launcher) on network-namespace hosts (see `converse_tests::netns`). Needs root; without it
//! the tests say they were skipped.

use converse_tests::netns::Hosts;
use converse_tests::{alive, children_of, Running};
use std::process::Command;
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `charmrun +pN ++agents ++remote-shell SHELL ++nodelist FILE OPTS... PROGRAM SCENARIO...`.
fn agent_job(
    hosts: &Hosts,
    pes: usize,
    machines: &str,
    opts: &[&str],
    scenario: &[&str],
) -> Vec<String> {
    let mut a = vec![
        format!("+p{pes}"),
        "++agents".into(),
        "++remote-shell".into(),
    ];
    a.push(hosts.shell().display().to_string());
    a.push("++nodelist".into());
    a.push(machines.into());
    a.extend(args(opts));
    a.push(PROGRAM.into());
    a.extend(args(scenario));
    a
}

/// Every process below `root`, now.
fn descendants(root: u32) -> Vec<u32> {
    let mut all = vec![];
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for c in children_of(p) {
            all.push(c);
            todo.push(c);
        }
    }
    all
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Wait until none of `pids` is alive; those still alive after `limit`.
fn gone_within(pids: &[u32], limit: Duration) -> Vec<u32> {
    let end = Instant::now() + limit;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() >= end {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn four_hosts_by_four_nodes_through_agents_pass_the_conformance_subset() {
    let Some(hosts) = Hosts::new("a", 5) else {
        return;
    };
    let machines = hosts.machines("machines", 1..5);
    let machines = machines.display().to_string();
    let log = hosts.dir.join("shell-args.log");
    for (layer, scenario, code) in [
        ("tcp", &["hello"][..], 0),
        ("tcp", &["broadcast"], 0),
        ("tcp", &["reduce"], 0),
        ("tcp", &["fifo"], 0),
        ("tcp", &["alltoall", "20000"], 0),
        ("tcp", &["priority"], 0),
        ("tcp", &["sizes", "8388608"], 0),
        ("udp", &["reduce"], 0),
        ("tcp", &["exit-code", "5"], 5),
        ("tcp", &["mismatch"], 1),
    ] {
        let _ = std::fs::remove_file(&log);
        let mut sc = scenario.to_vec();
        sc.extend(["+machine", layer]);
        let a = agent_job(&hosts, 16, &machines, &["++verbose"], &sc);
        let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(90));
        assert_eq!(o.code, Some(code), "{layer} {scenario:?}: {o}");
        if code == 0 {
            assert_eq!(
                o.lines_with(&format!("conformance {}: ok", scenario[0])),
                1,
                "{o}"
            );
        }
        // One remote shell per host, each starting an agent, the secret on none of them.
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(logged.lines().count(), 4, "{logged}");
        assert!(logged.lines().all(|l| l.contains("++agent")), "{logged}");
        assert!(!logged.contains("CONVERSE_SECRET="), "{logged}");
        for h in 1..5 {
            assert!(
                o.stderr.contains(&format!("4 of 4 on {}", Hosts::addr(h))),
                "host {h}: {o}"
            );
        }
        assert!(o.stderr.contains("16 of 16 in all"), "{o}");
    }
}

/// Start a long job on hosts 1 and 2 (4 nodes each), wait until every node runs; the job and
/// every process under charmrun.
fn long_job(hosts: &Hosts, extra: &[&str]) -> (Running, Vec<u32>) {
    let machines = hosts.machines("machines", 1..3).display().to_string();
    let a = agent_job(
        hosts,
        8,
        &machines,
        extra,
        &["wait", "60", "+machine", "tcp"],
    );
    let mut cmd = hosts.on_host0(&converse_tests::charmrun_path(PROGRAM));
    cmd.args(&a);
    let mut job = Running::start(&mut cmd, Duration::from_secs(60)).expect("start charmrun");
    assert!(
        job.wait_for_stdout_lines("waits 60 s", 8, Duration::from_secs(30)),
        "{}\n{}",
        job.stdout_so_far(),
        job.stderr_so_far()
    );
    let all = descendants(job.pid());
    (job, all)
}

#[test]
fn killing_an_agent_ends_the_job_naming_a_node_and_its_host_and_leaves_nothing() {
    let Some(hosts) = Hosts::new("b", 3) else {
        return;
    };
    let (job, all) = long_job(&hosts, &[]);
    let agent = all
        .iter()
        .copied()
        .find(|&p| cmdline(p).contains("++agent"))
        .expect("an agent runs");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let t0 = Instant::now();
    let o = job.finish();
    assert_eq!(o.code, Some(1), "{o}");
    assert!(!o.timed_out, "{o}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{o}");
    assert!(o.stderr.contains("charmrun: lost PE "), "{o}");
    assert!(
        o.stderr.contains("its agent on 10.98.0."),
        "names the host: {o}"
    );
    assert_eq!(gone_within(&all, Duration::from_secs(5)), Vec::<u32>::new());
}

#[test]
fn killing_a_node_names_it_and_its_host() {
    let Some(hosts) = Hosts::new("c", 3) else {
        return;
    };
    let (job, all) = long_job(&hosts, &[]);
    let node = all
        .iter()
        .copied()
        .find(|&p| cmdline(p).starts_with(PROGRAM))
        .expect("a node runs");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(node as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let o = job.finish();
    assert_eq!(o.code, Some(137), "{o}");
    assert!(
        o.stderr
            .contains("was killed by signal 9 (SIGKILL) before the job ended"),
        "{o}"
    );
    // Named with the host name its node gave (the namespace's).
    assert!(o.stderr.contains(" on cw"), "{o}");
    assert_eq!(gone_within(&all, Duration::from_secs(5)), Vec::<u32>::new());
}

#[test]
fn killing_charmrun_ends_agents_and_nodes() {
    let Some(hosts) = Hosts::new("d", 3) else {
        return;
    };
    let (job, all) = long_job(&hosts, &[]);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(
        gone_within(&all, Duration::from_secs(10)),
        Vec::<u32>::new()
    );
    let o = job.finish();
    assert_eq!(o.code, None, "{o}");
}

#[test]
fn ctrl_c_and_the_time_limit_end_a_job_through_agents() {
    let Some(hosts) = Hosts::new("e", 3) else {
        return;
    };
    let (job, all) = long_job(&hosts, &[]);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.pid() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let o = job.finish();
    assert_eq!(o.code, Some(130), "{o}");
    assert!(o.stderr.contains("interrupted by signal 2"), "{o}");
    assert_eq!(gone_within(&all, Duration::from_secs(5)), Vec::<u32>::new());

    let machines = hosts.machines("machines", 1..3).display().to_string();
    let a = agent_job(
        &hosts,
        4,
        &machines,
        &["++timelimit", "2"],
        &["wait", "60", "+machine", "tcp"],
    );
    let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(30));
    assert_eq!(o.code, Some(124), "{o}");
    assert!(o.stderr.contains("++timelimit of 2 s reached"), "{o}");
}

#[test]
fn a_host_whose_remote_shell_fails_is_named_with_what_the_shell_said() {
    let Some(hosts) = Hosts::new("f", 2) else {
        return;
    };
    // 10.98.0.99 is nobody: the remote shell fails as ssh does. With ++fanout 1 the agent on
    // 10.98.0.2 starts that shell itself, and says so up the tree.
    let machines = hosts.file("machines", "10.98.0.2\n10.98.0.99\n");
    for fanout in ["32", "1"] {
        let a = agent_job(
            &hosts,
            4,
            &machines.display().to_string(),
            &["++timeout", "20", "++fanout", fanout],
            &["hello", "+machine", "tcp"],
        );
        let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(60));
        assert_eq!(o.code, Some(255), "fanout {fanout}: {o}");
        assert!(
            o.stderr
                .contains("PE 1 on 10.98.0.99 exited with code 255 before connecting to charmrun"),
            "fanout {fanout}: {o}"
        );
        assert!(
            o.stderr.contains("the remote shell for 10.98.0.99 said:"),
            "fanout {fanout}: {o}"
        );
        assert!(
            o.stderr.contains("No route to host"),
            "fanout {fanout}: {o}"
        );
    }
}

#[test]
fn a_node_that_never_connects_is_named_at_the_timeout_with_its_shells_words() {
    let Some(hosts) = Hosts::new("g", 2) else {
        return;
    };
    // A remote shell that says something and then hangs, as one stuck on a host would.
    let shell = hosts.file(
        "stuck-shell",
        "#!/bin/sh\necho \"stuck-shell: waiting for $1 forever\" >&2\nexec sleep 600\n",
    );
    let _ = Command::new("chmod").arg("+x").arg(&shell).status();
    let machines = hosts.machines("machines", 1..2);
    let mut a = args(&["+p2", "++agents", "++timeout", "2", "++remote-shell"]);
    a.push(shell.display().to_string());
    a.push("++nodelist".into());
    a.push(machines.display().to_string());
    a.extend(args(&[PROGRAM, "hello", "+machine", "tcp"]));
    let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(30));
    assert_eq!(o.code, Some(1), "{o}");
    assert!(
        o.stderr.contains("start-up timed out after 2 s: these nodes never connected: PE 0 on 10.98.0.2, PE 1 on 10.98.0.2"),
        "{o}"
    );
    assert!(
        o.stderr
            .contains("charmrun:   stuck-shell: waiting for 10.98.0.2 forever"),
        "{o}"
    );
}

#[test]
fn batch_starts_one_remote_shell_after_another() {
    let Some(hosts) = Hosts::new("h", 5) else {
        return;
    };
    let machines = hosts.machines("machines", 1..5).display().to_string();
    let a = agent_job(
        &hosts,
        8,
        &machines,
        &["++batch", "1", "++verbose"],
        &["hello", "+machine", "tcp"],
    );
    let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{o}");
    // With one shell at a time, each starts only after the previous agent connected.
    for h in 1..4 {
        let connected = o
            .stderr
            .find(&format!("agent {} connected", h - 1))
            .expect("agent connected");
        let next = o
            .stderr
            .find(&format!("on {} (pid", Hosts::addr(h + 1)))
            .expect("next shell started");
        assert!(connected < next, "host {h}: {o}");
    }
}

/// A stand-in for `mpiexec -n N CMD...` on the namespace hosts: rank r runs on host
/// `1 + r % hosts` with `PMI_RANK=r` (as MPICH's launcher sets it); exits with the first
/// non-zero code.
fn fake_mpiexec(hosts: &Hosts, spread: usize) -> std::path::PathBuf {
    let mut cases = String::new();
    for h in 0..spread {
        cases.push_str(&format!("    {h}) ns={} ;;\n", hosts.host_ns(h + 1)));
    }
    let script = format!(
        "#!/bin/bash\n[ \"$1\" = -n ] || exit 2\nn=$2; shift 2\npids=()\nfor ((r=0; r<n; r++)); do\n  case $((r % {spread})) in\n{cases}  esac\n  PMI_RANK=$r PMI_SIZE=$n ip netns exec $ns \"$@\" &\n  pids+=($!)\ndone\ncode=0\nfor p in \"${{pids[@]}}\"; do wait $p; c=$?; [ $code = 0 ] && code=$c; done\nexit $code\n"
    );
    let p = hosts.file(&format!("mpiexec-{spread}"), &script);
    let _ = Command::new("chmod").arg("+x").arg(&p).status();
    p
}

#[test]
fn mpiexec_starts_the_net_layers_through_agents_on_the_launchers_hosts() {
    let Some(hosts) = Hosts::new("i", 3) else {
        return;
    };
    // tcp and udp across two hosts; si is shared memory, so on one.
    for (layer, spread) in [("tcp", 2), ("udp", 2), ("si", 1)] {
        let launcher = fake_mpiexec(&hosts, spread);
        let mut a = args(&["+p4", "++mpiexec", "++verbose", "++remote-shell"]);
        a.push(launcher.display().to_string());
        a.extend(args(&[PROGRAM, "broadcast", "+machine", layer]));
        let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(60));
        assert_eq!(o.code, Some(0), "{layer}: {o}");
        assert_eq!(o.lines_with("conformance broadcast: ok"), 1, "{o}");
        for h in 1..=spread {
            assert!(
                o.stderr
                    .contains(&format!("connected from {}", Hosts::addr(h))),
                "{layer} host {h}: {o}"
            );
        }
    }
}

#[test]
fn a_256_node_job_across_8_hosts_starts_and_ends_cleanly() {
    let Some(hosts) = Hosts::new("j", 9) else {
        return;
    };
    let machines = hosts.machines("machines", 1..9).display().to_string();
    let a = agent_job(
        &hosts,
        256,
        &machines,
        &["++verbose", "++timeout", "60"],
        &["hello", "+machine", "tcp", "+quiet"],
    );
    let t0 = Instant::now();
    let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(120));
    let took = t0.elapsed();
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
    assert!(o.stderr.contains("256 of 256 in all"), "{o}");
    // Every node's line came through its agent and its host's remote shell, whole.
    assert_eq!(o.lines_with("hello from PE "), 256, "{o}");
    let said = |what: &str| {
        o.stderr
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or("?")
            .to_string()
    };
    eprintln!(
        "256 nodes on 8 namespace hosts through agents: {:.2} s in all; {}; {}",
        took.as_secs_f64(),
        said("node(s) connected in"),
        said("job ended with code")
    );
}

#[test]
fn batch_holds_back_remote_shells_while_one_is_stuck_with_or_without_agents() {
    let Some(hosts) = Hosts::new("k", 3) else {
        return;
    };
    let log = hosts.dir.join("batch.log");
    // The first host's shell hangs; the second's works.
    let shell = hosts.file(
        "stuck-first",
        &format!(
            "#!/bin/sh\necho \"$1\" >> {}\n[ \"$1\" = 10.98.0.2 ] && exec sleep 600\nexec {} \"$@\"\n",
            log.display(),
            hosts.shell().display()
        ),
    );
    let _ = Command::new("chmod").arg("+x").arg(&shell).status();
    let machines = hosts.machines("machines", 1..3);
    for agents in [false, true] {
        let _ = std::fs::remove_file(&log);
        let mut a = args(&["+p2", "++batch", "1", "++timeout", "2", "++remote-shell"]);
        a.push(shell.display().to_string());
        a.push("++nodelist".into());
        a.push(machines.display().to_string());
        if agents {
            a.push("++agents".into());
        }
        a.extend(args(&[PROGRAM, "hello", "+machine", "tcp"]));
        let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(30));
        assert_eq!(o.code, Some(1), "agents {agents}: {o}");
        assert!(o.stderr.contains("never connected"), "{o}");
        // The second host's shell never started: the first was still starting.
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(logged.trim(), "10.98.0.2", "agents {agents}: {logged}\n{o}");
    }
}

#[test]
fn agents_start_agents_in_a_tree_and_a_lost_one_below_is_named() {
    let Some(hosts) = Hosts::new("l", 8) else {
        return;
    };
    let machines = hosts.machines("machines", 1..8).display().to_string();
    // Seven hosts, fan-out 2: charmrun starts agents 0 and 1; agent 0 starts 2 and 3, agent 1
    // starts 4 and 5, agent 2 starts 6 (on 10.98.0.8, three levels down).
    let log = hosts.dir.join("shell-args.log");
    for scenario in [&["broadcast"][..], &["reduce"], &["exit-code", "4"]] {
        let _ = std::fs::remove_file(&log);
        let mut sc = scenario.to_vec();
        sc.extend(["+machine", "tcp"]);
        let a = agent_job(&hosts, 14, &machines, &["++fanout", "2", "++verbose"], &sc);
        let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(60));
        let code = if scenario[0] == "exit-code" { 4 } else { 0 };
        assert_eq!(o.code, Some(code), "{scenario:?}: {o}");
        assert!(o.stderr.contains("14 of 14 in all"), "{o}");
        assert!(o.stderr.contains("(it starts 3 agent(s) below it)"), "{o}");
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(logged.lines().count(), 7, "one shell per host: {logged}");
        assert!(!logged.contains("CONVERSE_SECRET="), "{logged}");
    }
    // Kill the agent on the deepest host.
    let a = agent_job(
        &hosts,
        14,
        &machines,
        &["++fanout", "2"],
        &["wait", "60", "+machine", "tcp"],
    );
    let mut cmd = hosts.on_host0(&converse_tests::charmrun_path(PROGRAM));
    cmd.args(&a);
    let mut job = Running::start(&mut cmd, Duration::from_secs(60)).expect("start charmrun");
    assert!(
        job.wait_for_stdout_lines("waits 60 s", 14, Duration::from_secs(30)),
        "{}",
        job.stderr_so_far()
    );
    let all = descendants(job.pid());
    let deepest = all.iter().copied().find(|&p| {
        let env = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
        cmdline(p).contains("++agent")
            && String::from_utf8_lossy(&env).contains("CONVERSE_AGENT=6\0")
    });
    let deepest = deepest.expect("the deepest agent runs");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(deepest as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let o = job.finish();
    assert_eq!(o.code, Some(1), "{o}");
    assert!(
        o.stderr
            .contains("its agent on 10.98.0.8 closed its connection; ending the job"),
        "{o}"
    );
    // Every process of the job is gone, those the agents started on other hosts included.
    let mut left = gone_within(&all, Duration::from_secs(10));
    left.retain(|&p| p != deepest);
    assert_eq!(left, Vec::<u32>::new());
}

#[test]
fn output_through_agents_comes_whole_and_what_nodes_start_ends_with_the_job() {
    let Some(hosts) = Hosts::new("m", 3) else {
        return;
    };
    let machines = hosts.machines("machines", 1..3).display().to_string();
    let a = agent_job(
        &hosts,
        4,
        &machines,
        &[],
        &["print", "20000", "300", "+machine", "tcp"],
    );
    let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(90));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let tail = "x".repeat(300);
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.contains("print PE"))
        .collect();
    assert_eq!(lines.len(), 4 * 20000, "{}", o.stderr);
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("print PE ") && l.ends_with(&tail) && l.len() < 340),
        "a line was spliced"
    );
    // A node's child keeps its pipe open: it ends with the job, on its host.
    let a = agent_job(&hosts, 2, &machines, &[], &["spawn", "+machine", "tcp"]);
    let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(30));
    assert_eq!(o.code, Some(0), "{o}");
    let kids: Vec<u32> = o
        .stdout
        .lines()
        .filter_map(|l| l.split(" child ").nth(1)?.trim().parse().ok())
        .collect();
    assert_eq!(kids.len(), 2, "{o}");
    assert_eq!(
        gone_within(&kids, Duration::from_secs(5)),
        Vec::<u32>::new()
    );
}

#[test]
fn the_mpi_launcher_itself_starts_the_net_layers_through_agents() {
    if !converse_tests::have_mpirun() {
        eprintln!("skipped: no mpirun on the PATH");
        return;
    }
    let launcher = std::iter::once("mpiexec".to_string())
        .chain(converse_tests::mpirun_options())
        .collect::<Vec<_>>()
        .join(" ");
    let charmrun = converse_tests::charmrun_path(PROGRAM);
    let job = |extra: &[&str], scenario: &[&str], layer: &str| {
        let mut cmd = Command::new(&charmrun);
        cmd.args(["+p4", "++mpiexec", "++remote-shell", &launcher])
            .args(extra)
            .arg(PROGRAM)
            .args(scenario)
            .args(["+machine", layer])
            .envs(converse_tests::mpirun_env());
        converse_tests::run_bounded(&mut cmd, Duration::from_secs(60))
    };
    for layer in ["tcp", "udp", "si"] {
        let o = job(&[], &["reduce"], layer);
        assert_eq!(o.code, Some(0), "{layer}: {o}");
        assert_eq!(o.lines_with("conformance reduce: ok"), 1, "{layer}: {o}");
    }
    let o = job(&[], &["exit-code", "6"], "tcp");
    assert_eq!(o.code, Some(6), "{o}");
    let o = job(&["++timelimit", "2"], &["wait", "60"], "tcp");
    assert_eq!(o.code, Some(124), "{o}");
    assert!(o.stderr.contains("++timelimit of 2 s reached"), "{o}");
}

#[test]
fn a_stopped_agent_is_noticed_by_the_hang_timeout_and_ended() {
    let Some(hosts) = Hosts::new("n", 3) else {
        return;
    };
    let (job, all) = long_job(&hosts, &["++hang-timeout", "2"]);
    let agent = all
        .iter()
        .copied()
        .find(|&p| cmdline(p).contains("++agent") && cmdline(p).starts_with('/'))
        .expect("an agent runs");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent as i32),
        nix::sys::signal::Signal::SIGSTOP,
    );
    let o = job.finish();
    assert_eq!(o.code, Some(1), "{o}");
    assert!(o.stderr.contains("stopped answering for 2 s"), "{o}");
    assert_eq!(
        gone_within(&all, Duration::from_secs(10)),
        Vec::<u32>::new()
    );
}

#[test]
fn verbose_counts_nodes_per_host_with_one_shell_per_node_too() {
    let Some(hosts) = Hosts::new("o", 3) else {
        return;
    };
    let machines = hosts.machines("machines", 1..3);
    let mut a = args(&["+p4", "++verbose", "++remote-shell"]);
    a.push(hosts.shell().display().to_string());
    a.push("++nodelist".into());
    a.push(machines.display().to_string());
    a.extend(args(&[PROGRAM, "hello", "+machine", "tcp"]));
    let o = hosts.charmrun(PROGRAM, &a, Duration::from_secs(60));
    assert_eq!(o.code, Some(0), "{o}");
    for h in 1..3 {
        assert!(
            o.stderr.contains(&format!("2 of 2 on {}", Hosts::addr(h))),
            "{o}"
        );
    }
    assert!(o.stderr.contains("4 of 4 in all"), "{o}");
}

#[test]
fn output_through_agents_is_never_dropped_while_the_reader_stalls() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let Some(hosts) = Hosts::new("p", 3) else {
        return;
    };
    let machines = hosts.machines("machines", 1..3).display().to_string();
    // 4 PEs x 3000 lines of ~120 B: far more than the pipes hold while nobody reads, held up
    // past every grace the job's end has (the nodes' and the agents').
    let a = agent_job(
        &hosts,
        4,
        &machines,
        &[],
        &["print", "3000", "100", "+machine", "tcp"],
    );
    let mut child = hosts
        .on_host0(&converse_tests::charmrun_path(PROGRAM))
        .args(&a)
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
        std::thread::sleep(Duration::from_secs(8));
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let code = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st.code(),
            Ok(None) if start.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                converse_tests::kill_tree(child.id());
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    assert_eq!(code, Some(0), "{err}");
    let lines = out.lines().filter(|l| l.starts_with("print PE ")).count();
    assert_eq!(lines, 4 * 3000, "{err}");
    assert!(out.contains("conformance print: ok"), "{err}");
}

#[test]
fn a_stopped_node_behind_an_agent_is_named_by_the_hang_timeout() {
    let Some(hosts) = Hosts::new("q", 3) else {
        return;
    };
    let (job, all) = long_job(&hosts, &["++hang-timeout", "2"]);
    let node = all
        .iter()
        .copied()
        .find(|&p| cmdline(p).starts_with(PROGRAM))
        .expect("a node runs");
    let env = std::fs::read(format!("/proc/{node}/environ")).unwrap_or_default();
    let env = String::from_utf8_lossy(&env).into_owned();
    let pe = env
        .split('\0')
        .find_map(|v| v.strip_prefix("CONVERSE_NODE="))
        .expect("its node number")
        .to_string();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(node as i32),
        nix::sys::signal::Signal::SIGSTOP,
    );
    let o = job.finish();
    assert_eq!(o.code, Some(1), "{o}");
    assert!(
        o.stderr.contains(&format!("PE {pe} on cw")),
        "names the stopped node: {o}"
    );
    assert!(o.stderr.contains("stopped answering for 2 s"), "{o}");
    assert_eq!(
        gone_within(&all, Duration::from_secs(10)),
        Vec::<u32>::new()
    );
}
