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
        (
            vec!["--bogus", "b:2"],
            "unexpected argument '--bogus' found",
        ),
        (
            vec!["b:2", "out", "more"],
            "unexpected argument 'more' found",
        ),
        (
            vec!["--check", "/nonexistent.top"],
            "cannot read topology file",
        ),
        (
            vec!["--check", bad.as_str()],
            ":1: every process has a parent, so there is no root",
        ),
        (
            vec!["--hosts"],
            "a value is required for '--hosts <FILE>' but none was supplied",
        ),
    ] {
        let o = topgen(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?}, got {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn degenerate_trees_are_refused_in_one_line() {
    let dir = std::env::temp_dir().join(format!("topgen-degenerate-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let lone = dir.join("lone.top");
    let _ = std::fs::write(&lone, "localhost:0 => ;\n");
    let lone = lone.to_string_lossy().into_owned();
    let flat = dir.join("flat.top");
    let children: String = (1..=1_048_576).map(|i| format!(" b:{i}")).collect();
    let _ = std::fs::write(&flat, format!("fe:0 =>{children} ;\n"));
    let flat = flat.to_string_lossy().into_owned();
    for (args, want) in [
        (vec!["k:2@1"], "has no back-end"),
        (vec!["b:0"], "at least 1"),
        (vec!["k:1@5"], "k must be at least 2"),
        (vec!["g:0x2"], "at least 1"),
        (vec!["b:1^2000000"], "more than 1048576 processes"),
        (vec!["g:100000x100000"], "more than 1048576 processes"),
        (
            vec!["--check", lone.as_str()],
            "lone.top: the tree is the front-end localhost:0 alone: a tree overlay needs at \
             least one back-end",
        ),
        (
            vec!["--check", flat.as_str()],
            "flat.top:1: the tree has more than 1048576 processes, the most allowed: b:1048576 \
             is one more",
        ),
    ] {
        let o = topgen(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?}, got {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_million_level_chain_is_generated_and_checked() {
    // Checking was quadratic in the depth (a 50,000-level chain took 11 s, this one would
    // take hours) and must not recurse on it.
    let dir = std::env::temp_dir().join(format!("topgen-chain-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let chain = dir.join("chain.top");
    let chain = chain.to_string_lossy().into_owned();
    let o = topgen(&["b:1^1000000", &chain]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = topgen(&["--check", &chain, "--stats", "/dev/null"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr).lines().next(),
        Some(
            "1000001 processes (1 back-ends), depth 1000000, fan-out min 1 max 1 avg 1.00 \
             stddev 0.00"
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reader_that_stops_early_is_no_error() {
    use std::io::Read;
    let child = Command::new(TOPGEN)
        .arg("b:1^200000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!("cannot run {TOPGEN}: {e}"),
    };
    // Read one chunk, then close the pipe: topgen's next write fails with EPIPE.
    let mut first = [0u8; 64];
    let got = child.stdout.as_mut().map(|s| s.read(&mut first));
    assert!(matches!(got, Some(Ok(n)) if n > 0));
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("panicked"), "{}", text(&o.stderr));
}

#[test]
fn options_a_mode_does_not_use_are_refused() {
    // `--check` took placement options, read nothing of them and exited 0.
    let dir = std::env::temp_dir().join(format!("topgen-unused-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let ok = dir.join("ok.top");
    let _ = std::fs::write(&ok, "fe:0 => be:0 be:1 ;\n");
    let ok = ok.to_string_lossy().into_owned();
    let hosts = dir.join("hosts2");
    let _ = std::fs::write(&hosts, "n1:2\nn2:2\n");
    let hosts = hosts.to_string_lossy().into_owned();
    for (args, want) in [
        (
            vec!["--check", ok.as_str(), "--hosts", hosts.as_str()],
            "--hosts places the processes of a generated tree, and --check generates none: leave \
             --hosts out",
        ),
        (
            vec!["--fe-host", "bad host", "--check", ok.as_str()],
            "--fe-host places the processes",
        ),
        (
            vec!["--check", ok.as_str(), "--be-hosts", "/nonexistent"],
            "--be-hosts places the processes",
        ),
        (
            vec!["--fe-host", "a", "--fe-host", "b", "g:2"],
            "the argument '--fe-host <HOST>' cannot be used multiple times",
        ),
        (
            vec!["--check", ok.as_str(), "--check", ok.as_str()],
            "the argument '--check <FILE>' cannot be used multiple times",
        ),
        (
            vec!["--hosts", hosts.as_str(), "--hosts", hosts.as_str(), "g:2"],
            "the argument '--hosts <FILE>' cannot be used multiple times",
        ),
        (vec!["--fe-host", "bad host", "g:2"], "bad host"),
        (
            vec!["--check", ok.as_str(), "a", "b"],
            "--check takes one file and at most an OUTPUT",
        ),
    ] {
        let o = topgen(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?}, got {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = topgen(&["--check", &ok, "--stats"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_quoting_a_file_stay_one_line_without_raw_bytes() {
    let dir = std::env::temp_dir().join(format!("topgen-raw-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    for (name, body, want) in [
        (
            "esc.top",
            "fe:0 => \u{1b}[2Jbe:0 ;\n",
            "found '\\u{1b}[2Jbe:0'",
        ),
        (
            "nul.top",
            "fe:0 => be:0 ;\n\0x ;\n",
            ":2: expected a process",
        ),
    ] {
        let p = dir.join(name);
        let _ = std::fs::write(&p, body);
        let o = topgen(&["--check", &p.to_string_lossy()]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(want), "{name}: want {want:?}, got {err:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err:?}");
        assert!(
            !err.trim_end().chars().any(char::is_control),
            "{name}: {err:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stdout_that_cannot_be_written_is_an_error_not_a_panic() {
    // `println!` of the help panicked on /dev/full.
    for args in [vec!["--help"], vec!["g:2"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
        let full = match full {
            Ok(f) => f,
            Err(e) => panic!("/dev/full: {e}"),
        };
        let o = Command::new(TOPGEN)
            .args(&args)
            .stdout(std::process::Stdio::from(full))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {TOPGEN}: {e}"));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("topgen: cannot write "), "{args:?}: {err}");
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    let o = topgen(&["--help"]);
    assert!(o.status.success());
    let help = text(&o.stdout);
    assert!(
        help.contains("Usage: topgen [OPTIONS] SPEC [OUTPUT]"),
        "{help}"
    );
    assert!(help.contains("at most 1048576 processes"), "{help}");
}
