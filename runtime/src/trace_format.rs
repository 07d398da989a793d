//! The per-PE trace file `+trace` writes (`trace.<pe>.bin`), and its reader.
//!
//! ```text
//! file   = MAGIC header { chunk }
//! header = u32 length, then: pe u32, node u32, num_pes u32, num_nodes u32, layer str,
//!          host str, pid u32, mono_base u64, unix_base u64, handler names (u32 count, str...)
//! chunk  = "CHNK", u32 count, strings (str each), u32 count, records (24 bytes each)
//! record = t u64 (ns since mono_base), b u64, a u32, kind u32   (all little-endian)
//! ```
//!
//! `str` is a u32 length and UTF-8 bytes. `mono_base` is the PE's `CLOCK_MONOTONIC` at its
//! start, in ns (the same clock in every process of a host); `unix_base` the wall clock at the
//! same moment, in ns since 1970 (for jobs that span hosts). A chunk's strings are numbered
//! after every string of the chunks before it. The writer appends whole chunks, one write each;
//! a process killed during one leaves a torn last chunk, which the reader drops and reports.
//!
//! Sends and receives carry no message id: the layer keeps each pair of PEs FIFO, so the
//! n-th message PE `s` sent to PE `d` is the n-th one `d` received from `s`
//! ([`Trace::flows`]).

use converse_machine::bytes::{ByteReader, ByteWriter};
use converse_machine::WireError;

/// The first bytes of a trace file (the last is the format's version).
pub const MAGIC: &[u8; 8] = b"CVTRACE\x01";

/// What starts every chunk.
pub(crate) const CHUNK_TAG: &[u8; 4] = b"CHNK";

/// Bytes of one record in the file.
pub const RECORD_LEN: usize = 24;

/// The names of the runtime's own handlers (ids below 16), as traces show them.
pub const SYSTEM_HANDLER_NAMES: [&str; 9] = [
    "converse.handshake",
    "converse.handshake_reply",
    "converse.exit_request",
    "converse.exit",
    "converse.broadcast",
    "converse.reduce",
    "converse.barrier_done",
    "converse.node_broadcast",
    "converse.node_dead",
];

/// The first id of a program's own handlers (ids below are the runtime's): the runtime's own
/// constant, so the two cannot drift apart.
pub const USER_HANDLER_BASE: u32 = crate::lifecycle::USER_BASE;

/// A destination field with this bit set names a node, not a PE (a node message): the
/// runtime's own constant.
pub const NODE_BIT: u32 = crate::node::NODE_BIT;

/// A byte count as a person reads it (`12 B`, `2.0 KiB`, `3.0 MiB`): for the `+stats` lines
/// and the report.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// What a record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Kind {
    /// A handler began: `a` its id.
    Begin = 1,
    /// The innermost running handler ended.
    End = 2,
    /// A message left this PE: `a` the destination PE (or node | [`NODE_BIT`]), `b` its wire
    /// bytes.
    Send = 3,
    /// A message reached this PE's queue: `a` its source PE, `b` its wire bytes.
    Recv = 4,
    /// The PE was idle from `t` for `b` ns.
    Idle = 5,
    /// A layer counter (`+stats`' per-node counters) changed: `a` its name (a string), `b` its
    /// value.
    Counter = 6,
    /// Something notable happened: `a` a string saying what (a start-up phase, a peer's death,
    /// the reason of an abort).
    Mark = 7,
    /// A span that began before this PE's clock started (the layer's boot): from `t` for `b`
    /// ns, `a` a string naming it.
    Span = 8,
}

impl Kind {
    fn from_u32(k: u32) -> Option<Kind> {
        Some(match k {
            1 => Kind::Begin,
            2 => Kind::End,
            3 => Kind::Send,
            4 => Kind::Recv,
            5 => Kind::Idle,
            6 => Kind::Counter,
            7 => Kind::Mark,
            8 => Kind::Span,
            _ => return None,
        })
    }
}

/// One event of a PE's trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// When, in ns since the PE's `mono_base`.
    pub t: u64,
    /// What.
    pub kind: Kind,
    /// The first argument (see [`Kind`]).
    pub a: u32,
    /// The second argument (see [`Kind`]).
    pub b: u64,
}

impl Record {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.t.to_le_bytes());
        out.extend_from_slice(&self.b.to_le_bytes());
        out.extend_from_slice(&self.a.to_le_bytes());
        out.extend_from_slice(&(self.kind as u32).to_le_bytes());
    }
}

/// Who wrote a trace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The PE.
    pub pe: u32,
    /// Its node.
    pub node: u32,
    /// PEs in the job.
    pub num_pes: u32,
    /// Nodes in the job.
    pub num_nodes: u32,
    /// The layer (`+machine`).
    pub layer: String,
    /// The host the PE ran on.
    pub host: String,
    /// The process.
    pub pid: u32,
    /// `CLOCK_MONOTONIC` at the PE's time 0, ns.
    pub mono_base: u64,
    /// The wall clock at the PE's time 0, ns since 1970.
    pub unix_base: u64,
    /// The program's handler names, in registration order (id 16 first).
    pub handlers: Vec<String>,
}

impl Header {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut h = Vec::new();
        h.put_u32(self.pe);
        h.put_u32(self.node);
        h.put_u32(self.num_pes);
        h.put_u32(self.num_nodes);
        h.put_str(&self.layer);
        h.put_str(&self.host);
        h.put_u32(self.pid);
        h.put_u64(self.mono_base);
        h.put_u64(self.unix_base);
        h.put_u32(self.handlers.len() as u32);
        for n in &self.handlers {
            h.put_str(n);
        }
        out.extend_from_slice(MAGIC);
        out.put_u32(h.len() as u32);
        out.extend_from_slice(&h);
    }

    fn decode(r: &mut ByteReader<'_>) -> Result<Header, WireError> {
        let h = Header {
            pe: r.u32()?,
            node: r.u32()?,
            num_pes: r.u32()?,
            num_nodes: r.u32()?,
            layer: r.str()?.to_owned(),
            host: r.str()?.to_owned(),
            pid: r.u32()?,
            mono_base: r.u64()?,
            unix_base: r.u64()?,
            handlers: {
                let n = r.count(4)?;
                (0..n)
                    .map(|_| Ok(r.str()?.to_owned()))
                    .collect::<Result<_, WireError>>()?
            },
        };
        r.finish()?;
        Ok(h)
    }

    /// The name of handler `id` as this PE registered it (or the runtime's own).
    pub fn handler_name(&self, id: u32) -> String {
        if id < USER_HANDLER_BASE {
            return SYSTEM_HANDLER_NAMES
                .get(id as usize)
                .map_or_else(|| format!("converse.system{id}"), |s| (*s).to_owned());
        }
        self.handlers
            .get((id - USER_HANDLER_BASE) as usize)
            .cloned()
            .unwrap_or_else(|| format!("handler{id}"))
    }
}

/// One PE's trace, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Who wrote it.
    pub header: Header,
    /// The strings records name (counter names, marks), by number.
    pub strings: Vec<String>,
    /// Every event, in the order the PE recorded them: time order, but for an idle period,
    /// recorded when it ends and stamped with its start, and the boot span.
    pub records: Vec<Record>,
    /// Bytes at the end that did not make a whole chunk (the process was killed while
    /// writing it): dropped.
    pub torn_bytes: usize,
}

/// Why a trace file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a trace of this version.
    #[error("{path}: not a converse trace (wrong magic or version)")]
    NotATrace {
        /// The file.
        path: String,
    },
    /// The header does not decode.
    #[error("{path}: header: {source}")]
    Header {
        /// The file.
        path: String,
        /// What is wrong.
        source: WireError,
    },
}

impl Trace {
    /// Read one PE's trace file.
    ///
    /// # Errors
    /// [`TraceError`] when it cannot be read or is not a trace; a torn last chunk is not an
    /// error (see [`Trace::torn_bytes`]).
    pub fn read(path: &std::path::Path) -> Result<Trace, TraceError> {
        let bytes = std::fs::read(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Trace::parse(&bytes, &path.display().to_string())
    }

    /// Parse a trace file's bytes; `path` only names it in errors.
    ///
    /// # Errors
    /// As [`read`](Trace::read).
    pub fn parse(bytes: &[u8], path: &str) -> Result<Trace, TraceError> {
        let mut r = ByteReader::new(bytes);
        if r.take(MAGIC.len()).ok() != Some(&MAGIC[..]) {
            return Err(TraceError::NotATrace { path: path.into() });
        }
        let header = r
            .bytes()
            .and_then(|h| Header::decode(&mut ByteReader::new(h)))
            .map_err(|source| TraceError::Header {
                path: path.into(),
                source,
            })?;
        let mut t = Trace {
            header,
            strings: Vec::new(),
            records: Vec::new(),
            torn_bytes: 0,
        };
        while r.remaining() > 0 {
            let left = r.remaining();
            if Self::chunk(&mut r, &mut t).is_err() {
                t.torn_bytes = left;
                break;
            }
        }
        Ok(t)
    }

    /// One chunk, taken whole or not at all.
    fn chunk(r: &mut ByteReader<'_>, t: &mut Trace) -> Result<(), WireError> {
        let mut c = r.clone();
        if c.take(4)? != CHUNK_TAG {
            return Err(WireError::BadMagic);
        }
        let n = c.count(4)?;
        let strings = (0..n)
            .map(|_| Ok(c.str()?.to_owned()))
            .collect::<Result<Vec<_>, WireError>>()?;
        let n = c.count(RECORD_LEN)?;
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            let rec = c.take(RECORD_LEN)?;
            let word = |i: usize| u64::from_le_bytes(rec[i..i + 8].try_into().unwrap_or([0; 8]));
            let half = |i: usize| u32::from_le_bytes(rec[i..i + 4].try_into().unwrap_or([0; 4]));
            let kind = Kind::from_u32(half(20))
                .ok_or_else(|| WireError::Invalid("unknown record kind".into()))?;
            records.push(Record {
                t: word(0),
                b: word(8),
                a: half(16),
                kind,
            });
        }
        t.strings.extend(strings);
        t.records.extend(records);
        *r = c;
        Ok(())
    }

    /// String `i`, or a placeholder.
    pub fn string(&self, i: u32) -> &str {
        self.strings.get(i as usize).map_or("?", String::as_str)
    }
}

/// A message matched between the traces of its sender and its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Sending PE.
    pub src: u32,
    /// Index of the send in the sender's records.
    pub send: usize,
    /// Receiving PE.
    pub dst: u32,
    /// Index of the receive in the receiver's records.
    pub recv: usize,
    /// Wire bytes.
    pub bytes: u64,
}

/// What matching sends and receives found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flows {
    /// Every message both ends recorded.
    pub matched: Vec<Flow>,
    /// Sends to a PE with no receive for them: (sender, index of the send).
    pub unmatched_sends: Vec<(u32, usize)>,
    /// Receives with no send for them: (receiver, index of the receive).
    pub unmatched_recvs: Vec<(u32, usize)>,
}

impl Trace {
    /// Match every PE-to-PE send with its receive across `traces` (one per PE, any order):
    /// the n-th send from `s` to `d` is the n-th receive at `d` from `s`, since each pair is
    /// FIFO. Node messages ([`NODE_BIT`]) are not matched: any PE of the node may take them.
    pub fn flows(traces: &[Trace]) -> Flows {
        use std::collections::HashMap;
        let mut sends: HashMap<(u32, u32), Vec<(usize, u64)>> = HashMap::new();
        let mut recvs: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
        for t in traces {
            let me = t.header.pe;
            for (i, r) in t.records.iter().enumerate() {
                match r.kind {
                    Kind::Send if r.a & NODE_BIT == 0 => {
                        sends.entry((me, r.a)).or_default().push((i, r.b))
                    }
                    Kind::Recv => recvs.entry((r.a, me)).or_default().push(i),
                    _ => {}
                }
            }
        }
        let mut out = Flows::default();
        for (&(src, dst), s) in &sends {
            let r = recvs.remove(&(src, dst)).unwrap_or_default();
            for (k, &(send, bytes)) in s.iter().enumerate() {
                match r.get(k) {
                    Some(&recv) => out.matched.push(Flow {
                        src,
                        send,
                        dst,
                        recv,
                        bytes,
                    }),
                    None => out.unmatched_sends.push((src, send)),
                }
            }
            out.unmatched_recvs
                .extend(r.iter().skip(s.len()).map(|&i| (dst, i)));
        }
        for ((_, dst), r) in recvs {
            out.unmatched_recvs.extend(r.into_iter().map(|i| (dst, i)));
        }
        out.matched.sort_by_key(|f| (f.src, f.send));
        out.unmatched_sends.sort_unstable();
        out.unmatched_recvs.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pe: u32) -> Header {
        Header {
            pe,
            node: pe,
            num_pes: 2,
            num_nodes: 2,
            layer: "local".into(),
            host: "h".into(),
            pid: 7,
            mono_base: 1000,
            unix_base: 2000,
            handlers: vec!["ping".into(), "pong".into()],
        }
    }

    fn file(pe: u32, chunks: &[(Vec<&str>, Vec<Record>)]) -> Vec<u8> {
        let mut out = Vec::new();
        header(pe).encode(&mut out);
        for (strings, records) in chunks {
            out.extend_from_slice(CHUNK_TAG);
            out.put_u32(strings.len() as u32);
            for s in strings {
                out.put_str(s);
            }
            out.put_u32(records.len() as u32);
            for r in records {
                r.encode(&mut out);
            }
        }
        out
    }

    fn rec(t: u64, kind: Kind, a: u32, b: u64) -> Record {
        Record { t, kind, a, b }
    }

    #[test]
    fn a_file_round_trips_and_a_torn_chunk_is_dropped() {
        let chunks = vec![
            (vec!["udp.retransmits"], vec![rec(1, Kind::Begin, 16, 0)]),
            (
                vec!["go"],
                vec![rec(2, Kind::End, 0, 0), rec(3, Kind::Mark, 1, 0)],
            ),
        ];
        let bytes = file(0, &chunks);
        let t = Trace::parse(&bytes, "t").expect("parses");
        assert_eq!(t.header, header(0));
        assert_eq!(t.strings, ["udp.retransmits", "go"]);
        assert_eq!(t.records.len(), 3);
        assert_eq!(t.torn_bytes, 0);
        assert_eq!(t.header.handler_name(17), "pong");
        assert_eq!(t.header.handler_name(3), "converse.exit");
        // Cut anywhere inside the second chunk: the first stays, the rest is reported torn.
        let first_end = file(0, &chunks[..1]).len();
        for cut in first_end + 1..bytes.len() {
            let t = Trace::parse(&bytes[..cut], "t").expect("parses");
            assert_eq!(t.records.len(), 1, "cut {cut}");
            assert_eq!(t.torn_bytes, cut - first_end);
        }
        assert!(matches!(
            Trace::parse(b"nonsense", "t"),
            Err(TraceError::NotATrace { .. })
        ));
        assert!(Trace::parse(&bytes[..12], "t").is_err());
    }

    #[test]
    fn flows_pair_the_nth_send_with_the_nth_receive() {
        let t0 = Trace::parse(
            &file(
                0,
                &[(
                    vec![],
                    vec![
                        rec(1, Kind::Send, 1, 10),
                        rec(2, Kind::Send, 1, 20),
                        rec(3, Kind::Send, NODE_BIT | 1, 5),
                        rec(4, Kind::Send, 1, 30),
                    ],
                )],
            ),
            "0",
        )
        .expect("t0");
        let t1 = Trace::parse(
            &file(
                1,
                &[(
                    vec![],
                    vec![
                        rec(5, Kind::Recv, 0, 10),
                        rec(6, Kind::Recv, 0, 20),
                        rec(7, Kind::Recv, 1, 1),
                    ],
                )],
            ),
            "1",
        )
        .expect("t1");
        let f = Trace::flows(&[t0, t1]);
        assert_eq!(f.matched.len(), 2);
        assert_eq!((f.matched[1].send, f.matched[1].recv), (1, 1));
        assert_eq!(f.matched[1].bytes, 20);
        assert_eq!(f.unmatched_sends, [(0, 3)]);
        assert_eq!(f.unmatched_recvs, [(1, 2)]);
    }
}
