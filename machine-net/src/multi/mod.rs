//! One job over two transports: shared memory (the SI layer) between nodes on the same host,
//! a network layer (TCP or UDP) between hosts. `+machine si+tcp`, `+machine si+udp`.
//!
//! Written once over the existing layers, each of which boots in two phases that its own
//! plain boot uses too (see [`converse_machine::Part`]):
//!
//! 1. connect to charmrun once; *open* both parts (the SI port, the network listener or
//!    socket); send one HELLO whose info holds this node's host identity (`host.rs`) and both
//!    parts' info (`plan.rs`);
//! 2. from the node table, pick each peer's transport: shared memory when both identities are
//!    known and equal, else the network. The rule is symmetric, so each pair uses one
//!    transport for the whole job, and the `Machine` contract (FIFO per pair, exactly once)
//!    holds because each part keeps it;
//! 3. *connect* both parts, each with its share of the table (the SI part gets only same-host
//!    peers' ports, and so never refuses a job that spans hosts) and the one control
//!    connection. The composite alone runs the job's barrier and tells charmrun its exit; the
//!    parts are driven ([`Part::barrier_mode`], [`Part::leave`]).
//!
//! An idle node blocks once for both (`relay.rs`: a thread asleep on the SI doorbell rings
//! the network layer's `Wake`). `+set stats=true` prints, per node at exit, the messages and
//! bytes sent over each transport.

mod host;
mod machine;
mod plan;
mod relay;

pub use machine::MultiMachine;

use charmrun::client::{Control, LaunchEnv};
use converse_machine::{BootConfig, Layer, Machine, MachineError, NodeTable, Part, SettingSpec};
use converse_si::layer::SiOpen;
use std::path::Path;
use std::sync::Arc;

/// The settings the composite layers read.
const SETTINGS: &[SettingSpec] = &[SettingSpec {
    key: "stats",
    meaning: "si+tcp/si+udp: print each node's messages and bytes per transport at exit \
              (default false)",
}];

/// `+machine si+tcp`: shared memory inside a host, TCP between hosts.
#[cfg(feature = "tcp")]
pub const SI_TCP: Layer = Layer {
    name: "si+tcp",
    summary: "charmrun's processes: shared memory between nodes of one host, TCP between hosts",
    boot: boot_si_tcp,
    launched: LaunchEnv::present,
    settings: SETTINGS,
    check: check_settings,
};

/// `+machine si+udp`: shared memory inside a host, UDP between hosts.
#[cfg(feature = "udp")]
pub const SI_UDP: Layer = Layer {
    name: "si+udp",
    summary: "charmrun's processes: shared memory between nodes of one host, UDP between hosts",
    boot: boot_si_udp,
    launched: LaunchEnv::present,
    settings: SETTINGS,
    check: check_settings,
};

/// [`Layer::check`] of the composites: their own setting (each part's are checked as its
/// layer's, being compiled in too).
fn check_settings(s: &converse_machine::Settings) -> Result<(), MachineError> {
    s.get_or("stats", false).map(|_: bool| ())
}

/// The network part of a composite: a layer's first boot phase, as the composite drives it.
pub trait NetOpen: Sized {
    /// The layer's machine.
    type Machine: Part + 'static;
    /// The layer's name.
    const NAME: &'static str;
    /// Open the listener or socket (the layer's settings from `cfg`).
    ///
    /// # Errors
    /// The layer's.
    fn open(cfg: &BootConfig, env: &LaunchEnv, ctl: &Control) -> Result<Self, MachineError>;
    /// This node's info for the node table.
    fn info(&self) -> Vec<u8>;
    /// Finish booting with `table` (the network info of every node) and the composite's
    /// control connection.
    ///
    /// # Errors
    /// The layer's.
    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        ctl: Arc<Control>,
    ) -> Result<Self::Machine, MachineError>;
}

#[cfg(feature = "tcp")]
impl NetOpen for crate::tcp::TcpOpen {
    type Machine = crate::tcp::TcpMachine;
    const NAME: &'static str = "tcp";
    fn open(_: &BootConfig, _: &LaunchEnv, ctl: &Control) -> Result<Self, MachineError> {
        crate::tcp::TcpOpen::open(ctl)
    }
    fn info(&self) -> Vec<u8> {
        crate::tcp::TcpOpen::info(self)
    }
    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        ctl: Arc<Control>,
    ) -> Result<Self::Machine, MachineError> {
        crate::tcp::TcpOpen::connect(self, env, table, ctl)
    }
}

#[cfg(feature = "udp")]
impl NetOpen for crate::udp::layer::UdpOpen {
    type Machine = crate::udp::layer::UdpMachine;
    const NAME: &'static str = "udp";
    fn open(cfg: &BootConfig, env: &LaunchEnv, ctl: &Control) -> Result<Self, MachineError> {
        let conf = crate::udp::config::Config::from_settings(&cfg.settings)?;
        crate::udp::layer::UdpOpen::open(conf, env, ctl)
    }
    fn info(&self) -> Vec<u8> {
        crate::udp::layer::UdpOpen::info(self)
    }
    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        ctl: Arc<Control>,
    ) -> Result<Self::Machine, MachineError> {
        crate::udp::layer::UdpOpen::connect(self, env, table, ctl)
    }
}

#[cfg(feature = "tcp")]
fn boot_si_tcp(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    boot::<crate::tcp::TcpOpen>(SI_TCP.name, cfg)
}

#[cfg(feature = "udp")]
fn boot_si_udp(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    boot::<crate::udp::layer::UdpOpen>(SI_UDP.name, cfg)
}

/// Boot a composite of the SI layer and the network layer `O`.
///
/// # Errors
/// Either part's boot errors; [`MachineError::Boot`] for a table that is not a composite's.
pub fn boot<O: NetOpen>(
    name: &'static str,
    cfg: &BootConfig,
) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    let env = LaunchEnv::for_boot(cfg)?;
    let stats: bool = cfg.settings.get_or("stats", false)?;
    let report = cfg.settings.reports_deaths()?;
    let mut ctl = Control::connect(&env)?;
    let shm = SiOpen::open(cfg, &env)?;
    let net = O::open(cfg, &env, &ctl)?;
    let port = env.shm_path("");
    let shm_dir = Path::new(&port).parent().unwrap_or(Path::new("/dev/shm"));
    let me = host::identity(shm_dir);
    let info = plan::encode(me.as_deref(), &shm.info(), &net.info());
    let table = ctl.join(&env, info)?;
    crate::mesh::check_pes(&table, cfg.pes_per_node)?;
    let infos = plan::decode_all(&table)?;
    let route = plan::routes(&infos, env.node);
    tracing::debug!(target: "multi", ?route, "routes to the peers");
    let shm_table = plan::part_table(&table, &infos, |n, i| match route[n] {
        plan::Route::Net => Vec::new(),
        _ => i.shm.to_vec(),
    })?;
    let net_table = plan::part_table(&table, &infos, |_, i| i.net.to_vec())?;
    drop(infos);
    let ctl = Arc::new(ctl);
    // Every node connects its SI part, which meets all of them in one barrier.
    let si = shm.connect(shm_table, Arc::clone(&ctl))?;
    let net = net.connect(&env, net_table, Arc::clone(&ctl))?;
    let mut m = MultiMachine::new(name, O::NAME, table, route, si, net, stats, ctl)?;
    if report {
        m.report_deaths()?;
    }
    Ok(vec![Box::new(m)])
}

/// For the start-up banner: the transports node `node` of a composite job uses and how many
/// peers each serves ("si to 1 peer, tcp to 2 peers"); `None` for a table that is not a
/// composite's. `layer` is the composite's name.
pub fn describe(layer: &str, table: &NodeTable, node: usize) -> Option<String> {
    let net = layer.strip_prefix("si+")?;
    let infos = plan::decode_all(table).ok()?;
    let (shm, other) = plan::peers(&plan::routes(&infos, node));
    Some(format!(
        "si to {}, {net} to {}",
        plan::plural(shm),
        plan::plural(other)
    ))
}
