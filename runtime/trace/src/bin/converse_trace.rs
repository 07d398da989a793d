//! `converse-trace`: what a job run with `+trace` left, for a person to look at.
//!
//! ```text
//! converse-trace json DIR [-o FILE]      Chrome / Perfetto trace-event JSON (stdout by default)
//! converse-trace report DIR [-o FILE]    self-contained HTML report (default DIR/report.html)
//! converse-trace check DIR               messages matched, handlers, warnings (one line each)
//! converse-trace live HOST:PORT DIR [--key KEY | --key-file FILE] [--secs S]
//!                                        the last S seconds (default 10) of a running job's
//!                                        traces (+trace, CCS's ++server), one file per PE in DIR
//! ```
//!
//! Errors are one line on stderr, exit code 1. Output its reader stopped taking (`| head`)
//! ends the command quietly, with the code a shell reports for `cat` killed by SIGPIPE (141).

use converse_trace::{chrome, report, summary, Job};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: converse-trace json DIR [-o FILE] | report DIR [-o FILE] | check DIR \
                     | live HOST:PORT DIR [--key KEY | --key-file FILE] [--secs S]";

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

/// `s` with its control characters escaped (`\n`, `\u{1b}`): text from outside (a path, a
/// handler's name) must not break a line in two.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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

/// `args` as the OS gives them: a directory's name need not be UTF-8.
fn run(args: &[OsString]) -> Result<(), Stop> {
    let mut it = args.iter();
    let cmd = it.next().ok_or(USAGE)?.to_string_lossy();
    match &*cmd {
        "json" | "report" | "check" => {}
        "live" => return live(&args[1..]),
        "-h" | "--help" => return Err(USAGE.into()),
        _ => return Err(format!("unknown command '{cmd}' ({USAGE})").into()),
    }
    let mut dir = None;
    let mut out = None;
    while let Some(a) = it.next() {
        let text = a.to_string_lossy();
        match &*text {
            // An option the command would ignore is refused: the user expects it to act.
            "-o" if cmd == "check" => {
                return Err(format!("check prints to stdout and takes no -o ({USAGE})").into())
            }
            "-o" if out.is_some() => return Err(format!("-o given twice ({USAGE})").into()),
            "-o" => out = Some(PathBuf::from(it.next().ok_or("-o needs a file")?)),
            "-h" | "--help" => return Err(USAGE.into()),
            _ if text.starts_with('-') => {
                return Err(format!(
                    "unknown option '{text}' (a directory named so: ./{text}) ({USAGE})"
                )
                .into())
            }
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument '{text}' ({USAGE})").into()),
        }
    }
    let dir = dir.ok_or(USAGE)?;
    let job = Job::load(&dir).map_err(|e| e.to_string())?;
    for w in &job.warnings {
        say(&format!("warning: {w}"));
    }
    let file_error = |path: &PathBuf, e: std::io::Error| format!("{}: {e}", path.display());
    match &*cmd {
        "json" => match out {
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
        "report" => {
            let p = out.unwrap_or_else(|| dir.join("report.html"));
            std::fs::write(&p, report::html(&job)).map_err(|e| file_error(&p, e))?;
            say(&format!("wrote {}", p.display()));
        }
        _ => {
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            let f = &job.flows;
            writeln!(
                w,
                "{} PEs, {} messages matched, {} sends unmatched, {} receives unmatched",
                job.traces.len(),
                f.matched.len(),
                f.unmatched_sends.len(),
                f.unmatched_recvs.len()
            )
            .map_err(stdout_error)?;
            for h in summary::handler_times(&job) {
                writeln!(
                    w,
                    "handler {}: {} runs, {} ns",
                    one_line(&h.name),
                    h.runs,
                    h.self_ns
                )
                .map_err(stdout_error)?;
            }
            w.flush().map_err(stdout_error)?;
        }
    }
    Ok(())
}

/// `live`: fetch the last seconds of every PE's trace from a running job over CCS, into a
/// directory the other commands read.
fn live(args: &[OsString]) -> Result<(), Stop> {
    use converse_ccs::{Client, Dest, Key, Keys};
    let mut rest = Vec::new();
    let mut key = None;
    let mut secs = 10.0f64;
    let mut it = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = it.next() {
        match a.as_str() {
            "--key" => {
                let k = it.next().ok_or("--key needs a key")?;
                key = Some(Key::parse(&k).map_err(|e| e.to_string())?);
            }
            "--key-file" => {
                let f = it.next().ok_or("--key-file needs a file")?;
                let text = std::fs::read_to_string(&f).map_err(|e| format!("{f}: {e}"))?;
                let keys = Keys::parse(&text, &f).map_err(|e| e.to_string())?;
                key = Some(
                    keys.get(0)
                        .cloned()
                        .ok_or(format!("{f} has no key for level 0"))?,
                );
            }
            "--secs" => {
                let v = it.next().ok_or("--secs needs a number")?;
                secs = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                    .ok_or(format!("--secs {v}: seconds, above 0 and at most a day"))?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ if a.starts_with("--") => {
                return Err(format!("unknown option '{a}' ({USAGE})").into())
            }
            _ => rest.push(a),
        }
    }
    let [addr, dir] = rest.as_slice() else {
        return Err(USAGE.into());
    };
    let t = std::time::Duration::from_secs(30);
    let mut c = Client::connect(addr, key, t).map_err(|e| format!("{addr}: {e}"))?;
    let all = c
        .request("converse.trace", &Dest::All, secs.to_string().as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
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
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let first = args.first().and_then(|a| a.to_str());
    if let Some(code) =
        converse::input::help_or_version(first, "converse-trace", env!("CARGO_PKG_VERSION"), USAGE)
    {
        return code;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Stop::Pipe) => ExitCode::from(BROKEN_PIPE),
        Err(Stop::Error(e)) => {
            say(&e);
            ExitCode::from(1)
        }
    }
}
