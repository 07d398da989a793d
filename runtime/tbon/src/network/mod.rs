//! The program's side of the overlay: a [`Network`] on each PE, with the front-end's calls
//! (communicators, streams, sending, filters, performance data, shutdown) and the back-ends'
//! (receiving, sending up, waiting for shutdown).
//!
//! Every call that waits runs the PE's scheduler until its condition holds (a packet is there,
//! every process has acknowledged, the network is shut down) or the job ends: the PE keeps
//! serving its part of the tree meanwhile, and nothing waits without a condition.
//!
//! This file holds the network itself, sending, receiving and shutdown; [`attach`] (in
//! `attach.rs`) makes one, and the front-end's other calls are in a file each: `streams.rs`,
//! `filters.rs`, `perf.rs`, `events.rs`.

mod attach;
mod attached;
mod events;
mod filters;
mod perf;
mod recovery;
mod streams;

#[cfg(feature = "launcher")]
pub(crate) use attach::recovery_from_env;
pub use attach::{attach, Options};

use crate::codec::Pack;
use crate::error::{check_tag, TbonError};
use crate::filter::TopologyLocalInfo;
use crate::node::{after_handler, lost_wave, Node, Outcome, Role};
use crate::packet::Packet;
use crate::perf::Context;
use crate::protocol::Req;
use crate::stream::{Stream, FIRST_USER_STREAM};
use crate::topology::{Rank, Topology};
use converse::Pe;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// The overlay as one PE sees it. See the [module documentation](super) for an example.
pub struct Network<'p> {
    pe: &'p mut Pe,
    node: Rc<RefCell<Node>>,
    /// The tree, once known (every PE has it after `attach`).
    topo: Option<Rc<Topology>>,
    /// The last format string sent and its parse.
    last_format: crate::packet::LastFormat,
}

// By hand: it holds closures and the overlay's state, which have no useful text form.
impl std::fmt::Debug for Network<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("rank", &self.rank())
            .finish_non_exhaustive()
    }
}

impl<'p> Network<'p> {
    /// Run the scheduler until `cond` holds of the node.
    fn wait_for(&mut self, mut cond: impl FnMut(&Node) -> bool) -> Result<(), TbonError> {
        let node = self.node.clone();
        if cond(&node.borrow()) {
            return Ok(());
        }
        let ran = self.pe.run_until(|_| cond(&node.borrow()));
        self.refresh_topology();
        if ran {
            Ok(())
        } else {
            Err(TbonError::JobEnded)
        }
    }

    /// Run the scheduler until `cond` holds (a condition on more than the node).
    fn wait_for_pe(&mut self, mut cond: impl FnMut() -> bool) -> Result<(), TbonError> {
        let ran = self.pe.run_until(|_| cond());
        after_handler(&self.node);
        self.refresh_topology();
        if ran {
            Ok(())
        } else {
            Err(TbonError::JobEnded)
        }
    }

    /// The tree as it is now: after a failure it is no longer the one made.
    fn refresh_topology(&mut self) {
        let n = self.node.borrow();
        if let Some(p) = &n.place {
            if self.topo.as_ref().is_none_or(|t| !Rc::ptr_eq(t, &p.topo)) {
                self.topo = Some(p.topo.clone());
            }
        }
    }

    /// A packet of `values` as `format` says, the format parsed once for repeated sends.
    fn packet(
        &mut self,
        id: u32,
        tag: i32,
        format: &str,
        values: &dyn Pack,
    ) -> Result<Packet, TbonError> {
        Ok(self.last_format.packet(id, tag, format, values)?)
    }

    fn front_end(&self, call: &'static str) -> Result<(), TbonError> {
        if self.role() == Role::FrontEnd {
            Ok(())
        } else {
            Err(TbonError::Role {
                call,
                role: "front-end",
            })
        }
    }

    /// The PE this network runs on (to send messages of the program's own, say).
    pub fn pe(&mut self) -> &mut Pe {
        self.pe
    }

    // ----- roles and topology -----

    /// What this process is in the tree.
    pub fn role(&self) -> Role {
        self.node.borrow().role()
    }

    /// Whether this process is the front-end.
    pub fn is_front_end(&self) -> bool {
        self.role() == Role::FrontEnd
    }

    /// Whether this process is a back-end.
    pub fn is_back_end(&self) -> bool {
        self.role() == Role::BackEnd
    }

    /// Whether this process is internal (neither front-end nor back-end).
    pub fn is_internal(&self) -> bool {
        self.role() == Role::Internal
    }

    /// This process's rank (`None` on a spare PE).
    pub fn rank(&self) -> Option<Rank> {
        let n = self.node.borrow();
        match n.role() {
            Role::Spare => None,
            _ => n.place.as_ref().map(|p| p.info.rank),
        }
    }

    /// The tree (MRNet's `NetworkTopology`): nodes, root, leaves, back-ends, parents, subtree
    /// heights, statistics, and writing it out as a topology file or DOT graph. After a
    /// failure it is the tree as recovery made it: without the processes that died, each
    /// orphan under its new parent, every process with its rank (see
    /// [`Topology::without`]); it is brought up to date whenever this network runs the
    /// scheduler (a receive, [`progress`](Network::progress), any call that waits).
    pub fn topology(&self) -> &Topology {
        // Set by `attach` before it returns a network.
        match &self.topo {
            Some(t) => t,
            None => unreachable!("a Network exists only once its plan has come"),
        }
    }

    /// The PE that runs the process of rank `rank` (`None` for an attached back-end, a
    /// process outside the job).
    pub fn pe_of(&self, rank: Rank) -> Option<usize> {
        let n = self.node.borrow();
        let place = n.place.as_ref()?;
        place.topo.find_rank(rank)?;
        place
            .orig
            .find_rank(rank)
            .and_then(|i| place.pes.get(i).copied())
            .filter(|&p| p != crate::node::NO_PE)
    }

    /// Where this process is in the tree (what filters see).
    pub fn local_info(&self) -> TopologyLocalInfo {
        self.node
            .borrow()
            .place
            .as_ref()
            .map(|p| p.info.clone())
            .unwrap_or_default()
    }

    // ----- sending -----

    /// Send `values` as `format` says with `tag` on a stream: down to its end-points from the
    /// front-end, up towards the front-end from a back-end.
    ///
    /// # Errors
    /// [`TbonError::ReservedTag`] for a tag below the first application tag;
    /// [`TbonError::Packet`] when the values do not match the format;
    /// [`TbonError::NoStream`], [`TbonError::StreamClosed`]; [`TbonError::Role`] on an internal
    /// or spare PE.
    pub fn send(
        &mut self,
        s: &Stream,
        tag: i32,
        format: &str,
        values: impl Pack,
    ) -> Result<(), TbonError> {
        check_tag(tag)?;
        let p = self.packet(s.id, tag, format, &values)?;
        self.send_packet(s, p, &[])
    }

    /// Send from the front-end to some of a stream's end-points only (a per-packet subset).
    ///
    /// # Errors
    /// As [`send`](Network::send); [`TbonError::BadRank`] for a rank that is not an end-point
    /// of the stream; [`TbonError::DeadBackEnd`] for one that died.
    pub fn send_to(
        &mut self,
        s: &Stream,
        dests: &[Rank],
        tag: i32,
        format: &str,
        values: impl Pack,
    ) -> Result<(), TbonError> {
        self.front_end("send_to")?;
        check_tag(tag)?;
        {
            let n = self.node.borrow();
            let st = n.streams.get(&s.id).ok_or(TbonError::NoStream(s.id))?;
            if let Some(d) = dests
                .iter()
                .find(|d| st.endpoints.binary_search(d).is_err())
            {
                if n.recovery.dead().contains(d) {
                    return Err(TbonError::DeadBackEnd(*d));
                }
                return Err(TbonError::BadRank(format!(
                    "rank {d} is not an end-point of stream {}",
                    s.id
                )));
            }
        }
        if dests.is_empty() {
            return Ok(());
        }
        let p = self.packet(s.id, tag, format, &values)?;
        self.send_packet(s, p, dests)
    }

    /// Send a packet the program made (its tag is checked, its stream set to `s`).
    ///
    /// # Errors
    /// As [`send`](Network::send).
    pub fn send_packet(
        &mut self,
        s: &Stream,
        mut p: Packet,
        dests: &[Rank],
    ) -> Result<(), TbonError> {
        check_tag(p.tag())?;
        p.set_stream_id(s.id);
        let role = self.role();
        let rank = self.rank().unwrap_or(Rank::MAX);
        p.set_src_rank(rank);
        {
            let mut n = self.node.borrow_mut();
            if n.shut_down {
                return Err(TbonError::ShutDown);
            }
            let single = match n.streams.get_mut(&s.id) {
                Some(st) if st.closed => return Err(TbonError::StreamClosed(s.id)),
                Some(st) if st.failed.is_some() => {
                    let rank = st.failed.unwrap_or(Rank::MAX);
                    return Err(TbonError::StreamFailed { stream: s.id, rank });
                }
                Some(st) if role == Role::BackEnd => {
                    st.perf.count(Context::Send, 1, p.data_len() as u64);
                    // A back-end's batch is one packet (failure recovery counts them).
                    st.up_sent += 1;
                    false
                }
                Some(_) => false,
                None if role == Role::FrontEnd && s.id < FIRST_USER_STREAM => true,
                None if role == Role::BackEnd && Some(s.id) == Some(rank) => false,
                None => return Err(TbonError::NoStream(s.id)),
            };
            // A singlecast stream is a back-end's rank (a search, only on those streams).
            if single && !n.is_backend(s.id) {
                return Err(TbonError::NoStream(s.id));
            }
        }
        match role {
            Role::FrontEnd => self.node.borrow_mut().fe_send(self.pe, s.id, p, dests),
            Role::BackEnd => {
                let parent = self
                    .node
                    .borrow()
                    .place
                    .as_ref()
                    .and_then(|pl| pl.parent_pe);
                if let Some(parent) = parent {
                    let up = self.node.borrow().h.up;
                    self.pe.send_msg(parent, up, p.into_message(&[]));
                }
            }
            Role::Internal | Role::Spare => {
                return Err(TbonError::Role {
                    call: "send",
                    role: "front-end and back-ends",
                })
            }
        }
        after_handler(&self.node);
        Ok(())
    }

    /// Send to one back-end on its singlecast stream (MRNet's `Network::send`).
    ///
    /// # Errors
    /// As [`send`](Network::send); [`TbonError::BadRank`] for a rank that is not a back-end;
    /// [`TbonError::DeadBackEnd`] for one that died.
    pub fn send_to_backend(
        &mut self,
        be: Rank,
        tag: i32,
        format: &str,
        values: impl Pack,
    ) -> Result<(), TbonError> {
        self.front_end("send_to_backend")?;
        if !self.node.borrow().is_backend(be) {
            return Err(TbonError::BadRank(format!("rank {be} is not a back-end")));
        }
        if self.node.borrow().recovery.dead().contains(&be) {
            return Err(TbonError::DeadBackEnd(be));
        }
        self.send(&Stream { id: be }, tag, format, values)
    }

    /// Pass everything sent so far to the interconnect. The overlay keeps no buffer of its
    /// own (each packet is one runtime message, handed to the layer when sent), so this only
    /// lets the layer push out what it still queues (one [`progress`](Network::progress),
    /// which also runs what has arrived meanwhile), and checks the stream.
    ///
    /// # Errors
    /// [`TbonError::StreamClosed`] for a closed stream.
    pub fn flush(&mut self, s: &Stream) -> Result<(), TbonError> {
        if self.is_closed(s) {
            return Err(TbonError::StreamClosed(s.id));
        }
        self.progress();
        Ok(())
    }

    // ----- receiving -----

    /// The next packet on stream `s`, waiting for it.
    ///
    /// # Errors
    /// [`TbonError::Filter`] when a filter failed on a wave of the stream (once per failure);
    /// [`TbonError::WaveLost`] for a wave that lost a part in a process that died (failure
    /// recovery: once, in the wave's place among the packets);
    /// [`TbonError::StreamFailed`] when a process the stream goes through died with failure
    /// recovery off;
    /// [`TbonError::StreamClosed`] when the stream is closed and nothing is left;
    /// on a back-end's singlecast stream (front-end), [`TbonError::DeadBackEnd`] once it died,
    /// or [`TbonError::StreamFailed`] once a process above it died with recovery off;
    /// [`TbonError::ShutDown`]; [`TbonError::JobEnded`].
    pub fn recv_on(&mut self, s: &Stream) -> Result<Packet, TbonError> {
        loop {
            if let Some(p) = self.try_recv_on(s)? {
                return Ok(p);
            }
            let id = s.id;
            let singlecast = id < FIRST_USER_STREAM && self.role() == Role::FrontEnd;
            self.wait_for(|n| {
                n.inbox.has(id)
                    || n.failures.get(&id).is_some_and(|f| !f.is_empty())
                    || n.streams
                        .get(&id)
                        .is_some_and(|st| st.closed || st.failed.is_some())
                    || n.shut_down
                    || (singlecast && n.singlecast_cut(id).is_some())
            })?;
        }
    }

    /// The next packet on stream `s` if one is there.
    ///
    /// # Errors
    /// As [`recv_on`](Network::recv_on).
    pub fn try_recv_on(&mut self, s: &Stream) -> Result<Option<Packet>, TbonError> {
        let front_end = self.role() == Role::FrontEnd;
        let mut n = self.node.borrow_mut();
        if let Some(e) = n.failures.get_mut(&s.id).and_then(|f| f.pop_front()) {
            return Err(e);
        }
        if let Some(p) = n.inbox.pop(s.id) {
            if let Some(e) = lost_wave(s.id, &p) {
                return Err(e);
            }
            return Ok(Some(p));
        }
        match n.streams.get(&s.id) {
            Some(st) if st.closed => return Err(TbonError::StreamClosed(s.id)),
            Some(st) => {
                if let Some(rank) = st.failed {
                    return Err(TbonError::StreamFailed { stream: s.id, rank });
                }
            }
            // A back-end's singlecast stream, on the front-end: it keeps no state, but its
            // back-end (or, recovery off, a process above it) may be dead.
            None if front_end && s.id < FIRST_USER_STREAM => {
                if let Some(e) = n.singlecast_cut(s.id) {
                    return Err(e);
                }
            }
            None => {}
        }
        if n.shut_down {
            return Err(TbonError::ShutDown);
        }
        Ok(None)
    }

    /// The next packet on any stream, and its stream, waiting for it. A back-end learns of
    /// streams this way: from their first packet.
    ///
    /// # Errors
    /// [`TbonError::WaveLost`] (front-end, failure recovery) for a wave that lost a part in
    /// a process that died; a stream's failure, as [`recv_on`](Network::recv_on) gives it
    /// (a filter's, [`TbonError::StreamFailed`]); [`TbonError::StreamClosed`] or
    /// [`TbonError::StreamFailed`] once for each stream that ended with nothing left on it;
    /// [`TbonError::ShutDown`] when the network is shut down and nothing is left, or (failure
    /// recovery off) this process is cut off from the front-end by a death above it;
    /// [`TbonError::JobEnded`].
    pub fn recv(&mut self) -> Result<(Stream, Packet), TbonError> {
        loop {
            if let Some(x) = self.try_recv()? {
                return Ok(x);
            }
            let front_end = self.role() == Role::FrontEnd;
            self.wait_for(|n| {
                n.inbox.has_any()
                    || n.shut_down
                    || (front_end
                        && (n.failures.values().any(|f| !f.is_empty()) || n.untold_end().is_some()))
            })?;
        }
    }

    /// The next packet on any stream if one is there.
    ///
    /// # Errors
    /// As [`recv`](Network::recv).
    pub fn try_recv(&mut self) -> Result<Option<(Stream, Packet)>, TbonError> {
        let front_end = self.role() == Role::FrontEnd;
        let mut n = self.node.borrow_mut();
        if let Some((id, p)) = n.inbox.pop_any() {
            if let Some(e) = lost_wave(id, &p) {
                return Err(e);
            }
            return Ok(Some((Stream { id }, p)));
        }
        // Front-end: a failure of any stream (a filter's, or a process's with recovery off),
        // then a stream that ended (closed, failed) that this receive has not reported:
        // nothing more comes on it, and a program waiting on any stream must learn it. (A
        // back-end learns of streams from their packets, and of the end from the shutdown.)
        if front_end {
            if let Some(e) = n.failures.values_mut().find_map(VecDeque::pop_front) {
                if let TbonError::StreamFailed { stream, .. } = e {
                    n.told_any.insert(stream);
                }
                return Err(e);
            }
            if let Some((id, e)) = n.untold_end() {
                n.told_any.insert(id);
                return Err(e);
            }
        }
        if n.shut_down {
            return Err(TbonError::ShutDown);
        }
        Ok(None)
    }

    /// Take in and run whatever has arrived, without waiting: for programs that poll with the
    /// non-blocking receives (or watch a notification descriptor) from a loop of their own.
    /// Returns how many messages it handled.
    pub fn progress(&mut self) -> usize {
        let n = self.pe.progress();
        after_handler(&self.node);
        self.refresh_topology();
        n
    }

    // ----- requests -----

    fn request(&mut self, scope: Option<u32>, what: Req) -> Result<Outcome, TbonError> {
        let req = {
            let mut n = self.node.borrow_mut();
            let r = n.next_req;
            n.next_req += 1;
            r
        };
        self.node.borrow_mut().on_request(self.pe, req, scope, what);
        after_handler(&self.node);
        self.wait_for(|n| n.outcomes.contains_key(&req))?;
        self.node
            .borrow_mut()
            .outcomes
            .remove(&req)
            .ok_or(TbonError::JobEnded)
    }

    // ----- shutdown -----

    /// Shut the network down (front-end): every process learns it and acknowledges, back-ends
    /// waiting in [`wait_for_shutdown`](Network::wait_for_shutdown) or a receive return. The
    /// job itself goes on; [`exit`](Network::exit) ends it too.
    ///
    /// # Errors
    /// [`TbonError::Role`] off the front-end; [`TbonError::JobEnded`].
    pub fn shutdown(&mut self) -> Result<(), TbonError> {
        self.front_end("shutdown")?;
        if self.node.borrow().shut_down {
            return Ok(());
        }
        self.request(None, Req::Shutdown).map(|_| ())
    }

    /// Shut the network down, then end the job with `code`.
    pub fn exit(mut self, code: i32) {
        let _ = self.shutdown();
        self.pe.exit(code);
    }

    /// Wait until the front-end shuts the network down (back-ends and internal processes).
    ///
    /// # Errors
    /// [`TbonError::JobEnded`] when the job ends first.
    pub fn wait_for_shutdown(&mut self) -> Result<(), TbonError> {
        self.wait_for(|n| n.shut_down)
    }

    /// Whether the front-end has shut the network down.
    pub fn is_shut_down(&self) -> bool {
        self.node.borrow().shut_down
    }

    /// Packets this process dropped: ones that did not decode, or came for a stream that was
    /// closed or unknown here.
    pub fn refused(&self) -> u64 {
        self.node.borrow().refused
    }
}

impl Drop for Network<'_> {
    /// The front-end shuts the network down if the program has not (so back-ends waiting for
    /// it do not wait forever); not while unwinding, where running the scheduler could hang.
    fn drop(&mut self) {
        if self.role() == Role::FrontEnd && !std::thread::panicking() {
            let _ = self.shutdown();
        }
    }
}

fn summarize(errors: &[(Rank, String)]) -> String {
    let mut msgs: Vec<(String, Vec<Rank>)> = Vec::new();
    for (r, e) in errors {
        match msgs.iter_mut().find(|(m, _)| m == e) {
            Some((_, ranks)) => ranks.push(*r),
            None => msgs.push((e.clone(), vec![*r])),
        }
    }
    msgs.iter()
        .map(|(m, ranks)| {
            let shown: Vec<String> = ranks.iter().take(4).map(Rank::to_string).collect();
            let more = if ranks.len() > 4 {
                format!(" and {} more", ranks.len() - 4)
            } else {
                String::new()
            };
            format!("{m} (at rank {}{more})", shown.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}
