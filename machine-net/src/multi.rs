//! `+machine si+tcp` and `+machine si+udp`: shared memory inside a host, TCP or UDP between
//! hosts. The composite itself is the launcher session's combinator
//! ([`converse_bootstrap::compose::Both`]) over the SI layer's boot phases and this crate's.

use converse_bootstrap::compose::{self, Both};
use converse_bootstrap::session;
use converse_machine::{BootConfig, Layer, Machine, MachineError};
use converse_si::layer::SiOpen;

/// `+machine si+tcp`: shared memory inside a host, TCP between hosts.
#[cfg(feature = "tcp")]
pub const SI_TCP: Layer = Layer {
    name: "si+tcp",
    summary: "charmrun's processes: shared memory between nodes of one host, TCP between hosts",
    boot: boot_si_tcp,
    launched: converse_machine::launch::LaunchEnv::present,
    settings: &[],
    check: converse_machine::no_settings,
    describe: |table, node| compose::describe("si", "tcp", table, node),
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
    describe: |table, node| compose::describe("si", "udp", table, node),
};

#[cfg(feature = "tcp")]
fn boot_si_tcp(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<Both<SiOpen, crate::tcp::TcpOpen>>(SI_TCP.name, cfg)
}

#[cfg(feature = "udp")]
fn boot_si_udp(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<Both<SiOpen, crate::udp::layer::UdpOpen>>(SI_UDP.name, cfg)
}
