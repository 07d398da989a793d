//! A tree overlay (TBON) in the style of MRNet: a front-end broadcasts to many back-ends and
//! reduces their answers through a tree of processes whose nodes are runtime handlers on the
//! PEs of a job.
//!
//! - The tree: [`topology`] (a validated tree and its queries), [`topology_file`] (MRNet
//!   topology files), [`topgen`] (generated trees, and the `topgen` command), [`mapping`]
//!   (tree processes onto PEs).
//! - Data: [`format`](mod@format) (format strings), [`codec`] and [`value`] (values to and
//!   from their wire form) and [`packet`] (typed packets in a compact binary form).
//! - Filters: [`sync`] (wait for all, don't wait, timeout) and [`filter`] (null, sum, min, max,
//!   avg, concat, and the program's own), [`dynfilter`] (filters from shared libraries).
//! - The network: [`attach`] lays a tree over a running job (every PE calls it);
//!   [`create`](create::create_network_fe) makes the processes first, as MRNet's
//!   `CreateNetworkFE` does; [`Network`] is what the program then uses: communicators,
//!   streams, send and receive, filters, [`events`], [`perf`]ormance data, shutdown.
//!
//! **Failure recovery** (MRNet's, on by default: [`Network::set_failure_recovery`],
//! `MRNET_FAILURE_RECOVERY`). In a job that survives node failures —
//! [`create_network_fe`] asks for that itself when recovery is on; a program that builds its
//! runtime and then calls [`attach`] must build it with
//! [`survive_node_failures(true)`](converse::RuntimeBuilder::survive_node_failures) or start
//! every process with `+set faults=report` — the death of any process but the front-end is
//! survived: its orphans re-connect to their nearest surviving ancestor, in its place among
//! that ancestor's children, keeping their ranks ([`Topology::without`]; an ancestor rather
//! than a sibling because it is already on every orphan's path to the root, the depth does not
//! grow, and every survivor computes the same tree from the set of the dead alone). The new
//! parent gives each orphan the stream creations, parameters and packets it missed (down
//! packets are numbered per stream, and processes with internal children keep the last 1024
//! of each stream's, 16 MiB at most: an internal process further behind than that when it
//! dies leaves its orphans without the packets between); wait-for-all stops waiting for the dead: a wave that lost a part in a
//! dead process is reported lost once ([`TbonError::WaveLost`], in its place among the
//! stream's packets), and every later wave is whole over the survivors. The front-end gets
//! topology events ([`EventKind::ProcessRemoved`], [`EventKind::NewParent`],
//! [`EventKind::EndpointRemoved`] for a dead back-end, which is an event and not an error:
//! the streams go on over the others, and one left with no end-point is closed),
//! [`Network::orphan_nodes`] (those not re-connected yet), and a [`Network::topology`] (so
//! its DOT form) without the dead. With recovery off, the front-end gets `ProcessRemoved`
//! and [`EventKind::NetworkFailed`], and the streams through the dead process fail
//! ([`TbonError::StreamFailed`]) instead of waiting; without report mode a death ends the
//! job, as always. Filter state of the dead process is lost with it, but a filter that
//! exports its state ([`Filter::get_state`], the guide's `<name>_get_state`) has its orphans
//! hand theirs to their new parent, which filters it up to the front-end: a running aggregate
//! over the stream's history comes out exact again (what the dead process had taken in and not
//! passed on is in its orphans' states).
//!
//! How it runs: see `node/` (the handlers) and `protocol.rs` (the control messages). The
//! overlay is a program on [`converse`] like any other: it registers handlers, sends, and
//! drives the PE with [`Pe::run_until`](converse::Pe::run_until) and
//! [`Pe::progress`](converse::Pe::progress), nothing private to the runtime.

pub mod attached;
mod backend;
mod builtin;
pub mod codec;
pub mod communicator;
/// The front-end's embedded launcher: with the `launcher` feature (on by default).
#[cfg(feature = "launcher")]
pub mod create;
pub mod dynfilter;
pub mod error;
pub mod events;
pub mod filter;
pub mod format;
pub mod mapping;
mod network;
mod node;
pub mod packet;
pub mod perf;
mod protocol;
pub mod recovery;
pub mod stream;
pub mod sync;
pub mod topgen;
pub mod topology;
pub mod topology_file;
pub mod value;

pub use attached::{AttachFile, AttachPoint, BackEnd};
pub use backend::{run_backend, run_backend_with};
pub use codec::{Element, FromElement, Large, Pack, Unpack};
pub use communicator::Communicator;
#[cfg(feature = "launcher")]
pub use create::{create_network_fe, create_network_fe_with};
pub use error::{TbonError, FIRST_APPLICATION_TAG};
pub use events::{CallbackId, Event, EventClass, EventKind};
pub use filter::{
    Filter, FilterContext, FilterError, FilterId, FilterState, FnFilter, GetStateFn,
    TopologyLocalInfo, FIRST_USER_FILTER, TFILTER_ARRAY_CONCAT, TFILTER_AVG, TFILTER_MAX,
    TFILTER_MIN, TFILTER_NULL, TFILTER_SUM,
};
pub use format::{BaseType, ElemType, Format, FormatError, Shape};
pub use mapping::MapPolicy;
pub use network::{attach, Network, Options};
pub use node::{Role, EXT_QUEUE_BYTES};
pub use packet::{Packet, PacketError};
pub use perf::{Aggregate, Context, Metric, PerfData, RankPerfData};
pub use stream::{FilterType, Stream, StreamSpec, FIRST_USER_STREAM};
pub use sync::{
    Ready, SyncMode, Synchronizer, SFILTER_DONTWAIT, SFILTER_TIMEOUT, SFILTER_WAITFORALL,
};
pub use topology::{
    ProcName, Rank, Topology, TopologyError, TreeNode, TreeStats, FIRST_INTERNAL_RANK,
};
pub use value::Value;
