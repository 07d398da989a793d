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
    let o = conv_mach(&["bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
}
