//! The tree after failures: which process is whose parent once some have died.
//!
//! **The rule.** A process whose parent died (an *orphan*) is adopted by its nearest surviving
//! ancestor, and takes the dead process's place among that ancestor's children (so back-ends
//! stay in rank order left to right, and every subtree's back-end ranks stay one range).
//! Every process keeps its rank. The front-end never dies here: its death ends the job.
//!
//! The new tree depends only on the *set* of processes that died, not on the order in which
//! anyone learned of them: [`Topology::without`] applied once to a set, or one death at a
//! time in any order, gives the same tree. So every survivor computes the same tree from
//! what the runtime tells it, with no message exchanged to agree on it; an ancestor (rather
//! than a sibling) is chosen because it is already connected to the orphan's whole path to
//! the root, is the one process sure to be on every orphan's way up, and keeps the depth of
//! the tree from growing.

use crate::topology::{Rank, Topology};
use std::collections::BTreeSet;

impl Topology {
    /// This tree without the processes of ranks `dead` (ranks not in the tree, and the
    /// root's, are ignored): each orphan re-parented to its nearest surviving ancestor, in
    /// the dead process's place; every process keeps its rank.
    pub fn without(&self, dead: &BTreeSet<Rank>) -> Topology {
        let root_rank = self.root().rank();
        let is_dead = |i: usize| {
            let r = self.nodes()[i].rank();
            r != root_rank && dead.contains(&r)
        };
        // Breadth-first over the survivors, each one's children spliced through the dead.
        let mut items = vec![(self.root().name().clone(), None, root_rank)];
        let mut order = vec![0usize];
        let mut head = 0;
        while head < order.len() {
            let v = order[head];
            let parent_index = head;
            head += 1;
            let mut stack: Vec<usize> = self.nodes()[v].children().iter().rev().copied().collect();
            while let Some(c) = stack.pop() {
                if is_dead(c) {
                    stack.extend(self.nodes()[c].children().iter().rev().copied());
                    continue;
                }
                let n = &self.nodes()[c];
                items.push((n.name().clone(), Some(parent_index), n.rank()));
                order.push(c);
            }
        }
        Topology::with_ranks(items)
    }

    /// Ranks of the processes whose parent in this tree is not their parent in `original`
    /// (the tree this one was made from): those re-parented after a failure.
    pub fn orphans_of(&self, original: &Topology) -> Vec<Rank> {
        let parent_rank =
            |t: &Topology, i: usize| t.nodes()[i].parent().map(|p| t.nodes()[p].rank());
        (0..self.num_nodes())
            .filter(|&i| {
                let r = self.nodes()[i].rank();
                original
                    .find_rank(r)
                    .is_some_and(|o| parent_rank(original, o) != parent_rank(self, i))
            })
            .map(|i| self.nodes()[i].rank())
            .collect()
    }

    /// Rank of the parent of the process of rank `rank`, if it is in the tree and not the
    /// root.
    pub fn parent_rank(&self, rank: Rank) -> Option<Rank> {
        let i = self.find_rank(rank)?;
        let p = self.nodes()[i].parent()?;
        Some(self.nodes()[p].rank())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topgen::{generate, Placement, TreeSpec};
    use crate::topology::FIRST_INTERNAL_RANK;
    use proptest::prelude::*;

    fn tree(spec: &str) -> Topology {
        let s = TreeSpec::parse(spec).unwrap_or_else(|e| panic!("{e}"));
        generate(&s, &Placement::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn set(r: &[Rank]) -> BTreeSet<Rank> {
        r.iter().copied().collect()
    }

    #[test]
    fn orphans_go_to_the_nearest_surviving_ancestor_in_the_dead_ones_place() {
        let t = tree("g:4x8");
        let x = FIRST_INTERNAL_RANK + 2; // the second internal process: back-ends 8..16
        let r = t.without(&set(&[x]));
        assert_eq!(r.num_nodes(), 36);
        assert_eq!(r.num_backends(), 32);
        assert_eq!(r.find_rank(x), None);
        for be in 8..16 {
            assert_eq!(r.parent_rank(be), Some(FIRST_INTERNAL_RANK), "{be}");
        }
        assert_eq!(r.parent_rank(0), Some(FIRST_INTERNAL_RANK + 1));
        assert_eq!(r.orphans_of(&t), (8..16).collect::<Vec<_>>());
        // Back-ends stay in rank order left to right: the root's children are
        // internal 1, back-ends 8..16, internal 3, internal 4.
        let root_kids: Vec<Rank> = r
            .root()
            .children()
            .iter()
            .map(|&c| r.nodes()[c].rank())
            .collect();
        let mut want = vec![FIRST_INTERNAL_RANK + 1];
        want.extend(8..16);
        want.extend([FIRST_INTERNAL_RANK + 3, FIRST_INTERNAL_RANK + 4]);
        assert_eq!(root_kids, want);
        assert_eq!(r.root().backend_ranks(), 0..32);
        let dot = r.to_dot();
        assert_eq!(dot.matches(" -> ").count(), 35, "{dot}");
        assert!(!dot.contains(&format!("rank {x} ")), "{dot}");
        assert!(dot.contains("rank 9 (back-end)"), "{dot}");
    }

    #[test]
    fn a_dead_back_end_leaves_a_hole_in_the_ranks_not_a_shift() {
        let t = tree("g:2x3");
        let r = t.without(&set(&[4]));
        assert_eq!(r.num_backends(), 5);
        assert_eq!(r.find_rank(4), None);
        assert_eq!(r.nodes()[r.find_rank(5).unwrap_or(0)].rank(), 5);
        assert!(r.orphans_of(&t).is_empty());
        // An internal process that lost every back-end stays internal.
        let r = t.without(&set(&[3, 4, 5]));
        let i = r.find_rank(FIRST_INTERNAL_RANK + 2).unwrap_or(0);
        assert_eq!(r.nodes()[i].num_children(), 0);
        assert!(r.internal().contains(&i));
        assert_eq!(r.backends().len(), 3);
    }

    #[test]
    fn two_levels_dead_at_once_go_to_the_root() {
        let t = tree("g:2x2x2");
        // Internal 2 (first level) and its first child.
        let first = t.root().children()[0];
        let grandchild = t.nodes()[first].children()[0];
        let (a, b) = (t.nodes()[first].rank(), t.nodes()[grandchild].rank());
        let r = t.without(&set(&[a, b]));
        for be in 0..2 {
            assert_eq!(r.parent_rank(be), Some(FIRST_INTERNAL_RANK));
        }
        let other = t.nodes()[t.nodes()[first].children()[1]].rank();
        assert_eq!(r.parent_rank(other), Some(FIRST_INTERNAL_RANK));
    }

    proptest! {
        /// Whatever the order in which deaths are learned, the tree is the same.
        #[test]
        fn the_order_of_deaths_does_not_matter(
            kill in proptest::collection::vec(0usize..37, 0..6),
        ) {
            let t = tree("g:4x8");
            let ranks: Vec<Rank> = kill.iter().map(|&i| t.nodes()[i].rank()).collect();
            let all = t.without(&ranks.iter().copied().collect());
            let mut one_by_one = t.clone();
            let mut known = BTreeSet::new();
            for r in ranks.iter().rev() {
                known.insert(*r);
                one_by_one = t.without(&known);
            }
            prop_assert_eq!(&all, &one_by_one);
            // Applying deaths to the already recovered tree gives the same tree too.
            let mut step = t.clone();
            for r in &ranks {
                step = step.without(&set(&[*r]));
            }
            prop_assert_eq!(&all, &step);
            // Each subtree's back-ends are still one range.
            for n in all.nodes() {
                for &c in n.children() {
                    let cr = all.nodes()[c].backend_ranks();
                    if !cr.is_empty() {
                        prop_assert!(n.backend_ranks().start <= cr.start);
                        prop_assert!(cr.end <= n.backend_ranks().end);
                    }
                }
            }
        }
    }
}
