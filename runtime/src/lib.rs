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
//! program sees its own ([`Pe::args`]): `+p N`, `+ppn K`, `+machine NAME` (the layer),
//! `+set KEY=VALUE` (a setting), `+quiet` (no banner), `+version`.

mod args;
mod collectives;
mod error;
mod layers;
mod lifecycle;
pub mod ops;
mod pe;
mod queue;
mod scheduler;
mod variant;

pub use args::{parse_args, RuntimeArgs, MAX_PES};
pub use collectives::{tree_children, tree_parent, Combine, ReduceTarget};
pub use error::RuntimeError;
pub use machine::{Message, NodeTable};
pub use pe::{HandlerId, Pe};

use machine::{BootConfig, Layer, Machine, Settings};
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
}

impl Runtime {
    /// Configure from this process's command line.
    ///
    /// # Errors
    /// As [`from_args`](Runtime::from_args).
    pub fn from_env() -> Result<Runtime, RuntimeError> {
        Runtime::from_args(std::env::args())
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
        let args = parse_args(argv)?;
        let layer = match args.machine.as_deref() {
            Some(name) => layers::find(name)?,
            None => layers::choose(variant::DEFAULT_LAYER)?,
        };
        let mut settings = Settings::default();
        for (k, v) in variant::SETTINGS {
            settings.set(*k, *v);
        }
        for (k, v) in args.settings.iter() {
            settings.set(k, v);
        }
        let tun =
            Tunables::from_settings(&settings).map_err(|e| RuntimeError::Args(e.to_string()))?;
        Ok(Runtime {
            args,
            layer,
            settings,
            tun,
        })
    }

    /// The program's own arguments (runtime `+` arguments removed), `argv[0]` first.
    pub fn args(&self) -> &[String] {
        &self.args.program
    }

    /// Whether `+version` was given: [`run`](Runtime::run) will only print what this program
    /// is built with. Lets a program skip checking its own arguments in that case.
    pub fn version_requested(&self) -> bool {
        self.args.version
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
            println!("{}", version_line());
            return Ok(0);
        }
        if self.args.pes_per_node > 1 {
            return Err(RuntimeError::Args(
                "+ppn above 1 (several PEs per node) is not supported yet: run one PE per node"
                    .into(),
            ));
        }
        let cfg = BootConfig {
            num_pes: self.args.num_pes,
            pes_per_node: self.args.pes_per_node,
            settings: self.settings.clone(),
        };
        let mut nodes = (self.layer.boot)(&cfg)?;
        if let Some(m) = nodes.first() {
            let t = m.table();
            if t.num_pes() != t.num_nodes() {
                return Err(RuntimeError::Args(format!(
                    "layer {} gave {} PEs on {} nodes; several PEs per node are not supported yet",
                    self.layer.name,
                    t.num_pes(),
                    t.num_nodes()
                )));
            }
        }
        let program: Arc<[String]> = self.args.program.clone().into();
        let job = Job {
            tun: self.tun,
            args: program,
            quiet: self.args.quiet,
            start: &start,
        };
        let results: Vec<Result<i32, RuntimeError>> = if nodes.len() == 1 {
            let m = nodes.pop().map(|m| job.run_pe(m));
            m.into_iter().collect()
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = nodes
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let job = &job;
                        let spawned = std::thread::Builder::new()
                            .name(format!("pe{i}"))
                            .stack_size(PE_STACK)
                            .spawn_scoped(s, move || job.run_pe(m));
                        spawned.unwrap_or_else(|e| {
                            // The PEs already running would wait for this one forever.
                            eprintln!("converse: cannot start the thread of node {i}: {e}");
                            std::process::exit(1)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .enumerate()
                    .map(|(i, h)| h.join().unwrap_or(Err(RuntimeError::Panicked(i))))
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
    start: &'a F,
}

impl<F: Fn(&mut Pe) + Sync> Job<'_, F> {
    /// One PE's life: start function, scheduler until the job exits, layer barrier and exit.
    fn run_pe(&self, machine: Box<dyn Machine>) -> Result<i32, RuntimeError> {
        let mut pe = Pe::new(machine, self.tun, self.args.clone(), variant::NAME);
        if pe.my_pe() == 0 && !self.quiet {
            println!(
                "Converse> variant {}, layer {}: {} PEs on {} nodes",
                variant::NAME,
                pe.layer(),
                pe.num_pes(),
                pe.num_nodes()
            );
        }
        // A panicking PE ends the whole job at once, through its layer, so that no peer waits
        // for it forever (in a barrier, or for a message it was to send).
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            (self.start)(&mut pe);
            pe.schedule(&mut |_| false, false);
        }));
        match outcome {
            Ok(()) => pe.finish(),
            Err(_) => pe.abort("panicked; ending the job"),
        }
    }
}

impl Pe {
    /// Meet every node in the layer's barrier, then leave the layer.
    fn finish(mut self) -> Result<i32, RuntimeError> {
        let code = self.life.exit_code;
        // Say why the job failed before leaving the layer: once a process exits non-zero, some
        // launchers (mpirun) kill the others at once, and the report would be lost.
        if let Some(e) = self.life.failure.take() {
            self.life.failure = Some(if e.reported_elsewhere() {
                e
            } else {
                eprintln!("{}: error: {e}", program_name());
                RuntimeError::Reported(Box::new(e))
            });
        }
        self.machine.barrier()?;
        self.machine.exit(code)?;
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
/// layer's [`Machine`](machine::Machine) directly (such as `bench`'s layer-only ping-pong).
///
/// # Errors
/// [`RuntimeError::Layer`] saying whether the name is unknown or not compiled in.
pub fn find_layer(name: &str) -> Result<&'static Layer, RuntimeError> {
    layers::find(name)
}

/// What this program is built with: version, variant, layers.
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
            eprintln!("{}: error: {e}", program_name());
            ExitCode::from(1)
        }
    }
}

/// This program's name as errors show it.
fn program_name() -> String {
    std::env::args().next().unwrap_or_else(|| "program".into())
}

/// A job exit code as a process exit code: the low byte, but never 0 for a non-zero code.
pub fn exit_code(code: i32) -> ExitCode {
    match (code & 0xff) as u8 {
        0 if code != 0 => ExitCode::from(1),
        b => ExitCode::from(b),
    }
}
