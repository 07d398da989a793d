//! Unit tests of the UDP endpoint.

use super::super::sim::{addrs, numbered, simulate, simulate_bursts, wires, Net, Wire, TAG};
use super::*;
use proptest::prelude::*;

fn check(net: Net, seed: u64) -> [Endpoint; 2] {
    let sizes: Vec<usize> = (0..600)
        .map(|i| [0usize, 10, 1300, 1400, 5000, 40_000][i % 6])
        .collect();
    let (back, there, eps) = simulate(net, &sizes, seed);
    let want: Vec<u32> = (0..sizes.len() as u32).collect();
    assert_eq!(there, want, "node 1 got every message once, in order");
    let want_back: Vec<u32> = (0..sizes.len() as u32).filter(|h| h % 10 == 0).collect();
    assert_eq!(back, want_back, "node 0 got every answer once, in order");
    eps
}

#[test]
fn a_clean_network_needs_no_retransmission() {
    let eps = check(
        Net {
            loss: 0,
            dup: 0,
            reorder: 0,
        },
        1,
    );
    assert_eq!(eps[0].retransmissions(), (0, 0, 0));
}

#[test]
fn loss_duplication_and_reordering_still_give_exactly_once_in_order() {
    for (seed, net) in [
        (2, (5, 0, 0)),
        (3, (20, 0, 0)),
        (4, (0, 10, 0)),
        (5, (0, 0, 30)),
        (6, (10, 10, 30)),
    ] {
        let eps = check(
            Net {
                loss: net.0,
                dup: net.1,
                reorder: net.2,
            },
            seed,
        );
        if net.1 > 0 {
            assert!(eps[1].stats.duplicates > 0, "{net:?}: duplicates seen");
        }
    }
}

#[test]
fn bursts_of_small_messages_go_in_bundles_and_arrive_exactly_once_in_order() {
    // Small messages (bundled), one past the bundle bound and one of several datagrams
    // among them (each a datagram of its own, breaking a run).
    let sizes: Vec<usize> = (0..3000)
        .map(|i| match i % 50 {
            17 => BUNDLE_MAX + 1,
            33 => 5000,
            _ => [0usize, 8, 100][i % 3],
        })
        .collect();
    for (seed, net) in [(11, (0, 0, 0)), (12, (10, 0, 0)), (13, (10, 10, 30))] {
        let (back, there, eps) = simulate_bursts(
            Net {
                loss: net.0,
                dup: net.1,
                reorder: net.2,
            },
            &sizes,
            seed,
            64,
            true,
        );
        let want: Vec<u32> = (0..sizes.len() as u32).collect();
        assert_eq!(
            there, want,
            "{net:?}: node 1 got every message once, in order"
        );
        let want_back: Vec<u32> = (0..sizes.len() as u32).filter(|h| h % 10 == 0).collect();
        assert_eq!(
            back, want_back,
            "{net:?}: node 0 got every answer once, in order"
        );
        if net == (0, 0, 0) {
            // Without loss, a datagram per many messages.
            assert!(
                eps[0].stats.sent * 4 < sizes.len() as u64,
                "{} datagrams for {} messages",
                eps[0].stats.sent,
                sizes.len()
            );
        }
    }
}

#[test]
fn a_silent_peer_is_declared_dead_in_time() {
    let a = addrs();
    let t0 = Instant::now();
    let cfg = Config {
        dead_after: Duration::from_secs(3),
        ..Config::default()
    };
    let mut ep = Endpoint::new(0, &a, TAG, cfg, 1 << 20, t0);
    let mut w = Wire {
        out: Vec::new(),
        max: 1400,
    };
    ep.send(1, numbered(1, 10), t0, &mut w).expect("send");
    let mut t = t0;
    let err = loop {
        t += Duration::from_millis(10);
        assert!(t - t0 < Duration::from_secs(4), "still alive after 4 s");
        if let Err(e) = ep.on_timers(t, &mut w) {
            break e;
        }
    };
    assert!(t - t0 >= Duration::from_secs(3));
    match err {
        Failure::Silent { node, secs, .. } => {
            assert_eq!(node, 1);
            assert!((3.0..3.1).contains(&secs), "{secs}");
        }
        other => panic!("{other:?}"),
    }
    // Backoff: a few dozen retransmissions in 3 s, not thousands.
    let (retx, _, _) = ep.retransmissions();
    assert!((2..=20).contains(&retx), "{retx} retransmissions");
}

/// Two endpoints with default settings, their addresses, the time, and a wire.
fn two_nodes() -> ([SocketAddr; 2], Instant, [Endpoint; 2], Wire) {
    let a = addrs();
    let t = Instant::now();
    let eps = [
        Endpoint::new(0, &a, TAG, Config::default(), 1 << 20, t),
        Endpoint::new(1, &a, TAG, Config::default(), 1 << 20, t),
    ];
    let w = Wire {
        out: Vec::new(),
        max: 1400,
    };
    (a, t, eps, w)
}

#[test]
fn a_peer_may_send_from_its_send_port_and_from_nowhere_else() {
    let (a, t, mut eps, mut w) = two_nodes();
    let sends: SocketAddr = "127.0.0.1:2001".parse().expect("addr");
    let stranger: SocketAddr = "127.0.0.1:2002".parse().expect("addr");
    eps[0].also_from(1, sends);
    for i in 0..4 {
        eps[1].send(0, numbered(i, 10), t, &mut w).expect("send");
    }
    let mut got = Vec::new();
    let ds: Vec<_> = w.out.drain(..).map(|(_, d)| d).collect();
    // From elsewhere: foreign, not delivered.
    eps[0].receive(&ds[0], stranger, t, &mut |m| got.push(m));
    assert_eq!((got.len(), eps[0].stats.foreign), (0, 1));
    // From the send port, then from the socket again: both are the peer's.
    eps[0].receive(&ds[0], sends, t, &mut |m| got.push(m));
    eps[0].receive(&ds[1], sends, t, &mut |m| got.push(m));
    eps[0].receive(&ds[2], a[1], t, &mut |m| got.push(m));
    eps[0].receive(&ds[3], sends, t, &mut |m| got.push(m));
    assert_eq!(got.len(), 4);
    assert_eq!(eps[0].stats.foreign, 1);
}

#[test]
fn a_forgotten_peer_is_released_and_its_datagrams_dropped() {
    let (a, t, mut eps, mut w) = two_nodes();
    // Node 0 has a message outstanding toward 1, and 1 one part-way toward 0.
    eps[0].send(1, numbered(1, 10), t, &mut w).expect("send");
    w.out.clear();
    eps[1]
        .send(0, numbered(2, 40_000), t, &mut w)
        .expect("send");
    let (_, first) = w.out.remove(0);
    eps[0].receive(&first, a[1], t, &mut |_| panic!("not whole yet"));
    assert!(eps[0].held(1) > 0 && eps[0].in_transfer());
    eps[0].forget(1);
    assert_eq!(eps[0].held(1), 0, "nothing held for the dead");
    assert!(!eps[0].in_transfer(), "its reassembly is released");
    assert!(eps[0].settled());
    // Whatever it still sends is dropped, and no timer runs for it.
    let foreign = eps[0].stats.foreign;
    for (_, d) in w.out.drain(..) {
        eps[0].receive(&d, a[1], t, &mut |_| panic!("delivered from the dead"));
    }
    assert!(eps[0].stats.foreign > foreign);
    assert!(eps[0]
        .on_timers(t + Duration::from_secs(3600), &mut w)
        .is_ok());
    assert!(matches!(
        eps[0].send(1, numbered(3, 10), t, &mut w),
        Err(Failure::Dead { node: 1, .. })
    ));
}

#[test]
fn an_idle_endpoint_runs_no_timer() {
    let (a, t, mut eps, mut w) = two_nodes();
    eps[0].send(1, numbered(1, 10), t, &mut w).expect("send");
    let (to, d) = w.out.remove(0);
    assert_eq!(to, a[1]);
    let mut n = 0;
    eps[1].receive(&d, a[0], t, &mut |_| n += 1);
    assert_eq!(n, 1);
    eps[1].flush(t, &mut w).expect("flush");
    // One packet: the ACK waits for data to ride on, then goes alone.
    assert!(w.out.is_empty());
    let due = eps[1].next_timer().expect("a delayed ACK");
    eps[1].on_timers(due, &mut w).expect("timers");
    let (_, ack) = w.out.remove(0);
    eps[0].receive(&ack, a[1], due, &mut |_| {});
    eps[0]
        .on_timers(due + Duration::from_secs(60), &mut w)
        .expect("no timers");
    assert!(eps[0].settled());
    assert!(w.out.is_empty(), "nothing more was sent");
}

#[test]
fn a_message_part_way_through_is_in_transfer_on_both_sides() {
    let a = addrs();
    let t = Instant::now();
    let small = Config {
        window: 4,
        ..Config::default()
    };
    let mut eps = [
        Endpoint::new(0, &a, TAG, small, 1 << 20, t),
        Endpoint::new(1, &a, TAG, Config::default(), 1 << 20, t),
    ];
    let mut wires = wires();
    assert!(!eps[0].in_transfer() && !eps[1].in_transfer());
    // About 30 fragments through a window of 4: most wait for acknowledgements.
    eps[0]
        .send(1, numbered(1, 40_000), t, &mut wires[0])
        .expect("send");
    assert!(eps[0].in_transfer(), "the rest waits for the window");
    assert!(!eps[1].in_transfer());
    let (_, first) = wires[0].out.remove(0);
    let mut got = 0;
    eps[1].receive(&first, a[0], t, &mut |_| got += 1);
    assert!(eps[1].in_transfer(), "one fragment in, the rest to come");
    // Everything else, both ways, until the message is in and acknowledged.
    let mut now = t;
    for _ in 0..10_000 {
        if got == 1 && eps.iter().all(Endpoint::settled) {
            break;
        }
        now += Duration::from_micros(50);
        for n in 0..2 {
            for (_, d) in std::mem::take(&mut wires[n].out) {
                eps[1 - n].receive(&d, a[n], now, &mut |_| got += 1);
            }
        }
        for n in 0..2 {
            eps[n].flush(now, &mut wires[n]).expect("flush");
            eps[n].on_timers(now, &mut wires[n]).expect("timers");
        }
    }
    assert_eq!(got, 1, "delivered");
    assert!(!eps[0].in_transfer() && !eps[1].in_transfer());
    // A message sent whole and waiting only for its acknowledgement is not in transfer.
    eps[0]
        .send(1, numbered(2, 10), now, &mut wires[0])
        .expect("send");
    assert!(!eps[0].in_transfer());
}

/// A node receiving from peer 1 at `a[1]`, and a valid data datagram from it.
fn receiver_and_sample() -> (Endpoint, Vec<u8>) {
    let a = addrs();
    let t = Instant::now();
    let mut sender = Endpoint::new(1, &a, TAG, Config::default(), 1 << 20, t);
    let mut w = Wire {
        out: Vec::new(),
        max: 1400,
    };
    sender.send(0, numbered(3, 3000), t, &mut w).expect("send");
    let d = w.out.remove(1);
    let rx = Endpoint::new(0, &a, TAG, Config::default(), 1 << 20, t);
    (rx, d.1)
}

proptest! {
    #[test]
    fn random_bytes_never_panic_and_never_deliver(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let (mut rx, _) = receiver_and_sample();
        let mut n = 0;
        rx.receive(&bytes, addrs()[1], Instant::now(), &mut |_| n += 1);
        prop_assert_eq!(n, 0);
    }

    #[test]
    fn mutated_datagrams_never_panic(
        flips in proptest::collection::vec((0usize..2000, any::<u8>()), 1..8),
        cut in 0usize..2000,
    ) {
        let (mut rx, mut d) = receiver_and_sample();
        for (at, v) in flips {
            let i = at % d.len();
            d[i] = v;
        }
        d.truncate(cut.max(1));
        let mut n = 0;
        rx.receive(&d, addrs()[1], Instant::now(), &mut |_| n += 1);
        // A fragment alone completes nothing.
        prop_assert_eq!(n, 0);
        // From the wrong address, nothing is accepted.
        let before = (rx.stats.foreign + rx.stats.garbage, rx.stats.received);
        rx.receive(&d, addrs()[0], Instant::now(), &mut |_| n += 1);
        prop_assert_eq!((rx.stats.foreign + rx.stats.garbage, rx.stats.received), (before.0 + 1, before.1));
        prop_assert_eq!(n, 0);
    }
}
