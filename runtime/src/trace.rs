//! What a PE did: the recorder behind `+trace` (per-PE event files) and `+stats` (counters
//! printed at exit).
//!
//! A PE that records owns one [`Recorder`], reached through `Pe::rec` (`None` without
//! `+trace` and `+stats`, so the untraced hot path pays one predictable branch per hook).
//! Events go into a preallocated `Vec` of fixed-size records: no lock, no system call, no
//! allocation per event; the clock is `Instant` (`CLOCK_MONOTONIC` through the vDSO). The
//! records are written to `DIR/trace.<pe>.bin` (format: [`crate::trace_format`]) in whole
//! chunks: when the buffer is full, each time the PE is about to block idle (it is about to
//! make a system call anyway, and a node killed later — by charmrun's `DIE` after another
//! node's crash — keeps everything up to its last idle moment), when it aborts, and at exit.

use crate::trace_format::{human_bytes, Header, Kind, Record, CHUNK_TAG};
use converse_machine::bytes::ByteWriter;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Records a PE keeps before writing a chunk: 384 KiB, a write per 16 Ki events.
const CHUNK_RECORDS: usize = 16 * 1024;

/// What the command line asked to record.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// `+trace-dir`: write traces there.
    pub dir: Option<PathBuf>,
    /// `+stats`: print counters at exit.
    pub stats: bool,
    /// When the layer's boot began and ended, to show it in traces.
    pub boot: Option<(Instant, Instant, &'static str)>,
}

impl Options {
    /// Whether anything is recorded.
    pub(crate) fn any(&self) -> bool {
        self.dir.is_some() || self.stats
    }
}

/// A PE's counters for `+stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    pub sent: u64,
    pub sent_bytes: u64,
    pub received: u64,
    pub received_bytes: u64,
    pub handlers: u64,
    /// Time in handlers, ns (outermost handlers, less what they spent idle in a nested
    /// scheduler loop).
    pub handler_ns: u64,
    pub idle_ns: u64,
}

/// Where records go.
struct Out {
    records: Vec<Record>,
    /// Strings named since the last chunk.
    strings: Vec<String>,
    /// Strings named so far (the next one's number).
    next_string: u32,
    file: std::fs::File,
    path: PathBuf,
    /// The chunk being encoded (kept to reuse its allocation).
    bytes: Vec<u8>,
    header_written: bool,
    /// The last chunks written, for a live look at the job (CCS's `converse.trace`).
    live: Live,
    /// Whether to keep `live` (a communication thread's trace is not served live).
    keep_live: bool,
}

/// The recent part of a PE's trace kept in memory: every string named so far, and the
/// records of the last chunks written (each as its `u32 count, records` part, with its latest
/// time), at most [`LIVE_BYTES`] of them.
#[derive(Default)]
struct Live {
    strings: Vec<String>,
    chunks: std::collections::VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
}

/// Bytes of records a PE keeps for a live look.
const LIVE_BYTES: usize = 8 << 20;

/// One PE's recorder.
pub(crate) struct Recorder {
    base: Instant,
    header: Header,
    stats: Stats,
    print_stats: bool,
    /// Handlers running (nested scheduler loops run handlers inside handlers).
    depth: u32,
    busy_from: u64,
    nested_idle: u64,
    idle_from: Option<u64>,
    /// Layer counters seen: (name, string number, last value).
    counters: Vec<(&'static str, u32, u64)>,
    /// The names of user events and brackets, numbered once each: a program names a few and
    /// records them often.
    names: std::collections::HashMap<String, u32>,
    /// The number of a communication thread's turn's name, once named.
    turn_name: Option<u32>,
    out: Option<Out>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("pe", &self.header.pe)
            .field("tracing", &self.out.is_some())
            .finish_non_exhaustive()
    }
}

/// The file PE `pe` traces into.
pub(crate) fn file_of(dir: &Path, pe: usize) -> PathBuf {
    dir.join(format!("trace.{pe}.bin"))
}

/// The file the communication thread of SMP node `node` traces into.
pub(crate) fn comm_file_of(dir: &Path, node: usize) -> PathBuf {
    dir.join(format!("comm.{node}.bin"))
}

/// Make the trace directory (each process does, before its PEs start), so that a bad
/// `+trace-dir` is one error at start-up.
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("+trace-dir {}: {e}", dir.display()))
}

impl Recorder {
    /// A recorder for PE `pe` of node `node`, or `None` when nothing is to be recorded.
    ///
    /// # Errors
    /// The trace file cannot be created (the text says which and why).
    pub(crate) fn new(
        opts: &Options,
        pe: usize,
        node: usize,
        table: &converse_machine::NodeTable,
        layer: &'static str,
    ) -> Result<Option<Box<Recorder>>, String> {
        if !opts.any() {
            return Ok(None);
        }
        let file = opts.dir.as_deref().map(|d| file_of(d, pe));
        Self::create(opts, file, false, pe, node, table, layer)
    }

    /// A recorder for the communication thread of SMP node `node` (`comm.<node>.bin`, its
    /// header's `pe` the node), or `None` without `+trace`: its turns that moved messages as
    /// spans, its waits as idle periods.
    ///
    /// # Errors
    /// The trace file cannot be created.
    pub(crate) fn for_comm(
        opts: &Options,
        node: usize,
        table: &converse_machine::NodeTable,
        layer: &'static str,
    ) -> Result<Option<Box<Recorder>>, String> {
        let Some(dir) = &opts.dir else {
            return Ok(None);
        };
        let opts = Options {
            dir: Some(dir.clone()),
            stats: false,
            boot: None,
        };
        let mut rec = Self::create(
            &opts,
            Some(comm_file_of(dir, node)),
            true,
            node,
            node,
            table,
            layer,
        )?;
        // The header now, as a PE writes it after its start function: a node that dies
        // before its thread first waits still leaves a readable file.
        if let Some(r) = rec.as_deref_mut() {
            r.flush(&[]);
        }
        Ok(rec)
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        opts: &Options,
        file: Option<PathBuf>,
        comm: bool,
        pe: usize,
        node: usize,
        table: &converse_machine::NodeTable,
        layer: &'static str,
    ) -> Result<Option<Box<Recorder>>, String> {
        let base = Instant::now();
        let mono_base = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
            .unwrap_or(0);
        let unix_base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let out = match file {
            None => None,
            Some(path) => {
                let file = std::fs::File::create(&path)
                    .map_err(|e| format!("cannot create the trace file {}: {e}", path.display()))?;
                Some(Out {
                    records: Vec::with_capacity(CHUNK_RECORDS),
                    strings: Vec::new(),
                    next_string: 0,
                    file,
                    path,
                    bytes: Vec::new(),
                    header_written: false,
                    live: Live::default(),
                    keep_live: !comm,
                })
            }
        };
        let mut rec = Box::new(Recorder {
            base,
            header: Header {
                pe: pe as u32,
                node: node as u32,
                num_pes: table.num_pes() as u32,
                num_nodes: table.num_nodes() as u32,
                layer: layer.to_owned(),
                host: table
                    .node(node)
                    .map_or_else(String::new, |n| n.host.clone()),
                pid: std::process::id(),
                mono_base,
                unix_base,
                handlers: Vec::new(),
            },
            stats: Stats::default(),
            print_stats: opts.stats,
            depth: 0,
            busy_from: 0,
            nested_idle: 0,
            idle_from: None,
            counters: Vec::new(),
            names: std::collections::HashMap::new(),
            turn_name: None,
            out,
        });
        if let Some((from, to, what)) = opts.boot {
            // Before time 0: the offset goes back from the base.
            let start = base.saturating_duration_since(from).as_nanos() as u64;
            let id = rec.string(format!("boot ({what})"));
            rec.push_raw(Record {
                t: 0u64.wrapping_sub(start),
                kind: Kind::Span,
                a: id,
                b: to.saturating_duration_since(from).as_nanos() as u64,
            });
        }
        Ok(Some(rec))
    }

    /// Nanoseconds since this PE's time 0.
    #[inline]
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Record an event at `t`, first closing an idle period the event ends.
    #[inline]
    fn push(&mut self, t: u64, kind: Kind, a: u32, b: u64) {
        self.close_idle(t);
        self.push_raw(Record { t, kind, a, b });
    }

    /// End an idle period at `t`, if one is open.
    #[inline]
    fn close_idle(&mut self, t: u64) {
        if let Some(from) = self.idle_from.take() {
            let d = t.saturating_sub(from);
            self.stats.idle_ns += d;
            if self.depth > 0 {
                self.nested_idle += d;
            }
            self.push_raw(Record {
                t: from,
                kind: Kind::Idle,
                a: 0,
                b: d,
            });
        }
    }

    #[inline]
    fn push_raw(&mut self, r: Record) {
        let Some(out) = &mut self.out else { return };
        out.records.push(r);
        // Before the first chunk the handler names may not be final (the start function
        // registers them): the buffer grows instead.
        if out.records.len() >= CHUNK_RECORDS && out.header_written {
            self.write_chunk();
        }
    }

    /// Number a string for records to name.
    fn string(&mut self, s: String) -> u32 {
        let Some(out) = &mut self.out else { return 0 };
        out.strings.push(s);
        out.next_string += 1;
        out.next_string - 1
    }

    /// A message left this PE for `dest` (a PE, or a node with `NODE_BIT`).
    #[inline]
    pub(crate) fn sent(&mut self, dest: u32, bytes: usize) {
        self.stats.sent += 1;
        self.stats.sent_bytes += bytes as u64;
        let t = self.now();
        self.push(t, Kind::Send, dest, bytes as u64);
    }

    /// A message from PE `src` reached this PE's queue.
    #[inline]
    pub(crate) fn received(&mut self, src: u32, bytes: usize) {
        self.stats.received += 1;
        self.stats.received_bytes += bytes as u64;
        let t = self.now();
        self.push(t, Kind::Recv, src, bytes as u64);
    }

    /// Handler `id` begins.
    #[inline]
    pub(crate) fn begin(&mut self, id: u32) {
        let t = self.now();
        if self.depth == 0 {
            self.busy_from = t;
            self.nested_idle = 0;
        }
        self.depth += 1;
        self.stats.handlers += 1;
        self.push(t, Kind::Begin, id, 0);
    }

    /// The innermost running handler ended.
    #[inline]
    pub(crate) fn end(&mut self) {
        let t = self.now();
        self.depth = self.depth.saturating_sub(1);
        if self.depth == 0 {
            self.stats.handler_ns += t
                .saturating_sub(self.busy_from)
                .saturating_sub(self.nested_idle);
        }
        self.push(t, Kind::End, 0, 0);
    }

    /// The scheduler found nothing to do at `at`: idle until the next event.
    pub(crate) fn idle_begins(&mut self, at: Instant) {
        if self.idle_from.is_none() {
            self.idle_from = Some(at.saturating_duration_since(self.base).as_nanos() as u64);
        }
    }

    /// Something notable happened (a start-up phase, a peer's death, an abort).
    pub(crate) fn mark(&mut self, what: &str) {
        if self.out.is_none() {
            return;
        }
        let id = self.string(what.to_owned());
        let t = self.now();
        self.push_raw(Record {
            t,
            kind: Kind::Mark,
            a: id,
            b: 0,
        });
    }

    /// The number of a user event's or bracket's name, named once.
    fn named(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.names.get(name) {
            return id;
        }
        let id = self.string(name.to_owned());
        self.names.insert(name.to_owned(), id);
        id
    }

    /// A user event named `name` happened now.
    pub(crate) fn user_event(&mut self, name: &str) {
        if self.out.is_none() {
            return;
        }
        let id = self.named(name);
        let t = self.now();
        self.push(t, Kind::Event, id, 0);
    }

    /// A user bracket named `name` ran from `since` until now.
    pub(crate) fn bracket(&mut self, name: &str, since: Instant) {
        self.span(Kind::Bracket, name, since);
    }

    /// The communication thread moved messages from `since` until now.
    pub(crate) fn comm_turn(&mut self, since: Instant) {
        if self.out.is_none() {
            return;
        }
        // Named once: a turn is recorded for every burst of messages.
        let id = match self.turn_name {
            Some(id) => id,
            None => {
                let id = self.named("moving messages");
                self.turn_name = Some(id);
                id
            }
        };
        self.span_id(Kind::Span, id, since);
    }

    /// The communication thread waited in the layer from `since` until now.
    pub(crate) fn comm_waited(&mut self, since: Instant) {
        if self.out.is_none() {
            return;
        }
        let from = since.saturating_duration_since(self.base).as_nanos() as u64;
        let t = self.now();
        self.push_raw(Record {
            t: from,
            kind: Kind::Idle,
            a: 0,
            b: t.saturating_sub(from),
        });
    }

    fn span(&mut self, kind: Kind, name: &str, since: Instant) {
        if self.out.is_none() {
            return;
        }
        let id = self.named(name);
        self.span_id(kind, id, since);
    }

    fn span_id(&mut self, kind: Kind, id: u32, since: Instant) {
        let t = self.now();
        let from = since.saturating_duration_since(self.base).as_nanos() as u64;
        // An idle period the span ends is closed at its end, not its start.
        self.close_idle(t);
        self.push_raw(Record {
            t: from,
            kind,
            a: id,
            b: t.saturating_sub(from),
        });
    }

    /// The layer's counters now: a record for each that changed.
    pub(crate) fn sample(&mut self, counters: &[(&'static str, u64)]) {
        if self.out.is_none() {
            return;
        }
        let t = self.now();
        for &(name, v) in counters {
            let i = match self.counters.iter().position(|c| c.0 == name) {
                Some(i) => i,
                None => {
                    let id = self.string(name.to_owned());
                    self.counters.push((name, id, u64::MAX));
                    self.counters.len() - 1
                }
            };
            let (_, id, last) = &mut self.counters[i];
            if *last != v {
                *last = v;
                let id = *id;
                self.push_raw(Record {
                    t,
                    kind: Kind::Counter,
                    a: id,
                    b: v,
                });
            }
        }
    }

    /// Write what is buffered: the header first (with `names`, the handler names), then one
    /// chunk. One `write` per chunk, so a process killed meanwhile leaves whole chunks before
    /// a torn one. A failure stops tracing, said once.
    pub(crate) fn flush(&mut self, names: &[String]) {
        let Some(out) = &mut self.out else { return };
        // Not cut by the launcher's watchdog ending the process meanwhile (`writes`).
        let _writing = converse_machine::writes::begin();
        if !out.header_written {
            out.header_written = true;
            self.header.handlers = names.to_vec();
            let mut h = Vec::new();
            self.header.encode(&mut h);
            if let Err(e) = out.file.write_all(&h) {
                return self.fail(&e);
            }
        }
        self.write_chunk();
    }

    fn write_chunk(&mut self) {
        let Some(out) = &mut self.out else { return };
        if out.records.is_empty() && out.strings.is_empty() {
            return;
        }
        // Once per chunk: not cut by the watchdog ending the process meanwhile (`writes`).
        let _writing = converse_machine::writes::begin();
        let b = &mut out.bytes;
        b.clear();
        b.extend_from_slice(CHUNK_TAG);
        b.put_u32(out.strings.len() as u32);
        for s in out.strings.drain(..) {
            b.put_str(&s);
            if out.keep_live {
                out.live.strings.push(s);
            }
        }
        let records_at = b.len();
        b.put_u32(out.records.len() as u32);
        let mut latest = 0;
        for r in out.records.drain(..) {
            latest = latest.max(r.t);
            r.encode(b);
        }
        if !out.keep_live {
            if let Err(e) = out.file.write_all(b) {
                self.fail(&e);
            }
            return;
        }
        // A copy per chunk (16,384 records), not per record: the live window's.
        let live = &mut out.live;
        live.bytes += b.len() - records_at;
        live.chunks.push_back((latest, b[records_at..].to_vec()));
        while live.bytes > LIVE_BYTES && live.chunks.len() > 1 {
            if let Some((_, old)) = live.chunks.pop_front() {
                live.bytes -= old.len();
            }
        }
        if let Err(e) = out.file.write_all(b) {
            self.fail(&e);
        }
    }

    #[cold]
    fn fail(&mut self, e: &std::io::Error) {
        if let Some(out) = self.out.take() {
            converse_machine::input::error_line(&format!(
                "converse: PE {}: tracing stopped, cannot write {}: {e}",
                self.header.pe,
                out.path.display()
            ));
        }
    }

    /// The last `window` of this PE's trace (at most the last [`LIVE_BYTES`] of records), as
    /// a trace file of its own: the header, every string named so far, then the chunks
    /// written within the window, what was buffered included. `None` when this PE does not
    /// trace to a file.
    pub(crate) fn live(&mut self, names: &[String], window: Duration) -> Option<Vec<u8>> {
        self.out.as_ref()?;
        self.flush(names);
        let from = self.now().saturating_sub(window.as_nanos() as u64);
        let out = self.out.as_ref()?;
        let mut f = Vec::new();
        self.header.encode(&mut f);
        f.extend_from_slice(CHUNK_TAG);
        f.put_u32(out.live.strings.len() as u32);
        for s in &out.live.strings {
            f.put_str(s);
        }
        f.put_u32(0);
        for (latest, records) in &out.live.chunks {
            if *latest >= from {
                f.extend_from_slice(CHUNK_TAG);
                f.put_u32(0);
                f.extend_from_slice(records);
            }
        }
        Some(f)
    }

    /// The job ends for this PE: close the idle period, write the rest, print `+stats`.
    pub(crate) fn finish(&mut self, names: &[String], counters: &[(&'static str, u64)]) {
        let t = self.now();
        self.close_idle(t);
        self.sample(counters);
        self.mark("exit");
        self.flush(names);
        if self.print_stats {
            converse_machine::input::error_line(&self.stats_line(Duration::from_nanos(t)));
        }
    }

    /// The counters so far.
    #[cfg(test)]
    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    /// `+stats`' line for this PE, over `elapsed` since its start.
    fn stats_line(&self, elapsed: Duration) -> String {
        let s = &self.stats;
        let total = elapsed.as_nanos().max(1) as f64;
        format!(
            "converse stats: PE {} (node {}): sent {} messages ({}), received {} ({}); \
             handlers {:.3} ms ({} run{}); idle {:.1}% of {:.3} ms",
            self.header.pe,
            self.header.node,
            s.sent,
            human_bytes(s.sent_bytes),
            s.received,
            human_bytes(s.received_bytes),
            s.handler_ns as f64 / 1e6,
            s.handlers,
            if s.handlers == 1 { "" } else { "s" },
            100.0 * s.idle_ns as f64 / total,
            total / 1e6
        )
    }
}

/// `+stats`' line for a node's layer counters.
pub(crate) fn node_stats_line(
    node: usize,
    layer: &str,
    counters: &[(&'static str, u64)],
) -> String {
    let mut line = format!("converse stats: node {node} ({layer}):");
    if counters.is_empty() {
        line += " the layer keeps no counters";
    }
    for (k, v) in counters {
        line += &format!(" {k}={v}");
    }
    line
}

/// Bytes as a person reads them.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace_format::Trace;
    use converse_machine::NodeTable;

    fn recorder(dir: &Path) -> Box<Recorder> {
        let opts = Options {
            dir: Some(dir.to_path_buf()),
            stats: false,
            boot: Some((Instant::now(), Instant::now(), "local")),
        };
        Recorder::new(&opts, 0, 0, &NodeTable::uniform(2, 1), "local")
            .expect("recorder")
            .expect("on")
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("trace-unit-{name}-{}", std::process::id()));
        prepare_dir(&d).expect("dir");
        d
    }

    #[test]
    fn nothing_recorded_without_trace_or_stats() {
        let r = Recorder::new(
            &Options::default(),
            0,
            0,
            &NodeTable::uniform(1, 1),
            "local",
        );
        assert!(matches!(r, Ok(None)));
    }

    #[test]
    fn events_come_back_in_order_with_idle_and_handler_names() {
        let dir = temp("order");
        let mut r = recorder(&dir);
        r.idle_begins(Instant::now());
        r.received(1, 64);
        r.begin(16);
        r.sent(1, 32);
        r.end();
        r.sample(&[("udp.retransmits", 3)]);
        r.sample(&[("udp.retransmits", 3)]);
        r.mark("peer died");
        r.finish(&["ping".into()], &[("udp.retransmits", 4)]);
        let t = Trace::read(&file_of(&dir, 0)).expect("reads");
        let kinds: Vec<Kind> = t.records.iter().map(|r| r.kind).collect();
        use Kind::*;
        assert_eq!(
            kinds,
            [Span, Idle, Recv, Begin, Send, End, Counter, Mark, Counter, Mark]
        );
        assert_eq!(t.header.handler_name(16), "ping");
        assert_eq!(t.string(t.records[7].a), "peer died");
        assert_eq!(t.string(t.records[0].a), "boot (local)");
        assert!(t.records.windows(2).skip(1).all(|w| w[0].t <= w[1].t));
        let s = r.stats();
        assert_eq!(
            (s.sent, s.sent_bytes, s.received, s.handlers),
            (1, 32, 1, 1)
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn full_buffers_are_written_in_chunks_and_each_flush_is_readable() {
        let dir = temp("chunks");
        let mut r = recorder(&dir);
        r.flush(&[]);
        for i in 0..(CHUNK_RECORDS * 2 + 10) {
            r.sent(1, i);
        }
        // Two full chunks are on disk before any explicit flush.
        let t = Trace::read(&file_of(&dir, 0)).expect("reads");
        assert_eq!(
            t.records.len(),
            1 + 2 * CHUNK_RECORDS,
            "the boot span, then two chunks"
        );
        r.flush(&[]);
        let t = Trace::read(&file_of(&dir, 0)).expect("reads");
        assert_eq!(t.records.len(), 1 + 2 * CHUNK_RECORDS + 10);
        assert_eq!(t.torn_bytes, 0);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn stats_count_handler_time_without_nested_idle() {
        let mut r = Recorder::new(
            &Options {
                stats: true,
                ..Options::default()
            },
            0,
            0,
            &NodeTable::uniform(1, 1),
            "local",
        )
        .expect("ok")
        .expect("on");
        r.begin(16);
        r.idle_begins(Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        r.begin(17);
        r.end();
        r.end();
        let s = r.stats();
        assert!(s.idle_ns >= 20_000_000, "{s:?}");
        assert!(s.handler_ns < 10_000_000, "{s:?}");
        assert_eq!(s.handlers, 2);
        let line = r.stats_line(Duration::from_millis(40));
        assert!(
            line.contains("PE 0 (node 0)") && line.contains("idle"),
            "{line}"
        );
    }

    #[test]
    fn every_system_handler_has_its_name_in_traces() {
        use crate::lifecycle::Target;
        use crate::trace_format::SYSTEM_HANDLER_NAMES;
        // Every id the dispatcher knows as the runtime's has a name, and no name is spare.
        let known = (0..crate::lifecycle::USER_BASE)
            .filter(|&id| matches!(Target::of(id), Target::System(_)))
            .count();
        assert_eq!(known, SYSTEM_HANDLER_NAMES.len());
        assert!(matches!(
            Target::of(SYSTEM_HANDLER_NAMES.len() as u32 - 1),
            Target::System(crate::lifecycle::SystemHandler::IdleProbe)
        ));
    }

    /// The figure docs/benchmarks.md reports (`cargo test --release -p converse --lib
    /// an_event -- --nocapture`): a million events of a ping-pong's kinds, the chunk writes
    /// they cause included. The bound is loose so that a debug build on a busy machine passes;
    /// the goal, 50 ns, is for a release build.
    #[test]
    fn an_event_costs_far_less_than_a_microsecond() {
        let dir = temp("cost");
        let mut r = recorder(&dir);
        r.flush(&[]);
        const ROUNDS: u32 = 250_000;
        let t = Instant::now();
        for i in 0..ROUNDS {
            r.received(1, 64);
            r.begin(16 + (i & 1));
            r.sent(1, 64);
            r.end();
        }
        let per_event = t.elapsed().as_nanos() as f64 / f64::from(4 * ROUNDS);
        // Of which the clock (one read per event).
        let t = Instant::now();
        for _ in 0..ROUNDS {
            std::hint::black_box(Instant::now());
        }
        let clock = t.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
        println!(
            "trace: {per_event:.1} ns per event (chunk writes included), of which the clock \
             {clock:.1} ns"
        );
        assert!(per_event < 1000.0, "{per_event} ns per event");
        r.flush(&[]);
        let t = Trace::read(&file_of(&dir, 0)).expect("reads");
        assert_eq!(t.records.len(), 1 + 4 * ROUNDS as usize);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
