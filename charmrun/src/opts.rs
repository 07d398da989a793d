//! charmrun's command line, Charm++ style.

use std::time::Duration;

/// What `charmrun --help` prints.
pub const HELP: &str = "\
usage: charmrun +p N [options] PROGRAM [ARGS...]

Starts N node processes of PROGRAM (locally, or on the hosts of a nodelist through a remote
shell), connects them into one job, forwards their output, and exits with the job's exit code.

  +p N                 number of PEs (also accepted after PROGRAM, as Charm++'s charmrun does)
  ++n N                number of node processes (Charm++'s): N × ++ppn PEs; +p, if given too,
                       must agree
  ++ppn K              PEs per node process (default 1): with K above 1 each process runs
                       K worker threads and one communication thread (SMP mode); +p must
                       be a multiple of K (`+ppn K` after PROGRAM, Charm++'s form, is the same)
  ++local              start every node on this host, ignoring any nodelist
  ++nodelist FILE      hosts to start nodes on: Charm++ nodelist or one host per line
  ++nodegroup NAME     the nodelist's group to use (default: main)
  ++runscript SCRIPT   start each node as `SCRIPT PROGRAM ARGS` (a script that sets up the
                       environment, then runs \"$@\")
  ++usehostname        nodes reach charmrun by this host's name, not by its address
  ++remote-shell CMD   how to reach a host (default: ssh, run as `CMD HOST COMMAND`; CMD is
                       split into words as a shell does, quotes included);
                       with ++mpiexec, the MPI launcher to run (default: mpiexec)
  ++mpiexec            start the job through the MPI launcher: for the MPI layer
                       `mpiexec -n N PROGRAM ARGS` (not with ++nodelist or ++prefix, which
                       the MPI launcher does its own way); for a net layer named with
                       +machine tcp|udp|si, `mpiexec -n N charmrun ++agent`: one agent per
                       node, each starting its node, connecting back to charmrun
                       (++remote-shell srun: through Slurm)
  ++agents             one remote shell per host, not per node: it starts charmrun as that
                       host's agent, which starts the host's nodes and relays for them
  ++scalable-start     Charm++'s name for a start-up that scales: here, ++agents
  ++batch N            at most N remote shells starting at once
  ++fanout K           with ++agents, charmrun starts at most K agents itself; each of them
                       starts agents on its share of the other hosts, and so on (default 32)
  ++timeout SECS       how long nodes may take to connect back (default 60; the MPI
                       launcher has its own with ++mpiexec)
  ++timelimit SECS     end the job, killing every process, after SECS seconds
  ++hang-timeout SECS  end the job when a node stops answering charmrun for SECS seconds
                       (a stopped or frozen process; a node busy in a long handler still
                       answers); default 60, at least 2, 0 turns it off; not with
                       ++mpiexec for the MPI layer (its ranks send no heartbeats)
  ++server             open the running job to CCS clients (Converse Client-Server): the
                       process of PE 0 listens and prints `ccs: Server IP = IP, Server port
                       = PORT $`, and the key clients need (`ccs --key`); the program gets
                       +server
  ++server-port N      the CCS port (default: any free one); implies ++server
  ++server-auth FILE   CCS keys, Charm++'s format (lines `LEVEL KEY`, decimal digits), or `none` to take
                       requests without a key; implies ++server
  ++prefix             prefix every output line with the PE that printed it
  ++debug              start each node stopped under gdbserver and print where to attach
                       (`gdb PROGRAM -ex 'target remote HOST:PORT'`, then `continue`); turns
                       off the start-up and hang timeouts (whatever ++timeout and
                       ++hang-timeout say); implies ++prefix; with ++batch N, the next nodes
                       start once N have been attached to
  ++debug-no-pause     run each node under gdb, which prints a backtrace where one stops on
                       a signal (a crash), into the job's output; implies ++prefix
  ++verbose            say what charmrun does
  ++quiet              print nothing but errors and the program's own output: charmrun says
                       nothing, and the program gets +quiet (no start-up banner)
  --help               this text
Inside a Slurm allocation (SLURM_JOB_NODELIST set), without ++nodelist or ++local, nodes go
round-robin on the allocation's hosts, one agent per host started with srun.
Everything after PROGRAM goes to it, except +p; everything after `--` goes to it unread.
The local layer (+machine local) runs every PE in one process: run such a program directly
with +p N, not through charmrun.";

/// charmrun's own options, for "did you mean".
const OPTIONS: &[&str] = &[
    "++n",
    "++ppn",
    "++local",
    "++nodelist",
    "++nodegroup",
    "++runscript",
    "++usehostname",
    "++scalable-start",
    "++debug",
    "++debug-no-pause",
    "++remote-shell",
    "++mpiexec",
    "++agents",
    "++batch",
    "++fanout",
    "++timeout",
    "++timelimit",
    "++hang-timeout",
    "++server",
    "++server-port",
    "++server-auth",
    "++prefix",
    "++verbose",
    "++quiet",
    "++help",
];

/// A command line charmrun cannot run, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// An option without its value.
    #[error("{0} needs a value")]
    NoValue(&'static str),
    /// A count out of range or not a number.
    #[error("{name} wants a number from 1 to {max}, got '{got}'")]
    BadCount {
        /// The option.
        name: &'static str,
        /// The largest allowed.
        max: usize,
        /// What was given.
        got: String,
    },
    /// A duration that is not a positive number of seconds.
    #[error("{name} wants a positive number of seconds, got '{got}'")]
    BadSeconds {
        /// The option.
        name: &'static str,
        /// What was given.
        got: String,
    },
    /// An option charmrun does not know, and what it may have meant (" (did you mean ...?)",
    /// or nothing).
    #[error("unknown option '{0}'{1} (charmrun --help lists them)")]
    Unknown(String, String),
    /// No program was named.
    #[error("no program to run (usage: charmrun +p N PROGRAM [ARGS...])")]
    NoProgram,
    /// A remote shell command that is empty or does not split into words.
    #[error("++remote-shell needs a command that splits into words (check its quotes), got '{0}'")]
    BadShell(String),
    /// Options that cannot go together, or something charmrun does not do (yet); says why.
    #[error("{0}")]
    Unsupported(String),
}

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// `+p`.
    pub pes: usize,
    /// `++ppn`.
    pub ppn: usize,
    /// `++local`.
    pub local: bool,
    /// `++nodelist`.
    pub nodelist: Option<String>,
    /// `++remote-shell`, if given (the default depends on `++mpiexec`).
    pub remote_shell: Option<String>,
    /// `++mpiexec`.
    pub mpiexec: bool,
    /// `++timeout`.
    pub timeout: Duration,
    /// `++timelimit`.
    pub timelimit: Option<Duration>,
    /// `++hang-timeout` (`None`: off).
    pub hang_timeout: Option<Duration>,
    /// `++prefix`.
    pub prefix: bool,
    /// `++verbose`.
    pub verbose: bool,
    /// `++quiet`.
    pub quiet: bool,
    /// `++agents`: one remote shell per host, starting an agent.
    pub agents: bool,
    /// `++batch`: at most this many remote shells starting at once.
    pub batch: Option<usize>,
    /// `++fanout`: at most this many agents started by one (charmrun or an agent).
    pub fanout: usize,
    /// `++server`, `++server-port`, `++server-auth`: the runtime arguments they become.
    pub server: Vec<String>,
    /// `++nodegroup`: the nodelist's group (`main` when `None`).
    pub nodegroup: Option<String>,
    /// `++runscript`: each node runs `SCRIPT PROGRAM ARGS`.
    pub runscript: Option<String>,
    /// `++usehostname`: nodes reach charmrun by this host's name.
    pub usehostname: bool,
    /// `++debug`, `++debug-no-pause`.
    pub debug: Option<Debug>,
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// How `++debug` and `++debug-no-pause` start each node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Debug {
    /// `++debug`: stopped under `gdbserver`, waiting for a debugger to attach.
    Pause,
    /// `++debug-no-pause`: running under `gdb`, which prints a backtrace if it stops.
    NoPause,
}

/// What the command line asks for.
// Made once per process: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Run a job.
    Run(Opts),
    /// Print the help.
    Help,
}

/// `++hang-timeout`'s default.
pub const DEFAULT_HANG_TIMEOUT: Duration = Duration::from_secs(60);

/// Smallest `++hang-timeout` but 0: a few heartbeats, so a node late by one is not hung.
pub const MIN_HANG_TIMEOUT: Duration = Duration::from_secs(2);

/// `++fanout`'s default: a tree of agents only past this many hosts.
pub const DEFAULT_FANOUT: usize = 32;

/// Largest `+p`.
pub const MAX_PES: usize = 1 << 16;

impl Opts {
    /// The defaults, for a job of `pes` PEs (one per node) whose nodes a program plans itself
    /// (see [`launch::start_embedded`](crate::launch::start_embedded)).
    pub fn with_pes(pes: usize) -> Opts {
        Opts {
            pes,
            ppn: 1,
            local: false,
            nodelist: None,
            remote_shell: None,
            mpiexec: false,
            timeout: Duration::from_secs(60),
            timelimit: None,
            hang_timeout: Some(DEFAULT_HANG_TIMEOUT),
            prefix: false,
            verbose: false,
            quiet: false,
            agents: false,
            batch: None,
            fanout: DEFAULT_FANOUT,
            server: Vec::new(),
            nodegroup: None,
            runscript: None,
            usehostname: false,
            debug: None,
            program: String::new(),
            args: Vec::new(),
        }
    }

    /// What each node process runs with: the program's arguments, with the runtime
    /// arguments charmrun adds for its options (`+server`..., `+ppn`, `+quiet`) before any `--`, where the
    /// runtime still reads them.
    pub fn node_args(&self) -> Vec<String> {
        let mut extra = self.server.clone();
        if self.ppn > 1 {
            extra.extend(["+ppn".to_string(), self.ppn.to_string()]);
        }
        if self.quiet {
            extra.push("+quiet".to_string());
        }
        let mut args = self.args.clone();
        let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
        args.splice(at..at, extra);
        args
    }

    /// What each node process runs: `++runscript`'s script, then `++debug`'s debugger, then
    /// the program, then [`node_args`](Self::node_args).
    pub fn node_command(&self) -> (String, Vec<String>) {
        let mut words: Vec<String> = Vec::new();
        words.extend(self.runscript.iter().cloned());
        match self.debug {
            Some(Debug::Pause) => {
                // Port 0: gdbserver takes a free one and says which ("Listening on port N").
                words.extend(["gdbserver", "--once", ":0"].map(String::from));
            }
            Some(Debug::NoPause) => {
                words.extend(
                    [
                        "gdb",
                        "-q",
                        "-batch",
                        "-return-child-result",
                        "-ex",
                        "set pagination off",
                        "-ex",
                        "set print thread-events off",
                        "-ex",
                        "set print inferior-events off",
                        "-ex",
                        "run",
                        // If the program stopped on a signal (it did not exit): its
                        // backtrace, then gdb ends it and exits as a shell reports a death by
                        // that signal (128 + N), since batch mode would exit -1. A `bt` of an
                        // exited program would fail, and gdb's exit code with it.
                        "-ex",
                        "python s = gdb.selected_inferior().pid and \
                         int(gdb.parse_and_eval('$_siginfo.si_signo'))",
                        "-ex",
                        "python s and [gdb.execute(c) for c in ('bt', 'kill', 'quit %d' % (128 + s))]",
                        "--args",
                    ]
                    .map(String::from),
                );
            }
            None => {}
        }
        words.push(self.program.clone());
        words.extend(self.node_args());
        let program = words.remove(0);
        (program, words)
    }

    /// The remote shell for starting nodes on other hosts.
    pub fn remote_shell(&self) -> &str {
        self.remote_shell.as_deref().unwrap_or("ssh")
    }
}

/// Parse `args` (without `argv[0]`).
///
/// # Errors
/// [`UsageError`], one line saying which argument is wrong.
pub fn parse(args: &[String]) -> Result<Parsed, UsageError> {
    let mut o = Opts::with_pes(0);
    let mut it = args.iter().cloned().peekable();
    let mut pes_given = false;
    // `++n N`: N processes (Charm++'s), so N × ++ppn PEs.
    let mut processes: Option<usize> = None;
    let mut ppn_given: Option<usize> = None;
    // After the program's `--`, everything is the program's, even what looks like `+p`.
    let mut program_only = false;
    while let Some(a) = it.next() {
        if program_only {
            o.args.push(a);
            continue;
        }
        let mut value = |name: &'static str| -> Result<String, UsageError> {
            it.next().ok_or(UsageError::NoValue(name))
        };
        // `+p` is charmrun's anywhere, before or after PROGRAM (as Charm++'s charmrun has it).
        if let Some(v) = pe_flag(&a) {
            let v = if v.is_empty() {
                value("+p")?
            } else {
                v.to_owned()
            };
            o.pes = count("+p", &v, MAX_PES)?;
            pes_given = true;
            continue;
        }
        // `+ppn K` after the program, Charm++'s SMP form, is charmrun's too: the node table
        // it builds must have K PEs per node (the program would otherwise find 1 and refuse).
        if !o.program.is_empty() {
            if let Some(v) = ppn_flag(&a) {
                let v = if v.is_empty() {
                    value("+ppn")?
                } else {
                    v.to_owned()
                };
                let k = count("+ppn", &v, 1 << 10)?;
                if ppn_given.is_some_and(|p| p != k) {
                    return Err(UsageError::Unsupported(format!(
                        "++ppn {} and +ppn {k} disagree",
                        o.ppn
                    )));
                }
                o.ppn = k;
                ppn_given = Some(k);
                continue;
            }
        }
        // The CCS options are charmrun's after the program too (where Charm++ users often put
        // them; a node's runtime would refuse them).
        let server_opt = matches!(a.as_str(), "++server" | "++server-port" | "++server-auth");
        if !o.program.is_empty() && !server_opt {
            // The runtime reads its arguments up to `--`; so the program gets it too.
            program_only = a == "--";
            o.args.push(a);
            continue;
        }
        match a.as_str() {
            "--help" | "-h" | "++help" => return Ok(Parsed::Help),
            "++ppn" => {
                o.ppn = count("++ppn", &value("++ppn")?, 1 << 10)?;
                ppn_given = Some(o.ppn);
            }
            "++n" => processes = Some(count("++n", &value("++n")?, MAX_PES)?),
            "++local" => o.local = true,
            "++nodelist" => o.nodelist = Some(value("++nodelist")?),
            "++nodegroup" => o.nodegroup = Some(value("++nodegroup")?),
            "++runscript" => o.runscript = Some(value("++runscript")?),
            "++usehostname" => o.usehostname = true,
            "++scalable-start" => o.agents = true,
            "++debug" => o.debug = Some(Debug::Pause),
            "++debug-no-pause" => o.debug = Some(Debug::NoPause),
            "++remote-shell" => {
                let shell = value("++remote-shell")?;
                if shell_words(&shell).is_none() {
                    return Err(UsageError::BadShell(shell));
                }
                o.remote_shell = Some(shell);
            }
            "++mpiexec" => o.mpiexec = true,
            "++timeout" => o.timeout = secs("++timeout", &value("++timeout")?)?,
            "++timelimit" => o.timelimit = Some(secs("++timelimit", &value("++timelimit")?)?),
            "++hang-timeout" => {
                let v = value("++hang-timeout")?;
                o.hang_timeout = match v.parse::<f64>() {
                    Ok(0.0) => None,
                    _ => Some(secs("++hang-timeout", &v)?),
                };
                if o.hang_timeout.is_some_and(|t| t < MIN_HANG_TIMEOUT) {
                    return Err(UsageError::Unsupported(format!(
                        "++hang-timeout wants 0 (off) or at least {} s (nodes answer every {} s), got '{v}'",
                        MIN_HANG_TIMEOUT.as_secs(),
                        crate::protocol::HEARTBEAT_INTERVAL.as_secs_f64()
                    )));
                }
            }
            "++server" => {
                if !o.server.iter().any(|a| a == "+server") {
                    o.server.push("+server".into());
                }
            }
            "++server-port" => {
                let v = value("++server-port")?;
                if v.parse::<u16>().is_err() {
                    return Err(UsageError::Unsupported(format!(
                        "++server-port wants a port from 0 to 65535, got '{v}'"
                    )));
                }
                o.server.extend(["+server-port".to_owned(), v]);
            }
            "++server-auth" => {
                let v = value("++server-auth")?;
                o.server.extend(["+server-auth".to_owned(), v]);
            }
            "++prefix" => o.prefix = true,
            "++verbose" => o.verbose = true,
            "++quiet" => o.quiet = true,
            "++agents" => o.agents = true,
            "++batch" => o.batch = Some(count("++batch", &value("++batch")?, 1 << 16)?),
            "++fanout" => o.fanout = count("++fanout", &value("++fanout")?, 1 << 16)?,
            _ if a.starts_with("++") || (a.starts_with('-') && a.len() > 1) => {
                let hint = converse_machine::suggest::hint(&a, OPTIONS.iter().copied());
                return Err(UsageError::Unknown(a, hint));
            }
            _ => o.program = a,
        }
    }
    if o.program.is_empty() {
        return Err(UsageError::NoProgram);
    }
    if let Some(n) = processes {
        let pes = n.saturating_mul(o.ppn);
        if pes_given && o.pes != pes {
            return Err(UsageError::Unsupported(format!(
                "+p {} and ++n {n} with ++ppn {} ({pes} PEs) disagree",
                o.pes, o.ppn
            )));
        }
        if pes > MAX_PES {
            return Err(UsageError::Unsupported(format!(
                "++n {n} × ++ppn {} is more than {MAX_PES} PEs",
                o.ppn
            )));
        }
        o.pes = pes;
        pes_given = true;
    }
    if !pes_given {
        o.pes = 1;
    }
    if !o.pes.is_multiple_of(o.ppn) {
        return Err(UsageError::Unsupported(format!(
            "+p {} is not a multiple of ++ppn {}",
            o.pes, o.ppn
        )));
    }
    if o.nodegroup.is_some() && (o.nodelist.is_none() || o.local) {
        return Err(UsageError::Unsupported(
            "++nodegroup chooses a group of the ++nodelist file: give one (and not ++local)".into(),
        ));
    }
    if o.debug.is_some() {
        if o.mpiexec {
            return Err(UsageError::Unsupported(
                "++debug and ++debug-no-pause start nodes under gdb, which ++mpiexec's launcher \
                 does its own way: use your MPI's debugging support"
                    .into(),
            ));
        }
        // The lines of several nodes' debuggers are told apart by their labels.
        o.prefix = true;
        if o.debug == Some(Debug::Pause) {
            // A person attaches, sets breakpoints and steps at human speed: a node stopped in
            // the debugger neither connects back nor answers heartbeats meanwhile.
            o.timeout = Duration::from_secs(1 << 20);
            o.hang_timeout = None;
        }
    }
    if o.quiet && o.verbose {
        return Err(UsageError::Unsupported(
            "++quiet and ++verbose contradict each other".into(),
        ));
    }
    if o.pes > 1 && runtime_machine(&o.args).as_deref() == Some("local") {
        return Err(UsageError::Unsupported(format!(
            "+machine local runs all PEs in one process, so charmrun would start {} separate \
             one-PE jobs: run the program directly with +p {}",
            o.pes, o.pes
        )));
    }
    Ok(Parsed::Run(o))
}

/// A launcher command line split into words as a POSIX shell splits them (quotes group, `\`
/// escapes); `None` when it is empty or its quotes do not close.
pub fn shell_words(cmd: &str) -> Option<Vec<String>> {
    shlex::split(cmd).filter(|w| !w.is_empty())
}

/// The layer the program's runtime arguments name (`+machine NAME`, `+machine=NAME`,
/// `+machineNAME`), read as the runtime reads them: up to `--`.
pub fn runtime_machine(args: &[String]) -> Option<String> {
    let mut it = args.iter().take_while(|a| *a != "--");
    let mut machine = None;
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("+machine") {
            let v = v.strip_prefix('=').unwrap_or(v);
            machine = if v.is_empty() {
                it.next().cloned()
            } else {
                Some(v.to_owned())
            };
        }
    }
    machine
}

/// `+ppn K`, `+ppnK`, `+ppn=K` → the glued value ("" when separate), as the runtime reads it;
/// `None` when not a +ppn flag.
fn ppn_flag(a: &str) -> Option<&str> {
    let v = a.strip_prefix("+ppn")?;
    Some(v.strip_prefix('=').unwrap_or(v))
}

/// `+pN` / `+p` → the glued value ("" when separate); `None` when not a +p flag.
fn pe_flag(a: &str) -> Option<&str> {
    let v = a.strip_prefix("+p")?;
    (v.is_empty() || v.bytes().all(|b| b.is_ascii_digit()) || v.starts_with('-')).then_some(v)
}

fn count(name: &'static str, v: &str, max: usize) -> Result<usize, UsageError> {
    match v.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(UsageError::BadCount {
            name,
            max,
            got: v.to_owned(),
        }),
    }
}

fn secs(name: &'static str, v: &str) -> Result<Duration, UsageError> {
    // From 1 ms: a time that rounds to nothing (1e-300) is refused as 0 is.
    match v.parse::<f64>() {
        Ok(s) if (1e-3..1e7).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(UsageError::BadSeconds {
            name,
            got: v.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Parsed, UsageError> {
        parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn run(v: &[&str]) -> Opts {
        match p(v) {
            Ok(Parsed::Run(o)) => o,
            other => panic!("{v:?}: {other:?}"),
        }
    }

    #[test]
    fn charm_style_arguments() {
        let o = run(&[
            "+p4",
            "++local",
            "++timeout",
            "5",
            "./pgm",
            "a",
            "++b",
            "+p",
            "8",
            "c",
        ]);
        assert_eq!(
            (o.pes, o.local, o.timeout),
            (8, true, Duration::from_secs(5))
        );
        assert_eq!(o.program, "./pgm");
        assert_eq!(o.args, ["a", "++b", "c"]);
        // `++n`: processes, each of ++ppn PEs; +p must agree.
        assert_eq!(run(&["++n", "3", "pgm"]).pes, 3);
        let o = run(&["++n", "2", "++ppn", "4", "pgm"]);
        assert_eq!((o.pes, o.ppn), (8, 4));
        assert_eq!(run(&["++n", "2", "pgm", "+ppn", "2", "+p4"]).pes, 4);
        assert!(p(&["++n", "2", "+p3", "pgm"]).is_err());
        assert!(p(&["++n", "0", "pgm"]).is_err());
        // The CCS options, before or after the program, become the runtime's.
        let o = run(&["++server", "pgm", "x", "++server-port", "1234", "--", "y"]);
        assert_eq!(o.args, ["x", "--", "y"]);
        assert_eq!(
            o.node_args(),
            ["x", "+server", "+server-port", "1234", "--", "y"]
        );
        let o = run(&["+p", "2", "pgm", "+machine", "tcp"]);
        assert_eq!(
            (o.pes, o.args.clone()),
            (2, vec!["+machine".to_string(), "tcp".to_string()])
        );
    }

    #[test]
    fn ppn_after_the_program_is_charmruns_as_in_charm() {
        for args in [
            &["+p4", "pgm", "+ppn", "2"][..],
            &["+p4", "pgm", "+ppn2"],
            &["pgm", "+ppn=2", "+p4"],
            &["+p4", "++ppn", "2", "pgm", "+ppn", "2"],
        ] {
            let o = run(args);
            assert_eq!((o.pes, o.ppn), (4, 2), "{args:?}");
            assert!(o.args.is_empty(), "{args:?}: {:?}", o.args);
        }
        // The program's own, after its `--`.
        assert_eq!(run(&["+p4", "pgm", "--", "+ppn", "2"]).ppn, 1);
        for bad in [
            &["+p4", "++ppn", "4", "pgm", "+ppn", "2"][..],
            &["+p4", "pgm", "+ppn"],
            &["+p4", "pgm", "+ppn", "x"],
            &["+p3", "pgm", "+ppn", "2"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hang_timeout_has_a_default_and_zero_turns_it_off() {
        assert_eq!(run(&["pgm"]).hang_timeout, Some(DEFAULT_HANG_TIMEOUT));
        assert_eq!(
            run(&["++hang-timeout", "2.5", "pgm"]).hang_timeout,
            Some(Duration::from_millis(2500))
        );
        assert_eq!(run(&["++hang-timeout", "0", "pgm"]).hang_timeout, None);
    }

    #[test]
    fn help() {
        assert_eq!(p(&["--help"]), Ok(Parsed::Help));
    }

    #[test]
    fn bad_input_is_one_line_errors() {
        for bad in [
            &["+p0", "pgm"][..],
            &["+p", "x", "pgm"],
            &["+p"],
            &["+p4"],
            &["++bogus", "pgm"],
            &["-x", "pgm"],
            &["++timeout", "-1", "pgm"],
            &["++timeout", "1e-300", "pgm"],
            &["++timelimit", "0.0001", "pgm"],
            &["++timelimit", "soon", "pgm"],
            &["+p3", "++ppn", "2", "pgm"],
            &["++nodelist"],
            &["+p", "2", "pgm", "+p", "0"],
            &["++remote-shell", "ssh -o 'unclosed", "pgm"],
            &["++remote-shell", " ", "pgm"],
            &["++quiet", "++verbose", "pgm"],
            &["++hang-timeout", "-3", "pgm"],
            &["++hang-timeout", "pgm"],
            &["++hang-timeout", "1", "pgm"],
            &["++batch", "0", "pgm"],
            &["++batch", "pgm"],
        ] {
            let e = p(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(!e.is_empty() && !e.contains('\n'), "{bad:?}: {e:?}");
        }
    }

    #[test]
    fn arguments_after_the_programs_double_dash_are_the_programs() {
        let o = run(&["+p2", "pgm", "a", "--", "+p9", "++local", "+p", "3"]);
        assert_eq!(o.pes, 2);
        assert_eq!(o.args, ["a", "--", "+p9", "++local", "+p", "3"]);
    }

    #[test]
    fn runtime_arguments_charmrun_adds_go_before_the_double_dash() {
        let o = run(&["++quiet", "pgm", "a", "--", "b"]);
        assert_eq!(o.node_args(), ["a", "+quiet", "--", "b"]);
        let o = run(&["++quiet", "pgm", "a"]);
        assert_eq!(o.node_args(), ["a", "+quiet"]);
    }

    #[test]
    fn the_local_layer_with_several_pes_is_refused_at_once() {
        for args in [
            &["+p4", "pgm", "+machine", "local"][..],
            &["+p4", "pgm", "+machine=local"],
            &["pgm", "+machinelocal", "+p", "2"],
        ] {
            let e = p(args).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("run the program directly"), "{args:?}: {e}");
        }
        run(&["+p1", "pgm", "+machine", "local"]);
        run(&["+p4", "pgm", "+machine", "tcp"]);
        run(&["+p4", "pgm", "--", "+machine", "local"]);
    }

    #[test]
    fn remote_shells_split_as_a_shell_splits() {
        assert_eq!(
            shell_words("ssh -o 'ProxyCommand=nc %h 22'").unwrap_or_default(),
            ["ssh", "-o", "ProxyCommand=nc %h 22"]
        );
        assert_eq!(shell_words("  "), None);
        assert_eq!(shell_words("a 'b"), None);
    }

    #[test]
    fn agents_and_batch() {
        let o = run(&["++agents", "++batch", "3", "pgm"]);
        assert!(o.agents);
        assert_eq!(o.batch, Some(3));
        assert_eq!(run(&["pgm"]).batch, None);
        assert_eq!(run(&["++fanout", "4", "pgm"]).fanout, 4);
        assert_eq!(run(&["pgm"]).fanout, DEFAULT_FANOUT);
        assert!(run(&["++scalable-start", "pgm"]).agents);
    }

    #[test]
    fn a_node_runs_under_its_runscript_and_debugger() {
        let (p, a) = run(&["++runscript", "/s.sh", "+p2", "pgm", "x"]).node_command();
        assert_eq!(
            (p.as_str(), a),
            ("/s.sh", vec!["pgm".to_owned(), "x".into()])
        );
        let o = run(&["++debug", "++quiet", "pgm", "x"]);
        assert!(
            o.prefix && o.hang_timeout.is_none() && o.timeout > Duration::from_secs(1e5 as u64)
        );
        let (p, a) = o.node_command();
        assert_eq!(p, "gdbserver");
        assert_eq!(a, ["--once", ":0", "pgm", "x", "+quiet"]);
        let o = run(&["++runscript", "/s.sh", "++debug-no-pause", "pgm"]);
        assert!(o.prefix && o.hang_timeout.is_some());
        let (p, a) = o.node_command();
        assert_eq!(p, "/s.sh");
        assert_eq!(a.first().map(String::as_str), Some("gdb"));
        assert_eq!(&a[a.len() - 2..], ["--args", "pgm"]);
        // Refused: a group without a nodelist, a debugger under the MPI launcher.
        assert!(p_err(&["++nodegroup", "g", "pgm"]).contains("++nodegroup"));
        assert!(
            p_err(&["++nodegroup", "g", "++nodelist", "f", "++local", "pgm"])
                .contains("++nodegroup")
        );
        assert!(p_err(&["++debug", "++mpiexec", "pgm"]).contains("++mpiexec"));
        assert_eq!(
            run(&["++nodegroup", "g", "++nodelist", "f", "pgm"])
                .nodegroup
                .as_deref(),
            Some("g")
        );
    }

    fn p_err(v: &[&str]) -> String {
        match p(v) {
            Err(e) => e.to_string(),
            other => panic!("{v:?} was taken: {other:?}"),
        }
    }
}
