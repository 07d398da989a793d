//! The tree in attach mode: every process made with the network is internal, and back-ends
//! join it later under ranks of their own choosing, so a subtree's back-end ranks are no
//! longer consecutive.

use crate::topology::{ProcName, Rank, Topology, FIRST_INTERNAL_RANK};

/// How far an attached back-end's instance moves when its `host:RANK` is taken: past every
/// rank a back-end may attach with (below [`FIRST_INTERNAL_RANK`], 2^24), so a moved name never meets another
/// back-end's.
pub(crate) const NAME_STEP: u32 = FIRST_INTERNAL_RANK;

impl Topology {
    /// The same tree with every process ranked internal (breadth-first from
    /// [`FIRST_INTERNAL_RANK`], the front-end first): the tree of an attach-mode network, whose
    /// leaves are where back-ends attach.
    pub(crate) fn all_internal(&self) -> Topology {
        let items = self
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.name().clone(),
                    n.parent(),
                    FIRST_INTERNAL_RANK + i as Rank,
                )
            })
            .collect();
        Topology::with_ranks(items)
    }

    /// The same tree with back-ends ranked as MRNet ranks them when `rank_backends` is false:
    /// every process in the byte order of its name as text (`host:instance`, the key of
    /// MRNet's parser's map), numbered from 0, and each back-end keeps its number, so there
    /// are gaps where the front-end and internal processes fall. Those stay ranked from
    /// [`FIRST_INTERNAL_RANK`] (breadth-first), since here a rank below it means a back-end.
    pub(crate) fn ranked_by_name(&self) -> Topology {
        let mut order: Vec<(String, usize)> = self
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name().to_string(), i))
            .collect();
        order.sort();
        let mut by_name = vec![0 as Rank; order.len()];
        for (pos, (_, i)) in order.into_iter().enumerate() {
            by_name[i] = pos as Rank;
        }
        let items = self
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let backend = n.rank() < FIRST_INTERNAL_RANK;
                let rank = if backend { by_name[i] } else { n.rank() };
                (n.name().clone(), n.parent(), rank)
            })
            .collect();
        Topology::with_ranks(items)
    }

    /// The tree with back-end `rank` (named `name`) added as the last child of the process
    /// ranked `parent`; nodes keep their indices (the new one is the last), so a table kept by
    /// node index only grows. `None` when `parent` is not in the tree or `rank` already is.
    ///
    /// A back-end is named `host:RANK`, which can be an internal process's `host:instance`
    /// (the same host, an instance equal to the rank): then its instance moves up by
    /// [`NAME_STEP`] until the name is free, so DOT and topology-file output keep one vertex
    /// per process. Internal names are the plan's, the same on every process, and back-ends'
    /// ranks differ, so every process that learns of the attach names it alike.
    pub(crate) fn with_backend(
        &self,
        parent: Rank,
        mut name: ProcName,
        rank: Rank,
    ) -> Option<Topology> {
        let p = self.find_rank(parent)?;
        if rank >= FIRST_INTERNAL_RANK || self.find_rank(rank).is_some() {
            return None;
        }
        while self.nodes().iter().any(|n| *n.name() == name) {
            name.instance = name.instance.checked_add(NAME_STEP)?;
        }
        let mut items: Vec<(ProcName, Option<usize>, Rank)> = self
            .nodes()
            .iter()
            .map(|n| (n.name().clone(), n.parent(), n.rank()))
            .collect();
        items.push((name, Some(p), rank));
        Some(Topology::with_ranks(items))
    }

    /// The back-end ranks below node `i`, sorted, when they are not all of
    /// [`backend_ranks`](crate::TreeNode::backend_ranks) (back-ends attached with ranks of
    /// their own); `None` when that range is exact.
    pub(crate) fn backend_ranks_exact(&self, i: usize) -> Option<Vec<Rank>> {
        let range = self.node(i)?.backend_ranks();
        let below = self.backends_below(i);
        (below.len() != range.len()).then_some(below)
    }

    /// The back-end ranks below node `i` (itself, if it is one), sorted: in attach mode the
    /// span of [`backend_ranks`](crate::TreeNode::backend_ranks) also covers ranks of other
    /// subtrees.
    pub fn backends_below(&self, i: usize) -> Vec<Rank> {
        let mut below = Vec::new();
        let mut stack = vec![i];
        while let Some(v) = stack.pop() {
            let Some(node) = self.node(v) else { continue };
            if node.rank() < FIRST_INTERNAL_RANK {
                below.push(node.rank());
            }
            stack.extend_from_slice(node.children());
        }
        below.sort_unstable();
        below
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology_file::parse;

    #[test]
    fn ranked_by_name_numbers_back_ends_as_mrnet_without_rank_backends() {
        // The guide's example (C.2): names in byte order are c01 .. c09, then nutmeg.
        let t = parse(
            "nutmeg:0 => c01:0 c02:0 c03:0 c04:0 ;\n c03:0 => c05:0 ;\n \
             c04:0 => c06:0 c07:0 c08:0 c09:0 ;",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let r = t.ranked_by_name();
        let rank = |name: &str| {
            let i = r
                .nodes()
                .iter()
                .position(|n| n.name().to_string() == name)
                .unwrap_or_else(|| panic!("{name}"));
            r.nodes()[i].rank()
        };
        for (name, want) in [
            ("c01:0", 0),
            ("c02:0", 1),
            ("c05:0", 4),
            ("c06:0", 5),
            ("c09:0", 8),
        ] {
            assert_eq!(rank(name), want, "{name}");
        }
        assert!(rank("c03:0") >= FIRST_INTERNAL_RANK && rank("nutmeg:0") >= FIRST_INTERNAL_RANK);
        assert_eq!(r.num_backends(), 7);
        assert_eq!(
            r.find_rank(4).map(|i| r.nodes()[i].name().to_string()),
            Some("c05:0".into())
        );
        // c04's back-ends are 5..9; c03's is 4; the root's are not one range any more.
        let c04 = r.find_name(&ProcName::new("c04", 0)).unwrap_or(0);
        assert_eq!(r.backends_below(c04), [5, 6, 7, 8]);
        assert_eq!(r.backends_below(0), [0, 1, 4, 5, 6, 7, 8]);
        // Instances compare as text, as MRNet's map keys do: h:10 comes before h:2.
        let t = parse("fe:0 => h:2 h:10 ;").unwrap_or_else(|e| panic!("{e}"));
        let r = t.ranked_by_name();
        let names: Vec<(String, Rank)> = r
            .backends()
            .iter()
            .map(|&i| (r.nodes()[i].name().to_string(), r.nodes()[i].rank()))
            .collect();
        assert_eq!(names, [("h:10".to_string(), 1), ("h:2".to_string(), 2)]);
    }
    use crate::topgen::{generate, Placement, TreeSpec};

    fn tree(spec: &str) -> Topology {
        let spec = TreeSpec::parse(spec).unwrap_or_else(|e| panic!("{e}"));
        generate(&spec, &Placement::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_attach_tree_has_no_backend_until_one_joins_and_routes_by_exact_ranks() {
        let t = tree("g:2x2").all_internal();
        assert_eq!(t.num_backends(), 0);
        assert!(t.nodes().iter().all(|n| n.rank() >= FIRST_INTERNAL_RANK));
        // Leaves are nodes 3..7; attach 900 and 5 under the first leaf, 7 under the last.
        let leaf0 = t.nodes()[3].rank();
        let leaf3 = t.nodes()[6].rank();
        let t = t
            .with_backend(leaf0, ProcName::new("h", 1), 900)
            .and_then(|t| t.with_backend(leaf0, ProcName::new("h", 2), 5))
            .and_then(|t| t.with_backend(leaf3, ProcName::new("h", 3), 7))
            .unwrap_or_else(|| panic!("attach refused"));
        assert_eq!(t.num_backends(), 3);
        assert_eq!(t.num_nodes(), 10);
        // Node 1's subtree holds 900 and 5: its range 5..901 is not exact.
        assert_eq!(t.backend_ranks_exact(1), Some(vec![5, 900]));
        assert_eq!(
            t.backend_ranks_exact(2),
            None,
            "one back-end: its range is exact"
        );
        assert_eq!(t.nodes()[9].parent(), Some(6));
        // A rank taken, an internal rank, an unknown parent: refused.
        assert!(t.with_backend(leaf3, ProcName::new("h", 4), 5).is_none());
        assert!(t
            .with_backend(leaf3, ProcName::new("h", 4), FIRST_INTERNAL_RANK)
            .is_none());
        assert!(t.with_backend(12345, ProcName::new("h", 4), 8).is_none());
        // A name an internal process has already: the back-end's moves up, one vertex each.
        let internal = t.nodes()[1].name().clone();
        let clash = t
            .with_backend(leaf3, internal.clone(), 11)
            .unwrap_or_else(|| panic!("attach refused"));
        let added = clash.nodes()[clash.num_nodes() - 1].name().clone();
        assert_eq!(
            (added.host.as_str(), added.instance),
            (internal.host.as_str(), internal.instance + NAME_STEP)
        );
        assert_eq!(
            clash.to_dot().matches("[label=").count(),
            clash.num_nodes(),
            "{}",
            clash.to_dot()
        );
        // Recovery keeps attached ranks.
        let dead = [leaf0].into();
        let after = t.without(&dead);
        assert_eq!(
            after.find_rank(900).map(|i| after.nodes()[i].depth()),
            Some(2)
        );
    }
}
