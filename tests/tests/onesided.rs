//! One-sided transfers (`Pe::get`, `Pe::put`, regions) on whole jobs, on every layer and at
//! `++ppn 2`: the scenarios of the `onesided` test program (its docs say what each checks).

use converse_tests::{Launcher, Outcome};
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_onesided");

fn charmrun(machine: &'static str, ppn: usize) -> Launcher {
    Launcher::Charmrun {
        machine,
        opts: vec![],
    }
    .with_ppn(ppn)
}

fn every_pe_ok(l: &Launcher, scenario: &str, pes: usize) -> Outcome {
    l.expect_every_pe_ok(PROGRAM, "onesided", scenario, pes)
}

#[test]
fn gets_puts_ranges_ordering_and_errors_in_one_process() {
    every_pe_ok(&Launcher::Direct { machine: "local" }, "basics", 4);
}

#[test]
fn gets_puts_ranges_ordering_and_errors_over_tcp_and_udp() {
    every_pe_ok(&charmrun("tcp", 1), "basics", 4);
    every_pe_ok(&charmrun("udp", 1), "basics", 3);
}

#[test]
fn gets_puts_ranges_ordering_and_errors_over_shared_memory_and_smp() {
    every_pe_ok(&charmrun("si", 1), "basics", 4);
    every_pe_ok(&charmrun("si", 2), "basics", 4);
    every_pe_ok(&charmrun("tcp", 2), "basics", 4);
    every_pe_ok(&charmrun("si+tcp", 1), "basics", 3);
}

#[test]
fn transfers_of_64_mib_arrive_whole() {
    for l in [charmrun("si", 1), charmrun("tcp", 1)] {
        let o = l.run(PROGRAM, 2, &["big", "67108864"], Duration::from_secs(120));
        assert!(
            o.code == Some(0) && o.lines_with("onesided big: PE 0 ok") == 1,
            "{l:?}:\n{o}"
        );
    }
}

#[test]
fn transfers_on_a_dying_pes_region_fail_with_its_death() {
    for l in [charmrun("tcp", 1), charmrun("si", 1)] {
        let o = l.run(
            PROGRAM,
            3,
            &["die", "+set", "faults=report"],
            Duration::from_secs(60),
        );
        assert!(
            o.code == Some(0) && o.lines_with("onesided die: ok") == 1,
            "{l:?}:\n{o}"
        );
    }
}

/// The runtime's example: a block matrix transpose by get and by put, checked by every PE
/// against the serial transpose (built by `cargo test --workspace`, or `cargo build --release
/// -p converse --examples`).
#[test]
fn the_transpose_example_matches_the_serial_transpose() {
    let ex = std::path::Path::new(PROGRAM)
        .with_file_name("examples")
        .join("transpose");
    assert!(
        ex.exists(),
        "{} is not built: run `cargo build --release -p converse --examples`",
        ex.display()
    );
    let ex = ex.to_string_lossy().into_owned();
    for (l, pes) in [
        (Launcher::Direct { machine: "local" }, 4),
        (charmrun("tcp", 1), 3),
        (charmrun("si", 2), 4),
    ] {
        for mode in ["get", "put"] {
            let o = l.run(&ex, pes, &["384", mode], Duration::from_secs(120));
            assert!(
                o.code == Some(0)
                    && o.lines_with(&format!("by {mode}: matches the serial transpose")) == 1
                    && (0..pes).all(|p| o.lines_with(&format!("transpose: PE {p} ok")) == 1),
                "{mode} via {l:?}:\n{o}"
            );
        }
    }
}
