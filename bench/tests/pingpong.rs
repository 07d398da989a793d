//! `bench pingpong`'s options, checked from outside. `--rounds N`: the figures are medians
//! over the rounds (one CSV row per path and size, not one per round), each round's ratio to
//! raw is printed per size, and a count of rounds that is not a positive number is refused in
//! one line. `--layer mpi` in a bench built without MPI is refused before any job starts.

mod run;
use run::{bench, bench_status, dir};

#[test]
fn rounds_print_one_ratio_line_per_size_and_one_csv_row_per_path() {
    let d = dir("rounds");
    let csv = d.join("pp.csv");
    let csv_arg = csv.to_string_lossy().into_owned();
    let out = bench(
        &[
            "pingpong", "--layer", "local", "--sizes", "8,4096", "--iters", "200", "--rounds", "3",
            "--csv", &csv_arg,
        ],
        120,
    );
    assert!(
        out.contains("median (lowest-highest) over 3 rounds"),
        "no ratio table in:\n{out}"
    );
    assert!(out.contains("the median over 3 rounds"), "{out}");
    let after = out
        .split("over 3 rounds:")
        .nth(1)
        .expect("the ratio table's title");
    for size in ["8", "4096"] {
        let line = after
            .lines()
            .find(|l| l.split('|').next().map(str::trim) == Some(size))
            .unwrap_or_else(|| panic!("no ratio line for {size} B in:\n{out}"));
        // "runtime" has a median and its range; local has no layer-alone series.
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 3, "{line}");
        let (med, range) = cells[1].split_once(' ').expect("median and range");
        let med: f64 = med.parse().expect("a ratio");
        let (lo, hi) = range
            .trim_matches(|c| c == '(' || c == ')')
            .split_once('-')
            .expect("a range");
        let (lo, hi): (f64, f64) = (lo.parse().expect("low"), hi.parse().expect("high"));
        assert!(lo <= med && med <= hi && lo > 0.0, "{line}");
        assert_eq!(cells[2], "-", "{line}");
    }
    let text = std::fs::read_to_string(&csv).expect("the CSV was written");
    let rows: Vec<&str> = text.lines().skip(1).collect();
    for what in ["local", "raw-crossbeam"] {
        for size in ["8", "4096"] {
            let n = rows
                .iter()
                .filter(|r| r.starts_with(&format!("{what},{size},")))
                .count();
            assert_eq!(n, 1, "{what} at {size} B: {n} rows in\n{text}");
            // The count is every round's timed round trips together.
            let row = rows
                .iter()
                .find(|r| r.starts_with(&format!("{what},{size},")))
                .expect("the row");
            assert_eq!(row.split(',').nth(2), Some("600"), "{row}");
        }
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn rounds_that_are_not_a_positive_count_are_refused_in_one_line() {
    for bad in ["0", "-1", "x"] {
        let joined = format!("--rounds={bad}");
        for args in [vec!["--rounds", bad], vec![joined.as_str()]] {
            refused(&args, bad);
        }
    }
}

/// `bench pingpong --layer local --iters 10` with `rounds_args` fails before measuring, and its
/// error's first line names `--rounds`.
fn refused(rounds_args: &[&str], bad: &str) {
    let mut args = vec!["pingpong", "--layer", "local", "--iters", "10"];
    args.extend_from_slice(rounds_args);
    let (status, out, err) = bench_status(&args, 60);
    assert!(!status.success(), "--rounds {bad} accepted: {out}");
    assert!(out.is_empty(), "--rounds {bad} measured something: {out}");
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.contains("--rounds"),
        "--rounds {bad}: the error does not name the option: {err}"
    );
}

#[cfg(not(feature = "mpi"))]
#[test]
fn the_mpi_layer_in_a_bench_without_mpi_is_refused_in_one_line() {
    let (status, out, err) = bench_status(&["pingpong", "--layer", "mpi", "--iters", "10"], 60);
    assert!(!status.success(), "accepted: {out}");
    assert!(out.is_empty(), "measured something: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--features mpi"), "{err}");
}
