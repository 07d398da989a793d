//! Each group a job of its own: FastFlow's sender and receiver stages (`ff_dsender`,
//! `ff_dreceiver`), on each group job's PE 0.
//!
//! A channel from a stage of this job to a stage of another group's job goes: the stage's
//! item, as a runtime message, to this job's PE 0 (handler `converse-flow.gw-item`); from
//! there over an endpoint connection (`converse-endpoint`, authenticated with the flow's
//! secret) that this job made to the other group's address; at the other job's PE 0 on to the
//! stage's PE. Credits come back over the same connection, the other way. The end of a
//! crossing channel is a *call* (FastFlow's `ff_rpc_shutdown`): its reply acknowledges it, and
//! a job ends only once every end it sent is acknowledged, so nothing it sent is lost with its
//! exit. A group job whose peer group's connection ends before every channel with it has ended
//! ends the flow with [`FlowError::GroupLost`] instead of waiting.
//!
//! Endpoint messages (frame data: `arg0` u32 LE, `arg1` u32 LE, then the item's bytes):
//!
//! | name | kind | from → to | data |
//! |---|---|---|---|
//! | `converse-flow.hello` | message | connecting job → listening job, first | the connecting job's group index, u32 LE; its plan's fingerprint and byte window, u64 LE each (another flow's job is refused) |
//! | `converse-flow.item` | message | producer's job → consumer's job | `arg0`, `arg1` as in `wire.rs`, the item |
//! | `converse-flow.ctl` | message | consumer's job → producer's job | a credit control word, the bytes taken (u64 LE) |
//! | `converse-flow.end` | call, empty reply | producer's job → consumer's job | an end control word |
//!
//! A send the connection refuses (`Full`: the peer reads slower) waits in a queue per peer
//! until its `Drained`; what can wait is bounded by the crossing channels' windows.

use crate::error::FlowError;
use crate::exec::{Dest, Handlers, Shared, Then};
use crate::wire;
use converse::{Message, Pe};
use converse_endpoint::{EndpointError, Endpoints, Incoming, Peer, PeerEvent, Secret, SendError};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

const E_HELLO: &str = "converse-flow.hello";
const E_ITEM: &str = "converse-flow.item";
const E_CTL: &str = "converse-flow.ctl";
const E_END: &str = "converse-flow.end";

/// What goes to another group's job: the stage's message itself, whose bytes from its `arg0`
/// on are the frame's data (no copy before the endpoint's own).
enum Frame {
    Send(&'static str, Message),
    /// An end of stream for a channel into group `.0`.
    End(usize, Message),
}

/// A message's frame data: `arg0`, `arg1` (the envelope's last 8 bytes, little-endian, as
/// the table above has them) and the payload, in place.
fn frame_data(m: &Message) -> &[u8] {
    let w = m.wire();
    &w[w.len() - m.payload_len() - 8..]
}

/// The sender and receiver stages of this group's job (PE 0).
pub(crate) struct Gateway {
    ep: Endpoints,
    h: Handlers,
    /// What a peer's hello must say: this plan's fingerprint and byte window.
    same: [u8; 16],
    /// Connections this job made, by the group at the other end (items and ends go out on them).
    out_peer: HashMap<usize, Peer>,
    /// Connections other groups made to this job (their credits go back on them).
    in_peer: HashMap<usize, Peer>,
    group_of: HashMap<Peer, usize>,
    /// Per group: crossing channels from it not yet ended, and to it not yet acknowledged.
    open_in: Vec<usize>,
    open_out: Vec<usize>,
    waiting: HashMap<Peer, VecDeque<Frame>>,
    cell: Weak<RefCell<Shared>>,
    complained: bool,
}

impl Gateway {
    pub(crate) fn all_acked(&self) -> bool {
        self.open_out.iter().all(|&n| n == 0)
    }

    fn push(&mut self, peer: Peer, f: Frame) {
        let q = self.waiting.entry(peer).or_default();
        if !q.is_empty() {
            q.push_back(f);
            return;
        }
        if let Err(f) = self.try_send(peer, f) {
            self.waiting.entry(peer).or_default().push_back(f);
        }
    }

    /// Send now, or give the frame back when the connection is full. A peer gone drops it:
    /// its `Left` event ends the flow if anything was still open with it.
    fn try_send(&mut self, peer: Peer, f: Frame) -> Result<(), Frame> {
        let r = match &f {
            Frame::Send(name, m) => self.ep.send(peer, name, frame_data(m)),
            Frame::End(g, m) => {
                let data = frame_data(m);
                let (cell, g) = (self.cell.clone(), *g);
                self.ep
                    .call(peer, E_END, data, move |pe, r| acked(&cell, pe, g, r))
            }
        };
        match r {
            Err(SendError::Full { .. }) => Err(f),
            _ => Ok(()),
        }
    }

    fn drained(&mut self, peer: Peer) {
        let Some(mut q) = self.waiting.remove(&peer) else {
            return;
        };
        while let Some(f) = q.pop_front() {
            if let Err(f) = self.try_send(peer, f) {
                q.push_front(f);
                break;
            }
        }
        if !q.is_empty() {
            self.waiting.insert(peer, q);
        }
    }
}

fn decode(data: &[u8]) -> Option<(u32, u32, &[u8])> {
    let a = u32::from_le_bytes(data.get(0..4)?.try_into().ok()?);
    let b = u32::from_le_bytes(data.get(4..8)?.try_into().ok()?);
    Some((a, b, &data[8..]))
}

/// PE 0 of a group job: listen (if another group sends here), connect to every group this one
/// sends to (retrying until `timeout`: the groups' jobs start in any order), say hello.
pub(crate) fn open(
    pe: &mut Pe,
    ep: Endpoints,
    h: Handlers,
    shared: &Rc<RefCell<Shared>>,
    secret: &Secret,
    timeout: Duration,
    byte_window: u64,
) -> Result<(), FlowError> {
    let plan = shared.borrow().plan.clone();
    let Some(me) = plan.my_group else {
        return Ok(());
    };
    let groups = plan.group_names.len();
    let (mut open_in, mut open_out) = (vec![0usize; groups], vec![0usize; groups]);
    for inst in &plan.insts {
        for &(d, _) in &inst.outs {
            let (a, b) = (inst.group, plan.insts[d as usize].group);
            match (a, b) {
                (Some(a), Some(b)) if a == me && b != me => open_out[b] += 1,
                (Some(a), Some(b)) if a != me && b == me => open_in[a] += 1,
                _ => {}
            }
        }
    }
    let addr_of = |g: usize| plan.group_addrs[g].clone().unwrap_or_default();
    let mut same = [0u8; 16];
    same[..8].copy_from_slice(&plan.fingerprint().to_le_bytes());
    same[8..].copy_from_slice(&byte_window.to_le_bytes());
    let weak = Rc::downgrade(shared);
    install(&ep, &weak);
    if open_in.iter().any(|&n| n > 0) {
        ep.listen(pe, &addr_of(me), secret)
            .map_err(|e| FlowError::Connect {
                group: plan.group_names[me].clone(),
                addr: addr_of(me),
                why: e.to_string(),
            })?;
    }
    let mut out_peer = HashMap::new();
    let mut group_of = HashMap::new();
    let deadline = Instant::now() + timeout;
    for g in (0..groups).filter(|&g| open_out[g] > 0) {
        let addr = addr_of(g);
        let peer = loop {
            match ep.connect(pe, &addr, secret) {
                Ok(p) => break p,
                Err(EndpointError::Unreachable { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => {
                    return Err(FlowError::Connect {
                        group: plan.group_names[g].clone(),
                        addr,
                        why: e.to_string(),
                    })
                }
            }
        };
        let mut hello = (me as u32).to_le_bytes().to_vec();
        hello.extend_from_slice(&same);
        let _ = ep.send(peer, E_HELLO, &hello);
        out_peer.insert(g, peer);
        group_of.insert(peer, g);
    }
    // A group that sends here and never connects is an error too, not a wait for ever.
    let (c, names, addrs) = (
        weak.clone(),
        plan.group_names.clone(),
        plan.group_addrs.clone(),
    );
    pe.after(timeout, move |pe| {
        with(&c, pe, |s, _pe| {
            let gw = s.gw.as_ref()?;
            let g = (0..gw.open_in.len())
                .find(|&g| gw.open_in[g] > 0 && !gw.in_peer.contains_key(&g))?;
            s.fail_with(FlowError::Connect {
                group: names[g].clone(),
                addr: addrs[g].clone().unwrap_or_default(),
                why: format!("its job never connected here within {timeout:?} (is it started?)"),
            })
        })
    });
    shared.borrow_mut().gw = Some(Gateway {
        ep,
        h,
        same,
        out_peer,
        in_peer: HashMap::new(),
        group_of,
        open_in,
        open_out,
        waiting: HashMap::new(),
        cell: weak,
        complained: false,
    });
    Ok(())
}

/// Run `f` on the shared state, then what it returns once the borrow is over.
fn with(
    cell: &Weak<RefCell<Shared>>,
    pe: &mut Pe,
    f: impl FnOnce(&mut Shared, &mut Pe) -> Option<Then>,
) {
    let Some(rc) = cell.upgrade() else { return };
    let then = match rc.try_borrow_mut() {
        Ok(mut s) => f(&mut s, pe),
        Err(_) => pe.abort(
            "converse-flow: a stage ran the scheduler from inside svc (a barrier?); \
             stages must return to it",
        ),
    };
    if let Some(then) = then {
        then(pe);
    }
}

/// A frame that no job of this flow sends: the connection is ended, once said.
fn bad(s: &mut Shared, peer: Peer, what: &str) {
    if let Some(gw) = s.gw.as_mut() {
        if !gw.complained {
            gw.complained = true;
            converse::input::error_line(&format!(
                "converse-flow: a peer group sent {what}; its connection is closed"
            ));
        }
        gw.ep.close(peer);
    }
}

fn install(ep: &Endpoints, cell: &Weak<RefCell<Shared>>) {
    let c = cell.clone();
    ep.on(E_HELLO, move |pe, inc: Incoming| {
        with(&c, pe, |s, _pe| {
            let groups = s.plan.group_names.len();
            let me = s.plan.my_group;
            let data = inc.data();
            let g = data
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(|b| u32::from_le_bytes(b) as usize)
                .filter(|&g| g < groups && Some(g) != me);
            let Some(g) = g else {
                bad(s, inc.peer(), "a hello naming no other group");
                return None;
            };
            if s.gw
                .as_ref()
                .is_some_and(|gw| data.get(4..) != Some(&gw.same[..]))
            {
                // Another flow, or the same with other windows: its items would reach the
                // wrong stages. Both jobs end, this one saying why.
                if let Some(gw) = s.gw.as_ref() {
                    gw.ep.close(inc.peer());
                }
                let plan = s.plan.clone();
                return s.fail_with(FlowError::Connect {
                    group: plan.group_names[g].clone(),
                    addr: plan.group_addrs[g].clone().unwrap_or_default(),
                    why: "its job runs another flow (its stages, channels or windows differ)"
                        .to_owned(),
                });
            }
            if let Some(gw) = s.gw.as_mut() {
                gw.in_peer.insert(g, inc.peer());
                gw.group_of.insert(inc.peer(), g);
            }
            None
        })
    });
    let c = cell.clone();
    ep.on(E_ITEM, move |pe, inc| {
        with(&c, pe, |s, pe| {
            if !to_stage(s, pe, &inc, None) {
                bad(s, inc.peer(), "an item for no stage of this group");
            }
            None
        })
    });
    let c = cell.clone();
    ep.on(E_CTL, move |pe, inc| {
        with(&c, pe, |s, pe| {
            if !to_stage(s, pe, &inc, Some(wire::CREDIT)) {
                bad(s, inc.peer(), "a control word for no stage of this group");
            }
            None
        })
    });
    let c = cell.clone();
    ep.on(E_END, move |pe, inc| {
        with(&c, pe, |s, pe| {
            if !to_stage(s, pe, &inc, Some(wire::END)) {
                bad(s, inc.peer(), "an end for no stage of this group");
                return None;
            }
            let peer = inc.peer();
            if let Some(gw) = s.gw.as_mut() {
                if let Some(&g) = gw.group_of.get(&peer) {
                    gw.open_in[g] = gw.open_in[g].saturating_sub(1);
                }
            }
            let _ = inc.reply(b"");
            None
        })
    });
    let c = cell.clone();
    ep.on_event(move |pe, ev| {
        with(&c, pe, |s, _pe| match ev {
            PeerEvent::Drained { peer } => {
                if let Some(gw) = s.gw.as_mut() {
                    gw.drained(peer);
                }
                None
            }
            PeerEvent::Left { peer, why } => left(s, peer, &why),
            // Joined, and any event a later endpoint crate adds: nothing for the gateway.
            _ => None,
        })
    });
}

/// Pass an inbound frame on to its stage as a runtime message (an item, or the control word
/// of `kind`); whether it was one for a stage of this group. One copy: the frame is the
/// endpoint's buffer.
fn to_stage(s: &Shared, pe: &mut Pe, inc: &Incoming, kind: Option<u32>) -> bool {
    let credit = kind == Some(wire::CREDIT);
    let Some((a, b, dst_pe, h)) = inward(s, inc, credit) else {
        return false;
    };
    if kind.is_some_and(|k| wire::ctl_kind(b) != k) {
        return false;
    }
    // A credit's payload is the bytes taken; an end's is empty; an item's is the item.
    let mut m = Message::from_payload(&inc.data()[8..]);
    if credit {
        m.set_priority(-1);
    }
    m.set_arg0(a);
    m.set_arg1(b);
    h.send(pe, Dest::Pe(dst_pe), kind.is_some(), m);
    true
}

/// An inbound frame's words and its stage's PE, if the stage is this group's, the sender is
/// the group the connection belongs to, and the two stages have a channel (from the sender
/// to the stage; for a credit, the other way).
fn inward(s: &Shared, inc: &Incoming, credit: bool) -> Option<(u32, u32, usize, Handlers)> {
    let gw = s.gw.as_ref()?;
    let (a, b, _) = decode(inc.data())?;
    let (dst, src) = (wire::dst_of(a) as usize, wire::src_of(a) as usize);
    let (d, sr) = (s.plan.insts.get(dst)?, s.plan.insts.get(src)?);
    let from = *gw.group_of.get(&inc.peer())?;
    let channel = if credit {
        d.outs.iter().any(|&(x, _)| x as usize == src)
    } else {
        sr.outs.iter().any(|&(x, _)| x as usize == dst)
    };
    (channel && d.group == s.plan.my_group && sr.group == Some(from)).then_some((a, b, d.pe, gw.h))
}

/// A connection ended: the flow's end if anything was still open with that group.
fn left(s: &mut Shared, peer: Peer, why: &str) -> Option<Then> {
    let gw = s.gw.as_mut()?;
    let g = gw.group_of.remove(&peer)?;
    gw.waiting.remove(&peer);
    // Each connection carries one direction's channels: what it leaves open is its own
    // (the ends this job sent on the other are acknowledged on that one).
    let (ins, outs) = (
        gw.in_peer.get(&g) == Some(&peer),
        gw.out_peer.get(&g) == Some(&peer),
    );
    if !(ins && gw.open_in[g] > 0 || outs && gw.open_out[g] > 0) {
        return None;
    }
    let plan = s.plan.clone();
    let me = plan.my_group;
    let stages: Vec<String> = plan
        .insts
        .iter()
        .filter(|i| {
            i.group == me
                && i.ins
                    .iter()
                    .chain(i.outs.iter())
                    .any(|&(o, _)| plan.insts[o as usize].group == Some(g))
        })
        .map(|i| i.name.clone())
        .collect();
    s.fail_with(FlowError::GroupLost {
        group: plan.group_names[g].clone(),
        addr: plan.group_addrs[g].clone().unwrap_or_default(),
        why: why.to_owned(),
        stages,
    })
}

/// An end of stream sent to group `g` was acknowledged (or could not be).
fn acked(
    cell: &Weak<RefCell<Shared>>,
    pe: &mut Pe,
    g: usize,
    r: Result<Vec<u8>, converse_endpoint::CallError>,
) {
    with(cell, pe, |s, _pe| match r {
        Ok(_) => {
            if let Some(gw) = s.gw.as_mut() {
                gw.open_out[g] = gw.open_out[g].saturating_sub(1);
            }
            s.done_if_complete()
        }
        Err(e) => {
            let plan = s.plan.clone();
            s.fail_with(FlowError::GroupLost {
                group: plan.group_names[g].clone(),
                addr: plan.group_addrs[g].clone().unwrap_or_default(),
                why: e.to_string(),
                stages: Vec::new(),
            })
        }
    })
}

/// PE 0's handlers `converse-flow.gw-item` and `gw-ctl`: a stage of this job sends to a stage
/// of another group's job.
pub(crate) fn on_out(sh: &RefCell<Shared>, pe: &mut Pe, msg: Message, ctl: bool) {
    let Ok(mut s) = sh.try_borrow_mut() else {
        pe.abort("converse-flow: the gateway ran inside a stage's svc")
    };
    let plan = s.plan.clone();
    let Some(gw) = s.gw.as_mut() else {
        return;
    };
    let dst = wire::dst_of(msg.arg0()) as usize;
    let Some(g) = plan.insts.get(dst).and_then(|i| i.group) else {
        return;
    };
    let kind = wire::ctl_kind(msg.arg1());
    let (peer, frame) = match (ctl, kind) {
        (false, _) => (gw.out_peer.get(&g), Frame::Send(E_ITEM, msg)),
        (true, wire::CREDIT) => (gw.in_peer.get(&g), Frame::Send(E_CTL, msg)),
        (true, wire::END) => (gw.out_peer.get(&g), Frame::End(g, msg)),
        _ => return,
    };
    // No connection (its group left): the flow is ending with that error already.
    if let Some(&peer) = peer {
        gw.push(peer, frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_messages_frame_data_is_its_argument_words_then_its_payload() {
        let mut m = Message::from_payload(b"item");
        m.set_arg0(0x0102_0304);
        m.set_arg1(0xa0b0_c0d0);
        let d = frame_data(&m);
        assert_eq!(decode(d), Some((0x0102_0304, 0xa0b0_c0d0, &b"item"[..])));
    }
}
