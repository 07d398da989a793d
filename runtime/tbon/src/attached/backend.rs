//! An attached back-end: a plain process (no runtime) joined to a leaf of an attach-mode
//! network through one connection.

use super::AttachPoint;
use crate::codec::Pack;
use crate::error::{check_tag, TbonError};
use crate::packet::Packet;
use crate::protocol::{Ctl, Req};
use crate::stream::{Stream, FIRST_USER_STREAM};
use crate::topology::{Rank, FIRST_INTERNAL_RANK};
use converse::Message;
use converse_endpoint::{Connection, EndpointError, Received, Secret};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long an attach may wait for the front-end's answer.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// Packets received and not yet taken: one that stops receiving stops its leaf's sends
/// (TCP's window) and, past the leaf's bound, is detached, rather than this growing.
const INBOX_MAX: usize = 1 << 16;

/// A back-end joined to an attach-mode network (see the [module](super) documentation).
///
/// ```no_run
/// use converse_tbon::attached::{AttachFile, BackEnd};
/// let file = AttachFile::read("attach.txt".as_ref()).unwrap();
/// let rank = 7; // this back-end's own, unique in the network
/// let leaf = &file.points[rank as usize % file.points.len()];
/// let mut be = BackEnd::attach(leaf, rank, &file.secret).unwrap();
/// while let Ok((s, p)) = be.recv() {
///     let v: i32 = p.unpack("%d").unwrap();
///     be.send(&s, p.tag(), "%d", v + 1).unwrap();
/// }
/// ```
#[derive(Debug)]
pub struct BackEnd {
    conn: Connection,
    rank: Rank,
    parent: Rank,
    /// Streams opened to it: whether each is closed.
    streams: HashMap<u32, bool>,
    inbox: VecDeque<(u32, Packet)>,
    shut_down: bool,
    /// Why the connection ended, once it has.
    lost: Option<String>,
    /// The highest number seen on its own singlecast stream.
    single_seen: u32,
    last_format: crate::packet::LastFormat,
}

impl BackEnd {
    /// Join the network at leaf `point` as back-end `rank`, proving `secret`. Waits until the
    /// front-end has accepted it (at most a minute).
    ///
    /// # Errors
    /// [`TbonError::Attach`]: the leaf is unreachable, refuses the secret, or the front-end
    /// refuses the rank (taken, or not below
    /// [`FIRST_INTERNAL_RANK`](crate::FIRST_INTERNAL_RANK)), saying why.
    pub fn attach(point: &AttachPoint, rank: Rank, secret: &Secret) -> Result<BackEnd, TbonError> {
        BackEnd::attach_to(&point.addr(), point.rank, rank, secret)
    }

    /// As [`attach`](Self::attach), with the leaf's address string and rank.
    ///
    /// # Errors
    /// As [`attach`](Self::attach).
    pub fn attach_to(
        addr: &str,
        parent: Rank,
        rank: Rank,
        secret: &Secret,
    ) -> Result<BackEnd, TbonError> {
        let fail = |e: EndpointError| TbonError::Attach(e.to_string());
        if rank >= FIRST_INTERNAL_RANK {
            return Err(TbonError::Attach(format!(
                "rank {rank} is not a back-end rank (back-ends are ranked below {FIRST_INTERNAL_RANK})"
            )));
        }
        let mut conn = Connection::connect(addr, secret).map_err(fail)?;
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".into());
        let mut ask = Vec::new();
        ask.extend_from_slice(&rank.to_le_bytes());
        ask.extend_from_slice(&(host.len() as u32).to_le_bytes());
        ask.extend_from_slice(host.as_bytes());
        let reply = conn
            .call("tbon.attach", &ask, ATTACH_TIMEOUT)
            .map_err(fail)?;
        match reply.split_first() {
            Some((0, r)) if r.len() == 4 => {
                let leaf = Rank::from_le_bytes([r[0], r[1], r[2], r[3]]);
                if leaf != parent {
                    return Err(TbonError::Attach(format!(
                        "{addr} is leaf {leaf}, not {parent}"
                    )));
                }
            }
            Some((1, why)) => {
                return Err(TbonError::Attach(format!(
                    "{addr} refused rank {rank}: {}",
                    String::from_utf8_lossy(why)
                )))
            }
            _ => {
                return Err(TbonError::Attach(format!(
                    "{addr} answered the attach call with bytes that do not decode"
                )))
            }
        }
        Ok(BackEnd {
            conn,
            rank,
            parent,
            streams: HashMap::new(),
            inbox: VecDeque::new(),
            shut_down: false,
            lost: None,
            single_seen: 0,
            last_format: Default::default(),
        })
    }

    /// MRNet's back-end arguments, after the program's own: `PARENT_HOST PARENT_PORT
    /// PARENT_RANK MY_HOST MY_RANK` (`MY_HOST` is not used: the leaf sees where the
    /// connection comes from). The secret is in the file `CONVERSE_TBON_SECRET_FILE` names, or
    /// in `CONVERSE_TBON_SECRET` (hex).
    ///
    /// # Errors
    /// [`TbonError::Attach`] for arguments or a secret that do not read; else as
    /// [`attach`](Self::attach).
    pub fn from_args(args: &[String]) -> Result<BackEnd, TbonError> {
        let bad = |what: &str, v: &str| TbonError::Attach(format!("{what} {v:?} is not one"));
        let [host, port, parent, _my_host, rank] = args else {
            return Err(TbonError::Attach(format!(
                "{} arguments where five are needed: PARENT_HOST PARENT_PORT PARENT_RANK \
                 MY_HOST MY_RANK",
                args.len()
            )));
        };
        let point = AttachPoint {
            rank: parent.parse().map_err(|_| bad("parent rank", parent))?,
            host: host.clone(),
            port: port.parse().map_err(|_| bad("port", port))?,
        };
        let rank: Rank = rank.parse().map_err(|_| bad("rank", rank))?;
        let secret = secret_from_env()?;
        BackEnd::attach(&point, rank, &secret)
    }

    /// Its rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Its parent's rank (the leaf's).
    pub fn parent_rank(&self) -> Rank {
        self.parent
    }

    /// The next packet on any stream, and its stream, waiting for it.
    ///
    /// # Errors
    /// [`TbonError::ShutDown`] once the network is shut down and nothing is left;
    /// [`TbonError::ParentLost`] if the connection ended.
    pub fn recv(&mut self) -> Result<(Stream, Packet), TbonError> {
        loop {
            if let Some(x) = self.recv_timeout(Duration::from_secs(3600))? {
                return Ok(x);
            }
        }
    }

    /// As [`recv`](Self::recv), waiting at most `timeout`: `Ok(None)` if nothing came.
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<(Stream, Packet)>, TbonError> {
        let deadline = Instant::now() + timeout;
        let mut looked = false;
        loop {
            if let Some((id, p)) = self.inbox.pop_front() {
                return Ok(Some((Stream::from_id(id), p)));
            }
            self.ended()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if looked && left.is_zero() {
                return Ok(None);
            }
            looked = true;
            self.pump(Some(left))?;
        }
    }

    /// The next packet on stream `s`, waiting at most `timeout` (packets of other streams
    /// that come meanwhile stay for later receives): `Ok(None)` if none came.
    ///
    /// # Errors
    /// [`TbonError::StreamClosed`] once `s` is closed and nothing of it is left; else as
    /// [`recv`](Self::recv).
    pub fn recv_on(&mut self, s: &Stream, timeout: Duration) -> Result<Option<Packet>, TbonError> {
        let deadline = Instant::now() + timeout;
        let mut looked = false;
        loop {
            if let Some(at) = self.inbox.iter().position(|(id, _)| *id == s.id) {
                return Ok(self.inbox.remove(at).map(|(_, p)| p));
            }
            if self.streams.get(&s.id) == Some(&true) {
                return Err(TbonError::StreamClosed(s.id));
            }
            self.ended()?;
            if self.inbox.len() >= INBOX_MAX {
                return Err(TbonError::Usage(format!(
                    "{INBOX_MAX} packets of other streams wait unreceived: receive them first"
                )));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if looked && left.is_zero() {
                return Ok(None);
            }
            looked = true;
            self.pump(Some(left))?;
        }
    }

    /// Wait up to `timeout` for the network's shutdown, keeping the packets that come for
    /// later receives: whether it has come.
    ///
    /// # Errors
    /// [`TbonError::ParentLost`] if the connection ends first.
    pub fn wait_for_shutdown_timeout(&mut self, timeout: Duration) -> Result<bool, TbonError> {
        let deadline = Instant::now() + timeout;
        while !self.shut_down {
            if let Some(why) = &self.lost {
                return Err(TbonError::ParentLost(why.clone()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.pump(Some(left))?;
        }
        Ok(true)
    }

    /// Whether stream `id` is one this back-end may use: opened to it, or its own
    /// singlecast stream (its rank).
    pub fn has_stream(&self, id: u32) -> bool {
        self.streams.contains_key(&id) || (id == self.rank && id < FIRST_USER_STREAM)
    }

    /// Whether stream `id` was closed by the front-end.
    pub fn is_closed(&self, id: u32) -> bool {
        self.streams.get(&id) == Some(&true)
    }

    /// The next packet if one is there, without waiting (MRNet's `recv_nonblock`).
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_nonblock(&mut self) -> Result<Option<(Stream, Packet)>, TbonError> {
        if self.inbox.is_empty() && self.lost.is_none() && !self.shut_down {
            self.pump(Some(Duration::ZERO))?;
        }
        if let Some((id, p)) = self.inbox.pop_front() {
            return Ok(Some((Stream::from_id(id), p)));
        }
        self.ended()?;
        Ok(None)
    }

    /// Send `values` as `format` up stream `s` with `tag`.
    ///
    /// # Errors
    /// [`TbonError::ReservedTag`]; [`TbonError::NoStream`] for a stream not opened to this
    /// back-end (nor its own singlecast stream, its rank); [`TbonError::StreamClosed`];
    /// [`TbonError::Packet`] when the values do not match the format;
    /// [`TbonError::ShutDown`]; [`TbonError::ParentLost`].
    pub fn send(
        &mut self,
        s: &Stream,
        tag: i32,
        format: &str,
        values: impl Pack,
    ) -> Result<(), TbonError> {
        check_tag(tag)?;
        if self.shut_down {
            return Err(TbonError::ShutDown);
        }
        if let Some(why) = &self.lost {
            return Err(TbonError::ParentLost(why.clone()));
        }
        let id = s.id;
        match self.streams.get(&id) {
            Some(true) => return Err(TbonError::StreamClosed(id)),
            Some(false) => {}
            None if id == self.rank && id < FIRST_USER_STREAM => {}
            None => return Err(TbonError::NoStream(id)),
        }
        let mut p = self.last_format.packet(id, tag, format, &values)?;
        p.set_src_rank(self.rank);
        let msg = p.into_message(&[]);
        let sent = self.conn.send("tbon.up", msg.payload());
        sent.map_err(|e| self.lose(e))
    }

    /// Everything sent is written when `send` returns (the connection writes at once); this
    /// only checks that the connection is still there (MRNet's `flush`).
    ///
    /// # Errors
    /// [`TbonError::ParentLost`].
    pub fn flush(&mut self) -> Result<(), TbonError> {
        match &self.lost {
            Some(why) => Err(TbonError::ParentLost(why.clone())),
            None => Ok(()),
        }
    }

    /// Wait until the front-end shuts the network down (packets that come meanwhile are
    /// kept for `recv`).
    ///
    /// # Errors
    /// [`TbonError::ParentLost`] if the connection ends first.
    pub fn wait_for_shutdown(&mut self) -> Result<(), TbonError> {
        while !self.shut_down {
            if let Some(why) = &self.lost {
                return Err(TbonError::ParentLost(why.clone()));
            }
            self.pump(None)?;
        }
        Ok(())
    }

    /// Whether the front-end has shut the network down.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// The error a receive gives once nothing is left: the shutdown, or the lost connection.
    fn ended(&self) -> Result<(), TbonError> {
        if self.shut_down {
            return Err(TbonError::ShutDown);
        }
        if let Some(why) = &self.lost {
            return Err(TbonError::ParentLost(why.clone()));
        }
        Ok(())
    }

    /// Take what the leaf sent, waiting up to `timeout` for the first of it (`None`:
    /// forever), then what else is already there.
    fn pump(&mut self, timeout: Option<Duration>) -> Result<(), TbonError> {
        let mut wait = timeout;
        while self.inbox.len() < INBOX_MAX {
            match self.conn.recv(wait) {
                Ok(Some(r)) => self.take(r),
                Ok(None) => break,
                Err(e) => {
                    self.lose(e);
                    break;
                }
            }
            if self.shut_down {
                break;
            }
            wait = Some(Duration::ZERO);
        }
        Ok(())
    }

    /// The connection ended: said once, and every call after says why.
    fn lose(&mut self, e: EndpointError) -> TbonError {
        let why = self.lost.get_or_insert_with(|| e.to_string()).clone();
        TbonError::ParentLost(why)
    }

    /// One message from the leaf. Anything that does not decode is dropped: the leaf is the
    /// network's, which proved the secret.
    fn take(&mut self, r: Received) {
        match r.handler.as_str() {
            "tbon.down" => {
                if let Ok(p) = Packet::from_message(Message::from_payload(&r.data)) {
                    // The front-end numbers a back-end's singlecast packets, and gives kept
                    // ones again after a process above re-connects: each is taken once.
                    if p.stream_id() == self.rank && p.seq() != 0 {
                        if p.seq() <= self.single_seen {
                            return;
                        }
                        self.single_seen = p.seq();
                    }
                    self.inbox.push_back((p.stream_id(), p));
                }
            }
            "tbon.ctl" => match Ctl::decode(&r.data) {
                Some(Ctl::NewStream { id, .. }) => {
                    self.streams.insert(id, false);
                }
                Some(Ctl::Close { id }) => {
                    self.streams.insert(id, true);
                }
                Some(Ctl::Request {
                    what: Req::Shutdown,
                    ..
                }) => self.shut_down = true,
                _ => {}
            },
            _ => {}
        }
    }
}

/// The secret from `CONVERSE_TBON_SECRET_FILE` (an attach file, or a file holding the
/// secret in hex) or `CONVERSE_TBON_SECRET` (hex).
///
/// # Errors
/// [`TbonError::Attach`] when neither is set, or the secret does not read.
pub fn secret_from_env() -> Result<Secret, TbonError> {
    let fail = |e: EndpointError| TbonError::Attach(e.to_string());
    if let Some(path) = std::env::var_os("CONVERSE_TBON_SECRET_FILE") {
        let path = std::path::Path::new(&path);
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| l.trim_start().starts_with("secret ")) {
            return Ok(super::AttachFile::parse(&text, &path.display().to_string())?.secret);
        }
        return Secret::read_file(path).map_err(fail);
    }
    match std::env::var("CONVERSE_TBON_SECRET") {
        Ok(hex) => Secret::parse(hex.trim()).map_err(fail),
        Err(_) => Err(TbonError::Attach(
            "no secret: set CONVERSE_TBON_SECRET_FILE (a file holding it) or \
             CONVERSE_TBON_SECRET (hex)"
                .into(),
        )),
    }
}
