//! `bench endpoint`: a call's round trip and 1 MiB's bandwidth between two separately
//! started jobs (converse-endpoint over `tcp://`, `si://` and `udp://`), beside, from the
//! same run:
//! - the same pair of PEs inside one job on the layer of the scheme's name (`tcp`, `si`, `udp`;
//!   `charmrun +p2`, a handler-driven ping-pong: `bench pingpong`'s);
//! - raw TCP between two processes (`bench pingpong`'s raw baseline: blocking-free spinning
//!   sockets, the floor);
//! - a plain process (this one, [`Connection::call`]) calling the same job.
//!
//! Both jobs are `charmrun +p1 ... +machine tcp` jobs of one node (the serving one listens on
//! every scheme). The serving job lives for the whole run; each round starts a client job, whose PE 0 calls `echo` on it back to back
//! and writes its figures as CSV. Rounds rotate the order of the four parts; each figure is
//! the median of the rounds' figures, with their range.

use crate::pingpong;
use crate::raw;
use crate::report::spread;
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
        let mut addrs = Vec::new();
        for (scheme, at) in SCHEMES
            .iter()
            .zip(["tcp://127.0.0.1:0", "si://", "udp://127.0.0.1:0"])
        {
            match ep.listen(pe, at, &secret) {
                Ok(a) => addrs.push((scheme, a)),
                Err(e) => pe.abort(&e.to_string()),
            }
        }
        ep.on("echo", |_pe, m| {
            let d = m.data().to_vec();
            let _ = m.reply(&d);
        });
        ep.on("quit", |pe, _m| pe.exit(0));
        // The secret first: the address files say the job is ready.
        let written = secret
            .write_file(&dir.join("secret"))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                addrs.iter().try_for_each(|(scheme, addr)| {
                    let tmp = dir.join("addr.tmp");
                    std::fs::write(&tmp, addr)
                        .and_then(|()| std::fs::rename(&tmp, dir.join(format!("addr-{scheme}"))))
                        .map_err(|e| e.to_string())
                })
            });
        if let Err(e) = written {
            pe.abort(&e);
        }
    })?;
    anyhow::ensure!(code == 0, "the serving job exited with {code}");
    Ok(())
}

/// The schemes measured, each beside the in-job layer of its name.
const SCHEMES: [&str; 3] = ["tcp", "si", "udp"];

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
fn next_call(ep: &Endpoints, peer: u32, st: &Rc<RefCell<Client>>, label: &'static str) {
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
                let row = Row::from_hist(label, size, &s.hist);
                s.rows.push(row);
                s.hist.reset();
                s.done = 0;
                s.idx += 1;
            }
        }
        next_call(&ep2, peer, &st2, label);
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
    scheme: &str,
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
        let addr = std::fs::read_to_string(dir.join(format!("addr-{scheme}"))).unwrap_or_default();
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
        next_call(&ep, peer, &st, "endpoint job-job");
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

fn client_job(dir: &Path, scheme: &str, sizes: &[usize], iters: u64) -> anyhow::Result<Vec<Row>> {
    let dir = dir.to_string_lossy();
    let extra = ["--dir", dir.as_ref(), "--scheme", scheme];
    pingpong::run_job("tcp", sizes, iters, "pe-endpoint-client", &[], &extra, 1, 1)
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
        let addr_of = |scheme: &str| std::fs::read_to_string(dir.join(format!("addr-{scheme}")));
        while SCHEMES.iter().any(|s| addr_of(s).is_err()) {
            anyhow::ensure!(Instant::now() < until, "the serving job did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        let addrs = SCHEMES.map(|s| addr_of(s).unwrap_or_default());
        let secret = Secret::read_file(&dir.join("secret"))?;
        // Raw TCP once; per scheme, the in-job layer of its name, job-job and plain-job:
        // part 1 + 3 j + (0, 1, 2) for scheme j.
        let mut parts = vec!["raw TCP".to_string()];
        for s in SCHEMES {
            parts.push(format!("in-job {s}"));
            parts.push(format!("endpoint {s} job-job"));
            parts.push(format!("endpoint {s} plain-job"));
        }
        let mut got: Vec<Vec<Vec<Row>>> = parts
            .iter()
            .map(|_| sizes.iter().map(|_| Vec::new()).collect())
            .collect();
        for round in 0..rounds as usize {
            for k in 0..parts.len() {
                let part = (k + round) % parts.len();
                let j = part.saturating_sub(1) / 3;
                let scheme = SCHEMES[j];
                let rows = match (part, (part + 2) % 3) {
                    (0, _) => raw::tcp_pingpong(sizes, iters, pingpong::warmup(iters))?,
                    (_, 0) => pingpong::across_nodes(scheme, sizes, iters, 1)?,
                    (_, 1) => client_job(&dir, scheme, sizes, iters)?,
                    _ => plain(&addrs[j], &secret, sizes, iters)?,
                };
                for (i, &size) in sizes.iter().enumerate() {
                    let row = rows
                        .iter()
                        .find(|r| r.size == size)
                        .with_context(|| format!("{}: no figure for {size} bytes", parts[part]))?;
                    got[part][i].push(Row {
                        what: row.what.clone(),
                        ..*row
                    });
                }
            }
        }
        converse::input::out_line(&format!(
            "endpoint: round trip in µs (2 x one-way p50), from 64 KiB bandwidth in MB/s (size / mean \
             one-way); median (lowest-highest) over {rounds} rounds of {iters}; one host"
        ));
        for (i, &size) in sizes.iter().enumerate() {
            let big = size >= 65536;
            let cell = |part: usize| -> f64 {
                let rs = &got[part][i];
                let (m, lo, hi) = if big {
                    spread(rs.iter().map(Row::mb_per_s).collect())
                } else {
                    spread(rs.iter().map(|r| 2.0 * r.p50_ns as f64 / 1e3).collect())
                };
                let unit = if big { "MB/s" } else { "µs" };
                converse::input::out_line(&format!(
                    "{size:>8} B  {:<24} {m:>9.1} ({lo:.1}-{hi:.1}) {unit}",
                    parts[part]
                ));
                m
            };
            let m: Vec<f64> = (0..parts.len()).map(cell).collect();
            // Above 1 means slower, for times and bandwidths alike.
            let ratio = |a: usize, b: usize| if big { m[b] / m[a] } else { m[a] / m[b] };
            converse::input::out_line(&format!(
                "{size:>8} B  job-job / in-job: tcp {:.2}x, si {:.2}x, udp {:.2}x; plain-job tcp / raw TCP {:.2}x",
                ratio(2, 1),
                ratio(5, 4),
                ratio(8, 7),
                ratio(3, 0)
            ));
        }
        let mut c = Connection::connect(&addrs[0], &secret)?;
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
