//! The process tree: which process is whose parent, their ranks, and what tools ask of a tree
//! (MRNet's `NetworkTopology`: nodes, root, leaves, parents, back-ends, subtree heights,
//! statistics), plus writing it back out as a topology file or a DOT graph.
//!
//! A [`Topology`] is always a tree: it is only built through [`Topology::from_entries`], which
//! checks that there is one root, no cycle, every node connected and nobody its own
//! descendant, naming the line of the topology file that breaks the rule. A front-end alone is
//! a tree (tools may draw it), but not a network: [`Topology::require_backends`] refuses it
//! where one is made.
//!
//! **Ranks.** Back-ends (the leaves) are ranked `0 .. B` from left to right, as MPI ranks its
//! processes (MRNet's `rank_backends`). The front-end and the internal processes are ranked
//! from [`FIRST_INTERNAL_RANK`] up, in breadth-first order, the front-end first. A subtree's
//! back-ends thus have consecutive ranks, which is what lets each process route a packet
//! for a set of back-ends with a range check per child. Back-ends that attach later (attach
//! mode) choose their ranks: there [`TreeNode::backend_ranks`] is a span that may cover
//! other subtrees' ranks, and [`Topology::backends_below`] gives the exact ones.

use std::collections::HashMap;
use std::fmt::{self, Write};

/// Most members of a cycle an error names.
const CYCLE_SHOWN: usize = 10;

/// A process's rank in the tree.
pub type Rank = u32;

/// Rank of the front-end; internal processes follow it. Above any back-end rank (a job has at
/// most 2^20 PEs).
pub const FIRST_INTERNAL_RANK: Rank = 1 << 24;

/// A process of a topology file: `host:instance`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcName {
    /// The host it runs on.
    pub host: String,
    /// Tells processes on the same host apart (not a port, not a rank).
    pub instance: u32,
}

impl ProcName {
    /// `host:instance`.
    pub fn new(host: impl Into<String>, instance: u32) -> ProcName {
        ProcName {
            host: host.into(),
            instance,
        }
    }
}

impl fmt::Display for ProcName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.instance)
    }
}

/// One `parent => children ;` statement, with the line it started on (none for generated
/// trees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The parent.
    pub parent: ProcName,
    /// Its children, in order.
    pub children: Vec<ProcName>,
    /// 1-based line in the file, when it came from one.
    pub line: Option<usize>,
}

/// Why a set of entries is not a tree (or does not parse), naming the line (and the file,
/// when it came from one): `topo.txt:3: ...` or `line 3: ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", where_(file, line))]
pub struct TopologyError {
    /// The file, when it came from one.
    pub file: Option<String>,
    /// 1-based line, when the problem is at one.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

fn where_(file: &Option<String>, line: &Option<usize>) -> String {
    match (file, line) {
        (Some(f), Some(l)) => format!("{f}:{l}: "),
        (Some(f), None) => format!("{f}: "),
        (None, Some(l)) => format!("line {l}: "),
        (None, None) => String::new(),
    }
}

impl TopologyError {
    pub(crate) fn at(line: Option<usize>, reason: impl Into<String>) -> TopologyError {
        TopologyError {
            file: None,
            line,
            reason: reason.into(),
        }
    }
}

/// One process of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeNode {
    name: ProcName,
    parent: Option<usize>,
    children: Vec<usize>,
    rank: Rank,
    depth: u32,
    /// Back-end ranks in its subtree: `lo .. hi`.
    be_lo: Rank,
    be_hi: Rank,
}

impl TreeNode {
    /// `host:instance`.
    pub fn name(&self) -> &ProcName {
        &self.name
    }

    /// The host it runs on.
    pub fn host(&self) -> &str {
        &self.name.host
    }

    /// Its rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Its parent's index in the tree (`None` for the root).
    pub fn parent(&self) -> Option<usize> {
        self.parent
    }

    /// Its children's indices, in order.
    pub fn children(&self) -> &[usize] {
        &self.children
    }

    /// Number of children.
    pub fn num_children(&self) -> usize {
        self.children.len()
    }

    /// Distance from the root (the root: 0).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Ranks of the back-ends in its subtree (itself, for a back-end).
    ///
    /// In attach mode this is the span from the lowest to the highest rank below, not the
    /// exact set ([`Topology::backends_below`]).
    pub fn backend_ranks(&self) -> std::ops::Range<Rank> {
        self.be_lo..self.be_hi
    }
}

/// Shape statistics of a tree (MRNet's `get_TreeStatistics`). Fan-outs are over the nodes
/// that have children.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeStats {
    /// Number of nodes.
    pub num_nodes: usize,
    /// Longest path from the root to a leaf, in edges.
    pub depth: u32,
    /// Fewest children of a parent.
    pub min_fanout: usize,
    /// Most children of a parent.
    pub max_fanout: usize,
    /// Mean children per parent.
    pub avg_fanout: f64,
    /// Standard deviation of children per parent.
    pub stddev_fanout: f64,
}

/// A validated process tree. Node 0 is the root (the front-end); nodes are in breadth-first
/// order, children in the order the topology lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    nodes: Vec<TreeNode>,
    num_backends: usize,
    /// Node index of each back-end rank.
    backends: Vec<usize>,
    /// Node index of each rank from [`FIRST_INTERNAL_RANK`] up.
    others: Vec<usize>,
}

impl Topology {
    /// Build and validate a tree from `parent => children` entries.
    ///
    /// # Errors
    /// [`TopologyError`] when the entries are not one tree: no entry at all, a parent listed
    /// twice, a child with two parents, a node that is its own descendant (a cycle), more than
    /// one root, or a node not connected to the root.
    pub fn from_entries(entries: &[Entry]) -> Result<Topology, TopologyError> {
        if entries.is_empty() {
            return Err(TopologyError::at(None, "the topology defines no process"));
        }
        let mut index: HashMap<&ProcName, usize> = HashMap::new();
        let mut names: Vec<&ProcName> = Vec::new();
        // Names first, then edges.
        for e in entries {
            for n in std::iter::once(&e.parent).chain(&e.children) {
                if !index.contains_key(n) {
                    index.insert(n, names.len());
                    names.push(n);
                }
            }
        }
        let n = names.len();
        let mut parent: Vec<Option<(usize, Option<usize>)>> = vec![None; n];
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut listed_at: Vec<Option<Option<usize>>> = vec![None; n];
        for e in entries {
            let p = index[&e.parent];
            if let Some(first) = listed_at[p] {
                return Err(TopologyError::at(
                    e.line,
                    format!(
                        "{} already has its children listed{}; list them in one place",
                        e.parent,
                        first.map(|l| format!(" at line {l}")).unwrap_or_default()
                    ),
                ));
            }
            listed_at[p] = Some(e.line);
            for c in &e.children {
                let ci = index[c];
                if ci == p {
                    return Err(TopologyError::at(
                        e.line,
                        format!("{c} is listed as its own child"),
                    ));
                }
                if let Some((other, line)) = parent[ci] {
                    let why = if other == p {
                        format!("{c} is listed twice as a child of {}", e.parent)
                    } else {
                        format!(
                            "{c} already has the parent {}{}; a process has one parent",
                            names[other],
                            line.map(|l| format!(" (line {l})")).unwrap_or_default()
                        )
                    };
                    return Err(TopologyError::at(e.line, why));
                }
                parent[ci] = Some((p, e.line));
                children[p].push(ci);
            }
        }
        let roots: Vec<usize> = (0..n).filter(|&i| parent[i].is_none()).collect();
        let line_of = |i: usize| -> Option<usize> {
            listed_at[i].flatten().or(parent[i].and_then(|(_, l)| l))
        };
        match roots.as_slice() {
            [] => {
                return Err(TopologyError::at(
                    entries[0].line,
                    format!(
                        "every process has a parent, so there is no root: {} is its own \
                         descendant",
                        names[0]
                    ),
                ))
            }
            [_] => {}
            [a, b, ..] => {
                return Err(TopologyError::at(
                    line_of(*b),
                    format!(
                        "{} roots: {}{} and {}{} have no parent; a tree has one root",
                        roots.len(),
                        names[*a],
                        line_of(*a)
                            .map(|l| format!(" (line {l})"))
                            .unwrap_or_default(),
                        names[*b],
                        line_of(*b)
                            .map(|l| format!(" (line {l})"))
                            .unwrap_or_default()
                    ),
                ))
            }
        }
        // Breadth-first from the root: whatever is not reached sits on a cycle.
        let root = roots[0];
        let mut order = vec![root];
        let mut seen = vec![false; n];
        seen[root] = true;
        let mut head = 0;
        while head < order.len() {
            let v = order[head];
            head += 1;
            for &c in &children[v] {
                if !seen[c] {
                    seen[c] = true;
                    order.push(c);
                }
            }
        }
        if let Some(lost) = (0..n).find(|&i| !seen[i]) {
            // Follow parents from the lost node until one repeats: that is the cycle. Where
            // each node sits on the path is kept, so a long cycle is found in linear time.
            let mut path = vec![lost];
            let mut at_step: Vec<Option<usize>> = vec![None; n];
            at_step[lost] = Some(0);
            let mut cur = lost;
            while let Some((p, _)) = parent[cur] {
                if let Some(pos) = at_step[p] {
                    // A long cycle is named by its first few members: the error stays a line.
                    let on_cycle = path.len() - pos;
                    let mut cycle: Vec<String> = path[pos..]
                        .iter()
                        .rev()
                        .chain(std::iter::once(&p))
                        .take(CYCLE_SHOWN)
                        .map(|&i| names[i].to_string())
                        .collect();
                    if on_cycle + 1 > CYCLE_SHOWN {
                        cycle.push(format!("… ({on_cycle} processes in all)"));
                    }
                    return Err(TopologyError::at(
                        parent[p].and_then(|(_, l)| l),
                        format!(
                            "{} is its own descendant ({}), so it is not connected to the root {}",
                            names[p],
                            cycle.join(" => "),
                            names[root]
                        ),
                    ));
                }
                at_step[p] = Some(path.len());
                path.push(p);
                cur = p;
            }
            return Err(TopologyError::at(
                line_of(lost),
                format!("{} is not connected to the root", names[lost]),
            ));
        }
        let mut new_index = vec![0; n];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        let nodes = order
            .iter()
            .map(|&old| TreeNode {
                name: names[old].clone(),
                parent: parent[old].map(|(p, _)| new_index[p]),
                children: children[old].iter().map(|&c| new_index[c]).collect(),
                rank: 0,
                depth: 0,
                be_lo: 0,
                be_hi: 0,
            })
            .collect();
        Ok(Topology::ranked(nodes))
    }

    /// Give ranks, depths and back-end ranges to nodes in breadth-first order.
    fn ranked(mut nodes: Vec<TreeNode>) -> Topology {
        for i in 0..nodes.len() {
            let d = nodes[i].depth;
            for c in nodes[i].children.clone() {
                nodes[c].depth = d + 1;
            }
        }
        // Back-ends left to right: a depth-first walk, children in order.
        let mut backends = Vec::new();
        let mut stack = vec![(0usize, false)];
        while let Some((v, done)) = stack.pop() {
            if done {
                let (lo, hi) = nodes[v]
                    .children
                    .iter()
                    .fold((Rank::MAX, 0), |(lo, hi), &c| {
                        (lo.min(nodes[c].be_lo), hi.max(nodes[c].be_hi))
                    });
                nodes[v].be_lo = lo;
                nodes[v].be_hi = hi;
                continue;
            }
            if nodes[v].children.is_empty() && v != 0 {
                let r = backends.len() as Rank;
                nodes[v].rank = r;
                nodes[v].be_lo = r;
                nodes[v].be_hi = r + 1;
                backends.push(v);
                continue;
            }
            stack.push((v, true));
            for &c in nodes[v].children.iter().rev() {
                stack.push((c, false));
            }
        }
        if nodes[0].children.is_empty() {
            nodes[0].be_lo = 0;
            nodes[0].be_hi = 0;
        }
        let mut others = Vec::new();
        for (i, node) in nodes.iter_mut().enumerate() {
            if node.children.is_empty() && node.parent.is_some() {
                continue;
            }
            node.rank = FIRST_INTERNAL_RANK + others.len() as Rank;
            others.push(i);
        }
        Topology {
            num_backends: backends.len(),
            backends,
            others,
            nodes,
        }
    }

    /// Refuse a tree without back-ends (a front-end alone): a tree overlay needs at least one,
    /// for there would be nobody to send to, and a wave of replies would never come.
    ///
    /// # Errors
    /// [`TopologyError`] saying so, in one line.
    pub fn require_backends(&self) -> Result<(), TopologyError> {
        if self.num_backends == 0 {
            return Err(TopologyError::at(
                None,
                format!(
                    "the tree is the front-end {} alone: a tree overlay needs at least one \
                     back-end",
                    self.nodes[0].name
                ),
            ));
        }
        Ok(())
    }

    /// A tree from a list of parents (`None` for the root, which must be node 0, and each
    /// parent before its children) and names; for trees decoded from the wire.
    pub(crate) fn from_parents(items: Vec<(ProcName, Option<usize>)>) -> Option<Topology> {
        let n = items.len();
        if n == 0 || items[0].1.is_some() {
            return None;
        }
        let mut nodes: Vec<TreeNode> = Vec::with_capacity(n);
        for (i, (name, parent)) in items.into_iter().enumerate() {
            if let Some(p) = parent {
                if p >= i {
                    return None;
                }
                nodes[p].children.push(i);
            } else if i != 0 {
                return None;
            }
            nodes.push(TreeNode {
                name,
                parent,
                children: Vec::new(),
                rank: 0,
                depth: 0,
                be_lo: 0,
                be_hi: 0,
            });
        }
        // Must already be breadth-first, so that indices mean the same on every process.
        let mut expect = 1;
        for node in &nodes {
            for &c in &node.children {
                if c != expect {
                    return None;
                }
                expect += 1;
            }
        }
        Some(Topology::ranked(nodes))
    }

    /// Number of processes (front-end, internal and back-ends).
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i` (0: the root).
    pub fn node(&self, i: usize) -> Option<&TreeNode> {
        self.nodes.get(i)
    }

    /// Every node, breadth-first.
    pub fn nodes(&self) -> &[TreeNode] {
        &self.nodes
    }

    /// The root (the front-end).
    pub fn root(&self) -> &TreeNode {
        &self.nodes[0]
    }

    /// Index of the node with rank `rank` (after a failure, ranks of processes that died
    /// are gone; the others keep theirs).
    pub fn find_rank(&self, rank: Rank) -> Option<usize> {
        let list = if rank < FIRST_INTERNAL_RANK {
            &self.backends
        } else {
            &self.others
        };
        list.binary_search_by_key(&rank, |&i| self.nodes[i].rank)
            .ok()
            .map(|at| list[at])
    }

    /// A tree whose nodes keep the ranks they had in the tree they came from: `items` are
    /// (name, parent index, rank), breadth-first, the root first, each parent before its
    /// children; a node is a back-end by its rank, not by having no children (an internal
    /// process whose children all died stays internal).
    pub(crate) fn with_ranks(items: Vec<(ProcName, Option<usize>, Rank)>) -> Topology {
        let mut nodes: Vec<TreeNode> = Vec::with_capacity(items.len());
        for (i, (name, parent, rank)) in items.into_iter().enumerate() {
            let depth = match parent {
                Some(p) if p < i => {
                    nodes[p].children.push(i);
                    nodes[p].depth + 1
                }
                _ => 0,
            };
            let (be_lo, be_hi) = if rank < FIRST_INTERNAL_RANK {
                (rank, rank + 1)
            } else {
                (0, 0)
            };
            nodes.push(TreeNode {
                name,
                parent,
                children: Vec::new(),
                rank,
                depth,
                be_lo,
                be_hi,
            });
        }
        // Ranges from the leaves up: children come after their parent.
        for i in (0..nodes.len()).rev() {
            if nodes[i].rank < FIRST_INTERNAL_RANK {
                continue;
            }
            let (lo, hi) = nodes[i]
                .children
                .iter()
                .map(|&c| (nodes[c].be_lo, nodes[c].be_hi))
                .filter(|(lo, hi)| lo < hi)
                .fold((Rank::MAX, 0), |(lo, hi), (l, h)| (lo.min(l), hi.max(h)));
            (nodes[i].be_lo, nodes[i].be_hi) = if lo < hi { (lo, hi) } else { (0, 0) };
        }
        let mut backends: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].rank < FIRST_INTERNAL_RANK)
            .collect();
        backends.sort_by_key(|&i| nodes[i].rank);
        let mut others: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].rank >= FIRST_INTERNAL_RANK)
            .collect();
        others.sort_by_key(|&i| nodes[i].rank);
        Topology {
            num_backends: backends.len(),
            backends,
            others,
            nodes,
        }
    }

    /// Index of the node named `name`.
    pub fn find_name(&self, name: &ProcName) -> Option<usize> {
        self.nodes.iter().position(|n| &n.name == name)
    }

    /// Number of back-ends.
    pub fn num_backends(&self) -> usize {
        self.num_backends
    }

    /// Node indices of the back-ends, by rank (after a failure, of those alive).
    pub fn backends(&self) -> &[usize] {
        &self.backends
    }

    /// Node indices of the leaves (the back-ends, or the root alone in a one-node tree).
    pub fn leaves(&self) -> Vec<usize> {
        if self.nodes.len() == 1 {
            return vec![0];
        }
        self.backends.clone()
    }

    /// Node indices of every node with children.
    pub fn parents(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].children.is_empty())
            .collect()
    }

    /// Node indices of the internal processes (neither root nor back-end).
    pub fn internal(&self) -> Vec<usize> {
        (1..self.nodes.len())
            .filter(|&i| self.nodes[i].rank >= FIRST_INTERNAL_RANK)
            .collect()
    }

    /// Height of the subtree rooted at node `i` (a leaf: 0).
    pub fn subtree_height(&self, i: usize) -> u32 {
        let Some(n) = self.nodes.get(i) else {
            return 0;
        };
        let base = n.depth;
        let mut h = 0;
        let mut stack = vec![i];
        while let Some(v) = stack.pop() {
            h = h.max(self.nodes[v].depth - base);
            stack.extend_from_slice(&self.nodes[v].children);
        }
        h
    }

    /// Shape statistics.
    pub fn stats(&self) -> TreeStats {
        let fanouts: Vec<usize> = self
            .nodes
            .iter()
            .map(|n| n.children.len())
            .filter(|&c| c > 0)
            .collect();
        let depth = self.nodes.iter().map(|n| n.depth).max().unwrap_or(0);
        let k = fanouts.len().max(1) as f64;
        let avg = fanouts.iter().sum::<usize>() as f64 / k;
        let var = fanouts
            .iter()
            .map(|&f| (f as f64 - avg).powi(2))
            .sum::<f64>()
            / k;
        TreeStats {
            num_nodes: self.nodes.len(),
            depth,
            min_fanout: fanouts.iter().copied().min().unwrap_or(0),
            max_fanout: fanouts.iter().copied().max().unwrap_or(0),
            avg_fanout: avg,
            stddev_fanout: var.sqrt(),
        }
    }

    /// The tree as `parent => children ;` entries, breadth-first.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self
            .nodes
            .iter()
            .filter(|n| !n.children.is_empty())
            .map(|n| Entry {
                parent: n.name.clone(),
                children: n
                    .children
                    .iter()
                    .map(|&c| self.nodes[c].name.clone())
                    .collect(),
                line: None,
            })
            .collect();
        if out.is_empty() {
            out.push(Entry {
                parent: self.nodes[0].name.clone(),
                children: Vec::new(),
                line: None,
            });
        }
        out
    }

    /// The tree as a topology file that [`parse`](crate::topology_file::parse) reads back
    /// into the same tree.
    pub fn to_topology_file(&self) -> String {
        let mut s = String::new();
        for e in self.entries() {
            let _ = write!(s, "{} =>", e.parent);
            for c in &e.children {
                let _ = write!(s, " {c}");
            }
            s.push_str(" ;\n");
        }
        s
    }

    /// The tree as a Graphviz DOT graph: one vertex per process, labelled with its name and
    /// rank, one edge per parent-child pair.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph tbon {\n  node [shape=box];\n");
        for n in &self.nodes {
            let role = if n.parent.is_none() {
                "front-end"
            } else if n.rank < FIRST_INTERNAL_RANK {
                "back-end"
            } else {
                "internal"
            };
            let _ = writeln!(
                s,
                "  \"{}\" [label=\"{}\\nrank {} ({role})\"];",
                n.name, n.name, n.rank
            );
        }
        for n in &self.nodes {
            for &c in &n.children {
                let _ = writeln!(s, "  \"{}\" -> \"{}\";", n.name, self.nodes[c].name);
            }
        }
        s.push_str("}\n");
        s
    }
}

#[cfg(test)]
mod tests;
