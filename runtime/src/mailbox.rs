//! A PE's mailbox: the one way to hand a message to a PE from any thread of its process
//! (Converse's `CmiPushPE`). Libraries that wake work on a PE from code that holds no `&mut Pe`
//! — a task's waker, a helper thread's result — post through it.
//!
//! A worker PE (SMP mode) already has such a queue, its inbox, which siblings push into; its
//! mailbox is that inbox. A PE that owns its layer gets a queue of its own on first use, which
//! the scheduler drains at each poll (one relaxed load while it is empty) and whose post ends
//! the PE's idle wait through the layer's [`Wake`] (a layer without one: the PE sees the post
//! at its next wake-up, `sched.idle_max_ms` at most).

use crate::node::NodeShared;
use crate::pe::HandlerId;
use converse_machine::{Message, Wake};
use crossbeam_queue::SegQueue;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Posts messages to one PE from any thread of its process. Cheap to clone; `Send + Sync`.
///
/// What is posted runs on the PE as a message sent to it would, by priority
/// ([`Message::set_priority`]), in the order posted among messages of equal priority posted
/// from one thread.
///
/// ```no_run
/// converse::run(|pe| {
///     let done = pe.register("done", |pe, msg| {
///         println!("a helper thread says {:?}", msg.payload());
///         pe.exit(0);
///     });
///     let mailbox = pe.mailbox();
///     std::thread::spawn(move || mailbox.post(done, converse::Message::from_payload(b"hi")));
/// });
/// ```
#[derive(Clone)]
pub struct Mailbox {
    to: To,
    pe: u32,
    /// The PE's count of posts (its side of quiescence detection's balance).
    posted: Arc<AtomicU64>,
}

#[derive(Clone)]
enum To {
    /// The queue of a PE that owns its layer.
    Own(Arc<OwnMail>),
    /// A worker PE's inbox.
    Worker { node: Arc<NodeShared>, rank: usize },
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox").field("pe", &self.pe).finish()
    }
}

impl Mailbox {
    /// Hand `msg` to handler `h` on the mailbox's PE. Never blocks; lock-free.
    pub fn post(&self, h: HandlerId, mut msg: Message) {
        msg.set_handler(h.raw());
        msg.set_src_pe(self.pe);
        msg.set_dst_pe(self.pe);
        // Before the message can be taken, so that the PE never counts more taken than sent.
        self.posted.fetch_add(1, Ordering::Release);
        match &self.to {
            To::Own(mail) => mail.post(msg),
            // Counted as a sibling's message: the PE's bound on what siblings pile up on it
            // holds posts too, and its accounting subtracts what it takes.
            To::Worker { node, rank } => {
                if let Some(inbox) = node.inboxes.get(*rank) {
                    inbox.push_from_sibling(msg);
                }
            }
        }
    }

    /// The PE the mailbox posts to.
    pub fn pe(&self) -> usize {
        self.pe as usize
    }
}

/// The mailbox queue of a PE that owns its layer.
pub(crate) struct OwnMail {
    q: SegQueue<Message>,
    /// Set by a post, cleared by the drain: the scheduler's check while nothing is posted.
    posted: AtomicBool,
    /// Ends the PE's idle wait in its layer.
    wake: Option<Arc<dyn Wake>>,
}

thread_local! {
    /// The mailbox queue of the PE that runs on this thread, if it owns its layer.
    static HERE: std::cell::Cell<*const OwnMail> = const { std::cell::Cell::new(std::ptr::null()) };
}

impl OwnMail {
    fn post(&self, msg: Message) {
        self.q.push(msg);
        self.posted.store(true, Ordering::Release);
        // A post from the PE's own thread finds it running, not blocked: waking its layer
        // would cost a system call (an eventfd or a futex) for nothing.
        if std::ptr::eq(HERE.with(|h| h.get()), self) {
            return;
        }
        if let Some(w) = &self.wake {
            w.wake();
        }
    }

    /// Move what was posted into `push`, in post order; how many.
    #[inline]
    pub(crate) fn drain(&self, mut push: impl FnMut(Message)) -> usize {
        // Cleared before the queue is read: a post racing with the drain sets it again, so its
        // message is taken now or at the next poll, never left behind.
        if !self.posted.load(Ordering::Relaxed) || !self.posted.swap(false, Ordering::AcqRel) {
            return 0;
        }
        let mut n = 0;
        while let Some(m) = self.q.pop() {
            push(m);
            n += 1;
        }
        n
    }
}

impl crate::pe::Pe {
    /// This PE's [`Mailbox`]: hands messages to this PE from any thread of its process.
    pub fn mailbox(&mut self) -> Mailbox {
        let pe = self.my_pe as u32;
        let to = match &self.link {
            crate::link::Link::Worker { node, rank } => To::Worker {
                node: node.clone(),
                rank: *rank,
            },
            crate::link::Link::Own(m) => {
                let mail = self.mail.get_or_insert_with(|| {
                    Arc::new(OwnMail {
                        q: SegQueue::new(),
                        posted: AtomicBool::new(false),
                        wake: m.waker(),
                    })
                });
                HERE.with(|h| h.set(Arc::as_ptr(mail)));
                To::Own(mail.clone())
            }
        };
        Mailbox {
            to,
            pe,
            posted: self.mail_posted.clone(),
        }
    }
}
