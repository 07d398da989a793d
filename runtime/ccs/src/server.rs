//! The listener a job opens with `+server` (on the process of PE 0): it reads and checks
//! requests, hands each to the job ([`Request`], through the `post` it is given) and writes
//! the reply the job gives back ([`Server::complete`]).
//!
//! A thread accepts; each connection is served by a thread of a pool for its one request (a
//! thread is made only when none is free, and kept), at most [`MAX_CONNECTIONS`] at once (the
//! rest wait in the kernel's backlog). A request must start
//! within [`FIRST_BYTES`] of its accept (so silent strangers give their places up soon) and
//! arrive whole within [`READ_DEADLINE`], however it trickles; a reply is waited for
//! [`REPLY_WAIT`] at most (handlers may compute for minutes) and written within
//! [`READ_DEADLINE`]. Anything wrong — a bad or unauthenticated request, an unknown handler,
//! a dead PE, a client gone — closes that connection with one line on stderr; the job never
//! sees it.

use crate::auth::{Key, Keys, HASH_LEN};
use crate::wire::{self, Dest, Header, HEADER_LEN};
use crate::CcsError;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most requests read or waiting for their reply at once.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a request may take to arrive, and its reply to be written.
pub const READ_DEADLINE: Duration = Duration::from_secs(10);

/// How long a connection may stay silent after its accept: a client sends its request at
/// once, so a silent one is a stranger's, and it gives its place up soon.
pub const FIRST_BYTES: Duration = Duration::from_secs(1);

/// How long a request waits for its reply from the job.
pub const REPLY_WAIT: Duration = Duration::from_secs(600);

/// The most clients given an id (authenticated), for the life of the job.
const MAX_CLIENTS: usize = 1 << 16;

/// A request for the job to run.
#[derive(Debug)]
pub struct Request {
    /// What [`Server::complete`] names it by.
    pub id: u64,
    /// Where it goes.
    pub dest: Dest,
    /// The handler's name.
    pub handler: String,
    /// Its data.
    pub data: Vec<u8>,
    /// Who asked.
    pub from: SocketAddr,
}

/// What the job answers: the reply, or why there is none.
pub type Outcome = Result<Vec<u8>, String>;

/// A running CCS listener.
#[derive(Debug, Clone)]
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    keys: Keys,
    pes: usize,
    next: AtomicU64,
    open: AtomicUsize,
    waiting: Mutex<HashMap<u64, SyncSender<Outcome>>>,
    /// Authenticated clients' next salts, by client id.
    salts: Mutex<Vec<u32>>,
}

impl Server {
    /// Listen on `port` (0: any) of every interface, for a job of `pes` PEs accepting
    /// `keys`; hand each good request to `post`.
    ///
    /// # Errors
    /// [`CcsError::Io`] when the port cannot be had.
    pub fn start(
        port: u16,
        keys: Keys,
        pes: usize,
        post: impl Fn(Request) + Send + Sync + 'static,
    ) -> Result<Server, CcsError> {
        let listener = TcpListener::bind(("0.0.0.0", port))
            .map_err(|e| CcsError::Io(format!("the CCS port {port}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| CcsError::Io(format!("the CCS port: {e}")))?;
        let shared = Arc::new(Shared {
            keys,
            pes,
            next: AtomicU64::new(1),
            open: AtomicUsize::new(0),
            waiting: Mutex::new(HashMap::new()),
            salts: Mutex::new(Vec::new()),
        });
        let post: Arc<dyn Fn(Request) + Send + Sync> = Arc::new(post);
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("ccs-server".into())
            .spawn(move || accept_loop(&listener, &sh, &post))
            .map_err(|e| CcsError::Io(format!("the CCS thread: {e}")))?;
        Ok(Server { addr, shared })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The job's answer to request `id` (ignored when its client is gone).
    pub fn complete(&self, id: u64, outcome: Outcome) {
        let tx = self
            .shared
            .waiting
            .lock()
            .ok()
            .and_then(|mut w| w.remove(&id));
        if let Some(tx) = tx {
            let _ = tx.try_send(outcome);
        }
    }

    /// Requests waiting for the job's answer.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.lock().map_or(0, |w| w.len())
    }
}

fn accept_loop(
    listener: &TcpListener,
    sh: &Arc<Shared>,
    post: &Arc<dyn Fn(Request) + Send + Sync>,
) {
    // Connections for the pool; `free` counts the threads waiting on it.
    let (tx, rx) = std::sync::mpsc::channel::<(TcpStream, SocketAddr)>();
    let rx = Arc::new(Mutex::new(rx));
    let free = Arc::new(AtomicUsize::new(0));
    loop {
        // At the bound, the rest waits in the kernel's backlog.
        while sh.open.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (s, from) = match listener.accept() {
            Ok(x) => x,
            Err(_) => {
                // Out of descriptors and the like: the connection stays queued.
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        sh.open.fetch_add(1, Ordering::AcqRel);
        // A thread of the pool takes it; a new one only when none is free (a failed spawn
        // leaves it to the next free thread).
        let spare = free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !spare {
            let (sh2, post, rx, free) = (sh.clone(), post.clone(), rx.clone(), free.clone());
            let _ = std::thread::Builder::new()
                .name("ccs-request".into())
                .stack_size(128 << 10)
                .spawn(move || worker(&rx, &free, &sh2, &*post));
        }
        if tx.send((s, from)).is_err() {
            return;
        }
    }
}

/// A thread of the pool: one connection after another.
fn worker(
    rx: &Mutex<std::sync::mpsc::Receiver<(TcpStream, SocketAddr)>>,
    free: &AtomicUsize,
    sh: &Shared,
    post: &(dyn Fn(Request) + Send + Sync),
) {
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok((s, from)) = next else { return };
        if let Err(why) = serve(s, from, sh, post) {
            converse_machine::input::error_line(&format!("ccs: {from}: {why}"));
        }
        sh.open.fetch_sub(1, Ordering::AcqRel);
        free.fetch_add(1, Ordering::AcqRel);
    }
}

/// Read exactly `buf`, all of it before `deadline`.
fn read_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut have = 0;
    while have < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("the request did not arrive in time".into());
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut buf[have..]) {
            Ok(0) => return Err("the client closed the connection mid-request".into()),
            Ok(n) => have += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
    Ok(())
}

/// One connection: its request, then its reply.
fn serve(
    mut s: TcpStream,
    from: SocketAddr,
    sh: &Shared,
    post: &(dyn Fn(Request) + Send + Sync),
) -> Result<(), String> {
    let accepted = Instant::now();
    let deadline = accepted + READ_DEADLINE;
    let _ = s.set_nodelay(true);
    let mut first = [0u8; 4];
    read_by(&mut s, &mut first, accepted + FIRST_BYTES)?;
    let mut head = [0u8; HEADER_LEN];
    let mut signer: Option<(Key, u32)> = None;
    if first[0] < 0x20 {
        if !sh.keys.open() {
            return Err("a request without a key, refused (the job wants one)".into());
        }
        head[..4].copy_from_slice(&first);
        read_by(&mut s, &mut head[4..], deadline)?;
    } else if first[0] == 0x80 && first[1] == 0 {
        let level = first[3];
        let key = sh
            .keys
            .get(level)
            .cloned()
            .ok_or_else(|| format!("no key for security level {level}, refused"))?;
        match first[2] {
            0x01 => return give_client_id(&mut s, sh, &key, deadline),
            0x00 => {
                let mut a = [0u8; 8 + HASH_LEN];
                read_by(&mut s, &mut a, deadline)?;
                read_by(&mut s, &mut head, deadline)?;
                let word = |i: usize| u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
                let (client, reply_salt) = (word(0) as usize, word(4));
                let mut salts = sh.salts.lock().map_err(|_| "internal: salts")?;
                let salt = salts
                    .get_mut(client)
                    .ok_or_else(|| format!("unknown client id {client}, refused"))?;
                if !key.verifies(*salt, Some(&head), &a[8..]) {
                    return Err("the request's hash does not match its key, refused".into());
                }
                *salt = salt.wrapping_add(1);
                signer = Some((key, reply_salt));
            }
            other => {
                return Err(format!(
                    "unknown authentication request {other:#04x}, refused"
                ))
            }
        }
    } else {
        return Err("not a CCS request, refused".into());
    }
    let h = Header::decode(&head).map_err(|e| e.to_string())?;
    let mut data = vec![0u8; h.len as usize];
    read_by(&mut s, &mut data, deadline)?;
    let mut list = vec![0u8; 4 * h.list_len()];
    read_by(&mut s, &mut list, deadline)?;
    let dest = wire::dest(&h, &list, sh.pes).map_err(|e| e.to_string())?;
    let id = sh.next.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel(1);
    sh.waiting
        .lock()
        .map_err(|_| "internal: waiting")?
        .insert(id, tx);
    let handler = h.handler.clone();
    post(Request {
        id,
        dest,
        handler: h.handler,
        data,
        from,
    });
    let outcome = rx.recv_timeout(REPLY_WAIT);
    if let Ok(mut w) = sh.waiting.lock() {
        w.remove(&id);
    }
    let reply = match outcome {
        Ok(Ok(r)) => r,
        Ok(Err(why)) => return Err(format!("'{handler}': {why}")),
        Err(_) => {
            return Err(format!(
                "'{handler}': no reply in {} s",
                REPLY_WAIT.as_secs()
            ))
        }
    };
    let _ = s.set_write_timeout(Some(READ_DEADLINE));
    let mut head = Vec::with_capacity(HASH_LEN + 4);
    if let Some((key, salt)) = signer {
        head.extend_from_slice(&key.hash(salt, None));
    }
    head.extend_from_slice(&(reply.len() as u32).to_be_bytes());
    // The header and the reply in one system call, the reply not copied.
    write_both(&mut s, &head, &reply).map_err(|e| format!("'{handler}': writing the reply: {e}"))
}

/// Write `a` then `b`, gathered.
fn write_both(s: &mut TcpStream, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let (mut a, mut b) = (a, b);
    while !a.is_empty() || !b.is_empty() {
        let n = s.write_vectored(&[std::io::IoSlice::new(a), std::io::IoSlice::new(b)])?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    Ok(())
}

/// The salt exchange: the client proves it holds `key`, the server too, and the client gets an
/// id and its first salt.
fn give_client_id(
    s: &mut TcpStream,
    sh: &Shared,
    key: &Key,
    deadline: Instant,
) -> Result<(), String> {
    let mut s1 = [0u8; 4];
    read_by(s, &mut s1, deadline)?;
    let s2 = crate::auth::random_u32().map_err(|e| e.to_string())?;
    s.write_all(&s2.to_be_bytes()).map_err(|e| e.to_string())?;
    let mut hash = [0u8; HASH_LEN];
    read_by(s, &mut hash, deadline)?;
    if !key.verifies(s2, None, &hash) {
        return Err("a client without the key asked for an id, refused".into());
    }
    let first = crate::auth::random_u32().map_err(|e| e.to_string())?;
    let id = {
        let mut salts = sh.salts.lock().map_err(|_| "internal: salts")?;
        if salts.len() >= MAX_CLIENTS {
            return Err(format!("{MAX_CLIENTS} clients already, refused"));
        }
        salts.push(first);
        salts.len() - 1
    };
    let mut reply = key.hash(u32::from_be_bytes(s1), None).to_vec();
    reply.extend_from_slice(&(id as u32).to_be_bytes());
    reply.extend_from_slice(&first.to_be_bytes());
    let _ = s.set_write_timeout(Some(READ_DEADLINE));
    s.write_all(&reply).map_err(|e| e.to_string())
}
