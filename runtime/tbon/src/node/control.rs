//! Control: requests coming down the tree (see `protocol.rs`) are done on each process and
//! acknowledged; acknowledgements are folded on the way up, so the front-end learns when the
//! whole tree has done one, and which processes failed.

use super::{Node, Outcome, Pending, Role, StreamState};
use crate::events::EventKind;
use crate::filter::TFILTER_NULL;
use crate::perf::{Aggregate, Report};
use crate::protocol::{Ctl, Req};
use crate::stream::StreamSpec;
use crate::sync::SyncMode;
use crate::topology::Rank;
use converse::Message;
use converse::Pe;
use std::rc::Rc;

impl Node {
    pub(crate) fn on_ctl(&mut self, pe: &mut Pe, msg: &Message) {
        let Some(ctl) = Ctl::decode(msg.payload()) else {
            return self.refuse(
                pe,
                None,
                format!(
                    "a control message from PE {} that does not decode",
                    msg.src_pe()
                ),
            );
        };
        let src = msg.src_pe() as usize;
        let from_below = matches!(
            ctl,
            Ctl::Ack { .. }
                | Ctl::Error { .. }
                | Ctl::Adopted { .. }
                | Ctl::Reparented { .. }
                | Ctl::AttachPoint { .. }
                | Ctl::Attach { .. }
                | Ctl::Detached { .. }
                | Ctl::State { .. }
        );
        if from_below && self.held_back(src) {
            // An orphan adopted here before this process learned of the death.
            return self.recovery.hold(msg.clone(), super::Kind::Ctl);
        }
        match ctl {
            Ctl::Plan {
                tree,
                pes,
                attach,
                by_name,
            } => self.take_plan(pe, tree, pes, (attach, by_name), msg.payload()),
            Ctl::Abandon { reason } => {
                tracing::debug!(target: "tbon", "the front-end abandoned the network: {reason}");
                if self.place.is_some() && !self.shut_down {
                    // Placed before the front-end gave up: the network this process joined
                    // is never made, so its waits end as after a shutdown.
                    self.shut_down = true;
                    self.event(EventKind::ShutDown, None, None, reason.clone());
                }
                self.abandoned = Some(reason)
            }
            Ctl::Ready => {
                self.ready_from += 1;
                self.maybe_ready(pe);
            }
            Ctl::NewStream {
                id,
                endpoints,
                spec,
            } => {
                if self.streams.contains_key(&id) {
                    // Given again by a new parent after a failure: this process had it.
                } else if self.role() == Role::BackEnd {
                    let spec0 =
                        StreamSpec::homogeneous(TFILTER_NULL, SyncMode::DontWait, TFILTER_NULL);
                    if let Ok(st) = self.make_stream(endpoints.into(), &spec0) {
                        self.streams.insert(id, st);
                    }
                } else {
                    self.open_stream(pe, id, endpoints, spec);
                }
            }
            Ctl::Close { id } => self.close_stream(pe, id),
            Ctl::Params { id, which, packet } => self.set_params(pe, id, which, packet),
            Ctl::Request { req, scope, what } => self.on_request(pe, req, scope, what),
            Ctl::Ack {
                req,
                errors,
                report,
            } => self.on_ack(pe, src, req, errors, report),
            Ctl::Error {
                stream,
                rank,
                reason,
                kind,
            } => match self.place.as_ref().and_then(|p| p.parent_pe) {
                Some(parent) => pe.send(parent, self.h.ctl, msg.payload()),
                None => self.record_error(stream, rank, reason, kind),
            },
            Ctl::Adopted { rank, streams } => self.on_adopted(pe, rank, &streams),
            Ctl::Reparented { rank, parent } => self.on_reparented(pe, rank, parent, msg),
            Ctl::State { stream, packets } => self.on_state(pe, src, stream, packets),
            ctl @ (Ctl::AttachPoint { .. }
            | Ctl::Attach { .. }
            | Ctl::Attached { .. }
            | Ctl::Detached { .. }) => self.on_attach_ctl(pe, ctl, None),
        }
    }

    /// Do a request here, pass it to the children in scope, and acknowledge when they have.
    pub(crate) fn on_request(&mut self, pe: &mut Pe, req: u32, scope: Option<u32>, what: Req) {
        tracing::debug!(target: "tbon", req, ?scope, what = ?what, "request");
        let rank = self.my_rank();
        let mut errors = Vec::new();
        let mut report = Report::Nothing;
        let mut how = Aggregate::Concat;
        let mut kids: Vec<usize> = match scope {
            Some(sid) => self
                .streams
                .get(&sid)
                .map(|s| s.kids.clone())
                .unwrap_or_default(),
            None => (0..self.place.as_ref().map_or(0, |p| p.children.len())).collect(),
        };
        match &what {
            Req::Recovery { on } => {
                self.recovery.on = *on;
                if !*on {
                    // Nothing is kept for orphans any more.
                    for st in self.streams.values_mut() {
                        st.window.clear();
                        st.window_bytes = 0;
                    }
                }
            }
            Req::Load { id, path, name } => match crate::dynfilter::load(path, name) {
                Ok(f) => {
                    self.filters.insert(*id, (name.clone(), Rc::new(f)));
                }
                Err(e) => {
                    self.event(EventKind::FilterLoadFailed, None, Some(rank), e.clone());
                    errors.push((rank, e));
                }
            },
            Req::Shutdown => {
                self.shut_down = true;
                self.event(
                    EventKind::ShutDown,
                    None,
                    None,
                    "the front-end shut the network down".into(),
                );
            }
            Req::PerfSet { metric, ctx, on } => {
                for (_, st) in self.scoped(scope) {
                    st.perf.set(*metric, *ctx, *on);
                }
            }
            Req::PerfCollect {
                metric,
                ctx,
                how: h,
            } => {
                how = *h;
                if let Some(v) = self
                    .scoped(scope)
                    .next()
                    .map(|(_, st)| st.perf.take(*metric, *ctx))
                {
                    report = Report::one(rank, v, how);
                }
            }
            Req::PerfPrint { metric, ctx } => {
                let lines: Vec<String> = self
                    .scoped(scope)
                    .map(|(id, st)| {
                        format!(
                            "tbon: rank {rank} stream {id} {} {}: {}",
                            metric.name(),
                            ctx.name(),
                            st.perf.take(*metric, *ctx)
                        )
                    })
                    .collect();
                for l in lines {
                    converse::input::error_line(&l);
                }
            }
        }
        // A child not heard from since its adoption would answer for a request it may
        // never have been sent; it learns later ones.
        // Nor does a dead one (recovery off leaves it in the tree).
        if let Some(place) = &self.place {
            let dead = self.recovery.dead();
            kids.retain(|&k| {
                let c = &place.children[k];
                !c.adopting && !dead.contains(&c.rank)
            });
        }
        // Attached back-ends are answered for here (they run no filter and keep no
        // performance data): no request waits on a program outside the job. The shutdown
        // is told to them.
        if let Some(place) = &self.place {
            let attached = |k: usize| place.children[k].pe == super::NO_PE;
            let ext: Vec<usize> = kids.iter().copied().filter(|&k| attached(k)).collect();
            if !ext.is_empty() {
                kids.retain(|&k| !attached(k));
                if matches!(what, Req::Shutdown) {
                    let body = Ctl::Request {
                        req,
                        scope,
                        what: Req::Shutdown,
                    }
                    .encode();
                    self.to_kids(pe, &ext, &body);
                }
            }
        }
        let waiting: Vec<Rank> = self
            .place
            .as_ref()
            .map(|place| kids.iter().map(|&k| place.children[k].rank).collect())
            .unwrap_or_default();
        let pending = Pending {
            waiting,
            errors,
            report,
            how,
        };
        if kids.is_empty() {
            return self.finish_request(pe, req, pending);
        }
        let body = Ctl::Request { req, scope, what }.encode();
        self.to_kids(pe, &kids, &body);
        self.requests.insert(req, pending);
    }

    /// The streams a request's scope names here (one stream, or all).
    fn scoped(&mut self, scope: Option<u32>) -> impl Iterator<Item = (&u32, &mut StreamState)> {
        self.streams
            .iter_mut()
            .filter(move |(id, _)| scope.is_none_or(|s| s == **id))
    }

    fn on_ack(
        &mut self,
        pe: &mut Pe,
        src: usize,
        req: u32,
        errors: Vec<(Rank, String)>,
        report: Report,
    ) {
        let from = self.rank_of_pe(src);
        let Some(p) = self.requests.get_mut(&req) else {
            if self.recovery.any_dead() {
                // An orphan answering for a request its dead parent sent it, whose answer
                // here was already settled without it.
                return;
            }
            return self.refuse(
                pe,
                None,
                format!("an acknowledgement of request {req}, not in progress"),
            );
        };
        let Some(at) = from.and_then(|r| p.waiting.iter().position(|&w| w == r)) else {
            // Not awaited (an adopted orphan's, for its dead parent's request).
            return;
        };
        p.waiting.swap_remove(at);
        p.errors.extend(errors);
        let how = p.how;
        p.report.merge(report, how);
        if p.waiting.is_empty() {
            if let Some(p) = self.requests.remove(&req) {
                self.finish_request(pe, req, p);
            }
        }
    }

    /// Requests in progress stop waiting for children that died (with recovery off, each
    /// says so as an error of the request).
    pub(super) fn forget_dead_in_requests(&mut self, pe: &mut Pe, dead: &[Rank]) {
        let on = self.recovery.on;
        let mut done = Vec::new();
        for (req, p) in &mut self.requests {
            let gone: Vec<Rank> = p
                .waiting
                .iter()
                .copied()
                .filter(|r| dead.contains(r))
                .collect();
            if gone.is_empty() {
                continue;
            }
            p.waiting.retain(|r| !dead.contains(r));
            if !on {
                p.errors
                    .extend(gone.into_iter().map(|r| (r, "the process died".to_owned())));
            }
            if p.waiting.is_empty() {
                done.push(*req);
            }
        }
        done.sort_unstable();
        for req in done {
            if let Some(p) = self.requests.remove(&req) {
                self.finish_request(pe, req, p);
            }
        }
    }

    fn finish_request(&mut self, pe: &mut Pe, req: u32, p: Pending) {
        match self.place.as_ref().and_then(|pl| pl.parent_pe) {
            Some(parent) => {
                let ack = Ctl::Ack {
                    req,
                    errors: p.errors,
                    report: p.report,
                };
                pe.send(parent, self.h.ctl, &ack.encode());
            }
            None => {
                self.outcomes.insert(
                    req,
                    Outcome {
                        errors: p.errors,
                        report: p.report,
                        how: p.how,
                    },
                );
            }
        }
    }
}
