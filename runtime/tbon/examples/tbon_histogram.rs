//! The paper's histogram reduction: every back-end bins its own samples (here, latencies it
//! makes up from its rank), the `Histogram` filter, loaded from a shared library, adds the
//! histograms bin by bin on the way up, and the front-end checks the whole against the
//! histogram of every sample counted in one place.
//!
//! ```text
//! cargo build --release --examples
//! target/release/charmrun +p13 target/release/examples/tbon_histogram
//! ```
//! The filter library is looked for next to the program (`libtbon_filters.so`), or given as
//! the first argument.

mod support;

use converse_tbon::{self as tbon, Options, SyncMode, TbonError, TFILTER_NULL};

const REPORT: i32 = 100;
/// The histogram's range and bins.
const LO: f64 = 0.0;
const HI: f64 = 100.0;
const BINS: usize = 20;

/// Back-end `rank`'s samples: 1,000 values spread over the range and past both ends.
fn samples(rank: u32) -> Vec<f64> {
    (0..1000u32)
        .map(|i| {
            let x = (i.wrapping_mul(2_654_435_761) ^ rank.wrapping_mul(40_503)) % 1_200;
            f64::from(x) / 10.0 - 10.0
        })
        .collect()
}

/// Counts of `values` in `BINS` equal bins of [LO, HI); values outside are not counted.
fn bin(values: &[f64]) -> Vec<u32> {
    let mut counts = vec![0u32; BINS];
    let width = (HI - LO) / BINS as f64;
    for &v in values {
        if (LO..HI).contains(&v) {
            let b = (((v - LO) / width) as usize).min(BINS - 1);
            counts[b] += 1;
        }
    }
    counts
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        if support::refused(
            pe,
            "tbon_histogram",
            3,
            1,
            "tbon_histogram [FILTER_LIBRARY] +pN",
        ) {
            return;
        }
        let library = support::filter_library(pe);
        let n = pe.num_pes();
        support::run_roles(
            pe,
            "tbon_histogram",
            Options::default(),
            |_| support::two_levels(n),
            |net| front_end(net, &library),
            back_end,
        );
    })
}

fn front_end(net: &mut tbon::Network<'_>, library: &str) -> Result<(), TbonError> {
    let filter = net.load_filter(library, "Histogram")?;
    let comm = net.broadcast_communicator();
    let s = net.new_stream(&comm, filter, SyncMode::WaitForAll, TFILTER_NULL)?;
    net.send(&s, REPORT, "", ())?;
    let (lo, hi, counts): (f64, f64, Vec<u32>) = net.recv_on(&s)?.unpack("%lf %lf %aud")?;
    let every: Vec<f64> = comm.endpoints().iter().flat_map(|&r| samples(r)).collect();
    let want = bin(&every);
    let width = (hi - lo) / counts.len().max(1) as f64;
    let peak = counts.iter().copied().max().unwrap_or(1).max(1);
    for (i, c) in counts.iter().enumerate() {
        let bar = "#".repeat((*c as usize * 40).div_ceil(peak as usize));
        converse::input::out_line(&format!(
            "[{:>5.1}, {:>5.1})  {c:>6}  {bar}",
            lo + width * i as f64,
            lo + width * (i + 1) as f64
        ));
    }
    let verdict = if counts == want {
        "the histogram matches every sample counted in one place"
    } else {
        "THE HISTOGRAM DIFFERS from every sample counted in one place"
    };
    converse::input::out_line(&format!(
        "{} back-ends, {} samples in range: {verdict}",
        comm.size(),
        counts.iter().map(|&c| u64::from(c)).sum::<u64>()
    ));
    Ok(())
}

fn back_end(net: &mut tbon::Network<'_>) -> Result<(), TbonError> {
    let me = net.rank().unwrap_or(0);
    loop {
        let (s, p) = net.recv()?;
        if p.tag() == REPORT {
            net.send(&s, REPORT, "%lf %lf %aud", (LO, HI, bin(&samples(me))))?;
        }
    }
}
