//! Start-up of the MPI layer: the `mpi.*` settings, `MPI_Init_thread`, the checks against
//! the launcher and `+p`, the node table from every rank's host name, and the layer's own
//! communicators and pre-posted receives.

use super::{MpiMachine, NAP_MIN};
use crate::launcher_env;
use crate::mpi_call;
use crate::order::Order;
use crate::prepost::Prepost;
use crate::sends::InFlight;
use crate::wake::MpiWaker;
use converse_machine::{BootConfig, Machine, MachineError, NodeInfo, NodeTable, Settings};
use mpi::ffi;
use mpi::topology::Communicator;
use mpi::traits::CommunicatorCollectives;
use mpi::Threading;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Host names exchanged at boot are cut to this many bytes.
const HOST_LEN: usize = 64;

/// The layer's `mpi.*` settings, parsed and checked.
#[derive(Debug)]
pub(crate) struct MpiSettings {
    /// `mpi.piece_bytes`.
    piece: usize,
    /// `mpi.window`.
    window: u64,
    /// `mpi.small_bytes`.
    small: usize,
    /// `mpi.prepost`.
    prepost: usize,
}

impl MpiSettings {
    /// # Errors
    /// [`MachineError::Setting`] for a value that does not parse or is out of range.
    pub(crate) fn parse(s: &Settings) -> Result<MpiSettings, MachineError> {
        Ok(MpiSettings {
            piece: crate::PIECE_BYTES.read_whole(s)? as usize,
            window: crate::WINDOW.read_whole(s)?,
            small: crate::SMALL_BYTES.read_whole(s)? as usize,
            prepost: crate::PREPOST.read_whole(s)? as usize,
        })
    }
}

/// The refusal of report mode: MPI ends the whole job when a rank dies
/// (`MPI_ERRORS_ARE_FATAL`; ULFM is not portable), so a death cannot be reported.
pub(crate) fn refusal() -> MachineError {
    MachineError::Setting {
        key: converse_machine::FAULTS.into(),
        reason: "the mpi layer cannot survive a node's death (MPI ends the job); \
                 use tcp, udp or si for faults=report"
            .into(),
    }
}

/// [`refusal`] when `settings` ask for report mode: refused rather than ignored.
///
/// # Errors
/// [`MachineError::Setting`].
pub(crate) fn refuse_report_mode(settings: &Settings) -> Result<(), MachineError> {
    if settings.reports_deaths()? {
        return Err(refusal());
    }
    Ok(())
}

/// `MPI_Init_thread`, check what the launcher and the library give, build the node table from
/// every rank's host name.
///
/// # Errors
/// [`MachineError::Boot`] when MPI is already initialized, gives less than
/// `MPI_THREAD_FUNNELED`, disagrees with its launcher about the job size (a program built
/// against another MPI), or when `+p` disagrees with the number of ranks.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    refuse_report_mode(&cfg.settings)?;
    let settings = MpiSettings::parse(&cfg.settings)?;
    let (universe, table) = init(cfg)?;
    let me = universe.world().rank() as usize;
    match MpiMachine::start(me, table, settings) {
        Ok(mut m) => {
            m.universe = Some(universe);
            Ok(vec![Box::new(m)])
        }
        Err(e) => {
            // MPI_Finalize could wait for a rank that got further: leave without it.
            std::mem::forget(universe);
            Err(e)
        }
    }
}

/// `MPI_Init_thread` and the checks of [`boot`]: the universe (which finalizes MPI when
/// dropped) and the node table of every rank's host, with no addresses.
///
/// # Errors
/// As [`boot`].
pub(crate) fn init(
    cfg: &BootConfig,
) -> Result<(mpi::environment::Universe, NodeTable), MachineError> {
    let (universe, provided) = mpi::initialize_with_threading(Threading::Funneled)
        .ok_or_else(|| MachineError::Boot("MPI was already initialized".into()))?;
    match check_start(&universe, provided, cfg) {
        Ok(table) => {
            tracing::debug!(target: "mpi", rank = universe.world().rank(), nodes = table.num_nodes(), ?provided, "MPI initialized");
            Ok((universe, table))
        }
        Err(e) => {
            // Every rank sees the same checks fail, but MPI_Finalize could still wait for a
            // rank that got further: leave without it; mpirun sees the error exit.
            std::mem::forget(universe);
            Err(e)
        }
    }
}

impl MpiMachine {
    /// The layer's node `me` once MPI is up and `table` known: the job's smallest
    /// `mpi.small_bytes`, the layer's own communicators and pre-posted receives. Collective:
    /// every rank calls it. MPI is not finalized by the node unless it is given the universe
    /// or told to ([`MpiMachine::finalize_raw`]).
    ///
    /// # Errors
    /// [`MachineError::Io`] from MPI.
    pub(crate) fn start(
        me: usize,
        table: NodeTable,
        settings: MpiSettings,
    ) -> Result<MpiMachine, MachineError> {
        let MpiSettings {
            piece,
            window,
            small,
            prepost,
        } = settings;
        // SAFETY: reading MPI's predefined handles once MPI is initialized.
        let (world, byte) = unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_UINT8_T) };
        // A sender must not send a receiver more than its posted buffers hold (MPI would end
        // the job on the truncation): every rank takes the job's smallest setting.
        let mine = small as u64;
        let mut job_small = 0u64;
        // SAFETY: one u64 in, one out; the world communicator is valid while MPI is.
        mpi_call("MPI_Allreduce", unsafe {
            ffi::MPI_Allreduce(
                (&mine as *const u64).cast(),
                (&mut job_small as *mut u64).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_MIN,
                world,
            )
        })?;
        let small = job_small as usize;
        // Communicators of the layer's own: a program that also sends on MPI_COMM_WORLD
        // cannot have its messages taken by the layer's receives posted for any source
        // and tag, nor take the layer's.
        let comm = dup(world)?;
        let large = dup(world)?;
        let ring = Prepost::start(prepost, small, comm, byte)?;
        let n = table.num_nodes();
        Ok(MpiMachine {
            me,
            table,
            universe: None,
            finalize_raw: false,
            comm,
            large,
            byte,
            sends: InFlight::new(),
            small,
            ring,
            order: Order::new(n),
            piece,
            incoming: (0..n).map(|_| None).collect(),
            window,
            sent: vec![0; n],
            credit: vec![0; n],
            backlog: (0..n).map(|_| VecDeque::new()).collect(),
            backlog_bytes: vec![0; n],
            received: vec![0; n],
            reported: vec![0; n],
            nap: NAP_MIN,
            last_activity: Instant::now(),
            active: false,
            // The booting thread is the one FUNNELED lets call MPI: the one that naps.
            waker: Arc::new(MpiWaker::for_this_thread()),
        })
    }

    /// MPI was initialized without rsmpi's universe (by `si+mpi`'s session): `exit` finalizes
    /// it with `MPI_Finalize` once every rank is past its exit barrier.
    pub(crate) fn finalize_raw(&mut self) {
        self.finalize_raw = true;
    }
}

/// `MPI_Comm_dup` of `comm` (collective: every rank calls it, as every rank boots).
pub(crate) fn dup(comm: ffi::MPI_Comm) -> Result<ffi::MPI_Comm, MachineError> {
    // SAFETY: MPI_COMM_NULL is a predefined handle.
    let mut new = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `comm` is a valid communicator; `new` is a local out-parameter.
    mpi_call("MPI_Comm_dup", unsafe { ffi::MPI_Comm_dup(comm, &mut new) })?;
    Ok(new)
}

/// The checks of `boot` once MPI is up, and the node table.
fn check_start(
    universe: &mpi::environment::Universe,
    provided: Threading,
    cfg: &BootConfig,
) -> Result<NodeTable, MachineError> {
    let library = mpi::environment::library_version()
        .ok()
        .and_then(|v| v.lines().next().map(|l| l.trim().to_owned()))
        .unwrap_or_else(|| "an unknown MPI".into());
    if provided < Threading::Funneled {
        return Err(MachineError::Boot(format!(
            "the MPI library ({library}) gives thread level {provided:?}; the layer needs \
             Funneled (MPI_THREAD_FUNNELED)"
        )));
    }
    let world = universe.world();
    let size = world.size() as usize;
    launcher_env::check_size(size, &library).map_err(MachineError::Boot)?;
    // One node per rank, `+ppn` PEs each; `+p` (when given) must agree.
    let ppn = cfg.pes_per_node.max(1);
    if cfg.num_pes != 1 && cfg.num_pes != size * ppn {
        return Err(MachineError::Boot(format!(
            "+p{} asks for {} PEs but the MPI job has {size} rank(s) of {ppn} PE(s) each: start \
             it with `mpirun -n {}`{}",
            cfg.num_pes,
            cfg.num_pes,
            cfg.num_pes / ppn,
            if ppn == 1 {
                " (one PE per rank)".to_owned()
            } else {
                format!(" (+ppn {ppn}: {ppn} PEs per rank)")
            }
        )));
    }
    let mut mine = [0u8; HOST_LEN];
    let name = mpi::environment::processor_name().unwrap_or_else(|_| "?".into());
    let cut = name.len().min(HOST_LEN);
    mine[..cut].copy_from_slice(&name.as_bytes()[..cut]);
    let mut all = vec![0u8; HOST_LEN * size];
    world.all_gather_into(&mine[..], &mut all[..]);
    let nodes = all
        .chunks(HOST_LEN)
        .enumerate()
        .map(|(i, h)| {
            let end = h.iter().position(|&b| b == 0).unwrap_or(HOST_LEN);
            NodeInfo {
                first_pe: i * ppn,
                num_pes: ppn,
                host: String::from_utf8_lossy(&h[..end]).into_owned(),
                addr: Vec::new(),
            }
        })
        .collect();
    NodeTable::new(nodes).map_err(|e| MachineError::Boot(format!("node table: {e}")))
}
