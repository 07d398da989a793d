//! MRNet format strings (the guide's Appendix E): what a packet's data elements are.
//!
//! A format string is a list of conversions, each `%` followed by a type: `c` `uc` (8-bit),
//! `hd` `uhd` (16-bit), `d` `ud` (32-bit), `ld` `uld` (64-bit) integers, `f` `lf` floats, `s`
//! strings. `a` in front makes an array with a 32-bit length (`%af`), `A` one with a 64-bit length
//! (`%Auc`). Conversions may be separated by white space or not: `"%d %af"` and `"%d%af"` are
//! the same format.
//!
//! On the wire each element type is one byte (see [`ElemType::code`]), so a packet carries its
//! format in as many bytes as it has elements.

use std::fmt;

/// The scalar type of an element, or of each item of an array element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BaseType {
    /// `c`: signed 8-bit character.
    Char,
    /// `uc`: unsigned 8-bit character.
    UChar,
    /// `hd`: signed 16-bit integer.
    Short,
    /// `uhd`: unsigned 16-bit integer.
    UShort,
    /// `d`: signed 32-bit integer.
    Int,
    /// `ud`: unsigned 32-bit integer.
    UInt,
    /// `ld`: signed 64-bit integer.
    Long,
    /// `uld`: unsigned 64-bit integer.
    ULong,
    /// `f`: single-precision float.
    Float,
    /// `lf`: double-precision float.
    Double,
    /// `s`: character string.
    Str,
}

const BASES: [(BaseType, &str, &str); 11] = [
    (BaseType::Char, "c", "signed 8-bit character"),
    (BaseType::UChar, "uc", "unsigned 8-bit character"),
    (BaseType::Short, "hd", "signed 16-bit integer"),
    (BaseType::UShort, "uhd", "unsigned 16-bit integer"),
    (BaseType::Int, "d", "signed 32-bit integer"),
    (BaseType::UInt, "ud", "unsigned 32-bit integer"),
    (BaseType::Long, "ld", "signed 64-bit integer"),
    (BaseType::ULong, "uld", "unsigned 64-bit integer"),
    (BaseType::Float, "f", "single-precision float"),
    (BaseType::Double, "lf", "double-precision float"),
    (BaseType::Str, "s", "string"),
];

impl BaseType {
    /// The conversion letters (`"uhd"`).
    pub fn conversion(self) -> &'static str {
        BASES[self as usize].1
    }

    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        BASES[self as usize].2
    }

    /// Bytes one item takes on the wire; `None` for strings (length-prefixed).
    pub fn width(self) -> Option<usize> {
        Some(match self {
            BaseType::Char | BaseType::UChar => 1,
            BaseType::Short | BaseType::UShort => 2,
            BaseType::Int | BaseType::UInt | BaseType::Float => 4,
            BaseType::Long | BaseType::ULong | BaseType::Double => 8,
            BaseType::Str => return None,
        })
    }

    /// Whether it is a number (every type but `s`).
    pub fn is_numeric(self) -> bool {
        self != BaseType::Str
    }

    fn from_index(i: u8) -> Option<BaseType> {
        BASES.get(i as usize).map(|b| b.0)
    }
}

/// Whether an element is one value or an array of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// One value.
    Scalar,
    /// `a`: an array with a 32-bit length.
    Array,
    /// `A`: an array with a 64-bit length.
    LargeArray,
}

/// The type of one data element: a base type and a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ElemType {
    /// The scalar type.
    pub base: BaseType,
    /// Scalar or array.
    pub shape: Shape,
}

impl ElemType {
    /// A scalar of `base`.
    pub const fn scalar(base: BaseType) -> ElemType {
        ElemType {
            base,
            shape: Shape::Scalar,
        }
    }

    /// An array (`a`) of `base`.
    pub const fn array(base: BaseType) -> ElemType {
        ElemType {
            base,
            shape: Shape::Array,
        }
    }

    /// The one-byte wire code: base type in the low nibble, shape in the high one.
    pub fn code(self) -> u8 {
        let shape = match self.shape {
            Shape::Scalar => 0,
            Shape::Array => 1,
            Shape::LargeArray => 2,
        };
        self.base as u8 | (shape << 4)
    }

    /// The type a wire code names, if any.
    pub fn from_code(c: u8) -> Option<ElemType> {
        let base = BaseType::from_index(c & 0x0f)?;
        let shape = match c >> 4 {
            0 => Shape::Scalar,
            1 => Shape::Array,
            2 => Shape::LargeArray,
            _ => return None,
        };
        Some(ElemType { base, shape })
    }

    /// What it is, in words ("array of signed 32-bit integer").
    pub fn describe(self) -> String {
        match self.shape {
            Shape::Scalar => self.base.describe().to_owned(),
            Shape::Array => format!("array of {}", self.base.describe()),
            Shape::LargeArray => format!("large array of {}", self.base.describe()),
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = match self.shape {
            Shape::Scalar => "",
            Shape::Array => "a",
            Shape::LargeArray => "A",
        };
        write!(f, "%{prefix}{}", self.base.conversion())
    }
}

/// A parsed format string.
///
/// ```
/// use converse_tbon::Format;
/// let f = Format::parse("%d %af %s").unwrap();
/// assert_eq!(f.len(), 3);
/// assert_eq!(f.to_string(), "%d %af %s");
/// assert!(Format::parse("%q").unwrap_err().to_string().contains("'%q'"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Format {
    elems: Vec<ElemType>,
}

/// A format string that does not parse. Shown in one line: the format string (which may come
/// from a filter library, so hold anything) is shown escaped, as Rust writes a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad format string \"{}\": {reason}", format.escape_debug())]
pub struct FormatError {
    /// The format string.
    pub format: String,
    /// What is wrong, naming the place.
    pub reason: String,
}

impl Format {
    /// Parse a format string.
    ///
    /// # Errors
    /// [`FormatError`] naming the conversion that is not one of Appendix E's.
    pub fn parse(s: &str) -> Result<Format, FormatError> {
        let err = |reason: String| FormatError {
            format: s.to_owned(),
            reason,
        };
        let mut elems = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i].is_ascii_whitespace() {
                i += 1;
                continue;
            }
            if b[i] != b'%' {
                // `i` is at a character's start (only ASCII bytes were passed), so the
                // character shown is the one there, not its first byte taken for Latin-1.
                let found = s[i..].chars().next().unwrap_or_default();
                return Err(err(format!(
                    "expected '%' at byte {}, found '{}'; conversions are %c %uc %hd %uhd %d %ud \
                     %ld %uld %f %lf %s, with a or A in front for arrays",
                    i + 1,
                    found.escape_debug()
                )));
            }
            let start = i;
            i += 1;
            let shape = match b.get(i) {
                Some(b'a') => {
                    i += 1;
                    Shape::Array
                }
                Some(b'A') => {
                    i += 1;
                    Shape::LargeArray
                }
                _ => Shape::Scalar,
            };
            let end = b[i..]
                .iter()
                .position(|c| c.is_ascii_whitespace() || *c == b'%')
                .map_or(b.len(), |p| i + p);
            let word = &s[i..end];
            let Some(base) = BASES.iter().find(|x| x.1 == word).map(|x| x.0) else {
                return Err(err(format!(
                    "'{}' at byte {} is not a conversion; they are %c %uc %hd %uhd %d %ud %ld \
                     %uld %f %lf %s, with a or A in front for arrays",
                    s[start..end].escape_debug(),
                    start + 1
                )));
            };
            if elems.len() == u8::MAX as usize {
                return Err(err(format!("more than {} elements", u8::MAX)));
            }
            elems.push(ElemType { base, shape });
            i = end;
        }
        Ok(Format { elems })
    }

    /// A format of these element types.
    ///
    /// # Errors
    /// [`FormatError`] for more than 255 elements.
    pub fn from_elems(elems: Vec<ElemType>) -> Result<Format, FormatError> {
        if elems.len() > u8::MAX as usize {
            return Err(FormatError {
                format: String::new(),
                reason: format!("more than {} elements", u8::MAX),
            });
        }
        Ok(Format { elems })
    }

    /// The format whose wire codes are `codes`, if they all name a type.
    pub fn from_codes(codes: &[u8]) -> Option<Format> {
        codes
            .iter()
            .map(|&c| ElemType::from_code(c))
            .collect::<Option<Vec<_>>>()
            .map(|elems| Format { elems })
    }

    /// The element types.
    pub fn elems(&self) -> &[ElemType] {
        &self.elems
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.elems.len()
    }

    /// Whether it has no element (`""`).
    pub fn is_empty(&self) -> bool {
        self.elems.is_empty()
    }

    /// The wire codes, one byte per element.
    pub fn codes(&self) -> impl Iterator<Item = u8> + '_ {
        self.elems.iter().map(|e| e.code())
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.elems.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Format {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Format, FormatError> {
        Format::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_conversion_of_appendix_e_parses_and_prints_back() {
        for (_, conv, _) in BASES {
            for prefix in ["", "a", "A"] {
                let s = format!("%{prefix}{conv}");
                let f = Format::parse(&s).unwrap_or_default();
                assert_eq!(f.len(), 1, "{s}");
                assert_eq!(f.to_string(), s);
                let code = f.elems()[0].code();
                assert_eq!(ElemType::from_code(code), Some(f.elems()[0]));
            }
        }
    }

    #[test]
    fn separators_are_optional_and_empty_is_empty() {
        let a = Format::parse("%d %af\t%s").ok();
        let b = Format::parse("%d%af%s").ok();
        assert_eq!(a, b);
        assert_eq!(Format::parse("").map(|f| f.len()), Ok(0));
        assert_eq!(Format::parse("  ").map(|f| f.len()), Ok(0));
    }

    #[test]
    fn bad_strings_say_where_and_what() {
        let e = Format::parse("%d %x").unwrap_err().to_string();
        assert!(e.contains("'%x' at byte 4"), "{e}");
        let e = Format::parse("%d d").unwrap_err().to_string();
        assert!(e.contains("expected '%' at byte 4"), "{e}");
        let e = Format::parse("%").unwrap_err().to_string();
        assert!(e.contains("'%' at byte 1 is not a conversion"), "{e}");
        let e = Format::parse("%ad%").unwrap_err().to_string();
        assert!(e.contains("byte 4"), "{e}");
        for bad in ["%aa", "%Aa", "%l", "%u", "%D", "%ldd"] {
            assert!(Format::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_are_one_line_without_raw_control_bytes() {
        // A filter library's "%d\n%zz\x1b[31m" gave a two-line error with a raw escape.
        let e = Format::parse("%d\n%zz\u{1b}[31m").unwrap_err().to_string();
        assert_eq!(
            e,
            "bad format string \"%d\\n%zz\\u{1b}[31m\": '%zz\\u{1b}[31m' at byte 4 is not a \
             conversion; they are %c %uc %hd %uhd %d %ud %ld %uld %f %lf %s, with a or A in front \
             for arrays"
        );
        let e = Format::parse("%d é\0").unwrap_err().to_string();
        assert!(
            e.starts_with("bad format string \"%d é\\0\": expected '%' at byte 4, found 'é'"),
            "{e}"
        );
        let e = Format::parse("\u{7}").unwrap_err().to_string();
        assert!(e.contains("found '\\u{7}'"), "{e}");
        assert!(!e.contains('\u{7}'), "{e}");
    }

    #[test]
    fn unknown_codes_are_refused() {
        assert_eq!(ElemType::from_code(0x0b), None);
        assert_eq!(ElemType::from_code(0x30), None);
        assert!(Format::from_codes(&[0x04, 0x14]).is_some());
        assert!(Format::from_codes(&[0xff]).is_none());
    }

    proptest::proptest! {
        #[test]
        fn any_string_parses_or_is_refused_without_a_panic(
            s in "(%[aA]?(u?[chdf]|u?h?d|u?ld|lf|s|[a-zé]{0,2})|[ \t]|é|x){0,20}|\\PC{0,40}"
        ) {
            match Format::parse(&s) {
                Ok(f) => proptest::prop_assert_eq!(Format::parse(&f.to_string()), Ok(f)),
                Err(e) => proptest::prop_assert!(
                    !e.to_string().chars().any(char::is_control),
                    "{}",
                    e
                ),
            }
        }
    }
}
