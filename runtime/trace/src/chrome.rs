//! The Chrome trace-event format (JSON), which <https://ui.perfetto.dev> and
//! `chrome://tracing` open: one process per node, one thread (track) per PE; handlers are
//! slices (`B`/`E`) named by their handler, idle periods and the layer's boot are complete
//! events (`X`), each send and receive is a zero-length slice with a flow (`s` → `f`) joining
//! the two, the layer's counters are counter tracks (`C`) per node, and notable events
//! (start-up, abort, exit) are instants (`i`). Times are microseconds from the job's first
//! event.

use crate::{Job, Kind};
use serde_json::{json, Value};
use std::collections::HashMap;

fn us(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

/// The whole job as a trace-event JSON object (`{"traceEvents": [...], ...}`), in memory:
/// some hundred bytes an event, so [`write()`] streams the same text for a big job.
pub fn json(job: &Job) -> Value {
    let mut ev: Vec<Value> = Vec::new();
    // Pushing cannot fail.
    let _ = events(job, |e| {
        ev.push(e);
        Ok(())
    });
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        "otherData": other_data(job),
    })
}

/// Write [`json()`]'s object to `out` one event at a time: memory stays the job's, however many
/// events it makes (a JSON value per event costs ten times its text).
///
/// # Errors
/// What writing to `out` returns.
pub fn write(job: &Job, out: &mut impl std::io::Write) -> std::io::Result<()> {
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(&mut *out, &other_data(job))?;
    out.write_all(b",\"traceEvents\":[")?;
    let mut first = true;
    events(job, |e| {
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        // An I/O error comes back as itself (a broken pipe stays one).
        serde_json::to_writer(&mut *out, &e).map_err(std::io::Error::from)
    })?;
    out.write_all(b"]}")
}

/// The summary under `otherData`.
fn other_data(job: &Job) -> Value {
    json!({
        "converse": "converse-trace",
        "pes": job.traces.len(),
        "messages_matched": job.flows.matched.len(),
        "sends_unmatched": job.flows.unmatched_sends.len(),
        "receives_unmatched": job.flows.unmatched_recvs.len(),
        "clock": if job.wall_clock { "wall clock (several hosts)" } else { "CLOCK_MONOTONIC" },
        "warnings": job.warnings,
    })
}

/// Every event of the job, in order, to `emit`; stops at its first error.
fn events(job: &Job, mut emit: impl FnMut(Value) -> std::io::Result<()>) -> std::io::Result<()> {
    // Flow ids: the matched message's index, looked up from either end.
    let mut flow_of_send: HashMap<(u32, usize), usize> = HashMap::new();
    let mut flow_of_recv: HashMap<(u32, usize), usize> = HashMap::new();
    for (k, f) in job.flows.matched.iter().enumerate() {
        flow_of_send.insert((f.src, f.send), k);
        flow_of_recv.insert((f.dst, f.recv), k);
    }
    let mut nodes_named = std::collections::BTreeSet::new();
    for (i, t) in job.traces.iter().enumerate() {
        let h = &t.header;
        let (pid, tid) = (h.node, h.pe);
        if nodes_named.insert(pid) {
            emit(json!({"ph": "M", "name": "process_name", "pid": pid,
                "args": {"name": format!("node {} ({}, {}, pid {})", h.node, h.host, h.layer, h.pid)}}))?;
            emit(json!({"ph": "M", "name": "process_sort_index", "pid": pid,
                "args": {"sort_index": pid}}))?;
        }
        emit(
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("PE {}", h.pe)}}),
        )?;
        emit(
            json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": tid}}),
        )?;
        for (j, r) in t.records.iter().enumerate() {
            let ts = us(job.time(i, r));
            match r.kind {
                Kind::Begin => emit(json!({"ph": "B", "name": h.handler_name(r.a),
                    "cat": if r.a < converse::trace_format::USER_HANDLER_BASE { "runtime" } else { "handler" },
                    "pid": pid, "tid": tid, "ts": ts}))?,
                Kind::End => emit(json!({"ph": "E", "pid": pid, "tid": tid, "ts": ts}))?,
                Kind::Idle => emit(json!({"ph": "X", "name": "idle", "cat": "idle",
                    "pid": pid, "tid": tid, "ts": ts, "dur": us(r.b as i64)}))?,
                Kind::Span => emit(json!({"ph": "X", "name": t.string(r.a), "cat": "startup",
                    "pid": pid, "tid": tid, "ts": ts, "dur": us(r.b as i64)}))?,
                Kind::Mark => emit(json!({"ph": "i", "s": "t", "name": t.string(r.a),
                    "cat": "mark", "pid": pid, "tid": tid, "ts": ts}))?,
                Kind::Event => emit(json!({"ph": "i", "s": "t", "name": t.string(r.a),
                    "cat": "user", "pid": pid, "tid": tid, "ts": ts}))?,
                // An async slice, a track of its own: a bracket need not nest with handlers.
                Kind::Bracket => {
                    let id = format!("{}.{j}", h.pe);
                    emit(json!({"ph": "b", "name": t.string(r.a), "cat": "user",
                        "id": id, "pid": pid, "tid": tid, "ts": ts}))?;
                    emit(json!({"ph": "e", "name": t.string(r.a), "cat": "user",
                        "id": id, "pid": pid, "tid": tid, "ts": us(job.time(i, r) + r.b as i64)}))?;
                }
                Kind::Counter => emit(json!({"ph": "C", "name": t.string(r.a), "pid": pid,
                    "ts": ts, "args": {"value": r.b}}))?,
                Kind::Send => {
                    let node = r.a & converse::trace_format::NODE_BIT != 0;
                    let to = r.a & !converse::trace_format::NODE_BIT;
                    let args = if node {
                        json!({"to node": to, "bytes": r.b})
                    } else {
                        json!({"to": to, "bytes": r.b})
                    };
                    emit(
                        json!({"ph": "X", "name": "send", "cat": "message", "pid": pid,
                        "tid": tid, "ts": ts, "dur": 0, "args": args}),
                    )?;
                    if let Some(k) = flow_of_send.get(&(h.pe, j)) {
                        emit(json!({"ph": "s", "name": "message", "cat": "message",
                            "id": k, "pid": pid, "tid": tid, "ts": ts}))?;
                    }
                }
                Kind::Recv => {
                    emit(
                        json!({"ph": "X", "name": "recv", "cat": "message", "pid": pid,
                        "tid": tid, "ts": ts, "dur": 0, "args": {"from": r.a, "bytes": r.b}}),
                    )?;
                    if let Some(k) = flow_of_recv.get(&(h.pe, j)) {
                        emit(json!({"ph": "f", "bp": "e", "name": "message",
                            "cat": "message", "id": k, "pid": pid, "tid": tid, "ts": ts}))?;
                    }
                }
            }
        }
    }
    // Communication threads: a thread of their node after its PEs.
    for (i, t) in job.comm.iter().enumerate() {
        let (pid, tid) = (
            t.header.pe,
            u64::from(t.header.num_pes) + u64::from(t.header.pe),
        );
        emit(
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("node {pid} comm thread")}}),
        )?;
        emit(
            json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": tid}}),
        )?;
        for r in &t.records {
            let ts = us(job.comm_time(i, r));
            match r.kind {
                Kind::Span => emit(json!({"ph": "X", "name": t.string(r.a), "cat": "comm",
                    "pid": pid, "tid": tid, "ts": ts, "dur": us(r.b as i64)}))?,
                Kind::Idle => emit(json!({"ph": "X", "name": "idle", "cat": "idle",
                    "pid": pid, "tid": tid, "ts": ts, "dur": us(r.b as i64)}))?,
                Kind::Counter => emit(json!({"ph": "C", "name": t.string(r.a), "pid": pid,
                    "ts": ts, "args": {"value": r.b}}))?,
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, Trace};
    use converse::trace_format::Header;

    fn trace(pe: u32, records: Vec<Record>) -> Trace {
        Trace {
            header: Header::sample(pe, 2, &["ping"]),
            strings: vec!["go".into()],
            records,
            torn_bytes: 0,
        }
    }

    fn rec(t: u64, kind: Kind, a: u32, b: u64) -> Record {
        Record { t, kind, a, b }
    }

    /// A writer that takes `room` bytes, then fails as a closed pipe does.
    struct Pipe {
        taken: Vec<u8>,
        room: usize,
    }

    impl std::io::Write for Pipe {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.taken.len() >= self.room {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            let n = b.len().min(self.room - self.taken.len());
            self.taken.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn job() -> Job {
        Job::new(vec![
            trace(
                0,
                vec![
                    rec(1, Kind::Begin, 16, 0),
                    rec(2, Kind::Send, 1, 8),
                    rec(3, Kind::End, 0, 0),
                    rec(4, Kind::Mark, 0, 0),
                ],
            ),
            trace(1, vec![rec(5, Kind::Recv, 0, 8), rec(6, Kind::Idle, 0, 9)]),
        ])
    }

    #[test]
    fn the_streamed_json_is_the_json_and_a_write_error_comes_back() {
        let job = job();
        let mut out = Vec::new();
        write(&job, &mut out).expect("writes");
        let streamed: Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(streamed, json(&job));
        // 8 names and sort indices, 6 records, a flow start and end.
        assert_eq!(streamed["traceEvents"].as_array().map(Vec::len), Some(16));
        // A reader gone part-way: the error is the pipe's, for the caller to see.
        let mut pipe = Pipe {
            taken: Vec::new(),
            room: out.len() / 2,
        };
        let e = write(&job, &mut pipe).expect_err("the pipe closed");
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
        assert_eq!(pipe.taken, out[..out.len() / 2]);
    }
}
