//! CCS authentication (Charm++'s scheme, so its clients can hold a key to a job): a shared
//! 16-byte key per security level, challenges answered with SHA-1 of one 52-byte block.
//!
//! `hash(key, salt, header)` = SHA-1 of `[key (16)][salt u32 BE][first 16 bytes of the
//! request header, or zeros][zeros]`, 52 bytes in all.
//!
//! | exchange | bytes | meaning |
//! |---|---|---|
//! | client → server | `80 00 01 LL`, `s1` (4) | "give me a client id" at level `LL`, and a challenge |
//! | server → client | `s2` (4) | the server's challenge |
//! | client → server | `hash(key, s2)` (20) | the client holds the key |
//! | server → client | `hash(key, s1)` (20), client id (4), first salt (4) | so does the server; the connection closes |
//! | client → server | `80 00 00 LL`, client id (4), reply salt (4), `hash(key, salt, header)` (20), header, data | an authenticated request: `salt` is the client's next (one more per request) |
//! | server → client | `hash(key, reply salt)` (20), then the reply | the reply is the server's |
//!
//! A key is written as Charm++'s clients and servers read it: up to 32 decimal digits, each
//! pair one byte (`00` to `99`; an odd last digit is padded with a zero). (Charm++ prints its
//! one-time keys in hex, which its own parser then misreads; keys here are made from bytes
//! below 100 and printed in decimal, so both read them alike.) A key file
//! (`+server-auth FILE`) holds lines `LEVEL KEY`, or `LEVEL OTP` for a key made now and
//! printed. Without a key for level 0, requests without authentication are refused.

use crate::CcsError;
use sha1::{Digest, Sha1};
use std::io::Read;

/// Bytes of a key.
pub const KEY_LEN: usize = 16;

/// Bytes of a hash.
pub const HASH_LEN: usize = 20;

/// A secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(pub [u8; KEY_LEN]);

// By hand: a key is never printed by accident.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from its text (module docs): 1 to 32 decimal digits, each pair a byte.
    ///
    /// # Errors
    /// [`CcsError::Key`] for anything else (a hex letter would end Charm++'s reading of it
    /// silently there: refused rather than cut short).
    pub fn parse(s: &str) -> Result<Key, CcsError> {
        let s = s.trim();
        if s.is_empty() || s.len() > 2 * KEY_LEN || !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(CcsError::Key(format!(
                "'{s}' is not a CCS key: 1 to {} decimal digits, each pair a byte",
                2 * KEY_LEN
            )));
        }
        let mut k = [0u8; KEY_LEN];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let hi = pair[0] - b'0';
            let lo = pair.get(1).map_or(0, |c| c - b'0');
            k[i] = hi * 10 + lo;
        }
        Ok(Key(k))
    }

    /// A fresh random key, of bytes below 100 (so that its text is 32 decimal digits).
    ///
    /// # Errors
    /// [`CcsError::Io`] when the system's randomness cannot be read.
    pub fn random() -> Result<Key, CcsError> {
        let mut k = [0u8; KEY_LEN];
        let mut filled = 0;
        while filled < KEY_LEN {
            let mut b = [0u8; 32];
            random_bytes(&mut b)?;
            // Below 200, then modulo 100: uniform.
            for v in b.into_iter().filter(|&v| v < 200) {
                if filled < KEY_LEN {
                    k[filled] = v % 100;
                    filled += 1;
                }
            }
        }
        Ok(Key(k))
    }

    /// Its text: 32 decimal digits.
    pub fn to_text(&self) -> String {
        self.0.iter().map(|b| format!("{:02}", b % 100)).collect()
    }

    /// `hash(self, salt, header)` (module docs).
    pub fn hash(&self, salt: u32, header: Option<&[u8]>) -> [u8; HASH_LEN] {
        let mut block = [0u8; 52];
        block[..KEY_LEN].copy_from_slice(&self.0);
        block[KEY_LEN..KEY_LEN + 4].copy_from_slice(&salt.to_be_bytes());
        if let Some(h) = header {
            let n = h.len().min(16);
            block[KEY_LEN + 4..KEY_LEN + 4 + n].copy_from_slice(&h[..n]);
        }
        Sha1::digest(block).into()
    }

    /// Whether `given` is `hash(self, salt, header)`, compared in constant time.
    pub fn verifies(&self, salt: u32, header: Option<&[u8]>, given: &[u8]) -> bool {
        let want = self.hash(salt, header);
        given.len() == HASH_LEN && want.iter().zip(given).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

/// Fill `out` from the system's randomness.
///
/// # Errors
/// [`CcsError::Io`] when `/dev/urandom` cannot be read.
pub fn random_bytes(out: &mut [u8]) -> Result<(), CcsError> {
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(out))
        .map_err(|e| CcsError::Io(format!("reading /dev/urandom: {e}")))
}

/// A random 32-bit number.
///
/// # Errors
/// As [`random_bytes`].
pub fn random_u32() -> Result<u32, CcsError> {
    let mut b = [0u8; 4];
    random_bytes(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

/// The keys a server accepts, by security level.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    levels: Vec<(u8, Key)>,
    /// Keys made for `OTP` lines, to print: (level, key).
    pub made: Vec<(u8, Key)>,
}

impl Keys {
    /// No key at all: requests without authentication are accepted (`+server-auth none`).
    pub fn none() -> Keys {
        Keys::default()
    }

    /// One key, for level 0.
    pub fn level0(k: Key) -> Keys {
        Keys {
            levels: vec![(0, k)],
            made: Vec::new(),
        }
    }

    /// A key file's text (module docs). `what` names it in errors.
    ///
    /// # Errors
    /// [`CcsError::Key`] naming the line that is wrong, or for a file without a key.
    pub fn parse(text: &str, what: &str) -> Result<Keys, CcsError> {
        let mut keys = Keys::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| CcsError::Key(format!("{what}, line {}: {why}", n + 1));
            let mut parts = line.split_whitespace();
            let (Some(level), Some(key), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(bad("want 'LEVEL KEY'"));
            };
            let level: u8 = level
                .parse()
                .ok()
                .filter(|&l| l < 255)
                .ok_or_else(|| bad("the level is not a number from 0 to 254"))?;
            if keys.get(level).is_some() {
                return Err(bad(&format!("level {level} has a key already")));
            }
            let key = if key.starts_with("OTP") {
                let k = Key::random()?;
                keys.made.push((level, k.clone()));
                k
            } else {
                Key::parse(key).map_err(|e| bad(&e.to_string()))?
            };
            keys.levels.push((level, key));
        }
        if keys.levels.is_empty() {
            return Err(CcsError::Key(format!("{what} holds no key")));
        }
        Ok(keys)
    }

    /// The key of `level`, if there is one.
    pub fn get(&self, level: u8) -> Option<&Key> {
        self.levels
            .iter()
            .find(|(l, _)| *l == level)
            .map(|(_, k)| k)
    }

    /// Whether a request without authentication is accepted: only with no key for level 0.
    pub fn open(&self) -> bool {
        self.get(0).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SHA-1 of Charm++'s test driver: 52 bytes, the first 1, gives F9693B3A….
    #[test]
    fn the_hash_is_sha1_of_one_52_byte_block() {
        let mut k = [0u8; KEY_LEN];
        k[0] = 1;
        let h = Key(k).hash(0, None);
        let hex: String = h.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(hex, "F9693B3AE7791C4ACE70CE31E4C2213F21CE900A");
    }

    /// As Charm++ reads a key (`CCS_AUTH_makeSecretKey`: `sscanf("%d")` on each pair).
    #[test]
    fn keys_parse_as_charm_reads_them_and_print_back_alike() {
        let k = Key::parse("00112233445566778899").expect("key");
        assert_eq!(k.0[..10], [0, 11, 22, 33, 44, 55, 66, 77, 88, 99]);
        assert_eq!(Key::parse("123").expect("odd").0[..2], [12, 30]);
        for bad in ["xyz", "12ab", "", &"1".repeat(33)] {
            assert!(Key::parse(bad).is_err(), "{bad:?}");
        }
        let r = Key::random().expect("random");
        assert!(r.0.iter().all(|&b| b < 100));
        assert_eq!(Key::parse(&r.to_text()).expect("its text"), r);
        let keys = Keys::parse("# keys\n0 00112233\n3 OTP\n", "f").expect("file");
        assert!(keys.get(0).is_some() && keys.get(3).is_some() && !keys.open());
        assert_eq!(keys.made.len(), 1);
        for bad in ["0", "x 00", "0 zz", "0 00\n0 11", "", "300 00"] {
            assert!(Keys::parse(bad, "f").is_err(), "{bad:?}");
        }
        assert!(Keys::none().open());
    }

    #[test]
    fn a_hash_verifies_only_with_its_key_salt_and_header() {
        let k = Key::parse("0099").expect("key");
        let h = k.hash(7, Some(b"0123456789abcdefXYZ"));
        assert!(
            k.verifies(7, Some(b"0123456789abcdef"), &h),
            "16 bytes of header count"
        );
        assert!(!k.verifies(8, Some(b"0123456789abcdef"), &h));
        assert!(!Key::parse("0199")
            .expect("k")
            .verifies(7, Some(b"0123456789abcdef"), &h));
        assert!(!k.verifies(7, None, &h));
    }
}
