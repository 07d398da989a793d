//! The errors of building a topology and of talking along one.

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopoError {
    /// A topology needs at least one process.
    #[error("a topology needs at least one process")]
    Empty,
    /// A constructor argument that makes no topology (a star centre beyond the processes, a
    /// grid dimension of 0, ...).
    #[error("{0}")]
    Invalid(String),
    /// An adjacency matrix that is not square.
    #[error("the matrix is not square: row {row} has {got} entries, the matrix has {rows} rows")]
    NotSquare {
        /// The row (from 0).
        row: usize,
        /// Entries in it.
        got: usize,
        /// Rows in the matrix.
        rows: usize,
    },
    /// An adjacency matrix whose channels are not both ways (the topology's channels are
    /// bi-directional, as the seed's).
    #[error("the matrix is not symmetric: entry ({a},{b}) is {ab} but ({b},{a}) is {ba}")]
    NotSymmetric {
        /// Row.
        a: usize,
        /// Column.
        b: usize,
        /// Entry (a,b).
        ab: u32,
        /// Entry (b,a).
        ba: u32,
    },
    /// An adjacency matrix with a channel from a process to itself (a non-zero diagonal
    /// entry): refused rather than dropped, since a matrix that has one is not what its author
    /// meant.
    #[error("the matrix's diagonal is not 0: entry ({process},{process}) is {weight}, and a process has no channel to itself")]
    SelfChannel {
        /// The process (row and column).
        process: usize,
        /// The entry.
        weight: u32,
    },
    /// The graph is not connected: `process` cannot be reached from process 0.
    #[error("the topology is not connected: process {process} cannot be reached from process 0")]
    Disconnected {
        /// A process that cannot be reached.
        process: usize,
    },
    /// A matrix file that does not parse (one line: file, line, what).
    #[error("{file}:{line}: {reason}")]
    Parse {
        /// The file.
        file: String,
        /// Its line (from 1).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Reading a file failed.
    #[error("{file}: {reason}")]
    Io {
        /// The file.
        file: String,
        /// The system's reason.
        reason: String,
    },
    /// The topology names more PEs than the job has, or a PE twice.
    #[error("{0}")]
    Placement(String),
    /// A process id that is not in the topology.
    #[error("process {id} is not in the topology of {n} processes")]
    NoSuchProcess {
        /// The id.
        id: usize,
        /// Processes in the topology.
        n: usize,
    },
    /// Processes called a collective with arguments that do not match (different roots,
    /// different operations, sizes to scatter that disagree). Every process of the topology
    /// gets this error for that collective and for every later one.
    #[error("collective #{seq} mismatch: {detail}")]
    Mismatch {
        /// The collective's sequence number (from 0, per topology).
        seq: u32,
        /// Which processes disagree, and about what.
        detail: String,
    },
    /// Arguments that cannot be right whatever the others pass (a root beyond the
    /// processes, data that does not split into equal segments).
    #[error("{0}")]
    BadArgument(String),
    /// `unlock` without holding the lock.
    #[error("process {0} unlocks a mutex it does not hold")]
    NotHolder(usize),
    /// A process of the topology is out of the job (report mode: its node died). The first
    /// death fails every call waiting on the topology and every later call that talks along
    /// it, on every process, as a mismatch does: with a process gone the routes, the trees
    /// and the mutex's token cannot be trusted, and a call that went on could wait for ever
    /// on a process that itself waits on the dead one. Messages that had arrived stay
    /// readable ([`Topo::recv`](crate::Topo::recv), [`Topo::try_recv`](crate::Topo::try_recv)).
    #[error(
        "process {process} of the topology (PE {pe}, node {node}) is out of the job: {reason}"
    )]
    ProcessDead {
        /// The process (the lowest of the topology's on the dead node).
        process: usize,
        /// Its PE.
        pe: usize,
        /// Its node.
        node: usize,
        /// Why, as the launcher or the layer saw it.
        reason: String,
    },
    /// The job ended while waiting.
    #[error("the job ended while waiting")]
    JobEnded,
    /// A message that does not decode (a peer of another version, corruption).
    #[error("a topology message that does not decode: {0}")]
    Corrupt(String),
}
