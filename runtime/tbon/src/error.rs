//! The overlay's errors.

use crate::filter::FilterId;
use crate::mapping::MappingError;
use crate::packet::PacketError;
use crate::topology::{Rank, TopologyError};

/// The first tag a program may use; smaller tags are the overlay's own (MRNet's
/// `FirstApplicationTag`).
pub const FIRST_APPLICATION_TAG: i32 = 100;

/// What went wrong in a call on the overlay.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TbonError {
    /// The topology is not a tree, or does not parse.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The tree does not fit the job.
    #[error(transparent)]
    Mapping(#[from] MappingError),
    /// A packet, format string or value is wrong.
    #[error(transparent)]
    Packet(#[from] PacketError),
    /// A tag below [`FIRST_APPLICATION_TAG`].
    #[error("tag {0} is reserved for the overlay; tags start at {FIRST_APPLICATION_TAG}")]
    ReservedTag(i32),
    /// A call only one role may make.
    #[error("{call} is for the {role} only")]
    Role {
        /// The call.
        call: &'static str,
        /// Who may make it.
        role: &'static str,
    },
    /// No stream with this id here.
    #[error("there is no stream {0} here")]
    NoStream(u32),
    /// The stream was closed.
    #[error("stream {0} is closed")]
    StreamClosed(u32),
    /// A rank that is not a back-end of the tree (or not an end-point of the stream).
    #[error("{0}")]
    BadRank(String),
    /// A filter that is not known here.
    #[error(
        "filter {0} is not loaded (built-in filters are 0 to 5; load others with load_filter)"
    )]
    NoFilter(FilterId),
    /// A filter placement string that does not parse.
    #[error("bad filter placement \"{text}\": {reason}")]
    Placement {
        /// The string.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// Loading a filter from a shared library failed (on this or another process).
    #[error("{0}")]
    Load(String),
    /// A filter failed on a wave of this stream; the wave was dropped.
    #[error("filter on stream {stream} failed at rank {rank}: {reason}")]
    Filter {
        /// The stream.
        stream: u32,
        /// Where it failed.
        rank: Rank,
        /// Why.
        reason: String,
    },
    /// A performance metric that cannot be recorded in that context (the guide's Table 2).
    #[error("metric {metric} cannot be recorded in context {context}")]
    PerfContext {
        /// The metric.
        metric: &'static str,
        /// The context.
        context: &'static str,
    },
    /// A wave of this stream lost a part in a process that died, and was dropped; waves
    /// after it are whole over the processes alive.
    #[error("a wave of stream {stream} was lost: {reason}")]
    WaveLost {
        /// The stream.
        stream: u32,
        /// Which process died, and where the wave was found lost.
        reason: String,
    },
    /// A process of the tree died while failure recovery was off: the stream cannot go on.
    #[error("stream {stream} failed: process {rank} died and failure recovery is off")]
    StreamFailed {
        /// The stream.
        stream: u32,
        /// The process that died.
        rank: Rank,
    },
    /// A back-end that died (a send to it, or a communicator naming it).
    #[error("back-end {0} has died")]
    DeadBackEnd(Rank),
    /// Failure recovery cannot work on this job: it did not ask the runtime to survive node
    /// failures (`RuntimeBuilder::survive_node_failures`, or `+set faults=report`), so any
    /// death ends it.
    #[error("failure recovery is not available: the job does not survive node failures (start it with survive_node_failures(true) or +set faults=report)")]
    RecoveryUnavailable,
    /// The front-end shut the network down.
    #[error("the network has been shut down")]
    ShutDown,
    /// The job is ending: nothing more will arrive.
    #[error("the job is ending")]
    JobEnded,
    /// A call made the wrong way (arguments that contradict each other).
    #[error("{0}")]
    Usage(String),
    /// The overlay was attached twice on one PE.
    #[error("the overlay is already attached on this PE")]
    AlreadyAttached,
    /// Creating the network (starting its processes) failed.
    #[error("cannot create the network: {0}")]
    Create(String),
    /// A back-end could not attach (unreachable parent, wrong secret, rank refused, an
    /// attach file or argument that does not read).
    #[error("cannot attach: {0}")]
    Attach(String),
    /// An attached back-end's connection to its parent ended.
    #[error("the connection to the parent ended: {0}")]
    ParentLost(String),
    /// An operating system call failed.
    #[error("{what}: {reason}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The system's reason.
        reason: String,
    },
}

/// Refuse tags below [`FIRST_APPLICATION_TAG`].
pub(crate) fn check_tag(tag: i32) -> Result<(), TbonError> {
    if tag < FIRST_APPLICATION_TAG {
        Err(TbonError::ReservedTag(tag))
    } else {
        Ok(())
    }
}
