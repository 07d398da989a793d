//! The UDP layer's settings (`+set udp.KEY=VALUE`), their defaults and their bounds.
//!
//! The defaults here are the only ones: variant files list only what they change, so a
//! program built as any variant gets the same behaviour.

use super::rtt::RtoBounds;
use converse_machine::{MachineError, SettingSpec, Settings, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// `udp.mtu`: from the smallest MTU IPv4 guarantees.
const MTU: SettingSpec = SettingSpec::whole(
    "udp.mtu",
    65535,
    576,
    65535,
    "largest IP packet sent, bytes; the path lowers it",
);
/// `udp.window`: the SACK extension covers 32 + 4096 packets.
const WINDOW: SettingSpec =
    SettingSpec::whole("udp.window", 128, 4, 4096, "packets in flight per peer");
/// `udp.sockbuf_kib`.
const SOCKBUF_KIB: SettingSpec = SettingSpec::whole(
    "udp.sockbuf_kib",
    16384,
    64,
    1 << 20,
    "socket buffers asked for, KiB",
);
/// `udp.rto_min_us`.
const RTO_MIN_US: SettingSpec = SettingSpec::whole(
    "udp.rto_min_us",
    1000,
    10,
    60_000_000,
    "retransmission timeout floor, µs",
);
/// `udp.rto_max_ms`: backoff included.
const RTO_MAX_MS: SettingSpec = SettingSpec::whole(
    "udp.rto_max_ms",
    1000,
    1,
    600_000,
    "retransmission timeout ceiling, ms",
);
/// `udp.rto_initial_ms`.
const RTO_INITIAL_MS: SettingSpec = SettingSpec::whole(
    "udp.rto_initial_ms",
    20,
    1,
    600_000,
    "retransmission timeout before an RTT sample, ms",
);
/// `udp.ack_delay_us`: zero is meaningful, acknowledge at once.
const ACK_DELAY_US: SettingSpec = SettingSpec::whole(
    "udp.ack_delay_us",
    500,
    0,
    1_000_000,
    "longest an acknowledgement waits to ride on data, µs; below udp.rto_min_us",
);
/// `udp.dead_after_s`: below 10 ms a peer descheduled for a moment would be dead.
const DEAD_AFTER_S: SettingSpec = SettingSpec::seconds(
    "udp.dead_after_s",
    30.0,
    0.01,
    1e6,
    "silence, with data outstanding, after which a peer is dead, s",
);
/// `udp.connected_peers`: at most one per peer of the largest job the protocol numbers.
const CONNECTED_PEERS: SettingSpec = SettingSpec::whole(
    "udp.connected_peers",
    256,
    0,
    65535,
    "in a job of 3+ nodes without udp.via (a relay takes every datagram), peers sent to from \
     a connected socket of their own (no route lookup per datagram); the rest from the \
     node's socket",
)
.computed("a quarter of the soft RLIMIT_NOFILE, at most 256");
/// `udp.coalesce_us`: as `tcp.coalesce_us`.
const COALESCE_US: SettingSpec = SettingSpec::whole(
    "udp.coalesce_us",
    50,
    0,
    1_000_000,
    "a small message sent within this long of the last send to its peer, in the same \
     handler, waits to leave with the next ones, bundled in few datagrams (by the handler's \
     end at the latest), µs; 0: every message is sent at once, a datagram each",
);
/// `udp.via`.
const VIA: SettingSpec = SettingSpec::text(
    "udp.via",
    "send every datagram through this IP:PORT relay (tests)",
);

/// The `udp.*` settings.
pub(crate) const SETTINGS: &[SettingSpec] = &[
    MTU,
    WINDOW,
    SOCKBUF_KIB,
    RTO_MIN_US,
    RTO_MAX_MS,
    RTO_INITIAL_MS,
    ACK_DELAY_US,
    DEAD_AFTER_S,
    CONNECTED_PEERS,
    COALESCE_US,
    VIA,
];

/// A declared default (the declarations are checked by the tests to have one).
const fn default(spec: SettingSpec) -> u64 {
    match spec.value {
        Value::Whole { default, .. } => default,
        _ => 0,
    }
}

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
    /// Peers sent to from a connected socket of their own, at most, in a job of three nodes
    /// or more (`udp.connected_peers`; default a quarter of the descriptor limit, at most
    /// 256; 0: none).
    pub connected_peers: usize,
    /// A small message sent this soon after the last send to its peer, in the same turn,
    /// leaves with the next ones at the layer's flush (`udp.coalesce_us`; zero: never held).
    pub coalesce: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mtu: default(MTU) as usize,
            window: default(WINDOW) as usize,
            sockbuf: (default(SOCKBUF_KIB) as usize) << 10,
            rto: RtoBounds {
                min: Duration::from_micros(default(RTO_MIN_US)),
                max: Duration::from_millis(default(RTO_MAX_MS)),
                initial: Duration::from_millis(default(RTO_INITIAL_MS)),
            },
            ack_delay: Duration::from_micros(default(ACK_DELAY_US)),
            dead_after: match DEAD_AFTER_S.value {
                Value::Seconds { default, .. } => Duration::from_secs_f64(default),
                _ => Duration::ZERO,
            },
            via: None,
            connected_peers: super::senders::default_limit(),
            coalesce: Duration::from_micros(default(COALESCE_US)),
        }
    }
}

fn bad(key: &str, reason: String) -> MachineError {
    MachineError::Setting {
        key: key.into(),
        reason,
    }
}

impl Config {
    /// Read the `udp.*` settings, with defaults for those not set.
    ///
    /// # Errors
    /// [`MachineError::Setting`] for a value that does not parse or is out of range.
    pub fn from_settings(s: &Settings) -> Result<Config, MachineError> {
        let mtu = MTU.read_whole(s)? as usize;
        let window = WINDOW.read_whole(s)? as usize;
        let sockbuf_kib = SOCKBUF_KIB.read_whole(s)? as usize;
        let rto_min = RTO_MIN_US.read_whole(s)?;
        let rto_max = RTO_MAX_MS.read_whole(s)?;
        let rto_initial = RTO_INITIAL_MS.read_whole(s)?;
        let ack_delay = ACK_DELAY_US.read_whole(s)?;
        let dead_after = DEAD_AFTER_S.read_seconds(s)?;
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
        let via = match VIA.read_text(s) {
            None => None,
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
        let connected_peers =
            CONNECTED_PEERS.read_whole_or(s, super::senders::default_limit() as u64)? as usize;
        Ok(Config {
            mtu,
            window,
            sockbuf: sockbuf_kib << 10,
            rto,
            ack_delay,
            dead_after,
            via,
            connected_peers,
            coalesce: Duration::from_micros(COALESCE_US.read_whole(s)?),
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
