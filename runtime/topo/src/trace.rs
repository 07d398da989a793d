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
use crate::process::Topo;
use crate::topology::{Shape, Topology};
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

    fn from_line(line: &str) -> Option<Hop> {
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
        for kv in line.split_whitespace().skip(1) {
            let (k, v) = kv.split_once('=')?;
            match k {
                "op" => h.op = v.to_owned(),
                "seq" => h.seq = v.parse().ok()?,
                "root" => h.root = v.parse().ok()?,
                "from" => h.from = v.parse().ok()?,
                "to" => h.to = v.parse().ok()?,
                "bytes" => h.bytes = v.parse().ok()?,
                "t" => h.time_ns = v.parse().ok()?,
                "vc" => h.vc = VectorTime::from_text(v)?,
                _ => return None,
            }
        }
        (!h.op.is_empty()).then_some(h)
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
        let mut s = String::from("topo-trace 1\n");
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
    /// # Errors
    /// [`TopoError::Parse`] naming the first line that is not part of a trace.
    pub fn parse(text: &str, file: &str) -> Result<Trace, TopoError> {
        let mut t = Trace {
            shape: String::new(),
            dims: Vec::new(),
            centre: 0,
            n: 0,
            edges: Vec::new(),
            hops: Vec::new(),
        };
        for (i, line) in text.lines().enumerate() {
            let bad = || TopoError::Parse {
                file: file.to_owned(),
                line: i + 1,
                reason: format!("not a line of a topology trace: '{}'", line.trim()),
            };
            let mut w = line.split_whitespace();
            let nums = |w: std::str::SplitWhitespace<'_>| -> Option<Vec<usize>> {
                w.map(|x| x.parse().ok()).collect()
            };
            match w.next() {
                None => {}
                Some("topo-trace") if i == 0 => {}
                Some(_) if i == 0 => return Err(bad()),
                Some("shape") => t.shape = w.next().ok_or_else(bad)?.to_owned(),
                Some("dims") => t.dims = nums(w).ok_or_else(bad)?,
                Some("centre") => {
                    t.centre = w.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?
                }
                Some("n") => t.n = w.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?,
                Some("edge") => match nums(w).as_deref() {
                    Some(&[a, b, wt]) if a < t.n && b < t.n => t.edges.push((a, b, wt as u32)),
                    _ => return Err(bad()),
                },
                Some("hop") => {
                    let h = Hop::from_line(line).ok_or_else(bad)?;
                    if h.from >= t.n || h.to >= t.n {
                        return Err(bad());
                    }
                    t.hops.push(h);
                }
                Some(_) => return Err(bad()),
            }
        }
        if t.n == 0 {
            return Err(TopoError::Parse {
                file: file.to_owned(),
                line: 1,
                reason: "no topology in the file (no 'n' line)".into(),
            });
        }
        Ok(t)
    }
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
                hops.extend(Hop::from_line(line));
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
}
