//! A CCS client: what CharmDebug or a monitoring script does, in Rust.
//!
//! ```no_run
//! use converse_ccs::{Client, Dest, Key};
//! let key = Key::parse("00112233445566778899001122334455").unwrap();
//! let mut c = Client::connect("node0:1234", Some(key), std::time::Duration::from_secs(10)).unwrap();
//! println!("{} PEs", c.num_pes());
//! let status = c.request("converse.status", &Dest::All, b"").unwrap();
//! print!("{}", String::from_utf8_lossy(&status));
//! ```

use crate::auth::{self, Key, HASH_LEN};
use crate::wire::{self, Dest, Header};
use crate::CcsError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A client of one job's CCS server.
#[derive(Debug)]
pub struct Client {
    addr: SocketAddr,
    timeout: Duration,
    auth: Option<Session>,
    pes_per_node: Vec<usize>,
}

/// An authenticated client's standing with the server.
#[derive(Debug)]
struct Session {
    key: Key,
    level: u8,
    id: u32,
    salt: u32,
}

impl Client {
    /// Connect to the server at `addr` (`host:port`), with `key` (level 0) or without, and
    /// learn the job's shape (`ccs_getinfo`). Every connect, send and receive waits
    /// `timeout` at most.
    ///
    /// # Errors
    /// [`CcsError::Io`] naming the address when it cannot be reached; [`CcsError::Refused`]
    /// when the server does not take the key (or wants one).
    pub fn connect(addr: &str, key: Option<Key>, timeout: Duration) -> Result<Client, CcsError> {
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| CcsError::Io(format!("{addr}: {e}")))?
            .next()
            .ok_or_else(|| CcsError::Io(format!("{addr}: no address")))?;
        let mut c = Client {
            addr: sa,
            timeout,
            auth: None,
            pes_per_node: Vec::new(),
        };
        if let Some(key) = key {
            c.auth = Some(c.authenticate(key, 0)?);
        }
        let info = c
            .request("ccs_getinfo", &Dest::Pe(0), b"")
            .map_err(|e| match e {
                CcsError::Closed(_) if c.auth.is_none() => CcsError::Refused(format!(
                    "{addr} closed the connection: it wants a key (ccs --key)"
                )),
                e => e,
            })?;
        c.pes_per_node = wire::decode_info(&info)?;
        Ok(c)
    }

    /// The job's PEs.
    pub fn num_pes(&self) -> usize {
        self.pes_per_node.iter().sum()
    }

    /// Each node's PEs.
    pub fn pes_per_node(&self) -> &[usize] {
        &self.pes_per_node
    }

    fn open(&self) -> Result<TcpStream, CcsError> {
        let s = TcpStream::connect_timeout(&self.addr, self.timeout)
            .map_err(|e| CcsError::Io(format!("{}: {e}", self.addr)))?;
        s.set_read_timeout(Some(self.timeout))
            .and_then(|()| s.set_write_timeout(Some(self.timeout)))
            .and_then(|()| s.set_nodelay(true))
            .map_err(|e| CcsError::Io(format!("{}: {e}", self.addr)))?;
        Ok(s)
    }

    /// Get a client id and salt for `key` (the first exchange of the module docs of `auth`).
    fn authenticate(&self, key: Key, level: u8) -> Result<Session, CcsError> {
        let mut s = self.open()?;
        let s1 = auth::random_u32()?;
        let mut req = vec![0x80, 0x00, 0x01, level];
        req.extend_from_slice(&s1.to_be_bytes());
        s.write_all(&req).map_err(CcsError::closed)?;
        let mut s2 = [0u8; 4];
        s.read_exact(&mut s2).map_err(CcsError::closed)?;
        s.write_all(&key.hash(u32::from_be_bytes(s2), None))
            .map_err(CcsError::closed)?;
        let mut reply = [0u8; HASH_LEN + 8];
        s.read_exact(&mut reply)
            .map_err(|_| CcsError::Refused(format!("{} did not take the key", self.addr)))?;
        if !key.verifies(s1, None, &reply[..HASH_LEN]) {
            return Err(CcsError::Refused(format!(
                "{} does not hold the key (its answer does not match)",
                self.addr
            )));
        }
        let word =
            |i: usize| u32::from_be_bytes([reply[i], reply[i + 1], reply[i + 2], reply[i + 3]]);
        Ok(Session {
            key,
            level,
            id: word(HASH_LEN),
            salt: word(HASH_LEN + 4),
        })
    }

    /// Run handler `handler` with `data` on `dest` and wait for its reply (for several PEs,
    /// their replies concatenated in PE order).
    ///
    /// # Errors
    /// [`CcsError::Request`] for a bad name or destination; [`CcsError::Closed`] when the
    /// server closed the connection without a reply (it refused the request: an unknown
    /// handler, a PE outside the job or dead; its own output says which);
    /// [`CcsError::Refused`] when the reply is not the server's.
    pub fn request(
        &mut self,
        handler: &str,
        dest: &Dest,
        data: &[u8],
    ) -> Result<Vec<u8>, CcsError> {
        let h = Header::new(handler, dest, data.len())?.encode();
        let mut out = Vec::with_capacity(64 + data.len());
        let mut reply_salt = None;
        if let Some(a) = &mut self.auth {
            let salt = auth::random_u32()?;
            out.extend_from_slice(&[0x80, 0x00, 0x00, a.level]);
            out.extend_from_slice(&a.id.to_be_bytes());
            out.extend_from_slice(&salt.to_be_bytes());
            out.extend_from_slice(&a.key.hash(a.salt, Some(&h)));
            a.salt = a.salt.wrapping_add(1);
            reply_salt = Some(salt);
        }
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        if let Dest::List(l) = dest {
            out.extend_from_slice(&wire::encode_list(l));
        }
        let mut s = self.open()?;
        s.write_all(&out).map_err(CcsError::closed)?;
        if let (Some(salt), Some(a)) = (reply_salt, &self.auth) {
            let mut hash = [0u8; HASH_LEN];
            s.read_exact(&mut hash).map_err(CcsError::closed)?;
            if !a.key.verifies(salt, None, &hash) {
                return Err(CcsError::Refused(format!(
                    "{}'s reply is not signed with the key",
                    self.addr
                )));
            }
        }
        wire::read_reply(&mut s)
    }
}
