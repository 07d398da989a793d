//! The trace files `+trace` writes (a PE's `trace.<pe>.bin`, an SMP node's communication
//! thread's `comm.<node>.bin`), and their reader.
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
//! a process killed during one (or a disk that filled up) leaves a torn last chunk: a prefix
//! of a valid chunk, its bytes running out at the end of the file. The reader drops it and
//! reports it; any other bytes that do not make a chunk are corruption, an error.
//!
//! Sends and receives carry no message id: the layer keeps each pair of PEs FIFO, so the
//! n-th message PE `s` sent to PE `d` is the n-th one `d` received from `s`
//! ([`Trace::flows`]).

use converse_machine::bytes::{ByteReader, ByteWriter};
use converse_machine::WireError;

/// The first bytes of a trace file (the last is the format's version): 2 since user events
/// and brackets (record kinds 9 and 10), so that an older reader refuses such a file as of
/// another version rather than as corrupt.
pub const MAGIC: &[u8; 8] = b"CVTRACE\x02";

/// The first bytes of a version 1 file (no user events or brackets), which this reader reads.
pub const MAGIC_V1: &[u8; 8] = b"CVTRACE\x01";

/// What starts every chunk.
pub(crate) const CHUNK_TAG: &[u8; 4] = b"CHNK";

/// Bytes of one record in the file.
pub const RECORD_LEN: usize = 24;

/// The names of the runtime's own handlers (ids below 16), as traces show them.
pub const SYSTEM_HANDLER_NAMES: [&str; 12] = [
    "converse.handshake",
    "converse.handshake_reply",
    "converse.exit_request",
    "converse.exit",
    "converse.broadcast",
    "converse.reduce",
    "converse.barrier_done",
    "converse.node_broadcast",
    "converse.node_dead",
    "converse.ccs",
    "converse.onesided",
    "converse.idle_probe",
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
    /// A span of time from `t` for `b` ns, `a` a string naming it: in a PE's trace the layer's
    /// boot (which began before the PE's clock started); in a communication thread's trace
    /// (`comm.<node>.bin`) a turn in which it moved messages.
    Span = 8,
    /// A user event (`Pe::trace_event`, Projections' `traceUserEvent`): `a` its name (a
    /// string).
    Event = 9,
    /// A user bracket (`Pe::trace_bracket`, Projections' `traceUserBracketEvent`): from `t`
    /// for `b` ns, `a` its name (a string). Recorded when it ends, stamped with its start.
    Bracket = 10,
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
            9 => Kind::Event,
            10 => Kind::Bracket,
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
    /// The header of PE `pe` in a job of `num_pes` one-PE nodes on the local layer, with the
    /// handler names `handlers` and fixed times: for tests, here and in the tools built on
    /// traces, which would otherwise each spell one out.
    #[doc(hidden)]
    pub fn sample(pe: u32, num_pes: u32, handlers: &[&str]) -> Header {
        Header {
            pe,
            node: pe,
            num_pes,
            num_nodes: num_pes,
            layer: "local".into(),
            host: "h".into(),
            pid: 1,
            mono_base: 1_000,
            unix_base: 0,
            handlers: handlers.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

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
    /// Every event, in the order the PE (or communication thread) recorded them: time order,
    /// but for the records stamped with their start and recorded at their end (an idle period,
    /// a user bracket, a communication thread's turn) and the boot span.
    pub records: Vec<Record>,
    /// Bytes at the end that did not make a whole chunk (the process was killed while
    /// writing it): dropped. Only a valid chunk's prefix counts as torn; other bytes are a
    /// [`TraceError::Corrupt`].
    pub torn_bytes: usize,
}

/// Why a trace file cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// Not a regular file (a device, a FIFO, a directory): such a file may never end, so it
    /// is not read.
    #[error("{path}: not a regular file")]
    NotAFile {
        /// The file.
        path: String,
    },
    /// Bytes after the header that are not a chunk, nor the start of one cut short: a wrong
    /// tag, an unknown record kind, a string that is not UTF-8.
    #[error("{path}: corrupt chunk at byte {offset}: {source}")]
    Corrupt {
        /// The file.
        path: String,
        /// Where the chunk starts in the file.
        offset: usize,
        /// What is wrong.
        source: WireError,
    },
}

impl Trace {
    /// Read one PE's trace file.
    ///
    /// Only a regular file is read, and only as many bytes as it held when opened: a device
    /// such as `/dev/zero` would never end, and a file a running job still appends to ends
    /// there (a chunk being written reads as torn).
    ///
    /// # Errors
    /// [`TraceError`] when it cannot be read or is not a trace; a torn last chunk is not an
    /// error (see [`Trace::torn_bytes`]).
    pub fn read(path: &std::path::Path) -> Result<Trace, TraceError> {
        use std::io::Read;
        let name = path.display().to_string();
        let io = |source| TraceError::Io {
            path: name.clone(),
            source,
        };
        // Checked before opening too: opening a FIFO blocks until a writer comes.
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(TraceError::NotAFile { path: name });
        }
        let file = std::fs::File::open(path).map_err(io)?;
        // Again on what was opened, in case the name changed meanwhile.
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(TraceError::NotAFile { path: name });
        }
        let mut bytes = Vec::new();
        // A file too big for memory is an error, not an abort.
        usize::try_from(meta.len())
            .ok()
            .and_then(|n| bytes.try_reserve_exact(n).ok())
            .ok_or_else(|| {
                io(std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    format!("{} bytes do not fit in memory", meta.len()),
                ))
            })?;
        file.take(meta.len()).read_to_end(&mut bytes).map_err(io)?;
        Trace::parse(&bytes, &name)
    }

    /// Parse a trace file's bytes; `path` only names it in errors.
    ///
    /// # Errors
    /// As [`read`](Trace::read).
    pub fn parse(bytes: &[u8], path: &str) -> Result<Trace, TraceError> {
        let mut r = ByteReader::new(bytes);
        let magic = r.take(MAGIC.len()).ok();
        if magic != Some(&MAGIC[..]) && magic != Some(&MAGIC_V1[..]) {
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
            let offset = bytes.len() - r.remaining();
            match Self::chunk(&mut r) {
                Ok((strings, records)) => {
                    t.strings.extend(strings);
                    t.records.extend(records);
                }
                // The bytes ran out, all of them valid so far: the start of a chunk whose
                // write was cut short, the only damage the writer can leave — unless a whole
                // chunk follows inside it, when a wrong length ran over the chunks after it.
                Err(WireError::Truncated { .. }) => {
                    if let Some(at) = Self::whole_chunk_after(bytes, offset) {
                        return Err(TraceError::Corrupt {
                            path: path.into(),
                            offset,
                            source: WireError::BadLength(format!(
                                "the chunk runs past the end of the file, over a whole chunk \
                                 at byte {at}"
                            )),
                        });
                    }
                    t.torn_bytes = r.remaining();
                    break;
                }
                Err(source) => {
                    return Err(TraceError::Corrupt {
                        path: path.into(),
                        offset,
                        source,
                    })
                }
            }
        }
        Ok(t)
    }

    /// Where a whole chunk starts inside the chunk at `from`, which reads as cut short. A
    /// torn chunk is the file's last write, so no whole chunk can follow its start: one that
    /// does means a wrong length. A few tries only, since records may hold the tag's bytes by
    /// chance and each try may read to the end.
    fn whole_chunk_after(bytes: &[u8], from: usize) -> Option<usize> {
        const TRIES: usize = 8;
        let mut at = from + 1;
        for _ in 0..TRIES {
            at += bytes
                .get(at..)?
                .windows(CHUNK_TAG.len())
                .position(|w| w == CHUNK_TAG)?;
            let mut r = ByteReader::new(bytes.get(at..)?);
            if Self::chunk(&mut r).is_ok() {
                return Some(at);
            }
            at += 1;
        }
        None
    }

    /// One chunk's strings and records, taken whole or not at all. [`WireError::Truncated`]
    /// only when the bytes run out before the chunk ends and every byte before was valid (a
    /// torn chunk); any other error is corruption.
    fn chunk(r: &mut ByteReader<'_>) -> Result<(Vec<String>, Vec<Record>), WireError> {
        let mut c = r.clone();
        // A torn chunk may end inside its tag: what is there must still be the tag's start.
        let tag = c.take(CHUNK_TAG.len().min(c.remaining()))?;
        if tag != &CHUNK_TAG[..tag.len()] {
            return Err(WireError::Invalid(
                "bytes that are not a chunk (no CHNK tag)".into(),
            ));
        }
        if tag.len() < CHUNK_TAG.len() {
            return Err(WireError::Truncated {
                len: tag.len(),
                need: CHUNK_TAG.len(),
            });
        }
        // Not `count`: a count larger than the bytes left is what a torn chunk shows, so it
        // must read as `Truncated`; each item takes bytes, so the loops end with them, and
        // the reserve is bounded by the bytes left, not by the count.
        let n = c.u32()? as usize;
        let mut strings = Vec::with_capacity(n.min(c.remaining() / 4));
        for _ in 0..n {
            strings.push(c.str()?.to_owned());
        }
        let n = c.u32()? as usize;
        let mut records = Vec::with_capacity(n.min(c.remaining() / RECORD_LEN));
        for _ in 0..n {
            let rec = c.array::<RECORD_LEN>()?;
            let word = |i: usize| u64::from_le_bytes(rec[i..i + 8].try_into().unwrap_or([0; 8]));
            let half = |i: usize| u32::from_le_bytes(rec[i..i + 4].try_into().unwrap_or([0; 4]));
            let kind = Kind::from_u32(half(20))
                .ok_or_else(|| WireError::Invalid(format!("unknown record kind {}", half(20))))?;
            records.push(Record {
                t: word(0),
                b: word(8),
                a: half(16),
                kind,
            });
        }
        *r = c;
        Ok((strings, records))
    }

    /// The file that reads back as this trace: its header, then its strings and records as
    /// one chunk (none when it has neither). For tools and tests that make trace files.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.header.encode(&mut out);
        if !self.strings.is_empty() || !self.records.is_empty() {
            out.extend_from_slice(CHUNK_TAG);
            out.put_u32(self.strings.len() as u32);
            for s in &self.strings {
                out.put_str(s);
            }
            out.put_u32(self.records.len() as u32);
            for r in &self.records {
                r.encode(&mut out);
            }
        }
        out
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
            unix_base: 2000,
            ..Header::sample(pe, 2, &["ping", "pong"])
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

    /// The chunks [`a_file_round_trips_and_a_torn_chunk_is_dropped`] writes.
    fn two_chunks() -> Vec<(Vec<&'static str>, Vec<Record>)> {
        vec![
            (vec!["udp.retransmits"], vec![rec(1, Kind::Begin, 16, 0)]),
            (
                vec!["go"],
                vec![rec(2, Kind::End, 0, 0), rec(3, Kind::Mark, 1, 0)],
            ),
        ]
    }

    /// Where the kind of record `i` of the chunk starting at `chunk` lies, the chunk holding
    /// `strings`.
    fn kind_at(chunk: usize, strings: &[&str], i: usize) -> usize {
        let strings: usize = strings.iter().map(|s| 4 + s.len()).sum();
        chunk + 8 + strings + 4 + i * RECORD_LEN + 20
    }

    #[test]
    fn an_unknown_kind_in_a_whole_chunk_is_corruption_not_a_torn_chunk() {
        let chunks = two_chunks();
        let header_end = file(0, &[]).len();
        let second = file(0, &chunks[..1]).len();
        for (chunk, strings) in [(header_end, &chunks[0].0), (second, &chunks[1].0)] {
            let mut bytes = file(0, &chunks);
            let k = kind_at(chunk, strings, 0);
            bytes[k..k + 4].copy_from_slice(&99u32.to_le_bytes());
            match Trace::parse(&bytes, "t") {
                Err(e @ TraceError::Corrupt { offset, .. }) => {
                    assert_eq!(offset, chunk);
                    let text = e.to_string();
                    assert!(text.contains("unknown record kind 99"), "{text}");
                    assert!(!text.contains('\n'), "one line: {text}");
                }
                other => panic!("chunk at {chunk}: {other:?}"),
            }
        }
    }

    #[test]
    fn bytes_after_the_last_chunk_that_are_no_chunk_are_corruption() {
        let whole = file(0, &two_chunks());
        for tail in [vec![0xab; 70], vec![0; 70], b"CHNX".to_vec(), b"X".to_vec()] {
            let mut bytes = whole.clone();
            bytes.extend_from_slice(&tail);
            assert!(
                matches!(
                    Trace::parse(&bytes, "t"),
                    Err(TraceError::Corrupt { offset, .. }) if offset == whole.len()
                ),
                "tail {tail:?}"
            );
        }
        // The start of a tag, or a chunk that promises more than the file holds, is torn.
        for tail in [&b"CH"[..], b"CHNK\x05\0\0\0", b"CHNK\0\0\0\0\xff\0\0\0"] {
            let mut bytes = whole.clone();
            bytes.extend_from_slice(tail);
            let t = Trace::parse(&bytes, "t").expect("torn, not corrupt");
            assert_eq!((t.records.len(), t.torn_bytes), (3, tail.len()));
        }
    }

    #[test]
    fn a_length_that_runs_over_later_chunks_is_corruption() {
        let chunks = two_chunks();
        let header_end = file(0, &[]).len();
        // The first chunk's first string claims a megabyte: it would end past the end of
        // the file, swallowing the whole second chunk.
        let mut bytes = file(0, &chunks);
        bytes[header_end + 8..header_end + 12].copy_from_slice(&(1u32 << 20).to_le_bytes());
        let second = file(0, &chunks[..1]).len();
        match Trace::parse(&bytes, "t") {
            Err(e @ TraceError::Corrupt { offset, .. }) => {
                assert_eq!(offset, header_end);
                assert!(e.to_string().contains(&format!("byte {second}")), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // Its record count too large: the next chunk's bytes read as records of no kind.
        let mut bytes = file(0, &chunks);
        let count = kind_at(header_end, &chunks[0].0, 0) - 20 - 4;
        bytes[count..count + 4].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            Trace::parse(&bytes, "t"),
            Err(TraceError::Corrupt { .. })
        ));
    }

    #[test]
    fn only_regular_files_are_read_and_to_bytes_reads_back() {
        let dir = std::env::temp_dir().join(format!("trace-format-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // `/dev/zero` never ends: refused at once, not read into memory.
        let zero = dir.join("trace.0.bin");
        let _ = std::fs::remove_file(&zero);
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        let e = Trace::read(&zero).expect_err("a device");
        assert!(matches!(e, TraceError::NotAFile { .. }), "{e}");
        assert!(e.to_string().ends_with("not a regular file"), "{e}");
        assert!(matches!(
            Trace::read(&dir),
            Err(TraceError::NotAFile { .. })
        ));
        assert!(matches!(
            Trace::read(&dir.join("absent")),
            Err(TraceError::Io { .. })
        ));
        // A regular file is read whole.
        let t = Trace::parse(&file(1, &two_chunks()), "t").expect("parses");
        let path = dir.join("trace.1.bin");
        std::fs::write(&path, t.to_bytes()).expect("write");
        assert_eq!(Trace::read(&path).expect("reads"), t);
        std::fs::remove_dir_all(&dir).ok();
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
