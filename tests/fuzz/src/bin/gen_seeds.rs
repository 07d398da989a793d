//! Write each target's seed corpus: `gen_seeds DIR` makes `DIR/<target>/<seed>` for every
//! target, from the project's own encoders, and checks that every seed passes its target.
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: gen_seeds DIR");
        return ExitCode::FAILURE;
    };
    for target in converse_fuzz::TARGETS {
        let sub = dir.join(target);
        if let Err(e) = std::fs::create_dir_all(&sub) {
            eprintln!("cannot create {}: {e}", sub.display());
            return ExitCode::FAILURE;
        }
        for (name, bytes) in converse_fuzz::seeds(target) {
            converse_fuzz::run(target, &bytes);
            if let Err(e) = std::fs::write(sub.join(name), &bytes) {
                eprintln!("cannot write {}/{name}: {e}", sub.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
