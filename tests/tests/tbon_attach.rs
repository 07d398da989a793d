//! Back-end attach mode (MRNet's instantiation mode 2) on whole jobs: the network runs under
//! charmrun (or in one process on the local layer), back-ends are plain processes started
//! apart by the test, as `mpirun` or `srun` would start a tool's back-ends.

use converse_tests::{scratch, Launcher, Running};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const PROG: &str = env!("CARGO_BIN_EXE_tbon_attach");

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
fn attach_story(launcher: &Launcher, name: &str) {
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
        .map(|&r| back(&file, r, None))
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
    );
}

#[test]
fn backends_attach_to_a_network_in_one_process() {
    attach_story(&Launcher::Direct { machine: "local" }, "tbon-attach-local");
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
    let be = back(&file, 5, None);
    // One of the two back-ends the front-end waits for: it waits, and so does this one.
    std::thread::sleep(Duration::from_millis(500));
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
