//! The front-end's communicators and streams: making them (with their filters and
//! synchronization), finding them, closing them.

use super::Network;
use crate::communicator::Communicator;
use crate::error::TbonError;
use crate::filter::FilterId;
use crate::node::{after_handler, Role};
use crate::protocol::Ctl;
use crate::stream::{Stream, StreamSpec};
use crate::sync::SyncMode;
use crate::topology::Rank;

impl<'p> Network<'p> {
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
        let mut c = Communicator::new(self.node.borrow().backend_ranks());
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
    /// [`TbonError::Role`] off the front-end; [`TbonError::NoFilter`] for a filter not loaded;
    /// [`TbonError::Usage`] for an empty communicator.
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

    /// A stream whose upstream synchronization is the program's own filter `sync` (MRNet's
    /// user-defined synchronization filters): a filter compiled in
    /// ([`Options::filter`](crate::Options::filter)) or loaded
    /// ([`load_filter`](Network::load_filter)), run on each packet as it comes up, which keeps
    /// what it holds in its state and gives the waves that `up` then sees (none yet: nothing
    /// goes up). Its parameters are set as a synchronization filter's
    /// ([`FilterType::UpstreamSync`](crate::FilterType::UpstreamSync)). Waves of such a
    /// stream are not lined up across a failure (the synchronizer does not wait, as with
    /// don't-wait).
    ///
    /// # Errors
    /// As [`new_stream`](Network::new_stream); [`TbonError::Usage`] when `sync` is not a
    /// filter of the program's.
    pub fn new_stream_sync(
        &mut self,
        comm: &Communicator,
        up: FilterId,
        sync: FilterId,
        down: FilterId,
    ) -> Result<Stream, TbonError> {
        let mut spec = StreamSpec::homogeneous(up, SyncMode::DontWait, down);
        spec.sync.default = sync;
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
        if comm.is_empty() {
            // Nothing would ever arrive on it: a receive would wait forever.
            return Err(TbonError::Usage(
                "a stream needs at least one end-point; the communicator is empty".into(),
            ));
        }
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
            let user = id >= crate::filter::FIRST_USER_FILTER
                && self.node.borrow_mut().filter(id).is_some();
            if SyncMode::from_id(id).is_none() && !user {
                return Err(TbonError::Usage(format!(
                    "{id} is not a synchronization mode (0 wait for all, 1 don't wait, 2                      timeout) nor a filter of the program's"
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
        // Back-ends known dead are no end-points (a communicator made before their death
        // may still name them).
        let endpoints: Vec<Rank> = {
            let n = self.node.borrow();
            let dead = n.recovery.dead();
            comm.endpoints()
                .iter()
                .copied()
                .filter(|r| !dead.contains(r))
                .collect()
        };
        if endpoints.is_empty() {
            return Err(TbonError::Usage(
                "every end-point of the communicator has died".into(),
            ));
        }
        self.node
            .borrow_mut()
            .open_stream(self.pe, id, endpoints, spec);
        self.node.borrow_mut().fail_if_through_dead();
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
}
