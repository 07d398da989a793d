//! Figures: one row per (what, size), printed as a table and written as CSV.

use anyhow::Context;
use hdrhistogram::Histogram;
use std::io::Write;
use std::path::Path;

/// Median, lowest and highest of a run's values (NaN for none): how every figure of rounds is
/// printed.
pub(crate) fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN),
        v.first().copied().unwrap_or(f64::NAN),
        v.last().copied().unwrap_or(f64::NAN),
    )
}

/// Latency and bandwidth of one size on one path.
pub(crate) struct Row {
    pub what: String,
    pub size: usize,
    pub count: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

impl Row {
    pub(crate) fn from_hist(what: &str, size: usize, h: &Histogram<u64>) -> Row {
        Row {
            what: what.into(),
            size,
            count: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
            mean_ns: h.mean(),
        }
    }

    /// The same path and size measured several times (`rows`, not empty): each figure the
    /// median of its values (the lower middle one for an even count), the count summed.
    pub(crate) fn median_of(rows: &[&Row]) -> Row {
        let all = |f: fn(&Row) -> u64| median(rows.iter().map(|r| f(r)).collect());
        Row {
            what: rows[0].what.clone(),
            size: rows[0].size,
            count: rows.iter().map(|r| r.count).sum(),
            min_ns: all(|r| r.min_ns),
            p50_ns: all(|r| r.p50_ns),
            p99_ns: all(|r| r.p99_ns),
            max_ns: all(|r| r.max_ns),
            mean_ns: median(rows.iter().map(|r| r.mean_ns).collect()),
        }
    }

    /// Bytes per second over the mean one-way time, in MB/s.
    pub(crate) fn mb_per_s(&self) -> f64 {
        if self.mean_ns > 0.0 {
            self.size as f64 / self.mean_ns * 1e3
        } else {
            0.0
        }
    }
}

/// The median of `values` (not empty): the lower of the middle two for an even count, so that
/// it is always one of the values measured.
/// The p50s (µs) of the rows named `what` (of `size`, if given) over rounds: their median,
/// least and greatest; NaN for none.
pub(crate) fn p50_over_rounds(
    rounds: &[Vec<Row>],
    what: &str,
    size: Option<usize>,
) -> (f64, f64, f64) {
    let mut v: Vec<f64> = rounds
        .iter()
        .filter_map(|rows| {
            rows.iter()
                .find(|r| r.what == what && size.is_none_or(|s| r.size == s))
        })
        .map(|r| r.p50_ns as f64 / 1e3)
        .collect();
    v.sort_by(f64::total_cmp);
    match (v.first(), v.last()) {
        (Some(&lo), Some(&hi)) => (v[v.len() / 2], lo, hi),
        _ => (f64::NAN, f64::NAN, f64::NAN),
    }
}

pub(crate) fn median<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[(values.len() - 1) / 2]
}

/// A histogram for nanosecond latencies from 1 ns to 1 minute, 3 significant digits.
pub(crate) fn histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).context("creating a histogram")
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// Print one series: size, one-way p50 in µs, bandwidth in MB/s.
pub(crate) fn print_series(rows: &[Row]) {
    for r in rows {
        converse::input::out_line(&format!(
            "{:>9} | {:>9.3} | {:>10.1}",
            r.size,
            r.p50_ns as f64 / 1e3,
            r.mb_per_s()
        ));
    }
}

/// Print layer rows next to baseline rows of the same size, with the p50 ratio.
pub(crate) fn print_pingpong(layer: &[Row], raw: &[Row]) {
    converse::input::out_line(&format!(
        "{:>9} | {:>28} | {:>28} | {:>6} | {:>10} {:>10}",
        "", "layer one-way us", "raw one-way us", "p50", "layer", "raw"
    ));
    converse::input::out_line(&format!(
        "{:>9} | {:>8} {:>9} {:>9} | {:>8} {:>9} {:>9} | {:>6} | {:>10} {:>10}",
        "bytes", "min", "p50", "p99", "min", "p50", "p99", "ratio", "MB/s", "MB/s"
    ));
    for l in layer {
        let r = raw.iter().find(|r| r.size == l.size);
        let (rmin, r50, r99, rbw) = r.map_or((0.0, 0.0, 0.0, 0.0), |r| {
            (us(r.min_ns), us(r.p50_ns), us(r.p99_ns), r.mb_per_s())
        });
        let ratio = r.map_or(0.0, |r| l.p50_ns as f64 / r.p50_ns.max(1) as f64);
        converse::input::out_line(&format!("{:>9} | {:>8.3} {:>9.3} {:>9.3} | {:>8.3} {:>9.3} {:>9.3} | {:>6.2} | {:>10.1} {:>10.1}",
            l.size,
            us(l.min_ns),
            us(l.p50_ns),
            us(l.p99_ns),
            rmin,
            r50,
            r99,
            ratio,
            l.mb_per_s(),
            rbw));
    }
}

/// Write rows as CSV.
pub(crate) fn write_csv(path: &Path, rows: &[&Row]) -> anyhow::Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    writeln!(
        f,
        "what,bytes,count,min_ns,p50_ns,p99_ns,max_ns,mean_ns,mb_per_s"
    )?;
    for r in rows {
        writeln!(
            f,
            "{},{},{},{},{},{},{},{:.1},{:.1}",
            r.what,
            r.size,
            r.count,
            r.min_ns,
            r.p50_ns,
            r.p99_ns,
            r.max_ns,
            r.mean_ns,
            r.mb_per_s()
        )?;
    }
    Ok(())
}

/// Read rows written by [`write_csv`].
pub(crate) fn read_csv(path: &Path) -> anyhow::Result<Vec<Row>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        anyhow::ensure!(f.len() == 9, "bad CSV line: {line}");
        let num = |i: usize| -> anyhow::Result<u64> { Ok(f[i].parse()?) };
        rows.push(Row {
            what: f[0].to_owned(),
            size: f[1].parse()?,
            count: num(2)?,
            min_ns: num(3)?,
            p50_ns: num(4)?,
            p99_ns: num(5)?,
            max_ns: num(6)?,
            mean_ns: f[7].parse()?,
        });
    }
    Ok(rows)
}

/// Sizes as the comma-separated list the hidden subcommands take.
pub(crate) fn size_list(sizes: &[usize]) -> String {
    sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::Row;

    fn row(p50: u64, mean: f64) -> Row {
        Row {
            what: "x".into(),
            size: 8,
            count: 10,
            min_ns: p50 / 2,
            p50_ns: p50,
            p99_ns: p50 * 2,
            max_ns: p50 * 3,
            mean_ns: mean,
        }
    }

    #[test]
    fn the_median_of_rows_takes_each_figure_s_middle_and_sums_the_counts() {
        let (a, b, c) = (row(300, 3.0), row(100, 1.0), row(200, 2.0));
        let m = Row::median_of(&[&a, &b, &c]);
        assert_eq!(
            (m.p50_ns, m.min_ns, m.p99_ns, m.max_ns),
            (200, 100, 400, 600)
        );
        assert_eq!(m.mean_ns, 2.0);
        assert_eq!(m.count, 30);
        // An even count takes the lower of the middle two; one row is itself.
        assert_eq!(Row::median_of(&[&a, &b]).p50_ns, 100);
        assert_eq!(Row::median_of(&[&a]).p50_ns, 300);
    }
}
