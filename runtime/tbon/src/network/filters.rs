//! Filters on a running network: loading them from shared libraries on every process, finding
//! them by name, and setting their parameters.

use super::{summarize, Network};
use crate::codec::Pack;
use crate::error::TbonError;
use crate::filter::{FilterId, FIRST_USER_FILTER};
use crate::node::after_handler;
use crate::packet::Packet;
use crate::protocol::{Ctl, Req};
use crate::stream::{builtin_named, FilterType, Stream};

impl<'p> Network<'p> {
    /// Load filter `name` from the shared library `path` on every process of the network
    /// (MRNet's `load_FilterFunc`), and wait until all have it.
    ///
    /// # Errors
    /// [`TbonError::Load`] naming the processes where the library, the function or its
    /// `name_format_string` could not be found; [`TbonError::Role`] off the front-end.
    pub fn load_filter(&mut self, path: &str, name: &str) -> Result<FilterId, TbonError> {
        self.front_end("load_filter")?;
        let id = {
            let mut n = self.node.borrow_mut();
            let id = n.next_filter;
            n.next_filter += 1;
            id
        };
        let out = self.request(
            None,
            Req::Load {
                id,
                path: path.to_owned(),
                name: name.to_owned(),
            },
        )?;
        if out.errors.is_empty() {
            return Ok(id);
        }
        self.node.borrow_mut().filters.remove(&id);
        Err(TbonError::Load(summarize(&out.errors)))
    }

    /// Load several filters from one library; each result in the order of `names`.
    pub fn load_filters(&mut self, path: &str, names: &[&str]) -> Vec<Result<FilterId, TbonError>> {
        names.iter().map(|n| self.load_filter(path, n)).collect()
    }

    /// The id of the filter called `name` (built in, registered or loaded).
    pub fn filter_id(&self, name: &str) -> Option<FilterId> {
        if let Some(id) = builtin_named(name) {
            return Some(id);
        }
        let n = self.node.borrow();
        n.filters
            .iter()
            .filter(|(id, _)| **id >= FIRST_USER_FILTER)
            .find(|(_, (nm, _))| nm == name)
            .map(|(id, _)| *id)
    }

    /// Set a stream filter's parameters, on every process of the stream: the timeout of the
    /// timeout synchronization filter (one integer, milliseconds), or the configuration packet a
    /// transformation filter gets.
    ///
    /// # Errors
    /// [`TbonError::Packet`] when the values do not match the format; [`TbonError::NoStream`];
    /// [`TbonError::Role`] off the front-end.
    pub fn set_filter_params(
        &mut self,
        s: &Stream,
        which: FilterType,
        format: &str,
        values: impl Pack,
    ) -> Result<(), TbonError> {
        self.front_end("set_filter_params")?;
        if !self.node.borrow().streams.contains_key(&s.id) {
            return Err(TbonError::NoStream(s.id));
        }
        let p = Packet::new(s.id, crate::error::FIRST_APPLICATION_TAG, format, values)?;
        let body = Ctl::Params {
            id: s.id,
            which,
            packet: p.wire().to_vec(),
        }
        .encode();
        let msg = converse::Message::from_payload(&body);
        self.node.borrow_mut().on_ctl(self.pe, &msg);
        after_handler(&self.node);
        Ok(())
    }
}
