//! The typed codec: Rust values to and from the data elements a format string names
//! (Appendix E), in their wire form. [`Pack`] and [`Element`] write values, [`Unpack`] and
//! [`FromElement`] read them back through a bounds-checked [`Reader`], [`Value`] is an element
//! of any type for code that learns the format at run time, and `validate` checks bytes from
//! outside once so that reading them later never fails for want of data.
//!
//! The wire form of each element: scalars in their width, little-endian; strings as a u32
//! byte length and the bytes; `a` arrays as a u32 item count and the items, `A` arrays the same
//! with a u64 count; no padding. [`Packet`](crate::Packet) puts them after its header.

use crate::format::{BaseType, ElemType, Format, Shape};
use crate::packet::PacketError;
use crate::value::Value;
use converse::Message;

fn type_error(index: usize, format: &Format, expected: ElemType, found: ElemType) -> PacketError {
    PacketError::Type {
        index: index + 1,
        format: format.to_string(),
        expected: format!("{expected} ({})", expected.describe()),
        found: format!("{found} ({})", found.describe()),
    }
}

/// Large arrays (`%A...`): wrap a `Vec` or slice to pack or unpack it with a 64-bit length.
///
/// ```
/// use converse_tbon::{Large, Packet};
/// let p = Packet::new(1, 100, "%Aud", Large(vec![1u32, 2, 3])).unwrap();
/// let Large(v): Large<Vec<u32>> = p.unpack("%Aud").unwrap();
/// assert_eq!(v, [1, 2, 3]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Large<T>(pub T);

/// Where packed bytes go: a message's payload, growing in place.
#[derive(Debug)]
pub struct Out<'a>(&'a mut Message);

impl<'a> Out<'a> {
    /// Packed bytes go to the end of `msg`'s payload.
    pub(crate) fn new(msg: &'a mut Message) -> Out<'a> {
        Out(msg)
    }
}

impl Out<'_> {
    #[inline]
    pub(crate) fn put(&mut self, b: &[u8]) {
        self.0.extend_payload(b);
    }
}

/// A value that can be one data element of a packet.
pub trait Element {
    /// Its element type; `None` for a dynamic value that has none (an empty untyped array).
    fn elem_type(&self) -> ElemType;
    /// Bytes it takes on the wire.
    fn wire_len(&self) -> usize;
    /// Append its wire bytes.
    fn write(&self, out: &mut Out<'_>);
    /// A reason it cannot be packed (an `a` array longer than `u32::MAX` items).
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// What [`Packet::new`](crate::Packet::new) packs: one [`Element`], a tuple of them, or a
/// slice of [`Value`]s.
pub trait Pack {
    /// Check the values against `format` (count and types).
    ///
    /// # Errors
    /// [`PacketError::Count`] or [`PacketError::Type`] saying what was expected and found.
    fn check_format(&self, format: &Format) -> Result<(), PacketError>;
    /// Bytes of all elements.
    fn packed_len(&self) -> usize;
    /// Append every element.
    fn pack_into(&self, out: &mut Out<'_>);
}

fn check_one(
    i: usize,
    e: &dyn Element,
    format: &Format,
    want: Option<&ElemType>,
) -> Result<(), PacketError> {
    let found = e.elem_type();
    match want {
        Some(w) if *w == found => e.check().map_err(|reason| PacketError::Value {
            index: i + 1,
            reason,
        }),
        Some(w) => Err(type_error(i, format, *w, found)),
        None => Err(PacketError::Count {
            format: format.to_string(),
            expected: format.len(),
            found: i + 1,
        }),
    }
}

macro_rules! scalar_element {
    ($t:ty, $base:ident) => {
        impl Element for $t {
            #[inline]
            fn elem_type(&self) -> ElemType {
                ElemType::scalar(BaseType::$base)
            }
            #[inline]
            fn wire_len(&self) -> usize {
                std::mem::size_of::<$t>()
            }
            #[inline]
            fn write(&self, out: &mut Out<'_>) {
                out.put(&self.to_le_bytes());
            }
        }

        impl Scalar for $t {
            const BASE: BaseType = BaseType::$base;
            #[inline]
            fn read(r: &mut Reader<'_>) -> Option<$t> {
                r.array().map(<$t>::from_le_bytes)
            }
        }

        impl Element for [$t] {
            fn elem_type(&self) -> ElemType {
                ElemType::array(BaseType::$base)
            }
            fn wire_len(&self) -> usize {
                4 + self.len() * std::mem::size_of::<$t>()
            }
            fn write(&self, out: &mut Out<'_>) {
                out.put(&(self.len() as u32).to_le_bytes());
                write_items(self, out);
            }
            fn check(&self) -> Result<(), String> {
                check_short(self.len())
            }
        }

        impl Element for Large<&[$t]> {
            fn elem_type(&self) -> ElemType {
                ElemType {
                    base: BaseType::$base,
                    shape: Shape::LargeArray,
                }
            }
            fn wire_len(&self) -> usize {
                8 + self.0.len() * std::mem::size_of::<$t>()
            }
            fn write(&self, out: &mut Out<'_>) {
                out.put(&(self.0.len() as u64).to_le_bytes());
                write_items(self.0, out);
            }
        }

        element_by_ref!(Vec<$t>, [$t]);
        element_by_ref!(&[$t], [$t]);
        element_by_ref!(&Vec<$t>, [$t]);

        impl Element for Large<Vec<$t>> {
            fn elem_type(&self) -> ElemType {
                Element::elem_type(&Large(self.0.as_slice()))
            }
            fn wire_len(&self) -> usize {
                Element::wire_len(&Large(self.0.as_slice()))
            }
            fn write(&self, out: &mut Out<'_>) {
                Element::write(&Large(self.0.as_slice()), out)
            }
        }

        unpack_one!($t);
        unpack_one!(Vec<$t>);
        unpack_one!(Large<Vec<$t>>);
        pack_one!($t);
        pack_one!(Vec<$t>);
        pack_one!(&[$t]);
        pack_one!(Large<Vec<$t>>);
        pack_one!(Large<&[$t]>);
    };
}

macro_rules! element_by_ref {
    ($outer:ty, $inner:ty) => {
        impl Element for $outer {
            fn elem_type(&self) -> ElemType {
                <$inner as Element>::elem_type(self)
            }
            fn wire_len(&self) -> usize {
                <$inner as Element>::wire_len(self)
            }
            fn write(&self, out: &mut Out<'_>) {
                <$inner as Element>::write(self, out)
            }
            fn check(&self) -> Result<(), String> {
                <$inner as Element>::check(self)
            }
        }
    };
}

macro_rules! pack_one {
    ($t:ty) => {
        impl Pack for $t {
            fn check_format(&self, format: &Format) -> Result<(), PacketError> {
                check_one(0, self, format, format.elems().first())?;
                count_matches(format, 1)
            }
            fn packed_len(&self) -> usize {
                Element::wire_len(self)
            }
            fn pack_into(&self, out: &mut Out<'_>) {
                Element::write(self, out)
            }
        }
    };
}

macro_rules! unpack_one {
    ($t:ty) => {
        impl Unpack for $t {
            fn unpack(r: &mut Reader<'_>, format: &Format) -> Result<Self, PacketError> {
                count_matches(format, 1)?;
                <$t as FromElement>::read_elem(r, 0, format)
            }
        }
    };
}

fn count_matches(format: &Format, n: usize) -> Result<(), PacketError> {
    if format.len() == n {
        Ok(())
    } else {
        Err(PacketError::Count {
            format: format.to_string(),
            expected: format.len(),
            found: n,
        })
    }
}

pub(crate) fn check_short(len: usize) -> Result<(), String> {
    if len > u32::MAX as usize {
        Err(format!(
            "an array of {len} items is too long for %a (at most {}); use %A",
            u32::MAX
        ))
    } else {
        Ok(())
    }
}

fn write_items<T: Element>(items: &[T], out: &mut Out<'_>) {
    for x in items {
        x.write(out);
    }
}

/// A scalar type of Appendix E.
pub trait Scalar: Sized + Copy {
    /// Its base type.
    const BASE: BaseType;
    /// Read one item.
    fn read(r: &mut Reader<'_>) -> Option<Self>;
}

impl Element for str {
    fn elem_type(&self) -> ElemType {
        ElemType::scalar(BaseType::Str)
    }
    fn wire_len(&self) -> usize {
        4 + self.len()
    }
    fn write(&self, out: &mut Out<'_>) {
        out.put(&(self.len() as u32).to_le_bytes());
        out.put(self.as_bytes());
    }
    fn check(&self) -> Result<(), String> {
        if self.len() > u32::MAX as usize {
            Err(format!("a string of {} bytes is too long", self.len()))
        } else {
            Ok(())
        }
    }
}

element_by_ref!(String, str);
element_by_ref!(&str, str);
element_by_ref!(&String, str);

macro_rules! string_array {
    ($s:ty) => {
        impl Element for [$s] {
            fn elem_type(&self) -> ElemType {
                ElemType::array(BaseType::Str)
            }
            fn wire_len(&self) -> usize {
                4 + self.iter().map(|s| 4 + s.len()).sum::<usize>()
            }
            fn write(&self, out: &mut Out<'_>) {
                out.put(&(self.len() as u32).to_le_bytes());
                for s in self {
                    Element::write(s, out);
                }
            }
            fn check(&self) -> Result<(), String> {
                check_short(self.len())?;
                self.iter().try_for_each(|s| Element::check(s))
            }
        }
    };
}

string_array!(String);
string_array!(&str);

element_by_ref!(Vec<String>, [String]);
element_by_ref!(Vec<&str>, [&str]);
element_by_ref!(&[String], [String]);
element_by_ref!(&[&str], [&str]);

scalar_element!(i8, Char);
scalar_element!(u8, UChar);
scalar_element!(i16, Short);
scalar_element!(u16, UShort);
scalar_element!(i32, Int);
scalar_element!(u32, UInt);
scalar_element!(i64, Long);
scalar_element!(u64, ULong);
scalar_element!(f32, Float);
scalar_element!(f64, Double);

pack_one!(String);
pack_one!(&str);
pack_one!(Vec<String>);
pack_one!(Vec<&str>);
unpack_one!(String);
unpack_one!(Vec<String>);
unpack_one!(Value);

impl Pack for () {
    fn check_format(&self, format: &Format) -> Result<(), PacketError> {
        count_matches(format, 0)
    }
    fn packed_len(&self) -> usize {
        0
    }
    fn pack_into(&self, _: &mut Out<'_>) {}
}

impl Unpack for () {
    fn unpack(_: &mut Reader<'_>, format: &Format) -> Result<(), PacketError> {
        count_matches(format, 0)
    }
}

macro_rules! tuple_pack {
    ($n:expr; $($name:ident $idx:tt),+) => {
        impl<$($name: Element),+> Pack for ($($name,)+) {
            fn check_format(&self, format: &Format) -> Result<(), PacketError> {
                $( check_one($idx, &self.$idx, format, format.elems().get($idx))?; )+
                count_matches(format, $n)
            }
            fn packed_len(&self) -> usize {
                0 $( + self.$idx.wire_len() )+
            }
            fn pack_into(&self, out: &mut Out<'_>) {
                $( self.$idx.write(out); )+
            }
        }

        impl<$($name: FromElement),+> Unpack for ($($name,)+) {
            fn unpack(r: &mut Reader<'_>, format: &Format) -> Result<Self, PacketError> {
                count_matches(format, $n)?;
                Ok(($( $name::read_elem(r, $idx, format)?, )+))
            }
        }
    };
}

tuple_pack!(1; A 0);
tuple_pack!(2; A 0, B 1);
tuple_pack!(3; A 0, B 1, C 2);
tuple_pack!(4; A 0, B 1, C 2, D 3);
tuple_pack!(5; A 0, B 1, C 2, D 3, E 4);
tuple_pack!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_pack!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_pack!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_pack!(9; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_pack!(10; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_pack!(11; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_pack!(12; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

impl Pack for [Value] {
    fn check_format(&self, format: &Format) -> Result<(), PacketError> {
        for (i, v) in self.iter().enumerate() {
            check_one(i, v, format, format.elems().get(i))?;
        }
        count_matches(format, self.len())
    }
    fn packed_len(&self) -> usize {
        self.iter().map(Element::wire_len).sum()
    }
    fn pack_into(&self, out: &mut Out<'_>) {
        for v in self {
            Element::write(v, out);
        }
    }
}

impl Pack for Vec<Value> {
    fn check_format(&self, format: &Format) -> Result<(), PacketError> {
        self.as_slice().check_format(format)
    }
    fn packed_len(&self) -> usize {
        self.as_slice().packed_len()
    }
    fn pack_into(&self, out: &mut Out<'_>) {
        self.as_slice().pack_into(out)
    }
}

impl<P: Pack + ?Sized> Pack for &P {
    fn check_format(&self, format: &Format) -> Result<(), PacketError> {
        (**self).check_format(format)
    }
    fn packed_len(&self) -> usize {
        (**self).packed_len()
    }
    fn pack_into(&self, out: &mut Out<'_>) {
        (**self).pack_into(out)
    }
}

/// Reads data elements; every read is bounds-checked.
#[derive(Debug)]
pub struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads `b` from its start.
    pub(crate) fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.b.len()
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (h, t) = self.b.split_first_chunk::<N>()?;
        self.b = t;
        Some(*h)
    }

    /// The item count of an element of `shape` (1 for a scalar).
    pub(crate) fn count(&mut self, shape: Shape) -> Option<usize> {
        match shape {
            Shape::Scalar => Some(1),
            Shape::Array => self.array::<4>().map(|b| u32::from_le_bytes(b) as usize),
            Shape::LargeArray => self
                .array::<8>()
                .and_then(|b| usize::try_from(u64::from_le_bytes(b)).ok()),
        }
    }

    /// A string's bytes.
    pub(crate) fn string(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(self.array::<4>()?) as usize;
        self.take(n)
    }

    /// Skip one element of type `t`; `None` if the bytes run out.
    fn skip(&mut self, t: ElemType) -> Option<()> {
        let n = self.count(t.shape)?;
        match t.base.width() {
            Some(w) => self.take(n.checked_mul(w)?).map(|_| ()),
            None => (0..n).try_for_each(|_| self.string().map(|_| ())),
        }
    }
}

/// A Rust type one data element unpacks into.
pub trait FromElement: Sized {
    /// Read element `i` of `format` (whose type must suit `Self`).
    ///
    /// # Errors
    /// [`PacketError::Type`] when `Self` does not hold that element type.
    fn read_elem(r: &mut Reader<'_>, i: usize, format: &Format) -> Result<Self, PacketError>;
}

/// What [`Packet::unpack`](crate::Packet::unpack) unpacks into: one element type, or a
/// tuple of them.
pub trait Unpack: Sized {
    /// Read every element of `format`.
    ///
    /// # Errors
    /// [`PacketError::Count`] or [`PacketError::Type`] when the types do not suit the format.
    fn unpack(r: &mut Reader<'_>, format: &Format) -> Result<Self, PacketError>;
}

fn expect(i: usize, format: &Format, want: ElemType) -> Result<(), PacketError> {
    match format.elems().get(i) {
        Some(t) if *t == want => Ok(()),
        Some(t) => Err(PacketError::Type {
            index: i + 1,
            format: format.to_string(),
            expected: format!("{t} ({})", t.describe()),
            found: format!("a Rust type holding {want} ({})", want.describe()),
        }),
        None => Err(PacketError::Count {
            format: format.to_string(),
            expected: format.len(),
            found: i + 1,
        }),
    }
}

/// Data that passed [`validate`] never runs out; this keeps unpacking total anyway.
pub(crate) fn short(i: usize) -> PacketError {
    PacketError::Malformed(format!("element {} runs past the end of the data", i + 1))
}

impl<T: Scalar> FromElement for T {
    fn read_elem(r: &mut Reader<'_>, i: usize, format: &Format) -> Result<T, PacketError> {
        expect(i, format, ElemType::scalar(T::BASE))?;
        T::read(r).ok_or_else(|| short(i))
    }
}

fn read_items<T: Scalar>(
    r: &mut Reader<'_>,
    i: usize,
    shape: Shape,
) -> Result<Vec<T>, PacketError> {
    let n = r.count(shape).ok_or_else(|| short(i))?;
    let w = T::BASE.width().unwrap_or(1);
    if n.checked_mul(w).is_none_or(|b| b > r.b.len()) {
        return Err(short(i));
    }
    (0..n).map(|_| T::read(r).ok_or_else(|| short(i))).collect()
}

impl<T: Scalar> FromElement for Vec<T> {
    fn read_elem(r: &mut Reader<'_>, i: usize, format: &Format) -> Result<Vec<T>, PacketError> {
        expect(i, format, ElemType::array(T::BASE))?;
        read_items(r, i, Shape::Array)
    }
}

impl<T: Scalar> FromElement for Large<Vec<T>> {
    fn read_elem(r: &mut Reader<'_>, i: usize, format: &Format) -> Result<Self, PacketError> {
        let t = ElemType {
            base: T::BASE,
            shape: Shape::LargeArray,
        };
        expect(i, format, t)?;
        read_items(r, i, Shape::LargeArray).map(Large)
    }
}

fn utf8(i: usize, b: &[u8]) -> Result<String, PacketError> {
    String::from_utf8(b.to_vec()).map_err(|_| PacketError::Value {
        index: i + 1,
        reason: "the string is not UTF-8".into(),
    })
}

impl FromElement for String {
    fn read_elem(r: &mut Reader<'_>, i: usize, format: &Format) -> Result<String, PacketError> {
        expect(i, format, ElemType::scalar(BaseType::Str))?;
        utf8(i, r.string().ok_or_else(|| short(i))?)
    }
}

impl FromElement for Vec<String> {
    fn read_elem(r: &mut Reader<'_>, i: usize, format: &Format) -> Result<Self, PacketError> {
        expect(i, format, ElemType::array(BaseType::Str))?;
        let n = r.count(Shape::Array).ok_or_else(|| short(i))?;
        // Each string takes at least its 4-byte length: a count beyond that is a lie.
        if n > r.b.len() / 4 {
            return Err(short(i));
        }
        (0..n)
            .map(|_| utf8(i, r.string().ok_or_else(|| short(i))?))
            .collect()
    }
}

/// Check that `data` holds exactly the elements the type `codes` name.
pub(crate) fn validate(codes: &[u8], data: &[u8]) -> Result<(), PacketError> {
    let mut r = Reader { b: data };
    for (i, &c) in codes.iter().enumerate() {
        let t = ElemType::from_code(c).ok_or_else(|| {
            PacketError::Malformed(format!(
                "element {} has the unknown type code {c:#x}",
                i + 1
            ))
        })?;
        r.skip(t).ok_or_else(|| short(i))?;
    }
    if !r.b.is_empty() {
        return Err(PacketError::Malformed(format!(
            "{} byte(s) after the last element",
            r.b.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire form of `%d %s` holding 7 and "hi".
    fn int_and_string() -> Vec<u8> {
        let mut b = 7i32.to_le_bytes().to_vec();
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(b"hi");
        b
    }

    fn codes(format: &str) -> Vec<u8> {
        Format::parse(format).expect("format").codes().collect()
    }

    #[test]
    fn validate_accepts_exactly_the_named_elements() {
        let data = int_and_string();
        assert_eq!(validate(&codes("%d %s"), &data), Ok(()));
        let mut longer = data.clone();
        longer.push(0);
        assert!(matches!(
            validate(&codes("%d %s"), &longer),
            Err(PacketError::Malformed(m)) if m.contains("after the last element")
        ));
        assert!(matches!(
            validate(&codes("%d %s"), &data[..data.len() - 1]),
            Err(PacketError::Malformed(_))
        ));
        assert!(matches!(
            validate(&[0xff], &data),
            Err(PacketError::Malformed(m)) if m.contains("unknown type code")
        ));
    }

    #[test]
    fn reader_reads_elements_in_order_and_never_past_the_end() {
        let data = int_and_string();
        let f = Format::parse("%d %s").expect("format");
        let mut r = Reader::new(&data);
        assert_eq!(i32::read_elem(&mut r, 0, &f), Ok(7));
        assert_eq!(String::read_elem(&mut r, 1, &f), Ok("hi".to_owned()));
        // Nothing left: a further read is an error, not a panic.
        assert!(String::read_elem(&mut r, 1, &f).is_err());
    }
}
