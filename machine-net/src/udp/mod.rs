//! The UDP layer: the net layer over an unreliable interconnect, as Charm++'s net layer does
//! it. Datagrams get lost, duplicated and reordered; the layer still hands up every message
//! exactly once, in order per sender.
//!
//! - [`wire`]: the datagram header, and the checks every arriving datagram passes.
//! - `window`: the send side per peer, composed of: `send_queue` (messages numbered into
//!   packets), `flight` (packets in flight, SACKed or lost; the retransmission queue),
//!   `congestion` (the congestion window), `loss` (RACK, tail-loss probe, retransmission
//!   timeout); it adds the sliding window and flow control.
//! - `reassembly`: the receive side per peer: duplicates, reordering, fragments, delivery.
//! - `rtt`: the retransmission timeout from measured round trips (RFC 6298).
//! - `converse_machine::BufferPool` (shared with TCP): large buffers of messages sent, kept to
//!   receive large messages into.
//! - [`endpoint`]: one node's protocol with all peers, timers, dead peers; no socket in it.
//! - [`link`]: what the protocol asks of a socket (or of a simulated network).
//! - `sim` (tests only): a simulated network that loses, duplicates and reorders, to run
//!   endpoints over.
//! - `socket`: the node's one UDP socket (the one it receives on), batched system calls.
//! - `senders`: in jobs of three nodes or more, a connected send socket per peer (up to
//!   `udp.connected_peers`), so a send pays no route lookup.
//! - [`config`]: the `udp.*` settings.
//! - [`layer`]: the `Machine` implementation and boot through charmrun.

pub mod config;
mod congestion;
pub mod endpoint;
mod filter;
mod flight;
pub mod layer;
pub mod link;
mod loss;
mod reassembly;
mod rtt;
mod send_queue;
mod senders;
#[cfg(test)]
mod sim;
mod socket;
mod window;
pub mod wire;

pub use layer::LAYER;
