//! `topgen`: generate, check and draw tree-overlay topologies (MRNet's `mrnet_topgen`).
//! `topgen --help` says how.
//!
//! The command line is clap's: `--help` and `--version` print to stdout, exit code 0; an
//! unknown option (with the nearest one suggested), an option given twice or without its
//! value, or an extra argument is one line on stderr, exit code 2. So is every other error
//! (a bad SPEC, a file that cannot be read or is not a tree, an output that cannot be
//! written), as it always was for this command.

use clap::{CommandFactory, FromArgMatches, Parser};
use converse_tbon::topgen::{generate, HostList, Placement, TreeSpec, MAX_NODES};
use converse_tbon::{topology_file, Topology};
use std::io::Write;
use std::process::ExitCode;

/// Generate, check and draw tree-overlay topologies (MRNet's mrnet_topgen).
#[derive(Parser)]
#[command(
    name = "topgen",
    version,
    override_usage = "topgen [OPTIONS] SPEC [OUTPUT]\n       \
                      topgen --check FILE [--dot] [--stats] [OUTPUT]"
)]
struct Cli {
    /// The front-end's host [default: localhost]
    #[arg(long, value_name = "HOST")]
    fe_host: Option<String>,
    /// Hosts for internal processes (and back-ends without --be-hosts), one `host[:slots]` per
    /// line [default: everything on localhost]
    #[arg(long, value_name = "FILE")]
    hosts: Option<String>,
    /// Hosts for back-ends (--fe-host, --hosts and --be-hosts place a generated tree; --check
    /// refuses them)
    #[arg(long, value_name = "FILE")]
    be_hosts: Option<String>,
    /// Validate the topology file FILE (and convert it) instead of generating a tree
    #[arg(long, value_name = "FILE")]
    check: Option<String>,
    /// Write a Graphviz DOT graph instead of a topology file
    #[arg(long)]
    dot: bool,
    /// Print the tree's statistics to stderr
    #[arg(long)]
    stats: bool,
    /// The tree's shape (see below); with --check, none
    #[arg(value_name = "SPEC")]
    spec: Option<String>,
    /// Where the topology goes [default: stdout]
    #[arg(value_name = "OUTPUT")]
    output: Option<String>,
}

/// What `--help` says after the options.
const SPEC_HELP: &str = "\
SPEC is the tree's shape:
  b:4x4  or b:4^2     balanced: fan-out 4 at each of 2 levels (16 back-ends)
  k:2@16              k-nomial tree of 16 processes (k = 2: binomial)
  g:2x4x3 or 2x4x3    generic: the root has 2 children, each of them 4, each of those 3
  g:32                flat: the front-end and 32 back-ends
  g:2:3,1:0,2x1,0     fan-outs per process (MRNet's generic spec): levels split by ':',
                      a level lists each process's fan-out (0: a back-end), NxC is N
                      processes with C children each
A tree has at least one back-end and at most MAX_NODES processes (--check holds files to this).

The topology goes to OUTPUT, or to stdout.";

fn main() -> ExitCode {
    let command = Cli::command().after_help(SPEC_HELP.replace("MAX_NODES", &MAX_NODES.to_string()));
    let cli = match command
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        // --help, --version: what was asked for, on stdout.
        Err(e) if !e.use_stderr() => {
            let what = match e.kind() {
                clap::error::ErrorKind::DisplayVersion => "the version",
                _ => "the help",
            };
            return match to_stdout(&e.render().to_string(), what) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    converse::input::error_line(&format!("topgen: {e}"));
                    ExitCode::from(2)
                }
            };
        }
        Err(e) => {
            converse::input::error_line(&converse::input::usage_line(
                "topgen",
                &e.render().to_string(),
            ));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
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

fn run(cli: Cli) -> Result<(), String> {
    let placing = PlacementArgs {
        fe_host: cli.fe_host,
        hosts: cli.hosts,
        be_hosts: cli.be_hosts,
    };
    let (topo, output): (Topology, Option<String>) = match cli.check {
        Some(path) => {
            // With --check, the one word is OUTPUT (clap took it for SPEC).
            if cli.output.is_some() {
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
            (t, cli.spec)
        }
        None => {
            let Some(spec) = cli.spec else {
                return Err("no tree spec (e.g. topgen b:4x4; topgen --help says more)".into());
            };
            let spec = TreeSpec::parse(&spec).map_err(|e| e.to_string())?;
            let placement = placing.placement()?;
            (
                generate(&spec, &placement).map_err(|e| e.to_string())?,
                cli.output,
            )
        }
    };
    let (stats, dot) = (cli.stats, cli.dot);
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
        Some(path) => std::fs::write(&path, text).map_err(|e| format!("cannot write {path}: {e}")),
        None => to_stdout(&text, "the topology"),
    }
}
