//! The conformance scenarios about delivery: per-pair FIFO, broadcasts, reductions, priority
//! order, all-to-all without loss or duplicates, every size arriving intact, a slow receiver,
//! and a flooded one (what a sender holds for it stays bounded).

use super::{complain, report, verdict, word, words};
use converse::{ops, Message, Pe, ReduceTarget};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A cheap, well-mixed hash for payload contents.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn fill(buf: &mut [u8], seed: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let w = mix(seed ^ i as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn check_fill(buf: &[u8], seed: u64) -> bool {
    buf.chunks(8)
        .enumerate()
        .all(|(i, c)| c == &mix(seed ^ i as u64).to_le_bytes()[..c.len()])
}

/// Per pair FIFO: each PE sends 2,000 messages of sizes 16..4 KiB to every other PE, numbered.
pub(super) fn fifo(pe: &mut Pe) {
    const PER_PAIR: u64 = 2000;
    let v = verdict(pe, "fifo", |_| format!("({PER_PAIR} messages per pair)"));
    let n = pe.num_pes();
    let next = Rc::new(RefCell::new(vec![0u64; n]));
    let errors = Rc::new(Cell::new(0u64));
    let (nx, er) = (next.clone(), errors.clone());
    let h = pe.register("numbered", move |pe, msg| {
        let src = msg.src_pe() as usize;
        let seq = word(msg.payload(), 0);
        let mut next = nx.borrow_mut();
        if seq != next[src] || !check_fill(&msg.payload()[8..], (src as u64) << 32 | seq) {
            er.set(er.get() + 1);
            complain(
                pe,
                format!("from PE {src}: got #{seq}, expected #{}", next[src]),
            );
        }
        next[src] = seq + 1;
    });
    let me = pe.my_pe();
    let send = |pe: &mut Pe, range: std::ops::Range<u64>| {
        for s in range {
            for d in (0..n).filter(|&d| d != me) {
                let len = 16 + (mix(s) % 4080) as usize;
                let mut m = Message::new(len);
                m.payload_mut()[..8].copy_from_slice(&s.to_le_bytes());
                fill(&mut m.payload_mut()[8..], (me as u64) << 32 | s);
                pe.send_msg(d, h, m);
            }
        }
    };
    // The first half goes out before start-up completes (receivers hold it, then replay it),
    // the rest after a barrier, on the plain path; order must hold across the seam.
    send(pe, 0..PER_PAIR / 2);
    pe.barrier();
    send(pe, PER_PAIR / 2..PER_PAIR);
    let nx = next.clone();
    pe.run_until(|_| {
        nx.borrow()
            .iter()
            .enumerate()
            .all(|(p, &k)| p == me || k >= PER_PAIR)
    });
    pe.barrier();
    let bad = next
        .borrow()
        .iter()
        .enumerate()
        .filter(|&(p, &k)| p != me && k != PER_PAIR)
        .count() as u64;
    report(pe, errors.get() + bad, v);
}

/// Every PE is root of 3 broadcasts, 3 broadcast-alls and a multicast to the odd PEs.
pub(super) fn broadcast(pe: &mut Pe) {
    const ROUNDS: usize = 3;
    let v = verdict(pe, "broadcast", |_| String::new());
    let n = pe.num_pes();
    // seen[kind][root]: kind 0 broadcast, 1 broadcast-all, 2 multicast
    let seen = Rc::new(RefCell::new(vec![vec![0usize; n]; 3]));
    let s = seen.clone();
    let h = pe.register("bcast", move |_, msg| {
        let kind = (word(msg.payload(), 0) as usize).min(2);
        let root = (word(msg.payload(), 1) as usize).min(n - 1);
        s.borrow_mut()[kind][root] += 1;
    });
    let me = pe.my_pe();
    let odd: Vec<usize> = (0..n).filter(|p| p % 2 == 1).collect();
    for _ in 0..ROUNDS {
        pe.broadcast(h, &words(&[0, me as u64]));
        pe.broadcast_all(h, &words(&[1, me as u64]));
    }
    pe.multicast(&odd, h, &words(&[2, me as u64]));
    let expected = move |kind: usize, root: usize| -> usize {
        match kind {
            0 if root == me => 0,
            0 | 1 => ROUNDS,
            _ => usize::from(me % 2 == 1),
        }
    };
    let s = seen.clone();
    pe.run_until(|_| {
        let s = s.borrow();
        (0..3).all(|k| (0..n).all(|r| s[k][r] >= expected(k, r)))
    });
    pe.barrier();
    let mut errors = 0;
    for k in 0..3 {
        for r in 0..n {
            let got = seen.borrow()[k][r];
            if got != expected(k, r) {
                errors += 1;
                complain(
                    pe,
                    format!(
                        "kind {k} from root {r}: {got} copies, expected {}",
                        expected(k, r)
                    ),
                );
            }
        }
    }
    report(pe, errors, v);
}

/// Sum, max and min to the root; all-reduce; 200 back-to-back rounds; barriers between.
pub(super) fn reduce(pe: &mut Pe) {
    const ROUNDS: u64 = 200;
    let v = verdict(pe, "reduce", |_| format!("({ROUNDS} back-to-back rounds)"));
    let n = pe.num_pes() as u64;
    let errors = Rc::new(Cell::new(0u64));
    let got = Rc::new(Cell::new(0u64));
    let (er, g) = (errors.clone(), got.clone());
    let at_root = pe.register("at-root", move |pe, msg| {
        // [sum of pe, max of pe, min of pe+1, round]
        let p = msg.payload();
        let round = g.get();
        let want = [n * (n - 1) / 2 + round * n, n - 1, 1];
        let have = [word(p, 0), word(p, 1), word(p, 2)];
        if have != want || pe.my_pe() != 0 {
            er.set(er.get() + 1);
            complain(
                pe,
                format!("round {round}: got {have:?}, expected {want:?}"),
            );
        }
        g.set(round + 1);
    });
    let all_got = Rc::new(Cell::new(0u64));
    let (er, ag) = (errors.clone(), all_got.clone());
    let everywhere = pe.register("everywhere", move |pe, msg| {
        let want = n * (n + 1) / 2;
        if word(msg.payload(), 0) != want {
            er.set(er.get() + 1);
            complain(
                pe,
                format!(
                    "all-reduce gave {}, expected {want}",
                    word(msg.payload(), 0)
                ),
            );
        }
        ag.set(ag.get() + 1);
    });
    let me = pe.my_pe() as u64;
    // [sum, max, min] in one reduction.
    let combine = |acc: &mut Vec<u8>, x: &[u8]| {
        let folded = [
            word(acc, 0).wrapping_add(word(x, 0)),
            word(acc, 1).max(word(x, 1)),
            word(acc, 2).min(word(x, 2)),
        ];
        acc.copy_from_slice(&words(&folded));
    };
    for round in 0..ROUNDS {
        pe.reduce(
            &words(&[me + round, me, me + 1]),
            combine,
            ReduceTarget::Root(at_root),
        );
    }
    pe.reduce(
        &(me + 1).to_le_bytes(),
        ops::sum_u64,
        ReduceTarget::All(everywhere),
    );
    pe.barrier();
    let (g, ag) = (got.clone(), all_got.clone());
    let is_root = me == 0;
    pe.run_until(|_| ag.get() == 1 && (!is_root || g.get() == ROUNDS));
    pe.barrier();
    report(pe, errors.get(), v);
}

/// Messages to self with mixed priorities, queued before any runs, must run in priority order
/// and FIFO among equals.
pub(super) fn priority(pe: &mut Pe) {
    const COUNT: u64 = 500;
    let v = verdict(pe, "priority", |_| format!("({COUNT} messages per PE)"));
    let order = Rc::new(RefCell::new(Vec::new()));
    let o = order.clone();
    let h = pe.register("prio", move |_, msg| {
        o.borrow_mut()
            .push((msg.priority(), word(msg.payload(), 0)));
    });
    let me = pe.my_pe();
    // After start-up, so the messages go through the queue, not the start-up hold.
    pe.barrier();
    for i in 0..COUNT {
        let prio = (mix(i) % 7) as i32 - 3;
        pe.send_msg(
            me,
            h,
            Message::from_payload(&i.to_le_bytes()).with_priority(prio),
        );
    }
    let o = order.clone();
    pe.run_until(|_| o.borrow().len() as u64 == COUNT);
    let got = order.borrow().clone();
    let mut want = got.clone();
    want.sort();
    let errors = u64::from(got != want);
    if errors != 0 {
        complain(
            pe,
            format!("dispatch order {:?}...", &got[..got.len().min(10)]),
        );
    }
    report(pe, errors, v);
}

/// `total` messages spread evenly over all ordered pairs, sent in batches between polls; each
/// carries (sequence, value) with value a hash of (src, dst, seq). Receivers check order and
/// value; the summed values are checked against what PE 0 computes independently.
pub(super) fn alltoall(pe: &mut Pe, total: u64, busy: f64) {
    let n = pe.num_pes() as u64;
    let per_pair = if n > 1 { total / (n * (n - 1)) } else { total };
    let v = verdict(pe, "alltoall", move |_| {
        format!(
            "({} messages, {per_pair} per pair, checksummed)",
            per_pair * n * n.saturating_sub(1).max(1)
        )
    });
    let me = pe.my_pe() as u64;
    let dests: Vec<u64> = if n > 1 {
        (0..n).filter(|&d| d != me).collect()
    } else {
        vec![0]
    };
    let value = |src: u64, dst: u64, seq: u64| mix(src << 40 ^ dst << 20 ^ seq);
    let next = Rc::new(RefCell::new(vec![0u64; n as usize]));
    let stats = Rc::new(Cell::new((0u64, 0u64, 0u64))); // (received, checksum, errors)
    let (nx, st) = (next.clone(), stats.clone());
    let data = pe.register("data", move |pe, msg| {
        let src = msg.src_pe() as u64;
        let (seq, val) = (word(msg.payload(), 0), word(msg.payload(), 1));
        let (r, sum, mut e) = st.get();
        let mut next = nx.borrow_mut();
        if seq != next[src as usize] || val != value(src, me, seq) {
            if e < 5 {
                complain(
                    pe,
                    format!("from PE {src}: #{seq} (expected #{})", next[src as usize]),
                );
            }
            e += 1;
        }
        next[src as usize] = seq + 1;
        st.set((r + 1, sum.wrapping_add(val), e));
    });
    // Send in batches from a self-addressed pump so this PE keeps receiving while it sends.
    let sent = Rc::new(Cell::new(0u64));
    let s = sent.clone();
    let pump = pe.register("pump", move |pe, msg| {
        const BATCH: u64 = 256;
        let start = s.get();
        if start == 0 && busy > 0.0 {
            // A handler that computes: nothing polls the layer meanwhile, and no connection
            // to a peer is open before it ends.
            let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(busy);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        let end = (start + BATCH).min(per_pair);
        for seq in start..end {
            for &d in &dests {
                pe.send_msg(
                    d as usize,
                    data,
                    Message::from_payload(&words(&[seq, value(me, d, seq)])),
                );
            }
        }
        s.set(end);
        if end < per_pair {
            pe.forward(pe.my_pe(), msg);
        }
    });
    let summed = pe.register("summed", move |pe, msg| {
        let (r, sum, e) = (word(msg.payload(), 0), word(msg.payload(), 1), word(msg.payload(), 2));
        let want_r = if n > 1 { per_pair * n * (n - 1) } else { per_pair };
        let mut want_sum = 0u64;
        for src in 0..n {
            for dst in (0..n).filter(|&d| d != src || n == 1) {
                for seq in 0..per_pair {
                    want_sum = want_sum.wrapping_add(value(src, dst, seq));
                }
            }
        }
        let bad = e + u64::from(r != want_r) + u64::from(sum != want_sum);
        if bad != 0 {
            complain(pe, format!("received {r} of {want_r}, checksum {sum:#x} vs {want_sum:#x}, {e} order errors"));
        }
        pe.send(0, v, &bad.to_le_bytes());
    });
    let me_pe = pe.my_pe();
    pe.send(me_pe, pump, b"");
    let expect_in = if n > 1 { per_pair * (n - 1) } else { per_pair };
    let st = stats.clone();
    pe.run_until(|_| st.get().0 >= expect_in);
    pe.barrier();
    let (received, sum, errors) = stats.get();
    pe.reduce(
        &words(&[received, sum, errors]),
        ops::sum_u64,
        ReduceTarget::Root(summed),
    );
}

/// PE 0 sends each size to the last PE, which checks it and sends the same message back; PE 0
/// checks it again and goes on with the next size.
pub(super) fn sizes(pe: &mut Pe, max: usize) {
    let mut list: Vec<usize> = vec![
        0, 1, 2, 3, 7, 8, 9, 100, 1000, 1400, 1500, 4095, 4096, 4097, 65535, 65536, 65537,
    ];
    let mut s = 1 << 17;
    while s <= max {
        list.push(s);
        list.push(s + 13);
        s <<= 1;
    }
    list.retain(|&l| l <= max);
    let count = list.len();
    let v = verdict(pe, "sizes", move |_| {
        format!("({count} sizes up to {max} bytes, both ways)")
    });
    let peer = pe.num_pes() - 1;
    let errors = Rc::new(Cell::new(0u64));
    let next = Rc::new(Cell::new(0usize));
    let (er, nx) = (errors.clone(), next.clone());
    let list2 = list.clone();
    let echo = pe.register("echo", move |pe, msg| {
        let i = nx.get();
        let want = list2.get(i).copied().unwrap_or(usize::MAX);
        if msg.payload_len() != want || !check_fill(msg.payload(), want as u64) {
            er.set(er.get() + 1);
            complain(
                pe,
                format!(
                    "size #{i}: {} bytes, expected {want} (or content differs)",
                    msg.payload_len()
                ),
            );
        }
        nx.set(i + 1);
        if pe.my_pe() != 0 {
            // Back to PE 0 in the very buffer that came: no copy on the way back.
            return pe.forward(0, msg);
        }
        match list2.get(i + 1) {
            Some(&len) => pe.forward(peer, sized(len, msg.handler())),
            None => pe.exit_scheduler(),
        }
    });
    if pe.my_pe() == 0 && !list.is_empty() {
        pe.send_msg(peer, echo, sized(list[0], echo.raw()));
        pe.scheduler();
    } else if pe.my_pe() == peer {
        let nx = next.clone();
        pe.run_until(|_| nx.get() >= count);
    }
    pe.barrier();
    report(pe, errors.get(), v);
}

fn sized(len: usize, handler: u32) -> Message {
    let mut m = Message::new(len);
    fill(m.payload_mut(), len as u64);
    m.set_handler(handler);
    m
}

/// A fast sender and a slow receiver: PE 0 queues all its messages to PE 1 at once; PE 1
/// spends 100 µs on each. The layer must hold what the receiver cannot take yet, never drop.
pub(super) fn slow(pe: &mut Pe, count: u64) {
    let v = verdict(pe, "slow", move |_| {
        format!("({count} messages to a slow receiver)")
    });
    let next = Rc::new(Cell::new(0u64));
    let errors = Rc::new(Cell::new(0u64));
    let (nx, er) = (next.clone(), errors.clone());
    let h = pe.register("slowly", move |pe, msg| {
        let seq = word(msg.payload(), 0);
        if seq != nx.get() || !check_fill(&msg.payload()[8..], seq) {
            er.set(er.get() + 1);
            complain(pe, format!("got #{seq}, expected #{}", nx.get()));
        }
        nx.set(seq + 1);
        let busy = Instant::now();
        while busy.elapsed() < Duration::from_micros(100) {
            std::hint::spin_loop();
        }
    });
    pe.barrier();
    if pe.num_pes() > 1 && pe.my_pe() == 0 {
        for seq in 0..count {
            let mut m = Message::new(2048);
            m.payload_mut()[..8].copy_from_slice(&seq.to_le_bytes());
            fill(&mut m.payload_mut()[8..], seq);
            pe.send_msg(1, h, m);
        }
    }
    if pe.num_pes() > 1 && pe.my_pe() == 1 {
        let nx = next.clone();
        pe.run_until(move |_| nx.get() >= count);
    }
    pe.barrier();
    report(pe, errors.get(), v);
}

/// A slow receiver that keeps polling and a sender that does not stop: PE 0 sends the last PE
/// `mib` MiB in messages of `bytes` from one handler, and the last PE's handler works `us` µs
/// on each. What the last PE holds waiting to run is bounded by `sched.max_queued_mib` (it
/// stops taking in arrivals; the layer's flow control and `peer.max_queued_mib` hold the
/// sender back); the last PE reports its process's peak resident memory once it has run
/// everything. With several PEs per process, the last PE is on another node than PE 0.
pub(super) fn backlog(pe: &mut Pe, mib: u64, us: u64, bytes: usize) {
    let total = mib * (1 << 20) / bytes as u64;
    let last = pe.num_pes() - 1;
    let got = Rc::new(Cell::new(0u64));
    let g = got.clone();
    let chunk = pe.register("backlog-chunk", move |pe, _| {
        let until = Instant::now() + Duration::from_micros(us);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        g.set(g.get() + 1);
        if g.get() == total {
            let peak_mib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
                .map_or(0, |u| u.max_rss() / 1024);
            converse::input::out_line(&format!(
                "conformance backlog: ok (PE {last} peak RSS {peak_mib} MiB)"
            ));
            pe.exit(0);
        }
    });
    // PE 0 starts once the last PE asks, from a handler: what arrives before a PE has
    // started, or while it is in a barrier, is held for it whole.
    let go = pe.register("backlog-go", move |pe, _| {
        let payload = vec![7u8; bytes];
        for _ in 0..total {
            pe.send(last, chunk, &payload);
        }
    });
    if last == 0 {
        converse::input::out_line("conformance backlog: ok (one PE, nothing to send)");
        pe.exit(0);
        return;
    }
    if pe.my_pe() == last {
        pe.send(0, go, &[]);
    }
}

/// A stalled receiver and a sender that does not stop: PE 1 sleeps for two seconds without
/// polling while PE 0 sends it `mib` MiB from one handler. What PE 0's node holds for PE 1 is
/// bounded by `peer.max_queued_mib` (the sender waits for room); PE 0 reports its peak
/// resident memory once PE 1 has everything.
pub(super) fn flood(pe: &mut Pe, mib: u64) {
    const CHUNK: usize = 64 << 10;
    let total = mib * (1 << 20) / CHUNK as u64;
    let done = pe.register("flood-done", move |pe, _| {
        let peak_mib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
            .map_or(0, |u| u.max_rss() / 1024);
        converse::input::out_line(&format!(
            "conformance flood: ok (PE 0 peak RSS {peak_mib} MiB)"
        ));
        pe.exit(0);
    });
    let got = Rc::new(Cell::new(0u64));
    let g = got.clone();
    let chunk = pe.register("flood-chunk", move |pe, _| {
        g.set(g.get() + 1);
        if g.get() == total {
            pe.send(0, done, &[]);
        }
    });
    if pe.num_pes() < 2 {
        converse::input::out_line("conformance flood: ok (one PE, nothing to flood)");
        pe.exit(0);
        return;
    }
    match pe.my_pe() {
        0 => {
            let payload = vec![7u8; CHUNK];
            for _ in 0..total {
                pe.send(1, chunk, &payload);
            }
        }
        1 => std::thread::sleep(Duration::from_secs(2)),
        _ => {}
    }
}
