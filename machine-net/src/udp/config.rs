//! The UDP layer's settings (`+set udp.KEY=VALUE`), their defaults and their bounds.
//!
//! The defaults here are the only ones: variant files list only what they change, so a
//! program built as any variant gets the same behaviour.

use super::rtt::RtoBounds;
use machine::{MachineError, Settings};
use std::net::SocketAddr;
use std::time::Duration;

/// Largest IP packet the layer sends; the path MTU to a peer lowers it (`udp.mtu`).
pub const DEFAULT_MTU: usize = 65535;
/// Packets in flight per peer at most (`udp.window`).
pub const DEFAULT_WINDOW: usize = 128;
/// Socket send and receive buffers asked for, KiB (`udp.sockbuf_kib`).
pub const DEFAULT_SOCKBUF_KIB: usize = 16384;
/// Retransmission timeout floor, µs (`udp.rto_min_us`).
pub const DEFAULT_RTO_MIN_US: u64 = 1000;
/// Retransmission timeout ceiling, backoff included, ms (`udp.rto_max_ms`).
pub const DEFAULT_RTO_MAX_MS: u64 = 1000;
/// Retransmission timeout before the first RTT sample, ms (`udp.rto_initial_ms`).
pub const DEFAULT_RTO_INITIAL_MS: u64 = 20;
/// Longest an acknowledgement waits for data to ride on, µs (`udp.ack_delay_us`).
pub const DEFAULT_ACK_DELAY_US: u64 = 500;
/// Silence, with data outstanding, after which a peer is dead, s (`udp.dead_after_s`).
pub const DEFAULT_DEAD_AFTER_S: f64 = 30.0;

/// The smallest MTU IPv4 guarantees.
const MIN_MTU: usize = 576;
/// Most packets a window may span: the SACK extension covers 32 + 4096.
const MAX_WINDOW: usize = 4096;

/// The settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Largest IP packet.
    pub mtu: usize,
    /// Packets in flight per peer.
    pub window: usize,
    /// Socket buffers asked for, bytes.
    pub sockbuf: usize,
    /// Retransmission timeout bounds.
    pub rto: RtoBounds,
    /// Longest delay of an acknowledgement.
    pub ack_delay: Duration,
    /// Silence after which a peer with data outstanding is dead.
    pub dead_after: Duration,
    /// Send every datagram to this address instead of the peer's, and accept datagrams only
    /// from it (`udp.via`, unset by default): for a relay that reorders and duplicates them
    /// in tests.
    pub via: Option<SocketAddr>,
    /// Print this node's counters when it leaves (`udp.stats`, default false).
    pub stats: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mtu: DEFAULT_MTU,
            window: DEFAULT_WINDOW,
            sockbuf: DEFAULT_SOCKBUF_KIB << 10,
            rto: RtoBounds {
                min: Duration::from_micros(DEFAULT_RTO_MIN_US),
                max: Duration::from_millis(DEFAULT_RTO_MAX_MS),
                initial: Duration::from_millis(DEFAULT_RTO_INITIAL_MS),
            },
            ack_delay: Duration::from_micros(DEFAULT_ACK_DELAY_US),
            dead_after: Duration::from_secs_f64(DEFAULT_DEAD_AFTER_S),
            via: None,
            stats: false,
        }
    }
}

fn bad(key: &str, reason: String) -> MachineError {
    MachineError::Setting {
        key: key.into(),
        reason,
    }
}

fn ranged<T>(s: &Settings, key: &str, default: T, lo: T, hi: T) -> Result<T, MachineError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    T::Err: std::fmt::Display,
{
    let v = s.get_or(key, default)?;
    if v < lo || v > hi {
        return Err(bad(key, format!("{v} is outside {lo}..={hi}")));
    }
    Ok(v)
}

impl Config {
    /// Read the `udp.*` settings, with defaults for those not set.
    ///
    /// # Errors
    /// [`MachineError::Setting`] for a value that does not parse or is out of range.
    pub fn from_settings(s: &Settings) -> Result<Config, MachineError> {
        let mtu = ranged(s, "udp.mtu", DEFAULT_MTU, MIN_MTU, 65535)?;
        let window = ranged(s, "udp.window", DEFAULT_WINDOW, 4, MAX_WINDOW)?;
        let sockbuf_kib = ranged(s, "udp.sockbuf_kib", DEFAULT_SOCKBUF_KIB, 64, 1 << 20)?;
        let rto_min = ranged(s, "udp.rto_min_us", DEFAULT_RTO_MIN_US, 10, 60_000_000)?;
        let rto_max = ranged(s, "udp.rto_max_ms", DEFAULT_RTO_MAX_MS, 1, 600_000)?;
        let rto_initial = ranged(s, "udp.rto_initial_ms", DEFAULT_RTO_INITIAL_MS, 1, 600_000)?;
        let ack_delay = ranged(s, "udp.ack_delay_us", DEFAULT_ACK_DELAY_US, 0, 1_000_000)?;
        let dead_after = ranged(s, "udp.dead_after_s", DEFAULT_DEAD_AFTER_S, 0.01, 1e6)?;
        let rto = RtoBounds {
            min: Duration::from_micros(rto_min),
            max: Duration::from_millis(rto_max),
            initial: Duration::from_millis(rto_initial),
        };
        if rto.min > rto.max {
            return Err(bad(
                "udp.rto_min_us",
                format!("{rto_min} µs is above udp.rto_max_ms ({rto_max} ms)"),
            ));
        }
        let ack_delay = Duration::from_micros(ack_delay);
        if ack_delay >= rto.min {
            // The sender would time out before the acknowledgement is even sent.
            return Err(bad(
                "udp.ack_delay_us",
                format!("must be below udp.rto_min_us ({rto_min})"),
            ));
        }
        let via = match s.raw("udp.via") {
            None | Some("") => None,
            Some(v) => Some(
                v.parse()
                    .map_err(|_| bad("udp.via", format!("'{v}' is not HOST:PORT")))?,
            ),
        };
        let stats = match s.raw("udp.stats") {
            None | Some("0" | "false" | "no") => false,
            Some("1" | "true" | "yes") => true,
            Some(v) => return Err(bad("udp.stats", format!("'{v}' is not true or false"))),
        };
        Ok(Config {
            mtu,
            window,
            sockbuf: sockbuf_kib << 10,
            rto,
            ack_delay,
            dead_after: Duration::from_secs_f64(dead_after),
            via,
            stats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_without_settings() {
        assert_eq!(
            Config::from_settings(&Settings::default()).ok(),
            Some(Config::default())
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (k, v) in [
            ("udp.mtu", "100"),
            ("udp.window", "x"),
            ("udp.rto_min_us", "5000000"),
            ("udp.ack_delay_us", "2000"),
            ("udp.dead_after_s", "-1"),
            ("udp.via", "nowhere"),
            ("udp.stats", "maybe"),
        ] {
            let mut s = Settings::default();
            s.set(k, v);
            let e = Config::from_settings(&s).err().map(|e| e.to_string());
            assert!(
                e.as_deref()
                    .is_some_and(|e| e.starts_with(&format!("setting {k}"))),
                "{k}={v}: {e:?}"
            );
        }
    }
}
