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

/// The whole job as a trace-event JSON object (`{"traceEvents": [...], ...}`).
pub fn json(job: &Job) -> Value {
    let mut ev: Vec<Value> = Vec::new();
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
            ev.push(json!({"ph": "M", "name": "process_name", "pid": pid,
                "args": {"name": format!("node {} ({}, {}, pid {})", h.node, h.host, h.layer, h.pid)}}));
            ev.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid,
                "args": {"sort_index": pid}}));
        }
        ev.push(
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("PE {}", h.pe)}}),
        );
        ev.push(
            json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": tid}}),
        );
        for (j, r) in t.records.iter().enumerate() {
            let ts = us(job.time(i, r));
            match r.kind {
                Kind::Begin => ev.push(json!({"ph": "B", "name": h.handler_name(r.a),
                    "cat": if r.a < converse::trace_format::USER_HANDLER_BASE { "runtime" } else { "handler" },
                    "pid": pid, "tid": tid, "ts": ts})),
                Kind::End => ev.push(json!({"ph": "E", "pid": pid, "tid": tid, "ts": ts})),
                Kind::Idle => ev.push(json!({"ph": "X", "name": "idle", "cat": "idle",
                    "pid": pid, "tid": tid, "ts": ts, "dur": us(r.b as i64)})),
                Kind::Span => ev.push(json!({"ph": "X", "name": t.string(r.a), "cat": "startup",
                    "pid": pid, "tid": tid, "ts": ts, "dur": us(r.b as i64)})),
                Kind::Mark => ev.push(json!({"ph": "i", "s": "t", "name": t.string(r.a),
                    "cat": "mark", "pid": pid, "tid": tid, "ts": ts})),
                Kind::Counter => ev.push(json!({"ph": "C", "name": t.string(r.a), "pid": pid,
                    "ts": ts, "args": {"value": r.b}})),
                Kind::Send => {
                    let node = r.a & converse::trace_format::NODE_BIT != 0;
                    let to = r.a & !converse::trace_format::NODE_BIT;
                    let args = if node {
                        json!({"to node": to, "bytes": r.b})
                    } else {
                        json!({"to": to, "bytes": r.b})
                    };
                    ev.push(json!({"ph": "X", "name": "send", "cat": "message", "pid": pid,
                        "tid": tid, "ts": ts, "dur": 0, "args": args}));
                    if let Some(k) = flow_of_send.get(&(h.pe, j)) {
                        ev.push(json!({"ph": "s", "name": "message", "cat": "message",
                            "id": k, "pid": pid, "tid": tid, "ts": ts}));
                    }
                }
                Kind::Recv => {
                    ev.push(json!({"ph": "X", "name": "recv", "cat": "message", "pid": pid,
                        "tid": tid, "ts": ts, "dur": 0, "args": {"from": r.a, "bytes": r.b}}));
                    if let Some(k) = flow_of_recv.get(&(h.pe, j)) {
                        ev.push(json!({"ph": "f", "bp": "e", "name": "message",
                            "cat": "message", "id": k, "pid": pid, "tid": tid, "ts": ts}));
                    }
                }
            }
        }
    }
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        "otherData": {
            "converse": "converse-trace",
            "pes": job.traces.len(),
            "messages_matched": job.flows.matched.len(),
            "sends_unmatched": job.flows.unmatched_sends.len(),
            "receives_unmatched": job.flows.unmatched_recvs.len(),
            "clock": if job.wall_clock { "wall clock (several hosts)" } else { "CLOCK_MONOTONIC" },
            "warnings": job.warnings,
        }
    })
}
