//! Traced jobs (`+trace-dir`, `+stats`) on the in-process, TCP and SI layers, checked from
//! the files they leave: every message's send matched by its receive with the same bytes,
//! handler names as the program registered them, the Chrome / Perfetto JSON valid with the
//! events it should hold, and, after another node is killed, every survivor's file whole.
//! Each job is bounded in time (the launcher kills it).

use converse_tests::{Launcher, Outcome, Running};
use converse_trace::{chrome, summary, Job, Kind, Trace};
use std::path::{Path, PathBuf};
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

/// Longest a job may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Pings each PE of `conformance traced` sends to every other PE (its `PINGS`).
const PINGS: usize = 20;

/// A fresh directory for one test's trace.
fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trace-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn charmrun(machine: &'static str) -> Launcher {
    Launcher::Charmrun {
        machine,
        opts: vec![],
    }
}

/// Run `conformance traced` on `pes` PEs, traced into `dir`, with `+stats`.
fn traced(launcher: &Launcher, pes: usize, dir: &Path, more: &[&str]) -> Outcome {
    let d = dir.display().to_string();
    let mut args = vec!["traced", "0", "+trace-dir", &d, "+stats"];
    args.extend_from_slice(more);
    launcher.run(PROGRAM, pes, &args, LIMIT)
}

/// Runs of each handler name in `t`.
fn runs_of(t: &Trace, name: &str) -> usize {
    t.records
        .iter()
        .filter(|r| r.kind == Kind::Begin && t.header.handler_name(r.a) == name)
        .count()
}

/// What every PE of a whole `traced` job must show in its trace.
fn check_pe(t: &Trace, pes: usize, layer: &str) {
    let pe = t.header.pe;
    assert_eq!(t.torn_bytes, 0, "PE {pe}: a whole file");
    assert_eq!(t.header.num_pes as usize, pes);
    assert_eq!(t.header.layer, layer, "PE {pe}");
    assert!(
        t.header.handlers.iter().any(|h| h == "trace.ping")
            && t.header.handlers.iter().any(|h| h == "trace.pong"),
        "PE {pe}: handler names {:?}",
        t.header.handlers
    );
    // Every ping it got ran its handler, and every pong it was owed.
    assert_eq!(runs_of(t, "trace.ping"), PINGS * (pes - 1), "PE {pe}");
    assert_eq!(runs_of(t, "trace.pong"), PINGS * (pes - 1), "PE {pe}");
    // Handlers are named: every id is the runtime's or one the program registered.
    for r in t.records.iter().filter(|r| r.kind == Kind::Begin) {
        let name = t.header.handler_name(r.a);
        assert!(
            name.starts_with("converse.") || name.starts_with("trace."),
            "PE {pe}: handler {} named {name}",
            r.a
        );
    }
    // Start-up is marked, and a whole trace ends with the PE's exit.
    let marks: Vec<&str> = t
        .records
        .iter()
        .filter(|r| r.kind == Kind::Mark)
        .map(|r| t.string(r.a))
        .collect();
    assert!(
        marks.iter().any(|m| m.starts_with("start-up check passed")),
        "PE {pe}: {marks:?}"
    );
    assert!(
        t.records
            .iter()
            .any(|r| r.kind == Kind::Span && t.string(r.a).starts_with("boot (")),
        "PE {pe}: the layer's boot"
    );
    // Begins and ends pair up, and time never goes back (an idle period is recorded when it
    // ends, stamped with its start, as is a user bracket; a boot span began before the PE's
    // clock).
    let begins = t.records.iter().filter(|r| r.kind == Kind::Begin).count();
    let ends = t.records.iter().filter(|r| r.kind == Kind::End).count();
    assert_eq!(begins, ends, "PE {pe}");
    let timed: Vec<u64> = t
        .records
        .iter()
        .filter(|r| !matches!(r.kind, Kind::Span | Kind::Idle | Kind::Bracket))
        .map(|r| r.t)
        .collect();
    assert!(timed.windows(2).all(|w| w[0] <= w[1]), "PE {pe}: in order");
}

/// Every send of `job` has its receive, with the bytes the sender recorded.
fn check_flows(job: &Job) {
    let f = &job.flows;
    assert!(
        f.unmatched_sends.is_empty() && f.unmatched_recvs.is_empty(),
        "unmatched sends {:?}, receives {:?}",
        f.unmatched_sends,
        f.unmatched_recvs
    );
    for m in &f.matched {
        let s = &job.traces[m.src as usize].records[m.send];
        let r = &job.traces[m.dst as usize].records[m.recv];
        assert_eq!((s.kind, r.kind), (Kind::Send, Kind::Recv));
        assert_eq!(s.b, r.b, "PE {} → PE {}: bytes", m.src, m.dst);
    }
}

/// The JSON the viewers open, through a JSON parser: a track per PE, every handler slice
/// named, a flow start and finish per matched message.
fn check_json(job: &Job) {
    let text = chrome::json(job).to_string();
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let ev = v["traceEvents"].as_array().expect("traceEvents");
    let count = |ph: &str| ev.iter().filter(|e| e["ph"] == ph).count();
    let tracks: std::collections::BTreeSet<u64> = ev
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["tid"].as_u64())
        .collect();
    // A track per PE, and one per communication thread after them (`num_pes + node`).
    let (pes, threads) = (job.traces.len() as u64, job.comm.len() as u64);
    assert_eq!(tracks, (0..pes + threads).collect());
    let matched = job.flows.matched.len();
    assert_eq!((count("s"), count("f")), (matched, matched));
    assert_eq!(count("B"), count("E"));
    let pings = ev
        .iter()
        .filter(|e| e["ph"] == "B" && e["name"] == "trace.ping")
        .count();
    let pes = job.traces.len();
    assert_eq!(pings, PINGS * pes * (pes - 1));
    // Flow ends join the send and the receive of one message: same id, a later or equal time.
    let mut starts = std::collections::HashMap::new();
    for e in ev.iter().filter(|e| e["ph"] == "s") {
        starts.insert(e["id"].as_u64(), e["ts"].as_f64().unwrap_or(f64::NAN));
    }
    for e in ev.iter().filter(|e| e["ph"] == "f") {
        let from = starts.get(&e["id"].as_u64()).copied().expect("flow start");
        // Clocks of one host are one clock: a message is received after it was sent.
        assert!(e["ts"].as_f64().unwrap_or(f64::NAN) >= from, "{e}");
    }
}

/// A whole traced job: its trace, and `+stats` on stderr.
fn check_job(o: &Outcome, dir: &Path, pes: usize, layer: &str) -> Job {
    assert_eq!(o.code, Some(0), "{o}");
    let job = Job::load(dir).expect("loads");
    assert!(job.warnings.is_empty(), "{:?}", job.warnings);
    assert_eq!(job.traces.len(), pes);
    for t in &job.traces {
        check_pe(t, pes, layer);
    }
    check_flows(&job);
    check_json(&job);
    for t in &job.traces {
        let last_mark = t.records.iter().rev().find(|r| r.kind == Kind::Mark);
        assert_eq!(
            last_mark.map(|r| t.string(r.a)),
            Some("exit"),
            "PE {}",
            t.header.pe
        );
    }
    // `+stats`: a line per PE whose counts are the trace's, and one per node.
    for t in &job.traces {
        let sent = t.records.iter().filter(|r| r.kind == Kind::Send).count();
        let needle = format!(
            "converse stats: PE {} (node {}): sent {sent} messages",
            t.header.pe, t.header.node
        );
        assert!(o.stderr.contains(&needle), "{needle}: {o}");
    }
    let nodes = o.stderr.matches("converse stats: node ").count();
    assert_eq!(nodes, job.traces[0].header.num_nodes as usize, "{o}");
    let h = summary::handler_times(&job);
    assert!(h
        .iter()
        .any(|h| h.name == "trace.ping" && h.runs as usize == PINGS * pes * (pes - 1)));
    // The program's bracket and event, once on every PE.
    let user = converse_trace::profile::user_stats(&job);
    let find = |name: &str| user.iter().find(|u| u.name == name);
    let exchange = find("trace.exchange").expect("the bracket");
    assert!(exchange.bracket && exchange.count as usize == pes && exchange.pes as usize == pes);
    assert!(exchange.total_ns > 0);
    let answered = find("trace.all-answered").expect("the event");
    assert!(!answered.bracket && answered.count as usize == pes);
    job
}

#[test]
fn a_traced_local_job_matches_every_send_with_its_receive() {
    let dir = fresh_dir("local");
    let o = traced(&Launcher::Direct { machine: "local" }, 4, &dir, &[]);
    check_job(&o, &dir, 4, "local");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_traced_tcp_job_matches_every_send_with_its_receive() {
    let dir = fresh_dir("tcp");
    let o = traced(&charmrun("tcp"), 4, &dir, &[]);
    let job = check_job(&o, &dir, 4, "tcp");
    assert!(o.stderr.contains("tcp.strangers_dropped=0"), "{o}");
    // The layer's counters, as they changed: each PE drives its node's layer here.
    for t in &job.traces {
        let connections = t
            .records
            .iter()
            .filter(|r| r.kind == Kind::Counter && t.string(r.a) == "tcp.connections")
            .map(|r| r.b)
            .max();
        assert_eq!(
            connections,
            Some(3),
            "PE {}: connected to 3 peers",
            t.header.pe
        );
    }
    // ... and as counter tracks in the JSON, one per node.
    let v: serde_json::Value =
        serde_json::from_str(&chrome::json(&job).to_string()).expect("valid JSON");
    let nodes: std::collections::BTreeSet<u64> = v["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "tcp.connections")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(nodes, (0..4).collect());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_traced_si_job_matches_every_send_with_its_receive() {
    let dir = fresh_dir("si");
    let o = traced(&charmrun("si"), 4, &dir, &[]);
    check_job(&o, &dir, 4, "si");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_traced_smp_job_records_its_workers() {
    // Two processes of two PEs each: workers record what reaches their inboxes.
    let dir = fresh_dir("smp");
    let smp = Launcher::Smp {
        inner: Box::new(charmrun("tcp")),
        ppn: 2,
    };
    let o = traced(&smp, 4, &dir, &[]);
    let job = check_job(&o, &dir, 4, "tcp");
    assert_eq!(job.traces[3].header.node, 1);
    // Each node's communication thread left its own trace: turns that moved messages (each
    // node sent the other 2 × 2 × PINGS pings and as many pongs), its waits, the layer's
    // counters, and its exit.
    assert_eq!(job.comm.len(), 2, "comm.0.bin and comm.1.bin");
    for (node, t) in job.comm.iter().enumerate() {
        assert_eq!(t.header.pe as usize, node);
        assert_eq!(t.torn_bytes, 0);
        let turns = t.records.iter().filter(|r| r.kind == Kind::Span).count();
        assert!(turns > 0, "node {node}: turns that moved messages");
        assert!(
            t.records
                .iter()
                .any(|r| r.kind == Kind::Counter && t.string(r.a) == "tcp.connections"),
            "node {node}: the layer's counters"
        );
        let last_mark = t.records.iter().rev().find(|r| r.kind == Kind::Mark);
        assert_eq!(last_mark.map(|r| t.string(r.a)), Some("exit"));
    }
    let util =
        converse_trace::profile::comm_utilization(&job, converse_trace::profile::Bins::of(&job, 1));
    assert!(util.iter().all(|u| u[0] > 0.0 && u[0] <= 1.0), "{util:?}");
    let page = converse_trace::report::html(&job);
    assert!(
        page.contains("node 1 comm"),
        "a track and a utilization row"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_crashing_smp_job_leaves_readable_communication_thread_traces() {
    // PE 3 panics: its node aborts the job; both nodes' communication threads wrote their
    // header at once and the aborting one its reason.
    let dir = fresh_dir("smp-crash");
    let smp = Launcher::Smp {
        inner: Box::new(charmrun("tcp")),
        ppn: 2,
    };
    let d = dir.display().to_string();
    let o = smp.run(PROGRAM, 4, &["panic", "+trace-dir", &d], LIMIT);
    assert_ne!(o.code, Some(0), "{o}");
    let job = Job::load(&dir).expect("loads");
    assert_eq!(job.comm.len(), 2, "{:?}", job.warnings);
    let t = &job.comm[1];
    let marks: Vec<&str> = (t.records.iter())
        .filter(|r| r.kind == Kind::Mark)
        .map(|r| t.string(r.a))
        .collect();
    assert!(
        marks
            .iter()
            .any(|m| m.starts_with("abort: ") && m.contains("panicked")),
        "{marks:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Run `conformance traced 30` (PE 0 ends the job 30 s after all is exchanged), kill PE
/// `victim`'s process once every PE is done and idle, and return the job's outcome.
fn kill_when_idle(
    launcher: &Launcher,
    pes: usize,
    victim: usize,
    dir: &Path,
    more: &[&str],
) -> Outcome {
    let d = dir.display().to_string();
    let mut args = vec!["traced", "30", "+trace-dir", &d];
    args.extend_from_slice(more);
    let mut job =
        Running::start(&mut launcher.command(PROGRAM, pes, &args), LIMIT).expect("starts");
    assert!(
        job.wait_for_stdout_lines("conformance traced: PE", pes, Duration::from_secs(30)),
        "{}",
        job.stdout_so_far()
    );
    // Each PE writes what it recorded when it goes idle: wait until the files, read together,
    // hold every message of the exchange at both ends (a file part-way written reads as torn).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let traces = loop {
        let read: Option<Vec<Trace>> = (0..pes)
            .map(|pe| Trace::read(&dir.join(format!("trace.{pe}.bin"))).ok())
            .collect();
        if let Some(all) = read {
            let flows = Job::new(all.clone()).flows;
            if flows.unmatched_sends.is_empty() && flows.unmatched_recvs.is_empty() {
                break all;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the traces never held the whole exchange: {}",
            job.stdout_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = traces
        .iter()
        .find(|t| t.header.pe as usize == victim)
        .expect("the victim's trace")
        .header
        .pid;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    job.finish()
}

/// The survivors' traces of a job on `layer` whose node `victim` was killed once idle: each
/// whole, with every message it exchanged with another survivor matched.
fn check_survivors(dir: &Path, layer: &str, pes: usize, victim: usize) -> Vec<Trace> {
    let survivors: Vec<Trace> = (0..pes)
        .filter(|&pe| pe != victim)
        .map(|pe| Trace::read(&dir.join(format!("trace.{pe}.bin"))).expect("a survivor's file"))
        .collect();
    for t in &survivors {
        check_pe(t, pes, layer);
    }
    // Among survivors every message is there at both ends; the victim's may be lost. An
    // unmatched record names its PE and index; its `a` is the peer.
    let job = Job::new(survivors.clone());
    let among = |unmatched: &[(u32, usize)]| -> Vec<(u32, usize)> {
        unmatched
            .iter()
            .copied()
            .filter(|&(pe, i)| {
                survivors
                    .iter()
                    .find(|t| t.header.pe == pe)
                    .is_some_and(|t| t.records[i].a as usize != victim)
            })
            .collect()
    };
    let sends = among(&job.flows.unmatched_sends);
    assert!(
        sends.is_empty(),
        "sends among survivors unmatched: {sends:?}"
    );
    let recvs = among(&job.flows.unmatched_recvs);
    assert!(
        recvs.is_empty(),
        "receives among survivors unmatched: {recvs:?}"
    );
    survivors
}

#[test]
fn survivors_files_are_whole_after_a_node_is_killed_on_tcp() {
    let dir = fresh_dir("crash-tcp");
    let o = kill_when_idle(&charmrun("tcp"), 4, 2, &dir, &[]);
    assert_ne!(o.code, Some(0), "the death ends the job: {o}");
    assert!(!o.timed_out, "{o}");
    check_survivors(&dir, "tcp", 4, 2);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn survivors_files_are_whole_after_a_node_is_killed_on_si() {
    let dir = fresh_dir("crash-si");
    let o = kill_when_idle(&charmrun("si"), 4, 1, &dir, &[]);
    assert_ne!(o.code, Some(0), "the death ends the job: {o}");
    assert!(!o.timed_out, "{o}");
    check_survivors(&dir, "si", 4, 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn in_report_mode_survivors_trace_the_death_and_their_exit() {
    // The job goes on without the victim: each survivor's trace ends with its exit, and
    // says when it learnt of the death.
    let dir = fresh_dir("report-tcp");
    let o = kill_when_idle(&charmrun("tcp"), 4, 3, &dir, &["+set", "faults=report"]);
    assert_eq!(o.code, Some(0), "the job survives: {o}");
    for t in check_survivors(&dir, "tcp", 4, 3) {
        let marks: Vec<&str> = t
            .records
            .iter()
            .filter(|r| r.kind == Kind::Mark)
            .map(|r| t.string(r.a))
            .collect();
        assert!(
            marks.iter().any(|m| m.starts_with("node 3 died")),
            "PE {}: {marks:?}",
            t.header.pe
        );
        assert_eq!(
            marks.last().copied(),
            Some("exit"),
            "PE {}: {marks:?}",
            t.header.pe
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn stats_on_udp_name_the_layers_counters() {
    // Without +trace: nothing written, the summary alone.
    let o = charmrun("udp").run(PROGRAM, 2, &["traced", "0", "+stats"], LIMIT);
    assert_eq!(o.code, Some(0), "{o}");
    for node in 0..2 {
        let line = o
            .stderr
            .lines()
            .find(|l| l.starts_with(&format!("converse stats: node {node} (udp):")))
            .unwrap_or_else(|| panic!("node {node}'s counters: {o}"));
        for c in [
            "udp.retransmits=",
            "udp.duplicates=",
            "udp.strangers_dropped=",
        ] {
            assert!(line.contains(c), "{c}: {line}");
        }
        assert!(
            o.stderr
                .contains(&format!("converse stats: PE {node} (node {node}): sent ")),
            "{o}"
        );
    }
}
