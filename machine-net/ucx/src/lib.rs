//! The machine layer on UCX (UCP's tagged messages), one process per node started by charmrun.
//!
//! Compiled only with the `ucx` feature (UCX's headers and libclang to build, `libucp` to
//! link); without it the crate declares its settings and layer names and nothing else, so a
//! variant file naming `ucx.*` is still checked and `+machine ucx` can say "not compiled in".
//! See this crate's README.md for the design, what was tested and the known problems.
//!
//! One layer per transport string, in Mercury's style: `ucx` (UCX chooses, from `UCX_TLS` or
//! every transport it has), `ucx+tcp`, `ucx+shm` (one host), `ucx+rc`, `ucx+ud`, `ucx+all`.
//! They all boot the same layer; only the transports handed to UCX differ.
//!
//! With the `si` feature too, the composites `si+ucx`, `si+ucx+tcp`, ... ([`SI_NAMES`]):
//! shared memory within a host, this layer between hosts.

#[cfg(feature = "ucx")]
mod layer;
#[cfg(all(feature = "ucx", feature = "si"))]
mod multi;
#[cfg(feature = "ucx")]
mod sys;

#[cfg(feature = "ucx")]
pub use layer::{boot_with, UcxMachine, UcxOpen, LAYERS};
#[cfg(all(feature = "ucx", feature = "si"))]
pub use multi::SI_LAYERS;

/// One transport string: the layer's name, and the transports it gives UCX (`UCX_TLS`'s
/// syntax).
#[derive(Debug, Clone, Copy)]
// Without the layer, only the names are read.
#[cfg_attr(not(feature = "ucx"), allow(dead_code))]
pub(crate) struct Kind {
    /// `+machine` name.
    pub(crate) name: &'static str,
    /// What `ucp_config_modify(config, "TLS", ...)` gets; `None`: nothing, UCX decides (from
    /// `UCX_TLS` in the environment, or every transport it finds).
    pub(crate) tls: Option<&'static str>,
    /// Shared memory only: a job must fit one host.
    pub(crate) one_host: bool,
    /// `ucx.err_mode=auto`: which endpoints ask UCX for peer-failure handling.
    pub(crate) peer_errors: PeerErrors,
    /// For `+machine`'s listing.
    pub(crate) summary: &'static str,
}

/// Which endpoints are made in `UCP_ERR_HANDLING_MODE_PEER`. UCX 1.13's shared-memory
/// transports (posix, sysv, cma) have no peer-failure handler: an endpoint that asks for one
/// is refused over them ("no peer failure handler"), or, when UCX may choose, goes over TCP
/// even within a host (measured here: 5.9 us instead of 0.57 us one-way for 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerErrors {
    /// Every endpoint (the network transports: tcp, rc, ud).
    All,
    /// None (shared memory): a dead peer is found by charmrun, as for SI.
    No,
    /// Endpoints to nodes on other hosts (as the node table names them); within a host, none,
    /// so UCX may use shared memory there.
    OtherHosts,
}

/// Every transport string, in the order of [`NAMES`] (and of `LAYERS`).
pub(crate) const KINDS: [Kind; 6] = [
    Kind {
        name: "ucx",
        tls: None,
        one_host: false,
        peer_errors: PeerErrors::OtherHosts,
        summary: "UCX tagged messages, transports as UCX chooses (UCX_TLS or all), charmrun",
    },
    Kind {
        name: "ucx+tcp",
        tls: Some("tcp,self"),
        one_host: false,
        peer_errors: PeerErrors::All,
        summary: "UCX tagged messages over TCP sockets, started by charmrun",
    },
    Kind {
        name: "ucx+shm",
        tls: Some("posix,sysv,cma,self"),
        one_host: true,
        peer_errors: PeerErrors::No,
        summary: "UCX tagged messages over shared memory (one host), started by charmrun",
    },
    Kind {
        name: "ucx+rc",
        tls: Some("rc,self"),
        one_host: false,
        peer_errors: PeerErrors::All,
        summary: "UCX tagged messages over InfiniBand/RoCE reliable connections, charmrun",
    },
    Kind {
        name: "ucx+ud",
        tls: Some("ud,self"),
        one_host: false,
        peer_errors: PeerErrors::All,
        summary: "UCX tagged messages over InfiniBand unreliable datagrams, charmrun",
    },
    Kind {
        name: "ucx+all",
        tls: Some("all"),
        one_host: false,
        peer_errors: PeerErrors::OtherHosts,
        summary: "UCX tagged messages, every transport UCX has, started by charmrun",
    },
];

/// The transports the layer called `name` gives UCX (`UCX_TLS` syntax): `Some(None)` for
/// `ucx` (UCX's choice), `None` for a name that is not one of this crate's. For tools that run
/// UCX's own programs the same way (`bench pingpong`'s `ucx_perftest` baseline).
pub fn tls_of(name: &str) -> Option<Option<&'static str>> {
    KINDS.iter().find(|k| k.name == name).map(|k| k.tls)
}

/// Every layer name this crate provides, compiled in or not (the runtime's `KNOWN`).
pub const NAMES: &[&str] = &[
    KINDS[0].name,
    KINDS[1].name,
    KINDS[2].name,
    KINDS[3].name,
    KINDS[4].name,
    KINDS[5].name,
];

/// `+machine` names of the composites over this layer (feature `si` too): shared memory
/// within a host, UCX between hosts, one per transport string that reaches other hosts (not
/// `ucx+shm`), named `si+` and the string as `si+tcp` is. Known in every build.
pub const SI_NAMES: &[&str] = &[
    "si+ucx",
    "si+ucx+tcp",
    "si+ucx+rc",
    "si+ucx+ud",
    "si+ucx+all",
];

/// `ucx.tls`: overrides the transport string's own set (`UCX_TLS` syntax).
pub(crate) const TLS: converse_machine::SettingSpec = converse_machine::SettingSpec::text(
    "ucx.tls",
    "transports given to UCX (UCX_TLS syntax, e.g. tcp,self); overrides the layer name's set",
);

/// `ucx.exit_flush`: how long `exit` keeps pushing what is still in flight.
pub(crate) const EXIT_FLUSH: converse_machine::SettingSpec = converse_machine::SettingSpec::seconds(
    "ucx.exit_flush",
    2.0,
    0.0,
    600.0,
    "at exit, how long to wait for sends still in flight, seconds",
);

/// `ucx.err_mode`: UCX's peer-failure handling on endpoints ([`PeerErrors`]).
pub(crate) const ERR_MODE: converse_machine::SettingSpec = converse_machine::SettingSpec::choice(
    "ucx.err_mode",
    &["auto", "peer", "none"],
    "endpoints' peer-failure handling: peer (a dead peer is an error at once), none (found by \
     charmrun), auto (none for ucx+shm and within a host for ucx, ucx+all and ucx.tls, so UCX \
     may use shared memory there; peer otherwise)",
);

/// The `ucx.*` settings; declared in every build so that a variant file naming them is
/// checked even where the layer is not compiled in.
pub const SETTINGS: &[converse_machine::SettingSpec] = &[TLS, EXIT_FLUSH, ERR_MODE];
