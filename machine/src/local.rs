//! The in-process layer: every node is a thread of this process, messages move through
//! crossbeam channels. It is the embedded default (a program started without a launcher runs on
//! it) and the reference every other layer is tested against.
//!
//! A message crosses nodes by moving its `Message` through an unbounded channel: no byte of it
//! is copied, and the only per-message cost beyond the channel's own is waking a receiver that
//! is blocked in [`Transport::wait`] (crossbeam makes that syscall only when one is).
//!
//! Its [`waker`](Transport::waker) shares the inbox: a wake is a flag (sticky until a `wait`
//! takes it) and, when the flag was clear, a `Wake` item behind the messages that ends a
//! `wait` blocked on the inbox, never handed up. One channel rather than a second one for
//! wakes: a `wait` on one channel is a plain blocking receive, where a select over two
//! registers with and leaves both channels' waiter lists under their locks each time; with
//! more PEs than cores every hop is a wait, and a broadcast-and-reduce round on 4 to 8
//! in-process PEs took twice as long through the select (`bench coll`, raw tree).

use crate::contract::{BootConfig, Layer, Machine, Transport, Wake};
use crate::error::MachineError;
use crate::message::Message;
use crate::node_table::NodeTable;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
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

/// What a node's inbox carries.
enum Item {
    Msg(Message),
    /// A [`LocalWaker`]'s nudge: ends a `wait`, never handed up.
    Wake,
}

/// One node of an in-process job.
pub struct LocalMachine {
    me: usize,
    table: Arc<NodeTable>,
    peers: Arc<[Sender<Item>]>,
    inbox: Receiver<Item>,
    /// A message caught by `wait`, handed up by the next `advance`.
    caught: Option<Message>,
    barrier: Arc<Barrier>,
    /// The waker handed out by `waker`; its flag is the pending wake.
    waker: Arc<LocalWaker>,
}

/// The in-process layer's [`Wake`]: a flag, and a `Wake` item in the node's own inbox when
/// the flag was clear.
#[derive(Debug)]
struct LocalWaker {
    pending: AtomicBool,
    inbox: Sender<Item>,
}

impl Wake for LocalWaker {
    fn wake(&self) {
        // Set already: a wake is pending (its item sent), which is all a second one would
        // say, so items stay at most one per wake a `wait` took. Disconnected: the node is
        // gone, nobody to wake.
        if !self.pending.swap(true, Ordering::AcqRel) {
            let _ = self.inbox.send(Item::Wake);
        }
    }
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Msg(m) => m.fmt(f),
            Item::Wake => f.write_str("Wake"),
        }
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
    let peers: Arc<[Sender<Item>]> = senders.into();
    let barrier = Arc::new(Barrier::new(nodes));
    Ok(receivers
        .into_iter()
        .enumerate()
        .map(|(me, inbox)| {
            let waker = Arc::new(LocalWaker {
                pending: AtomicBool::new(false),
                inbox: peers[me].clone(),
            });
            Box::new(LocalMachine {
                me,
                table: table.clone(),
                peers: peers.clone(),
                inbox,
                caught: None,
                barrier: barrier.clone(),
                waker,
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
        peer.send(Item::Msg(msg))
            .map_err(|_| MachineError::peer_dead(&self.table, node, "its thread has ended"))
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        Some(self.waker.clone())
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
        if let Some(m) = self.caught.take() {
            deliver(m);
            n += 1;
        }
        // A `Wake` item is passed over here, its flag left set: a wake stays pending until a
        // `wait` takes it, whoever drains the channel first.
        let mut turns = 0;
        while n < ADVANCE_BATCH && turns < 2 * ADVANCE_BATCH {
            turns += 1;
            match self.inbox.try_recv() {
                Ok(Item::Msg(m)) => {
                    deliver(m);
                    n += 1;
                }
                Ok(Item::Wake) => {}
                // Disconnected cannot happen while we hold a sender to ourselves.
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        if self.caught.is_some() || !self.inbox.is_empty() {
            return Ok(());
        }
        // A pending wake is taken here; one that comes while the receive sleeps ends it (its
        // item). A message is never dropped: the receive takes it into `caught`.
        if self.waker.pending.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        match self.inbox.recv_timeout(timeout) {
            Ok(Item::Msg(m)) => self.caught = Some(m),
            Ok(Item::Wake) => self.waker.pending.store(false, Ordering::Release),
            // Disconnected cannot happen while we hold a sender to ourselves.
            Err(_) => {}
        }
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
