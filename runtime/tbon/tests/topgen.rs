//! The `topgen` command: generating, checking and drawing topologies, and its errors.

use std::process::{Command, Output};

const TOPGEN: &str = env!("CARGO_BIN_EXE_topgen");

fn topgen(args: &[&str]) -> Output {
    match Command::new(TOPGEN).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run {TOPGEN}: {e}"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn generated_trees_parse_back_as_the_same_tree() {
    let dir = std::env::temp_dir().join(format!("topgen-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    for (spec, nodes, backends) in [
        ("b:4x4", 21, 16),
        ("b:2^3", 15, 8),
        ("k:2@16", 16, 8),
        ("g:2x4x3", 35, 24),
        ("g:32", 33, 32),
    ] {
        let out = dir.join(format!("{}.top", spec.replace([':', '^', '@'], "_")));
        let o = topgen(&["--stats", spec, &out.to_string_lossy()]);
        assert!(o.status.success(), "{spec}: {}", text(&o.stderr));
        let stats = text(&o.stderr);
        assert!(
            stats.starts_with(&format!("{nodes} processes ({backends} back-ends)")),
            "{spec}: {stats}"
        );
        let t = converse_tbon::topology_file::load(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.num_nodes(), t.num_backends()),
            (nodes, backends),
            "{spec}"
        );
        let o = topgen(&["--check", &out.to_string_lossy(), "--dot"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(text(&o.stdout).matches(" -> ").count(), nodes - 1, "{spec}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn host_lists_place_the_processes() {
    let dir = std::env::temp_dir().join(format!("topgen-hosts-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let hosts = dir.join("hosts");
    let _ = std::fs::write(&hosts, "n1:2\nn2:2\n");
    let o = topgen(&[
        "--fe-host",
        "fe",
        "--hosts",
        &hosts.to_string_lossy(),
        "g:2x1",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "fe:0 => n1:0 n1:1 ;\nn1:0 => n2:0 ;\nn1:1 => n2:1 ;\n"
    );
    let o = topgen(&["--hosts", &hosts.to_string_lossy(), "g:2x2"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("more than the 4 slot(s)"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let dir = std::env::temp_dir().join(format!("topgen-bad-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let bad = dir.join("bad.top");
    let _ = std::fs::write(&bad, "a:0 => b:0 ;\n\nb:0 => a:0 ;\n");
    let bad = bad.to_string_lossy().into_owned();
    for (args, want) in [
        (vec!["b:4x8"], "a balanced tree has the same fan-out"),
        (vec!["x:4"], "unknown kind 'x'"),
        (vec![], "no tree spec"),
        (vec!["--bogus", "b:2"], "unknown option '--bogus'"),
        (
            vec!["--check", "/nonexistent.top"],
            "cannot read topology file",
        ),
        (
            vec!["--check", bad.as_str()],
            ":1: every process has a parent, so there is no root",
        ),
        (vec!["--hosts"], "--hosts needs a value"),
    ] {
        let o = topgen(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?}, got {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
