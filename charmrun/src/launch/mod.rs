//! Running one job: start the nodes, gather their introductions, hand out the node table,
//! serve barriers, and end the job — normally when every node has left, or at once when a
//! node crashes, aborts, the time limit passes or charmrun is interrupted.
//!
//! - `start`: the job's secret, the control socket, spawning the nodes;
//! - `control`: the control server (introductions, node table, barriers, `DIE`);
//! - [`verdict`]: what the nodes' deeds mean for the job (a pure state machine);
//! - `job`: serving a started job to its end, and ending it;
//! - `fleet`, `agents`: nodes started by agents (one per host, a tree of them, or a batch
//!   launcher's tasks), and `++batch`;
//! - [`start_embedded`]: the launcher on a thread of a program that joins its own job.

mod agents;
mod control;
mod embedded;
mod error;
mod fleet;
mod job;
pub(crate) mod start;
pub mod verdict;

pub use embedded::{start_embedded, Embedded};
pub use error::LaunchError;
pub(crate) use verdict::exit_code;

use crate::agent::wire::AgentHello;
use crate::nodelist::Host;
use crate::opts::Opts;
use crate::protocol::{Hello, Kind};
use job::Job;
use std::net::{SocketAddr, TcpStream};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Signal that interrupted charmrun (0: none): the first one.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

/// Set where a second signal ends the process at once (see [`run`]).
static SECOND_SIGNAL_EXITS: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: std::ffi::c_int) {
    let first = SIGNALLED
        .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    if !first && SECOND_SIGNAL_EXITS.load(Ordering::SeqCst) {
        // Asked again while the job is being ended: whatever charmrun still waits for (a
        // reader that does not read, agents that take their time, a write that blocks), the
        // user wants it gone now. Its nodes end with it: their watchdogs see the control
        // connections close.
        // SAFETY: _exit is async-signal-safe; it ends the process without unwinding or
        // running exit-time handlers (which could wait for locks the interrupted thread holds).
        unsafe { libc::_exit(128 + sig) }
    }
}

/// What the job's threads tell the launcher.
enum Event {
    /// The program that embeds the launcher gives up on the job.
    Cancel(String),
    /// A connection proved the job secret and says it is this node.
    Hello(TcpStream, Hello),
    /// A connection that did not, and why.
    Stranger(SocketAddr, String),
    /// A frame from a node.
    Frame(usize, Kind, Vec<u8>),
    /// A node's control connection closed.
    Closed(usize),
    /// A node's process exited.
    Exited(usize, ExitStatus),
    /// A connection proved the job secret and says it is this agent.
    Agent(TcpStream, AgentHello),
    /// Agent `.0` relays node `.1.node`'s introduction.
    RelayedHello(usize, Hello),
    /// Agent `.0`'s connection closed.
    AgentClosed(usize),
    /// Every node in agent `.0`'s tree reached the barrier.
    AgentBarrier(usize),
    /// Agent `.0` still answers, and so do the nodes in its tree but these.
    AgentHeartbeat(usize, Vec<usize>),
    /// An agent below one of charmrun's is gone, with these nodes; why.
    Lost(Vec<usize>, String),
    /// The remote shell (or batch launcher) `.0` that started agents exited.
    ShellExited(usize, ExitStatus),
}

/// How a job's nodes are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spread {
    /// Each node by itself: here, or through a remote shell of its own.
    Direct,
    /// One agent per host of the plan, each through one remote shell (`++agents`).
    PerHost,
    /// Agents started all at once by one batch launcher (`mpiexec`, `srun`).
    Launcher {
        /// The launcher's command, before `charmrun ++agent`.
        words: Vec<String>,
        /// How many agents it starts (its tasks); node `i` is on agent `i % agents`.
        agents: usize,
        /// The host each agent runs on, when known (a Slurm allocation's).
        hosts: Option<Vec<String>>,
    },
}

/// What to start for one node of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeStart {
    /// A process running `program args`, on `host` through its remote shell, or here
    /// (`None`).
    Process {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Where.
        host: Option<Host>,
    },
    /// The process that runs the launcher joins the job as this node itself (see
    /// [`start_embedded`]).
    InProcess,
}

/// What every node of a job started from a command line runs: `opts.program` on the hosts
/// round-robin (or all here). A host with `++cpus N` takes N node processes in a row per
/// round, as Charm++'s charmrun lists such a host N times in its node table.
pub fn plan_of(opts: &Opts, hosts: Option<&[Host]>) -> Vec<NodeStart> {
    let (program, args) = opts.node_command();
    let slots: Vec<&Host> = hosts
        .unwrap_or_default()
        .iter()
        .flat_map(|h| std::iter::repeat_n(h, h.cpus.max(1)))
        .collect();
    (0..opts.pes / opts.ppn)
        .map(|i| NodeStart::Process {
            program: program.clone(),
            args: args.clone(),
            host: (!slots.is_empty()).then(|| slots[i % slots.len()].clone()),
        })
        .collect()
}

/// Run the job of a command line, with charmrun's handlers for Ctrl-C and the like; the exit
/// code charmrun should exit with. The first signal ends the job in order; a second one ends
/// charmrun at once.
///
/// # Errors
/// [`LaunchError`] when the job could not be started; whatever was started is ended first.
pub fn run(opts: &Opts, hosts: Option<&[Host]>, spread: Spread) -> Result<i32, LaunchError> {
    SECOND_SIGNAL_EXITS.store(true, Ordering::SeqCst);
    install_signal_handlers();
    let plan = plan_of(opts, hosts);
    if opts.debug == Some(crate::opts::Debug::Pause) {
        // Said even with ++quiet: without it nobody knows the job waits for them.
        converse_machine::input::error_line(&format!(
            "charmrun: ++debug: each node waits under gdbserver; for each node's 'Listening on \
             port N' line, attach from its host with: gdb {} -ex 'target remote :N' -ex continue \
             (from elsewhere: 'target remote HOST:N')",
            crate::spawn::quote(&opts.program)
        ));
    }
    let mut job = Job::new(opts, vec![false; plan.len()]);
    match job.start(&plan, spread) {
        Ok(()) => Ok(job.run()),
        Err(e) => {
            job.abandon();
            Err(e)
        }
    }
}

/// The signal that interrupted charmrun, if one did (see [`install_signal_handlers`]).
pub(crate) fn signalled() -> Option<i32> {
    Some(SIGNALLED.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// Catch SIGINT, SIGTERM and SIGHUP: charmrun ends the job in order instead of dying.
pub(crate) fn install_signal_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let _ = unsafe { sigaction(s, &act) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_with_cpus_take_that_many_nodes_in_a_row() {
        let host = |name: &str, cpus| Host {
            name: name.into(),
            cpus,
            shell: None,
        };
        let hosts = [host("a", 2), host("b", 1)];
        let mut opts = Opts::with_pes(8);
        opts.ppn = 2;
        opts.program = "pgm".into();
        let placed: Vec<String> = plan_of(&opts, Some(&hosts))
            .into_iter()
            .map(|n| match n {
                NodeStart::Process { host, .. } => host.map(|h| h.name).unwrap_or_default(),
                NodeStart::InProcess => String::new(),
            })
            .collect();
        assert_eq!(placed, ["a", "a", "b", "a"]);
    }
}
