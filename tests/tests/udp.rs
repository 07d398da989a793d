//! The conformance suite on the UDP layer, every job started by charmrun; then what is
//! particular to it: real loss (a network namespace whose firewall drops UDP at random),
//! reordering and duplication (a relay between the nodes), a silent peer, hostile datagrams.

converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
    machine: "udp",
    opts: vec![]
});

/// The scenarios a damaged network must not break: FIFO with content checks, a count- and
/// checksum-checked all-to-all, messages of every size up to 4 MiB (fragmented) both ways.
const DAMAGE_SCENARIOS: [&[&str]; 3] = [&["fifo"], &["alltoall", "200000"], &["sizes", "4194304"]];

/// Packets retransmitted by all nodes, from their `+stats` lines.
use converse_tests::stats_field;

fn retransmitted(stderr: &str) -> u64 {
    stats_field(stderr, "udp.retransmits")
}

mod loss {
    use super::{retransmitted, DAMAGE_SCENARIOS};
    use converse_tests::netns::Lossy;
    use converse_tests::{run_bounded, Outcome};
    use std::time::Duration;

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    /// `scenario` on `pes` PEs under charmrun on the UDP layer, inside `net`.
    fn run(net: &Lossy, pes: usize, scenario: &[&str]) -> Outcome {
        let mut cmd = net.command(&converse_tests::charmrun_path(PROGRAM));
        cmd.arg(format!("+p{pes}"))
            .arg(PROGRAM)
            .args(scenario)
            .args(["+machine", "udp", "+stats"]);
        run_bounded(&mut cmd, Duration::from_secs(180))
    }

    /// Every damage scenario passes at `percent` loss (so every message arrived exactly once,
    /// in order, intact), and the layer did repair losses.
    fn survives(percent: u32) {
        let Some(net) = Lossy::new(percent) else {
            return;
        };
        let mut repaired = 0;
        for scenario in DAMAGE_SCENARIOS {
            let o = run(&net, 4, scenario);
            assert!(
                o.code == Some(0) && o.lines_with(&format!("conformance {}: ok", scenario[0])) == 1,
                "{scenario:?} at {percent}% loss:\n{o}"
            );
            repaired += retransmitted(&o.stderr);
        }
        // Over some 60,000 datagrams losses are certain (one scenario alone may be lucky).
        assert!(
            repaired > 0,
            "at {percent}% loss nothing was retransmitted, so nothing was lost"
        );
    }

    #[test]
    fn one_percent_loss() {
        survives(1);
    }

    #[test]
    fn five_percent_loss() {
        survives(5);
    }

    #[test]
    fn twenty_percent_loss() {
        survives(20);
    }
}

mod relay {
    use super::{stats_field, DAMAGE_SCENARIOS};
    use converse_net::udp::wire;
    use converse_tests::Launcher;
    use std::collections::HashMap;
    use std::net::{SocketAddr, UdpSocket};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    /// What the relay did.
    #[derive(Default)]
    struct Counts {
        forwarded: AtomicU64,
        duplicated: AtomicU64,
        delayed: AtomicU64,
    }

    /// A UDP relay between the nodes of a job: every node sends every datagram to it
    /// (`+set udp.via=ADDR`), and it forwards each to the node the header names — some twice,
    /// some held back for up to a millisecond so that later ones overtake them. It learns
    /// where each node is from the datagrams it sends (a node announces itself at boot).
    struct Relay {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        counts: Arc<Counts>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    /// xorshift64*: reproducible randomness.
    struct Rng(u64);

    impl Rng {
        fn percent(&mut self, p: u64) -> bool {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % 100 < p
        }
    }

    impl Relay {
        fn start(dup_percent: u64, delay_percent: u64) -> Relay {
            let sock = UdpSocket::bind("127.0.0.1:0").expect("relay socket");
            sock.set_read_timeout(Some(Duration::from_micros(200)))
                .expect("timeout");
            let addr = sock.local_addr().expect("relay address");
            let stop = Arc::new(AtomicBool::new(false));
            let counts = Arc::new(Counts::default());
            let (s, c) = (stop.clone(), counts.clone());
            let thread = std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
                let mut nodes: HashMap<u16, SocketAddr> = HashMap::new();
                // Datagrams for nodes not yet heard from, and datagrams held back.
                let mut waiting: Vec<(u16, Vec<u8>)> = Vec::new();
                let mut held: Vec<(Instant, u16, Vec<u8>)> = Vec::new();
                let mut buf = vec![0u8; 65536];
                let send = |nodes: &HashMap<u16, SocketAddr>, dst: u16, d: &[u8]| {
                    if let Some(to) = nodes.get(&dst) {
                        let _ = sock.send_to(d, to);
                        c.forwarded.fetch_add(1, Ordering::Relaxed);
                    }
                };
                while !s.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        if let Some((src, dst)) = wire::route(&buf[..n]) {
                            nodes.insert(src, from);
                            if src != dst {
                                waiting.push((dst, buf[..n].to_vec()));
                            }
                        }
                    }
                    let now = Instant::now();
                    let mut i = 0;
                    while i < waiting.len() {
                        if !nodes.contains_key(&waiting[i].0) {
                            i += 1;
                            continue;
                        }
                        let (dst, d) = waiting.swap_remove(i);
                        if rng.percent(delay_percent) {
                            let late = Duration::from_micros(100 + (d.len() as u64 % 900));
                            held.push((now + late, dst, d));
                            c.delayed.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        send(&nodes, dst, &d);
                        if rng.percent(dup_percent) {
                            send(&nodes, dst, &d);
                            c.duplicated.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let (due, later): (Vec<_>, Vec<_>) =
                        held.drain(..).partition(|(t, _, _)| *t <= now);
                    held = later;
                    for (_, dst, d) in due {
                        send(&nodes, dst, &d);
                    }
                }
            });
            Relay {
                addr,
                stop,
                counts,
                thread: Some(thread),
            }
        }
    }

    impl Drop for Relay {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    #[test]
    fn reordered_and_duplicated_datagrams_still_give_exactly_once_in_order() {
        for scenario in DAMAGE_SCENARIOS {
            let relay = Relay::start(10, 20);
            let via = format!("udp.via={}", relay.addr);
            let mut args: Vec<&str> = scenario.to_vec();
            args.extend(["+set", &via, "+stats"]);
            let launcher = Launcher::Charmrun {
                machine: "udp",
                opts: vec![],
            };
            let o = launcher.run(PROGRAM, 4, &args, Duration::from_secs(120));
            assert!(
                o.code == Some(0) && o.lines_with(&format!("conformance {}: ok", scenario[0])) == 1,
                "{scenario:?} through the relay:\n{o}"
            );
            let c = &relay.counts;
            assert!(
                c.duplicated.load(Ordering::Relaxed) > 0 && c.delayed.load(Ordering::Relaxed) > 0,
                "the relay did its job"
            );
            // The duplicates reached the nodes, and were dropped there.
            assert!(stats_field(&o.stderr, "udp.duplicates") > 0, "{o}");
        }
    }
}

mod particular {
    use super::{retransmitted, stats_field};
    use converse_net::udp::wire::{self, Header, Kind};
    use converse_tests::{wait_for_children, Launcher, Running};
    use std::net::{SocketAddr, UdpSocket};
    use std::time::{Duration, Instant};

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    fn udp() -> Launcher {
        Launcher::Charmrun {
            machine: "udp",
            opts: vec![],
        }
    }

    #[test]
    fn a_peer_that_stops_answering_ends_the_job_naming_it() {
        let started = Instant::now();
        let o = udp().run(
            PROGRAM,
            3,
            &["silent", "+set", "udp.dead_after_s=2"],
            Duration::from_secs(60),
        );
        assert!(!o.timed_out, "{o}");
        assert_ne!(o.code, Some(0), "{o}");
        assert!(
            o.stderr.contains("node 2 (")
                && o.stderr.contains("sent nothing for 2.")
                && o.stderr.contains("+set udp.dead_after_s=SECONDS"),
            "{o}"
        );
        assert!(started.elapsed() < Duration::from_secs(30), "{o}");
    }

    #[test]
    fn a_fast_sender_waits_for_a_slow_receiver_without_a_retransmission_storm() {
        // With the default buffers, and with buffers so small that the window must follow
        // them: every message arrives (the sender queues, never drops), and a receiver that
        // is slow to answer does not make the sender resend what it sent.
        for sockbuf in ["udp.sockbuf_kib=16384", "udp.sockbuf_kib=64"] {
            let o = udp().run(
                PROGRAM,
                2,
                &["slow", "3000", "+set", sockbuf, "+stats"],
                Duration::from_secs(120),
            );
            assert!(
                o.code == Some(0) && o.lines_with("conformance slow: ok") == 1,
                "{sockbuf}: {o}"
            );
            assert!(retransmitted(&o.stderr) <= 150, "{sockbuf}: {o}");
        }
    }

    #[test]
    fn sixty_four_nodes_on_one_socket_each_all_to_all() {
        converse_tests::expect_ok(&udp(), PROGRAM, 64, &["alltoall", "200000"]);
    }

    #[test]
    fn four_nodes_send_from_connected_sockets_up_to_the_limit() {
        // Every node talks to all three others: with the default limit each has a send
        // socket per peer; with a limit of one, it sends to two of them from its own socket
        // (so each receiver sees both kinds of sender); with none, all from its socket.
        for (limit, sockets) in [(None, 12), (Some(1), 4), (Some(0), 0)] {
            let setting = limit.map(|l| format!("udp.connected_peers={l}"));
            let mut args = vec!["alltoall", "20000", "+stats"];
            if let Some(s) = &setting {
                args.extend(["+set", s]);
            }
            let o = udp().run(PROGRAM, 4, &args, Duration::from_secs(60));
            assert_eq!(o.code, Some(0), "{limit:?}: {o}");
            assert_eq!(
                stats_field(&o.stderr, "udp.peers_connected"),
                sockets,
                "{limit:?}: {o}"
            );
            assert_eq!(
                stats_field(&o.stderr, "udp.strangers_dropped"),
                0,
                "{limit:?}: {o}"
            );
        }
    }

    #[test]
    fn a_bad_setting_is_one_clear_error() {
        let o = udp().run(
            PROGRAM,
            2,
            &["hello", "+set", "udp.window=1"],
            Duration::from_secs(30),
        );
        assert_ne!(o.code, Some(0), "{o}");
        assert!(!o.timed_out, "{o}");
        assert!(
            o.stderr
                .contains("setting udp.window: 1 is outside 4..=4096"),
            "{o}"
        );
        let o = udp().run(
            PROGRAM,
            3,
            &["hello", "+set", "udp.connected_peers=-1"],
            Duration::from_secs(30),
        );
        assert_ne!(o.code, Some(0), "{o}");
        assert!(!o.timed_out, "{o}");
        assert!(
            o.stderr.contains(
                "setting udp.connected_peers: -1 is negative: give a whole number in 0..=65535"
            ),
            "{o}"
        );
    }

    /// The UDP ports process `pid` has open (from its descriptors and /proc/net/udp).
    fn udp_ports(pid: u32) -> Vec<u16> {
        converse_tests::socket_ports(pid, "udp")
    }

    /// The job secret in process `pid`'s environment.
    fn secret_of(pid: u32) -> Vec<u8> {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        env.split(|&b| b == 0)
            .filter_map(|v| v.strip_prefix(b"CONVERSE_SECRET="))
            .filter_map(|h| charmrun::protocol::secret_from_hex(std::str::from_utf8(h).ok()?))
            .map(|s| s.to_vec())
            .next()
            .unwrap_or_default()
    }

    #[test]
    fn foreign_and_garbage_datagrams_are_counted_and_dropped() {
        let mut job = Running::start(
            &mut udp().command(PROGRAM, 3, &["wait", "3", "+stats", "+quiet"]),
            Duration::from_secs(60),
        )
        .expect("start");
        assert!(
            job.wait_for_stdout_lines("conformance wait: PE", 3, Duration::from_secs(20)),
            "{}",
            job.stderr_so_far()
        );
        let nodes = wait_for_children(job.pid(), 3, Duration::from_secs(5));
        assert_eq!(nodes.len(), 3);
        let tag = wire::tag(&secret_of(nodes[0]));
        let stranger = UdpSocket::bind("127.0.0.1:0").expect("socket");
        let mut sent = 0;
        for &pid in &nodes {
            for port in udp_ports(pid) {
                let to: SocketAddr = ([127, 0, 0, 1], port).into();
                let mut send = |d: &[u8]| {
                    if stranger.send_to(d, to).is_ok() {
                        sent += 1;
                    }
                };
                // Noise, and datagrams of another job.
                for len in [0usize, 1, 27, 28, 100, 1500, 65000] {
                    send(&vec![0xC5; len]);
                }
                let mut h = Header {
                    kind: Kind::Data,
                    src: 1,
                    dst: 0,
                    wnd: 64,
                    tag: tag ^ 1,
                    seq: 0,
                    ack: 0,
                    sack: 0,
                    frag: None,
                    dup: false,
                };
                let mut d = vec![0u8; 28 + 40];
                h.write(&mut d);
                send(&d);
                // This job's tag, impossible fields: a kind that does not exist, a truncated
                // fragment header.
                h.tag = tag;
                for dst in 0..3u16 {
                    h.dst = dst;
                    h.src = (dst + 1) % 3;
                    h.write(&mut d);
                    d[1] = 9;
                    send(&d);
                    h.write(&mut d);
                    d[1] |= 0x10;
                    send(&d[..30]);
                    // A perfect data packet, but from a stranger's address.
                    h.write(&mut d);
                    send(&d);
                }
            }
        }
        assert!(sent > 0, "found no UDP port to send to");
        let o = job.finish();
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("conformance wait: ok"), 1, "{o}");
        // Noise, another job's tag and another node's datagrams never reach the layer (the
        // socket's kernel filter); what passes it and is still not ours is counted: per node,
        // the perfect packet from a stranger's address, and two of impossible fields.
        assert!(stats_field(&o.stderr, "udp.strangers_dropped") >= 3, "{o}");
        assert!(
            stats_field(&o.stderr, "udp.garbage_dropped") >= 3 * 2,
            "{o}"
        );
    }
}

converse_tests::launched_layer_limits!("udp");

/// A NaN setting is a one-line error, not a panic on every node.
#[test]
fn a_nan_setting_is_a_clear_error() {
    let o = converse_tests::Launcher::Charmrun {
        machine: "udp",
        opts: vec![],
    }
    .run(
        env!("CARGO_BIN_EXE_conformance"),
        2,
        &["hello", "+set", "udp.dead_after_s=nan"],
        std::time::Duration::from_secs(30),
    );
    assert_ne!(o.code, Some(0), "{o}");
    assert!(!o.stderr.contains("panicked"), "{o}");
    assert!(o.stderr.contains("udp.dead_after_s"), "{o}");
}

/// Coalescing (`udp.coalesce_us`): the small messages of a burst (the all-to-all's pumps send
/// 256 to each peer per handler run) travel several to a datagram, in bundles, and every one
/// arrives, once, in order (the scenario checks); with coalescing off, a datagram each.
#[test]
fn bursts_of_small_messages_are_bundled_and_arrive_whole() {
    let launcher = converse_tests::Launcher::Charmrun {
        machine: "udp",
        opts: vec![],
    };
    for (set, coalesced) in [(None, true), (Some("udp.coalesce_us=0"), false)] {
        let mut args = vec!["alltoall", "200000", "+stats"];
        if let Some(s) = set {
            args.extend(["+set", s]);
        }
        let o = converse_tests::expect_ok(&launcher, env!("CARGO_BIN_EXE_conformance"), 2, &args);
        let datagrams = stats_field(&o.stderr, "udp.datagrams_sent");
        if coalesced {
            assert!(datagrams * 4 < 200_000, "{datagrams} datagrams\n{o}");
        } else {
            assert!(datagrams >= 200_000, "{datagrams} datagrams\n{o}");
        }
    }
}
