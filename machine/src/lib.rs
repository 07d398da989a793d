//! The machine layer contract and what every layer shares.
//!
//! - [`Machine`]: the trait an interconnect implements (boot, send, advance, wait, barrier,
//!   exit, abort); its documentation is the contract.
//! - [`Message`]: the buffer every layer carries, with headroom for a layer header and the
//!   runtime's envelope codec.
//! - [`NodeTable`]: which nodes make up the job and how to reach them.
//! - [`Settings`]: named settings with the variant's defaults.
//! - [`launch`]: what a launcher tells the nodes it starts ([`launch::LaunchEnv`]).
//! - [`bytes`]: the checked byte reader and writer every format uses.
//! - [`rma`]: direct copies between processes' memory, the optional one-sided half.
//! - [`check`]: the contract checked against any layer inside one process.
//! - [`local`]: the in-process layer, the embedded default and reference implementation.

#![forbid(unsafe_code)]

pub mod bytes;
pub mod check;
pub mod compose;
mod contract;
mod error;
pub mod input;
pub mod launch;
pub mod local;
pub mod log;
mod message;
mod node_table;
mod pool;
pub mod rma;
mod settings;
pub mod suggest;
pub mod writes;

pub use compose::{Armed, Bell, Part};
pub use contract::{
    no_description, no_settings, BootConfig, BootFn, Layer, Machine, Transport, Wake,
};
pub use error::{MachineError, WireError};
pub use launch::LaunchEnv;
pub use message::{zeroed, Message, ENVELOPE_LEN, HEADROOM};
pub use node_table::{NodeInfo, NodeTable};
pub use pool::BufferPool;
pub use rma::{ProcessMemory, Rma, RmaFault};
pub use settings::{
    check_declared, markdown_table, SettingSpec, Settings, Value, FAULTS, FAULTS_SETTING,
};
