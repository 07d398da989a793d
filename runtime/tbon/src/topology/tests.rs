//! Unit tests of topologies.

use super::*;

fn e(parent: &str, children: &[&str], line: usize) -> Entry {
    let pn = |s: &str| {
        let (h, i) = s.split_once(':').unwrap_or((s, "0"));
        ProcName::new(h, i.parse().unwrap_or(0))
    };
    Entry {
        parent: pn(parent),
        children: children.iter().map(|c| pn(c)).collect(),
        line: Some(line),
    }
}

fn guide_example() -> Topology {
    Topology::from_entries(&[
        e("nutmeg:0", &["c01:0", "c02:0", "c03:0", "c04:0"], 1),
        e("c03:0", &["c05:0"], 2),
        e("c04:0", &["c06:0", "c07:0", "c08:0", "c09:0"], 3),
    ])
    .expect("the guide's example is a tree")
}

#[test]
fn the_guides_example_has_its_shape_and_ranks() {
    let t = guide_example();
    assert_eq!(t.num_nodes(), 10);
    assert_eq!(t.root().name().to_string(), "nutmeg:0");
    assert_eq!(t.root().rank(), FIRST_INTERNAL_RANK);
    let be: Vec<String> = t
        .backends()
        .iter()
        .map(|&i| t.nodes()[i].name().to_string())
        .collect();
    assert_eq!(
        be,
        ["c01:0", "c02:0", "c05:0", "c06:0", "c07:0", "c08:0", "c09:0"]
    );
    for (r, &i) in t.backends().iter().enumerate() {
        assert_eq!(t.nodes()[i].rank(), r as Rank);
        assert_eq!(t.find_rank(r as Rank), Some(i));
    }
    let c04 = t.find_name(&ProcName::new("c04", 0)).unwrap_or(0);
    assert_eq!(t.nodes()[c04].backend_ranks(), 3..7);
    assert_eq!(t.root().backend_ranks(), 0..7);
    assert_eq!(t.find_rank(t.nodes()[c04].rank()), Some(c04));
    assert_eq!(t.subtree_height(0), 2);
    assert_eq!(t.subtree_height(c04), 1);
    assert_eq!(t.parents().len(), 3);
    assert_eq!(t.internal().len(), 2);
    let s = t.stats();
    assert_eq!(
        (s.num_nodes, s.depth, s.min_fanout, s.max_fanout),
        (10, 2, 1, 4)
    );
    assert!((s.avg_fanout - 3.0).abs() < 1e-9);
    assert!((s.stddev_fanout - 2f64.sqrt()).abs() < 1e-9);
}

#[test]
fn not_a_tree_is_an_error_naming_the_line() {
    let two_parents =
        Topology::from_entries(&[e("a:0", &["b:0", "c:0"], 1), e("b:0", &["c:0"], 2)]);
    let msg = two_parents.unwrap_err().to_string();
    assert_eq!(
        msg,
        "line 2: c:0 already has the parent a:0 (line 1); a process has one parent"
    );
    let cycle = Topology::from_entries(&[
        e("r:0", &["x:0"], 1),
        e("a:0", &["b:0"], 2),
        e("b:0", &["a:0"], 3),
    ]);
    let msg = cycle.unwrap_err().to_string();
    assert!(msg.contains("is its own descendant"), "{msg}");
    let no_root = Topology::from_entries(&[e("a:0", &["b:0"], 1), e("b:0", &["a:0"], 2)]);
    assert!(no_root.unwrap_err().to_string().contains("no root"));
    let two_roots = Topology::from_entries(&[e("a:0", &["b:0"], 1), e("c:0", &["d:0"], 4)]);
    let msg = two_roots.unwrap_err().to_string();
    assert!(
        msg.starts_with("line 4: 2 roots: a:0 (line 1) and c:0 (line 4)"),
        "{msg}"
    );
    let own_child = Topology::from_entries(&[e("a:0", &["a:0"], 7)]);
    assert_eq!(
        own_child.unwrap_err().to_string(),
        "line 7: a:0 is listed as its own child"
    );
    let twice = Topology::from_entries(&[e("a:0", &["b:0"], 1), e("a:0", &["c:0"], 3)]);
    assert!(twice
        .unwrap_err()
        .to_string()
        .starts_with("line 3: a:0 already has its children listed at line 1"));
    assert!(Topology::from_entries(&[]).is_err());
}

#[test]
fn a_lone_root_is_a_tree_without_back_ends() {
    let t = Topology::from_entries(&[e("fe:0", &[], 1)]).expect("tree");
    assert_eq!((t.num_nodes(), t.num_backends()), (1, 0));
    assert_eq!(t.leaves(), [0]);
    assert_eq!(t.stats().depth, 0);
}

#[test]
fn a_tree_overlay_requires_a_back_end() {
    let lone = Topology::from_entries(&[e("fe:0", &[], 1)]).expect("tree");
    let msg = lone.require_backends().unwrap_err().to_string();
    assert_eq!(
        msg,
        "the tree is the front-end fe:0 alone: a tree overlay needs at least one back-end"
    );
    assert_eq!(guide_example().require_backends(), Ok(()));
}

#[test]
fn a_long_cycle_is_named_in_linear_time() {
    // 200,000 processes in a ring beside the root: a quadratic search of the path (the old
    // code) would take minutes here.
    let n = 200_000;
    let name = |i: usize| format!("c:{i}");
    let mut entries = vec![e("r:0", &["x:0"], 1)];
    for i in 0..n {
        let (p, c) = (name(i), name((i + 1) % n));
        entries.push(e(&p, &[&c], i + 2));
    }
    let msg = Topology::from_entries(&entries).unwrap_err().to_string();
    assert!(msg.contains("is its own descendant (c:"), "{msg}");
    assert!(
        msg.contains("(200000 processes in all)") && msg.len() < 400,
        "{msg}"
    );
    assert!(
        msg.ends_with("so it is not connected to the root r:0"),
        "{msg}"
    );
}

#[test]
fn files_and_parent_lists_round_trip() {
    let t = guide_example();
    let again = crate::topology_file::parse(&t.to_topology_file()).expect("parse");
    assert_eq!(again, t);
    let items = t
        .nodes()
        .iter()
        .map(|n| (n.name().clone(), n.parent()))
        .collect();
    assert_eq!(Topology::from_parents(items), Some(t.clone()));
    let dot = t.to_dot();
    assert!(dot.contains("\"c04:0\" -> \"c06:0\";"), "{dot}");
    assert!(dot.contains("rank 0 (back-end)"), "{dot}");
    assert_eq!(dot.matches(" -> ").count(), 9);
}
