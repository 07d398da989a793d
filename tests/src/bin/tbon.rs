//! Self-checking tree-overlay scenarios, one program for every PE (the overlay laid over a
//! running job): `tbon SCENARIO TOPOLOGY [ARG]`, where TOPOLOGY is a tree spec (`g:2x3`,
//! `b:2^2`, `k:2@8`) or `file:PATH`. The front-end checks the results and prints
//! `tbon SCENARIO: ok`, or `tbon SCENARIO: FAILED: why` and exits 1.

use converse_tbon::{
    self as tbon, topgen, topology_file, Aggregate, Context, EventClass, EventKind, FilterType,
    FnFilter, Metric, Network, Options, Packet, Role, Stream, SyncMode, TbonError, Topology,
    TFILTER_ARRAY_CONCAT, TFILTER_AVG, TFILTER_MAX, TFILTER_MIN, TFILTER_NULL, TFILTER_SUM,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const REPLY_INT: i32 = 100;
const REPLY_DOUBLE: i32 = 101;
const REPLY_ARRAY: i32 = 102;
const REPLY_STRING: i32 = 103;
const REPLY_LATE: i32 = 104;
const SINGLECAST: i32 = 105;
const WATCH_CLOSE: i32 = 106;
const MIXED_FORMATS: i32 = 107;
const WAVES: i32 = 108;
const FORMAT_SEEN: i32 = 109;

type Check = Result<(), String>;

fn main() -> ExitCode {
    converse::run(|pe| {
        let args = pe.args().to_vec();
        let scenario = args.get(1).cloned().unwrap_or_default();
        let spec = args.get(2).cloned().unwrap_or_else(|| "g:2".into());
        let extra = args.get(3).cloned().unwrap_or_default();
        // A filter compiled into the program: counts the packets of each wave.
        let count = FnFilter::new("", |cx| {
            let first = &cx.packets_in[0];
            cx.packets_out.push(Packet::new(
                first.stream_id(),
                first.tag(),
                "%ud",
                cx.packets_in.len() as u32,
            )?);
            Ok(())
        });
        let mut opts = Options::default();
        for (name, f) in [("count", count)].into_iter().chain(user_filters()) {
            if let Ok(f) = f {
                opts = opts.filter(name, f);
            }
        }
        let failed = match tbon::attach(pe, opts, |_| topology(&spec)) {
            Ok(mut net) => {
                run_role(&scenario, &extra, &mut net);
                return;
            }
            Err(e) => e,
        };
        if pe.my_pe() == 0 {
            eprintln!("tbon {scenario}: cannot attach: {failed}");
            pe.exit(3);
        }
    })
}

/// Filters compiled into the program, with the guide's whole shape: per-stream state,
/// configuration parameters, packets sent back the way they came.
fn user_filters() -> Vec<(&'static str, Result<FnFilter, tbon::FilterError>)> {
    vec![
        // Packets seen on this stream so far, here: state kept between waves.
        (
            "running",
            FnFilter::new("", |cx| {
                let seen = cx.state.get_or_insert_with(|| Box::new(0u32));
                let seen = seen
                    .downcast_mut::<u32>()
                    .ok_or_else(|| tbon::FilterError("the state is not a count".into()))?;
                *seen += cx.packets_in.len() as u32;
                let first = &cx.packets_in[0];
                let p = Packet::new(first.stream_id(), first.tag(), "%ud", *seen)?;
                cx.packets_out.push(p);
                Ok(())
            }),
        ),
        // The wave's sum of `%d`, times the factor the front-end set (1 until it does).
        (
            "scaled",
            FnFilter::new("%d", |cx| {
                let factor = match cx.params {
                    Some(p) => p.unpack::<i32>("%d")?,
                    None => 1,
                };
                let mut sum = 0i32;
                for p in cx.packets_in.iter() {
                    sum += p.unpack::<i32>("%d")?;
                }
                let first = &cx.packets_in[0];
                cx.packets_out.push(Packet::new(
                    first.stream_id(),
                    first.tag(),
                    "%d",
                    sum * factor,
                )?);
                Ok(())
            }),
        ),
        // Everything goes on, and a copy goes back the way it came.
        (
            "echo",
            FnFilter::new("", |cx| {
                cx.packets_out_reverse.extend(cx.packets_in.iter().cloned());
                cx.packets_out.append(cx.packets_in);
                Ok(())
            }),
        ),
    ]
}

fn run_role(scenario: &str, extra: &str, net: &mut Network<'_>) {
    match net.role() {
        Role::FrontEnd => {
            // The shutdown is part of every scenario: it returns once every process has
            // acknowledged it, so "ok" also says the whole tree was reached.
            let result = front_end(scenario, extra, net)
                .and_then(|()| net.shutdown().map_err(|e| format!("shutdown: {e}")));
            match result {
                Ok(()) => {
                    println!("tbon {scenario}: ok");
                    net.pe().exit(0);
                }
                Err(why) => {
                    println!("tbon {scenario}: FAILED: {why}");
                    let _ = net.shutdown();
                    net.pe().exit(1);
                }
            }
        }
        Role::BackEnd => back_end(scenario, net),
        Role::Internal | Role::Spare => {
            let _ = net.wait_for_shutdown();
        }
    }
}

fn topology(spec: &str) -> Result<Topology, TbonError> {
    match spec.strip_prefix("file:") {
        Some(path) => Ok(topology_file::load(std::path::Path::new(path))?),
        None => Ok(topgen::generate(
            &topgen::TreeSpec::parse(spec)?,
            &topgen::Placement::default(),
        )?),
    }
}

fn e2s(e: TbonError) -> String {
    e.to_string()
}

/// A stream over `comm` with `up` and `sync` (and no downstream filter).
fn stream(
    net: &mut Network<'_>,
    comm: &tbon::Communicator,
    up: u32,
    sync: SyncMode,
) -> Result<Stream, String> {
    net.new_stream(comm, up, sync, TFILTER_NULL).map_err(e2s)
}

/// The next packet on `s`, unpacked as `format`.
fn recv_as<T: tbon::Unpack>(net: &mut Network<'_>, s: &Stream, format: &str) -> Result<T, String> {
    net.recv_on(s)
        .map_err(e2s)?
        .unpack(format)
        .map_err(|e| e.to_string())
}

/// The back-ends' side of every scenario: answer by tag until the network is shut down.
fn back_end(scenario: &str, net: &mut Network<'_>) {
    let rank = net.rank().unwrap_or(0) as i32;
    loop {
        let (s, p) = match net.recv() {
            Ok(x) => x,
            Err(TbonError::ShutDown) | Err(TbonError::JobEnded) => return,
            Err(e) => {
                eprintln!("tbon {scenario}: back-end {rank}: {e}");
                return;
            }
        };
        let r = match p.tag() {
            REPLY_INT => net.send(&s, REPLY_INT, "%d", rank + 1),
            REPLY_DOUBLE => net.send(&s, REPLY_DOUBLE, "%lf", f64::from(rank + 1)),
            REPLY_ARRAY => net.send(&s, REPLY_ARRAY, "%ad", vec![rank + 1; 2]),
            REPLY_STRING => net.send(&s, REPLY_STRING, "%s", format!("be{rank}")),
            REPLY_LATE => {
                if rank == 0 {
                    let until = Instant::now() + Duration::from_millis(1500);
                    net.pe().run_until(|_| Instant::now() >= until);
                }
                net.send(&s, REPLY_LATE, "%d", rank + 1)
            }
            SINGLECAST => {
                let v: i32 = p.unpack("%d").unwrap_or(-1);
                let right = s.id() == rank as u32 && s.is_singlecast();
                net.send(&s, SINGLECAST, "%d %d", (v * 2, i32::from(right)))
            }
            WATCH_CLOSE => {
                let _ = net.send(&s, WATCH_CLOSE, "%d", 1);
                let seen = match net.recv_on(&s) {
                    Err(TbonError::StreamClosed(_)) => "closed".to_string(),
                    other => format!("{other:?}"),
                };
                let after = match net.send(&s, WATCH_CLOSE, "%d", 1) {
                    Err(TbonError::StreamClosed(_)) => "refused",
                    _ => "accepted",
                };
                let mine = net.stream(rank as u32);
                match mine {
                    Some(m) => net.send(&m, WATCH_CLOSE, "%s %s", (seen, after)),
                    None => Ok(()),
                }
            }
            MIXED_FORMATS => {
                if rank == 0 {
                    net.send(&s, MIXED_FORMATS, "%f", 1.0f32)
                } else {
                    net.send(&s, MIXED_FORMATS, "%d", 1)
                }
            }
            FORMAT_SEEN => net.send(&s, FORMAT_SEEN, "%s", p.format_string()),
            WAVES => {
                let (v, n): (i32, i32) = p.unpack("%d %d").unwrap_or((0, 0));
                (0..n)
                    .map(|i| net.send(&s, WAVES, "%d", v * i))
                    .find(Result::is_err)
                    .unwrap_or(Ok(()))
            }
            other => {
                eprintln!("tbon {scenario}: back-end {rank}: unknown tag {other}");
                Ok(())
            }
        };
        if let Err(e) = r {
            eprintln!("tbon {scenario}: back-end {rank} could not answer: {e}");
        }
    }
}

fn front_end(scenario: &str, extra: &str, net: &mut Network<'_>) -> Check {
    match scenario {
        "reduce" => reduce(net),
        "sync" => sync(net),
        "hetero" => hetero(net),
        "subset" => subset(net),
        "close" => close(net),
        "load" => load(net, extra),
        "errors" => errors(net),
        "events" => events(net),
        "perf" => perf(net),
        "topology" => topology_queries(net),
        "shutdown" => Ok(()),
        "userfilters" => user_filter_shape(net),
        other => Err(format!("unknown scenario '{other}'")),
    }
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Check {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn reduce(net: &mut Network<'_>) -> Check {
    let b = net.topology().num_backends() as i32;
    let comm = net.broadcast_communicator();
    let all: i32 = (1..=b).sum();
    for round in 0..3 {
        let s = stream(net, &comm, TFILTER_SUM, SyncMode::WaitForAll)?;
        net.send(&s, REPLY_INT, "%d", round).map_err(e2s)?;
        let v: i32 = recv_as(net, &s, "%d")?;
        expect("sum", v, all)?;
    }
    let checks: [(u32, i32, f64); 3] = [
        (TFILTER_MIN, REPLY_INT, 1.0),
        (TFILTER_MAX, REPLY_INT, b as f64),
        (TFILTER_AVG, REPLY_DOUBLE, f64::from(b + 1) / 2.0),
    ];
    for (f, tag, want) in checks {
        let s = stream(net, &comm, f, SyncMode::WaitForAll)?;
        for _ in 0..3 {
            net.send(&s, tag, "", ()).map_err(e2s)?;
            let p = net.recv_on(&s).map_err(e2s)?;
            let got = p
                .values()
                .first()
                .and_then(|v| v.as_f64())
                .unwrap_or(f64::NAN);
            expect(&format!("filter {f}"), got, want)?;
        }
    }
    let s = net
        .new_stream(
            &comm,
            TFILTER_ARRAY_CONCAT,
            SyncMode::WaitForAll,
            TFILTER_NULL,
        )
        .map_err(e2s)?;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    let mut v: Vec<i32> = recv_as(net, &s, "%ad")?;
    v.sort_unstable();
    expect("concat", v, (1..=b).collect())?;
    net.send(&s, REPLY_STRING, "", ()).map_err(e2s)?;
    let names: Vec<String> = recv_as(net, &s, "%as")?;
    expect("concat of strings", names.len(), b as usize)?;
    // Element-wise sum of arrays.
    let s = stream(net, &comm, TFILTER_SUM, SyncMode::WaitForAll)?;
    net.send(&s, REPLY_ARRAY, "", ()).map_err(e2s)?;
    let v: Vec<i32> = recv_as(net, &s, "%ad")?;
    expect("array sum", v, vec![all, all])?;
    // The filter the program registered itself counts the packets of each wave at the root.
    let count = net.filter_id("count").ok_or("no 'count' filter")?;
    let s = net
        .new_stream_placed(
            &comm,
            &format!("count => {};", net.rank().unwrap_or(0)),
            "",
            "",
        )
        .map_err(e2s)?;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    let n: u32 = recv_as(net, &s, "%ud")?;
    expect("count filter id", count, tbon::FIRST_USER_FILTER)?;
    // Null filters below pass whole waves on as batches: the root sees every back-end at once.
    expect(
        "count at the root",
        n as usize,
        net.topology().num_backends(),
    )
}

fn user_filter_shape(net: &mut Network<'_>) -> Check {
    let b = net.topology().num_backends();
    let fe = net.rank().unwrap_or(0);
    let comm = net.broadcast_communicator();
    // State: the root's running count grows by every back-end's packet each wave.
    let s = net
        .new_stream_placed(&comm, &format!("running => {fe}"), "", "")
        .map_err(e2s)?;
    for wave in 1..=3 {
        net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
        let n: u32 = recv_as(net, &s, "%ud")?;
        expect(
            &format!("running count after wave {wave}"),
            n as usize,
            wave * b,
        )?;
    }
    // Parameters: the factor the front-end sets reaches the filter.
    let s = net
        .new_stream_placed(&comm, &format!("scaled => {fe}"), "", "")
        .map_err(e2s)?;
    let all = (b * (b + 1) / 2) as i32;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    expect("unscaled", recv_as::<i32>(net, &s, "%d")?, all)?;
    net.set_filter_params(&s, FilterType::UpstreamTrans, "%d", 10)
        .map_err(e2s)?;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    expect("scaled by 10", recv_as::<i32>(net, &s, "%d")?, all * 10)?;
    // Reverse: a downstream filter at the root sends a copy of what goes down back up.
    let s = net
        .new_stream_placed(&comm, "", "dontwait => *", &format!("echo => {fe}"))
        .map_err(e2s)?;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    let mut from_root = 0;
    for _ in 0..=b {
        if net.recv_on(&s).map_err(e2s)?.src_rank() == fe {
            from_root += 1;
        }
    }
    expect("the copy sent back by the root's filter", from_root, 1)?;
    // Downstream transformation everywhere: back-ends get what the count filter made.
    let s = net
        .new_stream_placed(&comm, "concat => *", "", "count => *")
        .map_err(e2s)?;
    net.send(&s, FORMAT_SEEN, "%d", 5).map_err(e2s)?;
    let seen: Vec<String> = recv_as(net, &s, "%as")?;
    expect("back-ends saw", seen, vec!["%ud".to_string(); b])
}

fn sync(net: &mut Network<'_>) -> Check {
    let b = net.topology().num_backends() as i32;
    let comm = net.broadcast_communicator();
    let all: i32 = (1..=b).sum();
    // Don't wait, and wait-for-all through null filters: every packet arrives on its own.
    for mode in [SyncMode::DontWait, SyncMode::WaitForAll] {
        let s = stream(net, &comm, TFILTER_NULL, mode)?;
        net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
        let mut got = Vec::new();
        for _ in 0..b {
            got.push(
                net.recv_on(&s)
                    .map_err(e2s)?
                    .unpack::<i32>("%d")
                    .map_err(|e| e.to_string())?,
            );
        }
        got.sort_unstable();
        expect(&format!("{mode:?} values"), got, (1..=b).collect())?;
    }
    // Timeout: back-end 0 answers 1.5 s late; with a 200 ms timeout the sum comes in two parts.
    let s = stream(net, &comm, TFILTER_SUM, SyncMode::Timeout)?;
    net.set_filter_params(&s, FilterType::UpstreamSync, "%ud", 200u32)
        .map_err(e2s)?;
    let t0 = Instant::now();
    net.send(&s, REPLY_LATE, "", ()).map_err(e2s)?;
    let mut total = 0;
    let mut parts = 0;
    let mut first_at = Duration::ZERO;
    while total < all {
        let v: i32 = recv_as(net, &s, "%d")?;
        if parts == 0 {
            first_at = t0.elapsed();
        }
        parts += 1;
        total += v;
    }
    expect("timeout total", total, all)?;
    if b > 1 && (parts < 2 || first_at >= Duration::from_millis(1400)) {
        return Err(format!(
            "timeout: {parts} part(s), the first after {first_at:?}"
        ));
    }
    // Timeout without a timeout set behaves as don't-wait.
    let s = stream(net, &comm, TFILTER_NULL, SyncMode::Timeout)?;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    for _ in 0..b {
        net.recv_on(&s).map_err(e2s)?;
    }
    Ok(())
}

fn hetero(net: &mut Network<'_>) -> Check {
    let topo = net.topology().clone();
    // Internal processes sum their subtree; the front-end concatenates the sums (in a flat
    // tree, the back-ends' own values).
    let internal = topo.internal();
    let mut up = String::new();
    for &i in &internal {
        up.push_str(&format!("sum => {}; ", topo.nodes()[i].rank()));
    }
    up.push_str(&format!("concat => {};", topo.root().rank()));
    let comm = net.broadcast_communicator();
    let s = net
        .new_stream_placed(&comm, &up, "waitforall => *", "")
        .map_err(e2s)?;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    let mut got: Vec<i32> = recv_as(net, &s, "%ad")?;
    let mut want: Vec<i32> = topo
        .root()
        .children()
        .iter()
        .map(|&c| topo.nodes()[c].backend_ranks().map(|r| r as i32 + 1).sum())
        .collect();
    got.sort_unstable();
    want.sort_unstable();
    expect("per-subtree sums", got, want)?;
    let bad = net.new_stream_placed(&comm, "sum => 123456789", "", "");
    expect(
        "a rank not in the tree",
        bad.err().map(|e| e.to_string().contains("not in the tree")),
        Some(true),
    )
}

fn subset(net: &mut Network<'_>) -> Check {
    let b = net.topology().num_backends() as u32;
    let comm = net.broadcast_communicator();
    let s = stream(net, &comm, TFILTER_NULL, SyncMode::DontWait)?;
    let dests = if b > 1 { vec![0, b - 1] } else { vec![0] };
    net.send_to(&s, &dests, REPLY_INT, "", ()).map_err(e2s)?;
    let mut from = Vec::new();
    for _ in 0..dests.len() {
        from.push(net.recv_on(&s).map_err(e2s)?.src_rank());
    }
    from.sort_unstable();
    expect("subset answers from", from, dests.clone())?;
    // Nothing else answers: a second exchange must see only its own replies.
    net.send_to(&s, &[0], REPLY_INT, "", ()).map_err(e2s)?;
    expect(
        "then only rank 0",
        net.recv_on(&s).map_err(e2s)?.src_rank(),
        0,
    )?;
    expect(
        "nothing more queued",
        net.try_recv_on(&s).map_err(e2s)?.is_none(),
        true,
    )?;
    let bad = net.send_to(&s, &[b + 5], REPLY_INT, "", ());
    expect("a destination outside the stream", bad.is_err(), true)?;
    // Singlecast to each back-end on its own stream.
    for r in 0..b {
        net.send_to_backend(r, SINGLECAST, "%d", r as i32)
            .map_err(e2s)?;
    }
    let mut seen = vec![false; b as usize];
    for _ in 0..b {
        let (st, p) = net.recv().map_err(e2s)?;
        let (v, right): (i32, i32) = p.unpack("%d %d").map_err(|e| e.to_string())?;
        expect("singlecast stream id", st.id(), (v / 2) as u32)?;
        expect("back-end saw its own stream", right, 1)?;
        seen[st.id() as usize] = true;
    }
    expect("every back-end answered", seen.iter().all(|&x| x), true)?;
    // A communicator of two back-ends.
    if b >= 3 {
        let c = net.new_communicator([1, 2]).map_err(e2s)?;
        let s = stream(net, &c, TFILTER_SUM, SyncMode::WaitForAll)?;
        net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
        let v: i32 = recv_as(net, &s, "%d")?;
        expect("sum over ranks 1 and 2", v, 2 + 3)?;
        expect("its end-points", net.endpoints(&s), vec![1, 2])?;
    }
    expect(
        "a communicator with a stranger",
        net.new_communicator([b]).is_err(),
        true,
    )
}

fn close(net: &mut Network<'_>) -> Check {
    let b = net.topology().num_backends();
    let comm = net.broadcast_communicator();
    let s = stream(net, &comm, TFILTER_SUM, SyncMode::WaitForAll)?;
    net.send(&s, WATCH_CLOSE, "", ()).map_err(e2s)?;
    let n: i32 = recv_as(net, &s, "%d")?;
    expect("answers before closing", n as usize, b)?;
    net.close(&s).map_err(e2s)?;
    expect("closed here", net.is_closed(&s), true)?;
    expect(
        "send on a closed stream",
        matches!(
            net.send(&s, REPLY_INT, "", ()),
            Err(TbonError::StreamClosed(_))
        ),
        true,
    )?;
    for _ in 0..b {
        let (_, p) = net.recv().map_err(e2s)?;
        let (seen, after): (String, String) = p.unpack("%s %s").map_err(|e| e.to_string())?;
        expect("the back-end saw the close", seen.as_str(), "closed")?;
        expect("and its send was refused", after.as_str(), "refused")?;
    }
    expect(
        "receive on a closed stream",
        matches!(net.recv_on(&s), Err(TbonError::StreamClosed(_))),
        true,
    )
}

fn load(net: &mut Network<'_>, lib: &str) -> Check {
    let b = net.topology().num_backends() as i32;
    let id = net.load_filter(lib, "IntegerAdd").map_err(e2s)?;
    let comm = net.broadcast_communicator();
    let s = stream(net, &comm, id, SyncMode::WaitForAll)?;
    net.send(&s, WAVES, "%d %d", (3, 4)).map_err(e2s)?;
    for i in 0..4 {
        let v: i32 = recv_as(net, &s, "%d")?;
        expect(&format!("wave {i}"), v, b * 3 * i)?;
    }
    expect("found by name", net.filter_id("IntegerAdd"), Some(id))?;
    for (lib, name, want) in [
        (
            "/nonexistent/libnothing.so",
            "IntegerAdd",
            "cannot load filter library /nonexistent/libnothing.so",
        ),
        (lib, "NoSuchFilter", "has no function 'NoSuchFilter'"),
        (lib, "NoFormatString", "not 'NoFormatString_format_string'"),
    ] {
        let e = net
            .load_filter(lib, name)
            .err()
            .map(e2s)
            .unwrap_or_default();
        if !e.contains(want) {
            return Err(format!("loading {name} from {lib}: {e}"));
        }
    }
    // A packet of another format than the filter takes fails the wave, and says so.
    net.send(&s, MIXED_FORMATS, "", ()).map_err(e2s)?;
    match net.recv_on(&s) {
        Err(TbonError::Filter { reason, .. }) if reason.contains("takes \"%d\"") => Ok(()),
        other => Err(format!("a wave of mixed formats: {other:?}")),
    }
}

fn errors(net: &mut Network<'_>) -> Check {
    let comm = net.broadcast_communicator();
    let s = stream(net, &comm, TFILTER_SUM, SyncMode::WaitForAll)?;
    let e = net.send(&s, 5, "%d", 1).err().map(e2s).unwrap_or_default();
    expect(
        "a reserved tag",
        e.as_str(),
        "tag 5 is reserved for the overlay; tags start at 100",
    )?;
    let e = net
        .send(&s, REPLY_INT, "%d %q", 1)
        .err()
        .map(e2s)
        .unwrap_or_default();
    if !e.contains("'%q'") {
        return Err(format!("a bad format string: {e}"));
    }
    let e = net
        .send(&s, REPLY_INT, "%d", 1.5f64)
        .err()
        .map(e2s)
        .unwrap_or_default();
    if !e.contains("expected %d") || !e.contains("found %lf") {
        return Err(format!("a value of the wrong type: {e}"));
    }
    expect(
        "no such stream",
        net.send(&Stream::from_id(12345), REPLY_INT, "", ())
            .is_err(),
        true,
    )?;
    expect(
        "an unknown filter",
        net.new_stream(&comm, 999, SyncMode::WaitForAll, 0).is_err(),
        true,
    )?;
    // A wave the sum filter cannot add: its error comes back on the stream, once.
    net.send(&s, MIXED_FORMATS, "", ()).map_err(e2s)?;
    let b = net.topology().num_backends();
    match net.recv_on(&s) {
        Err(TbonError::Filter { reason, .. }) if b > 1 && reason.contains("one format") => {}
        Ok(_) if b == 1 => {}
        other => return Err(format!("mixed formats: {other:?}")),
    }
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    let v: i32 = recv_as(net, &s, "%d")?;
    expect("the stream works on", v as usize, b * (b + 1) / 2)?;
    let p = Packet::new(1, REPLY_INT, "%d", 7).map_err(|e| e.to_string())?;
    let e = p
        .unpack::<String>("%s")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    expect(
        "unpack mismatch",
        e.as_str(),
        "unpacking with \"%s\", but the packet holds \"%d\"",
    )
}

fn events(net: &mut Network<'_>) -> Check {
    use std::cell::RefCell;
    use std::rc::Rc;
    let seen: Rc<RefCell<Vec<EventKind>>> = Rc::default();
    let s2 = seen.clone();
    net.register_event_callback(EventClass::Error, None, false, move |e| {
        s2.borrow_mut().push(e.kind)
    })
    .map_err(e2s)?;
    let fd = net.event_fd(EventClass::Data).map_err(e2s)?;
    let comm0 = net.broadcast_communicator();
    let quiet = stream(net, &comm0, TFILTER_SUM, SyncMode::WaitForAll)?;
    let quiet_fd = net.stream_fd(&quiet).map_err(e2s)?;
    let pending_before = net.num_events_pending();
    let comm = net.broadcast_communicator();
    let s = stream(net, &comm, TFILTER_SUM, SyncMode::WaitForAll)?;
    net.send(&s, REPLY_INT, "", ()).map_err(e2s)?;
    net.recv_on(&s).map_err(e2s)?;
    let mut pfd = [nix::poll::PollFd::new(
        // SAFETY: the network keeps the descriptor open until close_event_fd.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
        nix::poll::PollFlags::POLLIN,
    )];
    expect(
        "data descriptor readable",
        nix::poll::poll(&mut pfd, nix::poll::PollTimeout::ZERO),
        Ok(1),
    )?;
    net.clear_event_fd(EventClass::Data);
    expect(
        "cleared",
        nix::poll::poll(&mut pfd, nix::poll::PollTimeout::ZERO),
        Ok(0),
    )?;
    // The descriptor of a stream that got nothing stays quiet; after a packet it is readable.
    let mut qfd = [nix::poll::PollFd::new(
        // SAFETY: the network keeps the descriptor open until close_stream_fd.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(quiet_fd) },
        nix::poll::PollFlags::POLLIN,
    )];
    expect(
        "a quiet stream's descriptor",
        nix::poll::poll(&mut qfd, nix::poll::PollTimeout::ZERO),
        Ok(0),
    )?;
    net.send(&quiet, REPLY_INT, "", ()).map_err(e2s)?;
    net.recv_on(&quiet).map_err(e2s)?;
    expect(
        "its descriptor after a packet",
        nix::poll::poll(&mut qfd, nix::poll::PollTimeout::ZERO),
        Ok(1),
    )?;
    net.clear_stream_fd(&quiet);
    // A loop of the program's own: non-blocking receives and progress, bounded in time.
    net.send(&quiet, REPLY_INT, "", ()).map_err(e2s)?;
    let until = Instant::now() + Duration::from_secs(20);
    let polled = loop {
        if let Some(p) = net.try_recv_on(&quiet).map_err(e2s)? {
            break p;
        }
        if Instant::now() > until {
            return Err("progress: nothing came in 20 s".into());
        }
        net.progress();
    };
    expect(
        "polled sum",
        polled.unpack::<i32>("%d").map_err(|e| e.to_string())?,
        {
            let b = net.topology().num_backends() as i32;
            b * (b + 1) / 2
        },
    )?;
    expect(
        "its descriptor after the polled packet",
        nix::poll::poll(&mut qfd, nix::poll::PollTimeout::ZERO),
        Ok(1),
    )?;
    net.close_stream_fd(&quiet);
    let kinds: Vec<EventKind> = std::iter::from_fn(|| net.next_event())
        .map(|e| e.kind)
        .collect();
    expect(
        "events since attach",
        kinds.first().copied(),
        Some(EventKind::NetworkReady),
    )?;
    expect(
        "a data event",
        kinds.contains(&EventKind::PacketArrived),
        true,
    )?;
    expect("pending count was", pending_before >= 1, true)?;
    // An error event: a filter that is not loaded anywhere but here would be one; a failed
    // load is simpler.
    let _ = net.load_filter("/nonexistent/lib.so", "F");
    expect(
        "error callback",
        seen.borrow().contains(&EventKind::FilterLoadFailed),
        true,
    )?;
    net.close_event_fd(EventClass::Data);
    Ok(())
}

fn perf(net: &mut Network<'_>) -> Check {
    let b = net.topology().num_backends();
    let comm = net.broadcast_communicator();
    let s = stream(net, &comm, TFILTER_SUM, SyncMode::WaitForAll)?;
    net.enable_perf(Some(&s), Metric::NumPackets, Context::Send)
        .map_err(e2s)?;
    net.enable_perf(Some(&s), Metric::NumBytes, Context::Recv)
        .map_err(e2s)?;
    net.enable_perf(Some(&s), Metric::ElapsedSec, Context::FilterOut)
        .map_err(e2s)?;
    expect(
        "an invalid pair",
        net.enable_perf(Some(&s), Metric::ElapsedSec, Context::Send)
            .err()
            .map(e2s),
        Some("metric ELAPSED_SEC cannot be recorded in context SEND".into()),
    )?;
    net.send(&s, WAVES, "%d %d", (1, 5)).map_err(e2s)?;
    for _ in 0..5 {
        net.recv_on(&s).map_err(e2s)?;
    }
    let sent = net
        .collect_perf(&s, Metric::NumPackets, Context::Send, Aggregate::Concat)
        .map_err(e2s)?;
    let topo = net.topology().clone();
    for r in 0..b as u32 {
        let v = sent
            .get(&i64::from(r))
            .and_then(|v| v.first())
            .map(|d| d.as_f64());
        expect(&format!("packets sent by back-end {r}"), v, Some(5.0))?;
    }
    expect("every process reported", sent.len(), topo.num_nodes())?;
    let recv = net
        .collect_perf(&s, Metric::NumBytes, Context::Recv, Aggregate::Sum)
        .map_err(e2s)?;
    let (key, vals) = recv.iter().next().ok_or("no aggregated data")?;
    expect("aggregated key", *key, -(topo.num_nodes() as i64))?;
    // Every process but the root received the 8-byte command, and sent its parent 5 waves of
    // 4-byte values.
    let want = (8 + 5 * 4) * (topo.num_nodes() - 1);
    expect("bytes received in all", vals[0].as_f64(), want as f64)?;
    let again = net
        .collect_perf(&s, Metric::NumBytes, Context::Recv, Aggregate::Max)
        .map_err(e2s)?;
    expect(
        "collection resets",
        again.values().next().map(|v| v[0].as_f64()),
        Some(0.0),
    )?;
    let t = net
        .collect_perf(&s, Metric::ElapsedSec, Context::FilterOut, Aggregate::Max)
        .map_err(e2s)?;
    expect(
        "filter time recorded",
        t.values().next().is_some_and(|v| v[0].as_f64() >= 0.0),
        true,
    )?;
    net.print_perf(Some(&s), Metric::NumPackets, Context::Send)
        .map_err(e2s)
}

fn topology_queries(net: &mut Network<'_>) -> Check {
    let t = net.topology().clone();
    let st = t.stats();
    expect("root is the front-end", net.rank(), Some(t.root().rank()))?;
    expect("leaves are back-ends", t.leaves().len(), t.num_backends())?;
    expect("nodes", st.num_nodes, t.num_nodes())?;
    let dir = std::env::temp_dir().join(format!("tbon-topo-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("tree.top");
    std::fs::write(&file, t.to_topology_file()).map_err(|e| e.to_string())?;
    let back = topology_file::load(&file).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    expect("written and read back", back, t.clone())?;
    expect(
        "dot edges",
        t.to_dot().matches(" -> ").count(),
        t.num_nodes() - 1,
    )?;
    for &be in t.backends() {
        let r = t.nodes()[be].rank();
        expect("every back-end has a PE", net.pe_of(r).is_some(), true)?;
    }
    expect("singlecast stream of rank 0", net.stream(0).is_none(), true)?;
    Ok(())
}
