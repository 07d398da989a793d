//! Start-up of the SI layer: the `si.*` settings, the exchange through charmrun, the host's
//! segment (`si_open`); and, as peers first talk, whether this node can read their memory.

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

/// `CmiMachineInit`: `si_init`, `si_getid`; send this node's process id to charmrun, get the
/// table, make (first node of the host) or map (the others) the host's segment, then remove
/// its name from the file system (the mappings stay).
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun, when the job spans hosts, or when
/// shared memory cannot be set up.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<SiOpen>(super::LAYER.name, cfg)
}

/// An SI node between the two phases of its boot ([`Open`]): its settings read. Nothing is
/// made before the table is known (the host's nodes are in it), so a start-up that fails
/// before then leaves nothing in /dev/shm.
#[derive(Debug)]
pub struct SiOpen {
    me: usize,
    nodes: usize,
    ring: usize,
    lend_from: Option<usize>,
    coop: bool,
}

impl Open for SiOpen {
    type Part = SiMachine;

    /// `si_init`: read this node's `si.*` settings from `cfg`.
    fn open(cfg: &BootConfig, env: &LaunchEnv, _: &dyn Bootstrap) -> Result<SiOpen, MachineError> {
        let SiSettings {
            ring,
            lend_from,
            coop,
        } = SiSettings::parse(&cfg.settings)?;
        Ok(SiOpen {
            me: env.node,
            nodes: env.num_nodes,
            ring,
            lend_from,
            coop,
        })
    }

    /// This node's info for the node table: its process id (any non-empty info says the node
    /// takes part in the host's segment; a composite empties it for nodes of other hosts).
    fn info(&self) -> Vec<u8> {
        std::process::id().to_string().into_bytes()
    }

    /// The host's segment: the first node of the host (in the table's order, among those
    /// whose `addr` is not empty) makes it, every node of the job meets in a barrier of the
    /// launcher's, the others map it and publish their process ids, a second barrier, and
    /// the first node removes its name. A node to reach on another host is refused
    /// ([`MachineError::Boot`]): shared memory is one host's. Rings are reserved and peers
    /// probed later, pair by pair, as they first talk.
    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        launcher: &dyn Bootstrap,
    ) -> Result<SiMachine, MachineError> {
        one_host(&table, self.me)?;
        let SiOpen {
            me,
            nodes,
            ring,
            lend_from,
            coop,
        } = self;
        let n = table.num_nodes();
        if n != nodes {
            return Err(MachineError::Boot(format!(
                "the node table has {n} nodes, the launcher said {nodes}"
            )));
        }
        let locals: Vec<usize> = (0..n)
            .filter(|&node| node == me || table.node(node).is_some_and(|i| !i.addr.is_empty()))
            .collect();
        let first = locals.first().copied().unwrap_or(me);
        // Named with the job's tag: charmrun removes it if the job ends before it is.
        let path = env.shm_path(&format!("si-host-{first}"));
        let seg_error = |e: crate::segment::SegmentError| MachineError::Boot(format!("si: {e}"));
        let mut si = Si::init(me, n);
        let mut made = None;
        if me == first {
            // Until every node has mapped it: removed on any error return (the guard's drop),
            // and by the control watchdog if charmrun goes away meanwhile (it ends the process).
            // Registered before the file exists: the watchdog can end the process at any
            // moment, and a file made and not yet registered would outlive it (seen when
            // charmrun was killed the moment the segment appeared).
            made = Some(converse_bootstrap::cleanup::remove_on_exit(&path));
            si.create_host(Path::new(&path), &locals, ring)
                .map_err(seg_error)?;
            tracing::debug!(target: "si", segment = %path, nodes = locals.len(), ring, "host segment made");
        }
        launcher.barrier()?;
        if me != first {
            si.open_host(Path::new(&path), &locals, ring)
                .map_err(seg_error)?;
        }
        // Every node of the host has mapped it and published its process id: the name is no
        // longer needed.
        launcher.barrier()?;
        if made.is_some() {
            si.close();
        }
        drop(made);
        let chunk = si.max_write().min(PIECE) - HEADER;
        let bell = si
            .own_bell()
            .ok_or_else(|| MachineError::Boot("the SI segment is not open".into()))?;
        Ok(SiMachine {
            me,
            table,
            si,
            chunk,
            lend_from: vec![super::LEND_UNDECIDED; n],
            lend_setting: lend_from,
            probe_pulls: lend_from != Some(usize::MAX),
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

impl SiMachine {
    /// Writers registered since the last look: probe whether we can pull from each (and tell
    /// it), unless single copy is off or this host forbids it.
    pub(super) fn new_senders(&mut self, new: &[usize]) {
        for &node in new {
            if !self.probe_pulls {
                self.si.refuse_pull(node);
                continue;
            }
            match self.si.enable_pull(node) {
                Ok(_) => {
                    tracing::debug!(target: "si", peer = node, "single copy from the peer's memory");
                }
                Err(e @ PullError::Denied(_)) => {
                    note_no_single_copy(&e);
                    self.probe_pulls = false;
                }
                // Any other failure leaves that pair on the rings; a dead peer is charmrun's
                // to report.
                Err(e) => {
                    tracing::debug!(target: "si", peer = node, "no single copy from the peer: {e}");
                }
            }
        }
    }

    /// The wire size from which a message to `node` is lent: never until `node` has said
    /// whether it can pull from us (it probes when it first sees us write), then as the
    /// settings say.
    pub(super) fn lend_threshold(&mut self, node: usize) -> usize {
        let t = self.lend_from[node];
        if t != super::LEND_UNDECIDED {
            return t;
        }
        if !self.si.lend_known(node) {
            return usize::MAX;
        }
        let t = match self.lend_setting {
            _ if !self.si.can_lend_to(node) => usize::MAX,
            Some(from) => from,
            // It will take chunks of the copy with us when we can write into its memory too.
            None if self.coop && self.si.can_help(node) => LEND_FROM_TOGETHER,
            None => LEND_FROM_ALONE,
        };
        self.lend_from[node] = t;
        t
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
