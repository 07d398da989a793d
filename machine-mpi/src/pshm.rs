//! `+machine si+mpi`: shared memory between the ranks of a host, MPI between hosts, the MPI
//! launcher starting the job (GASNet's PSHM over its MPI conduit).
//!
//! The composite is the launcher session's combinator ([`converse_bootstrap::compose::Both`])
//! over the SI layer's boot phases and this layer's ([`MpiOpen`]); what charmrun is to `si+tcp`, MPI is here: [`MpiBoot`] is the
//! [`Bootstrap`] of the job — the node table exchanged with `MPI_Allgatherv`, the barrier an
//! `MPI_Ibarrier` on a communicator of its own, the job's tag (which names its shared-memory
//! files) broadcast from rank 0, abort `MPI_Abort`. MPI ends the whole job when a rank dies,
//! so report mode is refused, as on the plain layer.
//!
//! Nobody removes a shared-memory file after the job as charmrun does: each node removes its
//! SI port's name as soon as every node has attached it (a few milliseconds into start-up),
//! and an aborting node removes what it registered ([`converse_bootstrap::cleanup`]). A rank
//! killed by a signal inside that window leaves its port file (`/dev/shm/converse-TAG-si-N`).

use crate::layer::{boot::MpiSettings, MpiMachine};
use crate::{launcher_env, mpi_call};
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::compose::{self, Both};
use converse_bootstrap::session::{self, Open};
use converse_bootstrap::Bootstrap;
use converse_machine::{BootConfig, Layer, Machine, MachineError, NodeInfo, NodeTable, Wake};
use converse_si::layer::SiOpen;
use mpi::ffi;
use std::net::{IpAddr, Ipv4Addr};
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The registry entry for `si+mpi`.
pub const SI_MPI: Layer = Layer {
    name: "si+mpi",
    summary: "MPI's ranks: shared memory between ranks of one host, MPI between hosts",
    boot: boot_si_mpi,
    launched: launcher_env::launched,
    settings: &[],
    check: converse_machine::no_settings,
    describe: |table, node| compose::describe("si", "mpi", table, node),
};

/// Boot `si+mpi`: MPI first (it is the launcher session), then the composite.
///
/// # Errors
/// As the MPI layer's boot; [`MachineError::Setting`] for `faults=report`.
fn boot_si_mpi(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    crate::layer::boot::refuse_report_mode(&cfg.settings)?;
    let (env, launcher) = MpiBoot::init(cfg)?;
    session::boot_under::<Both<SiOpen, MpiOpen>>(SI_MPI.name, cfg, &env, Box::new(launcher))
}

/// The MPI layer between the two phases of its boot, as a composite's network part: nothing
/// is open (MPI reaches every rank by its number), the settings are parsed.
#[derive(Debug)]
pub struct MpiOpen {
    settings: MpiSettings,
}

impl Open for MpiOpen {
    type Part = MpiMachine;

    fn open(cfg: &BootConfig, _: &LaunchEnv, _: &dyn Bootstrap) -> Result<MpiOpen, MachineError> {
        Ok(MpiOpen {
            settings: MpiSettings::parse(&cfg.settings)?,
        })
    }

    /// MPI needs no address: ranks are node numbers.
    fn info(&self) -> Vec<u8> {
        Vec::new()
    }

    /// The layer's communicators and pre-posted receives (collective: every rank connects).
    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        _: &dyn Bootstrap,
    ) -> Result<MpiMachine, MachineError> {
        let mut m = MpiMachine::start(env.node, table, self.settings)?;
        // MPI was started by `MpiBoot::init`, without rsmpi's universe: the part finalizes it
        // after its exit barrier.
        m.finalize_raw();
        Ok(m)
    }
}

/// The `si+mpi` job's launcher session over MPI (see the module docs).
#[derive(Debug)]
pub struct MpiBoot {
    /// A duplicate of the world communicator: the session's barriers never match the layer's.
    comm: ffi::MPI_Comm,
    me: usize,
    /// Every rank's host and PEs (from the checks at start-up); `addr` filled by `exchange`.
    hosts: NodeTable,
    barrier: Mutex<Barriers>,
}

// SAFETY: the communicator is an MPI handle used only under the `barrier` lock or from the
// thread that booted (MPI_THREAD_FUNNELED: the runtime calls the session from that thread;
// `abort`, which may come from another, ends the process).
unsafe impl Send for MpiBoot {}
// SAFETY: as above.
unsafe impl Sync for MpiBoot {}

/// The session's barriers: how many completed, and the one in progress.
#[derive(Debug)]
struct Barriers {
    done: u64,
    pending: Option<ffi::MPI_Request>,
}

impl MpiBoot {
    /// `MPI_Init_thread`, the MPI layer's checks (thread level, job size, `+p`), and the job's
    /// tag and secret from rank 0: the launch context the composite's parts boot from.
    ///
    /// # Errors
    /// As the MPI layer's boot.
    pub fn init(cfg: &BootConfig) -> Result<(LaunchEnv, MpiBoot), MachineError> {
        let (universe, hosts) = crate::layer::boot::init(cfg)?;
        let me = mpi::topology::Communicator::rank(&universe.world()) as usize;
        let nodes = hosts.num_nodes();
        // From here MPI is finalized by the MPI part's exit (`MpiMachine::finalize_raw`), not
        // by rsmpi's universe.
        std::mem::forget(universe);
        // SAFETY: reading a predefined handle once MPI is initialized.
        let comm = crate::layer::boot::dup(unsafe { ffi::RSMPI_COMM_WORLD })?;
        let boot = MpiBoot {
            comm,
            me,
            hosts,
            barrier: Mutex::new(Barriers {
                done: 0,
                pending: None,
            }),
        };
        // Rank 0 draws the job's tag (its files' names) and secret; every rank learns them
        // through the session's own broadcast.
        let mut blob = Vec::new();
        if me == 0 {
            let tag = converse_bootstrap::protocol::new_tag();
            let secret = converse_bootstrap::protocol::new_secret();
            match (tag, secret) {
                (Ok(t), Ok(s)) => {
                    blob.extend_from_slice(t.as_bytes());
                    blob.extend_from_slice(&s);
                }
                // Every rank waits in the broadcast below: end them all.
                _ => abort_job(0, "the system's random source cannot be read"),
            }
        }
        let blob = boot.broadcast(0, &blob)?;
        let (tag, secret) = blob
            .split_at_checked(
                blob.len()
                    .saturating_sub(converse_bootstrap::protocol::SECRET_LEN),
            )
            .ok_or_else(|| MachineError::Boot("rank 0 sent a malformed job tag".into()))?;
        let job = String::from_utf8_lossy(tag).into_owned();
        let secret: [u8; converse_bootstrap::protocol::SECRET_LEN] = secret
            .try_into()
            .map_err(|_| MachineError::Boot("rank 0 sent a malformed job secret".into()))?;
        if job.is_empty() || !job.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MachineError::Boot("rank 0 sent a malformed job tag".into()));
        }
        let env = LaunchEnv {
            charmrun: String::new(),
            secret,
            node: me,
            num_nodes: nodes,
            job,
            embedded: false,
        };
        Ok((env, boot))
    }
}

impl Bootstrap for MpiBoot {
    /// Not used by the parts MPI boots (shared memory and MPI bind nothing).
    fn local_ip(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    }

    fn exchange(&mut self, info: Vec<u8>) -> Result<NodeTable, MachineError> {
        let size = self.hosts.num_nodes();
        let mine = u64::try_from(info.len()).unwrap_or(u64::MAX);
        let mut lens = vec![0u64; size];
        // SAFETY: one u64 sent, `size` received into `lens`; `self.comm` is valid while MPI is.
        mpi_call("MPI_Allgather", unsafe {
            ffi::MPI_Allgather(
                (&mine as *const u64).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                lens.as_mut_ptr().cast(),
                1,
                ffi::RSMPI_UINT64_T,
                self.comm,
            )
        })?;
        let too_long = || MachineError::Boot("the node table is too large for MPI".into());
        let counts = lens
            .iter()
            .map(|&l| c_int::try_from(l).map_err(|_| too_long()))
            .collect::<Result<Vec<c_int>, _>>()?;
        let mut displs = Vec::with_capacity(size);
        let mut total: c_int = 0;
        for &c in &counts {
            displs.push(total);
            total = total.checked_add(c).ok_or_else(too_long)?;
        }
        let mut all = vec![0u8; total as usize];
        // SAFETY: `info` holds `counts[me]` bytes; `all` holds the sum at `displs`.
        mpi_call("MPI_Allgatherv", unsafe {
            ffi::MPI_Allgatherv(
                info.as_ptr().cast(),
                counts[self.me],
                ffi::RSMPI_UINT8_T,
                all.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
                ffi::RSMPI_UINT8_T,
                self.comm,
            )
        })?;
        let nodes = self
            .hosts
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let at = displs[i] as usize;
                NodeInfo {
                    first_pe: n.first_pe,
                    num_pes: n.num_pes,
                    host: n.host.clone(),
                    addr: all[at..at + counts[i] as usize].to_vec(),
                }
            })
            .collect();
        NodeTable::new(nodes).map_err(|e| MachineError::Boot(format!("node table: {e}")))
    }

    fn barrier_begin(&self) -> Result<u64, MachineError> {
        let mut b = self
            .barrier
            .lock()
            .map_err(|_| MachineError::Boot("the barrier's lock is poisoned".into()))?;
        if b.pending.is_none() {
            // SAFETY: reading a predefined handle.
            let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: `self.comm` is valid while MPI is; `req` is a local out-parameter.
            mpi_call("MPI_Ibarrier", unsafe {
                ffi::MPI_Ibarrier(self.comm, &mut req)
            })?;
            b.pending = Some(req);
        }
        Ok(b.done)
    }

    fn released(&self, ticket: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let Ok(mut b) = self.barrier.lock() else {
                return false;
            };
            if b.done > ticket {
                return true;
            }
            if let Some(mut req) = b.pending {
                let mut flag: c_int = 0;
                // SAFETY: `req` is the active request of this barrier.
                let rc = unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
                if rc != 0 {
                    return false;
                }
                if flag != 0 {
                    b.pending = None;
                    b.done += 1;
                    return b.done > ticket;
                }
                b.pending = Some(req);
            }
            drop(b);
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn broadcast(&self, root: usize, blob: &[u8]) -> Result<Vec<u8>, MachineError> {
        let size = self.hosts.num_nodes();
        let root_rank = c_int::try_from(root).ok().filter(|_| root < size).ok_or(
            MachineError::InvalidNode {
                node: root,
                nodes: size,
            },
        )?;
        // The length first, then the bytes: MPI counts are `int`.
        let mut len = if root == self.me {
            blob.len() as u64
        } else {
            0
        };
        // SAFETY: one u64 in or out; `self.comm` is valid while MPI is.
        mpi_call("MPI_Bcast", unsafe {
            ffi::MPI_Bcast(
                (&mut len as *mut u64).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                root_rank,
                self.comm,
            )
        })?;
        let count = c_int::try_from(len)
            .map_err(|_| MachineError::Boot("a broadcast of 2 GiB or more".into()))?;
        let mut out = if root == self.me {
            blob.to_vec()
        } else {
            vec![0u8; len as usize]
        };
        // SAFETY: `out` holds `count` bytes on every rank.
        mpi_call("MPI_Bcast", unsafe {
            ffi::MPI_Bcast(
                out.as_mut_ptr().cast(),
                count,
                ffi::RSMPI_UINT8_T,
                root_rank,
                self.comm,
            )
        })?;
        Ok(out)
    }

    /// Refused at boot (MPI ends the job when a rank dies).
    fn report_deaths(&self, _: Arc<dyn Wake>) -> Result<(), MachineError> {
        Err(crate::layer::boot::refusal())
    }

    fn next_death(&self, _: &mut usize) -> Option<(usize, String)> {
        None
    }

    fn suspect(&self, _: usize, _: &str) {}

    /// Nothing to tell: `mpirun` learns the exit code from the process.
    fn ending(&self, _: i32) -> Result<(), MachineError> {
        Ok(())
    }

    fn abort(&self, reason: &str) -> ! {
        abort_job(self.me, reason)
    }
}

/// Say why in one line, remove this node's registered files, and end every rank.
fn abort_job(me: usize, reason: &str) -> ! {
    converse_machine::input::error_line(&format!("converse: node {me} aborting the job: {reason}"));
    converse_bootstrap::cleanup::remove_registered();
    // SAFETY: MPI is initialized; MPI_Abort ends every rank of the communicator.
    unsafe {
        ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1);
    }
    std::process::exit(1)
}
