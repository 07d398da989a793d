//! SMP mode: the conformance suite on every layer with 2 and 4 PEs per process, and what is
//! particular to several PEs per process (node messages, pinning, a long handler on UDP).

mod local_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Direct { machine: "local" },
        ppn = 2
    );
}

mod local_ppn4 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Direct { machine: "local" },
        ppn = 4
    );
}

mod tcp_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "tcp",
            opts: vec![]
        },
        ppn = 2
    );
}

mod tcp_ppn4 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "tcp",
            opts: vec![]
        },
        ppn = 4
    );
}

mod udp_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "udp",
            opts: vec![]
        },
        ppn = 2
    );
}

mod udp_ppn4 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "udp",
            opts: vec![]
        },
        ppn = 4
    );
}

mod si_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "si",
            opts: vec![]
        },
        ppn = 2
    );
}

mod si_ppn4 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "si",
            opts: vec![]
        },
        ppn = 4
    );
}
