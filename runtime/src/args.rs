//! Runtime arguments: everything on the command line that starts with `+`.
//!
//! They are taken out before the program sees its own arguments, as Converse does. A literal
//! `--` ends them: what follows is left to the program untouched.

use crate::error::RuntimeError;
use crate::placement::CoreList;
use converse_machine::Settings;

/// The largest `+p` accepted: far beyond any machine, small enough that a typo cannot make the
/// runtime try to start billions of threads.
pub const MAX_PES: usize = 1 << 20;

/// Parsed runtime arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeArgs {
    /// `+p N`: number of PEs.
    pub num_pes: usize,
    /// `+ppn K`: PEs per node.
    pub pes_per_node: usize,
    /// `+pemap LIST`: the cores PEs are pinned to.
    pub pemap: Option<CoreList>,
    /// `+commap LIST`: the cores communication threads are pinned to.
    pub commap: Option<CoreList>,
    /// `+machine NAME`: the layer to run on, if given.
    pub machine: Option<String>,
    /// `+quiet`: no start-up banner.
    pub quiet: bool,
    /// `+version`: print what this program is built with and exit.
    pub version: bool,
    /// `+settings`: list every setting this program knows (key, meaning, bounds, default)
    /// and exit.
    pub list_settings: bool,
    /// `+help`: the runtime arguments, then the settings, and exit.
    pub help: bool,
    /// `+trace` / `+trace-dir DIR`: where each PE writes its trace (`trace.<pe>.bin`); `None`:
    /// no tracing. `+trace` alone means [`DEFAULT_TRACE_DIR`].
    pub trace_dir: Option<std::path::PathBuf>,
    /// `+stats`: print per-PE and per-node counters at exit.
    pub stats: bool,
    /// `+idle-warn SECS`: PE 0 says so when the job has been idle (nothing run, nothing in
    /// flight, no timer) for SECS seconds: a program that forgot `pe.exit`.
    pub idle_warn: Option<std::time::Duration>,
    /// `+server` (and `+server-port N`, `+server-auth FILE|none`, either of which implies
    /// it): PE 0 opens a Converse Client-Server port.
    pub server: Option<crate::ccs::ServerArgs>,
    /// `+set KEY=VALUE` settings, in order.
    pub settings: Settings,
    /// The program's own arguments, `argv[0]` first.
    pub program: Vec<String>,
}

impl Default for RuntimeArgs {
    /// What an empty command line means: one PE, one per node, the default layer.
    fn default() -> RuntimeArgs {
        RuntimeArgs {
            num_pes: 1,
            pes_per_node: 1,
            pemap: None,
            commap: None,
            machine: None,
            quiet: false,
            version: false,
            list_settings: false,
            help: false,
            trace_dir: None,
            stats: false,
            idle_warn: None,
            server: None,
            settings: Settings::default(),
            program: Vec::new(),
        }
    }
}

/// One line listing every runtime argument, for error messages.
pub(crate) const USAGE: &str =
    "runtime arguments: +p N, +ppn K, +pemap CORES, +commap CORES, +machine NAME, \
     +setcpuaffinity, +set KEY=VALUE, +settings, +quiet, +version, +trace, +trace-dir DIR, +stats, +idle-warn SECS, +server, \
     +server-port N, +server-auth FILE|none, +help";

/// What `+help` prints before the settings.
pub(crate) fn help_text() -> String {
    "runtime arguments (before the program's own, or anywhere before a `--`):
  +p N                 PEs in the job
  +ppn K               PEs per process (SMP mode: K workers and a communication thread)
  +pemap CORES         pin PEs to these cores (0-3,8 ...); +commap CORES: the communication threads
  +setcpuaffinity      pin PEs to the cores this process may use, in order, when +pemap says nothing
  +machine NAME        the layer (local, tcp, udp, si, mpi, si+tcp, si+udp, si+mpi; built with ofi
                       or ucx: ofi+tcp, ucx+tcp, ..., si+ofi+tcp, si+ucx+tcp, ...)
  +set KEY=VALUE       a setting (below); +settings lists them alone
  +trace, +trace-dir DIR   trace every PE (converse-trace reads it); +stats: counters at exit
  +idle-warn SECS      say so when the job has done nothing for SECS (a forgotten pe.exit)
  +server, +server-port N, +server-auth FILE|none   open the job to CCS clients
  +quiet               no start-up banner; +version: what this program is built with
  +help                this text"
        .to_owned()
}

/// Every runtime argument's name, for "did you mean".
const FLAGS: &[&str] = &[
    "+p",
    "+ppn",
    "+pemap",
    "+commap",
    "+setcpuaffinity",
    "+machine",
    "+set",
    "+settings",
    "+quiet",
    "+version",
    "+trace",
    "+trace-dir",
    "+stats",
    "+idle-warn",
    "+server",
    "+server-port",
    "+server-auth",
    "+help",
];

/// Where `+trace` without `+trace-dir` writes: relative to each process's working directory.
pub const DEFAULT_TRACE_DIR: &str = "converse-trace";

/// Split `argv` (with `argv[0]`) into runtime arguments and the program's.
///
/// ```
/// let a = converse::parse_args(["prog", "+p4", "x", "+machine", "local", "y"]).unwrap();
/// assert_eq!((a.num_pes, a.machine.as_deref()), (4, Some("local")));
/// assert_eq!(a.program, ["prog", "x", "y"]);
/// ```
///
/// # Errors
/// [`RuntimeError::Args`] naming the argument that is wrong.
pub fn parse_args<I, S>(argv: I) -> Result<RuntimeArgs, RuntimeError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut it = argv.into_iter().map(Into::into);
    let mut out = RuntimeArgs {
        program: it.next().into_iter().collect(),
        ..RuntimeArgs::default()
    };
    // Each valued argument's first value, by name: given again with another value it is
    // refused (which one was meant?); again with the same value it is harmless (a launcher
    // that passes `+ppn K` on to a program that also has it).
    let mut given: Vec<(String, String)> = Vec::new();
    let mut once = |name: &str, v: &str| -> Result<(), RuntimeError> {
        match given.iter().find(|(n, _)| n == name) {
            Some((_, first)) if first != v => Err(RuntimeError::Args(format!(
                "{name} given twice, as '{first}' and as '{v}': say it once"
            ))),
            Some(_) => Ok(()),
            None => {
                given.push((name.to_owned(), v.to_owned()));
                Ok(())
            }
        }
    };
    // `+setcpuaffinity`: pin to the allowed cores unless `+pemap` says where.
    let mut set_affinity = false;
    while let Some(arg) = it.next() {
        if arg == "--" {
            out.program.push(arg);
            out.program.extend(it.by_ref());
            break;
        }
        let Some(flag) = arg.strip_prefix('+') else {
            out.program.push(arg);
            continue;
        };
        // Order matters: "ppn" before "p", since "+ppn4" also starts with "p".
        if let Some(v) = flag.strip_prefix("ppn") {
            let v = value(v, "+ppn", &mut it)?;
            once("+ppn", &v)?;
            out.pes_per_node = count("+ppn", v)?;
        } else if let Some(v) = flag.strip_prefix("pemap") {
            let v = value(v, "+pemap", &mut it)?;
            once("+pemap", &v)?;
            out.pemap = Some(cores("+pemap", v)?);
        } else if let Some(v) = flag.strip_prefix("commap") {
            let v = value(v, "+commap", &mut it)?;
            once("+commap", &v)?;
            out.commap = Some(cores("+commap", v)?);
        } else if let Some(v) = flag
            .strip_prefix('p')
            .filter(|v| !v.starts_with(char::is_alphabetic))
        {
            let v = value(v, "+p", &mut it)?;
            once("+p", &v)?;
            out.num_pes = count("+p", v)?;
        } else if let Some(v) = flag.strip_prefix("machine") {
            let v = value(v.strip_prefix('=').unwrap_or(v), "+machine", &mut it)?;
            once("+machine", &v)?;
            out.machine = Some(v);
        } else if flag == "settings" {
            out.list_settings = true;
        } else if flag == "help" {
            out.help = true;
        } else if flag == "setcpuaffinity" {
            // Charm++'s: pin. Before `set`, which it starts with: it is not `+set cpuaffinity`.
            set_affinity = true;
        } else if let Some(v) = flag.strip_prefix("set") {
            let kv = value(v, "+set", &mut it)?;
            let Some((k, val)) = kv.split_once('=').filter(|(k, _)| !k.is_empty()) else {
                return Err(RuntimeError::Args(format!(
                    "+set wants KEY=VALUE, got '{kv}'"
                )));
            };
            once(&format!("+set {k}"), val)?;
            out.settings.set(k, val);
        } else if let Some(v) = flag
            .strip_prefix("trace-dir")
            .filter(|v| v.is_empty() || v.starts_with('='))
        {
            let v = value(v.strip_prefix('=').unwrap_or(v), "+trace-dir", &mut it)?;
            out.trace_dir = Some(v.into());
        } else if flag == "trace" {
            out.trace_dir
                .get_or_insert_with(|| DEFAULT_TRACE_DIR.into());
        } else if flag == "stats" {
            out.stats = true;
        } else if let Some(v) = flag
            .strip_prefix("idle-warn")
            .filter(|v| v.is_empty() || v.starts_with('='))
        {
            let v = value(v.strip_prefix('=').unwrap_or(v), "+idle-warn", &mut it)?;
            once("+idle-warn", &v)?;
            let secs = v
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && (0.01..=1e6).contains(s))
                .ok_or_else(|| {
                    RuntimeError::Args(format!(
                        "+idle-warn wants seconds from 0.01 to 1000000, got '{v}'"
                    ))
                })?;
            out.idle_warn = Some(std::time::Duration::from_secs_f64(secs));
        } else if flag == "server" {
            out.server.get_or_insert_with(Default::default);
        } else if let Some(v) = flag
            .strip_prefix("server-port")
            .filter(|v| v.is_empty() || v.starts_with('='))
        {
            let v = value(v.strip_prefix('=').unwrap_or(v), "+server-port", &mut it)?;
            once("+server-port", &v)?;
            let port = v.parse::<u16>().map_err(|_| {
                RuntimeError::Args(format!(
                    "+server-port wants a port from 0 to 65535, got '{v}'"
                ))
            })?;
            out.server.get_or_insert_with(Default::default).port = port;
        } else if let Some(v) = flag
            .strip_prefix("server-auth")
            .filter(|v| v.is_empty() || v.starts_with('='))
        {
            let v = value(v.strip_prefix('=').unwrap_or(v), "+server-auth", &mut it)?;
            once("+server-auth", &v)?;
            out.server.get_or_insert_with(Default::default).auth = Some(v);
        } else if flag == "quiet" {
            out.quiet = true;
        } else if flag == "version" {
            out.version = true;
        } else {
            // The name alone (a glued value, `+pn4`, compared without it would not match).
            let name = arg.split('=').next().unwrap_or(&arg);
            return Err(RuntimeError::Args(format!(
                "unknown runtime argument '{arg}'{} ({USAGE})",
                converse_machine::suggest::hint(name, FLAGS.iter().copied())
            )));
        }
    }
    if set_affinity && out.pemap.is_none() {
        out.pemap = Some(
            CoreList::allowed().map_err(|e| RuntimeError::Args(format!("+setcpuaffinity: {e}")))?,
        );
    }
    Ok(out)
}

/// The value of a flag: glued to it (`+p4`) or the next argument (`+p 4`).
fn value(
    glued: &str,
    flag: &str,
    rest: &mut impl Iterator<Item = String>,
) -> Result<String, RuntimeError> {
    if !glued.is_empty() {
        return Ok(glued.to_owned());
    }
    rest.next()
        .filter(|v| !v.starts_with('+'))
        .ok_or_else(|| RuntimeError::Args(format!("{flag} needs a value")))
}

fn cores(flag: &str, v: String) -> Result<CoreList, RuntimeError> {
    CoreList::parse(&v).map_err(|e| RuntimeError::Args(format!("{flag} {v}: {e}")))
}

fn count(flag: &str, v: String) -> Result<usize, RuntimeError> {
    match v.parse::<usize>() {
        Ok(n) if (1..=MAX_PES).contains(&n) => Ok(n),
        _ => Err(RuntimeError::Args(format!(
            "{flag} wants a number from 1 to {MAX_PES}, got '{v}'"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glued_and_separate_values() {
        let a = parse_args(["p", "+p", "3", "+ppn1", "+machine=local", "+quiet"]).unwrap();
        assert_eq!((a.num_pes, a.pes_per_node, a.quiet), (3, 1, true));
        assert_eq!(a.machine.as_deref(), Some("local"));
        assert_eq!(a.program, ["p"]);
        // Charm++'s `+setcpuaffinity` pins to the allowed cores, and is not `+set cpuaffinity`.
        let a = parse_args(["p", "+setcpuaffinity"]).expect("+setcpuaffinity");
        assert_eq!(
            a.pemap.map(|m| m.cores().to_vec()),
            Some(CoreList::allowed().expect("mask").cores().to_vec())
        );
        assert!(a.settings.iter().next().is_none());
        let a = parse_args(["p", "+setcpuaffinity", "+pemap", "1"]).expect("both");
        assert_eq!(a.pemap.map(|m| m.cores().to_vec()), Some(vec![1]));
        let a = parse_args(["p", "+pemap", "0-3", "+commap4"]).unwrap();
        assert_eq!(a.pemap.map(|m| m.cores().to_vec()), Some(vec![0, 1, 2, 3]));
        assert_eq!(a.commap.map(|m| m.cores().to_vec()), Some(vec![4]));
    }

    #[test]
    fn an_argument_given_twice_with_two_values_is_refused_with_the_same_value_accepted() {
        for twice in [
            &["p", "+p4", "+p8"][..],
            &["p", "+ppn", "2", "+ppn4"],
            &["p", "+machine", "tcp", "+machine=udp"],
            &["p", "+set", "udp.window=8", "+setudp.window=16"],
        ] {
            let e = parse_args(twice.iter().copied())
                .err()
                .map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains("given twice")),
                "{twice:?}: {e:?}"
            );
        }
        let a = parse_args(["p", "+ppn", "2", "+ppn2", "+set", "a.b=1", "+set", "a.b=1"])
            .expect("the same value twice is harmless");
        assert_eq!(a.pes_per_node, 2);
        let a = parse_args(["p", "+set", "a.b=1", "+set", "a.c=2"]).expect("two keys");
        assert_eq!(a.settings.raw("a.c"), Some("2"));
    }

    #[test]
    fn trace_and_stats() {
        let a = parse_args(["p", "+trace", "+stats"]).unwrap();
        assert_eq!(a.trace_dir.as_deref(), Some(DEFAULT_TRACE_DIR.as_ref()));
        assert!(a.stats);
        let a = parse_args(["p", "+trace-dir", "/tmp/t", "+trace"]).unwrap();
        assert_eq!(a.trace_dir.as_deref(), Some("/tmp/t".as_ref()));
        let a = parse_args(["p", "+trace-dir=d"]).unwrap();
        assert_eq!(a.trace_dir.as_deref(), Some("d".as_ref()));
        let a = parse_args(["p"]).unwrap();
        assert!(a.trace_dir.is_none() && !a.stats);
    }

    #[test]
    fn double_dash_ends_runtime_arguments() {
        let a = parse_args(["p", "a", "--", "+p4", "b"]).unwrap();
        assert_eq!(a.num_pes, 1);
        assert_eq!(a.program, ["p", "a", "--", "+p4", "b"]);
    }

    #[test]
    fn settings_are_collected() {
        let a = parse_args(["p", "+set", "udp.mtu=1400", "+setx=y"]).unwrap();
        assert_eq!(a.settings.raw("udp.mtu"), Some("1400"));
        assert_eq!(a.settings.raw("x"), Some("y"));
    }

    #[test]
    fn bad_arguments_are_errors() {
        for bad in [
            vec!["p", "+p0"],
            vec!["p", "+p", "x"],
            vec!["p", "+p"],
            vec!["p", "+p", "+quiet"],
            vec!["p", "+p-1"],
            vec!["p", "+p99999999999999999999"],
            vec!["p", "+bogus"],
            vec!["p", "+machine"],
            vec!["p", "+set", "novalue"],
            vec!["p", "+set", "=v"],
            vec!["p", "+pemap", "3-1"],
            vec!["p", "+commap"],
            vec!["p", "+trace-dir"],
            vec!["p", "+trace-dir", "+stats"],
            vec!["p", "+tracex"],
            vec!["p", "+trace-dirx"],
            vec!["p", "+stats=1"],
        ] {
            assert!(parse_args(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_ccs_server_arguments() {
        let a = parse_args(["p", "+server"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.server, Some(crate::ccs::ServerArgs::default()));
        let a = parse_args(["p", "+server-port", "1234", "+server-auth=none"])
            .unwrap_or_else(|e| panic!("{e}"));
        let s = a.server.unwrap_or_default();
        assert_eq!((s.port, s.auth.as_deref()), (1234, Some("none")));
        for bad in [
            vec!["p", "+server-port", "70000"],
            vec!["p", "+server-port"],
            vec!["p", "+server-auth"],
            vec!["p", "+server-port", "1", "+server-port", "2"],
            vec!["p", "+serverx"],
        ] {
            assert!(parse_args(bad.clone()).is_err(), "{bad:?}");
        }
    }
}
