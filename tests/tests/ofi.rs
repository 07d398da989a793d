//! The conformance suite on the libfabric layer, every job started by charmrun: over the tcp
//! provider under rxm (`ofi+tcp`, also at `++ppn 2`), over the shared-memory provider
//! (`ofi+shm`) and over the udp provider under rxd (`ofi+udp`); the contract check in one
//! process; and what is particular to it. Compiled only with the `ofi` feature (libfabric
//! installed): `cargo test --release -p converse-tests --features ofi --test ofi`.

#![cfg(feature = "ofi")]

mod tcp {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ofi+tcp",
        opts: vec![]
    });

    converse_tests::launched_layer_limits!("ofi+tcp");
}

/// SMP mode: the communication thread owns the endpoint; workers ring its eventfd.
mod tcp_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "ofi+tcp",
            opts: vec![]
        },
        ppn = 2
    );
}

mod shm {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ofi+shm",
        opts: vec![]
    });
}

mod shm_ppn2 {
    converse_tests::conformance_suite!(
        converse_tests::Launcher::Charmrun {
            machine: "ofi+shm",
            opts: vec![]
        },
        ppn = 2
    );
}

mod udp {
    converse_tests::conformance_suite!(converse_tests::Launcher::Charmrun {
        machine: "ofi+udp",
        opts: vec![]
    });
}
