//! Ping-pong between PE 0 and PE 1 on a layer, driven by handlers as an application would be:
//! PE 1 forwards the message back as it came, PE 0 times each round trip and sends the same
//! buffer again. The raw baseline for the layer runs first, in the same `bench` run.
//!
//! The in-process layer runs inside this process. Any other layer runs as a real job: `bench`
//! starts `charmrun +p2 bench pe-pingpong ...`, whose PE 0 writes its figures as CSV for this
//! process to print next to the baseline.

use crate::plot;
use crate::raw;
use crate::report::{self, histogram, Row};
use anyhow::Context;
use converse::{Message, Runtime};
use hdrhistogram::Histogram;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

struct State {
    sizes: Vec<usize>,
    iters: u64,
    warmup: u64,
    size_idx: usize,
    done: u64,
    sent_at: Instant,
    hist: Histogram<u64>,
    rows: Vec<Row>,
    finished: bool,
}

/// Warm-up round trips before the timed ones.
pub(crate) fn warmup(iters: u64) -> u64 {
    (iters / 10).max(10)
}

/// `bench pingpong`: baseline, then the layer, then the table (and CSV). `settings` (the
/// `+set` ones of bench's command line) go to every job of the layer; `mpi_too` adds raw
/// Open MPI (or whichever MPI `mpirun` starts) from the same run.
///
/// With `rounds` above 1 the whole measurement is repeated, the order of its three parts
/// (raw baselines, the runtime, the layer alone) rotated each round, and every figure printed
/// is the median over the rounds; the runtime's and the layer alone's p50 against raw's are
/// also given per round. The machine's speed can change from one job to the next (this one
/// flips between two states for minutes at a time), and a ratio taken within a round, its
/// jobs back to back, is less exposed to that than one between two medians.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    csv: Option<&Path>,
    settings: &converse_machine::Settings,
    mpi_too: bool,
    plot: Option<&Path>,
    rounds: usize,
) -> anyhow::Result<()> {
    let w = warmup(iters);
    anyhow::ensure!(
        !under_mpirun(layer) || cfg!(feature = "mpi"),
        "--layer {layer} needs bench built with --features mpi (its raw MPI baseline is built in)"
    );
    anyhow::ensure!(
        !mpi_too || cfg!(feature = "mpi"),
        "--mpi-too needs bench built with --features mpi"
    );
    let set: Vec<String> = settings
        .iter()
        .flat_map(|(k, v)| ["+set".to_owned(), format!("{k}={v}")])
        .collect();
    let set: Vec<&str> = set.iter().map(String::as_str).collect();
    // An unknown layer is refused by `baselines`, the first part of the first round, before
    // any job starts.
    let mut all_rounds = Vec::with_capacity(rounds);
    for r in 0..rounds {
        all_rounds.push(one_round(layer, sizes, iters, &set, mpi_too, r)?);
    }
    let round = Round::median(&all_rounds);
    report::print_pingpong(&round.rows, &round.raw);
    if !round.direct.is_empty() {
        converse::input::out_line(
            "layer alone (Machine trait driven directly, no runtime), one-way p50 us, MB/s:",
        );
        report::print_series(&round.direct);
    }
    for (title, series) in round.more.iter().filter(|(_, s)| !s.is_empty()) {
        converse::input::out_line(&format!("{title}, one-way p50 us, MB/s:"));
        report::print_series(series);
    }
    if all_rounds.len() > 1 {
        print_round_ratios(&all_rounds);
    }
    converse::input::out_line(&format!(
        "(one-way = round trip / 2; {iters} timed round trips per size after {w} warm-up)"
    ));
    if all_rounds.len() > 1 {
        converse::input::out_line(&format!(
            "(every figure above the ratios: the median over {} rounds)",
            all_rounds.len()
        ));
    }
    let all: Vec<&Row> = round
        .rows
        .iter()
        .chain(&round.direct)
        .chain(round.raw.iter())
        .chain(round.more.iter().flat_map(|(_, s)| s))
        .collect();
    if let Some(path) = csv {
        report::write_csv(path, &all)?;
    }
    if let Some(path) = plot {
        let title = format!("ping-pong on {layer}: the runtime, the layer alone, raw baselines");
        plot::write_svg(path, &title, &figure(layer, &all))?;
    }
    Ok(())
}

/// What one round of `bench pingpong` measured.
struct Round {
    /// The runtime on the layer.
    rows: Vec<Row>,
    /// The layer alone (none for the in-process layer).
    direct: Vec<Row>,
    /// The raw baseline the ratio is taken against.
    raw: Vec<Row>,
    /// Further series printed below the table.
    more: Vec<Series>,
}

/// A series printed below the table, with its title.
type Series = (&'static str, Vec<Row>);

impl Round {
    /// Every figure the median over `rounds` (the first round when there is one).
    fn median(rounds: &[Round]) -> Round {
        let pick = |f: &dyn Fn(&Round) -> &Vec<Row>| -> Vec<Row> {
            let first = f(&rounds[0]);
            first
                .iter()
                .map(|r| {
                    let same: Vec<&Row> = rounds
                        .iter()
                        .filter_map(|x| f(x).iter().find(|o| o.what == r.what && o.size == r.size))
                        .collect();
                    Row::median_of(&same)
                })
                .collect()
        };
        Round {
            rows: pick(&|x| &x.rows),
            direct: pick(&|x| &x.direct),
            raw: pick(&|x| &x.raw),
            more: (0..rounds[0].more.len())
                .map(|i| (rounds[0].more[i].0, pick(&|x| &x.more[i].1)))
                .collect(),
        }
    }
}

/// One round: the raw baselines, the runtime and the layer alone, in an order rotated by
/// `turn` (so that no part always runs first, or always right after another).
fn one_round(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    set: &[&str],
    mpi_too: bool,
    turn: usize,
) -> anyhow::Result<Round> {
    let w = warmup(iters);
    let (mut rows, mut direct) = (Vec::new(), Vec::new());
    let mut raw_rows = Vec::new();
    let mut more = Vec::new();
    for part in 0..3 {
        match (part + turn) % 3 {
            0 => (raw_rows, more) = baselines(layer, sizes, iters, w, mpi_too)?,
            1 if layer == "local" => {
                let args = ["bench", "+p2", "+quiet", "+machine", "local"];
                let rt = Runtime::from_args(args.iter().chain(set).copied())?;
                rows = job(rt, sizes, iters, layer, 1)?;
            }
            1 => rows = under_charmrun_with(layer, sizes, iters, "pe-pingpong", &[], set)?,
            _ if layer == "local" => {}
            _ => direct = under_charmrun_with(layer, sizes, iters, "pe-direct", &[], set)?,
        }
    }
    Ok(Round {
        rows,
        direct,
        raw: raw_rows,
        more,
    })
}

/// The raw baseline of `layer`, and the further series printed below the table: MPI's
/// receive of an unknown size, and MPI into pre-posted receives (the MPI layer's design
/// without the layer); UDP on unconnected sockets (a layer with one socket for all its peers
/// cannot connect it); for shared memory, the copy-once floor of a single-copy path; raw Open
/// MPI if asked. Only the raw MPI job has the extra MPI series; every other baseline is its
/// own.
fn baselines(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    w: u64,
    mpi_too: bool,
) -> anyhow::Result<(Vec<Row>, Vec<Series>)> {
    let raw_rows: Vec<Row> = match layer {
        "local" => sizes
            .iter()
            .map(|&s| raw::crossbeam_pingpong(s, iters, w))
            .collect::<anyhow::Result<_>>()?,
        "tcp" => raw::tcp_pingpong(sizes, iters, w)?,
        "udp" => raw::udp_pingpong(sizes, iters, w, true)?,
        "si" => raw::shm_pingpong(sizes, iters, w)?,
        // si+mpi's raw baseline is MPI's: both ranks on one host, so it shows what the
        // shared-memory part wins over the MPI library's own.
        "mpi" | "si+mpi" => launched("mpi", sizes, iters, "raw-mpi")?,
        // Any other composite runs here on one host, where every peer is the SI part's: the
        // baseline is SI's, and the figures show what the idle network part costs.
        c if c.starts_with("si+") => raw::shm_pingpong(sizes, iters, w)?,
        // UCX's own tag-matching ping-pong over the layer's transports.
        l if converse_ucx::tls_of(l).is_some() => {
            raw::ucx_perftest(converse_ucx::tls_of(l).flatten(), sizes, iters, w)?
        }
        // libfabric's own ping-pong over the provider the transport string names (plain
        // `ofi`: tcp;ofi_rxm, the one it picks here).
        ofi if ofi.starts_with("ofi") => {
            let provider = converse_ofi::TRANSPORTS
                .iter()
                .find(|t| t.0 == ofi)
                .and_then(|t| t.1)
                .unwrap_or("tcp;ofi_rxm");
            raw::fi_pingpong(provider, sizes, iters + w)?
        }
        other => anyhow::bail!(
            "no raw baseline for layer '{other}' yet (layers: local, tcp, udp, si, mpi, si+mpi, \
             ofi, ofi+PROTOCOL, ucx, ucx+TRANSPORT, and on one host si+NET)"
        ),
    };
    let RawMpi {
        known: raw_rows,
        probe,
        prepost,
    } = RawMpi::split(raw_rows);
    let mut more = vec![(PROBE_TITLE, probe), (PREPOST_TITLE, prepost)];
    if layer == "udp" {
        more.push((
            "raw UDP on unconnected sockets (sendto/recvfrom)",
            raw::udp_pingpong(sizes, iters, w, false)?,
        ));
    }
    if layer == "si" {
        let cma = raw::cma_pingpong(sizes, iters, w).unwrap_or_else(|e| {
            converse::input::error_line(&format!("bench: no copy-once baseline here: {e:#}"));
            Vec::new()
        });
        more.push((
            "raw copy-once (process_vm_readv from the peer's buffer into a reused one)",
            cma,
        ));
    }
    if mpi_too && !under_mpirun(layer) {
        let mpi = RawMpi::split(launched("mpi", sizes, iters, "raw-mpi")?);
        more.push((
            "raw MPI (mpirun -n 2, blocking send and receive)",
            mpi.known,
        ));
        more.push((PROBE_TITLE, mpi.probe));
        more.push((PREPOST_TITLE, mpi.prepost));
    }
    Ok((raw_rows, more))
}

/// Per size, the runtime's and the layer alone's p50 over raw's p50 within each round: the
/// median and the range over the rounds.
fn print_round_ratios(rounds: &[Round]) {
    let ratios = |pick: &dyn Fn(&Round) -> &Vec<Row>, size: usize| -> Vec<f64> {
        rounds
            .iter()
            .filter_map(|x| {
                let a = pick(x).iter().find(|r| r.size == size)?;
                let b = x.raw.iter().find(|r| r.size == size)?;
                Some(a.p50_ns as f64 / b.p50_ns.max(1) as f64)
            })
            .collect()
    };
    // The same median as every figure of the table above (`Row::median_of`).
    let show = |v: Vec<f64>| {
        let lo = v.iter().copied().reduce(f64::min);
        let hi = v.iter().copied().reduce(f64::max);
        match (lo, hi) {
            (Some(lo), Some(hi)) => {
                format!("{:>6.2} ({:.2}-{:.2})", report::median(v), lo, hi)
            }
            _ => format!("{:>6} {:>11}", "-", ""),
        }
    };
    converse::input::out_line(&format!(
        "p50 over raw's p50 within each round, median (lowest-highest) over {} rounds:",
        rounds.len()
    ));
    converse::input::out_line(&format!(
        "{:>9} | {:>18} | {:>18}",
        "bytes", "runtime", "layer alone"
    ));
    for r in &rounds[0].rows {
        let rt = ratios(&|x| &x.rows, r.size);
        let direct = ratios(&|x| &x.direct, r.size);
        converse::input::out_line(&format!(
            "{:>9} | {:>18} | {:>18}",
            r.size,
            show(rt),
            show(direct)
        ));
    }
}

/// The table as two panels, one line per path (the runtime on the layer, the layer alone, each
/// raw baseline): one-way p50 latency and bandwidth (from the mean time, as the table's) against message size, both on log axes.
fn figure(layer: &str, rows: &[&Row]) -> [plot::Panel; 2] {
    let name = |r: &Row| {
        if r.what == layer {
            format!("runtime on {layer}")
        } else {
            r.what.clone()
        }
    };
    let series = |y: &dyn Fn(&Row) -> f64| {
        plot::series_by_name(rows.iter().map(|r| (name(r), r.size as f64, y(r))))
    };
    [
        plot::Panel {
            title: "one-way latency (p50)".into(),
            x_label: "message size (bytes)".into(),
            y_label: "microseconds".into(),
            kind: plot::Kind::Lines {
                log_x: true,
                log_y: true,
            },
            series: series(&|r| r.p50_ns as f64 / 1e3),
        },
        plot::Panel {
            title: "bandwidth".into(),
            x_label: "message size (bytes)".into(),
            y_label: "MB/s".into(),
            kind: plot::Kind::Lines {
                log_x: true,
                log_y: true,
            },
            series: series(&|r| r.mb_per_s()),
        },
    ]
}

const PROBE_TITLE: &str = "raw MPI receiving an unknown size (matched probe + receive)";
const PREPOST_TITLE: &str = "raw MPI into pre-posted receives (the layer's small-message design, \
                             no layer: 32 persistent receives for any source, MPI_Test, copy \
                             out, restart; MPI_Isend)";

/// The series of the raw MPI job (`raw_mpi.rs`), told apart by their names.
struct RawMpi {
    /// Known-size blocking send and receive (and any row of another baseline).
    known: Vec<Row>,
    /// `raw-mpi-probe`: receiving an unknown size.
    probe: Vec<Row>,
    /// `raw-mpi-prepost`: the layer's design for small messages.
    prepost: Vec<Row>,
}

impl RawMpi {
    fn split(rows: Vec<Row>) -> RawMpi {
        let (mut known, mut probe, mut prepost) = (Vec::new(), Vec::new(), Vec::new());
        for r in rows {
            if r.what.ends_with("-probe") {
                probe.push(r);
            } else if r.what.ends_with("-prepost") {
                prepost.push(r);
            } else {
                known.push(r);
            }
        }
        RawMpi {
            known,
            probe,
            prepost,
        }
    }
}

/// The command that starts a job of `nodes` nodes of this program on `layer`: `mpirun -n 2`
/// for MPI (two ranks only), else `charmrun +pN`; with `ppn` above 1, nodes of `ppn` PEs each.
/// Whether `layer`'s jobs start under `mpirun` (the MPI layer and the composite over it).
fn under_mpirun(layer: &str) -> bool {
    matches!(layer, "mpi" | "si+mpi")
}

pub(crate) fn launcher(
    layer: &str,
    me: &Path,
    nodes: usize,
    ppn: usize,
) -> anyhow::Result<std::process::Command> {
    if under_mpirun(layer) {
        let mut c = std::process::Command::new("mpirun");
        let version = std::process::Command::new("mpirun")
            .arg("--version")
            .output()
            .context("running mpirun (is an MPI installed?)")?;
        if String::from_utf8_lossy(&version.stdout).contains("Open MPI") {
            // Open MPI counts cores, not hardware threads, and refuses root without these.
            c.arg("--oversubscribe")
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        }
        c.args(["-n", "2"]);
        return Ok(c);
    }
    let mut c = std::process::Command::new(charmrun_beside(me)?);
    c.args([
        format!("+p{}", nodes * ppn).as_str(),
        "++quiet",
        "++timelimit",
        "600",
    ]);
    if ppn > 1 {
        c.args(["++ppn", &ppn.to_string()]);
    }
    Ok(c)
}

/// The charmrun built with this bench (next to it).
pub(crate) fn charmrun_beside(me: &Path) -> anyhow::Result<std::path::PathBuf> {
    let charmrun = me.with_file_name("charmrun");
    anyhow::ensure!(
        charmrun.is_file(),
        "{} not found: build it (cargo build --release -p charmrun)",
        charmrun.display()
    );
    Ok(charmrun)
}

/// Run `mode` (the layer's ping-pong, the layer alone, or a raw baseline) as a 2-node job of
/// its own; read back node 0's figures.
fn launched(layer: &str, sizes: &[usize], iters: u64, mode: &str) -> anyhow::Result<Vec<Row>> {
    under_charmrun_with(layer, sizes, iters, mode, &[], &[])
}

/// The handler-driven ping-pong between the first PEs of two nodes of `ppn` PEs each on
/// `layer` (so with `ppn` above 1 every message goes through both communication threads);
/// node 0's figures.
pub(crate) fn across_nodes(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    ppn: usize,
) -> anyhow::Result<Vec<Row>> {
    let peer = ppn.to_string();
    let mut extra = vec!["--peer", peer.as_str()];
    if under_mpirun(layer) && ppn > 1 {
        extra.extend(["+ppn", peer.as_str()]);
    }
    run_job(layer, sizes, iters, "pe-pingpong", &[], &extra, 2, ppn)
}

/// As [`launched`], with the launcher started through `prefix` (`ip netns exec NS`, say) and
/// `extra` runtime arguments (`+set KEY=VALUE`) for the job.
pub(crate) fn under_charmrun_with(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    mode: &str,
    prefix: &[&str],
    extra: &[&str],
) -> anyhow::Result<Vec<Row>> {
    run_job(layer, sizes, iters, mode, prefix, extra, 2, 1)
}

/// As [`under_charmrun_with`], in a job of `nodes` nodes of one PE each: node 0 plays
/// against node 1, the other nodes idle (so a layer serves more peers than the two that talk).
pub(crate) fn on_nodes(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    nodes: usize,
    mode: &str,
    extra: &[&str],
) -> anyhow::Result<Vec<Row>> {
    run_job(layer, sizes, iters, mode, &[], extra, nodes, 1)
}

/// Run `bench MODE --sizes .. --iters .. --csv FILE +machine LAYER +quiet EXTRA` as a job of
/// `nodes` nodes of `ppn` PEs (through `prefix`, if any); PE 0's rows, read back from the CSV.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_job(
    layer: &str,
    sizes: &[usize],
    iters: u64,
    mode: &str,
    prefix: &[&str],
    extra: &[&str],
    nodes: usize,
    ppn: usize,
) -> anyhow::Result<Vec<Row>> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let out = std::env::temp_dir().join(format!("bench-pingpong-{}.csv", std::process::id()));
    let sizes_arg = crate::report::size_list(sizes);
    let launch = launcher(layer, &me, nodes, ppn)?;
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = std::process::Command::new(first);
            c.args(rest)
                .arg(launch.get_program())
                .args(launch.get_args())
                .envs(launch.get_envs().filter_map(|(k, v)| Some((k, v?))));
            c
        }
        None => launch,
    };
    let status = cmd
        .arg(&me)
        .args([
            mode,
            "--sizes",
            &sizes_arg,
            "--iters",
            &iters.to_string(),
            "--csv",
        ])
        .arg(&out)
        .args(match mode {
            "pe-direct" => vec!["--layer", layer, "+quiet"],
            "raw-mpi" => vec![],
            _ => vec!["+machine", layer, "+quiet"],
        })
        .args(extra)
        .status()
        .context("starting the job")?;
    anyhow::ensure!(
        status.success(),
        "the {layer} ping-pong job failed: {status}"
    );
    let rows = report::read_csv(&out);
    let _ = std::fs::remove_file(&out);
    rows
}

/// `bench pe-pingpong`: one PE of a launched ping-pong job (PE 0 against `peer`); PE 0
/// writes the CSV.
pub(crate) fn pe_main(
    rt: Runtime,
    sizes: &[usize],
    iters: u64,
    csv: &Path,
    peer: usize,
) -> anyhow::Result<()> {
    let layer = rt.layer().to_owned();
    let rows = job(rt, sizes, iters, &layer, peer)?;
    if !rows.is_empty() {
        report::write_csv(csv, &rows.iter().collect::<Vec<_>>())?;
    }
    Ok(())
}

/// The handler-driven ping-pong between PE 0 and PE `peer` on `rt`; PE 0's rows (empty on
/// other PEs).
pub(crate) fn job(
    rt: Runtime,
    sizes: &[usize],
    iters: u64,
    label: &str,
    peer: usize,
) -> anyhow::Result<Vec<Row>> {
    let result = Mutex::new(Vec::new());
    let label = label.to_owned();
    let code = rt.run(|pe| {
        let state = Rc::new(RefCell::new(State {
            sizes: sizes.to_vec(),
            iters,
            warmup: warmup(iters),
            size_idx: 0,
            done: 0,
            sent_at: Instant::now(),
            hist: histogram().unwrap_or_else(|e| pe.abort(&e.to_string())),
            rows: Vec::new(),
            finished: false,
        }));
        let st = state.clone();
        let label = label.clone();
        let ball = pe.register("ball", move |pe, msg| {
            if pe.my_pe() == peer {
                return pe.forward(0, msg);
            }
            let now = Instant::now();
            let mut s = st.borrow_mut();
            if s.done >= s.warmup {
                let ns = (now - s.sent_at).as_nanos() as u64 / 2;
                // Values beyond the histogram's minute are clamped, not refused.
                s.hist.saturating_record(ns.max(1));
            }
            s.done += 1;
            let msg = if s.done < s.iters + s.warmup {
                msg
            } else {
                let size = s.sizes[s.size_idx];
                let row = Row::from_hist(&label, size, &s.hist);
                s.rows.push(row);
                s.hist.reset();
                s.done = 0;
                s.size_idx += 1;
                match s.sizes.get(s.size_idx) {
                    Some(&next) => {
                        let mut m = Message::new(next);
                        m.set_handler(msg.handler());
                        m
                    }
                    None => {
                        s.finished = true;
                        return;
                    }
                }
            };
            s.sent_at = Instant::now();
            drop(s);
            pe.forward(peer, msg);
        });
        if pe.my_pe() == 0 {
            let first = state.borrow().sizes.first().copied();
            if let Some(size) = first {
                state.borrow_mut().sent_at = Instant::now();
                pe.send_msg(peer, ball, Message::new(size));
            }
            let st = state.clone();
            pe.run_until(|_| st.borrow().finished || st.borrow().sizes.is_empty());
            if let Ok(mut r) = result.lock() {
                r.append(&mut state.borrow_mut().rows);
            }
            pe.exit(0);
        }
    })?;
    anyhow::ensure!(code == 0, "the ping-pong job exited with {code}");
    Ok(result.into_inner().unwrap_or_default())
}
