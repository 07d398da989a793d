//! `topgen`: generate, check and draw tree-overlay topologies (MRNet's `mrnet_topgen`).
//! `topgen --help` says how.

use converse_tbon::topgen::{generate, HostList, Placement, TreeSpec, MAX_NODES};
use converse_tbon::{topology_file, Topology};
use std::io::Write;
use std::process::ExitCode;

const HELP: &str = "\
usage: topgen [options] SPEC [OUTPUT]        generate a topology
       topgen --check FILE [--dot] [OUTPUT]   validate a topology file (and convert it)

SPEC is the tree's shape:
  b:4x4  or b:4^2     balanced: fan-out 4 at each of 2 levels (16 back-ends)
  k:2@16              k-nomial tree of 16 processes (k = 2: binomial)
  g:2x4x3 or 2x4x3    generic: the root has 2 children, each of them 4, each of those 3
  g:32                flat: the front-end and 32 back-ends
A tree has at least one back-end and at most MAX_NODES processes (--check holds files to this).

options:
  --fe-host HOST      the front-end's host (default: localhost)
  --hosts FILE        hosts for internal processes (and back-ends without --be-hosts),
                      one `host[:slots]` per line (default: everything on localhost)
  --be-hosts FILE     hosts for back-ends
                      (these three place a generated tree; --check refuses them)
  --dot               write a Graphviz DOT graph instead of a topology file
  --stats             print the tree's statistics to stderr
  --help              this text

The topology goes to OUTPUT, or to stdout.";

fn main() -> ExitCode {
    let args = match converse::input::args() {
        Ok(mut a) => a.split_off(1.min(a.len())),
        Err(e) => {
            converse::input::error_line(&format!("topgen: {e}"));
            return ExitCode::from(2);
        }
    };
    if let Some(code) = converse::input::help_or_version(
        args.first()
            .filter(|a| matches!(a.as_str(), "--version" | "-V"))
            .map(String::as_str),
        "topgen",
        env!("CARGO_PKG_VERSION"),
        "",
    ) {
        return code;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when stderr cannot be written.
            let _ = writeln!(std::io::stderr(), "topgen: {e}");
            ExitCode::from(2)
        }
    }
}

/// Write `text` to stdout. Not print!: it panics when stdout is closed early (`topgen
/// b:1^100000 | head`), which is the reader's choice, not an error, or cannot be written
/// (`>/dev/full`), which is.
fn to_stdout(text: &str, what: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write {what}: {e}"))
        }
        _ => Ok(()),
    }
}

fn read_hosts(path: &str) -> Result<HostList, String> {
    let text = topology_file::read_text(std::path::Path::new(path), "host list")
        .map_err(|e| e.to_string())?;
    HostList::parse(&text).map_err(|e| format!("{path}: {e}"))
}

/// The options that place a generated tree's processes, as given (each at most once).
#[derive(Default)]
struct PlacementArgs {
    fe_host: Option<String>,
    hosts: Option<String>,
    be_hosts: Option<String>,
}

impl PlacementArgs {
    /// The first one given, by name: `--check` places nothing, so it refuses them rather than
    /// ignore them.
    fn first_given(&self) -> Option<&'static str> {
        [
            ("--fe-host", self.fe_host.is_some()),
            ("--hosts", self.hosts.is_some()),
            ("--be-hosts", self.be_hosts.is_some()),
        ]
        .into_iter()
        .find_map(|(name, given)| given.then_some(name))
    }

    fn placement(self) -> Result<Placement, String> {
        let mut p = Placement::default();
        if let Some(h) = self.fe_host {
            p.fe_host = h;
        }
        p.hosts = self.hosts.as_deref().map(read_hosts).transpose()?;
        p.backend_hosts = self.be_hosts.as_deref().map(read_hosts).transpose()?;
        Ok(p)
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let mut placing = PlacementArgs::default();
    let (mut dot, mut stats, mut check) = (false, false, None);
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str, slot: &mut Option<String>| {
            // A second value would silently replace the first.
            if slot.is_some() {
                return Err(format!("{name} given twice"));
            }
            *slot = Some(
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))?,
            );
            Ok::<(), String>(())
        };
        match a.as_str() {
            "--help" | "-h" => {
                return to_stdout(
                    &format!("{}\n", HELP.replace("MAX_NODES", &MAX_NODES.to_string())),
                    "the help",
                );
            }
            "--fe-host" => value("--fe-host", &mut placing.fe_host)?,
            "--hosts" => value("--hosts", &mut placing.hosts)?,
            "--be-hosts" => value("--be-hosts", &mut placing.be_hosts)?,
            "--dot" => dot = true,
            "--stats" => stats = true,
            "--check" => value("--check", &mut check)?,
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!(
                    "unknown option '{}' (topgen --help lists them)",
                    a.escape_debug()
                ))
            }
            _ => words.push(a.clone()),
        }
    }
    let (topo, output): (Topology, Option<&String>) = match check {
        Some(path) => {
            if words.len() > 1 {
                return Err("--check takes one file and at most an OUTPUT".into());
            }
            if let Some(option) = placing.first_given() {
                return Err(format!(
                    "{option} places the processes of a generated tree, and --check generates \
                     none: leave {option} out"
                ));
            }
            // The limit applies while parsing: a file of millions of processes is refused at
            // the first one past it, not held whole first.
            let t = topology_file::load_at_most(std::path::Path::new(&path), MAX_NODES)
                .map_err(|e| e.to_string())?;
            t.require_backends().map_err(|e| format!("{path}: {e}"))?;
            (t, words.first())
        }
        None => {
            let Some(spec) = words.first() else {
                return Err("no tree spec (e.g. topgen b:4x4; topgen --help says more)".into());
            };
            if words.len() > 2 {
                return Err(format!("unexpected argument '{}'", words[2]));
            }
            let spec = TreeSpec::parse(spec).map_err(|e| e.to_string())?;
            let placement = placing.placement()?;
            (
                generate(&spec, &placement).map_err(|e| e.to_string())?,
                words.get(1),
            )
        }
    };
    if stats {
        let s = topo.stats();
        // Not eprintln!, which panics when stderr cannot be written: the statistics are a
        // by-product, the topology is what was asked for.
        let _ = writeln!(
            std::io::stderr(),
            "{} processes ({} back-ends), depth {}, fan-out min {} max {} avg {:.2} stddev {:.2}",
            s.num_nodes,
            topo.num_backends(),
            s.depth,
            s.min_fanout,
            s.max_fanout,
            s.avg_fanout,
            s.stddev_fanout
        );
    }
    let text = if dot {
        topo.to_dot()
    } else {
        topo.to_topology_file()
    };
    match output {
        Some(path) => std::fs::write(path, text).map_err(|e| format!("cannot write {path}: {e}")),
        None => to_stdout(&text, "the topology"),
    }
}
