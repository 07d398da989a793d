//! The conformance suite on the UCX layers this host can run: `ucx+tcp` (TCP sockets) and
//! `ucx+shm` (shared memory), every job started by charmrun, with one PE per process and in
//! SMP mode (`++ppn 2`). Only with the `ucx` feature (`--features ucx`), which needs UCX.

#![cfg(feature = "ucx")]

mod tcp {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ucx+tcp",
        opts: vec![]
    });
}

mod shm {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ucx+shm",
        opts: vec![]
    });
}

mod tcp_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "ucx+tcp",
            opts: vec![]
        },
        ppn = 2
    );
}

mod shm_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "ucx+shm",
            opts: vec![]
        },
        ppn = 2
    );
}
