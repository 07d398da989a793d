//! The front-end's side of back-end attach mode: where the leaves listen, the attach file,
//! and waiting for back-ends (MRNet's `get_LocalHostName`, `get_LocalPort` too).

use super::Network;
use crate::attached::{AttachFile, AttachPoint};
use crate::error::TbonError;
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

impl Network<'_> {
    /// Whether this network is in back-end attach mode
    /// ([`Options::attach_backends`](crate::Options::attach_backends)).
    pub fn is_attach_mode(&self) -> bool {
        self.node.borrow().attach.secret.is_some()
    }

    /// Where back-ends may attach: every leaf that listens, by rank. On the front-end of an
    /// attach-mode network, all of them (known when [`attach`](crate::attach) returns); on a
    /// leaf, its own; elsewhere none.
    pub fn attach_points(&self) -> Vec<AttachPoint> {
        let n = self.node.borrow();
        let mut v: Vec<AttachPoint> = n
            .attach
            .points
            .iter()
            .filter_map(|(&r, a)| AttachPoint::from_addr(r, a))
            .collect();
        if v.is_empty() {
            if let Some(a) = &n.attach.addr {
                v.extend(AttachPoint::from_addr(n.my_rank_pub(), a));
            }
        }
        v
    }

    /// Write the attach file back-ends read ([`AttachFile`]): the secret and every leaf,
    /// readable by its owner only.
    ///
    /// # Errors
    /// [`TbonError::Role`] off the front-end; [`TbonError::Usage`] when the network is not
    /// in attach mode or no leaf listens; [`TbonError::Attach`] if the file cannot be written.
    pub fn write_attach_file(&self, path: &Path) -> Result<(), TbonError> {
        self.front_end("write_attach_file")?;
        let secret =
            self.node.borrow().attach.secret.clone().ok_or_else(|| {
                TbonError::Usage("the network is not in back-end attach mode".into())
            })?;
        let points = self.attach_points();
        if points.is_empty() {
            return Err(TbonError::Usage("no leaf of the network listens".into()));
        }
        AttachFile { secret, points }.write(path)
    }

    /// The name of the host this process runs on (MRNet's `get_LocalHostName`).
    pub fn local_host_name(&self) -> String {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".into())
    }

    /// The port this process listens on for back-ends (MRNet's `get_LocalPort`): a leaf of
    /// an attach-mode network; `None` elsewhere.
    pub fn local_port(&self) -> Option<u16> {
        let n = self.node.borrow();
        let a = n.attach.addr.as_deref()?;
        AttachPoint::from_addr(0, a).map(|p| p.port)
    }

    /// In attach mode, this PE's endpoints (`converse-endpoint`): the overlay attached them,
    /// so a program that listens or connects too uses these (attaching them again would
    /// register their handler twice).
    pub fn attach_endpoints(&self) -> Option<converse_endpoint::Endpoints> {
        self.node.borrow().attach.ep.clone()
    }

    /// The ranks of the back-ends attached and alive now, sorted.
    pub fn attached_backends(&self) -> Vec<crate::Rank> {
        let mut v = self.node.borrow().attached_ranks();
        v.sort_unstable();
        v
    }

    /// Front-end: wait until at least `n` back-ends have attached and are alive, or `timeout`
    /// has passed; returns how many there are. The scheduler runs meanwhile (the tree serves,
    /// events are raised).
    ///
    /// # Errors
    /// [`TbonError::Role`] off the front-end; [`TbonError::ShutDown`]; [`TbonError::JobEnded`].
    pub fn wait_for_backends(&mut self, n: usize, timeout: Duration) -> Result<usize, TbonError> {
        self.front_end("wait_for_backends")?;
        let node = self.node.clone();
        let have = move || node.borrow().attached_ranks().len();
        if have() < n && !timeout.is_zero() {
            // A timer ends the wait; each arrival is a message, after which the count is
            // looked at again.
            let late = Rc::new(Cell::new(false));
            let l = late.clone();
            self.pe.after(timeout, move |_| l.set(true));
            let shut = self.node.clone();
            let have2 = have.clone();
            self.wait_for_pe(move || have2() >= n || late.get() || shut.borrow().shut_down)?;
        }
        self.refresh_topology();
        if have() < n && self.node.borrow().shut_down {
            return Err(TbonError::ShutDown);
        }
        Ok(have())
    }
}
