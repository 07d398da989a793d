//! The paper's clock-skew detection (Paradyn's start-up, section 3), with its accuracy
//! experiment: the front-end learns the skew of every back-end's clock against its own through
//! the tree, and also directly (a back-end samples its clock between two of the front-end's),
//! and both are compared with the true skews.
//!
//! Through the tree each process measures the skew of each child only: a probe comes down,
//! the `SkewDown` filter notes when it passed (this process's clock), a child answers with when
//! it received the probe and when it answered (its clock), and the `SkewUp` filter, which sees
//! each answer as it arrives (don't-wait), takes the child's skew as in NTP,
//! `((c_recv - t_down) + (c_send - t_arrive)) / 2`, adds it to the skews the child reports
//! for the back-ends below it, and once every child has answered sends the lot up with its
//! own two times. By
//! induction the front-end gets every back-end's skew against its clock. Each process keeps,
//! over `ROUNDS` rounds, each child's skew from the round its answer came soonest in (the
//! paper's first phase); the last round composes those.
//!
//! Processes of one host share one clock, so each process's clock here is the host's shifted
//! by a known amount (`fake_offset`, up to ±250 ms by rank): the true skews are known.
//!
//! ```text
//! cargo build --release --examples
//! target/release/charmrun +p13 target/release/examples/tbon_clock_skew   # a 3x3 tree
//! ```

mod support;

use converse_tbon::{
    self as tbon, FilterContext, FilterError, FnFilter, Options, Packet, SyncMode, TbonError,
    FIRST_USER_FILTER,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

const PROBE: i32 = 100;
const DIRECT: i32 = 101;
/// Tree rounds, and direct round trips per back-end (the paper's 100 each).
const ROUNDS: usize = 100;
const DIRECT_ROUNDS: usize = 100;

/// The known shift of process `rank`'s clock: from -250 to +249 ms.
fn fake_offset(rank: u32) -> i64 {
    ((i64::from(rank) * 7919) % 500 - 250) * 1_000_000
}

/// Process `rank`'s clock, in nanoseconds.
fn clock(rank: u32) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    now + fake_offset(rank)
}

thread_local! {
    /// When the last probe of each stream passed down through this process (its clock):
    /// the downstream filter writes it, the upstream one reads it (one process, one thread).
    static DOWN_AT: RefCell<HashMap<u32, i64>> = RefCell::new(HashMap::new());
}

fn skew_down(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
    let now = clock(cx.info.rank);
    for p in cx.packets_in.drain(..) {
        DOWN_AT.with(|d| d.borrow_mut().insert(p.stream_id(), now));
        cx.packets_out.push(p);
    }
    Ok(())
}

/// What a process has gathered of one round (back-end ranks and their skews to its clock),
/// and, kept over rounds, each child's skew from the round it answered soonest in (the
/// paper's first phase: repeated probes for each connection's own skew).
#[derive(Default)]
struct Round {
    answered: usize,
    ranks: Vec<u32>,
    skews: Vec<i64>,
    /// By the child's first back-end (children report disjoint sets): round trip, skew.
    best: HashMap<u32, (i64, i64)>,
}

fn skew_up(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
    let me = cx.info.rank;
    let children = cx.info.children.len();
    let state = cx.state.get_or_insert_with(|| Box::new(Round::default()));
    let round = state
        .downcast_mut::<Round>()
        .ok_or_else(|| FilterError("skew state".into()))?;
    let mut out = None;
    for p in cx.packets_in.iter() {
        let arrived = clock(me);
        let down = DOWN_AT.with(|d| d.borrow().get(&p.stream_id()).copied());
        let down = down.ok_or_else(|| FilterError("an answer before any probe".into()))?;
        let (c_recv, c_send, ranks, skews): (i64, i64, Vec<u32>, Vec<i64>) =
            p.unpack("%ld %ld %aud %ald")?;
        // The round trip less the time the child held the probe: the shorter, the less an
        // asymmetric delay can skew the estimate.
        let rtt = (arrived - down) - (c_send - c_recv);
        let estimate = ((c_recv - down) + (c_send - arrived)) / 2;
        let key = ranks.first().copied().unwrap_or(u32::MAX);
        let best = round.best.entry(key).or_insert((i64::MAX, estimate));
        if rtt < best.0 {
            *best = (rtt, estimate);
        }
        let child = best.1;
        round.ranks.extend(ranks);
        round.skews.extend(skews.iter().map(|s| s + child));
        round.answered += 1;
        if round.answered == children {
            round.answered = 0;
            let done = (
                std::mem::take(&mut round.ranks),
                std::mem::take(&mut round.skews),
            );
            out = Some((p.stream_id(), p.tag(), down, done));
        }
    }
    if let Some((sid, tag, down, (ranks, skews))) = out {
        cx.packets_out.push(Packet::new(
            sid,
            tag,
            "%ld %ld %aud %ald",
            (down, clock(me), ranks, skews),
        )?);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        if support::refused(pe, "tbon_clock_skew", 3, 0, "tbon_clock_skew +pN") {
            return;
        }
        let down = FnFilter::new("", skew_down);
        let up = FnFilter::new("%ld %ld %aud %ald", skew_up);
        let (Ok(down), Ok(up)) = (down, up) else {
            return;
        };
        let opts = Options::default()
            .filter("SkewDown", down)
            .filter("SkewUp", up);
        let n = pe.num_pes();
        support::run_roles(
            pe,
            "tbon_clock_skew",
            opts,
            |_| support::two_levels(n),
            front_end,
            back_end,
        );
    })
}

fn front_end(net: &mut tbon::Network<'_>) -> Result<(), TbonError> {
    let me = net.rank().unwrap_or(0);
    let comm = net.broadcast_communicator();
    let (down, up) = (FIRST_USER_FILTER, FIRST_USER_FILTER + 1);
    let s = net.new_stream(&comm, up, SyncMode::DontWait, down)?;
    // Each round refines every connection's skew; the last round composes the best of each.
    let mut tree: HashMap<u32, (i64, i64)> = HashMap::new();
    for _ in 0..ROUNDS {
        net.send(&s, PROBE, "", ())?;
        let (_, _, ranks, skews): (i64, i64, Vec<u32>, Vec<i64>) =
            net.recv_on(&s)?.unpack("%ld %ld %aud %ald")?;
        tree = ranks
            .into_iter()
            .zip(skews)
            .map(|(r, sk)| (r, (0, sk)))
            .collect();
    }
    // Directly: the back-end samples its clock between two of the front-end's.
    let mut direct: HashMap<u32, (i64, i64)> = HashMap::new();
    for &r in comm.endpoints() {
        for _ in 0..DIRECT_ROUNDS {
            let t0 = clock(me);
            net.send_to_backend(r, DIRECT, "", ())?;
            let sample: i64 = net.recv_on(&tbon::Stream::from_id(r))?.unpack("%ld")?;
            let t1 = clock(me);
            let e = direct.entry(r).or_insert((i64::MAX, 0));
            if t1 - t0 < e.0 {
                *e = (t1 - t0, sample - (t0 + t1) / 2);
            }
        }
    }
    let mut ranks: Vec<u32> = comm.endpoints().to_vec();
    ranks.sort_unstable();
    let (mut sum_tree, mut sum_direct, mut max_tree, mut max_direct) = (0i64, 0i64, 0i64, 0i64);
    converse::input::out_line("back-end  true skew (us)  tree error (us)  direct error (us)");
    for &r in &ranks {
        let truth = fake_offset(r) - fake_offset(me);
        let t = tree.get(&r).map(|e| e.1).ok_or(TbonError::BadRank(format!(
            "back-end {r} is missing from the tree's answer"
        )))?;
        let d = direct.get(&r).map_or(0, |e| e.1);
        let (et, ed) = ((t - truth).abs(), (d - truth).abs());
        sum_tree += et;
        sum_direct += ed;
        max_tree = max_tree.max(et);
        max_direct = max_direct.max(ed);
        converse::input::out_line(&format!(
            "{r:>8}  {:>14.1}  {:>15.1}  {:>17.1}",
            truth as f64 / 1e3,
            et as f64 / 1e3,
            ed as f64 / 1e3
        ));
    }
    let k = ranks.len().max(1) as f64;
    converse::input::out_line(&format!(
        "clock skew over {} back-ends: tree mean error {:.1} us (max {:.1}), direct mean error \
         {:.1} us (max {:.1}); true skews up to {:.0} ms",
        ranks.len(),
        sum_tree as f64 / k / 1e3,
        max_tree as f64 / 1e3,
        sum_direct as f64 / k / 1e3,
        max_direct as f64 / 1e3,
        ranks
            .iter()
            .map(|&r| (fake_offset(r) - fake_offset(me)).abs())
            .max()
            .unwrap_or(0) as f64
            / 1e6
    ));
    Ok(())
}

fn back_end(net: &mut tbon::Network<'_>) -> Result<(), TbonError> {
    let me = net.rank().unwrap_or(0);
    loop {
        let (s, p) = net.recv()?;
        let got = clock(me);
        match p.tag() {
            PROBE => net.send(
                &s,
                PROBE,
                "%ld %ld %aud %ald",
                (got, clock(me), vec![me], vec![0i64]),
            )?,
            DIRECT => net.send(&s, DIRECT, "%ld", got)?,
            _ => {}
        }
    }
}
