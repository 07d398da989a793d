//! `bench endpoint`: a call's round trip and 1 MiB's bandwidth between two separately
//! started jobs (converse-endpoint over `tcp://`), beside, from the same run:
//! - the same pair of PEs inside one job on the same layer (`tcp`, `charmrun +p2`, a
//!   handler-driven ping-pong: `bench pingpong`'s);
//! - raw TCP between two processes (`bench pingpong`'s raw baseline: blocking-free spinning
//!   sockets, the floor);
//! - a plain process (this one, [`Connection::call`]) calling the same job.
//!
//! Both jobs are `charmrun +p1 ... +machine tcp` jobs of one node. The serving job lives for
//! the whole run; each round starts a client job, whose PE 0 calls `echo` on it back to back
//! and writes its figures as CSV. Rounds rotate the order of the four parts; each figure is
//! the median of the rounds' medians, with the range of those.

use crate::pingpong;
use crate::raw;
use crate::report::{self, histogram, Row};
use anyhow::Context;
use converse::Runtime;
use converse_endpoint::{Connection, Endpoints, Secret};
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `bench pe-endpoint-serve`: the serving job: PE 0 listens on loopback, writes its address
/// and secret into `dir`, answers `echo`; a `quit` message ends it.
pub(crate) fn serve_main(rt: Runtime, dir: &Path) -> anyhow::Result<()> {
    let dir = dir.to_owned();
    let code = rt.run(move |pe| {
        let ep = Endpoints::attach(pe);
        if pe.my_pe() != 0 {
            return;
        }
        let secret = Secret::generate().unwrap_or_else(|e| pe.abort(&e.to_string()));
        let addr = ep
            .listen(pe, "tcp://127.0.0.1:0", &secret)
            .unwrap_or_else(|e| pe.abort(&e.to_string()));
        ep.on("echo", |_pe, m| {
            let d = m.data().to_vec();
            let _ = m.reply(&d);
        });
        ep.on("quit", |pe, _m| pe.exit(0));
        let written = secret.write_file(&dir.join("secret")).map_err(|e| e.to_string()).and_then(|()| {
            let tmp = dir.join("addr.tmp");
            std::fs::write(&tmp, &addr)
                .and_then(|()| std::fs::rename(&tmp, dir.join("addr")))
                .map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            pe.abort(&e);
        }
    })?;
    anyhow::ensure!(code == 0, "the serving job exited with {code}");
    Ok(())
}

struct Client {
    sizes: Vec<usize>,
    iters: u64,
    warmup: u64,
    idx: usize,
    done: u64,
    sent_at: Instant,
    hist: hdrhistogram::Histogram<u64>,
    rows: Vec<Row>,
    finished: bool,
}

/// One call after another: each reply times the round trip and makes the next call.
fn next_call(ep: &Endpoints, peer: u32, st: &Rc<RefCell<Client>>) {
    let size = {
        let mut s = st.borrow_mut();
        match s.sizes.get(s.idx) {
            Some(&size) => {
                s.sent_at = Instant::now();
                size
            }
            None => {
                s.finished = true;
                return;
            }
        }
    };
    let data = vec![7u8; size];
    let (ep2, st2) = (ep.clone(), st.clone());
    let sent = ep.call(peer, "echo", &data, move |pe, r| {
        let now = Instant::now();
        if r.map(|d| d.len()).ok() != Some(size) {
            pe.abort("bench endpoint: a bad reply");
        }
        {
            let mut s = st2.borrow_mut();
            if s.done >= s.warmup {
                let ns = (now - s.sent_at).as_nanos() as u64 / 2;
                s.hist.saturating_record(ns.max(1));
            }
            s.done += 1;
            if s.done == s.iters + s.warmup {
                let row = Row::from_hist("endpoint job-job", size, &s.hist);
                s.rows.push(row);
                s.hist.reset();
                s.done = 0;
                s.idx += 1;
            }
        }
        next_call(&ep2, peer, &st2);
    });
    if sent.is_err() {
        st.borrow_mut().finished = true;
    }
}

/// `bench pe-endpoint-client`: a client job: PE 0 connects to the serving job in `dir` and
/// calls `echo` back to back; its figures go to `csv`.
pub(crate) fn client_main(
    rt: Runtime,
    dir: &Path,
    sizes: &[usize],
    iters: u64,
    csv: &Path,
) -> anyhow::Result<()> {
    let result = Mutex::new(Vec::new());
    let code = rt.run(|pe| {
        let ep = Endpoints::attach(pe);
        if pe.my_pe() != 0 {
            return;
        }
        let addr = std::fs::read_to_string(dir.join("addr")).unwrap_or_default();
        let peer = Secret::read_file(&dir.join("secret"))
            .and_then(|s| ep.connect(pe, addr.trim(), &s))
            .unwrap_or_else(|e| pe.abort(&e.to_string()));
        let st = Rc::new(RefCell::new(Client {
            sizes: sizes.to_vec(),
            iters,
            warmup: pingpong::warmup(iters),
            idx: 0,
            done: 0,
            sent_at: Instant::now(),
            hist: histogram().unwrap_or_else(|e| pe.abort(&e.to_string())),
            rows: Vec::new(),
            finished: false,
        }));
        next_call(&ep, peer, &st);
        let s2 = st.clone();
        pe.run_until(|_| s2.borrow().finished);
        if let Ok(mut r) = result.lock() {
            r.append(&mut st.borrow_mut().rows);
        }
        pe.exit(0);
    })?;
    anyhow::ensure!(code == 0, "the client job exited with {code}");
    let rows = result.into_inner().unwrap_or_default();
    if !rows.is_empty() {
        report::write_csv(csv, &rows.iter().collect::<Vec<_>>())?;
    }
    Ok(())
}

/// This process as a plain client of the serving job.
fn plain(addr: &str, secret: &Secret, sizes: &[usize], iters: u64) -> anyhow::Result<Vec<Row>> {
    let mut c = Connection::connect(addr, secret)?;
    let mut rows = Vec::new();
    for &size in sizes {
        let data = vec![7u8; size];
        let mut h = histogram()?;
        for i in 0..iters + pingpong::warmup(iters) {
            let t = Instant::now();
            let back = c.call("echo", &data, Duration::from_secs(30))?;
            anyhow::ensure!(back.len() == size, "a bad reply");
            if i >= pingpong::warmup(iters) {
                h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
            }
        }
        rows.push(Row::from_hist("endpoint plain-job", size, &h));
    }
    Ok(rows)
}

fn client_job(dir: &Path, sizes: &[usize], iters: u64) -> anyhow::Result<Vec<Row>> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let csv = dir.join("client.csv");
    let status = pingpong::launcher("tcp", &me, 1, 1)?
        .arg(&me)
        .arg("pe-endpoint-client")
        .arg("--dir")
        .arg(dir)
        .args(["--sizes", &report::size_list(sizes), "--iters", &iters.to_string(), "--csv"])
        .arg(&csv)
        .args(["+machine", "tcp", "+quiet"])
        .status()
        .context("starting the client job")?;
    anyhow::ensure!(status.success(), "the client job failed: {status}");
    let rows = report::read_csv(&csv);
    let _ = std::fs::remove_file(&csv);
    rows
}

/// Median, lowest and highest of the rounds' values.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub(crate) fn run(sizes: &[usize], iters: u64, rounds: u16) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let dir = std::env::temp_dir().join(format!("bench-endpoint-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut server = pingpong::launcher("tcp", &me, 1, 1)?
        .arg(&me)
        .arg("pe-endpoint-serve")
        .arg("--dir")
        .arg(&dir)
        .args(["+machine", "tcp", "+quiet"])
        .spawn()
        .context("starting the serving job")?;
    let result = (|| {
        let until = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Ok(a) = std::fs::read_to_string(dir.join("addr")) {
                break a;
            }
            anyhow::ensure!(Instant::now() < until, "the serving job did not listen");
            std::thread::sleep(Duration::from_millis(20));
        };
        let secret = Secret::read_file(&dir.join("secret"))?;
        // Per part and size, each round's p50 (one way, ns) and mean.
        let parts = ["raw TCP", "in-job tcp", "endpoint job-job", "endpoint plain-job"];
        let mut got: Vec<Vec<Vec<Row>>> = (0..4).map(|_| sizes.iter().map(|_| Vec::new()).collect()).collect();
        for round in 0..rounds as usize {
            for k in 0..4 {
                let part = (k + round) % 4;
                let rows = match part {
                    0 => raw::tcp_pingpong(sizes, iters, pingpong::warmup(iters))?,
                    1 => pingpong::across_nodes("tcp", sizes, iters, 1)?,
                    2 => client_job(&dir, sizes, iters)?,
                    _ => plain(&addr, &secret, sizes, iters)?,
                };
                for (i, &size) in sizes.iter().enumerate() {
                    let row = rows
                        .iter()
                        .find(|r| r.size == size)
                        .with_context(|| format!("{}: no figure for {size} bytes", parts[part]))?;
                    got[part][i].push(Row { what: row.what.clone(), ..*row });
                }
            }
        }
        converse::input::out_line(&format!(
            "endpoint: round trip in µs (2 x one-way p50) and bandwidth in MB/s (size / mean one-way), \
             median (lowest-highest) over {rounds} rounds of {iters}; one host, loopback"
        ));
        converse::input::out_line(&format!(
            "{:>8} | {:>24} | {:>24} | {:>24} | {:>24} | {:>12} | {:>10}",
            "bytes", parts[0], parts[1], parts[2], parts[3], "job-job/in-job", "plain/raw"
        ));
        for (i, &size) in sizes.iter().enumerate() {
            let cell = |part: usize| -> (String, f64) {
                let rs = &got[part][i];
                let (m, lo, hi) = if size >= 65536 {
                    spread(rs.iter().map(Row::mb_per_s).collect())
                } else {
                    spread(rs.iter().map(|r| 2.0 * r.p50_ns as f64 / 1e3).collect())
                };
                let unit = if size >= 65536 { "MB/s" } else { "µs" };
                (format!("{m:.1} ({lo:.1}-{hi:.1}) {unit}"), m)
            };
            let c: Vec<(String, f64)> = (0..4).map(cell).collect();
            // For bandwidth the ratio is inverted, so that above 1 means slower either way.
            let ratio = |a: f64, b: f64| if size >= 65536 { b / a } else { a / b };
            converse::input::out_line(&format!(
                "{size:>8} | {:>24} | {:>24} | {:>24} | {:>24} | {:>13.2}x | {:>9.2}x",
                c[0].0,
                c[1].0,
                c[2].0,
                c[3].0,
                ratio(c[2].1, c[1].1),
                ratio(c[3].1, c[0].1)
            ));
        }
        let mut c = Connection::connect(&addr, &secret)?;
        c.send("quit", b"")?;
        Ok(())
    })();
    if result.is_err() {
        let _ = server.kill();
    }
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
