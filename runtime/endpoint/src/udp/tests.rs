//! The engine over real sockets: cookies, the poll's sleep, a listener that idles.

use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("an address")
}

#[test]
fn the_poll_sleeps_until_a_timer_and_not_while_blocked_on_a_due_one() {
    let now = Instant::now();
    let ms = Duration::from_millis;
    assert_eq!(
        poll_timeout(now, &[], false),
        -1,
        "no timers: until a datagram"
    );
    assert_eq!(poll_timeout(now, &[now + ms(30), now + ms(7)], false), 7);
    assert_eq!(poll_timeout(now, &[now], false), 0, "due: at once");
    // A datagram waits for POLLOUT: a due timer only wants to send too.
    assert_eq!(poll_timeout(now, &[now, now + ms(500)], true), 500);
    assert_eq!(poll_timeout(now, &[now], true), -1);
    assert_eq!(
        poll_timeout(now, &[now + Duration::from_secs(1 << 40)], false),
        i32::MAX
    );
}

/// 500 sockets each send an `OPEN` and never answer: each gets one `COOKIE` no larger
/// than its `OPEN`, the listener keeps nothing for them, and a real connector opens at
/// once; an echoed cookie from another address is not taken.
#[test]
fn a_flood_of_opens_costs_nothing_and_a_connector_opens_at_once() {
    let l = UdpListener::bind(&[addr("127.0.0.1:0")]).expect("bind");
    let to = l.local_addr();
    let mut open = [0u8; HEADER];
    let strangers: Vec<UdpSocket> = (0..500u64)
        .map(|i| {
            let s = UdpSocket::bind("127.0.0.1:0").expect("a socket");
            Header {
                kind: OPEN,
                conn: i + 1,
                seq: 0,
                ack: 0,
                wnd: 0,
            }
            .write(&mut open);
            s.send_to(&open, to).expect("send");
            s
        })
        .collect();
    let mut cookies = Vec::new();
    for s in &strangers {
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut b = [0u8; 100];
        let (n, _) = s.recv_from(&mut b).expect("a cookie");
        let (h, _) = Header::decode(&b[..n]).expect("ours");
        assert_eq!((h.kind, n), (COOKIE, HEADER));
        cookies.push(h);
    }
    // A cookie echoed from another address (a stranger that stole it) is not a
    // connection: another cookie comes back.
    let thief = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    Header {
        kind: OPEN,
        conn: cookies[0].conn,
        seq: cookies[0].seq,
        ack: 0,
        wnd: 0,
    }
    .write(&mut open);
    thief.send_to(&open, to).expect("send");
    thief
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut b = [0u8; 100];
    let (n, _) = thief.recv_from(&mut b).expect("an answer");
    assert_eq!(Header::decode(&b[..n]).map(|(h, _)| h.kind), Some(COOKIE));
    let t0 = Instant::now();
    let s = dial(&[to], "udp://test", t0 + Duration::from_secs(5)).expect("connect");
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    let got = l.accept().expect("the connector");
    assert!(got.peer.ip().is_loopback());
    drop(s);
    assert!(
        l.accept().is_err(),
        "nothing else was accepted: the strangers hold no connection"
    );
}

/// A listener with nothing to do does not wake; with a connection, its timers wake it.
#[test]
fn an_idle_listener_sleeps() {
    let l = UdpListener::bind(&[addr("127.0.0.1:0")]).expect("bind");
    std::thread::sleep(Duration::from_millis(100));
    let t0 = l.wake.turns.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        l.wake.turns.load(Ordering::Relaxed),
        t0,
        "it woke with nothing due"
    );
    let c = dial(
        &[l.local_addr()],
        "udp://test",
        Instant::now() + Duration::from_secs(5),
    )
    .expect("connect");
    let t1 = l.wake.turns.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        l.wake.turns.load(Ordering::Relaxed) > t1,
        "keep-alives are timers"
    );
    drop(c);
}
