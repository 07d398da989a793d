//! The tree overlay's failure recovery on whole jobs (`tbon_recover`, which see): a front-end
//! makes a 4x8 network and kills processes during a stream of waves, 20 networks per test
//! (each check inside the program: every orphan re-parented, every wave sent after recovery
//! whole over the surviving back-ends, the events, the topology and its DOT form). Each run
//! is bounded in time and its process group killed. The same suite on tcp, si and udp.

use converse_tests::run_bounded;
use std::process::Command;
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_tbon_recover");

/// Networks per test.
const ROUNDS: &str = "20";

/// Run `tbon_recover SCENARIO ROUNDS LAYER` and require its "ok".
fn rounds(scenario: &str, layer: &str) {
    rounds_of(scenario, layer, ROUNDS);
}

/// As [`rounds`], `n` networks.
fn rounds_of(scenario: &str, layer: &str, n: &str) {
    // The overlay's filter library (built with the workspace's examples), for `state`.
    let filters = std::path::Path::new(PROGRAM)
        .with_file_name("examples")
        .join("libtbon_filters.so");
    assert!(
        scenario != "state" || filters.exists(),
        "{} is not built: run `cargo build --release -p converse-tbon --examples` (or test the \
         whole workspace)",
        filters.display()
    );
    let o = run_bounded(
        Command::new(PROGRAM)
            .args([scenario, n, layer])
            .env("TBON_RECOVER_FILTERS", &filters),
        Duration::from_secs(300),
    );
    assert!(!o.timed_out, "{scenario} on {layer}: timed out\n{o}");
    assert_eq!(o.code, Some(0), "{scenario} on {layer}\n{o}");
    assert_eq!(o.lines_with("tbon_recover: ok"), 1, "{o}");
}

macro_rules! recovery_suite {
    ($layer:literal $(, $ignore:meta)?) => {
        #[test]
        $(#[$ignore])?
        fn an_internal_process_killed_during_waves() {
            super::rounds("internal", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn two_internal_processes_killed_at_once() {
            super::rounds("two", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn an_internal_process_with_internal_children_killed() {
            super::rounds("deep", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn a_process_and_its_child_killed_at_once() {
            super::rounds("chain", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn an_internal_process_killed_while_back_ends_stream_waves_up() {
            super::rounds("streamed", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn a_back_end_killed_is_an_event_and_the_stream_goes_on() {
            super::rounds("backend", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn an_internal_process_killed_while_a_stream_is_made() {
            super::rounds("newstream", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn a_wait_on_a_dead_back_ends_singlecast_stream_ends() {
            super::rounds("singlecast", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn singlecast_packets_held_by_a_dying_parent_arrive_once_in_order() {
            super::rounds("singlelost", $layer);
        }

        #[test]
        $(#[$ignore])?
        fn a_running_total_is_exact_after_recovery_through_exported_filter_state() {
            // 31 processes a network: 12 of them (each victim level 6 times).
            super::rounds_of("state", $layer, "12");
        }

        #[test]
        $(#[$ignore])?
        fn recovery_off_tells_the_front_end_and_nothing_hangs() {
            super::rounds("off", $layer);
        }

        /// Without opt-in (no recovery, no report mode) a death still ends the job, named
        /// (on every layer, report mode or not).
        #[test]
        fn without_opt_in_a_death_ends_the_job_as_before() {
            // The front-end dies with its job: its pid files go where the test removes them.
            let tmp = std::env::temp_dir().join(format!(
                "tbon_recover_noopt.{}.{}",
                $layer,
                std::process::id()
            ));
            for _ in 0..20 {
                let o = super::run_bounded(
                    super::Command::new(super::PROGRAM)
                        .args(["noopt", "1", $layer])
                        .env("TBON_RECOVER_TMP", &tmp),
                    super::Duration::from_secs(60),
                );
                let _ = std::fs::remove_dir_all(&tmp);
                assert!(!o.timed_out, "{o}");
                assert!(o.code.is_some_and(|c| c != 0), "{o}");
                // The front-end's layer or charmrun, whichever sees it first, ends the job.
                assert!(
                    o.stderr.contains("aborting the job") || o.stderr.contains("ending the job"),
                    "{o}"
                );
                assert!(
                    o.stderr.contains("node 1") || o.stderr.contains("PE 1 "),
                    "names the dead node: {o}"
                );
                assert_eq!(o.lines_with("tbon_recover: ok"), 0, "{o}");
            }
        }
    };
}

mod tcp {
    recovery_suite!("tcp");
}

mod si {
    recovery_suite!("si");
}

mod udp {
    recovery_suite!("udp");
}
