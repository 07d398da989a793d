//! Reading a traced job (`+trace`, one `trace.<pe>.bin` per PE) and turning it into what a
//! person opens: a Chrome trace-event / Perfetto JSON file ([`chrome`]: one track per PE,
//! handlers as slices, idle periods, messages as flows from send to receive, the layer's
//! counters) and a self-contained HTML/SVG report ([`report`]: per-PE timeline, time per
//! handler, the PE×PE communication matrix as a heat map).
//!
//! A crate of its own so that a program that only records pays nothing for it; the
//! `converse-trace` command is its front.
//!
//! ```no_run
//! let job = converse_trace::Job::load("converse-trace".as_ref())?;
//! println!("{} PEs, {} messages matched", job.traces.len(), job.flows.matched.len());
//! std::fs::write("trace.json", converse_trace::chrome::json(&job).to_string())?;
//! std::fs::write("report.html", converse_trace::report::html(&job))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

pub mod chrome;
pub mod profile;
pub mod report;
pub mod summary;

pub use converse::trace_format::{Flow, Flows, Kind, Record, Trace, TraceError};
use std::path::Path;

/// Why a traced job cannot be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The directory cannot be read.
    #[error("{dir}: {source}")]
    Dir {
        /// The directory.
        dir: String,
        /// The error.
        source: std::io::Error,
    },
    /// It holds no trace file.
    #[error("{0}: no trace.<pe>.bin file (was the job run with +trace / +trace-dir here?)")]
    Empty(String),
    /// A file is not a readable trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Two files hold the trace of one PE (files of two jobs, or a copy).
    #[error(
        "{first} and {second} both hold PE {pe}'s trace: trace each job into a fresh directory"
    )]
    SamePe {
        /// The PE.
        pe: u32,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
    /// Two files disagree on the job's size (files of two jobs).
    #[error(
        "{first} is of a job of {first_pes} PEs, {second} of one of {second_pes}: trace each \
         job into a fresh directory"
    )]
    Sizes {
        /// One file.
        first: String,
        /// The PEs it says the job had.
        first_pes: u32,
        /// Another.
        second: String,
        /// The PEs that one says.
        second_pes: u32,
    },
    /// A file's PE is not one of its job's.
    #[error("{file}: PE {pe} in a job of {num_pes} PEs")]
    PeOutOfRange {
        /// The file.
        file: String,
        /// Its PE.
        pe: u32,
        /// The PEs it says the job had.
        num_pes: u32,
    },
}

/// The PE of a trace file's name: `trace.<pe>.bin` with `<pe>` in decimal as the runtime
/// writes it (no sign, no leading zero), so that each PE has one name.
fn pe_of_file_name(name: &str) -> Option<u32> {
    let n = name.strip_prefix("trace.")?.strip_suffix(".bin")?;
    let canonical =
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    canonical.then(|| n.parse().ok()).flatten()
}

/// The node of a communication thread's trace file's name: `comm.<node>.bin`, as for PEs.
fn node_of_comm_file_name(name: &str) -> Option<u32> {
    pe_of_file_name(&format!("trace.{}", name.strip_prefix("comm.")?))
}

/// Refuse traces that cannot be one job's: sizes that disagree, a PE outside its job, two
/// traces of one PE. Each trace comes with its file's name, to say which.
fn check_one_job(traces: &[(String, Trace)]) -> Result<(), LoadError> {
    let Some((first, t0)) = traces.first() else {
        return Ok(());
    };
    let n = t0.header.num_pes;
    for (file, t) in traces {
        if t.header.num_pes != n {
            return Err(LoadError::Sizes {
                first: first.clone(),
                first_pes: n,
                second: file.clone(),
                second_pes: t.header.num_pes,
            });
        }
        if t.header.pe >= n {
            return Err(LoadError::PeOutOfRange {
                file: file.clone(),
                pe: t.header.pe,
                num_pes: n,
            });
        }
    }
    let mut by_pe: Vec<(u32, &str)> = traces
        .iter()
        .map(|(f, t)| (t.header.pe, f.as_str()))
        .collect();
    by_pe.sort_unstable();
    match by_pe.windows(2).find(|w| w[0].0 == w[1].0) {
        Some(w) => Err(LoadError::SamePe {
            pe: w[0].0,
            first: w[0].1.to_owned(),
            second: w[1].1.to_owned(),
        }),
        None => Ok(()),
    }
}

/// Times and durations past this (2^61 ns, 73 years) are clamped to it when a job is made, so
/// that a time plus a duration plus an offset never overflows an `i64`, whatever a corrupt
/// file says.
pub const TIME_LIMIT: u64 = 1 << 61;

/// Clamp `t`'s record times and durations to [`TIME_LIMIT`]; how many records were.
fn clamp_times(t: &mut Trace) -> usize {
    let mut n = 0;
    for r in &mut t.records {
        let long = matches!(r.kind, Kind::Idle | Kind::Span | Kind::Bracket);
        if r.t > TIME_LIMIT && r.t < u64::MAX - TIME_LIMIT {
            // A boot span's start is before the PE's time 0: a small negative `t`, wrapped.
            r.t = TIME_LIMIT;
            n += 1;
        }
        if long && r.b > TIME_LIMIT {
            r.b = TIME_LIMIT;
            n += 1;
        }
    }
    n
}

/// A traced job: every PE's trace, on one time line.
#[derive(Debug, Clone)]
pub struct Job {
    /// One trace per PE, by PE number.
    pub traces: Vec<Trace>,
    /// The traces of SMP nodes' communication threads (`comm.<node>.bin`, their header's
    /// `pe` the node), by node: their turns that moved messages as [`Kind::Span`] records,
    /// their waits as [`Kind::Idle`].
    pub comm: Vec<Trace>,
    /// Per communication thread's trace (same order), as [`Job::offsets`].
    pub comm_offsets: Vec<i64>,
    /// Per trace (same order): what to add to its record times to put them on the job's
    /// time line, ns (the job's time 0 is its first event).
    pub offsets: Vec<i64>,
    /// Sends matched with their receives.
    pub flows: Flows,
    /// Whether the times come from the wall clock (PEs on several hosts) rather than the
    /// monotonic clock every process of one host shares.
    pub wall_clock: bool,
    /// Things a reader should know (torn chunks, files of another job).
    pub warnings: Vec<String>,
}

impl Job {
    /// Load every `trace.<pe>.bin` in `dir`.
    ///
    /// # Errors
    /// [`LoadError`] when the directory cannot be read, holds no trace, a file is not one, or
    /// the files cannot be one job's (two of a PE, sizes that disagree).
    pub fn load(dir: &Path) -> Result<Job, LoadError> {
        let dir_error = |source| LoadError::Dir {
            dir: dir.display().to_string(),
            source,
        };
        let mut files = Vec::new();
        let mut comm_files = Vec::new();
        for e in std::fs::read_dir(dir).map_err(dir_error)? {
            let e = e.map_err(dir_error)?;
            let name = e.file_name();
            let name = name.to_str();
            if let Some(pe) = name.and_then(pe_of_file_name) {
                files.push((pe, e.path()));
            } else if let Some(node) = name.and_then(node_of_comm_file_name) {
                comm_files.push((node, e.path()));
            }
        }
        if files.is_empty() {
            return Err(LoadError::Empty(dir.display().to_string()));
        }
        // In PE order, so that errors name the same files whatever the directory's order.
        files.sort_unstable();
        let mut traces = Vec::with_capacity(files.len());
        for (_, path) in files {
            let t = Trace::read(&path)?;
            traces.push((path.display().to_string(), t));
        }
        check_one_job(&traces)?;
        // A communication thread's trace adds to the job's; one that cannot be read (its
        // node died before writing it) is said and left out, never the end of the job's.
        comm_files.sort_unstable();
        let mut comm = Vec::with_capacity(comm_files.len());
        let mut unread = Vec::new();
        for (_, path) in comm_files {
            match Trace::read(&path) {
                Ok(t) => comm.push(t),
                Err(e) => unread.push(format!("{e}: left out")),
            }
        }
        let traces: Vec<Trace> = traces.into_iter().map(|(_, t)| t).collect();
        // Only the threads of this job's processes: one of its PEs ran on that node, in that
        // process. An earlier job's file in the same directory would move time 0.
        let of_this_job = |c: &Trace| {
            traces.iter().any(|t| {
                t.header.node == c.header.pe
                    && t.header.pid == c.header.pid
                    && t.header.host == c.header.host
                    && t.header.num_pes == c.header.num_pes
            })
        };
        let (ours, stale): (Vec<Trace>, Vec<Trace>) = comm.into_iter().partition(of_this_job);
        unread.extend(stale.iter().map(|c| {
            format!(
                "comm.{}.bin is not of this job's processes (an earlier job's?): left out",
                c.header.pe
            )
        }));
        let mut job = Job::with_comm(traces, ours);
        job.warnings.extend(unread);
        Ok(job)
    }

    /// A job from its PEs' traces (any order), one per PE as [`Job::load`] checks: traces
    /// that are not one job's (two of a PE) give figures that mix them up, but no panic.
    pub fn new(traces: Vec<Trace>) -> Job {
        Job::with_comm(traces, Vec::new())
    }

    /// A job from its PEs' traces and its communication threads' (any order).
    pub fn with_comm(mut traces: Vec<Trace>, mut comm: Vec<Trace>) -> Job {
        traces.sort_by_key(|t| t.header.pe);
        comm.sort_by_key(|t| t.header.pe);
        let mut warnings = Vec::new();
        let pes = traces
            .iter_mut()
            .map(|t| (format!("PE {}", t.header.pe), t));
        let threads =
            (comm.iter_mut()).map(|t| (format!("node {}'s communication thread", t.header.pe), t));
        for (who, t) in pes.chain(threads) {
            let clamped = clamp_times(t);
            if clamped > 0 {
                warnings.push(format!(
                    "{who}: {clamped} records with times or durations past 70 years (corrupt?): \
                     clamped"
                ));
            }
            if t.torn_bytes > 0 {
                warnings.push(format!(
                    "{who}: the last {} bytes are a chunk cut short (the process ended while \
                     writing it): dropped",
                    t.torn_bytes
                ));
            }
        }
        if let Some(first) = traces.first() {
            let n = first.header.num_pes;
            if traces.iter().any(|t| t.header.num_pes != n) {
                warnings.push(
                    "the files come from jobs of different sizes: trace into a fresh directory"
                        .into(),
                );
            }
            if traces.len() < n as usize {
                warnings.push(format!(
                    "{} of the job's {n} PEs left a trace",
                    traces.len()
                ));
            }
        }
        let wall_clock = traces
            .windows(2)
            .any(|w| w[0].header.host != w[1].header.host);
        let base = |t: &Trace| {
            if wall_clock {
                t.header.unix_base
            } else {
                t.header.mono_base
            }
        };
        // Time 0 is the earliest event (a boot span starts before its PE's base).
        let start = traces
            .iter()
            .chain(&comm)
            .filter_map(|t| {
                t.records
                    .first()
                    .map(|r| base(t) as i128 + i128::from(r.t as i64))
            })
            .min()
            .unwrap_or(0);
        // Bounded as record times are (a corrupt header's base is any number).
        let limit = i128::from(TIME_LIMIT);
        let offset = |t: &Trace| (base(t) as i128 - start).clamp(-limit, limit) as i64;
        let offsets = traces.iter().map(offset).collect();
        let comm_offsets = comm.iter().map(offset).collect();
        let flows = Trace::flows(&traces);
        Job {
            traces,
            comm,
            comm_offsets,
            offsets,
            flows,
            wall_clock,
            warnings,
        }
    }

    /// Record `r` of trace `i` on the job's time line, ns.
    pub fn time(&self, i: usize, r: &Record) -> i64 {
        self.offsets.get(i).copied().unwrap_or(0) + r.t as i64
    }

    /// Record `r` of communication thread trace `i` on the job's time line, ns.
    pub fn comm_time(&self, i: usize, r: &Record) -> i64 {
        self.comm_offsets.get(i).copied().unwrap_or(0) + r.t as i64
    }

    /// The job's time line ends here, ns.
    pub fn end(&self) -> i64 {
        let last = |t: &Trace, offset: i64| {
            t.records
                .iter()
                .map(|r| {
                    let d = if matches!(r.kind, Kind::Idle | Kind::Span | Kind::Bracket) {
                        r.b as i64
                    } else {
                        0
                    };
                    offset + r.t as i64 + d
                })
                .max()
        };
        let pes = (self.traces.iter().zip(&self.offsets)).filter_map(|(t, &o)| last(t, o));
        let comm = (self.comm.iter().zip(&self.comm_offsets)).filter_map(|(t, &o)| last(t, o));
        pes.chain(comm).max().unwrap_or(0).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use converse::trace_format::Header;

    fn trace(pe: u32, host: &str, mono_base: u64, unix_base: u64, records: Vec<Record>) -> Trace {
        Trace {
            header: Header {
                pe,
                node: pe,
                num_pes: 3,
                num_nodes: 3,
                layer: "tcp".into(),
                host: host.into(),
                pid: 1,
                mono_base,
                unix_base,
                handlers: vec![],
            },
            strings: vec![],
            records,
            torn_bytes: 0,
        }
    }

    fn at(t: u64) -> Record {
        Record {
            t,
            kind: Kind::Mark,
            a: 0,
            b: 0,
        }
    }

    #[test]
    fn one_host_shares_the_monotonic_clock_and_time_0_is_the_first_event() {
        let job = Job::new(vec![
            trace(1, "a", 5_000, 0, vec![at(10)]),
            trace(0, "a", 1_000, 999_999, vec![at(500)]),
        ]);
        assert!(!job.wall_clock);
        assert_eq!(job.traces[0].header.pe, 0, "sorted by PE");
        assert_eq!(job.time(0, &job.traces[0].records[0]), 0);
        assert_eq!(job.time(1, &job.traces[1].records[0]), 5_010 - 1_500);
        // A PE missing from a 3-PE job is said.
        assert!(job
            .warnings
            .iter()
            .any(|w| w.contains("2 of the job's 3 PEs")));
    }

    #[test]
    fn several_hosts_use_the_wall_clock_and_torn_files_are_said() {
        let mut torn = trace(1, "b", 0, 3_000, vec![at(0)]);
        torn.torn_bytes = 12;
        let job = Job::new(vec![trace(0, "a", 77, 1_000, vec![at(0)]), torn]);
        assert!(job.wall_clock);
        assert_eq!(job.time(1, &job.traces[1].records[0]), 2_000);
        assert!(job
            .warnings
            .iter()
            .any(|w| w.contains("PE 1") && w.contains("12 bytes")));
    }

    #[test]
    fn only_canonical_trace_names_count() {
        assert_eq!(pe_of_file_name("trace.0.bin"), Some(0));
        assert_eq!(pe_of_file_name("trace.170.bin"), Some(170));
        for name in [
            "trace.00.bin",
            "trace.01.bin",
            "trace.+1.bin",
            "trace.-1.bin",
            "trace..bin",
            "trace. 1.bin",
            "trace.1.bin.bak",
            "trace.4294967296.bin",
        ] {
            assert_eq!(pe_of_file_name(name), None, "{name}");
        }
    }

    #[test]
    fn files_that_cannot_be_one_job_are_refused_naming_them() {
        let d = std::env::temp_dir().join(format!("trace-one-job-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let zero = trace(0, "a", 0, 0, vec![at(1)]);
        std::fs::write(d.join("trace.0.bin"), zero.to_bytes()).expect("write");
        // Copies under names the runtime never writes are not traces.
        std::fs::write(d.join("trace.00.bin"), zero.to_bytes()).expect("write");
        std::fs::write(d.join("trace.+0.bin"), zero.to_bytes()).expect("write");
        assert_eq!(Job::load(&d).expect("one trace").traces.len(), 1);
        // A copy of PE 0's trace as PE 2's: two traces of PE 0.
        let second = d.join("trace.2.bin");
        std::fs::write(&second, zero.to_bytes()).expect("write");
        let e = Job::load(&d).expect_err("two traces of PE 0");
        assert!(matches!(e, LoadError::SamePe { pe: 0, .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&d.join("trace.0.bin").display().to_string())
                && text.contains(&second.display().to_string())
                && !text.contains('\n'),
            "{text}"
        );
        // A file of a job of another size.
        let mut other = trace(2, "a", 0, 0, vec![at(1)]);
        other.header.num_pes = 4;
        std::fs::write(&second, other.to_bytes()).expect("write");
        assert!(matches!(
            Job::load(&d),
            Err(LoadError::Sizes {
                first_pes: 3,
                second_pes: 4,
                ..
            })
        ));
        // A PE its job cannot have.
        std::fs::write(&second, trace(7, "a", 0, 0, vec![]).to_bytes()).expect("write");
        assert!(matches!(
            Job::load(&d),
            Err(LoadError::PeOutOfRange { pe: 7, .. })
        ));
        std::fs::write(&second, trace(2, "a", 0, 0, vec![at(2)]).to_bytes()).expect("write");
        assert_eq!(Job::load(&d).expect("a job").traces.len(), 2);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn communication_threads_of_another_job_or_unreadable_are_left_out_and_said() {
        let d = std::env::temp_dir().join(format!("trace-comm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let pe = trace(0, "a", 0, 0, vec![at(5)]);
        std::fs::write(d.join("trace.0.bin"), pe.to_bytes()).expect("write");
        // Node 0's thread, in PE 0's process: kept.
        let mut ours = trace(0, "a", 0, 0, vec![at(1)]);
        ours.header.pid = pe.header.pid;
        std::fs::write(d.join("comm.0.bin"), ours.to_bytes()).expect("write");
        let job = Job::load(&d).expect("loads");
        assert_eq!(job.comm.len(), 1);
        assert_eq!(
            job.comm_time(0, &job.comm[0].records[0]),
            0,
            "time 0 is its event"
        );
        // Another process's (an earlier job's), and an empty file (a node that died first).
        let mut stale = ours.clone();
        stale.header.pid += 1;
        stale.records = vec![at(0)];
        std::fs::write(d.join("comm.0.bin"), stale.to_bytes()).expect("write");
        std::fs::write(d.join("comm.1.bin"), b"").expect("write");
        let job = Job::load(&d).expect("still loads");
        assert!(job.comm.is_empty());
        assert!(
            job.warnings
                .iter()
                .any(|w| w.contains("comm.0.bin is not of this job"))
                && job.warnings.iter().any(|w| w.contains("comm.1.bin")),
            "{:?}",
            job.warnings
        );
        assert_eq!(
            job.time(0, &job.traces[0].records[0]),
            0,
            "time 0 not moved"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_directory_without_traces_is_an_error() {
        let d = std::env::temp_dir().join(format!("trace-empty-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        assert!(matches!(Job::load(&d), Err(LoadError::Empty(_))));
        std::fs::write(d.join("trace.0.bin"), b"not a trace").expect("write");
        assert!(matches!(Job::load(&d), Err(LoadError::Trace(_))));
        std::fs::remove_dir_all(&d).ok();
        assert!(matches!(Job::load(&d), Err(LoadError::Dir { .. })));
    }
}
