//! The machine layer on MPI (through rsmpi), started by `mpirun`/`mpiexec`: node = rank.
//!
//! Compiled only with the `mpi` feature (which needs an MPI library and libclang to build); a
//! default build of the workspace has none of it and needs no MPI. See this crate's README.md
//! for the design, what it was tested with and how to run it.
//!
//! ```text
//! cargo run -p conv-mach -- build mpi
//! mpirun -n 4 target/mpi/release/examples/hello
//! ```

pub mod launcher_env;

#[cfg(feature = "mpi")]
mod layer;
// Needs no MPI: its tests run in every build.
#[cfg(any(feature = "mpi", test))]
mod order;
#[cfg(feature = "mpi")]
mod prepost;
#[cfg(feature = "mpi")]
mod sends;
// Needs no MPI: its tests run in every build.
#[cfg(any(feature = "mpi", test))]
mod wake;

#[cfg(all(feature = "mpi", feature = "si"))]
pub mod pshm;

#[cfg(feature = "mpi")]
pub use layer::{boot, MpiMachine, LAYER};

/// The `mpi.*` settings; declared in every build so that a variant file naming them is
/// checked even where the layer is not compiled in.
pub const SETTINGS: &[converse_machine::SettingSpec] = &[
    converse_machine::SettingSpec {
        key: "mpi.piece_bytes",
        meaning: "largest single MPI message; larger ones go in pieces (default 1 GiB)",
    },
    converse_machine::SettingSpec {
        key: "mpi.small_bytes",
        meaning: "largest message (wire bytes) received into pre-posted receives; larger ones \
                  are received by probe (default 65535; the job uses its smallest)",
    },
    converse_machine::SettingSpec {
        key: "mpi.prepost",
        meaning: "receives kept posted for small messages (default 32)",
    },
    converse_machine::SettingSpec {
        key: "mpi.window",
        meaning: "messages in flight per peer before the sender waits for credit (default 64)",
    },
];

/// Turn an MPI return code into a result. With MPI's default error handler
/// (`MPI_ERRORS_ARE_FATAL`) a failing call never returns, so this matters only where a
/// program installed another handler.
#[cfg(feature = "mpi")]
fn mpi_call(what: &str, rc: std::os::raw::c_int) -> Result<(), converse_machine::MachineError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(converse_machine::MachineError::io(
            what,
            std::io::Error::other(format!("MPI error code {rc}")),
        ))
    }
}
