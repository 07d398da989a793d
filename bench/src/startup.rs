//! Start-up: the wall time of a whole trivial job under charmrun (start every node, connect
//! back, exchange the node table, connect every pair, run, exit), next to the least any
//! launcher must do: start a launcher process that fork/execs N processes that each connect
//! back to it once. Both are timed the same way, from outside, as whole commands.

use anyhow::Context;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs per point; the median is reported.
const RUNS: usize = 5;

pub(crate) fn run(
    pes: &[usize],
    layer: &str,
    charmrun_args: &str,
    plot: Option<&Path>,
) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let charmrun = crate::pingpong::charmrun_beside(&me)?;
    // Split at white space: paths with spaces need a wrapper script.
    let extra: Vec<&str> = charmrun_args.split_whitespace().collect();
    if !extra.is_empty() {
        converse::input::out_line(&format!("charmrun {}", extra.join(" ")));
    }
    converse::input::out_line(&format!(
        "{:>5} | {:>12} | {:>14} | {:>6}",
        "PEs", "job ms", "fork+conn ms", "ratio"
    ));
    let mut points = Vec::new();
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
        converse::input::out_line(&format!(
            "{p:>5} | {job:>12.1} | {floor:>14.1} | {:>6.2}",
            job / floor
        ));
        points.push((p, job, floor));
    }
    converse::input::out_line(&format!(
        "(median of {RUNS} runs each; job = charmrun +pN of a program whose PE 0 exits at once)"
    ));
    if let Some(path) = plot {
        let series = |name: &str, y: fn(&(usize, f64, f64)) -> f64| crate::plot::Series {
            name: name.into(),
            points: points.iter().map(|q| (q.0 as f64, y(q))).collect(),
        };
        let panel = crate::plot::Panel {
            title: format!("a trivial job on {layer}, median of {RUNS}"),
            x_label: "PEs".into(),
            y_label: "wall time (ms)".into(),
            kind: crate::plot::Kind::Lines {
                log_x: true,
                log_y: false,
            },
            series: vec![
                series(&format!("charmrun job ({layer})"), |q| q.1),
                series("fork/exec + connect back", |q| q.2),
            ],
        };
        crate::plot::write_svg(path, "start-up time against PEs", &[panel])?;
    }
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

/// The median ([`crate::report::median`]) of `n` (at least 1) measurements by `f`.
pub(crate) fn median(n: usize, mut f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let v = (0..n.max(1))
        .map(|_| f())
        .collect::<anyhow::Result<Vec<f64>>>()?;
    Ok(crate::report::median(v))
}
