//! Self-checking process-topology scenarios, one program for every PE: `topo SCENARIO [ARG]`.
//! Every class is attached at once (the regular ones sized to the job, 1×N grids, a 3-D
//! torus, a weighted arbitrary graph), and the scenario runs over each in turn. A process
//! that finds something wrong aborts the job naming itself and what; PE 0 prints
//! `topo SCENARIO: ok` and the job exits 0 when all went well.
//!
//! Scenarios: `all` (point to point, collectives, mutex, vector time on every class),
//! `mismatch` (disagreeing collectives end as errors on every process, never a hang),
//! `matrix FILE` (attach a matrix file; a bad one is a one-line error, exit 1), `survive WHAT
//! DELAY_MS` (report mode: a process dies mid-call; see `topo/survive.rs`).

#[path = "topo/survive.rs"]
mod survive;

use converse::{ops, Pe};
use converse_topo::{attach, Hop, Source, Topo, TopoError, Topology, VectorTime};
use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;

/// The classes, sized to `n` processes.
fn classes(n: usize) -> Vec<(String, Topology)> {
    let rows = (1..=n)
        .filter(|&r| n.is_multiple_of(r) && r * r <= n)
        .max()
        .unwrap_or(1);
    let mut v: Vec<(String, Result<Topology, TopoError>)> = vec![
        ("full".into(), Topology::fully_connected(n)),
        ("star".into(), Topology::star(n, 0)),
        ("star-last".into(), Topology::star(n, n - 1)),
        ("line".into(), Topology::line(n)),
        ("ring".into(), Topology::ring(n)),
        (
            format!("grid {rows}x{}", n / rows),
            Topology::grid2(rows, n / rows),
        ),
        (
            format!("torus {rows}x{}", n / rows),
            Topology::torus2(rows, n / rows),
        ),
        (format!("grid 1x{n}"), Topology::grid2(1, n)),
        (format!("torus {n}x1"), Topology::torus2(n, 1)),
    ];
    let d3 = if n.is_multiple_of(4) {
        vec![2, 2, n / 4]
    } else {
        vec![1, 1, n]
    };
    v.push((format!("torus {d3:?}"), Topology::torus(&d3)));
    // A weighted ring with chords: an arbitrary graph whose MST is not obvious.
    let mut m = vec![vec![0u32; n]; n];
    for (i, j) in (0..n).flat_map(|i| [(i, (i + 1) % n), (i, (i + 3) % n)]) {
        {
            if i != j {
                let w = 1 + ((i * 7 + j * 3) % 5) as u32;
                m[i][j] = w;
                m[j][i] = w;
            }
        }
    }
    v.push(("arbitrary".into(), Topology::from_matrix(&m)));
    v.into_iter()
        .filter_map(|(name, t)| t.ok().map(|t| (name, t)))
        .collect()
}

fn fail(pe: &mut Pe, what: &str) -> ! {
    pe.abort(&format!("topo: FAILED: {what}"))
}

fn u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

/// Every hop this process recorded went over a channel of the topology, from this process —
/// or, for a collective or the mutex on a topology whose channel tree would be too wide (a
/// star), over an edge of the `k`-ary tree it takes instead; a routed send always over a
/// channel.
fn hops_use_edges(pe: &mut Pe, name: &str, t: &Topo, hops: &[Hop]) {
    let topo = t.topology();
    let tree_edge = |root: usize, a: usize, b: usize| {
        topo.tree(root).is_some_and(|tr| {
            !tr.over_channels() && (tr.parent(a) == Some(b) || tr.parent(b) == Some(a))
        })
    };
    for h in hops {
        // The mutex travels the tree rooted at process 0; a collective, its root's.
        let tree_root = if h.op.starts_with("mutex_") {
            Some(0)
        } else {
            (h.op != "send").then_some(h.root)
        };
        let allowed = h.from == h.to
            || topo.is_edge(h.from, h.to)
            || tree_root.is_some_and(|r| tree_edge(r, h.from, h.to));
        if h.from != t.id() || !allowed {
            fail(
                pe,
                &format!("{name}: hop {} -> {} is not a channel", h.from, h.to),
            );
        }
    }
}

/// Point to point: every process sends numbered messages to every other (routed), receives
/// them per source in order and then from anyone; vector times respect happened-before.
fn p2p(pe: &mut Pe, name: &str, t: &Topo) {
    const K: u64 = 6;
    let (me, n) = (t.id(), t.len());
    t.set_visual(true);
    for k in 0..K {
        for d in (0..n).filter(|&d| d != me) {
            let body = [me as u64, d as u64, k].map(u64::to_le_bytes).concat();
            if let Err(e) = t.send(pe, d, &body) {
                fail(pe, &format!("{name}: send: {e}"));
            }
        }
    }
    t.set_visual(false);
    // From each source in turn: FIFO per (source, destination) across routed hops.
    for s in (0..n).filter(|&s| s != me) {
        for k in 0..K / 2 {
            let r = t
                .recv(pe, s)
                .unwrap_or_else(|e| fail(pe, &format!("{name}: {e}")));
            let before = t.vector_time();
            if u64s(r.data()) != [s as u64, me as u64, k] || t.last_sender() != Some(s) {
                fail(
                    pe,
                    &format!("{name}: from {s} got {:?} as #{k}", u64s(r.data())),
                );
            }
            if !r.sent_at().happened_before(&before)
                || r.sent_at().entries()[s] > before.entries()[s]
            {
                fail(
                    pe,
                    &format!(
                        "{name}: vector time {:?} not before {:?}",
                        r.sent_at(),
                        before
                    ),
                );
            }
        }
    }
    // The rest from anyone: each source's still in order.
    let mut next = vec![K / 2; n];
    for _ in 0..(n - 1) as u64 * (K - K / 2) {
        let r = t
            .recv(pe, Source::Any)
            .unwrap_or_else(|e| fail(pe, &format!("{name}: {e}")));
        let s = r.from();
        if u64s(r.data()) != [s as u64, me as u64, next[s]] || t.last_sender() != Some(s) {
            fail(
                pe,
                &format!("{name}: any: from {s} got {:?}", u64s(r.data())),
            );
        }
        next[s] += 1;
    }
    hops_use_edges(pe, name, t, &t.hops());
}

/// Every collective from several roots, blocking and message-driven.
fn collectives(pe: &mut Pe, name: &str, t: &Topo) {
    let (me, n) = (t.id(), t.len());
    let check = |pe: &mut Pe, ok: bool, what: &str| {
        if !ok {
            fail(pe, &format!("{name}: {what} (process {me})"));
        }
    };
    let roots = [0, n - 1, n / 2];
    for root in roots {
        t.set_visual(true);
        let data: Vec<u8> = (0..64 * 1024)
            .map(|i| (i as usize * 7 + root) as u8)
            .collect();
        let mine = if me == root { &data[..] } else { &[][..] };
        let got = t.broadcast(pe, root, mine);
        check(
            pe,
            got.as_deref().ok() == Some(&data[..]),
            "broadcast of 64 KiB",
        );
        // The root's send happened before this process's receive (its own entry counts it).
        if let Ok(p) = &got {
            let (sent, now) = (p.sent_at(), t.vector_time());
            if me != root && !(sent.happened_before(&now) && sent.entries()[me] < now.entries()[me])
            {
                fail(
                    pe,
                    &format!("{name}: broadcast vector time {sent:?} not before {now:?}"),
                );
            }
        }
        let small = t.broadcast(pe, root, &root.to_le_bytes());
        check(
            pe,
            small.as_deref().ok() == Some(&root.to_le_bytes()[..]),
            "broadcast of 8 B",
        );
        // Equal segments: process i gets [i, root] as u64s.
        let all: Vec<u8> = (0..n)
            .flat_map(|i| [i as u64, root as u64].map(u64::to_le_bytes).concat())
            .collect();
        let seg = t.scatter(pe, root, if me == root { &all } else { &[] }, 16);
        check(
            pe,
            seg.as_deref().map(u64s).ok() == Some(vec![me as u64, root as u64]),
            "scatter",
        );
        // Uneven: process i gets i bytes of value i.
        let segs: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; i]).collect();
        let refs: Vec<&[u8]> = segs.iter().map(Vec::as_slice).collect();
        let seg = t.scatter_uneven(pe, root, if me == root { &refs } else { &[] });
        check(
            pe,
            seg.as_deref().ok() == Some(&segs[me][..]),
            "scatter_uneven",
        );
        // Gather in id order, of different sizes.
        let g = t.gather(pe, root, &vec![me as u8; me + 1]);
        let want: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; i + 1]).collect();
        match g {
            Ok(Some(g)) => check(pe, me == root && g == want, "gather"),
            Ok(None) => check(pe, me != root, "gather gave nothing at the root"),
            Err(e) => fail(pe, &format!("{name}: gather: {e}")),
        }
        let r = t.reduce(
            pe,
            root,
            &[me as u64, 1].map(u64::to_le_bytes).concat(),
            ops::sum_u64,
        );
        let sum = (n * (n - 1) / 2) as u64;
        match r {
            Ok(Some(v)) => check(pe, me == root && u64s(&v) == [sum, n as u64], "reduce"),
            Ok(None) => check(pe, me != root, "reduce gave nothing at the root"),
            Err(e) => fail(pe, &format!("{name}: reduce: {e}")),
        }
        t.set_visual(false);
    }
    let m = t.all_reduce(pe, &(me as u64).to_le_bytes(), ops::max_u64);
    check(
        pe,
        m.as_deref().map(u64s).ok() == Some(vec![n as u64 - 1]),
        "all_reduce",
    );
    let b = t.barrier(pe).is_ok();
    check(pe, b, "barrier");
    // Message-driven: a broadcast whose callback starts a reduction whose callback counts.
    let done = Rc::new(Cell::new(0));
    let (t2, d2) = (t.clone(), done.clone());
    t.broadcast_then(pe, n - 1, b"chain", move |pe, r| {
        if r.as_deref().ok() != Some(&b"chain"[..]) {
            fail(pe, "broadcast_then");
        }
        let d3 = d2.clone();
        t2.all_reduce_then(pe, &1u64.to_le_bytes(), ops::sum_u64, move |_, r| {
            if r.map(|v| u64s(&v)) == Ok(vec![n as u64]) {
                d3.set(d3.get() + 1);
            }
        });
    });
    let d = done.clone();
    pe.run_until(move |_| d.get() == 1);
    check(pe, done.get() == 1, "broadcast_then + all_reduce_then");
    hops_use_edges(pe, name, t, &t.hops());
    // Broadcast hops: exactly one arrival per process but the root, per broadcast.
}

/// The mutex: each process enters R times; the holder tells PE 0's monitor it entered and
/// left (waiting for each acknowledgement), and the monitor fails the job if two are inside.
fn mutex(pe: &mut Pe, name: &str, t: &Topo, mon: &Monitor) {
    const R: u64 = 5;
    for _ in 0..R {
        if let Err(e) = t.lock(pe) {
            fail(pe, &format!("{name}: lock: {e}"));
        }
        mon.visit(pe, t.id());
        if let Err(e) = t.unlock(pe) {
            fail(pe, &format!("{name}: unlock: {e}"));
        }
    }
    if t.lock_entries() != R || t.unlock(pe).is_ok() {
        fail(pe, &format!("{name}: entries {} of {R}", t.lock_entries()));
    }
}

/// The exclusion check, on PE 0, in plain runtime handlers (outside any topology).
struct Monitor {
    enter: converse::HandlerId,
    leave: converse::HandlerId,
    acks: Rc<Cell<u64>>,
}

impl Monitor {
    fn install(pe: &mut Pe) -> Monitor {
        let inside = Rc::new(Cell::new(None::<usize>));
        let acks = Rc::new(Cell::new(0u64));
        let a = acks.clone();
        let ack = pe.register("mon.ack", move |_, _| a.set(a.get() + 1));
        let i = inside.clone();
        let enter = pe.register("mon.enter", move |pe, msg| {
            let who = msg.payload().first().copied().unwrap_or(0) as usize;
            if let Some(other) = i.get() {
                fail(
                    pe,
                    &format!("mutex: process {who} entered while {other} was inside"),
                );
            }
            i.set(Some(who));
            pe.send(msg.src_pe() as usize, ack, b"");
        });
        let leave = pe.register("mon.leave", move |pe, msg| {
            inside.set(None);
            pe.send(msg.src_pe() as usize, ack, b"");
        });
        Monitor { enter, leave, acks }
    }

    fn visit(&self, pe: &mut Pe, id: usize) {
        for h in [self.enter, self.leave] {
            let want = self.acks.get() + 1;
            pe.send(0, h, &[id as u8]);
            let a = self.acks.clone();
            pe.run_until(move |_| a.get() >= want);
        }
    }
}

/// Disagreeing calls: every process must get a mismatch error naming processes.
fn mismatch(pe: &mut Pe, name: &str, t: &Topo) {
    let (me, n) = (t.id(), t.len());
    if n < 3 {
        return;
    }
    let expect = |pe: &mut Pe, what: &str, r: Result<(), TopoError>| match r {
        Err(TopoError::Mismatch { detail, .. }) if detail.contains("process") => {
            if me == 0 {
                converse::input::out_line(&format!("{name}: {what}: {detail}"));
            }
        }
        other => fail(pe, &format!("{name}: {what}: {other:?}, not a mismatch")),
    };
    let r = match (name, me) {
        // Roots differ: the last process broadcasts from itself.
        (_, m) if m == n - 1 => t.broadcast(pe, m, b"x").map(|_| ()),
        _ => t.broadcast(pe, 0, b"x").map(|_| ()),
    };
    let r = match r {
        Ok(()) => t.barrier(pe),
        e => e,
    };
    expect(pe, "broadcast roots", r);
}

/// Each kind of mismatch on its own topology (a failed topology stays failed).
fn mismatch_kinds(pe: &mut Pe, ts: &[(String, Topo)]) {
    let n = pe.num_pes();
    if n < 3 {
        return;
    }
    for (k, (name, t)) in ts.iter().enumerate() {
        let me = t.id();
        let r = match k % 4 {
            // Different operations under one number: one process gathers, the others meet
            // in a barrier.
            3 => {
                if me == 1 {
                    t.gather(pe, 0, b"odd one out").map(|_| ())
                } else {
                    t.barrier(pe)
                }
            }
            // A process that thinks it is the root of a reduction others root at 0: it
            // waits for children who send elsewhere; only the check finds it.
            0 => {
                let root = if me == 2 { 2 } else { 0 };
                t.reduce(pe, root, &[1], |_, _| {}).map(|_| ())
            }
            // Sizes to scatter disagree.
            1 => {
                let each = if me == 1 { 4 } else { 8 };
                let data = vec![0u8; 8 * n];
                t.scatter(pe, 0, &data, each).map(|_| ())
            }
            _ => {
                mismatch(pe, name, t);
                continue;
            }
        };
        // A process whose part was done (a leaf's contribution sent) returns before the
        // mismatch is known; its next call fails instead.
        let r = match r {
            Ok(()) => t.barrier(pe),
            e => e,
        };
        match r {
            Err(TopoError::Mismatch { detail, .. }) => {
                if me == 0 {
                    converse::input::out_line(&format!("{name}: {detail}"));
                }
                // Later calls fail at once too.
                if !matches!(t.barrier(pe), Err(TopoError::Mismatch { .. })) {
                    fail(
                        pe,
                        &format!("{name}: a barrier after a mismatch did not fail"),
                    );
                }
            }
            other => fail(pe, &format!("{name}: {other:?}, not a mismatch")),
        }
    }
}

fn vector_time_sanity(pe: &mut Pe, t: &Topo) {
    // Own entry counts this process's events: positive after any traffic.
    let v: VectorTime = t.vector_time();
    if t.len() > 1 && v.entries()[t.id()] == 0 {
        fail(pe, "vector time never ticked");
    }
}

fn main() -> ExitCode {
    converse::run(|pe| {
        let args = pe.args().to_vec();
        let scenario = args.get(1).cloned().unwrap_or_default();
        let n = pe.num_pes();
        if scenario == "matrix" {
            let file = args.get(2).cloned().unwrap_or_default();
            match Topology::from_matrix_file(&file).and_then(|t| attach(pe, t)) {
                Ok(Some(t)) => {
                    let sum = t.all_reduce(pe, &1u64.to_le_bytes(), ops::sum_u64);
                    if pe.my_pe() == 0 {
                        converse::input::out_line(&format!(
                            "topo matrix: {} processes, sum {:?}",
                            t.len(),
                            sum.map(|v| u64s(&v))
                        ));
                        converse::input::out_line("topo matrix: ok");
                    }
                    pe.barrier();
                    pe.exit(0);
                }
                Ok(None) => {
                    pe.barrier();
                }
                Err(e) => {
                    if pe.my_pe() == 0 {
                        converse::input::error_line(&format!("topo: {e}"));
                        pe.exit(1);
                    }
                }
            }
            return;
        }
        if scenario == "survive" {
            let what = args.get(2).cloned().unwrap_or_default();
            let delay = converse::input::number(
                args.get(3).map(String::as_str),
                "DELAY_MS",
                100,
                0..=60_000,
            );
            match delay {
                Ok(d) => survive::run(pe, &what, d),
                Err(e) => fail(pe, &e),
            }
            return;
        }
        let mon = Monitor::install(pe);
        let mut ts = Vec::new();
        for (name, topo) in classes(n) {
            match attach(pe, topo) {
                Ok(Some(t)) => ts.push((name, t)),
                Ok(None) => {}
                Err(e) => fail(pe, &format!("{name}: attach: {e}")),
            }
        }
        // A ring over some of the PEs only, in another order: the odd ones, backwards.
        let odd: Vec<usize> = (1..n).step_by(2).rev().collect();
        let subset = match Topology::ring(odd.len()).and_then(|r| r.on_pes(&odd)) {
            Ok(r) => match attach(pe, r) {
                Ok(t) => t,
                Err(e) => fail(pe, &format!("subset ring: attach: {e}")),
            },
            Err(_) => None, // a job of one PE has no odd PE
        };
        if let Some(t) = &subset {
            if t.topology().pe_of(t.id()) != Some(pe.my_pe()) || pe.my_pe() % 2 != 1 {
                fail(pe, "subset ring: a process on the wrong PE");
            }
        }
        match scenario.as_str() {
            "all" => {
                // Every PE takes part in the runtime barrier after each topology, members or
                // not.
                let all = ts
                    .iter()
                    .map(|(n, t)| (n.clone(), Some(t.clone())))
                    .chain(std::iter::once(("ring on the odd PEs".to_string(), subset)));
                for (name, t) in all {
                    let Some(t) = t else {
                        pe.barrier();
                        continue;
                    };
                    let (name, t) = (&name, &t);
                    p2p(pe, name, t);
                    collectives(pe, name, t);
                    mutex(pe, name, t, &mon);
                    vector_time_sanity(pe, t);
                    if t.id() == 0 {
                        converse::input::out_line(&format!(
                            "{name}: process 0 recorded {} hops, entered the mutex {} times",
                            t.hops().len(),
                            t.lock_entries()
                        ));
                    }
                    pe.barrier();
                }
            }
            "mismatch" => mismatch_kinds(pe, &ts),
            other => fail(pe, &format!("unknown scenario '{other}'")),
        }
        pe.barrier();
        if pe.my_pe() == 0 {
            converse::input::out_line(&format!("topo {scenario}: ok"));
            pe.exit(0);
        }
    })
}
