//! The conformance suite on the in-process layer.

converse_tests::conformance_suite!(converse_tests::Launcher::Direct { machine: "local" });
