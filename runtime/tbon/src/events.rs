//! Events (the guide's `Event`, callbacks and notification descriptors): data arrived, the
//! topology changed, something failed.
//!
//! Events are kept in a queue a program reads ([`Network::next_event`]); callbacks registered
//! for a class (and optionally one kind) run when one happens, on the PE, after the handler
//! that caused it; a notification file descriptor per class becomes readable when an event of
//! the class happens, for programs that `poll` it from another thread. Topology and error
//! events are always queued (they are rare; the queue keeps the newest [`MAX_PENDING`]). Data
//! events cost an allocation each, so they are made only when asked for: by
//! [`Network::enable_data_events`], a data callback or a data descriptor.
//!
//! [`Network::next_event`]: crate::Network::next_event
//! [`Network::enable_data_events`]: crate::Network::enable_data_events

use crate::error::TbonError;
use crate::topology::Rank;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};

/// Most events kept unread; older ones are dropped (and counted).
pub const MAX_PENDING: usize = 4096;

/// An event's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventClass {
    /// Data arrived.
    Data,
    /// The network's shape or state changed.
    Topology,
    /// Something failed.
    Error,
}

const CLASSES: usize = 3;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// A packet arrived for the program (class Data).
    PacketArrived,
    /// Every process of the network is in (class Topology).
    NetworkReady,
    /// The front-end shut the network down (class Topology).
    ShutDown,
    /// A filter failed on a wave, which was dropped (class Error).
    FilterFailed,
    /// A filter library or function could not be loaded (class Error).
    FilterLoadFailed,
    /// A packet that does not decode or names an unknown stream was dropped (class Error).
    PacketRefused,
    /// A process of the tree died (class Topology; `rank`: the process). With failure
    /// recovery on, its orphans re-connect; off, the streams through it fail.
    ProcessRemoved,
    /// An orphan re-connected to its new parent (class Topology; `rank`: the orphan; the
    /// message names the parent).
    NewParent,
    /// A stream lost an end-point, a back-end that died (class Topology; `stream`, `rank`):
    /// the stream goes on over the others.
    EndpointRemoved,
    /// A wave lost a part in a process that died, and was dropped (class Error; `stream`).
    WaveLost,
    /// A process died and failure recovery is off: the streams through it fail (class
    /// Error; `rank`: the process).
    NetworkFailed,
    /// A back-end attached to a leaf of the tree (class Topology; `rank`: the back-end; the
    /// message names its host and parent). MRNet's `TOPOL_ADD_BE`.
    BackendAdded,
}

impl EventKind {
    /// Its class.
    pub fn class(self) -> EventClass {
        match self {
            EventKind::PacketArrived => EventClass::Data,
            EventKind::NetworkReady
            | EventKind::ShutDown
            | EventKind::ProcessRemoved
            | EventKind::NewParent
            | EventKind::EndpointRemoved
            | EventKind::BackendAdded => EventClass::Topology,
            EventKind::FilterFailed
            | EventKind::FilterLoadFailed
            | EventKind::PacketRefused
            | EventKind::WaveLost
            | EventKind::NetworkFailed => EventClass::Error,
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The stream it concerns, if any.
    pub stream: Option<u32>,
    /// The process it concerns, if any.
    pub rank: Option<Rank>,
    /// A description.
    pub message: String,
}

impl Event {
    /// Its class.
    pub fn class(&self) -> EventClass {
        self.kind.class()
    }
}

/// A registered callback's handle, to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallbackId(u64);

pub(crate) struct Callback {
    id: CallbackId,
    class: EventClass,
    kind: Option<EventKind>,
    onetime: bool,
    f: Box<dyn FnMut(&Event)>,
}

/// One process's events.
#[derive(Default)]
pub(crate) struct Events {
    pending: VecDeque<Event>,
    dropped: u64,
    callbacks: Vec<Callback>,
    next_id: u64,
    fds: [Option<EventFd>; CLASSES],
    /// Events whose callbacks have not run yet (they run outside the overlay's borrow).
    to_call: Vec<Event>,
    data_wanted: bool,
}

impl Events {
    /// Whether data events are wanted (the hot path's check).
    #[inline]
    pub(crate) fn data_wanted(&self) -> bool {
        self.data_wanted
    }

    fn refresh_data_wanted(&mut self, enabled: bool) {
        self.data_wanted = enabled
            || self.fds[EventClass::Data as usize].is_some()
            || self.callbacks.iter().any(|c| c.class == EventClass::Data);
    }

    pub(crate) fn enable_data(&mut self, on: bool) {
        self.refresh_data_wanted(on);
    }

    /// Record an event: queue it, signal its descriptor, schedule its callbacks.
    pub(crate) fn push(&mut self, e: Event) {
        let class = e.class();
        if let Some(fd) = &self.fds[class as usize] {
            // A full counter (2^64 - 2 unread signals) cannot happen; a failed write only
            // loses a wake-up, never the event.
            let _ = fd.write(1);
        }
        if self
            .callbacks
            .iter()
            .any(|c| c.class == class && c.kind.is_none_or(|k| k == e.kind))
        {
            self.to_call.push(e.clone());
        }
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
            self.dropped += 1;
        }
        self.pending.push_back(e);
    }

    pub(crate) fn next(&mut self) -> Option<Event> {
        self.pending.pop_front()
    }

    pub(crate) fn num_pending(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn clear(&mut self) {
        self.pending.clear();
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    pub(crate) fn register(
        &mut self,
        class: EventClass,
        kind: Option<EventKind>,
        onetime: bool,
        f: Box<dyn FnMut(&Event)>,
        data_enabled: bool,
    ) -> Result<CallbackId, TbonError> {
        if let Some(k) = kind {
            if k.class() != class {
                return Err(TbonError::Usage(format!(
                    "event kind {k:?} is not of class {class:?}"
                )));
            }
        } else if onetime {
            return Err(TbonError::Usage(
                "a one-time callback must be for one kind of event".into(),
            ));
        }
        let id = CallbackId(self.next_id);
        self.next_id += 1;
        self.callbacks.push(Callback {
            id,
            class,
            kind,
            onetime,
            f,
        });
        self.refresh_data_wanted(data_enabled);
        Ok(id)
    }

    /// Remove a callback; whether it was there.
    pub(crate) fn remove(&mut self, id: CallbackId, data_enabled: bool) -> bool {
        let before = self.callbacks.len();
        self.callbacks.retain(|c| c.id != id);
        self.refresh_data_wanted(data_enabled);
        before != self.callbacks.len()
    }

    /// Remove every callback of `class` (all classes: `None`) and `kind` (all kinds: `None`).
    pub(crate) fn remove_all(
        &mut self,
        class: Option<EventClass>,
        kind: Option<EventKind>,
        data_enabled: bool,
    ) {
        self.callbacks.retain(|c| {
            !(class.is_none_or(|x| x == c.class) && kind.is_none_or(|k| c.kind == Some(k)))
        });
        self.refresh_data_wanted(data_enabled);
    }

    /// The callbacks to run now and the events to run them on; the caller runs them with no
    /// borrow of the overlay held, then gives them back with [`Events::restore`].
    pub(crate) fn take_calls(&mut self) -> Option<(Vec<Event>, Vec<Callback>)> {
        if self.to_call.is_empty() {
            return None;
        }
        Some((
            std::mem::take(&mut self.to_call),
            std::mem::take(&mut self.callbacks),
        ))
    }

    /// Put callbacks back after running them (minus the one-time ones that ran), before any
    /// registered meanwhile.
    pub(crate) fn restore(&mut self, mut cbs: Vec<Callback>, data_enabled: bool) {
        cbs.append(&mut self.callbacks);
        self.callbacks = cbs;
        self.refresh_data_wanted(data_enabled);
    }

    /// The notification descriptor of `class`, made on first use.
    pub(crate) fn fd(&mut self, class: EventClass, data_enabled: bool) -> Result<RawFd, TbonError> {
        let slot = &mut self.fds[class as usize];
        if slot.is_none() {
            let fd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(
                |e| TbonError::Os {
                    what: "eventfd",
                    reason: e.desc().into(),
                },
            )?;
            *slot = Some(fd);
        }
        let raw = slot.as_ref().map_or(-1, |f| f.as_raw_fd());
        self.refresh_data_wanted(data_enabled);
        Ok(raw)
    }

    /// Make the descriptor of `class` unreadable until the next event.
    pub(crate) fn clear_fd(&mut self, class: EventClass) {
        if let Some(fd) = &self.fds[class as usize] {
            // Non-blocking: an already clear descriptor answers EAGAIN, which is fine.
            let _ = fd.read();
        }
    }

    /// Close the descriptor of `class`.
    pub(crate) fn close_fd(&mut self, class: EventClass, data_enabled: bool) {
        self.fds[class as usize] = None;
        self.refresh_data_wanted(data_enabled);
    }
}

/// Run callbacks on events: each callback whose class and kind match, one-time ones once.
pub(crate) fn run_callbacks(events: &[Event], cbs: &mut Vec<Callback>) {
    for e in events {
        let mut i = 0;
        while i < cbs.len() {
            let c = &mut cbs[i];
            if c.class == e.class() && c.kind.is_none_or(|k| k == e.kind) {
                (c.f)(e);
                if c.onetime {
                    cbs.remove(i);
                    continue;
                }
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    fn ev(kind: EventKind) -> Event {
        Event {
            kind,
            stream: None,
            rank: None,
            message: String::new(),
        }
    }

    #[test]
    fn queue_callbacks_and_descriptors() {
        let mut e = Events::default();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let s = seen.clone();
        let id = e
            .register(
                EventClass::Error,
                None,
                false,
                Box::new(move |ev| s.borrow_mut().push(ev.kind)),
                false,
            )
            .unwrap_or(CallbackId(99));
        let s = seen.clone();
        e.register(
            EventClass::Topology,
            Some(EventKind::ShutDown),
            true,
            Box::new(move |ev| s.borrow_mut().push(ev.kind)),
            false,
        )
        .unwrap_or(CallbackId(99));
        let fd = e.fd(EventClass::Error, false).unwrap_or(-1);
        assert!(fd >= 0);
        e.push(ev(EventKind::FilterFailed));
        e.push(ev(EventKind::ShutDown));
        e.push(ev(EventKind::ShutDown));
        let (evs, mut cbs) = e.take_calls().unwrap_or((Vec::new(), Vec::new()));
        run_callbacks(&evs, &mut cbs);
        e.restore(cbs, false);
        assert_eq!(
            *seen.borrow(),
            [EventKind::FilterFailed, EventKind::ShutDown]
        );
        assert_eq!(e.num_pending(), 3);
        assert_eq!(e.next().map(|x| x.kind), Some(EventKind::FilterFailed));
        // The descriptor is readable until cleared.
        let mut pfd = [nix::poll::PollFd::new(
            // SAFETY: `fd` is the event queue's descriptor, open for the whole test.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
            nix::poll::PollFlags::POLLIN,
        )];
        assert_eq!(
            nix::poll::poll(&mut pfd, nix::poll::PollTimeout::ZERO),
            Ok(1)
        );
        e.clear_fd(EventClass::Error);
        assert_eq!(
            nix::poll::poll(&mut pfd, nix::poll::PollTimeout::ZERO),
            Ok(0)
        );
        assert!(e.remove(id, false));
        assert!(!e.remove(id, false));
        assert!(e
            .register(EventClass::Data, None, true, Box::new(|_| {}), false)
            .is_err());
        assert!(e
            .register(
                EventClass::Data,
                Some(EventKind::ShutDown),
                false,
                Box::new(|_| {}),
                false
            )
            .is_err());
    }

    #[test]
    fn data_events_only_when_wanted() {
        let mut e = Events::default();
        assert!(!e.data_wanted());
        e.enable_data(true);
        assert!(e.data_wanted());
        e.enable_data(false);
        assert!(!e.data_wanted());
        let _ = e.fd(EventClass::Data, false);
        assert!(e.data_wanted());
        e.close_fd(EventClass::Data, false);
        assert!(!e.data_wanted());
    }

    #[test]
    fn the_queue_is_bounded() {
        let mut e = Events::default();
        for _ in 0..MAX_PENDING + 5 {
            e.push(ev(EventKind::PacketRefused));
        }
        assert_eq!((e.num_pending(), e.dropped()), (MAX_PENDING, 5));
        e.clear();
        assert_eq!(e.num_pending(), 0);
    }
}
