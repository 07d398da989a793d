//! A tree overlay (TBON) in the style of MRNet: a front-end broadcasts to many back-ends and
//! reduces their answers through a tree of processes whose nodes are runtime handlers on the
//! PEs of a job.
//!
//! The pieces, one file each: [`topology`] (the tree and its queries), [`topology_file`]
//! (MRNet topology files), [`topgen`] (generated trees), [`mapping`] (tree processes onto PEs),
//! [`format`] and [`packet`] (typed packets in a compact binary form), [`sync`] and [`filter`]
//! (synchronization and transformation filters).

pub mod filter;
pub mod format;
pub mod mapping;
pub mod packet;
pub mod sync;
pub mod topgen;
pub mod topology;
pub mod topology_file;

pub use filter::{
    Filter, FilterError, FilterId, FilterState, FnFilter, TopologyLocalInfo, FIRST_USER_FILTER,
    TFILTER_ARRAY_CONCAT, TFILTER_AVG, TFILTER_MAX, TFILTER_MIN, TFILTER_NULL, TFILTER_SUM,
};
pub use format::{BaseType, ElemType, Format, FormatError, Shape};
pub use packet::{Element, FromElement, Large, Pack, Packet, PacketError, Unpack, Value};
pub use sync::{SyncMode, Synchronizer, SFILTER_DONTWAIT, SFILTER_TIMEOUT, SFILTER_WAITFORALL};
pub use topology::{
    ProcName, Rank, Topology, TopologyError, TreeNode, TreeStats, FIRST_INTERNAL_RANK,
};
