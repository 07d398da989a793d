//! The conformance suite on the TCP layer, every job started by charmrun.

converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
    machine: "tcp",
    opts: vec![]
});

converse_tests::launched_layer_limits!("tcp");

/// Strangers at a node's listener (adversarial review): 300 connections to each node that say
/// nothing must not make it close a peer's connection, nor slow the job down to failure.
mod strangers {
    use converse_tests::{socket_ports, wait_for_children, Launcher, Running};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    /// The listening port of each of the job's `n` nodes, found before any flood (with one
    /// on, the kernel's socket table is long to read), with descriptors enough for a crowd
    /// of our own (the soft limit may be 1,024).
    fn listeners(job: &Running, n: usize) -> Vec<u16> {
        if let Ok((_, hard)) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        {
            let _ = nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NOFILE,
                hard.min(8192),
                hard,
            );
        }
        let nodes = wait_for_children(job.pid(), n, Duration::from_secs(20));
        assert_eq!(nodes.len(), n, "{}", job.stdout_so_far());
        nodes
            .iter()
            .map(|&pid| {
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let p = socket_ports(pid, "tcp");
                    if !p.is_empty() || Instant::now() > deadline {
                        break p.first().copied().expect("a node without a listener");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .collect()
    }

    #[test]
    fn silent_strangers_at_every_listener_cannot_end_the_job() {
        let launcher = Launcher::Charmrun {
            machine: "tcp",
            opts: vec![],
        };
        // Each PE computes 2 s before it sends, and sends each message with a write of its
        // own (coalesced, 3 million take under a second): the job outlives the strangers'
        // arrival, which takes seconds on a loaded machine (the other stranger test floods
        // the socket table that finding the listeners reads).
        let job = Running::start(
            &mut launcher.command(
                PROGRAM,
                4,
                &["alltoall", "3000000", "2", "+set", "tcp.coalesce_us=0"],
            ),
            Duration::from_secs(180),
        )
        .expect("start");
        let mut strangers = Vec::new();
        for port in listeners(&job, 4) {
            for _ in 0..300 {
                if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
                    strangers.push(s);
                }
            }
        }
        assert!(
            strangers.len() >= 4 * 250,
            "{} connections",
            strangers.len()
        );
        let o = job.finish();
        drop(strangers);
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("conformance alltoall: ok"), 1, "{o}");
    }

    /// A sustained flood of silent connections at every node's listener, from before the
    /// nodes connect to each other until the job ends, while every PE computes in a handler
    /// (nothing polls its layer) and then opens its connections: the peers' connections still
    /// get through, and the job ends well.
    #[test]
    fn a_sustained_connect_flood_while_nodes_compute_cannot_end_the_job() {
        use std::collections::VecDeque;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let launcher = Launcher::Charmrun {
            machine: "tcp",
            opts: vec![],
        };
        let job = Running::start(
            // 4 s of computing, so that the flood flows before the nodes connect however
            // long finding their listeners takes; then enough messages that it goes on while
            // they talk (coalesced, 400,000 took a tenth of a second).
            &mut launcher.command(PROGRAM, 4, &["alltoall", "4000000", "4"]),
            Duration::from_secs(120),
        )
        .expect("start");
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicU64::new(0));
        let ports = listeners(&job, 4);
        let mut flooders = Vec::new();
        for port in ports {
            let (stop, made) = (stop.clone(), made.clone());
            flooders.push(std::thread::spawn(move || {
                // 400 silent connections held per node, the oldest closed for each new one.
                let mut held = VecDeque::new();
                let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                        made.fetch_add(1, Ordering::Relaxed);
                        held.push_back(s);
                        if held.len() > 400 {
                            held.pop_front();
                        }
                    }
                }
            }));
        }
        let o = job.finish();
        stop.store(true, Ordering::Relaxed);
        for f in flooders {
            let _ = f.join();
        }
        let made = made.load(Ordering::Relaxed);
        eprintln!("{made} stranger connections made during the job");
        assert_eq!(o.code, Some(0), "{made} strangers\n{o}");
        assert_eq!(o.lines_with("conformance alltoall: ok"), 1, "{o}");
        assert!(made > 4000, "the flood did not flow: {made} connections");
    }
}

/// Coalescing (`tcp.coalesce_us`): the small messages of a burst leave several to a write
/// (the all-to-all's pumps send 256 to each peer per handler run), and every one arrives, once,
/// in order (the scenario checks); with coalescing off, a write each.
#[test]
fn bursts_of_small_messages_are_coalesced_and_arrive_whole() {
    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");
    let launcher = converse_tests::Launcher::Charmrun {
        machine: "tcp",
        opts: vec![],
    };
    for (set, coalesced) in [(None, true), (Some("tcp.coalesce_us=0"), false)] {
        let mut args = vec!["alltoall", "200000", "+stats"];
        if let Some(s) = set {
            args.extend(["+set", s]);
        }
        let o = converse_tests::expect_ok(&launcher, PROGRAM, 2, &args);
        let writes = converse_tests::stats_field(&o.stderr, "tcp.writes");
        let frames = converse_tests::stats_field(&o.stderr, "tcp.frames_sent");
        assert!(frames >= 200_000, "{set:?}: {frames} frames\n{o}");
        if coalesced {
            assert!(
                writes * 8 < frames,
                "{writes} writes for {frames} frames\n{o}"
            );
        } else {
            assert!(
                writes * 2 > frames,
                "{writes} writes for {frames} frames\n{o}"
            );
        }
    }
}
