//! The pictures' unit tests: layouts, bounds, escaping, and what the SVG and DOT hold.

use super::*;
use crate::{Topology, VectorTime};

fn hop(op: &str, seq: u32, from: usize, to: usize, t: u64) -> Hop {
    Hop {
        op: op.into(),
        seq,
        root: 0,
        from,
        to,
        bytes: 8,
        time_ns: t,
        vc: VectorTime(vec![0; 4]),
    }
}

#[test]
fn layouts_follow_geometry() {
    let ring = Trace::new(&Topology::ring(8).unwrap(), vec![]);
    let (pos, _) = layout(&ring);
    // On a circle: every node equally far from the centre.
    let c = (
        pos.iter().map(|p| p.0).sum::<f64>() / 8.0,
        pos.iter().map(|p| p.1).sum::<f64>() / 8.0,
    );
    let d: Vec<f64> = pos
        .iter()
        .map(|p| ((p.0 - c.0).powi(2) + (p.1 - c.1).powi(2)).sqrt())
        .collect();
    assert!(d.iter().all(|x| (x - d[0]).abs() < 0.01), "{d:?}");
    // Process 0 at the top.
    assert!(pos[0].1 < pos[2].1 && (pos[0].0 - c.0).abs() < 0.01);
    let grid = Trace::new(&Topology::torus2(3, 4).unwrap(), vec![]);
    let (pos, _) = layout(&grid);
    assert_eq!(pos[0].1, pos[3].1);
    assert!(pos[4].1 > pos[0].1 && pos[4].0 == pos[0].0);
    let t3 = Trace::new(&Topology::torus(&[2, 2, 2]).unwrap(), vec![]);
    let (pos, _) = layout(&t3);
    assert!(pos[4].0 > pos[1].0, "the second panel is to the right");
}

#[test]
fn a_hostile_trace_draws_without_panicking() {
    // `Trace::parse` refuses these; a trace built in code still draws.
    let mut t = Trace::new(&Topology::ring(3).unwrap(), vec![]);
    (t.shape, t.dims, t.centre) = ("torus".into(), vec![0, 3], 9);
    assert_eq!(layout(&t).0.len(), 3);
    assert!(svg(&t, None).contains("</svg>"));
    let mut s = Trace::new(&Topology::star(2, 0).unwrap(), vec![]);
    s.centre = 9;
    assert_eq!(layout(&s).0.len(), 2);
}

/// Whether `text` is well-formed XML (as a browser reads an SVG file).
fn parses_as_xml(text: &str) -> Result<(), String> {
    roxmltree::Document::parse(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn control_characters_in_names_leave_the_svg_well_formed() {
    // XML forbids C0 controls even as references: the escape of & < > alone left
    // "ri\x01ng" in the title, and the file did not parse.
    let text = "topo-trace 1\nshape ring\nn 2\nedge 0 1 1\n\
                hop op=b\u{2}c<&\u{1b}[31m\u{ffff} seq=0 root=0 from=0 to=1 bytes=8 t=1 vc=1,0\n";
    let mut t = Trace::parse(text, "t").unwrap();
    t.shape = "ri\u{1}ng\u{7f}".into();
    let d = drawing(&t).unwrap();
    assert_eq!(d.files.len(), 5);
    for (name, body) in &d.files {
        if name.ends_with(".svg") {
            assert_eq!(parses_as_xml(body), Ok(()), "{name}: {body}");
        }
        if name.ends_with(".dot") {
            assert!(
                !body.contains('\u{2}') && !body.contains('\u{1b}'),
                "{name}"
            );
        }
    }
    let svg = &d.files[1].1;
    assert!(svg.contains("ri\u{fffd}ng"), "{svg}");
    assert_eq!(escape("a\tb\u{0}<\"&"), "a\tb\u{fffd}&lt;&quot;&amp;");
    assert_eq!(dot_escape("a\"b\\\u{1}"), "a\\\"b\\\\\u{fffd}");
}

#[test]
fn vector_times_near_the_top_of_u64_sort_without_overflow() {
    let mut a = hop("broadcast", 0, 0, 1, 1);
    a.vc = VectorTime(vec![u64::MAX, 1, 0, 0]);
    let mut b = hop("broadcast", 0, 1, 0, 1);
    b.vc = VectorTime(vec![u64::MAX, 1, 0, 0]);
    let t = Trace::new(&Topology::ring(4).unwrap(), vec![a, b]);
    let cs = calls(&t);
    assert_eq!(cs.values().next().map(Vec::len), Some(2));
}

#[test]
fn file_stems_are_safe_file_names() {
    let c = |op: &str| Call {
        op: op.into(),
        seq: 3,
        root: 1,
    };
    // A '/' named a directory that did not exist: topo-draw failed half-way.
    assert_eq!(c("x/y").file_stem(), "x_y-3-1");
    assert_eq!(c("../..").file_stem(), ".._..-3-1");
    assert_eq!(c("a\u{1}é b").file_stem(), "a___b-3-1");
    assert_eq!(c("broadcast").file_stem(), "broadcast-3-1");
    let long = c(&"o".repeat(10_000)).file_stem();
    assert_eq!(long.len(), STEM_OP_CHARS + "-3-1".len());
}

#[test]
fn too_many_processes_or_channels_are_refused() {
    let mut t = Trace::new(&Topology::ring(4).unwrap(), vec![]);
    t.n = MAX_PROCESSES + 1;
    let e = drawing(&t).unwrap_err().to_string();
    assert!(
        e.starts_with("a topology of 4097 processes is too large to draw"),
        "{e}"
    );
    t.n = MAX_PROCESSES;
    t.edges = vec![(0, 1, 1); MAX_CHANNELS + 1];
    let e = drawing(&t).unwrap_err().to_string();
    assert!(e.contains("16385 channels"), "{e}");
    // The largest topology drawn, its own picture: well within the output's bound.
    let big = Trace::new(&Topology::fully_connected(181).unwrap(), vec![]);
    assert!(big.edges.len() <= MAX_CHANNELS);
    let d = drawing(&big).unwrap();
    let bytes: usize = d.files.iter().map(|f| f.1.len()).sum();
    assert!(bytes < MAX_OUTPUT_BYTES / 4, "{bytes}");
    let torus = Trace::new(&Topology::torus2(64, 64).unwrap(), vec![]);
    assert!(drawing(&torus).is_ok());
    // Built in code, not parsed: what would index past the layout is refused.
    let mut t = Trace::new(&Topology::ring(4).unwrap(), vec![hop("b", 0, 0, 4, 1)]);
    let e = drawing(&t).unwrap_err().to_string();
    assert_eq!(e, "hop 0-4 is not between two of the 4 processes");
    t.hops.clear();
    t.edges.push((2, 7, 1));
    assert!(drawing(&t).is_err());
}

#[test]
fn the_calls_drawn_are_bounded_and_the_rest_counted() {
    // 500 one-hop calls on 1000 processes wrote 218 MB in 1003 files.
    let ring = Topology::ring(1000).unwrap();
    let hops: Vec<Hop> = (0..500)
        .map(|k| Hop {
            vc: VectorTime(vec![0; 1000]),
            ..hop("broadcast", k, 0, 1, u64::from(k))
        })
        .collect();
    let d = drawing(&Trace::new(&ring, hops)).unwrap();
    assert_eq!(d.calls, 500);
    assert!(d.drawn > 0 && d.drawn <= MAX_CALL_PICTURES, "{}", d.drawn);
    assert_eq!(d.files.len(), 3 + 2 * d.drawn);
    let bytes: usize = d.files.iter().map(|f| f.1.len()).sum();
    assert!(bytes <= MAX_OUTPUT_BYTES, "{bytes}");
    let page = &d.files[0].1;
    assert!(
        page.contains(&format!("<p>{} more calls are not drawn", 500 - d.drawn)),
        "{}",
        &page[page.len().saturating_sub(300)..]
    );
    assert_eq!(page.matches("<svg").count(), 1 + d.drawn);
    // Many small calls: the count bounds them.
    let small = Topology::ring(4).unwrap();
    let hops = (0..300).map(|k| hop("reduce", k, 0, 1, 1)).collect();
    let d = drawing(&Trace::new(&small, hops)).unwrap();
    assert_eq!((d.calls, d.drawn), (300, MAX_CALL_PICTURES));
    // One call too large for the output (an arrow and a label for each of 100,000 channels):
    // left out, not drawn whole first.
    let big_ring = Topology::ring(MAX_PROCESSES).unwrap();
    let hops = (0..100_000)
        .map(|k| {
            let from = k % MAX_PROCESSES;
            let to = (from + 1 + k / MAX_PROCESSES) % MAX_PROCESSES;
            hop("send", 0, from, to, k as u64)
        })
        .collect();
    let d = drawing(&Trace::new(&big_ring, hops)).unwrap();
    assert_eq!((d.calls, d.drawn), (1, 0));
    assert!(d.files[0].1.contains("<p>1 more calls are not drawn"));
    // A channel used 400,000 times is one arrow and one short label, its tooltip bounded: a
    // small picture (one number a hop made a picture too large to draw).
    let hops = (0..400_000).map(|k| hop("send", 0, 0, 1, k)).collect();
    let d = drawing(&Trace::new(&small, hops)).unwrap();
    assert_eq!((d.calls, d.drawn), (1, 1));
    let svg = &d.files[3].1;
    assert!(svg.len() < 8192, "{} bytes", svg.len());
    assert_eq!(svg.matches("marker-end").count(), 1);
    assert!(svg.contains(">1, 2, 3, … (400000 hops)</text>"), "{svg}");
    assert!(svg.contains("hop 16: 0 -> 1") && svg.contains("… and 399984 more hops"));
}

#[test]
fn hops_over_one_channel_share_one_arrow_and_one_label() {
    assert_eq!(hop_label(&[1, 9, 17]), "1, 9, 17");
    assert_eq!(hop_label(&[2, 4, 6, 8]), "2, 4, 6, 8");
    assert_eq!(hop_label(&[1, 9, 17, 25, 33]), "1, 9, 17, … (5 hops)");
    // A token three times round a ring of 8: hop k+1 over channel k -> k+1, as recorded.
    let ring = Topology::ring(8).unwrap();
    let hops = (0..24)
        .map(|k| hop("send", 0, k % 8, (k + 1) % 8, k as u64))
        .collect();
    let trace = Trace::new(&ring, hops);
    let cs = calls(&trace);
    let (c, hops) = cs.iter().next().unwrap();
    let s = svg(&trace, Some((c, hops)));
    assert_eq!(s.matches("marker-end").count(), 8, "{s}");
    assert_eq!(s.matches("<text class=\"hop\"").count(), 8, "{s}");
    for k in 1..=8 {
        let label = format!(">{}, {}, {}</text>", k, k + 8, k + 16);
        assert_eq!(s.matches(&label).count(), 1, "{label} in {s}");
    }
    assert_eq!(parses_as_xml(&s), Ok(()));
    let d = dot(&trace, Some((c, hops)));
    assert!(
        d.contains("0 -- 1 [dir=forward color=red fontcolor=red label=\"1, 9, 17\"]"),
        "{d}"
    );
    assert_eq!(d.matches("dir=forward").count(), 8);
}

#[test]
fn svg_and_dot_hold_nodes_edges_and_numbered_hops() {
    let t = Topology::ring(4).unwrap();
    let trace = Trace::new(
        &t,
        vec![
            hop("broadcast", 0, 0, 1, 5),
            hop("broadcast", 0, 0, 3, 4),
            hop("send", 0, 2, 1, 9),
        ],
    );
    let cs = calls(&trace);
    assert_eq!(cs.len(), 2, "the sends are one picture");
    let (c, hops) = cs.iter().next().unwrap();
    assert_eq!(c.op, "broadcast");
    // In the order sent.
    assert_eq!((hops[0].to, hops[1].to), (3, 1));
    let s = svg(&trace, Some((c, hops)));
    assert_eq!(s.matches("<circle").count(), 4);
    assert_eq!(s.matches("marker-end").count(), 2);
    assert!(s.contains(">1</text>") && s.contains(">2</text>"));
    let d = dot(&trace, Some((c, hops)));
    assert!(
        d.contains("0 -- 3 [dir=forward color=red fontcolor=red label=\"1\"]"),
        "{d}"
    );
    assert_eq!(d.matches(" -- ").count(), 4 + 2);
    let d = drawing(&trace).unwrap();
    let p = &d.files[0].1;
    assert_eq!(p.matches("<svg").count(), 3);
    assert!(!p.contains("not drawn"));
    let names: Vec<&str> = d.files.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "index.html",
            "topology.svg",
            "topology.dot",
            "001-broadcast-0-0.svg",
            "001-broadcast-0-0.dot",
            "002-send-0-0.svg",
            "002-send-0-0.dot"
        ]
    );
}
