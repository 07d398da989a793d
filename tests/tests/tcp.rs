//! The conformance suite on the TCP layer, every job started by charmrun.

converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
    machine: "tcp",
    opts: vec![]
});

/// 128 nodes connect to each other at once: none of the job's own connections may be taken
/// for a stranger's and closed (they were, beyond 64 pending, before the limit counted peers).
#[test]
fn a_128_node_all_to_all_completes() {
    let launcher = converse_tests::Launcher::Charmrun {
        machine: "tcp",
        opts: vec![],
    };
    converse_tests::expect_ok(
        &launcher,
        env!("CARGO_BIN_EXE_conformance"),
        128,
        &["alltoall", "200000"],
    );
}

/// A receiver that stops polling does not make its sender grow without limit.
#[test]
fn memory_toward_a_stalled_peer_is_bounded() {
    converse_tests::expect_bounded_flood(
        &converse_tests::Launcher::Charmrun {
            machine: "tcp",
            opts: vec![],
        },
        env!("CARGO_BIN_EXE_conformance"),
    );
}
