//! The conformance suite on the in-process layer.

converse_tests::conformance_suite!(converse_tests::Launcher::Direct { machine: "local" });

/// A contribution of the wrong length to a reduction of `ops` (issue 30, item 6): the sum came
/// out wrong with exit 0; the job now ends non-zero in one line naming the PEs and lengths.
mod reduce_mismatch {
    use converse_tests::run_bounded;
    use std::process::Command;
    use std::time::Duration;

    const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

    #[test]
    fn a_u32_in_a_u64_sum_ends_the_job_naming_the_pes_and_lengths() {
        for extra in [&[][..], &["+ppn", "2"]] {
            let o = run_bounded(
                Command::new(PROGRAM)
                    .args(["reduce-mismatch", "+p4"])
                    .args(extra),
                Duration::from_secs(30),
            );
            assert_eq!(o.code, Some(1), "{extra:?}: {o}");
            assert_eq!(o.lines_with("FAILED"), 0, "no sum may come out: {o}");
            assert!(
                o.stderr.contains("PE 3's contribution is 4 bytes where PE")
                    && o.stderr.contains("holds 8"),
                "{extra:?}: {o}"
            );
        }
    }
}
