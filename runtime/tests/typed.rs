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
