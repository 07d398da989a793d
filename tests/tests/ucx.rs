//! The conformance suite on the UCX layers this host can run: `ucx+tcp` (TCP sockets) and
//! `ucx+shm` (shared memory), and the composite `si+ucx+tcp` on one host, every job started by
//! charmrun, with one PE per process and in SMP mode (`++ppn 2`). Only with the `ucx` feature (`--features ucx`), which needs UCX.

#![cfg(feature = "ucx")]

mod tcp {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ucx+tcp",
        opts: vec![]
    });
}

mod shm {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ucx+shm",
        opts: vec![]
    });
}

mod tcp_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "ucx+tcp",
            opts: vec![]
        },
        ppn = 2
    );
}

mod shm_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "ucx+shm",
            opts: vec![]
        },
        ppn = 2
    );
}

mod choice {
    // `ucx`: UCX's own choice of transports (shared memory within the host here).
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ucx",
        opts: vec![]
    });
}

/// The composite `si+ucx+tcp` on one host: every peer is reached through SI, the fabric part open
/// and idle beside it (tests/composite.rs runs it across namespace hosts, where both carry
/// traffic).
mod si_ucx_tcp {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "si+ucx+tcp",
        opts: vec![]
    });
}

mod si_ucx_tcp_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "si+ucx+tcp",
            opts: vec![]
        },
        ppn = 2
    );
}

/// Jobs across hosts made of network namespaces (`converse_tests::hosts`, as
/// `tests/multihost.rs`). Needs root; without it the tests say they were skipped.
mod hosts {
    use converse_tests::hosts::Hosts;

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    fn job(hosts: &Hosts, machine: &str, scenario: &[&str]) -> converse_tests::Outcome {
        let shell = hosts.shell();
        let machines = hosts.file("machines", "10.99.0.2\n10.99.0.3\n");
        let mut a: Vec<String> = vec!["+p3".into(), "++verbose".into(), "++remote-shell".into()];
        a.push(shell.display().to_string());
        a.push("++nodelist".into());
        a.push(machines.display().to_string());
        a.push(PROGRAM.into());
        a.extend(scenario.iter().map(|s| s.to_string()));
        a.extend(["+machine".into(), machine.into()]);
        hosts.charmrun(PROGRAM, &a)
    }

    #[test]
    fn ucx_shm_refuses_a_job_that_spans_hosts() {
        let Some(hosts) = Hosts::new("ux") else {
            return;
        };
        let o = job(&hosts, "ucx+shm", &["hello"]);
        assert_ne!(o.code, Some(0), "{o}");
        assert!(!o.timed_out, "{o}");
        assert!(
            o.stderr
                .contains("ucx+shm is shared memory within one host, and this job spans hosts"),
            "{o}"
        );
    }

    #[test]
    fn ucx_and_ucx_tcp_run_across_hosts() {
        let Some(hosts) = Hosts::new("uy") else {
            return;
        };
        for machine in ["ucx+tcp", "ucx"] {
            for scenario in [&["hello"][..], &["fifo"], &["sizes", "8388608"]] {
                let o = job(&hosts, machine, scenario);
                assert_eq!(o.code, Some(0), "{machine} {scenario:?}: {o}");
                assert_eq!(
                    o.lines_with(&format!("conformance {}: ok", scenario[0])),
                    1,
                    "{o}"
                );
                assert!(o.stderr.contains("connected from 10.99.0.2"), "{o}");
                assert!(o.stderr.contains("connected from 10.99.0.3"), "{o}");
            }
        }
    }
}

/// What a node holds stays bounded: toward a stalled peer (`queued`, rendezvous sends held
/// until pulled) and, at a receiver slower than its sender, what the runtime takes in.
mod bounds {
    use converse_tests::Launcher;

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    fn charmrun(machine: &'static str) -> Launcher {
        Launcher::Charmrun {
            machine,
            opts: vec![],
        }
    }

    #[test]
    fn memory_toward_a_stalled_peer_is_bounded() {
        for machine in ["ucx+tcp", "ucx+shm"] {
            converse_tests::expect_bounded_flood(&charmrun(machine), PROGRAM);
        }
    }

    #[test]
    fn memory_of_a_receiver_slower_than_its_sender_is_bounded() {
        for machine in ["ucx+tcp", "ucx+shm"] {
            converse_tests::expect_bounded_backlog(&charmrun(machine), PROGRAM);
        }
    }
}

/// A transport string whose transports this host lacks (`ucx+rc`, `ucx+ud` without
/// InfiniBand) is refused at start-up in one line, not at the first send.
#[test]
fn a_transport_this_host_lacks_is_refused_at_start_up() {
    let info = std::process::Command::new("ucx_info")
        .arg("-d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for (machine, tl) in [("ucx+rc", "rc_verbs"), ("ucx+ud", "ud_verbs")] {
        if info.contains(&format!("Transport: {tl}")) {
            eprintln!("skipped {machine}: this host has {tl}");
            continue;
        }
        let o = converse_tests::Launcher::Charmrun {
            machine,
            opts: vec![],
        }
        .run(
            env!("CARGO_BIN_EXE_conformance"),
            2,
            &["hello"],
            std::time::Duration::from_secs(30),
        );
        assert_ne!(o.code, Some(0), "{o}");
        assert!(!o.timed_out, "{o}");
        assert!(
            o.stderr.contains(&format!("{machine}: no transport of ")),
            "{o}"
        );
    }
}

/// One-sided transfers (`Pe::get`, `Pe::put`, regions; emulated over messages on this layer)
/// over UCX (also at `++ppn 2`): the `onesided` program's checks of ranges, ordering and
/// errors, and transfers of 256 MiB arriving whole.
mod onesided {
    converse_tests::onesided_suite!(&[("ucx", 1, 3), ("ucx", 2, 4)]);
}
