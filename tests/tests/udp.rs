//! The conformance suite on the UDP layer, every job started by charmrun.

conformance::conformance_suite!(conformance::Launcher::Charmrun {
    machine: "udp",
    opts: vec![]
});
