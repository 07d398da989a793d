//! The session over a simulated network, and against hostile datagrams.

use super::*;

/// A simulated network between two sessions: each datagram may be lost, duplicated or
/// delayed past later ones (a seeded generator, so a failure repeats).
struct Net {
    rng: u64,
    loss: u32,
    dup: u32,
    reorder: u32,
    /// In flight: (arrival time, to the listener?, bytes).
    wire: Vec<(Instant, bool, Vec<u8>)>,
    now: Instant,
}

impl Net {
    fn new(seed: u64, loss: u32, dup: u32, reorder: u32) -> Net {
        Net {
            rng: seed | 1,
            loss,
            dup,
            reorder,
            wire: Vec::new(),
            now: Instant::now(),
        }
    }

    fn roll(&mut self) -> u32 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % 100) as u32
    }

    fn put(&mut self, to_l: bool, d: &[u8]) {
        if self.roll() < self.loss {
            return;
        }
        let copies = if self.roll() < self.dup { 2 } else { 1 };
        for _ in 0..copies {
            let delay = if self.roll() < self.reorder {
                3_000
            } else {
                100
            };
            self.wire
                .push((self.now + Duration::from_micros(delay), to_l, d.to_vec()));
        }
    }

    /// Send what each side has, deliver what is due, advance time a little.
    fn step(&mut self, c: &mut Session, l: &mut Session) {
        let mut buf = vec![0u8; HEADER + 2000];
        for (s, to_l) in [(&mut *c, true), (&mut *l, false)] {
            s.on_timers(self.now);
            while let Some(n) = s.transmit(self.now, &mut buf) {
                let d = buf[..n].to_vec();
                self.put(to_l, &d);
            }
        }
        self.now += Duration::from_micros(50);
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|(t, _, _)| *t <= now);
        self.wire = later;
        for (_, to_l, d) in due {
            let (h, p) = Header::decode(&d).expect("ours");
            assert_eq!(h.conn, 7);
            if to_l {
                l.receive(&h, p, now);
            } else {
                c.receive(&h, p, now);
            }
        }
    }
}

fn cfg() -> Config {
    Config {
        mss: 1000,
        send_buffer: 64 << 10,
        recv_buffer: 64 << 10,
        max_window: 64 << 10,
        ..Config::default()
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 253) as u8).collect()
}

/// What `s` has in order for its program, appended to `got`, as the program reading it.
fn take_ready(s: &mut Session, got: &mut Vec<u8>) {
    let (a, b) = s.ready();
    let n = a.len() + b.len();
    got.extend_from_slice(a);
    got.extend_from_slice(b);
    s.consume(n);
}

/// `bytes` from the connector to the listener and back over `net`, within `steps`.
fn exchange(net: &mut Net, bytes: usize, steps: usize) -> (Session, Session) {
    let mut c = Session::connect(7, cfg(), net.now);
    let mut l = Session::accept(7, cfg(), net.now);
    let data = pattern(bytes);
    let (mut put_c, mut put_l) = (0, 0);
    let (mut got_c, mut got_l) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        if c.state() == &State::Open {
            put_c += c.write(&data[put_c..]);
        }
        put_l += l.write(&data[put_l..]);
        net.step(&mut c, &mut l);
        for (s, got) in [(&mut c, &mut got_c), (&mut l, &mut got_l)] {
            take_ready(s, got);
        }
        if got_c.len() == bytes && got_l.len() == bytes {
            break;
        }
    }
    assert!(got_l == data, "listener got {} of {bytes}", got_l.len());
    assert!(got_c == data, "connector got {} of {bytes}", got_c.len());
    (c, l)
}

#[test]
fn a_clean_network_carries_a_mebibyte_each_way() {
    let mut net = Net::new(1, 0, 0, 0);
    let (c, l) = exchange(&mut net, 1 << 20, 100_000);
    assert_eq!(c.stats.retransmits + l.stats.retransmits, 0);
}

#[test]
fn loss_reordering_and_duplicates_are_repaired() {
    for seed in 1..6 {
        let mut net = Net::new(seed, 10, 10, 10);
        let (c, l) = exchange(&mut net, 300_000, 2_000_000);
        assert!(c.stats.retransmits + c.stats.timeouts > 0);
        assert!(l.stats.duplicates + c.stats.duplicates > 0);
        assert!(l.stats.early + c.stats.early > 0);
    }
}

#[test]
fn a_lost_open_and_opened_are_repeated() {
    let mut net = Net::new(3, 60, 0, 0);
    exchange(&mut net, 10_000, 2_000_000);
}

#[test]
fn a_reader_that_stops_closes_the_window_and_the_sender_holds() {
    let mut net = Net::new(5, 0, 0, 0);
    let mut c = Session::connect(7, cfg(), net.now);
    let mut l = Session::accept(7, cfg(), net.now);
    let data = pattern(1 << 20);
    let mut put = 0;
    // The listener's program reads nothing for a simulated 5 s.
    for _ in 0..100_000 {
        put += c.write(&data[put..]);
        net.step(&mut c, &mut l);
    }
    let (a, b) = l.ready();
    assert_eq!(a.len() + b.len(), 64 << 10, "the receiver holds its buffer");
    assert!(put <= (128 << 10) + 1000, "the sender took {put}");
    assert_eq!(
        c.room(),
        0,
        "the sender's buffer is full: the program is held"
    );
    assert_eq!(c.ended(), None, "a stalled reader is not a dead peer");
    // It reads again: everything arrives.
    let mut got = Vec::new();
    for _ in 0..200_000 {
        put += c.write(&data[put..]);
        net.step(&mut c, &mut l);
        take_ready(&mut l, &mut got);
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data, "got {}", got.len());
}

#[test]
fn a_peer_that_vanishes_is_gone_after_dead_after() {
    let mut net = Net::new(9, 0, 0, 0);
    let mut c = Session::connect(7, cfg(), net.now);
    let mut l = Session::accept(7, cfg(), net.now);
    for _ in 0..100 {
        net.step(&mut c, &mut l);
    }
    // An idle connection stays up on its probes.
    for _ in 0..(30_000_000 / 50) / 100 {
        net.now += Duration::from_micros(50 * 99);
        net.step(&mut c, &mut l);
    }
    assert_eq!(c.state(), &State::Open);
    assert_eq!(l.state(), &State::Open);
    // The listener vanishes: the connector gives up after 10 s.
    c.write(b"anyone?");
    let mut buf = vec![0u8; 4000];
    let t0 = net.now;
    while c.ended().is_none() {
        net.now += Duration::from_millis(5);
        c.on_timers(net.now);
        while c.transmit(net.now, &mut buf).is_some() {}
        assert!(net.now < t0 + Duration::from_secs(11));
    }
    assert!(net.now >= t0 + Duration::from_secs(9));
    let why = c.ended().flatten().unwrap_or_default().to_string();
    assert!(why.contains("sent nothing for 10 s"), "{why}");
}

#[test]
fn closing_delivers_everything_then_ends_both() {
    let mut net = Net::new(11, 10, 5, 5);
    let mut c = Session::connect(7, cfg(), net.now);
    let mut l = Session::accept(7, cfg(), net.now);
    let data = pattern(200_000);
    let mut put = 0;
    let mut got = Vec::new();
    for _ in 0..2_000_000 {
        if c.state() == &State::Open {
            put += c.write(&data[put..]);
            if put == data.len() {
                c.close();
            }
        }
        net.step(&mut c, &mut l);
        take_ready(&mut l, &mut got);
        if l.peer_done() {
            l.close();
        }
        if c.done() && l.done() {
            break;
        }
    }
    assert!(got == data);
    assert!(l.done() && c.done());
}

#[test]
fn a_reset_ends_it_and_foreign_bytes_are_not_ours() {
    let now = Instant::now();
    let mut c = Session::connect(7, cfg(), now);
    let mut buf = [0u8; HEADER];
    Header {
        kind: RESET,
        conn: 7,
        seq: 0,
        ack: 0,
        wnd: 0,
    }
    .write(&mut buf);
    let (h, p) = Header::decode(&buf).expect("ours");
    c.receive(&h, p, now);
    assert_eq!(c.ended(), Some(Some("it reset the connection")));
    for bad in [&b"GET / HTTP/1.0\r\n\r\n"[..], &[0xff; 40], &buf[..20]] {
        assert!(Header::decode(bad).is_none());
    }
    let mut odd = buf;
    odd[4] = 99;
    assert!(Header::decode(&odd).is_none());
}

#[test]
fn a_cookie_is_echoed_in_the_next_open_and_opens_nothing() {
    let now = Instant::now();
    let mut c = Session::connect(7, cfg(), now);
    let mut buf = [0u8; HEADER + 1000];
    let n = c.transmit(now, &mut buf).expect("the first OPEN");
    let (h, _) = Header::decode(&buf[..n]).expect("ours");
    assert_eq!((h.kind, h.seq), (OPEN, 0));
    assert_eq!(
        c.transmit(now, &mut buf),
        None,
        "repeated only after a while"
    );
    let cookie = Header {
        kind: COOKIE,
        conn: 7,
        seq: 0xC00C1E,
        ack: 5,
        wnd: 0,
    };
    c.receive(&cookie, &[], now);
    assert_eq!(c.state(), &State::Opening, "a cookie is not an answer");
    let n = c.transmit(now, &mut buf).expect("the echo, at once");
    let (h, _) = Header::decode(&buf[..n]).expect("ours");
    assert_eq!((h.kind, h.seq), (OPEN, 0xC00C1E));
}

#[test]
fn sequence_numbers_and_acks_at_the_edge_of_u64_are_dropped_not_overflowed() {
    let now = Instant::now();
    let mut l = Session::accept(7, cfg(), now);
    for (seq, ack) in [(u64::MAX - 1, 0), (u64::MAX, u64::MAX), (0, u64::MAX)] {
        let h = Header {
            kind: DATA,
            conn: 7,
            seq,
            ack,
            wnd: u32::MAX,
        };
        l.receive(&h, b"abcd", now);
    }
    let (a, b) = l.ready();
    assert_eq!(a.len() + b.len(), 4, "only the bytes at offset 0 are taken");
    assert_eq!(l.ended(), None);
}

#[test]
fn overlapping_early_segments_are_held_once_and_never_past_the_buffer() {
    let now = Instant::now();
    let mut l = Session::accept(7, cfg(), now);
    let data = pattern(70_000);
    let seg = |l: &mut Session, seq: usize, len: usize| {
        let h = Header {
            kind: DATA,
            conn: 7,
            seq: seq as u64,
            ack: 0,
            wnd: u32::MAX,
        };
        let end = (seq + len).min(data.len());
        l.receive(&h, &data[seq..end], now);
    };
    // A hostile peer: 10,000 overlapping segments of 32 KiB at every offset from 1, and
    // tiny ones between; byte 0 never comes.
    seg(&mut l, 1, 32 << 10);
    let mut reach = 1 + (32 << 10);
    for i in 0..10_000 {
        let (at, len) = (1 + i * 7 % 40_000, if i % 3 == 0 { 1 } else { 32 << 10 });
        seg(&mut l, at, len);
        reach = usize::max(reach, at + len);
    }
    assert!(l.early_bytes <= cfg().recv_buffer, "{} held", l.early_bytes);
    assert!(l.early.len() <= EARLY_SEGMENTS_MAX);
    // The gap filled: what was held is the stream, byte for byte, up to the buffer.
    seg(&mut l, 0, 1);
    let (a, b) = l.ready();
    let got: Vec<u8> = a.iter().chain(b).copied().collect();
    assert_eq!(got.len(), reach.min(cfg().recv_buffer));
    assert_eq!(got[..], data[..got.len()]);
}
