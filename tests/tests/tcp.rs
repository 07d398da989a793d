//! The conformance suite on the TCP layer, every job started by charmrun.

conformance::conformance_suite!(conformance::Launcher::Charmrun {
    machine: "tcp",
    opts: vec![]
});
