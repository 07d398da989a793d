//! Address strings, Mercury's way: `SCHEME://WHERE`.
//!
//! | scheme | where | in this build |
//! |---|---|---|
//! | `tcp` | `HOST:PORT` (a name, an IPv4 address or `[IPv6]`; port 0 to listen on any) | yes |
//! | `si` | a name (1 to 100 of `A-Z a-z 0-9 . _ -`; empty to listen: one is made), for processes of the same host: a Unix socket in the abstract namespace `converse-endpoint/NAME` (of the network namespace) | yes |
//! | `udp` | `HOST:PORT` (as `tcp`): a reliable stream over datagrams (`udp/`), one UDP socket per listener, its peers told apart by source address | yes |
//! | `ofi+PROVIDER`, `ucx+TRANSPORT` | a fabric's address | only once those layers have landed: refused |
//! | `mpi+dynamic` | an MPI port name | refused |
//!
//! Every refusal is one line naming the address and the schemes this build offers.

use crate::stream::{Listener, Stream};
use crate::EndpointError;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

/// The schemes this build listens on and connects to.
pub const AVAILABLE: &[&str] = &["tcp", "udp", "si"];

/// Schemes that exist in the field (Mercury's, the fabric layers') but not in this build.
const KNOWN_ELSEWHERE: &[(&str, &str)] = &[("mpi+dynamic", "MPI connect/accept is not offered")];

/// A parsed address string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// `tcp://HOST:PORT`: the host as written and the port.
    Tcp {
        /// A name or an address (IPv6 without its brackets).
        host: String,
        /// 0 when listening: any free port.
        port: u16,
    },
    /// `udp://HOST:PORT`: as `Tcp`, over UDP.
    Udp {
        /// A name or an address (IPv6 without its brackets).
        host: String,
        /// 0 when listening: any free port.
        port: u16,
    },
    /// `si://NAME`: a Unix socket of this host (empty: a name made when listening).
    Si {
        /// The name.
        name: String,
    },
}

/// Longest `si://` name.
const MAX_SI_NAME: usize = 100;

impl Address {
    /// Parse an address string.
    ///
    /// # Errors
    /// [`EndpointError::Address`], one line naming the address and what this build offers:
    /// no `://`, an unknown scheme (with the nearest known one), a scheme not in this build,
    /// or a malformed `HOST:PORT`.
    ///
    /// ```
    /// use converse_endpoint::Address;
    /// assert_eq!(
    ///     Address::parse("tcp://10.0.0.2:5000").unwrap(),
    ///     Address::Tcp { host: "10.0.0.2".into(), port: 5000 }
    /// );
    /// assert!(Address::parse("tpc://h:1").unwrap_err().to_string().contains("did you mean tcp"));
    /// assert_eq!(Address::parse("si://stream-1").unwrap(), Address::Si { name: "stream-1".into() });
    /// assert_eq!(
    ///     Address::parse("udp://:0").unwrap(),
    ///     Address::Udp { host: "0.0.0.0".into(), port: 0 }
    /// );
    /// ```
    pub fn parse(s: &str) -> Result<Address, EndpointError> {
        let bad = |why: String| EndpointError::Address {
            addr: s.to_string(),
            why,
        };
        let available = AVAILABLE.join(", ");
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(bad(format!(
                "not an address string: SCHEME://WHERE (schemes in this build: {available})"
            )));
        };
        match scheme {
            "tcp" => {
                let (host, port) =
                    split_host_port(rest).ok_or_else(|| {
                        bad("a tcp address is tcp://HOST:PORT (port 0 to 65535; [IPv6] in brackets)"
                        .to_string())
                    })?;
                Ok(Address::Tcp { host, port })
            }
            "udp" => {
                let (host, port) =
                    split_host_port(rest).ok_or_else(|| {
                        bad("a udp address is udp://HOST:PORT (port 0 to 65535; [IPv6] in brackets)"
                        .to_string())
                    })?;
                Ok(Address::Udp { host, port })
            }
            "si" => {
                let ok = rest.len() <= MAX_SI_NAME
                    && rest
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
                if !ok {
                    return Err(bad(format!(
                        "an si name is up to {MAX_SI_NAME} of A-Z a-z 0-9 . _ -"
                    )));
                }
                Ok(Address::Si {
                    name: rest.to_string(),
                })
            }
            _ => {
                if let Some((_, why)) = KNOWN_ELSEWHERE.iter().find(|(k, _)| *k == scheme) {
                    return Err(bad(format!("{why} (schemes in this build: {available})")));
                }
                if scheme.starts_with("ofi+") || scheme.starts_with("ucx+") {
                    return Err(bad(format!(
                        "the {} layer is not compiled into this build (schemes in this build: {available})",
                        &scheme[..3]
                    )));
                }
                let mut all: Vec<&str> = AVAILABLE.to_vec();
                all.extend(KNOWN_ELSEWHERE.iter().map(|(k, _)| *k));
                let hint = converse_machine::suggest::hint(scheme, all.iter().copied());
                Err(bad(format!(
                    "unknown scheme '{scheme}'{hint} (schemes in this build: {available})"
                )))
            }
        }
    }

    /// Bind a listener here; returns it and the address string others connect to.
    pub(crate) fn listen(&self, text: &str) -> Result<(Listener, String), EndpointError> {
        let fail = |e: std::io::Error| EndpointError::Listen {
            addr: text.to_string(),
            why: if e.kind() == std::io::ErrorKind::AddrInUse {
                "the address is in use".to_string()
            } else {
                e.to_string()
            },
        };
        match self {
            Address::Tcp { .. } => {
                let socks = self.resolve(text)?;
                let l = std::net::TcpListener::bind(&socks[..]).map_err(fail)?;
                l.set_nonblocking(true).map_err(fail)?;
                let shown = display("tcp", l.local_addr().map_err(fail)?);
                Ok((Listener::Tcp(l), shown))
            }
            Address::Udp { .. } => {
                let socks = self.resolve(text)?;
                let l = crate::udp::UdpListener::bind(&socks).map_err(fail)?;
                let shown = display("udp", l.local_addr());
                Ok((Listener::Udp(l), shown))
            }
            Address::Si { name } => {
                let name = if name.is_empty() {
                    static MADE: std::sync::atomic::AtomicU32 =
                        std::sync::atomic::AtomicU32::new(0);
                    let k = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    format!("job-{}-{k}", std::process::id())
                } else {
                    name.clone()
                };
                let l = std::os::unix::net::UnixListener::bind_addr(
                    &abstract_addr(&name).map_err(fail)?,
                )
                .map_err(fail)?;
                l.set_nonblocking(true).map_err(fail)?;
                Ok((Listener::Unix(l), format!("si://{name}")))
            }
        }
    }

    /// Connect to the listener here, within `deadline`.
    pub(crate) fn dial(&self, text: &str, deadline: Instant) -> Result<Stream, EndpointError> {
        let unreachable = |why: String| EndpointError::Unreachable {
            addr: text.to_string(),
            why,
        };
        match self {
            Address::Tcp { .. } => {
                let mut last = String::from("no address to try");
                for sa in self.resolve(text)? {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match std::net::TcpStream::connect_timeout(&sa, left) {
                        Ok(s) => return Ok(Stream::Tcp(s)),
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(unreachable(last))
            }
            Address::Udp { .. } => {
                crate::udp::dial(&self.resolve(text)?, text, deadline).map(Stream::Udp)
            }
            Address::Si { name } => {
                if name.is_empty() {
                    return Err(EndpointError::Address {
                        addr: text.to_string(),
                        why: "an si address to connect to names its listener".into(),
                    });
                }
                let a = abstract_addr(name).map_err(|e| unreachable(e.to_string()))?;
                std::os::unix::net::UnixStream::connect_addr(&a)
                    .map(Stream::Unix)
                    .map_err(|e| {
                        unreachable(if e.kind() == std::io::ErrorKind::ConnectionRefused {
                            "nothing listens on that name on this host".into()
                        } else {
                            e.to_string()
                        })
                    })
            }
        }
    }

    /// The socket addresses a `tcp` or `udp` address resolves to (none for `si`).
    ///
    /// # Errors
    /// [`EndpointError::Address`] when the host does not resolve.
    pub fn resolve(&self, text: &str) -> Result<Vec<SocketAddr>, EndpointError> {
        match self {
            Address::Si { .. } => Ok(Vec::new()),
            Address::Tcp { host, port } | Address::Udp { host, port } => {
                let found: Vec<SocketAddr> = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| EndpointError::Address {
                        addr: text.to_string(),
                        why: format!("host {host} does not resolve: {e}"),
                    })?
                    .collect();
                if found.is_empty() {
                    return Err(EndpointError::Address {
                        addr: text.to_string(),
                        why: format!("host {host} has no address"),
                    });
                }
                Ok(found)
            }
        }
    }
}

/// The abstract Unix socket address of an `si` name (Linux: no file, gone with its socket).
fn abstract_addr(name: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(format!("converse-endpoint/{name}"))
}

/// `HOST:PORT` or `[V6]:PORT`; an empty host means every interface.
fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:")?;
        (h.to_string(), p)
    } else {
        let (h, p) = s.rsplit_once(':')?;
        if h.contains(':') {
            return None;
        }
        (if h.is_empty() { "0.0.0.0" } else { h }.to_string(), p)
    };
    if host.is_empty() || host.contains('/') || !port.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((host, port.parse().ok()?))
}

/// The address string of a bound socket, with an unspecified IP (listening on every
/// interface) replaced by one others can reach: the host's first non-loopback IPv4 address,
/// or loopback if it has none.
pub(crate) fn display(scheme: &str, bound: SocketAddr) -> String {
    let ip = if bound.ip().is_unspecified() {
        reachable_ip().unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
    } else {
        bound.ip()
    };
    match ip {
        std::net::IpAddr::V4(v4) => format!("{scheme}://{v4}:{}", bound.port()),
        std::net::IpAddr::V6(v6) => format!("{scheme}://[{v6}]:{}", bound.port()),
    }
}

fn reachable_ip() -> Option<std::net::IpAddr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        let a = ifa.address?;
        let v4 = a.as_sockaddr_in()?.ip();
        (!v4.is_loopback()).then_some(std::net::IpAddr::V4(v4))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        Address::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn tcp_forms() {
        assert_eq!(
            Address::parse("tcp://[::1]:7").unwrap(),
            Address::Tcp {
                host: "::1".into(),
                port: 7
            }
        );
        assert_eq!(
            Address::parse("tcp://:0").unwrap(),
            Address::Tcp {
                host: "0.0.0.0".into(),
                port: 0
            }
        );
        assert_eq!(
            Address::parse("tcp://node-3:65535").unwrap(),
            Address::Tcp {
                host: "node-3".into(),
                port: 65535
            }
        );
    }

    #[test]
    fn refusals_name_the_address_and_what_is_available() {
        for (s, needle) in [
            ("tcp//h:1", "SCHEME://WHERE"),
            ("tcp://h", "tcp://HOST:PORT"),
            ("tcp://h:65536", "tcp://HOST:PORT"),
            ("tcp://h:-1", "tcp://HOST:PORT"),
            ("tcp://::1:5", "tcp://HOST:PORT"),
            ("tcpp://h:1", "did you mean tcp"),
            ("si://a/b", "an si name is"),
            ("udp://h", "udp://HOST:PORT"),
            ("mpi+dynamic://p", "not offered"),
            ("ofi+tcp://h:1", "ofi layer is not compiled"),
            ("ucx+all://h", "ucx layer is not compiled"),
            ("gopher://h:1", "unknown scheme 'gopher'"),
        ] {
            let e = err(s);
            assert!(e.contains(needle), "{s}: {e}");
            assert!(e.contains(s), "{s}: {e}");
            // A scheme refused names those there are; a malformed address, its form.
            let known = ["tcp://", "si://", "udp://"]
                .iter()
                .any(|k| s.starts_with(k));
            assert!(
                known || e.contains("schemes in this build: tcp, udp, si"),
                "{s}: {e}"
            );
            assert!(!e.contains('\n'), "{s}: {e}");
        }
    }

    #[test]
    fn display_replaces_an_unspecified_ip() {
        let a = display("tcp", "0.0.0.0:80".parse().unwrap());
        assert!(
            a.starts_with("tcp://") && a.ends_with(":80") && !a.contains("0.0.0.0"),
            "{a}"
        );
        assert_eq!(display("tcp", "[::1]:9".parse().unwrap()), "tcp://[::1]:9");
        assert_eq!(
            display("udp", "127.0.0.1:9".parse().unwrap()),
            "udp://127.0.0.1:9"
        );
    }
}
