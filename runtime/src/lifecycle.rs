//! Start-up and exit of a PE, and the runtime's system handlers.
//!
//! **Start-up.** When a PE first schedules, it sends the names of its handlers, in registration
//! order, to PE 0. PE 0 compares every table with its own and answers all PEs: go, or the job
//! fails with a message saying which PE registered what. Until the answer arrives a PE runs only
//! system messages; user messages that come early are held and run, in arrival order, once the
//! answer is "go". So handler ids agree on every PE before any user handler runs.
//!
//! **Exit.** [`Pe::exit`] asks PE 0 to end the job; PE 0 takes the first request and tells
//! every PE the exit code. Each PE stops dispatching, and the runtime then meets the other
//! nodes in the layer's barrier and calls the layer's exit, so no node tears down its
//! interconnect while another still sends.

use crate::error::RuntimeError;
use crate::pe::Pe;
use machine::Message;

pub(crate) const H_HANDSHAKE: u32 = 0;
pub(crate) const H_HANDSHAKE_REPLY: u32 = 1;
pub(crate) const H_EXIT_REQUEST: u32 = 2;
pub(crate) const H_EXIT: u32 = 3;
pub(crate) const H_TREE_BCAST: u32 = 4;
pub(crate) const H_REDUCE: u32 = 5;
pub(crate) const H_BARRIER_DONE: u32 = 6;

/// Where a PE is in its life.
#[derive(Default)]
pub(crate) struct Lifecycle {
    /// The handshake went out: no more handler registration.
    pub started: bool,
    /// PE 0 said go: user handlers may run.
    pub ready: bool,
    /// Messages that arrived before `ready`, in the order the scheduler took them.
    pub held: Vec<Message>,
    /// Held messages waiting to run after "go", before anything else the queue holds.
    pub replay: std::collections::VecDeque<Message>,
    /// How many loops that `exit_scheduler` may end are running.
    pub leavable_depth: usize,
    /// PE 0 only: each PE's handler names, as they come in.
    tables: Vec<Option<Vec<String>>>,
    tables_in: usize,
    /// PE 0 only: the exit code was already announced.
    exit_announced: bool,
    /// The job is ending: every scheduler loop returns.
    pub stopping: bool,
    /// The job's exit code, once known.
    pub exit_code: i32,
    /// Why the job failed, if it did.
    pub failure: Option<RuntimeError>,
    /// `exit_scheduler` was called.
    pub leave: bool,
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
            m.set_handler(H_EXIT_REQUEST);
            m.set_arg0(code as u32);
            self.route(0, m);
        }
    }

    fn announce_exit(&mut self, code: i32) {
        if self.life.exit_announced {
            return;
        }
        self.life.exit_announced = true;
        for p in 1..self.num_pes {
            let mut m = Message::new(0).with_priority(i32::MIN);
            m.set_handler(H_EXIT);
            m.set_arg0(code as u32);
            self.route(p, m);
        }
        self.stop(code);
    }

    fn stop(&mut self, code: i32) {
        self.life.stopping = true;
        self.life.exit_code = code;
        self.queue.clear();
        self.life.replay.clear();
    }

    /// Send the handshake on first scheduling.
    pub(crate) fn ensure_started(&mut self) {
        if self.life.started {
            return;
        }
        self.life.started = true;
        if self.my_pe == 0 {
            self.life.tables = vec![None; self.num_pes];
            let mine = self.handler_names.clone();
            self.take_table(0, mine);
        } else {
            let mut m = Message::from_payload(&encode_names(&self.handler_names));
            m.set_handler(H_HANDSHAKE);
            self.route(0, m);
        }
    }

    /// PE 0: record one PE's table; once all are in, compare and answer everyone.
    fn take_table(&mut self, pe: usize, names: Vec<String>) {
        let Some(slot) = self.life.tables.get_mut(pe) else {
            return;
        };
        if slot.replace(names).is_none() {
            self.life.tables_in += 1;
        }
        if self.life.tables_in < self.num_pes {
            return;
        }
        let tables = std::mem::take(&mut self.life.tables);
        let verdict = compare_tables(&tables);
        for p in 1..self.num_pes {
            let mut m = Message::from_payload(verdict.as_deref().unwrap_or("").as_bytes());
            m.set_handler(H_HANDSHAKE_REPLY);
            m.set_arg0(u32::from(verdict.is_some()));
            self.route(p, m);
        }
        self.take_verdict(verdict);
    }

    fn take_verdict(&mut self, mismatch: Option<String>) {
        match mismatch {
            None => {
                self.life.ready = true;
                // What came early runs next, in the order it was taken, before anything queued
                // later: the scheduler drains `replay` first. (Running it here, inline, would let
                // a held handler that schedules run later messages before earlier held ones.)
                let held = std::mem::take(&mut self.life.held);
                self.life.replay.extend(held);
            }
            Some(text) => {
                self.life.failure = Some(if self.my_pe == 0 {
                    RuntimeError::HandlerMismatch(text)
                } else {
                    RuntimeError::FailedElsewhere
                });
                self.stop(1);
            }
        }
    }

    /// Run a message's handler, system or user, once start-up is done.
    pub(crate) fn run_handler(&mut self, m: Message) {
        if m.handler() < crate::pe::USER_BASE {
            self.run_system_handler(m)
        } else {
            self.run_user_handler(m)
        }
    }

    /// Run one of the runtime's own handlers.
    pub(crate) fn run_system_handler(&mut self, msg: Message) {
        let h = msg.handler();
        let control = matches!(h, H_HANDSHAKE | H_HANDSHAKE_REPLY | H_EXIT_REQUEST | H_EXIT);
        if !control && !self.life.ready {
            self.life.held.push(msg);
            return;
        }
        match h {
            H_HANDSHAKE if self.my_pe == 0 => {
                let from = msg.src_pe() as usize;
                let names = decode_names(msg.payload()).unwrap_or_else(|| {
                    vec![format!(
                        "<PE {from} sent a handler table that does not decode>"
                    )]
                });
                self.take_table(from, names);
            }
            H_HANDSHAKE_REPLY => {
                let mismatch =
                    (msg.arg0() != 0).then(|| String::from_utf8_lossy(msg.payload()).into_owned());
                self.take_verdict(mismatch);
            }
            H_EXIT_REQUEST if self.my_pe == 0 => self.announce_exit(msg.arg0() as i32),
            H_EXIT => self.stop(msg.arg0() as i32),
            H_TREE_BCAST => self.on_tree_broadcast(msg),
            H_REDUCE => self.on_reduce_contribution(msg),
            H_BARRIER_DONE => self.on_barrier_done(),
            _ => self.drop_message(&msg, "it names an unknown system handler"),
        }
    }
}

fn encode_names(names: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for n in names {
        out.extend_from_slice(&(n.len() as u32).to_le_bytes());
        out.extend_from_slice(n.as_bytes());
    }
    out
}

fn decode_names(mut b: &[u8]) -> Option<Vec<String>> {
    let word = |b: &mut &[u8]| -> Option<usize> {
        let (w, rest) = b.split_first_chunk::<4>()?;
        *b = rest;
        Some(u32::from_le_bytes(*w) as usize)
    };
    let count = word(&mut b)?;
    let mut names = Vec::with_capacity(count.min(b.len() / 4));
    for _ in 0..count {
        let len = word(&mut b)?;
        if len > b.len() {
            return None;
        }
        let (s, rest) = b.split_at(len);
        names.push(String::from_utf8(s.to_vec()).ok()?);
        b = rest;
    }
    b.is_empty().then_some(names)
}

/// `None` when every table equals PE 0's; else one sentence on the first difference.
fn compare_tables(tables: &[Option<Vec<String>>]) -> Option<String> {
    let empty = Vec::new();
    let reference = tables.first().and_then(Option::as_ref).unwrap_or(&empty);
    for (pe, t) in tables.iter().enumerate().skip(1) {
        let t = t.as_ref().unwrap_or(&empty);
        if t == reference {
            continue;
        }
        let i = reference
            .iter()
            .zip(t.iter())
            .take_while(|(a, b)| a == b)
            .count();
        let show = |v: &Vec<String>| v.get(i).map_or("nothing".to_owned(), |n| format!("'{n}'"));
        return Some(format!(
            "PE 0 registered {} handlers and PE {pe} registered {}; the first difference is \
             handler #{i}: {} on PE 0, {} on PE {pe}",
            reference.len(),
            t.len(),
            show(reference),
            show(t),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_round_trip_and_garbage_is_refused() {
        let n = names(&["a", "", "ünï"]);
        assert_eq!(decode_names(&encode_names(&n)), Some(n.clone()));
        let bytes = encode_names(&n);
        for len in 0..bytes.len() {
            assert_eq!(decode_names(&bytes[..len]), None);
        }
        assert_eq!(decode_names(&[0xff; 8]), None);
    }

    #[test]
    fn mismatch_names_the_pe_and_the_handler() {
        let t = vec![
            Some(names(&["a", "b"])),
            Some(names(&["a", "b"])),
            Some(names(&["a", "c", "d"])),
        ];
        let text = compare_tables(&t).unwrap_or_default();
        assert!(text.contains("PE 2 registered 3"), "{text}");
        assert!(
            text.contains("handler #1: 'b' on PE 0, 'c' on PE 2"),
            "{text}"
        );
        assert_eq!(compare_tables(&t[..2]), None);
    }

    #[test]
    fn missing_handler_reads_as_nothing() {
        let t = vec![Some(names(&["a"])), Some(names(&["a", "extra"]))];
        let text = compare_tables(&t).unwrap_or_default();
        assert!(text.contains("nothing on PE 0, 'extra' on PE 1"), "{text}");
    }
}
