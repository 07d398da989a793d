//! Converse Client-Server on whole jobs: `charmrun ++server` opens the job to clients, which
//! run handlers by name on one PE, a list or all (the `conformance ccs` program's and the
//! built-in ones), with Charm++'s key authentication; bad clients are refused without harm to
//! the job; a PE's death fails the requests waiting on it.

use converse_ccs::{CcsError, Client, Dest, Key};
use converse_tests::{wait_for_nodes, Launcher, Running};
use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

/// The `ccs` command (converse-ccs's binary), beside the test programs: built by `cargo test
/// --workspace` or `cargo build --release -p converse-ccs`.
fn ccs_command() -> Command {
    let p = std::path::Path::new(PROGRAM).with_file_name("ccs");
    assert!(
        p.exists(),
        "{} is not built: build converse-ccs",
        p.display()
    );
    Command::new(p)
}
const T: Duration = Duration::from_secs(20);

/// Start `conformance ccs` with `++server` (and `extra`), and read where it listens and its
/// key from its output.
fn start(machine: &'static str, pes: usize, extra: &[&str]) -> (Running, String, Option<Key>) {
    let l = Launcher::Charmrun {
        machine,
        opts: vec!["++server".into()],
    };
    let mut args = vec!["ccs", "60"];
    args.extend_from_slice(extra);
    let mut job = Running::start(
        &mut l.command(PROGRAM, pes, &args),
        Duration::from_secs(120),
    )
    .expect("start");
    assert!(
        job.wait_for_stdout_lines("ccs: Server IP = ", 1, T),
        "no server line:\n{}",
        job.stdout_so_far()
    );
    // Without `+server-auth` the job makes a key and prints it on the next line, which may
    // come in a later read than the server line.
    if !extra.contains(&"+server-auth") {
        assert!(
            job.wait_for_stdout_lines("CCS_OTP_KEY> Level 0 key: ", 1, T),
            "no key line:\n{}",
            job.stdout_so_far()
        );
    }
    let out = job.stdout_so_far();
    let port = out
        .lines()
        .find_map(|l| l.split("Server port = ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .expect("a port");
    let key = out
        .lines()
        .find_map(|l| l.strip_prefix("CCS_OTP_KEY> Level 0 key: "))
        .map(|k| Key::parse(k).expect("the key printed"));
    (job, format!("127.0.0.1:{port}"), key)
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn handlers_on_one_pe_a_list_and_all_with_delayed_and_empty_replies() {
    let (job, addr, key) = start("tcp", 4, &[]);
    let mut c = Client::connect(&addr, key, T).expect("connect");
    assert_eq!(c.num_pes(), 4);
    assert_eq!(c.pes_per_node(), [1, 1, 1, 1]);
    let status = text(
        c.request("converse.status", &Dest::All, b"")
            .expect("status"),
    );
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 4, "{status}");
    for (p, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("PE {p} node {p} layer tcp: sent ")),
            "{l}"
        );
    }
    assert_eq!(
        text(c.request("echo", &Dest::Pe(2), b"hi").expect("echo")),
        "PE 2: hi"
    );
    // A list answers in the order it names the PEs.
    assert_eq!(
        text(
            c.request("echo", &Dest::List(vec![3, 1]), b"x")
                .expect("list")
        ),
        "PE 3: xPE 1: x"
    );
    assert_eq!(
        text(c.request("later", &Dest::All, b"").expect("later")),
        "PE 0 laterPE 1 laterPE 2 laterPE 3 later"
    );
    assert_eq!(c.request("silent", &Dest::Pe(1), b"").expect("silent"), b"");
    // Kept by its handler and dropped later: still an empty reply, not a wait.
    assert_eq!(c.request("forget", &Dest::Pe(2), b"").expect("forget"), b"");
    // A list may name a PE twice: it answers twice.
    assert_eq!(
        text(
            c.request("echo", &Dest::List(vec![1, 1]), b"x")
                .expect("twice")
        ),
        "PE 1: xPE 1: x"
    );
    // 1 MiB each way.
    let big = vec![b'z'; 1 << 20];
    let r = c.request("echo", &Dest::Pe(3), &big).expect("1 MiB");
    assert_eq!(r.len(), (1 << 20) + "PE 3: ".len());
    assert_eq!(
        text(c.request("done", &Dest::Pe(0), b"").expect("done")),
        "bye"
    );
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
}

#[test]
fn bad_clients_are_refused_and_the_job_goes_on() {
    let (job, addr, key) = start("tcp", 2, &[]);
    let key = key.expect("a key is made and printed by default");
    // No key, a wrong key.
    match Client::connect(&addr, None, T) {
        Err(CcsError::Refused(why)) => assert!(why.contains("wants a key"), "{why}"),
        other => panic!("without a key: {other:?}"),
    }
    match Client::connect(&addr, Some(Key::parse("0011").expect("k")), T) {
        Err(CcsError::Refused(_)) => {}
        other => panic!("a wrong key: {other:?}"),
    }
    let mut c = Client::connect(&addr, Some(key.clone()), T).expect("connect");
    // An unknown handler, a PE outside the job.
    assert!(matches!(
        c.request("nosuch", &Dest::Pe(1), b""),
        Err(CcsError::Closed(_))
    ));
    assert!(matches!(
        c.request("echo", &Dest::Pe(7), b""),
        Err(CcsError::Closed(_))
    ));
    // Strangers: noise, half a request then gone, a trickle then silence, many at once.
    let mut noise = TcpStream::connect(&addr).expect("connect");
    let _ = noise.write_all(&[0x55; 300]);
    let mut half = TcpStream::connect(&addr).expect("connect");
    let _ = half.write_all(&[0, 0, 0, 4, 0, 0]);
    drop(half);
    let crowd: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    // The job still answers, signed, while they sit there.
    assert_eq!(
        text(c.request("echo", &Dest::Pe(1), b"still").expect("echo")),
        "PE 1: still"
    );
    drop(crowd);
    drop(noise);
    // The command-line client: the reply on stdout; errors in one line, exit 1 or 2.
    let out = ccs_command()
        .args(["--key", &key.to_text(), "--pe", "all", &addr, "echo", "cli"])
        .output()
        .expect("ccs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PE 0: cliPE 1: cli");
    let out = ccs_command().args([&addr, "echo"]).output().expect("ccs");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().count(),
        1,
        "{out:?}"
    );
    let out = ccs_command()
        .args(["--pe", "x", &addr, "echo"])
        .output()
        .expect("ccs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        text(c.request("done", &Dest::Pe(0), b"").expect("done")),
        "bye"
    );
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
    // Each refusal said why, once, on the job's stderr.
    for why in [
        "PE 1 has no CCS handler 'nosuch'",
        "PE 7 is not in the job",
        "not a CCS request",
    ] {
        assert!(o.stderr.contains(why), "{why}:\n{o}");
    }
}

/// Report mode: a request waiting on a PE whose process dies fails (its connection closes),
/// and the other PEs still answer.
#[test]
fn a_death_fails_the_requests_waiting_on_it() {
    let (job, addr, key) = start("tcp", 4, &["+set", "faults=report"]);
    let mut c = Client::connect(&addr, key.clone(), T).expect("connect");
    let nodes = wait_for_nodes(job.pid(), 4, T);
    assert_eq!(nodes.len(), 4);
    let addr2 = addr.clone();
    let waiting = std::thread::spawn(move || {
        let mut c = Client::connect(&addr2, key, T).expect("connect");
        c.request("hold", &Dest::List(vec![1, 3]), b"")
    });
    // Until PE 3 holds the request (the death must find it waiting there).
    let until = std::time::Instant::now() + T;
    while c
        .request("held", &Dest::Pe(3), b"")
        .map(text)
        .ok()
        .as_deref()
        != Some("1")
    {
        assert!(
            std::time::Instant::now() < until,
            "PE 3 never held the request"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Node 3 (by its number: the fourth child started need not have the highest pid).
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(nodes[3] as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    match waiting.join().expect("join") {
        Err(CcsError::Closed(_)) => {}
        other => panic!("the held request: {other:?}"),
    }
    assert_eq!(
        text(
            c.request("echo", &Dest::List(vec![0, 1, 2]), b".")
                .expect("echo")
        ),
        "PE 0: .PE 1: .PE 2: ."
    );
    assert!(matches!(
        c.request("echo", &Dest::Pe(3), b""),
        Err(CcsError::Closed(_))
    ));
    assert_eq!(
        text(c.request("done", &Dest::Pe(0), b"").expect("done")),
        "bye"
    );
    let o = job.finish();
    assert!(o.stderr.contains("PE 3 died before it answered"), "{o}");
}

/// Without a key (`++server-auth none`, for Charm++'s tools that send none), and from a key
/// file with levels; on shared memory, with two PEs per process.
#[test]
fn keys_from_a_file_or_none_and_smp() {
    let dir = std::env::temp_dir().join(format!("ccs-keys.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keys");
    std::fs::write(
        &file,
        "# levels\n0 00112233445566778899001122334455\n2 0909\n",
    )
    .expect("keys");
    let l = Launcher::Charmrun {
        machine: "si",
        opts: vec![
            "++server-auth".into(),
            file.to_string_lossy().into_owned(),
            "++ppn".into(),
            "2".into(),
        ],
    };
    let mut job = Running::start(
        &mut l.command(PROGRAM, 4, &["ccs", "60"]),
        Duration::from_secs(120),
    )
    .expect("start");
    assert!(job.wait_for_stdout_lines("ccs: Server IP = ", 1, T));
    let out = job.stdout_so_far();
    assert!(
        !out.contains("CCS_OTP_KEY"),
        "a key file's keys are not printed:\n{out}"
    );
    let port = out
        .lines()
        .find_map(|l| l.split("Server port = ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .expect("port")
        .to_owned();
    let addr = format!("127.0.0.1:{port}");
    let key = Key::parse("00112233445566778899001122334455").expect("key");
    let mut c = Client::connect(&addr, Some(key), T).expect("connect");
    assert_eq!(c.pes_per_node(), [2, 2]);
    assert_eq!(
        text(c.request("echo", &Dest::All, b"").expect("all")),
        "PE 0: PE 1: PE 2: PE 3: "
    );
    assert_eq!(
        text(c.request("done", &Dest::Pe(0), b"").expect("done")),
        "bye"
    );
    assert_eq!(job.finish().code, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
    // No key at all.
    let (job, addr, key) = start("tcp", 2, &["+server-auth", "none"]);
    assert!(key.is_none());
    let mut c = Client::connect(&addr, None, T).expect("connect without a key");
    assert_eq!(
        text(c.request("echo", &Dest::Pe(1), b"open").expect("echo")),
        "PE 1: open"
    );
    assert_eq!(
        text(c.request("done", &Dest::Pe(0), b"").expect("done")),
        "bye"
    );
    assert_eq!(job.finish().code, Some(0));
    // A key file that is wrong ends the job at start, in one line.
    let o = converse_tests::run_bounded(
        &mut Launcher::Charmrun {
            machine: "tcp",
            opts: vec!["++server-auth".into(), "/nonexistent/keys".into()],
        }
        .command(PROGRAM, 2, &["ccs", "60"]),
        Duration::from_secs(60),
    );
    assert!(o.code.is_some_and(|c| c != 0), "{o}");
    assert!(o.stderr.contains("+server-auth /nonexistent/keys"), "{o}");
}

/// A live look at a traced job: `converse-trace live` fetches the last seconds of every PE's
/// trace over CCS (the built-in `converse.trace`) into a directory that `converse-trace check`
/// and `report` read like a finished job's (the report's rendering is picture-tested in
/// `runtime/trace/tests/picture.rs`). A job that does not trace says so.
#[test]
fn a_running_jobs_last_seconds_of_trace_over_ccs() {
    let base = std::env::temp_dir().join(format!("ccs-live.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (job_dir, live_dir) = (base.join("job"), base.join("live"));
    let job_dir_s = job_dir.to_string_lossy().into_owned();
    let (job, addr, key) = start("tcp", 4, &["+trace-dir", &job_dir_s]);
    let key = key.expect("a key");
    let mut c = Client::connect(&addr, Some(key.clone()), T).expect("connect");
    for _ in 0..5 {
        c.request("echo", &Dest::All, b"x").expect("echo");
    }
    let tool = std::path::Path::new(PROGRAM).with_file_name("converse-trace");
    assert!(tool.exists(), "{} is not built", tool.display());
    let out = Command::new(&tool)
        .args(["live", &addr])
        .arg(&live_dir)
        .args(["--key", &key.to_text(), "--secs", "60"])
        .output()
        .expect("converse-trace live");
    assert!(out.status.success(), "{out:?}");
    for pe in 0..4 {
        assert!(live_dir.join(format!("trace.{pe}.bin")).exists());
    }
    let check = Command::new(&tool)
        .arg("check")
        .arg(&live_dir)
        .output()
        .expect("check");
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{check:?}");
    assert!(said.starts_with("4 PEs, "), "{said}");
    assert!(
        said.contains("0 sends unmatched, 0 receives unmatched"),
        "{said}"
    );
    assert!(said.contains("handler converse.ccs: "), "{said}");
    let report = Command::new(&tool)
        .arg("report")
        .arg(&live_dir)
        .output()
        .expect("report");
    assert!(report.status.success(), "{report:?}");
    assert!(live_dir.join("report.html").exists());
    assert_eq!(
        text(c.request("done", &Dest::Pe(0), b"").expect("done")),
        "bye"
    );
    assert_eq!(job.finish().code, Some(0));
    // Without +trace: one line saying so.
    let (job, addr, key) = start("tcp", 2, &[]);
    let key = key.expect("a key");
    let out = Command::new(&tool)
        .args(["live", &addr])
        .arg(base.join("none"))
        .args(["--key", &key.to_text()])
        .output()
        .expect("converse-trace live");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not trace"),
        "{out:?}"
    );
    let mut c = Client::connect(&addr, Some(key), T).expect("connect");
    assert_eq!(
        text(c.request("done", &Dest::Pe(0), b"").expect("done")),
        "bye"
    );
    assert_eq!(job.finish().code, Some(0));
    let _ = std::fs::remove_dir_all(&base);
}
