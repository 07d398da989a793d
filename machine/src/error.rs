//! Errors a layer reports to the runtime.

use std::io;

/// What went wrong in a layer. The runtime treats every error from
/// [`send`](crate::Transport::send), [`advance`](crate::Transport::advance) and
/// [`wait`](crate::Transport::wait) as fatal to the job — it reports the error (naming the PE
/// and node) and aborts — with one exception: in report mode (`faults=report`, the contract's
/// "Report mode") a [`MachineError::PeerDead`] is the report of that node's death, and the job
/// goes on over the survivors. A layer therefore never retries forever: when a peer is gone it
/// says so with [`MachineError::PeerDead`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MachineError {
    /// A peer node stopped answering or closed its end: the job cannot go on.
    #[error("node {node} ({host}) is gone: {reason}")]
    PeerDead {
        /// The node that died.
        node: usize,
        /// Its host as the node table has it.
        host: String,
        /// What the layer saw (connection reset, timeout, ...).
        reason: String,
    },
    /// A peer sent nothing for longer than the layer waits while data to it is outstanding. The
    /// layer cannot tell a dead or stopped node from one busy in a long handler (with one PE
    /// per process its protocol does not run then), so it says what to do for the latter.
    #[error(
        "node {node} ({host}) sent nothing for {secs:.1} s while data to it waited: it died, was \
         stopped, or is busy in a handler for longer than {setting} allows (for long handlers, \
         run with ++ppn 2 or more, whose communication thread keeps answering while PEs \
         compute, or raise it: +set {setting}=SECONDS)"
    )]
    PeerSilent {
        /// The silent node.
        node: usize,
        /// Its host as the node table has it.
        host: String,
        /// How long it has been silent, in seconds.
        secs: f64,
        /// The setting that bounds the silence.
        setting: &'static str,
    },
    /// A node number outside the node table.
    #[error("no node {node} (the job has {nodes})")]
    InvalidNode {
        /// The node asked for.
        node: usize,
        /// How many nodes there are.
        nodes: usize,
    },
    /// Start-up failed: the layer could not learn its node or the node table.
    #[error("start-up failed: {0}")]
    Boot(String),
    /// A setting is missing a value, has one that does not parse, or is out of range.
    #[error("setting {key}: {reason}")]
    Setting {
        /// The setting's name.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What the layer was doing.
        context: String,
        /// The error the OS gave.
        #[source]
        source: io::Error,
    },
    /// A peer sent bytes that do not decode; the layer cannot trust the stream any more.
    #[error("corrupt data from node {node}: {source}")]
    Corrupt {
        /// The node the data came from.
        node: usize,
        /// What was wrong with it.
        #[source]
        source: WireError,
    },
    /// The job was aborted elsewhere (another node, or the launcher) and this node must stop.
    #[error("job aborted: {0}")]
    Aborted(String),
}

impl MachineError {
    /// Shorthand for an [`MachineError::Io`] with context.
    pub fn io(context: impl Into<String>, source: io::Error) -> MachineError {
        MachineError::Io {
            context: context.into(),
            source,
        }
    }

    /// Shorthand for a [`MachineError::PeerDead`] naming the node's host from `table`.
    pub fn peer_dead(
        table: &crate::NodeTable,
        node: usize,
        reason: impl Into<String>,
    ) -> MachineError {
        MachineError::PeerDead {
            node,
            host: table.node(node).map_or("?", |n| n.host.as_str()).to_owned(),
            reason: reason.into(),
        }
    }
}

impl MachineError {
    /// Shorthand for a [`MachineError::Corrupt`] from `node` whose bytes break a rule the
    /// layer states in `what`.
    pub fn corrupt(node: usize, what: impl Into<String>) -> MachineError {
        MachineError::Corrupt {
            node,
            source: WireError::Invalid(what.into()),
        }
    }
}

/// Bytes that do not decode as what they claim to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the structure needs.
    #[error("truncated: {len} bytes where at least {need} are needed")]
    Truncated {
        /// Bytes available.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A magic number or version that is not ours.
    #[error("bad magic or version")]
    BadMagic,
    /// A length or count field that cannot be right.
    #[error("bad length field: {0}")]
    BadLength(String),
    /// A text field that is not UTF-8.
    #[error("text field is not UTF-8")]
    NotUtf8,
    /// Any other rule of the format broken; the text says which.
    #[error("{0}")]
    Invalid(String),
}
