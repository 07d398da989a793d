//! The net layers: machine layers over sockets, for jobs of separate processes started by
//! charmrun, on one host or across hosts.
//!
//! - [`tcp`]: a TCP connection between every pair of nodes, length-prefixed frames,
//!   `TCP_NODELAY`, non-blocking sockets driven by the scheduler's poll loop, connections
//!   accepted only with the job secret.
//! - [`udp`]: one UDP socket per node; packetization, sliding windows, cumulative and
//!   selective acknowledgements, retransmission on a timer from measured round trips,
//!   congestion and flow control, dead-peer detection, every datagram checked.
//! - `multi` (feature `si`; not linked, since the link would dangle without it): `si+tcp`
//!   and `si+udp`, shared memory between the nodes of a host and one of the above between
//!   hosts, chosen per peer at boot (`converse_bootstrap::compose` over SI and these layers).
//! - [`wake`]: the eventfd a layer's `wait` polls and other threads ring.

#[cfg(feature = "tcp")]
mod conn;
#[cfg(feature = "tcp")]
mod door;
// Addresses in the node table serve both layers; connection set-up only TCP.
#[cfg_attr(not(feature = "tcp"), allow(dead_code))]
mod mesh;
#[cfg(all(feature = "si", any(feature = "tcp", feature = "udp")))]
pub mod multi;
#[cfg(feature = "tcp")]
pub mod tcp;
#[cfg(feature = "udp")]
pub mod udp;
/// The eventfd every poll-based layer sleeps beside (TCP, UDP, and the fabric layers under
/// `machine-net/`), which other threads ring to end its `wait`.
pub mod wake;
