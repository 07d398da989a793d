//! Every command the project ships answers a lone `--help` and `--version` as Unix tools do:
//! on stdout, exit code 0 (`--version`: `TOOL VERSION`).

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
