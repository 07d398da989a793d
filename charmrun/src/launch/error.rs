//! Why a job could not be started.

use crate::opts::UsageError;
use std::io;

/// Why a job could not be started; whatever was started for it has been ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The system's random source failed (the job secret comes from it).
    #[error("cannot make the job secret: {0}")]
    Random(getrandom::Error),
    /// The control socket cannot be opened.
    #[error("cannot open the control socket: {0}")]
    ControlSocket(#[source] io::Error),
    /// The current directory (where remote nodes start) is unknown.
    #[error("no current directory: {0}")]
    NoCurrentDir(#[source] io::Error),
    /// A host of the job has no address or no route.
    #[error("host {host} (node {node}) is unreachable: {source}")]
    Unreachable {
        /// The host.
        host: String,
        /// The first node placed there.
        node: usize,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A node's process (or its remote shell) cannot be started.
    #[error("cannot start node {node} on {host}: {source}")]
    Spawn {
        /// The node.
        node: usize,
        /// Where.
        host: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A node's output and exit cannot be watched (no thread).
    #[error("cannot watch node {node}: {source}")]
    Watch {
        /// The node.
        node: usize,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The thread of an embedded launcher cannot be started.
    #[error("cannot start the launcher thread: {0}")]
    Thread(#[source] io::Error),
    /// The thread of an embedded launcher ended before saying whether the job started.
    #[error("the launcher thread ended before starting the job")]
    LauncherGone,
    /// The command line asks for something this way of starting a job cannot do.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The MPI launcher (`++mpiexec`), or `srun` in a Slurm allocation, cannot be started.
    #[error("cannot start the launcher '{program}': {source}")]
    MpiLauncher {
        /// Its program.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Waiting for the MPI launcher failed.
    #[error("waiting for the MPI launcher: {0}")]
    Wait(#[source] io::Error),
}

impl LaunchError {
    /// The exit code for charmrun: 2 for a command line that cannot run (a usage error, a
    /// launcher that does not exist), 1 for a job that failed to start.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::Usage(_) | LaunchError::MpiLauncher { .. } => 2,
            _ => 1,
        }
    }
}
