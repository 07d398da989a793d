//! charmrun: the launcher of multi-process jobs, and the node side of its protocol.
//!
//! The `charmrun` binary starts node processes locally or on the hosts of a nodelist through
//! a remote shell; every node connects back, proves it belongs to the job with the per-job
//! secret from its environment, sends its layer's address, and receives the full node table
//! once all are in. charmrun then forwards output whole lines at a time, serves barriers, and
//! ends the job with the first non-zero exit code of any node — or at once, naming the node,
//! when one crashes. The node side of its protocol is the `converse-bootstrap` crate (re-exported
//! here as [`client`], [`protocol`], [`net`] and [`cleanup`]), which layers depend on instead of
//! this one; charmrun knows nothing of any layer.

pub mod agent;
pub mod launch;
pub mod mpiexec;
pub mod nodelist;
pub mod opts;
pub mod output;
pub mod reap;
pub mod slurm;
pub mod spawn;

pub use converse_bootstrap::{cleanup, client, net, protocol};
