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
//! How it runs: see `node/` (the handlers) and `protocol.rs` (the control messages). The
//! overlay is a program on [`converse`] like any other: it registers handlers, sends, and
//! drives the PE with [`Pe::run_until`](converse::Pe::run_until) and
//! [`Pe::progress`](converse::Pe::progress), nothing private to the runtime.

mod builtin;
pub mod codec;
pub mod communicator;
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

pub use codec::{Element, FromElement, Large, Pack, Unpack};
pub use communicator::Communicator;
pub use create::{create_network_fe, create_network_fe_with, run_backend, run_backend_with};
pub use error::{TbonError, FIRST_APPLICATION_TAG};
pub use events::{CallbackId, Event, EventClass, EventKind};
pub use filter::{
    Filter, FilterContext, FilterError, FilterId, FilterState, FnFilter, TopologyLocalInfo,
    FIRST_USER_FILTER, TFILTER_ARRAY_CONCAT, TFILTER_AVG, TFILTER_MAX, TFILTER_MIN, TFILTER_NULL,
    TFILTER_SUM,
};
pub use format::{BaseType, ElemType, Format, FormatError, Shape};
pub use mapping::MapPolicy;
pub use network::{attach, Network, Options};
pub use node::Role;
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
