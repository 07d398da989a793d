//! Start-up: the wall time of a whole trivial job under charmrun (start every node, connect
//! back, exchange the node table, connect every pair, run, exit), next to the least any
//! launcher must do: start a launcher process that fork/execs N processes that each connect
//! back to it once. Both are timed the same way, from outside, as whole commands.

use anyhow::Context;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs per point; the median is reported.
const RUNS: usize = 5;

pub(crate) fn run(pes: &[usize], layer: &str, charmrun_args: &str) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let charmrun = crate::pingpong::charmrun_beside(&me)?;
    // Split at white space: paths with spaces need a wrapper script.
    let extra: Vec<&str> = charmrun_args.split_whitespace().collect();
    if !extra.is_empty() {
        println!("charmrun {}", extra.join(" "));
    }
    println!(
        "{:>5} | {:>12} | {:>14} | {:>6}",
        "PEs", "job ms", "fork+conn ms", "ratio"
    );
    for &p in pes {
        let job = median(RUNS, || {
            let t = Instant::now();
            let st = Command::new(&charmrun)
                .args([format!("+p{p}"), "++quiet".into()])
                .args(&extra)
                .arg(&me)
                .args(["pe-noop", "+machine", layer, "+quiet"])
                .stdout(Stdio::null())
                .status()?;
            anyhow::ensure!(st.success(), "trivial job on {p} PEs failed: {st}");
            Ok(t.elapsed().as_secs_f64() * 1e3)
        })?;
        let floor = median(RUNS, || {
            let t = Instant::now();
            let st = Command::new(&me)
                .args(["launch-floor", &p.to_string()])
                .status()?;
            anyhow::ensure!(st.success(), "lower bound on {p} processes failed: {st}");
            Ok(t.elapsed().as_secs_f64() * 1e3)
        })?;
        println!(
            "{p:>5} | {job:>12.1} | {floor:>14.1} | {:>6.2}",
            job / floor
        );
    }
    println!(
        "(median of {RUNS} runs each; job = charmrun +pN of a program whose PE 0 exits at once)"
    );
    Ok(())
}

/// `bench launch-floor N`: fork/exec N copies of this program that each connect to us and
/// exit; return when all are gone.
pub(crate) fn launch_floor(p: usize) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?.to_string();
    let mut kids = Vec::with_capacity(p);
    for _ in 0..p {
        kids.push(
            Command::new(&me)
                .args(["connect-back", &addr])
                .stdout(Stdio::null())
                .spawn()?,
        );
    }
    for _ in 0..p {
        let (mut s, _) = l.accept()?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b)?;
    }
    for mut k in kids {
        k.wait()?;
    }
    Ok(())
}

/// The child side of [`launch_floor`].
pub(crate) fn connect_back(addr: &str) -> anyhow::Result<()> {
    use std::io::Write;
    TcpStream::connect(addr)?.write_all(&[1])?;
    Ok(())
}

pub(crate) fn median(n: usize, mut f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let mut v = (0..n).map(|_| f()).collect::<anyhow::Result<Vec<f64>>>()?;
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}
