//! charmrun's command line, Charm++ style.

use std::time::Duration;

/// What `charmrun --help` prints.
pub const HELP: &str = "\
usage: charmrun +p N [options] PROGRAM [ARGS...]

Starts N node processes of PROGRAM (locally, or on the hosts of a nodelist through a remote
shell), connects them into one job, forwards their output, and exits with the job's exit code.

  +p N                 number of PEs (also accepted after PROGRAM, as Charm++'s charmrun does)
  ++ppn K              PEs per node process (default 1)
  ++local              start every node on this host, ignoring any nodelist
  ++nodelist FILE      hosts to start nodes on: Charm++ nodelist or one host per line
  ++remote-shell CMD   how to reach a host (default: ssh, run as `CMD HOST COMMAND`);
                       with ++mpiexec, the MPI launcher to run (default: mpiexec)
  ++mpiexec            hand the job to the MPI launcher: `mpiexec -n N PROGRAM ARGS`
                       (for programs built with the MPI layer)
  ++timeout SECS       how long nodes may take to connect back (default 60)
  ++timelimit SECS     end the job, killing every process, after SECS seconds
  ++prefix             prefix every output line with the PE that printed it
  ++verbose            say what charmrun does
  ++quiet              print nothing of charmrun's own but errors
  --help               this text
Everything after PROGRAM goes to it, except +p.";

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
    /// `++prefix`.
    pub prefix: bool,
    /// `++verbose`.
    pub verbose: bool,
    /// `++quiet`.
    pub quiet: bool,
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Run a job.
    Run(Opts),
    /// Print the help.
    Help,
}

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
            prefix: false,
            verbose: false,
            quiet: false,
            program: String::new(),
            args: Vec::new(),
        }
    }

    /// The remote shell for starting nodes on other hosts.
    pub fn remote_shell(&self) -> &str {
        self.remote_shell.as_deref().unwrap_or("ssh")
    }
}

/// Parse `args` (without `argv[0]`).
///
/// # Errors
/// One line saying which argument is wrong.
pub fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut o = Opts::with_pes(0);
    let mut it = args.iter().cloned().peekable();
    let mut pes_given = false;
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<String, String> {
            it.next().ok_or_else(|| format!("{name} needs a value"))
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
        if !o.program.is_empty() {
            o.args.push(a);
            continue;
        }
        match a.as_str() {
            "--help" | "-h" | "++help" => return Ok(Parsed::Help),
            "++ppn" => o.ppn = count("++ppn", &value("++ppn")?, 1 << 10)?,
            "++local" => o.local = true,
            "++nodelist" => o.nodelist = Some(value("++nodelist")?),
            "++remote-shell" => {
                let shell = value("++remote-shell")?;
                if shell.trim().is_empty() {
                    return Err("++remote-shell needs a command".into());
                }
                o.remote_shell = Some(shell);
            }
            "++mpiexec" => o.mpiexec = true,
            "++timeout" => o.timeout = secs("++timeout", &value("++timeout")?)?,
            "++timelimit" => o.timelimit = Some(secs("++timelimit", &value("++timelimit")?)?),
            "++prefix" => o.prefix = true,
            "++verbose" => o.verbose = true,
            "++quiet" => o.quiet = true,
            _ if a.starts_with("++") || (a.starts_with('-') && a.len() > 1) => {
                return Err(format!("unknown option '{a}' (charmrun --help lists them)"))
            }
            _ => o.program = a,
        }
    }
    if o.program.is_empty() {
        return Err("no program to run (usage: charmrun +p N PROGRAM [ARGS...])".into());
    }
    if !pes_given {
        o.pes = 1;
    }
    if !o.pes.is_multiple_of(o.ppn) {
        return Err(format!("+p {} is not a multiple of ++ppn {}", o.pes, o.ppn));
    }
    if o.quiet && o.verbose {
        return Err("++quiet and ++verbose contradict each other".into());
    }
    Ok(Parsed::Run(o))
}

/// `+pN` / `+p` → the glued value ("" when separate); `None` when not a +p flag.
fn pe_flag(a: &str) -> Option<&str> {
    let v = a.strip_prefix("+p")?;
    (v.is_empty() || v.bytes().all(|b| b.is_ascii_digit()) || v.starts_with('-')).then_some(v)
}

fn count(name: &str, v: &str, max: usize) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{name} wants a number from 1 to {max}, got '{v}'")),
    }
}

fn secs(name: &str, v: &str) -> Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(s) if s > 0.0 && s < 1e7 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{name} wants a positive number of seconds, got '{v}'"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Parsed, String> {
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
        let o = run(&["+p", "2", "pgm", "+machine", "tcp"]);
        assert_eq!(
            (o.pes, o.args.clone()),
            (2, vec!["+machine".to_string(), "tcp".to_string()])
        );
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
            &["++timelimit", "soon", "pgm"],
            &["+p3", "++ppn", "2", "pgm"],
            &["++nodelist"],
            &["+p", "2", "pgm", "+p", "0"],
        ] {
            let e = p(bad).err().unwrap_or_default();
            assert!(!e.is_empty() && !e.contains('\n'), "{bad:?}: {e:?}");
        }
    }
}
