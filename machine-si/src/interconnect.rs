//! The Simple Interconnect of the porting slides, made real on shared memory.
//!
//! | slides                         | here                                  |
//! |--------------------------------|---------------------------------------|
//! | `si_init()`                    | [`Si::init`]                          |
//! | `si_open()` → port             | [`Si::open`] (creates this node's port) |
//! | `si_getid()`                   | [`Si::id`]                            |
//! | `si_write(node, port, size, msg)` | [`Si::write`] (waits for room), [`Si::try_write`] |
//! | `si_read(port, size, buf)`     | [`Si::peek`] + [`Si::read`], per sender |
//! | `si_close(port)`, `si_done()`  | [`Si::close`], drop                   |
//!
//! As in the slides, each node has a port, other nodes write messages to it, a node reads its
//! port, messages are received whole, the interconnect is reliable and does its own flow
//! control: a full ring makes `write` wait (and `try_write` say no); nothing is dropped or
//! overwritten. Learning where the other ports are ([`Si::attach`]) is the start-up's job.

use crate::ring::{Consumer, Producer};
use crate::segment::Segment;
use std::cell::Cell;
use std::path::Path;
use std::time::Duration;

/// A node's use of the interconnect.
pub struct Si {
    me: usize,
    nodes: usize,
    port: Option<Segment>,
    peers: Vec<Option<Segment>>,
    /// Our state as the producer of our ring in each node's port.
    tx: Vec<Cell<Producer>>,
    /// Our state as the consumer of each sender's ring in our port.
    rx: Vec<Cell<Consumer>>,
}

impl Si {
    /// `si_init`: join an interconnect of `nodes` nodes as node `me`.
    pub fn init(me: usize, nodes: usize) -> Si {
        Si {
            me,
            nodes,
            port: None,
            peers: (0..nodes).map(|_| None).collect(),
            tx: (0..nodes).map(|_| Cell::default()).collect(),
            rx: (0..nodes).map(|_| Cell::default()).collect(),
        }
    }

    /// `si_open`: create this node's port at `path`, with a ring of `ring_bytes` (a power of
    /// two) for each sender.
    ///
    /// # Errors
    /// The file system's.
    pub fn open(&mut self, path: &Path, ring_bytes: usize) -> std::io::Result<()> {
        self.port = Some(Segment::create(path, self.nodes, ring_bytes)?);
        Ok(())
    }

    /// `si_getid`.
    pub fn id(&self) -> usize {
        self.me
    }

    /// Map node `node`'s port, found at `path`.
    ///
    /// # Errors
    /// The file system's, or `InvalidData` for a file that is not such a port.
    pub fn attach(&mut self, node: usize, path: &Path) -> std::io::Result<()> {
        let seg = Segment::open(path, self.nodes)?;
        if let Some(slot) = self.peers.get_mut(node) {
            *slot = Some(seg);
        }
        Ok(())
    }

    /// Largest record one write carries.
    pub fn max_write(&self) -> usize {
        self.peers
            .iter()
            .flatten()
            .chain(self.port.iter())
            .map(|s| s.ring(0).max_record())
            .min()
            .unwrap_or(0)
    }

    /// `si_write` without waiting: append one record made of `parts` to `node`'s port if its
    /// ring from us has room now.
    pub fn try_write(&self, node: usize, parts: &[&[u8]]) -> bool {
        let seg = if node == self.me {
            self.port.as_ref()
        } else {
            self.peers.get(node).and_then(Option::as_ref)
        };
        let (Some(seg), Some(tx)) = (seg, self.tx.get(node)) else {
            return false;
        };
        let mut p = tx.get();
        let pushed = seg.ring(self.me).try_push(&mut p, parts);
        tx.set(p);
        if pushed {
            seg.ring_doorbell();
        }
        pushed
    }

    /// `si_write`: append one record to `node`'s port, waiting for room.
    pub fn write(&self, node: usize, bytes: &[u8]) {
        let mut spins = 0u32;
        while !self.try_write(node, &[bytes]) {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// `si_read`, first half: the length of the next record from `sender`, if there is one.
    pub fn peek(&self, sender: usize) -> Option<usize> {
        let rx = self.rx.get(sender)?;
        let mut c = rx.get();
        let len = self.port.as_ref()?.ring(sender).peek_len(&mut c);
        rx.set(c);
        len
    }

    /// `si_read`, second half: copy that record into `out` (exactly its length).
    pub fn read(&self, sender: usize, out: &mut [u8]) {
        if let (Some(p), Some(rx)) = (self.port.as_ref(), self.rx.get(sender)) {
            let mut c = rx.get();
            p.ring(sender).pop_into(&mut c, out);
            rx.set(c);
        }
    }

    /// Whether any sender's ring holds a record.
    pub fn any_waiting(&self) -> bool {
        self.port
            .as_ref()
            .is_some_and(|p| (0..self.nodes).any(|s| !p.ring(s).is_empty(&self.rx[s].get())))
    }

    /// Sleep until a writer rings this node's doorbell, or `timeout`.
    pub fn wait(&self, timeout: Duration) {
        if let Some(p) = self.port.as_ref() {
            p.sleep(timeout, || self.any_waiting());
        }
    }

    /// `si_close`: remove this node's port file. Mappings (ours and the peers') stay valid, so
    /// this is done as soon as every peer has attached: a crash later leaves nothing behind.
    pub fn close(&mut self) {
        if let Some(p) = self.port.as_ref() {
            let _ = std::fs::remove_file(p.path());
        }
    }
}
