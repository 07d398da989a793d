//! One checked little-endian byte reader and writer for every wire and file format of the
//! project (node tables, the launcher's control frames, start-up reports, overlay control),
//! so that no decoder hand-writes its own cursor and none can index past its input.
//!
//! ```
//! use converse_machine::bytes::{ByteReader, ByteWriter};
//! let mut out = Vec::new();
//! out.put_u32(7);
//! out.put_str("node-a");
//! let mut r = ByteReader::new(&out);
//! assert_eq!(r.u32().unwrap(), 7);
//! assert_eq!(r.str().unwrap(), "node-a");
//! r.finish().unwrap();
//! assert!(ByteReader::new(&[1, 2]).u32().is_err());
//! ```

use crate::error::WireError;

/// Reads little-endian fields from a byte slice; every read is bounds-checked and fails with a
/// [`WireError`] instead of panicking.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> ByteReader<'a> {
        ByteReader { bytes, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when fewer remain.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated {
                len: self.remaining(),
                need: n,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when fewer remain.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// One byte.
    ///
    /// # Errors
    /// [`WireError::Truncated`] at the end.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian `u32`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when fewer than 4 bytes remain.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `i32`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when fewer than 4 bytes remain.
    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when fewer than 8 bytes remain.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Bytes preceded by their `u32` length.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when the length or the bytes are not all there.
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// UTF-8 text preceded by its `u32` length.
    ///
    /// # Errors
    /// As [`bytes`](Self::bytes), and [`WireError::NotUtf8`].
    pub fn str(&mut self) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError::NotUtf8)
    }

    /// A count of items each at least `min_size` bytes long, refused when the input cannot
    /// hold that many: a decoder may then allocate for it without trusting the sender.
    ///
    /// # Errors
    /// [`WireError::Truncated`], or [`WireError::BadLength`] for a count the rest cannot hold.
    pub fn count(&mut self, min_size: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n > self.remaining() / min_size.max(1) {
            return Err(WireError::BadLength(format!(
                "a count of {n} in {} remaining bytes",
                self.remaining()
            )));
        }
        Ok(n)
    }

    /// What is left, all of it.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        s
    }

    /// Check that everything was read.
    ///
    /// # Errors
    /// [`WireError::BadLength`] naming the bytes left over.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(WireError::BadLength(format!("{n} trailing bytes"))),
        }
    }
}

/// Appends little-endian fields to a `Vec<u8>`: the writing side of [`ByteReader`].
pub trait ByteWriter {
    /// One byte.
    fn put_u8(&mut self, v: u8);
    /// A little-endian `u32`.
    fn put_u32(&mut self, v: u32);
    /// A little-endian `i32`.
    fn put_i32(&mut self, v: i32);
    /// A little-endian `u64`.
    fn put_u64(&mut self, v: u64);
    /// Bytes preceded by their `u32` length (what [`ByteReader::bytes`] reads).
    fn put_bytes(&mut self, b: &[u8]);
    /// Text preceded by its `u32` length (what [`ByteReader::str`] reads).
    fn put_str(&mut self, s: &str);
}

impl ByteWriter for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_bytes(&mut self, b: &[u8]) {
        // Formats limit their fields far below 4 GiB; a longer one is a bug, not input.
        debug_assert!(u32::try_from(b.len()).is_ok());
        self.put_u32(b.len() as u32);
        self.extend_from_slice(b);
    }
    fn put_str(&mut self, s: &str) {
        self.put_bytes(s.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_round_trips() {
        let mut out = Vec::new();
        out.put_u8(9);
        out.put_u32(0xdead_beef);
        out.put_i32(-5);
        out.put_u64(u64::MAX - 1);
        out.put_bytes(&[1, 2, 3]);
        out.put_str("ünï");
        let mut r = ByteReader::new(&out);
        assert_eq!(r.u8(), Ok(9));
        assert_eq!(r.u32(), Ok(0xdead_beef));
        assert_eq!(r.i32(), Ok(-5));
        assert_eq!(r.u64(), Ok(u64::MAX - 1));
        assert_eq!(r.bytes(), Ok(&[1u8, 2, 3][..]));
        assert_eq!(r.str(), Ok("ünï"));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let mut out = Vec::new();
        out.put_str("hello");
        out.put_u64(1);
        for len in 0..out.len() {
            let mut r = ByteReader::new(&out[..len]);
            assert!(r.str().and_then(|_| r.u64()).is_err(), "len {len}");
        }
    }

    #[test]
    fn counts_the_input_cannot_hold_are_refused() {
        let mut out = Vec::new();
        out.put_u32(1000);
        out.extend_from_slice(&[0; 16]);
        assert!(ByteReader::new(&out).count(4).is_err());
        assert_eq!(
            ByteReader::new(&out).count(1),
            Err(WireError::BadLength(
                "a count of 1000 in 16 remaining bytes".into()
            ))
        );
        let mut ok = Vec::new();
        ok.put_u32(4);
        ok.extend_from_slice(&[0; 16]);
        assert_eq!(ByteReader::new(&ok).count(4), Ok(4));
        let mut tail = ByteReader::new(&[1, 2]);
        assert!(tail.finish().is_err());
        assert_eq!(tail.rest(), &[1, 2]);
    }
}
