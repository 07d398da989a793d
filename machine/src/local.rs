//! The in-process layer: every node is a thread of this process, messages move through
//! crossbeam channels. It is the embedded default (a program started without a launcher runs on
//! it) and the reference every other layer is tested against.
//!
//! A message crosses nodes by moving its `Message` through an unbounded channel: no byte of it
//! is copied, and the only per-message costs beyond the channel's own are a fence and a load,
//! to see whether the receiver sleeps in [`Transport::wait`], and the unpark (a syscall) only
//! when it does.
//!
//! An idle node sleeps by parking its thread, with a flag that says so; a sender that finds
//! the flag set after its push unparks it, and its [`waker`](Transport::waker) does the same
//! after setting a flag of its own (a wake, sticky until a `wait` takes it, never a message).
//! Not a blocking receive on the channel: crossbeam's spins and yields its core four times
//! before it sleeps, which with more nodes than cores is four context switches per wait for
//! nothing; nor a select over the inbox and a wake channel, which registers with both and
//! leaves both under their locks each time. Through the select, a broadcast-and-reduce round
//! on 4 to 8 in-process PEs took twice as long (`bench coll`).

use crate::contract::{BootConfig, Layer, Machine, Transport, Wake};
use crate::error::MachineError;
use crate::message::Message;
use crate::node_table::NodeTable;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::Thread;
use std::time::Duration;

/// Most messages handed up per `advance`, so a flood from one peer cannot keep the scheduler
/// from dispatching.
const ADVANCE_BATCH: usize = 4096;

/// Most nodes one process hosts: each is a thread, and far more threads than cores only
/// thrashes. Jobs this big belong on a multi-process layer.
pub const MAX_NODES: usize = 4096;

/// The registry entry for this layer.
pub const LAYER: Layer = Layer {
    name: "local",
    summary: "in-process: every node a thread of one process, crossbeam channels",
    boot,
    launched: never_launched,
    settings: &[],
    check: crate::no_settings,
    describe: crate::no_description,
};

fn never_launched() -> bool {
    false
}

/// One node of an in-process job.
pub struct LocalMachine {
    me: usize,
    table: Arc<NodeTable>,
    peers: Arc<[Sender<Message>]>,
    /// Every node's sleeper, by node: a send wakes its destination.
    sleepers: Arc<[Arc<Sleeper>]>,
    inbox: Receiver<Message>,
    barrier: Arc<Barrier>,
}

/// How a node sleeps and is woken: its thread parks with `asleep` set; a sender unparks it.
/// It is also the layer's [`Wake`]: a flag (`pending`) a `wait` takes, then the same unpark.
#[derive(Debug, Default)]
struct Sleeper {
    /// The thread that last waited (the node is made on another thread, and a `Machine` may
    /// move between threads): set under the lock before `asleep`, read only when asleep.
    thread: Mutex<Option<Thread>>,
    asleep: AtomicBool,
    /// A wake no `wait` has taken yet.
    pending: AtomicBool,
}

impl Sleeper {
    /// After a push to this node's inbox (or a wake): unpark it if it sleeps.
    #[inline]
    fn notify(&self) {
        // A full fence, paired with the one in `wait` (store `asleep`, fence, look at the
        // inbox): either the sleeper sees what was pushed before this fence, or this load
        // sees it asleep. Without it the push's store could pass this load, and a node would
        // sleep on a message. One fence and one load per message, no syscall unless asleep.
        fence(Ordering::SeqCst);
        // Acquire: seeing `asleep` set, this sees the thread recorded before it.
        if self.asleep.load(Ordering::Acquire) {
            let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(t) = t.as_ref() {
                t.unpark();
            }
        }
    }
}

impl Wake for Sleeper {
    fn wake(&self) {
        self.pending.store(true, Ordering::Release);
        self.notify();
    }
}

// By hand: the fields are the layer's working state (sockets, queues, buffers); the node
// number says which one it is.
impl std::fmt::Debug for LocalMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMachine")
            .field("node", &self.me)
            .finish_non_exhaustive()
    }
}

/// Create every node of the job in this process.
///
/// # Errors
/// [`MachineError::Boot`] when `num_pes` is zero or not a multiple of `pes_per_node`.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    // Its nodes are threads of one process: a node's death is the process's, so it cannot be
    // reported to survivors. Refused rather than accepted and then ignored.
    if cfg.settings.reports_deaths()? {
        return Err(MachineError::Setting {
            key: crate::FAULTS.into(),
            reason: "the local layer's nodes are threads of one process, which cannot survive \
                     one's death; use tcp, udp or si for faults=report"
                .into(),
        });
    }
    if cfg.num_pes == 0 || cfg.pes_per_node == 0 {
        return Err(MachineError::Boot("a job needs at least one PE".into()));
    }
    if !cfg.num_pes.is_multiple_of(cfg.pes_per_node) {
        return Err(MachineError::Boot(format!(
            "+p {} is not a multiple of +ppn {}",
            cfg.num_pes, cfg.pes_per_node
        )));
    }
    let nodes = cfg.num_pes / cfg.pes_per_node;
    if nodes > MAX_NODES {
        return Err(MachineError::Boot(format!(
            "the in-process layer runs at most {MAX_NODES} nodes (threads); +p {} asks for {nodes}",
            cfg.num_pes
        )));
    }
    tracing::debug!(target: "local", nodes, ppn = cfg.pes_per_node, "in-process nodes");
    let table = Arc::new(NodeTable::uniform(nodes, cfg.pes_per_node));
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..nodes).map(|_| crossbeam_channel::unbounded()).unzip();
    let peers: Arc<[Sender<Message>]> = senders.into();
    let sleepers: Arc<[Arc<Sleeper>]> = (0..nodes).map(|_| Arc::default()).collect();
    let barrier = Arc::new(Barrier::new(nodes));
    Ok(receivers
        .into_iter()
        .enumerate()
        .map(|(me, inbox)| {
            Box::new(LocalMachine {
                me,
                table: table.clone(),
                peers: peers.clone(),
                sleepers: sleepers.clone(),
                inbox,
                barrier: barrier.clone(),
            }) as Box<dyn Machine>
        })
        .collect())
}

impl Transport for LocalMachine {
    fn layer(&self) -> &'static str {
        "local"
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        let peer = self.peers.get(node).ok_or(MachineError::InvalidNode {
            node,
            nodes: self.peers.len(),
        })?;
        // Every receiver lives as long as its node's thread; a closed channel means that thread
        // is gone (it panicked or exited early).
        peer.send(msg)
            .map_err(|_| MachineError::peer_dead(&self.table, node, "its thread has ended"))?;
        if let Some(s) = self.sleepers.get(node) {
            s.notify();
        }
        Ok(())
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        let s = self.sleepers.get(self.me)?.clone();
        Some(s)
    }

    fn rma(&self) -> Option<Arc<dyn crate::Rma>> {
        // Every node is a thread of this process: cross-memory attach to ourselves, which
        // the kernel always allows a process.
        Some(Arc::new(crate::ProcessMemory::this_process(
            self.table.num_nodes(),
        )))
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        while n < ADVANCE_BATCH {
            match self.inbox.try_recv() {
                Ok(m) => {
                    deliver(m);
                    n += 1;
                }
                // Disconnected cannot happen while we hold a sender to ourselves.
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        let Some(me) = self.sleepers.get(self.me) else {
            return Ok(());
        };
        {
            // A lock per wait, on the way to sleep: nothing next to a park.
            let mut t = me.thread.lock().unwrap_or_else(|e| e.into_inner());
            let here = std::thread::current();
            if t.as_ref().map(Thread::id) != Some(here.id()) {
                *t = Some(here);
            }
        }
        me.asleep.store(true, Ordering::Release);
        // Paired with the fence in `Sleeper::notify` (see there).
        fence(Ordering::SeqCst);
        // A message, or a wake (taken here), ends the wait before it sleeps; one that comes
        // after this look finds `asleep` set and unparks, and a park after an unpark returns
        // at once. Spurious returns (a stale unpark) are allowed by the contract.
        if self.inbox.is_empty() && !me.pending.swap(false, Ordering::AcqRel) {
            std::thread::park_timeout(timeout);
            me.pending.store(false, Ordering::Release);
        }
        me.asleep.store(false, Ordering::Release);
        Ok(())
    }
}

impl Machine for LocalMachine {
    fn barrier(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<(), MachineError> {
        // A send here completes into the receiver's channel, so once every node is past the
        // barrier, all they sent before it is in our inbox: hand it up.
        self.barrier.wait();
        while self.advance(deliver)? > 0 {}
        Ok(())
    }

    fn exit(&mut self, _code: i32) -> Result<(), MachineError> {
        Ok(())
    }

    fn abort(&mut self, reason: &str) -> ! {
        crate::input::error_line(&format!(
            "converse: node {} aborting the job: {reason}",
            self.me
        ));
        std::process::exit(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(p: usize) -> BootConfig {
        BootConfig::new(p)
    }

    #[test]
    fn messages_are_moved_in_fifo_order() {
        let mut nodes = boot(&cfg(2)).expect("boot");
        for i in 0..100u8 {
            nodes[0].send(1, Message::from_payload(&[i])).expect("send");
        }
        let mut got = Vec::new();
        nodes[1]
            .advance(&mut |m| got.push(m.payload()[0]))
            .expect("advance");
        assert_eq!(got, (0..100).collect::<Vec<u8>>());
    }

    #[test]
    fn wait_catches_a_message_and_advance_hands_it_up() {
        let mut nodes = boot(&cfg(2)).expect("boot");
        nodes[0].send(1, Message::from_payload(b"x")).expect("send");
        nodes[1].wait(Duration::from_secs(5)).expect("wait");
        let mut n = 0;
        nodes[1].advance(&mut |_| n += 1).expect("advance");
        assert_eq!(n, 1);
    }

    #[test]
    fn bad_node_is_refused() {
        let mut nodes = boot(&cfg(1)).expect("boot");
        assert!(matches!(
            nodes[0].send(5, Message::new(0)),
            Err(MachineError::InvalidNode { node: 5, nodes: 1 })
        ));
    }

    #[test]
    fn passes_the_in_process_check() {
        let report = crate::check::run(&LAYER, 4, |_| cfg(4)).expect("check");
        assert_eq!(report.nodes, 4);
        assert!(report.woken, "every node has a waker, and it works");
        assert!(report.rma, "every node offers direct copies, and they work");
    }

    #[test]
    fn a_wake_ends_a_wait_and_is_never_handed_up() {
        let mut nodes = boot(&cfg(2)).expect("boot");
        let w = nodes[1].waker().expect("a waker");
        let start = std::time::Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                w.wake();
            });
            nodes[1].wait(Duration::from_secs(30)).expect("wait");
        });
        assert!(start.elapsed() < Duration::from_secs(10), "woken promptly");
        // Sticky: a wake before the wait ends it at once.
        w.wake();
        w.wake();
        let start = std::time::Instant::now();
        nodes[1].wait(Duration::from_secs(30)).expect("wait");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "returned at once"
        );
        let mut n = 0;
        nodes[1].advance(&mut |_| n += 1).expect("advance");
        assert_eq!(n, 0, "a wake is not a message");
        // A message that comes with a wake pending is still handed up.
        w.wake();
        nodes[0].send(1, Message::from_payload(b"x")).expect("send");
        nodes[1].wait(Duration::from_secs(30)).expect("wait");
        nodes[1].wait(Duration::from_secs(30)).expect("wait");
        nodes[1].advance(&mut |_| n += 1).expect("advance");
        assert_eq!(n, 1);
    }

    #[test]
    fn bad_pe_counts_are_boot_errors() {
        assert!(boot(&cfg(0)).is_err());
        let c = BootConfig {
            pes_per_node: 2,
            ..cfg(3)
        };
        assert!(boot(&c).is_err());
        assert!(boot(&cfg(MAX_NODES + 1)).is_err());
    }
}
