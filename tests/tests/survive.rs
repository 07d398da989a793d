//! Report mode (`+set faults=report`): a job that survives a node's death, on every layer
//! that can (`conformance survive`, see its table). Each job is bounded in time; the victim
//! dies in every way a node can: it exits, is killed, stops (silent), or is killed from
//! outside. Without report mode the same death still ends the job, naming the node.

use converse_tests::{Launcher, Outcome};
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

/// Longest a job may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Run `conformance survive VICTIM HOW` on `pes` PEs in report mode, with charmrun options.
fn survive(launcher: &Launcher, pes: usize, victim: usize, how: &str) -> Outcome {
    let victim = victim.to_string();
    launcher.run(
        PROGRAM,
        pes,
        // Branching 2: the victim has children in the spanning trees the broadcasts after
        // its death take.
        &[
            "survive",
            &victim,
            how,
            "+set",
            "faults=report",
            "+set",
            "tree.branching=2",
        ],
        LIMIT,
    )
}

/// The job went on without the victim's node and ended well; every survivor was told, once.
fn assert_survived(o: &Outcome, survivors: usize, dead_node: usize, cause: &str) {
    assert_eq!(o.code, Some(0), "the job survives: {o:?}");
    assert_eq!(
        o.lines_with("conformance survive: ok"),
        1,
        "PE 0's verdict: {o:?}"
    );
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("survive: PE") && l.contains("died: "))
        .collect();
    assert_eq!(lines.len(), survivors, "every survivor told once: {o:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(&format!("told node {dead_node} died"))),
        "{lines:?}"
    );
    assert!(
        o.stderr.contains("the job goes on without it") && o.stderr.contains(cause),
        "charmrun names the death and its cause ({cause}): {o:?}"
    );
}

macro_rules! survive_suite {
    ($layer:literal, $($opt:literal),*) => {
        fn charmrun(ppn: usize) -> Launcher {
            let inner = Launcher::Charmrun {
                machine: $layer,
                opts: vec![$($opt.to_string()),*],
            };
            if ppn == 1 {
                inner
            } else {
                Launcher::Smp { inner: Box::new(inner), ppn }
            }
        }

        #[test]
        fn a_node_that_exits_is_reported_and_the_job_goes_on() {
            for _ in 0..3 {
                let o = survive(&charmrun(1), 4, 2, "exit");
                assert_survived(&o, 3, 2, "exited with code 3");
            }
        }

        #[test]
        fn a_killed_node_is_reported_and_the_job_goes_on() {
            for _ in 0..3 {
                let o = survive(&charmrun(1), 4, 1, "kill");
                assert_survived(&o, 3, 1, "killed by signal 9");
            }
        }

        #[test]
        fn a_stopped_node_is_ended_and_reported() {
            let mut l = charmrun(1);
            if let Launcher::Charmrun { opts, .. } = &mut l {
                opts.extend(["++hang-timeout".to_string(), "3".to_string()]);
            }
            let o = survive(&l, 4, 1, "stop");
            assert_survived(&o, 3, 1, "sent nothing");
        }

        #[test]
        fn a_node_of_several_pes_dies_with_them_all() {
            let o = survive(&charmrun(2), 8, 2, "kill");
            // Node 1 (PEs 2 and 3) is gone; the six PEs of the other nodes are told.
            assert_survived(&o, 6, 1, "killed by signal 9");
        }

        #[test]
        fn without_report_mode_a_death_still_ends_the_job() {
            let o = charmrun(1).run(PROGRAM, 4, &["survive", "2", "kill"], LIMIT);
            assert_ne!(o.code, Some(0), "{o:?}");
            assert!(!o.timed_out, "{o:?}");
            assert!(
                o.stderr.contains("PE 2") && o.stderr.contains("ending the job"),
                "named: {o:?}"
            );
        }

        #[test]
        fn a_malformed_faults_setting_is_refused() {
            let o = charmrun(1).run(
                PROGRAM,
                2,
                &["hello", "+set", "faults=sometimes"],
                LIMIT,
            );
            assert_ne!(o.code, Some(0), "{o:?}");
            assert!(o.stderr.contains("faults"), "{o:?}");
        }
    };
}

mod tcp {
    use super::*;
    survive_suite!("tcp",);
}

mod udp {
    use super::*;
    survive_suite!("udp",);

    /// No hang timeout at charmrun: the layer itself finds the stopped peer silent (data is
    /// outstanding toward it), reports it, and tells charmrun, which ends it.
    #[test]
    fn a_peer_the_layer_finds_silent_is_reported() {
        let o = charmrun(1).run(
            PROGRAM,
            4,
            &[
                "survive",
                "1",
                "stop",
                "+set",
                "faults=report",
                "+set",
                "udp.dead_after_s=2",
            ],
            LIMIT,
        );
        assert_survived(&o, 3, 1, "udp.dead_after_s");
    }
}

mod si {
    use super::*;
    survive_suite!("si",);
}

mod si_tcp {
    use super::*;
    survive_suite!("si+tcp",);
}

#[cfg(feature = "ucx")]
mod ucx_tcp {
    use super::*;
    survive_suite!("ucx+tcp",);
}

#[cfg(feature = "ucx")]
mod ucx_shm {
    use super::*;
    survive_suite!("ucx+shm",);
}
