//! The conformance suite on the TCP layer, every job started by charmrun.

converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
    machine: "tcp",
    opts: vec![]
});

converse_tests::launched_layer_limits!("tcp");
