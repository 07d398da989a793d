//! Events: the queue of what happened on the network, callbacks, and file descriptors that
//! become readable when something happened, for programs with a poll loop of their own.

use super::Network;
use crate::error::TbonError;
use crate::events::{CallbackId, Event, EventClass, EventKind};
use crate::stream::Stream;
use std::os::fd::RawFd;

impl<'p> Network<'p> {
    /// Make data events (one per packet delivered here) even without a data callback or
    /// descriptor, so that [`next_event`](Network::next_event) sees them.
    pub fn enable_data_events(&mut self, on: bool) {
        let mut n = self.node.borrow_mut();
        n.data_events = on;
        n.events.enable_data(on);
    }

    /// Events not read yet.
    pub fn num_events_pending(&self) -> usize {
        self.node.borrow().events.num_pending()
    }

    /// The oldest event not read yet.
    pub fn next_event(&mut self) -> Option<Event> {
        self.node.borrow_mut().events.next()
    }

    /// Events dropped because the queue was full (it keeps the newest).
    pub fn events_dropped(&self) -> u64 {
        self.node.borrow().events.dropped()
    }

    /// Forget every pending event.
    pub fn clear_events(&mut self) {
        self.node.borrow_mut().events.clear();
    }

    /// Call `f` on every event of `class` (and of `kind`, if given); once only if `onetime`
    /// (which needs a kind). Callbacks run on this PE after the handler that caused the event.
    ///
    /// # Errors
    /// [`TbonError::Usage`] for a kind of another class, or a one-time callback without a kind.
    pub fn register_event_callback(
        &mut self,
        class: EventClass,
        kind: Option<EventKind>,
        onetime: bool,
        f: impl FnMut(&Event) + 'static,
    ) -> Result<CallbackId, TbonError> {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.register(class, kind, onetime, Box::new(f), data)
    }

    /// Remove a callback; whether it was registered.
    pub fn remove_event_callback(&mut self, id: CallbackId) -> bool {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.remove(id, data)
    }

    /// Remove every callback of `class` (all: `None`) and `kind` (all: `None`).
    pub fn remove_event_callbacks(&mut self, class: Option<EventClass>, kind: Option<EventKind>) {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.remove_all(class, kind, data);
    }

    /// A file descriptor that becomes readable when an event of `class` happens, for `poll`
    /// or `select` (from another thread, say). Clear it with
    /// [`clear_event_fd`](Network::clear_event_fd) before acting on it.
    ///
    /// # Errors
    /// [`TbonError::Os`] when no descriptor can be made.
    pub fn event_fd(&mut self, class: EventClass) -> Result<RawFd, TbonError> {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.fd(class, data)
    }

    /// Make the descriptor of `class` unreadable until the next event.
    pub fn clear_event_fd(&mut self, class: EventClass) {
        self.node.borrow_mut().events.clear_fd(class);
    }

    /// A file descriptor that becomes readable when a packet for the program arrives on
    /// stream `s` (MRNet's `Stream::get_DataNotificationFd`); clear it with
    /// [`clear_stream_fd`](Network::clear_stream_fd) before acting on it.
    ///
    /// # Errors
    /// [`TbonError::Os`] when no descriptor can be made.
    pub fn stream_fd(&mut self, s: &Stream) -> Result<RawFd, TbonError> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        use std::os::fd::AsRawFd;
        let mut n = self.node.borrow_mut();
        if let Some(fd) = n.stream_fds.get(&s.id) {
            return Ok(fd.as_raw_fd());
        }
        let fd =
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| {
                TbonError::Os {
                    what: "eventfd",
                    reason: e.desc().into(),
                }
            })?;
        let raw = fd.as_raw_fd();
        n.stream_fds.insert(s.id, fd);
        Ok(raw)
    }

    /// Make stream `s`'s descriptor unreadable until its next packet.
    pub fn clear_stream_fd(&mut self, s: &Stream) {
        if let Some(fd) = self.node.borrow().stream_fds.get(&s.id) {
            // Non-blocking: a clear descriptor answers EAGAIN, which is fine.
            let _ = fd.read();
        }
    }

    /// Close stream `s`'s descriptor.
    pub fn close_stream_fd(&mut self, s: &Stream) {
        self.node.borrow_mut().stream_fds.remove(&s.id);
    }

    /// Close the descriptor of `class`.
    pub fn close_event_fd(&mut self, class: EventClass) {
        let mut n = self.node.borrow_mut();
        let data = n.data_events;
        n.events.close_fd(class, data);
    }
}
