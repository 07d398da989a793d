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
  --dot               write a Graphviz DOT graph instead of a topology file
  --stats             print the tree's statistics to stderr
  --help              this text

The topology goes to OUTPUT, or to stdout.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("topgen: {e}");
            ExitCode::from(2)
        }
    }
}

fn read_hosts(path: &str) -> Result<HostList, String> {
    let text = topology_file::read_text(std::path::Path::new(path), "host list")
        .map_err(|e| e.to_string())?;
    HostList::parse(&text).map_err(|e| format!("{path}: {e}"))
}

fn run(args: &[String]) -> Result<(), String> {
    let mut placement = Placement::default();
    let (mut dot, mut stats, mut check) = (false, false, None);
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--help" | "-h" => {
                println!("{}", HELP.replace("MAX_NODES", &MAX_NODES.to_string()));
                return Ok(());
            }
            "--fe-host" => placement.fe_host = value("--fe-host")?,
            "--hosts" => placement.hosts = Some(read_hosts(&value("--hosts")?)?),
            "--be-hosts" => placement.backend_hosts = Some(read_hosts(&value("--be-hosts")?)?),
            "--dot" => dot = true,
            "--stats" => stats = true,
            "--check" => check = Some(value("--check")?),
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("unknown option '{a}' (topgen --help lists them)"))
            }
            _ => words.push(a.clone()),
        }
    }
    let (topo, output): (Topology, Option<&String>) = match check {
        Some(path) => {
            if words.len() > 1 {
                return Err("--check takes one file and at most an OUTPUT".into());
            }
            let t = topology_file::load(std::path::Path::new(&path)).map_err(|e| e.to_string())?;
            t.require_backends().map_err(|e| format!("{path}: {e}"))?;
            if t.num_nodes() > MAX_NODES {
                return Err(format!(
                    "{path}: the tree has {} processes, more than the {MAX_NODES} a job may have",
                    t.num_nodes()
                ));
            }
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
            (
                generate(&spec, &placement).map_err(|e| e.to_string())?,
                words.get(1),
            )
        }
    };
    if stats {
        let s = topo.stats();
        eprintln!(
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
        // Not print!: it panics when stdout is closed early (`topgen b:1^100000 | head`),
        // which is the reader's choice, not an error.
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(format!("cannot write the topology: {e}"))
                }
                _ => Ok(()),
            }
        }
    }
}
