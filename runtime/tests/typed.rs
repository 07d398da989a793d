//! Typed messages and reductions on a whole job (in-process layer, 4 PEs): every codec's
//! values arrive as sent, broadcasts reach every PE, and reductions of numbers, tuples,
//! booleans and located values give the answers worked out by hand.

use converse::typed::{
    And, BitOr, Elems, Located, MaxLoc, Min, Pod, Pods, Product, ReduceTo, Serde, Sum,
};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Point {
    x: f64,
    y: f64,
    pe: u32,
    pad: u32,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
enum Note {
    Hello { from: usize, name: String },
    Numbers(Vec<u32>),
}

const PES: usize = 4;

#[test]
fn every_codec_and_reduction_gives_what_was_sent() {
    let errors: Mutex<Vec<String>> = Mutex::default();
    let rt = converse::Runtime::from_args(["typed", "+p4", "+machine", "local", "+quiet"])
        .expect("runtime");
    let code = rt
        .run(|pe| {
            let me = pe.my_pe();
            let left = (me + PES - 1) % PES;
            // What this PE received, and the reductions' results, as lines to compare.
            let got: Rc<RefCell<Vec<String>>> = Rc::default();
            let g = got.clone();
            let point = pe.register_typed::<Pod<Point>, _>("point", move |_pe, p| {
                g.borrow_mut()
                    .push(format!("point {} {} {}", p.x, p.y, p.pe));
            });
            let g = got.clone();
            let points = pe.register_typed::<Pods<Point>, _>("points", move |_pe, v| {
                g.borrow_mut().push(format!("points {}", v.len()));
                g.borrow_mut()
                    .extend(v.iter().map(|p| format!("  {}", p.pe)));
            });
            let g = got.clone();
            let note = pe.register_typed::<Serde<Note>, _>("note", move |_pe, n| {
                g.borrow_mut().push(format!("note {n:?}"));
            });
            let g = got.clone();
            let pairs = pe.register_typed::<Elems<(u16, f32)>, _>("pairs", move |_pe, v| {
                g.borrow_mut().push(format!("pairs {v:?}"));
            });
            let g = got.clone();
            let sums = pe.register_typed::<Elems<(u64, f64)>, _>("sums", move |_pe, v| {
                g.borrow_mut().push(format!("sum {v:?}"));
            });
            let g = got.clone();
            let mins = pe.register_typed::<Elems<i32>, _>("mins", move |_pe, v| {
                g.borrow_mut().push(format!("min {v:?}"));
            });
            let g = got.clone();
            let prod = pe.register_typed::<Elems<f64>, _>("prod", move |_pe, v| {
                g.borrow_mut().push(format!("product {v:?}"));
            });
            let g = got.clone();
            let all = pe.register_typed::<Elems<bool>, _>("all", move |_pe, v| {
                g.borrow_mut().push(format!("and {v:?}"));
            });
            let g = got.clone();
            let bits = pe.register_typed::<Elems<u8>, _>("bits", move |_pe, v| {
                g.borrow_mut().push(format!("or {v:?}"));
            });
            let g = got.clone();
            let worst = pe.register_typed::<Elems<Located<f64>>, _>("worst", move |_pe, v| {
                g.borrow_mut()
                    .push(format!("maxloc {} at {}", v[0].value, v[0].at));
            });

            let mine = Point {
                x: me as f64 + 0.5,
                y: -(me as f64),
                pe: me as u32,
                pad: 0,
            };
            pe.send_typed((me + 1) % PES, point, &mine);
            pe.send_typed((me + 1) % PES, points, &[mine, mine, mine]);
            pe.send_typed(
                (me + 1) % PES,
                note,
                &Note::Hello {
                    from: me,
                    name: format!("PE {me} ✓"),
                },
            );
            if me == 0 {
                pe.broadcast_typed(note, &Note::Numbers(vec![1, 2, u32::MAX]));
                pe.broadcast_all_typed(pairs, &[(7, 0.25), (u16::MAX, -1.0)]);
            }
            pe.reduce_typed(&[(1u64, me as f64 * 0.5)], Sum, ReduceTo::All(sums));
            pe.reduce_typed(&[me as i32 - 2, 10 * me as i32], Min, ReduceTo::All(mins));
            pe.reduce_typed(&[me as f64 + 1.0], Product, ReduceTo::All(prod));
            pe.reduce_typed(&[true, me != 2], And, ReduceTo::All(all));
            pe.reduce_typed(&[1u8 << me], BitOr, ReduceTo::All(bits));
            // The largest value is PE 2's and PE 3's; the tie goes to the smaller place.
            let v = if me >= 2 { 9.5 } else { me as f64 };
            let at = me as u64;
            pe.reduce_typed(&[Located { value: v, at }], MaxLoc, ReduceTo::Root(worst));

            // Twelve lines on every PE, and PE 0's broadcast note or the max-loc result.
            let g = got.clone();
            pe.run_until(move |_| g.borrow().len() >= 13);
            let mut lines = got.borrow().clone();
            lines.sort();
            let mut want = vec![
                format!("point {} {} {left}", left as f64 + 0.5, -(left as f64)),
                "points 3".into(),
                format!("  {left}"),
                format!("  {left}"),
                format!("  {left}"),
                format!("note Hello {{ from: {left}, name: \"PE {left} ✓\" }}"),
                "pairs [(7, 0.25), (65535, -1.0)]".into(),
                "sum [(4, 3.0)]".into(),
                "min [-2, 0]".into(),
                "product [24.0]".into(),
                "and [true, false]".into(),
                "or [15]".into(),
            ];
            if me != 0 {
                want.push("note Numbers([1, 2, 4294967295])".into());
            } else {
                want.push("maxloc 9.5 at 2".into());
            }
            want.sort();
            if lines != want {
                if let Ok(mut e) = errors.lock() {
                    e.push(format!("PE {me}: got {lines:#?}\nwanted {want:#?}"));
                }
            }
            pe.barrier();
            if me == 0 {
                pe.exit(0);
            }
        })
        .expect("run");
    assert_eq!(code, 0);
    let errors = errors.into_inner().unwrap_or_default();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The right-typed twins of the module docs' `compile_fail` examples compile, so those fail
/// for the type alone.
#[allow(dead_code)]
fn right_types_compile(pe: &mut converse::Pe) {
    let h = pe.register_typed::<Pod<u64>, _>("n", |_pe, _n: u64| {});
    pe.send_typed(0, h, &1u64);
    let h = pe.register_typed::<Elems<u64>, _>("sum", |_pe, _v: Vec<u64>| {});
    pe.reduce_typed(&[1u64], Sum, ReduceTo::Root(h));
}

/// What PE 0 hears back from each typed arrival of `node_forms_and_multicast_deliver_once`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Heard {
    /// 0 multicast, 1 node send, 2 node broadcast, 3 node broadcast to all.
    kind: u32,
    /// The value that arrived.
    value: u32,
    /// The node of the PE that ran the handler.
    node: u32,
    /// The node the sender meant (node forms), or the sender (multicast).
    meant: u32,
}

#[test]
fn node_forms_and_multicast_deliver_once_with_their_values() {
    // One PE a node, and two: a node message runs on one PE of its node, whichever.
    for ppn in ["1", "2"] {
        node_forms(ppn);
    }
}

fn node_forms(ppn: &str) {
    let rt =
        converse::Runtime::from_args(["typed", "+p4", "+ppn", ppn, "+machine", "local", "+quiet"])
            .expect("runtime");
    let result: std::sync::Arc<Mutex<Option<Vec<Heard>>>> = Default::default();
    let code = rt
        .run(|pe| {
            let me = pe.my_pe();
            let nodes = pe.num_nodes();
            let heard: Rc<RefCell<Vec<Heard>>> = Rc::default();
            let h = heard.clone();
            let want = 3 * PES + PES + (nodes - 1) + nodes;
            let result = result.clone();
            let tell = pe.register_typed::<Pod<Heard>, _>("heard", move |pe, x| {
                h.borrow_mut().push(x);
                if h.borrow().len() == want {
                    if let Ok(mut r) = result.lock() {
                        *r = Some(h.borrow().clone());
                    }
                    pe.exit(0);
                }
            });
            let answer = move |pe: &mut converse::Pe, kind: u32, value: u32, meant: u32| {
                let node = pe.my_node() as u32;
                pe.send_typed(
                    0,
                    tell,
                    &Heard {
                        kind,
                        value,
                        node,
                        meant,
                    },
                );
            };
            let multi = pe.register_typed::<Pod<u32>, _>("multi", move |pe, v| {
                answer(pe, 0, v, v);
            });
            // The node a string names is its last word.
            let meant = |s: &str| {
                s.rsplit(' ')
                    .next()
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(u32::MAX)
            };
            let to_node = pe.register_typed::<Serde<String>, _>("to-node", move |pe, s| {
                answer(pe, 1, s.len() as u32, meant(&s));
            });
            let bcast = pe.register_typed::<Pods<u16>, _>("bcast", move |pe, v| {
                answer(pe, 2, v.iter().map(|&x| u32::from(x)).sum(), 0);
            });
            let bcast_all = pe.register_typed::<Pods<u16>, _>("bcast-all", move |pe, v| {
                answer(pe, 3, v.iter().map(|&x| u32::from(x)).sum(), 0);
            });
            pe.barrier();
            let others: Vec<usize> = (0..PES).filter(|&d| d != me).collect();
            pe.multicast_typed(&others, multi, &(me as u32));
            let target = (pe.my_node() + 1) % nodes;
            pe.send_node_typed(target, to_node, &format!("for node {target}"));
            if me == 0 {
                pe.broadcast_node_typed(bcast, &[1, 2, 3][..]);
                pe.broadcast_node_all_typed(bcast_all, &[10, 20][..]);
            }
        })
        .expect("run");
    assert_eq!(code, 0);
    let mut heard = result
        .lock()
        .ok()
        .and_then(|mut r| r.take())
        .expect("PE 0 heard all");
    heard.sort_by_key(|h| (h.kind, h.node, h.value));
    let of = |k: u32| heard.iter().filter(move |h| h.kind == k);
    // Multicast: each PE's value from every other PE, once.
    let mut multi: Vec<u32> = of(0).map(|h| h.value).collect();
    multi.sort_unstable();
    let want: Vec<u32> = (0..PES as u32).flat_map(|v| [v; PES - 1]).collect();
    assert_eq!(multi, want);
    // Node sends: run on the node they were meant for.
    assert_eq!(of(1).count(), PES);
    assert!(of(1).all(|h| h.node == h.meant), "{heard:?}");
    // Node broadcasts: once per other node, and once per node with this one.
    let nodes = PES / ppn.parse::<usize>().unwrap_or(1);
    assert!(of(2).all(|h| h.value == 6 && h.node != 0));
    assert_eq!(of(2).count(), nodes - 1);
    assert!(of(3).all(|h| h.value == 30));
    let mut reached: Vec<u32> = of(3).map(|h| h.node).collect();
    assert_eq!(reached.len(), nodes, "once per node");
    reached.dedup();
    assert_eq!(reached.len(), nodes, "each node once");
}
