//! Filters for the tree overlay, in a shared library loaded at run time
//! (`Network::load_filter(path, "IntegerAdd")`): the guide's Appendix B.4 `IntegerAdd`, and the
//! paper's equivalence-class and histogram filters, a synchronization filter (`Group`), and a
//! fault-tolerant filter that exports its state (`RunningSum`, with `RunningSum_get_state`).
//! Built as `target/release/examples/libtbon_filters.so`.

use converse_tbon::{FilterContext, FilterError, FilterState, Packet};
use std::collections::BTreeMap;

/// Sum of the `%d` of every packet of the wave (Appendix B.4).
fn integer_add(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
    let mut sum = 0i32;
    for p in cx.packets_in.iter() {
        sum = sum.wrapping_add(p.unpack::<i32>("%d")?);
    }
    let first = &cx.packets_in[0];
    let total = Packet::new(first.stream_id(), first.tag(), "%d", sum)?;
    cx.packets_out.push(total);
    Ok(())
}

converse_tbon::export_filter!(IntegerAdd, "%d", integer_add);

/// Equivalence classes by checksum (the paper's binning filter for Paradyn's start-up): each
/// packet is `%auld %aud %aud` — distinct checksums, how many members each has, and the
/// members' ranks grouped by checksum. A back-end sends one class of one member; every process
/// merges its children's classes, so the front-end gets every class with all its members.
fn equiv_class(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
    let mut classes: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for p in cx.packets_in.iter() {
        let (sums, counts, members): (Vec<u64>, Vec<u32>, Vec<u32>) =
            p.unpack("%auld %aud %aud")?;
        if sums.len() != counts.len()
            || counts.iter().map(|&c| c as usize).sum::<usize>() != members.len()
        {
            return Err(FilterError(
                "an equivalence-class packet that does not add up".into(),
            ));
        }
        let mut at = 0;
        for (s, c) in sums.iter().zip(&counts) {
            let c = *c as usize;
            classes
                .entry(*s)
                .or_default()
                .extend_from_slice(&members[at..at + c]);
            at += c;
        }
    }
    let mut sums = Vec::with_capacity(classes.len());
    let mut counts = Vec::with_capacity(classes.len());
    let mut members = Vec::new();
    for (s, mut m) in classes {
        m.sort_unstable();
        sums.push(s);
        counts.push(m.len() as u32);
        members.extend(m);
    }
    let first = &cx.packets_in[0];
    let merged = Packet::new(
        first.stream_id(),
        first.tag(),
        "%auld %aud %aud",
        (sums, counts, members),
    )?;
    cx.packets_out.push(merged);
    Ok(())
}

converse_tbon::export_filter!(EquivClass, "%auld %aud %aud", equiv_class);

/// The paper's histogram reduction: each packet is a histogram, `%lf %lf %aud` — the low and
/// high ends of its range and the counts of its equal bins. A back-end bins its own samples;
/// every process adds its children's counts bin by bin, so the front-end gets the histogram of
/// every back-end's samples. Histograms over other ranges or bins do not add up: refused.
fn histogram(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
    let mut total: Option<(f64, f64, Vec<u32>)> = None;
    for p in cx.packets_in.iter() {
        let (lo, hi, counts): (f64, f64, Vec<u32>) = p.unpack("%lf %lf %aud")?;
        match &mut total {
            None => total = Some((lo, hi, counts)),
            Some((l, h, sum)) => {
                if *l != lo || *h != hi || sum.len() != counts.len() {
                    return Err(FilterError(format!(
                        "histograms over [{l}, {h}) in {} bins and [{lo}, {hi}) in {} bins do                          not add up",
                        sum.len(),
                        counts.len()
                    )));
                }
                for (a, b) in sum.iter_mut().zip(counts) {
                    *a = a.saturating_add(b);
                }
            }
        }
    }
    if let Some((lo, hi, counts)) = total {
        let first = &cx.packets_in[0];
        let merged = Packet::new(
            first.stream_id(),
            first.tag(),
            "%lf %lf %aud",
            (lo, hi, counts),
        )?;
        cx.packets_out.push(merged);
    }
    Ok(())
}

converse_tbon::export_filter!(Histogram, "%lf %lf %aud", histogram);

/// A synchronization filter of the program's (MRNet's user-defined synchronization): packets
/// wait in its state until `n` have come (the stream's synchronization parameter, `%ud`; 2
/// until set), then go on together as one wave, in the order they came.
fn group(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
    let n = match cx.params {
        Some(p) => p.unpack::<u32>("%ud")?.max(1) as usize,
        None => 2,
    };
    let held = cx
        .state
        .get_or_insert_with(|| Box::new(Vec::<Packet>::new()));
    let held = held
        .downcast_mut::<Vec<Packet>>()
        .ok_or_else(|| FilterError("group state".into()))?;
    held.append(cx.packets_in);
    // One wave a call at most: each call brings the one packet that came (don't-wait below).
    if held.len() >= n {
        cx.packets_out.extend(held.drain(..n));
    }
    Ok(())
}

converse_tbon::export_filter!(Group, "", group);

/// A filter function without its `_format_string`: loading it must fail, saying so.
///
/// # Safety
/// Never called: the host refuses to load it.
#[no_mangle]
pub unsafe extern "C" fn NoFormatString(_call: *const converse_tbon::dynfilter::FfiCall) {}

/// A running total of a stream's history that failure recovery leaves exact (the guide's
/// section D.2): back-ends send `%d %d` (a value, and anything); every process keeps its
/// back-end children's values summed in `own` and each internal child's running total
/// (`%ld`) as its latest, by rank, forgetting a child once it is no child (a dead one's part
/// comes back in its orphans' exported totals, `RunningSum_get_state`). Each wave gives the
/// total so far, `%ld`, tagged as the wave's first packet.
#[derive(Default)]
struct Ledger {
    own: i64,
    latest: BTreeMap<u32, i64>,
}

impl Ledger {
    fn total(&self) -> i64 {
        self.own + self.latest.values().sum::<i64>()
    }
}

fn running_sum(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
    let ledger = cx
        .state
        .get_or_insert_with(|| Box::new(Ledger::default()))
        .downcast_mut::<Ledger>()
        .ok_or_else(|| FilterError("RunningSum: its state was replaced".into()))?;
    for p in cx.packets_in.iter() {
        if p.format_string() == "%ld" {
            ledger.latest.insert(p.src_rank(), p.unpack::<i64>("%ld")?);
        } else {
            ledger.own += i64::from(p.unpack::<(i32, i32)>("%d %d")?.0);
        }
    }
    let children = &cx.info.children;
    ledger.latest.retain(|r, _| children.contains(r));
    let first = &cx.packets_in[0];
    let mut out = Packet::new(first.stream_id(), first.tag(), "%ld", ledger.total())?;
    out.set_src_rank(cx.info.rank);
    cx.packets_out.push(out);
    Ok(())
}

/// `RunningSum`'s state, as a packet it takes in: its total.
fn running_sum_state(state: &FilterState, stream: u32) -> Option<Packet> {
    let ledger = state.as_ref()?.downcast_ref::<Ledger>()?;
    Packet::new(
        stream,
        converse_tbon::FIRST_APPLICATION_TAG,
        "%ld",
        ledger.total(),
    )
    .ok()
}

converse_tbon::export_filter!(RunningSum, "", running_sum, running_sum_state);
