//! Back-end attach mode (MRNet's instantiation mode 2) on whole jobs: the network runs under
//! charmrun (or in one process on the local layer), back-ends are plain processes started
//! apart by the test, as `mpirun` or `srun` would start a tool's back-ends.

use converse_tests::{run_bounded, scratch, Launcher, Running};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const PROG: &str = env!("CARGO_BIN_EXE_tbon_attach");

/// The C back-end (runtime/tbon/lightweight/examples/c_backend.c), compiled by the system C
/// compiler against `libmrnet_lightweight.so`, which this builds first (cargo builds only the
/// Rust library of a dependency, not its C one).
fn c_backend() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let lw = root.join("runtime/tbon/lightweight");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            // The profile this test was built in: the library goes beside its programs.
            let profile = Path::new(PROG)
                .parent()
                .and_then(|d| d.file_name())
                .map_or("release".into(), |p| p.to_string_lossy().into_owned());
            let profile = if profile == "debug" {
                "dev".into()
            } else {
                profile
            };
            let o = run_bounded(
                Command::new(cargo).current_dir(&root).args([
                    "build",
                    "--profile",
                    &profile,
                    "-p",
                    "converse-tbon-lightweight",
                ]),
                Duration::from_secs(600),
            );
            assert_eq!(o.code, Some(0), "building libmrnet_lightweight:\n{o}");
            let lib_dir = Path::new(PROG).with_file_name("");
            assert!(lib_dir.join("libmrnet_lightweight.so").exists(), "{o}");
            let exe = scratch("tbon-attach-cc").join("c_backend");
            let o = run_bounded(
                Command::new("cc")
                    .arg("-Wall")
                    .arg("-Werror")
                    .arg("-o")
                    .arg(&exe)
                    .arg(lw.join("examples/c_backend.c"))
                    .arg("-I")
                    .arg(lw.join("include"))
                    .arg("-L")
                    .arg(&lib_dir)
                    .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
                    .arg("-lmrnet_lightweight"),
                Duration::from_secs(120),
            );
            assert_eq!(o.code, Some(0), "cc c_backend.c:\n{o}");
            exe
        })
        .clone()
}

/// A back-end started apart, bounded in time: the Rust one, or the C one with MRNet's
/// arguments (the leaf's host, port and rank, its host and rank) and the secret from the
/// attach file.
fn back_any(file: &Path, rank: u32, c: bool) -> Running {
    if !c {
        return back(file, rank, None);
    }
    let f = converse_tbon::AttachFile::read(file).unwrap_or_else(|e| panic!("{e}"));
    let leaf = &f.points[rank as usize % f.points.len()];
    let mut cmd = Command::new(c_backend());
    cmd.args([
        leaf.host.clone(),
        leaf.port.to_string(),
        leaf.rank.to_string(),
        "localhost".into(),
        rank.to_string(),
    ])
    .env("CONVERSE_TBON_SECRET_FILE", file);
    if rank == 700 {
        // MRNet's polling loop: Network_recv_nonblock.
        cmd.env("C_BACKEND_POLL", "1");
    }
    Running::start(&mut cmd, Duration::from_secs(90)).unwrap_or_else(|e| panic!("start: {e}"))
}

/// A back-end started apart, bounded in time.
fn back(file: &Path, rank: u32, leaf: Option<usize>) -> Running {
    let mut c = Command::new(PROG);
    c.args(["back", &file.to_string_lossy(), &rank.to_string()]);
    if let Some(l) = leaf {
        c.arg(l.to_string());
    }
    Running::start(&mut c, Duration::from_secs(90)).unwrap_or_else(|e| panic!("start: {e}"))
}

/// The whole story on `launcher`: four back-ends with ranks of their own attach to the
/// leaves of a two-level tree; a duplicate rank (at the same leaf and at another), a wrong
/// secret and a stranger's bytes are refused while the job goes on; then the front-end's
/// checks (waves, a singlecast, a back-end that leaves) and the shutdown reach every
/// back-end.
fn attach_story(launcher: &Launcher, name: &str, in_c: &[u32]) {
    let dir = scratch(name);
    let file = dir.join("attach.txt");
    let f = file.to_string_lossy().into_owned();
    let mut fe = Running::start(
        &mut launcher.command(PROG, 7, &["front", "g:2x2", &f, "4"]),
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("start: {e}"));
    assert!(
        fe.wait_for_stdout_lines(
            "tbon_attach: attach file written",
            1,
            Duration::from_secs(60)
        ),
        "no attach file:\n{}",
        fe.finish()
    );
    let mode = std::fs::metadata(&file)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
        .unwrap_or(0);
    assert_eq!(mode, 0o600, "the attach file holds the secret");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("leaf ")).count(),
        4,
        "{text}"
    );
    let bes: Vec<Running> = [3u32, 10, 42, 700]
        .iter()
        .map(|&r| back_any(&file, r, in_c.contains(&r)))
        .collect();
    assert!(
        fe.wait_for_stdout_lines(
            "tbon_attach: 4 back-ends attached",
            1,
            Duration::from_secs(60)
        ),
        "the back-ends did not attach:\n{}",
        fe.finish()
    );

    // Refusals, each one line, while the network runs: rank 3 again at its own leaf (the
    // leaf knows it) and at another (the front-end decides), a secret that is not the
    // network's, and bytes that are no handshake at all.
    for (leaf, why) in [(Some(3), "rank 3 is taken"), (Some(0), "rank 3 is taken")] {
        let o = back(&file, 3, leaf).finish();
        assert_eq!(o.code, Some(2), "{o}");
        assert!(
            o.stderr.contains("refused rank 3") && o.stderr.contains(why),
            "{o}"
        );
        assert_eq!(o.stderr.trim().lines().count(), 1, "{o}");
    }
    let wrong = dir.join("wrong.txt");
    let other = format!("secret {}", "0".repeat(64));
    let swapped: String = text
        .lines()
        .map(|l| {
            if l.starts_with("secret ") {
                other.clone()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&wrong, swapped).unwrap_or_else(|e| panic!("{e}"));
    let o = back(&wrong, 99, None).finish();
    assert_eq!(o.code, Some(2), "{o}");
    assert!(o.stderr.contains("refused"), "{o}");
    let port = text
        .lines()
        .find_map(|l| l.strip_prefix("leaf "))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_default();
    if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port.parse().unwrap_or(0))) {
        use std::io::Write;
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
    }

    assert!(
        fe.wait_for_stderr("refused a connection from", Duration::from_secs(30)),
        "the stranger was not refused:\n{}",
        fe.stderr_so_far()
    );
    std::fs::write(file.with_extension("go"), b"").unwrap_or_else(|e| panic!("{e}"));
    let o = fe.finish();
    assert!(
        o.code == Some(0) && o.lines_with("tbon_attach: ok") == 1,
        "front-end:\n{o}"
    );
    for (i, be) in bes.into_iter().enumerate() {
        let o = be.finish();
        let rank = [3, 10, 42, 700][i];
        let end = if rank == 3 { "leaving" } else { "shut down" };
        assert!(
            o.code == Some(0) && o.lines_with(&format!("back {rank}: {end}")) == 1,
            "back-end {rank}:\n{o}"
        );
    }
}

#[test]
fn backends_started_apart_attach_compute_leave_and_see_the_shutdown() {
    attach_story(
        &Launcher::Charmrun {
            machine: "tcp",
            opts: Vec::new(),
        },
        "tbon-attach-tcp",
        &[],
    );
}

#[test]
fn backends_attach_to_a_network_in_one_process() {
    attach_story(
        &Launcher::Direct { machine: "local" },
        "tbon-attach-local",
        &[],
    );
}

/// MRNet's lightweight back-ends: two of the four are C programs (the one that leaves, and
/// the one the singlecast and the echo of every type go to), compiled here with the system
/// C compiler, beside two in Rust.
#[test]
fn c_backends_attach_beside_rust_ones() {
    attach_story(
        &Launcher::Charmrun {
            machine: "tcp",
            opts: Vec::new(),
        },
        "tbon-attach-c",
        &[3, 700],
    );
}

/// A back-end whose leaf goes away mid-wait gets an error, not a hang: the job is killed
/// while the back-end waits in `recv`.
#[test]
fn a_backend_whose_network_dies_gets_an_error_not_a_hang() {
    let dir = scratch("tbon-attach-dies");
    let file = dir.join("attach.txt");
    let f = file.to_string_lossy().into_owned();
    let launcher = Launcher::Charmrun {
        machine: "tcp",
        opts: Vec::new(),
    };
    let mut fe = Running::start(
        &mut launcher.command(PROG, 3, &["front", "g:2", &f, "2"]),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("start: {e}"));
    assert!(
        fe.wait_for_stdout_lines("attach file written", 1, Duration::from_secs(60)),
        "{}",
        fe.finish()
    );
    let mut be = back(&file, 5, None);
    // One of the two back-ends the front-end waits for: it waits, and so does this one.
    assert!(
        be.wait_for_stdout_lines("back 5: attached to", 1, Duration::from_secs(60)),
        "{}",
        be.finish()
    );
    converse_tests::kill_tree(fe.pid());
    let o = be.finish();
    assert_eq!(o.code, Some(1), "{o}");
    assert!(
        o.stdout
            .contains("back 5: the connection to the parent ended"),
        "{o}"
    );
    assert!(!o.timed_out, "{o}");
    drop(fe);
}

/// With failure recovery on, an internal process dies while a back-end's attach is on its
/// way through it (stopped, then killed), at a leaf that has a back-end already: the leaf below asks again over the mended tree, the
/// back-end's call is answered (not left waiting for an answer that died), and the front-end
/// takes it once (one `BackendAdded`); a second back-end attaches under the other internal
/// process meanwhile, and a wave sums over both.
#[test]
fn an_attach_through_a_process_that_dies_is_answered_over_the_mended_tree() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let dir = scratch("tbon-attach-recover");
    let file = dir.join("attach.txt");
    let f = file.to_string_lossy().into_owned();
    let launcher = Launcher::Charmrun {
        machine: "tcp",
        opts: Vec::new(),
    };
    // g:2x2: the front-end (PE 0), internal processes 1 and 2, leaves 3 to 6 (3 and 4 below
    // process 1); the attach file lists the leaves in that order.
    let mut fe = Running::start(
        &mut launcher.command(
            PROG,
            7,
            &[
                "front",
                "g:2x2",
                &f,
                "3",
                "recover",
                "+set",
                "faults=report",
            ],
        ),
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("start: {e}"));
    assert!(
        fe.wait_for_stdout_lines("attach file written", 1, Duration::from_secs(60)),
        "{}",
        fe.finish()
    );
    let pid = std::fs::read_to_string(format!("{f}.pid.1"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
        .unwrap_or_else(|| panic!("no pid for PE 1:\n{}", fe.stderr_so_far()));
    let pid = Pid::from_raw(pid);
    // Rank 5 attaches at the first leaf first, so that leaf has a back-end already.
    let mut first = back(&file, 5, Some(0));
    assert!(
        first.wait_for_stdout_lines("back 5: attached", 1, Duration::from_secs(30)),
        "{}",
        first.finish()
    );
    kill(pid, Signal::SIGSTOP).unwrap_or_else(|e| panic!("SIGSTOP: {e}"));
    // Rank 10 at the first leaf: its Attach goes up into the stopped process (given a second
    // to get there).
    let mut stuck = back(&file, 10, Some(0));
    assert!(
        !stuck.wait_for_stdout_lines("back 10: attached", 1, Duration::from_secs(1)),
        "attached through a stopped process?\n{}",
        stuck.finish()
    );
    kill(pid, Signal::SIGKILL).unwrap_or_else(|e| panic!("SIGKILL: {e}"));
    assert!(
        stuck.wait_for_stdout_lines("back 10: attached", 1, Duration::from_secs(30)),
        "the attach through the dead process was not answered:\n{}\nfront-end:\n{}",
        stuck.finish(),
        fe.stderr_so_far()
    );
    // Rank 20 at the third leaf, below the live internal process.
    let other = back(&file, 20, Some(2));
    let o = fe.finish();
    assert!(
        o.code == Some(0)
            && o.lines_with("tbon_attach: 3 back-ends attached") == 1
            && o.lines_with("tbon_attach: ok") == 1,
        "front-end:\n{o}"
    );
    for (rank, be) in [(5, first), (10, stuck), (20, other)] {
        let o = be.finish();
        assert!(
            o.code == Some(0) && o.lines_with(&format!("back {rank}: shut down")) == 1,
            "back-end {rank}:\n{o}"
        );
    }
}

/// Back-ends on a host of their own (a network namespace, as a tool's back-ends started by
/// `srun` on the application's nodes), attaching to leaves on the two hosts the network runs
/// on, at the addresses the job knows those hosts by.
#[test]
fn backends_on_another_host_attach_across_hosts() {
    use converse_tests::netns::Hosts;
    let Some(hosts) = Hosts::new("tat", 3) else {
        return;
    };
    let file = hosts.dir.join("attach.txt");
    let machines = hosts.machines("machines", 0..2);
    let mut cmd = hosts.on_host0(&converse_tests::charmrun_path(PROG));
    cmd.args(["+p3", "++nodelist"])
        .arg(&machines)
        .arg("++remote-shell")
        .arg(hosts.shell())
        .arg(PROG)
        .args(["front", "g:2"])
        .arg(&file)
        .args(["2", "+machine", "tcp"]);
    let mut fe = Running::start(&mut cmd, Duration::from_secs(120)).expect("front-end");
    assert!(
        fe.wait_for_stdout_lines("attach file written", 1, Duration::from_secs(60)),
        "{}",
        fe.finish()
    );
    let f = converse_tbon::AttachFile::read(&file).unwrap_or_else(|e| panic!("{e}"));
    let mut leaf_hosts: Vec<String> = f.points.iter().map(|p| p.host.clone()).collect();
    leaf_hosts.sort();
    assert_eq!(
        leaf_hosts,
        [Hosts::addr(0), Hosts::addr(1)],
        "the leaves are on both hosts, at the addresses the job knows"
    );
    let on_host2 = |rank: u32| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &hosts.host_ns(2), PROG, "back"])
            .arg(&file)
            .arg(rank.to_string());
        Running::start(&mut c, Duration::from_secs(90)).expect("back-end")
    };
    let bes = [on_host2(3), on_host2(10)];
    assert!(
        fe.wait_for_stdout_lines("2 back-ends attached", 1, Duration::from_secs(60)),
        "{}",
        fe.finish()
    );
    std::fs::write(file.with_extension("go"), b"").expect("go");
    let o = fe.finish();
    assert!(
        o.code == Some(0) && o.lines_with("tbon_attach: ok") == 1,
        "{o}"
    );
    for (be, (rank, end)) in bes.into_iter().zip([(3, "leaving"), (10, "shut down")]) {
        let o = be.finish();
        assert!(
            o.code == Some(0) && o.lines_with(&format!("back {rank}: {end}")) == 1,
            "{o}"
        );
    }
}
