//! One job over two transports: shared memory (the SI layer) between nodes on the same host,
//! any network layer between hosts (`+machine si+tcp`, `si+udp`, `si+mpi`): [`Both`] over the
//! network layer's [`Open`], whose part must have a [`waker`](converse_machine::Transport::waker)
//! (an idle node sleeps in the network part's wait, and a relay thread asleep on the SI doorbell
//! rings it).
//!
//! Written once over the existing layers, as one more two-phase boot ([`Both`], an [`Open`])
//! over theirs, which the launcher session runs like any layer's:
//!
//! 1. *open* both parts (the SI port, the network listener or socket); this node's info for
//!    the one exchange holds its host identity (`host.rs`) and both parts' info (`plan.rs`);
//! 2. from the node table, pick each peer's transport: shared memory when both identities are
//!    known and equal, else the network. The rule is symmetric, so each pair uses one
//!    transport for the whole job, and the `Machine` contract (FIFO per pair, exactly once)
//!    holds because each part keeps it;
//! 3. *connect* both parts, each with its share of the table (the SI part gets only same-host
//!    peers' ports, and so never refuses a job that spans hosts). The result is a [`Part`](converse_machine::Part)
//!    ([`MultiMachine`]): the session runs the job's one barrier, exit, abort and report-mode
//!    deaths for it, exactly as for a plain layer, and the composite drives its parts
//!    (`barrier_mode`, `nap`, `forget`, `leave` of [`Part`](converse_machine::Part)).
//!
//! An idle node blocks once for both (`relay.rs`: a thread asleep on the SI doorbell rings
//! the network layer's `Wake`). `+stats` prints, per node at exit, the peers each transport
//! serves and the messages and bytes sent over it (`multi.*` among the layer's counters).

mod host;
mod machine;
mod plan;
mod relay;

pub use machine::MultiMachine;

use crate::layer::SiOpen;
use converse_bootstrap::client::LaunchEnv;
use converse_bootstrap::session::Open;
use converse_bootstrap::Bootstrap;
use converse_machine::{BootConfig, MachineError, NodeTable};
use std::path::Path;

/// A composite of the SI layer and the network layer `N` between the two phases of its boot:
/// both parts are open.
#[derive(Debug)]
pub struct Both<N> {
    shm: SiOpen,
    net: N,
    /// This host's identity (`host.rs`): nodes that share it talk through shared memory.
    me: Option<String>,
}

impl<N: Open> Open for Both<N> {
    type Part = MultiMachine<N::Part>;

    fn open(
        cfg: &BootConfig,
        env: &LaunchEnv,
        launcher: &dyn Bootstrap,
    ) -> Result<Self, MachineError> {
        let shm = SiOpen::open(cfg, env, launcher)?;
        let net = N::open(cfg, env, launcher)?;
        let port = env.shm_path("");
        let shm_dir = Path::new(&port).parent().unwrap_or(Path::new("/dev/shm"));
        Ok(Both {
            shm,
            net,
            me: host::identity(shm_dir),
        })
    }

    fn info(&self) -> Vec<u8> {
        plan::encode(self.me.as_deref(), &self.shm.info(), &self.net.info())
    }

    /// Every node connects its SI part, which meets all of them in one barrier.
    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        launcher: &dyn Bootstrap,
    ) -> Result<Self::Part, MachineError> {
        let infos = plan::decode_all(&table)?;
        let route = plan::routes(&infos, env.node);
        tracing::debug!(target: "multi", ?route, "routes to the peers");
        let shm_table = plan::part_table(&table, &infos, |n, i| match route[n] {
            plan::Route::Net => Vec::new(),
            _ => i.shm.to_vec(),
        })?;
        let net_table = plan::part_table(&table, &infos, |_, i| i.net.to_vec())?;
        drop(infos);
        let si = self.shm.connect(env, shm_table, launcher)?;
        let net = self.net.connect(env, net_table, launcher)?;
        MultiMachine::new(table, route, si, net)
    }
}

/// For the start-up banner ([`Layer::describe`](converse_machine::Layer::describe)): the
/// transports node `node` of a composite job over the network layer `net` uses and how many
/// peers each serves ("si to 1 peer, tcp to 2 peers"); `None` for a table that is not a
/// composite's.
pub fn describe(net: &str, table: &NodeTable, node: usize) -> Option<String> {
    let infos = plan::decode_all(table).ok()?;
    let (shm, other) = plan::peers(&plan::routes(&infos, node));
    Some(format!(
        "si to {}, {net} to {}",
        plan::plural(shm),
        plan::plural(other)
    ))
}
