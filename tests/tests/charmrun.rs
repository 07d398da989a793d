//! charmrun: start-up, exit codes, crashes, time limits, strangers, bad input — on real
//! multi-process jobs over the TCP layer (its output: `charmrun_output.rs`). Every job is
//! bounded in time and its process group killed at the end.

use converse_tests::{
    alive, node_of, run_bounded, scratch, script, wait_for_children, Launcher, Outcome, Running,
};
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

fn charmrun() -> Command {
    Command::new(converse_tests::charmrun_path(PROGRAM))
}

fn tcp(opts: &[&str]) -> Launcher {
    Launcher::Charmrun {
        machine: "tcp",
        opts: opts.iter().map(|s| s.to_string()).collect(),
    }
}

fn limit() -> Duration {
    Duration::from_secs(60)
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

#[test]
fn exit_code_of_a_node_that_calls_process_exit_reaches_charmrun() {
    let o = tcp(&[]).run(PROGRAM, 4, &["proc-exit"], limit());
    assert_eq!(o.code, Some(3), "{o}");
    assert!(o.stderr.contains(&format!("PE 3 on {}", hostname())), "{o}");
    assert!(
        o.stderr.contains("exited with code 3 before the job ended"),
        "{o}"
    );
}

#[test]
fn a_node_killed_mid_job_ends_the_job_with_no_orphans() {
    let mut job =
        Running::start(&mut tcp(&[]).command(PROGRAM, 4, &["wait", "30"]), limit()).expect("start");
    let charmrun_pid = job.pid();
    // Wait until all four nodes run their start function.
    let nodes = wait_for_children(charmrun_pid, 4, Duration::from_secs(20));
    assert_eq!(nodes.len(), 4, "nodes: {nodes:?}\n{}", job.stderr_so_far());
    // Every PE is past start-up and waiting once it has said so.
    assert!(
        job.wait_for_stdout_lines("conformance wait: PE", 4, Duration::from_secs(20)),
        "{}",
        job.stderr_so_far()
    );
    let victim = nodes[2];
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let started = Instant::now();
    let o = job.finish();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}\n{o}",
        started.elapsed()
    );
    assert!(!o.timed_out, "{o}");
    assert_ne!(o.code, Some(0), "{o}");
    assert!(o.stderr.contains("was killed by signal 9 (SIGKILL)"), "{o}");
    assert!(o.stderr.contains("ending the job"), "{o}");
    for pid in nodes {
        assert!(!alive(pid), "node process {pid} survived\n{o}");
    }
}

#[test]
fn a_hung_node_is_killed_by_the_time_limit() {
    let start = Instant::now();
    let job = Running::start(
        &mut tcp(&["++timelimit", "3"]).command(PROGRAM, 3, &["hang"]),
        limit(),
    )
    .expect("start");
    let charmrun_pid = job.pid();
    let nodes = wait_for_children(charmrun_pid, 3, Duration::from_secs(10));
    let o = job.finish();
    assert!(!o.timed_out, "{o}");
    assert_eq!(o.code, Some(124), "{o}");
    assert!(o.stderr.contains("++timelimit of 3 s reached"), "{o}");
    assert!(start.elapsed() < Duration::from_secs(15), "{o}");
    assert_eq!(nodes.len(), 3, "{o}");
    for pid in nodes {
        assert!(
            !alive(pid),
            "node process {pid} survived the time limit\n{o}"
        );
    }
}

#[test]
fn a_node_that_never_connects_ends_start_up_naming_it() {
    // A "program" that never connects back: a shell script that just sleeps.
    let dir = std::env::temp_dir().join(format!("charmrun-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let script = dir.join("silent.sh");
    std::fs::write(&script, "#!/bin/sh\nsleep 30\n").expect("write script");
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .expect("chmod");
    let o = run_bounded(
        charmrun().args(["+p2", "++timeout", "1"]).arg(&script),
        limit(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.code, Some(1), "{o}");
    assert!(o.stderr.contains("start-up timed out after 1 s"), "{o}");
    // One name per host: the one its nodes give it.
    let host = hostname();
    assert!(
        o.stderr
            .contains(&format!("PE 0 on {host}, PE 1 on {host}")),
        "{o}"
    );
}

/// charmrun's control port, from its `++verbose` output.
fn control_port(job: &mut Running) -> u16 {
    assert!(
        job.wait_for_stderr("control port ", Duration::from_secs(10)),
        "{}",
        job.stderr_so_far()
    );
    job.stderr_so_far()
        .split("control port ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|p| p.trim().parse().ok())
        .expect("port in verbose output")
}

#[test]
fn a_stranger_without_the_secret_is_refused_and_the_job_is_unaffected() {
    let mut job = Running::start(
        &mut tcp(&["++verbose"]).command(PROGRAM, 3, &["wait", "2"]),
        limit(),
    )
    .expect("start");
    let port = control_port(&mut job);
    // A stranger with a well-formed introduction but the wrong secret, and one with garbage.
    let mut hello = Vec::new();
    let body = charmrun::protocol::Hello {
        secret: [0; 16],
        node: 0,
        pid: 1,
        host: "evil".into(),
        info: b"127.0.0.1:1".to_vec(),
    }
    .encode();
    charmrun::protocol::write_frame(&mut hello, charmrun::protocol::Kind::Hello, &body)
        .expect("encode");
    for bytes in [hello, b"GET / HTTP/1.0\r\n\r\n".to_vec()] {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(&bytes);
        }
    }
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance wait: ok"), 1, "{o}");
    assert!(
        o.stderr.contains("refused a connection from 127.0.0.1"),
        "{o}"
    );
    assert!(o.stderr.contains("wrong job secret"), "{o}");
}

/// Strangers by the thousand at charmrun's control port, each trickling a byte a second (a
/// per-read timeout never fired for them, and each had a thread of its own, without bound)
/// while the job starts and runs: the job ends well, and charmrun never holds more than its
/// bound of introductions (2 × nodes + 64) and their threads.
#[test]
fn a_flood_of_trickling_strangers_at_the_control_port_harms_nothing() {
    let mut job = Running::start(
        &mut tcp(&["++verbose"]).command(PROGRAM, 4, &["wait", "4"]),
        limit(),
    )
    .expect("start");
    let port = control_port(&mut job);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut open = Vec::new();
            let until = Instant::now() + Duration::from_secs(8);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                if open.len() < 1500 {
                    if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                        open.push(s);
                    }
                }
                // A byte now and then from each: the 4-byte length is never complete in time.
                for s in open.iter_mut().step_by(7) {
                    let _ = s.write_all(&[1]);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            open.len()
        })
    };
    let threads = |pid: u32| -> usize {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    };
    let mut most = 0;
    while alive(job.pid()) && !flood.is_finished() {
        most = most.max(threads(job.pid()));
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let strangers = flood.join().unwrap_or(0);
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance wait: ok"), 1, "{o}");
    assert!(strangers >= 500, "only {strangers} strangers connected");
    // The introductions' bound (2 × 4 + 64), charmrun's own threads (output readers, ...).
    assert!(
        most < 72 + 40,
        "charmrun ran {most} threads with {strangers} strangers"
    );
}

#[test]
fn a_stranger_at_a_nodes_own_port_is_refused_and_the_job_is_unaffected() {
    let mut job = Running::start(
        &mut tcp(&["++verbose"]).command(PROGRAM, 2, &["wait", "2"]),
        limit(),
    )
    .expect("start");
    assert!(
        job.wait_for_stderr("PE 1 connected", Duration::from_secs(10)),
        "{}",
        job.stderr_so_far()
    );
    let err = job.stderr_so_far();
    let addr: std::net::SocketAddr = err
        .lines()
        .find(|l| l.contains("PE 1 connected"))
        .and_then(|l| l.split("info ").nth(1))
        .and_then(|a| a.trim_end_matches(')').parse().ok())
        .expect("node address in verbose output");
    // Wrong secret claiming to be node 0, garbage, and a silent connection.
    let mut intro = vec![0u8; 16];
    intro.extend_from_slice(&0u32.to_le_bytes());
    let mut silent = None;
    for bytes in [
        intro,
        b"\x00\x01garbage garbage garbage".to_vec(),
        Vec::new(),
    ] {
        // The node is waiting: its listener is open, so each stranger does reach it.
        let mut s = std::net::TcpStream::connect(addr).expect("connect to the node's port");
        let _ = s.write_all(&bytes);
        if bytes.is_empty() {
            silent = Some(s);
        }
    }
    let o = job.finish();
    drop(silent);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance wait: ok"), 1, "{o}");
}

#[test]
fn sixty_four_nodes_start_in_one_go() {
    let start = Instant::now();
    let o = tcp(&["++verbose"]).run(PROGRAM, 64, &["hello"], Duration::from_secs(120));
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.stdout
            .lines()
            .filter(|l| l.starts_with("hello from PE"))
            .count(),
        64,
        "{o}"
    );
    assert!(o.stderr.contains("all 64 node(s) connected"), "{o}");
    eprintln!("+p 64 hello took {:?}", start.elapsed());
}

#[test]
fn bad_input_is_one_clear_line_and_non_zero() {
    let dir = std::env::temp_dir().join(format!("charmrun-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let nodelist = dir.join("nodelist");
    std::fs::write(&nodelist, "group main\n  host a\n  hots b\n").expect("write");
    let not_exec = dir.join("not-exec");
    std::fs::write(&not_exec, "x").expect("write");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["+p2".into(), "/nonexistent/program".into()],
            "/nonexistent/program",
        ),
        (
            vec!["+p2".into(), not_exec.display().to_string()],
            "is not executable",
        ),
        (vec!["+p0".into(), PROGRAM.into()], "+p wants a number"),
        (
            vec!["++frobnicate".into(), PROGRAM.into()],
            "unknown option '++frobnicate'",
        ),
        (vec!["+p2".into()], "no program"),
        (
            vec![
                "+p2".into(),
                "++nodelist".into(),
                "/nonexistent/nodelist".into(),
                PROGRAM.into(),
            ],
            "cannot read nodelist",
        ),
        (
            vec![
                "+p2".into(),
                "++nodelist".into(),
                nodelist.display().to_string(),
                PROGRAM.into(),
            ],
            ":3: expected 'group NAME' or 'host NAME ...', found 'hots'",
        ),
        (
            vec![
                "+p2".into(),
                "++nodelist".into(),
                machine_file(&dir, "no-such-host.invalid"),
                PROGRAM.into(),
                "hello".into(),
            ],
            "unreachable",
        ),
    ];
    for (args, want) in cases {
        let o = run_bounded(charmrun().args(&args), limit());
        check_one_line_error(&o, want, &args);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn machine_file(dir: &std::path::Path, host: &str) -> String {
    let p = dir.join(format!("machines-{host}"));
    let _ = std::fs::write(&p, format!("{host}\n"));
    p.display().to_string()
}

fn check_one_line_error(o: &Outcome, want: &str, args: &[String]) {
    assert!(matches!(o.code, Some(c) if c != 0), "{args:?}: {o}");
    assert!(o.stderr.contains(want), "{args:?}: wanted {want:?}\n{o}");
    assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {o}");
    assert!(!o.stderr.contains("panicked"), "{args:?}: {o}");
}

#[test]
fn ctrl_c_on_charmrun_ends_the_job_cleanly() {
    let mut job =
        Running::start(&mut tcp(&[]).command(PROGRAM, 3, &["wait", "30"]), limit()).expect("start");
    let charmrun_pid = job.pid();
    let nodes = wait_for_children(charmrun_pid, 3, Duration::from_secs(10));
    assert_eq!(nodes.len(), 3);
    // Every PE is past start-up and waiting once it has said so.
    assert!(
        job.wait_for_stdout_lines("conformance wait: PE", 3, Duration::from_secs(20)),
        "{}",
        job.stderr_so_far()
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(charmrun_pid as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let o = job.finish();
    assert!(!o.timed_out, "{o}");
    assert_eq!(o.code, Some(130), "{o}");
    assert!(
        o.stderr.contains("interrupted by signal 2; ending the job"),
        "{o}"
    );
    for pid in nodes {
        assert!(!alive(pid), "node process {pid} survived Ctrl-C\n{o}");
    }
}

#[test]
fn what_a_node_started_ends_when_charmrun_is_killed() {
    let dir = scratch("killed");
    // The node program: leave a child behind (its pid in DIR), then become the node.
    let wrap = script(
        &dir,
        "wrap.sh",
        &format!(
            "#!/bin/sh\nsleep 300 &\necho $! > {0}/child.$$\nexec {PROGRAM} \"$@\"\n",
            dir.display()
        ),
    );
    let mut cmd = charmrun();
    cmd.args(["+p3", &wrap, "wait", "30", "+machine", "tcp"]);
    let mut job = Running::start(&mut cmd, limit()).expect("start");
    assert!(
        job.wait_for_stdout_lines("conformance wait: PE", 3, Duration::from_secs(20)),
        "{}",
        job.stderr_so_far()
    );
    // (node, its child): the files are `child.NODE`, holding the child's pid.
    let kids: Vec<(u32, u32)> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let node = path.extension()?.to_str()?.parse().ok()?;
            let kid = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
            Some((node, kid))
        })
        .collect();
    assert_eq!(kids.len(), 3, "{}", job.stderr_so_far());
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    // Before `finish`, which kills what is left of the job's tree, nodes included.
    let deadline = Instant::now() + Duration::from_secs(5);
    while kids.iter().any(|&(_, k)| alive(k)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let nodes_alive: Vec<bool> = kids.iter().map(|&(n, _)| alive(n)).collect();
    let o = job.finish();
    let _ = std::fs::remove_dir_all(&dir);
    for ((node, k), node_alive) in kids.into_iter().zip(nodes_alive) {
        let node_too = if node_alive { "too" } else { "not" };
        assert!(
            !alive(k),
            "process {k} that node {node} started survived charmrun's death (the node {node_too})\n{o}"
        );
    }
}

#[test]
fn a_remote_shell_argument_quoted_with_a_space_stays_one_word() {
    let dir = scratch("shell");
    // A "remote shell" that insists on its first argument being one word with a space, then
    // runs the command here (the secret still comes on its standard input).
    let shell = script(
        &dir,
        "fake-ssh",
        "#!/bin/sh\n[ \"$1\" = 'an option with spaces' ] || { echo \"fake-ssh got '$1'\" >&2; exit 97; }\nexec sh -c \"$3\"\n",
    );
    let nodelist = dir.join("nodelist");
    std::fs::write(&nodelist, "localhost\n").expect("write nodelist");
    let nodelist = nodelist.display().to_string();
    let remote_shell = format!("{shell} 'an option with spaces'");
    let o = tcp(&["++nodelist", &nodelist, "++remote-shell", &remote_shell]).run(
        PROGRAM,
        2,
        &["hello"],
        limit(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance hello: ok"), 1, "{o}");
}

#[test]
fn several_pes_on_the_local_layer_are_refused_at_once() {
    let start = Instant::now();
    let o = run_bounded(
        charmrun().args(["+p4", PROGRAM, "hello", "+machine", "local"]),
        limit(),
    );
    check_one_line_error(
        &o,
        "run the program directly with +p 4",
        &["+p4 PROGRAM hello +machine local".into()],
    );
    assert!(o.stdout.is_empty(), "{o}");
    assert!(start.elapsed() < Duration::from_secs(5), "{o}");
}

#[test]
fn pe_counts_after_the_programs_double_dash_are_the_programs() {
    let o = run_bounded(
        charmrun().args(["+p2", PROGRAM, "hello", "+machine", "tcp", "--", "+p9"]),
        limit(),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("hello from PE"), 2, "{o}");
    assert_eq!(o.lines_with("of 2"), 2, "{o}");
}

#[test]
fn mpiexec_mode_passes_a_termination_on_and_leaves_nothing_behind() {
    let dir = scratch("mpiexec");
    // An "MPI launcher" whose rank ignores SIGTERM: it must still end, with its launcher.
    let launcher = script(
        &dir,
        "fake-mpiexec",
        "#!/bin/sh\ntrap '' TERM\nsleep 300 &\necho \"rank $!\"\nwait\n",
    );
    let mut job = Running::start(
        charmrun().args(["++mpiexec", "++remote-shell", &launcher, "+p2", PROGRAM]),
        limit(),
    )
    .expect("start");
    assert!(
        job.wait_for_stdout_lines("rank ", 1, Duration::from_secs(10)),
        "{}",
        job.stderr_so_far()
    );
    let rank: u32 = job
        .stdout_so_far()
        .split("rank ")
        .nth(1)
        .and_then(|r| r.trim().parse().ok())
        .expect("rank pid");
    assert!(alive(rank));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let started = Instant::now();
    let o = job.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!o.timed_out, "{o}");
    assert_eq!(o.code, Some(143), "{o}");
    assert!(o.stderr.contains("interrupted by signal 15"), "{o}");
    assert!(started.elapsed() < Duration::from_secs(10), "{o}");
    assert!(ends_soon(rank), "the rank {rank} outlived charmrun\n{o}");
}

#[test]
fn mpiexec_mode_ends_the_launchers_group_at_the_time_limit() {
    let dir = scratch("mpiexec-limit");
    let launcher = script(
        &dir,
        "fake-mpiexec",
        "#!/bin/sh\nsleep 300 &\necho \"rank $!\"\nwait\n",
    );
    let o = run_bounded(
        charmrun().args([
            "++mpiexec",
            "++remote-shell",
            &launcher,
            "++timelimit",
            "1",
            "+p2",
            PROGRAM,
        ]),
        limit(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.code, Some(124), "{o}");
    let rank: u32 = o
        .stdout
        .split("rank ")
        .nth(1)
        .and_then(|r| r.trim().parse().ok())
        .expect("rank pid");
    assert!(
        ends_soon(rank),
        "the rank {rank} outlived the time limit\n{o}"
    );
}

/// Whether `pid` is gone within two seconds; if not, it is killed (the test must not leave it).
fn ends_soon(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        return false;
    }
    true
}

/// The pids of the `sleep`s the spawn scenario's PEs started.
fn spawned(out: &str) -> Vec<u32> {
    out.lines()
        .filter_map(|l| {
            l.split_once("conformance spawn: PE ")?
                .1
                .split_once(" child ")
        })
        .filter_map(|(_, pid)| pid.trim().parse().ok())
        .collect()
}

#[test]
fn what_a_node_started_ends_with_the_job_however_it_ends() {
    for (args, code) in [(&["spawn"][..], Some(0)), (&["spawn", "crash"], Some(134))] {
        let start = Instant::now();
        let o = tcp(&[]).run(PROGRAM, 3, args, limit());
        let took = start.elapsed();
        assert_eq!(o.code, code, "{o}");
        let kids = spawned(&o.stdout);
        assert_eq!(kids.len(), 3, "{o}");
        // The sleeps' parent was the node; once killed, init reaps them at once.
        let deadline = Instant::now() + Duration::from_secs(3);
        while kids.iter().any(|&k| alive(k)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for k in kids {
            assert!(
                !alive(k),
                "{args:?}: process {k} a node started survived\n{o}"
            );
        }
        // A child holding the node's stdout does not hold charmrun up.
        assert!(took < Duration::from_secs(4), "{args:?} took {took:?}\n{o}");
    }
}

#[test]
fn a_stopped_node_is_noticed_and_named() {
    for machine in ["tcp", "si"] {
        a_stopped_node_is_noticed_on(machine);
    }
}

fn a_stopped_node_is_noticed_on(machine: &'static str) {
    let start = Instant::now();
    let launcher = Launcher::Charmrun {
        machine,
        opts: vec!["++hang-timeout".into(), "3".into()],
    };
    let mut job =
        Running::start(&mut launcher.command(PROGRAM, 4, &["wait", "60"]), limit()).expect("start");
    let nodes = wait_for_children(job.pid(), 4, Duration::from_secs(20));
    assert_eq!(nodes.len(), 4, "{}", job.stderr_so_far());
    assert!(
        job.wait_for_stdout_lines("conformance wait: PE", 4, Duration::from_secs(20)),
        "{}",
        job.stderr_so_far()
    );
    let stopped = nix::unistd::Pid::from_raw(nodes[2] as i32);
    nix::sys::signal::kill(stopped, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    let o = job.finish();
    assert_eq!(o.code, Some(1), "{o}");
    assert!(
        o.stderr
            .contains(&format!("on {} stopped answering for 3 s", hostname())),
        "{o}"
    );
    assert!(start.elapsed() < Duration::from_secs(30), "{o}");
    for pid in nodes {
        assert!(!alive(pid), "node process {pid} survived\n{o}");
    }
}

#[test]
fn a_node_busy_in_a_long_handler_is_not_taken_for_hung() {
    let o = tcp(&["++hang-timeout", "3", "++timelimit", "6"]).run(PROGRAM, 2, &["hang"], limit());
    assert_eq!(o.code, Some(124), "{o}");
    assert!(!o.stderr.contains("stopped answering"), "{o}");
}

/// The node number charmrun gave process `pid` (from its environment).

#[test]
fn in_a_cascade_the_node_that_died_is_named_not_the_peers_that_noticed() {
    let host = hostname();
    for round in 0..3 {
        // Every node talks to every other, so the peers notice a death at once and abort.
        let mut job = Running::start(
            &mut tcp(&[]).command(PROGRAM, 6, &["alltoall", "1000000000"]),
            limit(),
        )
        .expect("start");
        let nodes = wait_for_children(job.pid(), 6, Duration::from_secs(20));
        assert_eq!(nodes.len(), 6, "{}", job.stderr_so_far());
        // PE 0's banner comes once every node has joined: the all-to-all is under way.
        assert!(
            job.wait_for_stdout_lines("Converse>", 1, Duration::from_secs(20)),
            "{}",
            job.stderr_so_far()
        );
        let victim = nodes[(round * 2 + 1) % 6];
        let pe = node_of(victim).expect("node number");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(victim as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let o = job.finish();
        assert!(!o.timed_out, "{o}");
        let charmrun_says: Vec<&str> = o
            .stderr
            .lines()
            .filter(|l| l.starts_with("charmrun:"))
            .collect();
        assert_eq!(
            charmrun_says,
            [format!(
                "charmrun: PE {pe} on {host} was killed by signal 9 (SIGKILL) before the job ended; ending the job"
            )],
            "{o}"
        );
        assert_eq!(o.code, Some(137), "{o}");
        // One name per host: the nodes' messages use it too.
        assert!(!o.stderr.contains("localhost"), "{o}");
    }
}

/// A start-up error every node hits (here a bad runtime argument, seen by each of 16 nodes) is
/// printed once, with a line saying how many more nodes printed it, not 16 times.
#[test]
fn an_error_every_node_prints_at_start_up_is_printed_once() {
    let o = converse_tests::run_bounded(
        &mut converse_tests::Launcher::Charmrun {
            machine: "tcp",
            opts: vec![],
        }
        .command(env!("CARGO_BIN_EXE_conformance"), 16, &["hello", "+bogus"]),
        std::time::Duration::from_secs(60),
    );
    assert!(o.code.is_some_and(|c| c != 0), "{o}");
    let bad = "unknown runtime argument '+bogus'";
    let printed = o
        .stderr
        .lines()
        .filter(|l| l.contains(bad) && !l.starts_with("charmrun:"))
        .count();
    assert_eq!(printed, 1, "{o}");
    let said = o
        .stderr
        .lines()
        .find(|l| l.contains("more nodes printed the same line") && l.contains(bad));
    assert!(said.is_some(), "{o}");
}

/// `+idle-warn`: a job that forgot `pe.exit` is named idle once, within a few intervals; a job
/// that computes in a handler for longer than the interval, or waits on a timer, is not.
#[test]
fn idle_warn_names_a_forgotten_exit_and_nothing_else() {
    const WARNING: &str = "converse: the job has been idle for";
    let o = tcp(&["++timelimit", "6"]).run(
        PROGRAM,
        3,
        &["forgotten-exit", "+idle-warn", "0.5"],
        limit(),
    );
    assert_eq!(o.code, Some(124), "the time limit ended it\n{o}");
    assert_eq!(
        o.lines_with("conformance forgotten-exit: done, no exit"),
        1,
        "{o}"
    );
    assert_eq!(o.stderr.matches(WARNING).count(), 1, "warned once\n{o}");
    assert!(o.stderr.contains("must call pe.exit(code)"), "{o}");

    // One PE computes 2 s in a handler while the others idle: four intervals with nothing
    // sent, but not idle.
    let o = tcp(&[]).run(
        PROGRAM,
        3,
        &["busy-exit", "2", "+idle-warn", "0.5"],
        limit(),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance busy-exit: ok"), 1, "{o}");
    assert!(
        !o.stderr.contains(WARNING),
        "a computing job is not idle\n{o}"
    );

    // Idle for 2 s, but with a timer set: work to come.
    let o = tcp(&[]).run(
        PROGRAM,
        3,
        &["timer-exit", "2", "+idle-warn", "0.5"],
        limit(),
    );
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("conformance timer-exit: ok"), 1, "{o}");
    assert!(
        !o.stderr.contains(WARNING),
        "a job with a timer set is not idle\n{o}"
    );

    // A bad interval is one line at start-up.
    let o = tcp(&[]).run(PROGRAM, 2, &["hello", "+idle-warn", "soon"], limit());
    assert_ne!(o.code, Some(0), "{o}");
    assert!(o.stderr.contains("+idle-warn wants seconds"), "{o}");
}
