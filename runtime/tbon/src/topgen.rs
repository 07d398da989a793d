//! Generated topologies (MRNet's `mrnet_topgen` and its `BalancedTree`, `KnomialTree`,
//! `GenericTree` classes): a tree shape from a short spec, placed on hosts from host lists.
//!
//! | spec | tree |
//! |---|---|
//! | `b:4x4` or `b:4^2` | balanced: fan-out 4 at each of 2 levels (16 back-ends) |
//! | `k:2@16` | k-nomial (here binomial) tree of 16 processes |
//! | `g:2x4x3` or `2x4x3` | generic: the root has 2 children, each of those 4, each of those 3 |
//! | `g:2:3,1:0,2x1,0` or `2:3,1:0,2x1,0` | generic with a fan-out per process (MRNet's `GenericTree` syntax, below) |
//!
//! **Fan-outs per process** (MRNet's `mrnet_topgen -t g:SPEC`, its `GenericTree`): levels are
//! separated by `:`, from the root down; a level lists the fan-out of each process of that
//! level, left to right, separated by `,`; `NxC` stands for `N` processes with `C` children
//! each, and a fan-out of `0` makes that process a back-end above the bottom level. The first
//! level is the root alone; each later level lists exactly as many fan-outs as the level above
//! made processes (MRNet leaves missing ones as back-ends and reads past the end for extra
//! ones; we refuse both, saying how many are needed); the processes the last level makes are
//! back-ends. So `g:2:3,1:0,2x1,0` is a root with 2 children, which have 3 and 1 children; of
//! those four, the first is a back-end, the next two have one child each, the last is a
//! back-end. A spec with neither `:` nor `,` keeps the per-level meaning above (MRNet would
//! read `g:1x4` as the root with 4 children; ours is a chain of one process with 4 children).
//!
//! A flat tree (the front-end talking to every back-end) is `g:32`. Host lists have one
//! `host[:slots]` per line (slots: how many processes it may take, 1 if not given; a host on
//! several lines gets the sum); the front-end goes on its own host, internal processes on the
//! internal list, back-ends on the back-end list (the internal one if there is none). Without a
//! list every process is on `localhost`, which means "this machine" wherever a topology is
//! matched with a job.

use crate::topology::{ProcName, Topology, TopologyError};
use std::collections::HashMap;

/// A tree shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeSpec {
    /// Every non-leaf has `fanout` children, `depth` levels below the root.
    Balanced {
        /// Children per parent.
        fanout: usize,
        /// Levels below the root.
        depth: usize,
    },
    /// A k-nomial tree of `nodes` processes.
    Knomial {
        /// The k.
        k: usize,
        /// Processes, front-end included.
        nodes: usize,
    },
    /// Fan-out per level, from the root down.
    Generic(Vec<usize>),
    /// Fan-out of every parent, level by level from the root down (MRNet's `GenericTree`
    /// spec): `levels[0]` is the root's (one entry), `levels[i + 1]` has one entry per process
    /// that `levels[i]` made, left to right; `0` is a back-end.
    PerNode(Vec<Vec<usize>>),
}

/// The most processes a generated tree may have (a job's PE limit).
pub const MAX_NODES: usize = converse::MAX_PES;

fn spec_error(spec: &str, reason: impl std::fmt::Display) -> TopologyError {
    // Escaped: the message stays one line whatever the user typed.
    let spec = spec.escape_debug();
    TopologyError::at(None, format!("bad tree spec '{spec}': {reason}"))
}

fn number(spec: &str, s: &str, what: &str) -> Result<usize, TopologyError> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(spec_error(
            spec,
            format!(
                "{what} must be a whole number of at least 1, not '{}'",
                s.escape_debug()
            ),
        )),
    }
}

impl TreeSpec {
    /// Parse `b:4x4`, `b:4^2`, `k:2@16`, `g:2x4x3` or `2x4x3`.
    ///
    /// # Errors
    /// [`TopologyError`] saying what is wrong with the spec.
    pub fn parse(spec: &str) -> Result<TreeSpec, TopologyError> {
        let s = spec.trim();
        let (kind, body) = match s.split_once(':') {
            // `2:4,2`: MRNet's generic spec without its `g:`.
            Some((k, _)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => ("g", s),
            Some((k, b)) => (k, b),
            None => ("g", s),
        };
        let levels = |body: &str| -> Result<Vec<usize>, TopologyError> {
            body.split('x')
                .map(|f| number(spec, f, "a fan-out"))
                .collect()
        };
        let t = match kind {
            "b" => {
                if let Some((f, d)) = body.split_once('^') {
                    TreeSpec::Balanced {
                        fanout: number(spec, f, "the fan-out")?,
                        depth: number(spec, d, "the depth")?,
                    }
                } else {
                    let l = levels(body)?;
                    if l.iter().any(|&f| f != l[0]) {
                        return Err(spec_error(
                            spec,
                            "a balanced tree has the same fan-out at every level (use g: for \
                             different ones)",
                        ));
                    }
                    TreeSpec::Balanced {
                        fanout: l[0],
                        depth: l.len(),
                    }
                }
            }
            "k" => {
                let (k, n) = body
                    .split_once('@')
                    .ok_or_else(|| spec_error(spec, "a k-nomial spec is k:K@NODES, e.g. k:2@16"))?;
                let k = number(spec, k, "k")?;
                if k < 2 {
                    return Err(spec_error(spec, "k must be at least 2"));
                }
                TreeSpec::Knomial {
                    k,
                    nodes: number(spec, n, "the number of processes")?,
                }
            }
            "g" if body.contains([':', ',']) => TreeSpec::PerNode(per_node(spec, body)?),
            "g" => TreeSpec::Generic(levels(body)?),
            other => {
                return Err(spec_error(
                    spec,
                    format!(
                        "unknown kind '{}' (b: balanced, k: k-nomial, g: generic)",
                        other.escape_debug()
                    ),
                ))
            }
        };
        t.validate().map_err(|reason| spec_error(spec, reason))?;
        Ok(t)
    }

    /// Whether the spec makes a tree an overlay can run: fan-outs of at least 1, a k of at
    /// least 2, at least one back-end, at most [`MAX_NODES`] processes. The reason, if not.
    fn validate(&self) -> Result<(), String> {
        match self {
            TreeSpec::Balanced { fanout, depth } if *fanout == 0 || *depth == 0 => {
                return Err("a balanced tree needs a fan-out and a depth of at least 1".into())
            }
            TreeSpec::Generic(levels) if levels.is_empty() => {
                return Err("a generic tree needs at least one level".into())
            }
            TreeSpec::Generic(levels) if levels.contains(&0) => {
                return Err("every fan-out must be at least 1".into())
            }
            TreeSpec::PerNode(levels) => check_per_node(levels)?,
            TreeSpec::Knomial { k, .. } if *k < 2 => return Err("k must be at least 2".into()),
            TreeSpec::Knomial { nodes, .. } if *nodes < 2 => {
                return Err(format!(
                    "a tree of {nodes} process(es) has no back-end; a tree overlay needs at \
                     least one (k:K@2 or more)"
                ))
            }
            _ => {}
        }
        if self.num_nodes() > MAX_NODES {
            return Err(format!(
                "the tree would have more than {MAX_NODES} processes"
            ));
        }
        Ok(())
    }

    /// Number of processes the tree has, exactly up to [`MAX_NODES`]; for larger trees some
    /// number above it (the count stops there, so an absurd depth costs nothing).
    pub fn num_nodes(&self) -> usize {
        fn count(levels: impl IntoIterator<Item = usize>) -> usize {
            let mut total: usize = 1;
            let mut width: usize = 1;
            for f in levels {
                width = width.saturating_mul(f);
                total = total.saturating_add(width);
                if width == 0 || total > MAX_NODES {
                    break;
                }
            }
            total
        }
        match self {
            TreeSpec::Balanced { fanout, depth } => count(std::iter::repeat_n(*fanout, *depth)),
            TreeSpec::Knomial { nodes, .. } => *nodes,
            TreeSpec::Generic(levels) => count(levels.iter().copied()),
            TreeSpec::PerNode(levels) => levels
                .iter()
                .flatten()
                .try_fold(1usize, |n, &f| n.checked_add(f).filter(|&n| n <= MAX_NODES))
                .unwrap_or(MAX_NODES + 1),
        }
    }

    /// Parent of each process, breadth-first (the root first, with no parent).
    fn parents(&self) -> Vec<Option<usize>> {
        match self {
            TreeSpec::Balanced { fanout, depth } => {
                TreeSpec::Generic(vec![*fanout; *depth]).parents()
            }
            TreeSpec::Generic(levels) => {
                let mut parents = vec![None];
                let mut level = vec![0usize];
                for &f in levels {
                    let mut next = Vec::with_capacity(level.len() * f);
                    for &p in &level {
                        for _ in 0..f {
                            next.push(parents.len());
                            parents.push(Some(p));
                        }
                    }
                    level = next;
                }
                parents
            }
            TreeSpec::Knomial { k, nodes } => knomial_parents(*k, *nodes),
            TreeSpec::PerNode(levels) => {
                let mut parents = vec![None];
                let mut level = vec![0usize];
                for fanouts in levels {
                    let mut next = Vec::new();
                    for (&p, &f) in level.iter().zip(fanouts) {
                        for _ in 0..f {
                            next.push(parents.len());
                            parents.push(Some(p));
                        }
                    }
                    level = next;
                }
                parents
            }
        }
    }
}

/// The levels of MRNet's generic spec `C:C,C,NxC:...` (see the module's documentation).
fn per_node(spec: &str, body: &str) -> Result<Vec<Vec<usize>>, TopologyError> {
    let fanout = |s: &str| -> Result<usize, TopologyError> {
        s.trim().parse::<usize>().map_err(|_| {
            spec_error(
                spec,
                format!(
                    "a fan-out must be a whole number (0 for a back-end), not '{}'",
                    s.escape_debug()
                ),
            )
        })
    };
    let mut levels = Vec::new();
    for level in body.split(':') {
        let mut fanouts = Vec::new();
        for item in level.split(',') {
            let (n, f) = match item.split_once('x') {
                Some((n, f)) => (number(spec, n, "a repeat count")?, fanout(f)?),
                None => (1, fanout(item)?),
            };
            // Bounded before it is expanded: a level never has more than MAX_NODES processes.
            if fanouts.len().saturating_add(n) > MAX_NODES {
                return Err(spec_error(
                    spec,
                    format!("the tree would have more than {MAX_NODES} processes"),
                ));
            }
            fanouts.extend(std::iter::repeat_n(f, n));
        }
        levels.push(fanouts);
    }
    Ok(levels)
}

/// Whether per-process fan-outs make a tree: the root alone first, with at least one child,
/// then as many fan-outs in each level as the level above made processes.
fn check_per_node(levels: &[Vec<usize>]) -> Result<(), String> {
    match levels.first().map(Vec::as_slice) {
        None => return Err("a generic tree needs at least one level".into()),
        Some([root]) if *root >= 1 => {}
        Some([_]) => {
            return Err(
                "the root's fan-out is 0: a tree overlay needs at least one back-end".into(),
            )
        }
        Some(first) => {
            return Err(format!(
                "the first level is the root alone, so it lists one fan-out, not {}",
                first.len()
            ))
        }
    }
    for (i, pair) in levels.windows(2).enumerate() {
        let made = pair[0].iter().fold(0usize, |n, &f| n.saturating_add(f));
        if pair[1].len() != made {
            return Err(format!(
                "level {} makes {made} process(es), so level {} lists {made} fan-out(s) (0 for \
                 a back-end), not {}",
                i + 1,
                i + 2,
                pair[1].len()
            ));
        }
    }
    Ok(())
}

/// A k-nomial tree over `n` processes, breadth-first. In id order, the parent of `i > 0` is
/// `i` with its most significant base-`k` digit cleared (the binomial tree for `k` = 2).
fn knomial_parents(k: usize, n: usize) -> Vec<Option<usize>> {
    let parent_id = |i: usize| -> usize {
        let mut p: usize = 1;
        while p.saturating_mul(k) <= i {
            p *= k;
        }
        i % p
    };
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 1..n {
        children[parent_id(i)].push(i);
    }
    // Renumber breadth-first.
    let mut order = vec![0];
    let mut head = 0;
    while head < order.len() {
        order.extend_from_slice(&children[order[head]]);
        head += 1;
    }
    let mut new_id = vec![0; n];
    for (new, &old) in order.iter().enumerate() {
        new_id[old] = new;
    }
    order
        .iter()
        .map(|&old| (old != 0).then(|| new_id[parent_id(old)]))
        .collect()
}

/// Whether `host` can stand in a topology file (the characters its grammar allows).
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// Hosts and how many processes each may take.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostList {
    hosts: Vec<(String, usize)>,
}

impl HostList {
    /// Parse `host[:slots]` lines (`#` starts a comment). A host on several lines gets the sum
    /// of their slots, in the place of its first line.
    ///
    /// # Errors
    /// [`TopologyError`] naming the line of a malformed entry, or for a list without hosts.
    pub fn parse(text: &str) -> Result<HostList, TopologyError> {
        let mut hosts: Vec<(String, usize)> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (host, slots) = match line.split_once(':') {
                Some((h, s)) => match s.trim().parse::<usize>() {
                    Ok(v) if v >= 1 => (h.trim(), v),
                    _ => {
                        return Err(TopologyError::at(
                            Some(n + 1),
                            format!("'{s}' is not a number of slots (1 or more)"),
                        ))
                    }
                },
                None => (line, 1),
            };
            if !is_host_name(host) {
                return Err(TopologyError::at(
                    Some(n + 1),
                    format!("'{host}' is not a host name"),
                ));
            }
            match at.get(host) {
                // Saturating: `host:18446744073709551615` twice must not overflow.
                Some(&i) => hosts[i].1 = hosts[i].1.saturating_add(slots),
                None => {
                    at.insert(host.to_owned(), hosts.len());
                    hosts.push((host.to_owned(), slots));
                }
            }
        }
        if hosts.is_empty() {
            return Err(TopologyError::at(None, "the host list names no host"));
        }
        Ok(HostList { hosts })
    }

    /// A list of these hosts with these slots.
    pub fn new(hosts: Vec<(String, usize)>) -> HostList {
        HostList { hosts }
    }

    /// The hosts and their slots.
    pub fn hosts(&self) -> &[(String, usize)] {
        &self.hosts
    }

    /// Total slots.
    pub fn slots(&self) -> usize {
        self.hosts.iter().fold(0, |n, h| n.saturating_add(h.1))
    }
}

/// Where the processes of a generated tree go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The front-end's host.
    pub fe_host: String,
    /// Hosts for internal processes (and back-ends, without `backend_hosts`); `None`: all on
    /// `localhost`.
    pub hosts: Option<HostList>,
    /// Hosts for back-ends.
    pub backend_hosts: Option<HostList>,
}

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            fe_host: "localhost".into(),
            hosts: None,
            backend_hosts: None,
        }
    }
}

/// Hands out `host:instance` names: slots of a list in order, instances counted per host.
struct Namer<'a> {
    instances: HashMap<String, u32>,
    lists: [Option<&'a HostList>; 2],
    cursor: [(usize, usize); 2],
}

impl Namer<'_> {
    fn next_on(&mut self, host: &str) -> ProcName {
        let i = self.instances.entry(host.to_owned()).or_insert(0);
        let name = ProcName::new(host, *i);
        *i += 1;
        name
    }

    /// The next slot of list `which`; `None` when the list is used up.
    fn take(&mut self, which: usize) -> Option<ProcName> {
        let Some(list) = self.lists[which] else {
            return Some(self.next_on("localhost"));
        };
        let (h, used) = &mut self.cursor[which];
        while *h < list.hosts.len() && *used >= list.hosts[*h].1 {
            *h += 1;
            *used = 0;
        }
        let host = list.hosts.get(*h)?.0.clone();
        *used += 1;
        Some(self.next_on(&host))
    }
}

/// Generate the tree `spec` describes, placed as `placement` says.
///
/// ```
/// use converse_tbon::topgen::{generate, Placement, TreeSpec};
/// let t = generate(&TreeSpec::parse("g:4x8").unwrap(), &Placement::default()).unwrap();
/// assert_eq!((t.num_nodes(), t.num_backends()), (37, 32));
/// ```
///
/// # Errors
/// [`TopologyError`] when the spec makes no tree an overlay can run (see
/// [`TreeSpec::parse`]: no back-end, a fan-out of 0, more than [`MAX_NODES`] processes), or
/// when the host lists have too few slots.
pub fn generate(spec: &TreeSpec, placement: &Placement) -> Result<Topology, TopologyError> {
    spec.validate()
        .map_err(|reason| TopologyError::at(None, format!("bad tree spec: {reason}")))?;
    if !is_host_name(&placement.fe_host) {
        // It would write a topology file that does not read back.
        return Err(TopologyError::at(
            None,
            format!(
                "'{}' is not a host name (letters, digits, '.', '-', '_')",
                placement.fe_host.escape_debug()
            ),
        ));
    }
    let parents = spec.parents();
    let mut has_children = vec![false; parents.len()];
    for p in parents.iter().flatten() {
        has_children[*p] = true;
    }
    let mut namer = Namer {
        instances: HashMap::new(),
        lists: [
            placement.hosts.as_ref(),
            placement
                .backend_hosts
                .as_ref()
                .or(placement.hosts.as_ref()),
        ],
        cursor: [(0, 0); 2],
    };
    let mut names: Vec<Option<ProcName>> = vec![None; parents.len()];
    names[0] = Some(namer.next_on(&placement.fe_host));
    // Internal processes take their slots first, then back-ends (which may share the list).
    for pass in 0..2 {
        for i in 1..parents.len() {
            let internal = has_children[i];
            if internal != (pass == 0) {
                continue;
            }
            // Back-ends share the internal list (and its place in it) unless they have one.
            let which = usize::from(!internal && placement.backend_hosts.is_some());
            let name = namer.take(which).ok_or_else(|| {
                let list = namer.lists[which].map_or(0, HostList::slots);
                TopologyError::at(
                    None,
                    format!(
                        "the tree needs {} internal and {} back-end processes, more than the \
                         {list} slot(s) of the {} host list",
                        has_children[1..].iter().filter(|&&c| c).count(),
                        has_children[1..].iter().filter(|&&c| !c).count(),
                        if which == 0 { "internal" } else { "back-end" }
                    ),
                )
            })?;
            names[i] = Some(name);
        }
    }
    let items: Vec<(ProcName, Option<usize>)> = names
        .into_iter()
        .zip(parents)
        .map(|(n, p)| (n.unwrap_or_else(|| ProcName::new("localhost", 0)), p))
        .collect();
    Topology::from_parents(items)
        .ok_or_else(|| TopologyError::at(None, "internal: generated tree is not breadth-first"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(t: &Topology) -> Vec<usize> {
        t.nodes().iter().map(|n| n.num_children()).collect()
    }

    #[test]
    fn specs_parse() {
        assert_eq!(
            TreeSpec::parse("b:4x4").ok(),
            Some(TreeSpec::Balanced {
                fanout: 4,
                depth: 2
            })
        );
        assert_eq!(TreeSpec::parse("b:4^2").ok(), TreeSpec::parse("b:4x4").ok());
        assert_eq!(
            TreeSpec::parse("k:2@16").ok(),
            Some(TreeSpec::Knomial { k: 2, nodes: 16 })
        );
        assert_eq!(
            TreeSpec::parse("2x4x3").ok(),
            Some(TreeSpec::Generic(vec![2, 4, 3]))
        );
        for bad in [
            "b:4x8",
            "b:",
            "k:2",
            "k:1@4",
            "g:0",
            "x:3",
            "g:4xx4",
            "b:1000^1000",
        ] {
            let e = TreeSpec::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("bad tree spec '{bad}'")), "{e}");
        }
    }

    #[test]
    fn degenerate_specs_are_one_line_errors() {
        for (bad, want) in [
            ("k:2@1", "a tree of 1 process(es) has no back-end"),
            ("k:3@0", "the number of processes must be"),
            ("b:0", "a fan-out must be a whole number of at least 1"),
            ("g:2\n3", "a fan-out must be"),
            ("b:0^3", "the fan-out must be"),
            ("b:2^0", "the depth must be"),
            ("k:1@5", "k must be at least 2"),
            ("g:0x2", "a fan-out must be a whole number of at least 1"),
            ("g:2x0", "a fan-out must be a whole number of at least 1"),
            ("b:1^2000000", "more than 1048576 processes"),
            ("b:1^18446744073709551615", "more than 1048576 processes"),
            ("b:2^64", "more than 1048576 processes"),
            ("g:1048576x1048576", "more than 1048576 processes"),
            (
                "g:65536x65536x65536x65536x65536",
                "more than 1048576 processes",
            ),
            ("k:2@1048577", "more than 1048576 processes"),
            (
                "k:2@99999999999999999999999",
                "the number of processes must be",
            ),
        ] {
            let e = TreeSpec::parse(bad).unwrap_err().to_string();
            let shown = bad.escape_debug();
            assert!(e.starts_with(&format!("bad tree spec '{shown}': ")), "{e}");
            assert!(e.contains(want), "{bad}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // A chain of every level it may have is fine.
        assert_eq!(
            TreeSpec::parse("b:1^1048575").map(|s| s.num_nodes()),
            Ok(MAX_NODES)
        );
    }

    #[test]
    fn generate_refuses_specs_built_by_hand_that_parse_would_refuse() {
        // Built directly, these would hang (k < 2 never stops its digit loop), allocate
        // without bound, or make a front-end without back-ends.
        for spec in [
            TreeSpec::Knomial { k: 1, nodes: 5 },
            TreeSpec::Knomial { k: 0, nodes: 5 },
            TreeSpec::Knomial { k: 2, nodes: 1 },
            TreeSpec::Knomial { k: 2, nodes: 0 },
            TreeSpec::Generic(vec![]),
            TreeSpec::Generic(vec![0]),
            TreeSpec::Generic(vec![3, 0]),
            TreeSpec::Balanced {
                fanout: 0,
                depth: usize::MAX,
            },
            TreeSpec::Balanced {
                fanout: 1,
                depth: usize::MAX,
            },
            TreeSpec::Balanced {
                fanout: 2,
                depth: 0,
            },
        ] {
            let e = generate(&spec, &Placement::default())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("bad tree spec: "), "{spec:?}: {e}");
        }
    }

    #[test]
    fn balanced_and_generic_shapes() {
        let p = Placement::default();
        let t = generate(
            &TreeSpec::parse("b:4x4").unwrap_or(TreeSpec::Generic(vec![])),
            &p,
        )
        .expect("tree");
        assert_eq!((t.num_nodes(), t.num_backends()), (21, 16));
        assert_eq!(t.stats().depth, 2);
        let t = generate(&TreeSpec::Generic(vec![2, 4, 3]), &p).expect("tree");
        assert_eq!((t.num_nodes(), t.num_backends()), (1 + 2 + 8 + 24, 24));
        assert_eq!(shape(&t)[..3], [2, 4, 4]);
        let flat = generate(&TreeSpec::Generic(vec![32]), &p).expect("tree");
        assert_eq!((flat.num_backends(), flat.stats().depth), (32, 1));
    }

    #[test]
    fn knomial_is_the_binomial_tree_for_k_2() {
        let t =
            generate(&TreeSpec::Knomial { k: 2, nodes: 8 }, &Placement::default()).expect("tree");
        // Binomial tree of 8: the root has 3 children (subtrees of 1, 2, 4 processes).
        assert_eq!(t.root().num_children(), 3);
        let mut sizes: Vec<usize> = t
            .root()
            .children()
            .iter()
            .map(|&c| t.subtree_height(c) as usize)
            .collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [0, 1, 2]);
        assert_eq!(t.num_nodes(), 8);
        let t =
            generate(&TreeSpec::Knomial { k: 3, nodes: 9 }, &Placement::default()).expect("tree");
        assert_eq!(t.root().num_children(), 4);
        assert_eq!(t.stats().depth, 2);
    }

    #[test]
    fn host_lists_place_processes_and_run_out() {
        let hosts = HostList::parse("host1:4\nhost2\nhost3:2\nhost2 # again\n").expect("list");
        assert_eq!(
            hosts.hosts(),
            [
                ("host1".to_string(), 4),
                ("host2".to_string(), 2),
                ("host3".to_string(), 2)
            ]
        );
        let p = Placement {
            fe_host: "fe".into(),
            hosts: Some(HostList::parse("i:2").expect("list")),
            backend_hosts: Some(hosts),
        };
        let t = generate(&TreeSpec::Generic(vec![2, 4]), &p).expect("tree");
        let names: Vec<String> = t.nodes().iter().map(|n| n.name().to_string()).collect();
        assert_eq!(
            names,
            [
                "fe:0", "i:0", "i:1", "host1:0", "host1:1", "host1:2", "host1:3", "host2:0",
                "host2:1", "host3:0", "host3:1"
            ]
        );
        for bad in ["a b", "", "fe:0", "x\ny"] {
            let p = Placement {
                fe_host: bad.into(),
                ..Placement::default()
            };
            let e = generate(&TreeSpec::Generic(vec![2]), &p)
                .unwrap_err()
                .to_string();
            assert!(
                e.ends_with("is not a host name (letters, digits, '.', '-', '_')"),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        let e = generate(&TreeSpec::Generic(vec![2, 5]), &p).unwrap_err();
        assert!(
            e.to_string()
                .contains("more than the 8 slot(s) of the back-end host list"),
            "{e}"
        );
        let many = HostList::parse("a:18446744073709551615\nb:5\na:7\n").expect("list");
        assert_eq!(many.hosts()[0], ("a".to_string(), usize::MAX));
        assert_eq!(many.slots(), usize::MAX);
        assert!(HostList::parse("a:0").is_err());
        assert!(HostList::parse("a b").is_err());
        assert_eq!(HostList::parse("a:x").unwrap_err().line, Some(1));
    }

    #[test]
    fn fan_outs_per_process_follow_mrnet_generic_syntax() {
        let spec = TreeSpec::parse("g:2:3,1:0,2x1,0").expect("spec");
        assert_eq!(
            spec,
            TreeSpec::PerNode(vec![vec![2], vec![3, 1], vec![0, 1, 1, 0]])
        );
        // Without its `g:`, as MRNet's topgen also takes it after `-t g:`.
        assert_eq!(TreeSpec::parse("2:3,1:0,2x1,0").ok(), Some(spec.clone()));
        let t = generate(&spec, &Placement::default()).expect("tree");
        // Root, 2, 4, then the two children of the 2nd and 3rd processes of level 2.
        assert_eq!(shape(&t), [2, 3, 1, 0, 1, 1, 0, 0, 0]);
        assert_eq!((t.num_nodes(), t.num_backends()), (9, 4));
        assert_eq!(spec.num_nodes(), 9);
        // The guide's example topology (C.2) as a spec: nutmeg => 4; c03 => 1; c04 => 4.
        let t = generate(
            &TreeSpec::parse("g:4:0,0,1,4").expect("spec"),
            &Placement::default(),
        )
        .expect("tree");
        assert_eq!(shape(&t), [4, 0, 0, 1, 4, 0, 0, 0, 0, 0]);
        assert_eq!(t.num_backends(), 7);
        for (bad, want) in [
            (
                "g:2:1",
                "level 1 makes 2 process(es), so level 2 lists 2 fan-out(s) (0 for a back-end), not 1",
            ),
            ("g:2:1,1,1", "not 3"),
            ("g:2,2:1", "the first level is the root alone"),
            ("g:0:1", "the root's fan-out is 0"),
            (
                "g:2:1,y",
                "a fan-out must be a whole number (0 for a back-end), not 'y'",
            ),
            ("g:2:0x1,1", "a repeat count must be"),
            ("g:1:99999999999x1", "more than 1048576 processes"),
            ("g:1048576:1048576x1", "more than 1048576 processes"),
            ("g:3,", "a fan-out must be a whole number"),
        ] {
            let e = TreeSpec::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("bad tree spec '{bad}': ")), "{e}");
            assert!(e.contains(want), "{bad}: {e}");
        }
        // Built by hand, the same rules hold.
        let e = generate(
            &TreeSpec::PerNode(vec![vec![2], vec![1]]),
            &Placement::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("bad tree spec: level 1 makes 2"), "{e}");
    }

    proptest::proptest! {
        /// Any per-process spec written out in MRNet's syntax (with `NxC` runs where fan-outs
        /// repeat) parses back to the same fan-outs, and the tree has them, level by level.
        #[test]
        fn per_node_specs_make_the_trees_they_list(
            root in 1usize..5,
            seeds in proptest::collection::vec(proptest::collection::vec(0usize..4, 0..40), 0..4)
        ) {
            let mut levels = vec![vec![root]];
            for seed in seeds {
                let width: usize = levels.last().map_or(0, |l| l.iter().sum());
                if width == 0 {
                    break;
                }
                levels.push((0..width).map(|i| seed.get(i).copied().unwrap_or(1)).collect());
            }
            let text: Vec<String> = levels
                .iter()
                .map(|l| {
                    let mut items: Vec<String> = Vec::new();
                    let mut i = 0;
                    while i < l.len() {
                        let run = l[i..].iter().take_while(|&&f| f == l[i]).count();
                        items.push(if run > 1 { format!("{run}x{}", l[i]) } else { l[i].to_string() });
                        i += run;
                    }
                    items.join(",")
                })
                .collect();
            let text = format!("g:{}", text.join(":"));
            let spec = TreeSpec::parse(&text);
            // One level has neither `:` nor `,`: it reads as the per-level spec, the same tree.
            let want = if levels.len() == 1 {
                TreeSpec::Generic(vec![root])
            } else {
                TreeSpec::PerNode(levels.clone())
            };
            proptest::prop_assert_eq!(spec.as_ref().ok(), Some(&want), "{}", text);
            let t = generate(&TreeSpec::PerNode(levels.clone()), &Placement::default());
            proptest::prop_assert!(t.is_ok(), "{}", text);
            let Ok(t) = t else { return Ok(()) };
            let listed: Vec<usize> = levels.iter().flatten().copied().collect();
            let got = shape(&t);
            proptest::prop_assert_eq!(&got[..listed.len()], &listed[..]);
            proptest::prop_assert!(got[listed.len()..].iter().all(|&c| c == 0));
            proptest::prop_assert_eq!(t.num_nodes(), 1 + listed.iter().sum::<usize>());
            proptest::prop_assert_eq!(t.num_backends(), got[1..].iter().filter(|&&c| c == 0).count());
        }
    }

    proptest::proptest! {
        #[test]
        fn any_spec_or_host_list_is_a_tree_or_an_error_without_a_panic(
            s in "[bkgx]?:?([0-9]{1,3}|[0-9]{20}|[x^@:,\n]){0,8}|\\PC{0,30}"
        ) {
            match TreeSpec::parse(&s) {
                Ok(spec) if spec.num_nodes() <= 5_000 => {
                    let t = generate(&spec, &Placement::default());
                    proptest::prop_assert!(t.is_ok_and(|t| t.num_backends() > 0), "{}", s);
                }
                Ok(_) => {}
                Err(e) => proptest::prop_assert!(!e.to_string().contains('\n'), "{}", e),
            }
            if let Err(e) = HostList::parse(&s) {
                proptest::prop_assert!(!e.to_string().contains('\n'), "{}", e);
            }
        }
    }
}
