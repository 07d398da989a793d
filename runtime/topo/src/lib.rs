//! Process topologies over a converse job.
//!
//! A program lays a logical topology — ring, line, star, 2-D or N-D grid or torus, fully
//! connected, or an arbitrary graph from an adjacency matrix — over its PEs and then talks
//! along it.
//!
//! - [`Topology`]: the classes and their queries (neighbours, coordinates, shift, distance),
//!   shortest-path routes and the spanning [`Tree`]s collectives travel.

pub mod error;
pub mod matrix;
mod routing;
pub mod topology;
pub mod tree;

pub use error::TopoError;
pub use topology::{Shape, Topology};
pub use tree::Tree;
