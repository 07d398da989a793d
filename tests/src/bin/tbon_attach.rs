//! Back-end attach mode on a whole job: `tbon_attach front TOPOLOGY FILE N` is the network
//! (every PE, under charmrun), `tbon_attach back FILE RANK` a back-end started apart (a plain
//! process, no runtime).
//!
//! The front-end makes an attach-mode network over TOPOLOGY, writes the attach file FILE,
//! prints `tbon_attach: attach file written`, waits for N back-ends (printing
//! `tbon_attach: N back-ends attached`), then for the file `FILE.go`, then checks: the tree
//! holds them under leaves, a wave sums over all of them, a singlecast reaches one, a
//! back-end that leaves (asked to by tag `LEAVE`) is an event and later waves sum over the
//! others; then it shuts the network down. It prints `tbon_attach: ok` or
//! `tbon_attach: FAILED: why` (exit 1).
//!
//! `tbon_attach front TOPOLOGY FILE N recover` is the same network with failure recovery on
//! (run with `+set faults=report`): every PE leaves its pid in `FILE.pid.PE`, and the
//! front-end waits for N back-ends, checks a wave over them and shuts down — the test stops
//! and kills an internal process meanwhile.
//!
//! A back-end (`back FILE RANK [LEAF]`) attaches to leaf `LEAF` (default `RANK`) mod the
//! number of leaves, answers tag `SUM` with its rank plus the value, tag `DOUBLE` with twice
//! the value, tag `ECHO` as runtime/tbon/lightweight/examples/c_backend.c does (the C
//! back-end this program's front-end also drives), leaves on `LEAVE`, and prints `back RANK: shut down` when the network ends
//! (exit 0); an attach refused prints its error (exit 2), any other error exit 1.

use converse_tbon::{
    self as tbon, topgen, AttachFile, BackEnd, EventKind, Network, Options, Stream, SyncMode,
    TbonError, Value, TFILTER_SUM,
};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

const SUM: i32 = 100;
const DOUBLE: i32 = 101;
const LEAVE: i32 = 102;
const ECHO: i32 = 103;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("back") {
        return back(&args[2..]);
    }
    converse::run(|pe| {
        let args = pe.args().to_vec();
        let spec = args.get(2).cloned().unwrap_or_else(|| "g:2".into());
        let file = args.get(3).cloned().unwrap_or_default();
        let want: usize = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(1);
        let recover = args.get(5).map(String::as_str) == Some("recover");
        // Generated trees name no real host: process i on PE i.
        let opts = Options::default()
            .attach_backends(true)
            .failure_recovery(recover)
            .policy(tbon::MapPolicy::InOrder);
        let topology = |_: &converse::Pe| {
            let spec =
                topgen::TreeSpec::parse(&spec).map_err(|e| TbonError::Usage(e.to_string()))?;
            Ok(topgen::generate(&spec, &topgen::Placement::default())?)
        };
        let mut failed = None;
        if recover {
            let me = pe.my_pe();
            let _ = std::fs::write(format!("{file}.pid.{me}"), std::process::id().to_string());
        }
        match tbon::attach(pe, opts, topology) {
            Ok(mut net) if net.is_front_end() => {
                let r = if recover {
                    front_recover(&mut net, Path::new(&file), want)
                } else {
                    front(&mut net, Path::new(&file), want)
                };
                let code = match r {
                    Ok(()) => {
                        converse::input::out_line("tbon_attach: ok");
                        0
                    }
                    Err(why) => {
                        converse::input::out_line(&format!("tbon_attach: FAILED: {why}"));
                        1
                    }
                };
                net.exit(code);
            }
            Ok(mut net) => {
                let _ = net.wait_for_shutdown();
            }
            Err(e) => failed = Some(e),
        }
        if let Some(e) = failed {
            converse::input::error_line(&format!("tbon_attach: {e}"));
            pe.exit(1);
        }
    });
    ExitCode::SUCCESS
}

fn front(net: &mut Network<'_>, file: &Path, want: usize) -> Result<(), String> {
    let leaves = net.attach_points();
    let internal = net.topology().num_nodes();
    if leaves.is_empty() || net.topology().num_backends() != 0 {
        return Err(format!(
            "{} attach points, {} back-ends before any attached",
            leaves.len(),
            net.topology().num_backends()
        ));
    }
    net.write_attach_file(file).map_err(|e| e.to_string())?;
    converse::input::out_line("tbon_attach: attach file written");
    let have = net
        .wait_for_backends(want, Duration::from_secs(90))
        .map_err(|e| e.to_string())?;
    if have != want {
        return Err(format!("{have} of {want} back-ends attached in 90 s"));
    }
    let ranks = net.attached_backends();
    added_once_each(net, &ranks)?;
    // The test tries its refusals meanwhile, then says go (FILE.go).
    converse::input::out_line(&format!("tbon_attach: {have} back-ends attached"));
    let go = file.with_extension("go");
    let mut waited = 0;
    while !go.exists() {
        if waited > 6000 {
            return Err(format!("{} never came", go.display()));
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
    }
    if net.attached_backends() != ranks {
        return Err(format!(
            "refused back-ends joined: {:?}",
            net.attached_backends()
        ));
    }
    // The tree holds them, each under a leaf.
    let t = net.topology().clone();
    if t.num_nodes() != internal + want || t.num_backends() != want {
        return Err(format!(
            "the tree has {} nodes, {} back-ends",
            t.num_nodes(),
            t.num_backends()
        ));
    }
    for &r in &ranks {
        let parent = t.parent_rank(r);
        if !leaves.iter().any(|l| Some(l.rank) == parent) {
            return Err(format!("back-end {r} is under {parent:?}, not a leaf"));
        }
        if net.pe_of(r).is_some() {
            return Err(format!("back-end {r} has a PE"));
        }
    }
    // A wave over all of them.
    let comm = net.broadcast_communicator();
    if comm.endpoints() != ranks.as_slice() {
        return Err(format!(
            "the broadcast communicator is {:?}",
            comm.endpoints()
        ));
    }
    let s = net
        .new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, 0)
        .map_err(|e| e.to_string())?;
    for v in [1000, 2000] {
        wave(net, &s, v, &ranks)?;
    }
    // A singlecast to the last.
    let last = *ranks.last().ok_or("no back-end")?;
    net.send_to_backend(last, DOUBLE, "%d", 21)
        .map_err(|e| e.to_string())?;
    let p = net
        .recv_on(&Stream::from_id(last))
        .map_err(|e| e.to_string())?;
    let v: i32 = p.unpack("%d").map_err(|e| e.to_string())?;
    if v != 42 || p.src_rank() != last {
        return Err(format!("singlecast answer {v} from {}", p.src_rank()));
    }
    // Every type a C back-end unpacks and packs differently: a string, an array, a double, a
    // byte.
    let echo = |s: &str, items: &[i32], d: f64, c: u8| {
        let t = converse_tbon::ElemType {
            base: converse_tbon::BaseType::Int,
            shape: converse_tbon::Shape::Array,
        };
        vec![
            Value::Str(s.into()),
            Value::Array(t, items.iter().map(|&i| Value::Int(i)).collect()),
            Value::Double(d),
            Value::UChar(c),
        ]
    };
    net.send_to_backend(
        last,
        ECHO,
        "%s %ad %lf %uc",
        echo("hi", &[1, -2, 3], 2.5, 7),
    )
    .map_err(|e| e.to_string())?;
    let p = net
        .recv_on(&Stream::from_id(last))
        .map_err(|e| e.to_string())?;
    if p.values() != echo("hi!", &[2, -1, 4], 5.0, 8) {
        return Err(format!("echo answer {:?}", p.values()));
    }
    // The first leaves: an event, and waves go on over the others.
    let gone = ranks[0];
    net.send_to_backend(gone, LEAVE, "%d", 0)
        .map_err(|e| e.to_string())?;
    let rest: Vec<u32> = ranks[1..].to_vec();
    wave(net, &s, 3000, &rest)?;
    let mut removed = false;
    for _ in 0..100 {
        while let Some(e) = net.next_event() {
            removed |= e.kind == EventKind::EndpointRemoved && e.rank == Some(gone);
        }
        if removed {
            break;
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(20));
    }
    if !removed {
        return Err(format!("no EndpointRemoved event for back-end {gone}"));
    }
    if net.attached_backends() != rest {
        return Err(format!("after {gone} left: {:?}", net.attached_backends()));
    }
    net.shutdown().map_err(|e| e.to_string())
}

/// One `BackendAdded` event for each of `ranks` (sorted), and none for another.
fn added_once_each(net: &mut Network<'_>, ranks: &[u32]) -> Result<(), String> {
    let mut added = Vec::new();
    while let Some(e) = net.next_event() {
        if e.kind == EventKind::BackendAdded {
            added.extend(e.rank);
        }
    }
    added.sort_unstable();
    if added != ranks {
        return Err(format!(
            "BackendAdded events for {added:?}, back-ends {ranks:?}"
        ));
    }
    Ok(())
}

/// A wave of `v` on `s`: back-ends `over` each answer their rank plus `v`, summed.
fn wave(net: &mut Network<'_>, s: &Stream, v: i32, over: &[u32]) -> Result<(), String> {
    net.send(s, SUM, "%d", v).map_err(|e| e.to_string())?;
    let got: i32 = net
        .recv_on(s)
        .and_then(|p| Ok(p.unpack("%d")?))
        .map_err(|e| e.to_string())?;
    let want: i32 = over.iter().map(|&r| r as i32 + v).sum();
    if got != want {
        return Err(format!(
            "a wave of {v} over {over:?} summed to {got}, not {want}"
        ));
    }
    Ok(())
}

/// With recovery on: `want` back-ends attach while the test stops and kills an internal
/// process (one attach is under way through it); every one is counted once, and a wave
/// over them sums right over the mended tree.
fn front_recover(net: &mut Network<'_>, file: &Path, want: usize) -> Result<(), String> {
    net.write_attach_file(file).map_err(|e| e.to_string())?;
    converse::input::out_line("tbon_attach: attach file written");
    let have = net
        .wait_for_backends(want, Duration::from_secs(90))
        .map_err(|e| e.to_string())?;
    let ranks = net.attached_backends();
    if have != want || ranks.len() != want {
        return Err(format!("{have} of {want} back-ends attached: {ranks:?}"));
    }
    // Each taken once: one BackendAdded event each (an attach asked again is answered
    // again, not added again).
    added_once_each(net, &ranks)?;
    converse::input::out_line(&format!("tbon_attach: {have} back-ends attached"));
    let comm = net.broadcast_communicator();
    let s = net
        .new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, 0)
        .map_err(|e| e.to_string())?;
    wave(net, &s, 1000, &ranks)?;
    net.shutdown().map_err(|e| e.to_string())
}

fn back(args: &[String]) -> ExitCode {
    let (Some(file), Some(rank)) = (args.first(), args.get(1).and_then(|r| r.parse().ok())) else {
        converse::input::error_line("usage: tbon_attach back FILE RANK");
        return ExitCode::from(2);
    };
    let f = match AttachFile::read(Path::new(file)) {
        Ok(f) => f,
        Err(e) => {
            converse::input::error_line(&format!("back {rank}: {e}"));
            return ExitCode::from(2);
        }
    };
    let at = args
        .get(2)
        .and_then(|i| i.parse::<usize>().ok())
        .unwrap_or(rank as usize);
    let leaf = &f.points[at % f.points.len()];
    let mut be = match BackEnd::attach(leaf, rank, &f.secret) {
        Ok(b) => b,
        Err(e) => {
            converse::input::error_line(&format!("back {rank}: {e}"));
            return ExitCode::from(2);
        }
    };
    converse::input::out_line(&format!("back {rank}: attached to {}", be.parent_rank()));
    loop {
        let (s, p) = match be.recv() {
            Ok(x) => x,
            Err(TbonError::ShutDown) => {
                converse::input::out_line(&format!("back {rank}: shut down"));
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                converse::input::out_line(&format!("back {rank}: {e}"));
                return ExitCode::FAILURE;
            }
        };
        let v: i32 = p.unpack("%d").unwrap_or(0);
        let sent = match p.tag() {
            SUM => be.send(&s, SUM, "%d", rank as i32 + v),
            DOUBLE => be.send(&s, DOUBLE, "%d", 2 * v),
            LEAVE => {
                converse::input::out_line(&format!("back {rank}: leaving"));
                return ExitCode::SUCCESS;
            }
            ECHO => match p.values().as_slice() {
                [Value::Str(st), Value::Array(t, items), Value::Double(d), Value::UChar(c)] => {
                    let items: Vec<Value> = items
                        .iter()
                        .map(|v| match v {
                            Value::Int(i) => Value::Int(i + 1),
                            o => o.clone(),
                        })
                        .collect();
                    let back = vec![
                        Value::Str(format!("{st}!")),
                        Value::Array(*t, items),
                        Value::Double(2.0 * d),
                        Value::UChar(c + 1),
                    ];
                    be.send(&Stream::from_id(rank), ECHO, "%s %ad %lf %uc", back)
                }
                other => {
                    converse::input::out_line(&format!("back {rank}: echo of {other:?}?"));
                    return ExitCode::FAILURE;
                }
            },
            t => {
                converse::input::out_line(&format!("back {rank}: tag {t}?"));
                return ExitCode::FAILURE;
            }
        };
        if let Err(e) = sent {
            converse::input::out_line(&format!("back {rank}: {e}"));
            return ExitCode::FAILURE;
        }
    }
}
