//! `topo-draw TRACE [-o DIR]`: draw a topology trace (written by `Topo::save_trace`) as SVG
//! and DOT. Writes into DIR (default: `TRACE.d`): `index.html` (the topology and one picture
//! per call, to open in a browser), `topology.svg` and `topology.dot`, and for each call
//! `NNN-OP-SEQ-ROOT.svg` and `.dot`. Errors are one line on stderr, exit code 1.

use converse_topo::draw;
use converse_topo::Trace;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn run(args: &[String]) -> Result<PathBuf, String> {
    let mut trace_path = None;
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => out = Some(PathBuf::from(it.next().ok_or("-o needs a directory")?)),
            "-h" | "--help" => {
                return Err("usage: topo-draw TRACE [-o DIR]".into());
            }
            _ if trace_path.is_none() => trace_path = Some(PathBuf::from(a)),
            _ => {
                return Err(format!(
                    "unexpected argument '{a}' (usage: topo-draw TRACE [-o DIR])"
                ))
            }
        }
    }
    let trace_path = trace_path.ok_or("usage: topo-draw TRACE [-o DIR]")?;
    let name = trace_path.display().to_string();
    let text = std::fs::read_to_string(&trace_path).map_err(|e| format!("{name}: {e}"))?;
    let trace = Trace::parse(&text, &name).map_err(|e| e.to_string())?;
    let out = out.unwrap_or_else(|| PathBuf::from(format!("{name}.d")));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let write = |file: &str, body: String| -> Result<(), String> {
        let p: PathBuf = Path::new(&out).join(file);
        std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))
    };
    write("index.html", draw::page(&trace))?;
    write("topology.svg", draw::svg(&trace, None))?;
    write("topology.dot", draw::dot(&trace, None))?;
    for (k, (call, hops)) in draw::calls(&trace).iter().enumerate() {
        let stem = format!("{:03}-{}", k + 1, call.file_stem());
        write(
            &format!("{stem}.svg"),
            draw::svg(&trace, Some((call, hops))),
        )?;
        write(
            &format!("{stem}.dot"),
            draw::dot(&trace, Some((call, hops))),
        )?;
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(out) => {
            println!("topo-draw: wrote {}/index.html", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("topo-draw: {e}");
            ExitCode::from(1)
        }
    }
}
