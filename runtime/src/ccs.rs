//! Converse Client-Server on the job's side: `+server` opens a CCS port on the process of PE 0
//! (Charm++'s `++server`, also through `charmrun ++server`), and programs outside the job run
//! handlers registered by name ([`Pe::ccs_register`]) on one PE, a list or all of them.
//!
//! **The path of a request.** The listener (`converse_ccs::server`, threads of its own) reads
//! and authenticates it, then posts it to PE 0's mailbox. PE 0 sends it to each PE it names
//! (system handler `Ccs`, `arg0` = [`REQ`]); each runs its handler, whose [`CcsRequest::reply`]
//! goes back to PE 0 ([`REPLY`]); once every PE named has answered, PE 0 hands the replies,
//! concatenated in the order the PEs were named, to the listener, which writes them to the
//! client. A PE without the handler, or one that dies first (report mode), fails the request:
//! its connection closes with a line on PE 0's stderr, and the job goes on.
//!
//! | message | `arg0` | payload |
//! |---|---|---|
//! | listener → PE 0 (mailbox) | [`IN`] | id u64, PEs (u32 count, u32 each; none: all), handler str, data (the rest) |
//! | PE 0 → a PE | [`REQ`] | id u64, handler str, data (the rest) |
//! | a PE → PE 0 | [`REPLY`] | id u64, status u8 (0 ok, 1 no such handler), data (the rest) |
//! | a PE → itself (mailbox) | [`DROPPED`] | id u64 LE: a request dropped without a reply, answered empty |
//!
//! The data is copied once into each message (never through a staging buffer), and a
//! handler reads it in the message it came in.
//!
//! Built in on every PE: `ccs_getinfo` (Charm++'s: the nodes and their PEs, what its clients
//! ask first), `converse.status` (a line per PE: its node, the layer, messages sent and
//! taken, bytes queued, and the layer's counters on PEs that own their layer) and
//! `converse.trace` (with `+trace`: the last seconds of the PE's trace, a trace file of its
//! own behind its u64 length; `converse-trace live` writes them into a directory that
//! `converse-trace report` reads).

use crate::lifecycle::SystemHandler;
use crate::pe::{HandlerId, Pe};
use converse_ccs::server::{Request, Server};
use converse_ccs::{Dest, Keys};
use converse_machine::bytes::{ByteReader, ByteWriter};
use converse_machine::Message;
use std::collections::HashMap;
use std::rc::Rc;

/// `arg0` of a request posted by the listener to PE 0.
pub(crate) const IN: u32 = 0;
/// `arg0` of a request sent by PE 0 to a PE.
pub(crate) const REQ: u32 = 1;
/// `arg0` of a PE's reply to PE 0.
pub(crate) const REPLY: u32 = 2;
/// `arg0` of a PE's note to itself: a request was dropped without a reply (payload: its id,
/// u64 LE); the empty reply goes now.
pub(crate) const DROPPED: u32 = 3;

const OK: u8 = 0;
const NO_HANDLER: u8 = 1;

/// `+server`, `+server-port N`, `+server-auth FILE|none`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerArgs {
    /// The port (0: any free one).
    pub port: u16,
    /// The key file, `none` for no authentication, or `None`: a key made now and printed.
    pub auth: Option<String>,
}

/// A CCS handler.
type CcsFn = dyn Fn(&mut Pe, CcsRequest);

/// A PE's CCS state: its handlers, and on PE 0 the listener and the requests under way.
#[derive(Default)]
pub(crate) struct Ccs {
    handlers: HashMap<String, Rc<CcsFn>>,
    server: Option<Server>,
    pending: HashMap<u64, Pending>,
}

/// A request PE 0 waits on.
struct Pending {
    handler: String,
    /// The PEs named, in order, and what each answered.
    pes: Vec<usize>,
    got: Vec<Option<Vec<u8>>>,
    left: usize,
}

/// A request a CCS handler answers: its data, and the way back to its client. Reply with
/// [`reply`](CcsRequest::reply), now or later (keep it: a delayed reply, Charm++'s
/// `CcsDelayReply`); a request dropped without a reply gets an empty one.
pub struct CcsRequest {
    id: u64,
    /// The message it came in, its data from `offset` on.
    msg: Message,
    offset: usize,
    replied: bool,
    /// Where a drop without a reply tells this PE to send the empty one (a drop has no `Pe`,
    /// and may come long after the handler returned, from a kept request).
    mailbox: crate::mailbox::Mailbox,
}

impl std::fmt::Debug for CcsRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CcsRequest")
            .field("id", &self.id)
            .field("bytes", &self.data().len())
            .finish()
    }
}

impl CcsRequest {
    /// The data the client sent.
    pub fn data(&self) -> &[u8] {
        self.msg.payload().get(self.offset..).unwrap_or_default()
    }

    /// Answer with `reply` (for a request to several PEs, this PE's part of it).
    pub fn reply(mut self, pe: &mut Pe, reply: &[u8]) {
        self.replied = true;
        send_reply(pe, self.id, OK, reply);
    }
}

impl Drop for CcsRequest {
    fn drop(&mut self) {
        if !self.replied {
            let mut m = Message::from_payload(&self.id.to_le_bytes());
            m.set_arg0(DROPPED);
            self.mailbox.post(HandlerId(SystemHandler::Ccs.id()), m);
        }
    }
}

fn send_reply(pe: &mut Pe, id: u64, status: u8, data: &[u8]) {
    let mut head = Vec::with_capacity(9);
    head.put_u64(id);
    head.put_u8(status);
    let mut m = Message::with_capacity(head.len() + data.len());
    m.extend_payload(&head);
    m.extend_payload(data);
    m.set_arg0(REPLY);
    pe.send_msg(0, HandlerId(SystemHandler::Ccs.id()), m);
}

impl Pe {
    /// Answer CCS requests for handler `name` on this PE (Charm++'s `CcsRegisterHandler`):
    /// `f` gets each request and replies through it. Register it on every PE a client may
    /// name; a request reaching a PE without it fails (the client's connection closes). A
    /// name given again replaces the handler, the built-in ones too.
    ///
    /// ```no_run
    /// converse::run(|pe| {
    ///     // `ccs --pe all HOST:PORT hello` prints a line per PE.
    ///     pe.ccs_register("hello", |pe, req| {
    ///         let line = format!("hello from PE {}\n", pe.my_pe());
    ///         req.reply(pe, line.as_bytes());
    ///     });
    /// });
    /// ```
    pub fn ccs_register(&mut self, name: &str, f: impl Fn(&mut Pe, CcsRequest) + 'static) {
        self.ccs.handlers.insert(name.to_owned(), Rc::new(f));
    }

    /// Where this job's CCS server listens (on PE 0, with `+server`).
    pub fn ccs_address(&self) -> Option<std::net::SocketAddr> {
        self.ccs.server.as_ref().map(Server::addr)
    }

    /// The system handler: a request from the listener, one to run here, or a reply.
    pub(crate) fn on_ccs(&mut self, msg: Message) {
        match msg.arg0() {
            IN if self.my_pe == 0 => self.ccs_in(&msg),
            REQ => self.ccs_run(msg),
            DROPPED => {
                let id = msg
                    .payload()
                    .try_into()
                    .map_or(u64::MAX, u64::from_le_bytes);
                send_reply(self, id, OK, &[]);
            }
            REPLY if self.my_pe == 0 => self.ccs_reply(&msg),
            _ => self.drop_message(&msg, "a CCS message that is not for this PE"),
        }
    }

    /// PE 0: a request from the listener goes to each PE it names.
    fn ccs_in(&mut self, msg: &Message) {
        let mut r = ByteReader::new(msg.payload());
        let (Ok(id), Ok(n)) = (r.u64(), r.u32()) else {
            return;
        };
        let mut pes = Vec::with_capacity(n as usize);
        for _ in 0..n {
            match r.u32() {
                Ok(p) => pes.push(p as usize),
                Err(_) => return,
            }
        }
        let Ok(handler) = r.str() else { return };
        let data = r.rest();
        if n == 0 {
            pes = (0..self.num_pes).collect();
        }
        if let Some(&dead) = pes.iter().find(|&&p| !self.is_alive(p)) {
            return self.ccs_fail(id, format!("PE {dead} is out of the job"));
        }
        let mut head = Vec::with_capacity(12 + handler.len());
        head.put_u64(id);
        head.put_str(handler);
        self.ccs.pending.insert(
            id,
            Pending {
                handler: handler.to_owned(),
                got: vec![None; pes.len()],
                left: pes.len(),
                pes: pes.clone(),
            },
        );
        for p in pes {
            let mut m = Message::with_capacity(head.len() + data.len());
            m.extend_payload(&head);
            m.extend_payload(data);
            m.set_arg0(REQ);
            self.send_msg(p, HandlerId(SystemHandler::Ccs.id()), m);
        }
    }

    /// A request to run here.
    fn ccs_run(&mut self, msg: Message) {
        let mut r = ByteReader::new(msg.payload());
        let (Ok(id), Ok(handler)) = (r.u64(), r.str()) else {
            return;
        };
        let offset = msg.payload_len() - r.remaining();
        let found = self.ccs.handlers.get(handler).cloned();
        let f = match found.or_else(|| builtin(handler)) {
            Some(f) => f,
            None => return send_reply(self, id, NO_HANDLER, &[]),
        };
        let req = CcsRequest {
            id,
            msg,
            offset,
            replied: false,
            mailbox: self.mailbox(),
        };
        f(self, req);
    }

    /// PE 0: a PE's answer; the whole reply goes to the listener once every PE answered.
    fn ccs_reply(&mut self, msg: &Message) {
        let from = msg.src_pe() as usize;
        let mut r = ByteReader::new(msg.payload());
        let (Ok(id), Ok(status)) = (r.u64(), r.u8()) else {
            return;
        };
        let data = r.rest();
        let Some(p) = self.ccs.pending.get_mut(&id) else {
            return;
        };
        if status == NO_HANDLER {
            let why = format!("PE {from} has no CCS handler '{}'", p.handler);
            return self.ccs_fail(id, why);
        }
        // A list may name a PE twice: each of its answers fills its next empty place.
        let Some(slot) = p
            .pes
            .iter()
            .zip(&p.got)
            .position(|(&q, got)| q == from && got.is_none())
        else {
            return;
        };
        p.got[slot] = Some(data.to_vec());
        p.left -= 1;
        if p.left > 0 {
            return;
        }
        if let Some(mut p) = self.ccs.pending.remove(&id) {
            // One PE's reply goes as it is; several are joined in the order named.
            let reply = match p.got.as_mut_slice() {
                [one] => one.take().unwrap_or_default(),
                all => all
                    .iter_mut()
                    .flat_map(|g| g.take().unwrap_or_default())
                    .collect(),
            };
            if let Some(s) = &self.ccs.server {
                s.complete(id, Ok(reply));
            }
        }
    }

    fn ccs_fail(&mut self, id: u64, why: String) {
        self.ccs.pending.remove(&id);
        if let Some(s) = &self.ccs.server {
            s.complete(id, Err(why));
        }
    }

    /// PE 0, report mode: requests waiting on a PE of a dead node fail.
    pub(crate) fn ccs_on_death(&mut self, pes: std::ops::Range<usize>) {
        let failed: Vec<(u64, usize)> = self
            .ccs
            .pending
            .iter()
            .filter_map(|(&id, p)| {
                p.pes
                    .iter()
                    .zip(&p.got)
                    .find(|(q, got)| pes.contains(q) && got.is_none())
                    .map(|(&q, _)| (id, q))
            })
            .collect();
        for (id, q) in failed {
            self.ccs_fail(id, format!("PE {q} died before it answered"));
        }
    }
}

/// The built-in handlers.
fn builtin(name: &str) -> Option<Rc<CcsFn>> {
    match name {
        "ccs_getinfo" => Some(Rc::new(|pe: &mut Pe, req: CcsRequest| {
            let per_node: Vec<usize> = pe.table.nodes().iter().map(|n| n.num_pes).collect();
            req.reply(pe, &converse_ccs::wire::encode_info(&per_node));
        })),
        "converse.status" => Some(Rc::new(|pe: &mut Pe, req: CcsRequest| {
            let line = status_line(pe);
            req.reply(pe, line.as_bytes());
        })),
        "converse.trace" => Some(Rc::new(|pe: &mut Pe, req: CcsRequest| {
            // The window in seconds, as text (default 10); the reply, this PE's trace file
            // of it behind its u64 length (0: this PE does not trace), so that the replies of
            // several PEs can be told apart.
            let secs = std::str::from_utf8(req.data())
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map_or(LIVE_WINDOW, |s| s.min(86_400.0));
            let names = pe.handler_names.clone();
            let file = pe
                .rec
                .as_deref_mut()
                .and_then(|r| r.live(&names, std::time::Duration::from_secs_f64(secs)))
                .unwrap_or_default();
            let mut out = Vec::with_capacity(8 + file.len());
            out.extend_from_slice(&(file.len() as u64).to_le_bytes());
            out.extend_from_slice(&file);
            req.reply(pe, &out);
        })),
        _ => None,
    }
}

/// `converse.trace`'s window when the request names none, seconds.
const LIVE_WINDOW: f64 = 10.0;

/// `converse.status`: one line about this PE.
fn status_line(pe: &Pe) -> String {
    let (sent, taken) = pe.message_counts();
    let mut line = format!(
        "PE {} node {} layer {}: sent {sent}, taken {taken}, queued {} B, handlers run {}, dropped {}",
        pe.my_pe,
        pe.my_node,
        pe.layer(),
        pe.queue.bytes(),
        pe.dispatched,
        pe.dropped,
    );
    for (k, v) in pe.link.counters() {
        line += &format!(", {k} {v}");
    }
    line.push('\n');
    line
}

/// PE 0 with `+server`: open the port, print where it is (Charm++'s line, which its tools
/// read) and the key a client needs, and pass requests to this PE.
///
/// # Errors
/// A line for the job's abort: a key file that cannot be read or parsed, a port taken.
pub(crate) fn start(pe: &mut Pe, args: &ServerArgs) -> Result<(), String> {
    let keys = match args.auth.as_deref() {
        Some("none") => Keys::none(),
        Some(file) => {
            let text =
                std::fs::read_to_string(file).map_err(|e| format!("+server-auth {file}: {e}"))?;
            Keys::parse(&text, file).map_err(|e| format!("+server-auth: {e}"))?
        }
        None => {
            let mut k = Keys::level0(converse_ccs::Key::random().map_err(|e| e.to_string())?);
            if let Some(key) = k.get(0).cloned() {
                k.made.push((0, key));
            }
            k
        }
    };
    let made = keys.made.clone();
    let mailbox = pe.mailbox();
    let h = HandlerId(SystemHandler::Ccs.id());
    let server = Server::start(args.port, keys, pe.num_pes, move |req: Request| {
        let mut head = Vec::with_capacity(32 + req.handler.len());
        head.put_u64(req.id);
        match &req.dest {
            Dest::All => head.put_u32(0),
            Dest::Pe(p) => {
                head.put_u32(1);
                head.put_u32(*p as u32);
            }
            Dest::List(l) => {
                head.put_u32(l.len() as u32);
                for &p in l {
                    head.put_u32(p as u32);
                }
            }
        }
        head.put_str(&req.handler);
        let mut m = Message::with_capacity(head.len() + req.data.len());
        m.extend_payload(&head);
        m.extend_payload(&req.data);
        m.set_arg0(IN);
        mailbox.post(h, m);
    })
    .map_err(|e| format!("+server: {e}"))?;
    let ip = host_ip();
    converse_machine::input::out_line(&format!(
        "ccs: Server IP = {ip}, Server port = {} $",
        server.addr().port()
    ));
    for (level, key) in made {
        converse_machine::input::out_line(&format!(
            "CCS_OTP_KEY> Level {level} key: {}",
            key.to_text()
        ));
    }
    pe.ccs.server = Some(server);
    Ok(())
}

/// An address of this host others can reach: its first IPv4 address that is not loopback
/// (the listener takes every interface), else loopback.
fn host_ip() -> std::net::IpAddr {
    let found = nix::ifaddrs::getifaddrs().ok().and_then(|mut addrs| {
        addrs.find_map(|a| {
            let sin = a.address.as_ref()?.as_sockaddr_in()?;
            let ip = sin.ip();
            (!ip.is_loopback()).then_some(std::net::IpAddr::V4(ip))
        })
    });
    found.unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
}
