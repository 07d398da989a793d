//! Spanning trees of a topology, rooted at a collective's root: the paths its messages take.
//!
//! A tree uses only the topology's own channels, unless that would give one process more than
//! [`WIDEST`] children: then it is the runtime's `k`-ary tree over the topology's processes
//! (see [`Tree::over_channels`]). Each subtree is a contiguous slice of the tree's preorder,
//! so a scatter can hand a child "its" processes as one slice.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Children a tree node takes before a tie goes to a node with fewer: the runtime's own
/// `tree.branching` default, so that on a fully connected topology the tree is as deep as the
/// runtime's.
pub(crate) const BRANCHING: usize = 4;

/// Most children a process has in a tree over the channels. A wider tree — a star's centre,
/// a hub of a graph — makes one process send every copy of a broadcast (and take every
/// contribution of a reduction) itself, one after another, while the processes below it
/// wait: on 64 processes a star's broadcast took 6–10× the runtime's own (`bench topo`). Such
/// a topology's collectives take the `k`-ary tree instead, through processes the topology
/// has no channel between, as MPI's collectives on a graph communicator ignore its edges.
pub const WIDEST: usize = 2 * BRANCHING;

/// A spanning tree rooted at one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    root: usize,
    parent: Vec<Option<usize>>,
    children: Vec<Vec<usize>>,
    depth: Vec<usize>,
    /// Processes in preorder (children in increasing id).
    pre: Vec<usize>,
    /// Where each process's subtree lies in `pre`.
    span: Vec<(usize, usize)>,
    /// Every edge is a channel of the topology.
    over_channels: bool,
}

impl Tree {
    fn from_parents(root: usize, parent: Vec<Option<usize>>) -> Tree {
        let n = parent.len();
        let mut children = vec![Vec::new(); n];
        for (v, p) in parent.iter().enumerate() {
            if let Some(p) = *p {
                children[p].push(v);
            }
        }
        let mut depth = vec![0; n];
        let mut pre = Vec::with_capacity(n);
        let mut span = vec![(0, 0); n];
        // Iterative preorder; a subtree's end is known once all of it is listed.
        let mut stack = vec![(root, false)];
        while let Some((v, done)) = stack.pop() {
            if done {
                span[v].1 = pre.len();
                continue;
            }
            span[v].0 = pre.len();
            pre.push(v);
            stack.push((v, true));
            for &c in children[v].iter().rev() {
                depth[c] = depth[v] + 1;
                stack.push((c, false));
            }
        }
        Tree {
            root,
            parent,
            children,
            depth,
            pre,
            span,
            over_channels: true,
        }
    }

    /// Whether every edge of the tree is a channel of the topology: false when the tree over
    /// the channels would have been wider than [`WIDEST`] and the `k`-ary tree over the
    /// processes was taken instead.
    pub fn over_channels(&self) -> bool {
        self.over_channels
    }

    /// The widest process's number of children.
    pub fn widest(&self) -> usize {
        self.children.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// This tree if no process in it has more than [`WIDEST`] children, else the `k`-ary tree
    /// over the same processes from the same root (marked as not over the channels).
    pub(crate) fn or_kary_if_wide(self) -> Tree {
        if self.widest() <= WIDEST {
            return self;
        }
        let mut t = kary(self.parent.len(), self.root, BRANCHING);
        t.over_channels = false;
        t
    }

    /// The root.
    pub fn root(&self) -> usize {
        self.root
    }

    /// The parent of `id` (`None` for the root).
    pub fn parent(&self, id: usize) -> Option<usize> {
        self.parent.get(id).copied().flatten()
    }

    /// The children of `id`, in increasing id.
    pub fn children(&self, id: usize) -> &[usize] {
        self.children.get(id).map_or(&[], Vec::as_slice)
    }

    /// `id` and every process below it, in preorder (`id` first).
    pub fn subtree(&self, id: usize) -> &[usize] {
        self.span.get(id).map_or(&[], |&(a, b)| &self.pre[a..b])
    }

    /// Hops from the root to `id`.
    pub fn depth(&self, id: usize) -> usize {
        self.depth.get(id).copied().unwrap_or(0)
    }

    /// The deepest process's depth.
    pub fn height(&self) -> usize {
        self.depth.iter().copied().max().unwrap_or(0)
    }

    /// Every (parent, child) pair.
    pub fn edges(&self) -> Vec<(usize, usize)> {
        (0..self.parent.len())
            .filter_map(|v| self.parent[v].map(|p| (p, v)))
            .collect()
    }
}

/// The `k`-ary tree over `n` processes rooted at `root` (relative rank r has children
/// r·k+1 ..= r·k+k), as the runtime's own: for topologies where every channel exists.
pub(crate) fn kary(n: usize, root: usize, k: usize) -> Tree {
    let parent = (0..n)
        .map(|v| {
            let rel = (v + n - root) % n;
            (rel != 0).then(|| ((rel - 1) / k + root) % n)
        })
        .collect();
    Tree::from_parents(root, parent)
}

/// A shortest-path tree over the channels (breadth first): each process hangs below the
/// neighbour one hop nearer the root that has the fewest children so far (then the lower id),
/// so the work spreads over the level above.
pub(crate) fn shortest(adj: &[Vec<(usize, u32)>], root: usize) -> Tree {
    let n = adj.len();
    let mut depth = vec![usize::MAX; n];
    let mut parent = vec![None; n];
    let mut kids = vec![0usize; n];
    depth[root] = 0;
    let mut level = vec![root];
    while !level.is_empty() {
        let mut next = Vec::new();
        for &v in &level {
            for &(u, _) in &adj[v] {
                if depth[u] == usize::MAX {
                    depth[u] = depth[v] + 1;
                    next.push(u);
                }
            }
        }
        next.sort_unstable();
        for &u in &next {
            let p = adj[u]
                .iter()
                .map(|e| e.0)
                // Not `depth[p] + 1`: an unreached neighbour's depth is usize::MAX, and the sum
                // overflows (a panic where overflow is checked).
                .filter(|&p| depth[p].checked_add(1) == Some(depth[u]))
                .min_by_key(|&p| (kids[p], p));
            if let Some(p) = p {
                parent[u] = Some(p);
                kids[p] += 1;
            }
        }
        level = next;
    }
    Tree::from_parents(root, parent)
}

/// A minimum spanning tree of the weights (Prim from the root). Among channels of equal
/// weight it prefers a tree node with fewer than [`BRANCHING`] children, then a shallower
/// one, then lower ids: still a minimum tree, and on a graph of equal weights a bushy,
/// shallow one rather than a long chain.
pub(crate) fn minimum(adj: &[Vec<(usize, u32)>], root: usize) -> Tree {
    let n = adj.len();
    let mut inside = vec![false; n];
    let mut parent = vec![None; n];
    let mut depth = vec![0usize; n];
    let mut kids = vec![0usize; n];
    // Keys are fixed when pushed; a stale key (the tree node gained children since) is
    // re-pushed with its current key instead of being taken.
    type Key = (u32, bool, usize, usize, usize);
    let key = |w: u32, p: usize, u: usize, kids: &[usize], depth: &[usize]| -> Key {
        (w, kids[p] >= BRANCHING, depth[p], p, u)
    };
    let mut heap: BinaryHeap<Reverse<Key>> = BinaryHeap::new();
    inside[root] = true;
    for &(u, w) in &adj[root] {
        heap.push(Reverse(key(w, root, u, &kids, &depth)));
    }
    while let Some(Reverse(k)) = heap.pop() {
        let (w, _, _, p, u) = k;
        if inside[u] {
            continue;
        }
        let now = key(w, p, u, &kids, &depth);
        if now != k {
            heap.push(Reverse(now));
            continue;
        }
        inside[u] = true;
        parent[u] = Some(p);
        depth[u] = depth[p] + 1;
        kids[p] += 1;
        for &(x, wx) in &adj[u] {
            if !inside[x] {
                heap.push(Reverse(key(wx, u, x, &kids, &depth)));
            }
        }
    }
    Tree::from_parents(root, parent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Topology;

    fn check_spanning(t: &Topology, root: usize) {
        let tree = t.tree(root).unwrap();
        let n = t.len();
        assert_eq!(tree.root(), root);
        assert_eq!(tree.subtree(root).len(), n, "{:?} root {root}", t.shape());
        for v in 0..n {
            match tree.parent(v) {
                None => assert_eq!(v, root),
                Some(p) => {
                    assert!(
                        t.is_edge(p, v) || !tree.over_channels(),
                        "{:?}: tree edge {p}-{v}",
                        t.shape()
                    );
                    assert!(tree.widest() <= WIDEST, "{:?} root {root}", t.shape());
                    assert!(tree.children(p).contains(&v));
                    assert_eq!(tree.depth(v), tree.depth(p) + 1);
                }
            }
            let sub = tree.subtree(v);
            assert_eq!(sub[0], v);
            let below: usize = tree
                .children(v)
                .iter()
                .map(|&c| tree.subtree(c).len())
                .sum();
            assert_eq!(sub.len(), 1 + below);
        }
    }

    #[test]
    fn every_class_spans_from_every_root() {
        for n in [1, 2, 7, 16] {
            let mut ts = vec![
                Topology::fully_connected(n).unwrap(),
                Topology::star(n, n / 2).unwrap(),
                Topology::line(n).unwrap(),
                Topology::ring(n).unwrap(),
                Topology::grid2(1, n).unwrap(),
                Topology::torus2(n, 1).unwrap(),
            ];
            if n == 16 {
                ts.push(Topology::torus(&[2, 2, 4]).unwrap());
                ts.push(Topology::grid2(4, 4).unwrap());
            }
            let m: Vec<Vec<u32>> = (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| u32::from(i != j) * (1 + ((i + j) % 3) as u32))
                        .collect()
                })
                .collect();
            ts.push(Topology::from_matrix(&m).unwrap());
            for t in &ts {
                for root in 0..n {
                    check_spanning(t, root);
                }
            }
        }
    }

    #[test]
    fn regular_trees_are_as_deep_as_the_root_is_far() {
        let t = Topology::torus2(4, 4).unwrap();
        for root in 0..16 {
            let far = (0..16).map(|v| t.distance(root, v)).max().unwrap();
            assert_eq!(t.tree(root).unwrap().height(), far);
        }
        let r = Topology::ring(7).unwrap();
        assert_eq!(r.tree(0).unwrap().height(), 3);
        assert_eq!(r.tree(0).unwrap().children(0), [1, 6]);
        let full = Topology::fully_connected(16).unwrap();
        assert_eq!(full.tree(0).unwrap().children(0), [1, 2, 3, 4]);
        assert_eq!(full.tree(0).unwrap().height(), 2);
    }

    /// A star's centre would send to every other process; past [`WIDEST`] its collectives
    /// take the `k`-ary tree, and a narrow star keeps its channels.
    #[test]
    fn a_wide_star_takes_the_kary_tree_and_a_narrow_one_its_channels() {
        let narrow = Topology::star(WIDEST + 1, 0).unwrap();
        let t = narrow.tree(0).unwrap();
        assert!(t.over_channels());
        assert_eq!(t.children(0).len(), WIDEST);
        let wide = Topology::star(64, 0).unwrap();
        for root in [0, 1, 63] {
            let t = wide.tree(root).unwrap();
            assert!(!t.over_channels(), "root {root}");
            assert_eq!(t.children(root).len(), BRANCHING);
            assert_eq!(t.height(), 3, "64 processes, 4-ary: 1 + 4 + 16 + 43");
            assert_eq!(t.subtree(root).len(), 64);
        }
        // A ring stays on its channels however large.
        assert!(Topology::ring(64).unwrap().tree(5).unwrap().over_channels());
    }

    #[test]
    fn the_mst_is_minimum() {
        // A weighted square with a heavy diagonal: the MST takes the three light sides.
        let m = [[0, 1, 9, 4], [1, 0, 2, 9], [9, 2, 0, 3], [4, 9, 3, 0]];
        let t = Topology::from_matrix(&m).unwrap();
        for root in 0..4 {
            let tree = t.tree(root).unwrap();
            let total: u32 = tree
                .edges()
                .iter()
                .map(|&(p, c)| t.channels(p).iter().find(|e| e.0 == c).unwrap().1)
                .sum();
            assert_eq!(total, 6, "root {root}: {:?}", tree.edges());
        }
        // All weights equal: bushy, not a chain.
        let full: Vec<Vec<u32>> = (0..16)
            .map(|i| (0..16).map(|j| u32::from(i != j)).collect())
            .collect();
        let t = Topology::from_matrix(&full).unwrap();
        assert_eq!(t.tree(3).unwrap().height(), 2);
        assert_eq!(t.tree(3).unwrap().children(3).len(), BRANCHING);
    }
}
