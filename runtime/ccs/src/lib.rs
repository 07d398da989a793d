//! Converse Client-Server (CCS), as Charm++ has it: a running job opens a port (`+server`,
//! or `charmrun ++server`), and programs outside it — a debugger, a live monitor, a steering
//! script — run handlers the job registered by name, on one PE, a list of PEs or all, and get
//! their replies.
//!
//! This crate holds what is the same on both ends: the wire format ([`wire`], Charm++'s, so
//! its clients work), authentication ([`auth`], Charm++'s SHA-1 keys), the [`Client`] (and
//! the `ccs` command), and the listener a job runs ([`server`]). The job's side — the handlers
//! and how requests reach them — is the runtime's (`converse::ccs`).

pub mod auth;
mod client;
pub mod server;
pub mod wire;

pub use auth::{Key, Keys};
pub use client::Client;
pub use wire::Dest;

/// What goes wrong, on either end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CcsError {
    /// A request that cannot be sent or was refused as malformed.
    #[error("bad request: {0}")]
    Request(String),
    /// A reply that is not one.
    #[error("bad reply: {0}")]
    Reply(String),
    /// A key that does not parse, or a key file without keys.
    #[error("{0}")]
    Key(String),
    /// The server does not take the key, or wants one.
    #[error("refused: {0}")]
    Refused(String),
    /// The connection closed before the reply: the server refused the request (its output
    /// says why: an unknown handler, a PE dead or outside the job, a bad key).
    #[error("the server closed the connection without a reply ({0}); its output says why")]
    Closed(String),
    /// A socket or file error.
    #[error("{0}")]
    Io(String),
}

impl CcsError {
    /// A connection that failed or closed mid-exchange.
    pub(crate) fn closed(e: std::io::Error) -> CcsError {
        CcsError::Closed(e.to_string())
    }
}
