//! `bench mpi-same-job`: the MPI layer alone against raw MPI *inside the same two processes*,
//! in alternating blocks.
//!
//! Why: on this machine (a two-vCPU virtual machine) a whole job sometimes runs 2–4× slower
//! from 4 KiB up, raw MPI as often as the layer, and stays so for its lifetime; two jobs run one
//! after another can each land in either state. A ratio of two separate jobs then measures the
//! state, not the layer (rounds of `bench pingpong --layer mpi` range 0.58–1.72 at 1 MiB). Here
//! each round times raw MPI (`MPI_Send`/`MPI_Recv` of a known size on `MPI_COMM_WORLD`) and the
//! layer (the `Machine` trait driven directly, as `pe-direct` does) back to back in one job, in
//! an order that alternates, so both see the same state and the ratio is the layer's own cost.

use crate::report::histogram;
use anyhow::Context;
use converse_machine::{BootConfig, Machine, Message, Settings};
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::path::Path;
use std::time::Instant;

/// Start `mpirun -n 2` of this program's rank side, and print per size the ratio layer / raw
/// of each round's p50, with the median and range over rounds.
pub(crate) fn run(sizes: &[usize], iters: u64, rounds: u16) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("locating this program")?;
    let csv = std::env::temp_dir().join(format!("bench-mpi-same-job-{}.csv", std::process::id()));
    let sizes_arg = sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let status = std::process::Command::new("mpirun")
        .args(["--oversubscribe", "-n", "2"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg(&me)
        .args(["pe-mpi-same-job", "--sizes", &sizes_arg])
        .args([
            "--iters",
            &iters.to_string(),
            "--rounds",
            &rounds.to_string(),
        ])
        .arg("--csv")
        .arg(&csv)
        .status()
        .context("running mpirun (is an MPI installed?)")?;
    anyhow::ensure!(status.success(), "the MPI job failed: {status}");
    let text =
        std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
    let _ = std::fs::remove_file(&csv);
    // round,bytes,raw_p50_ns,layer_p50_ns
    let mut rows: Vec<(usize, usize, f64, f64)> = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        anyhow::ensure!(
            f.len() == 4,
            "a malformed line in {}: {line}",
            csv.display()
        );
        rows.push((f[0].parse()?, f[1].parse()?, f[2].parse()?, f[3].parse()?));
    }
    converse::input::out_line(&format!(
        "MPI layer alone / raw MPI (known size), one-way p50, both in the same 2-rank job, \
         blocks alternating; {rounds} rounds of {iters} round trips per size"
    ));
    converse::input::out_line(&format!(
        "{:>9} | {:>10} {:>10} | {:>20} | {:>9} | per round",
        "bytes", "raw us", "layer us", "ratio median (range)", "<= 1.1x"
    ));
    for &size in sizes {
        let of: Vec<&(usize, usize, f64, f64)> = rows.iter().filter(|r| r.1 == size).collect();
        let mut ratios: Vec<f64> = of.iter().map(|r| r.3 / r.2).collect();
        let per_round = ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(" ");
        let within = ratios.iter().filter(|&&r| r <= 1.1).count();
        let mut raw: Vec<f64> = of.iter().map(|r| r.2).collect();
        let mut layer: Vec<f64> = of.iter().map(|r| r.3).collect();
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        };
        let (raw_m, layer_m, ratio_m) = (med(&mut raw), med(&mut layer), med(&mut ratios));
        converse::input::out_line(&format!(
            "{size:>9} | {:>10.3} {:>10.3} | {:>6.2} ({:.2}-{:.2}) | {within:>4}/{:<4} | {per_round}",
            raw_m / 1e3,
            layer_m / 1e3,
            ratio_m,
            ratios.first().copied().unwrap_or(f64::NAN),
            ratios.last().copied().unwrap_or(f64::NAN),
            ratios.len()
        ));
    }
    Ok(())
}

/// One rank: boot the MPI layer (which initializes MPI), then per round and size a raw block
/// and a layer block, alternating which goes first; rank 0 writes the p50s.
pub(crate) fn rank_main(
    sizes: &[usize],
    iters: u64,
    rounds: u16,
    csv: &Path,
    settings: Settings,
) -> anyhow::Result<()> {
    let layer = converse::find_layer("mpi")?;
    let cfg = BootConfig {
        settings,
        ..BootConfig::new(2)
    };
    let mut nodes = (layer.boot)(&cfg)?;
    anyhow::ensure!(nodes.len() == 1, "one rank per process");
    let m = &mut nodes[0];
    anyhow::ensure!(m.table().num_nodes() == 2, "run it with mpirun -n 2");
    let me = m.my_node();
    let mut got: Option<Message> = None;
    m.barrier(&mut |x| got = Some(x))?;
    anyhow::ensure!(got.is_none(), "a message before the first block");
    let warmup = crate::pingpong::warmup(iters);
    let mut out = String::from("round,bytes,raw_p50_ns,layer_p50_ns\n");
    for round in 0..rounds as usize {
        for (k, &size) in sizes.iter().enumerate() {
            let (raw, layer) = if (round + k) % 2 == 0 {
                let r = raw_block(me, size, iters, warmup)?;
                (r, layer_block(&mut **m, size, iters, warmup)?)
            } else {
                let l = layer_block(&mut **m, size, iters, warmup)?;
                (raw_block(me, size, iters, warmup)?, l)
            };
            out += &format!("{round},{size},{raw},{layer}\n");
        }
    }
    let mut got: Option<Message> = None;
    m.barrier(&mut |x| got = Some(x))?;
    if me == 0 {
        std::fs::write(csv, out).with_context(|| format!("writing {}", csv.display()))?;
    }
    m.exit(0)?;
    Ok(())
}

/// Raw MPI ping-pong of `size` bytes on the world communicator (the layer's own traffic is on
/// duplicates of it): p50 of one-way times, ns, on rank 0 (0 elsewhere).
fn raw_block(me: usize, size: usize, iters: u64, warmup: u64) -> anyhow::Result<u64> {
    let mut buf = vec![0u8; size];
    let mut h = histogram()?;
    let peer = (1 - me) as c_int;
    // SAFETY: predefined handles of an initialized MPI.
    let (world, byte) = unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_UINT8_T) };
    // SAFETY: the world communicator of an initialized MPI.
    unsafe { ffi::MPI_Barrier(world) };
    for i in 0..iters + warmup {
        let t = Instant::now();
        // SAFETY: `buf` holds `size` bytes for the whole call.
        let send = |buf: &[u8]| unsafe {
            ffi::MPI_Send(
                buf.as_ptr() as *const c_void,
                size as c_int,
                byte,
                peer,
                9,
                world,
            )
        };
        // SAFETY: `buf` has room for `size` bytes for the whole call; status ignored.
        let recv = |buf: &mut [u8]| unsafe {
            ffi::MPI_Recv(
                buf.as_mut_ptr() as *mut c_void,
                size as c_int,
                byte,
                peer,
                9,
                world,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        if me == 0 {
            send(&buf);
            recv(&mut buf);
        } else {
            recv(&mut buf);
            send(&buf);
        }
        if i >= warmup {
            h.saturating_record((t.elapsed().as_nanos() as u64 / 2).max(1));
        }
    }
    Ok(h.value_at_quantile(0.5))
}

/// The layer's ping-pong of `size`-byte messages, as `pe-direct` times it.
fn layer_block(m: &mut dyn Machine, size: usize, iters: u64, warmup: u64) -> anyhow::Result<u64> {
    // SAFETY: the world communicator of an initialized MPI.
    unsafe { ffi::MPI_Barrier(ffi::RSMPI_COMM_WORLD) };
    let mut got = None;
    let h = crate::direct::layer_pingpong(m, size, iters, warmup, &mut got)?;
    // Rank 1's last echo may still be in flight (a large send completes once it is matched):
    // the next block's barrier drives MPI's progress, which finishes it.
    Ok(h.value_at_quantile(0.5))
}
