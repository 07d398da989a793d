//! Per-stream performance data (the guide's Appendix F): counters each process keeps for a
//! stream when asked to, collected through the tree (each rank's, or aggregated by sum, min,
//! max or average on the way up) and printed.
//!
//! Each process records one cumulative instance per enabled metric and context, since the last
//! collection: bytes and packets sent, received, into and out of the filters; the time the
//! transformation filter took and the share of it spent in user and system CPU time; the
//! process's memory at collection. Nothing is recorded, and no clock or system call is used,
//! for a metric that is not enabled.

use crate::error::TbonError;
use crate::topology::Rank;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

/// What to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Bytes of packet data (`PERFDATA_MET_NUM_BYTES`).
    NumBytes,
    /// Packets (`PERFDATA_MET_NUM_PKTS`).
    NumPackets,
    /// Seconds spent in the transformation filter (`PERFDATA_MET_ELAPSED_SEC`).
    ElapsedSec,
    /// Percent of filter time in user CPU time (`PERFDATA_MET_CPU_USR_PCT`).
    CpuUserPct,
    /// Percent of filter time in system CPU time (`PERFDATA_MET_CPU_SYS_PCT`).
    CpuSysPct,
    /// Virtual memory of the process in KiB, at collection (`PERFDATA_MET_MEM_VIRT_KB`).
    MemVirtKb,
    /// Resident memory of the process in KiB, at collection (`PERFDATA_MET_MEM_PHYS_KB`).
    MemPhysKb,
}

/// When to record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    /// When data is sent.
    Send,
    /// When data is received.
    Recv,
    /// Before the transformation filter.
    FilterIn,
    /// After the transformation filter.
    FilterOut,
    /// Before the synchronization filter.
    SyncFilterIn,
    /// After the synchronization filter.
    SyncFilterOut,
    /// At collection.
    None,
}

const METRICS: [(Metric, &str); 7] = [
    (Metric::NumBytes, "NUM_BYTES"),
    (Metric::NumPackets, "NUM_PKTS"),
    (Metric::ElapsedSec, "ELAPSED_SEC"),
    (Metric::CpuUserPct, "CPU_USR_PCT"),
    (Metric::CpuSysPct, "CPU_SYS_PCT"),
    (Metric::MemVirtKb, "MEM_VIRT_KB"),
    (Metric::MemPhysKb, "MEM_PHYS_KB"),
];

const CONTEXTS: [(Context, &str); 7] = [
    (Context::Send, "SEND"),
    (Context::Recv, "RECV"),
    (Context::FilterIn, "FILT_IN"),
    (Context::FilterOut, "FILT_OUT"),
    (Context::SyncFilterIn, "SYNCFILT_IN"),
    (Context::SyncFilterOut, "SYNCFILT_OUT"),
    (Context::None, "NONE"),
];

impl Metric {
    /// Its name in the guide, without the `PERFDATA_MET_` prefix.
    pub fn name(self) -> &'static str {
        METRICS[self as usize].1
    }

    pub(crate) fn from_u8(v: u8) -> Option<Metric> {
        METRICS.get(v as usize).map(|m| m.0)
    }
}

impl Context {
    /// Its name in the guide, without the `PERFDATA_CTX_` prefix.
    pub fn name(self) -> &'static str {
        CONTEXTS[self as usize].1
    }

    pub(crate) fn from_u8(v: u8) -> Option<Context> {
        CONTEXTS.get(v as usize).map(|c| c.0)
    }
}

/// Whether `metric` can be recorded in `context` (the guide's Table 2).
///
/// # Errors
/// [`TbonError::PerfContext`] naming both.
pub fn check_pair(metric: Metric, context: Context) -> Result<(), TbonError> {
    use Context as C;
    use Metric as M;
    let ok = match metric {
        M::NumBytes | M::NumPackets => !matches!(context, C::None),
        M::ElapsedSec | M::CpuUserPct | M::CpuSysPct => context == C::FilterOut,
        M::MemVirtKb | M::MemPhysKb => context == C::None,
    };
    if ok {
        Ok(())
    } else {
        Err(TbonError::PerfContext {
            metric: metric.name(),
            context: context.name(),
        })
    }
}

/// One recorded value (the guide's `perfdata_t`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PerfData {
    /// A count.
    UInt(u64),
    /// Seconds, percents, KiB.
    Float(f64),
}

impl PerfData {
    /// As an `f64`.
    pub fn as_f64(self) -> f64 {
        match self {
            PerfData::UInt(v) => v as f64,
            PerfData::Float(v) => v,
        }
    }

    fn combine(self, other: PerfData, how: Aggregate) -> PerfData {
        match (self, other) {
            (PerfData::UInt(a), PerfData::UInt(b)) => PerfData::UInt(match how {
                Aggregate::Min => a.min(b),
                Aggregate::Max => a.max(b),
                _ => a.saturating_add(b),
            }),
            (a, b) => {
                let (a, b) = (a.as_f64(), b.as_f64());
                PerfData::Float(match how {
                    Aggregate::Min => a.min(b),
                    Aggregate::Max => a.max(b),
                    _ => a + b,
                })
            }
        }
    }
}

impl fmt::Display for PerfData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfData::UInt(v) => write!(f, "{v}"),
            PerfData::Float(v) => write!(f, "{v:.6}"),
        }
    }
}

/// How collected data is put together on its way to the front-end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// Every rank's instances (`TFILTER_ARRAY_CONCAT`, the default).
    Concat,
    /// Their sum (`TFILTER_SUM`).
    Sum,
    /// Their minimum (`TFILTER_MIN`).
    Min,
    /// Their maximum (`TFILTER_MAX`).
    Max,
    /// Their mean (`TFILTER_AVG`).
    Avg,
}

impl Aggregate {
    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(v: u8) -> Option<Aggregate> {
        Some(match v {
            0 => Aggregate::Concat,
            1 => Aggregate::Sum,
            2 => Aggregate::Min,
            3 => Aggregate::Max,
            4 => Aggregate::Avg,
            _ => return None,
        })
    }
}

/// Collected data: each rank's instances, or (aggregated) one entry under the key
/// `-(number of ranks aggregated)`, as the guide's `rank_perfdata_map` has it.
pub type RankPerfData = BTreeMap<i64, Vec<PerfData>>;

/// Collected data on its way up: per rank, or aggregated with the number of ranks.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Report {
    /// Nothing (a request that collects nothing).
    #[default]
    Nothing,
    /// Per rank.
    Each(Vec<(Rank, PerfData)>),
    /// Aggregated over `ranks` ranks.
    Folded { ranks: u32, value: PerfData },
}

impl Report {
    /// Fold `other` (from a child) into this one.
    pub(crate) fn merge(&mut self, other: Report, how: Aggregate) {
        match (std::mem::take(self), other) {
            (Report::Nothing, o) => *self = o,
            (s, Report::Nothing) => *self = s,
            (Report::Each(mut a), Report::Each(b)) => {
                a.extend(b);
                *self = Report::Each(a);
            }
            (
                Report::Folded {
                    ranks: r1,
                    value: v1,
                },
                Report::Folded {
                    ranks: r2,
                    value: v2,
                },
            ) => {
                // Saturating: the counts come from children's messages.
                *self = Report::Folded {
                    ranks: r1.saturating_add(r2),
                    value: v1.combine(v2, how),
                }
            }
            (s, _) => *self = s,
        }
    }

    /// The report of one rank's value.
    pub(crate) fn one(rank: Rank, value: PerfData, how: Aggregate) -> Report {
        match how {
            Aggregate::Concat => Report::Each(vec![(rank, value)]),
            _ => Report::Folded { ranks: 1, value },
        }
    }

    /// The front-end's result.
    pub(crate) fn finish(self, how: Aggregate) -> RankPerfData {
        let mut out = RankPerfData::new();
        match self {
            Report::Nothing => {}
            Report::Each(v) => {
                for (r, d) in v {
                    out.entry(i64::from(r)).or_default().push(d);
                }
            }
            Report::Folded { ranks, value } => {
                let value = if how == Aggregate::Avg {
                    PerfData::Float(value.as_f64() / f64::from(ranks.max(1)))
                } else {
                    value
                };
                out.insert(-i64::from(ranks), vec![value]);
            }
        }
        out
    }
}

/// One stream's counters on one process.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counters {
    /// Enabled (metric, context) pairs, one bit each.
    enabled: u64,
    /// Counts by context index: (bytes, packets).
    counts: [(u64, u64); 6],
    filter_secs: f64,
    filter_usr: f64,
    filter_sys: f64,
}

fn bit(m: Metric, c: Context) -> u64 {
    1 << (m as u32 * 7 + c as u32)
}

impl Counters {
    /// Whether anything at all is enabled (the hot path's one check).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.enabled != 0
    }

    pub(crate) fn set(&mut self, m: Metric, c: Context, on: bool) {
        if on {
            self.enabled |= bit(m, c);
        } else {
            self.enabled &= !bit(m, c);
        }
    }

    /// Whether filter timing is wanted (clock and CPU time are read only then).
    pub(crate) fn timing(&self) -> bool {
        self.enabled
            & (bit(Metric::ElapsedSec, Context::FilterOut)
                | bit(Metric::CpuUserPct, Context::FilterOut)
                | bit(Metric::CpuSysPct, Context::FilterOut))
            != 0
    }

    /// Count `bytes` of one packet in context `c`.
    #[inline]
    pub(crate) fn count(&mut self, c: Context, packets: u64, bytes: u64) {
        if self.enabled == 0 {
            return;
        }
        let (want_bytes, want_packets) = (
            self.enabled & bit(Metric::NumBytes, c) != 0,
            self.enabled & bit(Metric::NumPackets, c) != 0,
        );
        if let Some(slot) = self.counts.get_mut(c as usize) {
            if want_bytes {
                slot.0 += bytes;
            }
            if want_packets {
                slot.1 += packets;
            }
        }
    }

    /// Account one filter run that started at `start` with CPU times `cpu0`.
    pub(crate) fn filter_ran(&mut self, start: Instant, cpu0: (f64, f64)) {
        self.filter_secs += start.elapsed().as_secs_f64();
        let (u, s) = thread_cpu();
        self.filter_usr += u - cpu0.0;
        self.filter_sys += s - cpu0.1;
    }

    /// Take the value of (m, c) and reset it.
    pub(crate) fn take(&mut self, m: Metric, c: Context) -> PerfData {
        let ci = (c as usize).min(5);
        match m {
            Metric::NumBytes => PerfData::UInt(std::mem::take(&mut self.counts[ci].0)),
            Metric::NumPackets => PerfData::UInt(std::mem::take(&mut self.counts[ci].1)),
            Metric::ElapsedSec => PerfData::Float(std::mem::take(&mut self.filter_secs)),
            Metric::CpuUserPct | Metric::CpuSysPct => {
                let secs = self.filter_secs;
                let part = if m == Metric::CpuUserPct {
                    std::mem::take(&mut self.filter_usr)
                } else {
                    std::mem::take(&mut self.filter_sys)
                };
                PerfData::Float(if secs > 0.0 { 100.0 * part / secs } else { 0.0 })
            }
            Metric::MemVirtKb => PerfData::Float(memory_kb("VmSize:")),
            Metric::MemPhysKb => PerfData::Float(memory_kb("VmRSS:")),
        }
    }
}

/// This thread's user and system CPU seconds.
pub(crate) fn thread_cpu() -> (f64, f64) {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
            (t(u.user_time()), t(u.system_time()))
        }
        Err(_) => (0.0, 0.0),
    }
}

fn memory_kb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_2_is_enforced() {
        assert!(check_pair(Metric::NumBytes, Context::Send).is_ok());
        assert!(check_pair(Metric::NumPackets, Context::SyncFilterOut).is_ok());
        assert!(check_pair(Metric::ElapsedSec, Context::FilterOut).is_ok());
        assert!(check_pair(Metric::MemPhysKb, Context::None).is_ok());
        let e = check_pair(Metric::ElapsedSec, Context::Send).unwrap_err();
        assert_eq!(
            e.to_string(),
            "metric ELAPSED_SEC cannot be recorded in context SEND"
        );
        assert!(check_pair(Metric::NumBytes, Context::None).is_err());
        assert!(check_pair(Metric::MemVirtKb, Context::Recv).is_err());
    }

    #[test]
    fn counters_count_only_what_is_enabled_and_reset_on_take() {
        let mut c = Counters::default();
        c.count(Context::Send, 1, 100);
        assert_eq!(c.take(Metric::NumBytes, Context::Send), PerfData::UInt(0));
        c.set(Metric::NumBytes, Context::Send, true);
        c.set(Metric::NumPackets, Context::Send, true);
        c.count(Context::Send, 1, 100);
        c.count(Context::Send, 1, 20);
        c.count(Context::Recv, 1, 100);
        assert_eq!(c.take(Metric::NumBytes, Context::Recv), PerfData::UInt(0));
        assert_eq!(c.take(Metric::NumBytes, Context::Send), PerfData::UInt(120));
        assert_eq!(c.take(Metric::NumPackets, Context::Send), PerfData::UInt(2));
        assert_eq!(c.take(Metric::NumBytes, Context::Send), PerfData::UInt(0));
        assert!(matches!(c.take(Metric::MemPhysKb, Context::None), PerfData::Float(v) if v > 0.0));
    }

    #[test]
    fn folded_rank_counts_saturate() {
        // A child's message may claim any count; `u32::MAX + 1` overflowed (a panic in debug).
        let mut r = Report::Folded {
            ranks: u32::MAX,
            value: PerfData::UInt(u64::MAX),
        };
        r.merge(
            Report::Folded {
                ranks: 1,
                value: PerfData::UInt(1),
            },
            Aggregate::Sum,
        );
        assert_eq!(
            r,
            Report::Folded {
                ranks: u32::MAX,
                value: PerfData::UInt(u64::MAX)
            }
        );
    }

    #[test]
    fn reports_concatenate_or_aggregate() {
        let mut r = Report::one(1, PerfData::UInt(5), Aggregate::Concat);
        r.merge(
            Report::one(2, PerfData::UInt(7), Aggregate::Concat),
            Aggregate::Concat,
        );
        let m = r.finish(Aggregate::Concat);
        assert_eq!(m.get(&2), Some(&vec![PerfData::UInt(7)]));
        for (how, want) in [
            (Aggregate::Sum, 12.0),
            (Aggregate::Min, 5.0),
            (Aggregate::Max, 7.0),
            (Aggregate::Avg, 6.0),
        ] {
            let mut r = Report::one(1, PerfData::UInt(5), how);
            r.merge(Report::one(2, PerfData::UInt(7), how), how);
            let m = r.finish(how);
            assert_eq!(m.len(), 1);
            assert_eq!(m.get(&-2).map(|v| v[0].as_f64()), Some(want), "{how:?}");
        }
    }
}
