//! Unit tests of the verdict's rules, each driven by events and a clock of its own.

use super::*;

const MS: Duration = Duration::from_millis(1);

fn code(c: i32) -> ExitStatus {
    ExitStatus::from_raw(c << 8)
}

fn killed(sig: i32) -> ExitStatus {
    ExitStatus::from_raw(sig)
}

/// A job of `n` separate processes started at `t0`, all introduced.
fn running(n: usize, t0: Instant) -> Verdict {
    let mut v = Verdict::new(vec![false; n], t0, Duration::from_secs(60), None);
    for i in 0..n {
        assert!(v.hello(i));
    }
    v
}

fn failure(d: Decision) -> Failure {
    match d {
        Decision::Fail(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn label(i: usize) -> String {
    format!("PE {i} on h")
}

/// As [`running`], in report mode, every node joined as of `t0`.
fn surviving(n: usize, t0: Instant) -> Verdict {
    let mut v = running(n, t0);
    v.survive();
    assert_eq!(v.decide(t0), Decision::Continue);
    v
}

#[test]
fn in_report_mode_a_death_is_reported_once_and_the_job_goes_on() {
    let t0 = Instant::now();
    let mut v = surviving(3, t0);
    v.exited(2, killed(9), t0);
    assert_eq!(v.decide(t0), Decision::Continue);
    let reports = v.take_reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].0, 2);
    assert!(reports[0].1.contains("signal 9"), "{reports:?}");
    // Its connection closing later changes nothing, and it is not reported again.
    v.closed(2, t0 + MS);
    assert_eq!(v.decide(t0 + 10 * MS), Decision::Continue);
    assert!(v.take_reports().is_empty());
    // The survivors leave normally: the job is over, with their code.
    for i in [0, 1] {
        v.ending(i, 0);
        v.exited(i, code(0), t0 + 20 * MS);
    }
    assert_eq!(v.decide(t0 + 30 * MS), Decision::Done(0));
}

#[test]
fn in_report_mode_a_node_whose_exit_is_seen_before_its_ending_leaves_normally() {
    let t0 = Instant::now();
    let mut v = surviving(3, t0);
    // Node 2's exit is seen before the ENDING it sent is read: no death.
    v.exited(2, code(0), t0);
    assert_eq!(v.decide(t0 + MS), Decision::Continue);
    assert!(v.take_reports().is_empty(), "{:?}", v.nodes[2]);
    v.ending(2, 0);
    v.closed(2, t0 + 2 * MS);
    assert_eq!(v.decide(t0 + 3 * MS), Decision::Continue);
    assert!(v.take_reports().is_empty() && !v.is_gone(2));
    // One that exits with a code and closes without ENDING is reported, at its close.
    v.exited(1, code(3), t0 + 4 * MS);
    v.closed(1, t0 + 5 * MS);
    assert_eq!(v.decide(t0 + 5 * MS), Decision::Continue);
    let r = v.take_reports();
    assert!(r.len() == 1 && r[0].1.contains("code 3"), "{r:?}");
}

#[test]
fn in_report_mode_node_0_dying_still_ends_the_job() {
    let t0 = Instant::now();
    let mut v = surviving(3, t0);
    v.exited(0, killed(9), t0);
    v.closed(0, t0);
    let f = failure(v.decide(t0));
    assert!(matches!(f.cause, Cause::Died { node: 0, .. }), "{f:?}");
}

#[test]
fn in_report_mode_a_suspected_node_is_reported_after_a_grace_for_its_own_end() {
    let t0 = Instant::now();
    let mut v = surviving(3, t0);
    v.suspect(0, 1, "connection reset", t0);
    assert_eq!(v.decide(t0 + SUSPECT_GRACE / 2), Decision::Continue);
    assert!(v.take_reports().is_empty(), "not before the grace");
    assert_eq!(v.decide(t0 + 2 * SUSPECT_GRACE), Decision::Continue);
    let r = v.take_reports();
    assert_eq!(r.len(), 1);
    assert!(r[0].1.contains("is lost to node 0"), "{r:?}");
    assert!(v.is_gone(1));
    // Without report mode a suspicion is nothing.
    let mut w = running(3, t0);
    w.suspect(0, 1, "connection reset", t0);
    assert_eq!(w.decide(t0 + 2 * SUSPECT_GRACE), Decision::Continue);
}

#[test]
fn in_report_mode_an_abort_still_ends_the_job() {
    let t0 = Instant::now();
    let mut v = surviving(3, t0);
    v.abort(1, "bad input".into(), t0);
    let f = failure(v.decide(t0 + 2 * ABORT_GRACE));
    assert!(matches!(f.cause, Cause::Aborted { node: 1, .. }), "{f:?}");
}

#[test]
fn a_lost_agent_names_its_first_node_still_in_the_job() {
    let t0 = Instant::now();
    let mut v = running(4, t0);
    // Node 1 left normally before its agent went away; node 3 is still in the job.
    v.ending(1, 0);
    v.exited(1, code(0), t0);
    v.agent_lost(&[1, 3], "its agent on h1 closed its connection".into(), t0);
    let f = failure(v.decide(t0));
    assert_eq!(f.code, 1);
    assert_eq!(
        f.message(&label),
        "lost PE 3 on h: its agent on h1 closed its connection; ending the job"
    );
}

#[test]
fn an_agent_whose_nodes_all_left_is_not_lost() {
    let t0 = Instant::now();
    let mut v = running(2, t0);
    for i in 0..2 {
        v.ending(i, 0);
        v.exited(i, code(0), t0);
    }
    v.agent_lost(&[0, 1], "gone".into(), t0);
    assert_eq!(v.decide(t0), Decision::Done(0));
}

#[test]
fn all_ending_then_exit_is_success() {
    let t0 = Instant::now();
    let mut v = running(3, t0);
    for i in 0..3 {
        v.ending(i, 0);
        assert_eq!(v.decide(t0 + MS), Decision::Continue);
    }
    for i in 0..3 {
        assert_eq!(v.decide(t0 + MS), Decision::Continue);
        v.exited(i, code(0), t0 + 2 * MS);
    }
    assert_eq!(v.decide(t0 + 3 * MS), Decision::Done(0));
}

#[test]
fn the_exit_frame_may_come_after_the_exit() {
    let t0 = Instant::now();
    let mut v = running(1, t0);
    v.exited(0, code(0), t0);
    assert_eq!(v.decide(t0 + MS), Decision::Continue);
    v.ending(0, 0);
    assert_eq!(v.decide(t0 + 2 * MS), Decision::Done(0));
}

#[test]
fn exit_code_is_the_first_non_zero() {
    let t0 = Instant::now();
    let mut v = running(4, t0);
    for (i, c) in [(0, 0), (2, 5), (1, 7), (3, 0)] {
        v.ending(i, c);
        v.exited(i, code(c), t0 + MS);
    }
    assert_eq!(v.decide(t0 + 2 * MS), Decision::Done(5));
}

#[test]
fn a_lingering_process_that_left_counts_as_gone_after_the_grace() {
    let t0 = Instant::now();
    let mut v = running(1, t0);
    v.ending(0, 4);
    v.closed(0, t0);
    assert_eq!(v.decide(t0 + LOST_GRACE), Decision::Continue);
    assert_eq!(v.decide(t0 + LOST_GRACE + MS), Decision::Done(4));
}

#[test]
fn a_node_whose_output_waits_for_the_reader_is_not_lingering() {
    let t0 = Instant::now();
    let mut v = running(1, t0);
    v.ending(0, 0);
    v.closed(0, t0);
    // charmrun's reader stalls: the node's output waits until t0 + 10 s.
    for s in 1..=10 {
        v.output_pending(0, t0 + Duration::from_secs(s));
        assert_eq!(v.decide(t0 + Duration::from_secs(s)), Decision::Continue);
    }
    let quiet = t0 + Duration::from_secs(10);
    assert_eq!(v.decide(quiet + LOST_GRACE), Decision::Continue);
    assert_eq!(v.decide(quiet + LOST_GRACE + MS), Decision::Done(0));
}

#[test]
fn an_exit_without_ending_waits_for_the_connection_then_names_the_node() {
    let t0 = Instant::now();
    let mut v = running(4, t0);
    v.exited(3, code(3), t0);
    assert_eq!(v.decide(t0 + MS), Decision::Continue);
    v.closed(3, t0 + MS);
    let f = failure(v.decide(t0 + 2 * MS));
    assert_eq!(f.code, 3);
    assert_eq!(
        f.message(&label),
        "PE 3 on h exited with code 3 before the job ended; ending the job"
    );
    // Without the connection closing, the grace decides; exit code 0 still fails.
    let mut v = running(2, t0);
    v.exited(1, code(0), t0);
    assert_eq!(v.decide(t0 + LOST_GRACE), Decision::Continue);
    assert_eq!(v.decide(t0 + LOST_GRACE + MS).code(), Some(1));
}

#[test]
fn first_cause_is_named_before_the_nodes_that_noticed_it() {
    let t0 = Instant::now();
    let mut v = running(4, t0);
    // Nodes 0 and 1 notice that node 2 is gone and abort, before charmrun sees node 2 die.
    v.abort(0, "peer 2 died".into(), t0);
    v.abort(1, "peer 2 died".into(), t0 + MS);
    v.exited(0, code(1), t0 + MS);
    v.exited(1, code(1), t0 + MS);
    assert_eq!(v.decide(t0 + 2 * MS), Decision::Continue);
    v.exited(2, killed(9), t0 + 100 * MS);
    v.closed(2, t0 + 100 * MS);
    let f = failure(v.decide(t0 + 101 * MS));
    assert_eq!(f.code, 137);
    assert_eq!(
        f.cause,
        Cause::Died {
            node: 2,
            status: killed(9),
            when: Death::Running
        }
    );
    assert!(f
        .message(&label)
        .contains("was killed by signal 9 (SIGKILL)"));
}

#[test]
fn an_abort_waits_its_grace_for_a_cause_then_names_the_first_aborter() {
    let t0 = Instant::now();
    let mut v = running(3, t0);
    v.abort(2, "late".into(), t0 + 10 * MS);
    v.abort(1, "out of memory".into(), t0);
    v.abort(1, "second words do not count".into(), t0 + 20 * MS);
    assert_eq!(v.decide(t0 + ABORT_GRACE), Decision::Continue);
    let f = failure(v.decide(t0 + ABORT_GRACE + MS));
    assert_eq!(f.code, 1);
    assert_eq!(
        f.message(&label),
        "PE 1 on h aborted the job: out of memory"
    );
}

#[test]
fn a_node_that_dies_before_connecting_is_named_at_once() {
    let t0 = Instant::now();
    let mut v = Verdict::new(vec![false; 2], t0, Duration::from_secs(60), None);
    assert!(v.hello(0));
    v.exited(1, code(0), t0);
    let f = failure(v.decide(t0));
    assert_eq!(f.code, 1);
    assert_eq!(
        f.message(&label),
        "PE 1 on h exited with code 0 before connecting to charmrun"
    );
}

#[test]
fn a_signal_while_leaving_ends_the_job() {
    let t0 = Instant::now();
    let mut v = running(2, t0);
    v.ending(0, 0);
    v.exited(0, killed(11), t0);
    let f = failure(v.decide(t0));
    assert_eq!(f.code, 139);
    assert!(f.message(&label).contains("while leaving the job"));
}

#[test]
fn a_closed_connection_is_lost_contact_after_the_grace() {
    let t0 = Instant::now();
    let mut v = running(2, t0);
    v.closed(1, t0);
    assert_eq!(v.decide(t0 + LOST_GRACE), Decision::Continue);
    let f = failure(v.decide(t0 + LOST_GRACE + MS));
    assert_eq!(
        f.cause,
        Cause::LostContact {
            node: 1,
            in_process: false
        }
    );
}

#[test]
fn an_in_process_node_leaves_on_its_word() {
    let t0 = Instant::now();
    let mut v = Verdict::new(vec![true, false], t0, Duration::from_secs(60), None);
    assert!(v.hello(0) && v.hello(1));
    v.ending(0, 0);
    assert!(v.said_leaving(0));
    v.ending(1, 0);
    v.exited(1, code(0), t0);
    assert_eq!(v.decide(t0), Decision::Done(0));
}

#[test]
fn start_up_timeout_names_the_missing_nodes() {
    let t0 = Instant::now();
    let timeout = Duration::from_secs(5);
    let mut v = Verdict::new(vec![false; 3], t0, timeout, None);
    assert!(v.hello(1));
    assert!(!v.hello(1), "a second introduction is a stranger's");
    assert!(!v.hello(7), "no such node");
    assert_eq!(v.decide(t0 + timeout - MS), Decision::Continue);
    let f = failure(v.decide(t0 + timeout));
    assert_eq!(
        f.message(&label),
        "start-up timed out after 5 s: these nodes never connected: PE 0 on h, PE 2 on h"
    );
}

#[test]
fn timelimit_ends_the_job_with_124() {
    let t0 = Instant::now();
    let limit = Duration::from_secs(3);
    let mut v = Verdict::new(vec![false; 2], t0, Duration::from_secs(60), Some(limit));
    v.hello(0);
    v.hello(1);
    assert_eq!(v.decide(t0 + limit - MS), Decision::Continue);
    let f = failure(v.decide(t0 + limit));
    assert_eq!(f.code, 124);
    assert_eq!(
        f.message(&label),
        "++timelimit of 3 s reached; ending the job"
    );
}

#[test]
fn ctrl_c_ends_the_job_with_128_plus_the_signal() {
    let t0 = Instant::now();
    let mut v = running(2, t0);
    v.interrupt(2);
    let f = failure(v.decide(t0));
    assert_eq!(f.code, 130);
    assert_eq!(f.message(&label), "interrupted by signal 2; ending the job");
}

#[test]
fn a_cancellation_ends_the_job_with_its_reason() {
    let t0 = Instant::now();
    let mut v = running(1, t0);
    v.cancel("the front-end failed".into());
    let f = failure(v.decide(t0));
    assert_eq!(
        (f.code, f.message(&label)),
        (1, "the front-end failed".into())
    );
}

#[test]
fn a_silent_node_is_hung_after_the_timeout_and_named() {
    let t0 = Instant::now();
    let limit = Duration::from_secs(5);
    let mut v = Verdict::new(vec![false; 3], t0, Duration::from_secs(60), None)
        .with_hang_timeout(Some(limit));
    for i in 0..3 {
        assert!(v.hello(i));
        v.heard(i, t0);
    }
    assert_eq!(v.decide(t0), Decision::Continue);
    // Nodes 0 and 2 keep sending heartbeats; node 1 stops at t0 + 1 s.
    v.heard(1, t0 + Duration::from_secs(1));
    for s in 1..=6 {
        v.heard(0, t0 + Duration::from_secs(s));
        v.heard(2, t0 + Duration::from_secs(s));
    }
    assert_eq!(
        v.decide(t0 + Duration::from_secs(6) - MS),
        Decision::Continue
    );
    let f = failure(v.decide(t0 + Duration::from_secs(6)));
    assert_eq!(f.code, 1);
    assert_eq!(
        f.message(&label),
        "PE 1 on h stopped answering for 5 s (stopped or frozen?); ending the job"
    );
}

#[test]
fn silence_while_charmrun_itself_was_stopped_does_not_count() {
    let t0 = Instant::now();
    let limit = Duration::from_secs(2);
    let mut v = Verdict::new(vec![false; 2], t0, Duration::from_secs(60), None)
        .with_hang_timeout(Some(limit));
    for i in 0..2 {
        assert!(v.hello(i));
        v.heard(i, t0);
    }
    assert_eq!(v.decide(t0), Decision::Continue);
    // Charmrun was stopped for a minute; the nodes' heartbeats have not been read yet.
    let back = t0 + Duration::from_secs(60);
    v.restart_silence(back);
    assert_eq!(v.decide(back + limit - MS), Decision::Continue);
    // Node 1's heartbeats come again, node 0's do not: node 0 is hung, counted from `back`.
    v.heard(1, back + limit - MS);
    assert!(matches!(
        failure(v.decide(back + limit)).cause,
        Cause::Hung { node: 0, .. }
    ));
}

#[test]
fn silence_counts_only_once_every_node_has_joined_and_zero_is_off() {
    let t0 = Instant::now();
    let limit = Duration::from_secs(2);
    let mut v = Verdict::new(vec![false; 2], t0, Duration::from_secs(60), None)
        .with_hang_timeout(Some(limit));
    assert!(v.hello(0));
    v.heard(0, t0);
    // Node 0 waits for the table and sends nothing meanwhile: not hung.
    assert_eq!(v.decide(t0 + 10 * limit), Decision::Continue);
    let joined = t0 + 10 * limit + MS;
    assert!(v.hello(1));
    v.heard(1, joined);
    assert_eq!(v.decide(joined), Decision::Continue);
    assert_eq!(v.decide(joined + limit - MS), Decision::Continue);
    assert!(matches!(
        failure(v.decide(joined + limit)).cause,
        Cause::Hung { node: 0, .. }
    ));
    let mut off = running(2, t0);
    assert_eq!(
        off.decide(t0 + Duration::from_secs(3600)),
        Decision::Continue
    );
}

#[test]
fn an_abort_waits_for_a_death_under_way() {
    let t0 = Instant::now();
    let mut v = running(3, t0);
    // Node 2's connection closed; node 0 noticed and aborts; node 2's exit comes late.
    v.closed(2, t0);
    v.abort(0, "node 2 (h) is gone: connection reset".into(), t0);
    assert_eq!(v.decide(t0 + ABORT_GRACE + MS), Decision::Continue);
    v.exited(2, killed(9), t0 + 2 * ABORT_GRACE);
    let f = failure(v.decide(t0 + 2 * ABORT_GRACE));
    assert!(matches!(f.cause, Cause::Died { node: 2, .. }), "{f:?}");
}

#[test]
fn among_deaths_the_one_by_a_signal_then_the_first_is_named() {
    let t0 = Instant::now();
    let mut v = running(4, t0);
    // Node 0 noticed node 3's death and exited with code 1, seen first.
    v.exited(0, code(1), t0 + MS);
    v.closed(0, t0 + MS);
    v.exited(3, killed(9), t0 + 2 * MS);
    v.closed(3, t0 + 2 * MS);
    let f = failure(v.decide(t0 + 3 * MS));
    assert!(matches!(f.cause, Cause::Died { node: 3, .. }), "{f:?}");
    // Without a signal, the first to die.
    let mut v = running(4, t0);
    v.exited(2, code(4), t0 + MS);
    v.closed(2, t0 + MS);
    v.exited(1, code(1), t0 + 2 * MS);
    v.closed(1, t0 + 2 * MS);
    let f = failure(v.decide(t0 + 3 * MS));
    assert!(matches!(f.cause, Cause::Died { node: 2, .. }), "{f:?}");
}

impl Decision {
    fn code(&self) -> Option<i32> {
        match self {
            Decision::Fail(f) => Some(f.code),
            _ => None,
        }
    }
}
