//! The `ccs` command's own command line (requests to whole jobs are tested in
//! tests/tests/ccs.rs, which also relies on this package's binary being built — this test is
//! what makes `cargo test --workspace` build it).

use std::net::TcpListener;
use std::process::Command;

fn ccs(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ccs"))
        .args(args)
        .output()
        .expect("ccs runs")
}

#[test]
fn help_and_version_print_to_stdout_and_exit_zero() {
    let o = ccs(&["--help"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for opt in [
        "--key",
        "--key-file",
        "--pe",
        "--timeout",
        "<HOST:PORT> <HANDLER> [DATA]",
    ] {
        assert!(text.contains(opt), "{opt} missing from:\n{text}");
    }
    let o = ccs(&["--version"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ccs "));
    assert!(o.stderr.is_empty());
}

#[test]
fn bad_arguments_get_one_line_and_exit_two() {
    for args in [
        &["--pe"][..],
        &["--pe", "x", "h:1", "a"],
        &["--timeout", "0", "h:1", "a"],
        &["--timeout", "nan", "h:1", "a"],
        &["--key", "zz", "h:1", "a"],
        &["--key-file", "/nonexistent/keys", "h:1", "a"],
        &["--bogus", "h:1", "a"],
        &["only-an-address"],
        &["h:1", "a", "b", "c"],
        &["--key", "1", "--key-file", "/nonexistent/keys", "h:1", "a"],
        &["h:1", "a", "-x"],
    ] {
        let o = ccs(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("ccs: "), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn nobody_listening_is_one_line_and_exit_one() {
    // A port just closed: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let o = ccs(&["--timeout", "5", &addr, "ccs_getinfo"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&addr), "{err}");
}
