//! `+idle-warn SECS`: say so when a job has gone idle for good — the usual sign of a program
//! that forgot `pe.exit(code)`, which otherwise leaves the job silent for ever.
//!
//! Every SECS, PE 0 (when it is free to) sends a probe down the spanning tree over all PEs;
//! each PE adds what it has done — messages sent and taken (`Pe::message_counts`, less the
//! probes' own) and its timers still pending — and the sums come back up. The job is idle
//! when two consecutive waves, SECS apart, find the same balanced totals and no timer: no
//! message in flight, none sent or run anywhere in between, and nothing scheduled to start
//! again (the quiescence test of `converse-tasks`, with the interval as its confirmation). A
//! PE busy in a long handler holds the wave until it returns, so a computing job is never
//! called idle. PE 0 then prints one line, once.
//!
//! | message (system handler `IdleProbe`) | `arg0` | `arg1` | payload |
//! |---|---|---|---|
//! | probe, down | 0 | wave | none |
//! | report, up | 1 | wave | sent u64, taken u64, timers u64 (LE) |
//!
//! Callbacks set with `on_idle` are not counted: a job whose only work left is an idle
//! callback that sends nothing is called idle.
//!
//! A wave costs 2(N−1) small messages every SECS, and only with the argument: off by default,
//! since a job that waits for clients (`+server`, endpoints) is idle on purpose. In report
//! mode a dead PE's report never comes; its wave, and the watch, stop there.

use crate::lifecycle::SystemHandler;
use crate::pe::{HandlerId, Pe};
use converse_machine::bytes::{ByteReader, ByteWriter};
use converse_machine::Message;
use std::time::Duration;

const PROBE: u32 = 0;
const REPORT: u32 = 1;

/// Totals of a wave: messages sent, taken, timers pending.
type Totals = (u64, u64, u64);

/// One PE's part of the watch.
#[derive(Default)]
pub(crate) struct IdleWatch {
    /// The watch's own messages sent and taken by this PE, left out of the counts.
    own_sent: u64,
    own_taken: u64,
    /// The wave passing through this PE: its number, reports still to come, sums so far.
    collecting: Option<(u32, usize, Totals)>,
    /// PE 0: the last wave started, whether one is on its way, the last wave's totals.
    wave: u32,
    running: bool,
    last: Option<Totals>,
    warned: bool,
}

fn system() -> HandlerId {
    HandlerId(SystemHandler::IdleProbe.id())
}

impl Pe {
    /// On PE 0, with `+idle-warn`: look every `every`.
    pub(crate) fn start_idle_watch(&mut self, every: Duration) {
        if self.my_pe != 0 {
            return;
        }
        self.every(every, move |pe| {
            let w = &mut pe.idle_watch;
            if w.running || w.warned {
                return;
            }
            w.running = true;
            w.wave = w.wave.wrapping_add(1);
            let wave = w.wave;
            pe.idle_wave_at(wave);
        });
    }

    /// A wave reaches this PE (PE 0 starts it here): take its counts, pass the probe on.
    fn idle_wave_at(&mut self, wave: u32) {
        let me = self.my_pe;
        let kids: Vec<usize> = self.tree().children(0, me).as_slice().to_vec();
        let (sent, taken) = self.message_counts();
        // PE 0 is here from its watch's timer, counted among those firing: not itself.
        let timers = (self.timers.pending() as u64).saturating_sub(u64::from(me == 0));
        let w = &mut self.idle_watch;
        let mine = (
            sent.saturating_sub(w.own_sent),
            taken.saturating_sub(w.own_taken),
            timers,
        );
        // The probes forwarded now are counted out of the next reading, which includes them.
        w.own_sent += kids.len() as u64;
        w.collecting = Some((wave, kids.len(), mine));
        for k in kids {
            let mut m = Message::with_capacity(0);
            m.set_arg0(PROBE);
            m.set_arg1(wave);
            self.send_msg(k, system(), m);
        }
        self.idle_wave_done_if_complete();
    }

    /// The system handler `IdleProbe`.
    pub(crate) fn on_idle_probe(&mut self, msg: Message) {
        self.idle_watch.own_taken += 1;
        let wave = msg.arg1();
        match msg.arg0() {
            PROBE => self.idle_wave_at(wave),
            REPORT => {
                let mut r = ByteReader::new(msg.payload());
                let (Ok(s), Ok(t), Ok(n)) = (r.u64(), r.u64(), r.u64()) else {
                    return self.drop_message(&msg, "a malformed idle-watch report");
                };
                match &mut self.idle_watch.collecting {
                    Some((w, missing, sums)) if *w == wave && *missing > 0 => {
                        *missing -= 1;
                        // Wrapping: what a report says is not trusted not to overflow.
                        sums.0 = sums.0.wrapping_add(s);
                        sums.1 = sums.1.wrapping_add(t);
                        sums.2 = sums.2.wrapping_add(n);
                    }
                    _ => return self.drop_message(&msg, "an idle-watch report of no wave here"),
                }
                self.idle_wave_done_if_complete();
            }
            _ => self.drop_message(&msg, "an idle-watch message of an unknown kind"),
        }
    }

    /// Every child reported: send the sums up, or (PE 0) judge the wave.
    fn idle_wave_done_if_complete(&mut self) {
        let Some((wave, 0, sums)) = self.idle_watch.collecting else {
            return;
        };
        self.idle_watch.collecting = None;
        if let Some(parent) = self.tree().parent(0, self.my_pe) {
            let mut b = Vec::with_capacity(24);
            b.put_u64(sums.0);
            b.put_u64(sums.1);
            b.put_u64(sums.2);
            let mut m = Message::from_payload(&b);
            m.set_arg0(REPORT);
            m.set_arg1(wave);
            self.idle_watch.own_sent += 1;
            self.send_msg(parent, system(), m);
            return;
        }
        let w = &mut self.idle_watch;
        w.running = false;
        let (sent, taken, timers) = sums;
        let idle = sent == taken && timers == 0;
        if idle && w.last == Some(sums) {
            w.warned = true;
            let secs = self.tun.idle_warn.unwrap_or_default().as_secs_f64();
            converse_machine::input::error_line(&format!(
                "converse: the job has been idle for {secs} s: no PE ran anything, no message \
                 is in flight and no timer is set. A program that is done must call \
                 pe.exit(code); this job will not end by itself (+idle-warn {secs})"
            ));
        }
        self.idle_watch.last = idle.then_some(sums);
    }
}
