//! `topo-draw TRACE [-o DIR]`: draw a topology trace (written by `Topo::save_trace`) as SVG
//! and DOT. Writes into DIR (default: `TRACE.d`): `index.html` (the topology and one picture
//! per call, to open in a browser), `topology.svg` and `topology.dot`, and for each call
//! `NNN-OP-SEQ-ROOT.svg` and `.dot`. Errors are one line on stderr, exit code 1.
//!
//! What it reads and writes is bounded: a trace file of at most 128 MiB, of at most 4096
//! processes and 16384 channels; at most 100 calls are drawn in at most 64 MiB of files, and
//! the page and the closing line say how many calls were left out. Memory follows: the file,
//! its hops' vector times (at most four times the file: `0,` becomes a u64) and the output, well
//! under a GiB.

use converse_topo::{draw, Trace};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage: topo-draw TRACE [-o DIR]";

/// What was written, for the closing line.
struct Wrote {
    out: PathBuf,
    calls: usize,
    drawn: usize,
}

fn run(args: &[String]) -> Result<Wrote, String> {
    let mut trace_path = None;
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" if out.is_some() => return Err(format!("-o given twice ({USAGE})")),
            "-o" => out = Some(PathBuf::from(it.next().ok_or("-o needs a directory")?)),
            "-h" | "--help" => return Err(USAGE.into()),
            // An option this command does not know is refused, not taken for a file name.
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("unknown option '{}' ({USAGE})", a.escape_debug()))
            }
            _ if trace_path.is_none() => trace_path = Some(PathBuf::from(a)),
            _ => {
                return Err(format!(
                    "unexpected argument '{}' ({USAGE})",
                    a.escape_debug()
                ))
            }
        }
    }
    let trace_path = trace_path.ok_or(USAGE)?;
    let trace = Trace::load(&trace_path).map_err(|e| e.to_string())?;
    // Every file is made before the first is written: a trace that cannot be drawn leaves no
    // half-written directory.
    let drawing = draw::drawing(&trace).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    let out = out.unwrap_or_else(|| PathBuf::from(format!("{}.d", trace_path.display())));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (file, body) in &drawing.files {
        let p: PathBuf = Path::new(&out).join(file);
        std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(Wrote {
        out,
        calls: drawing.calls,
        drawn: drawing.drawn,
    })
}

/// Write `line` to stdout. A reader that went away (`topo-draw ... | head -0`) is its choice,
/// not an error; any other failure (a full disk) is.
fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let args = match converse::input::args() {
        Ok(mut a) => a.split_off(1.min(a.len())),
        Err(e) => {
            converse::input::error_line(&format!("topo-draw: {e}"));
            return ExitCode::from(2);
        }
    };
    if let Some(code) = converse::input::help_or_version(
        args.first().map(String::as_str),
        "topo-draw",
        env!("CARGO_PKG_VERSION"),
        USAGE,
    ) {
        return code;
    }
    let done = run(&args).and_then(|w| {
        let left_out = match w.calls.saturating_sub(w.drawn) {
            0 => String::new(),
            n => format!(
                " ({n} of {} calls not drawn: at most {} calls in {} MiB)",
                w.calls,
                draw::MAX_CALL_PICTURES,
                draw::MAX_OUTPUT_BYTES >> 20
            ),
        };
        say(&format!(
            "topo-draw: wrote {}/index.html{left_out}",
            w.out.display()
        ))
    });
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when stderr cannot be written.
            let _ = writeln!(std::io::stderr(), "topo-draw: {e}");
            ExitCode::from(1)
        }
    }
}
