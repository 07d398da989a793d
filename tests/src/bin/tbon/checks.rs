//! The front-end's checks of the `tbon` scenarios: for each, what it asks the back-ends (whose
//! answers are in `back_end` in `tbon.rs`) and what it must get back.

use super::{
    e2s, recv_as, stream, Check, FORMAT_SEEN, MIXED_FORMATS, REPLY_ARRAY, REPLY_DOUBLE, REPLY_INT,
    REPLY_LATE, REPLY_STRING, SINGLECAST, WATCH_CLOSE, WAVES,
};
use converse_tbon::{
    self as tbon, topology_file, Aggregate, Context, EventClass, EventKind, FilterType, Metric,
    Network, Packet, Stream, SyncMode, TbonError, TFILTER_ARRAY_CONCAT, TFILTER_AVG, TFILTER_MAX,
    TFILTER_MIN, TFILTER_NULL, TFILTER_SUM,
};
use std::time::{Duration, Instant};

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Check {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

pub(super) fn reduce(net: &mut Network<'_>) -> Check {
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

pub(super) fn user_filter_shape(net: &mut Network<'_>) -> Check {
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

pub(super) fn sync(net: &mut Network<'_>) -> Check {
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

pub(super) fn hetero(net: &mut Network<'_>) -> Check {
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

pub(super) fn subset(net: &mut Network<'_>) -> Check {
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

pub(super) fn close(net: &mut Network<'_>) -> Check {
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

pub(super) fn load(net: &mut Network<'_>, lib: &str) -> Check {
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

pub(super) fn errors(net: &mut Network<'_>) -> Check {
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

pub(super) fn events(net: &mut Network<'_>) -> Check {
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

pub(super) fn perf(net: &mut Network<'_>) -> Check {
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

pub(super) fn topology_queries(net: &mut Network<'_>) -> Check {
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
