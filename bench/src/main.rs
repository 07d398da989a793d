//! `bench`: latency, bandwidth and message rate of the runtime's layers, each printed next to a
//! raw baseline measured in the same run.
//!
//! ```text
//! bench pingpong [--layer local] [--sizes 8,64,...] [--iters N] [--csv FILE] [--mpi-too]
//!     [--plot FILE.svg] [+set K=V ...]
//!     (--layer mpi needs `--features mpi` and starts its jobs with mpirun)
//! bench rate [--messages N] [--csv FILE] [--plot FILE.svg]
//! bench rate --across [--layers tcp,udp] [--messages N] [--rounds R] [+set K=V ...]
//! bench startup [--pes 2,4,...] [--layer tcp] [--charmrun-args "..."] [--plot FILE.svg]
//! bench tbon [--backends 8,16,...] [--layers tcp,si] [--runs R] [--csv FILE] [--plot FILE.svg]
//! bench tbon-attach [--backends 4] [--rounds 5] [--iters 2000] [--tree g:2]
//! bench smp [--layers tcp,udp,si] [--iters N] [--messages N] [--ks 1,2]
//! bench idle [--layer si] [--secs S] [--ppn K]
//! bench multi [--sizes 8,65536,1048576] [--iters N] [--messages N] [--runs R]   (root)
//! bench udp [--iters N] [--runs R] [--parts bandwidth,loss,contention,nodes] [+set K=V ...]
//! bench tasks [--layers local,si,tcp,udp] [--iters N] [--rounds R]
//! bench seeds [--layers local,si,tcp,udp] [--reps N] [--rounds R]
//! bench mpi-same-job [--sizes 8,4096,...] [--iters N] [--rounds R]   (--features mpi)
//! bench coll [--layers local] [--pes 2,4,...,64] [--ppn 1] [--iters N] [--rounds R] [+set K=V ...]
//! bench topo [--layer local] [--pes 8,16] [--sizes 8,65536] [--iters N] [--contenders 2,4,8]
//! ```

mod args;
mod ccs;
mod coll;
mod direct;
mod endpoint;
mod flow;
mod idle;
#[cfg(feature = "mpi")]
mod mpi_same_job;
mod multi;
mod onesided;
mod pingpong;
mod plot;
mod rate;
mod rate_across;
mod raw;
#[cfg(feature = "mpi")]
mod raw_mpi;
/// Pictures rendered as a person sees them, for the figures' tests (the workspace's helper).
#[cfg(test)]
#[path = "../../tests/src/render.rs"]
mod render;
mod report;
mod seeds;
mod smp;
mod startup;
mod tasks;
mod tbon;
mod tbon_attach;
mod tbon_kill;
mod topo;
mod typed;
mod udp;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    version,
    name = "bench",
    about = "Benchmarks of the runtime next to raw baselines from the same run"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Ping-pong between two PEs: one-way latency percentiles and bandwidth per size.
    Pingpong {
        /// The layer to measure (its `+machine` name).
        #[arg(long, default_value = "local")]
        layer: String,
        /// Message sizes in bytes, comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "8,64,512,4096,32768,262144,1048576,4194304",
            value_parser = args::size
        )]
        sizes: Vec<usize>,
        /// Timed round trips per size (after as many warm-up ones as a tenth of this).
        #[arg(long, default_value_t = 20_000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Write the figures as CSV here too.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Also measure raw MPI (`mpirun -n 2`) in the same run (bench built with
        /// `--features mpi`; `--layer mpi` measures it anyway).
        #[arg(long)]
        mpi_too: bool,
        /// Draw the table as an SVG figure here.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Repeat the measurement this many times, the order of its parts rotated, and print
        /// medians over the rounds with each round's ratio to raw.
        #[arg(long, default_value_t = 1, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// Converse Client-Server: a request's round trip beside a raw TCP request/response of the
    /// same pattern (a connection each), without and with a key.
    Ccs {
        /// Request sizes in bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,65536", value_parser = args::size)]
        sizes: Vec<usize>,
        /// Requests per timed block.
        #[arg(long, default_value_t = 2_000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Rounds, the order of the three blocks rotated each round.
        #[arg(long, default_value_t = 5, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
        /// The PE that answers: 0 (where the port is) or 1 (a message each way more).
        #[arg(long, default_value_t = 1)]
        pe: usize,
    },
    /// Open jobs (converse-endpoint): a call's round trip and 1 MiB's bandwidth between two
    /// separately started jobs, beside the same pair of PEs in one job on tcp and raw TCP.
    Endpoint {
        /// Message sizes in bytes, comma-separated (from 64 KiB on, bandwidth is shown).
        #[arg(long, value_delimiter = ',', default_value = "8,1048576", value_parser = args::size)]
        sizes: Vec<usize>,
        /// Round trips per size and part.
        #[arg(long, default_value_t = 2_000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Rounds, the order of the four parts rotated each round.
        #[arg(long, default_value_t = 5, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// One-sided transfers: a get and a put of N bytes beside the same bytes as a message, on
    /// each layer, in the same job.
    Onesided {
        /// Layers, comma-separated (`local`: in this process).
        #[arg(long, value_delimiter = ',', default_value = "local,si,tcp")]
        layers: Vec<String>,
        /// Sizes in bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,65536,1048576,16777216", value_parser = args::size)]
        sizes: Vec<usize>,
        /// Operations of each kind per size and round.
        #[arg(long, default_value_t = 200, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Rounds (a job each).
        #[arg(long, default_value_t = 3, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// FastFlow's blocks (converse-flow): items/s through a 4-stage pipeline and a farm, beside
    /// a raw crossbeam pipeline of the same shape (in one process) and the runtime's own
    /// message rate under the same window (every layer).
    Flow {
        /// Layers, comma-separated (`local`: in this process).
        #[arg(long, value_delimiter = ',', default_value = "local,si,tcp")]
        layers: Vec<String>,
        /// Item sizes in bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,4096,1048576", value_parser = args::size)]
        sizes: Vec<usize>,
        /// Items per job (fewer for large items: at most 2 GiB per job).
        #[arg(long, default_value_t = 100_000, value_parser = args::count64, allow_negative_numbers = true)]
        items: u64,
        /// Rounds (a job per kind each), the kinds' order rotated each round.
        #[arg(long, default_value_t = 3, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// One PE of a `bench flow` job.
    #[command(hide = true)]
    PeFlow {
        #[command(flatten)]
        job: Job,
        #[arg(long)]
        kind: String,
    },
    /// One PE of a `bench rate --across` job.
    #[command(hide = true)]
    PeRate {
        #[command(flatten)]
        job: Job,
    },
    /// One PE of a `bench onesided` job.
    #[command(hide = true)]
    PeOnesided {
        #[command(flatten)]
        job: Job,
    },
    /// Typed messages: a 32-byte struct ping-pong through the typed API (Pod and Serde codecs)
    /// beside the same struct encoded by hand through the byte API, in the same job.
    Typed {
        /// Layers, comma-separated (`local`: in this process).
        #[arg(long, value_delimiter = ',', default_value = "local,si,tcp")]
        layers: Vec<String>,
        /// Round trips of each kind per job.
        #[arg(long, default_value_t = 20_000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Rounds (a job each).
        #[arg(long, default_value_t = 5, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// One PE of a `bench typed` job.
    #[command(hide = true)]
    PeTyped {
        #[command(flatten)]
        job: Job,
    },
    /// The serving job of `bench endpoint`.
    #[command(hide = true)]
    PeEndpointServe {
        #[arg(long)]
        dir: PathBuf,
    },
    /// A client job of `bench endpoint`.
    #[command(hide = true)]
    PeEndpointClient {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        scheme: String,
        #[command(flatten)]
        job: Job,
    },
    /// Tasks (converse-tasks): a call with reply beside the hand-written round trip of the same
    /// job, spawn + join, yield; next to tokio's spawn + join and a crossbeam round trip.
    Tasks {
        /// Layers, comma-separated (`local`: in this process; `self`: one PE in this process,
        /// calling itself).
        #[arg(long, value_delimiter = ',', default_value = "local,si,tcp,udp")]
        layers: Vec<String>,
        /// Blocks, comma-separated: hand (the hand-written round trip), call, spawn, yield,
        /// reused (a call whose reply is the next request); the pool's figure only with all.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "hand,call,spawn,yield,reused"
        )]
        what: Vec<String>,
        /// Operations per timed block.
        #[arg(long, default_value_t = 20_000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Rounds (each: one block of every kind, the order rotated).
        #[arg(long, default_value_t = 5, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// Seed balancers (converse-tasks' seeds) on an uneven load, beside the same work placed
    /// statically in the same run.
    Seeds {
        /// Layers, comma-separated (`local`: in this process).
        #[arg(long, value_delimiter = ',', default_value = "local,si,tcp,udp")]
        layers: Vec<String>,
        /// Repetitions per job.
        #[arg(long, default_value_t = 3, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u32).range(1..))]
        reps: u32,
        /// Rounds (each: one job per balancer, the order rotated).
        #[arg(long, default_value_t = 5, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// One PE of a `bench seeds` job.
    #[command(hide = true)]
    PeSeeds {
        #[arg(long)]
        balancer: converse_tasks::seeds::Balancer,
        #[arg(long)]
        reps: u32,
        #[arg(long)]
        out: PathBuf,
    },
    /// One PE of a `bench tasks` job.
    #[command(hide = true)]
    PeTasks {
        #[arg(long, value_delimiter = ',')]
        what: Vec<String>,
        #[arg(long)]
        iters: u64,
        #[arg(long)]
        rounds: u16,
        #[arg(long)]
        out: PathBuf,
    },
    /// CPU used by each node of a 2-node job that has nothing to do (should be about 0%).
    Idle {
        /// The layer.
        #[arg(long, default_value = "si")]
        layer: String,
        /// Idle seconds measured.
        #[arg(long, default_value_t = 10.0, value_parser = args::seconds, allow_negative_numbers = true)]
        secs: f64,
        /// PEs per node (above 1: SMP mode, with a communication thread per node).
        #[arg(long, default_value_t = 1, value_parser = args::count, allow_negative_numbers = true)]
        ppn: usize,
    },
    /// One PE of the job `bench idle` measures.
    #[command(hide = true)]
    PeWait {
        #[arg(long)]
        secs: f64,
        #[arg(long)]
        out: PathBuf,
    },
    /// Wall time of a whole trivial job under charmrun, next to fork/exec + connect-back.
    Startup {
        /// PE counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32", value_parser = args::count)]
        pes: Vec<usize>,
        /// The layer.
        #[arg(long, default_value = "tcp")]
        layer: String,
        /// More charmrun options, split at white space (e.g. "++agents ++nodelist
        /// FILE ++remote-shell CMD": the job through one agent per host).
        #[arg(long, default_value = "")]
        charmrun_args: String,
        /// Draw the table as an SVG figure here.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// A PE of the trivial job `bench startup` times.
    #[command(hide = true)]
    PeNoop,
    /// The launcher of the start-up lower bound.
    #[command(hide = true)]
    LaunchFloor { nodes: usize },
    /// The child of the start-up lower bound.
    #[command(hide = true)]
    ConnectBack { addr: String },
    /// One PE of a launched ping-pong job (started by `bench pingpong` through charmrun).
    #[command(hide = true)]
    PePingpong {
        #[command(flatten)]
        job: Job,
        /// Pin this node's process to core (node number mod cores).
        #[arg(long)]
        pin: bool,
        /// The PE that plays against PE 0.
        #[arg(long, default_value_t = 1)]
        peer: usize,
    },
    /// One node of a layer-only ping-pong (the Machine trait driven directly).
    #[command(hide = true)]
    PeDirect {
        #[arg(long)]
        layer: String,
        #[command(flatten)]
        job: Job,
        /// Pin this node's process to core (node number mod cores).
        #[arg(long)]
        pin: bool,
    },
    /// The echoing side of the raw shared-memory baseline.
    #[command(hide = true)]
    RawShmEcho {
        path: String,
        #[arg(value_delimiter = ',')]
        sizes: Vec<usize>,
        rounds: u64,
    },
    /// The echoing side of the raw copy-once (process_vm_readv) baseline.
    #[command(hide = true)]
    RawCmaEcho {
        path: String,
        #[arg(value_delimiter = ',')]
        sizes: Vec<usize>,
        rounds: u64,
    },
    /// One rank of the raw MPI baseline (started by `bench pingpong --layer mpi` via mpirun).
    #[cfg(feature = "mpi")]
    #[command(hide = true)]
    RawMpi(Job),
    /// The MPI layer alone against raw MPI in the same 2-rank job, in alternating blocks
    /// (starts `mpirun -n 2` itself): per round, the ratio of their p50s at each size.
    #[cfg(feature = "mpi")]
    MpiSameJob {
        /// Message sizes in bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,4096,65536,1048576",
              value_parser = args::size)]
        sizes: Vec<usize>,
        /// Timed round trips per size and block (after a tenth as many warm-up ones).
        #[arg(long, default_value_t = 2000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Rounds (each: a raw and a layer block per size).
        #[arg(long, default_value_t = 10, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
    },
    /// One rank of `bench mpi-same-job`.
    #[cfg(feature = "mpi")]
    #[command(hide = true)]
    PeMpiSameJob {
        #[command(flatten)]
        job: Job,
        #[arg(long)]
        rounds: u16,
    },
    /// The echoing side of the raw UDP baseline.
    #[command(hide = true)]
    RawUdpEcho {
        addr: String,
        #[arg(value_delimiter = ',')]
        sizes: Vec<usize>,
        rounds: u64,
        #[arg(long)]
        unconnected: bool,
    },
    /// The echoing side of the raw TCP baseline.
    #[command(hide = true)]
    RawTcpEcho {
        addr: String,
        #[arg(value_delimiter = ',')]
        sizes: Vec<usize>,
        rounds: u64,
    },
    /// The MRNet paper's micro-benchmarks on the tree overlay (instantiation, broadcast+sum
    /// round trip, reduction throughput) for flat and 2-level trees, next to a raw flat TCP
    /// baseline.
    Tbon {
        /// Numbers of back-ends, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,16,32,64", value_parser = args::count)]
        backends: Vec<usize>,
        /// The layers the networks run on (`si`: every process on this host).
        #[arg(long, value_delimiter = ',', default_value = "tcp,si")]
        layers: Vec<String>,
        /// Failure recovery settings, side by side (`on`, `off`).
        #[arg(long, value_delimiter = ',', default_value = "on,off")]
        recovery: Vec<String>,
        /// Instead: kill an internal process of a 4x8 tree during a stream of waves, and
        /// time it to the first correct wave over the survivors (this many kills). Takes
        /// `--layers` and `--waves` only: the others are refused with it, not ignored.
        #[arg(long, conflicts_with_all = ["backends", "recovery", "runs", "rounds", "csv", "plot"],
              value_parser = args::count, allow_negative_numbers = true)]
        kill: Option<usize>,
        /// Runs per point; the best is reported (as the paper does).
        #[arg(long, default_value_t = 9, value_parser = args::count, allow_negative_numbers = true)]
        runs: usize,
        /// Round trips per run (at least 10).
        #[arg(long, default_value_t = 200, value_parser = args::count10, allow_negative_numbers = true)]
        rounds: usize,
        /// Waves per throughput run (with `--kill`: waves per kill, at least 100).
        #[arg(long, default_value_t = 2000, value_parser = args::count, allow_negative_numbers = true)]
        waves: usize,
        /// Write the figures as CSV here too.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Draw the table as an SVG figure here.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// The runtime's broadcast, reduction and barrier over growing PE counts, next to a raw
    /// tree of plain threads (in-process).
    Coll {
        /// Layers, comma-separated (`local`: in-process; others under charmrun).
        #[arg(long, value_delimiter = ',', default_value = "local")]
        layers: Vec<String>,
        /// PE counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64", value_parser = args::count)]
        pes: Vec<usize>,
        /// PEs per process (`++ppn`), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1", value_parser = args::count)]
        ppn: Vec<usize>,
        /// Operations per measurement.
        #[arg(long, default_value_t = 200, value_parser = args::count, allow_negative_numbers = true)]
        iters: usize,
        /// Rounds of the whole sweep; each cell is the median over them, with its range.
        #[arg(long, default_value_t = 1, value_parser = args::count, allow_negative_numbers = true)]
        rounds: usize,
    },
    /// One PE of a `bench coll` job.
    #[command(hide = true)]
    PeColl { iters: usize },
    /// Process topologies: broadcast, reduce and gather per topology class next to the
    /// runtime's own collectives on the same PEs, and the distributed mutex's lock rate.
    Topo {
        /// The layer (`local`: in-process; others under charmrun).
        #[arg(long, default_value = "local")]
        layer: String,
        /// PE counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,16", value_parser = args::count)]
        pes: Vec<usize>,
        /// Message sizes in bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,65536", value_parser = args::size)]
        sizes: Vec<usize>,
        /// Operations per measurement.
        #[arg(long, default_value_t = 200, value_parser = args::count, allow_negative_numbers = true)]
        iters: usize,
        /// Contending PEs for the mutex, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8", value_parser = args::count)]
        contenders: Vec<usize>,
        /// Lock+unlock pairs per PE.
        #[arg(long, default_value_t = 2000, value_parser = args::count, allow_negative_numbers = true)]
        locks: usize,
    },
    /// One PE of a `bench topo` job.
    #[command(hide = true)]
    PeTopo {
        mode: String,
        #[arg(value_delimiter = ',')]
        sizes: Vec<usize>,
        iters: usize,
    },
    /// Back-ends in C (MRNet's lightweight API) beside back-ends in Rust, attached to the
    /// leaves of one tree: the one-int wave round trip, in rounds alternating which goes
    /// first (needs `cargo build --release -p converse-tbon-lightweight` and a C compiler).
    TbonAttach {
        /// Back-ends of each kind.
        #[arg(long, default_value_t = 4, value_parser = args::count, allow_negative_numbers = true)]
        backends: usize,
        /// Rounds (each runs both kinds).
        #[arg(long, default_value_t = 5, value_parser = args::count, allow_negative_numbers = true)]
        rounds: usize,
        /// Waves timed per run (at least 10).
        #[arg(long, default_value_t = 2000, value_parser = args::count10, allow_negative_numbers = true)]
        iters: usize,
        /// The tree of internal processes (its leaves take the back-ends).
        #[arg(long, default_value = "g:2")]
        tree: String,
    },
    /// The network of `bench tbon-attach` (every PE, under charmrun).
    #[command(hide = true)]
    TbonAttachNet {
        tree: String,
        file: String,
        n: usize,
        iters: usize,
    },
    /// A Rust back-end of `bench tbon-attach`.
    #[command(hide = true)]
    TbonAttachBe { file: String, rank: u32 },
    /// The back-end program of `bench tbon`.
    #[command(hide = true)]
    TbonBe,
    /// Every process but the front-end of `bench tbon --kill`: leaves its pid in DIR.
    #[command(hide = true)]
    TbonKillBe { dir: String },
    /// A back-end of the raw baseline of `bench tbon`.
    #[command(hide = true)]
    TbonRawChild { addr: String },
    /// The UDP layer: 1 MiB bandwidth next to the TCP layer, goodput under 1% and 5% loss
    /// (root), latency with a busy process on the last core; with `--parts nodes`, small
    /// messages in a 2-node against a 4-node job (`+set udp.K=V` goes to those jobs).
    Udp {
        /// Round trips per measurement.
        #[arg(long, default_value_t = 2000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Repetitions of the bandwidth and contention measurements.
        #[arg(long, default_value_t = 5, value_parser = args::count, allow_negative_numbers = true)]
        runs: usize,
        /// Which parts to run (bandwidth, loss, contention, nodes).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "bandwidth,loss,contention"
        )]
        parts: Vec<String>,
    },
    /// A busy process on the last core (for `bench udp`).
    #[command(hide = true)]
    Spin,
    /// SMP mode: PE to PE inside a process, worker to worker across processes at `++ppn 2`
    /// against `++ppn 1`, the message rate of K PEs of one process, start-up.
    Smp {
        /// Layers for the across-processes ping-pong and the start-up.
        #[arg(long, value_delimiter = ',', default_value = "tcp,udp,si")]
        layers: Vec<String>,
        /// Round trips per ping-pong size.
        #[arg(long, default_value_t = 20_000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Messages per PE in the rate measurement.
        #[arg(long, default_value_t = 1_000_000, value_parser = args::count64, allow_negative_numbers = true)]
        messages: u64,
        /// PEs per process in the rate measurement, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = args::count)]
        ks: Vec<usize>,
    },
    /// si+tcp against si and tcp alone over two namespace hosts (needs root): same-host and
    /// cross-host ping-pong in one 4-process job, the all-to-all's wall time.
    Multi {
        /// Message sizes in bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "8,65536,1048576", value_parser = args::size)]
        sizes: Vec<usize>,
        /// Timed round trips per size.
        #[arg(long, default_value_t = 5_000, value_parser = args::count64, allow_negative_numbers = true)]
        iters: u64,
        /// Messages of the all-to-all.
        #[arg(long, default_value_t = 1_000_000, value_parser = args::count64, allow_negative_numbers = true)]
        messages: u64,
        /// Interleaved runs of every series (the least p50 is shown).
        #[arg(long, default_value_t = 3, value_parser = args::count, allow_negative_numbers = true)]
        runs: usize,
    },
    /// Messages sent and dispatched per second on one PE, next to a bare queue + call; with
    /// `--across`, 8 B messages per second from a PE to one of another process, with the
    /// layer's coalescing and without.
    Rate {
        /// Messages per measurement (default: 2,000,000; 1,000,000 with `--across`).
        #[arg(long, value_parser = args::count64, allow_negative_numbers = true)]
        messages: Option<u64>,
        /// Between two processes (2-node jobs on `--layers`) instead of on one PE.
        #[arg(long)]
        across: bool,
        /// Layers, with `--across`, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "tcp,udp")]
        layers: Vec<String>,
        /// Interleaved rounds, with `--across`.
        #[arg(long, default_value_t = 5, allow_negative_numbers = true,
              value_parser = clap::value_parser!(u16).range(1..))]
        rounds: u16,
        /// Write the figures as CSV here too.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Draw the table as an SVG figure here.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
}

/// What `bench pingpong` tells each 2-node job it launches: sizes, round trips, where node 0
/// writes its figures.
#[derive(clap::Args)]
struct Job {
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    #[arg(long)]
    iters: u64,
    #[arg(long)]
    csv: PathBuf,
}

/// The `+set KEY=VALUE` settings of bench's command line, as arguments for every job it
/// starts.
fn plus_set(settings: &converse_machine::Settings) -> Vec<String> {
    settings
        .iter()
        .flat_map(|(k, v)| ["+set".to_owned(), format!("{k}={v}")])
        .collect()
}

/// `on`/`off` values of a list option.
fn on_off(v: &[String]) -> anyhow::Result<Vec<bool>> {
    v.iter()
        .map(|r| match r.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(anyhow::anyhow!("--recovery takes on and off, not {r:?}")),
        })
        .collect()
}

fn main() -> ExitCode {
    // Runtime arguments (+machine, +p...) are for the launched job; clap sees the rest.
    let argv = match converse::input::args() {
        Ok(a) => a,
        Err(e) => {
            converse::input::error_line(&format!("bench: error: {e}"));
            return ExitCode::from(2);
        }
    };
    let (program_args, settings) = match converse::parse_args(argv.clone()) {
        Ok(a) => (a.program, a.settings),
        Err(e) => {
            converse::input::error_line(&format!("bench: error: {e}"));
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(program_args) {
        Ok(cli) => cli,
        // --help and --version: what was asked for, on stdout.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's first line is the error; the rest is usage advice.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("error: bad arguments");
            converse::input::error_line(&format!("bench: {first}"));
            return ExitCode::from(2);
        }
    };
    let result = match cli.cmd {
        Cmd::TbonBe => return tbon::backend(),
        Cmd::TbonAttach {
            backends,
            rounds,
            iters,
            tree,
        } => tbon_attach::run(backends, rounds, iters, &tree),
        Cmd::TbonAttachNet {
            tree,
            file,
            n,
            iters,
        } => return tbon_attach::net(&[tree, file, n.to_string(), iters.to_string()]),
        Cmd::TbonAttachBe { file, rank } => tbon_attach::backend(&file, rank),
        Cmd::TbonKillBe { dir } => return tbon_kill::backend(&dir),
        Cmd::TbonRawChild { addr } => tbon::raw_child(&addr),
        Cmd::Tbon {
            layers,
            kill: Some(kills),
            waves,
            ..
        } => {
            if waves < 100 {
                converse::input::error_line("bench: error: --waves with --kill takes at least 100");
                return ExitCode::from(2);
            }
            tbon_kill::run(&layers, kills, waves)
        }
        Cmd::Tbon {
            backends,
            layers,
            recovery,
            runs,
            rounds,
            waves,
            csv,
            plot,
            kill: None,
        } => on_off(&recovery).and_then(|recovery| {
            tbon::run(&tbon::Params {
                backends: &backends,
                layers: &layers,
                recovery: &recovery,
                runs,
                rounds,
                waves,
                csv: csv.as_deref(),
                plot: plot.as_deref(),
            })
        }),
        Cmd::Topo {
            layer,
            pes,
            sizes,
            iters,
            contenders,
            locks,
        } => topo::run(&topo::Params {
            pes: &pes,
            sizes: &sizes,
            iters,
            contenders: &contenders,
            locks,
            layer: &layer,
        }),
        Cmd::Coll {
            layers,
            pes,
            ppn,
            iters,
            rounds,
        } => coll::run(&coll::Params {
            layers: &layers,
            pes: &pes,
            ppn: &ppn,
            iters,
            rounds,
            extra: &plus_set(&settings),
        }),
        Cmd::PeColl { iters } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| coll::pe_main(rt, iters.max(1))),
        Cmd::PeTopo { mode, sizes, iters } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| topo::pe_main(rt, &mode, &sizes, iters.max(1))),
        Cmd::PePingpong { job, pin, peer } => {
            if pin {
                udp::pin_to_node_core();
            }
            converse::Runtime::from_args(argv)
                .map_err(anyhow::Error::from)
                .and_then(|rt| pingpong::pe_main(rt, &job.sizes, job.iters, &job.csv, peer))
        }
        Cmd::RawTcpEcho {
            addr,
            sizes,
            rounds,
        } => raw::tcp_echo(&addr, &sizes, rounds),
        Cmd::RawUdpEcho {
            addr,
            sizes,
            rounds,
            unconnected,
        } => raw::udp_echo(&addr, &sizes, rounds, !unconnected),
        Cmd::Pingpong {
            layer,
            sizes,
            iters,
            csv,
            mpi_too,
            plot,
            rounds,
        } => pingpong::run(
            &layer,
            &sizes,
            iters,
            csv.as_deref(),
            &settings,
            mpi_too,
            plot.as_deref(),
            usize::from(rounds),
        ),
        #[cfg(feature = "mpi")]
        Cmd::RawMpi(j) => raw_mpi::rank_main(&j.sizes, j.iters, &j.csv),
        #[cfg(feature = "mpi")]
        Cmd::MpiSameJob {
            sizes,
            iters,
            rounds,
        } => mpi_same_job::run(&sizes, iters, rounds),
        #[cfg(feature = "mpi")]
        Cmd::PeMpiSameJob { job, rounds } => {
            mpi_same_job::rank_main(&job.sizes, job.iters, rounds, &job.csv, settings)
        }
        Cmd::Multi {
            sizes,
            iters,
            messages,
            runs,
        } => multi::run(&sizes, iters, messages, runs),
        Cmd::Rate {
            messages,
            across: true,
            layers,
            rounds,
            ..
        } => {
            let set = plus_set(&settings);
            rate_across::run(&layers, messages.unwrap_or(1_000_000), rounds, &set)
        }
        Cmd::Rate {
            messages,
            csv,
            plot,
            ..
        } => rate::run(
            messages.unwrap_or(2_000_000),
            csv.as_deref(),
            plot.as_deref(),
        ),
        Cmd::Smp {
            layers,
            iters,
            messages,
            ks,
        } => smp::run(&layers, iters, messages, &ks),
        Cmd::Udp { iters, runs, parts } => {
            let set = plus_set(&settings);
            let set: Vec<&str> = set.iter().map(String::as_str).collect();
            udp::run(iters, runs, &parts, &set)
        }
        Cmd::Spin => udp::spin(),
        Cmd::RawShmEcho {
            path,
            sizes,
            rounds,
        } => raw::shm_echo(&path, &sizes, rounds),
        Cmd::RawCmaEcho {
            path,
            sizes,
            rounds,
        } => raw::cma_echo(&path, &sizes, rounds),
        Cmd::PeDirect { layer, job, pin } => {
            if pin {
                udp::pin_to_node_core();
            }
            direct::pe_main(&layer, &job.sizes, job.iters, &job.csv, settings)
        }
        Cmd::Startup {
            pes,
            layer,
            charmrun_args,
            plot,
        } => startup::run(&pes, &layer, &charmrun_args, plot.as_deref()),
        Cmd::Idle { layer, secs, ppn } => idle::run(&layer, secs, ppn),
        Cmd::Tasks {
            layers,
            what,
            iters,
            rounds,
        } => tasks::run(&layers, &what, iters, rounds),
        Cmd::Seeds {
            layers,
            reps,
            rounds,
        } => seeds::run(&layers, reps, rounds),
        Cmd::PeSeeds {
            balancer,
            reps,
            out,
        } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| seeds::pe_main(rt, balancer, reps, &out)),
        Cmd::Ccs {
            sizes,
            iters,
            rounds,
            pe,
        } => ccs::run(&sizes, iters, rounds, pe),
        Cmd::Endpoint {
            sizes,
            iters,
            rounds,
        } => endpoint::run(&sizes, iters, rounds),
        Cmd::Onesided {
            layers,
            sizes,
            iters,
            rounds,
        } => onesided::run(&layers, &sizes, iters, rounds),
        Cmd::Typed {
            layers,
            iters,
            rounds,
        } => typed::run(&layers, iters, rounds),
        Cmd::PeTyped { job } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| typed::pe_main(rt, job.iters, &job.csv)),
        Cmd::Flow {
            layers,
            sizes,
            items,
            rounds,
        } => {
            // `+set` settings of bench's command line go to every job.
            let set = plus_set(&settings);
            flow::run(&layers, &sizes, items, rounds, &set)
        }
        Cmd::PeFlow { job, kind } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                flow::pe_main(
                    rt,
                    &kind,
                    job.sizes.first().copied().unwrap_or(8),
                    job.iters,
                    &job.csv,
                )
            }),
        Cmd::PeRate { job } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| rate_across::pe_main(rt, job.iters, &job.csv)),
        Cmd::PeOnesided { job } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| onesided::pe_main(rt, &job.sizes, job.iters, &job.csv)),
        Cmd::PeEndpointServe { dir } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| endpoint::serve_main(rt, &dir)),
        Cmd::PeEndpointClient { dir, scheme, job } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                endpoint::client_main(rt, &dir, &scheme, &job.sizes, job.iters, &job.csv)
            }),
        Cmd::PeTasks {
            what,
            iters,
            rounds,
            out,
        } => tasks::kinds(&what).and_then(|kinds| {
            converse::Runtime::from_args(argv)
                .map_err(anyhow::Error::from)
                .and_then(|rt| tasks::pe_main(rt, &kinds, iters, rounds, &out))
        }),
        Cmd::PeWait { secs, out } => converse::Runtime::from_args(argv)
            .map_err(anyhow::Error::from)
            .and_then(|rt| idle::pe_main(rt, secs, &out)),
        Cmd::ConnectBack { addr } => startup::connect_back(&addr),
        Cmd::LaunchFloor { nodes } => startup::launch_floor(nodes),
        Cmd::PeNoop => converse::Runtime::from_args(argv)
            .and_then(|rt| {
                rt.run(|pe| {
                    if pe.my_pe() == 0 {
                        pe.exit(0)
                    }
                })
            })
            .map_err(anyhow::Error::from)
            .and_then(|code| {
                anyhow::ensure!(code == 0, "exit code {code}");
                Ok(())
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            converse::input::error_line(&format!("bench: error: {e:#}"));
            ExitCode::from(1)
        }
    }
}
