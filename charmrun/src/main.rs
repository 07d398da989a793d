//! `charmrun +p N [options] PROGRAM [ARGS...]`: see `charmrun --help`.

use charmrun::opts::{self, Parsed};
use std::os::unix::fs::PermissionsExt;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match opts::parse(&args) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help) => {
            println!("{}", opts::HELP);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("charmrun: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = check_program(&o.program) {
        eprintln!("charmrun: {e}");
        return ExitCode::from(2);
    }
    if o.mpiexec {
        return match charmrun::mpiexec::run(&o) {
            Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
            Err(e) => {
                eprintln!("charmrun: {e}");
                ExitCode::from(e.exit_code())
            }
        };
    }
    let hosts = match (&o.nodelist, o.local) {
        (Some(path), false) => match charmrun::nodelist::load(std::path::Path::new(path)) {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("charmrun: {e}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    match charmrun::launch::run(&o, hosts.as_deref()) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("charmrun: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The program must exist and be executable here (nodes on other hosts see the same path).
fn check_program(p: &str) -> Result<(), String> {
    let path = std::path::Path::new(p);
    let meta = std::fs::metadata(path).map_err(|e| format!("program {p}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("program {p} is not a file"));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("program {p} is not executable"));
    }
    Ok(())
}
