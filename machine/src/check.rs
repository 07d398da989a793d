//! A fast, in-process conformance check of the [`Machine`] contract, runnable against any
//! layer's boot function (as GASNet's `testam` and `testbarrier` are against a conduit).
//!
//! Every node runs on a thread of the calling process and, through the trait alone:
//! 1. sends a stream of numbered messages of mixed sizes (empty, small, a few KiB, and large
//!    enough for a layer's large-message path) to every other node, and checks that what
//!    arrives from each sender is that stream: in order, each message exactly once, with its
//!    bytes intact, none lost;
//! 2. sends another stream and goes straight into [`Machine::barrier`]: what arrives during
//!    the barrier must reach the barrier's `deliver`, the rest the next `advance`, and none may
//!    be lost or doubled;
//! 3. if the layer has a [`waker`](crate::Transport::waker) (while every node is past that barrier
//!    and the interconnect is quiet): a wake from another thread ends a long `wait`, a wake
//!    before `wait` makes it return at once, a burst of wakes from several threads ends a
//!    `wait` and leaves the waker working;
//! 4. if the layer offers direct copies ([`rma`](crate::Transport::rma)): for every node it
//!    says it reaches, a gather written and a scatter read are the bytes, a bad address is a
//!    returned fault (no signal), and a node outside the job is not reached. The nodes are
//!    threads of one process here, so this checks the calls, not the reach across processes
//!    (the whole-job one-sided tests do);
//! 5. meets the others in a last barrier and calls [`Machine::exit`].
//!
//! A layer booted in one call for all nodes (the in-process layer) is checked with a
//! configuration without [`launch`](BootConfig::launch); a launched layer is booted once per
//! node, each on its own thread with its own launch context (the tests make those with
//! charmrun's embedded launcher), because its boot returns only when every node has joined.
//! The whole-job suite in `tests/` remains the check of real jobs.
//!
//! ```
//! let report = converse_machine::check::run(&converse_machine::local::LAYER, 3, |_| converse_machine::BootConfig::new(3))
//!     .expect("the in-process layer keeps the contract");
//! assert_eq!(report.nodes, 3);
//! ```

use crate::contract::{BootConfig, Layer, Machine, Wake};
use crate::message::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Messages each node sends each other node in the ordering phase.
const STREAM: u32 = 600;
/// Messages each node sends each other node just before the barrier.
const BEFORE_BARRIER: u32 = 100;
/// How long a phase may take before the check fails: generous, the machine may be loaded.
const PHASE_LIMIT: Duration = Duration::from_secs(60);

/// The `wait` a wake must end: long, so that a lost wake is plain.
const WAKE_WAIT: Duration = Duration::from_secs(30);
/// How soon a woken `wait` must have returned: "promptly" with room for a loaded machine;
/// well short of [`WAKE_WAIT`], which is what a lost wake would take.
const WAKE_LIMIT: Duration = Duration::from_secs(10);
/// How long the waking thread lets the node sleep before it wakes it.
const WAKE_AFTER: Duration = Duration::from_millis(20);

/// Messages each node hands up from each other node over the whole check.
pub const PER_PAIR: u64 = STREAM as u64 + BEFORE_BARRIER as u64;

/// What a check did, when it passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Nodes that took part.
    pub nodes: usize,
    /// Messages handed up, over all nodes and phases.
    pub messages: u64,
    /// Of those, how many the barrier handed up (the rest came from `advance`).
    pub during_barrier: u64,
    /// Whether every node had a [`waker`](crate::Transport::waker), and it kept its promises.
    pub woken: bool,
    /// Whether every node offered direct copies ([`rma`](crate::Transport::rma)) and they
    /// kept their promises.
    pub rma: bool,
}

/// The contract was broken, or the layer failed; the text names the node and what it saw.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{layer} layer, node {node}: {what}")]
pub struct CheckError {
    /// The layer checked.
    pub layer: &'static str,
    /// The node that saw the problem.
    pub node: usize,
    /// What it saw.
    pub what: String,
}

/// Check `layer` with `nodes` nodes; `cfg_for(i)` is node `i`'s configuration (only node 0's is
/// used when it has no launch context: the layer then boots every node in one call).
///
/// # Errors
/// The first [`CheckError`] any node found.
pub fn run(
    layer: &Layer,
    nodes: usize,
    cfg_for: impl Fn(usize) -> BootConfig + Sync,
) -> Result<Report, CheckError> {
    let fail = |node: usize, what: String| CheckError {
        layer: layer.name,
        node,
        what,
    };
    let first = cfg_for(0);
    let results: Vec<Result<Outcome, CheckError>> = if first.launch.is_none() {
        let machines = (layer.boot)(&first).map_err(|e| fail(0, format!("boot: {e}")))?;
        if machines.len() != nodes {
            return Err(fail(
                0,
                format!("boot gave {} nodes, not {nodes}", machines.len()),
            ));
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = machines
                .into_iter()
                .map(|m| s.spawn(move || exercise(layer.name, m, nodes)))
                .collect();
            join_all(layer.name, handles)
        })
    } else {
        let cfg_for = &cfg_for;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..nodes)
                .map(|i| {
                    s.spawn(move || {
                        let cfg = cfg_for(i);
                        let mut ms =
                            (layer.boot)(&cfg).map_err(|e| fail(i, format!("boot: {e}")))?;
                        match (ms.pop(), ms.is_empty()) {
                            (Some(m), true) => exercise(layer.name, m, nodes),
                            _ => Err(fail(i, "a per-node boot gave other than one node".into())),
                        }
                    })
                })
                .collect();
            join_all(layer.name, handles)
        })
    };
    let mut report = Report {
        nodes,
        messages: 0,
        during_barrier: 0,
        woken: true,
        rma: true,
    };
    for r in results {
        let o = r?;
        report.messages += o.messages;
        report.during_barrier += o.during_barrier;
        report.woken &= o.woken;
        report.rma &= o.rma;
    }
    Ok(report)
}

/// One node's part of a [`Report`].
struct Outcome {
    messages: u64,
    during_barrier: u64,
    woken: bool,
    rma: bool,
}

fn join_all(
    layer: &'static str,
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<Outcome, CheckError>>>,
) -> Vec<Result<Outcome, CheckError>> {
    handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            h.join().unwrap_or_else(|_| {
                Err(CheckError {
                    layer,
                    node: i,
                    what: "panicked".into(),
                })
            })
        })
        .collect()
}

/// Payload size of message `seq` of a stream: empty, small, a few KiB, and now and then large
/// enough for a layer's large-message path (lending, fragmentation, pieces).
fn size_of(seq: u32) -> usize {
    match seq % 50 {
        0 => 0,
        7 => 4 << 10,
        49 if seq % 200 == 49 => 300 << 10,
        _ => 8 + (seq as usize % 24),
    }
}

/// Message `seq` from `src`: its header and a fill every byte of which depends on both.
fn message(src: usize, phase: u8, seq: u32) -> Message {
    let len = size_of(seq).max(9);
    let mut m = Message::new(if size_of(seq) == 0 { 0 } else { len });
    if m.payload_len() > 0 {
        let p = m.payload_mut();
        p[..4].copy_from_slice(&(src as u32).to_le_bytes());
        p[4..8].copy_from_slice(&seq.to_le_bytes());
        p[8] = phase;
        for (i, b) in p[9..].iter_mut().enumerate() {
            *b = fill(src, seq, i);
        }
    }
    // The envelope carries what an empty payload cannot.
    m.set_src_pe(src as u32);
    m.set_arg0(seq);
    m.set_arg1(u32::from(phase));
    m
}

fn fill(src: usize, seq: u32, i: usize) -> u8 {
    (src as u32 ^ seq.rotate_left(7) ^ i as u32 ^ (i >> 8) as u32) as u8
}

/// What a node expects from each sender in one phase.
struct Expect {
    next: Vec<u32>,
    want: u32,
    me: usize,
    phase: u8,
}

impl Expect {
    fn new(nodes: usize, me: usize, phase: u8, want: u32) -> Expect {
        let mut next = vec![0; nodes];
        next[me] = want;
        Expect {
            next,
            want,
            me,
            phase,
        }
    }

    fn done(&self) -> bool {
        self.next.iter().all(|&n| n == self.want)
    }

    /// Take one arrived message of this phase; `Err` says how it breaks the contract.
    fn take(&mut self, m: &Message) -> Result<(), String> {
        let (src, seq) = (m.src_pe() as usize, m.arg0());
        let Some(next) = self.next.get_mut(src).filter(|_| src != self.me) else {
            return Err(format!("a message claims to come from node {src}"));
        };
        if seq != *next {
            return Err(if seq < *next {
                format!("message #{seq} from node {src} arrived twice (or out of order)")
            } else {
                format!("from node {src}: #{seq} arrived where #{next} was due (lost or reordered)")
            });
        }
        let p = m.payload();
        let intact = if size_of(seq) == 0 {
            p.is_empty()
        } else {
            p.len() == size_of(seq).max(9)
                && p[..4] == (src as u32).to_le_bytes()
                && p[4..8] == seq.to_le_bytes()
                && p[8] == self.phase
                && p[9..]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == fill(src, seq, i))
        };
        if !intact {
            return Err(format!(
                "message #{seq} from node {src} arrived with other bytes"
            ));
        }
        *next += 1;
        Ok(())
    }

    fn missing(&self) -> String {
        let late: Vec<String> = (0..self.next.len())
            .filter(|&s| self.next[s] < self.want)
            .map(|s| format!("node {s}: {}/{}", self.next[s], self.want))
            .collect();
        late.join(", ")
    }
}

/// One node's expectations for both phases: a faster peer's phase-2 messages may arrive while
/// this node still waits for phase 1, and FIFO per pair puts them after its phase-1 ones.
struct Node {
    phases: [Expect; 2],
    /// Messages handed up, and of those by the barrier.
    total: u64,
    during: u64,
    /// The first breach seen.
    broken: Option<String>,
}

impl Node {
    fn take(&mut self, m: &Message) {
        self.total += 1;
        let r = match m.arg1() {
            1 => self.phases[0].take(m),
            // FIFO per pair: a sender's phase-2 messages come after all its phase-1 ones.
            2 if self.phases[0].next.get(m.src_pe() as usize) != Some(&STREAM) => Err(format!(
                "a phase-2 message from node {} overtook its phase-1 ones",
                m.src_pe(),
            )),
            2 => self.phases[1].take(m),
            p => Err(format!(
                "a message of unknown phase {p} from node {}",
                m.src_pe()
            )),
        };
        if let (Err(e), None) = (r, &self.broken) {
            self.broken = Some(e);
        }
    }
}

/// One node's part of the check.
///
/// A node that finds a breach still goes through every barrier and `exit`, so that no other
/// node waits for it forever; the others then fail too, at worst after [`PHASE_LIMIT`].
fn exercise(
    layer: &'static str,
    mut m: Box<dyn Machine>,
    nodes: usize,
) -> Result<Outcome, CheckError> {
    let me = m.my_node();
    let fail = |what: String| CheckError {
        layer,
        node: me,
        what,
    };
    if m.table().num_nodes() != nodes {
        return Err(fail(format!(
            "the node table has {} nodes, not {nodes}",
            m.table().num_nodes()
        )));
    }
    let mut node = Node {
        phases: [
            Expect::new(nodes, me, 1, STREAM),
            Expect::new(nodes, me, 2, BEFORE_BARRIER),
        ],
        total: 0,
        during: 0,
        broken: None,
    };

    // 1. FIFO, exactly once, intact, none lost. Sends are interleaved over destinations, and
    // the node keeps receiving while it sends, as a scheduler would.
    let mut failure: Option<String> = None;
    'phase1: for seq in 0..STREAM {
        for dst in (0..nodes).filter(|&d| d != me) {
            if let Err(e) = m.send(dst, message(me, 1, seq)) {
                failure = Some(format!("send to node {dst}: {e}"));
                break 'phase1;
            }
        }
        if let Err(e) = m.advance(&mut |msg| node.take(&msg)) {
            failure = Some(format!("advance: {e}"));
            break;
        }
        if node.broken.is_some() {
            break;
        }
    }
    if failure.is_none() && node.broken.is_none() {
        failure = drain(&mut *m, &mut node, 0).err();
    }

    // 2. What arrives during the barrier reaches its `deliver`; nothing is lost or doubled.
    if failure.is_none() && node.broken.is_none() {
        'phase2: for seq in 0..BEFORE_BARRIER {
            for dst in (0..nodes).filter(|&d| d != me) {
                if let Err(e) = m.send(dst, message(me, 2, seq)) {
                    failure = Some(format!("send to node {dst}: {e}"));
                    break 'phase2;
                }
            }
        }
    }
    let before = node.total;
    if let Err(e) = m.barrier(&mut |msg| node.take(&msg)) {
        return Err(fail(failure.unwrap_or(format!("barrier: {e}"))));
    }
    node.during = node.total - before;
    if failure.is_none() && node.broken.is_none() {
        failure = drain(&mut *m, &mut node, 1).err();
    }

    // 3. The waker, while nothing moves: every node is past the barrier, the streams are
    // drained, and the last barrier below keeps every peer (and its sockets) alive meanwhile.
    let waker = m.waker();
    let woken = waker.is_some();
    if let (Some(w), None, None) = (waker, &failure, &node.broken) {
        failure = check_waker(&mut *m, &w).err();
    }

    // 4. Direct copies, where the layer offers them.
    let rma = m.rma();
    let has_rma = rma.is_some();
    if let (Some(r), None, None) = (rma, &failure, &node.broken) {
        failure = check_rma(&*r, nodes).err();
    }

    // 5. Nobody leaves while a peer still receives.
    let mut stray = None;
    let last = m.barrier(&mut |msg| {
        stray.get_or_insert_with(|| {
            format!(
                "a message from node {} arrived in the last barrier",
                msg.src_pe()
            )
        });
    });
    let exit = m.exit(0);
    let what = failure
        .or(node.broken)
        .or(last.err().map(|e| format!("second barrier: {e}")))
        .or(stray)
        .or(exit.err().map(|e| format!("exit: {e}")));
    match what {
        Some(w) => Err(fail(w)),
        None => Ok(Outcome {
            messages: node.total,
            during_barrier: node.during,
            woken,
            rma: has_rma,
        }),
    }
}

/// The [`Rma`](crate::Rma) promises that can be seen inside one process (see the module docs).
fn check_rma(r: &dyn crate::Rma, nodes: usize) -> Result<(), String> {
    if r.reaches(nodes) {
        return Err(format!("rma: reaches node {nodes}, outside the job"));
    }
    let src: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
    for node in (0..nodes).filter(|&n| r.reaches(n)) {
        let mut dst = vec![0u8; src.len()];
        let (a, b) = src.split_at(1000);
        match r.write(node, &[a, &[], b], dst.as_mut_ptr() as u64) {
            Ok(()) if dst == src => {}
            Ok(()) => return Err(format!("rma: a write to node {node} left other bytes")),
            // The host forbids it: the runtime falls back to messages, as the layer says.
            Err(crate::RmaFault::Denied { .. }) if !r.reaches(node) => continue,
            Err(e) => return Err(format!("rma: write to node {node}: {e}")),
        }
        let (mut x, mut y) = (vec![0u8; 3], vec![0u8; src.len() - 3]);
        r.read(node, src.as_ptr() as u64, &mut [&mut x[..], &mut y[..]])
            .map_err(|e| format!("rma: read from node {node}: {e}"))?;
        if x[..] != src[..3] || y[..] != src[3..] {
            return Err(format!("rma: a read from node {node} gave other bytes"));
        }
        match r.read(node, 8, &mut [&mut x[..]]) {
            Err(crate::RmaFault::Fault { .. }) => {}
            other => {
                return Err(format!(
                    "rma: reading address 8 of node {node} gave {other:?}, not a fault"
                ))
            }
        }
    }
    Ok(())
}

/// Check only the [`Wake`] contract on one node, for a layer whose nodes cannot all run in one
/// process (MPI: one node per process), on the thread that runs the node (the one whose `wait`
/// a wake must end). The interconnect must be quiet: no peer sends to this node meanwhile.
/// `Ok(false)` when the layer has no [`waker`](crate::Transport::waker).
///
/// # Errors
/// What broke the contract (a wake lost, a message that arrived), naming the node.
pub fn waker(m: &mut dyn Machine) -> Result<bool, CheckError> {
    let Some(w) = m.waker() else {
        return Ok(false);
    };
    check_waker(m, &w).map_err(|what| CheckError {
        layer: m.layer(),
        node: m.my_node(),
        what,
    })?;
    Ok(true)
}

/// The [`Wake`] contract: a wake from another thread ends a `wait`; a wake before `wait`
/// makes it return at once; many wakes from several threads end a `wait` and leave the waker
/// working. No message may arrive meanwhile.
fn check_waker(m: &mut dyn Machine, w: &Arc<dyn Wake>) -> Result<(), String> {
    woken_while_waiting(m, w, "a wake from another thread during wait")?;
    w.wake();
    timed_wait(
        m,
        "wait after a wake (a wake before wait must make it return at once)",
    )?;
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..1000 {
                    w.wake();
                }
            });
        }
    });
    timed_wait(m, "wait after 2000 wakes from two threads")?;
    woken_while_waiting(m, w, "a wake during wait after a burst of wakes")
}

/// `wait` once, long; it must return within [`WAKE_LIMIT`].
fn timed_wait(m: &mut dyn Machine, what: &str) -> Result<(), String> {
    let start = Instant::now();
    m.wait(WAKE_WAIT).map_err(|e| format!("{what}: {e}"))?;
    let took = start.elapsed();
    if took > WAKE_LIMIT {
        return Err(format!("{what}: returned after {took:?}, not at once"));
    }
    Ok(())
}

/// Wait (advancing between waits, as a communication thread would: a spurious return is
/// allowed) until another thread, after [`WAKE_AFTER`], has woken the node; the whole must take
/// less than [`WAKE_LIMIT`], where a lost wake takes [`WAKE_WAIT`].
fn woken_while_waiting(m: &mut dyn Machine, w: &Arc<dyn Wake>, what: &str) -> Result<(), String> {
    let rung = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(WAKE_AFTER);
            // Said before the wake: whoever sees it is sure the wake comes (it may already be
            // pending: it is sticky).
            rung.store(true, Ordering::SeqCst);
            w.wake();
        });
        let mut stray = None;
        loop {
            m.advance(&mut |msg| {
                stray.get_or_insert(msg.src_pe());
            })
            .map_err(|e| format!("{what}: advance: {e}"))?;
            if let Some(src) = stray {
                return Err(format!("{what}: a message from node {src} arrived"));
            }
            if rung.load(Ordering::SeqCst) {
                break;
            }
            m.wait(WAKE_WAIT)
                .map_err(|e| format!("{what}: wait: {e}"))?;
            if start.elapsed() > WAKE_LIMIT {
                break;
            }
        }
        Ok(())
    })?;
    let took = start.elapsed();
    if took > WAKE_LIMIT {
        return Err(format!(
            "{what}: the wait ended after {took:?} (the wake came after {WAKE_AFTER:?})"
        ));
    }
    Ok(())
}

/// Advance (waiting when idle) until phase `i` is complete, or fail after [`PHASE_LIMIT`].
fn drain(m: &mut dyn Machine, node: &mut Node, i: usize) -> Result<(), String> {
    let deadline = Instant::now() + PHASE_LIMIT;
    while !node.phases[i].done() && node.broken.is_none() {
        let n = m
            .advance(&mut |msg| node.take(&msg))
            .map_err(|e| format!("advance: {e}"))?;
        if Instant::now() > deadline {
            return Err(format!(
                "still waiting after {PHASE_LIMIT:?} for {}",
                node.phases[i].missing()
            ));
        }
        if n == 0 {
            m.wait(Duration::from_millis(5))
                .map_err(|e| format!("wait: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_message_is_named() {
        let mut e = Expect::new(3, 0, 1, 2);
        assert!(e.take(&message(1, 1, 0)).is_ok());
        let err = e.take(&message(1, 1, 1 + 1)).unwrap_err();
        assert!(err.contains("#2 arrived where #1 was due"), "{err}");
    }

    #[test]
    fn a_duplicate_and_a_damaged_message_are_named() {
        let mut e = Expect::new(2, 0, 1, 5);
        assert!(e.take(&message(1, 1, 0)).is_ok());
        let err = e.take(&message(1, 1, 0)).unwrap_err();
        assert!(err.contains("arrived twice"), "{err}");
        let mut bad = message(1, 1, 1);
        bad.payload_mut()[8] ^= 1;
        let err = e.take(&bad).unwrap_err();
        assert!(err.contains("other bytes"), "{err}");
        assert_eq!(e.missing(), "node 1: 1/5");
    }

    #[test]
    fn sizes_cover_empty_small_and_large() {
        let sizes: Vec<usize> = (0..STREAM).map(size_of).collect();
        assert!(sizes.contains(&0));
        assert!(sizes.contains(&(4 << 10)));
        assert!(sizes.iter().any(|&s| s >= 256 << 10));
    }
}
