//! The job's verdict: from what the nodes say and do, whether the job goes on, is over with
//! every node gone normally (and with which code), or must end now, and why.
//!
//! A pure state machine: no I/O and no clock. Events come in with the [`Instant`] they were
//! seen at, [`Verdict::decide`] is asked with the time now, and the decision comes back, so
//! every rule (grace periods, who is named, the exit code) is tested without processes.
//!
//! The rules:
//! - the job is over when every node has said `ENDING` and its process has exited (or, for a
//!   process that lingers after closing its connection, [`LOST_GRACE`] after that and after
//!   its output last waited for charmrun's reader); its code is the first non-zero one;
//! - a node that dies (exits without `ENDING`, is killed, is killed while leaving, or its
//!   connection closes and stays closed) ends the job, named; its last frames are waited for
//!   up to [`LOST_GRACE`];
//! - a node that aborts ends the job [`ABORT_GRACE`] later, unless a node that died shows up
//!   first: a peer's death makes its peers abort, and the message should name the node that
//!   died, not one that noticed. An abort also waits while a node's death is under way (its
//!   connection closed or its process exited, the other half not seen yet);
//! - when several nodes died, the one named is the first killed by a signal, else the first
//!   to die: in a cascade the peers that noticed a death exit after it, and with a code;
//! - a node that sends nothing (no frame, no heartbeat) for the hang timeout, once every node
//!   has joined, ends the job, named: it is stopped or frozen (its watchdog thread answers
//!   even while its PEs are busy);
//! - Ctrl-C (any of the signals charmrun catches), a cancellation by the embedding program,
//!   `++timelimit` and the start-up timeout end the job at once.
//!
//! In report mode (the nodes asked for it: `+set faults=report`), once every node has joined,
//! the death of a node other than node 0 does not end the job: the node is [`NodeState::Gone`]
//! and its death is reported ([`Verdict::take_reports`]) — exited or killed (at once, without
//! waiting for its connection), lost (its connection closed), silent for the hang timeout, or
//! suspected by a peer whose connection to it failed. The launcher ends what is left of it and
//! tells the survivors. Node 0's death (the front-end), a death during start-up and an abort
//! still end the job; the job is over when every node has left or is gone.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// Between a node's process exiting and its connection closing (or the reverse), how long to
/// wait for the other half, so the verdict sees every frame it sent and how it died.
pub const LOST_GRACE: Duration = Duration::from_secs(3);

/// A gap between two turns of the job loop longer than this means charmrun itself was not
/// running (stopped with Ctrl-Z, descheduled): the loop turns every few tens of milliseconds.
pub const PAUSE_GAP: Duration = Duration::from_secs(1);

/// Report mode: how long a node suspected by a peer, or whose connection closed, is given
/// for its own end to show (its process exiting says how it died) before it is ended and
/// reported as lost.
pub const SUSPECT_GRACE: Duration = Duration::from_millis(500);

/// After a node aborts, how long to look for a node that died first.
pub const ABORT_GRACE: Duration = Duration::from_millis(750);

/// Where one node is in the job. Each state holds exactly what the verdict needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// Started; it has not introduced itself yet.
    Starting,
    /// Introduced itself: a member of the job, connection open, process running.
    Running,
    /// Said it leaves normally with `code`; its process runs, its connection is open.
    Ending {
        /// The code it said.
        code: i32,
    },
    /// Its connection closed without it saying it leaves; its process still runs.
    Closed {
        /// When the connection closed.
        at: Instant,
    },
    /// Its process exited without it saying it leaves: its last frames may still be on the
    /// way.
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// When.
        at: Instant,
    },
    /// Said it leaves and closed its connection, but its process lingers (a child of it
    /// keeping a remote shell open, say): it counts as gone [`LOST_GRACE`] later.
    Lingering {
        /// The code it said.
        code: i32,
        /// When the connection closed.
        at: Instant,
    },
    /// Asked to end the job.
    Aborted {
        /// Why, in its words.
        reason: String,
        /// When the request came.
        at: Instant,
    },
    /// Its process ended in a way that ends the job.
    Died {
        /// How.
        status: ExitStatus,
        /// What it was doing then.
        when: Death,
    },
    /// Left the job normally.
    Left {
        /// Its exit code.
        code: i32,
    },
    /// Out of the job in report mode: dead, lost, silent or suspected; the survivors were told.
    Gone {
        /// Why, as reported.
        why: String,
    },
}

/// When in its life a node died: the message and the code depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// Before introducing itself.
    Starting,
    /// In the job, without saying it leaves.
    Running,
    /// Killed after saying it leaves.
    Leaving,
}

/// Why the job must end now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// charmrun caught this signal.
    Interrupted(i32),
    /// The program that embeds the launcher gave up on the job, saying why.
    Cancelled(String),
    /// `++timelimit` passed.
    TimeLimit(Duration),
    /// These nodes did not introduce themselves within the start-up timeout.
    NeverConnected {
        /// The nodes.
        nodes: Vec<usize>,
        /// The timeout.
        after: Duration,
    },
    /// A node's process ended in a way that ends the job.
    Died {
        /// The node.
        node: usize,
        /// How it ended.
        status: ExitStatus,
        /// When in its life.
        when: Death,
    },
    /// A node's connection closed and its process did not exit within [`LOST_GRACE`].
    LostContact {
        /// The node.
        node: usize,
        /// It is in the launcher's own process (there is no process to wait for).
        in_process: bool,
    },
    /// A node sent nothing for the hang timeout.
    Hung {
        /// The node.
        node: usize,
        /// How long it has been silent.
        silent: Duration,
    },
    /// A node aborted the job.
    Aborted {
        /// The node.
        node: usize,
        /// Its reason.
        reason: String,
    },
    /// The agent that started a node (and others on its host) is gone while the node was
    /// still in the job.
    AgentLost {
        /// The first such node.
        node: usize,
        /// What happened to the agent.
        why: String,
    },
    /// The launcher itself cannot go on (a node table that cannot be built, say).
    Launcher(String),
}

/// The job must end now, with this exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// charmrun's exit code.
    pub code: i32,
    /// Why.
    pub cause: Cause,
}

impl Failure {
    /// The sentence charmrun prints; `label` names a node ("PE 3 on host-a").
    pub fn message(&self, label: &dyn Fn(usize) -> String) -> String {
        match &self.cause {
            Cause::Interrupted(sig) => format!("interrupted by signal {sig}; ending the job"),
            Cause::Cancelled(why) => why.clone(),
            Cause::TimeLimit(limit) => format!(
                "++timelimit of {} s reached; ending the job",
                limit.as_secs_f64()
            ),
            Cause::NeverConnected { nodes, after } => format!(
                "start-up timed out after {:.0} s: {} never connected: {}",
                after.as_secs_f64(),
                if nodes.len() == 1 {
                    "this node"
                } else {
                    "these nodes"
                },
                nodes
                    .iter()
                    .map(|&i| label(i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Cause::Died { node, status, when } => {
                let what = match when {
                    Death::Starting => "before connecting to charmrun",
                    Death::Running => "before the job ended; ending the job",
                    Death::Leaving => "while leaving the job; ending the job",
                };
                format!("{} {} {what}", label(*node), describe(*status))
            }
            Cause::LostContact {
                node,
                in_process: false,
            } => format!(
                "lost contact with {} (its connection to charmrun closed); ending the job",
                label(*node)
            ),
            Cause::LostContact {
                node,
                in_process: true,
            } => format!("lost contact with {} (in this process)", label(*node)),
            Cause::Hung { node, silent } => format!(
                "{} stopped answering for {:.0} s (stopped or frozen?); ending the job",
                label(*node),
                silent.as_secs_f64()
            ),
            Cause::Aborted { node, reason } => {
                format!("{} aborted the job: {reason}", label(*node))
            }
            Cause::AgentLost { node, why } => {
                format!("lost {}: {why}; ending the job", label(*node))
            }
            Cause::Launcher(why) => why.clone(),
        }
    }
}

/// What the job does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Keep serving it.
    Continue,
    /// Every node has left normally: the job's code.
    Done(i32),
    /// End it now.
    Fail(Failure),
}

/// The verdict of one job.
#[derive(Debug)]
pub struct Verdict {
    nodes: Vec<NodeState>,
    /// Which nodes run in the launcher's own process: no process to watch, their word that
    /// they leave is all there will be.
    in_process: Vec<bool>,
    started: Instant,
    startup_timeout: Duration,
    timelimit: Option<Duration>,
    /// The first non-zero code of a node that left (0 until then).
    job_code: i32,
    interrupted: Option<i32>,
    cancelled: Option<String>,
    /// When each node was last heard from (any frame).
    heard: Vec<Option<Instant>>,
    /// When each node that died did.
    died_at: Vec<Option<Instant>>,
    /// A node silent this long is hung (`None`: never).
    hang_timeout: Option<Duration>,
    /// Since when every node has joined: silence counts from then at the earliest, since a
    /// node waiting for the node table sends nothing.
    all_in_since: Option<Instant>,
    /// The first node whose agent went away while it was in the job, why, and when.
    agent_lost: Option<(usize, String, Instant)>,
    /// Report mode: a death is reported, not fatal (see the module's rules).
    survive: bool,
    /// Deaths decided and not yet taken by the launcher.
    reports: Vec<(usize, String)>,
    /// Why a peer suspects each node and since when (report mode), until it is decided.
    suspected: Vec<Option<(String, Instant)>>,
}

impl Verdict {
    /// A job whose nodes were started at `started`; `in_process[i]` says whether node `i` runs
    /// in the launcher's own process. Nodes must introduce themselves within
    /// `startup_timeout`; the whole job must end within `timelimit`.
    pub fn new(
        in_process: Vec<bool>,
        started: Instant,
        startup_timeout: Duration,
        timelimit: Option<Duration>,
    ) -> Verdict {
        let n = in_process.len();
        Verdict {
            nodes: vec![NodeState::Starting; n],
            in_process,
            started,
            startup_timeout,
            timelimit,
            job_code: 0,
            interrupted: None,
            cancelled: None,
            heard: vec![None; n],
            died_at: vec![None; n],
            hang_timeout: None,
            all_in_since: None,
            agent_lost: None,
            survive: false,
            reports: Vec::new(),
            suspected: vec![None; n],
        }
    }

    /// The nodes asked that a death be reported instead of ending the job.
    pub fn survive(&mut self) {
        self.survive = true;
    }

    /// Whether the job reports deaths.
    pub fn survives(&self) -> bool {
        self.survive
    }

    /// Node `by` says its connection to node `i` failed (`why`): in report mode, `i` is
    /// ended and reported at the next [`Verdict::decide`]; otherwise nothing (the death, if it
    /// is one, is seen as usual).
    pub fn suspect(&mut self, by: usize, i: usize, why: &str, at: Instant) {
        if !self.survive || i == by {
            return;
        }
        if let Some(s) = self.suspected.get_mut(i) {
            s.get_or_insert_with(|| (format!("is lost to node {by}: {why}"), at));
        }
    }

    /// The deaths decided since the last call (report mode): each node once, with why. The
    /// launcher ends what is left of each and tells the survivors.
    pub fn take_reports(&mut self) -> Vec<(usize, String)> {
        std::mem::take(&mut self.reports)
    }

    /// Whether node `i` is out of the job in report mode.
    pub fn is_gone(&self, i: usize) -> bool {
        matches!(self.nodes.get(i), Some(NodeState::Gone { .. }))
    }

    /// Report mode, once every node has joined: every node but node 0 that died, was lost,
    /// went silent or is suspected becomes [`NodeState::Gone`] and is reported.
    fn settle_deaths(&mut self, now: Instant) {
        for i in 1..self.nodes.len() {
            let silent = |v: &Verdict| {
                let (limit, since) = (v.hang_timeout?, v.all_in_since?);
                let last = v.heard[i].map_or(since, |h| h.max(since));
                let silent = now.saturating_duration_since(last);
                (silent >= limit && !v.in_process[i]).then_some(silent)
            };
            let why = match &self.nodes[i] {
                NodeState::Died { status, .. } => Some(describe(*status)),
                // Exited with a code: its last frames (a normal exit's ENDING) may still be on
                // the way, and its connection's close, which follows them, decides (or, failing
                // that, time). A signal is a death whatever was sent.
                NodeState::Exited { status, at }
                    if status.signal().is_some()
                        || now.saturating_duration_since(*at) > LOST_GRACE =>
                {
                    Some(describe(*status))
                }
                // Its process usually exits with it: a moment for that, to say how it died.
                NodeState::Closed { at } if now.saturating_duration_since(*at) > SUSPECT_GRACE => {
                    Some("lost its connection to charmrun".into())
                }
                // A peer's suspicion counts only against a node still in the job (one that said
                // it leaves closes its connections as it goes), and after a moment, in which the
                // node's own end (exit, connection closed) would say more.
                NodeState::Running | NodeState::Ending { .. } => {
                    let suspected = match &self.suspected[i] {
                        Some((why, at)) if matches!(self.nodes[i], NodeState::Running) => {
                            (now.saturating_duration_since(*at) > SUSPECT_GRACE)
                                .then(|| why.clone())
                        }
                        _ => None,
                    };
                    suspected.or_else(|| {
                        silent(self).map(|s| {
                            format!(
                                "sent nothing for {:.0} s (stopped or frozen?)",
                                s.as_secs_f64()
                            )
                        })
                    })
                }
                _ => None,
            };
            if let Some(why) = why {
                self.reports.push((i, why.clone()));
                self.set(i, NodeState::Gone { why });
            }
        }
    }

    /// Charmrun was not running until `now` (see [`PAUSE_GAP`]): nodes' silence counts only
    /// while it listened, so it starts again now. Heartbeats sent meanwhile may still be on
    /// their way through charmrun's own reader threads.
    pub fn restart_silence(&mut self, now: Instant) {
        self.all_in_since = self.all_in_since.map(|_| now);
        for h in self.heard.iter_mut().flatten() {
            *h = (*h).max(now);
        }
    }

    /// The same, ending the job when a node sends nothing for `hang_timeout` (`None`: never).
    pub fn with_hang_timeout(mut self, hang_timeout: Option<Duration>) -> Verdict {
        self.hang_timeout = hang_timeout;
        self
    }

    /// Node `i`'s output was still waiting to be written at `at`: if it said it leaves and
    /// closed its connection, its process may be blocked on its full pipe, not lingering, so
    /// its [`LOST_GRACE`] counts from now.
    pub fn output_pending(&mut self, i: usize, at: Instant) {
        if let Some(NodeState::Lingering { at: since, .. }) = self.nodes.get_mut(i) {
            *since = (*since).max(at);
        }
    }

    /// Node `i` sent something (a frame, a heartbeat) at `at`.
    pub fn heard(&mut self, i: usize, at: Instant) {
        if let Some(h) = self.heard.get_mut(i) {
            *h = Some(h.map_or(at, |h| h.max(at)));
        }
    }

    /// Node `i`'s state.
    pub fn state(&self, i: usize) -> Option<&NodeState> {
        self.nodes.get(i)
    }

    /// Whether every node has introduced itself (the node table can go out).
    pub fn all_joined(&self) -> bool {
        !self.nodes.iter().any(|n| {
            matches!(
                n,
                NodeState::Starting
                    | NodeState::Died {
                        when: Death::Starting,
                        ..
                    }
            )
        })
    }

    /// Whether node `i` said it leaves normally (and has not aborted since).
    pub fn said_leaving(&self, i: usize) -> bool {
        matches!(
            self.nodes.get(i),
            Some(NodeState::Ending { .. } | NodeState::Lingering { .. } | NodeState::Left { .. })
        )
    }

    /// Node `i` introduced itself. `false`: it cannot be (no such node, or it already did),
    /// and the connection is a stranger's.
    pub fn hello(&mut self, i: usize) -> bool {
        match self.nodes.get_mut(i) {
            Some(n @ NodeState::Starting) => {
                *n = NodeState::Running;
                true
            }
            _ => false,
        }
    }

    /// Node `i` said it leaves normally with `code`.
    pub fn ending(&mut self, i: usize, code: i32) {
        let in_process = self.in_process.get(i).copied().unwrap_or(false);
        let Some(n) = self.nodes.get_mut(i) else {
            return;
        };
        let next = match n {
            NodeState::Running | NodeState::Ending { .. } if in_process => NodeState::Left { code },
            NodeState::Running | NodeState::Ending { .. } => NodeState::Ending { code },
            NodeState::Exited { status, at } => {
                let at = *at;
                let next = left_or_died(*status, code);
                self.set_at(i, next, at);
                return;
            }
            _ => return,
        };
        self.set(i, next);
    }

    /// Node `i` asked to end the job at `at`. Only its first request counts.
    pub fn abort(&mut self, i: usize, reason: String, at: Instant) {
        if let Some(n) = self.nodes.get_mut(i) {
            // A node already out of the job (report mode) that aborts is only noticing so.
            if !matches!(n, NodeState::Aborted { .. } | NodeState::Gone { .. }) {
                *n = NodeState::Aborted { reason, at };
            }
        }
    }

    /// Node `i`'s control connection closed at `at`: every frame it sent has been seen.
    pub fn closed(&mut self, i: usize, at: Instant) {
        let Some(n) = self.nodes.get_mut(i) else {
            return;
        };
        let next = match n {
            NodeState::Running => NodeState::Closed { at },
            NodeState::Ending { code } => NodeState::Lingering { code: *code, at },
            NodeState::Exited { status, at: exited } => {
                let (status, exited) = (*status, *exited);
                let died = NodeState::Died {
                    status,
                    when: Death::Running,
                };
                self.set_at(i, died, exited);
                return;
            }
            _ => return,
        };
        *n = next;
    }

    /// Node `i`'s process exited at `at` with `status`.
    pub fn exited(&mut self, i: usize, status: ExitStatus, at: Instant) {
        let Some(n) = self.nodes.get_mut(i) else {
            return;
        };
        let next = match n {
            NodeState::Starting => NodeState::Died {
                status,
                when: Death::Starting,
            },
            NodeState::Running => NodeState::Exited { status, at },
            NodeState::Closed { .. } => NodeState::Died {
                status,
                when: Death::Running,
            },
            NodeState::Ending { code } | NodeState::Lingering { code, .. } => {
                left_or_died(status, *code)
            }
            _ => return,
        };
        self.set_at(i, next, at);
    }

    /// The agent of `nodes` went away at `at` (`why`). Those of them still in the job are
    /// lost with it: the first is named, unless one of them died first, which is named then.
    /// Its relayed frames all came before, so a node that left normally is not counted.
    pub fn agent_lost(&mut self, nodes: &[usize], why: String, at: Instant) {
        if self.survive && self.all_in_since.is_some() && !nodes.contains(&0) {
            for &i in nodes {
                if matches!(
                    self.nodes.get(i),
                    Some(NodeState::Running | NodeState::Ending { .. } | NodeState::Closed { .. })
                ) {
                    self.reports.push((i, why.clone()));
                    self.set(i, NodeState::Gone { why: why.clone() });
                }
            }
            return;
        }
        if self.agent_lost.is_some() {
            return;
        }
        let lost = nodes.iter().copied().find(|&i| {
            !matches!(
                self.nodes.get(i),
                Some(NodeState::Left { .. } | NodeState::Died { .. }) | None
            )
        });
        if let Some(i) = lost {
            self.agent_lost = Some((i, why, at));
        }
    }

    /// charmrun caught signal `sig`.
    pub fn interrupt(&mut self, sig: i32) {
        self.interrupted.get_or_insert(sig);
    }

    /// The embedding program gives up on the job.
    pub fn cancel(&mut self, why: String) {
        self.cancelled.get_or_insert(why);
    }

    /// What the job does next, at `now`.
    ///
    /// Nodes are looked at in order, and the first that ends the job is named; aborts are
    /// looked at last, so a node that died is named before the nodes that noticed it.
    pub fn decide(&mut self, now: Instant) -> Decision {
        let fail = |code, cause| Decision::Fail(Failure { code, cause });
        if let Some(sig) = self.interrupted {
            return fail(128 + sig, Cause::Interrupted(sig));
        }
        if let Some(why) = &self.cancelled {
            return fail(1, Cause::Cancelled(why.clone()));
        }
        let running_for = now.saturating_duration_since(self.started);
        if let Some(limit) = self.timelimit.filter(|&l| running_for >= l) {
            return fail(124, Cause::TimeLimit(limit));
        }
        if running_for >= self.startup_timeout && !self.all_joined() {
            let nodes = (0..self.nodes.len())
                .filter(|&i| self.nodes[i] == NodeState::Starting)
                .collect();
            let after = self.startup_timeout;
            return fail(1, Cause::NeverConnected { nodes, after });
        }
        let past = |at: Instant, grace: Duration| now.saturating_duration_since(at) > grace;
        if self.survive && self.all_in_since.is_some() {
            self.settle_deaths(now);
        }
        if let Some(i) = self.first_death() {
            if let NodeState::Died { status, when } = self.nodes[i] {
                let code = match when {
                    Death::Starting => exit_code(status).max(1),
                    Death::Running if exit_code(status) == 0 => 1,
                    Death::Running | Death::Leaving => exit_code(status),
                };
                return fail(
                    code,
                    Cause::Died {
                        node: i,
                        status,
                        when,
                    },
                );
            }
        }
        if let Some((node, why, _)) = &self.agent_lost {
            let (node, why) = (*node, why.clone());
            return fail(1, Cause::AgentLost { node, why });
        }
        for i in 0..self.nodes.len() {
            match self.nodes[i] {
                NodeState::Closed { at } if past(at, LOST_GRACE) => {
                    let in_process = self.in_process[i];
                    return fail(
                        1,
                        Cause::LostContact {
                            node: i,
                            in_process,
                        },
                    );
                }
                NodeState::Exited { status, at } if past(at, LOST_GRACE) => {
                    let code = match exit_code(status) {
                        0 => 1,
                        c => c,
                    };
                    let when = Death::Running;
                    return fail(
                        code,
                        Cause::Died {
                            node: i,
                            status,
                            when,
                        },
                    );
                }
                NodeState::Lingering { code, at } if past(at, LOST_GRACE) => {
                    self.set(i, NodeState::Left { code });
                }
                _ => {}
            }
        }
        if self.all_in_since.is_none() && self.all_joined() {
            self.all_in_since = Some(now);
        }

        if let (Some(limit), Some(since)) = (self.hang_timeout, self.all_in_since) {
            for i in 0..self.nodes.len() {
                let watched =
                    matches!(self.nodes[i], NodeState::Running | NodeState::Ending { .. })
                        && !self.in_process[i];
                let last = self.heard[i].map_or(since, |h| h.max(since));
                let silent = now.saturating_duration_since(last);
                if watched && silent >= limit {
                    return fail(1, Cause::Hung { node: i, silent });
                }
            }
        }
        // A death under way is named before any abort it may have caused.
        let dying = self
            .nodes
            .iter()
            .any(|n| matches!(n, NodeState::Closed { .. } | NodeState::Exited { .. }));
        let first_abort = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                NodeState::Aborted { reason, at } => Some((i, reason, *at)),
                _ => None,
            })
            .min_by_key(|&(_, _, at)| at);
        if let Some((node, reason, at)) = first_abort.filter(|_| !dying) {
            if past(at, ABORT_GRACE) {
                let reason = reason.clone();
                return fail(1, Cause::Aborted { node, reason });
            }
        }
        if self
            .nodes
            .iter()
            .all(|n| matches!(n, NodeState::Left { .. } | NodeState::Gone { .. }))
        {
            return Decision::Done(self.job_code);
        }
        Decision::Continue
    }

    /// The node whose death is named: the first killed by a signal, else the first to die.
    fn first_death(&self) -> Option<usize> {
        (0..self.nodes.len())
            .filter_map(|i| match &self.nodes[i] {
                NodeState::Died { status, .. } => {
                    Some((status.signal().is_none(), self.died_at[i], i))
                }
                _ => None,
            })
            .min()
            .map(|(_, _, i)| i)
    }

    /// As [`Verdict::set`], for a state reached because of what happened at `at`.
    fn set_at(&mut self, i: usize, next: NodeState, at: Instant) {
        if matches!(next, NodeState::Died { .. }) {
            self.died_at[i] = Some(at);
        }
        self.set(i, next);
    }

    fn set(&mut self, i: usize, next: NodeState) {
        if let NodeState::Left { code } = next {
            if self.job_code == 0 {
                self.job_code = code;
            }
        }
        self.nodes[i] = next;
    }
}

/// A node that said it leaves with `said` and whose process exited: gone normally with its
/// process's code, unless a signal killed it — or with the code it said, when its process
/// exited 0 all the same: a wrapper that does not pass its child's code on (`gdbserver` under
/// `++debug`, a runscript that does not `exec`) must not turn a failing job into a success.
fn left_or_died(status: ExitStatus, said: i32) -> NodeState {
    if status.signal().is_some() {
        NodeState::Died {
            status,
            when: Death::Leaving,
        }
    } else {
        let code = exit_code(status);
        NodeState::Left {
            code: if code == 0 { said } else { code },
        }
    }
}

/// The shell convention: the exit code, or 128 + the signal.
pub fn exit_code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// "exited with code 3", "was killed by signal 9 (SIGKILL)".
pub fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => {
            let name = nix::sys::signal::Signal::try_from(s).map_or("?", |s| s.as_str());
            format!("was killed by signal {s} ({name})")
        }
        _ => "ended".into(),
    }
}

#[cfg(test)]
mod tests;
