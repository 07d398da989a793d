//! `ccs`: send one CCS request to a running job and print its reply.
//!
//! ```text
//! ccs [--key KEY | --key-file FILE] [--pe N | --pe all | --pe 0,2,5] [--timeout SECS]
//!     HOST:PORT HANDLER [DATA]
//! ```
//!
//! The reply goes to standard output as it came (bytes); errors are one line on standard
//! error and exit 1. The command line is clap's: `--help` and `--version` print to standard
//! output, exit 0; bad arguments (an unknown option, with the nearest one suggested, a bad
//! `--pe`, `--timeout` or `--key`, a key file that cannot be read, a missing or extra
//! argument) are one line on standard error, exit 2. DATA that starts with `-` follows `--`.

use clap::Parser;
use converse_ccs::{Client, Dest, Key, Keys};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Send one CCS request to a running job (started with ++server) and print its reply.
#[derive(Parser)]
#[command(name = "ccs", version)]
struct Cli {
    /// The CCS key (decimal digits, as ++server prints it)
    #[arg(long, value_name = "KEY", value_parser = key, conflicts_with = "key_file")]
    key: Option<Key>,
    /// A file of keys (lines `LEVEL KEY`): its level-0 key
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// The PEs the request goes to: one, `all`, or a list separated by commas
    #[arg(long, value_name = "N|all|N,N,...", default_value = "0", value_parser = pes)]
    pe: Dest,
    /// Seconds to wait for the reply, from 0.001 to a day
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = timeout)]
    timeout: Duration,
    /// Where the job's CCS server listens
    #[arg(value_name = "HOST:PORT")]
    addr: String,
    /// The handler's name
    handler: String,
    /// The request's data
    data: Option<String>,
}

/// A `--key` value.
fn key(s: &str) -> Result<Key, String> {
    Key::parse(s).map_err(|e| e.to_string())
}

/// A `--pe` value: a PE, `all`, or PEs separated by commas.
fn pes(v: &str) -> Result<Dest, String> {
    if v == "all" {
        return Ok(Dest::All);
    }
    let pes = v
        .split(',')
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "a PE, 'all', or PEs separated by commas".to_owned())?;
    Ok(match pes.as_slice() {
        [one] => Dest::Pe(*one),
        _ => Dest::List(pes),
    })
}

/// A `--timeout` value: seconds, from 0.001 to a day.
fn timeout(v: &str) -> Result<Duration, String> {
    v.parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.001 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| "seconds, from 0.001 to a day".to_owned())
}

/// The level-0 key of the key file at `path`.
fn key_from_file(path: &std::path::Path) -> Result<Key, String> {
    let f = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{f}: {e}"))?;
    let keys = Keys::parse(&text, &f).map_err(|e| e.to_string())?;
    keys.get(0)
        .cloned()
        .ok_or_else(|| format!("{f} has no key for level 0"))
}

fn main() -> ExitCode {
    let a = match Cli::try_parse() {
        Ok(a) => a,
        Err(e) => {
            return converse_machine::input::refused_cli(
                "ccs",
                &e.render().to_string(),
                !e.use_stderr(),
            )
        }
    };
    // A key file is part of the command line: one that cannot be read is a bad argument.
    let key = match &a.key_file {
        Some(path) => match key_from_file(path) {
            Ok(k) => Some(k),
            Err(e) => {
                converse_machine::input::error_line(&format!("ccs: {e}"));
                return ExitCode::from(2);
            }
        },
        None => a.key,
    };
    let data = a.data.map(String::into_bytes).unwrap_or_default();
    let reply = Client::connect(&a.addr, key, a.timeout)
        .and_then(|mut c| c.request(&a.handler, &a.pe, &data));
    match reply {
        Ok(r) => {
            let mut out = std::io::stdout().lock();
            // A closed standard output ends the command, quietly.
            let _ = out.write_all(&r).and_then(|()| out.flush());
            ExitCode::SUCCESS
        }
        Err(e) => {
            converse_machine::input::error_line(&format!("ccs: {}: {e}", a.addr));
            ExitCode::from(1)
        }
    }
}
