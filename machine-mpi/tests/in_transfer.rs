//! `Transport::in_transfer` on the MPI layer, in two-rank jobs. Run by `cargo test`, each test
//! starts this very test binary under `mpirun -n 2`, running only itself; there (started by
//! MPI's launcher) it plays its rank: node 0 sends, node 1 receives, both say when a message
//! is part-way through. Each job is bounded in time and killed (its process group) past it.
#![cfg(feature = "mpi")]

use converse_machine::{BootConfig, Machine, Message};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a job may take.
const JOB_LIMIT: Duration = Duration::from_secs(120);

/// Longest a rank waits for its side of a transfer.
const RANK_LIMIT: Duration = Duration::from_secs(20);

/// Names the directory where each rank that passed leaves a file (`passed.<rank>`). The ranks'
/// standard outputs reach `mpirun` interleaved, byte for byte, so counting "test result" lines
/// in them is not a reliable tally.
const PASSED_DIR: &str = "IN_TRANSFER_PASSED_DIR";

/// Start `test` of this binary under `mpirun -n 2` and check that it passed on both ranks.
fn under_mpirun(test: &str) {
    let passed_dir = std::env::temp_dir().join(format!(
        "converse-mpi-in-transfer-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&passed_dir);
    std::fs::create_dir_all(&passed_dir).expect("a directory for the ranks' verdicts");
    let exe = std::env::current_exe().expect("the test binary's path");
    let open_mpi = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"));
    let mut cmd = Command::new("mpirun");
    cmd.args(["-n", "2"]);
    if open_mpi {
        cmd.arg("--oversubscribe");
    }
    cmd.arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        // Open MPI refuses root without these (CI runs as root); other MPIs ignore them.
        .envs([
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
        ])
        .env(PASSED_DIR, &passed_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("mpirun starts");
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for mpirun") {
            break Some(s);
        }
        if start.elapsed() > JOB_LIMIT {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever is left of the group (a rank that outlived mpirun) ends with the job.
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    let out = child.wait_with_output().expect("the job's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match status {
        Some(s) => assert!(s.success(), "the job failed ({s}):\n{text}"),
        None => panic!("the job took longer than {JOB_LIMIT:?}:\n{text}"),
    }
    let passed = std::fs::read_dir(&passed_dir)
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0);
    let _ = std::fs::remove_dir_all(&passed_dir);
    assert_eq!(passed, 2, "both ranks ran the test and passed:\n{text}");
}

/// Boot this rank with `settings`.
fn boot(settings: &[(&str, &str)]) -> Box<dyn Machine> {
    let mut cfg = BootConfig::new(2);
    for (k, v) in settings {
        cfg.settings.set(*k, *v);
    }
    let mut nodes = converse_mpi::boot(&cfg).expect("boot");
    nodes.pop().expect("one node")
}

/// Node 0: send `len` bytes to node 1; in transfer right after, and until it has gone (node 0
/// advances every `pace`, slowly enough for node 1 to see it part-way).
fn sender(m: &mut dyn Machine, len: usize, pace: Duration) {
    assert!(!m.in_transfer(), "idle");
    m.send(1, Message::from_payload(&vec![5u8; len]))
        .expect("send");
    assert!(
        m.in_transfer(),
        "a {len}-byte message just posted is on its way"
    );
    let deadline = Instant::now() + RANK_LIMIT;
    while m.in_transfer() {
        assert!(Instant::now() < deadline, "still in transfer");
        m.advance(&mut |_| panic!("nothing goes to node 0"))
            .expect("advance");
        std::thread::sleep(pace);
    }
}

/// Node 1: receive one message of `len` bytes; whether it was in transfer before it was whole.
fn receiver(m: &mut dyn Machine, len: usize) -> bool {
    assert!(!m.in_transfer(), "idle");
    let deadline = Instant::now() + RANK_LIMIT;
    let (mut got, mut part_way) = (None, false);
    while got.is_none() {
        assert!(Instant::now() < deadline, "the message never arrived");
        m.advance(&mut |msg| got = Some(msg.payload_len()))
            .expect("advance");
        part_way |= got.is_none() && m.in_transfer();
    }
    assert_eq!(got, Some(len));
    assert!(!m.in_transfer(), "through");
    part_way
}

/// Play this rank: boot with `settings`, run `body`, leave together. A failing rank aborts the
/// job (`MPI_Abort`), so its peer does not wait for it in the barrier until the time limit.
fn as_rank(settings: &[(&str, &str)], body: impl FnOnce(&mut dyn Machine)) {
    let mut m = boot(settings);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut *m)));
    if r.is_err() {
        m.abort("the test failed on this rank");
    }
    if let Some(dir) = std::env::var_os(PASSED_DIR) {
        let mark = std::path::Path::new(&dir).join(format!("passed.{}", m.my_node()));
        std::fs::write(mark, b"").expect("leave this rank's verdict");
    }
    m.barrier(&mut |_| {}).expect("barrier");
    m.exit(0).expect("exit");
}

#[test]
fn a_large_send_is_in_transfer_until_it_completes() {
    if !converse_mpi::launcher_env::launched() {
        return under_mpirun("a_large_send_is_in_transfer_until_it_completes");
    }
    as_rank(&[], |m| {
        if m.my_node() == 0 {
            sender(m, 1 << 20, Duration::from_micros(100));
        } else {
            receiver(m, 1 << 20);
        }
    });
}

#[test]
fn a_message_in_pieces_is_in_transfer_until_the_last_one_came() {
    if !converse_mpi::launcher_env::launched() {
        return under_mpirun("a_message_in_pieces_is_in_transfer_until_the_last_one_came");
    }
    // 2 MiB in 4 KiB pieces: 512 pieces, more than one advance takes (it takes at most 256
    // pieces and credits before it returns), so the receiver is between two advances at least
    // once with the message part-way in, however fast the pieces come. (With fewer pieces the
    // whole message could come in one advance: MPI may move them all without the sender's
    // help, by single copy, and the test then failed now and then.)
    as_rank(&[("mpi.piece_bytes", "4096")], |m| {
        if m.my_node() == 0 {
            sender(m, 2 << 20, Duration::from_millis(1));
        } else {
            assert!(
                receiver(m, 2 << 20),
                "in transfer while pieces were missing"
            );
        }
    });
}
