//! A job open to programs started apart: PE 0 listens, writes its address and secret to files,
//! and answers, by handler name:
//!
//! | handler | kind | does |
//! |---|---|---|
//! | `echo` | call | replies with what it got |
//! | `info` | call | replies `pes=N layer=L` |
//! | `around` | call | the data goes round every PE of the job and back, then is the reply |
//! | `flood` | message, u64 N then u32 size | sends N messages `blob` of `size` bytes back, waiting on `Drained` whenever refused; then `flooded` with the count of refusals (u64) |
//! | `hold` | message, u32 ms | the PE is busy for that long (a slow handler) |
//! | `quit` | message | ends the job (exit 0) |
//!
//! Peers joining and leaving are lines on stdout; a peer that joins is sent `welcome` (its
//! peer number) at once. With `--connect ADDR`, PE 0 instead connects
//! to another echo job and calls its `echo` and `info`, printing what came back, then ends.
//!
//! ```text
//! cargo build --release -p converse-endpoint --examples
//! target/release/charmrun +p2 target/release/examples/echo --secret-file /tmp/s --addr-file /tmp/a
//! target/release/charmrun +p2 target/release/examples/echo --connect $(cat /tmp/a) --secret-file /tmp/s
//! ```

/// A line on stdout that never panics when the reader is gone (`println!` does).
macro_rules! say {
    ($($t:tt)*) => {
        converse::input::out_line(&format!($($t)*))
    };
}

use converse::Pe;
use converse_endpoint::{Endpoints, PeerEvent, Secret};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

const USAGE: &str = "usage: echo --secret-file FILE [--addr-file FILE] [--listen ADDR] \
                     [--connect ADDR]";

struct Opts {
    secret_file: String,
    addr_file: Option<String>,
    listen: String,
    connect: Option<String>,
}

fn opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        secret_file: String::new(),
        addr_file: None,
        listen: "tcp://:0".into(),
        connect: None,
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut v = || {
            it.next()
                .cloned()
                .ok_or(format!("echo: {a} needs a value ({USAGE})"))
        };
        match a.as_str() {
            "--secret-file" => o.secret_file = v()?,
            "--addr-file" => o.addr_file = Some(v()?),
            "--listen" => o.listen = v()?,
            "--connect" => o.connect = Some(v()?),
            _ => return Err(format!("echo: unknown argument {a} ({USAGE})")),
        }
    }
    if o.secret_file.is_empty() {
        return Err(format!("echo: --secret-file is needed ({USAGE})"));
    }
    Ok(o)
}

/// A `flood` under way: how many are left to send, of what size, refusals so far.
struct Flood {
    peer: u32,
    left: u64,
    blob: Vec<u8>,
    refused: u64,
}

fn pump(ep: &Endpoints, f: &mut Flood) -> bool {
    while f.left > 0 {
        match ep.send(f.peer, "blob", &f.blob) {
            Ok(()) => f.left -= 1,
            Err(converse_endpoint::SendError::Full { .. }) => {
                f.refused += 1;
                return false;
            }
            Err(_) => return true, // gone: the flood ends
        }
    }
    let _ = ep.send(f.peer, "flooded", &f.refused.to_le_bytes());
    true
}

/// `left` calls of 1 MiB, one after another (more than a connection's inbound limit in all:
/// what a job reads is counted out again as it handles it), then the end of the job.
fn big_echoes(ep: Endpoints, peer: u32, left: u32) {
    let data = vec![left as u8; 1 << 20];
    let ep2 = ep.clone();
    let r = ep.call(peer, "echo", &data, move |pe, r| {
        if r.as_deref() != Ok(&vec![left as u8; 1 << 20][..]) {
            say!("a 1 MiB echo came back wrong");
            return pe.exit(1);
        }
        if left > 1 {
            big_echoes(ep2, peer, left - 1);
        } else {
            say!("20 echoes of 1 MiB");
            pe.exit(0);
        }
    });
    if let Err(e) = r {
        say!("a 1 MiB echo failed: {e}");
    }
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let o = match opts(pe.args()) {
            Ok(o) => o,
            Err(e) => return pe.refuse_arguments(&e),
        };
        let ep = Endpoints::attach(pe);
        // `around`: the data's trip round the job, PE to PE; PE 0 keeps the waiting calls.
        let waiting: Rc<RefCell<Vec<converse_endpoint::Incoming>>> = Rc::default();
        let w = waiting.clone();
        let around = pe.register("echo.around", move |pe, msg| {
            let next = pe.my_pe() + 1;
            if next < pe.num_pes() {
                let h = pe.handler("echo.around").expect("registered");
                pe.send(next, h, msg.payload());
            } else {
                let back = pe.handler("echo.back").expect("registered");
                pe.send(0, back, msg.payload());
            }
        });
        let _back = pe.register("echo.back", move |_pe, msg| {
            let call = w.borrow_mut().remove(0);
            let _ = call.reply(msg.payload());
        });
        if pe.my_pe() != 0 {
            return;
        }
        let secret = match Secret::read_file(o.secret_file.as_ref()) {
            Ok(s) if o.connect.is_some() => s,
            Ok(_) | Err(_) if o.connect.is_some() => {
                return pe
                    .refuse_arguments(&format!("echo: cannot read the secret: {}", o.secret_file))
            }
            _ => Secret::generate().expect("randomness"),
        };
        if let Some(addr) = o.connect {
            let peer = match ep.connect(pe, &addr, &secret) {
                Ok(p) => p,
                Err(e) => {
                    converse::input::error_line(&format!("echo: {e}"));
                    return pe.exit(1);
                }
            };
            let ep2 = ep.clone();
            let r = ep.call(peer, "info", b"", move |pe, r| {
                match r {
                    Ok(info) => say!("the other job says {}", String::from_utf8_lossy(&info)),
                    Err(e) => say!("info failed: {e}"),
                }
                let ep3 = ep2.clone();
                let _ = ep2.call(peer, "echo", b"hello from another job", move |_pe, r| {
                    match r {
                        Ok(b) => say!("echoed: {}", String::from_utf8_lossy(&b)),
                        Err(e) => say!("echo failed: {e}"),
                    }
                    big_echoes(ep3, peer, 20);
                });
                let _ = pe;
            });
            if let Err(e) = r {
                converse::input::error_line(&format!("echo: {e}"));
                pe.exit(1);
            }
            return;
        }
        if let Err(e) = secret.write_file(o.secret_file.as_ref()) {
            return pe.refuse_arguments(&format!("echo: {e}"));
        }
        let addr = match ep.listen(pe, &o.listen, &secret) {
            Ok(a) => a,
            Err(e) => return pe.refuse_arguments(&format!("echo: {e}")),
        };
        if let Some(f) = &o.addr_file {
            let tmp = format!("{f}.tmp");
            if std::fs::write(&tmp, &addr)
                .and_then(|()| std::fs::rename(&tmp, f))
                .is_err()
            {
                return pe.refuse_arguments(&format!("echo: cannot write {f}"));
            }
        }
        say!("listening at {addr}");
        ep.on("echo", |_pe, m| {
            let d = m.data().to_vec();
            let _ = m.reply(&d);
        });
        ep.on("info", |pe, m| {
            let _ = m.reply(format!("pes={} layer={}", pe.num_pes(), pe.layer()).as_bytes());
        });
        ep.on("around", move |pe, m| {
            let d = m.data().to_vec();
            waiting.borrow_mut().push(m);
            if pe.num_pes() > 1 {
                pe.send(1, around, &d);
            } else {
                let back = pe.handler("echo.back").expect("registered");
                pe.send(0, back, &d);
            }
        });
        let floods: Rc<RefCell<Vec<Flood>>> = Rc::default();
        let (fl, ep2) = (floods.clone(), ep.clone());
        ep.on("flood", move |_pe, m| {
            let d = m.data();
            let n = d
                .get(..8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
            let size = d
                .get(8..12)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
            // One flood per peer at a time, of blobs of 4 MiB at most: a peer's requests
            // cannot grow this job's memory.
            if fl.borrow().iter().any(|f| f.peer == m.peer()) {
                return;
            }
            let mut f = Flood {
                peer: m.peer(),
                left: n,
                blob: vec![0x5a; size.min(4 << 20) as usize],
                refused: 0,
            };
            if !pump(&ep2, &mut f) {
                fl.borrow_mut().push(f);
            }
        });
        ep.on("hold", |_pe, m| {
            let ms = m
                .data()
                .get(..4)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
            std::thread::sleep(Duration::from_millis(ms.min(60_000).into()));
        });
        ep.on("quit", |pe: &mut Pe, _m| pe.exit(0));
        let ep2 = ep.clone();
        ep.on_event(move |_pe, ev| match ev {
            PeerEvent::Joined { peer, from, .. } => {
                say!("joined peer {peer} from {from}");
                // A peer can be sent to from its Joined event on.
                let _ = ep2.send(peer, "welcome", format!("you are peer {peer}").as_bytes());
            }
            PeerEvent::Left { peer, why } => {
                floods.borrow_mut().retain(|f| f.peer != peer);
                say!("left peer {peer}: {why}");
            }
            PeerEvent::Drained { peer } => {
                floods
                    .borrow_mut()
                    .retain_mut(|f| f.peer != peer || !pump(&ep2, f));
            }
            // The enum may grow: an event this example does not know needs nothing of it.
            _ => {}
        });
    })
}
