//! A plain process's side: one blocking connection to a listener, no runtime needed.
//!
//! ```no_run
//! use converse_endpoint::{Connection, Secret};
//! use std::time::Duration;
//! let secret = Secret::read_file("job.secret".as_ref()).unwrap();
//! let mut c = Connection::connect("tcp://10.0.0.1:5000", &secret).unwrap();
//! c.send("hello", b"from outside").unwrap();
//! let answer = c.call("sum", &[1, 2, 3], Duration::from_secs(5)).unwrap();
//! while let Some(m) = c.recv(Some(Duration::from_secs(1))).unwrap() {
//!     println!("{} sent {:?}", m.handler, m.data);
//! }
//! ```

use crate::job::dial;
use crate::stream::Stream;
use crate::wire::{self, Frame, FrameReader, CALL, MAX_HEAD, MSG, REPLY};
use crate::{EndpointError, Limits, Secret};
use std::collections::VecDeque;
use std::io::{IoSlice, Read, Write};
use std::time::{Duration, Instant};

/// A message or call the other side sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The handler it names.
    pub handler: String,
    /// What it carries.
    pub data: Vec<u8>,
    /// For a call, its id: answer with [`Connection::reply`].
    pub call: Option<u64>,
}

/// A blocking connection to a listener.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    addr: String,
    reader: FrameReader,
    next_call: u64,
    /// What came while a call waited for its reply.
    kept: VecDeque<Received>,
    /// Calls under way (started, not finished nor given up), by id: their handler's name.
    calling: std::collections::HashMap<u64, String>,
    /// Replies to calls under way that came while another was waited for.
    replies: std::collections::HashMap<u64, (u8, Vec<u8>)>,
}

impl Connection {
    /// Connect to `addr` and prove `secret`, within [`Limits::handshake`].
    ///
    /// # Errors
    /// [`EndpointError::Address`], [`EndpointError::Unreachable`], [`EndpointError::Refused`].
    pub fn connect(addr: &str, secret: &Secret) -> Result<Connection, EndpointError> {
        Connection::connect_with(addr, secret, Limits::default())
    }

    /// [`connect`](Self::connect) with limits of its own.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub fn connect_with(
        addr: &str,
        secret: &Secret,
        limits: Limits,
    ) -> Result<Connection, EndpointError> {
        let stream = dial(addr, secret, &limits)?;
        let io = |e: std::io::Error| EndpointError::Io(format!("{addr}: {e}"));
        stream.set_nodelay().map_err(io)?;
        stream.set_keepalive().map_err(io)?;
        stream.set_write_timeout(None).map_err(io)?;
        Ok(Connection {
            stream,
            addr: addr.to_string(),
            reader: FrameReader::new(limits.max_message),
            next_call: 0,
            kept: VecDeque::new(),
            calling: Default::default(),
            replies: Default::default(),
        })
    }

    /// The address string it connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// What the protocol of a `udp://` connection repaired so far (datagrams sent again,
    /// timeouts, duplicates and early ones received); `None` for `tcp://` and `si://`, whose
    /// kernel keeps such counts to itself.
    pub fn udp_stats(&self) -> Option<crate::UdpStats> {
        self.stream.udp_stats()
    }

    fn closed(&self, why: impl std::fmt::Display) -> EndpointError {
        EndpointError::Closed {
            addr: self.addr.clone(),
            why: why.to_string(),
        }
    }

    fn write(&mut self, kind: u8, id: u64, name: &[u8], data: &[u8]) -> Result<(), EndpointError> {
        if name.len() > wire::MAX_NAME {
            return Err(crate::SendError::NameTooLong(name.len()).into());
        }
        if data.len() > wire::MAX_DATA {
            return Err(crate::SendError::TooLarge(data.len()).into());
        }
        let mut head = [0u8; MAX_HEAD];
        let h = wire::head(&mut head, kind, id, name.len(), data.len());
        let mut parts = [
            IoSlice::new(&head[..h]),
            IoSlice::new(name),
            IoSlice::new(data),
        ];
        let mut parts = &mut parts[..];
        // Blocks while the other side does not read: the flow control of a plain process.
        while !parts.is_empty() {
            match (&self.stream).write_vectored(parts) {
                Ok(0) => return Err(self.closed("it stopped taking bytes")),
                Ok(n) => IoSlice::advance_slices(&mut parts, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.closed(e)),
            }
        }
        Ok(())
    }

    /// Send `data` to handler `name`.
    ///
    /// # Errors
    /// [`EndpointError::Closed`] if the connection has ended.
    pub fn send(&mut self, name: &str, data: &[u8]) -> Result<(), EndpointError> {
        self.write(MSG, 0, name.as_bytes(), data)
    }

    /// Answer call `id` (from [`Received::call`]) with `data`.
    ///
    /// # Errors
    /// [`EndpointError::Closed`].
    pub fn reply(&mut self, id: u64, data: &[u8]) -> Result<(), EndpointError> {
        self.write(REPLY, id, &[wire::ANSWERED], data)
    }

    /// Call handler `name` with `data` and wait up to `timeout` for its reply. Messages and
    /// calls that come meanwhile are kept for [`recv`](Self::recv).
    ///
    /// # Errors
    /// [`EndpointError::NoHandler`], [`EndpointError::Unanswered`],
    /// [`EndpointError::Timeout`], [`EndpointError::Closed`].
    pub fn call(
        &mut self,
        name: &str,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, EndpointError> {
        let id = self.start_call(name, data)?;
        self.finish_call(id, timeout)
    }

    /// Send a call and return its id without waiting: several can be under way, each
    /// finished with [`finish_call`](Self::finish_call). A listener ends the connection of a
    /// peer whose replies pile up unread (four times its queue limit).
    ///
    /// # Errors
    /// [`EndpointError::Closed`].
    pub fn start_call(&mut self, name: &str, data: &[u8]) -> Result<u64, EndpointError> {
        let id = self.next_call;
        self.next_call += 1;
        self.write(CALL, id, name.as_bytes(), data)?;
        self.calling.insert(id, name.to_string());
        Ok(id)
    }

    /// Wait up to `timeout` for the reply to call `id`. Replies to other calls under way,
    /// messages and calls that come meanwhile are kept.
    ///
    /// # Errors
    /// As [`call`](Self::call); a call id not under way is [`EndpointError::Unanswered`].
    pub fn finish_call(&mut self, id: u64, timeout: Duration) -> Result<Vec<u8>, EndpointError> {
        let name = self.calling.get(&id).cloned().unwrap_or_default();
        // A timeout too long to add to now is no timeout.
        let deadline = Instant::now().checked_add(timeout);
        let (status, data) = loop {
            if let Some(r) = self.replies.remove(&id) {
                break r;
            }
            if !self.calling.contains_key(&id) {
                break (wire::UNANSWERED, Vec::new());
            }
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                // Given up: its reply, if it comes, is dropped.
                self.calling.remove(&id);
                return Err(EndpointError::Timeout {
                    addr: self.addr.clone(),
                    name,
                    secs: timeout.as_secs_f64(),
                });
            }
            match self.next_frame(Some(left))? {
                None => {}
                // Kept only for a call under way (a late reply to one given up is dropped).
                Some(Got::Reply {
                    id: got,
                    status,
                    data,
                }) if self.calling.contains_key(&got) => {
                    self.replies.insert(got, (status, data));
                }
                Some(Got::Reply { .. }) => {}
                Some(Got::In(r)) => self.kept.push_back(r),
            }
        };
        self.calling.remove(&id);
        match status {
            wire::ANSWERED => Ok(data),
            wire::NO_HANDLER => Err(EndpointError::NoHandler {
                addr: self.addr.clone(),
                name,
            }),
            _ => Err(EndpointError::Unanswered {
                addr: self.addr.clone(),
                name,
            }),
        }
    }

    /// The next message or call the other side sent, waiting up to `timeout` (`None`:
    /// forever; zero: only what has arrived); `Ok(None)` when the time passed.
    ///
    /// # Errors
    /// [`EndpointError::Closed`] once the connection has ended and all it brought was taken.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<Received>, EndpointError> {
        if let Some(r) = self.kept.pop_front() {
            return Ok(Some(r));
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // A zero timeout still takes what has arrived: one look at the socket first.
        let mut looked = false;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if looked && left.is_some_and(|l| l.is_zero()) {
                return Ok(None);
            }
            looked = true;
            match self.next_frame(left)? {
                Some(Got::In(r)) => return Ok(Some(r)),
                Some(Got::Reply { .. }) | None => {}
            }
        }
    }

    /// One frame, reading at most until `left` has passed (`None` if it did first).
    fn next_frame(&mut self, left: Option<Duration>) -> Result<Option<Got>, EndpointError> {
        loop {
            let f = self
                .reader
                .next()
                .map_err(|e| EndpointError::Closed {
                    addr: self.addr.clone(),
                    why: format!("it sent bad bytes: {}", e.0),
                })?
                .map(|f| match f {
                    Frame::Msg { name, data } => Got::In(Received {
                        handler: name.to_string(),
                        data: data.to_vec(),
                        call: None,
                    }),
                    Frame::Call { id, name, data } => Got::In(Received {
                        handler: name.to_string(),
                        data: data.to_vec(),
                        call: Some(id),
                    }),
                    Frame::Reply { id, status, data } => Got::Reply {
                        id,
                        status,
                        data: data.to_vec(),
                    },
                });
            if f.is_some() {
                return Ok(f);
            }
            // `Some(ZERO)` would mean "no timeout" to the socket: at least a microsecond.
            let t = left.map(|l| l.max(Duration::from_micros(1)));
            self.stream
                .set_read_timeout(t)
                .map_err(|e| self.closed(e))?;
            let space = self.reader.space();
            match (&self.stream).read(space) {
                Ok(0) => {
                    let why = self.stream.ended_why();
                    return Err(self.closed(why.as_deref().unwrap_or("the other side closed it")));
                }
                Ok(n) => self.reader.filled(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(self.closed(e)),
            }
        }
    }
}

enum Got {
    In(Received),
    Reply { id: u64, status: u8, data: Vec<u8> },
}
