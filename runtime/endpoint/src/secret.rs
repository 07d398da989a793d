//! The secret a listener holds and a connecting program must prove it knows: 32 random bytes,
//! written as 64 hex digits. The listener prints it or writes it to a file readable by its
//! owner only; nobody is accepted without it.
//!
//! The secret never travels: each side sends a random nonce and gets back SHA-1 of a label,
//! the secret and that nonce (wire.rs tabulates the exchange), so both sides prove it and a
//! recorded exchange does not replay.

use crate::EndpointError;
use sha1::{Digest, Sha1};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Bytes of a secret.
pub(crate) const SECRET_LEN: usize = 32;
/// Bytes of a nonce.
pub(crate) const NONCE_LEN: usize = 16;
/// Bytes of a proof.
pub(crate) const PROOF_LEN: usize = 20;

/// A listener's secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

// By hand: a secret is never printed by accident.
impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A new secret from the kernel's random source.
    ///
    /// # Errors
    /// [`EndpointError::Io`] if the kernel has no randomness to give.
    pub fn generate() -> Result<Secret, EndpointError> {
        let mut s = [0u8; SECRET_LEN];
        random(&mut s)?;
        Ok(Secret(s))
    }

    /// A secret from its 64 hex digits (surrounding white space ignored).
    ///
    /// # Errors
    /// [`EndpointError::Secret`] for anything else.
    ///
    /// ```
    /// use converse_endpoint::Secret;
    /// let s = Secret::generate().unwrap();
    /// assert_eq!(Secret::parse(&s.to_hex()).unwrap(), s);
    /// assert!(Secret::parse("12ab").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Secret, EndpointError> {
        let t = text.trim();
        let bad = || {
            EndpointError::Secret(format!(
                "not a secret: {} hex digits expected, got {} characters",
                2 * SECRET_LEN,
                t.len()
            ))
        };
        if t.len() != 2 * SECRET_LEN || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut s = [0u8; SECRET_LEN];
        for (i, b) in s.iter_mut().enumerate() {
            *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Secret(s))
    }

    /// The secret in a file written by [`write_file`](Self::write_file) (or by hand).
    ///
    /// # Errors
    /// [`EndpointError::Secret`] naming the file if it cannot be read or holds no secret.
    pub fn read_file(path: &Path) -> Result<Secret, EndpointError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| EndpointError::Secret(format!("{}: {e}", path.display())))?;
        Secret::parse(&text).map_err(|e| EndpointError::Secret(format!("{}: {e}", path.display())))
    }

    /// Write the secret to `path`, readable and writable by its owner only (a file already
    /// there is replaced).
    ///
    /// # Errors
    /// [`EndpointError::Secret`] naming the file.
    pub fn write_file(&self, path: &Path) -> Result<(), EndpointError> {
        let fail = |e: std::io::Error| EndpointError::Secret(format!("{}: {e}", path.display()));
        // Written beside the file then renamed over it: a reader never sees half a secret.
        // The temporary name is random and made new here (never a file or link someone put
        // there first: its mode would be theirs), so it is born readable by its owner only.
        let mut salt = [0u8; 8];
        random(&mut salt)?;
        let tmp = path.with_extension(format!(
            "tmp-{}",
            salt.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(fail)?;
        let written = f
            .write_all(format!("{}\n", self.to_hex()).as_bytes())
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(fail)
    }

    /// The 64 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// SHA-1 of `label`, the secret and `nonce`: what proves the secret to the side that sent
    /// `nonce`.
    pub(crate) fn proof(&self, label: &[u8], nonce: &[u8; NONCE_LEN]) -> [u8; PROOF_LEN] {
        let mut h = Sha1::new();
        h.update(label);
        h.update(self.0);
        h.update(nonce);
        h.finalize().into()
    }
}

/// Compare proofs in time independent of where they differ.
pub(crate) fn same(a: &[u8; PROOF_LEN], b: &[u8]) -> bool {
    b.len() == PROOF_LEN && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Fill `buf` from the kernel's random source.
pub(crate) fn random(buf: &mut [u8]) -> Result<(), EndpointError> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: writes at most `buf.len() - done` bytes into the rest of `buf`.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(EndpointError::Io(format!("getrandom: {e}")));
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_round_trips_and_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cvep-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s");
        let s = Secret::generate().unwrap();
        s.write_file(&p).unwrap();
        assert_eq!(Secret::read_file(&p).unwrap(), s);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&p, "nope").unwrap();
        let e = Secret::read_file(&p).unwrap_err().to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("hex digits"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn proofs_differ_by_label_secret_and_nonce() {
        let (a, b) = (Secret::generate().unwrap(), Secret::generate().unwrap());
        let n = [7u8; NONCE_LEN];
        let p = a.proof(b"connect", &n);
        assert!(same(&p, &a.proof(b"connect", &n)));
        assert!(!same(&p, &a.proof(b"listen", &n)));
        assert!(!same(&p, &b.proof(b"connect", &n)));
        assert!(!same(&p, &a.proof(b"connect", &[8u8; NONCE_LEN])));
        assert!(!same(&p, &p[..19]));
        assert!(format!("{a:?}") == "Secret(..)");
    }
}
