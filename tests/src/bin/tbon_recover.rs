//! The tree overlay's failure recovery on whole jobs: a front-end that makes a 4x8 network,
//! kills some of its processes (SIGKILL, from outside) during a stream of waves, and checks
//! what the guide promises.
//!
//! ```text
//! tbon_recover SCENARIO ROUNDS [LAYER]   the front-end: ROUNDS networks, one kill each
//! tbon_recover be DIR                    every other process (the front-end starts them)
//! ```
//!
//! Scenarios: `internal` (one internal process), `two` (two at once), `deep` (an internal
//! process of a 2x2x4 tree whose orphans are internal processes themselves), `chain` (in
//! that tree, an internal process and one of its children at once), `streamed`
//! (the back-ends stream 400 waves on one request, and an internal process is killed
//! meanwhile: no packet down for its orphans to miss, only waves up), `backend`,
//! `newstream` (an internal process killed as a new stream is being made: the waves run on
//! the new stream), `singlecast` (the front-end waits on a back-end's singlecast stream while
//! the back-end is killed: the receive ends with `DeadBackEnd`), `singlelost` (singlecast
//! requests to a back-end wait in its parent, stopped, which is then killed: each reaches the
//! back-end once, in order, through its new parent), `state` (a stream whose filter keeps a
//! running total of its history and exports it — the filter library's `RunningSum`, loaded
//! from `TBON_RECOVER_FILTERS`: the back-ends stream a few answers, an internal process with
//! internal children is stopped (in the 2x2x2x2 tree, one of the first level or of the second
//! in turn), the back-ends stream the rest, and it is killed holding what it never passed on
//! (in some rounds at least: see [`ROUNDS_WITH_LOSS`]) — the front-end's total must still come to
//! the exact sum of everything the back-ends sent, through the orphans' exported state),
//! `off` (recovery off, in a job that survives: the front-end is told, the stream fails,
//! nothing hangs), `noopt` (recovery off and no report mode: the job ends, as without the
//! overlay's recovery).
//!
//! Each back-end answers wave `w` with `(rank + 1, w)`, summed up the tree: a wave's answer
//! is `(sum of rank + 1, w × back-ends)` over the back-ends that took part, so a wrong sum or
//! a wave mixed with another shows. The front-end prints `tbon_recover: ok` when every round
//! passed.

use converse_tbon::{
    self as tbon, topgen, EventKind, Network, Rank, SyncMode, TbonError, Topology,
    FIRST_INTERNAL_RANK, TFILTER_NULL, TFILTER_SUM,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ASK: i32 = 100;
/// A request for that many waves, streamed up by every back-end at once.
const STREAM: i32 = 101;
/// A request to stream `first` waves, wait until `DIR/go` exists, then stream up to `total`.
const STREAM_HALT: i32 = 102;
/// Waves of the `streamed` scenario.
const STREAMED: i32 = 400;
/// Waves in flight at once.
const IN_FLIGHT: u32 = 4;
/// Correct waves required once recovery is over.
const AFTER: u32 = 20;
/// Waves each back-end streams in the `state` scenario.
const STATE_WAVES: i32 = 60;
/// Longest a round may take from the kill to its end.
const LIMIT: Duration = Duration::from_secs(30);

/// Rounds of the `state` scenario in which the victim held waves it never passed on. A round
/// may see none and still pass (on a loaded machine the victim's children may not have passed
/// anything on before the kill: then every later wave comes whole through the new parent, and
/// its total is still checked); the run as a whole must see some, or it did not test the
/// exported state.
static ROUNDS_WITH_LOSS: AtomicUsize = AtomicUsize::new(0);

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    match argv.get(1).map(String::as_str) {
        Some("be") => backend(),
        Some(scenario) => match front_end(scenario, &argv) {
            Ok(()) => {
                converse::input::out_line("tbon_recover: ok");
                ExitCode::SUCCESS
            }
            Err(e) => {
                converse::input::out_line(&format!("tbon_recover: FAILED: {e}"));
                ExitCode::from(1)
            }
        },
        None => {
            converse::input::error_line(&format!(
                "usage: {} SCENARIO ROUNDS [LAYER] | be DIR",
                argv[0]
            ));
            ExitCode::from(2)
        }
    }
}

/// Every process but the front-end: it leaves its pid under its rank (so the front-end can
/// kill it), then back-ends answer waves until the network is shut down.
fn backend() -> ExitCode {
    converse::run(|pe| {
        let dir = PathBuf::from(pe.args().get(2).cloned().unwrap_or_default());
        let failed = match tbon::attach(pe, tbon::Options::default(), |_| {
            Err(TbonError::Create("started alone".into()))
        }) {
            Ok(net) => {
                serve(net, &dir);
                None
            }
            Err(e) => Some(e),
        };
        // Not started by a front-end: nobody would ever end this job. (After the match: the
        // attempt borrows the PE until then.)
        if let Some(e) = failed {
            converse::input::error_line(&format!(
                "tbon_recover: error: this process is one of a network's: {e}"
            ));
            pe.exit(2);
        }
    })
}

/// Leave this process's pid under its rank in `dir`; a back-end answers waves until the
/// network is shut down.
fn serve(mut net: Network<'_>, dir: &Path) {
    let rank = net.rank().unwrap_or(Rank::MAX);
    let _ = std::fs::write(dir.join(rank.to_string()), std::process::id().to_string());
    if net.is_back_end() {
        loop {
            let (s, p) = match net.recv() {
                Ok(x) => x,
                Err(TbonError::ShutDown | TbonError::JobEnded) => break,
                Err(e) => {
                    converse::input::error_line(&format!("tbon_recover: back-end {rank}: {e}"));
                    break;
                }
            };
            if p.tag() == STREAM || p.tag() == STREAM_HALT {
                let (first, n) = if p.tag() == STREAM {
                    let n = p.unpack::<i32>("%d").unwrap_or(0);
                    (n, n)
                } else {
                    p.unpack::<(i32, i32)>("%d %d").unwrap_or((0, 0))
                };
                for w in 1..=n {
                    if w == first + 1 && !wait_for_go(&mut net, dir) {
                        break;
                    }
                    if net.send(&s, ASK, "%d %d", (rank as i32 + 1, w)).is_err() {
                        break;
                    }
                }
                let _ = net.flush(&s);
                let _ = std::fs::write(dir.join(format!("streamed.{rank}")), b"");
                continue;
            }
            if p.tag() != ASK {
                continue;
            }
            let Ok(w) = p.unpack::<i32>("%d") else {
                continue;
            };
            match net.send(&s, ASK, "%d %d", (rank as i32 + 1, w)) {
                Ok(()) => {}
                Err(TbonError::ShutDown | TbonError::JobEnded) => break,
                Err(e) => {
                    converse::input::error_line(&format!("tbon_recover: back-end {rank}: {e}"));
                    break;
                }
            }
        }
    }
    // Where the front-end can see that this back-end's waits ended.
    let _ = std::fs::write(dir.join(format!("ended.{rank}")), b"");
    let _ = net.wait_for_shutdown();
}

/// Wait (serving the network) until the front-end leaves `DIR/go`: whether it did in time.
fn wait_for_go(net: &mut Network<'_>, dir: &Path) -> bool {
    let until = Instant::now() + LIMIT;
    while !dir.join("go").exists() {
        if Instant::now() > until || net.is_shut_down() {
            return false;
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// The scenarios, as the module docs describe them.
const SCENARIOS: &[&str] = &[
    "internal",
    "two",
    "deep",
    "chain",
    "streamed",
    "backend",
    "newstream",
    "singlecast",
    "singlelost",
    "state",
    "off",
    "noopt",
];

fn front_end(scenario: &str, argv: &[String]) -> Result<(), String> {
    if !SCENARIOS.contains(&scenario) {
        return Err(format!(
            "unknown scenario {scenario:?} ({})",
            SCENARIOS.join(", ")
        ));
    }
    let rounds: usize = argv
        .get(2)
        .and_then(|r| r.parse().ok())
        .ok_or("no round count")?;
    let layer = argv.get(3).cloned().unwrap_or_else(|| "tcp".into());
    let spec = match scenario {
        "deep" | "chain" => "g:2x2x4",
        "state" => "g:2x2x2x2",
        _ => "g:4x8",
    };
    let topo = topgen::TreeSpec::parse(spec)
        .and_then(|s| topgen::generate(&s, &topgen::Placement::default()))
        .map_err(|e| e.to_string())?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let me = me.to_string_lossy().into_owned();
    for round in 0..rounds {
        // `TBON_RECOVER_TMP`: where a front-end that may not live to clean up (noopt) works.
        let base =
            std::env::var_os("TBON_RECOVER_TMP").map_or_else(std::env::temp_dir, PathBuf::from);
        let dir = base.join(format!("tbon_recover.{}.{round}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let dir_s = dir.to_string_lossy().into_owned();
        let mut settings = tbon::create::Settings::new(&me, &["be", &dir_s]);
        settings.layer = layer.clone();
        settings.timeout = Duration::from_secs(60);
        match scenario {
            "off" => {
                settings.failure_recovery = Some(false);
                settings.runtime_args = vec!["+set".into(), "faults=report".into()];
            }
            "noopt" => settings.failure_recovery = Some(false),
            _ => settings.failure_recovery = Some(true),
        }
        let t = topo.clone();
        let r = tbon::create_network_fe_with(&topo, &settings, tbon::Options::default, |net| {
            one_round(net, &t, scenario, round, &dir)
        });
        let _ = std::fs::remove_dir_all(&dir);
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("round {round}: {e}")),
            Err(e) if scenario == "noopt" => {
                // The job ended because a process died: what is expected without opt-in.
                converse::input::out_line(&format!(
                    "tbon_recover: round {round}: the job ended: {e}"
                ));
            }
            Err(e) => return Err(format!("round {round}: {e}")),
        }
    }
    if scenario == "state" && ROUNDS_WITH_LOSS.load(Ordering::Relaxed) == 0 {
        return Err(format!(
            "no wave was lost in any of {rounds} rounds: no victim held anything"
        ));
    }
    Ok(())
}

/// Wait until every process has left its pid.
fn wait_for_pids(net: &mut Network<'_>, dir: &Path, n: usize) -> Result<(), String> {
    let until = Instant::now() + LIMIT;
    loop {
        let have = std::fs::read_dir(dir).map_or(0, |d| d.count());
        if have >= n {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(format!("only {have} of {n} processes left their pid"));
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn kill(dir: &Path, rank: Rank) -> Result<(), String> {
    signal(dir, rank, nix::sys::signal::Signal::SIGKILL)
}

fn signal(dir: &Path, rank: Rank, sig: nix::sys::signal::Signal) -> Result<(), String> {
    let pid: i32 = std::fs::read_to_string(dir.join(rank.to_string()))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("no pid for rank {rank}"))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
        .map_err(|e| format!("{sig} to rank {rank}: {e}"))
}

/// The waves of one stream, `IN_FLIGHT` at a time, and what came back.
struct Waves {
    s: tbon::Stream,
    sent: u32,
    got: u32,
    lost: u32,
    /// Back-ends, and the sum of their rank + 1: all, and those alive after the kill.
    full: (i32, i32),
    alive: (i32, i32),
}

impl Waves {
    fn new(s: tbon::Stream, topo: &Topology, dead: &BTreeSet<Rank>) -> Waves {
        let b = topo.num_backends() as i32;
        let alive: Vec<i32> = (0..b).filter(|r| !dead.contains(&(*r as Rank))).collect();
        Waves {
            s,
            sent: 0,
            got: 0,
            lost: 0,
            full: (b, b * (b + 1) / 2),
            alive: (alive.len() as i32, alive.iter().map(|r| r + 1).sum()),
        }
    }

    /// Keep waves in flight and take one answer: whether it was whole over the survivors
    /// (`Ok(true)`), whole over all (`Ok(false)`), or lost (`Ok(false)`, counted).
    fn step(&mut self, net: &mut Network<'_>) -> Result<bool, String> {
        while self.sent < self.got + IN_FLIGHT {
            self.sent += 1;
            net.send(&self.s, ASK, "%d", self.sent as i32)
                .map_err(|e| format!("send wave {}: {e}", self.sent))?;
        }
        let w = self.got as i32 + 1;
        let r = net.recv_on(&self.s);
        self.got += 1;
        match r {
            Ok(p) => {
                let (sum, ws): (i32, i32) =
                    p.unpack("%d %d").map_err(|e| format!("wave {w}: {e}"))?;
                if (sum, ws) == (self.alive.1, w * self.alive.0) {
                    Ok(true)
                } else if (sum, ws) == (self.full.1, w * self.full.0) {
                    Ok(false)
                } else {
                    Err(format!(
                        "wave {w}: ({sum}, {ws}), want ({}, {}) or over the survivors ({}, {})",
                        self.full.1,
                        w * self.full.0,
                        self.alive.1,
                        w * self.alive.0
                    ))
                }
            }
            Err(TbonError::WaveLost { .. }) => {
                self.lost += 1;
                Ok(false)
            }
            Err(e) => Err(format!("wave {w}: {e}")),
        }
    }
}

/// The victims of a round, and the orphans they leave.
fn victims(topo: &Topology, scenario: &str, round: usize) -> Vec<Rank> {
    let level1 = |i: usize| FIRST_INTERNAL_RANK + 1 + (i % 4) as Rank;
    match scenario {
        "deep" => vec![FIRST_INTERNAL_RANK + 1 + (round % 2) as Rank],
        // In g:2x2x2x2: a process of the first level (its orphans go to the front-end), then
        // one of the second (they go to a process that passes their state on up).
        "state" if round.is_multiple_of(2) => {
            vec![FIRST_INTERNAL_RANK + 1 + (round / 2 % 2) as Rank]
        }
        "state" => vec![FIRST_INTERNAL_RANK + 3 + (round / 2 % 4) as Rank],
        // A process and one of its (internal) children at once.
        "chain" => vec![
            FIRST_INTERNAL_RANK + 1 + (round % 2) as Rank,
            FIRST_INTERNAL_RANK + 3 + 2 * (round % 2) as Rank,
        ],
        "two" => vec![level1(round), level1(round + 1 + round / 4 % 3)],
        "backend" | "singlecast" => vec![(round * 7 % topo.num_backends()) as Rank],
        "singlelost" => vec![level1(round)],
        _ => vec![level1(round)],
    }
}

fn one_round(
    net: &mut Network<'_>,
    topo: &Topology,
    scenario: &str,
    round: usize,
    dir: &Path,
) -> Result<(), String> {
    let want_recovery = !matches!(scenario, "off" | "noopt");
    if net.failure_recovery() != want_recovery {
        return Err(format!(
            "failure recovery is {}, want {want_recovery}",
            net.failure_recovery()
        ));
    }
    wait_for_pids(net, dir, topo.num_nodes() - 1)?;
    let victims = victims(topo, scenario, round);
    let dead: BTreeSet<Rank> = victims.iter().copied().collect();
    let orphans: BTreeSet<Rank> = victims
        .iter()
        .filter_map(|&v| topo.find_rank(v))
        .flat_map(|i| topo.nodes()[i].children().to_vec())
        .map(|c| topo.nodes()[c].rank())
        .filter(|r| !dead.contains(r))
        .collect();
    let comm = net.broadcast_communicator();
    if scenario == "state" {
        return state(net, dir, victims[0], (&orphans, topo), round);
    }
    let s = net
        .new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)
        .map_err(|e| e.to_string())?;
    let mut waves = Waves::new(s, topo, &dead);
    if scenario == "streamed" {
        return streamed(net, &mut waves, dir, &victims, &orphans, topo, round);
    }
    if scenario == "singlecast" {
        return singlecast(net, dir, victims[0]);
    }
    if scenario == "singlelost" {
        return single_lost(net, topo, dir, victims[0], round);
    }
    // A different moment in the stream each round.
    for _ in 0..5 + round % 7 {
        waves.step(net)?;
    }
    for &v in &victims {
        kill(dir, v)?;
    }
    if scenario == "newstream" {
        let s2 = net
            .new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)
            .map_err(|e| format!("the new stream: {e}"))?;
        waves = Waves::new(s2, topo, &dead);
    }
    if !want_recovery {
        return recovery_off(net, &mut waves, &victims, topo, dir);
    }
    let until = Instant::now() + LIMIT;
    let (mut removed, mut new_parent, mut endpoint) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut good_after = 0;
    let mut recovered_at = None;
    while good_after < AFTER {
        if Instant::now() > until {
            return Err(format!(
                "not recovered in {LIMIT:?}: removed {removed:?}, re-parented {new_parent:?} of \
                 {orphans:?}, orphans left {:?}, waves {} answered of {} sent, {good_after} \
                 good since",
                net.orphan_nodes(),
                waves.got,
                waves.sent
            ));
        }
        let whole = waves.step(net)?;
        while let Some(e) = net.next_event() {
            match (e.kind, e.rank) {
                (EventKind::ProcessRemoved, Some(r)) => {
                    removed.insert(r);
                }
                (EventKind::NewParent, Some(r)) => {
                    new_parent.insert(r);
                }
                (EventKind::EndpointRemoved, Some(r)) if e.stream == Some(waves.s.id()) => {
                    endpoint.insert(r);
                }
                _ => {}
            }
        }
        let recovered = removed == dead
            && orphans.is_subset(&new_parent)
            && net.orphan_nodes().is_empty()
            && (scenario != "backend" || endpoint == dead);
        if recovered && recovered_at.is_none() {
            recovered_at = Some(waves.sent);
        }
        // Every wave sent once recovery is over is whole over the survivors.
        if recovered_at.is_some_and(|at| waves.got > at) {
            if !whole {
                return Err(format!(
                    "wave {} (sent after recovery) is not whole over the survivors ({} lost)",
                    waves.got, waves.lost
                ));
            }
            good_after += 1;
        }
    }
    if scenario == "backend" {
        // A dead back-end is no end-point any more: sending to it says so.
        for &v in &victims {
            match net.send_to(&waves.s, &[v], ASK, "%d", 0) {
                Err(TbonError::DeadBackEnd(r)) if r == v => {}
                other => return Err(format!("send_to dead back-end {v}: {other:?}")),
            }
            match net.send_to_backend(v, ASK, "%d", 0) {
                Err(TbonError::DeadBackEnd(r)) if r == v => {}
                other => return Err(format!("send_to_backend dead {v}: {other:?}")),
            }
            if net.endpoints(&waves.s).contains(&v) {
                return Err(format!("dead back-end {v} is still an end-point"));
            }
        }
    }
    if waves.lost > 2 * IN_FLIGHT {
        return Err(format!("{} waves lost", waves.lost));
    }
    check_topology(net, topo, &dead, &orphans)
}

/// The network's topology is the tree without the dead, each orphan under its nearest
/// surviving ancestor; its DOT form too.
fn check_topology(
    net: &Network<'_>,
    topo: &Topology,
    dead: &BTreeSet<Rank>,
    orphans: &BTreeSet<Rank>,
) -> Result<(), String> {
    let now = net.topology();
    if now.num_nodes() != topo.num_nodes() - dead.len() {
        return Err(format!(
            "the topology has {} processes, want {}",
            now.num_nodes(),
            topo.num_nodes() - dead.len()
        ));
    }
    for &d in dead {
        if now.find_rank(d).is_some() {
            return Err(format!("rank {d} died but is in the topology"));
        }
    }
    for &o in orphans {
        let mut up = topo.parent_rank(o);
        while let Some(a) = up.filter(|a| dead.contains(a)) {
            up = topo.parent_rank(a);
        }
        if now.parent_rank(o) != up {
            return Err(format!(
                "orphan {o} has parent {:?} in the topology, want {up:?}",
                now.parent_rank(o)
            ));
        }
    }
    let dot = now.to_dot();
    let edges = dot.matches(" -> ").count();
    if edges != now.num_nodes() - 1 {
        return Err(format!("the DOT graph has {edges} edges:\n{dot}"));
    }
    Ok(())
}

/// Recovery off: the stream fails within the limit (no hang), the front-end is told, and a
/// send on the stream says so.
/// `singlecast`: the front-end asks back-end `v` on its singlecast stream and gets the answer;
/// then `v` is killed while the front-end waits on that stream: the wait ends with
/// `DeadBackEnd(v)` (singlecast streams keep no state on the front-end, and it waited for
/// ever).
fn singlecast(net: &mut Network<'_>, dir: &Path, v: Rank) -> Result<(), String> {
    let s = tbon::Stream::from_id(v);
    net.send_to_backend(v, ASK, "%d", 1)
        .map_err(|e| format!("send_to_backend {v}: {e}"))?;
    let p = net
        .recv_on(&s)
        .map_err(|e| format!("back-end {v}'s answer: {e}"))?;
    if p.unpack::<(i32, i32)>("%d %d").ok() != Some((v as i32 + 1, 1)) {
        return Err(format!("back-end {v} answered {p:?}"));
    }
    kill(dir, v)?;
    match net.recv_on(&s) {
        Err(TbonError::DeadBackEnd(r)) if r == v => Ok(()),
        other => Err(format!("waiting on dead back-end {v}'s stream: {other:?}")),
    }
}

/// Requests that wait in a back-end's parent when it dies (stopped first, so they are surely
/// there): every one reaches the back-end once, in order, through its new parent, and the
/// answers come back in that order with nothing twice.
fn single_lost(
    net: &mut Network<'_>,
    topo: &Topology,
    dir: &Path,
    parent: Rank,
    round: usize,
) -> Result<(), String> {
    let i = topo.find_rank(parent).ok_or("no such parent")?;
    let kids = topo.nodes()[i].backend_ranks();
    let be = kids.start + (round as Rank % (kids.end - kids.start));
    let s = tbon::Stream::from_id(be);
    let ask = |net: &mut Network<'_>, w: i32| {
        net.send_to_backend(be, ASK, "%d", w)
            .map_err(|e| format!("send_to_backend {be}, request {w}: {e}"))
    };
    let answer = |net: &mut Network<'_>, w: i32| -> Result<(), String> {
        let p = net
            .recv_on(&s)
            .map_err(|e| format!("back-end {be}'s answer {w}: {e}"))?;
        match p.unpack::<(i32, i32)>("%d %d") {
            Ok(got) if got == (be as i32 + 1, w) => Ok(()),
            other => Err(format!("back-end {be}: want answer {w}, got {other:?}")),
        }
    };
    ask(net, 1)?;
    answer(net, 1)?;
    signal(dir, parent, nix::sys::signal::Signal::SIGSTOP)?;
    const HELD: i32 = 5;
    for w in 2..2 + HELD {
        ask(net, w)?;
    }
    // Out of the front-end, into the stopped parent's socket.
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        net.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    kill(dir, parent)?;
    for w in 2..2 + HELD {
        answer(net, w)?;
    }
    // Nothing given twice is waiting before the next answer.
    ask(net, 2 + HELD)?;
    answer(net, 2 + HELD)
}

fn recovery_off(
    net: &mut Network<'_>,
    waves: &mut Waves,
    victims: &[Rank],
    topo: &Topology,
    dir: &Path,
) -> Result<(), String> {
    let until = Instant::now() + LIMIT;
    loop {
        if Instant::now() > until {
            return Err(format!("the stream did not fail in {LIMIT:?}"));
        }
        match waves.step(net) {
            Ok(_) => continue,
            Err(e) if e.contains("failed: process") => break,
            Err(e) => return Err(e),
        }
    }
    let mut told = (false, false);
    while let Some(e) = net.next_event() {
        match (e.kind, e.rank) {
            (EventKind::ProcessRemoved, Some(r)) if victims.contains(&r) => told.0 = true,
            (EventKind::NetworkFailed, Some(r)) if victims.contains(&r) => told.1 = true,
            _ => {}
        }
    }
    if told != (true, true) {
        return Err(format!(
            "events (process removed, network failed): {told:?}"
        ));
    }
    match net.send(&waves.s, ASK, "%d", 0) {
        Err(TbonError::StreamFailed { .. }) => {}
        other => return Err(format!("a send on the failed stream: {other:?}")),
    }
    // A receive on any stream learns of it too, once, after what had arrived on it (it
    // waited for ever).
    loop {
        match net.recv() {
            Ok(_) => continue,
            Err(TbonError::StreamFailed { stream, .. }) if stream == waves.s.id() => break,
            other => return Err(format!("recv() after the stream failed: {other:?}")),
        }
    }
    match net.try_recv() {
        Ok(None) => {}
        other => return Err(format!("recv() told twice: {other:?}")),
    }
    // The back-ends below the dead are cut off: their waits end (their `recv` says shut down)
    // without the front-end's shutdown, which can never reach them (they waited until the
    // job ended).
    let below: Vec<Rank> = victims
        .iter()
        .filter_map(|&v| topo.find_rank(v))
        .flat_map(|i| topo.nodes()[i].backend_ranks())
        .collect();
    let until = Instant::now() + LIMIT;
    while let Some(r) = below
        .iter()
        .find(|r| !dir.join(format!("ended.{r}")).exists())
    {
        if Instant::now() > until {
            return Err(format!(
                "back-end {r}, cut off, still waits after {LIMIT:?}"
            ));
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// `streamed`: every back-end sends `STREAMED` waves on one request; an internal process is
/// killed while they come up. Every wave gives one answer, whole over the survivors or lost,
/// in order; the orphans re-connect.
fn streamed(
    net: &mut Network<'_>,
    waves: &mut Waves,
    dir: &Path,
    victims: &[Rank],
    orphans: &BTreeSet<Rank>,
    topo: &Topology,
    round: usize,
) -> Result<(), String> {
    net.send(&waves.s, STREAM, "%d", STREAMED)
        .map_err(|e| e.to_string())?;
    let until = Instant::now() + LIMIT;
    let kill_at = 10 + (round * 13 % 100) as i32;
    let mut lost = 0;
    for w in 1..=STREAMED {
        if w == kill_at {
            for &v in victims {
                kill(dir, v)?;
            }
        }
        if Instant::now() > until {
            return Err(format!("only {} of {STREAMED} waves in {LIMIT:?}", w - 1));
        }
        match net.recv_on(&waves.s) {
            Ok(p) => {
                let got: (i32, i32) = p.unpack("%d %d").map_err(|e| e.to_string())?;
                let want = (waves.alive.1, w * waves.alive.0);
                if got != want {
                    return Err(format!("streamed wave {w}: {got:?}, want {want:?}"));
                }
            }
            Err(TbonError::WaveLost { .. }) => lost += 1,
            Err(e) => return Err(format!("streamed wave {w}: {e}")),
        }
    }
    if lost >= STREAMED {
        return Err("every wave was lost".into());
    }
    let dead: BTreeSet<Rank> = victims.iter().copied().collect();
    while !net.orphan_nodes().is_empty() || net.dead_processes().len() < dead.len() {
        if Instant::now() > until {
            return Err(format!("orphans left: {:?}", net.orphan_nodes()));
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut new_parent = BTreeSet::new();
    while let Some(e) = net.next_event() {
        if let (EventKind::NewParent, Some(r)) = (e.kind, e.rank) {
            new_parent.insert(r);
        }
    }
    if !orphans.is_subset(&new_parent) {
        return Err(format!("re-parented {new_parent:?}, want {orphans:?}"));
    }
    check_topology(net, topo, &dead, orphans)
}

/// The `state` scenario (see the module docs).
fn state(
    net: &mut Network<'_>,
    dir: &Path,
    v: Rank,
    (orphans, topo): (&BTreeSet<Rank>, &Topology),
    round: usize,
) -> Result<(), String> {
    let comm = net.broadcast_communicator();
    // The filter library's `RunningSum` (which exports its state): the path from the test.
    let lib = std::env::var("TBON_RECOVER_FILTERS")
        .map_err(|_| "TBON_RECOVER_FILTERS does not name the filter library")?;
    let filter = net
        .load_filter(&lib, "RunningSum")
        .map_err(|e| e.to_string())?;
    let s = net
        .new_stream(&comm, filter, SyncMode::WaitForAll, TFILTER_NULL)
        .map_err(|e| e.to_string())?;
    let b = topo.num_backends() as i64;
    let exact = i64::from(STATE_WAVES) * b * (b + 1) / 2;
    // Whole waves first (a different number each round), then the victim stops, then the
    // back-ends stream the rest: the victim holds every later wave of its subtree.
    let first = 2 + (round % 5) as i32;
    net.send(&s, STREAM_HALT, "%d %d", (first, STATE_WAVES))
        .map_err(|e| e.to_string())?;
    let until = Instant::now() + LIMIT;
    let mut last = 0i64;
    for w in 1..=first {
        let p = net.recv_on(&s).map_err(|e| format!("wave {w}: {e}"))?;
        last = p.unpack("%ld").map_err(|e| format!("wave {w}: {e}"))?;
    }
    signal(dir, v, nix::sys::signal::Signal::SIGSTOP)?;
    std::fs::write(dir.join("go"), b"").map_err(|e| e.to_string())?;
    // Every back-end streams to the end: what goes through the victim stops there.
    loop {
        let done = (0..b).all(|r| dir.join(format!("streamed.{r}")).exists());
        if done {
            break;
        }
        if Instant::now() > until {
            return Err("the back-ends did not finish streaming".into());
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(2));
    }
    // Killed at once: the victim's children may still be taking their back-ends' last
    // answers in, and pass them on to their new parent after their exported state.
    kill(dir, v)?;
    let (mut lost, mut most) = (0, last);
    while last != exact {
        if Instant::now() > until {
            return Err(format!(
                "the running total is {last}, want {exact} ({lost} waves lost, orphans left {:?})",
                net.orphan_nodes()
            ));
        }
        match net.try_recv_on(&s) {
            Ok(Some(p)) => {
                last = p.unpack("%ld").map_err(|e| e.to_string())?;
                most = most.max(last);
            }
            Ok(None) => {
                net.progress();
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TbonError::WaveLost { .. }) => lost += 1,
            Err(e) => return Err(e.to_string()),
        }
    }
    // Nothing counted twice: no total ever went past the exact one, nor does one after.
    let grace = Instant::now() + Duration::from_millis(300);
    while Instant::now() < grace {
        match net.try_recv_on(&s) {
            Ok(Some(p)) => most = most.max(p.unpack("%ld").map_err(|e| e.to_string())?),
            Ok(None) | Err(TbonError::WaveLost { .. }) => {
                net.progress();
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    if most != exact {
        return Err(format!(
            "a running total of {most} went past the exact {exact}"
        ));
    }
    converse::input::out_line(&format!("tbon_recover: round {round}: {lost} waves lost"));
    if lost > 0 {
        ROUNDS_WITH_LOSS.fetch_add(1, Ordering::Relaxed);
    }
    let dead = BTreeSet::from([v]);
    while !net.orphan_nodes().is_empty() {
        if Instant::now() > until {
            return Err(format!("orphans left: {:?}", net.orphan_nodes()));
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    check_topology(net, topo, &dead, orphans)
}
