//! Packets: a stream id, a tag and data elements described by a format string, in a compact
//! binary form that travels as the payload of one runtime message.
//!
//! ```text
//! | stream u32 | tag i32 | src rank u32 | weight u32 | n u8 | n type codes | data ... | route |
//! ```
//!
//! All numbers are little-endian. Data elements follow each other with no padding: scalars in
//! their width, strings as a u32 byte length and the bytes, `a` arrays as a u32 item count and
//! the items, `A` arrays the same with a u64 count. The *route* trailer is the overlay's
//! (destinations of a downstream packet, see `network.rs`); it sits at the end so that the
//! overlay can rewrite it in place when it passes a packet on, never copying the data.
//!
//! A packet received from the network keeps the message it came in: forwarding it, or handing
//! it to a filter or the program, copies nothing. Its structure is checked once on arrival, so
//! unpacking never reads past the data, whatever bytes a peer sent.

use crate::format::{BaseType, ElemType, Format, FormatError, Shape};
use converse::Message;
use std::fmt;

/// Bytes of the fixed header in front of the type codes.
pub(crate) const HEADER_LEN: usize = 17;

/// Bytes of the smallest route trailer (no destination list).
pub(crate) const TRAILER_MIN: usize = 4;

/// What is wrong with a packet, or with what a program tried to pack or unpack.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PacketError {
    /// The format string does not parse.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// More or fewer values than the format has elements.
    #[error("format \"{format}\" has {expected} element(s), but {found} value(s) were given")]
    Count {
        /// The format string.
        format: String,
        /// Elements in the format.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// A value (or a requested Rust type) of another type than the format says.
    #[error("element {index} of \"{format}\": expected {expected}, found {found}")]
    Type {
        /// 1-based element number.
        index: usize,
        /// The format string.
        format: String,
        /// What the format says, e.g. "%d (signed 32-bit integer)".
        expected: String,
        /// What was given, e.g. "%f (single-precision float)".
        found: String,
    },
    /// Unpacking with another format than the packet's.
    #[error("unpacking with \"{requested}\", but the packet holds \"{actual}\"")]
    FormatMismatch {
        /// The format asked for.
        requested: String,
        /// The packet's own format.
        actual: String,
    },
    /// A value that cannot be packed or unpacked as it is.
    #[error("element {index}: {reason}")]
    Value {
        /// 1-based element number.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Bytes that are not a packet.
    #[error("malformed packet: {0}")]
    Malformed(String),
}

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
pub struct Out<'a>(&'a mut Message);

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

/// What [`Packet::new`] packs: one [`Element`], a tuple of them, or a slice of [`Value`]s.
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

fn check_short(len: usize) -> Result<(), String> {
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
pub struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
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

    fn count(&mut self, shape: Shape) -> Option<usize> {
        match shape {
            Shape::Scalar => Some(1),
            Shape::Array => self.array::<4>().map(|b| u32::from_le_bytes(b) as usize),
            Shape::LargeArray => self
                .array::<8>()
                .and_then(|b| usize::try_from(u64::from_le_bytes(b)).ok()),
        }
    }

    fn string(&mut self) -> Option<&'a [u8]> {
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

/// What [`Packet::unpack`] unpacks into: one element type, or a tuple of them.
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
fn short(i: usize) -> PacketError {
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

/// One data element of any type, for programs and filters that handle packets whose format
/// they learn at run time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `c`.
    Char(i8),
    /// `uc`.
    UChar(u8),
    /// `hd`.
    Short(i16),
    /// `uhd`.
    UShort(u16),
    /// `d`.
    Int(i32),
    /// `ud`.
    UInt(u32),
    /// `ld`.
    Long(i64),
    /// `uld`.
    ULong(u64),
    /// `f`.
    Float(f32),
    /// `lf`.
    Double(f64),
    /// `s`.
    Str(String),
    /// An array (`a` or `A`, as its type says) whose items are all scalars of the type's base.
    Array(ElemType, Vec<Value>),
}

impl Value {
    /// The value as an `f64`, for numbers.
    pub fn as_f64(&self) -> Option<f64> {
        Some(match *self {
            Value::Char(v) => v.into(),
            Value::UChar(v) => v.into(),
            Value::Short(v) => v.into(),
            Value::UShort(v) => v.into(),
            Value::Int(v) => v.into(),
            Value::UInt(v) => v.into(),
            Value::Long(v) => v as f64,
            Value::ULong(v) => v as f64,
            Value::Float(v) => v.into(),
            Value::Double(v) => v,
            _ => return None,
        })
    }

    fn read_scalar(base: BaseType, r: &mut Reader<'_>) -> Option<Value> {
        Some(match base {
            BaseType::Char => Value::Char(i8::read(r)?),
            BaseType::UChar => Value::UChar(u8::read(r)?),
            BaseType::Short => Value::Short(i16::read(r)?),
            BaseType::UShort => Value::UShort(u16::read(r)?),
            BaseType::Int => Value::Int(i32::read(r)?),
            BaseType::UInt => Value::UInt(u32::read(r)?),
            BaseType::Long => Value::Long(i64::read(r)?),
            BaseType::ULong => Value::ULong(u64::read(r)?),
            BaseType::Float => Value::Float(f32::read(r)?),
            BaseType::Double => Value::Double(f64::read(r)?),
            BaseType::Str => Value::Str(String::from_utf8_lossy(r.string()?).into_owned()),
        })
    }
}

impl Element for Value {
    fn elem_type(&self) -> ElemType {
        let b = match self {
            Value::Char(_) => BaseType::Char,
            Value::UChar(_) => BaseType::UChar,
            Value::Short(_) => BaseType::Short,
            Value::UShort(_) => BaseType::UShort,
            Value::Int(_) => BaseType::Int,
            Value::UInt(_) => BaseType::UInt,
            Value::Long(_) => BaseType::Long,
            Value::ULong(_) => BaseType::ULong,
            Value::Float(_) => BaseType::Float,
            Value::Double(_) => BaseType::Double,
            Value::Str(_) => BaseType::Str,
            Value::Array(t, _) => return *t,
        };
        ElemType::scalar(b)
    }

    fn wire_len(&self) -> usize {
        match self {
            Value::Str(s) => 4 + s.len(),
            Value::Array(t, items) => {
                let head = if t.shape == Shape::LargeArray { 8 } else { 4 };
                head + items.iter().map(Element::wire_len).sum::<usize>()
            }
            v => v.elem_type().base.width().unwrap_or(0),
        }
    }

    fn write(&self, out: &mut Out<'_>) {
        match self {
            Value::Char(v) => v.write(out),
            Value::UChar(v) => v.write(out),
            Value::Short(v) => v.write(out),
            Value::UShort(v) => v.write(out),
            Value::Int(v) => v.write(out),
            Value::UInt(v) => v.write(out),
            Value::Long(v) => v.write(out),
            Value::ULong(v) => v.write(out),
            Value::Float(v) => v.write(out),
            Value::Double(v) => v.write(out),
            Value::Str(s) => s.write(out),
            Value::Array(t, items) => {
                if t.shape == Shape::LargeArray {
                    out.put(&(items.len() as u64).to_le_bytes());
                } else {
                    out.put(&(items.len() as u32).to_le_bytes());
                }
                for v in items {
                    v.write(out);
                }
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        let Value::Array(t, items) = self else {
            return Ok(());
        };
        if t.shape == Shape::Scalar {
            return Err(format!("an array value with the scalar type {t}"));
        }
        if t.shape == Shape::Array {
            check_short(items.len())?;
        }
        let want = ElemType::scalar(t.base);
        match items.iter().find(|v| v.elem_type() != want) {
            Some(v) => Err(format!(
                "an item of a {t} array is {} ({})",
                v.elem_type(),
                v.elem_type().describe()
            )),
            None => Ok(()),
        }
    }
}

impl FromElement for Value {
    fn read_elem(r: &mut Reader<'_>, i: usize, format: &Format) -> Result<Value, PacketError> {
        let t = *format.elems().get(i).ok_or_else(|| short(i))?;
        if t.shape == Shape::Scalar {
            return Value::read_scalar(t.base, r).ok_or_else(|| short(i));
        }
        let n = r.count(t.shape).ok_or_else(|| short(i))?;
        // Every item takes at least one byte: a count beyond what is left is a lie.
        if n > r.b.len() {
            return Err(short(i));
        }
        let items = (0..n)
            .map(|_| Value::read_scalar(t.base, r).ok_or_else(|| short(i)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Array(t, items))
    }
}

/// Check that `data` holds exactly the elements the type `codes` name.
fn validate(codes: &[u8], data: &[u8]) -> Result<(), PacketError> {
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

/// A packet: stream id, tag, source rank and data elements of a known format.
///
/// ```
/// use converse_tbon::Packet;
/// let p = Packet::new(7, 100, "%d %s %af", (32i32, "hi", vec![1.5f32, 2.5])).unwrap();
/// let (n, s, v): (i32, String, Vec<f32>) = p.unpack("%d %s %af").unwrap();
/// assert_eq!((n, s.as_str(), v), (32, "hi", vec![1.5, 2.5]));
/// // Asking for other types is an error that says what is there.
/// let e = p.unpack::<(i32, f64, Vec<f32>)>("%d %lf %af").unwrap_err();
/// assert!(e.to_string().contains("the packet holds \"%d %s %af\""), "{e}");
/// ```
#[derive(Clone, PartialEq)]
pub struct Packet {
    msg: Message,
    /// End of the packet in the payload (the route trailer follows).
    end: usize,
    stream: u32,
    tag: i32,
    src: u32,
    weight: u32,
    nelems: u8,
    /// The route trailer says another packet of the same batch follows (see `sync.rs`).
    more: bool,
}

/// The route trailer's bit for "another packet of this batch follows"; the rest is the count
/// of destinations.
const MORE: u32 = 1 << 31;

impl Packet {
    /// A packet for stream `stream_id` with `tag`, holding `values` as `format` describes.
    ///
    /// # Errors
    /// [`PacketError`] when the format does not parse or the values do not match it, saying
    /// which element was expected to be what.
    pub fn new(
        stream_id: u32,
        tag: i32,
        format: &str,
        values: impl Pack,
    ) -> Result<Packet, PacketError> {
        let f = Format::parse(format)?;
        Packet::with_format(stream_id, tag, &f, &values)
    }

    /// As [`new`](Packet::new), with a parsed format.
    ///
    /// # Errors
    /// As [`new`](Packet::new).
    pub fn with_format(
        stream_id: u32,
        tag: i32,
        format: &Format,
        values: &dyn Pack,
    ) -> Result<Packet, PacketError> {
        values.check_format(format)?;
        let capacity = HEADER_LEN + format.len() + values.packed_len();
        Ok(Packet::build(stream_id, tag, format, capacity, |out| {
            values.pack_into(out)
        }))
    }

    /// A packet whose data `fill` writes; it must write exactly what `format` describes.
    pub(crate) fn build(
        stream_id: u32,
        tag: i32,
        format: &Format,
        capacity: usize,
        fill: impl FnOnce(&mut Out<'_>),
    ) -> Packet {
        let mut msg = Message::with_capacity(capacity + TRAILER_MIN);
        write_header(&mut msg, stream_id, tag, 0, 1, format);
        fill(&mut Out(&mut msg));
        let end = msg.payload_len();
        msg.extend_payload(&0u32.to_le_bytes());
        Packet {
            msg,
            end,
            stream: stream_id,
            tag,
            src: 0,
            weight: 1,
            nelems: format.len() as u8,
            more: false,
        }
    }

    /// A packet of the given wire bytes (as [`wire`](Packet::wire) gives them), copied.
    ///
    /// # Errors
    /// [`PacketError::Malformed`] when the bytes are not a packet.
    pub fn from_wire(bytes: &[u8]) -> Result<Packet, PacketError> {
        let mut msg = Message::with_capacity(bytes.len() + TRAILER_MIN);
        msg.extend_payload(bytes);
        msg.extend_payload(&0u32.to_le_bytes());
        Packet::from_message(msg)
    }

    /// The packet a message carries (payload: packet, then route trailer), checked once.
    pub(crate) fn from_message(msg: Message) -> Result<Packet, PacketError> {
        let p = msg.payload();
        let bad = |w: &str| PacketError::Malformed(w.to_owned());
        let (rest, n) = p
            .split_last_chunk::<4>()
            .ok_or_else(|| bad("shorter than its route trailer"))?;
        let word = u32::from_le_bytes(*n);
        let more = word & MORE != 0;
        let n = (word & !MORE) as usize;
        let route = n
            .checked_mul(4)
            .filter(|&r| r <= rest.len())
            .ok_or_else(|| bad("its route trailer is longer than the packet"))?;
        let end = rest.len() - route;
        let b = &p[..end];
        let word = |at: usize| -> Result<[u8; 4], PacketError> {
            b.get(at..at + 4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| bad("shorter than a packet header"))
        };
        let stream = u32::from_le_bytes(word(0)?);
        let tag = i32::from_le_bytes(word(4)?);
        let src = u32::from_le_bytes(word(8)?);
        let weight = u32::from_le_bytes(word(12)?);
        let nelems = *b
            .get(16)
            .ok_or_else(|| bad("shorter than a packet header"))?;
        let codes = b
            .get(HEADER_LEN..HEADER_LEN + nelems as usize)
            .ok_or_else(|| bad("shorter than its type codes"))?;
        validate(codes, &b[HEADER_LEN + nelems as usize..])?;
        Ok(Packet {
            msg,
            end,
            stream,
            tag,
            src,
            weight,
            nelems,
            more,
        })
    }

    /// The stream this packet travels on.
    pub fn stream_id(&self) -> u32 {
        self.stream
    }

    /// The tag given when it was sent.
    pub fn tag(&self) -> i32 {
        self.tag
    }

    /// Set the tag.
    pub fn set_tag(&mut self, tag: i32) {
        self.tag = tag;
        self.msg.payload_mut()[4..8].copy_from_slice(&tag.to_le_bytes());
    }

    /// Set the stream id.
    pub fn set_stream_id(&mut self, id: u32) {
        self.stream = id;
        self.msg.payload_mut()[0..4].copy_from_slice(&id.to_le_bytes());
    }

    /// The rank of the process that made it: a back-end for data going up, the front-end for
    /// data coming down, the node whose filter produced it for filter output.
    pub fn src_rank(&self) -> u32 {
        self.src
    }

    pub(crate) fn set_src_rank(&mut self, rank: u32) {
        self.src = rank;
        self.msg.payload_mut()[8..12].copy_from_slice(&rank.to_le_bytes());
    }

    /// How many back-end contributions this packet stands for (1 unless a filter combined
    /// several and said so, as the average filter does).
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Set [`weight`](Packet::weight).
    pub fn set_weight(&mut self, w: u32) {
        self.weight = w;
        self.msg.payload_mut()[12..16].copy_from_slice(&w.to_le_bytes());
    }

    /// The wire type codes of the elements.
    pub(crate) fn codes(&self) -> &[u8] {
        &self.msg.payload()[HEADER_LEN..HEADER_LEN + self.nelems as usize]
    }

    /// The format of its data.
    pub fn format(&self) -> Format {
        // The codes were checked on arrival or made from a parsed format.
        Format::from_codes(self.codes()).unwrap_or_default()
    }

    /// The format string of its data (`"%d %af"`).
    pub fn format_string(&self) -> String {
        self.format().to_string()
    }

    /// Whether its format is `format` (no allocation).
    pub fn has_format(&self, format: &Format) -> bool {
        self.codes().len() == format.len() && self.codes().iter().copied().eq(format.codes())
    }

    /// The data bytes (after header and type codes).
    pub(crate) fn data(&self) -> &[u8] {
        &self.msg.payload()[HEADER_LEN + self.nelems as usize..self.end]
    }

    /// The data bytes, writable in place (same layout, so same length).
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        let start = HEADER_LEN + self.nelems as usize;
        &mut self.msg.payload_mut()[start..self.end]
    }

    /// The packet's wire bytes: header, codes and data (no route).
    pub fn wire(&self) -> &[u8] {
        &self.msg.payload()[..self.end]
    }

    /// Size of its data in bytes.
    pub fn data_len(&self) -> usize {
        self.data().len()
    }

    /// Unpack the data as `format` says into Rust values.
    ///
    /// # Errors
    /// [`PacketError::FormatMismatch`] when `format` is not the packet's own;
    /// [`PacketError::Type`] when the Rust types asked for do not hold the format's elements.
    pub fn unpack<T: Unpack>(&self, format: &str) -> Result<T, PacketError> {
        let f = Format::parse(format)?;
        if !self.has_format(&f) {
            return Err(PacketError::FormatMismatch {
                requested: f.to_string(),
                actual: self.format_string(),
            });
        }
        T::unpack(&mut Reader { b: self.data() }, &f)
    }

    /// Every element as a [`Value`].
    pub fn values(&self) -> Vec<Value> {
        let f = self.format();
        let mut r = Reader { b: self.data() };
        (0..f.len())
            .map_while(|i| Value::read_elem(&mut r, i, &f).ok())
            .collect()
    }

    /// The message, its route trailer replaced by `dests` (empty: none), ready to send.
    pub(crate) fn into_message(self, dests: &[u32]) -> Message {
        self.into_message_with(dests, false)
    }

    /// The message, its route trailer replaced by `dests` and the "more of this batch
    /// follows" mark.
    pub(crate) fn into_message_with(mut self, dests: &[u32], more: bool) -> Message {
        self.msg.truncate_payload(self.end);
        for d in dests {
            self.msg.extend_payload(&d.to_le_bytes());
        }
        let word = dests.len() as u32 | if more { MORE } else { 0 };
        self.msg.extend_payload(&word.to_le_bytes());
        self.msg
    }

    /// Whether another packet of the same batch follows this one.
    pub(crate) fn more(&self) -> bool {
        self.more
    }

    /// The route trailer's destinations (empty: every end-point of the stream).
    pub(crate) fn route(&self) -> impl Iterator<Item = u32> + '_ {
        let p = self.msg.payload();
        p[self.end..p.len() - 4]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// Whether the route trailer names destinations.
    pub(crate) fn has_route(&self) -> bool {
        self.msg.payload_len() > self.end + TRAILER_MIN
    }
}

fn write_header(msg: &mut Message, stream: u32, tag: i32, src: u32, weight: u32, f: &Format) {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&stream.to_le_bytes());
    h[4..8].copy_from_slice(&tag.to_le_bytes());
    h[8..12].copy_from_slice(&src.to_le_bytes());
    h[12..16].copy_from_slice(&weight.to_le_bytes());
    h[16] = f.len() as u8;
    msg.extend_payload(&h);
    for c in f.codes() {
        msg.extend_payload(&[c]);
    }
}

impl fmt::Debug for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet")
            .field("stream", &self.stream)
            .field("tag", &self.tag)
            .field("src", &self.src)
            .field("format", &self.format_string())
            .field("values", &self.values())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Everything = (
        i8,
        u8,
        i16,
        u16,
        i32,
        u32,
        i64,
        u64,
        f32,
        f64,
        String,
        Vec<i32>,
    );

    #[test]
    fn every_type_round_trips() {
        let p = Packet::new(
            3,
            101,
            "%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s %ad",
            (
                -1i8,
                2u8,
                -3i16,
                4u16,
                -5i32,
                6u32,
                -7i64,
                8u64,
                9.5f32,
                10.25f64,
                "eleven",
                vec![12, 13],
            ),
        )
        .expect("pack");
        let got: Everything = p
            .unpack("%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s %ad")
            .expect("unpack");
        assert_eq!(got.0, -1);
        assert_eq!(got.9, 10.25);
        assert_eq!(got.10, "eleven");
        assert_eq!(got.11, [12, 13]);
        assert_eq!((p.stream_id(), p.tag(), p.weight()), (3, 101, 1));
        let again = Packet::from_wire(p.wire()).expect("decode");
        assert_eq!(again.values(), p.values());
    }

    #[test]
    fn arrays_of_every_kind_and_large_arrays() {
        let strs = vec!["a".to_string(), "".into(), "ccc".into()];
        let p = Packet::new(
            1,
            100,
            "%as %Alf %auc",
            (strs.clone(), Large(vec![1.0f64, 2.0]), vec![7u8; 3]),
        )
        .expect("pack");
        let (s, Large(d), u): (Vec<String>, Large<Vec<f64>>, Vec<u8>) =
            p.unpack("%as %Alf %auc").expect("unpack");
        assert_eq!((s, d, u), (strs, vec![1.0, 2.0], vec![7, 7, 7]));
    }

    #[test]
    fn mismatches_name_expected_and_found() {
        let e = Packet::new(1, 100, "%d %f", (1i32, 2.0f64)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "element 2 of \"%d %f\": expected %f (single-precision float), found %lf \
             (double-precision float)"
        );
        let e = Packet::new(1, 100, "%d %d", 1i32).unwrap_err();
        assert!(
            e.to_string().contains("has 2 element(s), but 1 value(s)"),
            "{e}"
        );
        let e = Packet::new(1, 100, "%d", (1i32, 2i32)).unwrap_err();
        assert!(matches!(e, PacketError::Count { expected: 1, .. }), "{e}");
        let p = Packet::new(1, 100, "%d %ad", (1i32, vec![2i32])).expect("pack");
        let e = p.unpack::<(i32, Vec<u32>)>("%d %ad").unwrap_err();
        assert!(
            e.to_string().contains(
                "expected %ad (array of signed 32-bit integer), found a Rust type holding %aud"
            ),
            "{e}"
        );
        let e = p.unpack::<(i32, i32)>("%d %d").unwrap_err();
        assert!(
            e.to_string()
                .contains("unpacking with \"%d %d\", but the packet holds \"%d %ad\""),
            "{e}"
        );
        assert!(matches!(
            Packet::new(1, 100, "%z", 1i32),
            Err(PacketError::Format(_))
        ));
    }

    #[test]
    fn dynamic_values_are_checked_too() {
        let f = Format::parse("%d %ald").expect("format");
        let good = vec![
            Value::Int(1),
            Value::Array(ElemType::array(BaseType::Long), vec![Value::Long(2)]),
        ];
        let p = Packet::with_format(1, 100, &f, &good).expect("pack");
        assert_eq!(p.values(), good);
        let bad = vec![
            Value::Int(1),
            Value::Array(ElemType::array(BaseType::Long), vec![Value::Int(2)]),
        ];
        let e = Packet::with_format(1, 100, &f, &bad).unwrap_err();
        assert!(
            e.to_string().contains("an item of a %ald array is %d"),
            "{e}"
        );
    }

    #[test]
    fn the_route_trailer_is_rewritten_in_place() {
        let p = Packet::new(1, 100, "%s", "data").expect("pack");
        let m = p.into_message(&[3, 9]);
        let p = Packet::from_message(m).expect("decode");
        assert_eq!(p.route().collect::<Vec<_>>(), [3, 9]);
        assert!(p.has_route());
        let p = Packet::from_message(p.into_message(&[])).expect("decode");
        assert!(!p.has_route());
        assert_eq!(p.unpack::<String>("%s").ok().as_deref(), Some("data"));
        assert!(!p.more());
        let p = Packet::from_message(p.into_message_with(&[4], true)).expect("decode");
        assert!(p.more());
        assert_eq!(p.route().collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn truncations_and_lies_are_malformed() {
        let p = Packet::new(1, 100, "%s %ad", ("abc", vec![1i32, 2])).expect("pack");
        let w = p.wire().to_vec();
        for len in 0..w.len() {
            assert!(Packet::from_wire(&w[..len]).is_err(), "len {len}");
        }
        let mut extra = w.clone();
        extra.push(0);
        assert!(Packet::from_wire(&extra).is_err());
        let mut huge = w.clone();
        // The array count (after header, 2 codes, "abc" with its length) says 2^32-1 items.
        let at = HEADER_LEN + 2 + 4 + 3;
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Packet::from_wire(&huge).is_err());
    }

    proptest! {
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(p) = Packet::from_wire(&bytes) {
                let _ = p.values();
                let _ = p.format_string();
            }
            let mut m = Message::with_capacity(bytes.len());
            m.extend_payload(&bytes);
            if let Ok(p) = Packet::from_message(m) {
                let _ = p.route().count();
                let _ = p.values();
            }
        }

        #[test]
        fn garbage_after_a_valid_header_never_panics(
            codes in proptest::collection::vec(0u8..0x30, 0..6),
            data in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let mut b = vec![0u8; HEADER_LEN];
            b[16] = codes.len() as u8;
            b.extend_from_slice(&codes);
            b.extend_from_slice(&data);
            if let Ok(p) = Packet::from_wire(&b) {
                let v = p.values();
                prop_assert_eq!(v.len(), codes.len());
            }
        }
    }
}
