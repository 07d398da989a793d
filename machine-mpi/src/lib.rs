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

/// Wire bytes from which a message is received by probe, not into a pre-posted receive: the
/// largest `mpi.small_bytes` is one below.
pub(crate) const LARGE: usize = 64 << 10;

/// `mpi.piece_bytes`: MPI counts are `int`.
pub(crate) const PIECE_BYTES: converse_machine::SettingSpec = converse_machine::SettingSpec::whole(
    "mpi.piece_bytes",
    1 << 30,
    4096,
    i32::MAX as u64,
    "largest single MPI message, bytes; larger ones go in pieces",
);

/// `mpi.small_bytes`: by default everything below [`LARGE`] lands in pre-posted receives. Past
/// Open MPI's shared-memory eager limit (4 KiB) a message still lands whole in a posted
/// buffer, by its single-copy path. Measured (issue 19): with the limit at 8 KiB, 32 KiB
/// messages went by notice and probe and were 6% slower than when all were probed; the
/// notice is cheap only against a large message's own time.
pub(crate) const SMALL_BYTES: converse_machine::SettingSpec = converse_machine::SettingSpec::whole(
    "mpi.small_bytes",
    LARGE as u64 - 1,
    converse_machine::ENVELOPE_LEN as u64,
    LARGE as u64,
    "largest message (wire bytes) received into pre-posted receives; larger ones are received \
     by probe (the job uses its smallest)",
);

/// `mpi.prepost`: more than a round of messages from a few peers; a burst past it waits in
/// MPI's unexpected queue and still arrives in order.
pub(crate) const PREPOST: converse_machine::SettingSpec = converse_machine::SettingSpec::whole(
    "mpi.prepost",
    32,
    1,
    4096,
    "receives kept posted for small messages",
);

/// `mpi.window`: measured (4 ranks on 2 cores, a million messages all-to-all): 64 takes
/// 0.7 s, 1024 1.7 s, 4096 5.9 s — a deep window only piles sends into Open MPI's pending
/// list, which each progress call walks.
pub(crate) const WINDOW: converse_machine::SettingSpec = converse_machine::SettingSpec::whole(
    "mpi.window",
    64,
    4,
    32768,
    "messages in flight per peer before the sender waits for credit",
);

/// The `mpi.*` settings; declared in every build so that a variant file naming them is
/// checked even where the layer is not compiled in.
pub const SETTINGS: &[converse_machine::SettingSpec] = &[PIECE_BYTES, SMALL_BYTES, PREPOST, WINDOW];

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
