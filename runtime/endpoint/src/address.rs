//! Address strings, Mercury's way: `SCHEME://WHERE`.
//!
//! | scheme | where | in this build |
//! |---|---|---|
//! | `tcp` | `HOST:PORT` (a name, an IPv4 address or `[IPv6]`; port 0 to listen on any) | yes |
//! | `si` | a name, for processes of the same host (shared memory) | not yet: refused, naming what is |
//! | `udp` | `HOST:PORT` | not yet: refused, naming what is |
//! | `ofi+PROVIDER`, `ucx+TRANSPORT` | a fabric's address | only once those layers have landed: refused |
//! | `mpi+dynamic` | an MPI port name | refused |
//!
//! Every refusal is one line naming the address and the schemes this build offers.

use crate::EndpointError;
use std::net::{SocketAddr, ToSocketAddrs};

/// The schemes this build listens on and connects to.
pub const AVAILABLE: &[&str] = &["tcp"];

/// Schemes that exist in the field (Mercury's, the fabric layers') but not in this build.
const KNOWN_ELSEWHERE: &[(&str, &str)] = &[
    ("si", "the same-host shared-memory scheme is not built yet"),
    ("udp", "the UDP scheme is not built yet"),
    ("mpi+dynamic", "MPI connect/accept is not offered"),
];

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
}

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

    /// The socket addresses a `tcp` address resolves to.
    ///
    /// # Errors
    /// [`EndpointError::Address`] when the host does not resolve.
    pub fn resolve(&self, text: &str) -> Result<Vec<SocketAddr>, EndpointError> {
        match self {
            Address::Tcp { host, port } => {
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
pub(crate) fn display(bound: SocketAddr) -> String {
    let ip = if bound.ip().is_unspecified() {
        reachable_ip().unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
    } else {
        bound.ip()
    };
    match ip {
        std::net::IpAddr::V4(v4) => format!("tcp://{v4}:{}", bound.port()),
        std::net::IpAddr::V6(v6) => format!("tcp://[{v6}]:{}", bound.port()),
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
            ("si://ring", "not built yet"),
            ("udp://h:1", "not built yet"),
            ("ofi+tcp://h:1", "ofi layer is not compiled"),
            ("ucx+all://h", "ucx layer is not compiled"),
            ("gopher://h:1", "unknown scheme 'gopher'"),
        ] {
            let e = err(s);
            assert!(e.contains(needle), "{s}: {e}");
            assert!(e.contains(s), "{s}: {e}");
            assert!(e.contains("schemes in this build: tcp"), "{s}: {e}");
            assert!(!e.contains('\n'), "{s}: {e}");
        }
    }

    #[test]
    fn display_replaces_an_unspecified_ip() {
        let a = display("0.0.0.0:80".parse().unwrap());
        assert!(
            a.starts_with("tcp://") && a.ends_with(":80") && !a.contains("0.0.0.0"),
            "{a}"
        );
        assert_eq!(display("[::1]:9".parse().unwrap()), "tcp://[::1]:9");
    }
}
