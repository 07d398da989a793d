//! One job over two transports, the composite as a combinator: [`Both<A, B>`] runs a part `A`
//! between the nodes of a host (shared memory: the SI layer) and a part `B` between hosts
//! (any network layer: TCP, UDP, MPI), each over its layer's own boot phases ([`Open`]).
//! `+machine si+tcp` is `Both<SiOpen, TcpOpen>`, `si+udp` and `si+mpi` likewise.
//!
//! Written once over the layers as they are, as one more two-phase boot, which the launcher
//! session runs like any layer's:
//!
//! 1. *open* both parts (the SI port, the network listener or socket); this node's info for
//!    the one exchange holds its host identity (`host.rs`) and both parts' info (`plan.rs`);
//! 2. from the node table, pick each peer's transport: `A` when both identities are known and
//!    equal, else `B`. The rule is symmetric, so each pair uses one transport for the whole
//!    job, and the `Machine` contract (FIFO per pair, exactly once) holds because each part
//!    keeps it;
//! 3. *connect* both parts, each with its share of the table (`A` gets only same-host peers'
//!    info, and so never refuses a job that spans hosts). The result is a
//!    [`Part`](converse_machine::Part) ([`MultiMachine`]): the session runs the job's one
//!    barrier, exit, abort and report-mode deaths for it, exactly as for a plain layer, and the
//!    composite drives its parts (`barrier_mode`, `nap`, `forget`, `leave`).
//!
//! An idle node blocks once for both, through the parts' composable idle protocol and never
//! reaching into either: it sleeps in `B`'s `wait` (sockets, timers), and a relay thread
//! asleep on `A`'s [`Bell`](converse_machine::Bell) rings `B`'s
//! [`Wake`](converse_machine::Wake) when a same-host peer writes while `A` is armed
//! (`relay.rs`). So `A` needs a bell and `B` a waker; without either, the node waits in
//! slices of 1 ms while it has peers on both. `+stats` prints, per node at exit, the peers each
//! transport serves and the messages and bytes sent over it (`multi.*` among the layer's
//! counters).

mod host;
mod machine;
mod plan;
mod relay;

pub use machine::MultiMachine;

use crate::client::LaunchEnv;
use crate::session::Open;
use crate::Bootstrap;
use converse_machine::{BootConfig, MachineError, NodeTable};
use std::path::Path;

/// A composite of the intra-host layer `A` and the network layer `B` between the two phases of
/// its boot: both parts are open.
#[derive(Debug)]
pub struct Both<A, B> {
    shm: A,
    net: B,
    /// This host's identity (`host.rs`): nodes that share it talk through `A`.
    me: Option<String>,
}

impl<A: Open, B: Open> Open for Both<A, B> {
    type Part = MultiMachine<A::Part, B::Part>;

    fn open(
        cfg: &BootConfig,
        env: &LaunchEnv,
        launcher: &dyn Bootstrap,
    ) -> Result<Self, MachineError> {
        let shm = A::open(cfg, env, launcher)?;
        let net = B::open(cfg, env, launcher)?;
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

    /// Every node connects both parts (a barrier a part meets in its connect, SI's, so counts
    /// every node once).
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
/// transports node `node` of a composite job of the layers `intra` and `net` uses and how many
/// peers each serves ("si to 1 peer, tcp to 2 peers"); `None` for a table that is not a
/// composite's.
pub fn describe(intra: &str, net: &str, table: &NodeTable, node: usize) -> Option<String> {
    let infos = plan::decode_all(table).ok()?;
    let (shm, other) = plan::peers(&plan::routes(&infos, node));
    Some(format!(
        "{intra} to {}, {net} to {}",
        plan::plural(shm),
        plan::plural(other)
    ))
}
