//! charmrun's own command line (whole jobs are tested in tests/tests/charmrun.rs, which also
//! relies on this package's binary being built).

use std::process::Command;

fn charmrun(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_charmrun"))
        .args(args)
        .output()
        .expect("charmrun runs")
}

#[test]
fn help_exits_zero_and_names_every_option() {
    let o = charmrun(&["--help"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for opt in [
        "+p N",
        "++ppn",
        "++local",
        "++nodelist",
        "++remote-shell",
        "++timeout",
        "++timelimit",
        "++verbose",
        "++quiet",
        "++prefix",
    ] {
        assert!(text.contains(opt), "{opt} missing from:\n{text}");
    }
}

#[test]
fn pes_not_a_multiple_of_ppn_is_refused_in_one_line() {
    let o = charmrun(&["+p3", "++ppn", "2", "/bin/true"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("+p 3 is not a multiple of ++ppn 2"), "{err}");
}

#[test]
fn no_program_is_a_usage_error() {
    let o = charmrun(&["+p2"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no program to run"), "{err}");
}

#[test]
fn help_names_the_cluster_options() {
    let o = charmrun(&["--help"]);
    let text = String::from_utf8_lossy(&o.stdout);
    for opt in ["++agents", "++batch N", "++fanout K", "++mpiexec", "Slurm"] {
        assert!(text.contains(opt), "{opt} missing from:\n{text}");
    }
}

#[test]
fn a_net_layer_job_through_a_launcher_that_does_not_exist_is_one_line() {
    let o = charmrun(&[
        "+p2",
        "++mpiexec",
        "++remote-shell",
        "/nonexistent/mpiexec",
        "/bin/true",
        "+machine",
        "tcp",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot start the launcher '/nonexistent/mpiexec'"),
        "{err}"
    );
}

#[test]
fn an_agent_not_started_by_charmrun_says_what_is_missing() {
    let o = Command::new(env!("CARGO_BIN_EXE_charmrun"))
        .arg("++agent")
        .env_clear()
        .output()
        .expect("charmrun runs");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("CONVERSE_CHARMRUN is not set"), "{err}");
}
