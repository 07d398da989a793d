//! Back-end attach mode, the back-end's side: a program started apart from the network (by
//! `mpirun` for the application a tool watches, by `srun`, by hand) joins the tree as a
//! back-end of a leaf, as MRNet's back-ends do in its instantiation mode 2.
//!
//! The front-end makes an attach-mode network
//! ([`Options::attach_backends`](crate::Options::attach_backends)): every process of its
//! topology is internal, and each leaf listens. The front-end writes where
//! ([`Network::write_attach_file`](crate::Network::write_attach_file)) with the network's
//! secret; a back-end reads that file ([`AttachFile::read`]), picks a leaf and a rank of its
//! own — unique, below [`FIRST_INTERNAL_RANK`](crate::FIRST_INTERNAL_RANK): MRNet asks for a
//! rank above the network's, ours are below its internal ranks — and calls
//! [`BackEnd::attach`]. From then on it receives and sends on streams as any back-end, in a
//! plain process: no runtime, no charmrun, one TCP connection to its leaf.
//!
//! **The attach file** (mode 0600, since it holds the secret), one item a line, `#` comments:
//!
//! | line | what |
//! |---|---|
//! | `secret HEX` | the network's secret (64 hex digits) |
//! | `leaf HOST PORT RANK` | a leaf listening at `tcp://HOST:PORT`, ranked `RANK` (MRNet's parent host, port and rank) |
//!
//! **The wire** (over the endpoint protocol of `converse-endpoint`, named handlers):
//!
//! | name | direction | bytes |
//! |---|---|---|
//! | `tbon.attach` (a call) | back-end → leaf | u32 rank, u32 length + host name; reply: u8 0 + u32 leaf rank, or u8 1 + why (UTF-8) |
//! | `tbon.down` | leaf → back-end | a packet with its route trailer, as between PEs |
//! | `tbon.ctl` | leaf → back-end | a control message: a stream opened or closed, the shutdown |
//! | `tbon.up` | back-end → leaf | a packet with an empty route trailer |
//!
//! The connection is the back-end's life in the tree: if it ends, the leaf counts the
//! back-end dead; if the leaf dies, the back-end's calls fail with
//! [`TbonError::ParentLost`] (it does not re-connect).

mod backend;
mod topology;

pub use backend::{secret_from_env, BackEnd};

use crate::error::TbonError;
use crate::topology::Rank;
use converse_endpoint::Secret;
use std::io::Write;
use std::path::Path;

/// Where a leaf of an attach-mode network listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachPoint {
    /// The leaf's rank (the back-end's parent rank).
    pub rank: Rank,
    /// Its host (an address of it).
    pub host: String,
    /// Its port.
    pub port: u16,
}

impl AttachPoint {
    /// `tcp://HOST:PORT`.
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("tcp://[{}]:{}", self.host, self.port)
        } else {
            format!("tcp://{}:{}", self.host, self.port)
        }
    }

    /// From a listener's address string (`tcp://HOST:PORT`).
    pub(crate) fn from_addr(rank: Rank, addr: &str) -> Option<AttachPoint> {
        let rest = addr.strip_prefix("tcp://")?;
        let (host, port) = rest.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Some(AttachPoint {
            rank,
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    }
}

/// An attach file: the network's secret and its leaves.
#[derive(Debug, Clone)]
pub struct AttachFile {
    /// The secret a back-end proves to a leaf.
    pub secret: Secret,
    /// Every leaf that listens, by rank.
    pub points: Vec<AttachPoint>,
}

impl AttachFile {
    /// The file's text.
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# converse-tbon attach points: a back-end proves the secret to one leaf\n",
        );
        s.push_str(&format!("secret {}\n", self.secret.to_hex()));
        for p in &self.points {
            s.push_str(&format!("leaf {} {} {}\n", p.host, p.port, p.rank));
        }
        s
    }

    /// Parse a file's text (`what` names it in errors).
    ///
    /// # Errors
    /// [`TbonError::Attach`] naming the line that does not read, or a file without a secret
    /// or leaf.
    pub fn parse(text: &str, what: &str) -> Result<AttachFile, TbonError> {
        let bad = |n: usize, why: String| TbonError::Attach(format!("{what}:{n}: {why}"));
        let mut secret = None;
        let mut points = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["secret", hex] => {
                    secret = Some(Secret::parse(hex).map_err(|e| bad(n, e.to_string()))?);
                }
                ["leaf", host, port, rank] => {
                    let port = port
                        .parse()
                        .map_err(|_| bad(n, format!("port {port:?} is not a port number")))?;
                    let rank = rank
                        .parse()
                        .map_err(|_| bad(n, format!("rank {rank:?} is not a rank")))?;
                    points.push(AttachPoint {
                        rank,
                        host: (*host).to_owned(),
                        port,
                    });
                }
                _ => {
                    return Err(bad(
                        n,
                        format!("{line:?} is neither `secret HEX` nor `leaf HOST PORT RANK`"),
                    ))
                }
            }
        }
        let secret = secret.ok_or_else(|| TbonError::Attach(format!("{what}: no secret line")))?;
        if points.is_empty() {
            return Err(TbonError::Attach(format!("{what}: no leaf line")));
        }
        Ok(AttachFile { secret, points })
    }

    /// Read an attach file.
    ///
    /// # Errors
    /// [`TbonError::Attach`] if it cannot be read or does not parse.
    pub fn read(path: &Path) -> Result<AttachFile, TbonError> {
        let what = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| TbonError::Attach(format!("cannot read {what}: {e}")))?;
        AttachFile::parse(&text, &what)
    }

    /// Write it to `path`, readable by its owner only (it holds the secret), replacing what
    /// was there. The file appears whole or not at all (written beside it, then renamed), so
    /// a back-end that finds it reads all of it.
    ///
    /// # Errors
    /// [`TbonError::Attach`] if it cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), TbonError> {
        use std::os::unix::fs::OpenOptionsExt;
        let what = path.display();
        let fail = |e: std::io::Error| TbonError::Attach(format!("cannot write {what}: {e}"));
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{}.part", std::process::id()));
        let part = path.with_file_name(name);
        // One left by a run that died may be readable by others: it goes first.
        match std::fs::remove_file(&part) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&part)
            .and_then(|mut f| f.write_all(self.to_text().as_bytes()))
            .and_then(|()| std::fs::rename(&part, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&part);
        }
        written.map_err(fail)
    }

    /// Read an attach file, waiting up to `timeout` for it to appear (a back-end started
    /// beside its front-end may look before the front-end has written it).
    ///
    /// # Errors
    /// As [`read`](Self::read), once the time has passed.
    pub fn read_waiting(
        path: &Path,
        timeout: std::time::Duration,
    ) -> Result<AttachFile, TbonError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match AttachFile::read(path) {
                Err(_) if !path.exists() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                r => return r,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attach_file_reads_back_and_bad_lines_are_named() {
        let secret = Secret::parse(&"ab".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let f = AttachFile {
            secret,
            points: vec![
                AttachPoint {
                    rank: 1 << 24 | 3,
                    host: "10.0.0.7".into(),
                    port: 4000,
                },
                AttachPoint {
                    rank: 1 << 24 | 4,
                    host: "::1".into(),
                    port: 4001,
                },
            ],
        };
        let back = AttachFile::parse(&f.to_text(), "f").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.points, f.points);
        assert_eq!(back.points[1].addr(), "tcp://[::1]:4001");
        assert_eq!(
            AttachPoint::from_addr(5, "tcp://[::1]:4001"),
            Some(back.points[1].clone()).map(|p| AttachPoint { rank: 5, ..p })
        );
        for (text, want) in [
            ("leaf h 1 2\n", "f: no secret line"),
            (&format!("secret {}\n", "ab".repeat(32)), "f: no leaf line"),
            ("secret xyz\n", "f:1: "),
            (
                "# c\nleaf h port 2\n",
                "f:2: port \"port\" is not a port number",
            ),
            ("leaf h 70000 2\n", "f:1: port \"70000\""),
            ("leaf h 1\n", "f:1: \"leaf h 1\" is neither"),
        ] {
            let e = AttachFile::parse(text, "f")
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
