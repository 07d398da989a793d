//! Logs: every crate of the project logs through the `tracing` crate, and this module installs
//! the one subscriber a process has, writing to stderr, filtered by the environment variable
//! `CONVERSE_LOG` in `EnvFilter` syntax:
//!
//! ```text
//! CONVERSE_LOG=debug                 everything at debug and above
//! CONVERSE_LOG=udp=trace             the UDP layer's protocol in detail, the rest at warn
//! CONVERSE_LOG=charmrun=debug,tcp=debug
//! ```
//!
//! Targets (what a user types before `=`): `converse` (the runtime: start-up phases, the
//! handler check, exit, barriers, SMP threads), `tcp`, `udp`, `si`, `mpi`, `multi` (the
//! composite layer), `local`, `charmrun` (the launcher, its agents, and a node's control
//! connection), `tbon` (the tree overlay). Unset, the filter is `warn`: nothing meant for
//! debugging shows. What a user must see (errors, the banner, abort reasons, `++verbose`) is not
//! a log line and prints whatever the filter says.
//!
//! MRNet's `MRNET_DEBUG_LEVEL` (0 to 5) is honoured as an alias for the tree overlay when
//! `CONVERSE_LOG` is unset: 0 → `tbon=error`, 1 → `tbon=warn` (MRNet's default), 2 →
//! `tbon=info`, 3 → `tbon=debug`, 4 and 5 → `tbon=trace`; other targets stay at `warn`.
//!
//! MRNet's `MRNET_DEBUG_LOG_DIRECTORY` (an absolute path to a directory that exists) sends a
//! process's log to a file of its own there, `PROGRAM.HOST.PID.log`, instead of stderr; unset,
//! logs go to stderr (MRNet falls back on `$HOME/mrnet-log` when that exists; we do not look
//! for it, so a log never goes somewhere nobody asked for).
//!
//! Every line names who wrote it: `[node 2 pe 5]` (a PE's thread), `[node 2 comm]` (a node's
//! communication thread in SMP mode), `[node 2]` (a layer's thread that no PE owns, or a
//! process hosting one node before its PEs start), `[charmrun]`, `[charmrun agent 2]`; a thread
//! that has not said who it is shows the process's default, else `[pid N]`. The runtime and
//! the launchers say so through [`set_thread`] and [`set_process`]. A filter that does not
//! parse is an error ([`LogError`]): the runtime's start-up and charmrun refuse to run with it
//! rather than log less than asked.

use std::cell::Cell;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// The environment variable holding the filter.
pub const ENV_LOG: &str = "CONVERSE_LOG";
/// MRNet's debug level, an alias for the tree overlay's target.
pub const ENV_MRNET_DEBUG_LEVEL: &str = "MRNET_DEBUG_LEVEL";

/// MRNet's log directory: each process logs to a file of its own there.
pub const ENV_LOG_DIRECTORY: &str = "MRNET_DEBUG_LOG_DIRECTORY";

/// The variables a launcher passes on to the processes it starts (a local child inherits
/// them anyway; a remote shell or an MPI launcher passes only what it is given).
pub const PASSED_ON: [&str; 3] = [ENV_LOG, ENV_MRNET_DEBUG_LEVEL, ENV_LOG_DIRECTORY];

/// The variables of [`PASSED_ON`] set in this process, with their values.
pub fn passed_on() -> Vec<(String, String)> {
    PASSED_ON
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
        .collect()
}

/// The filter when neither variable is set.
const DEFAULT: &str = "warn";

/// Who writes a log line: the part of the job a thread (or a process) plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Who {
    /// Not said; the process's default is shown, else the process id.
    #[default]
    Unknown,
    /// A PE's thread.
    Pe {
        /// The node it belongs to.
        node: usize,
        /// Its PE number in the job.
        pe: usize,
    },
    /// A node's communication thread (SMP mode).
    Comm {
        /// The node.
        node: usize,
    },
    /// A node, no PE in particular (a layer's own thread, the start-up before PEs run).
    Node(usize),
    /// The launcher.
    Charmrun,
    /// A launcher's agent on a host: its number once it knows it.
    Agent(Option<u32>),
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Unknown => write!(f, "pid {}", std::process::id()),
            Who::Pe { node, pe } => write!(f, "node {node} pe {pe}"),
            Who::Comm { node } => write!(f, "node {node} comm"),
            Who::Node(n) => write!(f, "node {n}"),
            Who::Charmrun => f.write_str("charmrun"),
            Who::Agent(None) => f.write_str("charmrun agent"),
            Who::Agent(Some(a)) => write!(f, "charmrun agent {a}"),
        }
    }
}

thread_local! {
    static THREAD: Cell<Who> = const { Cell::new(Who::Unknown) };
}

static PROCESS: Mutex<Who> = Mutex::new(Who::Unknown);

/// Say who this thread is, for the lines it logs from now on.
pub fn set_thread(who: Who) {
    THREAD.with(|t| t.set(who));
}

/// Say who this process is, for the lines of threads that never said who they are.
pub fn set_process(who: Who) {
    if let Ok(mut p) = PROCESS.lock() {
        *p = who;
    }
}

/// Who this thread's lines name.
pub fn current() -> Who {
    match THREAD.with(Cell::get) {
        Who::Unknown => PROCESS.lock().map_or(Who::Unknown, |p| *p),
        w => w,
    }
}

/// A filter that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// `CONVERSE_LOG` does not parse as an `EnvFilter`.
    #[error("{ENV_LOG}={value:?} is not a log filter ({why}); examples: debug, udp=trace, charmrun=debug,tcp=debug")]
    Filter {
        /// The variable's value.
        value: String,
        /// What the parser said.
        why: String,
    },
    /// `MRNET_DEBUG_LEVEL` is not 0 to 5.
    #[error("{ENV_MRNET_DEBUG_LEVEL}={0:?} is not a level from 0 to 5")]
    MrnetLevel(String),
    /// `MRNET_DEBUG_LOG_DIRECTORY` is not an absolute path to a directory this process can
    /// write a file in.
    #[error("{ENV_LOG_DIRECTORY}={dir:?}: {why}")]
    Directory {
        /// The directory.
        dir: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The file this process logs to in `dir` (MRNet's `MRNET_DEBUG_LOG_DIRECTORY`):
/// `PROGRAM.HOST.PID.log`, created (or appended to).
///
/// # Errors
/// [`LogError::Directory`] when `dir` is not absolute or the file cannot be opened.
pub fn log_file(dir: &std::path::Path) -> Result<std::fs::File, LogError> {
    let bad = |why: String| LogError::Directory {
        dir: dir.display().to_string(),
        why,
    };
    if !dir.is_absolute() {
        // A relative path would mean a different directory on each host's working directory.
        return Err(bad("not an absolute path".into()));
    }
    let program = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "converse".into());
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into());
    let path = dir.join(format!("{program}.{host}.{}.log", std::process::id()));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| bad(format!("cannot open {}: {e}", path.display())))
}

/// The filter directives for the values of `CONVERSE_LOG` and `MRNET_DEBUG_LEVEL`
/// (`CONVERSE_LOG` wins when both are set).
///
/// # Errors
/// [`LogError`] when the value in use is malformed.
pub fn directives(converse_log: Option<&str>, mrnet: Option<&str>) -> Result<String, LogError> {
    let text = match (converse_log, mrnet) {
        (Some(v), _) => v.to_owned(),
        (None, Some(m)) => {
            let level = match m.trim().parse::<u8>() {
                Ok(0) => "error",
                Ok(1) => "warn",
                Ok(2) => "info",
                Ok(3) => "debug",
                Ok(4 | 5) => "trace",
                _ => return Err(LogError::MrnetLevel(m.to_owned())),
            };
            format!("{DEFAULT},tbon={level}")
        }
        (None, None) => DEFAULT.to_owned(),
    };
    // Checked here, so that the error names the variable and fits on one line.
    filter(&text).map_err(|why| LogError::Filter {
        value: converse_log.unwrap_or(&text).to_owned(),
        why,
    })?;
    Ok(text)
}

fn filter(text: &str) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .with_default_directive(tracing::level_filters::LevelFilter::WARN.into())
        .parse(text)
        .map_err(|e| e.to_string().replace('\n', " "))
}

/// Install the process's subscriber (stderr, or a file of its own in
/// `MRNET_DEBUG_LOG_DIRECTORY`; the filter from the environment) once; later calls return
/// the first call's outcome. A program that installed a subscriber of its own keeps it.
///
/// # Errors
/// [`LogError`] when `CONVERSE_LOG` (or `MRNET_DEBUG_LEVEL`) is malformed, or the log
/// directory cannot take this process's file.
pub fn init() -> Result<(), LogError> {
    init_in(None)
}

/// [`init`], logging to a file of this process's own in `dir` when given (else as
/// `MRNET_DEBUG_LOG_DIRECTORY` says). Only the first call of either decides.
///
/// # Errors
/// As [`init`].
pub fn init_in(dir: Option<&std::path::Path>) -> Result<(), LogError> {
    static DONE: OnceLock<Result<(), LogError>> = OnceLock::new();
    DONE.get_or_init(|| {
        let text = directives(
            std::env::var(ENV_LOG).ok().as_deref(),
            std::env::var(ENV_MRNET_DEBUG_LEVEL).ok().as_deref(),
        )?;
        let f = filter(&text).map_err(|why| LogError::Filter {
            value: text.clone(),
            why,
        })?;
        let from_env = std::env::var_os(ENV_LOG_DIRECTORY)
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from);
        let file = match dir.map(std::path::Path::to_path_buf).or(from_env) {
            Some(d) => Some(log_file(&d)?),
            None => None,
        };
        let builder = tracing_subscriber::fmt()
            .with_env_filter(f)
            .event_format(Line);
        // `try_init` fails only when the program installed its own subscriber: then that
        // one logs.
        let _ = match file {
            Some(file) => builder.with_writer(Mutex::new(file)).try_init(),
            None => builder.with_writer(std::io::stderr).try_init(),
        };
        Ok(())
    })
    .clone()
}

/// [`init`] for a process that is `who` throughout (charmrun, an agent).
///
/// # Errors
/// As [`init`].
pub fn init_as(who: Who) -> Result<(), LogError> {
    set_process(who);
    init()
}

/// One line: time, who, level, target, the message and its fields.
struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let m = event.metadata();
        SystemTime.format_time(&mut w)?;
        write!(w, " [{}] {} {}: ", current(), m.level(), m.target())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_is_warn_and_converse_log_wins_over_mrnet() {
        assert_eq!(directives(None, None).unwrap(), "warn");
        assert_eq!(
            directives(Some("udp=trace"), Some("5")).unwrap(),
            "udp=trace"
        );
        assert_eq!(directives(Some("debug"), None).unwrap(), "debug");
    }

    #[test]
    fn mrnet_levels_map_onto_the_tree_overlay() {
        let got: Vec<String> = (0..=5)
            .map(|l| directives(None, Some(&l.to_string())).unwrap())
            .collect();
        assert_eq!(
            got,
            [
                "warn,tbon=error",
                "warn,tbon=warn",
                "warn,tbon=info",
                "warn,tbon=debug",
                "warn,tbon=trace",
                "warn,tbon=trace"
            ]
        );
        assert_eq!(
            directives(None, Some("7")),
            Err(LogError::MrnetLevel("7".into()))
        );
        assert!(directives(None, Some("lots")).is_err());
    }

    #[test]
    fn a_malformed_filter_is_a_one_line_error_naming_the_variable() {
        for bad in ["udp=loud", "tcp=debug,si=[", "=x=y"] {
            let e = directives(Some(bad), None).expect_err(bad).to_string();
            assert!(e.starts_with("CONVERSE_LOG="), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn lines_name_the_thread_else_the_process() {
        std::thread::spawn(|| {
            assert_eq!(current().to_string(), format!("pid {}", std::process::id()));
            set_thread(Who::Pe { node: 2, pe: 5 });
            assert_eq!(current().to_string(), "node 2 pe 5");
            set_thread(Who::Comm { node: 2 });
            assert_eq!(current().to_string(), "node 2 comm");
        })
        .join()
        .unwrap();
        assert_eq!(Who::Node(3).to_string(), "node 3");
        assert_eq!(Who::Charmrun.to_string(), "charmrun");
        assert_eq!(Who::Agent(Some(2)).to_string(), "charmrun agent 2");
    }
}
