//! A message-driven communication runtime in the style of Charm++'s Converse.
//!
//! A job is a set of PEs (processing elements). Every PE runs the same start function, which
//! registers handlers and may send the first messages; then each PE's scheduler runs: it polls
//! the interconnect layer, queues what arrives by priority, and runs the handler each message
//! names, until some PE calls [`Pe::exit`].
//!
//! ```no_run
//! use converse::{ops, ReduceTarget};
//!
//! fn main() -> std::process::ExitCode {
//!     converse::run(|pe| {
//!         let done = pe.register("done", |pe, msg| {
//!             let n = u64::from_le_bytes(msg.payload().try_into().unwrap_or([0; 8]));
//!             println!("{n} PEs said hello");
//!             pe.exit(0);
//!         });
//!         println!("hello from PE {} of {}", pe.my_pe(), pe.num_pes());
//!         pe.reduce(&1u64.to_le_bytes(), ops::sum_u64, ReduceTarget::Root(done));
//!     })
//! }
//! ```
//!
//! Run it with `+p4` for four PEs. Runtime arguments start with `+` and are removed before the
//! program sees its own ([`Pe::args`]): `+p N` (PEs in the job), `+ppn K` (PEs per process:
//! SMP mode, see below), `+pemap CORES` and `+commap CORES` (pinning), `+machine NAME` (the
//! layer), `+set KEY=VALUE` (a setting), `+quiet` (no banner), `+version`, `+trace` and
//! `+trace-dir DIR` (each PE records what it does into `DIR/trace.<pe>.bin`, default
//! [`DEFAULT_TRACE_DIR`]; the `converse-trace` command turns them into a Perfetto / Chrome
//! trace or an HTML report), `+stats` (per-PE and per-node counters printed at exit).
//!
//! **Nodes and PEs.** A *node* is a process (a thread group of the in-process layer). With
//! `+ppn 1` (the default) it runs one PE, which drives the layer itself. With `+ppn K` above 1
//! it runs K PEs, each on a worker thread of its own, plus one communication thread that alone
//! drives the layer (Charm++'s SMP mode): PEs of one node hand each other messages by pointer,
//! messages for other nodes go through the communication thread, and the layer's protocol
//! keeps running while every PE computes. [`Pe::send_node`] sends to a node as a whole: the
//! first of its PEs free to take the message runs it.

#![forbid(unsafe_code)]

mod args;
mod ccs;
mod collectives;
mod comm;
mod error;
mod failure;
mod idle;
mod idle_warn;
mod layers;
mod lifecycle;
mod link;
mod mailbox;
mod node;
mod onesided;
pub mod ops;
mod pe;
mod placement;
mod queue;
mod scheduler;
mod sync;
mod trace;
// The trace files' format, for the project's `converse-trace`: not an API of its own.
#[doc(hidden)]
pub mod trace_format;
mod tree;
pub mod typed;
mod variant;

// How the runtime reads its arguments, for the launcher and tools that pass them on; a
// program gets them through `Runtime`/`Pe::args`.
#[doc(hidden)]
pub use args::{parse_args, RuntimeArgs};
pub use args::{DEFAULT_TRACE_DIR, MAX_PES};
pub use ccs::{CcsRequest, ServerArgs};
pub use collectives::{Combine, ReduceTarget};
/// Logs (`CONVERSE_LOG`): the subscriber and who a thread is, for programs and tools that
/// start jobs themselves.
pub use converse_machine::log;
// The byte codecs the project's own crates share; a program uses `typed` messages.
#[doc(hidden)]
pub use converse_machine::bytes;
pub use converse_machine::{input, LaunchEnv};
pub use converse_machine::{Message, NodeTable};
pub use error::RuntimeError;
pub use failure::{NodeFailure, SendError};
pub use mailbox::Mailbox;
pub use onesided::{Got, PutNotice, Region, RegionHandle, RmaError};
pub use pe::{HandlerId, Pe};
pub use placement::CoreList;
pub use scheduler::scheduler_depth;
pub use tree::{tree_children, tree_parent};

use converse_machine::{BootConfig, Layer, Machine, Settings};
use link::Link;
use node::NodeShared;
use scheduler::Tunables;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::Arc;

/// A configured job, ready to run: the parsed runtime arguments, the chosen layer, settings.
pub struct Runtime {
    args: RuntimeArgs,
    layer: &'static Layer,
    settings: Settings,
    tun: Tunables,
    launch: Option<LaunchEnv>,
}

// By hand: the chosen layer is what a reader needs; the rest is arguments and settings.
impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("layer", &self.layer.name)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Runtime`] in code, for programs that start a job themselves (a tree-overlay
/// front-end that launches its own back-ends, a test) instead of from their command line.
///
/// ```no_run
/// let rt = converse::Runtime::builder()
///     .pes(4)
///     .layer("local")
///     .quiet(true)
///     .set("sched.spin_us", "100")
///     .build()?;
/// let code = rt.run(|pe| pe.exit(0))?;
/// # Ok::<(), converse::RuntimeError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RuntimeBuilder {
    args: RuntimeArgs,
    launch: Option<LaunchEnv>,
}

impl RuntimeBuilder {
    /// `+p`: PEs in the job (default 1).
    pub fn pes(mut self, n: usize) -> RuntimeBuilder {
        self.args.num_pes = n;
        self
    }

    /// `+ppn`: PEs per node (default 1; above 1, SMP mode).
    pub fn pes_per_node(mut self, k: usize) -> RuntimeBuilder {
        self.args.pes_per_node = k;
        self
    }

    /// `+machine`: the layer to run on (default: as [`Runtime::from_args`] chooses).
    pub fn layer(mut self, name: &str) -> RuntimeBuilder {
        self.args.machine = Some(name.to_owned());
        self
    }

    /// `+quiet`: no start-up banner.
    pub fn quiet(mut self, quiet: bool) -> RuntimeBuilder {
        self.args.quiet = quiet;
        self
    }

    /// `+trace-dir DIR`: every PE records what it does into `DIR/trace.<pe>.bin` (`None`: no
    /// tracing).
    pub fn trace_dir(mut self, dir: Option<std::path::PathBuf>) -> RuntimeBuilder {
        self.args.trace_dir = dir;
        self
    }

    /// `+stats`: print per-PE and per-node counters at exit.
    pub fn stats(mut self, on: bool) -> RuntimeBuilder {
        self.args.stats = on;
        self
    }

    /// Report a node's death to the surviving PEs instead of ending the job
    /// (`+set faults=report`; see [`Pe::on_node_failure`]). Node 0's death still ends it. The
    /// `tcp`, `udp`, `si` layers and their compositions can; `mpi` refuses it at start-up.
    pub fn survive_node_failures(self, yes: bool) -> RuntimeBuilder {
        self.set(
            converse_machine::FAULTS,
            if yes { "report" } else { "fatal" },
        )
    }

    /// `+set KEY=VALUE`: a setting (checked by [`build`](Self::build)).
    pub fn set(mut self, key: &str, value: &str) -> RuntimeBuilder {
        self.args.settings.set(key, value);
        self
    }

    /// The program's own arguments as [`Pe::args`] shows them, `argv[0]` first.
    pub fn program_args<I, S>(mut self, argv: I) -> RuntimeBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.program = argv.into_iter().map(Into::into).collect();
        self
    }

    /// Settings, `+quiet`, `+trace`, `+trace-dir`, `+stats` and `+idle-warn` from runtime
    /// arguments a user
    /// gave as text (`"+set K=V"`, ...).
    ///
    /// # Errors
    /// [`RuntimeError::Args`] for a malformed argument, or for one the builder sets itself
    /// (`+p`, `+ppn`, `+pemap`, `+commap`, `+machine`) or that is not a runtime argument.
    pub fn runtime_args<S: AsRef<str>>(
        mut self,
        args: &[S],
    ) -> Result<RuntimeBuilder, RuntimeError> {
        let argv = std::iter::once("").chain(args.iter().map(AsRef::as_ref));
        let parsed = parse_args(argv)?;
        let only_settings = parsed.num_pes == 1
            && parsed.pes_per_node == 1
            && parsed.pemap.is_none()
            && parsed.commap.is_none()
            && parsed.machine.is_none()
            && !parsed.version
            && !parsed.list_settings
            && !parsed.help
            && parsed.program.len() == 1;
        if !only_settings {
            return Err(RuntimeError::Args(format!(
                "'{}': only +set, +quiet, +trace, +trace-dir, +stats and +idle-warn may be given here; the job's size and layer are set \
                 by the program",
                args.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(" ")
            )));
        }
        for (k, v) in parsed.settings.iter() {
            self.args.settings.set(k, v);
        }
        self.args.quiet |= parsed.quiet;
        self.args.stats |= parsed.stats;
        self.args.idle_warn = parsed.idle_warn.or(self.args.idle_warn);
        if parsed.trace_dir.is_some() {
            self.args.trace_dir = parsed.trace_dir;
        }
        Ok(self)
    }

    /// The launch context of this node, when a launcher in this very process started the job
    /// (see [`LaunchEnv`]); the layer boots from it instead of the process environment.
    pub fn launch(mut self, env: LaunchEnv) -> RuntimeBuilder {
        self.launch = Some(env);
        self
    }

    /// Choose the layer and check every setting.
    ///
    /// # Errors
    /// [`RuntimeError::Args`] for an unknown setting or a bad value of the runtime's own,
    /// [`RuntimeError::Layer`] for a layer this program lacks or one that cannot run here.
    pub fn build(self) -> Result<Runtime, RuntimeError> {
        // Logs are on (or refused) before anything could log: a filter that does not parse is
        // an argument error, not fewer logs than asked.
        converse_machine::log::init().map_err(|e| RuntimeError::Args(e.to_string()))?;
        let RuntimeBuilder { args, launch } = self;
        let layer = match (args.machine.as_deref(), &launch) {
            (Some(name), _) => layers::find(name)?,
            (None, None) => layers::choose(variant::DEFAULT_LAYER)?,
            (None, Some(_)) => {
                return Err(RuntimeError::Layer(
                    "a job started with a launch context needs its layer named".into(),
                ))
            }
        };
        if layer.name == "local" && (launch.is_some() || converse_machine::LaunchEnv::present()) {
            return Err(RuntimeError::Layer(
                "+machine local runs every PE as a thread of this one process, but a launcher \
                 started this process as one node of a job of several: run the program directly \
                 (PROGRAM +pN +machine local), or pick a layer the launcher starts (tcp, udp, si)"
                    .into(),
            ));
        }
        // Defaults live in the code that reads each setting; the variant file overrides them,
        // the command line overrides both.
        let mut settings = Settings::default();
        for (k, v) in variant::SETTINGS {
            settings.set(*k, *v);
        }
        for (k, v) in args.settings.iter() {
            settings.set(k, v);
        }
        settings
            .check_known(&layers::settings())
            .and_then(|()| layers::check_values(&settings))
            .map_err(|e| RuntimeError::Args(e.to_string()))?;
        let mut tun =
            Tunables::from_settings(&settings).map_err(|e| RuntimeError::Args(e.to_string()))?;
        tun.stats = args.stats;
        tun.idle_warn = args.idle_warn;
        Ok(Runtime {
            args,
            layer,
            settings,
            tun,
            launch,
        })
    }
}

impl Runtime {
    /// A builder with the defaults: one PE, the layer chosen as for a plain command line.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            args: RuntimeArgs {
                program: vec!["converse".into()],
                ..RuntimeArgs::default()
            },
            launch: None,
        }
    }

    /// Configure from this process's command line.
    ///
    /// # Errors
    /// As [`from_args`](Runtime::from_args).
    pub fn from_env() -> Result<Runtime, RuntimeError> {
        Runtime::from_args(input::args().map_err(RuntimeError::Args)?)
    }

    /// Configure from `argv` (with `argv[0]`).
    ///
    /// # Errors
    /// [`RuntimeError::Args`] for a bad runtime argument or setting, [`RuntimeError::Layer`]
    /// for a `+machine` this program lacks.
    pub fn from_args<I, S>(argv: I) -> Result<Runtime, RuntimeError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RuntimeBuilder {
            args: parse_args(argv)?,
            launch: None,
        }
        .build()
    }

    /// The program's own arguments (runtime `+` arguments removed), `argv[0]` first.
    pub fn args(&self) -> &[String] {
        &self.args.program
    }

    /// Whether `+version` or `+settings` was given: [`run`](Runtime::run) will only print
    /// what this program is built with, or the settings it knows, and start no job. Lets a
    /// program skip checking its own arguments in that case.
    pub fn version_requested(&self) -> bool {
        self.args.version || self.args.list_settings || self.args.help
    }

    /// The layer the job will run on.
    pub fn layer(&self) -> &'static str {
        self.layer.name
    }

    /// Run the job: boot the layer, run `start` on every PE hosted here, then schedule until
    /// the job exits. Returns the job's exit code. With `+version`, prints what this program is
    /// built with and returns 0 without starting.
    ///
    /// A PE that panics aborts the job through its layer: the process exits non-zero.
    ///
    /// # Errors
    /// Boot failures, a handler mismatch between PEs.
    pub fn run<F>(self, start: F) -> Result<i32, RuntimeError>
    where
        F: Fn(&mut Pe) + Sync,
    {
        if self.args.version {
            converse_machine::input::out_line(&version_line());
            return Ok(0);
        }
        if self.args.help {
            converse_machine::input::out_line(&args::help_text());
        }
        if self.args.list_settings || self.args.help {
            converse_machine::input::out_text(&layers::listing());
            return Ok(0);
        }
        if self.args.commap.is_some() && self.args.pes_per_node == 1 {
            return Err(RuntimeError::Args(
                "+commap pins the communication thread, which runs only with +ppn above 1".into(),
            ));
        }
        let cfg = BootConfig {
            num_pes: self.args.num_pes,
            pes_per_node: self.args.pes_per_node,
            settings: self.settings.clone(),
            launch: self.launch.clone(),
        };
        if let Some(dir) = &self.args.trace_dir {
            trace::prepare_dir(dir).map_err(RuntimeError::Args)?;
        }
        let boot_began = std::time::Instant::now();
        let mut nodes = (self.layer.boot)(&cfg)?;
        if let [only] = &nodes[..] {
            converse_machine::log::set_process(converse_machine::log::Who::Node(only.my_node()));
        }
        // After the boot: before it, a launched node knows neither its number nor the job's size.
        tracing::debug!(target: "converse", layer = self.layer.name, nodes_here = nodes.len(), "layer booted");
        let record = trace::Options {
            dir: self.args.trace_dir.clone(),
            stats: self.args.stats,
            boot: Some((boot_began, std::time::Instant::now(), self.layer.name)),
        };
        let program: Arc<[String]> = self.args.program.clone().into();
        let mut tun = self.tun;
        // Every node of this host booted here (the in-process layer): its PEs are threads of
        // one process, between which a core changes hands cheaply (`pe::spin_policy`).
        tun.host_in_process = nodes.first().is_some_and(|m| {
            let table = m.table();
            let host = table.node(m.my_node()).map(|n| n.host.as_str());
            let on_host = table
                .nodes()
                .iter()
                .filter(|n| Some(n.host.as_str()) == host)
                .count();
            on_host == nodes.len()
        });
        let job = Job {
            tun,
            args: program,
            quiet: self.args.quiet,
            pemap: self.args.pemap.clone(),
            commap: self.args.commap.clone(),
            record,
            server: self.args.server.clone(),
            start: &start,
        };
        let results: Vec<Result<i32, RuntimeError>> = if nodes.len() == 1 {
            // The calling thread drives the node: with MPI it is the thread that initialised
            // the library, the only one FUNNELED lets call it.
            nodes.pop().map(|m| job.run_node(m)).unwrap_or_default()
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = nodes
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let job = &job;
                        let spawned = std::thread::Builder::new()
                            .name(format!("node{i}"))
                            .stack_size(PE_STACK)
                            .spawn_scoped(s, move || job.run_node(m));
                        spawned.unwrap_or_else(|e| {
                            // The nodes already running would wait for this one forever.
                            converse_machine::input::error_line(&format!(
                                "converse: cannot start the thread of node {i}: {e}"
                            ));
                            std::process::exit(1)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .enumerate()
                    .flat_map(|(i, h)| h.join().unwrap_or(vec![Err(RuntimeError::Panicked(i))]))
                    .collect()
            })
        };
        merge_results(results)
    }
}

/// Stack of each PE thread: as much as a main thread usually gets (a one-node job runs on the
/// calling thread), rather than the 2 MiB of a spawned thread.
const PE_STACK: usize = 8 << 20;

struct Job<'a, F> {
    tun: Tunables,
    args: Arc<[String]>,
    quiet: bool,
    pemap: Option<CoreList>,
    commap: Option<CoreList>,
    record: trace::Options,
    /// `+server`: PE 0 opens a CCS port.
    server: Option<ServerArgs>,
    start: &'a F,
}

impl<F: Fn(&mut Pe) + Sync> Job<'_, F> {
    /// One node's life: its PE on this thread (one PE per node), or its PEs on worker threads
    /// and this thread as the communication thread (several). The results of its PEs, and of
    /// its communication thread if it has one.
    fn run_node(&self, mut machine: Box<dyn Machine>) -> Vec<Result<i32, RuntimeError>> {
        let table = machine.table().clone();
        let node = machine.my_node();
        let (first, pes) = table.node(node).map_or((0, 1), |n| (n.first_pe, n.num_pes));
        if pes == 1 {
            return vec![self.run_pe(Link::Own(machine), table, node, first)];
        }
        let mut shared = NodeShared::new(node, &table, machine.layer(), machine.waker());
        shared.rma = machine.rma();
        let shared = Arc::new(shared);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..pes)
                .map(|rank| {
                    let link = Link::Worker {
                        node: Arc::clone(&shared),
                        rank,
                    };
                    let table = table.clone();
                    let shared = &shared;
                    let spawned = std::thread::Builder::new()
                        .name(format!("pe{}", first + rank))
                        .stack_size(PE_STACK)
                        .spawn_scoped(s, move || {
                            // `run_pe` catches the program's panics; one outside them would
                            // leave the communication thread waiting for this PE forever.
                            let me = first + rank;
                            std::panic::catch_unwind(AssertUnwindSafe(|| {
                                self.run_pe(link, table, node, me)
                            }))
                            .unwrap_or_else(|_| {
                                shared.request_abort(format!(
                                    "PE {me} (node {node}): panicked outside its handlers"
                                ));
                                Err(RuntimeError::Panicked(me))
                            })
                        });
                    spawned.unwrap_or_else(|e| {
                        converse_machine::input::error_line(&format!(
                            "converse: cannot start the thread of PE {}: {e}",
                            first + rank
                        ));
                        std::process::exit(1)
                    })
                })
                .collect();
            let pinned = match &self.commap {
                Some(map) => placement::pin_current(
                    placement::comm_core(map, &table, node),
                    &format!("the communication thread of node {node}"),
                ),
                None => Ok(()),
            };
            let mut tun = self.tun;
            // A communication thread without a core of its own still spins before it blocks
            // (a reply is often microseconds away, and a wake-up through the kernel costs
            // several), but yields at every turn, so that PEs with work keep their cores.
            tun.spin_yields = !pe::spin_policy(&table, node).1;
            converse_machine::log::set_thread(converse_machine::log::Who::Comm { node });
            tracing::debug!(target: "converse", pes, "communication thread running");
            let comm = std::panic::catch_unwind(AssertUnwindSafe(|| {
                if let Err(e) = &pinned {
                    machine.abort(&format!("node {node}: {e}"));
                }
                let layer = machine.layer();
                let rec = trace::Recorder::for_comm(&self.record, node, &table, layer)
                    .unwrap_or_else(|e| machine.abort(&format!("node {node}: {e}")));
                comm::run(&mut *machine, &shared, &tun, rec)
            }));
            let comm = match comm {
                Ok(r) => r,
                Err(_) => machine.abort(&format!(
                    "node {node}: the communication thread panicked; ending the job"
                )),
            };
            let mut results: Vec<_> = workers
                .into_iter()
                .enumerate()
                .map(|(rank, h)| {
                    h.join()
                        .unwrap_or(Err(RuntimeError::Panicked(first + rank)))
                })
                .collect();
            results.push(comm);
            results
        })
    }

    /// One PE's life: start function, scheduler until the job exits, then leaving the layer
    /// (or telling the communication thread that this PE is done).
    fn run_pe(
        &self,
        link: Link,
        table: NodeTable,
        node: usize,
        me: usize,
    ) -> Result<i32, RuntimeError> {
        converse_machine::log::set_thread(converse_machine::log::Who::Pe { node, pe: me });
        let mut pe = Pe::new(
            link,
            table,
            node,
            me,
            self.tun,
            self.args.clone(),
            variant::NAME,
        );
        match trace::Recorder::new(&self.record, me, node, &pe.table, pe.layer()) {
            Ok(rec) => pe.rec = rec,
            Err(e) => pe.abort(&e),
        }
        if let Some(map) = &self.pemap {
            let core = placement::pe_core(map, &pe.table, node, me);
            if let Err(e) = placement::pin_current(core, &format!("PE {me}")) {
                pe.abort(&e);
            }
        }
        if pe.my_pe() == 0 && !self.quiet {
            converse_machine::input::out_line(&self.banner(&pe));
        }
        if let (0, Some(server)) = (pe.my_pe(), &self.server) {
            if let Err(e) = ccs::start(&mut pe, server) {
                pe.abort(&e);
            }
        }
        // A panicking PE ends the whole job at once, through its layer, so that no peer waits
        // for it forever (in a barrier, or for a message it was to send).
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            (self.start)(&mut pe);
            if let Some(every) = pe.tun.idle_warn {
                pe.start_idle_watch(every);
            }
            // The trace's header (with the handlers the start registered) goes out now, not
            // at the first idle moment, which a PE that never idles would not reach: from here
            // the recorder holds at most a chunk in memory.
            if let Some(r) = pe.rec.as_deref_mut() {
                r.flush(&pe.handler_names);
            }
            pe.schedule(&mut |_| false, false);
        }));
        match outcome {
            Ok(()) => pe.finish(),
            Err(_) => pe.abort("panicked; ending the job"),
        }
    }

    /// The start-up line: variant, layer, nodes × PEs, the communication threads, pinning.
    fn banner(&self, pe: &Pe) -> String {
        let t = &pe.table;
        let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let mut line = format!(
            "Converse> variant {}, layer {}: {} on {}",
            variant::NAME,
            pe.layer(),
            count(pe.num_pes(), "PE"),
            count(pe.num_nodes(), "node")
        );
        if let Some(d) = layers::describe(pe.layer(), t, pe.my_node()) {
            line += &format!(" (node {}: {d})", pe.my_node());
        }
        let sizes: Vec<usize> = t.nodes().iter().map(|n| n.num_pes).collect();
        let smp = sizes.iter().any(|&k| k > 1);
        if smp {
            let (lo, hi) = (
                sizes.iter().min().copied().unwrap_or(1),
                sizes.iter().max().copied().unwrap_or(1),
            );
            let per = if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo} to {hi}")
            };
            line += &format!(" (SMP: {per} PEs per node + 1 communication thread each)");
        }
        match (&self.pemap, &self.commap) {
            (None, None) => line += ", not pinned",
            (pm, cm) => {
                if let Some(m) = pm {
                    line += &format!(", PEs pinned to cores {m}");
                }
                if let Some(m) = cm {
                    line += &format!(", communication threads to cores {m}");
                }
            }
        }
        line
    }
}

impl Pe {
    /// Meet every node in the layer's barrier, then leave the layer.
    fn finish(mut self) -> Result<i32, RuntimeError> {
        let code = self.life.exit_code();
        tracing::debug!(target: "converse", code, "leaving the scheduler: exit barrier, then the layer's exit");
        // Say why the job failed before leaving the layer: once a process exits non-zero, some
        // launchers (mpirun) kill the others at once, and the report would be lost.
        if let Some(e) = self.life.failure.take() {
            self.life.failure = Some(if e.reported_elsewhere() {
                e
            } else {
                input::error_line(&format!("{}: error: {e}", program_name()));
                RuntimeError::Reported(Box::new(e))
            });
        }
        if let Some(mut r) = self.rec.take() {
            r.finish(&self.handler_names, &self.link.counters());
        }
        match &mut self.link {
            Link::Own(machine) => {
                // The job is over: what still arrives (sent before the exit reached its
                // sender) is not run, as what was still queued here was not.
                machine.barrier(&mut drop)?;
                if self.tun.stats {
                    let line =
                        trace::node_stats_line(self.my_node, machine.layer(), &machine.counters());
                    converse_machine::input::error_line(&line);
                }
                machine.exit(code)?;
            }
            // The communication thread leaves the layer once every PE of the node is done.
            Link::Worker { node, rank } => node.worker_done(*rank, code),
        }
        match self.life.failure.take() {
            Some(e) => Err(e),
            None => Ok(code),
        }
    }
}

/// The job's result from its PEs' results: a reported error first, then the first non-zero
/// code, else 0.
fn merge_results(results: Vec<Result<i32, RuntimeError>>) -> Result<i32, RuntimeError> {
    let mut code = 0;
    let mut quiet_failure = None;
    for r in results {
        match r {
            Err(e) if e.reported_elsewhere() => quiet_failure = Some(e),
            Err(e) => return Err(e),
            Ok(c) if code == 0 => code = c,
            Ok(_) => {}
        }
    }
    quiet_failure.map_or(Ok(code), Err)
}

/// The layer called `name`, if it is compiled into this program: for tools that drive a
/// layer's [`Machine`] directly (such as `bench`'s layer-only ping-pong). Hidden: the
/// project's bench uses it; a program names its layer with `+machine`.
#[doc(hidden)]
///
/// # Errors
/// [`RuntimeError::Layer`] saying whether the name is unknown or not compiled in.
pub fn find_layer(name: &str) -> Result<&'static Layer, RuntimeError> {
    layers::find(name)
}

/// What this program is built with: version, variant, layers (what `+version` prints).
/// Hidden: for the project's tools.
#[doc(hidden)]
pub fn version_line() -> String {
    format!(
        "converse {}: variant {}, layers compiled in: {} (default: {})",
        env!("CARGO_PKG_VERSION"),
        variant::NAME,
        layers::names(),
        variant::DEFAULT_LAYER
    )
}

/// Run a job configured from the command line and turn the outcome into the process's exit
/// code; errors are printed on one line. The usual body of `main`.
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     converse::run(|pe| {
///         println!("PE {} of {}", pe.my_pe(), pe.num_pes());
///         pe.exit(0);
///     })
/// }
/// ```
pub fn run<F>(start: F) -> ExitCode
where
    F: Fn(&mut Pe) + Sync,
{
    match Runtime::from_env().and_then(|rt| rt.run(start)) {
        Ok(code) => exit_code(code),
        Err(e) if e.reported_elsewhere() => ExitCode::from(1),
        Err(e) => {
            input::error_line(&format!("{}: error: {e}", program_name()));
            ExitCode::from(1)
        }
    }
}

/// This program's name as errors show it.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .map_or_else(|| "program".into(), |a| a.to_string_lossy().into_owned())
}

/// A job exit code as a process exit code: the low byte, but never 0 for a non-zero code.
/// Hidden: [`run`] does it; for the project's tools that run a [`Runtime`] themselves.
#[doc(hidden)]
pub fn exit_code(code: i32) -> ExitCode {
    match (code & 0xff) as u8 {
        0 if code != 0 => ExitCode::from(1),
        b => ExitCode::from(b),
    }
}
