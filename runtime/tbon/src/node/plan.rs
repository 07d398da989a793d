//! The plan: a process learns its place in the tree from the plan coming down, passes it on
//! to its children, and the front-end waits until every process has reported in.

use super::{Child, Node, Place, Role};
use crate::events::EventKind;
use crate::filter::TopologyLocalInfo;
use crate::protocol::Ctl;
use crate::topology::{Topology, FIRST_INTERNAL_RANK};
use converse::Message;
use converse::Pe;
use std::rc::Rc;

impl Place {
    /// The place of the process on PE `my_pe` in `topo` (the tree now), where `orig` is the
    /// tree as it was made and `pes[i]` the PE of its node `i`.
    pub(super) fn build(
        topo: Rc<Topology>,
        orig: Rc<Topology>,
        pes: Rc<[usize]>,
        my_pe: usize,
    ) -> Place {
        let pe_of = |i: usize| {
            orig.find_rank(topo.nodes()[i].rank())
                .and_then(|o| pes.get(o).copied())
                .unwrap_or(0)
        };
        let me = (0..topo.num_nodes()).find(|&i| pe_of(i) == my_pe);
        let Some(i) = me else {
            return Place {
                topo,
                orig,
                pes,
                role: Role::Spare,
                info: TopologyLocalInfo::default(),
                parent_pe: None,
                children: Vec::new(),
            };
        };
        let n = &topo.nodes()[i];
        let role = if i == 0 {
            Role::FrontEnd
        } else if n.rank() < FIRST_INTERNAL_RANK {
            Role::BackEnd
        } else {
            // By rank: an internal process whose children all died stays internal, and so do
            // the leaves of an attach-mode tree.
            Role::Internal
        };
        let children: Vec<Child> = n
            .children()
            .iter()
            .map(|&c| Child {
                pe: pe_of(c),
                ext: None,
                rank: topo.nodes()[c].rank(),
                be: super::BeSet::of(&topo, c),
                adopting: false,
            })
            .collect();
        let info = TopologyLocalInfo {
            rank: n.rank(),
            parent: n.parent().map(|p| topo.nodes()[p].rank()),
            children: children.iter().map(|c| c.rank).collect(),
            num_backends_below: topo
                .backend_ranks_exact(i)
                .map_or(n.backend_ranks().len(), |v| v.len()),
            num_nodes: topo.num_nodes(),
            num_backends: topo.num_backends(),
            depth: n.depth(),
        };
        Place {
            parent_pe: n.parent().map(pe_of),
            children,
            role,
            info,
            topo,
            orig,
            pes,
        }
    }
}

impl Node {
    /// Take the plan, and pass it (`raw`) on down the tree: the connections it opens, from
    /// each parent to its children, are the ones the tree's traffic uses.
    pub(super) fn take_plan(
        &mut self,
        pe: &mut Pe,
        tree: Vec<(crate::topology::ProcName, Option<usize>)>,
        pes: Vec<usize>,
        (attach, by_name): (Option<String>, bool),
        raw: &[u8],
    ) {
        if self.place.is_some() {
            return;
        }
        let Some(mut topo) = Topology::from_parents(tree) else {
            self.abandoned = Some("the front-end sent a tree that is not breadth-first".into());
            return;
        };
        if attach.is_some() {
            topo = topo.all_internal();
        } else if by_name {
            topo = topo.ranked_by_name();
        }
        if pes.len() != topo.num_nodes() || pes.iter().any(|&p| p >= pe.num_pes()) {
            self.abandoned = Some("the front-end sent a plan for other PEs".into());
            return;
        }
        if pe.my_pe() == 0 {
            // A death the front-end heard of before its plan: nothing would ever report in
            // through that process.
            if let Some(&dead) = pes.iter().find(|&&p| !pe.is_alive(p)) {
                let reason = format!("PE {dead} of the tree died while the network was being made");
                return self.abandon(pe, reason);
            }
        }
        let topo = Rc::new(topo);
        let place = Place::build(topo.clone(), topo, pes.into(), pe.my_pe());
        let spare = place.role == Role::Spare;
        tracing::debug!(target: "tbon", role = ?place.role, rank = place.info.rank, children = place.children.len(), "took the network's plan");
        for c in &place.children {
            pe.send(c.pe, self.h.ctl, raw);
        }
        if place.role == Role::FrontEnd {
            // PEs outside the tree learn that they are spares straight from the front-end.
            let used: std::collections::HashSet<usize> = place.pes.iter().copied().collect();
            for p in (0..pe.num_pes()).filter(|p| !used.contains(p)) {
                pe.send(p, self.h.ctl, raw);
            }
        }
        self.place = Some(place);
        // A leaf of an attach-mode tree reports in once it listens (`attach` starts it).
        self.take_attach_secret(attach);
        if !spare {
            self.maybe_ready(pe);
        }
    }

    /// Report up once this process and every child are in.
    pub(super) fn maybe_ready(&mut self, pe: &mut Pe) {
        let Some(place) = &self.place else { return };
        if self.ready || self.ready_from < place.children.len() || self.attach.must_listen {
            return;
        }
        self.ready = true;
        tracing::debug!(target: "tbon", rank = place.info.rank, "this process and its subtree are ready");
        match place.parent_pe {
            Some(parent) => pe.send(parent, self.h.ctl, &Ctl::Ready.encode()),
            None => {
                let n = place.topo.num_nodes();
                self.event(
                    EventKind::NetworkReady,
                    None,
                    None,
                    format!("all {n} processes of the network are in"),
                );
            }
        }
    }

    /// Messages held until the plan, to run now.
    pub(crate) fn take_early(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.early)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topgen::{generate, Placement, TreeSpec};
    use crate::topology::{Rank, FIRST_INTERNAL_RANK};
    use std::collections::BTreeSet;

    #[test]
    fn a_place_in_the_tree_after_a_death_keeps_pes_by_rank() {
        let spec = TreeSpec::parse("g:2x3").unwrap_or_else(|e| panic!("{e}"));
        let orig =
            Rc::new(generate(&spec, &Placement::default()).unwrap_or_else(|e| panic!("{e}")));
        // PEs in reverse, so a node's index and its PE differ.
        let n = orig.num_nodes();
        let pes: Rc<[usize]> = (0..n).rev().collect::<Vec<_>>().into();
        let pe_of = |r: Rank| pes[orig.find_rank(r).unwrap_or(0)];
        let dead: BTreeSet<Rank> = [FIRST_INTERNAL_RANK + 1].into();
        let now = Rc::new(orig.without(&dead));
        // The front-end adopts back-ends 0..3, in the dead one's place.
        let fe = Place::build(
            now.clone(),
            orig.clone(),
            pes.clone(),
            pe_of(FIRST_INTERNAL_RANK),
        );
        assert_eq!(fe.role, Role::FrontEnd);
        let kids: Vec<(Rank, usize)> = fe.children.iter().map(|c| (c.rank, c.pe)).collect();
        let want: Vec<(Rank, usize)> = [0, 1, 2, FIRST_INTERNAL_RANK + 2]
            .iter()
            .map(|&r| (r, pe_of(r)))
            .collect();
        assert_eq!(kids, want);
        assert_eq!(fe.info.children, [0, 1, 2, FIRST_INTERNAL_RANK + 2]);
        // An orphan's parent is the front-end's PE now.
        let be = Place::build(now.clone(), orig.clone(), pes.clone(), pe_of(1));
        assert_eq!(be.role, Role::BackEnd);
        assert_eq!(be.parent_pe, Some(pe_of(FIRST_INTERNAL_RANK)));
        assert_eq!(be.info.parent, Some(FIRST_INTERNAL_RANK));
        assert_eq!(be.info.depth, 1);
        // The dead process has no place: a spare.
        let gone = Place::build(
            now.clone(),
            orig.clone(),
            pes.clone(),
            pe_of(FIRST_INTERNAL_RANK + 1),
        );
        assert_eq!(gone.role, Role::Spare);
        // An internal process whose back-ends all died stays internal, childless.
        let dead: BTreeSet<Rank> = [3, 4, 5].into();
        let now = Rc::new(orig.without(&dead));
        let i = Place::build(
            now,
            orig.clone(),
            pes.clone(),
            pe_of(FIRST_INTERNAL_RANK + 2),
        );
        assert_eq!(i.role, Role::Internal);
        assert!(i.children.is_empty());
    }
}
