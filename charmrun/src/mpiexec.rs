//! `charmrun ++mpiexec`: hand the job to the MPI launcher, as Charm++'s charmrun does for MPI
//! builds. charmrun then only builds the `mpiexec -n N PROGRAM ARGS` command, runs it, and
//! passes its exit code on; ranks find each other through MPI, not through charmrun.

use crate::opts::Opts;
use std::process::Command;
use std::time::Duration;

/// The launcher run when `++remote-shell` does not name another one.
pub const DEFAULT: &str = "mpiexec";

/// How long `mpiexec` gets after SIGTERM (at `++timelimit`) before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// The command for `opts`: `++remote-shell` (split at spaces, e.g. `"mpirun --oversubscribe"`)
/// or `mpiexec`, then `-n N`, the program and its arguments.
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
/// One line when an option cannot go with `++mpiexec`.
pub fn command(opts: &Opts) -> Result<Command, String> {
    if opts.nodelist.is_some() && !opts.local {
        return Err(
            "++nodelist does not go with ++mpiexec: the MPI launcher places the ranks \
                    (pass it a host file, e.g. ++remote-shell \"mpiexec --hostfile FILE\")"
                .into(),
        );
    }
    if opts.ppn > 1 {
        return Err("++ppn does not go with ++mpiexec: the MPI layer runs one PE per rank".into());
    }
    if opts.prefix {
        return Err(
            "++prefix does not go with ++mpiexec: the MPI launcher forwards the output \
                    (Open MPI: ++remote-shell \"mpiexec --tag-output\")"
                .into(),
        );
    }
    let launcher = opts.remote_shell.as_deref().unwrap_or(DEFAULT);
    let mut words = launcher.split_whitespace();
    let name = words
        .next()
        .ok_or("++remote-shell needs a command (the MPI launcher, with ++mpiexec)")?;
    let mut c = Command::new(name);
    c.args(words)
        .args(["-n", &opts.pes.to_string()])
        .arg(&opts.program)
        .args(&opts.args);
    Ok(c)
}

/// Run the job through the MPI launcher; returns the exit code charmrun should end with.
pub fn run(opts: &Opts) -> i32 {
    let mut cmd = match command(opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("charmrun: {e}");
            return 2;
        }
    };
    if opts.verbose {
        eprintln!("charmrun: handing the job to the MPI launcher: {cmd:?}");
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "charmrun: cannot start the MPI launcher '{}': {e}",
                cmd.get_program().to_string_lossy()
            );
            return 2;
        }
    };
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let limited = opts.timelimit.map(|limit| {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let timer = std::thread::spawn(move || {
            use std::sync::mpsc::RecvTimeoutError::Timeout;
            // Nothing is ever sent: the wait ends at the limit, or when the job ended first and
            // dropped `stop`.
            if stopped.recv_timeout(limit) != Err(Timeout) {
                return false;
            }
            // mpiexec passes SIGTERM on to every rank; SIGKILL if it does not end.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if stopped.recv_timeout(TERM_GRACE) == Err(Timeout) {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
            true
        });
        (stop, timer, limit)
    });
    let status = child.wait();
    let timed_out = limited.is_some_and(|(stop, timer, limit)| {
        drop(stop);
        let hit = timer.join().unwrap_or(false);
        if hit {
            eprintln!(
                "charmrun: ++timelimit of {} s reached; ended the job",
                limit.as_secs_f64()
            );
        }
        hit
    });
    if timed_out {
        return 124;
    }
    match status {
        Ok(s) => crate::launch::exit_code(s),
        Err(e) => {
            eprintln!("charmrun: waiting for the MPI launcher: {e}");
            1
        }
    }
}
