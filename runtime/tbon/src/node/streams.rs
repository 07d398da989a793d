//! Streams on one process: made from their spec (which children lead to their end-points),
//! closed, and given filter parameters, each passed on down to the children concerned.

use super::{Node, Role, StreamState};
use crate::events::EventKind;
use crate::filter::TFILTER_NULL;
use crate::packet::Packet;
use crate::perf::Counters;
use crate::protocol::Ctl;
use crate::stream::{FilterType, StreamSpec};
use crate::sync::{SyncMode, Synchronizer};
use crate::topology::Rank;
use converse::{Message, Pe};
use std::rc::Rc;
use std::time::Duration;

impl Node {
    /// The state of a stream on this process, made from its spec.
    pub(super) fn make_stream(
        &mut self,
        endpoints: Rc<[Rank]>,
        spec: &StreamSpec,
    ) -> Result<StreamState, String> {
        let (rank, kids, slot_rank, internal_kid) = {
            let place = self.place.as_ref().ok_or("no plan yet")?;
            let kids = place
                .children
                .iter()
                .enumerate()
                .filter(|(_, c)| c.be.meets(&endpoints))
                .map(|(i, _)| i)
                .collect::<Vec<_>>();
            let slot_rank: Vec<Rank> = kids.iter().map(|&k| place.children[k].rank).collect();
            let internal_kid = slot_rank.iter().any(|&r| is_internal(r));
            (place.info.rank, kids, slot_rank, internal_kid)
        };
        let (up_id, down_id) = (spec.up.get(rank), spec.down.get(rank));
        let up = self
            .filter(up_id)
            .ok_or_else(|| format!("filter {up_id} is not loaded here"))?;
        let down = self
            .filter(down_id)
            .ok_or_else(|| format!("filter {down_id} is not loaded here"))?;
        let sync_id = spec.sync.get(rank);
        let (mode, sync_filter) = match SyncMode::from_id(sync_id) {
            Some(mode) => (mode, None),
            None if sync_id >= crate::filter::FIRST_USER_FILTER => {
                let f = self.filter(sync_id).ok_or_else(|| {
                    format!("synchronization filter {sync_id} is not loaded here")
                })?;
                (SyncMode::DontWait, Some(f))
            }
            None => return Err(format!("{sync_id} is not a synchronization mode")),
        };
        let sync = Synchronizer::new(mode, kids.len());
        Ok(StreamState {
            endpoints,
            spec: spec.clone(),
            params: Vec::new(),
            failed: None,
            slots: (0..kids.len()).collect(),
            slot_rank,
            kids,
            down_seq: 0,
            down_seen: 0,
            up_sent: 0,
            window: std::collections::VecDeque::new(),
            window_bytes: 0,
            internal_kid,
            up,
            up_id,
            down,
            down_id,
            sync,
            sync_filter,
            sync_state: None,
            sync_params: None,
            up_state: None,
            down_state: None,
            up_params: None,
            down_params: None,
            perf: Counters::default(),
            closed: false,
            timer: false,
            pending_states: Vec::new(),
        })
    }

    /// Make stream `id` here and pass its creation on to the children taking part.
    pub(crate) fn open_stream(
        &mut self,
        pe: &mut Pe,
        id: u32,
        endpoints: Vec<Rank>,
        spec: StreamSpec,
    ) {
        let endpoints: Rc<[Rank]> = endpoints.into();
        let st = match self.make_stream(endpoints.clone(), &spec) {
            Ok(st) => st,
            Err(why) => {
                // Nothing of this stream will work here; the front-end hears why.
                let null =
                    StreamSpec::homogeneous(TFILTER_NULL, SyncMode::WaitForAll, TFILTER_NULL);
                self.report_error(pe, id, why, EventKind::FilterLoadFailed);
                match self.make_stream(endpoints.clone(), &null) {
                    Ok(st) => st,
                    Err(_) => return,
                }
            }
        };
        let ctl = Ctl::NewStream {
            id,
            endpoints: endpoints.to_vec(),
            spec,
        }
        .encode();
        self.to_kids(pe, &st.kids, &ctl);
        tracing::debug!(target: "tbon", stream = id, endpoints = endpoints.len(), "stream open");
        self.streams.insert(id, st);
    }

    /// Send a control message to some children (indices into the place's children).
    pub(super) fn to_kids(&self, pe: &mut Pe, kids: &[usize], body: &[u8]) {
        let Some(place) = &self.place else { return };
        for &k in kids {
            let c = &place.children[k];
            if c.ext.is_some() {
                let msg = Message::from_payload(body);
                super::attached::send_to(pe, &self.h, &self.attach, c.to(), self.h.ctl, msg);
            } else {
                pe.send(c.pe, self.h.ctl, body);
            }
        }
    }

    pub(super) fn close_stream(&mut self, pe: &mut Pe, id: u32) {
        let role = self.role();
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        if st.closed {
            return;
        }
        st.closed = true;
        // Closed by the program: not news for its any-stream receive.
        self.told_any.insert(id);
        // Packets held for a wave are for nobody now.
        let mut held = Vec::new();
        st.sync.drain(&mut held);
        st.up.clone().drop_state(&mut st.up_state);
        st.down.clone().drop_state(&mut st.down_state);
        let kids = st.kids.clone();
        self.to_kids(pe, &kids, &Ctl::Close { id }.encode());
        if role == Role::Internal {
            // The front-end and back-ends keep theirs: the program may still ask about it.
            // (Its filters' state was freed above; dropping it frees nothing twice.)
            self.streams.remove(&id);
        }
    }

    pub(super) fn set_params(&mut self, pe: &mut Pe, id: u32, which: FilterType, bytes: Vec<u8>) {
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        let kids = st.kids.clone();
        match Packet::from_wire(&bytes) {
            Ok(p) => match which {
                FilterType::UpstreamSync if st.sync_filter.is_some() => st.sync_params = Some(p),
                FilterType::UpstreamSync => {
                    let ms = timeout_ms(&p);
                    st.sync.set_timeout(Duration::from_millis(ms));
                }
                FilterType::UpstreamTrans => st.up_params = Some(p),
                FilterType::DownstreamTrans => st.down_params = Some(p),
            },
            Err(e) => {
                let why = format!("filter parameters for stream {id}: {e}");
                self.refuse(pe, Some(id), why);
                return;
            }
        }
        if let Some(st) = self.streams.get_mut(&id) {
            // The last of each kind is what holds.
            st.params.retain(|(w, _)| *w != which);
            st.params.push((which, bytes.clone()));
        }
        let ctl = Ctl::Params {
            id,
            which,
            packet: bytes,
        }
        .encode();
        self.to_kids(pe, &kids, &ctl);
    }
}

/// Whether rank `r` is an internal process's (back-ends are ranked from 0, internal
/// processes from [`FIRST_INTERNAL_RANK`](crate::topology::FIRST_INTERNAL_RANK)).
pub(super) fn is_internal(r: Rank) -> bool {
    r >= crate::topology::FIRST_INTERNAL_RANK
}

/// The timeout a synchronization-parameters packet gives, in milliseconds (any one integer).
fn timeout_ms(p: &Packet) -> u64 {
    match p.values().first().and_then(crate::value::Value::as_f64) {
        Some(v) if v > 0.0 => v as u64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::BeSet;

    #[test]
    fn a_set_of_backends_meets_sorted_endpoints() {
        let eps = [1, 4, 9];
        let r = |x: std::ops::Range<Rank>| BeSet::Range(x);
        assert!(r(0..2).meets(&eps));
        assert!(!r(2..4).meets(&eps));
        assert!(r(2..5).meets(&eps));
        assert!(!r(10..20).meets(&eps));
        assert!(!r(0..5).meets(&[]));
        let x = BeSet::Exact(vec![2, 3, 900].into());
        assert!(!x.meets(&eps));
        assert!(x.meets(&[0, 900]));
        assert!(x.contains(&3) && !x.contains(&4));
    }
}
