//! A simulated network for the protocol's tests: endpoints joined by links that lose,
//! duplicate and reorder datagrams as told, on a simulated clock, with reproducible
//! randomness. The protocol touches no socket, so it runs here exactly as in a job.

use super::config::Config;
use super::endpoint::Endpoint;
use super::link::Transmit;
use converse_machine::Message;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The job tag of the simulated job.
pub(super) const TAG: u64 = 0x005E_C2E7;

/// A link that keeps what is sent, for the simulation to deliver.
pub(super) struct Wire {
    /// Datagrams sent and where to, not yet delivered.
    pub(super) out: Vec<(SocketAddr, Vec<u8>)>,
    /// The largest datagram it takes.
    pub(super) max: usize,
}

impl Transmit for Wire {
    fn transmit(&mut self, _: usize, to: &SocketAddr, dgrams: &[[&[u8]; 2]]) -> io::Result<usize> {
        for d in dgrams {
            self.out.push((*to, [d[0], d[1]].concat()));
        }
        Ok(dgrams.len())
    }
    fn max_datagram(&mut self, _: &SocketAddr) -> usize {
        self.max
    }
    fn left_at(&self, began: std::time::Instant) -> std::time::Instant {
        // Simulated time: a batch leaves when it is handed over.
        began
    }
}

/// xorshift64*: reproducible randomness for the simulated network.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

/// A wire out of each of two endpoints, empty, carrying datagrams of up to 1400 bytes (under
/// Ethernet's MTU).
pub(super) fn wires() -> [Wire; 2] {
    [
        Wire {
            out: Vec::new(),
            max: 1400,
        },
        Wire {
            out: Vec::new(),
            max: 1400,
        },
    ]
}

/// The two simulated nodes' addresses.
pub(super) fn addrs() -> [SocketAddr; 2] {
    [
        "127.0.0.1:1000".parse().expect("addr"),
        "127.0.0.1:2000".parse().expect("addr"),
    ]
}

/// A message of `len` bytes numbered `i` (in its handler field).
pub(super) fn numbered(i: u32, len: usize) -> Message {
    let mut m = Message::from_payload(&vec![i as u8; len]);
    m.set_handler(i);
    m
}

/// What the network does to datagrams, in percent of them.
pub(super) struct Net {
    /// Lost.
    pub(super) loss: u64,
    /// Delivered twice.
    pub(super) dup: u64,
    /// Delayed by up to 400 µs, so later ones overtake them.
    pub(super) reorder: u64,
}

/// Node 0 sends `sizes.len()` numbered messages to node 1 and node 1 answers every tenth,
/// over a network that loses, duplicates and reorders as `net` says. Returns what each
/// side received, and the endpoints.
pub(super) fn simulate(
    net: Net,
    sizes: &[usize],
    seed: u64,
) -> (Vec<u32>, Vec<u32>, [Endpoint; 2]) {
    simulate_bursts(net, sizes, seed, 4, false)
}

/// As [`simulate`], node 0 sending `per_tick` messages each tick; with `later`, as the layer
/// coalesces them ([`Endpoint::send_later`] each, then a flush).
pub(super) fn simulate_bursts(
    net: Net,
    sizes: &[usize],
    seed: u64,
    per_tick: usize,
    later: bool,
) -> (Vec<u32>, Vec<u32>, [Endpoint; 2]) {
    let a = addrs();
    let mut t = Instant::now();
    let cfg = Config::default();
    let mut eps = [
        Endpoint::new(0, &a, TAG, cfg.clone(), 1 << 20, t),
        Endpoint::new(1, &a, TAG, cfg, 1 << 20, t),
    ];
    let mut wires = wires();
    let mut rng = Rng(seed | 1);
    let mut got: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    // (due, to node, from address, bytes)
    let mut flight: Vec<(Instant, usize, SocketAddr, Vec<u8>)> = Vec::new();
    let mut next = 0;
    let tick = Duration::from_micros(50);
    for _ in 0..2_000_000 {
        // Node 0 sends a few messages per tick.
        for _ in 0..per_tick {
            if next < sizes.len() {
                let m = numbered(next as u32, sizes[next]);
                if later {
                    eps[0].send_later(1, m, t, &mut wires[0]).expect("send");
                } else {
                    eps[0].send(1, m, t, &mut wires[0]).expect("send");
                }
                next += 1;
            }
        }
        if later {
            eps[0].flush(t, &mut wires[0]).expect("flush");
        }
        for (n, w) in wires.iter_mut().enumerate() {
            for (_, bytes) in w.out.drain(..) {
                if rng.percent(net.loss) {
                    continue;
                }
                let copies = if rng.percent(net.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let late = if rng.percent(net.reorder) {
                        Duration::from_micros(rng.next() % 400)
                    } else {
                        Duration::ZERO
                    };
                    flight.push((t + tick + late, 1 - n, a[n], bytes.clone()));
                }
            }
        }
        t += tick;
        let (due, not_yet): (Vec<_>, Vec<_>) = flight.into_iter().partition(|f| f.0 <= t);
        flight = not_yet;
        for (_, to, from, bytes) in due {
            let mut answers = Vec::new();
            eps[to].receive(&bytes, from, t, &mut |m| {
                if to == 1 && m.handler() % 10 == 0 {
                    answers.push(m.handler());
                }
                got[to].push(m.handler());
            });
            for h in answers {
                eps[1]
                    .send(0, numbered(h, 8), t, &mut wires[1])
                    .expect("answer");
            }
        }
        for n in 0..2 {
            eps[n].flush(t, &mut wires[n]).expect("flush");
            eps[n].on_timers(t, &mut wires[n]).expect("no peer dies");
        }
        let answers = sizes.len().div_ceil(10);
        if got[1].len() == sizes.len() && got[0].len() == answers && eps.iter().all(|e| e.settled())
        {
            break;
        }
    }
    let [g0, g1] = got;
    (g0, g1, eps)
}
