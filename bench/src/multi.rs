//! `bench multi`: one job over two transports (`si+tcp`) against each transport alone, over
//! two hosts made of network namespaces (`converse_tests::hosts`; needs root), in one run.
//!
//! - ping-pong in a 4-process `si+tcp` job (nodes 0 and 2 on one host, 1 and 3 on the other):
//!   PE 0 against PE 2 (same host: shared memory) next to a pure `si` job of 2 processes on
//!   that host, and PE 0 against PE 1 (across hosts: TCP) next to a pure `tcp` job of 2
//!   processes on the two hosts;
//! - the conformance program's all-to-all (4 processes, 2 per host) on `si+tcp` and on
//!   `tcp`, the whole job's wall time.

use crate::report::{self, Row};
use anyhow::Context;
use converse_tests::hosts::Hosts;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Round-robin over this file: nodes 0 and 2 on 10.99.0.2, 1 and 3 on 10.99.0.3.
const TWO_HOSTS: &str = "10.99.0.2\n10.99.0.3\n";

/// `charmrun` on host 0 with the hosts' remote shell and `machines`.
fn charmrun(hosts: &Hosts, me: &Path, pes: usize, machines: &Path) -> anyhow::Result<Command> {
    let mut c = hosts.on(0, &crate::pingpong::charmrun_beside(me)?);
    c.arg(format!("+p{pes}"))
        .args(["++quiet", "++timelimit", "600", "++remote-shell"])
        .arg(hosts.shell())
        .arg("++nodelist")
        .arg(machines);
    Ok(c)
}

/// PE 0's ping-pong against `peer` in a job of `pes` processes on `machines`.
#[allow(clippy::too_many_arguments)]
fn ping(
    hosts: &Hosts,
    me: &Path,
    layer: &str,
    pes: usize,
    machines: &Path,
    peer: usize,
    sizes: &[usize],
    iters: u64,
) -> anyhow::Result<Vec<Row>> {
    let out = hosts.dir.join(format!("pingpong-{layer}-{pes}-{peer}.csv"));
    let status = charmrun(hosts, me, pes, machines)?
        .arg(me)
        .args([
            "pe-pingpong",
            "--sizes",
            &report::size_list(sizes),
            "--iters",
            &iters.to_string(),
            "--peer",
            &peer.to_string(),
            "--csv",
        ])
        .arg(&out)
        .args(["+machine", layer, "+quiet"])
        .status()
        .context("starting the job")?;
    anyhow::ensure!(
        status.success(),
        "the {layer} ping-pong job failed: {status}"
    );
    let rows = report::read_csv(&out);
    let _ = std::fs::remove_file(&out);
    rows
}

/// Wall time of the conformance all-to-all of `messages` on 4 processes over the two hosts.
fn alltoall(
    hosts: &Hosts,
    me: &Path,
    layer: &str,
    machines: &Path,
    messages: u64,
) -> anyhow::Result<f64> {
    let conformance = me.with_file_name("conformance");
    anyhow::ensure!(
        conformance.is_file(),
        "{} not found: build it (cargo build --release -p converse-tests)",
        conformance.display()
    );
    let t = Instant::now();
    let o = charmrun(hosts, me, 4, machines)?
        .arg(&conformance)
        .args([
            "alltoall",
            &messages.to_string(),
            "+machine",
            layer,
            "+quiet",
        ])
        .output()
        .context("starting the all-to-all")?;
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("alltoall: ok"),
        "the {layer} all-to-all failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(secs)
}

/// The least p50 of `size` over the runs, in µs: the machine is shared, and a run that
/// another program disturbed is only ever slower.
fn p50(runs: &[Vec<Row>], size: usize) -> f64 {
    runs.iter()
        .flatten()
        .filter(|r| r.size == size)
        .map(|r| r.p50_ns as f64 / 1e3)
        .fold(f64::NAN, f64::min)
}

/// `bench multi`.
pub(crate) fn run(sizes: &[usize], iters: u64, messages: u64, runs: usize) -> anyhow::Result<()> {
    let Some(hosts) = Hosts::new("bm") else {
        anyhow::bail!("bench multi needs root to make its two namespace hosts");
    };
    let me = std::env::current_exe().context("finding the bench executable")?;
    let two = hosts.file("two-hosts", TWO_HOSTS);
    let one = hosts.file("one-host", "10.99.0.2\n");
    // Interleaved, so that a disturbance hits every series alike.
    let (mut si, mut same, mut tcp, mut across) = (vec![], vec![], vec![], vec![]);
    for _ in 0..runs {
        si.push(ping(&hosts, &me, "si", 2, &one, 1, sizes, iters)?);
        same.push(ping(&hosts, &me, "si+tcp", 4, &two, 2, sizes, iters)?);
        tcp.push(ping(&hosts, &me, "tcp", 2, &two, 1, sizes, iters)?);
        across.push(ping(&hosts, &me, "si+tcp", 4, &two, 1, sizes, iters)?);
    }
    converse::input::out_line(&format!(
        "one-way p50 us, least of {runs} interleaved runs; si+tcp: a 4-process job over two \
         namespace hosts, PE 0 against PE 2 (same host) or PE 1 (the other)"
    ));
    converse::input::out_line(&format!(
        "{:>9} {:>9} {:>14} {:>6} {:>9} {:>14} {:>6}",
        "size", "si", "si+tcp same", "x", "tcp", "si+tcp across", "x"
    ));
    for &s in sizes {
        let (a, b, c, d) = (p50(&si, s), p50(&same, s), p50(&tcp, s), p50(&across, s));
        converse::input::out_line(&format!(
            "{s:>9} {a:>9.2} {b:>14.2} {:>6.2} {c:>9.2} {d:>14.2} {:>6.2}",
            b / a,
            d / c
        ));
    }
    let (mut multi, mut tcp) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..runs {
        multi = multi.min(alltoall(&hosts, &me, "si+tcp", &two, messages)?);
        tcp = tcp.min(alltoall(&hosts, &me, "tcp", &two, messages)?);
    }
    converse::input::out_line(&format!(
        "all-to-all of {messages} messages, 4 processes on two hosts, job wall time: \
         si+tcp {multi:.2} s, tcp {tcp:.2} s ({:.2}x; least of {runs})",
        multi / tcp
    ));
    converse::input::out_line(&format!(
        "({iters} timed round trips per size after {} warm-up)",
        crate::pingpong::warmup(iters)
    ));
    Ok(())
}
