//! The job's side: a PE's [`Endpoints`], which listen, connect, and run handlers by name for
//! what peers send.

use crate::conn::{connect_handshake, Conn, SendError, Sent};
use crate::io::{self, Bell, Shared, EV_CALL, EV_DRAINED, EV_JOINED, EV_LEFT, EV_MSG, EV_REPLY};
use crate::secret::Secret;
use crate::stream::Stream;
use crate::wire::{self, CALL, MSG, REPLY};
use crate::{Address, EndpointError, Limits};
use converse::{Message, Pe};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Names of handlers that messages came for and none exists, said at most this many (a peer
/// naming ever-new ones must not grow the set, nor flood stderr).
const MAX_UNKNOWN_NAMES: usize = 64;

thread_local! {
    /// The I/O threads of the Endpoints attached on this thread (a PE's), told to end with it.
    static STOP_ON_EXIT: RefCell<Vec<io::StopOnExit>> = const { RefCell::new(Vec::new()) };
}

/// A peer: one connection, accepted or made by this PE. Ids are this PE's own, never reused.
pub type Peer = u32;

/// Something that happened to a peer, for the handler given to [`Endpoints::on_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerEvent {
    /// A program connected to one of this PE's listeners and proved the secret.
    Joined {
        /// Its id.
        peer: Peer,
        /// The listener's address string.
        listener: String,
        /// Where it connected from.
        from: String,
    },
    /// The connection ended (the peer closed it or died, it sent bad bytes, or
    /// [`Endpoints::close`]); its calls under way failed before this.
    Left {
        /// Its id.
        peer: Peer,
        /// Why, in a few words.
        why: String,
    },
    /// A send to it was refused as [`SendError::Full`], and its queue has emptied since.
    Drained {
        /// Its id.
        peer: Peer,
    },
}

/// Why a call got no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The peer has no handler of that name.
    #[error("peer {peer} has no handler '{name}'")]
    NoHandler {
        /// The peer.
        peer: Peer,
        /// The name.
        name: String,
    },
    /// The peer's handler dropped the call without replying.
    #[error("peer {0} dropped the call without a reply")]
    Unanswered(Peer),
    /// The peer went away first.
    #[error("peer {peer} left before replying: {why}")]
    Gone {
        /// The peer.
        peer: Peer,
        /// Why it left.
        why: String,
    },
    /// The call could not be sent.
    #[error(transparent)]
    Send(#[from] SendError),
}

type HandlerFn = dyn Fn(&mut Pe, Incoming);
type EventFn = dyn Fn(&mut Pe, PeerEvent);
type ReplyFn = Box<dyn FnOnce(&mut Pe, Result<Vec<u8>, CallError>)>;

struct Inner {
    shared: Arc<Shared>,
    handlers: RefCell<HashMap<String, Rc<HandlerFn>>>,
    on_event: RefCell<Option<Rc<EventFn>>>,
    calls: RefCell<HashMap<u64, (Peer, String, ReplyFn)>>,
    next_call: Cell<u64>,
    io_started: Cell<bool>,
    /// This PE's copy of the connections it has used (the shared table takes a lock).
    local: RefCell<HashMap<Peer, Arc<Conn>>>,
    /// Peers whose Left has run (ids are never reused: a few bytes per peer ever).
    gone: RefCell<std::collections::HashSet<Peer>>,
    /// Names messages came for with no handler, said once each.
    unknown: RefCell<std::collections::HashSet<String>>,
}

/// One PE's endpoints: a cheap handle (clone it into handlers).
///
/// ```no_run
/// use converse_endpoint::{Endpoints, Secret};
/// converse::run(|pe| {
///     let ep = Endpoints::attach(pe);
///     ep.on("hello", |pe, msg| {
///         println!("PE {} got {:?} from peer {}", pe.my_pe(), msg.data(), msg.peer());
///         let _ = msg.reply(b"welcome");
///     });
///     if pe.my_pe() == 0 {
///         let secret = Secret::generate().unwrap();
///         let at = ep.listen(pe, "tcp://:0", &secret).unwrap();
///         println!("listening at {at}, secret {}", secret.to_hex());
///     }
/// });
/// ```
#[derive(Clone)]
pub struct Endpoints {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("peers", &self.peers().len())
            .finish_non_exhaustive()
    }
}

impl Endpoints {
    /// Set up endpoints on this PE with the default [`Limits`]: registers this crate's
    /// handler (`converse-endpoint.in`), so every PE calls it at the same point of its
    /// registrations (or none does).
    pub fn attach(pe: &mut Pe) -> Endpoints {
        Endpoints::attach_with(pe, Limits::default())
    }

    /// [`attach`](Self::attach) with limits of its own.
    pub fn attach_with(pe: &mut Pe, limits: Limits) -> Endpoints {
        let slot: Rc<RefCell<Option<Endpoints>>> = Rc::new(RefCell::new(None));
        let s = slot.clone();
        let in_h = pe.register("converse-endpoint.in", move |pe, msg| {
            let ep = s.borrow().clone();
            if let Some(ep) = ep {
                ep.dispatch(pe, msg);
            }
        });
        let bell = match Bell::new() {
            Ok(b) => b,
            Err(e) => pe.abort(&format!("endpoints: no eventfd: {e}")),
        };
        let shared = Arc::new(Shared {
            conns: Mutex::new(HashMap::new()),
            new_listeners: Mutex::new(Vec::new()),
            bell,
            mailbox: pe.mailbox(),
            in_h,
            limits,
            next_peer: AtomicU32::new(0),
            handshakes: AtomicUsize::new(0),
            by_source: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
            refusals: Mutex::new(Default::default()),
            stop: std::sync::atomic::AtomicBool::new(false),
        });
        STOP_ON_EXIT.with(|g| g.borrow_mut().push(io::StopOnExit(shared.clone())));
        let ep = Endpoints {
            inner: Rc::new(Inner {
                shared,
                handlers: RefCell::new(HashMap::new()),
                on_event: RefCell::new(None),
                calls: RefCell::new(HashMap::new()),
                next_call: Cell::new(0),
                io_started: Cell::new(false),
                unknown: RefCell::default(),
                gone: RefCell::default(),
                local: RefCell::default(),
            }),
        };
        *slot.borrow_mut() = Some(ep.clone());
        ep
    }

    /// Run `f` on this PE for each message or call a peer sends to handler `name` (a later
    /// registration of the name replaces it).
    pub fn on<F>(&self, name: &str, f: F)
    where
        F: Fn(&mut Pe, Incoming) + 'static,
    {
        self.inner
            .handlers
            .borrow_mut()
            .insert(name.to_string(), Rc::new(f));
    }

    /// Run `f` on this PE for each [`PeerEvent`].
    pub fn on_event<F>(&self, f: F)
    where
        F: Fn(&mut Pe, PeerEvent) + 'static,
    {
        *self.inner.on_event.borrow_mut() = Some(Rc::new(f));
    }

    fn start_io(&self) -> Result<(), EndpointError> {
        if !self.inner.io_started.get() {
            io::start(self.inner.shared.clone())
                .map_err(|e| EndpointError::Io(format!("starting the I/O thread: {e}")))?;
            self.inner.io_started.set(true);
        }
        Ok(())
    }

    /// Listen on `addr` (`tcp://HOST:PORT`; `tcp://:0` for every interface and any port),
    /// accepting programs that prove `secret`. Returns the address string others connect to
    /// (an unspecified IP replaced by one of the host's). The PE may listen on several.
    ///
    /// # Errors
    /// [`EndpointError::Address`] for an address string this build cannot listen on,
    /// [`EndpointError::Listen`] if the socket cannot be bound.
    pub fn listen(
        &self,
        _pe: &mut Pe,
        addr: &str,
        secret: &Secret,
    ) -> Result<String, EndpointError> {
        let (listener, shown) = Address::parse(addr)?.listen(addr)?;
        self.start_io()?;
        self.inner
            .shared
            .new_listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((listener, Arc::new(secret.clone()), shown.clone()));
        self.inner.shared.bell.ring();
        Ok(shown)
    }

    /// Connect to a listener at `addr` holding `secret` (blocking this PE until connected or
    /// [`Limits::handshake`] has passed). No [`PeerEvent::Joined`] comes for it: the peer is
    /// returned.
    ///
    /// # Errors
    /// [`EndpointError::Address`], [`EndpointError::Unreachable`] (nothing listens, the host
    /// is down, a listener of something else), [`EndpointError::Refused`] (another secret).
    pub fn connect(
        &self,
        _pe: &mut Pe,
        addr: &str,
        secret: &Secret,
    ) -> Result<Peer, EndpointError> {
        let stream = dial(addr, secret, &self.inner.shared.limits)?;
        self.start_io()?;
        let peer = self.inner.shared.next_peer.fetch_add(1, Ordering::AcqRel);
        let conn = Conn::new(peer, stream).map_err(|e| EndpointError::Unreachable {
            addr: addr.to_string(),
            why: e.to_string(),
        })?;
        self.inner.shared.adopt(Arc::new(conn));
        Ok(peer)
    }

    /// The connection to `peer`, from this PE's own table (no lock on the message path); the
    /// shared table, locked, only the first time a peer is used here.
    fn conn(&self, peer: Peer) -> Result<Arc<Conn>, SendError> {
        if let Some(c) = self.inner.local.borrow().get(&peer) {
            if !c.closed.load(Ordering::Acquire) {
                return Ok(c.clone());
            }
            return Err(SendError::Gone(peer));
        }
        let c = self
            .inner
            .shared
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&peer)
            .cloned()
            .ok_or(SendError::Gone(peer))?;
        self.inner.local.borrow_mut().insert(peer, c.clone());
        Ok(c)
    }

    /// After a send: what it left queued, the I/O thread writes.
    fn queued(&self, r: Result<Sent, SendError>) -> Result<(), SendError> {
        if r? == Sent::Queued {
            self.inner.shared.bell.ring();
        }
        Ok(())
    }

    /// Send `data` to handler `name` of `peer`. Never blocks: refused with
    /// [`SendError::Full`] while [`Limits::queue_bytes`] wait for the peer (a
    /// [`PeerEvent::Drained`] follows once they are written).
    ///
    /// # Errors
    /// [`SendError`].
    pub fn send(&self, peer: Peer, name: &str, data: &[u8]) -> Result<(), SendError> {
        let c = self.conn(peer)?;
        let limit = self.inner.shared.limits.queue_bytes;
        self.queued(c.send(MSG, 0, name.as_bytes(), data, Some(limit)))
    }

    /// Call handler `name` of `peer` with `data`; `done` runs on this PE with its reply, or
    /// why there is none (the peer left, had no such handler, dropped the call). With
    /// `converse-tasks`, wrap it in a oneshot to await it.
    ///
    /// # Errors
    /// [`SendError`] if the call cannot be sent (then `done` never runs).
    pub fn call<F>(&self, peer: Peer, name: &str, data: &[u8], done: F) -> Result<(), SendError>
    where
        F: FnOnce(&mut Pe, Result<Vec<u8>, CallError>) + 'static,
    {
        let c = self.conn(peer)?;
        let id = self.inner.next_call.get();
        let limit = self.inner.shared.limits.queue_bytes;
        self.queued(c.send(CALL, id, name.as_bytes(), data, Some(limit)))?;
        self.inner.next_call.set(id + 1);
        self.inner
            .calls
            .borrow_mut()
            .insert(id, (peer, name.to_string(), Box::new(done)));
        Ok(())
    }

    /// End the connection to `peer`; its [`PeerEvent::Left`] follows.
    pub fn close(&self, peer: Peer) {
        if let Ok(c) = self.conn(peer) {
            self.inner.shared.close(&c, "closed by this side");
        }
    }

    /// Who `peer` is (its socket address, or its process on this host), while it is
    /// connected.
    pub fn peer_addr(&self, peer: Peer) -> Option<String> {
        self.conn(peer).ok().map(|c| c.remote.clone())
    }

    /// The peers connected now.
    pub fn peers(&self) -> Vec<Peer> {
        let mut v: Vec<Peer> = self
            .inner
            .shared
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    fn event(&self, pe: &mut Pe, ev: PeerEvent) {
        let f = self.inner.on_event.borrow().clone();
        if let Some(f) = f {
            f(pe, ev);
        }
    }

    fn dispatch(&self, pe: &mut Pe, msg: Message) {
        let peer = msg.arg1();
        match msg.arg0() {
            // A frame read just as this side closed the connection comes after its Left:
            // dropped, as the program was told the peer is gone.
            EV_MSG | EV_CALL if self.inner.gone.borrow().contains(&peer) => {}
            EV_MSG | EV_CALL => {
                let call = msg.arg0() == EV_CALL;
                let bytes = msg.payload().len();
                self.handled(peer, bytes);
                let p = msg.payload();
                let (id, at) = if call {
                    let id = p
                        .get(..8)
                        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
                    (Some(id), 8)
                } else {
                    (None, 0)
                };
                let len = p
                    .get(at..at + 2)
                    .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]) as usize);
                let name_at = at + 2;
                let name = std::str::from_utf8(p.get(name_at..name_at + len).unwrap_or_default())
                    .unwrap_or_default();
                let h = self.inner.handlers.borrow().get(name).cloned();
                let name = if h.is_none() {
                    name.to_string()
                } else {
                    String::new()
                };
                let incoming = Incoming {
                    peer,
                    call: id,
                    offset: name_at + len,
                    conn: self.conn(peer).ok(),
                    shared: self.inner.shared.clone(),
                    answered: false,
                    msg,
                };
                match h {
                    Some(f) => f(pe, incoming),
                    None => {
                        // A call gets its answer; a message to no handler is said on stderr
                        // once per name (the job goes on).
                        if let Some(id) = incoming.call {
                            let mut inc = incoming;
                            inc.answered = true;
                            let _ = inc.reply_status(id, wire::NO_HANDLER, &[]);
                        } else if self.inner.unknown.borrow().len() < MAX_UNKNOWN_NAMES
                            && self.inner.unknown.borrow_mut().insert(name.clone())
                        {
                            converse_machine::input::error_line(&format!(
                                "endpoint: PE {}: peer {peer} sent to no handler '{name}' (dropped; said once per name)",
                                pe.my_pe()
                            ));
                        }
                    }
                }
            }
            EV_REPLY => {
                // Counted in as every frame is: out again, or the peer's reading stops for good.
                self.handled(peer, msg.payload().len());
                let p = msg.payload();
                let Some(id) = p
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
                else {
                    return;
                };
                let status = p.get(8).copied().unwrap_or(wire::UNANSWERED);
                let data = p.get(9..).unwrap_or_default();
                // Only the peer called may answer (another could guess the ids).
                let ours = self
                    .inner
                    .calls
                    .borrow()
                    .get(&id)
                    .is_some_and(|(p, _, _)| *p == peer);
                if !ours {
                    return;
                }
                let Some((from, name, done)) = self.inner.calls.borrow_mut().remove(&id) else {
                    return;
                };
                let r = match status {
                    wire::ANSWERED => Ok(data.to_vec()),
                    wire::NO_HANDLER => Err(CallError::NoHandler { peer: from, name }),
                    _ => Err(CallError::Unanswered(from)),
                };
                done(pe, r);
            }
            EV_JOINED => {
                let p = msg.payload();
                let (l, f) = p.split_at(p.iter().position(|&b| b == 0).unwrap_or(p.len()));
                self.event(
                    pe,
                    PeerEvent::Joined {
                        peer,
                        listener: String::from_utf8_lossy(l).into_owned(),
                        from: String::from_utf8_lossy(f.get(1..).unwrap_or_default()).into_owned(),
                    },
                );
            }
            EV_LEFT => {
                // Nothing more comes for it: out of this PE's table too.
                self.inner.local.borrow_mut().remove(&peer);
                self.inner.gone.borrow_mut().insert(peer);
                let why = String::from_utf8_lossy(msg.payload()).into_owned();
                // Its calls fail first, in the order they were made.
                let mut ids: Vec<u64> = self
                    .inner
                    .calls
                    .borrow()
                    .iter()
                    .filter(|(_, (p, _, _))| *p == peer)
                    .map(|(id, _)| *id)
                    .collect();
                ids.sort_unstable();
                for id in ids {
                    let call = self.inner.calls.borrow_mut().remove(&id);
                    if let Some((_, _, done)) = call {
                        done(
                            pe,
                            Err(CallError::Gone {
                                peer,
                                why: why.clone(),
                            }),
                        );
                    }
                }
                self.event(pe, PeerEvent::Left { peer, why });
            }
            EV_DRAINED => self.event(pe, PeerEvent::Drained { peer }),
            _ => {}
        }
    }

    /// `bytes` posted for `peer` were handled: if its reading was paused and the PE has
    /// caught up to half the limit, have the I/O thread read it again.
    fn handled(&self, peer: Peer, bytes: usize) {
        let Ok(c) = self.conn(peer) else { return };
        // SeqCst: the other half of the I/O thread's store-then-load (`read_conn`).
        let before = c.inbound.fetch_sub(bytes, Ordering::SeqCst);
        let limit = self.inner.shared.limits.inbound_bytes;
        if before - bytes < limit / 2 && c.paused.swap(false, Ordering::SeqCst) {
            self.inner.shared.bell.ring();
        }
    }
}

/// Connect and run the handshake, blocking.
pub(crate) fn dial(addr: &str, secret: &Secret, limits: &Limits) -> Result<Stream, EndpointError> {
    let deadline = Instant::now() + limits.handshake;
    let s = Address::parse(addr)?.dial(addr, deadline)?;
    connect_handshake(&s, secret, addr, deadline)?;
    Ok(s)
}

/// A message or call from a peer, as its handler gets it.
pub struct Incoming {
    peer: Peer,
    call: Option<u64>,
    msg: Message,
    offset: usize,
    conn: Option<Arc<Conn>>,
    shared: Arc<Shared>,
    answered: bool,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("peer", &self.peer)
            .field("call", &self.call)
            .field("bytes", &self.data().len())
            .finish()
    }
}

impl Incoming {
    /// Who sent it.
    pub fn peer(&self) -> Peer {
        self.peer
    }

    /// What it carries.
    pub fn data(&self) -> &[u8] {
        self.msg.payload().get(self.offset..).unwrap_or_default()
    }

    /// Whether it is a call (its sender waits for a [`reply`](Self::reply)).
    pub fn is_call(&self) -> bool {
        self.call.is_some()
    }

    /// Answer the call with `data` (for a plain message, nothing is sent). A call dropped
    /// without a reply is answered "unanswered"; keep the `Incoming` to reply later.
    ///
    /// A reply is queued even past [`Limits::queue_bytes`] (up to four times it: a peer that
    /// calls and does not read its replies then loses its connection).
    ///
    /// # Errors
    /// [`SendError::Gone`] if the peer has left.
    pub fn reply(mut self, data: &[u8]) -> Result<(), SendError> {
        self.answered = true;
        match self.call {
            Some(id) => self.reply_status(id, wire::ANSWERED, data),
            None => Ok(()),
        }
    }

    fn reply_status(&self, id: u64, status: u8, data: &[u8]) -> Result<(), SendError> {
        let c = self.conn.as_ref().ok_or(SendError::Gone(self.peer))?;
        let cap = c.reply_cap(&self.shared.limits);
        match c.send(REPLY, id, &[status], data, Some(cap)) {
            Ok(Sent::Queued) => self.shared.bell.ring(),
            Ok(Sent::Written) => {}
            // Its replies pile up unread: a peer that calls and never reads would otherwise
            // grow this side's memory without bound. The connection ends.
            Err(SendError::Full { queued, .. }) => {
                self.shared.close(
                    c,
                    &format!("it does not read its replies ({queued} bytes waiting)"),
                );
                return Err(SendError::Gone(self.peer));
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if let (Some(id), false) = (self.call, self.answered) {
            let _ = self.reply_status(id, wire::UNANSWERED, &[]);
        }
    }
}
