//! Start-up and exit of a PE, and the runtime's system handlers.
//!
//! **Start-up.** The handler tables are checked up the spanning tree rooted at PE 0 (the one
//! reductions use). Once a PE has scheduled and heard from all its children, it sends its
//! parent its own handler names (in registration order) and the first PE below it whose table
//! differs from its own, if any. So PE 0 learns the first PE whose table differs from PE 0's,
//! and its answer goes down the tree: go, or the job fails with a message saying which PE
//! registered what. No PE handles more than its children's messages. Until the answer arrives a PE runs only
//! system messages; user messages that come early are held and run, in arrival order, once the
//! answer is "go". So handler ids agree on every PE before any user handler runs.
//!
//! **Exit.** [`Pe::exit`] asks PE 0 to end the job; PE 0 takes the first request and sends the
//! exit code down the tree. Each PE stops dispatching, and the runtime then meets the other
//! nodes in the layer's barrier and calls the layer's exit, so no node tears down its
//! interconnect while another still sends.

use crate::error::RuntimeError;
use crate::link::Link;
use crate::pe::Pe;
use converse_machine::bytes::{ByteReader, ByteWriter};
use converse_machine::{Message, WireError};
use SystemHandler as S;

/// The runtime's own handlers: the ids below [`USER_BASE`], the same on every PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum SystemHandler {
    /// A child's start-up report (its handler names), up the tree.
    Handshake = 0,
    /// PE 0's verdict on the start-up check, down the tree.
    HandshakeReply = 1,
    /// A PE asks PE 0 to end the job.
    ExitRequest = 2,
    /// The job ends, down the tree.
    Exit = 3,
    /// A broadcast travelling down its spanning tree.
    TreeBroadcast = 4,
    /// A reduction contribution travelling up.
    Reduce = 5,
    /// A barrier completed.
    BarrierDone = 6,
    /// A node broadcast travelling down the tree over nodes.
    NodeBroadcast = 7,
    /// A node is out of the job (report mode; made on this node, never sent).
    NodeDead = 8,
    /// Converse Client-Server: a request, its parts and their replies (`ccs.rs`).
    Ccs = 9,
    /// One-sided transfers: requests, their bytes and answers (`onesided.rs`).
    OneSided = 10,
    /// `+idle-warn`'s waves: probes down, sums up (`idle_warn.rs`).
    IdleProbe = 11,
}

/// The first handler id a program's own handlers get.
pub(crate) const USER_BASE: u32 = 16;

/// What a message's handler id names: the one decision every dispatch path takes.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    /// One of the runtime's own handlers.
    System(SystemHandler),
    /// A handler the program registered (an id at or above [`USER_BASE`]; whether this PE has
    /// it is checked when it runs).
    User,
    /// An id in the runtime's range that names nothing.
    Unknown,
}

impl Target {
    #[inline]
    pub(crate) fn of(id: u32) -> Target {
        use SystemHandler as S;
        match id {
            0 => Target::System(S::Handshake),
            1 => Target::System(S::HandshakeReply),
            2 => Target::System(S::ExitRequest),
            3 => Target::System(S::Exit),
            4 => Target::System(S::TreeBroadcast),
            5 => Target::System(S::Reduce),
            6 => Target::System(S::BarrierDone),
            7 => Target::System(S::NodeBroadcast),
            8 => Target::System(S::NodeDead),
            9 => Target::System(S::Ccs),
            10 => Target::System(S::OneSided),
            11 => Target::System(S::IdleProbe),
            id if id >= USER_BASE => Target::User,
            _ => Target::Unknown,
        }
    }
}

impl SystemHandler {
    /// The handler id messages carry.
    pub(crate) const fn id(self) -> u32 {
        self as u32
    }

    /// Start-up and exit control runs at once, before PE 0 says go; everything else waits.
    fn runs_before_go(self) -> bool {
        use SystemHandler as S;
        matches!(
            self,
            S::Handshake | S::HandshakeReply | S::ExitRequest | S::Exit | S::NodeDead
        )
    }
}

/// A PE whose handler table differs, with that table.
type Differing = (usize, Vec<String>);

/// Where a PE is in start-up. (Ending is apart: a job may end in any phase.)
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The start function runs: handlers may still be registered.
    #[default]
    Registering,
    /// Scheduling began: the start-up check is under way; `reported` once this PE sent its
    /// report up (or, on PE 0, gave the verdict).
    Checking {
        /// This PE's report went up.
        reported: bool,
    },
    /// PE 0 said go: user handlers run.
    Running,
}

/// Where a PE is in its life.
#[derive(Default)]
pub(crate) struct Lifecycle {
    /// Start-up phase.
    pub phase: Phase,
    /// Messages that arrived before `Running`, in the order the scheduler took them.
    pub held: Vec<Message>,
    /// Held messages waiting to run after "go", before anything else the queue holds.
    pub replay: std::collections::VecDeque<Message>,
    /// How many loops that `exit_scheduler` may end are running.
    pub leavable_depth: usize,
    /// Children's reports: (child, its handler names, first differing PE below it).
    reports: Vec<(usize, Vec<String>, Option<Differing>)>,
    /// Whether the job is ending, and with what code.
    ending: Ending,
    /// Why the job failed, if it did.
    pub failure: Option<RuntimeError>,
    /// `exit_scheduler` was called.
    pub leave: bool,
    /// [`Pe::poll_soon`] was called: the running batch ends after this handler.
    pub poll_soon: bool,
}

/// Whether the job is ending on this PE.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// It runs.
    #[default]
    Running,
    /// It is ending with this code (on PE 0: the exit has been announced, or the start-up
    /// check failed): every scheduler loop returns.
    Stopping { code: i32 },
}

impl Lifecycle {
    /// Whether scheduling began (no more handler registration).
    pub(crate) fn started(&self) -> bool {
        self.phase != Phase::Registering
    }

    /// The job is ending: every scheduler loop returns.
    #[inline]
    pub(crate) fn stopping(&self) -> bool {
        matches!(self.ending, Ending::Stopping { .. })
    }

    /// The job's exit code: 0 until it is known.
    pub(crate) fn exit_code(&self) -> i32 {
        match self.ending {
            Ending::Running => 0,
            Ending::Stopping { code } => code,
        }
    }
}

impl Pe {
    /// Ask for the whole job to end with `code` as its exit code (Charm++'s `CkExit`).
    ///
    /// Returns at once; the current handler finishes, and this and every other PE stop
    /// dispatching when the exit reaches them. Messages still queued then are dropped. If
    /// several PEs call `exit`, the first request PE 0 receives sets the code.
    pub fn exit(&mut self, code: i32) {
        if self.my_pe == 0 {
            self.announce_exit(code);
        } else {
            let mut m = Message::new(0).with_priority(i32::MIN);
            m.set_handler(S::ExitRequest.id());
            m.set_arg0(code as u32);
            self.route(0, m);
        }
    }

    /// Refuse the program's arguments: every PE reads the same arguments, so every PE calls
    /// this alike, and starts nothing. PE 0 alone prints `line` on stderr, once, and ends the
    /// job with exit code 2 (a usage error); the others return, and wait for that end in the
    /// scheduler.
    ///
    /// ```no_run
    /// converse::run(|pe| {
    ///     let n = converse::input::number(pe.args().get(1).map(String::as_str), "N", 10, 1..=1000);
    ///     let n: u32 = match n {
    ///         Ok(n) => n,
    ///         Err(why) => return pe.refuse_arguments(&format!("prog: {why} (usage: prog [N])")),
    ///     };
    ///     // ... the program, with n
    /// #   let _ = n;
    /// });
    /// ```
    pub fn refuse_arguments(&mut self, line: &str) {
        if self.my_pe == 0 {
            converse_machine::input::error_line(line);
            self.exit(2);
        }
    }

    fn announce_exit(&mut self, code: i32) {
        // Announced once: the first request sets the code (an ending already under way, a
        // failed start-up check, has its own).
        if self.life.stopping() {
            return;
        }
        tracing::debug!(target: "converse", code, "PE 0 announces the exit");
        self.exit_down(code);
    }

    /// Pass the exit down the tree, then stop.
    fn exit_down(&mut self, code: i32) {
        let mut m = Message::new(0).with_priority(i32::MIN);
        m.set_handler(S::Exit.id());
        m.set_arg0(code as u32);
        self.forward_down(0, m, false);
        self.stop(code);
    }

    fn stop(&mut self, code: i32) {
        tracing::debug!(target: "converse", code, "stopping: the job exits");
        self.life.ending = Ending::Stopping { code };
        self.queue.clear();
        self.life.replay.clear();
        if let crate::link::Link::Worker { node, .. } = &self.link {
            node.node_queue.clear();
        }
    }

    /// Start-up check, on first scheduling: report once the children have.
    pub(crate) fn ensure_started(&mut self) {
        if self.life.started() {
            return;
        }
        self.life.phase = Phase::Checking { reported: false };
        tracing::debug!(target: "converse", handlers = self.handler_names.len(), "start-up check: waiting for the children's handler tables");
        self.try_report();
    }

    /// Report up the tree (PE 0: decide) once started and every child has reported.
    fn try_report(&mut self) {
        let me = self.my_pe;
        if self.life.phase != (Phase::Checking { reported: false }) {
            return;
        }
        if self.life.reports.len() < self.tree().children(0, me).as_slice().len() {
            return;
        }
        self.life.phase = Phase::Checking { reported: true };
        let mut reports = std::mem::take(&mut self.life.reports);
        reports.sort_by_key(|r| r.0);
        let mine = &self.handler_names;
        // The first PE below us whose table differs from ours: a child itself, or what its own
        // subtree found (then it differs from the child's table, which equals ours).
        let differs = reports.into_iter().find_map(|(child, names, below)| {
            if &names != mine {
                Some((child, names))
            } else {
                below
            }
        });
        match self.tree().parent(0, me) {
            Some(parent) => {
                let mut m = Message::from_payload(&encode_report(mine, differs.as_ref()));
                m.set_handler(S::Handshake.id());
                self.route(parent, m);
            }
            None => {
                let verdict = differs.map(|(pe, names)| describe_mismatch(mine, pe, &names));
                let mut m = Message::from_payload(verdict.as_deref().unwrap_or("").as_bytes());
                m.set_handler(S::HandshakeReply.id());
                m.set_arg0(u32::from(verdict.is_some()));
                self.forward_down(0, m, false);
                self.take_verdict(verdict);
            }
        }
    }

    fn on_report(&mut self, msg: Message) {
        let child = msg.src_pe() as usize;
        if !self
            .tree()
            .children(0, self.my_pe)
            .as_slice()
            .contains(&child)
            || self.life.reports.iter().any(|r| r.0 == child)
        {
            return self.drop_message(&msg, "a start-up report from a PE that is not a child");
        }
        let (names, below) = decode_report(msg.payload()).unwrap_or_else(|| {
            (
                vec![format!("<PE {child} sent a report that does not decode>")],
                None,
            )
        });
        self.life.reports.push((child, names, below));
        self.try_report();
    }

    fn take_verdict(&mut self, mismatch: Option<String>) {
        match mismatch {
            None => {
                tracing::debug!(target: "converse", held = self.life.held.len(), "start-up check passed: go");
                self.life.phase = Phase::Running;
                // From now on this PE takes its node's shared work (before, it would hold all
                // it took until go, keeping it from the node's other PEs).
                if let crate::link::Link::Worker { node, rank } = &self.link {
                    node.takes_node_work(*rank);
                }
                if let Some(r) = self.rec.as_deref_mut() {
                    r.mark("start-up check passed: user handlers run");
                }
                // What came early runs next, in the order it was taken, before anything queued
                // later: the scheduler drains `replay` first. (Running it here, inline, would let
                // a held handler that schedules run later messages before earlier held ones.)
                let held = std::mem::take(&mut self.life.held);
                self.life.replay.extend(held);
            }
            Some(text) => {
                tracing::debug!(target: "converse", "start-up check failed: {text}");
                self.life.failure = Some(if self.my_pe == 0 {
                    RuntimeError::HandlerMismatch(text)
                } else {
                    RuntimeError::FailedElsewhere
                });
                self.stop(1);
            }
        }
    }

    /// Run a message's handler: the runtime's own, or the program's once PE 0 said go (until
    /// then the program's, and the runtime's that wait for go, wait in `held`, in the order
    /// they came).
    #[inline]
    pub(crate) fn run_handler(&mut self, msg: Message) {
        let target = Target::of(msg.handler());
        if self.held_until_go(target) {
            // Run (and traced) when replayed.
            return self.life.held.push(msg);
        }
        if self.rec.is_some() {
            if let Some(r) = self.rec.as_deref_mut() {
                r.begin(msg.handler());
            }
            self.run_target(target, msg);
            self.flush_sent();
            if let Some(r) = self.rec.as_deref_mut() {
                r.end();
            }
            return;
        }
        self.run_target(target, msg);
        self.flush_sent();
    }

    /// After a handler: what it sent to other nodes and the layer held back to coalesce
    /// leaves now (one flag test per handler; a call into the layer only after one that
    /// sent across, which the send's own system call dwarfs).
    #[inline]
    fn flush_sent(&mut self) {
        if !self.sent_out {
            return;
        }
        self.sent_out = false;
        if let Link::Own(m) = &mut self.link {
            if let Err(e) = m.flush() {
                self.machine_error(&e);
            }
        }
    }

    /// Whether a message for `t` waits until PE 0 says go: the program's, and the runtime's
    /// that are not part of the start-up check itself. One comparison once running.
    #[inline]
    fn held_until_go(&self, t: Target) -> bool {
        self.life.phase != Phase::Running
            && match t {
                Target::System(h) => !h.runs_before_go(),
                Target::User => true,
                Target::Unknown => false,
            }
    }

    #[inline]
    fn run_target(&mut self, t: Target, msg: Message) {
        match t {
            Target::System(h) => self.run_system_handler(h, msg),
            Target::User => self.run_user_handler(msg),
            Target::Unknown => self.drop_message(&msg, "it names an unknown system handler"),
        }
    }

    /// Run one of the runtime's own handlers.
    fn run_system_handler(&mut self, h: SystemHandler, msg: Message) {
        match h {
            S::Handshake => self.on_report(msg),
            S::HandshakeReply => {
                let Some(msg) = self.forward_down(0, msg, true) else {
                    return;
                };
                let mismatch =
                    (msg.arg0() != 0).then(|| String::from_utf8_lossy(msg.payload()).into_owned());
                self.take_verdict(mismatch);
            }
            S::ExitRequest if self.my_pe == 0 => self.announce_exit(msg.arg0() as i32),
            S::ExitRequest => self.drop_message(&msg, "an exit request reached a PE other than 0"),
            S::Exit => self.exit_down(msg.arg0() as i32),
            S::TreeBroadcast => self.on_tree_broadcast(msg),
            S::Reduce => self.on_reduce_contribution(msg),
            S::BarrierDone => self.on_barrier_done(),
            S::NodeBroadcast => self.on_node_broadcast(msg),
            S::NodeDead => self.on_node_dead(msg),
            S::Ccs => self.on_ccs(msg),
            S::OneSided => self.on_onesided(msg),
            S::IdleProbe => self.on_idle_probe(msg),
        }
    }
}

fn encode_names(out: &mut Vec<u8>, names: &[String]) {
    out.put_u32(names.len() as u32);
    for n in names {
        out.put_str(n);
    }
}

fn decode_names(r: &mut ByteReader<'_>) -> Result<Vec<String>, WireError> {
    // Each name takes at least its 4-byte length.
    let count = r.count(4)?;
    (0..count).map(|_| Ok(r.str()?.to_owned())).collect()
}

/// A start-up report: `[names][0]` or `[names][1][pe u32][names of pe]`.
fn encode_report(mine: &[String], differs: Option<&Differing>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_names(&mut out, mine);
    match differs {
        None => out.put_u8(0),
        Some((pe, names)) => {
            out.put_u8(1);
            out.put_u32(*pe as u32);
            encode_names(&mut out, names);
        }
    }
    out
}

fn decode_report(b: &[u8]) -> Option<(Vec<String>, Option<Differing>)> {
    let mut r = ByteReader::new(b);
    let names = decode_names(&mut r).ok()?;
    let differs = match r.u8().ok()? {
        0 => None,
        1 => {
            let pe = r.u32().ok()? as usize;
            Some((pe, decode_names(&mut r).ok()?))
        }
        _ => return None,
    };
    r.finish().ok()?;
    Some((names, differs))
}

/// One sentence on how PE `pe`'s table differs from PE 0's.
fn describe_mismatch(reference: &[String], pe: usize, t: &[String]) -> String {
    let i = reference
        .iter()
        .zip(t.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let show = |v: &[String]| v.get(i).map_or("nothing".to_owned(), |n| format!("'{n}'"));
    format!(
        "PE 0 registered {} handlers and PE {pe} registered {}; the first difference is \
         handler #{i}: {} on PE 0, {} on PE {pe}",
        reference.len(),
        t.len(),
        show(reference),
        show(t),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reports_round_trip_and_garbage_is_refused() {
        let n = names(&["a", "", "ünï"]);
        for differs in [None, Some((7usize, names(&["x"])))] {
            let bytes = encode_report(&n, differs.as_ref());
            assert_eq!(decode_report(&bytes), Some((n.clone(), differs.clone())));
            for len in 0..bytes.len() {
                assert_eq!(decode_report(&bytes[..len]), None, "len {len}");
            }
        }
        assert_eq!(decode_report(&[0xff; 8]), None);
    }

    #[test]
    fn mismatch_names_the_pe_and_the_handler() {
        let text = describe_mismatch(&names(&["a", "b"]), 2, &names(&["a", "c", "d"]));
        assert!(text.contains("PE 2 registered 3"), "{text}");
        assert!(
            text.contains("handler #1: 'b' on PE 0, 'c' on PE 2"),
            "{text}"
        );
    }

    #[test]
    fn missing_handler_reads_as_nothing() {
        let text = describe_mismatch(&names(&["a"]), 1, &names(&["a", "extra"]));
        assert!(text.contains("nothing on PE 0, 'extra' on PE 1"), "{text}");
    }
}
