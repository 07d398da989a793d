//! `converse-trace`: what a job run with `+trace` left, for a person to look at.
//!
//! ```text
//! converse-trace json DIR [-o FILE]      Chrome / Perfetto trace-event JSON (stdout by default)
//! converse-trace report DIR [-o FILE]    self-contained HTML report (default DIR/report.html)
//! converse-trace check DIR               messages matched, handlers, user events and brackets,
//!                                         communication threads, warnings (one line each)
//! converse-trace live HOST:PORT DIR [--key KEY | --key-file FILE] [--secs S]
//!                                        the last S seconds (default 10) of a running job's
//!                                        traces (+trace, CCS's ++server), one file per PE in DIR
//! ```
//!
//! The command line is clap's: `--help` (also of each command) and `--version` print to
//! stdout, exit code 0; a usage error (an unknown command or option, with the nearest one
//! suggested, a missing or extra argument, a bad `--key` or `--secs`) is one line on stderr,
//! exit code 2. Other errors (a trace that cannot be read, a job that cannot be reached) are
//! one line on stderr, exit code 1. Output its reader stopped taking (`| head`) ends the
//! command quietly, with the code a shell reports for `cat` killed by SIGPIPE (141).

use clap::{Parser, Subcommand};
use converse::input::one_line;
use converse_ccs::Key;
use converse_trace::{chrome, report, summary, Job};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What a job run with `+trace` left, for a person to look at.
#[derive(Parser)]
#[command(name = "converse-trace", version, arg_required_else_help = false)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Chrome / Perfetto trace-event JSON (to stdout unless -o is given)
    Json {
        /// The directory of the job's traces (trace.PE.bin)
        dir: PathBuf,
        /// Write the JSON to FILE
        #[arg(short = 'o', value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// A self-contained HTML report (DIR/report.html unless -o is given)
    Report {
        /// The directory of the job's traces (trace.PE.bin)
        dir: PathBuf,
        /// Write the report to FILE
        #[arg(short = 'o', value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Messages matched, time per handler and warnings, one line each, on stdout
    Check {
        /// The directory of the job's traces (trace.PE.bin)
        dir: PathBuf,
        /// Refused: check prints to stdout (an option it would ignore is refused, as the user
        /// expects it to act).
        #[arg(short = 'o', value_name = "FILE", hide = true)]
        out: Option<PathBuf>,
    },
    /// The last seconds of a running job's traces (+trace, CCS's ++server), one file per PE
    Live {
        /// Where the job's CCS server listens
        #[arg(value_name = "HOST:PORT")]
        addr: String,
        /// The directory to write trace.PE.bin into
        dir: PathBuf,
        /// The CCS key (decimal digits, as ++server prints it)
        #[arg(long, value_name = "KEY", value_parser = key, conflicts_with = "key_file")]
        key: Option<Key>,
        /// A file of keys (lines `LEVEL KEY`): its level-0 key
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// How many seconds of the traces, above 0 and at most a day
        #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = secs)]
        secs: f64,
    },
}

/// A `--key` value.
fn key(s: &str) -> Result<Key, String> {
    Key::parse(s).map_err(|e| e.to_string())
}

/// A `--secs` value: seconds, above 0 and at most a day.
fn secs(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .ok_or_else(|| "seconds, above 0 and at most a day".into())
}

/// Exit code for a command line refused, as clap's.
const USAGE_ERROR: u8 = 2;

/// Exit code for a reader gone: 128 + SIGPIPE, as for `cat`.
const BROKEN_PIPE: u8 = 141;

/// Why the command stops early.
enum Stop {
    /// An error, said in one line.
    Error(String),
    /// Standard output's reader went away: nothing to say.
    Pipe,
}

impl From<String> for Stop {
    fn from(e: String) -> Stop {
        Stop::Error(e)
    }
}

impl From<&str> for Stop {
    fn from(e: &str) -> Stop {
        Stop::Error(e.into())
    }
}

/// A failed write to standard output: a closed pipe is the reader's choice, not an error.
fn stdout_error(e: std::io::Error) -> Stop {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Stop::Pipe
    } else {
        Stop::Error(format!("cannot write to stdout: {e}"))
    }
}

/// A line on stderr. `eprintln!` would panic when stderr fails (`2>/dev/full`); there is
/// nowhere left to say so, so the line is dropped.
fn say(line: &str) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "converse-trace: {}",
        one_line(line)
    );
}

/// What `json`, `report` and `check` make of a job's traces.
#[derive(Clone, Copy)]
enum Made {
    Json,
    Report,
    Check,
}

/// The command `cmd` (its command line checked).
fn run(cmd: Cmd) -> Result<(), Stop> {
    let (made, dir, out) = match cmd {
        Cmd::Live {
            addr,
            dir,
            key,
            key_file,
            secs,
        } => return live(&addr, &dir, key, key_file.as_deref(), secs),
        Cmd::Json { dir, out } => (Made::Json, dir, out),
        Cmd::Report { dir, out } => (Made::Report, dir, out),
        // `check -o` was refused as a usage error.
        Cmd::Check { dir, .. } => (Made::Check, dir, None),
    };
    let job = Job::load(&dir).map_err(|e| e.to_string())?;
    for w in &job.warnings {
        say(&format!("warning: {w}"));
    }
    let file_error = |path: &PathBuf, e: std::io::Error| format!("{}: {e}", path.display());
    match made {
        Made::Json => match out {
            // Streamed: the JSON of a big job is many times its traces.
            Some(p) => {
                let f = std::fs::File::create(&p).map_err(|e| file_error(&p, e))?;
                let mut w = std::io::BufWriter::new(f);
                chrome::write(&job, &mut w)
                    .and_then(|()| writeln!(w))
                    .and_then(|()| w.flush())
                    .map_err(|e| file_error(&p, e))?;
            }
            None => {
                let mut w = std::io::BufWriter::new(std::io::stdout().lock());
                chrome::write(&job, &mut w)
                    .and_then(|()| writeln!(w))
                    .and_then(|()| w.flush())
                    .map_err(stdout_error)?;
            }
        },
        Made::Report => {
            let p = out.unwrap_or_else(|| dir.join("report.html"));
            std::fs::write(&p, report::html(&job)).map_err(|e| file_error(&p, e))?;
            say(&format!("wrote {}", p.display()));
        }
        Made::Check => {
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            let f = &job.flows;
            writeln!(
                w,
                "{}, {} messages matched, {} sends unmatched, {} receives unmatched",
                summary::plural(job.traces.len() as u64, "PE"),
                f.matched.len(),
                f.unmatched_sends.len(),
                f.unmatched_recvs.len()
            )
            .map_err(stdout_error)?;
            let time = |ns: u64| summary::human_time(ns as f64);
            for h in summary::handler_times(&job) {
                writeln!(
                    w,
                    "handler {}: {}, {} self time, {} a run",
                    one_line(&h.name),
                    summary::plural(h.runs, "run"),
                    time(h.self_ns),
                    time(h.self_ns / h.runs.max(1))
                )
                .map_err(stdout_error)?;
            }
            for u in converse_trace::profile::user_stats(&job) {
                let what = if u.bracket { "bracket" } else { "event" };
                let total = if u.bracket {
                    format!(", {} in all", time(u.total_ns))
                } else {
                    String::new()
                };
                writeln!(
                    w,
                    "{what} {}: {} on {}{total}",
                    one_line(&u.name),
                    summary::plural(u.count, "time"),
                    summary::plural(u.pes, "PE")
                )
                .map_err(stdout_error)?;
            }
            let end = job.end() as f64;
            let bins = converse_trace::profile::Bins::of(&job, 1);
            for (t, u) in job
                .comm
                .iter()
                .zip(converse_trace::profile::comm_utilization(&job, bins))
            {
                writeln!(
                    w,
                    "{}: moving messages {:.1}% of {}",
                    converse_trace::profile::comm_label(t),
                    100.0 * u.first().copied().unwrap_or(0.0),
                    summary::human_time(end)
                )
                .map_err(stdout_error)?;
            }
            w.flush().map_err(stdout_error)?;
        }
    }
    Ok(())
}

/// `live`: fetch the last `secs` seconds of every PE's trace from the running job at `addr`
/// over CCS, into `dir`, which the other commands read.
fn live(
    addr: &str,
    dir: &Path,
    key: Option<Key>,
    key_file: Option<&Path>,
    secs: f64,
) -> Result<(), Stop> {
    use converse_ccs::{Client, Dest, Keys};
    let key = match key_file {
        // A file that cannot be read is an error of the run (exit code 1), not of its
        // command line.
        Some(path) => {
            let f = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| format!("{f}: {e}"))?;
            let keys = Keys::parse(&text, &f).map_err(|e| e.to_string())?;
            Some(
                keys.get(0)
                    .cloned()
                    .ok_or(format!("{f} has no key for level 0"))?,
            )
        }
        None => key,
    };
    let t = std::time::Duration::from_secs(30);
    let mut c = Client::connect(addr, key, t).map_err(|e| format!("{addr}: {e}"))?;
    let all = c
        .request("converse.trace", &Dest::All, secs.to_string().as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut at = 0;
    let mut pe = 0;
    while at < all.len() {
        let len = all
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or("a reply that is not traces")? as usize;
        let file = all
            .get(at + 8..at + 8 + len)
            .ok_or("a reply that is not traces")?;
        if len == 0 {
            return Err(format!(
                "PE {pe} does not trace: start the job with +trace (and ++server)"
            )
            .into());
        }
        let p = dir.join(format!("trace.{pe}.bin"));
        std::fs::write(&p, file).map_err(|e| format!("{}: {e}", p.display()))?;
        at += 8 + len;
        pe += 1;
    }
    if pe != c.num_pes() {
        return Err(format!("{pe} traces for {} PEs", c.num_pes()).into());
    }
    say(&format!(
        "wrote the last {secs} s of {pe} PEs' traces to {}",
        dir.display()
    ));
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            return converse::input::refused_cli(
                "converse-trace",
                &e.render().to_string(),
                !e.use_stderr(),
            )
        }
    };
    if let Cmd::Check { out: Some(_), .. } = cli.cmd {
        // An option the command would ignore is refused: the user expects it to act.
        converse::input::error_line(
            "converse-trace: check prints to stdout and takes no -o \
             (usage: converse-trace check <DIR>)",
        );
        return ExitCode::from(USAGE_ERROR);
    }
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Stop::Pipe) => ExitCode::from(BROKEN_PIPE),
        Err(Stop::Error(e)) => {
            say(&e);
            ExitCode::from(1)
        }
    }
}
