//! Tasks, calls with replies and their failures (`converse-tasks`) on whole jobs: the
//! scenarios of `src/bin/tasks.rs` on the in-process layer and under charmrun on TCP, UDP,
//! shared memory and si+tcp, at `++ppn 1` and `2`: tasks, calls, quiescence after a storm,
//! calls to a PE that dies; the MPI layer's runs are in tests/mpi.rs.

use converse_tests::{Launcher, Outcome};
use std::time::Duration;

/// The scenario binary.
const TASKS: &str = env!("CARGO_BIN_EXE_tasks");

fn charmrun(machine: &'static str, ppn: usize) -> Launcher {
    Launcher::Charmrun {
        machine,
        opts: vec![],
    }
    .with_ppn(ppn)
}

/// Run `scenario` on `pes` PEs; every PE says it is fine, and the job exits 0.
fn every_pe_ok(l: &Launcher, scenario: &str, pes: usize) -> Outcome {
    l.expect_every_pe_ok(TASKS, "tasks", scenario, pes)
}

/// A call to a PE whose process dies (report mode) fails with `PeDied` naming it; one made
/// after fails at once; the job goes on and ends 0.
fn calls_fail_on_death(l: &Launcher) {
    let o = l.run(
        TASKS,
        4,
        &["die", "+set", "faults=report"],
        Duration::from_secs(120),
    );
    assert!(
        o.code == Some(0) && o.lines_with("tasks die: ok") == 1,
        "die via {l:?}:\n{o}"
    );
}

#[test]
fn tasks_yield_sleep_share_a_mutex_join_and_abort_in_process() {
    every_pe_ok(&Launcher::Direct { machine: "local" }, "basics", 4);
}

#[test]
fn quiescence_is_detected_after_a_storm_and_not_before_in_process() {
    every_pe_ok(&Launcher::Direct { machine: "local" }, "qd", 5);
}

#[test]
fn a_sleeping_task_keeps_the_job_from_quiescence_even_on_one_pe() {
    every_pe_ok(&Launcher::Direct { machine: "local" }, "qdsleep", 1);
    every_pe_ok(&Launcher::Direct { machine: "local" }, "qdsleep", 3);
    every_pe_ok(&charmrun("tcp", 1), "qdsleep", 2);
}

#[test]
fn calls_get_their_own_replies_in_process() {
    every_pe_ok(&Launcher::Direct { machine: "local" }, "calls", 4);
}

macro_rules! layer_tests {
    ($name:ident, $machine:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn tasks_yield_sleep_share_a_mutex_join_and_abort() {
                every_pe_ok(&charmrun($machine, 1), "basics", 3);
            }

            #[test]
            fn calls_get_their_own_replies_and_late_ones_are_dropped() {
                every_pe_ok(&charmrun($machine, 1), "calls", 3);
            }

            #[test]
            fn calls_get_their_own_replies_at_ppn_2() {
                every_pe_ok(&charmrun($machine, 2), "calls", 4);
            }

            #[test]
            fn quiescence_is_detected_after_a_storm_and_not_before() {
                every_pe_ok(&charmrun($machine, 1), "qd", 4);
            }

            #[test]
            fn quiescence_is_detected_after_a_storm_at_ppn_2() {
                every_pe_ok(&charmrun($machine, 2), "qd", 6);
            }

            #[test]
            fn seeds_run_once_each_and_move_under_every_balancer() {
                seeds_under_every_balancer(&charmrun($machine, 1), 3);
            }

            #[test]
            fn a_call_to_a_pe_that_dies_fails_naming_it() {
                calls_fail_on_death(&charmrun($machine, 1));
            }
        }
    };
}

layer_tests!(tcp, "tcp");
layer_tests!(udp, "udp");
layer_tests!(si, "si");
layer_tests!(si_tcp, "si+tcp");

#[test]
fn a_call_to_a_node_that_dies_fails_at_ppn_2() {
    calls_fail_on_death(&charmrun("tcp", 2));
}

#[test]
fn a_nodes_shared_pool_is_run_by_its_pes_each_piece_once() {
    every_pe_ok(&charmrun("tcp", 1), "shared", 2);
    every_pe_ok(&charmrun("tcp", 2), "shared", 4);
    every_pe_ok(
        &Launcher::Direct { machine: "local" }.with_ppn(3),
        "shared",
        3,
    );
}

/// The `seeds-B` scenario for each balancer: every seed runs once; `keep` leaves them all on
/// PE 0, the others move some; quiescence is detected, so stealing ends.
fn seeds_under_every_balancer(l: &Launcher, pes: usize) {
    for b in ["keep", "random", "neighbor", "steal"] {
        every_pe_ok(l, &format!("seeds-{b}"), pes);
    }
}

#[test]
fn seeds_run_once_each_and_move_in_process_and_at_ppn_2() {
    seeds_under_every_balancer(&Launcher::Direct { machine: "local" }, 4);
    seeds_under_every_balancer(&charmrun("si", 2), 4);
    seeds_under_every_balancer(&charmrun("tcp", 2), 4);
}

#[test]
fn tasks_at_ppn_2_on_shared_memory() {
    every_pe_ok(&charmrun("si", 2), "basics", 4);
}

/// The crate's example: Fibonacci by calls between tasks, ended by quiescence, checked
/// against a serial computation (built by `cargo test --workspace`, or
/// `cargo build --release -p converse-tasks --examples`).
#[test]
fn the_fibonacci_example_matches_the_serial_computation() {
    let fib = std::path::Path::new(TASKS)
        .with_file_name("examples")
        .join("fib");
    assert!(
        fib.exists(),
        "{} is not built: run `cargo build --release -p converse-tasks --examples`",
        fib.display()
    );
    let fib = fib.to_string_lossy().into_owned();
    for l in [
        Launcher::Direct { machine: "local" },
        charmrun("tcp", 1),
        charmrun("si", 2),
    ] {
        let o = l.run(&fib, 4, &["20"], Duration::from_secs(120));
        assert!(
            o.code == Some(0) && o.lines_with("fib(20) = 6765, as computed serially: ok") == 1,
            "fib via {l:?}:\n{o}"
        );
    }
}

/// The crate's client/server example: calls, a reply kept until a key is put, a timeout that
/// runs out, and the end by quiescence.
#[test]
fn the_key_value_example_answers_waiting_gets_and_times_out_a_missing_key() {
    let kv = std::path::Path::new(TASKS)
        .with_file_name("examples")
        .join("kvstore");
    assert!(
        kv.exists(),
        "{} is not built: run `cargo build --release -p converse-tasks --examples`",
        kv.display()
    );
    let kv = kv.to_string_lossy().into_owned();
    for l in [
        Launcher::Direct { machine: "local" },
        charmrun("tcp", 1),
        charmrun("si", 2),
    ] {
        let o = l.run(&kv, 4, &[], Duration::from_secs(120));
        assert!(
            o.code == Some(0)
                && o.lines_with("kvstore: 3 clients ok") == 1
                && o.lines_with("missing key timed out: ok") == 3,
            "kvstore via {l:?}:\n{o}"
        );
    }
}
