//! [`Value`]: one data element of any type, for programs and filters that learn a packet's
//! format at run time, with its place in the [`codec`](crate::codec) (it packs and unpacks like
//! any other element).

use crate::codec::{check_short, short, Element, FromElement, Out, Reader, Scalar};
use crate::format::{BaseType, ElemType, Format, Shape};
use crate::packet::PacketError;

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
        if n > r.remaining() {
            return Err(short(i));
        }
        let items = (0..n)
            .map(|_| Value::read_scalar(t.base, r).ok_or_else(|| short(i)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Array(t, items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_reads_back_as_what_was_written() {
        let f = Format::parse("%d %s %alf").expect("format");
        let vals = [
            Value::Int(-3),
            Value::Str("hi".into()),
            Value::Array(
                ElemType::array(BaseType::Double),
                vec![Value::Double(0.5), Value::Double(2.0)],
            ),
        ];
        let mut msg = converse::Message::from_payload(&[]);
        let mut out = Out::new(&mut msg);
        for v in &vals {
            assert_eq!(v.check(), Ok(()));
            v.write(&mut out);
        }
        let len: usize = vals.iter().map(Element::wire_len).sum();
        assert_eq!(msg.payload().len(), len);
        let mut r = Reader::new(msg.payload());
        for (i, v) in vals.iter().enumerate() {
            assert_eq!(Value::read_elem(&mut r, i, &f).as_ref(), Ok(v));
        }
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn only_numbers_have_a_number() {
        assert_eq!(Value::UChar(200).as_f64(), Some(200.0));
        assert_eq!(Value::Long(-7).as_f64(), Some(-7.0));
        assert_eq!(Value::Str("1".into()).as_f64(), None);
    }
}
