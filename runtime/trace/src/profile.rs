//! Projections' views as numbers: how busy each PE (node, communication thread) was over
//! time, which handlers took that time, each PE's time per handler, histograms of handler
//! durations and message sizes, and the program's user events and brackets. The report draws
//! them; tests read them.

use crate::{Job, Kind, Trace};
use std::collections::BTreeMap;

/// The job's time line cut into `n` equal bins, from 0 to [`Job::end`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bins {
    /// How many.
    pub n: usize,
    /// Width of one, ns.
    pub width: f64,
}

impl Bins {
    /// `n` bins (at least 1) over `job`.
    pub fn of(job: &Job, n: usize) -> Bins {
        let n = n.max(1);
        Bins {
            n,
            width: job.end() as f64 / n as f64,
        }
    }

    /// Add the interval `from..to` (ns on the job's time line) to `out`, bin by bin, through
    /// `add(bin, ns)`; what falls outside the time line is clamped to its ends.
    fn spread(&self, from: i64, to: i64, mut add: impl FnMut(usize, f64)) {
        let end = self.width * self.n as f64;
        let (a, b) = ((from as f64).clamp(0.0, end), (to as f64).clamp(0.0, end));
        if b <= a || self.width <= 0.0 {
            return;
        }
        let last = self.n - 1;
        let (c0, c1) = (
            ((a / self.width) as usize).min(last),
            ((b / self.width) as usize).min(last),
        );
        for c in c0..=c1 {
            let lo = a.max(c as f64 * self.width);
            let hi = b.min((c + 1) as f64 * self.width);
            if hi > lo {
                add(c, hi - lo);
            }
        }
    }
}

/// Self time of each handler run of trace `i`, as intervals on the job's time line: a nested
/// handler takes the time over from its parent, and an idle period inside a handler (a
/// nested scheduler loop that found nothing to do) is nobody's, as `+stats` counts it. Calls
/// `run(handler, from, to)` per piece.
fn self_pieces(job: &Job, i: usize, mut run: impl FnMut(u32, i64, i64)) {
    let Some(t) = job.traces.get(i) else { return };
    let mut open: Vec<(u32, i64)> = Vec::new();
    let mut last = 0;
    for r in &t.records {
        let at = job.time(i, r);
        last = last.max(at);
        match r.kind {
            Kind::Begin => {
                if let Some(&(h, from)) = open.last() {
                    run(h, from, at);
                }
                open.push((r.a, at));
            }
            Kind::End => {
                if let Some((h, from)) = open.pop() {
                    run(h, from, at);
                }
                if let Some(parent) = open.last_mut() {
                    parent.1 = at;
                }
            }
            // Recorded when it ends, so the handlers open now were open during it.
            Kind::Idle => {
                if let Some(top) = open.last_mut() {
                    run(top.0, top.1, at);
                    top.1 = at + r.b as i64;
                    last = last.max(top.1);
                }
            }
            _ => {}
        }
    }
    // Still running when the trace ended (the process was killed).
    if let Some(&(h, from)) = open.last() {
        run(h, from, last);
    }
}

/// The fraction of each bin (0 to 1) each PE's trace spent in handlers, by trace index.
pub fn utilization(job: &Job, bins: Bins) -> Vec<Vec<f64>> {
    (0..job.traces.len())
        .map(|i| {
            let mut busy = vec![0f64; bins.n];
            self_pieces(job, i, |_, a, b| bins.spread(a, b, |c, d| busy[c] += d));
            fractions(&busy, bins)
        })
        .collect()
}

/// `busy / width` per bin, within 0..=1.
fn fractions(busy: &[f64], bins: Bins) -> Vec<f64> {
    busy.iter()
        .map(|b| (b / bins.width.max(1.0)).clamp(0.0, 1.0))
        .collect()
}

/// Each node's utilization: the mean of its PEs' (`per_pe` as [`utilization`] gives it), with
/// the node's number and its PEs, by node.
pub fn node_utilization(job: &Job, per_pe: &[Vec<f64>]) -> Vec<(u32, Vec<u32>, Vec<f64>)> {
    let mut by: BTreeMap<u32, (Vec<u32>, Vec<f64>)> = BTreeMap::new();
    for (t, u) in job.traces.iter().zip(per_pe) {
        let e = by
            .entry(t.header.node)
            .or_insert_with(|| (Vec::new(), vec![0.0; u.len()]));
        e.0.push(t.header.pe);
        for (s, x) in e.1.iter_mut().zip(u) {
            *s += x;
        }
    }
    by.into_iter()
        .map(|(node, (pes, sum))| {
            let n = pes.len().max(1) as f64;
            (node, pes, sum.into_iter().map(|s| s / n).collect())
        })
        .collect()
}

/// The fraction of each bin each communication thread spent moving messages, by
/// [`Job::comm`] index.
pub fn comm_utilization(job: &Job, bins: Bins) -> Vec<Vec<f64>> {
    job.comm
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut busy = vec![0f64; bins.n];
            for r in t.records.iter().filter(|r| r.kind == Kind::Span) {
                let at = job.comm_time(i, r);
                bins.spread(at, at + r.b as i64, |c, d| busy[c] += d);
            }
            fractions(&busy, bins)
        })
        .collect()
}

/// Time per handler over time: `[bin][k]`, the self time (ns, all PEs together) of handler
/// `names[k]` in each bin. Handlers not in `names` add to nothing.
pub fn handler_profile(job: &Job, bins: Bins, names: &[String]) -> Vec<Vec<f64>> {
    let index: std::collections::HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(k, n)| (n.as_str(), k))
        .collect();
    let mut out = vec![vec![0f64; names.len()]; bins.n];
    for (i, t) in job.traces.iter().enumerate() {
        // Per trace: its handler ids to the names' index, looked up once each.
        let mut of_id: BTreeMap<u32, Option<usize>> = BTreeMap::new();
        self_pieces(job, i, |h, a, b| {
            let k = *of_id
                .entry(h)
                .or_insert_with(|| index.get(t.header.handler_name(h).as_str()).copied());
            if let Some(k) = k {
                bins.spread(a, b, |c, d| out[c][k] += d);
            }
        });
    }
    out
}

/// Each PE's runs and self time per handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeHandlers {
    /// The handlers of the columns, the busiest over the job first.
    pub names: Vec<String>,
    /// By trace index, then by `names`' index: (runs, self time in ns).
    pub cells: Vec<Vec<(u64, u64)>>,
}

/// The per-PE × handler table.
pub fn pe_handlers(job: &Job) -> PeHandlers {
    let names: Vec<String> = crate::summary::handler_times(job)
        .into_iter()
        .map(|h| h.name)
        .collect();
    let index: std::collections::HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(k, n)| (n.as_str(), k))
        .collect();
    let mut cells = vec![vec![(0u64, 0u64); names.len()]; job.traces.len()];
    for (i, t) in job.traces.iter().enumerate() {
        let row = &mut cells[i];
        let k_of = |h: u32| index.get(t.header.handler_name(h).as_str()).copied();
        self_pieces(job, i, |h, a, b| {
            if let Some(k) = k_of(h) {
                row[k].1 = row[k].1.saturating_add((b - a).max(0) as u64);
            }
        });
        for r in t.records.iter().filter(|r| r.kind == Kind::Begin) {
            if let Some(k) = k_of(r.a) {
                row[k].0 += 1;
            }
        }
    }
    PeHandlers { names, cells }
}

/// Counts of values in bins: bin `k` holds the values from `edges[k]` up to `edges[k + 1]`
/// (the last one, from its edge up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    /// The lower edge of each bin.
    pub edges: Vec<u64>,
    /// Values in each bin.
    pub counts: Vec<u64>,
}

impl Histogram {
    fn of(edges: Vec<u64>, values: impl Iterator<Item = u64>) -> Histogram {
        let mut counts = vec![0u64; edges.len()];
        for v in values {
            let k = edges.partition_point(|&e| e <= v).saturating_sub(1);
            counts[k] += 1;
        }
        // Only the bins from the first to the last that hold something.
        let first = counts.iter().position(|&c| c > 0).unwrap_or(0);
        let last = counts.iter().rposition(|&c| c > 0).unwrap_or(0);
        Histogram {
            edges: edges[first..=last].to_vec(),
            counts: counts[first..=last].to_vec(),
        }
    }

    /// Every value counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// How long handler runs took (begin to end, nested handlers included), in bins of 1, 2, 5
/// steps from 1 µs (`edges` in ns; the first bin holds those under 1 µs).
pub fn duration_histogram(job: &Job) -> Histogram {
    let mut edges = vec![0u64];
    let mut e = 1_000u64;
    while e <= 100_000_000_000 {
        edges.extend([e, 2 * e, 5 * e]);
        e *= 10;
    }
    let runs = crate::summary::slices(job);
    Histogram::of(edges, runs.iter().map(|s| (s.end - s.start).max(0) as u64))
}

/// The sizes of the messages PEs sent (wire bytes), in bins of powers of 2 (`edges` in bytes:
/// 0, then 1, 2, 4…).
pub fn size_histogram(job: &Job) -> Histogram {
    let edges = std::iter::once(0)
        .chain((0..48).map(|k| 1u64 << k))
        .collect();
    let sizes = job
        .traces
        .iter()
        .flat_map(|t| t.records.iter().filter(|r| r.kind == Kind::Send))
        .map(|r| r.b);
    Histogram::of(edges, sizes)
}

/// One user event's or bracket's name, over the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserStat {
    /// Its name.
    pub name: String,
    /// Whether it is a bracket (else an event).
    pub bracket: bool,
    /// Times recorded.
    pub count: u64,
    /// A bracket's total time, ns (0 for an event).
    pub total_ns: u64,
    /// PEs that recorded it.
    pub pes: u64,
}

/// Every user event and bracket, brackets first, then by name.
pub fn user_stats(job: &Job) -> Vec<UserStat> {
    let mut by: BTreeMap<(bool, String), UserStat> = BTreeMap::new();
    for t in &job.traces {
        let mut seen = std::collections::HashSet::new();
        for r in &t.records {
            let bracket = match r.kind {
                Kind::Bracket => true,
                Kind::Event => false,
                _ => continue,
            };
            let name = t.string(r.a).to_owned();
            let e = by
                .entry((!bracket, name.clone()))
                .or_insert_with(|| UserStat {
                    name,
                    bracket,
                    count: 0,
                    total_ns: 0,
                    pes: 0,
                });
            e.count += 1;
            if bracket {
                e.total_ns = e.total_ns.saturating_add(r.b);
            }
            if seen.insert((bracket, r.a)) {
                e.pes += 1;
            }
        }
    }
    by.into_values().collect()
}

/// How the report names a communication thread's trace.
pub fn comm_label(t: &Trace) -> String {
    format!("node {} comm", t.header.pe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Record;
    use converse::trace_format::Header;

    fn rec(t: u64, kind: Kind, a: u32, b: u64) -> Record {
        Record { t, kind, a, b }
    }

    fn trace(pe: u32, records: Vec<Record>) -> Trace {
        Trace {
            header: Header::sample(pe, 2, &["work", "inner"]),
            strings: vec!["solve".into(), "done".into()],
            records,
            torn_bytes: 0,
        }
    }

    /// PE 0: `work` 0–400 with `inner` 100–200 inside, and 50 ns idle inside it at 300;
    /// PE 1: `inner` 600–1000. Both end at 1000.
    fn job() -> Job {
        Job::new(vec![
            trace(
                0,
                vec![
                    rec(0, Kind::Begin, 16, 0),
                    rec(100, Kind::Begin, 17, 0),
                    rec(200, Kind::End, 0, 0),
                    rec(300, Kind::Idle, 0, 50),
                    rec(400, Kind::End, 0, 0),
                    rec(500, Kind::Bracket, 0, 200),
                    rec(900, Kind::Event, 1, 0),
                    rec(1000, Kind::Send, 1, 3000),
                ],
            ),
            trace(
                1,
                vec![
                    rec(0, Kind::Send, 0, 8),
                    rec(600, Kind::Begin, 17, 0),
                    rec(1000, Kind::End, 0, 0),
                ],
            ),
        ])
    }

    #[test]
    fn utilization_counts_handlers_less_idle_inside_them() {
        let j = job();
        let bins = Bins::of(&j, 2);
        assert_eq!(bins.width, 500.0);
        let u = utilization(&j, bins);
        assert_eq!(u[0], vec![350.0 / 500.0, 0.0]);
        assert_eq!(u[1], vec![0.0, 400.0 / 500.0]);
        let nodes = node_utilization(&j, &u);
        assert_eq!(nodes.len(), 2, "one PE a node in the sample");
        assert_eq!(nodes[1].2, u[1]);
    }

    #[test]
    fn handler_profile_gives_self_time_per_bin() {
        let j = job();
        let names = vec!["work".to_owned(), "inner".to_owned()];
        let p = handler_profile(&j, Bins::of(&j, 2), &names);
        // `work`'s 50 ns idle inside it (a nested loop with nothing to run) is nobody's.
        assert_eq!(p[0], vec![250.0, 100.0]);
        assert_eq!(p[1], vec![0.0, 400.0]);
        let t = pe_handlers(&j);
        assert_eq!(t.names, vec!["inner", "work"], "the busiest first");
        assert_eq!(t.cells[0], vec![(1, 100), (1, 250)]);
        assert_eq!(t.cells[1], vec![(1, 400), (0, 0)]);
    }

    #[test]
    fn histograms_bin_durations_and_sizes() {
        let j = job();
        let d = duration_histogram(&j);
        assert_eq!(d.edges, vec![0], "all three runs under 1 µs");
        assert_eq!(d.counts, vec![3]);
        let s = size_histogram(&j);
        assert_eq!(s.edges.first(), Some(&8));
        assert_eq!(s.edges.last(), Some(&2048), "3000 B is in 2048..4096");
        assert_eq!(s.total(), 2);
        assert_eq!(s.counts.first(), Some(&1));
        assert_eq!(s.counts.last(), Some(&1));
    }

    #[test]
    fn user_events_and_brackets_are_counted() {
        let u = user_stats(&job());
        assert_eq!(u.len(), 2);
        assert!(u[0].bracket && u[0].name == "solve" && u[0].total_ns == 200);
        assert!(!u[1].bracket && u[1].name == "done" && u[1].count == 1 && u[1].pes == 1);
    }

    #[test]
    fn an_empty_job_gives_empty_views_without_panic() {
        let j = Job::new(vec![trace(0, vec![])]);
        let bins = Bins::of(&j, 10);
        assert_eq!(utilization(&j, bins)[0], vec![0.0; 10]);
        assert_eq!(duration_histogram(&j).total(), 0);
        assert_eq!(size_histogram(&j).total(), 0);
        assert!(user_stats(&j).is_empty());
    }
}
