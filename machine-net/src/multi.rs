//! `+machine si+tcp` and `+machine si+udp`: shared memory inside a host, TCP or UDP between
//! hosts. The composite itself is the SI crate's combinator
//! ([`converse_si::composite::Both`]), over this crate's layers' boot phases.

use converse_bootstrap::session;
use converse_machine::{BootConfig, Layer, Machine, MachineError};
use converse_si::composite::{self, Both};

/// `+machine si+tcp`: shared memory inside a host, TCP between hosts.
#[cfg(feature = "tcp")]
pub const SI_TCP: Layer = Layer {
    name: "si+tcp",
    summary: "charmrun's processes: shared memory between nodes of one host, TCP between hosts",
    boot: boot_si_tcp,
    launched: converse_machine::launch::LaunchEnv::present,
    settings: &[],
    check: converse_machine::no_settings,
    describe: |table, node| composite::describe("tcp", table, node),
};

/// `+machine si+udp`: shared memory inside a host, UDP between hosts.
#[cfg(feature = "udp")]
pub const SI_UDP: Layer = Layer {
    name: "si+udp",
    summary: "charmrun's processes: shared memory between nodes of one host, UDP between hosts",
    boot: boot_si_udp,
    launched: converse_machine::launch::LaunchEnv::present,
    settings: &[],
    check: converse_machine::no_settings,
    describe: |table, node| composite::describe("udp", table, node),
};

#[cfg(feature = "tcp")]
fn boot_si_tcp(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<Both<crate::tcp::TcpOpen>>(SI_TCP.name, cfg)
}

#[cfg(feature = "udp")]
fn boot_si_udp(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<Both<crate::udp::layer::UdpOpen>>(SI_UDP.name, cfg)
}
