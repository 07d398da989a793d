//! The runtime's errors.

use converse_machine::MachineError;

/// Why a job could not start or did not end well.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A runtime argument (`+...`) is malformed or unknown.
    #[error("{0}")]
    Args(String),
    /// `+machine` named a layer this program does not have.
    #[error("{0}")]
    Layer(String),
    /// The layer failed.
    #[error(transparent)]
    Machine(#[from] MachineError),
    /// The processes of the job registered different handlers, so handler ids would not agree.
    #[error("handler tables differ between PEs: {0}")]
    HandlerMismatch(String),
    /// The job failed and another PE reported why.
    #[error("the job failed (reported by PE 0)")]
    FailedElsewhere,
    /// An error this process already printed (before leaving the layer, so that a launcher
    /// that ends the job when one process fails cannot cut the report off).
    #[error(transparent)]
    Reported(Box<RuntimeError>),
    /// A PE thread ended without reporting (it cannot: a panic aborts the job first).
    #[error("the thread of node {0} ended abnormally")]
    Panicked(usize),
}

impl RuntimeError {
    /// Whether another PE already told the user; the process should exit non-zero quietly.
    pub fn reported_elsewhere(&self) -> bool {
        matches!(
            self,
            RuntimeError::FailedElsewhere | RuntimeError::Reported(_)
        )
    }
}
