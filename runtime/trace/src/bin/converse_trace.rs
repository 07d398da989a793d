//! `converse-trace`: what a job run with `+trace` left, for a person to look at.
//!
//! ```text
//! converse-trace json DIR [-o FILE]      Chrome / Perfetto trace-event JSON (stdout by default)
//! converse-trace report DIR [-o FILE]    self-contained HTML report (default DIR/report.html)
//! converse-trace check DIR               messages matched, handlers, warnings (one line each)
//! ```
//!
//! Errors are one line on stderr, exit code 1.

use converse_trace::{chrome, report, summary, Job};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: converse-trace json DIR [-o FILE] | report DIR [-o FILE] | check DIR";

fn run(args: &[String]) -> Result<(), String> {
    let mut it = args.iter();
    let cmd = it.next().ok_or(USAGE)?;
    let mut dir = None;
    let mut out = None;
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => out = Some(PathBuf::from(it.next().ok_or("-o needs a file")?)),
            "-h" | "--help" => return Err(USAGE.into()),
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument '{a}' ({USAGE})")),
        }
    }
    let dir = dir.ok_or(USAGE)?;
    let job = Job::load(&dir).map_err(|e| e.to_string())?;
    for w in &job.warnings {
        eprintln!("converse-trace: warning: {w}");
    }
    let write = |path: &PathBuf, body: &str| {
        std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))
    };
    match cmd.as_str() {
        "json" => {
            let text = chrome::json(&job).to_string();
            match out {
                Some(p) => write(&p, &text)?,
                None => println!("{text}"),
            }
        }
        "report" => {
            let p = out.unwrap_or_else(|| dir.join("report.html"));
            write(&p, &report::html(&job))?;
            eprintln!("converse-trace: wrote {}", p.display());
        }
        "check" => {
            let f = &job.flows;
            println!(
                "{} PEs, {} messages matched, {} sends unmatched, {} receives unmatched",
                job.traces.len(),
                f.matched.len(),
                f.unmatched_sends.len(),
                f.unmatched_recvs.len()
            );
            for h in summary::handler_times(&job) {
                println!("handler {}: {} runs, {} ns", h.name, h.runs, h.self_ns);
            }
        }
        _ => return Err(format!("unknown command '{cmd}' ({USAGE})")),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("converse-trace: {e}");
            ExitCode::from(1)
        }
    }
}
