//! What a traced job adds up to: handler slices, time per handler, idle time per PE, and the
//! PE×PE communication matrix. Shared by the report and the tests.

use crate::{Job, Kind};
use std::collections::BTreeMap;

/// A time as a person reads it: `812 ns`, `43.2 µs`, `4.01 ms`, `1.30 s`.
pub fn human_time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// `n` and a noun, singular for 1: `1 run`, `3 runs`, `1 PE`.
pub fn plural(n: impl Into<u64>, one: &str) -> String {
    match n.into() {
        1 => format!("1 {one}"),
        n => format!("{n} {one}s"),
    }
}

/// One run of a handler on a PE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// Index of the PE's trace in [`Job::traces`].
    pub trace: usize,
    /// The handler's id.
    pub handler: u32,
    /// Begin and end on the job's time line, ns.
    pub start: i64,
    /// End, ns.
    pub end: i64,
    /// Nesting depth: 0 for a handler the scheduler ran, more for one run by a nested
    /// scheduler loop inside another handler.
    pub depth: u32,
}

/// Every handler run of every PE. A handler still running when the trace ends (the process
/// was killed) ends at the trace's last event.
pub fn slices(job: &Job) -> Vec<Slice> {
    let mut out = Vec::new();
    for (i, t) in job.traces.iter().enumerate() {
        let mut open: Vec<(u32, i64)> = Vec::new();
        let mut last = 0;
        for r in &t.records {
            let at = job.time(i, r);
            last = last.max(at);
            match r.kind {
                Kind::Begin => open.push((r.a, at)),
                Kind::End => {
                    if let Some((handler, start)) = open.pop() {
                        out.push(Slice {
                            trace: i,
                            handler,
                            start,
                            end: at,
                            depth: open.len() as u32,
                        });
                    }
                }
                _ => {}
            }
        }
        while let Some((handler, start)) = open.pop() {
            out.push(Slice {
                trace: i,
                handler,
                start,
                end: last,
                depth: open.len() as u32,
            });
        }
    }
    out
}

/// Time spent in one handler, over the whole job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerTime {
    /// Its name.
    pub name: String,
    /// Runs.
    pub runs: u64,
    /// Time in it, ns, less the handlers nested inside (self time).
    pub self_ns: u64,
}

/// Time per handler, the largest first.
pub fn handler_times(job: &Job) -> Vec<HandlerTime> {
    let mut by: std::collections::BTreeMap<String, HandlerTime> = Default::default();
    for (i, t) in job.traces.iter().enumerate() {
        // (handler, start, time in handlers nested inside)
        let mut open: Vec<(u32, i64, i64)> = Vec::new();
        for r in &t.records {
            let at = job.time(i, r);
            match r.kind {
                Kind::Begin => open.push((r.a, at, 0)),
                Kind::End => {
                    let Some((h, start, nested)) = open.pop() else {
                        continue;
                    };
                    let d = at - start;
                    if let Some(parent) = open.last_mut() {
                        parent.2 += d;
                    }
                    let name = t.header.handler_name(h);
                    let e = by.entry(name.clone()).or_insert(HandlerTime {
                        name,
                        runs: 0,
                        self_ns: 0,
                    });
                    e.runs += 1;
                    e.self_ns += (d - nested).max(0) as u64;
                }
                // Idle inside a handler (a nested scheduler loop that found nothing to do) is
                // not its time, as `+stats` and the utilization view count it.
                Kind::Idle => {
                    if let Some(top) = open.last_mut() {
                        top.2 += r.b as i64;
                    }
                }
                _ => {}
            }
        }
    }
    let mut v: Vec<HandlerTime> = by.into_values().collect();
    v.sort_by(|a, b| b.self_ns.cmp(&a.self_ns).then(a.name.cmp(&b.name)));
    v
}

/// Idle time of each trace, ns.
pub fn idle(job: &Job) -> Vec<u64> {
    job.traces
        .iter()
        .map(|t| {
            t.records
                .iter()
                .filter(|r| r.kind == Kind::Idle)
                .map(|r| r.b)
                .sum()
        })
        .collect()
}

/// Messages and bytes from PE to PE, as the senders recorded them (node messages left out).
/// Sparse, over the PEs the traces name: its size follows the records, not the job's size
/// a header claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matrix {
    /// The PEs of its rows and columns, ascending: those with a trace, and those sent to.
    pub pes: Vec<u32>,
    /// `(from, to)` → (messages, bytes), for the pairs that exchanged something.
    pub pairs: BTreeMap<(u32, u32), (u64, u64)>,
}

impl Matrix {
    /// With at most `max` cells a side: PEs per cell (consecutive PEs of [`Matrix::pes`]
    /// share one when there are more than `max`) and cells a side.
    pub fn grid(&self, max: usize) -> (usize, usize) {
        let n = self.pes.len();
        let per = n.div_ceil(max.max(1)).max(1);
        (per, n.div_ceil(per))
    }

    /// The cells of that grid, `cells[from][to]` = (messages, bytes) over their PEs.
    pub fn cells(&self, max: usize) -> Vec<Vec<(u64, u64)>> {
        let (per, side) = self.grid(max);
        let mut m = vec![vec![(0u64, 0u64); side]; side];
        let cell = |pe: u32| self.pes.binary_search(&pe).ok().map(|i| i / per);
        for (&(from, to), &(msgs, bytes)) in &self.pairs {
            let c = cell(from)
                .zip(cell(to))
                .and_then(|(r, c)| m.get_mut(r).and_then(|row| row.get_mut(c)));
            if let Some(c) = c {
                c.0 += msgs;
                c.1 += bytes;
            }
        }
        m
    }
}

/// The job's communication [`Matrix`]. A send to a PE its job cannot have (a damaged record)
/// is left out.
pub fn matrix(job: &Job) -> Matrix {
    let mut pairs: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    for t in &job.traces {
        for r in &t.records {
            if r.kind == Kind::Send
                && r.a & converse::trace_format::NODE_BIT == 0
                && r.a < t.header.num_pes
            {
                let c = pairs.entry((t.header.pe, r.a)).or_default();
                c.0 += 1;
                c.1 += r.b;
            }
        }
    }
    let mut pes: Vec<u32> = job.traces.iter().map(|t| t.header.pe).collect();
    pes.extend(pairs.keys().map(|&(_, to)| to));
    pes.sort_unstable();
    pes.dedup();
    Matrix { pes, pairs }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, Trace};
    use converse::trace_format::{Header, NODE_BIT};

    pub(crate) fn trace(pe: u32, records: Vec<Record>) -> Trace {
        Trace {
            header: Header::sample(pe, 2, &["outer", "inner"]),
            strings: vec![],
            records,
            torn_bytes: 0,
        }
    }

    fn rec(t: u64, kind: Kind, a: u32, b: u64) -> Record {
        Record { t, kind, a, b }
    }

    #[test]
    fn self_time_leaves_out_nested_handlers_and_slices_nest() {
        let t = trace(
            0,
            vec![
                rec(0, Kind::Begin, 16, 0),
                rec(10, Kind::Begin, 17, 0),
                rec(40, Kind::End, 0, 0),
                rec(100, Kind::End, 0, 0),
                // A handler still running when the trace ends (the process was killed).
                rec(200, Kind::Begin, 17, 0),
                rec(250, Kind::Idle, 0, 5),
            ],
        );
        let job = Job::new(vec![t]);
        let h = handler_times(&job);
        assert_eq!(
            h.iter()
                .map(|h| (h.name.as_str(), h.runs, h.self_ns))
                .collect::<Vec<_>>(),
            [("outer", 1, 70), ("inner", 1, 30)]
        );
        let s = slices(&job);
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].handler, s[0].depth), (17, 1));
        assert_eq!((s[2].start, s[2].end), (200, 250), "cut at the last event");
        assert_eq!(idle(&job), [5]);
    }

    #[test]
    fn the_matrix_counts_pe_messages_and_leaves_node_messages_out() {
        let t0 = trace(
            0,
            vec![
                rec(1, Kind::Send, 1, 100),
                rec(2, Kind::Send, 1, 50),
                rec(3, Kind::Send, NODE_BIT | 1, 7),
                rec(4, Kind::Send, 9, 7),
            ],
        );
        let t1 = trace(1, vec![rec(5, Kind::Send, 0, 8)]);
        let m = matrix(&Job::new(vec![t1, t0]));
        assert_eq!(m.pes, [0, 1]);
        assert_eq!(m.cells(128), [[(0, 0), (2, 150)], [(1, 8), (0, 0)]]);
    }

    #[test]
    fn the_matrix_follows_the_records_not_the_size_a_header_claims() {
        // A job of 4 billion PEs as its header says, of which one traced PE sent to one other.
        let mut t = trace(0, vec![rec(1, Kind::Send, 7, 10)]);
        t.header.num_pes = u32::MAX;
        let m = matrix(&Job::new(vec![t]));
        assert_eq!(m.pes, [0, 7]);
        assert_eq!(m.grid(128), (1, 2));
        assert_eq!(m.cells(128), [[(0, 0), (1, 10)], [(0, 0), (0, 0)]]);
        // 300 PEs each sending to the next: drawn on at most 128 cells a side, 3 PEs a
        // cell, every message still counted.
        let traces = (0..300u32)
            .map(|pe| {
                let mut t = trace(pe, vec![rec(1, Kind::Send, (pe + 1) % 300, 2)]);
                t.header.num_pes = 300;
                t
            })
            .collect();
        let m = matrix(&Job::new(traces));
        assert_eq!(m.grid(128), (3, 100));
        let cells = m.cells(128);
        assert_eq!(cells.len(), 100);
        assert!(cells.iter().all(|row| row.len() == 100));
        let total: u64 = cells.iter().flatten().map(|c| c.0).sum();
        assert_eq!(total, 300);
        assert_eq!(
            cells[0][0],
            (2, 4),
            "PE 0 → 1 and 1 → 2 share the first cell"
        );
    }
}
