//! The net layers: machine layers over sockets, for jobs of separate processes started by
//! charmrun, on one host or across hosts.
//!
//! - [`tcp`]: a TCP connection between every pair of nodes, length-prefixed frames,
//!   `TCP_NODELAY`, non-blocking sockets driven by the scheduler's poll loop, connections
//!   accepted only with the job secret.
//!
//! The UDP layer (packetization, windows, acknowledgements, retransmission) is to come.

mod conn;
mod mesh;
pub mod tcp;
