//! `charmrun +p N [options] PROGRAM [ARGS...]`: see `charmrun --help`.

use charmrun::launch::Spread;
use charmrun::opts::{self, Parsed};
use converse_machine::log::Who;
use std::os::unix::fs::PermissionsExt;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match converse_machine::input::args() {
        Ok(mut a) => a.split_off(1.min(a.len())),
        Err(e) => {
            converse_machine::input::error_line(&format!("charmrun: {e}"));
            return ExitCode::from(2);
        }
    };
    let agent = args.first().map(String::as_str) == Some(charmrun::agent::FLAG);
    let who = if agent {
        Who::Agent(None)
    } else {
        Who::Charmrun
    };
    // A filter that does not parse ends the launch: fewer logs than asked would mislead.
    if let Err(e) = converse_machine::log::init_as(who) {
        converse_machine::input::error_line(&format!("charmrun: {e}"));
        return ExitCode::from(2);
    }
    if agent {
        return ExitCode::from(charmrun::agent::run().clamp(0, 255) as u8);
    }
    // `--version` (help is charmrun's own, below: it lists every option).
    if let Some(code) = converse_machine::input::help_or_version(
        args.first()
            .filter(|a| matches!(a.as_str(), "--version" | "-V"))
            .map(String::as_str),
        "charmrun",
        env!("CARGO_PKG_VERSION"),
        "",
    ) {
        return code;
    }
    let mut o = match opts::parse(&args) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help) => {
            use std::io::Write;
            // A closed or full stdout ends charmrun with a failure, not a panic.
            return match writeln!(std::io::stdout().lock(), "{}", opts::HELP) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(1),
            };
        }
        Err(e) => {
            converse_machine::input::error_line(&format!("charmrun: {e}"));
            return ExitCode::from(2);
        }
    };
    // A name without a slash is a file of this directory, as it was checked (and as Charm++'s
    // charmrun takes it), not a command to look up on each host's PATH.
    for p in std::iter::once(&mut o.program).chain(o.runscript.as_mut()) {
        if !p.contains('/') {
            *p = format!("./{p}");
        }
    }
    if let Err(e) = check_program("program", &o.program) {
        converse_machine::input::error_line(&format!("charmrun: {e}"));
        return ExitCode::from(2);
    }
    if let Some(script) = &o.runscript {
        if let Err(e) = check_program("++runscript", script) {
            converse_machine::input::error_line(&format!("charmrun: {e}"));
            return ExitCode::from(2);
        }
    }
    // The debugger must be there where the nodes start; only this host's can be looked at.
    // (A runscript may put it there, `module load gdb`: then the nodes say so themselves.)
    let nodes_here = (o.nodelist.is_none() || o.local) && o.runscript.is_none();
    if let (Some(d), true) = (o.debug, nodes_here) {
        let (tool, flag) = match d {
            opts::Debug::Pause => ("gdbserver", "++debug"),
            opts::Debug::NoPause => ("gdb", "++debug-no-pause"),
        };
        if !on_path(tool) {
            converse_machine::input::error_line(&format!(
                "charmrun: {flag} starts each node under {tool}, which is not on this host's PATH \
                 (Debian, Ubuntu: apt install {tool})"
            ));
            return ExitCode::from(2);
        }
    }
    // The runtime's `+help` and `+version` (before a `--`) describe the program, not a job:
    // it runs once, here, and says it once (every node of a job would print the same, then
    // leave before connecting).
    if o.args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "+help" || a == "+version")
    {
        return match std::process::Command::new(&o.program)
            .args(&o.args)
            .status()
        {
            Ok(st) => ExitCode::from(st.code().unwrap_or(1).clamp(0, 255) as u8),
            Err(e) => {
                converse_machine::input::error_line(&format!("charmrun: {}: {e}", o.program));
                ExitCode::from(2)
            }
        };
    }
    if o.mpiexec && !charmrun::mpiexec::for_net_layer(&o) {
        return match charmrun::mpiexec::run(&o) {
            Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
            Err(e) => {
                converse_machine::input::error_line(&format!("charmrun: {e}"));
                ExitCode::from(e.exit_code())
            }
        };
    }
    let hosts = match (&o.nodelist, o.local) {
        (Some(path), false) => match charmrun::nodelist::load_group(
            std::path::Path::new(path),
            o.nodegroup.as_deref().unwrap_or(charmrun::nodelist::MAIN),
        ) {
            Ok(h) => Some(h),
            Err(e) => {
                converse_machine::input::error_line(&format!("charmrun: {e}"));
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let (hosts, spread) = match spread(&o, hosts) {
        Ok(s) => s,
        Err(e) => {
            converse_machine::input::error_line(&format!("charmrun: {e}"));
            return ExitCode::from(2);
        }
    };
    match charmrun::launch::run(&o, hosts.as_deref(), spread) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            converse_machine::input::error_line(&format!("charmrun: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}

/// How the nodes start, and on which hosts: `++mpiexec` (a net layer's: agents through the
/// launcher), a Slurm allocation's hosts (agents through `srun`) when no nodelist says
/// otherwise, `++agents` (one per host of the nodelist), or each node by itself.
fn spread(
    o: &opts::Opts,
    hosts: Option<Vec<charmrun::nodelist::Host>>,
) -> Result<(Option<Vec<charmrun::nodelist::Host>>, Spread), String> {
    let nodes = o.pes / o.ppn;
    if o.mpiexec {
        let words = charmrun::mpiexec::agent_words(o, nodes).map_err(|e| e.to_string())?;
        let spread = Spread::Launcher {
            words,
            agents: nodes,
            hosts: None,
        };
        return Ok((None, spread));
    }
    if hosts.is_none() && !o.local {
        if let Some(alloc) = charmrun::slurm::allocation() {
            let alloc = alloc?;
            let srun = opts::shell_words(o.remote_shell.as_deref().unwrap_or("srun"))
                .unwrap_or_else(|| vec!["srun".into()]);
            let h = alloc.hosts.len().min(nodes);
            if o.verbose {
                converse_machine::input::error_line(&format!(
                    "charmrun: in a Slurm allocation of {} host(s): {} agent(s) through srun",
                    alloc.hosts.len(),
                    h
                ));
            }
            let spread = Spread::Launcher {
                words: charmrun::slurm::srun_words(&srun, h),
                agents: h,
                hosts: Some(alloc.hosts),
            };
            return Ok((None, spread));
        }
    }
    let spread = if hosts.is_some() && o.agents {
        Spread::PerHost
    } else {
        Spread::Direct
    };
    Ok((hosts, spread))
}

/// The program must exist and be executable here (nodes on other hosts see the same path).
fn check_program(what: &str, p: &str) -> Result<(), String> {
    let path = std::path::Path::new(p);
    let meta = std::fs::metadata(path).map_err(|e| format!("{what} {p}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{what} {p} is not a file"));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{what} {p} is not executable"));
    }
    Ok(())
}

/// Whether an executable `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}
