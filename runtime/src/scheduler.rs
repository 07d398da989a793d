//! The scheduler: the loop that runs the communication server, dispatches handlers by
//! priority, fires timers, and goes idle without burning a core.

use crate::idle::IdleSpin;
use crate::link::Link;
use crate::pe::Pe;
use converse_machine::{MachineError, Message, SettingSpec, Settings};
use std::time::{Duration, Instant};

/// Widest spanning tree allowed: a reduction tracks its children in a 64-bit mask.
pub(crate) const MAX_BRANCHING: usize = 64;

/// `sched.spin_us`: at most 10 ms, since a spin is CPU burnt by every idle PE after every
/// message: longer, and an idle job no longer waits, it polls.
const SPIN_US: SettingSpec = SettingSpec::whole(
    "sched.spin_us",
    50,
    0,
    10_000,
    "how long an idle PE keeps polling before it blocks, µs",
);

/// `sched.shared_spin_us`: the spin of a PE on a host with more PEs than cores, where it
/// spins at all (`pe::shares_spin`): it yields its core at every turn (so a thread with work
/// runs first) and blocks after this long. At most 1 ms, so an idle job still blocks.
const SHARED_SPIN_US: SettingSpec = SettingSpec::whole(
    "sched.shared_spin_us",
    10,
    0,
    1_000,
    "how long an idle PE on a host with more PEs than cores (up to 4 threads per core, or all in one process) keeps polling, yielding its core at each turn, before it blocks, µs",
);

/// `sched.idle_max_ms`. Every layer's wait ends when something arrives, and the next timer
/// bounds each block, so this only bounds how often an idle PE looks around for nothing: 100
/// ms, because a host with many more processes than cores pays for each look (1,024 idle
/// nodes on 2 cores waking every 10 ms took the cores from the few still working: a
/// reduction's last hop waited 1.8 s).
const IDLE_MAX_MS: SettingSpec = SettingSpec::whole(
    "sched.idle_max_ms",
    100,
    1,
    60_000,
    "longest single block of an idle PE, ms",
);

/// `sched.batch`.
const BATCH: SettingSpec = SettingSpec::whole(
    "sched.batch",
    64,
    1,
    1 << 20,
    "messages dispatched between two polls of the layer",
);

/// `sched.max_queued_mib`: far more than a PE that keeps up ever holds, so it only acts
/// against a flood; a 64-PE host of flooded PEs stays within 16 GiB.
const MAX_BACKLOG_MIB: SettingSpec = SettingSpec::whole(
    "sched.max_queued_mib",
    256,
    1,
    1 << 20,
    "messages a PE holds waiting to run before it stops taking in arrivals, MiB: a receiver \
     slower than its senders holds them back through the layer's flow control instead of \
     growing",
);

/// `peer.max_queued_mib`: deep enough that a fast sender never waits for a peer that keeps
/// up (a socket buffer is a few MiB), small enough that a 256-node job whose peers all stall
/// holds at most 16 GiB.
const MAX_QUEUED_MIB: SettingSpec = SettingSpec::whole(
    "peer.max_queued_mib",
    64,
    1,
    1 << 20,
    "what a node may hold for one peer before a sender waits for room, MiB: a stopped or slow \
     peer cannot make a sender grow without limit",
);

/// `tree.branching`: a reduction tracks its children in a 64-bit mask.
const BRANCHING: SettingSpec = SettingSpec::whole(
    "tree.branching",
    4,
    2,
    MAX_BRANCHING as u64,
    "fan-out of the spanning trees of collectives",
);

/// `onesided.direct_get_kib`: never by default. On the hosts measured (docs/benchmarks.md,
/// `bench onesided`), a get over messages was as fast or faster at every size: SI copies a
/// large answer with both processes at once (`coop.rs`), and a small one through its rings,
/// in cache, faster than the kernel's page-by-page copy.
const DIRECT_GET_KIB: SettingSpec = SettingSpec::whole(
    "onesided.direct_get_kib",
    1 << 32,
    0,
    1 << 32,
    "gets of at least this many KiB are copied straight from the region into the getter's \
     memory where the layer can (si, si+tcp, si+udp); the default, 4294967296, keeps them on \
     messages",
);

/// `onesided.direct_put_kib`: never by default. One kernel copy instead of three copies over
/// messages (into the message, across, into the region) won at 16 MiB in every run on the
/// host measured (0.84–0.91×) but lost at 2–8 MiB (1.25–1.4×) and was even at 1 MiB across
/// runs (0.84–1.39×): SI's large-message path copies with both processes at once
/// (docs/benchmarks.md). On a host with more cores or less cache, measure (`bench onesided`).
const DIRECT_PUT_KIB: SettingSpec = SettingSpec::whole(
    "onesided.direct_put_kib",
    1 << 32,
    0,
    1 << 32,
    "puts of at least this many KiB are copied straight from the putter's memory into the \
     region where the layer can (si, si+tcp, si+udp); the default, 4294967296, keeps them on \
     messages",
);

/// `onesided.shared_put_kib`: below 4 KiB, copying a put into a message costs less than the
/// table's two locks.
const SHARED_PUT_KIB: SettingSpec = SettingSpec::whole(
    "onesided.shared_put_kib",
    4,
    0,
    1 << 32,
    "puts of at least this many KiB between PEs of one process (an SMP node's, the in-process \
     layer's) lend their buffer to the region's PE instead of copying it into a message; \
     4294967296 keeps them on messages",
);

/// The settings the runtime itself reads (the layers declare theirs).
pub(crate) const SETTINGS: &[SettingSpec] = &[
    SPIN_US,
    SHARED_SPIN_US,
    IDLE_MAX_MS,
    BATCH,
    MAX_BACKLOG_MIB,
    converse_machine::FAULTS_SETTING,
    MAX_QUEUED_MIB,
    BRANCHING,
    DIRECT_GET_KIB,
    DIRECT_PUT_KIB,
    SHARED_PUT_KIB,
];

/// Scheduler knobs, read from settings at start-up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tunables {
    /// How long an idle PE keeps polling before it blocks (`sched.spin_us`; on a host with
    /// more PEs than cores `sched.shared_spin_us`, see `pe::spin_policy`).
    pub spin: Duration,
    /// `sched.shared_spin_us`, which becomes `spin` on a host with more PEs than cores.
    pub shared_spin: Duration,
    /// Every node of this host runs in this process (the in-process layer).
    pub host_in_process: bool,
    /// Whether the thread yields its core at each turn of its spin: set for a communication
    /// thread on a host with more threads than cores, and for a PE on a host with more PEs
    /// than cores (see `pe::spin_policy`).
    pub spin_yields: bool,
    /// The longest single block while idle (`sched.idle_max_ms`); a block also ends at the next
    /// timer and whenever a message arrives.
    pub idle_max: Duration,
    /// Messages dispatched between two polls of the layer (`sched.batch`).
    pub batch: usize,
    /// Fan-out of the spanning trees used by broadcasts and reductions (`tree.branching`).
    pub branching: usize,
    /// Bytes a node may hold for one peer before a sender waits (`peer.max_queued_mib`).
    pub max_queued: usize,
    /// Bytes of messages a PE holds waiting to run before it stops taking in arrivals
    /// (`sched.max_queued_mib`).
    pub max_backlog: usize,
    /// `+stats`: the node's layer counters are printed at exit.
    pub stats: bool,
    /// Report mode: a node's death is reported to the survivors (`faults=report`).
    pub report_deaths: bool,
    /// `+idle-warn SECS`: PE 0 says so when the job has been idle that long.
    pub idle_warn: Option<Duration>,
    /// Bytes from which a get and a put are copied directly across processes, and a put
    /// between PEs of one process lends its buffer (`onesided.direct_get_kib`,
    /// `onesided.direct_put_kib`, `onesided.shared_put_kib`).
    pub direct_min: [u64; 3],
}

impl Tunables {
    /// Bytes a PE may hold of its siblings' messages (SMP mode) before they wait: the peer
    /// bound, or the scheduler's if that is lower, so either setting holds siblings back.
    #[inline]
    pub(crate) fn sibling_max(&self) -> usize {
        self.max_queued.min(self.max_backlog)
    }

    pub(crate) fn from_settings(s: &Settings) -> Result<Tunables, MachineError> {
        let mib = |spec: &SettingSpec| -> Result<usize, MachineError> {
            Ok(usize::try_from(spec.read_whole(s)?)
                .unwrap_or(usize::MAX)
                .saturating_mul(1 << 20))
        };
        Ok(Tunables {
            spin: Duration::from_micros(SPIN_US.read_whole(s)?),
            shared_spin: Duration::from_micros(SHARED_SPIN_US.read_whole(s)?),
            host_in_process: false,
            spin_yields: false,
            idle_max: Duration::from_millis(IDLE_MAX_MS.read_whole(s)?),
            batch: BATCH.read_whole(s)? as usize,
            branching: BRANCHING.read_whole(s)? as usize,
            max_queued: mib(&MAX_QUEUED_MIB)?,
            max_backlog: mib(&MAX_BACKLOG_MIB)?,
            stats: false,
            report_deaths: s.reports_deaths()?,
            idle_warn: None,
            direct_min: [
                DIRECT_GET_KIB.read_whole(s)?.saturating_mul(1024),
                DIRECT_PUT_KIB.read_whole(s)?.saturating_mul(1024),
                SHARED_PUT_KIB.read_whole(s)?.saturating_mul(1024),
            ],
        })
    }
}

type Callback = Box<dyn FnMut(&mut Pe)>;

struct Timer {
    due: Instant,
    /// Order among timers due at the same instant: the one set first fires first.
    seq: u64,
    period: Option<Duration>,
    f: Callback,
}

// A min-heap by (due, seq): `BinaryHeap` keeps the greatest on top, so the order is reversed.
impl Ord for Timer {
    fn cmp(&self, other: &Timer) -> std::cmp::Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Timer) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Timer {
    fn eq(&self, other: &Timer) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Timer {}

/// Timers and idle callbacks of one PE. The timers are a heap by deadline: the next one is
/// read, and the due ones taken, in O(log n), so thousands of pending timers (a task's
/// timeouts, say) cost the scheduler nothing while none is due.
#[derive(Default)]
pub(crate) struct Timers {
    timers: std::collections::BinaryHeap<Timer>,
    /// Timers taken out of the heap to fire now and not yet run (a periodic one until it is
    /// set again).
    firing: usize,
    seq: u64,
    on_idle: Vec<Callback>,
}

impl Timers {
    /// Timers set and not yet fired: in the heap, or taken out to fire now and not yet run
    /// (a periodic one counts while it runs, since it is set again after).
    pub(crate) fn pending(&self) -> usize {
        self.timers.len() + self.firing
    }

    fn next_due(&self) -> Option<Instant> {
        self.timers.peek().map(|t| t.due)
    }

    fn push(&mut self, due: Instant, period: Option<Duration>, f: Callback) {
        self.seq += 1;
        self.timers.push(Timer {
            due,
            seq: self.seq,
            period,
            f,
        });
    }
}

thread_local! {
    /// Scheduler loops running on this thread ([`scheduler_depth`]).
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One more scheduler loop on this thread while it lives (also when the loop unwinds).
struct LoopDepth;

impl LoopDepth {
    fn enter() -> LoopDepth {
        DEPTH.with(|d| d.set(d.get() + 1));
        LoopDepth
    }
}

impl Drop for LoopDepth {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// How many scheduler loops run on this thread now: 0 outside any (the start function), 1 in
/// the PE's main loop and the handlers it runs, one more inside each
/// [`run_until`](Pe::run_until), [`scheduler`](Pe::scheduler), barrier or blocking call made
/// from a handler. A library that keeps work to do when the handler it runs in returns (an
/// executor running woken tasks in a row) checks that the depth is still the one it began
/// at: a nested loop may be waiting for that work, and must be given it as a message.
pub fn scheduler_depth() -> u32 {
    DEPTH.with(|d| d.get())
}

/// How often a busy scheduler looks at the clock for due timers, in loop turns.
const TIMER_CHECK_EVERY: u32 = 256;

/// How long an idle PE keeps polling while its layer is part-way through a message
/// ([`Transport::in_transfer`](converse_machine::Transport::in_transfer)): several times what a
/// 4 MiB message takes on a fast link, short enough that a peer stopped mid-message costs
/// only a few milliseconds of spinning per idle period.
const TRANSFER_SPIN: Duration = Duration::from_millis(2);

impl Pe {
    /// Run `f` once, `delay` from now (Converse's `CcdCallFnAfter`).
    pub fn after(&mut self, delay: Duration, f: impl FnOnce(&mut Pe) + 'static) {
        let mut f = Some(f);
        self.timers.push(
            Instant::now() + delay,
            None,
            Box::new(move |pe| {
                if let Some(f) = f.take() {
                    f(pe)
                }
            }),
        );
    }

    /// Run `f` every `period` until the job ends (Converse's periodic conditions).
    pub fn every(&mut self, period: Duration, f: impl FnMut(&mut Pe) + 'static) {
        self.timers
            .push(Instant::now() + period, Some(period), Box::new(f));
    }

    /// Run `f` each time this PE becomes idle (nothing to dispatch, nothing arriving), before
    /// it blocks (Converse's `CcdPROCESSOR_BEGIN_IDLE`).
    pub fn on_idle(&mut self, f: impl FnMut(&mut Pe) + 'static) {
        self.timers.on_idle.push(Box::new(f));
    }

    /// Whether a library running pieces of work of its own in a row inside one handler (an
    /// executor polling woken tasks), each of priority `prio`, should stop and leave the rest
    /// to messages: a message of better priority (a smaller number) waits in this PE's queue
    /// or its node's, or the job or the running loop is ending ([`exit`](Pe::exit),
    /// [`exit_scheduler`](Pe::exit_scheduler)). Messages not yet taken in from the layer are
    /// not seen, as during any batch.
    pub fn should_yield(&self, prio: i32) -> bool {
        if self.life.stopping() || self.life.leave {
            return true;
        }
        let before = |p: Option<i32>| p.is_some_and(|p| p < prio);
        if before(self.queue.peek_priority()) {
            return true;
        }
        match &self.link {
            Link::Worker { node, .. } => before(node.node_queue.peek_priority()),
            Link::Own(_) => false,
        }
    }

    /// Let the scheduler take in arriving messages before it runs the next queued one.
    /// Between two looks it otherwise runs up to a batch (`sched.batch`) of queued messages,
    /// which keeps the look's cost (a system call on a socket layer) off each message. What
    /// arrives is queued by priority, so it runs next if it comes first by priority, or if
    /// little is queued: a handler that computed for long, or a library that keeps its work
    /// outside the queue and releases it a piece at a time (seed pools), calls this so that
    /// other PEs' requests do not wait behind a whole batch.
    pub fn poll_soon(&mut self) {
        self.life.poll_soon = true;
    }

    /// Make the innermost running scheduler loop ([`scheduler`](Pe::scheduler),
    /// [`run_until`](Pe::run_until)) return after the current handler (Converse's
    /// `CsdExitScheduler`). The loop that runs after the start function returned ignores it:
    /// only [`exit`](Pe::exit) ends the job.
    pub fn exit_scheduler(&mut self) {
        self.life.leave = true;
    }

    /// Run the scheduler until [`exit_scheduler`](Pe::exit_scheduler) is called or the job
    /// ends. Returns `false` when the job is ending.
    pub fn scheduler(&mut self) -> bool {
        self.schedule_leavable(&mut |_| false)
    }

    /// Run the scheduler until `done` returns true (checked between handlers), the job ends, or
    /// [`exit_scheduler`](Pe::exit_scheduler) is called. Returns whether `done` became true.
    ///
    /// This is how a start function waits for something without blocking the PE, e.g.
    /// `pe.run_until(|_| state.borrow().replies == n)`.
    pub fn run_until(&mut self, mut done: impl FnMut(&mut Pe) -> bool) -> bool {
        self.schedule_leavable(&mut done)
    }

    fn schedule_leavable(&mut self, done: &mut dyn FnMut(&mut Pe) -> bool) -> bool {
        self.life.leavable_depth += 1;
        let r = self.schedule(done, true);
        self.life.leavable_depth -= 1;
        r
    }

    /// The scheduler loop. `leavable`: whether `exit_scheduler` ends this loop.
    pub(crate) fn schedule(
        &mut self,
        done: &mut dyn FnMut(&mut Pe) -> bool,
        leavable: bool,
    ) -> bool {
        let _depth = LoopDepth::enter();
        self.schedule_loop(done, leavable)
    }

    fn schedule_loop(&mut self, done: &mut dyn FnMut(&mut Pe) -> bool, leavable: bool) -> bool {
        self.ensure_started();
        let mut idle = IdleSpin::default();
        let mut told_idle = false;
        let mut turn: u32 = 0;
        loop {
            if self.life.stopping() {
                return false;
            }
            // `exit_scheduler` ends the innermost loop that can be left. A loop that cannot
            // (a barrier's, the final one) leaves the flag for the loop around it, unless there
            // is none, in which case the request has nothing to end.
            if self.life.leave {
                if leavable {
                    self.life.leave = false;
                    return false;
                }
                if self.life.leavable_depth == 0 {
                    self.life.leave = false;
                }
            }
            if done(self) {
                return true;
            }
            let got = self.poll_within_backlog();
            let ran = self.dispatch_some();
            turn = turn.wrapping_add(1);
            if got + ran > 0 {
                idle.busy();
                told_idle = false;
                if turn.is_multiple_of(TIMER_CHECK_EVERY) && !self.timers.timers.is_empty() {
                    self.fire_timers(Instant::now());
                }
                continue;
            }
            // Idle: spin a little (`idle.rs`), then say so to the idle callbacks, then block in
            // the layer until a message or the next timer.
            let Some(look) = idle.turn() else {
                // A PE spinning on a shared core (`sched.shared_spin_us`, and so too in a
                // transfer's spin) gives it up at every turn, so its spin is at least one
                // clock reading's worth of turns (32 yields); elsewhere these turns only pause.
                if self.tun.spin_yields && !self.tun.spin.is_zero() {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            };
            let now = look.now;
            if !self.timers.timers.is_empty() && self.fire_timers(now) {
                continue;
            }
            let (idle_for, began) = idle.idle_for(look);
            if began {
                if let Some(r) = self.rec.as_deref_mut() {
                    r.idle_begins(now);
                }
            }
            if idle_for < self.tun.spin {
                if self.tun.spin_yields {
                    std::thread::yield_now();
                }
                continue;
            }
            // A message is half-way in or out: its rest comes faster than a wake-up would.
            // On a host with more PEs than cores, the peer finishing it may need this core:
            // give it up at each turn (a large message's pieces otherwise crawl through
            // processes that all spin: si, 1 MiB items through 4 processes on 2 cores, went
            // from 2.0 to 5.2 thousand a second).
            if idle_for < TRANSFER_SPIN && self.link.in_transfer() {
                if self.tun.spin_yields {
                    std::thread::yield_now();
                }
                continue;
            }
            if !told_idle {
                told_idle = true;
                if self.fire_on_idle() {
                    continue;
                }
            }
            if self.rec.is_some() {
                self.record_before_block();
            }
            let cap = self.link.idle_cap(self.tun.idle_max);
            let timeout = match self.timers.next_due() {
                Some(due) => due.saturating_duration_since(now).min(cap),
                None => cap,
            };
            if let Err(e) = self.link.wait(timeout) {
                self.machine_error(&e);
            }
            idle.blocked();
        }
    }

    /// One turn of the scheduler without waiting, for code that drives the PE from a loop of
    /// its own instead of [`run_until`](Pe::run_until) (a tool polling non-blocking receives,
    /// the tree overlay's `Network::progress` and `flush`).
    ///
    /// The contract: it lets the layer push out what it still queues and takes in everything
    /// that has arrived (one `advance` of the layer), then runs up to a batch (`sched.batch`)
    /// of queued messages, so it **may run handlers**, the program's and the runtime's own,
    /// before it returns. It never blocks and fires no timers or idle callbacks. On the first
    /// call it does the start-up check, as entering the scheduler does. Once the job is
    /// ending it does nothing. Returns how many messages were taken in plus how many were run
    /// (0: nothing was there).
    pub fn progress(&mut self) -> usize {
        self.ensure_started();
        if self.life.stopping() {
            return 0;
        }
        let got = self.poll_within_backlog();
        got + self.dispatch_some()
    }

    /// [`poll`](Pe::poll), unless this PE already holds more than `sched.max_queued_mib`
    /// waiting to run: then arrivals stay in the layer, whose flow control holds the senders
    /// back (a full socket, ring or window, then their `peer.max_queued_mib`), until the queue
    /// has drained below it. Without this a slow receiver polled between handlers took in all
    /// a fast sender sent, and grew to gigabytes. Deadlock-free: a PE over the limit has
    /// messages to run, and running them drains the queue; a handler that waits for room
    /// toward a peer still polls (`wait_for_room`), so two PEs that flood each other keep
    /// draining.
    #[inline]
    fn poll_within_backlog(&mut self) -> usize {
        if self.queue.bytes() < self.tun.max_backlog {
            self.held_back.end();
            return self.poll();
        }
        // Still advanced once every `max_unpolled`, if the layer has one, so that its peers do
        // not take this busy node for dead.
        if self.held_back.take_turn(self.link.max_unpolled()) {
            return self.poll();
        }
        0
    }

    /// Wait until sibling PE `dest` (SMP mode) holds less than
    /// [`sibling_max`](Tunables::sibling_max) of its siblings' messages, as
    /// [`wait_for_room`](Self::wait_for_room) waits for a peer: arrivals go into this PE's
    /// queue meanwhile (no handler runs here), so two siblings that flood each other keep
    /// draining each other and neither waits for ever. Ends too when `dest` has left its
    /// scheduler (the job is ending) or this PE is stopping.
    #[cold]
    pub(crate) fn wait_for_sibling(&mut self, dest: usize) {
        let bound = self.tun.sibling_max();
        // Held apart from `self.link` once, so that `poll` may borrow this PE meanwhile.
        let Link::Worker { node, rank } = &self.link else {
            return;
        };
        let (node, rank) = (node.clone(), *rank);
        let Some(inbox) = node.inboxes.get(dest - node.first_pe) else {
            return;
        };
        loop {
            if inbox.sibling_bytes() < bound || inbox.is_closed() || self.life.stopping() {
                return;
            }
            if self.poll() == 0 {
                // The sibling does not say when it drains: back off 1 ms at a time, as a
                // sender waiting for a peer does (woken early by an arrival).
                node.worker_sleep(rank, Duration::from_millis(1));
            }
        }
    }

    /// Wait until the layer holds less than `peer.max_queued_mib` for `node`, keeping the
    /// interconnect moving: arrivals go into the queue (no handler runs here, so nothing
    /// re-enters the sender), and an idle wait blocks in the layer rather than spinning.
    #[cold]
    pub(crate) fn wait_for_room(&mut self, node: usize) {
        while self.link.queued(node) >= self.tun.max_queued {
            if self.poll() == 0 {
                if let Err(e) = self.link.wait(Duration::from_millis(1)) {
                    self.machine_error(&e);
                }
            }
        }
    }

    /// The communication server: move everything the layer has for us into the queue.
    #[inline]
    pub(crate) fn poll(&mut self) -> usize {
        let q = &mut self.queue;
        let mut rec = self.rec.as_deref_mut();
        // One closure (a predictable branch per message when tracing is off): two closures,
        // one per case, made `poll` too big to inline into the scheduler loop, which cost the
        // in-process ping-pong 5–15 ns.
        let got = self.link.advance(&mut |m| {
            if let Some(r) = rec.as_deref_mut() {
                r.received(m.src_pe(), m.wire_len());
            }
            q.push(m)
        });
        // Posts from other threads (a PE that owns its layer; a worker's arrive in its inbox):
        // one untaken branch until a mailbox is made, one relaxed load after.
        let posted = match &self.mail {
            Some(mail) => mail.drain(|m| self.queue.push(m)),
            None => 0,
        };
        match got {
            Ok(n) => n + posted,
            Err(e) => {
                self.machine_error(&e);
                1
            }
        }
    }

    /// About to block idle with `+trace` or `+stats`: the layer's counters, and what was
    /// recorded goes to the file (a system call is coming anyway).
    #[cold]
    fn record_before_block(&mut self) {
        let counters = self.link.counters();
        if let Some(r) = self.rec.as_deref_mut() {
            r.sample(&counters);
            r.flush(&self.handler_names);
        }
    }

    /// Dispatch up to a batch of queued messages; stop early if the job ends.
    fn dispatch_some(&mut self) -> usize {
        let mut n = 0;
        while n < self.tun.batch {
            // Messages held during start-up go first, in the order they were held.
            let next = match self.life.replay.pop_front() {
                Some(m) => {
                    self.run_handler(m);
                    n += 1;
                    if self.life.stopping() || self.life.leave || self.life.poll_soon {
                        break;
                    }
                    continue;
                }
                None => self.next_message(),
            };
            let next = match next {
                Some(m) => Some(m),
                // Posted to this PE's mailbox meanwhile, by a handler or a task here (a task's
                // wake-up): run in this batch, without a poll of the layer (a system call on
                // a socket layer) per wake-up.
                None if self
                    .mail
                    .as_ref()
                    .is_some_and(|m| m.drain(|m| self.queue.push(m)) > 0) =>
                {
                    self.next_message()
                }
                None => None,
            };
            let Some(msg) = next else { break };
            self.dispatch(msg);
            n += 1;
            // One flag test per message: a batch is what keeps polls (a system call on a
            // socket layer) off the per-message path, and `poll_soon` what ends it early.
            if self.life.stopping() || self.life.leave || self.life.poll_soon {
                break;
            }
        }
        self.life.poll_soon = false;
        n
    }

    /// The next message to run: this PE's, or its node's when one comes first by priority.
    #[inline]
    fn next_message(&mut self) -> Option<Message> {
        if let Link::Worker { node, .. } = &self.link {
            // Not before go: what a PE takes then waits in its hold list, out of reach of the
            // node's other PEs (one comparison, only while the node queue has something).
            if !node.node_queue.is_empty() && self.life.phase == crate::lifecycle::Phase::Running {
                if let Some(m) = node.node_queue.pop_before(self.queue.peek_priority()) {
                    if node.is_remote(&m) {
                        node.taken(m.wire_len());
                    }
                    return Some(m);
                }
            }
        }
        self.queue.pop()
    }

    /// Run one message: a system handler, a user handler, or hold it until start-up is done.
    #[inline]
    pub(crate) fn dispatch(&mut self, msg: Message) {
        self.taken += 1;
        if !self.is_for_me(&msg) {
            return self.drop_message(&msg, "it is addressed to another PE");
        }
        // Report mode, after a death: nothing from the dead node's PEs runs any more.
        if self.fail.any && self.sent_by_the_dead(&msg) {
            return;
        }
        self.run_handler(msg);
    }

    /// Fire due timers; true if any ran.
    fn fire_timers(&mut self, now: Instant) -> bool {
        if self.timers.next_due().is_none_or(|d| d > now) {
            return false;
        }
        // Taken out first, so that callbacks can add timers through `&mut Pe` (one due now
        // fires at the next look, not in this one).
        let mut due = Vec::new();
        while self.timers.next_due().is_some_and(|d| d <= now) {
            if let Some(t) = self.timers.timers.pop() {
                due.push(t);
            }
        }
        // Added to, not set: a callback may run a nested scheduler loop that fires timers too.
        self.timers.firing += due.len();
        for mut t in due {
            (t.f)(self);
            if let Some(p) = t.period {
                self.timers.push(now + p, Some(p), t.f);
            }
            self.timers.firing = self.timers.firing.saturating_sub(1);
        }
        true
    }

    /// Run the idle callbacks; true if any exists (they may have sent something).
    fn fire_on_idle(&mut self) -> bool {
        if self.timers.on_idle.is_empty() {
            return false;
        }
        let mut cbs = std::mem::take(&mut self.timers.on_idle);
        for cb in cbs.iter_mut() {
            cb(self);
        }
        cbs.append(&mut self.timers.on_idle);
        self.timers.on_idle = cbs;
        true
    }
}
