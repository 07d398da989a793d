//! The overlay's control messages and their encoding (little-endian, length-prefixed; every
//! decode is checked, so bytes from a broken peer give `None`, never a panic).
//!
//! | message | travels | what |
//! |---|---|---|
//! | `Plan` | from the front-end to every PE (runtime broadcast) | the tree and which PE plays which process |
//! | `Abandon` | like `Plan` | the front-end could not make the network, and why |
//! | `Ready` | up, once a subtree has its plan | instantiation: the front-end learns every process is in |
//! | `NewStream`, `Close`, `Params` | down the stream's processes | a stream's end-points and filters; its end; filter parameters |
//! | `Request` / `Ack` | down every process in scope, acknowledgements folded up | filter loading, shutdown, performance data |
//! | `Error` | up to the front-end | a filter failed, or a packet was refused |
//! | `Adopted` | from an orphan to its new parent, after a failure | per stream: down packets seen, batches sent up |
//! | `Reparented` | up to the front-end | a new parent has its orphan's `Adopted` |
//! | `AttachPoint` | up to the front-end, before `Ready` (attach mode) | where a leaf listens for back-ends |
//! | `Attach` | up to the front-end | a back-end asks a leaf to join under a rank |
//! | `Attached` | down the path to that leaf | the front-end's answer: added (on the way) or refused, and why |
//! | `Detached` | up to the front-end | an attached back-end's connection ended |
//! | `State` | from an orphan to its new parent, after `Adopted`; then up to the front-end | a stream's upstream filter state (`Filter::get_state`) as packets, filtered on the way up outside any wave |

use crate::events::EventKind;
use crate::perf::{Aggregate, Context, Metric, PerfData, Report};
use crate::stream::{Assign, FilterType, StreamSpec};
use crate::topology::{ProcName, Rank};
use converse::bytes::{ByteReader, ByteWriter};

const PLAN: u8 = 1;
/// The first byte of a plan, which a process takes before anything else.
pub(crate) const PLAN_TAG: u8 = PLAN;
const ABANDON: u8 = 9;
/// The first byte of an abandoned plan, taken like a plan.
pub(crate) const ABANDON_TAG: u8 = ABANDON;
const READY: u8 = 2;
const NEW_STREAM: u8 = 3;
const CLOSE: u8 = 4;
const PARAMS: u8 = 5;
const REQUEST: u8 = 6;
const ACK: u8 = 7;
const ERROR: u8 = 8;
const ADOPTED: u8 = 10;
const REPARENTED: u8 = 11;
const ATTACH_POINT: u8 = 12;
const ATTACH: u8 = 13;
const ATTACHED: u8 = 14;
const DETACHED: u8 = 15;
const STATE: u8 = 16;

/// What a request asks every process in its scope to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Req {
    /// Load filter `name` from `path` as filter `id`.
    Load { id: u32, path: String, name: String },
    /// The network ends.
    Shutdown,
    /// Start or stop recording.
    PerfSet {
        metric: Metric,
        ctx: Context,
        on: bool,
    },
    /// Send up what was recorded, and reset it.
    PerfCollect {
        metric: Metric,
        ctx: Context,
        how: Aggregate,
    },
    /// Print what was recorded, and reset it.
    PerfPrint { metric: Metric, ctx: Context },
    /// Failure recovery on or off.
    Recovery { on: bool },
}

/// A control message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ctl {
    Plan {
        tree: Vec<(ProcName, Option<usize>)>,
        pes: Vec<usize>,
        /// Attach mode: the secret back-ends prove to the leaves (hex), and every process is
        /// internal.
        attach: Option<String>,
        /// Back-ends ranked by name, as MRNet with `rank_backends = false`
        /// ([`Topology::ranked_by_name`](crate::Topology)), not `0 .. B` left to right.
        by_name: bool,
    },
    /// The front-end could not make the network: every PE gives up, saying why.
    Abandon {
        reason: String,
    },
    Ready,
    NewStream {
        id: u32,
        endpoints: Vec<Rank>,
        spec: StreamSpec,
    },
    Close {
        id: u32,
    },
    Params {
        id: u32,
        which: FilterType,
        packet: Vec<u8>,
    },
    /// `scope`: a stream id (its processes), or every process.
    Request {
        req: u32,
        scope: Option<u32>,
        what: Req,
    },
    Ack {
        req: u32,
        errors: Vec<(Rank, String)>,
        report: Report,
    },
    Error {
        stream: u32,
        rank: Rank,
        reason: String,
        kind: EventKind,
    },
    /// An orphan to its new parent: the streams it knows, each with the highest sequence
    /// number it has seen coming down and the batches it has sent up.
    Adopted {
        rank: Rank,
        streams: Vec<(u32, u32, u64)>,
    },
    /// Up to the front-end: `rank` is connected to its new parent `parent`.
    Reparented {
        rank: Rank,
        parent: Rank,
    },
    /// Up to the front-end: leaf `rank` takes back-ends at `addr` (`tcp://HOST:PORT`).
    AttachPoint {
        rank: Rank,
        addr: String,
    },
    /// Up to the front-end: a back-end on `host` asks leaf `leaf` to join as `rank`.
    Attach {
        leaf: Rank,
        rank: Rank,
        host: String,
    },
    /// Down the path to `leaf`: back-end `rank` is in (`refused` empty), or why not.
    Attached {
        leaf: Rank,
        rank: Rank,
        host: String,
        refused: String,
    },
    /// Up to the front-end: attached back-end `rank` is gone, and why.
    Detached {
        rank: Rank,
        why: String,
    },
    /// Up, after a failure: what the filters below made of an orphan's exported filter state
    /// on stream `stream` (packets' wire bytes), which the receiver filters outside any wave.
    State {
        stream: u32,
        packets: Vec<Vec<u8>>,
    },
}

/// The error kinds an `Error` message carries, by their number on the wire.
const ERROR_KINDS: [EventKind; 3] = [
    EventKind::FilterFailed,
    EventKind::FilterLoadFailed,
    EventKind::PacketRefused,
];

/// Appends the overlay's control fields, on the project's one checked byte writer.
#[derive(Default)]
pub(crate) struct Enc(pub Vec<u8>);

impl Enc {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Enc {
        self.0.put_u8(v);
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Enc {
        self.0.put_u32(v);
        self
    }
    fn u64(&mut self, v: u64) -> &mut Enc {
        self.0.put_u64(v);
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Enc {
        self.0.put_bytes(b);
        self
    }
    fn str(&mut self, s: &str) -> &mut Enc {
        self.0.put_str(s);
        self
    }
    fn assign(&mut self, a: &Assign) -> &mut Enc {
        self.u32(a.default).u32(a.ranks.len() as u32);
        for (r, id) in &a.ranks {
            self.u32(*r).u32(*id);
        }
        self
    }
    fn perf(&mut self, d: PerfData) -> &mut Enc {
        match d {
            PerfData::UInt(v) => self.u8(0).u64(v),
            PerfData::Float(v) => self.u8(1).u64(v.to_bits()),
        }
    }
}

/// Reads the overlay's control fields, on the project's one checked byte reader; `None` when
/// the bytes run out or lie.
pub(crate) struct Dec<'a>(pub ByteReader<'a>);

impl<'a> Dec<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Dec<'a> {
        Dec(ByteReader::new(b))
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.0.u8().ok()
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.0.u32().ok()
    }
    fn u64(&mut self) -> Option<u64> {
        self.0.u64().ok()
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        self.0.bytes().ok()
    }
    fn str(&mut self) -> Option<String> {
        self.0.str().ok().map(str::to_owned)
    }
    /// A count of items each taking at least `min` bytes: refused if the bytes cannot hold it.
    fn count(&mut self, min: usize) -> Option<usize> {
        self.0.count(min).ok()
    }
    fn assign(&mut self) -> Option<Assign> {
        let default = self.u32()?;
        let n = self.count(8)?;
        let ranks = (0..n)
            .map(|_| Some((self.u32()?, self.u32()?)))
            .collect::<Option<Vec<_>>>()?;
        Some(Assign { default, ranks })
    }
    fn perf(&mut self) -> Option<PerfData> {
        match self.u8()? {
            0 => Some(PerfData::UInt(self.u64()?)),
            1 => Some(PerfData::Float(f64::from_bits(self.u64()?))),
            _ => None,
        }
    }
    fn end(&self) -> Option<()> {
        self.0.finish().ok()
    }
}

impl Ctl {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Ctl::Plan {
                tree,
                pes,
                attach,
                by_name,
            } => {
                e.u8(PLAN).u32(tree.len() as u32);
                for ((name, parent), pe) in tree.iter().zip(pes) {
                    e.str(&name.host)
                        .u32(name.instance)
                        .u32(parent.map_or(u32::MAX, |p| p as u32))
                        .u32(*pe as u32);
                }
                match attach {
                    Some(secret) => e.u8(1).str(secret),
                    None => e.u8(0),
                };
                e.u8(u8::from(*by_name));
            }
            Ctl::Abandon { reason } => {
                e.u8(ABANDON).str(reason);
            }
            Ctl::Ready => {
                e.u8(READY);
            }
            Ctl::NewStream {
                id,
                endpoints,
                spec,
            } => {
                e.u8(NEW_STREAM).u32(*id).u32(endpoints.len() as u32);
                for r in endpoints {
                    e.u32(*r);
                }
                e.assign(&spec.up).assign(&spec.sync).assign(&spec.down);
            }
            Ctl::Close { id } => {
                e.u8(CLOSE).u32(*id);
            }
            Ctl::Params { id, which, packet } => {
                e.u8(PARAMS).u32(*id).u8(which.to_u8()).bytes(packet);
            }
            Ctl::Request { req, scope, what } => {
                e.u8(REQUEST).u32(*req).u32(scope.map_or(u32::MAX, |s| s));
                match what {
                    Req::Load { id, path, name } => {
                        e.u8(0).u32(*id).str(path).str(name);
                    }
                    Req::Shutdown => {
                        e.u8(1);
                    }
                    Req::PerfSet { metric, ctx, on } => {
                        e.u8(2).u8(*metric as u8).u8(*ctx as u8).u8(u8::from(*on));
                    }
                    Req::PerfCollect { metric, ctx, how } => {
                        e.u8(3).u8(*metric as u8).u8(*ctx as u8).u8(how.to_u8());
                    }
                    Req::PerfPrint { metric, ctx } => {
                        e.u8(4).u8(*metric as u8).u8(*ctx as u8);
                    }
                    Req::Recovery { on } => {
                        e.u8(5).u8(u8::from(*on));
                    }
                }
            }
            Ctl::Ack {
                req,
                errors,
                report,
            } => {
                e.u8(ACK).u32(*req).u32(errors.len() as u32);
                for (r, s) in errors {
                    e.u32(*r).str(s);
                }
                match report {
                    Report::Nothing => {
                        e.u8(0);
                    }
                    Report::Each(v) => {
                        e.u8(1).u32(v.len() as u32);
                        for (r, d) in v {
                            e.u32(*r).perf(*d);
                        }
                    }
                    Report::Folded { ranks, value } => {
                        e.u8(2).u32(*ranks).perf(*value);
                    }
                }
            }
            Ctl::Error {
                stream,
                rank,
                reason,
                kind,
            } => {
                let k = ERROR_KINDS.iter().position(|x| x == kind).unwrap_or(0);
                e.u8(ERROR).u32(*stream).u32(*rank).str(reason).u8(k as u8);
            }
            Ctl::Adopted { rank, streams } => {
                e.u8(ADOPTED).u32(*rank).u32(streams.len() as u32);
                for (id, seen, sent) in streams {
                    e.u32(*id).u32(*seen).u64(*sent);
                }
            }
            Ctl::Reparented { rank, parent } => {
                e.u8(REPARENTED).u32(*rank).u32(*parent);
            }
            Ctl::AttachPoint { rank, addr } => {
                e.u8(ATTACH_POINT).u32(*rank).str(addr);
            }
            Ctl::Attach { leaf, rank, host } => {
                e.u8(ATTACH).u32(*leaf).u32(*rank).str(host);
            }
            Ctl::Attached {
                leaf,
                rank,
                host,
                refused,
            } => {
                e.u8(ATTACHED).u32(*leaf).u32(*rank).str(host).str(refused);
            }
            Ctl::Detached { rank, why } => {
                e.u8(DETACHED).u32(*rank).str(why);
            }
            Ctl::State { stream, packets } => {
                e.u8(STATE).u32(*stream).u32(packets.len() as u32);
                for p in packets {
                    e.bytes(p);
                }
            }
        }
        e.0
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Ctl> {
        let mut d = Dec::new(b);
        let ctl = match d.u8()? {
            PLAN => {
                let n = d.count(16)?;
                let mut tree = Vec::with_capacity(n);
                let mut pes = Vec::with_capacity(n);
                for _ in 0..n {
                    let host = d.str()?;
                    let instance = d.u32()?;
                    let parent = d.u32()?;
                    pes.push(d.u32()? as usize);
                    let parent = (parent != u32::MAX).then_some(parent as usize);
                    tree.push((ProcName { host, instance }, parent));
                }
                let attach = match d.u8()? {
                    0 => None,
                    1 => Some(d.str()?),
                    _ => return None,
                };
                let by_name = match d.u8()? {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                Ctl::Plan {
                    tree,
                    pes,
                    attach,
                    by_name,
                }
            }
            ABANDON => Ctl::Abandon { reason: d.str()? },
            READY => Ctl::Ready,
            NEW_STREAM => {
                let id = d.u32()?;
                let n = d.count(4)?;
                let endpoints = (0..n).map(|_| d.u32()).collect::<Option<Vec<_>>>()?;
                let spec = StreamSpec {
                    up: d.assign()?,
                    sync: d.assign()?,
                    down: d.assign()?,
                };
                Ctl::NewStream {
                    id,
                    endpoints,
                    spec,
                }
            }
            CLOSE => Ctl::Close { id: d.u32()? },
            PARAMS => Ctl::Params {
                id: d.u32()?,
                which: FilterType::from_u8(d.u8()?)?,
                packet: d.bytes()?.to_vec(),
            },
            REQUEST => {
                let req = d.u32()?;
                let scope = d.u32()?;
                let scope = (scope != u32::MAX).then_some(scope);
                let what = match d.u8()? {
                    0 => Req::Load {
                        id: d.u32()?,
                        path: d.str()?,
                        name: d.str()?,
                    },
                    1 => Req::Shutdown,
                    2 => Req::PerfSet {
                        metric: Metric::from_u8(d.u8()?)?,
                        ctx: Context::from_u8(d.u8()?)?,
                        on: d.u8()? != 0,
                    },
                    3 => Req::PerfCollect {
                        metric: Metric::from_u8(d.u8()?)?,
                        ctx: Context::from_u8(d.u8()?)?,
                        how: Aggregate::from_u8(d.u8()?)?,
                    },
                    4 => Req::PerfPrint {
                        metric: Metric::from_u8(d.u8()?)?,
                        ctx: Context::from_u8(d.u8()?)?,
                    },
                    5 => Req::Recovery { on: d.u8()? != 0 },
                    _ => return None,
                };
                Ctl::Request { req, scope, what }
            }
            ACK => {
                let req = d.u32()?;
                let n = d.count(8)?;
                let errors = (0..n)
                    .map(|_| Some((d.u32()?, d.str()?)))
                    .collect::<Option<Vec<_>>>()?;
                let report = match d.u8()? {
                    0 => Report::Nothing,
                    1 => {
                        let n = d.count(13)?;
                        Report::Each(
                            (0..n)
                                .map(|_| Some((d.u32()?, d.perf()?)))
                                .collect::<Option<Vec<_>>>()?,
                        )
                    }
                    2 => Report::Folded {
                        ranks: d.u32()?,
                        value: d.perf()?,
                    },
                    _ => return None,
                };
                Ctl::Ack {
                    req,
                    errors,
                    report,
                }
            }
            ERROR => Ctl::Error {
                stream: d.u32()?,
                rank: d.u32()?,
                reason: d.str()?,
                kind: *ERROR_KINDS.get(d.u8()? as usize)?,
            },
            ADOPTED => {
                let rank = d.u32()?;
                let n = d.count(16)?;
                let streams = (0..n)
                    .map(|_| Some((d.u32()?, d.u32()?, d.u64()?)))
                    .collect::<Option<Vec<_>>>()?;
                Ctl::Adopted { rank, streams }
            }
            REPARENTED => Ctl::Reparented {
                rank: d.u32()?,
                parent: d.u32()?,
            },
            ATTACH_POINT => Ctl::AttachPoint {
                rank: d.u32()?,
                addr: d.str()?,
            },
            ATTACH => Ctl::Attach {
                leaf: d.u32()?,
                rank: d.u32()?,
                host: d.str()?,
            },
            ATTACHED => Ctl::Attached {
                leaf: d.u32()?,
                rank: d.u32()?,
                host: d.str()?,
                refused: d.str()?,
            },
            DETACHED => Ctl::Detached {
                rank: d.u32()?,
                why: d.str()?,
            },
            STATE => {
                let stream = d.u32()?;
                // Each packet takes at least its length's four bytes.
                let n = d.count(4)?;
                let packets = (0..n)
                    .map(|_| d.bytes().map(<[u8]>::to_vec))
                    .collect::<Option<Vec<_>>>()?;
                Ctl::State { stream, packets }
            }
            _ => return None,
        };
        d.end()?;
        Some(ctl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::SyncMode;
    use proptest::prelude::*;

    fn samples() -> Vec<Ctl> {
        vec![
            Ctl::Plan {
                tree: vec![
                    (ProcName::new("fe", 0), None),
                    (ProcName::new("be", 3), Some(0)),
                ],
                pes: vec![0, 5],
                attach: None,
                by_name: true,
            },
            Ctl::Plan {
                tree: vec![(ProcName::new("fe", 0), None)],
                pes: vec![0],
                attach: Some("00ff".into()),
                by_name: false,
            },
            Ctl::AttachPoint {
                rank: 1 << 24,
                addr: "tcp://10.0.0.1:4000".into(),
            },
            Ctl::Attach {
                leaf: (1 << 24) + 3,
                rank: 10_000,
                host: "node7".into(),
            },
            Ctl::Attached {
                leaf: (1 << 24) + 3,
                rank: 10_000,
                host: "node7".into(),
                refused: "rank 10000 is taken".into(),
            },
            Ctl::Detached {
                rank: 10_000,
                why: "it closed its connection".into(),
            },
            Ctl::State {
                stream: 1 << 24,
                packets: vec![vec![1, 2, 3], vec![]],
            },
            Ctl::Ready,
            Ctl::Abandon {
                reason: "no".into(),
            },
            Ctl::NewStream {
                id: 1 << 24,
                endpoints: vec![0, 2, 9],
                spec: StreamSpec::heterogeneous("1 => 3; 2 => *", "dontwait => 7", "", &|_| None)
                    .unwrap_or_else(|_| StreamSpec::homogeneous(0, SyncMode::WaitForAll, 0)),
            },
            Ctl::Close { id: 7 },
            Ctl::Params {
                id: 7,
                which: FilterType::UpstreamSync,
                packet: vec![1, 2, 3],
            },
            Ctl::Request {
                req: 4,
                scope: None,
                what: Req::Load {
                    id: 100,
                    path: "/x/lib.so".into(),
                    name: "IntegerAdd".into(),
                },
            },
            Ctl::Request {
                req: 5,
                scope: Some(9),
                what: Req::PerfCollect {
                    metric: Metric::NumBytes,
                    ctx: Context::Recv,
                    how: Aggregate::Avg,
                },
            },
            Ctl::Request {
                req: 6,
                scope: None,
                what: Req::Shutdown,
            },
            Ctl::Ack {
                req: 5,
                errors: vec![(3, "no such file".into())],
                report: Report::Each(vec![(1, PerfData::UInt(9)), (2, PerfData::Float(0.5))]),
            },
            Ctl::Ack {
                req: 6,
                errors: vec![],
                report: Report::Folded {
                    ranks: 4,
                    value: PerfData::Float(2.5),
                },
            },
            Ctl::Error {
                stream: 9,
                rank: 2,
                reason: "bad".into(),
                kind: EventKind::PacketRefused,
            },
            Ctl::Adopted {
                rank: 8,
                streams: vec![(1 << 24, 17, 16), (5, 0, 0)],
            },
            Ctl::Reparented {
                rank: 8,
                parent: 1 << 24,
            },
            Ctl::Request {
                req: 9,
                scope: None,
                what: Req::Recovery { on: false },
            },
        ]
    }

    #[test]
    fn every_message_round_trips_and_truncations_fail() {
        for c in samples() {
            let b = c.encode();
            assert_eq!(Ctl::decode(&b), Some(c.clone()));
            for len in 0..b.len() {
                assert_eq!(Ctl::decode(&b[..len]), None, "{c:?} cut at {len}");
            }
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Ctl::decode(&bytes);
        }
    }
}
