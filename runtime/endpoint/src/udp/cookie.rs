//! A listener's `OPEN` cookies (SYN cookies; `udp/mod.rs` says why): the listener keeps no
//! state for an `OPEN` until the connector echoes the cookie it was sent.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A cookie's time bucket: one is valid in the bucket it was made in and the next, 8 to
/// 16 s (a connector echoes it one round trip later; a stale one is answered with a fresh
/// cookie, so a connector waiting long for a slot is not stranded).
const COOKIE_PERIOD: Duration = Duration::from_secs(8);

/// A listener's cookies (`udp/mod.rs`): `SHA-1(key, address, connection id, time bucket)`,
/// its first 8 bytes. The key is random per listener, so nobody outside can compute one;
/// prefixing the key is a sound MAC here because every message hashed has one fixed length
/// (SHA-1's length extension gives only longer messages, which are never checked).
pub(super) struct Cookies {
    key: [u8; 16],
    /// Time buckets count from here.
    born: Instant,
}

impl Cookies {
    pub(super) fn new() -> Cookies {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&super::session::random_u64().to_le_bytes());
        key[8..].copy_from_slice(&super::session::random_u64().to_le_bytes());
        Cookies {
            key,
            born: Instant::now(),
        }
    }

    fn bucket(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.born).as_secs() / COOKIE_PERIOD.as_secs()
    }

    fn mac(&self, peer: SocketAddr, conn: u64, bucket: u64) -> u64 {
        use sha1::{Digest, Sha1};
        let ip = match peer.ip() {
            std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            std::net::IpAddr::V6(v6) => v6,
        };
        let mut h = Sha1::new();
        h.update(self.key);
        h.update(ip.octets());
        h.update(peer.port().to_le_bytes());
        h.update(conn.to_le_bytes());
        h.update(bucket.to_le_bytes());
        let d = h.finalize();
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        // 0 says "no cookie" in an OPEN.
        u64::from_le_bytes(b).max(1)
    }

    /// The cookie for an `OPEN` from `peer` of connection `conn` now.
    pub(super) fn make(&self, peer: SocketAddr, conn: u64, now: Instant) -> u64 {
        self.mac(peer, conn, self.bucket(now))
    }

    /// Whether `cookie` is one made for `peer` and `conn` in this time bucket or the last.
    pub(super) fn valid(&self, peer: SocketAddr, conn: u64, cookie: u64, now: Instant) -> bool {
        let b = self.bucket(now);
        cookie != 0
            && (cookie == self.mac(peer, conn, b) || b > 0 && cookie == self.mac(peer, conn, b - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn a_cookie_is_bound_to_its_address_connection_and_time() {
        let c = Cookies::new();
        let (a, t) = (addr("10.0.0.1:5000"), c.born);
        let k = c.make(a, 42, t);
        assert!(c.valid(a, 42, k, t));
        assert!(
            c.valid(a, 42, k, t + COOKIE_PERIOD),
            "the next bucket still takes it"
        );
        assert!(!c.valid(a, 42, k, t + 2 * COOKIE_PERIOD), "expired");
        assert!(!c.valid(addr("10.0.0.2:5000"), 42, k, t), "another host");
        assert!(!c.valid(addr("10.0.0.1:5001"), 42, k, t), "another port");
        assert!(!c.valid(a, 43, k, t), "another connection");
        assert!(!c.valid(a, 42, 0, t), "no cookie");
        assert!(!c.valid(a, 42, k ^ 1, t));
        // Another listener's key makes other cookies.
        assert!(!Cookies::new().valid(a, 42, k, t));
    }
}
