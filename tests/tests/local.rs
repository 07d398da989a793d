//! The conformance suite on the in-process layer.

conformance::conformance_suite!(conformance::Launcher::Direct { machine: "local" });
