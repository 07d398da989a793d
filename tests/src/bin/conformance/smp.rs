//! The scenarios particular to SMP mode (several PEs per process): node messages, pinning,
//! handlers that compute for long while the layer's protocol must go on.

use super::{complain, report, verdict, word, words};
use converse::Pe;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Node messages per (sender PE, destination node).
const PER_NODE: u64 = 200;

/// Every PE sends [`PER_NODE`] node messages to every node and one node broadcast to all
/// nodes; each is acknowledged to PE 0 by the PE that ran it, with its id. PE 0 checks that
/// every id ran exactly once, on a PE of the node it was sent to.
pub(super) fn node(pe: &mut Pe) {
    let (n, nodes) = (pe.num_pes() as u64, pe.num_nodes() as u64);
    let expected = n * nodes * PER_NODE + n * nodes;
    let v = verdict(pe, "node", move |_| {
        format!("({expected} node messages and broadcast copies, each run once)")
    });
    let seen = Rc::new(RefCell::new(HashSet::new()));
    let errors = Rc::new(RefCell::new(0u64));
    let (s, e) = (seen.clone(), errors.clone());
    // PE 0: [id, node that ran it, node it was for].
    let ack = pe.register("ack", move |pe, msg| {
        let (id, ran_on, meant) = (
            word(msg.payload(), 0),
            word(msg.payload(), 1),
            word(msg.payload(), 2),
        );
        if !s.borrow_mut().insert((id, meant)) {
            *e.borrow_mut() += 1;
            complain(pe, format!("node message {id} for node {meant} ran twice"));
        }
        if ran_on != meant {
            *e.borrow_mut() += 1;
            complain(
                pe,
                format!("node message {id} for node {meant} ran on node {ran_on}"),
            );
        }
    });
    // Point to point: [id, destination node]; broadcast: [id] (meant for the running node).
    let run = pe.register("node-run", move |pe, msg| {
        let id = word(msg.payload(), 0);
        let meant = match word(msg.payload(), 1) {
            u64::MAX => pe.my_node() as u64,
            m => m,
        };
        let me = pe.my_node() as u64;
        pe.send(0, ack, &words(&[id, me, meant]));
    });
    pe.barrier();
    let me = pe.my_pe() as u64;
    for seq in 0..PER_NODE {
        for node in 0..nodes {
            let id = (me * nodes + node) * PER_NODE + seq;
            pe.send_node(node as usize, run, &words(&[id, node]));
        }
    }
    // Broadcast ids live above the point-to-point ones.
    pe.broadcast_node_all(run, &words(&[n * nodes * PER_NODE + me]));
    if pe.my_pe() == 0 {
        let s = seen.clone();
        pe.run_until(|_| s.borrow().len() as u64 >= expected);
        let errs = *errors.borrow() + (seen.borrow().len() as u64).abs_diff(expected);
        report(pe, errs, v);
    } else {
        report(pe, 0, v);
    }
}

/// Each PE reports the cores its thread may run on (`sched_getaffinity`), and PE 0 the
/// cores of every thread of its process (from /proc), one line each:
/// `pinning PE p cores LIST` and `pinning thread NAME cores LIST`.
pub(super) fn pinning(pe: &mut Pe) {
    let v = verdict(pe, "pinning", |_| String::new());
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let cores: Vec<String> = sched_getaffinity(Pid::from_raw(0))
        .map(|set| {
            (0..CpuSet::count())
                .filter(|&i| set.is_set(i).unwrap_or(false))
                .map(|i| i.to_string())
                .collect()
        })
        .unwrap_or_default();
    converse::input::out_line(&format!(
        "pinning PE {} cores {}",
        pe.my_pe(),
        cores.join(",")
    ));
    // Every thread of the process exists once every PE has started.
    pe.barrier();
    if pe.my_pe() == 0 {
        for (name, list) in threads() {
            converse::input::out_line(&format!("pinning thread {name} cores {list}"));
        }
    }
    report(pe, 0, v);
}

/// (name, allowed cores) of every thread of this process.
fn threads() -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .map(|v| v.trim().to_owned())
            };
            Some((field("Name:")?, field("Cpus_allowed_list:")?))
        })
        .collect()
}

/// Every PE computes for SECS seconds in a handler, right after sending to the next PE: with
/// nobody polling, a layer that needs acknowledgements would call its peers dead. In SMP mode
/// the communication threads keep the protocol going.
pub(super) fn compute(pe: &mut Pe, secs: f64) {
    let v = verdict(pe, "compute", move |_| {
        format!("({secs} s in a handler on every PE)")
    });
    let got = Rc::new(RefCell::new(0u64));
    let g = got.clone();
    let data = pe.register("data", move |_, _| *g.borrow_mut() += 1);
    let work = pe.register("work", move |pe, _| {
        let next = (pe.my_pe() + 1) % pe.num_pes();
        // Data outstanding toward a peer that is computing too.
        for _ in 0..64 {
            pe.send(next, data, &[7; 1024]);
        }
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let mut x = 0u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    });
    pe.barrier();
    let me = pe.my_pe();
    pe.send(me, work, b"");
    let g = got.clone();
    pe.run_until(|_| *g.borrow() >= 64);
    report(pe, 0, v);
}

/// `siblings MIB SECS [ring]`: the last PE of each node computes (sleeps) SECS while every
/// other PE of its node sends it MIB in 64 KiB messages; with `ring`, the same again around a
/// ring of those senders (each floods the next, the last the first: siblings that flood each
/// other while none dispatches). Once a PE has all it expects it joins a reduction; PE 0 then
/// prints the process's peak resident memory (`conformance siblings: ok (peak RSS N MiB)`)
/// and ends the job. Without a bound between the PEs of a process the sleeper's inbox held
/// all the senders sent.
pub(super) fn siblings(pe: &mut Pe, mib: u64, secs: f64, ring: bool) {
    const CHUNK: usize = 64 << 10;
    let per_sender = mib * (1 << 20) / CHUNK as u64;
    let node = pe.my_node();
    let first = pe.node_first_pe(node);
    let size = pe.node_size();
    let last = first + size - 1;
    let senders = size - 1;
    let me = pe.my_pe();
    // The ring of senders: first..last, each to the next.
    let next = if ring && senders > 1 {
        Some(first + (me - first + 1) % senders)
    } else {
        None
    };
    let expect = if me == last {
        per_sender * senders as u64
    } else if next.is_some() {
        per_sender
    } else {
        0
    };
    let done = pe.register("siblings-done", |pe, _| {
        let peak = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
            .map_or(0, |u| u.max_rss() / 1024);
        converse::input::out_line(&format!("conformance siblings: ok (peak RSS {peak} MiB)"));
        pe.exit(0);
    });
    let got = Rc::new(std::cell::Cell::new(0u64));
    let g = got.clone();
    let chunk = pe.register("siblings-chunk", move |pe, _| {
        g.set(g.get() + 1);
        if g.get() == expect {
            pe.reduce(&[], |_, _| {}, converse::ReduceTarget::Root(done));
        }
    });
    // After the start-up check: what arrives before it is held until every PE has started
    // (a PE cannot run the program's handlers before), however much it is.
    pe.barrier();
    if expect == 0 {
        pe.reduce(&[], |_, _| {}, converse::ReduceTarget::Root(done));
    }
    if me == last {
        std::thread::sleep(Duration::from_secs_f64(secs));
        return;
    }
    let payload = vec![7u8; CHUNK];
    for _ in 0..per_sender {
        pe.send(last, chunk, &payload);
        if let Some(n) = next {
            pe.send(n, chunk, &payload);
        }
    }
}
