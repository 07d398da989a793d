//! The UDP layer's settings (`+set udp.KEY=VALUE`), their defaults and their bounds.
//!
//! The defaults here are the only ones: variant files list only what they change, so a
//! program built as any variant gets the same behaviour.

use super::rtt::RtoBounds;
use converse_machine::{MachineError, Settings};
use std::fmt::Display;
use std::net::SocketAddr;
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;
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

/// Bounds of `udp.dead_after_s`: below 10 ms a peer descheduled for a moment would be dead.
const DEAD_AFTER_S: (f64, f64) = (0.01, 1e6);

/// The smallest MTU IPv4 guarantees.
const MIN_MTU: usize = 576;
/// Most connected send sockets: one per peer of the largest job the protocol numbers.
const MAX_CONNECTED_PEERS: usize = 65535;
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
    /// Peers sent to from a connected socket of their own, at most, in a job of three nodes
    /// or more (`udp.connected_peers`; default a quarter of the descriptor limit, at most
    /// 256; 0: none).
    pub connected_peers: usize,
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
            connected_peers: super::senders::default_limit(),
        }
    }
}

fn bad(key: &str, reason: String) -> MachineError {
    MachineError::Setting {
        key: key.into(),
        reason,
    }
}

/// A whole-number setting in `lo..=hi`, `default` when not set. Every refusal is one line
/// that says what was wrong (not a number, negative, out of range) and what is accepted.
fn whole<T>(s: &Settings, key: &str, default: T, lo: T, hi: T) -> Result<T, MachineError>
where
    T: FromStr<Err = ParseIntError> + PartialOrd + Display + Copy,
{
    let Some(v) = s.raw(key) else {
        return Ok(default);
    };
    let n = v.parse::<T>().map_err(|e| {
        let reason = match e.kind() {
            IntErrorKind::Empty => "no value".to_string(),
            IntErrorKind::PosOverflow => format!("{v} is outside {lo}..={hi}"),
            _ if is_negative_integer(v) => format!("{v} is negative"),
            _ => format!("'{v}' is not a whole number"),
        };
        bad(key, format!("{reason}: give a whole number in {lo}..={hi}"))
    })?;
    if n < lo || n > hi {
        return Err(bad(key, format!("{n} is outside {lo}..={hi}")));
    }
    Ok(n)
}

/// `-` and digits: a number, but below zero (the settings that use [`whole`] are unsigned).
fn is_negative_integer(v: &str) -> bool {
    v.strip_prefix('-')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// A setting in seconds, finite and in `lo..=hi` (`lo > 0`), `default` when not set: NaN,
/// infinities, negative numbers and zero are refused by name, never handed to `Duration`
/// (which would panic on them).
fn seconds(
    s: &Settings,
    key: &str,
    default: f64,
    (lo, hi): (f64, f64),
) -> Result<Duration, MachineError> {
    let Some(v) = s.raw(key) else {
        return Ok(Duration::from_secs_f64(default));
    };
    let refuse = |what: String| bad(key, format!("{what}: give seconds in {lo}..={hi}"));
    let x: f64 = v
        .parse()
        .map_err(|_| refuse(format!("'{v}' is not a number")))?;
    if x.is_nan() {
        return Err(refuse(format!("'{v}' is not a number")));
    }
    if x.is_infinite() {
        return Err(refuse(format!("'{v}' is not finite")));
    }
    if x < 0.0 {
        return Err(refuse(format!("{v} is negative")));
    }
    if x == 0.0 {
        return Err(refuse(format!("{v} is zero")));
    }
    if x < lo || x > hi {
        return Err(bad(key, format!("{v} is outside {lo}..={hi}")));
    }
    Ok(Duration::from_secs_f64(x))
}

impl Config {
    /// Read the `udp.*` settings, with defaults for those not set.
    ///
    /// # Errors
    /// [`MachineError::Setting`] for a value that does not parse or is out of range.
    pub fn from_settings(s: &Settings) -> Result<Config, MachineError> {
        let mtu = whole(s, "udp.mtu", DEFAULT_MTU, MIN_MTU, 65535)?;
        let window = whole(s, "udp.window", DEFAULT_WINDOW, 4, MAX_WINDOW)?;
        let sockbuf_kib = whole(s, "udp.sockbuf_kib", DEFAULT_SOCKBUF_KIB, 64, 1 << 20)?;
        let rto_min = whole(s, "udp.rto_min_us", DEFAULT_RTO_MIN_US, 10, 60_000_000)?;
        let rto_max = whole(s, "udp.rto_max_ms", DEFAULT_RTO_MAX_MS, 1, 600_000)?;
        let rto_initial = whole(s, "udp.rto_initial_ms", DEFAULT_RTO_INITIAL_MS, 1, 600_000)?;
        // Zero is meaningful here: acknowledge at once.
        let ack_delay = whole(s, "udp.ack_delay_us", DEFAULT_ACK_DELAY_US, 0, 1_000_000)?;
        let dead_after = seconds(s, "udp.dead_after_s", DEFAULT_DEAD_AFTER_S, DEAD_AFTER_S)?;
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
            Some(v) => {
                let a: SocketAddr = v
                    .parse()
                    .map_err(|_| bad("udp.via", format!("'{v}' is not IP:PORT")))?;
                if a.port() == 0 || a.ip().is_unspecified() {
                    return Err(bad(
                        "udp.via",
                        format!("{v} is no address to send to (port 0 or any-address)"),
                    ));
                }
                Some(a)
            }
        };
        let connected_peers = whole(
            s,
            "udp.connected_peers",
            super::senders::default_limit(),
            0,
            MAX_CONNECTED_PEERS,
        )?;
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
            dead_after,
            via,
            stats,
            connected_peers,
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
            ("udp.connected_peers", "many"),
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

    /// The error for `key=value` alone, as the user sees it.
    fn refusal(key: &str, value: &str) -> String {
        let mut s = Settings::default();
        s.set(key, value);
        match Config::from_settings(&s) {
            Ok(c) => panic!("{key}={value} was accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_bad_value_of_every_setting_is_one_clear_line() {
        let whole = [
            "udp.mtu",
            "udp.window",
            "udp.sockbuf_kib",
            "udp.rto_min_us",
            "udp.rto_max_ms",
            "udp.rto_initial_ms",
            "udp.ack_delay_us",
            "udp.connected_peers",
        ];
        let mut cases: Vec<(&str, &str, &str)> = Vec::new();
        for k in whole {
            cases.extend([
                (k, "nan", "'nan' is not a whole number"),
                (k, "inf", "'inf' is not a whole number"),
                (k, "-1", "-1 is negative"),
                (k, "1.5", "'1.5' is not a whole number"),
                (k, "", "no value"),
                (k, "99999999999999999999999", "is outside"),
                (k, "100000000", "100000000 is outside"),
            ]);
        }
        // Zero where it means nothing (every whole setting but the ACK delay).
        for k in &whole[..6] {
            cases.push((k, "0", "0 is outside"));
        }
        let d = "udp.dead_after_s";
        cases.extend([
            (d, "nan", "'nan' is not a number"),
            (d, "NaN", "'NaN' is not a number"),
            (d, "inf", "'inf' is not finite"),
            (d, "-inf", "'-inf' is not finite"),
            (d, "-1", "-1 is negative"),
            (d, "0", "0 is zero"),
            (d, "-0", "-0 is zero"),
            (d, "0.001", "0.001 is outside 0.01..=1000000"),
            (d, "1e7", "1e7 is outside"),
            (d, "soon", "'soon' is not a number"),
            ("udp.via", "0.0.0.0:9", "no address to send to"),
            ("udp.via", "127.0.0.1:0", "no address to send to"),
            ("udp.via", "localhost:9", "not IP:PORT"),
            ("udp.stats", "nan", "not true or false"),
        ]);
        for (k, v, says) in cases {
            let e = refusal(k, v);
            assert!(e.starts_with(&format!("setting {k}: ")), "{k}={v}: {e}");
            assert!(e.contains(says), "{k}={v}: {e:?} should say {says:?}");
            assert!(!e.contains('\n'), "{k}={v}: one line: {e:?}");
        }
    }

    #[test]
    fn out_of_range_names_the_range() {
        assert_eq!(
            refusal("udp.window", "1"),
            "setting udp.window: 1 is outside 4..=4096"
        );
        assert_eq!(
            refusal("udp.dead_after_s", "nan"),
            "setting udp.dead_after_s: 'nan' is not a number: give seconds in 0.01..=1000000"
        );
    }

    #[test]
    fn edge_values_are_accepted() {
        let mut s = Settings::default();
        s.set("udp.dead_after_s", "0.01");
        s.set("udp.ack_delay_us", "0");
        s.set("udp.window", "4096");
        let c = Config::from_settings(&s).expect("accepted");
        assert_eq!(c.dead_after, Duration::from_millis(10));
        assert_eq!(c.ack_delay, Duration::ZERO);
        assert_eq!(c.window, 4096);
    }

    #[test]
    fn connected_peers_defaults_to_a_share_of_the_descriptor_limit() {
        let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .expect("getrlimit");
        let c = Config::from_settings(&Settings::default()).expect("defaults");
        assert!(c.connected_peers <= 256);
        assert!(c.connected_peers as u64 <= soft / 4);
        assert_eq!(c.connected_peers as u64, (soft / 4).min(256));
        let mut s = Settings::default();
        s.set("udp.connected_peers", "0");
        assert_eq!(
            Config::from_settings(&s).map(|c| c.connected_peers).ok(),
            Some(0)
        );
        s.set("udp.connected_peers", "65535");
        assert_eq!(
            Config::from_settings(&s).map(|c| c.connected_peers).ok(),
            Some(65535)
        );
        assert_eq!(
            refusal("udp.connected_peers", "65536"),
            "setting udp.connected_peers: 65536 is outside 0..=65535"
        );
    }
}
