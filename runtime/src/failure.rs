//! A job that survives a node's death: the runtime's side of report mode (`faults=report`).
//!
//! By default any node's death ends the job. A program that asks for report mode
//! ([`RuntimeBuilder::survive_node_failures`](crate::RuntimeBuilder::survive_node_failures) or
//! `+set faults=report`) is told instead, on every surviving PE, through the callbacks it
//! registered with [`Pe::on_node_failure`]. How a death reaches a PE:
//!
//! 1. The layer learns it (from charmrun, or its own connection failing; see the report mode
//!    of the `Machine` contract) and returns `PeerDead` once, from `advance`, `wait` or `send`.
//! 2. The PE that owns the layer (or, in SMP mode, the node's communication thread) turns that
//!    into a `NodeDead` system message in each of the node's PEs' queues, behind what already
//!    arrived from the dead node, at priority 0.
//! 3. Dispatched, it records the death (sends to the dead node's PEs fail from then on:
//!    [`Pe::try_send`]) and runs the callbacks. After that, nothing from the dead node's PEs is
//!    dispatched on this PE.
//!
//! The runtime's own collectives over every PE cannot complete without the dead PEs: a
//! [`barrier`](Pe::barrier) waiting or started after a death returns `false`, and a reduction
//! under way or started after a death never reaches its target (the failure callbacks are the
//! signal; its partial state is a few bytes per PE). Reductions that go on over the survivors
//! are the tree overlay's (`converse-tbon` with failure recovery). Broadcasts and
//! the exit go around dead nodes (their subtree is served by the forwarder instead), so
//! [`Pe::exit`] still ends the job over the survivors. Node 0's death, a death before the
//! start-up check is over, and any other layer error still end the job.

use crate::lifecycle::{Phase, SystemHandler};
use crate::pe::{HandlerId, Pe};
use converse_machine::{MachineError, Message};
use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

/// A node that died while the job went on (report mode): what the failure callbacks get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    /// The node.
    pub node: usize,
    /// Its PEs, all of them gone with it.
    pub pes: Range<usize>,
    /// Why, as the launcher or the layer saw it ("was killed by signal 9 (SIGKILL)", ...).
    pub reason: String,
}

impl std::fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} (PEs {}..{}) is out of the job: {}",
            self.node, self.pes.start, self.pes.end, self.reason
        )
    }
}

/// Why a send could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The destination PE's node is out of the job (report mode).
    #[error("PE {pe} is on node {node}, which is out of the job")]
    DeadNode {
        /// The destination PE.
        pe: usize,
        /// Its node.
        node: usize,
    },
}

/// A failure callback.
type Callback = Rc<RefCell<dyn FnMut(&mut Pe, &NodeFailure)>>;

/// One PE's view of the job's deaths.
#[derive(Default)]
pub(crate) struct Failures {
    /// Report mode: deaths are reported, not fatal.
    pub(crate) report: bool,
    /// Whether any node is out of the job: the one flag the message path reads.
    pub(crate) any: bool,
    /// Per node: this PE was told it is out of the job.
    dead: Vec<bool>,
    /// Per node: its death was handed to this PE's queue (the owning PE only), so that a
    /// layer reporting it again (a send to it, say) does not queue it twice.
    queued: Vec<bool>,
    callbacks: Vec<Callback>,
}

impl Failures {
    pub(crate) fn new(report: bool, nodes: usize) -> Failures {
        Failures {
            report,
            any: false,
            dead: vec![false; nodes],
            queued: vec![false; nodes],
            callbacks: Vec::new(),
        }
    }

    /// Whether node `node` is out of the job, as this PE knows.
    #[inline]
    pub(crate) fn is_dead(&self, node: usize) -> bool {
        self.any && self.dead.get(node).copied().unwrap_or(false)
    }
}

/// The `NodeDead` message for `node` (`why`), to PE `dest`.
pub(crate) fn notice(node: usize, why: &str, dest: usize) -> Message {
    let mut m = Message::from_payload(why.as_bytes());
    m.set_handler(SystemHandler::NodeDead.id());
    m.set_arg0(node as u32);
    m.set_src_pe(dest as u32);
    m.set_dst_pe(dest as u32);
    m
}

/// Whether `e` is a death to report (report mode, a node other than 0) rather than the end of
/// the job: the node and why.
pub(crate) fn reportable(report: bool, e: &MachineError) -> Option<(usize, String)> {
    match e {
        MachineError::PeerDead { node, reason, .. } if report && *node != 0 => {
            Some((*node, reason.clone()))
        }
        _ => None,
    }
}

impl Pe {
    /// Register `f` to run on this PE whenever a node dies while the job goes on (report mode:
    /// see [`RuntimeBuilder::survive_node_failures`](crate::RuntimeBuilder::survive_node_failures)).
    /// Every callback runs once per dead node, in the order registered, from the scheduler
    /// like a handler (it may send). When it runs, every message from the dead node that this
    /// PE will ever dispatch has been dispatched. Without report mode it never runs: a death
    /// ends the job.
    ///
    /// ```no_run
    /// converse::Runtime::builder()
    ///     .survive_node_failures(true)
    ///     .build()
    ///     .and_then(|rt| rt.run(|pe| {
    ///         pe.on_node_failure(|pe, f| eprintln!("PE {}: {f}", pe.my_pe()));
    ///     }))
    ///     .ok();
    /// ```
    pub fn on_node_failure(&mut self, f: impl FnMut(&mut Pe, &NodeFailure) + 'static) {
        self.fail.callbacks.push(Rc::new(RefCell::new(f)));
    }

    /// Whether the job reports node deaths instead of ending (report mode).
    pub fn survives_node_failures(&self) -> bool {
        self.fail.report
    }

    /// Whether PE `pe` is still in the job, as far as this PE was told.
    pub fn is_alive(&self, pe: usize) -> bool {
        pe < self.num_pes && !self.fail.is_dead(self.table.node_of(pe))
    }

    /// The nodes this PE was told are out of the job, in node order.
    pub fn dead_nodes(&self) -> Vec<usize> {
        (0..self.fail.dead.len())
            .filter(|&n| self.fail.is_dead(n))
            .collect()
    }

    /// [`send`](Pe::send), saying when the destination is out of the job instead of dropping
    /// the message. A message to a PE still alive may yet be lost if its node dies before it
    /// arrives.
    ///
    /// # Errors
    /// [`SendError::DeadNode`] when `dest`'s node is known to be dead.
    ///
    /// # Panics
    /// When `dest` is not a PE of the job.
    pub fn try_send(&mut self, dest: usize, h: HandlerId, payload: &[u8]) -> Result<(), SendError> {
        self.check_alive(dest)?;
        self.send(dest, h, payload);
        Ok(())
    }

    /// [`send_msg`](Pe::send_msg), saying when the destination is out of the job.
    ///
    /// # Errors
    /// [`SendError::DeadNode`] when `dest`'s node is known to be dead.
    ///
    /// # Panics
    /// When `dest` is not a PE of the job.
    pub fn try_send_msg(
        &mut self,
        dest: usize,
        h: HandlerId,
        msg: Message,
    ) -> Result<(), SendError> {
        self.check_alive(dest)?;
        self.send_msg(dest, h, msg);
        Ok(())
    }

    fn check_alive(&self, dest: usize) -> Result<(), SendError> {
        if dest < self.num_pes {
            let node = self.table.node_of(dest);
            if self.fail.is_dead(node) {
                return Err(SendError::DeadNode { pe: dest, node });
            }
        }
        Ok(())
    }

    /// Whether PE 0's go comes to this PE through a PE of `node` (the start-up tree's path).
    fn go_passes(&self, node: usize) -> bool {
        let mut pe = self.my_pe;
        while let Some(parent) = self.tree().parent(0, pe) {
            if self.node_of(parent) == node {
                return true;
            }
            pe = parent;
        }
        false
    }

    /// A layer error on this PE's own layer: a death to report, or the end of the job.
    #[cold]
    pub(crate) fn machine_error(&mut self, e: &MachineError) {
        let Some((node, why)) = reportable(self.fail.report, e) else {
            self.fatal(&e.to_string());
        };
        if !self.fail.queued.get(node).copied().unwrap_or(true) {
            self.fail.queued[node] = true;
            // Behind what already arrived from it, so that is dispatched first.
            let m = notice(node, &why, self.my_pe);
            self.sent += 1;
            self.queue.push(m);
        }
    }

    /// The `NodeDead` message: record the death, run the callbacks.
    pub(crate) fn on_node_dead(&mut self, msg: Message) {
        // A worker's notice was made by its communication thread, which counts nothing: counted
        // sent here, so that quiescence detection's sums still balance (`message_counts`). A PE
        // that owns its layer counted it as it queued it (`machine_error`).
        if matches!(self.link, crate::link::Link::Worker { .. }) {
            self.sent += 1;
        }
        let node = msg.arg0() as usize;
        if node >= self.table.num_nodes() || self.fail.dead[node] {
            return;
        }
        if self.life.phase != Phase::Running {
            // In report mode, a death this PE hears of before PE 0's go has reached it may
            // come after PE 0 said go (PE 0 reports it then; a node killed just after start
            // must not end the job because a slower PE had not been told yet): held, and run
            // once go comes. PE 0 decides go, so a death before that is fatal there; and a
            // PE whose go would pass through the dead node never gets it: fatal too.
            if self.fail.report && self.my_pe != 0 && !self.go_passes(node) {
                self.life.held.push(msg);
                return;
            }
            let reason = String::from_utf8_lossy(msg.payload());
            self.fatal(&format!("node {node} died during start-up: {reason}"));
        }
        let reason = String::from_utf8_lossy(msg.payload()).into_owned();
        self.fail.dead[node] = true;
        self.fail.any = true;
        if let Some(r) = self.rec.as_deref_mut() {
            r.mark(&format!("node {node} died: {reason}"));
        }
        let first = self.node_first_pe(node);
        let failure = NodeFailure {
            node,
            pes: first..first + self.table.node(node).map_or(0, |n| n.num_pes),
            reason,
        };
        if self.my_pe == 0 {
            self.ccs_on_death(failure.pes.clone());
        }
        self.onesided_on_death(failure.pes.clone(), &failure.reason);
        // A copy of the list: a callback may register more, which run from the next death.
        for cb in self.fail.callbacks.clone() {
            match cb.try_borrow_mut() {
                Ok(mut f) => f(self, &failure),
                // The callback is running further up this thread's stack (it waits in a
                // nested scheduler): it cannot be entered again, so it misses this death
                // rather than the PE panicking. Said once, plainly.
                Err(_) => converse_machine::input::error_line(&format!(
                    "converse: PE {}: a failure callback still running missed node {node}'s death",
                    self.my_pe
                )),
            }
        }
    }

    /// Whether `msg` comes from a PE of a node this PE was told is dead: it is not dispatched.
    #[inline]
    pub(crate) fn sent_by_the_dead(&self, msg: &Message) -> bool {
        let src = msg.src_pe() as usize;
        src < self.num_pes && self.fail.is_dead(self.table.node_of(src))
    }
}
