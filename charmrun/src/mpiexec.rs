//! `charmrun ++mpiexec`: hand the job to the MPI launcher, as Charm++'s charmrun does for MPI
//! builds. charmrun then only builds the `mpiexec -n N PROGRAM ARGS` command, runs it, and
//! passes its exit code on; ranks find each other through MPI, not through charmrun.
//!
//! The launcher runs in a process group of its own, as node processes do: a Ctrl-C (SIGINT,
//! SIGTERM, SIGHUP) reaches charmrun, which passes it on to the whole group, and ends the
//! group if it has not ended `TERM_GRACE` later; `++timelimit` does the same with SIGTERM.

use crate::launch::LaunchError;
use crate::opts::{shell_words, Opts, UsageError};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The launcher run when `++remote-shell` does not name another one.
pub const DEFAULT: &str = "mpiexec";

/// How long the launcher gets after a signal is passed on (or SIGTERM at `++timelimit`)
/// before its whole process group is killed.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// How often charmrun looks at the launcher, signals and the time limit.
const TICK: Duration = Duration::from_millis(20);

/// The command for `opts`: `++remote-shell` (split into words as a shell does, e.g.
/// `"mpirun --oversubscribe"`) or `mpiexec`, then `-n N`, the program and its arguments; Open
/// MPI's launcher also gets `-x NAME` for each log variable set here (`CONVERSE_LOG`).
///
/// ```
/// let o = match charmrun::opts::parse(&["++mpiexec".into(), "+p3".into(), "pgm".into()]) {
///     Ok(charmrun::opts::Parsed::Run(o)) => o,
///     _ => unreachable!(),
/// };
/// let c = charmrun::mpiexec::command(&o).unwrap();
/// assert_eq!(c.get_program(), "mpiexec");
/// assert_eq!(c.get_args().collect::<Vec<_>>(), ["-n", "3", "pgm"]);
/// ```
///
/// # Errors
/// [`UsageError`] when an option cannot go with `++mpiexec`.
pub fn command(opts: &Opts) -> Result<Command, UsageError> {
    let refuse = |why: &str| Err(UsageError::Unsupported(why.into()));
    if opts.nodelist.is_some() && !opts.local {
        return refuse(
            "++nodelist does not go with ++mpiexec: the MPI launcher places the ranks \
             (pass it a host file, e.g. ++remote-shell \"mpiexec --hostfile FILE\")",
        );
    }
    if opts.prefix {
        return refuse(
            "++prefix does not go with ++mpiexec: the MPI launcher forwards the output \
             (Open MPI: ++remote-shell \"mpiexec --tag-output\")",
        );
    }
    let launcher = opts.remote_shell.as_deref().unwrap_or(DEFAULT);
    let words = shell_words(launcher).ok_or_else(|| UsageError::BadShell(launcher.into()))?;
    let (name, rest) = words
        .split_first()
        .ok_or_else(|| UsageError::BadShell(launcher.into()))?;
    let mut c = Command::new(name);
    c.args(rest);
    // Open MPI passes only the variables it is told to to other hosts; asked only when there
    // is something to pass (asking runs the launcher once more).
    let log_vars: Vec<&str> = set_log_vars().collect();
    if !log_vars.is_empty() && is_open_mpi(name) {
        for v in log_vars {
            c.args(["-x", v]);
        }
    }
    c
        // One rank per node process; each runs `+ppn` PEs (passed on by `node_args`).
        .args(["-n", &(opts.pes / opts.ppn).to_string()]);
    // `++runscript SCRIPT`: each rank runs `SCRIPT PROGRAM ARGS`.
    let (program, args) = opts.node_command();
    c.arg(program).args(args);
    Ok(c)
}

/// The layers charmrun itself starts (its agents, through the launcher, under `++mpiexec`):
/// the net layers and the composites over them. `si+mpi` and `mpi` are MPI's to start.
const CHARMRUN_LAYERS: &[&str] = &["tcp", "udp", "si", "si+tcp", "si+udp"];

/// Whether `opts` runs a layer charmrun starts (`+machine tcp|udp|si|si+tcp|si+udp`): then
/// `++mpiexec` starts agents through the launcher instead of handing the job to it.
pub fn for_net_layer(opts: &Opts) -> bool {
    crate::opts::runtime_machine(&opts.args).is_some_and(|m| CHARMRUN_LAYERS.contains(&m.as_str()))
}

/// The launcher command that starts `tasks` agents of a net-layer job (charmrun adds
/// `charmrun ++agent`): `++remote-shell` (or `mpiexec`) with `-n TASKS`. Open MPI passes only
/// the variables it is told to to other hosts: it gets `-x` for each of charmrun's (by name,
/// so the secret is not on the command line).
///
/// # Errors
/// [`UsageError`] when an option cannot go with `++mpiexec`.
pub fn agent_words(opts: &Opts, tasks: usize) -> Result<Vec<String>, UsageError> {
    if opts.nodelist.is_some() && !opts.local {
        return Err(UsageError::Unsupported(
            "++nodelist does not go with ++mpiexec: the launcher places the tasks \
             (pass it a host file, e.g. ++remote-shell \"mpiexec --hostfile FILE\")"
                .into(),
        ));
    }
    let launcher = opts.remote_shell.as_deref().unwrap_or(DEFAULT);
    let mut words = shell_words(launcher).ok_or_else(|| UsageError::BadShell(launcher.into()))?;
    if is_open_mpi(&words[0]) {
        for v in [
            crate::client::ENV_CHARMRUN,
            crate::client::ENV_JOB,
            crate::client::ENV_SECRET,
        ]
        .into_iter()
        .chain(set_log_vars())
        {
            words.extend(["-x".to_string(), v.to_string()]);
        }
    }
    words.extend(["-n".to_string(), tasks.to_string()]);
    Ok(words)
}

/// The log variables set in charmrun's environment, which the ranks must see too.
fn set_log_vars() -> impl Iterator<Item = &'static str> {
    converse_machine::log::PASSED_ON
        .into_iter()
        .filter(|v| std::env::var_os(v).is_some())
}

/// Whether `program` is Open MPI's launcher (it says so in its `--version`).
fn is_open_mpi(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    if !matches!(
        base,
        "mpiexec" | "mpirun" | "orterun" | "mpiexec.openmpi" | "mpirun.openmpi"
    ) {
        return false;
    }
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| {
            let t = String::from_utf8_lossy(&o.stdout);
            t.contains("Open MPI") || t.contains("OpenRTE")
        })
}

/// Why charmrun ends the launcher early.
enum Ending {
    Signal(i32),
    TimeLimit(Duration),
}

/// Run the job through the MPI launcher; the exit code charmrun should end with.
///
/// # Errors
/// [`LaunchError`] when the command cannot be built, or the launcher started or waited for.
pub fn run(opts: &Opts) -> Result<i32, LaunchError> {
    let mut cmd = command(opts)?;
    if opts.verbose {
        converse_machine::input::error_line(&format!(
            "charmrun: handing the job to the MPI launcher: {cmd:?}"
        ));
    }
    crate::launch::install_signal_handlers();
    // Its own process group, so that what it starts can be ended as one; no terminal input,
    // which a background group could not read anyway (as for nodes charmrun starts itself).
    cmd.process_group(0).stdin(Stdio::null());
    let mut child = cmd.spawn().map_err(|source| LaunchError::MpiLauncher {
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;
    let group = Pid::from_raw(child.id() as i32);
    let started = Instant::now();
    let mut ending: Option<(Ending, Instant)> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => {}
            Err(e) => {
                let _ = killpg(group, Signal::SIGKILL);
                let _ = child.wait();
                return Err(LaunchError::Wait(e));
            }
        }
        let now = Instant::now();
        match &ending {
            None => {
                let why = if let Some(sig) = crate::launch::signalled() {
                    Some((Ending::Signal(sig), Signal::try_from(sig).ok()))
                } else {
                    opts.timelimit
                        .filter(|&l| now.duration_since(started) >= l)
                        .map(|l| (Ending::TimeLimit(l), Some(Signal::SIGTERM)))
                };
                if let Some((why, sig)) = why {
                    // The MPI launcher passes it on to every rank.
                    let _ = killpg(group, sig.unwrap_or(Signal::SIGTERM));
                    ending = Some((why, now));
                }
            }
            Some((_, since)) if now.duration_since(*since) >= TERM_GRACE => {
                let _ = killpg(group, Signal::SIGKILL);
            }
            Some(_) => {}
        }
        std::thread::sleep(TICK);
    };
    let Some((why, _)) = ending else {
        return Ok(crate::launch::exit_code(status));
    };
    // Whatever of the group outlived the launcher ends with it.
    let _ = killpg(group, Signal::SIGKILL);
    Ok(match why {
        Ending::Signal(sig) => {
            converse_machine::input::error_line(&format!(
                "charmrun: interrupted by signal {sig}; ended the job"
            ));
            128 + sig
        }
        Ending::TimeLimit(limit) => {
            converse_machine::input::error_line(&format!(
                "charmrun: ++timelimit of {} s reached; ended the job",
                limit.as_secs_f64()
            ));
            124
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Opts {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        match crate::opts::parse(&args) {
            Ok(crate::opts::Parsed::Run(o)) => o,
            _ => unreachable!("the options parse"),
        }
    }

    #[test]
    fn the_composites_are_charmruns_to_start_and_mpi_layers_the_launchers() {
        for m in ["tcp", "udp", "si", "si+tcp", "si+udp"] {
            assert!(
                for_net_layer(&opts(&["++mpiexec", "+p2", "pgm", "+machine", m])),
                "{m}"
            );
        }
        for m in ["mpi", "si+mpi"] {
            assert!(
                !for_net_layer(&opts(&["++mpiexec", "+p2", "pgm", "+machine", m])),
                "{m}"
            );
        }
        assert!(!for_net_layer(&opts(&["++mpiexec", "+p2", "pgm"])));
    }
}
