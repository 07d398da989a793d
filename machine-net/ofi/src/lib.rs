//! The machine layer on libfabric (OFI): one reliable datagram endpoint (`FI_EP_RDM`) per
//! node, tagged messages, started by charmrun like TCP.
//!
//! Compiled only with the `ofi` feature (which needs libfabric's headers and libclang to
//! build); without it the crate is only the settings and layer names below, so a default
//! build needs no libfabric and a variant file naming `ofi.*` settings is still checked. See
//! this crate's README.md for the design, the providers and what was tested here.
//!
//! With the `si` feature too, the composites `si+ofi`, `si+ofi+tcp`, ... ([`SI_NAMES`]):
//! shared memory within a host, this layer between hosts.
//!
//! ```text
//! cargo run -p conv-mach -- build ofi
//! target/ofi/release/charmrun +p4 target/ofi/release/examples/hello +machine ofi+tcp
//! ```

use converse_machine::SettingSpec;

#[cfg(feature = "ofi")]
mod fabric;
#[cfg(feature = "ofi")]
mod layer;
#[cfg(all(feature = "ofi", feature = "si"))]
mod multi;
#[cfg(feature = "ofi")]
mod sys;
// Need no libfabric: their tests run in every build.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
mod info;
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
mod tag;
#[cfg(feature = "ofi")]
mod transports;

#[cfg(feature = "ofi")]
pub use layer::OfiMachine;
#[cfg(all(feature = "ofi", feature = "si"))]
pub use multi::SI_LAYERS;
#[cfg(feature = "ofi")]
pub use transports::LAYERS;

/// `+machine` names of this layer, one per Mercury-style transport string (`ofi+PROTOCOL`),
/// with the libfabric provider each selects (`None`: the first suitable one libfabric lists).
/// Known in every build, so a name of a layer this build lacks gets "not compiled in".
pub const TRANSPORTS: &[(&str, Option<&str>)] = &[
    ("ofi", None),
    ("ofi+tcp", Some("tcp;ofi_rxm")),
    ("ofi+shm", Some("shm")),
    ("ofi+verbs", Some("verbs;ofi_rxm")),
    ("ofi+psm2", Some("psm2")),
    ("ofi+psm3", Some("psm3")),
    ("ofi+cxi", Some("cxi")),
    ("ofi+efa", Some("efa")),
    ("ofi+sockets", Some("sockets")),
];

/// `+machine` names of the composites over this layer (feature `si` too): shared memory
/// within a host, libfabric between hosts, one per transport string that reaches other hosts
/// (not `ofi+shm`), named `si+` and the string as `si+tcp` is. Known in every build.
pub const SI_NAMES: &[&str] = &[
    "si+ofi",
    "si+ofi+tcp",
    "si+ofi+verbs",
    "si+ofi+psm2",
    "si+ofi+psm3",
    "si+ofi+cxi",
    "si+ofi+efa",
    "si+ofi+sockets",
];

/// `ofi.provider`: overrides the transport string's provider.
pub(crate) const PROVIDER: SettingSpec = SettingSpec::text(
    "ofi.provider",
    "libfabric provider to use, as fi_info names it (tcp;ofi_rxm, shm, verbs;ofi_rxm, cxi, ...); \
     default: the one +machine ofi+PROTOCOL names, or for plain ofi the first suitable one",
);

/// `ofi.eager_kib`: rxm's own eager limit is 16 KiB; past it the provider's rendezvous moves
/// the bytes straight into the receive buffer, so a larger eager size only adds copies
/// through the provider's bounce buffers.
pub(crate) const EAGER_KIB: SettingSpec = SettingSpec::power_of_two(
    "ofi.eager_kib",
    16,
    1,
    1024,
    "largest message (KiB of wire bytes) sent eagerly into posted receives; larger ones are \
     announced and received straight into their own buffer",
);

/// `ofi.rx_posted`: more than a round of small messages from a few peers; a burst past it
/// waits in the provider's unexpected queue and still arrives in order.
pub(crate) const RX_POSTED: SettingSpec = SettingSpec::whole(
    "ofi.rx_posted",
    64,
    2,
    4096,
    "receives kept posted for eager messages (each ofi.eager_kib)",
);

/// The `ofi.*` settings; declared in every build so that a variant file naming them is
/// checked even where the layer is not compiled in.
pub const SETTINGS: &[SettingSpec] = &[PROVIDER, EAGER_KIB, RX_POSTED];
