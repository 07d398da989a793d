//! Process topologies over a converse job: a program lays a logical topology — ring, line,
//! star, 2-D or N-D grid or torus, fully connected, or an arbitrary graph from an adjacency
//! matrix — over its PEs and then talks along it.
//!
//! - [`Topology`]: the classes and their queries (neighbours, coordinates, shift, distance),
//!   shortest-path routes and the spanning [`Tree`]s collectives travel.
//! - [`attach`] lays a topology over the running job (every PE calls it) and gives a [`Topo`]:
//!   point to point routed hop by hop ([`Topo::send`], [`Topo::recv`] from one process or
//!   [`Source::Any`], [`Topo::last_sender`]); collectives on the spanning tree rooted at the
//!   root ([`Topo::broadcast`], [`Topo::scatter`], [`Topo::scatter_uneven`], [`Topo::gather`],
//!   [`Topo::reduce`], [`Topo::all_reduce`], [`Topo::barrier`]), each also message-driven
//!   (`…_then` with a callback); a distributed mutex ([`Topo::lock`], [`Topo::unlock`]);
//!   vector time on every message ([`Topo::vector_time`]).
//! - Report mode (`+set faults=report`): a process of the topology that dies fails every call
//!   waiting on the topology and every later one with [`TopoError::ProcessDead`], naming it,
//!   on every survivor; nothing waits for ever.
//! - Pictures: calls made with [`Topo::set_visual`] (or the whole run with [`VISUAL_ENV`])
//!   record every hop; [`Topo::save_trace`] writes them and the `topo-draw` command draws
//!   them as SVG and DOT ([`draw`]).
//!
//! The crate is a program on [`converse`] like any other: three handlers per topology
//! (`topo.N.p2p`, `topo.N.coll`, `topo.N.ctl`), [`Pe::send_msg`](converse::Pe::send_msg) and
//! [`Pe::run_until`](converse::Pe::run_until); a program that attaches no topology pays
//! nothing.
//!
//! ```no_run
//! use converse_topo::{attach, Topology};
//! converse::run(|pe| {
//!     let n = pe.num_pes();
//!     let t = attach(pe, Topology::ring(n).unwrap()).unwrap().unwrap();
//!     let got = t.broadcast(pe, 0, b"hello").unwrap();
//!     assert_eq!(&*got, b"hello");
//!     let all = t.gather(pe, 0, &[t.id() as u8]).unwrap();
//!     if let Some(all) = all {
//!         println!("{all:?}");
//!     }
//!     t.barrier(pe).unwrap();
//!     pe.exit(0);
//! });
//! ```

#![forbid(unsafe_code)]

pub mod collective;
pub mod draw;
pub mod error;
mod failure;
pub mod files;
pub mod matrix;
mod mutex;
mod process;
mod routing;
pub mod topology;
pub mod trace;
pub mod tree;
pub mod vclock;
mod wire;

pub use collective::{Combine, VERIFY_AFTER};
pub use error::TopoError;
pub use process::{attach, Payload, Received, Source, Topo, VISUAL_ENV};
pub use topology::{Shape, Topology};
pub use trace::{Hop, Trace};
pub use tree::Tree;
pub use vclock::VectorTime;
