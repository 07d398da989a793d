//! The conformance suite on the SI layer (shared memory), every job started by charmrun, and
//! what is particular to it: nothing of a job stays in /dev/shm, whatever happens.

converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
    machine: "si",
    opts: vec![]
});

mod particular {
    use converse_tests::{alive, children_of, run_bounded, Launcher, Running};
    use std::process::Command;
    use std::time::Duration;

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    /// The job tag charmrun's verbose output names.
    fn tag(stderr: &str) -> String {
        stderr
            .split("job tag ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no job tag in: {stderr}"))
    }

    /// This job's files in /dev/shm.
    fn files_of(tag: &str) -> Vec<String> {
        let prefix = charmrun::protocol::shm_prefix(tag);
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| n.starts_with(&prefix))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_node_killed_mid_job_leaves_no_segment_and_no_process() {
        let si = Launcher::Charmrun {
            machine: "si",
            opts: vec!["++verbose".into()],
        };
        let mut job = Running::start(
            &mut si.command(PROGRAM, 4, &["wait", "30"]),
            Duration::from_secs(60),
        )
        .expect("start");
        assert!(
            job.wait_for_stderr("all 4 node(s) connected", Duration::from_secs(20)),
            "{}",
            job.stderr_so_far()
        );
        let nodes = children_of(job.pid());
        assert_eq!(nodes.len(), 4);
        // Every PE is past start-up and waiting once it has said so.
        assert!(
            job.wait_for_stdout_lines("conformance wait: PE", 4, Duration::from_secs(20)),
            "{}",
            job.stderr_so_far()
        );
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(nodes[1] as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let o = job.finish();
        assert_ne!(o.code, Some(0), "{o}");
        assert!(o.stderr.contains("was killed by signal 9 (SIGKILL)"), "{o}");
        for pid in nodes {
            assert!(!alive(pid), "node {pid} survived\n{o}");
        }
        let t = tag(&o.stderr);
        assert_eq!(files_of(&t), Vec::<String>::new(), "{o}");
    }

    /// A /dev/shm without room (a 64 KiB tmpfs mounted over it in a mount namespace of the
    /// job's own): an all-to-all ends with one line naming the room there is and the room a
    /// ring needs, never a SIGBUS (it was "PE 0 was killed by signal 7" on si, si+tcp and
    /// si+udp), and leaves nothing in it.
    #[test]
    fn a_dev_shm_without_room_is_a_clear_error_not_a_sigbus() {
        let charmrun = converse_tests::charmrun_path(PROGRAM);
        for machine in ["si", "si+tcp", "si+udp"] {
            let script = format!(
                "mount -t tmpfs -o size=64k tmpfs /dev/shm || exit 99; \
                 {} +p4 {PROGRAM} alltoall 200000 +machine {machine}; \
                 code=$?; ls -A /dev/shm; exit $code",
                charmrun.display()
            );
            let o = run_bounded(
                Command::new("unshare").args(["-m", "sh", "-c", &script]),
                Duration::from_secs(60),
            );
            if o.code == Some(99) || o.stderr.contains("unshare failed") {
                // Not root, or no mount namespaces: there is no way to fill /dev/shm safely.
                eprintln!("skipped: cannot mount a small /dev/shm here\n{o}");
                return;
            }
            assert!(
                !o.timed_out && o.code.is_some_and(|c| c != 0),
                "{machine}: {o}"
            );
            assert!(
                o.stderr.contains("no room in /dev/shm") && o.stderr.contains("KiB are free"),
                "{machine}: {o}"
            );
            assert!(!o.stderr.contains("signal 7"), "{machine}: {o}");
            assert_eq!(
                o.stdout
                    .lines()
                    .filter(|l| l.starts_with("converse-"))
                    .count(),
                0,
                "{o}"
            );
        }
    }

    /// charmrun that cannot start every node (too few file descriptors for 256) says so, and
    /// nothing is left in /dev/shm (82 segments of 64 MiB were, when every node made its port
    /// before the table): nothing is made before every node has connected.
    #[test]
    fn a_start_up_that_fails_leaves_nothing_in_dev_shm() {
        let charmrun = converse_tests::charmrun_path(PROGRAM);
        let script = format!(
            "ulimit -n 256; exec {} +p256 ++verbose {PROGRAM} hello +machine si",
            charmrun.display()
        );
        let o = run_bounded(
            Command::new("sh").args(["-c", &script]),
            Duration::from_secs(120),
        );
        assert!(o.code.is_some_and(|c| c != 0), "{o}");
        assert!(o.stderr.contains("Too many open files"), "{o}");
        let t = tag(&o.stderr);
        assert_eq!(files_of(&t), Vec::<String>::new(), "{o}");
    }

    /// Processes of the job tagged `tag` (their environment names it), wherever they are in
    /// the process tree: nodes whose charmrun was killed belong to nobody.
    fn processes_of(tag: &str) -> Vec<i32> {
        let needle = format!("{}={tag}", charmrun::client::ENV_JOB);
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
            })
            .filter(|&pid| alive(pid as u32))
            .collect()
    }

    /// When a start-up test kills charmrun.
    #[derive(Debug, Clone, Copy)]
    enum Moment {
        /// This long after starting it.
        After(u64),
        /// Once the host's segment exists, and this many ms later.
        Segment(u64),
        /// Once every node has connected (nodes then get the table and attach).
        Connected,
    }

    #[test]
    fn charmrun_killed_during_start_up_leaves_nothing_in_dev_shm() {
        // charmrun SIGKILLed at moments of a 32-node start-up: before nodes connect, once they
        // all have, while the host's segment exists (the first node made it, the others map
        // it between two barriers). Every node must end (its control connection drops) and
        // nothing may be left in /dev/shm.
        use Moment::*;
        let si = Launcher::Charmrun {
            machine: "si",
            opts: vec!["++verbose".into()],
        };
        let moments = [
            After(0),
            After(5),
            Connected,
            Segment(0),
            Segment(0),
            Segment(0),
            Segment(1),
            Segment(2),
            Connected,
            Segment(0),
            Segment(0),
            Segment(0),
        ];
        let mut killed_with_ports = 0;
        for (round, &moment) in moments.iter().enumerate() {
            let mut job = Running::start(
                &mut si.command(PROGRAM, 32, &["hello"]),
                Duration::from_secs(30),
            )
            .expect("start");
            let limit = std::time::Instant::now() + Duration::from_secs(10);
            match moment {
                After(ms) => std::thread::sleep(Duration::from_millis(ms)),
                Connected => {
                    job.wait_for_stderr("all 32 node(s) connected", Duration::from_secs(10));
                }
                Segment(ms) => {
                    if job.wait_for_stderr("job tag ", Duration::from_secs(10)) {
                        let t = self::tag(&job.stderr_so_far());
                        while files_of(&t).is_empty() && std::time::Instant::now() < limit {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                }
            }
            let err = job.stderr_so_far();
            let ports_when_killed = if err.contains("job tag ") {
                files_of(&self::tag(&err)).len()
            } else {
                0
            };
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(job.pid() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let o = job.finish();
            // Killed before it said its tag: it had started no node yet.
            let Some(t) = o
                .stderr
                .split("job tag ")
                .nth(1)
                .and_then(|r| r.split(',').next())
            else {
                continue;
            };
            if ports_when_killed > 0 {
                killed_with_ports += 1;
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut left = processes_of(t);
            while !left.is_empty() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                left = processes_of(t);
            }
            for &pid in &left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let files = files_of(t);
            // Whatever a failure leaves is removed, so that it does not outlive the test.
            for f in &files {
                let _ = std::fs::remove_file(std::path::Path::new("/dev/shm").join(f));
            }
            let at = format!("round {round}, killed at {moment:?} ({ports_when_killed} ports)");
            assert_eq!(
                left,
                Vec::<i32>::new(),
                "{at}: nodes outlived charmrun by 20 s\n{o}"
            );
            assert_eq!(files, Vec::<String>::new(), "{at}\n{o}");
        }
        assert!(
            killed_with_ports >= 1,
            "charmrun was never killed while the host's segment existed"
        );
    }

    fn si() -> Launcher {
        Launcher::Charmrun {
            machine: "si",
            opts: vec![],
        }
    }

    #[test]
    fn large_messages_arrive_whole_through_the_rings_when_single_copy_is_off() {
        converse_tests::expect_ok(
            &si(),
            PROGRAM,
            2,
            &["sizes", "67108864", "+set", "si.single_copy_from=off"],
        );
    }

    #[test]
    fn large_messages_arrive_whole_when_the_receiver_copies_alone() {
        // Lent, without the sender's help with the copy.
        converse_tests::expect_ok(
            &si(),
            PROGRAM,
            2,
            &["sizes", "67108864", "+set", "si.copy_together=false"],
        );
    }

    #[test]
    fn every_message_lent_keeps_fifo_and_exactly_once() {
        // Every message, however small, through the single-copy path: loans are pulled in
        // order, each once, between every pair and with a node to itself.
        let lend_all = ["+set", "si.single_copy_from=0"];
        let args = |a: &[&'static str]| [a, &lend_all[..]].concat();
        converse_tests::expect_ok(&si(), PROGRAM, 4, &args(&["fifo"]));
        converse_tests::expect_ok(&si(), PROGRAM, 4, &args(&["alltoall", "100000"]));
        converse_tests::expect_ok(&si(), PROGRAM, 2, &args(&["sizes", "4194304"]));
        converse_tests::expect_ok(&si(), PROGRAM, 3, &args(&["exit-after-send"]));
    }

    #[test]
    fn a_bad_single_copy_setting_is_a_clear_error() {
        let o = si().run(
            PROGRAM,
            2,
            &["hello", "+set", "si.single_copy_from=lots"],
            Duration::from_secs(30),
        );
        assert_ne!(o.code, Some(0), "{o}");
        assert!(
            o.stderr.contains(
                "setting si.single_copy_from: 'lots' is neither a size in bytes nor 'off'"
            ),
            "{o}"
        );
    }

    #[test]
    fn charmrun_removes_the_files_of_a_node_that_died_before_removing_them() {
        // A "node" that makes a segment under the job's tag, as a layer does, then dies.
        let dir = std::env::temp_dir().join(format!("si-crash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let script = dir.join("crash.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\ntouch /dev/shm/converse-$CONVERSE_JOB-si-$CONVERSE_NODE \
             && echo $CONVERSE_JOB > \"$(dirname \"$0\")/made-$CONVERSE_NODE\"\nkill -9 $$\n",
        )
        .expect("write");
        Command::new("chmod")
            .arg("+x")
            .arg(&script)
            .status()
            .expect("chmod");
        let charmrun = converse_tests::charmrun_path(PROGRAM);
        let o = run_bounded(
            Command::new(charmrun)
                .args(["+p2", "++verbose"])
                .arg(&script),
            Duration::from_secs(30),
        );
        // At least one node made its file before dying (else there was nothing to remove).
        let made = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("made-"))
                    .count()
            })
            .unwrap_or(0);
        let _ = std::fs::remove_dir_all(&dir);
        assert_ne!(o.code, Some(0), "{o}");
        assert!(made > 0, "no node made its file\n{o}");
        let t = tag(&o.stderr);
        assert_eq!(files_of(&t), Vec::<String>::new(), "{o}");
    }
}

converse_tests::launched_layer_limits!("si");
