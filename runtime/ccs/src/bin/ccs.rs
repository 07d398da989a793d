//! `ccs`: send one CCS request to a running job and print its reply.
//!
//! ```text
//! ccs [--key KEY | --key-file FILE] [--pe N | --pe all | --pe 0,2,5] [--timeout SECS]
//!     HOST:PORT HANDLER [DATA]
//! ```
//!
//! The reply goes to standard output as it came (bytes); errors are one line on standard
//! error and exit 1; bad arguments exit 2. `--help` and `--version` print to standard output.

use converse_ccs::{Client, Dest, Key, Keys};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: ccs [--key KEY | --key-file FILE] [--pe N|all|N,N,...] \
                     [--timeout SECS] HOST:PORT HANDLER [DATA]";

struct Args {
    key: Option<Key>,
    dest: Dest,
    timeout: Duration,
    addr: String,
    handler: String,
    data: Vec<u8>,
}

/// What the command line asks for: a request, or a text to print (`--help`, `--version`).
enum Parsed {
    Request(Args),
    Print(String),
}

fn parse(argv: &[String]) -> Result<Parsed, String> {
    let mut key = None;
    let mut dest = Dest::Pe(0);
    let mut timeout = Duration::from_secs(30);
    let mut rest = Vec::new();
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--key" => key = Some(Key::parse(&value("--key")?).map_err(|e| e.to_string())?),
            "--key-file" => {
                let f = value("--key-file")?;
                let text = std::fs::read_to_string(&f).map_err(|e| format!("{f}: {e}"))?;
                let keys = Keys::parse(&text, &f).map_err(|e| e.to_string())?;
                key = Some(
                    keys.get(0)
                        .cloned()
                        .ok_or_else(|| format!("{f} has no key for level 0"))?,
                );
            }
            "--pe" => {
                let v = value("--pe")?;
                dest = if v == "all" {
                    Dest::All
                } else {
                    let pes = v
                        .split(',')
                        .map(|p| p.trim().parse::<usize>())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|_| {
                            format!("--pe {v}: a PE, 'all', or PEs separated by commas")
                        })?;
                    match pes.as_slice() {
                        [one] => Dest::Pe(*one),
                        _ => Dest::List(pes),
                    }
                };
            }
            "--timeout" => {
                let v = value("--timeout")?;
                let s: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s >= 0.001 && *s <= 86_400.0)
                    .ok_or_else(|| format!("--timeout {v}: seconds, from 0.001 to a day"))?;
                timeout = Duration::from_secs_f64(s);
            }
            "-h" | "--help" => return Ok(Parsed::Print(USAGE.into())),
            "-V" | "--version" => {
                return Ok(Parsed::Print(format!("ccs {}", env!("CARGO_PKG_VERSION"))))
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s} ({USAGE})")),
            _ => rest.push(a.clone()),
        }
    }
    let (addr, handler, data) = match rest.as_slice() {
        [a, h] => (a.clone(), h.clone(), Vec::new()),
        [a, h, d] => (a.clone(), h.clone(), d.clone().into_bytes()),
        _ => return Err(USAGE.into()),
    };
    Ok(Parsed::Request(Args {
        key,
        dest,
        timeout,
        addr,
        handler,
        data,
    }))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let a = match parse(&argv) {
        Ok(Parsed::Request(a)) => a,
        Ok(Parsed::Print(text)) => {
            println!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            converse_machine::input::error_line(&format!("ccs: {e}"));
            return ExitCode::from(2);
        }
    };
    let reply = Client::connect(&a.addr, a.key, a.timeout)
        .and_then(|mut c| c.request(&a.handler, &a.dest, &a.data));
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
