//! Every command the project ships answers a lone `--help` and `--version` as Unix tools do:
//! on stdout, exit code 0 (`--version`: `TOOL VERSION`); those parsing with clap answer a
//! misspelled option or command with the nearest one, a usage error (exit code 2).

use std::path::Path;
use std::process::Command;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

#[test]
fn every_tool_answers_help_and_version_on_stdout_with_exit_zero() {
    // Built by `cargo test --workspace`: each of their packages has tests of its own.
    for tool in [
        "charmrun",
        "converse-trace",
        "topgen",
        "topo-draw",
        "ccs",
        "bench",
        "conv-mach",
    ] {
        let path = Path::new(PROGRAM).with_file_name(tool);
        assert!(path.exists(), "{} is not built", path.display());
        for flag in ["--help", "-h"] {
            let o = Command::new(&path).arg(flag).output().expect("runs");
            assert!(o.status.success(), "{tool} {flag}: {o:?}");
            assert!(!o.stdout.is_empty(), "{tool} {flag}: nothing on stdout");
        }
        for flag in ["--version", "-V"] {
            let o = Command::new(&path).arg(flag).output().expect("runs");
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(o.status.success(), "{tool} {flag}: {o:?}");
            assert!(
                out.starts_with(&format!("{tool} ")) && out.lines().count() == 1,
                "{tool} {flag}: {out}"
            );
        }
    }
}

/// The commands whose command line clap parses answer a misspelled option, command or value
/// with the nearest one: a usage error, one line on stderr, exit code 2, nothing on stdout.
#[test]
fn a_misspelled_option_or_command_is_one_line_naming_the_nearest_with_exit_two() {
    for (tool, args, nearest) in [
        ("converse-trace", &["jsn", "dir"][..], "'json'"),
        (
            "converse-trace",
            &["live", "127.0.0.1:1", "dir", "--sec", "5"],
            "'--secs'",
        ),
        ("topo-draw", &["--versoin"], "'--version'"),
        ("conv-mach", &["lsit"], "'list'"),
        ("conv-mach", &["show", "multicor"], "'multicore'"),
        (
            "ccs",
            &["--timout", "5", "127.0.0.1:1", "echo"],
            "'--timeout'",
        ),
        ("topgen", &["--stat", "b:2"], "'--stats'"),
    ] {
        let path = Path::new(PROGRAM).with_file_name(tool);
        assert!(path.exists(), "{} is not built", path.display());
        let o = Command::new(&path).args(args).output().expect("runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{tool} {args:?}: {err}");
        assert!(o.stdout.is_empty(), "{tool} {args:?}: {o:?}");
        assert_eq!(err.lines().count(), 1, "{tool} {args:?}: {err}");
        assert!(
            err.starts_with(&format!("{tool}: ")),
            "{tool} {args:?}: {err}"
        );
        assert!(
            err.contains("similar") && err.contains(nearest),
            "{tool} {args:?}: want {nearest}, got {err}"
        );
    }
}
