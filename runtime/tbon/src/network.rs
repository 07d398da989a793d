//! The program's side of the overlay: a [`Network`] on each PE, with the front-end's calls
//! (communicators, streams, sending, filters, performance data, shutdown) and the back-ends'
//! (receiving, sending up, waiting for shutdown).
//!
//! Every call that waits runs the PE's scheduler until its condition holds (a packet is there,
//! every process has acknowledged, the network is shut down) or the job ends: the PE keeps
//! serving its part of the tree meanwhile, and nothing waits without a condition.

use crate::codec::Pack;
use crate::communicator::Communicator;
use crate::error::{check_tag, TbonError};
use crate::events::{CallbackId, Event, EventClass, EventKind};
use crate::filter::{Filter, FilterId, TopologyLocalInfo, FIRST_USER_FILTER};
use crate::mapping::{map_to_pes, MapPolicy};
use crate::node::{after_handler, install, Node, Outcome, Role};
use crate::packet::Packet;
use crate::perf::{check_pair, Aggregate, Context, Metric, RankPerfData};
use crate::protocol::{Ctl, Req};
use crate::stream::{builtin_named, FilterType, Stream, StreamSpec, FIRST_USER_STREAM};
use crate::sync::SyncMode;
use crate::topology::{Rank, Topology};
use converse::Pe;
use std::cell::RefCell;
use std::os::fd::RawFd;
use std::rc::Rc;

/// How a network is laid over a job.
#[derive(Default)]
pub struct Options {
    policy: MapPolicy,
    filters: Vec<(String, Rc<dyn Filter>)>,
}

impl Options {
    /// How tree processes are matched with PEs (by host, the default, or in order).
    pub fn policy(mut self, p: MapPolicy) -> Options {
        self.policy = p;
        self
    }

    /// A filter compiled into the program, under `name`. Every process must register the same
    /// filters in the same order (they get ids from [`FIRST_USER_FILTER`] up, in that order);
    /// for filters only some programs have, load them from a library instead
    /// ([`Network::load_filter`]).
    pub fn filter(mut self, name: &str, f: impl Filter + 'static) -> Options {
        self.filters.push((name.to_owned(), Rc::new(f)));
        self
    }
}

/// The overlay as one PE sees it. See the [module documentation](super) for an example.
pub struct Network<'p> {
    pe: &'p mut Pe,
    node: Rc<RefCell<Node>>,
    /// The tree, once known (every PE has it after `attach`).
    topo: Option<Rc<Topology>>,
    /// The last format string sent and its parse: a program sends the same few formats over
    /// and over, and parsing allocates.
    last_format: Option<(String, crate::format::Format)>,
}

/// Lay a tree over the job this PE belongs to (MRNet's back-end attach mode: the processes are
/// already running, started by charmrun, mpirun or the in-process layer).
///
/// Every PE calls it in its start function, after registering its own handlers (which must be
/// the same on every PE, as always). On PE 0, the front-end, `topology` gives the tree; PE 0
/// maps it onto the PEs, tells every PE its place and waits until every process of the tree
/// has reported in (the instantiation). Other PEs wait for their place. PEs the tree does not
/// use get the role [`Role::Spare`].
///
/// ```no_run
/// use converse_tbon::{self as tbon, topgen, Options, SyncMode, TFILTER_SUM};
/// converse::run(|pe| {
///     let n = pe.num_pes();
///     let mut net = tbon::attach(pe, Options::default(), |_| {
///         let spec = topgen::TreeSpec::Generic(vec![2, (n - 3) / 2]);
///         Ok(topgen::generate(&spec, &topgen::Placement::default())?)
///     })
///     .expect("attach");
///     if net.is_front_end() {
///         let comm = net.broadcast_communicator();
///         let s = net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, 0).unwrap();
///         net.send(&s, 100, "%d", 1).unwrap();
///         let sum: i32 = net.recv_on(&s).unwrap().unpack("%d").unwrap();
///         println!("{sum} back-ends answered");
///         net.exit(0);
///     } else if net.is_back_end() {
///         let (s, p) = net.recv().unwrap();
///         let v: i32 = p.unpack("%d").unwrap();
///         net.send(&s, 100, "%d", v).unwrap();
///         let _ = net.wait_for_shutdown();
///     } else {
///         let _ = net.wait_for_shutdown();
///     }
/// });
/// ```
///
/// # Errors
/// [`TbonError::Topology`] or [`TbonError::Mapping`] on PE 0 when the tree is wrong or does not
/// fit; on other PEs [`TbonError::Create`] with PE 0's reason; [`TbonError::AlreadyAttached`];
/// [`TbonError::JobEnded`].
pub fn attach<'p>(
    pe: &'p mut Pe,
    opts: Options,
    topology: impl FnOnce(&Pe) -> Result<Topology, TbonError>,
) -> Result<Network<'p>, TbonError> {
    let node = install(pe)?;
    {
        let mut n = node.borrow_mut();
        for (name, f) in opts.filters {
            let id = n.next_filter;
            n.filters.insert(id, (name, f));
            n.next_filter += 1;
        }
    }
    let ctl = node.borrow().h.ctl;
    let mut net = Network {
        pe,
        node,
        topo: None,
        last_format: None,
    };
    if net.pe.my_pe() == 0 {
        let plan = topology(net.pe).and_then(|t| {
            let hosts = pe_hosts(net.pe);
            let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
            let pes = map_to_pes(&t, &host_refs, opts.policy)?;
            let tree = t
                .nodes()
                .iter()
                .map(|n| (n.name().clone(), n.parent()))
                .collect();
            Ok(Ctl::Plan { tree, pes })
        });
        match plan {
            // The front-end takes the plan first; it goes down the tree from there.
            Ok(plan) => net.pe.send(0, ctl, &plan.encode()),
            Err(e) => {
                let reason = Ctl::Abandon {
                    reason: e.to_string(),
                };
                net.pe.broadcast(ctl, &reason.encode());
                return Err(e);
            }
        }
        net.wait_for(|n| n.ready || n.abandoned.is_some())?;
    } else {
        net.wait_for(|n| n.place.is_some() || n.abandoned.is_some())?;
    }
    let abandoned = net.node.borrow().abandoned.clone();
    if let Some(reason) = abandoned {
        return Err(TbonError::Create(reason));
    }
    net.topo = net.node.borrow().place.as_ref().map(|p| p.topo.clone());
    Ok(net)
}

/// The host of every PE (one PE per node).
fn pe_hosts(pe: &Pe) -> Vec<String> {
    let t = pe.node_table();
    (0..pe.num_pes())
        .map(|p| {
            t.node(t.node_of(p))
                .map_or_else(|| "localhost".to_owned(), |n| n.host.clone())
        })
        .collect()
}

impl<'p> Network<'p> {
    /// Run the scheduler until `cond` holds of the node.
    fn wait_for(&mut self, mut cond: impl FnMut(&Node) -> bool) -> Result<(), TbonError> {
        let node = self.node.clone();
        if cond(&node.borrow()) {
            return Ok(());
        }
        if self.pe.run_until(|_| cond(&node.borrow())) {
            Ok(())
        } else {
            Err(TbonError::JobEnded)
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
        if self.last_format.as_ref().is_none_or(|(s, _)| s != format) {
            let f =
                crate::format::Format::parse(format).map_err(crate::packet::PacketError::from)?;
            self.last_format = Some((format.to_owned(), f));
        }
        match &self.last_format {
            Some((_, f)) => Ok(Packet::with_format(id, tag, f, values)?),
            None => Err(TbonError::Usage("no format".into())),
        }
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
    /// heights, statistics, and writing it out as a topology file or DOT graph.
    pub fn topology(&self) -> &Topology {
        // Set by `attach` before it returns a network.
        match &self.topo {
            Some(t) => t,
            None => unreachable!("a Network exists only once its plan has come"),
        }
    }

    /// The PE that runs the process of rank `rank`.
    pub fn pe_of(&self, rank: Rank) -> Option<usize> {
        let n = self.node.borrow();
        let place = n.place.as_ref()?;
        place.topo.find_rank(rank).map(|i| place.pes[i])
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

    // ----- communicators and streams -----

    /// Every back-end.
    pub fn broadcast_communicator(&self) -> Communicator {
        self.node.borrow().all_backends()
    }

    /// A communicator of the back-ends `ranks`.
    ///
    /// # Errors
    /// [`TbonError::BadRank`] for a rank that is not a back-end.
    pub fn new_communicator(
        &self,
        ranks: impl IntoIterator<Item = Rank>,
    ) -> Result<Communicator, TbonError> {
        let mut c = Communicator::new(self.topology().num_backends());
        for r in ranks {
            c.add_endpoint(r)?;
        }
        Ok(c)
    }

    /// A stream over `comm` with the same filters on every process (MRNet's homogeneous
    /// `new_Stream`): `up` transforms waves going up, `sync` makes them, `down` transforms
    /// packets going down.
    ///
    /// # Errors
    /// [`TbonError::Role`] off the front-end; [`TbonError::NoFilter`] for a filter not loaded.
    pub fn new_stream(
        &mut self,
        comm: &Communicator,
        up: FilterId,
        sync: SyncMode,
        down: FilterId,
    ) -> Result<Stream, TbonError> {
        self.new_stream_with(comm, StreamSpec::homogeneous(up, sync, down))
    }

    /// A stream over `comm` with filters placed per rank (MRNet's heterogeneous `new_Stream`):
    /// each string is `"filter => rank; ..."`, `*` standing for every rank not named, filters by
    /// id or name (`sum`, a loaded filter's name), sync modes `waitforall`, `dontwait`,
    /// `timeout`.
    ///
    /// # Errors
    /// As [`new_stream`](Network::new_stream); [`TbonError::Placement`] for a string that does
    /// not parse; [`TbonError::BadRank`] for a rank not in the tree.
    pub fn new_stream_placed(
        &mut self,
        comm: &Communicator,
        up: &str,
        sync: &str,
        down: &str,
    ) -> Result<Stream, TbonError> {
        let named = |name: &str| self.filter_id(name);
        let spec = StreamSpec::heterogeneous(up, sync, down, &named)?;
        self.new_stream_with(comm, spec)
    }

    /// A stream over `comm` with the filters of `spec`.
    ///
    /// # Errors
    /// As [`new_stream_placed`](Network::new_stream_placed).
    pub fn new_stream_with(
        &mut self,
        comm: &Communicator,
        spec: StreamSpec,
    ) -> Result<Stream, TbonError> {
        self.front_end("new_stream")?;
        let topo = self.topology();
        for a in [&spec.up, &spec.down] {
            for id in std::iter::once(a.default).chain(a.ranks.iter().map(|x| x.1)) {
                if self.node.borrow_mut().filter(id).is_none() {
                    return Err(TbonError::NoFilter(id));
                }
            }
        }
        for (r, id) in spec
            .sync
            .ranks
            .iter()
            .copied()
            .chain([(0, spec.sync.default)])
        {
            if SyncMode::from_id(id).is_none() {
                return Err(TbonError::Usage(format!(
                    "{id} is not a synchronization mode (0 wait for all, 1 don't wait, 2 timeout)"
                )));
            }
            let _ = r;
        }
        for a in [&spec.up, &spec.sync, &spec.down] {
            if let Some((r, _)) = a.ranks.iter().find(|(r, _)| topo.find_rank(*r).is_none()) {
                return Err(TbonError::BadRank(format!(
                    "a filter is placed at rank {r}, which is not in the tree"
                )));
            }
        }
        let id = {
            let mut n = self.node.borrow_mut();
            let id = n.next_stream;
            n.next_stream += 1;
            id
        };
        self.node
            .borrow_mut()
            .open_stream(self.pe, id, comm.endpoints().to_vec(), spec);
        after_handler(&self.node);
        Ok(Stream { id })
    }

    /// The stream with id `id`, if this process knows it. A back-end may pass its own rank for
    /// its singlecast stream (unfiltered, to and from the front-end).
    pub fn stream(&mut self, id: u32) -> Option<Stream> {
        let mut n = self.node.borrow_mut();
        if n.streams.contains_key(&id) {
            return Some(Stream { id });
        }
        let mine = n.place.as_ref().map(|p| p.info.rank);
        if n.role() == Role::BackEnd && mine == Some(id) {
            n.open_singlecast(id);
            return Some(Stream { id });
        }
        None
    }

    /// The end-points of a stream.
    pub fn endpoints(&self, s: &Stream) -> Vec<Rank> {
        self.node
            .borrow()
            .streams
            .get(&s.id)
            .map_or_else(|| vec![s.id], |st| st.endpoints.to_vec())
    }

    /// Whether the front-end closed the stream.
    pub fn is_closed(&self, s: &Stream) -> bool {
        self.node
            .borrow()
            .streams
            .get(&s.id)
            .is_some_and(|st| st.closed)
    }

    /// Close a stream (front-end): back-ends see it closed; packets still on their way up are
    /// dropped; what the front-end received before stays to be read.
    ///
    /// # Errors
    /// [`TbonError::Role`] off the front-end, [`TbonError::NoStream`].
    pub fn close(&mut self, s: &Stream) -> Result<(), TbonError> {
        self.front_end("close")?;
        if !self.node.borrow().streams.contains_key(&s.id) {
            return Err(TbonError::NoStream(s.id));
        }
        let body = Ctl::Close { id: s.id }.encode();
        // The front-end runs the close itself as a control message: one code path for all.
        let mut msg = converse::Message::from_payload(&body);
        msg.set_src_pe(self.pe.my_pe() as u32);
        self.node.borrow_mut().on_ctl(self.pe, &msg);
        after_handler(&self.node);
        Ok(())
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
    /// of the stream.
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
            // Counted, not built: this runs on every send.
            let num_backends = n.num_backends();
            match n.streams.get_mut(&s.id) {
                Some(st) if st.closed => return Err(TbonError::StreamClosed(s.id)),
                Some(st) if role == Role::BackEnd => {
                    st.perf.count(Context::Send, 1, p.data_len() as u64)
                }
                Some(_) => {}
                None if role == Role::FrontEnd
                    && s.id < FIRST_USER_STREAM
                    && (s.id as usize) < num_backends => {}
                None if role == Role::BackEnd && Some(s.id) == Some(rank) => {}
                None => return Err(TbonError::NoStream(s.id)),
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
    /// As [`send`](Network::send); [`TbonError::BadRank`] for a rank that is not a back-end.
    pub fn send_to_backend(
        &mut self,
        be: Rank,
        tag: i32,
        format: &str,
        values: impl Pack,
    ) -> Result<(), TbonError> {
        self.front_end("send_to_backend")?;
        if be as usize >= self.topology().num_backends() {
            return Err(TbonError::BadRank(format!("rank {be} is not a back-end")));
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
    /// [`TbonError::StreamClosed`] when the stream is closed and nothing is left;
    /// [`TbonError::ShutDown`]; [`TbonError::JobEnded`].
    pub fn recv_on(&mut self, s: &Stream) -> Result<Packet, TbonError> {
        loop {
            if let Some(p) = self.try_recv_on(s)? {
                return Ok(p);
            }
            let id = s.id;
            self.wait_for(|n| {
                n.inbox.has(id)
                    || n.failures.get(&id).is_some_and(|f| !f.is_empty())
                    || n.streams.get(&id).is_some_and(|st| st.closed)
                    || n.shut_down
            })?;
        }
    }

    /// The next packet on stream `s` if one is there.
    ///
    /// # Errors
    /// As [`recv_on`](Network::recv_on).
    pub fn try_recv_on(&mut self, s: &Stream) -> Result<Option<Packet>, TbonError> {
        let mut n = self.node.borrow_mut();
        if let Some(e) = n.failures.get_mut(&s.id).and_then(|f| f.pop_front()) {
            return Err(e);
        }
        if let Some(p) = n.inbox.pop(s.id) {
            return Ok(Some(p));
        }
        if n.streams.get(&s.id).is_some_and(|st| st.closed) {
            return Err(TbonError::StreamClosed(s.id));
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
    /// [`TbonError::ShutDown`] when the network is shut down and nothing is left;
    /// [`TbonError::JobEnded`].
    pub fn recv(&mut self) -> Result<(Stream, Packet), TbonError> {
        loop {
            if let Some(x) = self.try_recv()? {
                return Ok(x);
            }
            self.wait_for(|n| n.inbox.has_any() || n.shut_down)?;
        }
    }

    /// The next packet on any stream if one is there.
    ///
    /// # Errors
    /// As [`recv`](Network::recv).
    pub fn try_recv(&mut self) -> Result<Option<(Stream, Packet)>, TbonError> {
        let mut n = self.node.borrow_mut();
        if let Some((id, p)) = n.inbox.pop_any() {
            return Ok(Some((Stream { id }, p)));
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
        n
    }

    // ----- filters -----

    /// Load filter `name` from the shared library `path` on every process of the network
    /// (MRNet's `load_FilterFunc`), and wait until all have it.
    ///
    /// # Errors
    /// [`TbonError::Load`] naming the processes where the library, the function or its
    /// `name_format_string` could not be found; [`TbonError::Role`] off the front-end.
    pub fn load_filter(&mut self, path: &str, name: &str) -> Result<FilterId, TbonError> {
        self.front_end("load_filter")?;
        let id = {
            let mut n = self.node.borrow_mut();
            let id = n.next_filter;
            n.next_filter += 1;
            id
        };
        let out = self.request(
            None,
            Req::Load {
                id,
                path: path.to_owned(),
                name: name.to_owned(),
            },
        )?;
        if out.errors.is_empty() {
            return Ok(id);
        }
        self.node.borrow_mut().filters.remove(&id);
        Err(TbonError::Load(summarize(&out.errors)))
    }

    /// Load several filters from one library; each result in the order of `names`.
    pub fn load_filters(&mut self, path: &str, names: &[&str]) -> Vec<Result<FilterId, TbonError>> {
        names.iter().map(|n| self.load_filter(path, n)).collect()
    }

    /// The id of the filter called `name` (built in, registered or loaded).
    pub fn filter_id(&self, name: &str) -> Option<FilterId> {
        if let Some(id) = builtin_named(name) {
            return Some(id);
        }
        let n = self.node.borrow();
        n.filters
            .iter()
            .filter(|(id, _)| **id >= FIRST_USER_FILTER)
            .find(|(_, (nm, _))| nm == name)
            .map(|(id, _)| *id)
    }

    /// Set a stream filter's parameters, on every process of the stream: the timeout of the
    /// timeout synchronization filter (one integer, milliseconds), or the configuration packet a
    /// transformation filter gets.
    ///
    /// # Errors
    /// [`TbonError::Packet`] when the values do not match the format; [`TbonError::NoStream`];
    /// [`TbonError::Role`] off the front-end.
    pub fn set_filter_params(
        &mut self,
        s: &Stream,
        which: FilterType,
        format: &str,
        values: impl Pack,
    ) -> Result<(), TbonError> {
        self.front_end("set_filter_params")?;
        if !self.node.borrow().streams.contains_key(&s.id) {
            return Err(TbonError::NoStream(s.id));
        }
        let p = Packet::new(s.id, crate::error::FIRST_APPLICATION_TAG, format, values)?;
        let body = Ctl::Params {
            id: s.id,
            which,
            packet: p.wire().to_vec(),
        }
        .encode();
        let msg = converse::Message::from_payload(&body);
        self.node.borrow_mut().on_ctl(self.pe, &msg);
        after_handler(&self.node);
        Ok(())
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

    // ----- performance data -----

    fn perf_scope(&self, s: Option<&Stream>) -> Result<Option<u32>, TbonError> {
        self.front_end("performance data")?;
        match s {
            Some(s) if !self.node.borrow().streams.contains_key(&s.id) => {
                Err(TbonError::NoStream(s.id))
            }
            Some(s) => Ok(Some(s.id)),
            None => Ok(None),
        }
    }

    /// Start recording `metric` in `context` on a stream (`None`: every stream), everywhere.
    ///
    /// # Errors
    /// [`TbonError::PerfContext`] for a pair the guide's Table 2 does not allow.
    pub fn enable_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        context: Context,
    ) -> Result<(), TbonError> {
        self.set_perf(s, metric, context, true)
    }

    /// Stop recording (what was recorded stays, to be collected).
    ///
    /// # Errors
    /// As [`enable_perf`](Network::enable_perf).
    pub fn disable_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        context: Context,
    ) -> Result<(), TbonError> {
        self.set_perf(s, metric, context, false)
    }

    fn set_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        ctx: Context,
        on: bool,
    ) -> Result<(), TbonError> {
        check_pair(metric, ctx)?;
        let scope = self.perf_scope(s)?;
        self.request(scope, Req::PerfSet { metric, ctx, on })
            .map(|_| ())
    }

    /// Collect what a stream's processes recorded of `metric` in `context` (and reset it):
    /// each rank's value ([`Aggregate::Concat`]) or one aggregated value under the key
    /// `-(number of ranks)`.
    ///
    /// # Errors
    /// As [`enable_perf`](Network::enable_perf).
    pub fn collect_perf(
        &mut self,
        s: &Stream,
        metric: Metric,
        context: Context,
        how: Aggregate,
    ) -> Result<RankPerfData, TbonError> {
        check_pair(metric, context)?;
        let scope = self.perf_scope(Some(s))?;
        let out = self.request(
            scope,
            Req::PerfCollect {
                metric,
                ctx: context,
                how,
            },
        )?;
        Ok(out.report.finish(out.how))
    }

    /// Have every process of a stream (`None`: of every stream) print what it recorded of
    /// `metric` in `context` to its standard error, and reset it.
    ///
    /// # Errors
    /// As [`enable_perf`](Network::enable_perf).
    pub fn print_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        context: Context,
    ) -> Result<(), TbonError> {
        check_pair(metric, context)?;
        let scope = self.perf_scope(s)?;
        self.request(
            scope,
            Req::PerfPrint {
                metric,
                ctx: context,
            },
        )
        .map(|_| ())
    }

    // ----- events -----

    /// Make data events (one per packet delivered here) even without a data callback or
    /// descriptor, so that [`next_event`](Network::next_event) sees them.
    pub fn enable_data_events(&mut self, on: bool) {
        let mut n = self.node.borrow_mut();
        n.data_events = on;
        n.events.enable_data(on);
    }

    /// Events not read yet.
    pub fn num_events_pending(&self) -> usize {
        self.node.borrow().events.num_pending()
    }

    /// The oldest event not read yet.
    pub fn next_event(&mut self) -> Option<Event> {
        self.node.borrow_mut().events.next()
    }

    /// Events dropped because the queue was full (it keeps the newest).
    pub fn events_dropped(&self) -> u64 {
        self.node.borrow().events.dropped()
    }

    /// Forget every pending event.
    pub fn clear_events(&mut self) {
        self.node.borrow_mut().events.clear();
    }

    /// Call `f` on every event of `class` (and of `kind`, if given); once only if `onetime`
    /// (which needs a kind). Callbacks run on this PE after the handler that caused the event.
    ///
    /// # Errors
    /// [`TbonError::Usage`] for a kind of another class, or a one-time callback without a kind.
    pub fn register_event_callback(
        &mut self,
        class: EventClass,
        kind: Option<EventKind>,
        onetime: bool,
        f: impl FnMut(&Event) + 'static,
    ) -> Result<CallbackId, TbonError> {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.register(class, kind, onetime, Box::new(f), data)
    }

    /// Remove a callback; whether it was registered.
    pub fn remove_event_callback(&mut self, id: CallbackId) -> bool {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.remove(id, data)
    }

    /// Remove every callback of `class` (all: `None`) and `kind` (all: `None`).
    pub fn remove_event_callbacks(&mut self, class: Option<EventClass>, kind: Option<EventKind>) {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.remove_all(class, kind, data);
    }

    /// A file descriptor that becomes readable when an event of `class` happens, for `poll`
    /// or `select` (from another thread, say). Clear it with
    /// [`clear_event_fd`](Network::clear_event_fd) before acting on it.
    ///
    /// # Errors
    /// [`TbonError::Os`] when no descriptor can be made.
    pub fn event_fd(&mut self, class: EventClass) -> Result<RawFd, TbonError> {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.fd(class, data)
    }

    /// Make the descriptor of `class` unreadable until the next event.
    pub fn clear_event_fd(&mut self, class: EventClass) {
        self.node.borrow_mut().events.clear_fd(class);
    }

    /// A file descriptor that becomes readable when a packet for the program arrives on
    /// stream `s` (MRNet's `Stream::get_DataNotificationFd`); clear it with
    /// [`clear_stream_fd`](Network::clear_stream_fd) before acting on it.
    ///
    /// # Errors
    /// [`TbonError::Os`] when no descriptor can be made.
    pub fn stream_fd(&mut self, s: &Stream) -> Result<RawFd, TbonError> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        use std::os::fd::AsRawFd;
        let mut n = self.node.borrow_mut();
        if let Some(fd) = n.stream_fds.get(&s.id) {
            return Ok(fd.as_raw_fd());
        }
        let fd =
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| {
                TbonError::Os {
                    what: "eventfd",
                    reason: e.desc().into(),
                }
            })?;
        let raw = fd.as_raw_fd();
        n.stream_fds.insert(s.id, fd);
        Ok(raw)
    }

    /// Make stream `s`'s descriptor unreadable until its next packet.
    pub fn clear_stream_fd(&mut self, s: &Stream) {
        if let Some(fd) = self.node.borrow().stream_fds.get(&s.id) {
            // Non-blocking: a clear descriptor answers EAGAIN, which is fine.
            let _ = fd.read();
        }
    }

    /// Close stream `s`'s descriptor.
    pub fn close_stream_fd(&mut self, s: &Stream) {
        self.node.borrow_mut().stream_fds.remove(&s.id);
    }

    /// Close the descriptor of `class`.
    pub fn close_event_fd(&mut self, class: EventClass) {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.close_fd(class, data);
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
