//! conv-mach's own command line (this test also makes `cargo test --workspace` build the
//! binary that tests/tests/tools.rs runs).

use std::process::Command;

fn conv_mach(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_conv-mach"))
        .args(args)
        .output()
        .expect("conv-mach runs")
}

#[test]
fn list_names_the_default_variant_and_bad_commands_exit_two() {
    let o = conv_mach(&["list"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).lines().count() >= 1);
    for args in [
        &["bogus"][..],
        &[],
        &["show"],
        &["show", "no-such-variant"],
        &["build", "no-such-variant"],
        &["list", "extra"],
    ] {
        let o = conv_mach(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("conv-mach: "), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // A NAME that is no variant is told the variants there are.
    let o = conv_mach(&["show", "no-such-variant"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("[possible values: ") && err.contains("multicore"),
        "{err}"
    );
}

#[test]
fn show_prints_a_variant() {
    let o = conv_mach(&["show", "multicore"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("variant  multicore"));
}
