//! Recorded hops and trace files: what `visual` calls leave for `topo-draw`.
//!
//! A trace file is text: a header naming the topology, its channels, then one line per hop.
//!
//! ```text
//! topo-trace 1
//! shape torus
//! dims 2 3
//! centre 0
//! n 6
//! edge 0 1 1
//! hop op=broadcast seq=0 root=0 from=0 to=1 bytes=8 t=1700000000000 vc=1,0,0,0,0,0
//! ```

use crate::error::TopoError;
use crate::files::quote;
use crate::process::Topo;
use crate::topology::{Shape, Topology, MAX_PROCESSES};
use crate::vclock::VectorTime;
use converse::Pe;

/// One recorded hop: a message going over one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The call it belongs to: `send`, `broadcast`, `scatter`, `gather`, `reduce`, ...
    pub op: String,
    /// The call's number: a collective's sequence number, or the sender's count of sends.
    pub seq: u32,
    /// A collective's root, or a send's origin.
    pub root: usize,
    /// Sending process of this hop.
    pub from: usize,
    /// Receiving process of this hop.
    pub to: usize,
    /// Bytes of the message's body.
    pub bytes: usize,
    /// When it was sent, in nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// The vector time the message carried.
    pub vc: VectorTime,
}

impl Hop {
    /// The line a trace file holds for it.
    pub fn to_line(&self) -> String {
        format!(
            "hop op={} seq={} root={} from={} to={} bytes={} t={} vc={}",
            self.op,
            self.seq,
            self.root,
            self.from,
            self.to,
            self.bytes,
            self.time_ns,
            self.vc.to_text()
        )
    }

    /// A hop from its line; the reason it is not one, if not. Every key comes once: a key
    /// left out would silently read as 0, a key given twice would drop one of its values.
    fn from_line(line: &str) -> Result<Hop, String> {
        const KEYS: [&str; 8] = ["op", "seq", "root", "from", "to", "bytes", "t", "vc"];
        let mut h = Hop {
            op: String::new(),
            seq: 0,
            root: 0,
            from: 0,
            to: 0,
            bytes: 0,
            time_ns: 0,
            vc: VectorTime::default(),
        };
        let mut seen = [false; KEYS.len()];
        for kv in line.split_whitespace().skip(1) {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(format!("'{}' is not key=value", quote(kv, 40)));
            };
            let Some(at) = KEYS.iter().position(|&x| x == k) else {
                return Err(format!(
                    "'{}' is not a key of a hop (they are {})",
                    quote(k, 40),
                    KEYS.join(" ")
                ));
            };
            if std::mem::replace(&mut seen[at], true) {
                return Err(format!("'{k}' twice in one hop"));
            }
            let bad = || format!("'{k}={}' is not a {k}", quote(v, 40));
            match k {
                "op" => h.op = v.to_owned(),
                "seq" => h.seq = v.parse().map_err(|_| bad())?,
                "root" => h.root = v.parse().map_err(|_| bad())?,
                "from" => h.from = v.parse().map_err(|_| bad())?,
                "to" => h.to = v.parse().map_err(|_| bad())?,
                "bytes" => h.bytes = v.parse().map_err(|_| bad())?,
                "t" => h.time_ns = v.parse().map_err(|_| bad())?,
                _ => h.vc = VectorTime::from_text(v).ok_or_else(bad)?,
            }
        }
        if let Some(at) = seen.iter().position(|s| !s) {
            return Err(format!("a hop without '{}='", KEYS[at]));
        }
        if h.op.is_empty() {
            return Err("a hop with an empty 'op='".into());
        }
        Ok(h)
    }

    /// The call this hop belongs to, as pictures group them: (op, seq, root).
    pub fn call(&self) -> (String, u32, usize) {
        (self.op.clone(), self.seq, self.root)
    }
}

/// A trace: the topology and the hops recorded on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The class name ([`Shape::name`]).
    pub shape: String,
    /// Grid and torus extents; `[n]` for lines and rings; empty otherwise.
    pub dims: Vec<usize>,
    /// A star's centre.
    pub centre: usize,
    /// Processes.
    pub n: usize,
    /// Channels (a, b, weight), a < b.
    pub edges: Vec<(usize, usize, u32)>,
    /// Hops, in the order recorded per process, processes in id order.
    pub hops: Vec<Hop>,
}

impl Trace {
    /// The trace of `hops` on `topo`.
    pub fn new(topo: &Topology, hops: Vec<Hop>) -> Trace {
        Trace {
            shape: topo.shape().name().to_owned(),
            dims: topo.dims().unwrap_or_default(),
            centre: match topo.shape() {
                Shape::Star { centre } => *centre,
                _ => 0,
            },
            n: topo.len(),
            edges: topo.edges(),
            hops,
        }
    }

    /// The file's text.
    pub fn to_text(&self) -> String {
        let mut s = format!("topo-trace {TRACE_VERSION}\n");
        s += &format!("shape {}\n", self.shape);
        let dims: Vec<String> = self.dims.iter().map(usize::to_string).collect();
        s += &format!("dims {}\n", dims.join(" "));
        s += &format!("centre {}\nn {}\n", self.centre, self.n);
        for (a, b, w) in &self.edges {
            s += &format!("edge {a} {b} {w}\n");
        }
        for h in &self.hops {
            s += &h.to_line();
            s.push('\n');
        }
        s
    }

    /// Read a trace file's text; `file` names it in errors.
    ///
    /// The text is what [`to_text`](Trace::to_text) writes: `topo-trace 1`, then the header's
    /// `shape`, `dims`, `centre` and `n` lines once each and in that order (`dims` and `centre`
    /// may be left out), then `edge` lines, then `hop` lines. Anything else — another version, a
    /// header line repeated or out of place, a value out of range, a setting that does not
    /// agree with `n` — is refused: a channel or hop checked against one `n` and drawn with
    /// another would index past the drawing.
    ///
    /// # Errors
    /// [`TopoError::Parse`] naming the first line that is not part of a trace, in one line.
    pub fn parse(text: &str, file: &str) -> Result<Trace, TopoError> {
        let mut t = Trace {
            shape: String::new(),
            dims: Vec::new(),
            centre: 0,
            n: 0,
            edges: Vec::new(),
            hops: Vec::new(),
        };
        // Where each header line was (by `HEADER` index), and how far into the file's sections
        // (the version line, the header's lines, channels, hops) the lines have come.
        let mut header_at: [Option<usize>; HEADER.len()] = [None; HEADER.len()];
        let mut section = Section::Start;
        let mut channels = std::collections::HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let err = |reason: String| TopoError::Parse {
                file: file.to_owned(),
                line: i + 1,
                reason,
            };
            let mut w = line.split_whitespace();
            let key = w.next();
            if section == Section::Start {
                match (key, w.next(), w.next()) {
                    (Some("topo-trace"), Some(v), None) if v == TRACE_VERSION => {}
                    (Some("topo-trace"), Some(v), None) => {
                        return Err(err(format!(
                            "trace format version '{}': this reader reads version {TRACE_VERSION}",
                            quote(v, 20)
                        )))
                    }
                    _ => {
                        return Err(err(format!(
                            "not a topology trace: the first line is '{}', not 'topo-trace {TRACE_VERSION}'",
                            quote(line, 60)
                        )))
                    }
                }
                section = Section::Header(0);
                continue;
            }
            let Some(key) = key else {
                continue;
            };
            if let Some(h) = HEADER.iter().position(|&k| k == key) {
                if let Some(first) = header_at[h] {
                    return Err(err(format!(
                        "'{key}' again (it was given at line {first}): a trace has one"
                    )));
                }
                if section >= Section::Header(h + 1) {
                    return Err(err(format!(
                        "'{key}' out of place: the header's lines are {} in that order, before \
                         the 'edge' and 'hop' lines",
                        HEADER.join(", ")
                    )));
                }
                header_at[h] = Some(i + 1);
                section = Section::Header(h + 1);
                let words: Vec<&str> = w.collect();
                let one = || -> Result<&str, TopoError> {
                    match words.as_slice() {
                        [v] => Ok(v),
                        _ => Err(err(format!(
                            "'{key}' takes one value: '{}'",
                            quote(line, 60)
                        ))),
                    }
                };
                let number = |v: &str| -> Result<usize, TopoError> {
                    v.parse()
                        .map_err(|_| err(format!("'{}' is not a number", quote(v, 30))))
                };
                match key {
                    "shape" => {
                        let v = one()?;
                        if !shape_names().contains(&v) {
                            return Err(err(format!(
                                "'{}' is not a topology class (they are {})",
                                quote(v, 30),
                                shape_names().join(" ")
                            )));
                        }
                        v.clone_into(&mut t.shape);
                    }
                    "dims" => {
                        t.dims = words.iter().map(|v| number(v)).collect::<Result<_, _>>()?;
                    }
                    "centre" => t.centre = number(one()?)?,
                    _ => {
                        t.n = number(one()?)?;
                        if !(1..=MAX_PROCESSES).contains(&t.n) {
                            return Err(err(format!(
                                "{} processes: a topology has 1 to {MAX_PROCESSES}",
                                t.n
                            )));
                        }
                    }
                }
                continue;
            }
            let need_n = || {
                if header_at[N].is_none() {
                    Err(err(format!("'{key}' before the 'n' line")))
                } else {
                    Ok(())
                }
            };
            match key {
                "edge" => {
                    need_n()?;
                    if section > Section::Edges {
                        return Err(err("'edge' after a 'hop' line: channels come first".into()));
                    }
                    section = Section::Edges;
                    let v: Vec<&str> = w.collect();
                    let [a, b, wt] = v.as_slice() else {
                        return Err(err(format!(
                            "'edge' takes two processes and a weight: '{}'",
                            quote(line, 60)
                        )));
                    };
                    let (a, b) = match (a.parse::<usize>(), b.parse::<usize>()) {
                        (Ok(a), Ok(b)) if a < b && b < t.n => (a, b),
                        _ => {
                            return Err(err(format!(
                                "'edge {} {}' is not a channel of processes a < b < {}",
                                quote(a, 20),
                                quote(b, 20),
                                t.n
                            )))
                        }
                    };
                    // Parsed as the u32 it is, not cast: 4294967297 would wrap to 1.
                    let wt = match wt.parse::<u32>() {
                        Ok(wt) if wt > 0 => wt,
                        _ => {
                            return Err(err(format!(
                                "'{}' is not a channel weight (1 to {})",
                                quote(wt, 30),
                                u32::MAX
                            )))
                        }
                    };
                    if !channels.insert((a, b)) {
                        return Err(err(format!("channel {a}-{b} twice")));
                    }
                    t.edges.push((a, b, wt));
                }
                "hop" => {
                    need_n()?;
                    section = Section::Hops;
                    let h = Hop::from_line(line).map_err(err)?;
                    if h.from >= t.n || h.to >= t.n {
                        return Err(err(format!(
                            "a hop from {} to {}: the topology has processes 0 to {}",
                            h.from,
                            h.to,
                            t.n - 1
                        )));
                    }
                    if h.vc.entries().len() != t.n {
                        return Err(err(format!(
                            "a vector time of {} entries on a topology of {} processes",
                            h.vc.entries().len(),
                            t.n
                        )));
                    }
                    t.hops.push(h);
                }
                _ => {
                    return Err(err(format!(
                        "not a line of a topology trace: '{}'",
                        quote(line, 60)
                    )))
                }
            }
        }
        let at = |h: usize| header_at[h].unwrap_or(1);
        let fail = |line: usize, reason: String| TopoError::Parse {
            file: file.to_owned(),
            line,
            reason,
        };
        if section == Section::Start {
            return Err(fail(1, "not a topology trace: the file is empty".into()));
        }
        if header_at[N].is_none() {
            return Err(fail(1, "no topology in the file (no 'n' line)".into()));
        }
        if header_at[SHAPE].is_none() {
            return Err(fail(1, "no 'shape' line".into()));
        }
        t.check_header().map_err(|(h, why)| fail(at(h), why))?;
        Ok(t)
    }

    /// Read and [`parse`](Trace::parse) the trace file `path`, of at most
    /// [`MAX_FILE_BYTES`](crate::files::MAX_FILE_BYTES).
    ///
    /// # Errors
    /// [`TopoError::Io`] (also for a larger file), [`TopoError::Parse`].
    pub fn load(path: &std::path::Path) -> Result<Trace, TopoError> {
        let text = crate::files::read_text(path)?;
        Trace::parse(&text, &path.display().to_string())
    }

    /// Whether `dims` and `centre` agree with the class and `n` (the `HEADER` line to blame and
    /// why, if not), as [`Trace::new`] writes them: a grid's or torus's extents multiply to
    /// `n`; a line's or ring's is `[n]`; the others have none; the centre is a process.
    fn check_header(&self) -> Result<(), (usize, String)> {
        let n = self.n;
        if self.centre >= n {
            return Err((
                CENTRE,
                format!("centre {} is not one of the {n} processes", self.centre),
            ));
        }
        let product = self.dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let ok = match self.shape.as_str() {
            "grid" | "torus" => !self.dims.is_empty() && product == Some(n),
            "line" | "ring" => self.dims.is_empty() || self.dims == [n],
            _ => self.dims.is_empty(),
        };
        if ok {
            return Ok(());
        }
        let dims: Vec<String> = self.dims.iter().map(usize::to_string).collect();
        let want = match self.shape.as_str() {
            "grid" | "torus" => format!("extents that multiply to the {n} processes"),
            "line" | "ring" => format!("'{n}' or nothing"),
            _ => "nothing".to_owned(),
        };
        Err((
            DIMS,
            format!(
                "dims '{}' for a {} of {n} processes, which takes {want}",
                dims.join(" "),
                self.shape
            ),
        ))
    }
}

/// The trace format's version this reader reads and [`Trace::to_text`] writes.
pub const TRACE_VERSION: &str = "1";

/// The header's lines, in the order they come.
const HEADER: [&str; 4] = ["shape", "dims", "centre", "n"];
const SHAPE: usize = 0;
const DIMS: usize = 1;
const CENTRE: usize = 2;
const N: usize = 3;

/// How far into a trace file's sections the lines have come; each may only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Section {
    /// Before the version line.
    Start,
    /// In the header, past `HEADER[..k]`.
    Header(usize),
    /// In the channels.
    Edges,
    /// In the hops.
    Hops,
}

/// The class names a trace may hold: those [`Shape::name`] gives.
fn shape_names() -> [&'static str; 7] {
    [
        Shape::Arbitrary { weighted: false },
        Shape::Star { centre: 0 },
        Shape::Line,
        Shape::Ring,
        Shape::Grid(Vec::new()),
        Shape::Torus(Vec::new()),
        Shape::Full,
    ]
    .map(|s| s.name())
}

impl Topo {
    /// Gather every process's recorded hops at process 0 (a collective: every process calls
    /// it) and write them, with the topology, to the trace file `path` there, for
    /// `topo-draw`. The gather itself is not recorded.
    ///
    /// # Errors
    /// [`TopoError::Io`] on process 0 when the file cannot be written; those of
    /// [`gather`](Topo::gather).
    pub fn save_trace(
        &self,
        pe: &mut Pe,
        path: impl AsRef<std::path::Path>,
    ) -> Result<(), TopoError> {
        let mine: String = self.hops().iter().map(|h| h.to_line() + "\n").collect();
        let saved = {
            let mut s = self.st.borrow_mut();
            let v = (s.visual_all, s.visual_next);
            (s.visual_all, s.visual_next) = (false, false);
            v
        };
        let all = self.gather(pe, 0, mine.as_bytes());
        {
            let mut s = self.st.borrow_mut();
            (s.visual_all, s.visual_next) = saved;
        }
        let Some(all) = all? else {
            return Ok(());
        };
        let mut hops = Vec::new();
        for part in &all {
            for line in String::from_utf8_lossy(part).lines() {
                hops.extend(Hop::from_line(line).ok());
            }
        }
        let trace = Trace::new(&self.topology(), hops);
        let path = path.as_ref();
        std::fs::write(path, trace.to_text()).map_err(|e| TopoError::Io {
            file: path.display().to_string(),
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_round_trip_and_refuse_garbage() {
        let topo = Topology::torus2(2, 3).unwrap();
        let hop = Hop {
            op: "broadcast".into(),
            seq: 4,
            root: 1,
            from: 1,
            to: 2,
            bytes: 8,
            time_ns: 99,
            vc: VectorTime(vec![0, 1, 0, 0, 0, 0]),
        };
        let t = Trace::new(&topo, vec![hop.clone(), hop]);
        let back = Trace::parse(&t.to_text(), "t").unwrap();
        assert_eq!(back, t);
        assert_eq!(back.dims, [2, 3]);
        let e = Trace::parse("topo-trace 1\nn 2\nhop op=x from=5 to=0\n", "f").unwrap_err();
        assert!(e.to_string().starts_with("f:3: "), "{e}");
        assert!(Trace::parse("garbage\n", "f").is_err());
        assert!(Trace::parse("topo-trace 1\n", "f").is_err());
    }

    /// What `Trace::new` writes for every class reads back as it was.
    #[test]
    fn every_class_round_trips() {
        let all = [
            Topology::ring(5),
            Topology::line(3),
            Topology::star(4, 2),
            Topology::grid(&[2, 3]),
            Topology::torus(&[2, 2, 2]),
            Topology::fully_connected(4),
            Topology::from_matrix(&[vec![0, 3], vec![3, 0]]),
        ];
        for t in all {
            let t = Trace::new(&t.unwrap(), vec![]);
            assert_eq!(Trace::parse(&t.to_text(), "t").as_ref(), Ok(&t), "{t:?}");
        }
    }

    /// The error for `text`, checked to be one line naming `file:line`.
    fn refused(text: &str, line: usize) -> String {
        let e = Trace::parse(text, "f").unwrap_err().to_string();
        assert!(e.starts_with(&format!("f:{line}: ")), "{text:?}: {e}");
        assert!(
            !e.contains('\n') && !e.contains('\u{1b}') && !e.contains('\0'),
            "{e}"
        );
        e
    }

    #[test]
    fn a_header_line_repeated_or_out_of_place_is_refused() {
        // A second `n` after the channels were checked against the first one drew past the
        // end of the layout (a panic in topo-draw).
        let e = refused("topo-trace 1\nshape ring\nn 5\nedge 0 4 1\nn 2\n", 5);
        assert!(e.contains("'n' again (it was given at line 3)"), "{e}");
        let hop = "hop op=b seq=0 root=0 from=0 to=4 bytes=8 t=1 vc=1,0,0,0,0";
        refused(&format!("topo-trace 1\nshape ring\nn 5\n{hop}\nn 2\n"), 5);
        let e = refused("topo-trace 1\nn 2\nshape ring\n", 3);
        assert!(e.contains("'shape' out of place"), "{e}");
        refused("topo-trace 1\nshape ring\nshape ring\nn 2\n", 3);
        refused("topo-trace 1\nshape ring\nn 2\nedge 0 1 1\ndims 2\n", 5);
        refused("topo-trace 1\nshape ring\nedge 0 1 1\nn 2\n", 3);
        let e = refused(
            "topo-trace 1\nshape ring\nn 2\nhop op=x seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1,0\n\
             edge 0 1 1\n",
            5,
        );
        assert!(e.contains("'edge' after a 'hop' line"), "{e}");
        let e = refused("topo-trace 1\nshape ring\nn 2\ntopo-trace 1\n", 4);
        assert!(e.contains("not a line of a topology trace"), "{e}");
        refused("\ntopo-trace 1\nshape ring\nn 2\n", 1);
        let e = refused("topo-trace 1\nn 2\n", 1);
        assert!(e.contains("no 'shape' line"), "{e}");
    }

    #[test]
    fn malformed_settings_are_refused() {
        let e = refused("topo-trace 99\nshape ring\nn 2\n", 1);
        assert!(e.contains("version '99'"), "{e}");
        refused("topo-trace 1 2\nshape ring\nn 2\n", 1);
        // Cast to u32, this weight became 1.
        let e = refused("topo-trace 1\nshape ring\nn 2\nedge 0 1 4294967297\n", 4);
        assert!(e.contains("'4294967297' is not a channel weight"), "{e}");
        for (text, line) in [
            ("topo-trace 1\nshape ring\nn 2\nedge 0 1 0\n", 4),
            ("topo-trace 1\nshape ring\nn 2\nedge 1 0 1\n", 4),
            ("topo-trace 1\nshape ring\nn 2\nedge 0 2 1\n", 4),
            ("topo-trace 1\nshape ring\nn 2\nedge 0 1 1 1\n", 4),
            ("topo-trace 1\nshape ring\nn 2\nedge 0 1 1\nedge 0 1 2\n", 5),
            ("topo-trace 1\nshape ring\nn 2 3\n", 3),
            ("topo-trace 1\nshape ring\nn 0\n", 3),
            ("topo-trace 1\nshape ring\nn 65537\n", 3),
            ("topo-trace 1\nshape ring\nn -1\n", 3),
            ("topo-trace 1\nshape blob\nn 2\n", 2),
            ("topo-trace 1\nshape ring line\nn 2\n", 2),
            ("topo-trace 1\nshape torus\ndims 0 3\nn 3\n", 3),
            ("topo-trace 1\nshape grid\ndims 2 2\nn 3\n", 3),
            ("topo-trace 1\nshape grid\nn 3\n", 1),
            ("topo-trace 1\nshape ring\ndims 4\nn 3\n", 3),
            ("topo-trace 1\nshape full\ndims 3\nn 3\n", 3),
            ("topo-trace 1\nshape star\ncentre 9\nn 2\n", 3),
        ] {
            refused(text, line);
        }
        let head = "topo-trace 1\nshape ring\nn 2\n";
        let ok = "op=b seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1,0";
        assert!(Trace::parse(&format!("{head}hop {ok}\n"), "f").is_ok());
        for (hop, want) in [
            ("op=b seq=0 root=0 from=0 to=1 bytes=8 t=1", "without 'vc='"),
            (
                "op=b op=c seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1,0",
                "'op' twice",
            ),
            (&format!("{ok} colour=red"), "'colour' is not a key"),
            (&format!("{ok} stray"), "'stray' is not key=value"),
            (
                "op= seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1,0",
                "empty 'op='",
            ),
            (
                "op=b seq=-1 root=0 from=0 to=1 bytes=8 t=1 vc=1,0",
                "'seq=-1'",
            ),
            (
                "op=b seq=0 root=0 from=0 to=2 bytes=8 t=1 vc=1,0",
                "processes 0 to 1",
            ),
            (
                "op=b seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1",
                "1 entries",
            ),
        ] {
            let e = refused(&format!("{head}hop {hop}\n"), 4);
            assert!(e.contains(want), "{hop}: {e}");
        }
    }

    #[test]
    fn errors_quote_input_escaped_and_short() {
        let e = refused("topo-trace 1\u{1b}[2J\u{0}\n", 1);
        assert!(e.contains("version '1\\u{1b}[2J\\0'"), "{e}");
        let e = refused("\u{1b}]0;title\u{7}\n", 1);
        assert!(e.contains("'\\u{1b}]0;title\\u{7}'"), "{e}");
        let e = refused(
            &format!("topo-trace 1\nshape ring\nn 2\n{}\n", "x".repeat(5000)),
            4,
        );
        assert!(e.len() < 200, "{e}");
        let e = refused("topo-trace 1\nshape ring\nn 2\nedge 0 1 \u{7}\n", 4);
        assert!(e.contains("'\\u{7}'"), "{e}");
    }

    #[test]
    fn an_endless_trace_file_is_refused() {
        let e = Trace::load(std::path::Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.to_string(), "/dev/zero: it is larger than 131072 KiB");
    }
}
