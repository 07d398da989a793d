//! Idle CPU: a 2-node job under charmrun whose PEs have nothing to do for a while. Each node
//! measures its own process's CPU time (every thread: the scheduler's and the launcher
//! watchdog's) over the idle stretch; a node that blocks uses next to none, one that polls
//! uses a whole core. The reference is the wall time itself: 100% = one core busy.

use anyhow::Context;
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// `bench idle`: run the waiting job on `layer` for `secs` seconds and print each node's CPU.
/// With `ppn` above 1 each node runs that many PEs and a communication thread.
pub(crate) fn run(layer: &str, secs: f64, ppn: usize) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let charmrun = crate::pingpong::charmrun_beside(&me)?;
    let out = std::env::temp_dir().join(format!("bench-idle-{}", std::process::id()));
    let status = std::process::Command::new(&charmrun)
        .args([format!("+p{}", 2 * ppn), "++ppn".into(), ppn.to_string()])
        .args(["++quiet", "++timelimit", "600"])
        .arg(&me)
        .args(["pe-wait", "--secs", &secs.to_string(), "--out"])
        .arg(&out)
        .args(["+machine", layer, "+quiet"])
        .status()
        .context("starting the job")?;
    let figures: Vec<String> = (0..2)
        .map(|node| {
            let f = node_file(&out, node);
            let s = std::fs::read_to_string(&f);
            let _ = std::fs::remove_file(&f);
            s.with_context(|| format!("node {node} wrote no figures"))
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(status.success(), "the idle job failed: {status}");
    converse::input::out_line(&format!(
        "{:>5} | {:>10} | {:>10} | {:>8}",
        "node", "CPU ms", "wall ms", "CPU %"
    ));
    for (node, line) in figures.iter().enumerate() {
        let mut v = line.split_whitespace().map(str::parse::<f64>);
        let (Some(Ok(cpu)), Some(Ok(wall))) = (v.next(), v.next()) else {
            anyhow::bail!("node {node} wrote '{line}'");
        };
        converse::input::out_line(&format!(
            "{node:>5} | {cpu:>10.1} | {wall:>10.1} | {:>8.2}",
            100.0 * cpu / wall
        ));
    }
    converse::input::out_line(&format!(
        "(2 nodes of {ppn} PE(s) on layer {layer} under charmrun, idle for {secs} s after \
         start-up; CPU = the node's process, all threads, from getrusage)"
    ));
    Ok(())
}

fn node_file(out: &Path, node: usize) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(format!(".{node}"));
    PathBuf::from(name)
}

/// This process's CPU time so far (user + system, every thread).
fn cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_SELF).map_or(Duration::ZERO, |ru| {
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
        };
        tv(ru.user_time()) + tv(ru.system_time())
    })
}

/// `bench pe-wait`: one PE of the idle job. After start-up every PE measures its process's CPU
/// time over `secs` idle seconds, writes it next to `out`, and tells PE 0, which ends the job
/// once all have.
pub(crate) fn pe_main(rt: converse::Runtime, secs: f64, out: &Path) -> anyhow::Result<()> {
    let out = out.to_owned();
    let code = rt.run(|pe| {
        let reported = Rc::new(Cell::new(0usize));
        let r = reported.clone();
        let done = pe.register("idle-done", move |pe, _| {
            r.set(r.get() + 1);
            if r.get() == pe.num_pes() {
                pe.exit(0);
            }
        });
        pe.barrier();
        let (cpu0, wall0) = (cpu_time(), Instant::now());
        let out = out.clone();
        pe.after(Duration::from_secs_f64(secs), move |pe| {
            let cpu = cpu_time().saturating_sub(cpu0);
            let wall = wall0.elapsed();
            let line = format!("{} {}\n", cpu.as_secs_f64() * 1e3, wall.as_secs_f64() * 1e3);
            if let Err(e) = std::fs::write(node_file(&out, pe.my_node()), line) {
                pe.abort(&format!("writing the figures: {e}"));
            }
            pe.send_msg(0, done, converse::Message::new(0));
        });
    })?;
    anyhow::ensure!(code == 0, "the idle job exited with {code}");
    Ok(())
}
