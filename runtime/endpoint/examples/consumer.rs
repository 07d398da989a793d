//! The consumer of a stream between two separately started jobs (see `producer.rs` for the
//! guarantee): PE 0 connects to the producer's address, subscribes from the first item its
//! output file lacks, appends items as lines (`SEQ BYTES`), syncs the file and acknowledges
//! every `--ack-every` items. Killed at any moment and started again, it goes on where its
//! file ends (a line cut short by the kill is dropped first).
//!
//! ```text
//! consumer --out FILE --secret-file FILE --addr-file FILE [--ack-every N] [--wait SECS]
//! ```

/// A line on stdout that never panics when the reader is gone (`println!` does).
macro_rules! say {
    ($($t:tt)*) => {
        converse::input::out_line(&format!($($t)*))
    };
}

use converse_endpoint::{Endpoints, PeerEvent, Secret};
use std::cell::RefCell;
use std::io::{BufRead, Write};
use std::rc::Rc;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: consumer --out FILE --secret-file FILE --addr-file FILE \
                     [--ack-every N] [--wait SECS]";

/// The items already in `path`: the count of whole lines, after cutting off a partial last
/// one (a kill in the middle of a write).
fn resume(path: &str) -> std::io::Result<u64> {
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    else {
        return Ok(0);
    };
    let mut whole = 0u64;
    let mut good_len = 0u64;
    let mut r = std::io::BufReader::new(&f);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        whole += 1;
        good_len += n as u64;
    }
    f.set_len(good_len)?;
    Ok(whole)
}

struct State {
    next: u64,
    total: u64,
    out: std::io::BufWriter<std::fs::File>,
    unacked: u64,
    ack_every: u64,
    peer: u32,
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let args: Vec<String> = pe.args().to_vec();
        let (mut out, mut secret_file, mut addr_file) = (None, None, None);
        let (mut ack_every, mut wait) = (64u64, 30u64);
        let mut it = args.iter().skip(1);
        while let Some(a) = it.next() {
            match (a.as_str(), it.next()) {
                ("--out", Some(v)) => out = Some(v.clone()),
                ("--secret-file", Some(v)) => secret_file = Some(v.clone()),
                ("--addr-file", Some(v)) => addr_file = Some(v.clone()),
                ("--ack-every", Some(v)) => {
                    ack_every = v.parse().ok().filter(|n| *n > 0).unwrap_or(0)
                }
                ("--wait", Some(v)) => wait = v.parse().unwrap_or(0),
                _ => return pe.refuse_arguments(&format!("consumer: bad argument {a} ({USAGE})")),
            }
        }
        let (Some(out), Some(secret_file), Some(addr_file)) = (out, secret_file, addr_file) else {
            return pe.refuse_arguments(&format!("consumer: {USAGE}"));
        };
        if ack_every == 0 {
            return pe.refuse_arguments(&format!("consumer: --ack-every is at least 1 ({USAGE})"));
        }
        let ep = Endpoints::attach(pe);
        if pe.my_pe() != 0 {
            return;
        }
        let next = match resume(&out) {
            Ok(n) => n,
            Err(e) => return pe.refuse_arguments(&format!("consumer: {out}: {e}")),
        };
        // The producer may not be up yet: its files, and its listener, are waited for.
        let deadline = Instant::now() + Duration::from_secs(wait);
        let peer = loop {
            let attempt = std::fs::read_to_string(&addr_file)
                .map_err(|e| format!("{addr_file}: {e}"))
                .and_then(|addr| {
                    let secret =
                        Secret::read_file(secret_file.as_ref()).map_err(|e| e.to_string())?;
                    ep.connect(pe, addr.trim(), &secret)
                        .map_err(|e| e.to_string())
                });
            match attempt {
                Ok(p) => break p,
                Err(e) if Instant::now() >= deadline => {
                    converse::input::error_line(&format!("consumer: {e}"));
                    return pe.exit(1);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let file = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
        {
            Ok(f) => f,
            Err(e) => return pe.refuse_arguments(&format!("consumer: {out}: {e}")),
        };
        say!("consumer: {next} items already in {out}; subscribing from there");
        let st = Rc::new(RefCell::new(State {
            next,
            total: u64::MAX,
            out: std::io::BufWriter::with_capacity(1 << 20, file),
            unacked: 0,
            ack_every,
            peer,
        }));
        // Sync what was written, then say so.
        fn ack(ep: &Endpoints, s: &mut State) -> std::io::Result<()> {
            s.out.flush()?;
            s.out.get_ref().sync_data()?;
            s.unacked = 0;
            // Small and rare: a full queue cannot be (and a lost ack is only resent work).
            let _ = ep.send(s.peer, "ack", &s.next.to_le_bytes());
            Ok(())
        }
        {
            let (st, ep2) = (st.clone(), ep.clone());
            ep.on("item", move |pe, m| {
                let d = m.data();
                let Some((seq, body)) = d.split_first_chunk::<8>() else {
                    converse::input::error_line("consumer: an item without its number");
                    return pe.exit(1);
                };
                let seq = u64::from_le_bytes(*seq);
                let mut s = st.borrow_mut();
                if seq != s.next {
                    converse::input::error_line(&format!(
                        "consumer: item {seq} came where item {} was due",
                        s.next
                    ));
                    return pe.exit(1);
                }
                let line = [format!("{seq} ").as_bytes(), body, b"\n"].concat();
                if let Err(e) = s.out.write_all(&line) {
                    converse::input::error_line(&format!("consumer: writing: {e}"));
                    return pe.exit(1);
                }
                s.next += 1;
                s.unacked += 1;
                if s.unacked >= s.ack_every || s.next == s.total {
                    if let Err(e) = ack(&ep2, &mut s) {
                        converse::input::error_line(&format!("consumer: syncing: {e}"));
                        return pe.exit(1);
                    }
                }
                if s.next == s.total {
                    say!("consumer: all {} items in", s.total);
                    pe.exit(0);
                }
            });
        }
        ep.on_event(|pe, ev| {
            if let PeerEvent::Left { why, .. } = ev {
                converse::input::error_line(&format!("consumer: the producer left: {why}"));
                pe.exit(1);
            }
        });
        let st2 = st.clone();
        let r = ep.call(
            peer,
            "subscribe",
            &next.to_le_bytes(),
            move |pe, r| match r {
                Ok(total) => {
                    let total = u64::from_le_bytes(total.try_into().unwrap_or_default());
                    let mut s = st2.borrow_mut();
                    s.total = total;
                    if s.next >= total {
                        say!("consumer: all {total} items in");
                        pe.exit(0);
                    }
                }
                Err(e) => {
                    converse::input::error_line(&format!("consumer: subscribing: {e}"));
                    pe.exit(1);
                }
            },
        );
        if let Err(e) = r {
            converse::input::error_line(&format!("consumer: {e}"));
            pe.exit(1);
        }
    })
}
