//! The built-in filters: [`TFILTER_NULL`] passes everything on; [`TFILTER_SUM`],
//! [`TFILTER_MIN`], [`TFILTER_MAX`] and [`TFILTER_AVG`] fold the numbers of a wave's packets
//! element by element (the average as a sum and its weight below the root, so it stays exact
//! over unequal subtrees); [`TFILTER_ARRAY_CONCAT`] makes one array of them. The numeric
//! filters work on the packets' bytes in place: they decode nothing and allocate one packet per
//! wave.

use crate::filter::{
    Filter, FilterError, FilterId, FnFilter, TopologyLocalInfo, TFILTER_ARRAY_CONCAT, TFILTER_AVG,
    TFILTER_MAX, TFILTER_MIN, TFILTER_NULL, TFILTER_SUM,
};
use crate::format::{BaseType, ElemType, Format, Shape};
use crate::packet::{Packet, HEADER_LEN};
use std::rc::Rc;

/// The built-in filter with id `id`.
///
/// Built-ins are stateless, take no parameters and never send packets back.
pub(crate) fn builtin(id: FilterId) -> Option<Rc<dyn Filter>> {
    type Builtin =
        fn(&mut Vec<Packet>, &mut Vec<Packet>, &TopologyLocalInfo) -> Result<(), FilterError>;
    let f: Builtin = match id {
        TFILTER_NULL => |i, o, _| {
            o.append(i);
            Ok(())
        },
        TFILTER_SUM => |i, o, info| fold(i, o, info, Op::Sum),
        TFILTER_MIN => |i, o, info| fold(i, o, info, Op::Min),
        TFILTER_MAX => |i, o, info| fold(i, o, info, Op::Max),
        TFILTER_AVG => |i, o, info| fold(i, o, info, Op::Avg),
        TFILTER_ARRAY_CONCAT => |i, o, info| concat(i, o, info),
        _ => return None,
    };
    Some(Rc::new(FnFilter {
        format: None,
        f: Box::new(move |cx| f(cx.packets_in, cx.packets_out, cx.info)),
        get_state: None,
    }))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Sum,
    Min,
    Max,
    /// A sum, divided by the weight at the root.
    Avg,
}

/// Fold `x` into `acc`, element by element; both hold data of the format `codes` names.
fn fold_data(acc: &mut [u8], x: &[u8], codes: &[u8], op: Op) -> Result<(), FilterError> {
    let mut at = 0;
    for (i, &c) in codes.iter().enumerate() {
        let t = ElemType::from_code(c)
            .ok_or_else(|| FilterError(format!("element {} has an unknown type", i + 1)))?;
        // `fold_wave` refused non-numbers already.
        let Some(w) = t.base.width() else {
            return Err(FilterError(format!("element {} is not a number", i + 1)));
        };
        let head = match t.shape {
            Shape::Scalar => 0,
            Shape::Array => 4,
            Shape::LargeArray => 8,
        };
        let count = |b: &[u8]| -> usize {
            match head {
                4 => b
                    .get(at..at + 4)
                    .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize),
                8 => b.get(at..at + 8).map_or(0, |s| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(s);
                    u64::from_le_bytes(a) as usize
                }),
                _ => 1,
            }
        };
        let (n, m) = (count(acc), count(x));
        if n != m {
            return Err(FilterError(format!(
                "element {}: arrays of {n} and {m} items cannot be combined item by item",
                i + 1
            )));
        }
        // Checked: a count from the data is only trusted as far as the data goes.
        let start = at + head;
        let end = n.checked_mul(w).and_then(|b| start.checked_add(b));
        let Some(end) = end else {
            return Err(FilterError(format!("element {} is cut short", i + 1)));
        };
        let (Some(a), Some(b)) = (acc.get_mut(start..end), x.get(start..end)) else {
            return Err(FilterError(format!("element {} is cut short", i + 1)));
        };
        fold_items(a, b, t.base, op);
        at = end;
    }
    Ok(())
}

macro_rules! fold_as {
    ($a:expr, $b:expr, $t:ty, $op:expr) => {{
        const W: usize = std::mem::size_of::<$t>();
        for (a, b) in $a.chunks_exact_mut(W).zip($b.chunks_exact(W)) {
            let mut x = [0u8; W];
            let mut y = [0u8; W];
            x.copy_from_slice(a);
            y.copy_from_slice(b);
            let (x, y) = (<$t>::from_le_bytes(x), <$t>::from_le_bytes(y));
            let r = match $op {
                Op::Sum | Op::Avg => Num::add(x, y),
                Op::Min => {
                    if y < x {
                        y
                    } else {
                        x
                    }
                }
                Op::Max => {
                    if y > x {
                        y
                    } else {
                        x
                    }
                }
            };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

/// Addition as the sum filter does it: integers wrap (as C's unsigned arithmetic does, and
/// without a panic in debug builds), floats add.
trait Num {
    fn add(self, other: Self) -> Self;
}

macro_rules! num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn add(self, other: $t) -> $t {
                self.wrapping_add(other)
            }
        }
    )*};
}
num_int!(i8, u8, i16, u16, i32, u32, i64, u64);

impl Num for f32 {
    fn add(self, other: f32) -> f32 {
        self + other
    }
}

impl Num for f64 {
    fn add(self, other: f64) -> f64 {
        self + other
    }
}

fn fold_items(a: &mut [u8], b: &[u8], base: BaseType, op: Op) {
    match base {
        BaseType::Char => fold_as!(a, b, i8, op),
        BaseType::UChar => fold_as!(a, b, u8, op),
        BaseType::Short => fold_as!(a, b, i16, op),
        BaseType::UShort => fold_as!(a, b, u16, op),
        BaseType::Int => fold_as!(a, b, i32, op),
        BaseType::UInt => fold_as!(a, b, u32, op),
        BaseType::Long => fold_as!(a, b, i64, op),
        BaseType::ULong => fold_as!(a, b, u64, op),
        BaseType::Float => fold_as!(a, b, f32, op),
        BaseType::Double => fold_as!(a, b, f64, op),
        BaseType::Str => {}
    }
}

/// Refuse formats with an element that is not a number.
fn numeric_only(codes: &[u8]) -> Result<(), FilterError> {
    for (i, &c) in codes.iter().enumerate() {
        match ElemType::from_code(c) {
            Some(t) if t.base.is_numeric() => {}
            Some(t) => {
                return Err(FilterError(format!(
                    "element {} is {t} ({}), and only numbers can be combined",
                    i + 1,
                    t.describe()
                )))
            }
            None => {
                return Err(FilterError(format!(
                    "element {} has an unknown type",
                    i + 1
                )))
            }
        }
    }
    Ok(())
}

/// Divide every number of `data` by `d` (integers truncate).
fn divide_data(data: &mut [u8], codes: &[u8], d: u32) {
    macro_rules! div_as {
        ($s:expr, $t:ty, $d:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            for c in $s.chunks_exact_mut(W) {
                let mut x = [0u8; W];
                x.copy_from_slice(c);
                let v = <$t>::from_le_bytes(x) / ($d as $t);
                c.copy_from_slice(&v.to_le_bytes());
            }
        }};
    }
    let mut at = 0;
    for &c in codes {
        let Some(t) = ElemType::from_code(c) else {
            return;
        };
        let Some(w) = t.base.width() else {
            return;
        };
        let (head, n) = match t.shape {
            Shape::Scalar => (0, 1),
            Shape::Array => (
                4,
                data.get(at..at + 4)
                    .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize),
            ),
            Shape::LargeArray => (
                8,
                data.get(at..at + 8).map_or(0, |s| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(s);
                    u64::from_le_bytes(a) as usize
                }),
            ),
        };
        let start = at + head;
        let end = start + n * w;
        let Some(s) = data.get_mut(start..end) else {
            return;
        };
        match t.base {
            BaseType::Char => div_as!(s, i8, d.min(i8::MAX as u32)),
            BaseType::UChar => div_as!(s, u8, d.min(u8::MAX as u32)),
            BaseType::Short => div_as!(s, i16, d.min(i16::MAX as u32)),
            BaseType::UShort => div_as!(s, u16, d.min(u16::MAX as u32)),
            BaseType::Int => div_as!(s, i32, d.min(i32::MAX as u32)),
            BaseType::UInt => div_as!(s, u32, d),
            BaseType::Long => div_as!(s, i64, d),
            BaseType::ULong => div_as!(s, u64, d),
            BaseType::Float => div_as!(s, f32, d),
            BaseType::Double => div_as!(s, f64, d),
            BaseType::Str => {}
        }
        at = end;
    }
}

/// Combine a wave into its first packet's copy: the one allocation of a numeric filter.
fn fold_wave(packets: &[Packet], op: Op) -> Result<Packet, FilterError> {
    let Some(first) = packets.first() else {
        return Err(FilterError("an empty wave".into()));
    };
    let codes = first.codes();
    numeric_only(codes)?;
    let mut acc = first.clone();
    let mut weight = first.weight();
    for p in &packets[1..] {
        if p.codes() != codes {
            return Err(FilterError(
                format!(
                    "packets of \"{}\" and \"{}\" in one wave; a {op:?} filter needs one format",
                    first.format_string(),
                    p.format_string()
                )
                .replace("Sum", "sum")
                .replace("Min", "min")
                .replace("Max", "max"),
            ));
        }
        fold_data(acc.data_mut(), p.data(), codes, op)?;
        weight = weight.saturating_add(p.weight());
    }
    acc.set_weight(weight);
    Ok(acc)
}

fn fold(
    packets_in: &[Packet],
    packets_out: &mut Vec<Packet>,
    info: &TopologyLocalInfo,
    op: Op,
) -> Result<(), FilterError> {
    let mut out = fold_wave(packets_in, op)?;
    out.set_src_rank(info.rank);
    if op == Op::Avg && info.is_root() {
        let (w, codes) = (out.weight().max(1), out.codes().to_vec());
        divide_data(out.data_mut(), &codes, w);
    }
    packets_out.push(out);
    Ok(())
}

fn concat(
    packets_in: &[Packet],
    packets_out: &mut Vec<Packet>,
    info: &TopologyLocalInfo,
) -> Result<(), FilterError> {
    let Some(first) = packets_in.first() else {
        return Err(FilterError("an empty wave".into()));
    };
    let one = |p: &Packet| -> Result<ElemType, FilterError> {
        match p.codes() {
            [c] => {
                ElemType::from_code(*c).ok_or_else(|| FilterError("an unknown element type".into()))
            }
            _ => Err(FilterError(format!(
                "the concat filter takes packets of one element, not \"{}\"",
                p.format_string()
            ))),
        }
    };
    let t0 = one(first)?;
    let large = packets_in
        .iter()
        .any(|p| one(p).is_ok_and(|t| t.shape == Shape::LargeArray));
    let mut items: u64 = 0;
    let mut bytes = 0usize;
    for p in packets_in.iter() {
        let t = one(p)?;
        if t.base != t0.base {
            return Err(FilterError(format!(
                "the concat filter got {} and {} in one wave; it needs one type",
                t0, t
            )));
        }
        let (n, head) = item_count(p.data(), t.shape);
        items += n;
        bytes += p.data().len() - head;
    }
    let out_t = ElemType {
        base: t0.base,
        shape: if large {
            Shape::LargeArray
        } else {
            Shape::Array
        },
    };
    if !large && items > u64::from(u32::MAX) {
        return Err(FilterError(format!(
            "{items} items are too many for %a; send %A arrays"
        )));
    }
    let format = Format::from_elems(vec![out_t]).map_err(|e| FilterError(e.to_string()))?;
    let mut out = Packet::build(
        first.stream_id(),
        first.tag(),
        &format,
        HEADER_LEN + 9 + bytes,
        |w| {
            if large {
                w.put(&items.to_le_bytes());
            } else {
                w.put(&(items as u32).to_le_bytes());
            }
            for p in packets_in.iter() {
                let t = one(p).unwrap_or(t0);
                let (_, head) = item_count(p.data(), t.shape);
                w.put(&p.data()[head..]);
            }
        },
    );
    out.set_src_rank(info.rank);
    out.set_weight(
        packets_in
            .iter()
            .map(Packet::weight)
            .fold(0, u32::saturating_add),
    );
    packets_out.push(out);
    Ok(())
}

/// Items in a one-element packet's data and the bytes of its count prefix.
fn item_count(data: &[u8], shape: Shape) -> (u64, usize) {
    match shape {
        Shape::Scalar => (1, 0),
        Shape::Array => (
            data.get(..4)
                .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]).into()),
            4,
        ),
        Shape::LargeArray => (
            data.get(..8).map_or(0, |s| {
                let mut a = [0u8; 8];
                a.copy_from_slice(s);
                u64::from_le_bytes(a)
            }),
            8,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterContext;

    fn info(root: bool) -> TopologyLocalInfo {
        TopologyLocalInfo {
            rank: 9,
            parent: (!root).then_some(1),
            children: vec![],
            num_backends_below: 3,
            num_nodes: 4,
            num_backends: 3,
            depth: u32::from(!root),
        }
    }

    fn run(id: FilterId, mut wave: Vec<Packet>, root: bool) -> Result<Vec<Packet>, FilterError> {
        let f = builtin(id).ok_or_else(|| FilterError("no such filter".into()))?;
        let (mut out, mut rev, mut st) = (Vec::new(), Vec::new(), None);
        let info = info(root);
        f.run(&mut FilterContext {
            packets_in: &mut wave,
            packets_out: &mut out,
            packets_out_reverse: &mut rev,
            state: &mut st,
            params: None,
            info: &info,
        })?;
        assert!(rev.is_empty());
        Ok(out)
    }

    fn p<V: crate::codec::Pack>(fmt: &str, v: V) -> Packet {
        Packet::new(1, 100, fmt, v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn sum_min_max_over_every_numeric_type() {
        let wave = vec![
            p("%d %lf %ad %uc", (1i32, 0.5f64, vec![1, 2], 200u8)),
            p("%d %lf %ad %uc", (-4i32, 2.0f64, vec![10, -20], 100u8)),
            p("%d %lf %ad %uc", (10i32, -1.0f64, vec![0, 5], 1u8)),
        ];
        let out = run(TFILTER_SUM, wave.clone(), false).unwrap_or_default();
        assert_eq!(out.len(), 1);
        let s: (i32, f64, Vec<i32>, u8) = out[0].unpack("%d %lf %ad %uc").unwrap_or_default();
        assert_eq!(s, (7, 1.5, vec![11, -13], 45)); // u8 wraps: 301 mod 256
        assert_eq!((out[0].weight(), out[0].src_rank()), (3, 9));
        let m: (i32, f64, Vec<i32>, u8) = run(TFILTER_MIN, wave.clone(), false).unwrap_or_default()
            [0]
        .unpack("%d %lf %ad %uc")
        .unwrap_or_default();
        assert_eq!(m, (-4, -1.0, vec![0, -20], 1));
        let m: (i32, f64, Vec<i32>, u8) = run(TFILTER_MAX, wave, false).unwrap_or_default()[0]
            .unpack("%d %lf %ad %uc")
            .unwrap_or_default();
        assert_eq!(m, (10, 2.0, vec![10, 5], 200));
    }

    #[test]
    fn avg_is_exact_over_unequal_subtrees() {
        // Below the root: sums with weights.
        let left = run(
            TFILTER_AVG,
            vec![p("%lf", 1.0), p("%lf", 2.0), p("%lf", 3.0)],
            false,
        )
        .unwrap_or_default();
        assert_eq!(left[0].weight(), 3);
        let right = run(TFILTER_AVG, vec![p("%lf", 10.0)], false).unwrap_or_default();
        let mut wave = left;
        wave.extend(right);
        let top = run(TFILTER_AVG, wave, true).unwrap_or_default();
        assert_eq!(top[0].unpack::<f64>("%lf").ok(), Some(4.0)); // (1+2+3+10)/4
        let ints = run(TFILTER_AVG, vec![p("%d", 3), p("%d", 4)], true).unwrap_or_default();
        assert_eq!(ints[0].unpack::<i32>("%d").ok(), Some(3));
    }

    #[test]
    fn concat_makes_arrays_and_nests() {
        let lower =
            run(TFILTER_ARRAY_CONCAT, vec![p("%d", 1), p("%d", 2)], false).unwrap_or_default();
        assert_eq!(lower[0].format_string(), "%ad");
        let top = run(
            TFILTER_ARRAY_CONCAT,
            vec![lower[0].clone(), p("%d", 3)],
            true,
        )
        .unwrap_or_default();
        assert_eq!(top[0].unpack::<Vec<i32>>("%ad").ok(), Some(vec![1, 2, 3]));
        let s = run(
            TFILTER_ARRAY_CONCAT,
            vec![p("%s", "a"), p("%s", "bc")],
            true,
        )
        .unwrap_or_default();
        assert_eq!(
            s[0].unpack::<Vec<String>>("%as").ok(),
            Some(vec!["a".into(), "bc".into()])
        );
    }

    #[test]
    fn filters_refuse_what_they_cannot_combine() {
        let e = run(TFILTER_SUM, vec![p("%s", "x")], false).unwrap_err();
        assert!(e.0.contains("only numbers can be combined"), "{e}");
        let e = run(TFILTER_SUM, vec![p("%d", 1), p("%f", 1.0f32)], false).unwrap_err();
        assert!(e.0.contains("one format"), "{e}");
        let e = run(
            TFILTER_MAX,
            vec![p("%ad", vec![1]), p("%ad", vec![1, 2])],
            false,
        )
        .unwrap_err();
        assert!(e.0.contains("arrays of 1 and 2 items"), "{e}");
        let e = run(TFILTER_ARRAY_CONCAT, vec![p("%d %d", (1, 2))], false).unwrap_err();
        assert!(e.0.contains("one element"), "{e}");
        let e = run(
            TFILTER_ARRAY_CONCAT,
            vec![p("%d", 1), p("%f", 1.0f32)],
            false,
        )
        .unwrap_err();
        assert!(e.0.contains("one type"), "{e}");
    }

    #[test]
    fn an_array_count_past_the_data_is_an_error_not_an_overflow() {
        // `n * w` with a count of u64::MAX overflowed (a panic in debug builds).
        let codes: Vec<u8> = Format::parse("%Aud")
            .map(|f| f.codes().collect())
            .unwrap_or_default();
        let mut acc = u64::MAX.to_le_bytes().to_vec();
        let x = acc.clone();
        let e = fold_data(&mut acc, &x, &codes, Op::Sum).unwrap_err();
        assert_eq!(e.0, "element 1 is cut short");
        let mut acc = 3u32.to_le_bytes().to_vec();
        let x = acc.clone();
        let codes: Vec<u8> = Format::parse("%ad")
            .map(|f| f.codes().collect())
            .unwrap_or_default();
        assert!(fold_data(&mut acc, &x, &codes, Op::Max).is_err());
    }

    #[test]
    fn null_passes_everything() {
        let out = run(TFILTER_NULL, vec![p("%d", 1), p("%s", "x")], false).unwrap_or_default();
        assert_eq!(out.len(), 2);
    }
}
