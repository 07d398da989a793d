//! Start-up of the SI layer: the `si.*` settings, the port (`si_open`), the exchange through
//! charmrun, attaching every peer's port and probing whether this node can read its memory.

use super::record::HEADER;
use super::{SiMachine, COOP_FROM, PIECE, SPARES};
use crate::interconnect::Si;
use crate::pull::PullError;
use crate::wake::SiWaker;
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::session::{self, Open};
use converse_bootstrap::Bootstrap;
use converse_machine::{BootConfig, Machine, MachineError, NodeTable, SettingSpec, Settings};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `si.ring_kib`: at most 1 GiB a ring, since the segment holds a ring per node of the host,
/// and its size (nodes × ring) must not wrap.
const RING_KIB: SettingSpec = SettingSpec::power_of_two(
    "si.ring_kib",
    256,
    4,
    1 << 20,
    "shared-memory ring per sender, KiB",
);

/// `si.copy_together`.
const COPY_TOGETHER: SettingSpec = SettingSpec::flag(
    "si.copy_together",
    true,
    "large copies shared by sender and receiver",
);

/// `si.single_copy_from`: see [`single_copy_from`].
const SINGLE_COPY_FROM: SettingSpec = SettingSpec::text(
    "si.single_copy_from",
    "wire size from which messages are lent, bytes or `off`",
)
.computed("measured per host");

/// The `si.*` settings.
pub(crate) const SETTINGS: &[SettingSpec] = &[RING_KIB, COPY_TOGETHER, SINGLE_COPY_FROM];

/// Size, in wire bytes, from which messages are lent instead of copied through the ring,
/// unless `si.single_copy_from` says otherwise, when the receiver copies alone. Below it the
/// two copies through the ring, the receiver's overlapping the sender's piece by piece, take
/// less time than the kernel's one copy (which copies slower than user space here and pins
/// every page); from 1.25 MiB the single copy wins (measured: docs/benchmarks.md, SI).
const LEND_FROM_ALONE: usize = 1280 << 10;

/// The same when the sender helps with the copy (`coop.rs`): from there, the two cores copying
/// halves each once beat the ring's two copies (measured, as above).
const LEND_FROM_TOGETHER: usize = COOP_FROM;

/// `si.single_copy_from`: the wire size from which messages are lent (`Some(usize::MAX)` for
/// `off`), or `None` for the measured default.
fn single_copy_from(settings: &Settings) -> Result<Option<usize>, MachineError> {
    match SINGLE_COPY_FROM.read_text(settings) {
        None => Ok(None),
        Some("off") => Ok(Some(usize::MAX)),
        Some(v) => v.parse().map(Some).map_err(|_| MachineError::Setting {
            key: "si.single_copy_from".into(),
            reason: format!("'{v}' is neither a size in bytes nor 'off'"),
        }),
    }
}

/// The layer's `si.*` settings, parsed and checked.
pub(crate) struct SiSettings {
    /// Bytes of each sender's ring.
    ring: usize,
    /// See [`single_copy_from`].
    lend_from: Option<usize>,
    /// `si.copy_together`.
    coop: bool,
}

impl SiSettings {
    /// # Errors
    /// [`MachineError::Setting`] for a value that does not parse or is out of range.
    pub(crate) fn parse(s: &Settings) -> Result<SiSettings, MachineError> {
        Ok(SiSettings {
            ring: RING_KIB.read_whole(s)? as usize * 1024,
            lend_from: single_copy_from(s)?,
            coop: COPY_TOGETHER.read_flag(s)?,
        })
    }
}

/// Say once per process that the single-copy path is off, and why.
fn note_no_single_copy(e: &PullError) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        converse_machine::input::error_line(&format!(
            "converse si: note: large messages go through the rings (two copies): {e}. \
             Reading a peer's memory needs the same user and Yama ptrace_scope 0 \
             (/proc/sys/kernel/yama/ptrace_scope), and no seccomp filter on process_vm_readv."
        ));
    }
}

/// `CmiMachineInit`: `si_init`, `si_open`, `si_getid`; send the port to charmrun, get the
/// table, attach every port and probe whether we can pull from its owner, then remove ours
/// from the file system (the mappings stay).
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun, when the job spans hosts, or when
/// shared memory cannot be set up.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<SiOpen>(super::LAYER.name, cfg)
}

/// An SI node between the two phases of its boot ([`Open`]): its port exists, and
/// [`info`](Open::info) names it.
pub struct SiOpen {
    me: usize,
    si: Si,
    path: String,
    /// Removes the port file if boot ends before every node has mapped it.
    port_file: converse_bootstrap::cleanup::RemoveOnExit,
    lend_from: Option<usize>,
    coop: bool,
}

// By hand: the interconnect's mappings have no useful text form.
impl std::fmt::Debug for SiOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiOpen")
            .field("port", &self.path)
            .finish_non_exhaustive()
    }
}

impl Open for SiOpen {
    type Part = SiMachine;

    /// `si_init`, `si_open`: create this node's port (its `si.*` settings from `cfg`).
    fn open(cfg: &BootConfig, env: &LaunchEnv, _: &dyn Bootstrap) -> Result<SiOpen, MachineError> {
        let SiSettings {
            ring,
            lend_from,
            coop,
        } = SiSettings::parse(&cfg.settings)?;
        // Named with the job's tag: charmrun removes it if this node dies before it does.
        let path = env.shm_path(&format!("si-{}", env.node));
        let mut si = Si::init(env.node, env.num_nodes);
        si.open(Path::new(&path), ring)
            .map_err(|e| MachineError::io(format!("creating the SI port {path}"), e))?;
        tracing::debug!(target: "si", port = %path, ring, "port open");
        // Until every node has mapped it: removed on any error return (the guard's drop),
        // and by the control watchdog if charmrun goes away meanwhile (it ends the process).
        let port_file = converse_bootstrap::cleanup::remove_on_exit(&path);
        Ok(SiOpen {
            me: env.node,
            si,
            path,
            port_file,
            lend_from,
            coop,
        })
    }

    /// This node's info for the node table: the port's name.
    fn info(&self) -> Vec<u8> {
        self.path.clone().into_bytes()
    }

    /// Attach the port of every node whose `addr` in `table` is not empty (a composite
    /// leaves it empty for nodes it reaches another way), probe whom we can pull from, meet
    /// every node of the job in a barrier of the launcher's (all of them call this, whatever
    /// they attach), then remove our port's name. A node to attach on another host is refused
    /// ([`MachineError::Boot`]): shared memory is one host's.
    fn connect(
        self,
        _: &LaunchEnv,
        table: NodeTable,
        launcher: &dyn Bootstrap,
    ) -> Result<SiMachine, MachineError> {
        one_host(&table, self.me)?;
        let SiOpen {
            me,
            mut si,
            path: _,
            port_file,
            lend_from,
            coop,
        } = self;
        for (node, info) in table.nodes().iter().enumerate() {
            if node == me || info.addr.is_empty() {
                continue;
            }
            let p = std::str::from_utf8(&info.addr).map_err(|_| {
                MachineError::Boot(format!("node {node}'s SI port name is not text"))
            })?;
            si.attach(node, Path::new(p))
                .map_err(|e| MachineError::io(format!("attaching node {node}'s SI port {p}"), e))?;
            tracing::debug!(target: "si", peer = node, port = p, "attached the peer's port");
        }
        let n = table.num_nodes();
        if lend_from != Some(usize::MAX) {
            for node in 0..n {
                match si.enable_pull(node) {
                    Ok(_) => {
                        tracing::debug!(target: "si", peer = node, "single copy from the peer's memory");
                    }
                    Err(e @ PullError::Denied(_)) => {
                        note_no_single_copy(&e);
                        break;
                    }
                    // Any other failure leaves that pair on the rings; a dead peer is
                    // charmrun's to report.
                    Err(e) => {
                        tracing::debug!(target: "si", peer = node, "no single copy from the peer: {e}");
                    }
                }
            }
        }
        // Every node has attached every port and said whom it can pull from: the names are
        // no longer needed, and the pull permissions can be read.
        launcher.barrier()?;
        si.close();
        drop(port_file);
        let lend_from = (0..n)
            .map(|node| match lend_from {
                _ if !si.can_lend_to(node) => usize::MAX,
                Some(from) => from,
                // It will take chunks of the copy with us when we can write into its memory
                // too.
                None if coop && si.can_pull_from(node) => LEND_FROM_TOGETHER,
                None => LEND_FROM_ALONE,
            })
            .collect();
        let chunk = si.max_write().min(PIECE) - HEADER;
        let senders = (0..n)
            .filter(|&node| node != me && table.node(node).is_some_and(|i| !i.addr.is_empty()))
            .collect();
        let bell = si
            .own_bell()
            .ok_or_else(|| MachineError::Boot("the SI port is not open".into()))?;
        Ok(SiMachine {
            senders,
            me,
            table,
            si,
            chunk,
            lend_from,
            coop,
            out: (0..n).map(|_| VecDeque::new()).collect(),
            backlog: Vec::new(),
            lent: (0..n).map(|_| VecDeque::new()).collect(),
            held: vec![0; n],
            loans: vec![0; n],
            lending: Vec::new(),
            incoming: (0..n).map(|_| None).collect(),
            spares: Vec::with_capacity(SPARES),
            waker: Arc::new(SiWaker::new(bell)),
        })
    }
}

/// Refuse a table whose nodes to attach (those with an SI port in it) are not all on `me`'s
/// host: the plain SI layer started across hosts. A composite gives its SI part only the
/// peers of its own host.
///
/// # Errors
/// [`MachineError::Boot`] naming the hosts.
fn one_host(table: &NodeTable, me: usize) -> Result<(), MachineError> {
    let my_host = table.node(me).map(|n| n.host.clone()).unwrap_or_default();
    let others: Vec<&str> = table
        .nodes()
        .iter()
        .filter(|n| !n.addr.is_empty() && n.host != my_host)
        .map(|n| n.host.as_str())
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    Err(MachineError::Boot(format!(
        "the si layer is shared memory on one host, but this job spans hosts ({my_host}, {}); \
         use the tcp layer across hosts, or si+tcp for shared memory inside each host",
        others.join(", ")
    )))
}
