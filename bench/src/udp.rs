//! `bench udp`: what is particular to the UDP layer, each figure next to its reference from
//! the same run:
//! - **bandwidth** of 1 MiB ping-pong on the UDP layer next to the TCP layer and raw UDP;
//! - **goodput under loss**: the same in a network namespace whose firewall drops 1% and 5%
//!   of UDP datagrams, as a fraction of the loss-free figure measured there (needs root and
//!   nftables; skipped with a message otherwise);
//! - **latency under CPU contention**: the median of 1 MiB round trips with the nodes pinned to
//!   cores 0 and 1 and a busy process on core 1, next to the quiet median, for the UDP and TCP
//!   layers.

use crate::pingpong::under_charmrun_with;
use crate::raw;
use crate::report::Row;
use std::process::Command;

/// The message size of every figure here.
const MIB: usize = 1 << 20;

/// `bench udp`: the `parts` named (bandwidth, loss, contention).
pub fn run(iters: u64, runs: usize, parts: &[String]) -> anyhow::Result<()> {
    for p in parts {
        match p.as_str() {
            "bandwidth" => bandwidth(iters, runs)?,
            "loss" => goodput_under_loss(iters)?,
            "contention" => contention(iters, runs)?,
            other => anyhow::bail!("no part '{other}' (bandwidth, loss, contention)"),
        }
    }
    Ok(())
}

fn ping(layer: &str, iters: u64, prefix: &[&str]) -> anyhow::Result<Row> {
    under_charmrun_with(layer, &[MIB], iters, "pe-pingpong", prefix, &[])?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("the {layer} job measured nothing"))
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// 1 MiB ping-pong: UDP layer, TCP layer, raw UDP, `runs` times in turn.
fn bandwidth(iters: u64, runs: usize) -> anyhow::Result<()> {
    println!("1 MiB ping-pong, one-way: UDP layer vs TCP layer vs raw UDP (busy polling)");
    println!(
        "{:>4} | {:>10} {:>9} | {:>10} {:>9} | {:>10} {:>9}",
        "run", "udp p50 us", "MB/s", "tcp p50 us", "MB/s", "raw p50 us", "MB/s"
    );
    let w = crate::pingpong::warmup(iters);
    for r in 0..runs {
        let udp = ping("udp", iters, &[])?;
        let tcp = ping("tcp", iters, &[])?;
        let rawr = raw::udp_pingpong(&[MIB], iters, w, true)?;
        let raw = rawr
            .first()
            .ok_or_else(|| anyhow::anyhow!("raw UDP measured nothing"))?;
        println!(
            "{:>4} | {:>10.1} {:>9.0} | {:>10.1} {:>9.0} | {:>10.1} {:>9.0}",
            r + 1,
            us(udp.p50_ns),
            udp.mb_per_s(),
            us(tcp.p50_ns),
            tcp.mb_per_s(),
            us(raw.p50_ns),
            raw.mb_per_s()
        );
    }
    println!("(MB/s from the mean one-way time; {iters} round trips per run after {w} warm-up)\n");
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
            println!("goodput under loss: skipped (network namespaces and nftables need root)\n");
            return None;
        }
        if !quiet(Command::new("nft").arg("--version")) {
            println!("goodput under loss: skipped (no nft; apt-get install nftables)\n");
            return None;
        }
        let ns = format!("cvbench{}", std::process::id());
        if !quiet(Command::new("ip").args(["netns", "add", &ns])) {
            println!("goodput under loss: skipped (`ip netns add` failed)\n");
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

/// 1 MiB ping-pong on the UDP layer at 0%, 1% and 5% loss.
fn goodput_under_loss(iters: u64) -> anyhow::Result<()> {
    let Some(net) = LossyNet::new() else {
        return Ok(());
    };
    println!("1 MiB ping-pong on the UDP layer with random loss of incoming UDP datagrams");
    println!(
        "{:>6} | {:>10} | {:>10} | {:>9} | {:>8}",
        "loss", "p50 us", "max us", "MB/s", "fraction"
    );
    let mut clean = None;
    for percent in [0u32, 1, 5] {
        net.set_loss(percent)?;
        let r = ping("udp", iters, &net.prefix())?;
        let base = *clean.get_or_insert(r.mb_per_s());
        println!(
            "{:>5}% | {:>10.1} | {:>10.1} | {:>9.0} | {:>8.2}",
            percent,
            us(r.p50_ns),
            us(r.max_ns),
            r.mb_per_s(),
            r.mb_per_s() / base
        );
    }
    println!("(one-way, in a network namespace; MB/s from the mean; fraction of the 0% figure)\n");
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
fn pin_to(core: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes inside it; sched_setaffinity reads
    // a set of the size given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pin a node of a launched job to core (its node number mod the cores): node 0 on the first
/// core, node 1 on the second...
pub fn pin_to_node_core() {
    let node: usize = std::env::var("CONVERSE_NODE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    pin_to(node % cores());
}

/// `bench spin`: pin to the last core and spin until killed.
pub fn spin() -> anyhow::Result<()> {
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
    println!(
        "1 MiB ping-pong, one-way, nodes pinned to cores 0 and 1: quiet vs a busy process on core 1"
    );
    println!(
        "{:>6} {:>4} | {:>10} {:>10} | {:>10} {:>10} | {:>6}",
        "layer", "run", "quiet p50", "max", "busy p50", "max", "ratio"
    );
    let pinned = |layer: &str| -> anyhow::Result<Row> {
        under_charmrun_with(layer, &[MIB], iters, "pe-pingpong", &[], &["--pin"])?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the {layer} job measured nothing"))
    };
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
            println!(
                "{:>6} {:>4} | {:>10.1} {:>10.1} | {:>10.1} {:>10.1} | {:>6.2}",
                layer,
                r + 1,
                us(calm.p50_ns),
                us(calm.max_ns),
                us(busy.p50_ns),
                us(busy.max_ns),
                ratio
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "{layer:>6} median ratio {:.2}",
            ratios.get(ratios.len() / 2).copied().unwrap_or(0.0)
        );
    }
    println!("(µs one-way; {iters} round trips per measurement)");
    Ok(())
}
