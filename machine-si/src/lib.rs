//! The Simple Interconnect (SI) of the porting slides, made real on shared memory, and the
//! machine layer on it — the worked example of porting (see docs/porting.md).
//!
//! - [`interconnect`]: the SI API (`init`, `open`, `id`, `write`, `read`, `close`): each node
//!   has a port, a shared-memory file with a lock-free ring per sender; messages are received
//!   whole; a full ring makes a writer wait, never drops.
//! - [`layer`]: the machine layer, `CmiMachineInit` / `DeliverViaNetwork` /
//!   `CommunicationServer` / `CmiMachineExit` as the slides write them.
//! - [`pull`]: reading (and writing) a peer's memory with `process_vm_readv` / `writev`, for
//!   large messages copied once; [`coop`]: such a copy shared between receiver and sender.
//!
//! One host only (the layer refuses a job that spans hosts); processes are started by charmrun
//! and find each other's ports through the node table. Ports are removed from the file system
//! as soon as every node has mapped them; a node that ends before then (an error, or charmrun
//! gone and the control watchdog ending the process) removes its own first
//! (`charmrun::cleanup`), and charmrun removes what a killed node left: nothing of a job stays
//! in /dev/shm.
//!
//! `unsafe` is where the crate reaches memory Rust does not manage: the shared mapping (ring.rs,
//! segment.rs), the futex on it (segment.rs: no safe wrapper exists), a peer's memory
//! (pull.rs), and buffers those fill before their length is set (layer.rs, interconnect.rs).
//! Every block says why it is sound.

pub mod coop;
pub mod interconnect;
pub mod layer;
pub mod pull;
mod ring;
mod segment;
mod wake;

pub use layer::LAYER;
