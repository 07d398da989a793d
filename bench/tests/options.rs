//! Out-of-range values of bench's options are refused before anything is measured, in one
//! line naming the option, never clamped to a value the user did not ask for.

// Shared by bench's test files; this one needs only `bench_status`.
#[allow(dead_code)]
mod run;

use run::bench_status;

#[test]
fn out_of_range_values_are_refused_in_one_line_naming_the_option() {
    let cases: &[(&[&str], &str)] = &[
        (&["pingpong", "--iters", "0"], "--iters"),
        (&["pingpong", "--iters", "-1"], "--iters"),
        (&["pingpong", "--sizes", "8,100000000000"], "--sizes"),
        (&["pingpong", "--sizes", "18446744073709551615"], "--sizes"),
        (&["rate", "--messages", "0"], "--messages"),
        (&["idle", "--secs", "0"], "--secs"),
        (&["idle", "--secs", "inf"], "--secs"),
        (&["idle", "--secs", "nan"], "--secs"),
        (&["idle", "--ppn", "0"], "--ppn"),
        (&["tbon", "--rounds", "5"], "--rounds"),
        (&["tbon", "--kill", "1", "--waves", "10"], "--waves"),
        (&["topo", "--pes", "0"], "--pes"),
        (&["smp", "--ks", "0"], "--ks"),
        (&["pingpong", "--no-such-option"], "--no-such-option"),
    ];
    for (args, option) in cases {
        let (status, out, err) = bench_status(args, 60);
        assert!(!status.success(), "{args:?} accepted: {out}");
        assert!(out.is_empty(), "{args:?} measured something: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(option),
            "{args:?}: the error does not name {option}: {err}"
        );
        assert!(err.starts_with("bench: error:"), "{args:?}: {err}");
    }
}

#[test]
fn help_is_printed_on_stdout_with_success() {
    let (status, out, _) = bench_status(&["pingpong", "--help"], 60);
    assert!(status.success());
    assert!(out.contains("--rounds"), "{out}");
}
