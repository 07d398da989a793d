//! The conformance suite on the MPI layer, every job started by `mpirun -n N`, and what is
//! particular to it. Built only with `--features mpi` (it needs an MPI installed):
//!
//! ```text
//! cargo test --release -p converse-tests --features mpi --test mpi
//! ```
//!
//! Open MPI refuses to start as root unless told it may: every `mpirun` these tests start gets
//! `OMPI_ALLOW_RUN_AS_ROOT` in its environment ([`converse_tests::mpirun_env`]).
#![cfg(feature = "mpi")]

converse_tests::conformance_suite!({
    assert!(
        converse_tests::have_mpirun(),
        "these tests need mpirun on the PATH"
    );
    converse_tests::Launcher::Mpirun {
        machine: "mpi",
        opts: vec![],
        split: false,
    }
});

/// SMP mode under MPI: `mpirun -n N/2 PROGRAM +ppn 2`; only the communication thread, the
/// one that initialised MPI, calls it (FUNNELED).
mod ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Mpirun {
            machine: "mpi",
            opts: vec![],
            split: false,
        },
        ppn = 2
    );
}

/// `mpirun` starting `si+mpi`; `split`: on two hosts (see [`converse_tests::Launcher`]).
fn si_mpi(split: bool) -> converse_tests::Launcher {
    converse_tests::Launcher::Mpirun {
        machine: "si+mpi",
        opts: vec![],
        split,
    }
}

/// `si+mpi`, every rank on one host: shared memory between all of them, MPI booting the job.
mod si_mpi {
    converse_tests::conformance_suite!(super::si_mpi(false));
}

/// `si+mpi` on two hosts (the second half of the ranks in a pid namespace of its own):
/// shared memory inside each, MPI between them; and at `+ppn 2`.
mod si_mpi_two_hosts {
    converse_tests::conformance_suite!(super::si_mpi(true));

    mod ppn2 {
        converse_tests::conformance_suite!(super::super::si_mpi(true), ppn = 2);
    }
}

mod particular {
    use converse_tests::{mpirun_options, run_bounded, wait_for_children, Running};
    use std::process::Command;
    use std::time::Duration;

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    fn mpirun(ranks: usize, args: &[&str]) -> Command {
        converse_tests::Launcher::Mpirun {
            machine: "mpi",
            opts: vec![],
            split: false,
        }
        .command(PROGRAM, ranks, args)
    }

    #[test]
    fn memory_toward_a_stalled_peer_is_bounded() {
        converse_tests::expect_bounded_flood(
            &converse_tests::Launcher::Mpirun {
                machine: "mpi",
                opts: vec![],
                split: false,
            },
            PROGRAM,
        );
    }

    #[test]
    fn memory_of_a_receiver_slower_than_its_sender_is_bounded() {
        converse_tests::expect_bounded_backlog(
            &converse_tests::Launcher::Mpirun {
                machine: "mpi",
                opts: vec![],
                split: false,
            },
            PROGRAM,
        );
    }

    #[test]
    fn messages_longer_than_a_piece_arrive_whole() {
        // 4 KiB pieces: every size from 4 KiB up to 4 MiB goes as a header and pieces.
        let o = run_bounded(
            &mut mpirun(2, &["sizes", "4194304", "+set", "mpi.piece_bytes=4096"]),
            Duration::from_secs(120),
        );
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("conformance sizes: ok"), 1, "{o}");
    }

    #[test]
    fn a_tiny_window_still_delivers_everything_in_order() {
        let o = run_bounded(
            &mut mpirun(3, &["alltoall", "100000", "+set", "mpi.window=4"]),
            Duration::from_secs(120),
        );
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("conformance alltoall: ok"), 1, "{o}");
    }

    /// Sizes 16 B..4 KiB with the small limit at 1 KiB: about three messages in four go by
    /// notice and probe, the rest to pre-posted receives (one of them, so most small ones
    /// find none posted), and each pair's order must hold across the two ways in.
    #[test]
    fn fifo_holds_across_pre_posted_and_probed_messages() {
        let o = run_bounded(
            &mut mpirun(
                3,
                &[
                    "fifo",
                    "+set",
                    "mpi.small_bytes=1024",
                    "+set",
                    "mpi.prepost=1",
                    "+set",
                    "mpi.window=8",
                ],
            ),
            Duration::from_secs(120),
        );
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("conformance fifo: ok"), 1, "{o}");
    }

    /// The program's own message on MPI_COMM_WORLD is not taken by the layer's receives,
    /// posted for any source and tag on communicators of the layer's own.
    #[test]
    fn a_program_sending_on_mpi_comm_world_keeps_its_messages() {
        let o = run_bounded(&mut mpirun(2, &["mpi-world"]), Duration::from_secs(60));
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("conformance mpi-world: ok"), 1, "{o}");
    }

    #[test]
    fn plus_p_must_match_the_number_of_ranks() {
        let o = run_bounded(&mut mpirun(2, &["hello", "+p4"]), Duration::from_secs(60));
        assert_ne!(o.code, Some(0), "{o}");
        assert!(
            o.stderr
                .contains("+p4 asks for 4 PEs but the MPI job has 2 rank(s)"),
            "{o}"
        );
        assert_eq!(o.lines_with("hello from PE"), 0, "{o}");
    }

    #[test]
    fn bad_settings_are_refused() {
        let o = run_bounded(
            &mut mpirun(2, &["hello", "+set", "mpi.window=1"]),
            Duration::from_secs(60),
        );
        assert_ne!(o.code, Some(0), "{o}");
        assert!(o.stderr.contains("setting mpi.window"), "{o}");
        for bad in ["mpi.small_bytes=8", "mpi.small_bytes=1M", "mpi.prepost=0"] {
            let o = run_bounded(
                &mut mpirun(2, &["hello", "+set", bad]),
                Duration::from_secs(60),
            );
            assert_ne!(o.code, Some(0), "{bad}: {o}");
            let key = bad.split('=').next().unwrap_or(bad);
            assert!(o.stderr.contains(&format!("setting {key}")), "{bad}: {o}");
            assert_eq!(o.lines_with("hello from PE"), 0, "{bad}: {o}");
        }
    }

    #[test]
    fn run_without_mpirun_it_is_a_one_rank_job() {
        let o = run_bounded(
            Command::new(PROGRAM).args(["hello", "+machine", "mpi"]),
            Duration::from_secs(60),
        );
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("hello from PE 0 of 1"), 1, "{o}");
    }

    #[test]
    fn a_killed_rank_ends_the_job_and_leaves_no_process() {
        let mut job = Running::start(&mut mpirun(4, &["wait", "60"]), Duration::from_secs(60))
            .expect("start mpirun");
        assert!(
            job.wait_for_stdout_lines("conformance wait: PE", 4, Duration::from_secs(30)),
            "{}",
            job.stderr_so_far()
        );
        let ranks = wait_for_children(job.pid(), 4, Duration::from_secs(10));
        assert_eq!(ranks.len(), 4, "ranks: {ranks:?}");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(ranks[2] as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let o = job.finish();
        assert!(!o.timed_out, "{o}");
        assert_ne!(o.code, Some(0), "{o}");
        for pid in ranks {
            assert!(!converse_tests::alive(pid), "rank {pid} survived\n{o}");
        }
    }

    fn charmrun(args: &[&str]) -> Command {
        let mut c = Command::new(converse_tests::charmrun_path(PROGRAM));
        c.arg("++mpiexec").envs(converse_tests::mpirun_env());
        let launcher = ["mpirun"]
            .into_iter()
            .map(String::from)
            .chain(mpirun_options())
            .collect::<Vec<_>>()
            .join(" ");
        c.args(["++remote-shell", &launcher]).args(args);
        c
    }

    #[test]
    fn charmrun_mpiexec_hands_the_job_to_mpirun() {
        let o = run_bounded(
            &mut charmrun(&["+p4", PROGRAM, "hello"]),
            Duration::from_secs(60),
        );
        assert_eq!(o.code, Some(0), "{o}");
        for pe in 0..4 {
            assert_eq!(o.lines_with(&format!("hello from PE {pe} of 4")), 1, "{o}");
        }
        // Under an MPI launcher a composite comes first, as under charmrun: the ranks of one
        // host talk through shared memory.
        assert_eq!(o.lines_with("layer si+mpi: 4 PEs on 4 nodes"), 1, "{o}");
    }

    #[test]
    fn charmrun_mpiexec_passes_the_exit_code_on() {
        let o = run_bounded(
            &mut charmrun(&["+p2", PROGRAM, "exit-code", "42"]),
            Duration::from_secs(60),
        );
        assert_eq!(o.code, Some(42), "{o}");
    }

    #[test]
    fn charmrun_mpiexec_timelimit_ends_a_hung_job() {
        let o = run_bounded(
            &mut charmrun(&["+p2", "++timelimit", "2", PROGRAM, "hang"]),
            Duration::from_secs(60),
        );
        assert_eq!(o.code, Some(124), "{o}");
        assert!(o.stderr.contains("++timelimit of 2 s reached"), "{o}");
    }
}

/// Tasks and calls with replies (`converse-tasks`) under mpirun, at `+ppn 1` and `2`.
mod tasks {
    use converse_tests::Launcher;

    const TASKS: &str = env!("CARGO_BIN_EXE_tasks");

    fn run(scenario: &str, pes: usize, ppn: usize) {
        Launcher::Mpirun {
            machine: "mpi",
            opts: vec![],
            split: false,
        }
        .with_ppn(ppn)
        .expect_every_pe_ok(TASKS, "tasks", scenario, pes);
    }

    #[test]
    fn tasks_yield_sleep_share_a_mutex_join_and_abort() {
        run("basics", 3, 1);
    }

    #[test]
    fn calls_get_their_own_replies() {
        run("calls", 3, 1);
    }

    #[test]
    fn calls_get_their_own_replies_at_ppn_2() {
        run("calls", 4, 2);
    }

    #[test]
    fn quiescence_is_detected_after_a_storm_and_not_before() {
        run("qd", 4, 1);
    }

    #[test]
    fn quiescence_is_detected_after_a_storm_at_ppn_2() {
        run("qd", 4, 2);
    }
}

/// One-sided transfers (`Pe::get`, `Pe::put`) under mpirun, at `+ppn 1` and `2`.
mod onesided {
    use converse_tests::Launcher;

    const ONESIDED: &str = env!("CARGO_BIN_EXE_onesided");

    fn mpirun(ppn: usize) -> Launcher {
        Launcher::Mpirun {
            machine: "mpi",
            opts: vec![],
            split: false,
        }
        .with_ppn(ppn)
    }

    #[test]
    fn gets_puts_ranges_ordering_and_errors() {
        mpirun(1).expect_every_pe_ok(ONESIDED, "onesided", "basics", 3);
        mpirun(2).expect_every_pe_ok(ONESIDED, "onesided", "basics", 4);
    }

    /// 256 MiB, the issue's largest, whole: one rank per process, and at `ppn 2` with the
    /// region in the other process.
    #[test]
    fn transfers_of_256_mib_arrive_whole() {
        mpirun(1).expect_big_transfers(ONESIDED, 2, 256 << 20);
        mpirun(2).expect_big_transfers(ONESIDED, 4, 256 << 20);
    }
}
