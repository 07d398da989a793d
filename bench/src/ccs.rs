//! `bench ccs`: a Converse Client-Server request's round trip — a connection, the request,
//! the handler's reply, as Charm++'s protocol has it — beside a raw TCP request/response of
//! the same pattern and sizes in the same run (a connection per request, a 40-byte header
//! and the data each way, a thread answering).
//!
//! The job runs in this process on the local layer (`+p2`), its CCS port open without a key
//! and, for the third column, with one (two SHA-1s per request). Rounds alternate the three;
//! every figure is the median round trip over rounds, with its range.

use crate::report::spread;
use converse::Runtime;
use converse_ccs::{Client, Dest, Key};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A job of two PEs answering `echo` (data back as it came), on PE `dest` of the request;
/// `done` ends it. Returns where it listens once it does.
fn job(auth: Option<&str>) -> anyhow::Result<(SocketAddr, std::thread::JoinHandle<()>)> {
    let addr: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
    let mut args = vec!["bench", "+p2", "+quiet", "+machine", "local", "+server"];
    if let Some(a) = auth {
        args.extend(["+server-auth", a]);
    }
    let rt = Runtime::from_args(args)?;
    let a = addr.clone();
    let h = std::thread::spawn(move || {
        let _ = rt.run(move |pe| {
            pe.ccs_register("echo", |pe, req| {
                let d = req.data().to_vec();
                req.reply(pe, &d);
            });
            pe.ccs_register("done", |pe, req| {
                req.reply(pe, b"");
                pe.after(Duration::from_millis(100), |pe| pe.exit(0));
            });
            if let (Some(s), Ok(mut slot)) = (pe.ccs_address(), a.lock()) {
                *slot = Some(s);
            }
        });
    });
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = addr.lock().ok().and_then(|s| *s) {
            return Ok((SocketAddr::from(([127, 0, 0, 1], s.port())), h));
        }
        anyhow::ensure!(Instant::now() < until, "the job's CCS port did not open");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The raw baseline's server: per connection, a 40-byte header (its first word the data's
/// length), the data; back, the length and the data.
fn raw_server() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_nodelay(true);
            let mut head = [0u8; 40];
            if s.read_exact(&mut head).is_err() {
                continue;
            }
            let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let mut data = vec![0u8; len];
            if s.read_exact(&mut data).is_err() {
                continue;
            }
            let mut out = (len as u32).to_be_bytes().to_vec();
            out.extend_from_slice(&data);
            let _ = s.write_all(&out);
        }
    });
    Ok(addr)
}

fn raw_round_trip(addr: SocketAddr, data: &[u8]) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut out = vec![0u8; 40];
    out[..4].copy_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    s.write_all(&out)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut back = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut back)?;
    anyhow::ensure!(back.len() == data.len(), "a short reply");
    Ok(())
}

pub(crate) fn run(sizes: &[usize], iters: u64, rounds: u16, pe: usize) -> anyhow::Result<()> {
    anyhow::ensure!(pe < 2, "--pe {pe}: the job has PEs 0 and 1");
    let raw = raw_server()?;
    let (open_addr, open_job) = job(Some("none"))?;
    let dir = std::env::temp_dir().join(format!("bench-ccs-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let keyfile = dir.join("keys");
    let key = Key::random()?;
    std::fs::write(&keyfile, format!("0 {}\n", key.to_text()))?;
    let (key_addr, key_job) = job(Some(&keyfile.to_string_lossy()))?;
    let t = Duration::from_secs(10);
    let mut open = Client::connect(&open_addr.to_string(), None, t)?;
    let mut keyed = Client::connect(&key_addr.to_string(), Some(key), t)?;
    converse::input::out_line(&format!(
        "ccs: round trip in µs (a connection per request, as CCS has it), median (lowest-highest) \
         over {rounds} rounds of {iters}; PE {pe} of a local +p2 job answers (PE 0 holds the port)"
    ));
    converse::input::out_line(&format!(
        "{:>8} | {:>22} | {:>22} | {:>22} | {:>7} | {:>7}",
        "bytes", "raw TCP", "CCS", "CCS, with a key", "CCS/raw", "key/raw"
    ));
    for &size in sizes {
        let data = vec![7u8; size];
        let (mut r, mut c, mut k) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            for part in 0..3 {
                let which = (part + round as usize) % 3;
                let start = Instant::now();
                for _ in 0..iters {
                    match which {
                        0 => raw_round_trip(raw, &data)?,
                        1 => {
                            open.request("echo", &Dest::Pe(pe), &data)?;
                        }
                        _ => {
                            keyed.request("echo", &Dest::Pe(pe), &data)?;
                        }
                    }
                }
                let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
                [&mut r, &mut c, &mut k][which].push(us);
            }
        }
        let (rm, rlo, rhi) = spread(r);
        let (cm, clo, chi) = spread(c);
        let (km, klo, khi) = spread(k);
        converse::input::out_line(&format!(
            "{size:>8} | {:>22} | {:>22} | {:>22} | {:>6.2}x | {:>6.2}x",
            format!("{rm:.1} ({rlo:.1}-{rhi:.1})"),
            format!("{cm:.1} ({clo:.1}-{chi:.1})"),
            format!("{km:.1} ({klo:.1}-{khi:.1})"),
            cm / rm,
            km / rm
        ));
    }
    open.request("done", &Dest::Pe(0), b"")?;
    keyed.request("done", &Dest::Pe(0), b"")?;
    let _ = open_job.join();
    let _ = key_job.join();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
