//! `bench udp`: what is particular to the UDP layer, each figure next to its reference from
//! the same run. Every exchange runs between processes pinned to the first two cores: on a
//! two-core virtual machine, whether two processes share a core changes the time of a 1 MiB
//! exchange some threefold, and the scheduler flips between the two placements.
//! - **bandwidth** of 1 MiB ping-pong on the UDP layer next to the TCP layer and raw UDP;
//! - **goodput under loss**: the same in a network namespace whose firewall drops 1% and 5%
//!   of UDP datagrams, as a fraction of the loss-free figure measured there (needs root and
//!   nftables; skipped with a message otherwise);
//! - **latency under CPU contention**: the median of 1 MiB round trips with the nodes pinned to
//!   cores 0 and 1 and a busy process on core 1, next to the quiet median, for the UDP and TCP
//!   layers.
//! - **nodes**: small-message latency of the layer alone (the `Machine` driven directly)
//!   between nodes 0 and 1 of a 2-node job and of a 4-node job (the other two nodes idle),
//!   next to raw UDP on connected and on unconnected sockets: what the layer pays for serving
//!   more than one peer. (The layer alone, because on a two-core host the runtime of a 4-node
//!   job does not spin before blocking — more PEs than cores — so its figure would be that
//!   of wake-ups, not of the layer.)

use crate::pingpong::under_charmrun_with;
use crate::raw;
use crate::report::Row;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::{sysconf, Pid, SysconfVar};
use std::process::Command;

/// The message size of every figure here.
const MIB: usize = 1 << 20;

/// `bench udp`: the `parts` named (bandwidth, loss, contention, nodes). `set` (`+set K=V`
/// of bench's command line, as `+set` and `K=V` pairs) goes to the jobs of the nodes part.
pub(crate) fn run(iters: u64, runs: usize, parts: &[String], set: &[&str]) -> anyhow::Result<()> {
    for p in parts {
        match p.as_str() {
            "bandwidth" => bandwidth(iters, runs)?,
            "loss" => goodput_under_loss(iters, runs)?,
            "contention" => contention(iters, runs)?,
            "nodes" => nodes(iters, runs, set)?,
            other => anyhow::bail!("no part '{other}' (bandwidth, loss, contention, nodes)"),
        }
    }
    Ok(())
}

/// The layer's 1 MiB ping-pong as a job, its two nodes pinned to the first two cores.
fn ping(layer: &str, iters: u64, prefix: &[&str]) -> anyhow::Result<Row> {
    under_charmrun_with(layer, &[MIB], iters, "pe-pingpong", prefix, &["--pin"])?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("the {layer} job measured nothing"))
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// Median and smallest of some per-run figures.
fn summary(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let median = v.get(v.len() / 2).copied().unwrap_or(0.0);
    (median, v.first().copied().unwrap_or(0.0))
}

/// 1 MiB ping-pong: UDP layer, TCP layer, raw UDP, `runs` times in turn.
fn bandwidth(iters: u64, runs: usize) -> anyhow::Result<()> {
    converse::input::out_line(
        "1 MiB ping-pong, one-way, pinned to cores 0 and 1: UDP layer vs TCP layer vs raw UDP",
    );
    converse::input::out_line(&format!(
        "{:>6} | {:>10} {:>9} | {:>10} {:>9} | {:>10} {:>9}",
        "run", "udp p50 us", "MB/s", "tcp p50 us", "MB/s", "raw p50 us", "MB/s"
    ));
    let w = crate::pingpong::warmup(iters);
    let mut p50s: [Vec<f64>; 3] = Default::default();
    for r in 0..runs {
        let udp = ping("udp", iters, &[])?;
        let tcp = ping("tcp", iters, &[])?;
        let rawr = pinned_to(0, || raw::udp_pingpong(&[MIB], iters, w, true))?;
        let raw = rawr
            .first()
            .ok_or_else(|| anyhow::anyhow!("raw UDP measured nothing"))?;
        converse::input::out_line(&format!(
            "{:>6} | {:>10.1} {:>9.0} | {:>10.1} {:>9.0} | {:>10.1} {:>9.0}",
            r + 1,
            us(udp.p50_ns),
            udp.mb_per_s(),
            us(tcp.p50_ns),
            tcp.mb_per_s(),
            us(raw.p50_ns),
            raw.mb_per_s()
        ));
        for (v, row) in p50s.iter_mut().zip([&udp, &tcp, raw]) {
            v.push(us(row.p50_ns));
        }
    }
    let [u, t, r] = p50s.map(summary);
    converse::input::out_line(&format!("median | {:>10.1} {:>9} | {:>10.1} {:>9} | {:>10.1}\n  best | {:>10.1} {:>9} | {:>10.1} {:>9} | {:>10.1}",
        u.0, "", t.0, "", r.0, u.1, "", t.1, "", r.1));
    converse::input::out_line(&format!(
        "(MB/s from the mean one-way time; {iters} round trips per run after {w} warm-up; \
         median and best of the runs' p50s)\n"
    ));
    Ok(())
}

/// The sizes of the nodes part.
const SMALL: [usize; 3] = [8, 64, 4096];

/// Small-message ping-pong between nodes 0 and 1 on the UDP layer alone in a 2-node and a
/// 4-node job (nodes 2 and 3 idle), with raw UDP on connected and unconnected sockets, `runs`
/// rounds in turn, every process pinned to cores 0 and 1 (node n on core n mod 2).
fn nodes(iters: u64, runs: usize, set: &[&str]) -> anyhow::Result<()> {
    converse::input::out_line(
        "ping-pong node 0 <-> node 1, one-way p50/p99 us, pinned to cores 0 and 1: the UDP \
         layer alone in a 2-node and a 4-node job (nodes 2, 3 idle), raw UDP connected and \
         unconnected",
    );
    converse::input::out_line(&format!(
        "{:>4} {:>6} | {:>15} | {:>15} | {:>5} | {:>15} | {:>15}",
        "run", "bytes", "2 nodes", "4 nodes", "4/2", "raw connected", "raw unconnected"
    ));
    let w = crate::pingpong::warmup(iters);
    let pin = ["--pin"];
    let extra: Vec<&str> = pin.iter().chain(set).copied().collect();
    // Per size: the runs' (2-node, 4-node, raw, raw unconnected) p50s and the 4/2 ratios.
    let mut p50s = vec![[const { Vec::new() }; 4]; SMALL.len()];
    let mut ratios = vec![Vec::new(); SMALL.len()];
    for r in 0..runs {
        let raw_c = pinned_to(0, || raw::udp_pingpong(&SMALL, iters, w, true))?;
        let two = crate::pingpong::on_nodes("udp", &SMALL, iters, 2, "pe-direct", &extra)?;
        let four = crate::pingpong::on_nodes("udp", &SMALL, iters, 4, "pe-direct", &extra)?;
        let raw_u = pinned_to(0, || raw::udp_pingpong(&SMALL, iters, w, false))?;
        for (i, &size) in SMALL.iter().enumerate() {
            let pick = |rows: &[Row]| {
                rows.iter()
                    .find(|x| x.size == size)
                    .map(|x| (x.p50_ns, x.p99_ns))
                    .ok_or_else(|| anyhow::anyhow!("no {size} B figure"))
            };
            let cols = [pick(&two)?, pick(&four)?, pick(&raw_c)?, pick(&raw_u)?];
            let ratio = cols[1].0 as f64 / cols[0].0.max(1) as f64;
            let cell = |(p50, p99): (u64, u64)| format!("{:.3} {:.2}", us(p50), us(p99));
            converse::input::out_line(&format!(
                "{:>4} {:>6} | {:>15} | {:>15} | {:>5.2} | {:>15} | {:>15}",
                r + 1,
                size,
                cell(cols[0]),
                cell(cols[1]),
                ratio,
                cell(cols[2]),
                cell(cols[3])
            ));
            for (v, c) in p50s[i].iter_mut().zip(cols) {
                v.push(us(c.0));
            }
            ratios[i].push(ratio);
        }
    }
    for (i, &size) in SMALL.iter().enumerate() {
        let [two, four, rc, ru] = p50s[i].clone().map(|v| summary(v).0);
        converse::input::out_line(&format!(
            "median {size:>6} B: 2 nodes {two:.3}, 4 nodes {four:.3} (4/2 {:.2}), raw \
             connected {rc:.3}, raw unconnected {ru:.3}",
            summary(ratios[i].clone()).0
        ));
    }
    converse::input::out_line(&format!(
        "({iters} round trips per measurement after {w} warm-up; medians of the runs' p50s)\n"
    ));
    Ok(())
}

/// A network namespace whose firewall drops incoming UDP at a rate that can be changed;
/// deleted when dropped.
struct LossyNet {
    ns: String,
}

fn quiet(cmd: &mut Command) -> bool {
    cmd.output().map(|o| o.status.success()).unwrap_or(false)
}

impl LossyNet {
    fn new() -> Option<LossyNet> {
        if !nix::unistd::geteuid().is_root() {
            converse::input::out_line(
                "goodput under loss: skipped (network namespaces and nftables need root)\n",
            );
            return None;
        }
        if !quiet(Command::new("nft").arg("--version")) {
            converse::input::out_line(
                "goodput under loss: skipped (no nft; apt-get install nftables)\n",
            );
            return None;
        }
        let ns = format!("cvbench{}", std::process::id());
        if !quiet(Command::new("ip").args(["netns", "add", &ns])) {
            converse::input::out_line("goodput under loss: skipped (`ip netns add` failed)\n");
            return None;
        }
        let net = LossyNet { ns };
        quiet(Command::new("ip").args(["-n", &net.ns, "link", "set", "lo", "up"]));
        Some(net)
    }

    /// Drop `percent` of incoming UDP datagrams from now on.
    fn set_loss(&self, percent: u32) -> anyhow::Result<()> {
        let nft = |rule: &str| {
            quiet(
                Command::new("ip")
                    .args(["netns", "exec", &self.ns, "nft"])
                    .args(rule.split(' ')),
            )
        };
        let ok = nft("flush ruleset")
            && (percent == 0
                || (nft("add table inet loss")
                    && nft("add chain inet loss in { type filter hook input priority 0 ; }")
                    && nft(&format!(
                        "add rule inet loss in meta l4proto udp numgen random mod 100 < {percent} drop"
                    ))));
        anyhow::ensure!(ok, "could not set {percent}% loss in {}", self.ns);
        Ok(())
    }

    fn prefix(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.ns]
    }
}

impl Drop for LossyNet {
    fn drop(&mut self) {
        quiet(Command::new("ip").args(["netns", "del", &self.ns]));
    }
}

/// 1 MiB ping-pong on the UDP layer at 0%, 1% and 5% loss, `runs` rounds in turn.
fn goodput_under_loss(iters: u64, runs: usize) -> anyhow::Result<()> {
    let Some(net) = LossyNet::new() else {
        return Ok(());
    };
    const RATES: [u32; 3] = [0, 1, 5];
    converse::input::out_line(
        "1 MiB ping-pong on the UDP layer, pinned to cores 0 and 1, with random loss of \
         incoming UDP datagrams",
    );
    converse::input::out_line(&format!(
        "{:>6} | {:>21} | {:>21} | {:>21}",
        "run", "0%: p50 us  MB/s", "1%: p50 us  MB/s", "5%: p50 us  MB/s"
    ));
    let mut goodput: [Vec<f64>; 3] = Default::default();
    for r in 0..runs {
        let mut line = format!("{:>6} |", r + 1);
        for (i, percent) in RATES.into_iter().enumerate() {
            net.set_loss(percent)?;
            let row = ping("udp", iters, &net.prefix())?;
            goodput[i].push(row.mb_per_s());
            line.push_str(&format!(
                " {:>10.1} {:>9.0} |",
                us(row.p50_ns),
                row.mb_per_s()
            ));
        }
        converse::input::out_line(line.trim_end_matches('|'));
    }
    let medians = goodput.map(|v| summary(v).0);
    converse::input::out_line(&format!(
        "goodput (median MB/s): 0% {:.0}, 1% {:.0} ({:.2} of it), 5% {:.0} ({:.2} of it)",
        medians[0],
        medians[1],
        medians[1] / medians[0].max(1.0),
        medians[2],
        medians[2] / medians[0].max(1.0)
    ));
    converse::input::out_line(
        "(one-way, in a network namespace; MB/s from the mean one-way time)\n",
    );
    Ok(())
}

/// A process spinning on the last core until dropped.
struct Spinner(std::process::Child);

impl Spinner {
    fn start() -> anyhow::Result<Spinner> {
        let me = std::env::current_exe()?;
        Ok(Spinner(Command::new(me).arg("spin").spawn()?))
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pin the calling process (its threads to come) to one core.
pub(crate) fn pin_to(core: usize) {
    let mut set = CpuSet::new();
    // A core beyond the set's capacity or one the host lacks leaves the process as it was.
    if set.set(core).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

/// Cores online (not the ones this process may use: a pinned parent's children inherit its
/// single core, and must still see the others).
pub(crate) fn cores() -> usize {
    sysconf(SysconfVar::_NPROCESSORS_ONLN)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1)
        .max(1)
}

/// How many cores this process may run on.
pub(crate) fn allowed_cores() -> usize {
    sched_getaffinity(Pid::from_raw(0)).map_or(0, |set| {
        (0..CpuSet::count())
            .filter(|&i| set.is_set(i).unwrap_or(false))
            .count()
    })
}

/// Run `f` with this process pinned to `core` (its children too: the raw baseline's echo
/// pins itself to the second core), then restore the affinity it had.
fn pinned_to<T>(core: usize, f: impl FnOnce() -> T) -> T {
    let old = sched_getaffinity(Pid::from_raw(0));
    pin_to(core);
    let r = f();
    if let Ok(old) = old {
        let _ = sched_setaffinity(Pid::from_raw(0), &old);
    }
    r
}

/// Pin a node of a launched job to core (its node number mod the cores): node 0 on the first
/// core, node 1 on the second...
pub(crate) fn pin_to_node_core() {
    let node: usize = std::env::var("CONVERSE_NODE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    pin_to(node % cores());
}

/// `bench spin`: pin to the last core and spin until killed.
pub(crate) fn spin() -> anyhow::Result<()> {
    pin_to(cores() - 1);
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// 1 MiB ping-pong medians with and without a busy process on the last core. The two nodes
/// are pinned to different cores (node 1 to the last), so the busy process competes with one
/// of them for its core: the peer is descheduled now and then, as on a loaded machine.
/// (Unpinned, the scheduler would put both nodes on the free core, and on this machine two
/// processes sharing a core exchange a megabyte faster than across cores: the "busy" figure
/// would be the better one, for a reason that has nothing to do with the layer.)
fn contention(iters: u64, runs: usize) -> anyhow::Result<()> {
    converse::input::out_line("1 MiB ping-pong, one-way, nodes pinned to cores 0 and 1: quiet vs a busy process on core 1");
    converse::input::out_line(&format!(
        "{:>6} {:>4} | {:>10} {:>10} | {:>10} {:>10} | {:>6}",
        "layer", "run", "quiet p50", "max", "busy p50", "max", "ratio"
    ));
    let pinned = |layer: &str| ping(layer, iters, &[]);
    for layer in ["udp", "tcp"] {
        let mut ratios = Vec::new();
        for r in 0..runs {
            let calm = pinned(layer)?;
            let busy = {
                let _spinner = Spinner::start()?;
                pinned(layer)?
            };
            let ratio = busy.p50_ns as f64 / calm.p50_ns.max(1) as f64;
            ratios.push(ratio);
            converse::input::out_line(&format!(
                "{:>6} {:>4} | {:>10.1} {:>10.1} | {:>10.1} {:>10.1} | {:>6.2}",
                layer,
                r + 1,
                us(calm.p50_ns),
                us(calm.max_ns),
                us(busy.p50_ns),
                us(busy.max_ns),
                ratio
            ));
        }
        ratios.sort_by(f64::total_cmp);
        converse::input::out_line(&format!(
            "{layer:>6} median ratio {:.2}",
            ratios.get(ratios.len() / 2).copied().unwrap_or(0.0)
        ));
    }
    converse::input::out_line(&format!(
        "(µs one-way; {iters} round trips per measurement)"
    ));
    Ok(())
}
