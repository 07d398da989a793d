//! The machine layer on the Simple Interconnect, written as the porting slides write it.
//!
//! ```text
//! DeliverViaNetwork(msg, node):            CommunicationServer():
//!   si_write(node, header{size, source})     while si_read(port, header):
//!   si_write(node, payload)                     buf = alloc(header.size)
//!                                                read payload into buf (in pieces)
//!                                                hand buf up
//! ```
//!
//! Two refinements: a message that fits one record goes as a single record (header then
//! payload), read straight into the message's own buffer with the header landing in its
//! headroom; a larger one goes as the header record followed by pieces of at most one record,
//! read straight into its buffer. Either way the payload is copied once into the ring and once
//! out of it. A full ring never blocks `send`: what does not fit waits in a queue per peer and
//! goes out from `advance`, so two nodes writing to each other cannot deadlock.

use crate::interconnect::Si;
use charmrun::client::{Control, LaunchEnv};
use machine::{BootConfig, Layer, Machine, MachineError, Message, NodeTable, WireError, HEADROOM};
use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

/// The registry entry for this layer.
pub const LAYER: Layer = Layer {
    name: "si",
    summary: "the Simple Interconnect on shared memory: one host, processes started by charmrun",
    boot,
    launched: LaunchEnv::present,
};

/// The slides' `si_header`: payload size and source node.
const HEADER: usize = 12;

/// Default ring size per sender, in KiB (`si.ring_kib`).
const DEFAULT_RING_KIB: usize = 256;

/// Largest message size a header may announce (the runtime's frames are far smaller).
const MAX_MESSAGE: u64 = 1 << 40;

/// How long an idle node with queued output sleeps before trying again: the peer frees ring
/// space without telling us.
const BACKLOG_NAP: Duration = Duration::from_micros(50);

/// A message being written in pieces.
struct Outgoing {
    msg: Message,
    header_sent: bool,
    /// Bytes of the wire form already written.
    offset: usize,
}

/// A message being read in pieces.
struct Incoming {
    buf: Vec<u8>,
    filled: usize,
}

/// One node of an SI job.
pub struct SiMachine {
    me: usize,
    table: NodeTable,
    si: Si,
    ctl: std::sync::Arc<Control>,
    chunk: usize,
    out: Vec<VecDeque<Outgoing>>,
    backlog: Vec<usize>,
    incoming: Vec<Option<Incoming>>,
    /// Messages received while waiting in a barrier, handed up by the next `advance`.
    ready: VecDeque<Message>,
}

/// `CmiMachineInit`: `si_init`, `si_open`, `si_getid`; send the port to charmrun, get the
/// table, attach every port, then remove ours from the file system (the mappings stay).
///
/// # Errors
/// [`MachineError::Boot`] when not started by charmrun, when the job spans hosts, or when
/// shared memory cannot be set up.
pub fn boot(cfg: &BootConfig) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    let env = LaunchEnv::from_env()?;
    let ring_kib: usize = cfg.settings.get_or("si.ring_kib", DEFAULT_RING_KIB)?;
    let ring = ring_kib
        .checked_mul(1024)
        .filter(|r| r.is_power_of_two() && *r >= 4096)
        .ok_or_else(|| MachineError::Setting {
            key: "si.ring_kib".into(),
            reason: format!("{ring_kib} is not a power of two of at least 4"),
        })?;
    let mut ctl = Control::connect(&env)?;
    // Named with the job's tag: charmrun removes it if this node dies before it does.
    let path = env.shm_path(&format!("si-{}", env.node));
    let mut si = Si::init(env.node, env.num_nodes);
    si.open(Path::new(&path), ring)
        .map_err(|e| MachineError::io(format!("creating the SI port {path}"), e))?;
    let table = ctl.join(&env, path.clone().into_bytes())?;
    let me = env.node;
    let my_host = table.node(me).map(|n| n.host.clone()).unwrap_or_default();
    let others: Vec<&str> = table
        .nodes()
        .iter()
        .map(|n| n.host.as_str())
        .filter(|h| *h != my_host)
        .collect();
    if !others.is_empty() {
        si.close();
        return Err(MachineError::Boot(format!(
            "the si layer is shared memory on one host, but this job spans hosts ({my_host}, {}); \
             use the tcp layer across hosts",
            others.join(", ")
        )));
    }
    for (node, info) in table.nodes().iter().enumerate() {
        if node == me {
            continue;
        }
        let p = std::str::from_utf8(&info.addr)
            .map_err(|_| MachineError::Boot(format!("node {node}'s SI port name is not text")))?;
        si.attach(node, Path::new(p))
            .map_err(|e| MachineError::io(format!("attaching node {node}'s SI port {p}"), e))?;
    }
    // Every node has attached every port: the names are no longer needed.
    ctl.barrier()?;
    si.close();
    let n = table.num_nodes();
    let chunk = si.max_write() - HEADER;
    Ok(vec![Box::new(SiMachine {
        me,
        table,
        si,
        ctl: std::sync::Arc::new(ctl),
        chunk,
        out: (0..n).map(|_| VecDeque::new()).collect(),
        backlog: Vec::new(),
        incoming: (0..n).map(|_| None).collect(),
        ready: VecDeque::new(),
    })])
}

fn header(size: usize, src: usize) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&(size as u64).to_le_bytes());
    h[8..].copy_from_slice(&(src as u32).to_le_bytes());
    h
}

impl SiMachine {
    fn corrupt(&self, node: usize, what: String) -> MachineError {
        MachineError::Corrupt {
            node,
            source: WireError::BadLength(what),
        }
    }

    /// `DeliverViaNetwork`: write as much of `o` to `node` as its ring takes now; whether it
    /// all went.
    fn deliver(&self, node: usize, o: &mut Outgoing) -> bool {
        let wire = o.msg.wire();
        if !o.header_sent {
            let h = header(wire.len(), self.me);
            if wire.len() <= self.chunk {
                // The whole message in one record.
                if !self.si.try_write(node, &[&h, wire]) {
                    return false;
                }
                o.header_sent = true;
                o.offset = wire.len();
                return true;
            }
            if !self.si.try_write(node, &[&h]) {
                return false;
            }
            o.header_sent = true;
        }
        while o.offset < wire.len() {
            let end = (o.offset + self.chunk).min(wire.len());
            if !self.si.try_write(node, &[&wire[o.offset..end]]) {
                return false;
            }
            o.offset = end;
        }
        true
    }

    fn flush_backlog(&mut self) {
        let mut i = 0;
        while i < self.backlog.len() {
            let node = self.backlog[i];
            let mut q = std::mem::take(&mut self.out[node]);
            while let Some(o) = q.front_mut() {
                if !self.deliver(node, o) {
                    break;
                }
                q.pop_front();
            }
            let empty = q.is_empty();
            self.out[node] = q;
            if empty {
                self.backlog.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// `CommunicationServer` for one sender: hand up what its ring holds, at most `budget`.
    fn receive_from(
        &mut self,
        s: usize,
        deliver: &mut dyn FnMut(Message),
        budget: usize,
    ) -> Result<usize, MachineError> {
        let mut n = 0;
        while n < budget {
            let Some(len) = self.si.peek(s) else { break };
            match self.incoming[s].take() {
                None => {
                    if len < HEADER {
                        return Err(self.corrupt(
                            s,
                            format!("record of {len} bytes where a header was expected"),
                        ));
                    }
                    if len > HEADER {
                        // Header and whole message in one record: read it so that the header
                        // lands in the headroom and the message's wire bytes right after.
                        let mut buf = machine::zeroed(HEADROOM - HEADER + len);
                        self.si.read(s, &mut buf[HEADROOM - HEADER..]);
                        let size = u64::from_le_bytes(
                            buf[HEADROOM - HEADER..HEADROOM - 4]
                                .try_into()
                                .unwrap_or([0; 8]),
                        );
                        if size as usize != len - HEADER {
                            return Err(self.corrupt(
                                s,
                                format!("header says {size} bytes, record holds {}", len - HEADER),
                            ));
                        }
                        deliver(
                            Message::from_frame(buf, HEADROOM)
                                .map_err(|e| MachineError::Corrupt { node: s, source: e })?,
                        );
                        n += 1;
                    } else {
                        let mut h = [0u8; HEADER];
                        self.si.read(s, &mut h);
                        let size = u64::from_le_bytes(h[..8].try_into().unwrap_or([0; 8]));
                        if size > MAX_MESSAGE || (size as usize) <= self.chunk {
                            return Err(self.corrupt(
                                s,
                                format!("a message of {size} bytes announced in pieces"),
                            ));
                        }
                        self.incoming[s] = Some(Incoming {
                            buf: machine::zeroed(HEADROOM + size as usize),
                            filled: 0,
                        });
                    }
                }
                Some(mut inc) => {
                    let room = inc.buf.len() - HEADROOM - inc.filled;
                    if len > room {
                        return Err(self
                            .corrupt(s, format!("a piece of {len} bytes where {room} were left")));
                    }
                    let start = HEADROOM + inc.filled;
                    self.si.read(s, &mut inc.buf[start..start + len]);
                    inc.filled += len;
                    if inc.filled == inc.buf.len() - HEADROOM {
                        deliver(
                            Message::from_frame(inc.buf, HEADROOM)
                                .map_err(|e| MachineError::Corrupt { node: s, source: e })?,
                        );
                        n += 1;
                    } else {
                        self.incoming[s] = Some(inc);
                    }
                }
            }
        }
        Ok(n)
    }
}

/// Most messages handed up from one sender per `advance`, so one busy sender cannot starve
/// the others or the scheduler.
const BUDGET: usize = 256;

impl Machine for SiMachine {
    fn layer(&self) -> &'static str {
        "si"
    }

    fn my_node(&self) -> usize {
        self.me
    }

    fn table(&self) -> &NodeTable {
        &self.table
    }

    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        if node >= self.out.len() {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        let mut o = Outgoing {
            msg,
            header_sent: false,
            offset: 0,
        };
        // Behind anything already queued for this peer, to keep the order.
        if !self.out[node].is_empty() || !self.deliver(node, &mut o) {
            if self.out[node].is_empty() {
                self.backlog.push(node);
            }
            self.out[node].push_back(o);
        }
        Ok(())
    }

    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        let mut n = 0;
        while let Some(m) = self.ready.pop_front() {
            deliver(m);
            n += 1;
        }
        if !self.backlog.is_empty() {
            self.flush_backlog();
        }
        for s in 0..self.incoming.len() {
            n += self.receive_from(s, deliver, BUDGET)?;
        }
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        if !self.ready.is_empty() {
            return Ok(());
        }
        let t = if self.backlog.is_empty() {
            timeout
        } else {
            timeout.min(BACKLOG_NAP)
        };
        self.si.wait(t);
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), MachineError> {
        // Keep the interconnect moving while others catch up: frames still queued here may be
        // what a peer needs to reach the barrier (its exit, say). What arrives meanwhile is kept
        // and handed up by the next `advance`.
        let ctl = std::sync::Arc::clone(&self.ctl);
        ctl.barrier_while(|| {
            let mut held = std::mem::take(&mut self.ready);
            let r = self.advance(&mut |m| held.push_back(m));
            self.ready = held;
            self.si.wait(Duration::from_millis(1));
            r.map(|_| ())
        })
    }

    fn exit(&mut self, code: i32) -> Result<(), MachineError> {
        self.ctl.ending(code)
    }

    fn abort(&mut self, reason: &str) -> ! {
        self.ctl.abort(reason)
    }
}
