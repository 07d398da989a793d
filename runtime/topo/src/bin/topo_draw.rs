//! `topo-draw TRACE [-o DIR]`: draw a topology trace (written by `Topo::save_trace`) as SVG
//! and DOT. Writes into DIR (default: `TRACE.d`): `index.html` (the topology and one picture
//! per call, to open in a browser), `topology.svg` and `topology.dot`, and for each call
//! `NNN-OP-SEQ-ROOT.svg` and `.dot`.
//!
//! The command line is clap's: `--help` and `--version` print to stdout, exit code 0; a usage
//! error (an unknown option, with the nearest one suggested, `-o` twice or without a
//! directory, no TRACE or a second one) is one line on stderr, exit code 2. Other errors (a
//! trace that cannot be read or drawn, a file that cannot be written) are one line on stderr,
//! exit code 1.
//!
//! What it reads and writes is bounded: a trace file of at most 128 MiB, of at most 4096
//! processes and 16384 channels; at most 100 calls are drawn in at most 64 MiB of files, and
//! the page and the closing line say how many calls were left out. Memory follows: the file,
//! its hops' vector times (at most four times the file: `0,` becomes a u64) and the output, well
//! under a GiB.

use clap::Parser;
use converse_topo::{draw, Trace};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Draw a topology trace (written by `Topo::save_trace`) as SVG and DOT, with an index.html
/// to open in a browser.
#[derive(Parser)]
#[command(name = "topo-draw", version)]
struct Cli {
    /// The topology trace
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    /// The directory to write into [default: TRACE.d]
    #[arg(short = 'o', value_name = "DIR")]
    out: Option<PathBuf>,
}

/// What was written, for the closing line.
struct Wrote {
    out: PathBuf,
    calls: usize,
    drawn: usize,
}

fn run(cli: Cli) -> Result<Wrote, String> {
    let trace_path = cli.trace;
    let trace = Trace::load(&trace_path).map_err(|e| e.to_string())?;
    // Every file is made before the first is written: a trace that cannot be drawn leaves no
    // half-written directory.
    let drawing = draw::drawing(&trace).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    let out = cli
        .out
        .unwrap_or_else(|| PathBuf::from(format!("{}.d", trace_path.display())));
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            return converse::input::refused_cli(
                "topo-draw",
                &e.render().to_string(),
                !e.use_stderr(),
            )
        }
    };
    let done = run(cli).and_then(|w| {
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
