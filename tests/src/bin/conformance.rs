//! The conformance scenarios: self-checking jobs that every layer must pass unchanged.
//!
//! `conformance SCENARIO [ARGS] +pN [+machine NAME]` — PE 0 prints
//! `conformance SCENARIO: ok ...` and the job exits 0, or prints
//! `conformance SCENARIO: FAILED: ...` and the job exits 1. Scenarios:
//!
//! | scenario   | what it checks                                                              |
//! |------------|-----------------------------------------------------------------------------|
//! | hello      | every PE runs and prints one line                                           |
//! | fifo       | per sender/receiver FIFO with mixed sizes                                   |
//! | broadcast  | broadcast / broadcast-all / multicast from every root reach each PE once    |
//! | reduce     | sum, max, min, all-reduce, many back-to-back rounds, barriers               |
//! | priority   | dispatch order by priority, FIFO among equals                               |
//! | exit-code  | `exit(N)` on the last PE makes the job exit N (ARGS: N, default 3)          |
//! | mismatch   | a PE registering a different handler set fails the job with a clear error   |
//! | alltoall   | N messages (ARGS: N, default 1,000,000) all-to-all: none lost, none twice   |
//! | sizes      | messages of 0 B to 64 MiB (ARGS: max bytes) arrive intact, both ways        |
//! | idle       | an idle job blocks (CPU time), periodic and idle callbacks fire             |
//! | panic      | a handler panicking on the last PE ends the whole job, non-zero             |
//! | scheduling | exit_scheduler inside a nested barrier, after, barrier_then, handlers that  |
//! |            | schedule while they wait                                                    |
//! | exit-early | PE 0 ends the job (code 5) before start-up completes; nobody hangs          |
//! | exit-after-send | PE 0 sends 64 MiB to the last PE and exits at once: the exit must not   |
//! |            | be stuck behind the unsent rest of the big message                          |
//! | proc-exit  | the last PE calls `std::process::exit(3)` itself, past the runtime          |
//! | hang       | the last PE stops polling for good (a launcher's time limit must end it)    |
//! | slow       | PE 0 sends N (ARGS, default 3000) 2 KiB messages to PE 1 at once; PE 1    |
//! |            | takes 100 µs over each: all arrive, in order, intact                        |
//! | silent     | the last PE stops polling for good, then PE 0 sends it a message: a layer   |
//! |            | that waits for answers must give up on it                                  |
//! | wait       | every PE idles for SECS (default 2) seconds, then the job exits 0           |
//! | print      | every PE prints LINES lines (ARGS: LINES WIDTH, default 1000 100), each     |
//! |            | `print PE p line k ` and WIDTH `x`s, then the job exits 0                   |
//! | spawn      | every PE starts `sleep 300` sharing its stdout and prints its pid; then     |
//! |            | the job exits 0, or (ARGS: crash) the last PE aborts                        |
//! | node       | node messages and node broadcasts from every PE: each runs exactly once, on |
//! |            | a PE of the node it was sent to                                             |
//! | pinning    | every PE prints the cores it may run on, PE 0 those of each thread          |
//! | traced     | every PE sends 20 pings (`trace.ping`) to every other PE, each answered by |
//! |            | a pong (`trace.pong`); after a barrier each PE says so, and PE 0 ends the  |
//! |            | job SECS (ARGS, default 0) seconds later, or (report mode) 0.2 s after it  |
//! |            | is told of a node's death: every message is received                       |
//! | compute    | every PE computes SECS (default 5) s in a handler with data outstanding     |
//! |            | toward it; the job completes                                                |
//! | survive    | (with `+set faults=report`) PE VICTIM dies as HOW says (exit, kill, stop,   |
//! |            | wait: killed from outside); the survivors are told and go on; exits 0       |

#[cfg(feature = "mpi")]
#[path = "conformance/mpi_world.rs"]
mod mpi_world;
#[path = "conformance/smp.rs"]
mod smp;
#[path = "conformance/survive.rs"]
mod survive;

use converse::{ops, HandlerId, Message, Pe, ReduceTarget};
use std::cell::{Cell, RefCell};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let rt = match converse::Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("conformance: error: {e}");
            return ExitCode::from(2);
        }
    };
    let args = rt.args().to_vec();
    let scenario = args.get(1).cloned().unwrap_or_default();
    let arg = args.get(2).cloned();
    let start: Box<dyn Fn(&mut Pe) + Sync> = match scenario.as_str() {
        "hello" => Box::new(hello),
        "fifo" => Box::new(fifo),
        "broadcast" => Box::new(broadcast),
        "reduce" => Box::new(reduce),
        "priority" => Box::new(priority),
        "exit-code" => {
            let code = arg.and_then(|a| a.parse().ok()).unwrap_or(3);
            Box::new(move |pe: &mut Pe| exit_code(pe, code))
        }
        "mismatch" => Box::new(mismatch),
        "alltoall" => {
            let n = arg.and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
            Box::new(move |pe: &mut Pe| alltoall(pe, n))
        }
        "sizes" => {
            let max = arg.and_then(|a| a.parse().ok()).unwrap_or(64 << 20);
            Box::new(move |pe: &mut Pe| sizes(pe, max))
        }
        "idle" => Box::new(idle),
        "panic" => Box::new(panic),
        "scheduling" => Box::new(scheduling),
        "exit-early" => Box::new(exit_early),
        "exit-after-send" => Box::new(exit_after_send),
        "proc-exit" => Box::new(proc_exit),
        "hang" => Box::new(hang),
        "silent" => Box::new(silent),
        "slow" => {
            let n = arg.and_then(|a| a.parse().ok()).unwrap_or(3000);
            Box::new(move |pe: &mut Pe| slow(pe, n))
        }
        "flood" => {
            let mib = arg.and_then(|a| a.parse().ok()).unwrap_or(512);
            Box::new(move |pe: &mut Pe| flood(pe, mib))
        }
        "print" => {
            let lines = arg.and_then(|a| a.parse().ok()).unwrap_or(1000);
            let width = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(100);
            Box::new(move |pe: &mut Pe| print(pe, lines, width))
        }
        "spawn" => {
            let crash = arg.as_deref() == Some("crash");
            Box::new(move |pe: &mut Pe| spawn(pe, crash))
        }
        "node" => Box::new(smp::node),
        "pinning" => Box::new(smp::pinning),
        "compute" => {
            let secs = arg.as_deref().and_then(|a| a.parse().ok()).unwrap_or(5.0);
            Box::new(move |pe: &mut Pe| smp::compute(pe, secs))
        }
        "traced" => {
            let secs = arg.and_then(|a| a.parse().ok()).unwrap_or(0.0);
            Box::new(move |pe: &mut Pe| traced(pe, secs))
        }
        "survive" => {
            let victim = arg.as_deref().and_then(|a| a.parse().ok()).unwrap_or(1);
            let how = args.get(3).cloned().unwrap_or_else(|| "exit".into());
            Box::new(move |pe: &mut Pe| survive::survive(pe, victim, how.clone()))
        }
        #[cfg(feature = "mpi")]
        "mpi-world" => Box::new(mpi_world::mpi_world),
        "wait" => {
            let secs = arg.and_then(|a| a.parse().ok()).unwrap_or(2.0);
            Box::new(move |pe: &mut Pe| wait(pe, secs))
        }
        _ if rt.version_requested() => Box::new(|_: &mut Pe| {}),
        _ => {
            eprintln!(
                "conformance: unknown scenario '{scenario}' (hello, fifo, broadcast, reduce, \
                 priority, exit-code, mismatch, alltoall, sizes, idle, panic, scheduling, exit-early, exit-after-send, proc-exit, hang, silent, slow, flood, wait, traced, print, spawn, node, pinning, compute, survive, mpi-world)"
            );
            return ExitCode::from(2);
        }
    };
    match rt.run(start) {
        Ok(code) => converse::exit_code(code),
        Err(e) if e.reported_elsewhere() => ExitCode::from(1),
        Err(e) => {
            eprintln!("conformance: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Register the verdict handler: PE 0 gets the summed error count of every PE and ends the job.
fn verdict(pe: &mut Pe, name: &'static str, detail: impl Fn(u64) -> String + 'static) -> HandlerId {
    pe.register("verdict", move |pe, msg| {
        let errors = word(msg.payload(), 0);
        if errors == 0 {
            println!("conformance {name}: ok {}", detail(errors));
            pe.exit(0);
        } else {
            println!(
                "conformance {name}: FAILED: {errors} errors {}",
                detail(errors)
            );
            pe.exit(1);
        }
    })
}

fn word(b: &[u8], i: usize) -> u64 {
    b.get(i * 8..i * 8 + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(u64::MAX, u64::from_le_bytes)
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Report this PE's error count to the verdict.
fn report(pe: &mut Pe, errors: u64, verdict: HandlerId) {
    pe.reduce(
        &errors.to_le_bytes(),
        ops::sum_u64,
        ReduceTarget::Root(verdict),
    );
}

fn complain(pe: &Pe, what: String) {
    eprintln!("conformance: PE {}: {what}", pe.my_pe());
}

fn hello(pe: &mut Pe) {
    let v = verdict(pe, "hello", |_| String::new());
    println!("hello from PE {} of {}", pe.my_pe(), pe.num_pes());
    report(pe, 0, v);
}

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
fn fifo(pe: &mut Pe) {
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
fn broadcast(pe: &mut Pe) {
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
fn reduce(pe: &mut Pe) {
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
fn priority(pe: &mut Pe) {
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

fn exit_code(pe: &mut Pe, code: i32) {
    let last = pe.num_pes() - 1;
    if pe.my_pe() == last {
        println!("conformance exit-code: PE {last} exits with {code}");
        pe.exit(code);
    }
}

fn mismatch(pe: &mut Pe) {
    let v = verdict(pe, "mismatch", |_| {
        "(but a handler mismatch was expected)".into()
    });
    if pe.my_pe() == pe.num_pes() - 1 {
        pe.register("only-on-the-last-pe", |_, _| {});
    }
    report(pe, 0, v);
}

/// `total` messages spread evenly over all ordered pairs, sent in batches between polls; each
/// carries (sequence, value) with value a hash of (src, dst, seq). Receivers check order and
/// value; the summed values are checked against what PE 0 computes independently.
fn alltoall(pe: &mut Pe, total: u64) {
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
fn sizes(pe: &mut Pe, max: usize) {
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

/// One second of idleness with a 50 ms periodic timer: the process must use little CPU, the
/// timer must tick, the idle callback must run.
fn idle(pe: &mut Pe) {
    let v = verdict(pe, "idle", |_| String::new());
    let ticks = Rc::new(Cell::new(0u64));
    let idles = Rc::new(Cell::new(0u64));
    let (t, i) = (ticks.clone(), idles.clone());
    pe.every(Duration::from_millis(50), move |_| t.set(t.get() + 1));
    pe.on_idle(move |_| i.set(i.get() + 1));
    pe.barrier();
    let cpu0 = cpu_time();
    let wall0 = Instant::now();
    let done = Rc::new(Cell::new(false));
    let d = done.clone();
    pe.after(Duration::from_secs(1), move |_| d.set(true));
    let d = done.clone();
    pe.run_until(|_| d.get());
    let wall = wall0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    pe.barrier();
    let mut errors = 0;
    if ticks.get() < 5 || idles.get() < 1 {
        errors += 1;
        complain(
            pe,
            format!(
                "{} ticks of 50 ms in 1 s, {} idle calls",
                ticks.get(),
                idles.get()
            ),
        );
    }
    // The whole process (all PEs in it) over the idle second: busy polling would use a core
    // per PE; blocking uses almost nothing.
    if pe.my_pe() == 0 {
        println!(
            "conformance idle: process CPU {:.0} ms over {:.0} ms of idle wall time, {} ticks",
            cpu.as_secs_f64() * 1e3,
            wall.as_secs_f64() * 1e3,
            ticks.get()
        );
        if cpu.as_secs_f64() > 0.25 * wall.as_secs_f64() {
            errors += 1;
            complain(pe, "idle PEs burn CPU".into());
        }
    }
    report(pe, errors, v);
}

fn cpu_time() -> Duration {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(
                    tv.tv_sec().max(0) as u64,
                    (tv.tv_usec().max(0) as u32) * 1000,
                )
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// The last PE panics in a handler while the others wait in a barrier it never reaches.
fn panic(pe: &mut Pe) {
    let boom = pe.register("boom", |pe, _| {
        panic!("deliberate panic on PE {}", pe.my_pe())
    });
    let last = pe.num_pes() - 1;
    if pe.my_pe() == 0 {
        pe.send(last, boom, b"");
    }
    if pe.my_pe() == last {
        // Only ever left by the panic.
        pe.run_until(|_| false);
    }
    pe.barrier();
    println!(
        "conformance panic: FAILED: PE {} passed the barrier",
        pe.my_pe()
    );
}

/// Nested scheduling: `exit_scheduler` called while a handler waits in a barrier must end the
/// `scheduler()` around it; `after` fires; `barrier_then` runs its handler on every PE; a
/// handler may wait (`run_until`) for a later message.
fn scheduling(pe: &mut Pe) {
    let v = verdict(pe, "scheduling", |_| String::new());
    let left = Rc::new(Cell::new(false));
    let l = left.clone();
    let leave = pe.register("leave", move |pe, _| {
        l.set(true);
        pe.exit_scheduler();
    });
    let wait = pe.register("wait-in-barrier", |pe, _| {
        pe.barrier();
    });
    let released = Rc::new(Cell::new(0u32));
    let r = released.clone();
    let after_barrier = pe.register("after-barrier", move |_, _| r.set(r.get() + 1));
    let inner_seen = Rc::new(Cell::new(false));
    let i = inner_seen.clone();
    let inner = pe.register("inner", move |_, _| i.set(true));
    let outer_done = Rc::new(Cell::new(false));
    let (i, o) = (inner_seen.clone(), outer_done.clone());
    let outer = pe.register("outer", move |pe, _| {
        let i = i.clone();
        pe.run_until(move |_| i.get());
        o.set(true);
    });
    let me = pe.my_pe();
    let last = pe.num_pes() - 1;
    // 1. PE 0: a handler waits in a barrier while the next handler asks to leave.
    if me == 0 {
        pe.send(0, wait, b"");
        pe.send(0, leave, b"");
        pe.scheduler();
    } else {
        pe.barrier();
    }
    let mut errors = 0;
    if me == 0 && !left.get() {
        errors += 1;
        complain(pe, "scheduler() returned before exit_scheduler".into());
    }
    // 2. A timer.
    let fired = Rc::new(Cell::new(false));
    let f = fired.clone();
    pe.after(Duration::from_millis(20), move |_| f.set(true));
    let f = fired.clone();
    pe.run_until(move |_| f.get());
    // 3. barrier_then: its handler runs once on every PE.
    pe.barrier_then(after_barrier);
    let r = released.clone();
    pe.run_until(move |_| r.get() == 1);
    // 4. The last PE's handler waits for a message PE 0 sends after it.
    if me == 0 {
        pe.send(last, outer, b"");
        pe.send(last, inner, b"");
    }
    if me == last {
        let o = outer_done.clone();
        pe.run_until(move |_| o.get());
    }
    pe.barrier();
    if released.get() != 1 {
        errors += 1;
        complain(
            pe,
            format!("barrier_then handler ran {} times", released.get()),
        );
    }
    report(pe, errors, v);
}

/// PE 0 ends the job before start-up can complete; the others wait in a barrier that never
/// completes. The job must still end, with PE 0's code.
fn exit_early(pe: &mut Pe) {
    if pe.my_pe() == 0 {
        pe.exit(5);
    } else {
        pe.barrier();
    }
}

fn proc_exit(pe: &mut Pe) {
    pe.barrier();
    if pe.my_pe() == pe.num_pes() - 1 {
        println!(
            "conformance proc-exit: PE {} calls process::exit(3)",
            pe.my_pe()
        );
        std::process::exit(3);
    }
}

fn hang(pe: &mut Pe) {
    pe.barrier();
    if pe.my_pe() == pe.num_pes() - 1 {
        println!("conformance hang: PE {} stops polling", pe.my_pe());
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// A fast sender and a slow receiver: PE 0 queues all its messages to PE 1 at once; PE 1
/// spends 100 µs on each. The layer must hold what the receiver cannot take yet, never drop.
fn slow(pe: &mut Pe, count: u64) {
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

fn silent(pe: &mut Pe) {
    let sink = pe.register("sink", |_, _| {});
    pe.barrier();
    let last = pe.num_pes() - 1;
    if pe.my_pe() == last {
        println!("conformance silent: PE {last} stops polling");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    if pe.my_pe() == 0 {
        // After the last PE has surely stopped: nobody will ever read this.
        pe.after(Duration::from_millis(200), move |pe| {
            pe.send(last, sink, b"anyone?")
        });
    }
}

fn wait(pe: &mut Pe, secs: f64) {
    println!("conformance wait: PE {} waits {secs} s", pe.my_pe());
    if pe.my_pe() == 0 {
        pe.after(Duration::from_secs_f64(secs), |pe| {
            println!("conformance wait: ok");
            pe.exit(0);
        });
    }
}

/// Pings answered by pongs between every pair, for the tracing tests: when it is done, no
/// message is in flight.
fn traced(pe: &mut Pe, secs: f64) {
    const PINGS: usize = 20;
    let pongs = Rc::new(Cell::new(0usize));
    let pong = pe.register("trace.pong", {
        let pongs = pongs.clone();
        move |_, _| pongs.set(pongs.get() + 1)
    });
    pe.register("trace.ping", move |pe, msg| {
        let from = msg.src_pe() as usize;
        pe.send(from, pong, &[7; 16]);
    });
    // Report mode: each survivor tells PE 0 it learnt of the death; PE 0 ends the job once
    // every survivor has (so each survivor's trace holds the death).
    let told = Rc::new(Cell::new(0usize));
    let told_h = pe.register("trace.told", {
        let told = told.clone();
        move |pe, _| {
            told.set(told.get() + 1);
            exit_once_all_told(pe, told.get());
        }
    });
    let ping = pe.handler("trace.ping").expect("registered above");
    let (n, me) = (pe.num_pes(), pe.my_pe());
    for k in 0..PINGS {
        for d in (0..n).filter(|&d| d != me) {
            pe.send(d, ping, &vec![1u8; 8 + k * 100]);
        }
    }
    let want = PINGS * (n - 1);
    pe.run_until(move |_| pongs.get() == want);
    pe.barrier();
    println!("conformance traced: PE {} done", pe.my_pe());
    if pe.survives_node_failures() {
        pe.on_node_failure(move |pe, _| {
            if pe.my_pe() == 0 {
                exit_once_all_told(pe, told.get());
            } else {
                pe.send(0, told_h, &[]);
            }
        });
    }
    if pe.my_pe() == 0 {
        if secs > 0.0 {
            pe.after(Duration::from_secs_f64(secs), |pe| pe.exit(0));
        } else {
            println!("conformance traced: ok");
            pe.exit(0);
        }
    }
}

/// PE 0 of `traced` in report mode: ends the job once it knows of a death and `told` other
/// PEs, every survivor but itself, said they do too.
fn exit_once_all_told(pe: &mut Pe, told: usize) {
    let others = (1..pe.num_pes()).filter(|&p| pe.is_alive(p)).count();
    if !pe.dead_nodes().is_empty() && told == others {
        pe.exit(0);
    }
}

fn exit_after_send(pe: &mut Pe) {
    let sink = pe.register("sink", |_, _| {});
    pe.barrier();
    if pe.my_pe() == 0 {
        let last = pe.num_pes() - 1;
        pe.send_msg(last, sink, Message::new(64 << 20));
        println!("conformance exit-after-send: ok");
        pe.exit(0);
    }
}

/// A stalled receiver and a sender that does not stop: PE 1 sleeps for two seconds without
/// polling while PE 0 sends it `mib` MiB from one handler. What PE 0's node holds for PE 1 is
/// bounded by `peer.max_queued_mib` (the sender waits for room); PE 0 reports its peak
/// resident memory once PE 1 has everything.
fn flood(pe: &mut Pe, mib: u64) {
    const CHUNK: usize = 64 << 10;
    let total = mib * (1 << 20) / CHUNK as u64;
    let done = pe.register("flood-done", move |pe, _| {
        let peak_mib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
            .map_or(0, |u| u.max_rss() / 1024);
        println!("conformance flood: ok (PE 0 peak RSS {peak_mib} MiB)");
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
        println!("conformance flood: ok (one PE, nothing to flood)");
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

fn print(pe: &mut Pe, lines: usize, width: usize) {
    use std::io::Write;
    let v = verdict(pe, "print", move |_| {
        format!("({lines} lines of {width} x per PE)")
    });
    let tail = "x".repeat(width);
    let mut out = std::io::stdout().lock();
    for k in 0..lines {
        // One write per line: the line reaches charmrun's pipe whole or in pieces, as any
        // program's would.
        if writeln!(out, "print PE {} line {k} {tail}", pe.my_pe()).is_err() {
            break;
        }
    }
    drop(out);
    report(pe, 0, v);
}

fn spawn(pe: &mut Pe, crash: bool) {
    let v = verdict(pe, "spawn", |_| String::new());
    // The child inherits stdout: it holds the node's pipe to charmrun open.
    match std::process::Command::new("sleep").arg("300").spawn() {
        Ok(child) => println!("conformance spawn: PE {} child {}", pe.my_pe(), child.id()),
        Err(e) => complain(pe, format!("cannot start sleep: {e}")),
    }
    pe.barrier();
    if crash && pe.my_pe() == pe.num_pes() - 1 {
        std::process::abort();
    }
    report(pe, 0, v);
}
