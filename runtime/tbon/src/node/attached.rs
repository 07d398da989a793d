//! Back-ends that attach (MRNet's back-end attach mode), on the tree's side: each leaf of an
//! attach-mode tree listens for back-ends started apart, every process between it and the
//! front-end learns of each one that joins or leaves, and the leaf is the back-end's parent,
//! reaching it through its connection.
//!
//! **Joining.** A back-end connects to a leaf, proves the network's secret and calls
//! `tbon.attach` with the rank it chose. The leaf sends `Attach` up; the front-end alone
//! knows every rank in use, so it decides: a rank free and below
//! [`FIRST_INTERNAL_RANK`](crate::FIRST_INTERNAL_RANK) is added to its tree (an
//! [`EventKind::BackendAdded`] event) and `Attached` goes down the path to the leaf, each
//! process adding the back-end to its own tree on the way (so routing finds it); the leaf
//! replies to the call. Refused, the same message carries why, and the back-end's call
//! fails with it.
//!
//! **Leaving.** A back-end's connection that ends (it exited, died, or stopped reading what
//! is sent to it, past [`EXT_QUEUE_BYTES`]) is that back-end's death: the leaf and every
//! process up the path treat it as the death of a back-end PE (wait-for-all stops waiting
//! for it; the front-end gets [`EventKind::EndpointRemoved`] on its streams). A leaf that
//! dies takes its attached back-ends with it: they do not re-connect elsewhere.
//!
//! **A death on the way.** `Attach`, `Attached` and `Detached` travel through the processes
//! between a leaf and the front-end; one that dies may take one with it. A leaf with attaches
//! pending that learns of a death above it asks again over the mended tree, at once and three
//! times more a second apart (the process above it may learn of the death after it): the
//! front-end answers again one it already took under that leaf, and the leaf drops a repeated
//! answer. With recovery off nothing reaches the front-end again: the pending calls are
//! refused, naming the dead process. So a back-end's attach never waits for an answer that
//! died. A `Detached` that died that way is not said again (a rank may have been taken again
//! since, and `Detached` does not name its leaf): the front-end then goes on counting that
//! back-end until the network ends.
//!
//! What goes to an attached back-end over its connection is the same bytes a back-end PE
//! would get as a runtime message: `tbon.down` (a packet) and `tbon.ctl` (a stream opened
//! or closed, the shutdown). It sends `tbon.up` (a packet). Requests other than the
//! shutdown are answered by the leaf for it (a back-end runs no filter and records no
//! performance data), so no request waits on a program outside the job.

use super::{Child, Handlers, Node, Place, Role, NO_PE};
use crate::events::EventKind;
use crate::protocol::Ctl;
use crate::topology::{ProcName, Rank, FIRST_INTERNAL_RANK};
use converse::{HandlerId, Message, Pe};
use converse_endpoint::{Endpoints, Incoming, Limits, Peer, PeerEvent, Secret, SendError};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::{Rc, Weak};

/// Bytes that may wait to be written to one attached back-end: one that leaves this much
/// unread is detached, so a stopped back-end cannot make its leaf's memory grow.
pub const EXT_QUEUE_BYTES: usize = 64 << 20;

/// After a death on a leaf's way to the front-end, its pending attaches are asked again at
/// once and then this many times more, a second apart: the process above it may learn of the
/// death after it, and send the first repeat to the dead one.
const ASK_AGAIN: u32 = 3;

/// Attach mode's state on one process.
#[derive(Default)]
pub(crate) struct AttachState {
    /// Attach mode: the secret back-ends prove (every process has it; leaves listen).
    pub secret: Option<Secret>,
    /// A leaf's endpoints, once it listens.
    pub ep: Option<Endpoints>,
    /// Where this leaf listens (`tcp://HOST:PORT`), once it does.
    pub addr: Option<String>,
    /// A leaf that must listen before it reports in.
    pub must_listen: bool,
    /// Front-end: where each leaf listens, by its rank (empty: it could not listen).
    pub points: BTreeMap<Rank, String>,
    /// Leaf: calls waiting for the front-end's answer, by the rank asked for (with the host
    /// the back-end named, to ask again).
    pending: HashMap<Rank, (Peer, Incoming, String)>,
    /// Leaf: attached back-ends' connections.
    by_peer: HashMap<Peer, Rank>,
    peer_of: HashMap<Rank, Peer>,
}

/// Where a child is: a PE, or an attached back-end's connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct To {
    pub pe: usize,
    pub ext: Option<Peer>,
}

impl Child {
    pub(crate) fn to(&self) -> To {
        To {
            pe: self.pe,
            ext: self.ext,
        }
    }
}

/// Send `msg` for handler `h` to a child: a runtime message to its PE, or its bytes over an
/// attached back-end's connection (a copy into the connection's buffer, as a socket write
/// is; the runtime's own message is not kept).
pub(crate) fn send_to(
    pe: &mut Pe,
    hs: &Handlers,
    attach: &AttachState,
    to: To,
    h: HandlerId,
    msg: Message,
) {
    let Some(peer) = to.ext else {
        if to.pe == NO_PE {
            // An attached back-end whose connection this process does not hold (it left, or
            // it hangs below a process that died): nothing reaches it.
            return;
        }
        return pe.send_msg(to.pe, h, msg);
    };
    let Some(ep) = &attach.ep else { return };
    let name = if h == hs.down {
        "tbon.down"
    } else {
        "tbon.ctl"
    };
    match ep.send(peer, name, msg.payload()) {
        Ok(()) | Err(SendError::Gone(_)) => {}
        // Its `Left` follows, which detaches it.
        Err(e) => {
            tracing::debug!(target: "tbon", peer, "detaching an attached back-end: {e}");
            ep.close(peer);
        }
    }
}

impl AttachState {
    /// No attach call waits for the front-end's answer here.
    pub(super) fn pending_is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

impl Node {
    /// Whether this process is a leaf of an attach-mode tree (it listens for back-ends).
    pub(crate) fn is_attach_point(&self) -> bool {
        self.attach.secret.is_some()
            && self.place.as_ref().is_some_and(|p| {
                p.role == Role::Internal
                    && p.orig
                        .find_rank(p.info.rank)
                        .is_some_and(|i| p.orig.nodes()[i].num_children() == 0)
            })
    }

    /// Take a plan's attach-mode secret: a leaf listens (and reports in only then).
    pub(super) fn take_attach_secret(&mut self, secret: Option<String>) {
        let Some(hex) = secret else { return };
        match Secret::parse(&hex) {
            Ok(s) => self.attach.secret = Some(s),
            Err(e) => {
                self.abandoned = Some(format!("the front-end sent a secret that is not one: {e}"))
            }
        }
        self.attach.must_listen = self.is_attach_point();
    }

    /// A back-end asks (a `tbon.attach` call at this leaf) to join as `rank`.
    fn on_attach_call(&mut self, pe: &mut Pe, call: Incoming) {
        let peer = call.peer();
        let mut d = crate::protocol::Dec::new(call.data());
        let (Some(rank), Some(host)) = (d.u32(), d.0.str().ok().map(str::to_owned)) else {
            return refuse(call, "the attach call does not decode".into());
        };
        let why = if self.shut_down {
            Some("the network has been shut down".to_owned())
        } else if rank >= FIRST_INTERNAL_RANK {
            Some(format!(
                "rank {rank} is not a back-end rank (back-ends are ranked below {FIRST_INTERNAL_RANK})"
            ))
        } else if self.attach.by_peer.contains_key(&peer)
            || self.attach.pending.values().any(|(p, _, _)| *p == peer)
        {
            Some("this connection has attached, or asked to, already".to_owned())
        } else if !host_name_like(&host) {
            Some(format!(
                "{:?} is not a host name (at most {MAX_HOST} letters, digits, '.', '-', '_', ':')",
                host.chars().take(MAX_HOST).collect::<String>()
            ))
        } else if self.attach.pending.contains_key(&rank) || self.attach.peer_of.contains_key(&rank)
        {
            Some(format!("rank {rank} is taken"))
        } else {
            None
        };
        if let Some(why) = why {
            return refuse(call, why);
        }
        let leaf = self.my_rank();
        tracing::debug!(target: "tbon", rank, host, "a back-end asks to attach");
        self.attach.pending.insert(rank, (peer, call, host.clone()));
        let ask = Ctl::Attach { leaf, rank, host };
        self.up_or_here(pe, ask);
    }

    /// Send a control message to the parent, or take it here at the front-end.
    fn up_or_here(&mut self, pe: &mut Pe, ctl: Ctl) {
        match self.place.as_ref().and_then(|p| p.parent_pe) {
            Some(parent) => pe.send(parent, self.h.ctl, &ctl.encode()),
            None => self.on_attach_ctl(pe, ctl, None),
        }
    }

    /// `AttachPoint`, `Attach`, `Attached` and `Detached`, wherever they arrive.
    pub(super) fn on_attach_ctl(
        &mut self,
        pe: &mut Pe,
        ctl: Ctl,
        weak: Option<&Weak<RefCell<Node>>>,
    ) {
        let fe = self.role() == Role::FrontEnd;
        match ctl {
            Ctl::AttachPoint { rank, addr } if fe => {
                self.attach.points.insert(rank, addr);
            }
            Ctl::Attach { leaf, rank, host } if fe => {
                let refused = self.fe_decide(pe.my_pe(), leaf, rank, &host);
                let answer = Ctl::Attached {
                    leaf,
                    rank,
                    host,
                    refused: refused.unwrap_or_default(),
                };
                self.on_attach_ctl(pe, answer, weak);
            }
            Ctl::Attached {
                leaf,
                rank,
                host,
                refused,
            } => {
                let me = self.my_rank();
                // The front-end added it when it decided. A leaf gone from this process's
                // tree (it died meanwhile) took its back-ends with it: this one is dead here
                // too, as the front-end concludes once it learns of that death.
                if refused.is_empty() && !fe {
                    let gone = self
                        .place
                        .as_ref()
                        .is_none_or(|p| p.topo.find_rank(leaf).is_none());
                    if gone {
                        self.recovery.mark_dead(rank);
                        return;
                    }
                    self.grow_tree(pe.my_pe(), leaf, rank, &host);
                }
                if leaf == me {
                    self.answer_attach(pe, rank, refused);
                } else if let Some(to) = self.toward(leaf) {
                    let msg = Ctl::Attached {
                        leaf,
                        rank,
                        host,
                        refused,
                    }
                    .encode();
                    pe.send(to, self.h.ctl, &msg);
                }
            }
            Ctl::Detached { rank, why } => {
                self.ranks_lost(pe, vec![rank], &why, weak);
                if !fe {
                    self.up_or_here(pe, Ctl::Detached { rank, why });
                }
            }
            // Not the front-end: on up.
            other @ (Ctl::AttachPoint { .. } | Ctl::Attach { .. }) => {
                if let Some(parent) = self.place.as_ref().and_then(|p| p.parent_pe) {
                    pe.send(parent, self.h.ctl, &other.encode());
                }
            }
            _ => {}
        }
    }

    /// Front-end: whether back-end `rank` may join under `leaf`; if so it is in the tree
    /// when this returns. `Some(why)` if not.
    fn fe_decide(&mut self, my_pe: usize, leaf: Rank, rank: Rank, host: &str) -> Option<String> {
        let place = self.place.as_ref()?;
        if self.shut_down {
            return Some("the network has been shut down".into());
        }
        if place.orig.find_rank(rank).is_some() {
            if place.orig.parent_rank(rank) == Some(leaf) && !self.recovery.dead().contains(&rank) {
                // Asked again by its leaf after a death on the leaf's path (the answer may
                // have died with it): answered again, nothing added.
                return None;
            }
            return Some(if self.recovery.dead().contains(&rank) {
                format!("rank {rank} was a back-end that left; ranks are not given twice")
            } else {
                format!("rank {rank} is taken")
            });
        }
        if place.topo.find_rank(leaf).is_none() || self.recovery.dead().contains(&leaf) {
            return Some(format!("its parent {leaf} is no longer in the tree"));
        }
        if !self.grow_tree(my_pe, leaf, rank, host) {
            return Some(format!("rank {rank} cannot be added under {leaf}"));
        }
        self.event(
            EventKind::BackendAdded,
            None,
            Some(rank),
            format!("back-end {rank} on {host} attached to {leaf}"),
        );
        None
    }

    /// Add back-end `rank` under `leaf` to the tree as made and as it is now, and rebuild
    /// this process's place. `false` if it could not be added.
    fn grow_tree(&mut self, my_pe: usize, leaf: Rank, rank: Rank, host: &str) -> bool {
        let Some(old) = self.place.take() else {
            return false;
        };
        let name = ProcName::new(host, rank);
        let Some(orig) = old.orig.with_backend(leaf, name, rank) else {
            self.place = Some(old);
            return false;
        };
        let orig = Rc::new(orig);
        // The name the tree as made gave it (moved up past an internal process's, if need
        // be), the same in the tree as it is now, from which a dead one may be gone.
        let name = orig
            .nodes()
            .last()
            .map_or_else(|| ProcName::new(host, rank), |n| n.name().clone());
        // The tree as it is now, grown: not made again from the dead (with recovery off, a
        // death leaves the tree as it was, and making it again would re-parent orphans).
        let now = if Rc::ptr_eq(&old.topo, &old.orig) {
            orig.clone()
        } else {
            match old.topo.with_backend(leaf, name, rank) {
                Some(t) => Rc::new(t),
                None => {
                    self.place = Some(old);
                    return false;
                }
            }
        };
        // Indices only grow: the new node is the last of `orig`.
        let mut pes: Vec<usize> = old.pes.to_vec();
        pes.push(NO_PE);
        let mut fresh = Place::build(now, orig, pes.into(), my_pe);
        self.patch_children(&mut fresh, &old, false);
        self.place = Some(fresh);
        true
    }

    /// After a place is rebuilt: children keep their adoption state (a new child is being
    /// adopted if `new_adopting`: an orphan after a death, not a back-end that attached),
    /// attached ones their connection.
    pub(super) fn patch_children(&self, fresh: &mut Place, old: &Place, new_adopting: bool) {
        for c in &mut fresh.children {
            c.adopting = match old.children.iter().find(|o| o.rank == c.rank) {
                Some(o) => o.adopting,
                None => new_adopting,
            };
            if c.pe == NO_PE {
                c.ext = self.attach.peer_of.get(&c.rank).copied();
            }
        }
    }

    /// The PE of the child on the way to process `rank` (not a child's descendant: `None`).
    fn toward(&self, rank: Rank) -> Option<usize> {
        let place = self.place.as_ref()?;
        let t = &place.topo;
        let mut i = t.find_rank(rank)?;
        loop {
            let p = t.nodes()[i].parent()?;
            if t.nodes()[p].rank() == place.info.rank {
                let r = t.nodes()[i].rank();
                return place.children.iter().find(|c| c.rank == r).map(|c| c.pe);
            }
            i = p;
        }
    }

    /// Leaf: the front-end answered back-end `rank`'s call.
    fn answer_attach(&mut self, pe: &mut Pe, rank: Rank, refused: String) {
        let Some((peer, call, _)) = self.attach.pending.remove(&rank) else {
            if self.attach.peer_of.contains_key(&rank) {
                return; // an answer again, to an Attach sent again after a death: had it
            }
            if refused.is_empty() {
                // It left while the front-end decided: it joined and is gone.
                self.ranks_lost(
                    pe,
                    vec![rank],
                    "it left before its attach was answered",
                    None,
                );
                self.up_or_here(
                    pe,
                    Ctl::Detached {
                        rank,
                        why: "it left before its attach was answered".into(),
                    },
                );
            }
            return;
        };
        if !refused.is_empty() {
            return refuse(call, refused);
        }
        self.attach.by_peer.insert(peer, rank);
        self.attach.peer_of.insert(rank, peer);
        if let Some(place) = &mut self.place {
            for c in place.children.iter_mut().filter(|c| c.rank == rank) {
                c.ext = Some(peer);
            }
        }
        let me = self.my_rank();
        let mut ok = vec![0u8];
        ok.extend_from_slice(&me.to_le_bytes());
        tracing::debug!(target: "tbon", rank, "a back-end attached here");
        let _ = call.reply(&ok);
    }

    /// Leaf: an attached back-end's (or an asking one's) connection ended.
    fn on_peer_left(&mut self, pe: &mut Pe, peer: Peer, why: &str, weak: &Weak<RefCell<Node>>) {
        // An attach still being decided: the front-end may have taken it (its answer, lost
        // with a process that died, would never come), so it is told the back-end is gone;
        // a rank it never took is nothing to it.
        let asked: Vec<Rank> = self
            .attach
            .pending
            .iter()
            .filter(|(_, (p, _, _))| *p == peer)
            .map(|(&r, _)| r)
            .collect();
        for rank in asked {
            self.attach.pending.remove(&rank);
            let why = format!("it left before its attach was answered ({why})");
            self.up_or_here(pe, Ctl::Detached { rank, why });
        }
        let Some(rank) = self.attach.by_peer.remove(&peer) else {
            return;
        };
        self.attach.peer_of.remove(&rank);
        let why = format!("its connection ended ({why})");
        tracing::debug!(target: "tbon", rank, "an attached back-end left: {why}");
        self.ranks_lost(pe, vec![rank], &why, Some(weak));
        self.up_or_here(pe, Ctl::Detached { rank, why });
    }

    /// Leaf with attaches pending: a process on the way to the front-end died, which may have
    /// carried one's `Attach` up or the front-end's `Attached` down. With the tree mended
    /// (recovery), they are asked again over the new path, at once and [`ASK_AGAIN`] times
    /// more a second apart (the front-end answers again a back-end it already took under this
    /// leaf, and a repeated answer here is dropped), so no back-end's call waits for an answer
    /// that died. With recovery off (`cut_off`: nothing reaches the front-end again), the
    /// pending calls are refused instead, naming why.
    pub(super) fn attach_path_lost(
        &mut self,
        pe: &mut Pe,
        dead: Rank,
        cut_off: bool,
        weak: Option<&Weak<RefCell<Node>>>,
    ) {
        if cut_off {
            let why = format!(
                "process {dead} on the way to the front-end died and failure recovery is off"
            );
            for (_, (_, call, _)) in self.attach.pending.drain() {
                refuse(call, why.clone());
            }
            return;
        }
        self.ask_again(pe);
        if let Some(weak) = weak {
            ask_again_later(pe, weak.clone(), ASK_AGAIN);
        }
    }

    /// Send every pending attach's `Attach` up again.
    fn ask_again(&mut self, pe: &mut Pe) {
        let leaf = self.my_rank();
        let mut again: Vec<(Rank, String)> = self
            .attach
            .pending
            .iter()
            .map(|(&r, (_, _, h))| (r, h.clone()))
            .collect();
        again.sort_unstable();
        for (rank, host) in again {
            self.up_or_here(pe, Ctl::Attach { leaf, rank, host });
        }
    }

    /// Attached back-ends whose parent is among `dead` (their connection went with it).
    pub(super) fn attached_below(&self, dead: &[Rank]) -> Vec<Rank> {
        let Some(place) = &self.place else {
            return Vec::new();
        };
        let o = &place.orig;
        dead.iter()
            .filter_map(|&r| o.find_rank(r))
            .flat_map(|i| o.nodes()[i].children().iter().copied())
            .filter(|&c| place.pes.get(c) == Some(&NO_PE))
            .map(|c| o.nodes()[c].rank())
            .collect()
    }

    /// The ranks of the attached back-ends in the tree now.
    pub(crate) fn attached_ranks(&self) -> Vec<Rank> {
        let Some(place) = &self.place else {
            return Vec::new();
        };
        place
            .topo
            .backends()
            .iter()
            .filter(|&&i| {
                place
                    .orig
                    .find_rank(place.topo.nodes()[i].rank())
                    .and_then(|o| place.pes.get(o))
                    == Some(&NO_PE)
            })
            .map(|&i| place.topo.nodes()[i].rank())
            .collect()
    }
}

/// The longest host name an attaching back-end may give.
const MAX_HOST: usize = 255;

/// Whether a back-end's host name is one: it goes into every topology on the path, and into
/// DOT and topology files written from them.
fn host_name_like(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= MAX_HOST
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b))
}

/// Refuse an attach call: its reply says why (status 1).
/// [`Node::ask_again`] a second from now, and `times - 1` more seconds after.
fn ask_again_later(pe: &mut Pe, weak: Weak<RefCell<Node>>, times: u32) {
    if times == 0 {
        return;
    }
    pe.after(std::time::Duration::from_secs(1), move |pe| {
        let Some(node) = weak.upgrade() else { return };
        let more = {
            let mut n = node.borrow_mut();
            if n.attach.pending.is_empty() || n.shut_down {
                false
            } else {
                n.ask_again(pe);
                true
            }
        };
        if more {
            ask_again_later(pe, weak, times - 1);
        }
    });
}

fn refuse(call: Incoming, why: String) {
    let mut b = vec![1u8];
    b.extend_from_slice(why.as_bytes());
    let _ = call.reply(&b);
}

/// Attach mode, on every PE before it schedules (the endpoints register a handler): the
/// PE's endpoints, which a leaf listens on.
pub(crate) fn endpoints(pe: &mut Pe, node: &Rc<RefCell<Node>>) {
    let ep = Endpoints::attach_with(
        pe,
        Limits {
            queue_bytes: EXT_QUEUE_BYTES,
            ..Limits::default()
        },
    );
    node.borrow_mut().attach.ep = Some(ep);
}

/// A leaf of an attach-mode tree starts listening (on every interface, any port) and
/// reports where, then reports in. Runs on the leaf's PE, in `attach`.
pub(crate) fn listen(pe: &mut Pe, node: &Rc<RefCell<Node>>) {
    let (secret, ep) = {
        let n = node.borrow();
        if !n.attach.must_listen || n.attach.addr.is_some() {
            return;
        }
        (n.attach.secret.clone(), n.attach.ep.clone())
    };
    let (Some(secret), Some(ep)) = (secret, ep) else {
        return;
    };
    let weak = Rc::downgrade(node);
    let w = weak.clone();
    ep.on("tbon.attach", move |pe, call| {
        with_node(&w, |n| n.on_attach_call(pe, call));
    });
    let w = weak.clone();
    ep.on("tbon.up", move |pe, msg| {
        let w2 = w.clone();
        with_node(&w, |n| n.on_ext_up(pe, &msg, &w2));
    });
    let w = weak.clone();
    ep.on_event(move |pe, ev| {
        if let PeerEvent::Left { peer, why } = ev {
            let w2 = w.clone();
            with_node(&w, |n| n.on_peer_left(pe, peer, &why, &w2));
        }
    });
    let addr = match ep.listen(pe, "tcp://:0", &secret) {
        Ok(a) => advertised(pe, &a),
        Err(e) => {
            // Said, and the leaf takes no back-end (the front-end's attach points leave it
            // out); the network is made all the same.
            let rank = node.borrow().my_rank();
            converse::input::error_line(&format!(
                "tbon: leaf {rank} cannot listen for back-ends: {e}"
            ));
            String::new()
        }
    };
    {
        let mut n = node.borrow_mut();
        n.attach.addr = Some(addr.clone());
        n.attach.must_listen = false;
        let rank = n.my_rank();
        n.up_or_here(pe, Ctl::AttachPoint { rank, addr });
        n.maybe_ready(pe);
    }
    super::after_handler(node);
}

/// The address a leaf gives back-ends: its port at the IPv4 address its host name resolves to
/// (as MRNet resolves host names, `XPLAT_RESOLVE_HOSTS`), which is how other hosts know this
/// one; if the name does not resolve, or only to a loopback address, the listener's own
/// choice (an address of this host's interfaces).
fn advertised(pe: &Pe, shown: &str) -> String {
    use std::net::ToSocketAddrs;
    let t = pe.node_table();
    let host = t.node(t.node_of(pe.my_pe())).map(|n| n.host.clone());
    let ip = host
        .and_then(|h| (h.as_str(), 0).to_socket_addrs().ok())
        // IPv4 only: the listener is bound to every IPv4 interface (`tcp://:0`).
        .and_then(|mut a| {
            a.find_map(|a| match a.ip() {
                std::net::IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Some(v4),
                _ => None,
            })
        });
    match (ip, shown.rsplit_once(':')) {
        (Some(v4), Some((_, port))) => format!("tcp://{v4}:{port}"),
        _ => shown.to_owned(),
    }
}

/// Run `f` on the node behind `weak` (if it is still there and not borrowed), then its
/// event callbacks.
fn with_node(weak: &Weak<RefCell<Node>>, f: impl FnOnce(&mut Node)) {
    let Some(node) = weak.upgrade() else { return };
    if let Ok(mut n) = node.try_borrow_mut() {
        f(&mut n);
    }
    super::after_handler(&node);
}

impl Node {
    /// A packet from an attached back-end (`tbon.up` on its connection).
    fn on_ext_up(&mut self, pe: &mut Pe, msg: &Incoming, weak: &Weak<RefCell<Node>>) {
        let Some(&rank) = self.attach.by_peer.get(&msg.peer()) else {
            // Not attached (yet): it has no stream to send on.
            self.refused += 1;
            return;
        };
        self.on_up_from(pe, Message::from_payload(msg.data()), Some(rank), weak);
    }
}
