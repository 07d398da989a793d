//! The spanning trees collectives travel: k-ary trees over PEs, and the node-aware tree the
//! runtime uses, which crosses the network once per node.
//!
//! The node-aware tree rooted at PE `r` is a k-ary tree over the *nodes* rooted at `r`'s node,
//! where each node is entered through one PE (`r` itself in its own node, the node's first PE
//! elsewhere), and inside each node a k-ary tree over its PEs rooted at that entry PE. So a
//! broadcast sends one message per node over the interconnect and hands it on inside each node
//! by pointer; a reduction combines inside each node first. With one PE per node it is exactly
//! the k-ary tree over PEs.

use converse_machine::NodeTable;

/// The children of `me` in the `k`-ary spanning tree over `n` PEs rooted at `root`.
///
/// ```
/// let kids: Vec<usize> = converse::tree_children(0, 0, 10, 4).collect();
/// assert_eq!(kids, [1, 2, 3, 4]);
/// // Rooted at 7, the tree is the same shape, shifted: relative rank r is PE (r + 7) % 10.
/// let kids: Vec<usize> = converse::tree_children(7, 7, 10, 4).collect();
/// assert_eq!(kids, [8, 9, 0, 1]);
/// assert_eq!(converse::tree_parent(7, 1, 10, 4), Some(7));
/// ```
pub fn tree_children(root: usize, me: usize, n: usize, k: usize) -> impl Iterator<Item = usize> {
    let rel = (me + n - root) % n;
    // Saturating: a child number past `n` ends the list instead of wrapping into the tree.
    (1..=k)
        .map(move |i| rel.saturating_mul(k).saturating_add(i))
        .take_while(move |&c| c < n)
        .map(move |c| (c + root) % n)
}

/// The parent of `me` in the `k`-ary spanning tree over `n` PEs rooted at `root`; `None` for
/// the root.
pub fn tree_parent(root: usize, me: usize, n: usize, k: usize) -> Option<usize> {
    let rel = (me + n - root) % n;
    (rel != 0).then(|| ((rel - 1) / k + root) % n)
}

/// Most children a PE has in the node-aware tree: up to `k` nodes and `k` PEs of its own node.
pub(crate) const MAX_KIDS: usize = 2 * crate::scheduler::MAX_BRANCHING;

/// The children of one PE, on the stack: collectives send to them while holding `&mut Pe`,
/// so they cannot borrow the node table, and a heap list per forwarded message would be an
/// allocation on the hot path of every broadcast.
#[derive(Debug)]
pub(crate) struct Kids {
    pes: [usize; MAX_KIDS],
    len: usize,
}

impl Kids {
    fn push(&mut self, pe: usize) {
        // At most k node children and k local children: MAX_KIDS holds them all.
        if let Some(slot) = self.pes.get_mut(self.len) {
            *slot = pe;
            self.len += 1;
        }
    }

    /// The children, node children (the ones across the interconnect) first.
    pub(crate) fn as_slice(&self) -> &[usize] {
        &self.pes[..self.len]
    }
}

/// The node-aware spanning trees over a job's PEs (see the module text).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tree<'a> {
    pub table: &'a NodeTable,
    pub k: usize,
}

impl Tree<'_> {
    /// The PE through which the tree rooted at `root` enters `node`.
    fn entry(&self, root: usize, root_node: usize, node: usize) -> usize {
        if node == root_node {
            root
        } else {
            self.first_pe(node)
        }
    }

    fn first_pe(&self, node: usize) -> usize {
        self.table.node(node).map_or(0, |n| n.first_pe)
    }

    fn pes_of(&self, node: usize) -> usize {
        self.table.node(node).map_or(1, |n| n.num_pes)
    }

    /// The children of `me` in the tree rooted at `root`.
    pub(crate) fn children(&self, root: usize, me: usize) -> Kids {
        let mut kids = Kids {
            pes: [0; MAX_KIDS],
            len: 0,
        };
        let (rn, mn) = (self.table.node_of(root), self.table.node_of(me));
        let (first, here) = (self.first_pe(mn), self.pes_of(mn));
        let entry = self.entry(root, rn, mn);
        if me == entry {
            for c in tree_children(rn, mn, self.table.num_nodes(), self.k) {
                kids.push(self.entry(root, rn, c));
            }
        }
        for r in tree_children(entry - first, me - first, here, self.k) {
            kids.push(first + r);
        }
        kids
    }

    /// The parent of `me` in the tree rooted at `root`; `None` for the root.
    pub(crate) fn parent(&self, root: usize, me: usize) -> Option<usize> {
        let (rn, mn) = (self.table.node_of(root), self.table.node_of(me));
        let (first, here) = (self.first_pe(mn), self.pes_of(mn));
        let entry = self.entry(root, rn, mn);
        if me == entry {
            tree_parent(rn, mn, self.table.num_nodes(), self.k).map(|p| self.entry(root, rn, p))
        } else {
            tree_parent(entry - first, me - first, here, self.k).map(|r| first + r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use converse_machine::NodeInfo;

    #[test]
    fn every_pe_has_exactly_one_parent_in_every_tree() {
        for n in 1..40 {
            for k in 2..6 {
                for root in [0, n / 2, n - 1] {
                    let mut seen = vec![0; n];
                    seen[root] += 1;
                    for me in 0..n {
                        for c in tree_children(root, me, n, k) {
                            seen[c] += 1;
                            assert_eq!(tree_parent(root, c, n, k), Some(me));
                        }
                    }
                    assert!(seen.iter().all(|&s| s == 1), "n={n} k={k} root={root}");
                    assert_eq!(tree_parent(root, root, n, k), None);
                }
            }
        }
    }

    fn uneven(sizes: &[usize]) -> NodeTable {
        let mut first = 0;
        let nodes = sizes
            .iter()
            .map(|&s| {
                let n = NodeInfo {
                    first_pe: first,
                    num_pes: s,
                    host: "h".into(),
                    addr: Vec::new(),
                };
                first += s;
                n
            })
            .collect();
        NodeTable::new(nodes).unwrap()
    }

    /// Every PE is reached exactly once, parent and children agree, and exactly one edge per
    /// non-root node crosses between nodes.
    #[test]
    fn node_aware_trees_span_every_pe_and_cross_once_per_node() {
        let tables = [
            NodeTable::uniform(1, 1),
            NodeTable::uniform(7, 1),
            NodeTable::uniform(3, 4),
            NodeTable::uniform(5, 2),
            uneven(&[1, 3, 2, 5, 1]),
        ];
        for table in &tables {
            for k in [2, 3, 4] {
                let tree = Tree { table, k };
                let n = table.num_pes();
                for root in 0..n {
                    let mut seen = vec![0; n];
                    seen[root] += 1;
                    let mut crossing = 0;
                    for me in 0..n {
                        for &c in tree.children(root, me).as_slice() {
                            seen[c] += 1;
                            assert_eq!(tree.parent(root, c), Some(me), "root {root} child {c}");
                            if table.node_of(c) != table.node_of(me) {
                                crossing += 1;
                            }
                        }
                    }
                    assert!(seen.iter().all(|&s| s == 1), "k={k} root={root} {seen:?}");
                    assert_eq!(tree.parent(root, root), None);
                    assert_eq!(crossing, table.num_nodes() - 1, "k={k} root={root}");
                }
            }
        }
    }

    /// Hops from the root to the deepest PE: a round of a collective is this many messages
    /// deep, so with a core per PE its time grows with the logarithm of the PEs.
    fn depth(tree: &Tree<'_>, root: usize) -> usize {
        let n = tree.table.num_pes();
        (0..n)
            .map(|mut pe| {
                let mut hops = 0;
                while let Some(p) = tree.parent(root, pe) {
                    pe = p;
                    hops += 1;
                }
                hops
            })
            .max()
            .unwrap_or(0)
    }

    /// The smallest d with k^d >= n: the depth of a complete k-ary tree of n.
    fn log_ceil(n: usize, k: usize) -> usize {
        let (mut d, mut reach) = (0, 1);
        while reach < n {
            reach *= k;
            d += 1;
        }
        d
    }

    #[test]
    fn trees_are_logarithmically_deep_up_to_thousands_of_pes() {
        for k in [2, 4, 8] {
            for n in [2, 3, 16, 63, 64, 65, 256, 1000, 4096] {
                let table = NodeTable::uniform(n, 1);
                let tree = Tree { table: &table, k };
                for root in [0, n / 3, n - 1] {
                    // A k-ary tree of n: at most ceil(log_k n) hops, never a long chain.
                    assert!(
                        depth(&tree, root) <= log_ceil(n, k),
                        "n={n} k={k} root={root}"
                    );
                }
            }
            // Node-aware: hops over the nodes, then inside the node.
            for (nodes, ppn) in [(64, 4), (256, 2), (16, 32), (7, 5)] {
                let table = NodeTable::uniform(nodes, ppn);
                let tree = Tree { table: &table, k };
                let bound = log_ceil(nodes, k) + log_ceil(ppn, k);
                for root in [0, 1, nodes * ppn - 1] {
                    assert!(
                        depth(&tree, root) <= bound,
                        "{nodes}x{ppn} k={k} root={root}"
                    );
                }
            }
        }
    }

    #[test]
    fn one_pe_per_node_is_the_plain_tree() {
        let table = NodeTable::uniform(13, 1);
        let tree = Tree {
            table: &table,
            k: 3,
        };
        for root in 0..13 {
            for me in 0..13 {
                let plain: Vec<usize> = tree_children(root, me, 13, 3).collect();
                assert_eq!(tree.children(root, me).as_slice(), plain.as_slice());
                assert_eq!(tree.parent(root, me), tree_parent(root, me, 13, 3));
            }
        }
    }
}
