//! The conformance scenarios: self-checking jobs that every layer must pass unchanged.
//!
//! `conformance SCENARIO [ARGS] +pN [+machine NAME]` — PE 0 prints
//! `conformance SCENARIO: ok ...` and the job exits 0, or prints
//! `conformance SCENARIO: FAILED: ...` and the job exits 1. Scenarios:
//!
//! | scenario   | what it checks                                                              |
//! |------------|-----------------------------------------------------------------------------|
//! | hello      | every PE runs and prints one line                                           |
//! | segv       | the last PE crashes with SIGSEGV (for charmrun's `++debug-no-pause`)          |
//! | fifo       | per sender/receiver FIFO with mixed sizes                                   |
//! | broadcast  | broadcast / broadcast-all / multicast from every root reach each PE once    |
//! | reduce     | sum, max, min, all-reduce, many back-to-back rounds, barriers               |
//! | priority   | dispatch order by priority, FIFO among equals                               |
//! | exit-code  | `exit(N)` on the last PE makes the job exit N (ARGS: N, default 3)          |
//! | mismatch   | a PE registering a different handler set fails the job with a clear error   |
//! | alltoall   | N messages (ARGS: N [BUSY s]) all-to-all: none lost, none twice; each PE    |
//! |            | first computes BUSY s in a handler (its layer unpolled, peers unconnected)  |
//! | sizes      | messages of 0 B to 64 MiB (ARGS: max bytes) arrive intact, both ways        |
//! | idle       | an idle job blocks (CPU time), periodic and idle callbacks fire             |
//! | panic      | a handler panicking on the last PE ends the whole job, non-zero             |
//! | reduce-mismatch | the last PE contributes a u32 to an `ops::sum_u64` reduction: the job |
//! |            | ends non-zero naming the PEs and the lengths (no wrong sum)                |
//! | scheduling | exit_scheduler inside a nested barrier, after, barrier_then, handlers that  |
//! |            | schedule while they wait                                                    |
//! | exit-early | PE 0 ends the job (code 5) before start-up completes; nobody hangs          |
//! | exit-after-send | PE 0 sends 64 MiB to the last PE and exits at once: the exit must not   |
//! |            | be stuck behind the unsent rest of the big message                          |
//! | proc-exit  | the last PE calls `std::process::exit(3)` itself, past the runtime          |
//! | hang       | the last PE stops polling for good (a launcher's time limit must end it)    |
//! | slow       | PE 0 sends N (ARGS, default 3000) 2 KiB messages to PE 1 at once; PE 1    |
//! |            | takes 100 µs over each: all arrive, in order, intact                        |
//! | silent     | the last PE stops polling for good, then PE 0 sends it a message: a layer   |
//! |            | that waits for answers must give up on it                                  |
//! | wait       | every PE idles for SECS (default 2) seconds, then the job exits 0           |
//! | forgotten-exit | a barrier and a reduction, then no `pe.exit`: idle for good             |
//! | timer-exit | PE 0 exits from a timer SECS (default 3) after start-up, idle meanwhile     |
//! | busy-exit  | the last PE computes SECS (default 3) in a handler, then PE 0 exits         |
//! | ccs        | CCS handlers on every PE (`echo`, `later`, `silent`, `hold`) for a client;  |
//! |            | the job exits 0 after SECS (default 10) or when a client asks `done`        |
//! | print      | every PE prints LINES lines (ARGS: LINES WIDTH, default 1000 100), each     |
//! |            | `print PE p line k ` and WIDTH `x`s, then the job exits 0                   |
//! | spawn      | every PE starts `sleep 300` sharing its stdout and prints its pid; then     |
//! |            | the job exits 0, or (ARGS: crash) the last PE aborts                        |
//! | node       | node messages and node broadcasts from every PE: each runs exactly once, on |
//! |            | a PE of the node it was sent to                                             |
//! | pinning    | every PE prints the cores it may run on, PE 0 those of each thread          |
//! | traced     | every PE sends 20 pings (`trace.ping`) to every other PE, each answered by |
//! |            | a pong (`trace.pong`); after a barrier each PE says so, and PE 0 ends the  |
//! |            | job SECS (ARGS, default 0) seconds later, or (report mode) 0.2 s after it  |
//! |            | is told of a node's death: every message is received                       |
//! | compute    | every PE computes SECS (default 5) s in a handler with data outstanding     |
//! |            | toward it; the job completes                                                |
//! | siblings   | (SMP) the last PE of each node sleeps SECS (default 2) while the others of  |
//! |            | its node send it MIB (default 512) each (and, with `ring`, flood each other |
//! |            | in a ring); PE 0 prints the process's peak memory                           |
//! | survive    | (with `+set faults=report`) PE VICTIM dies as HOW says (exit, kill,         |
//! |            | send-kill: killed with large messages on their way to PE 0, stop, wait:     |
//! |            | killed from outside); the survivors are told and go on; exits 0             |
//! | flood      | PE 1 stops polling for 2 s while PE 0 sends it MIB (default 512) MiB: what  |
//! |            | PE 0 holds for it stays bounded, all arrives; PE 0 prints its peak memory   |
//! | backlog    | PE 0 sends the last PE MIB (default 384) MiB in messages of BYTES (65536)   |
//! |            | while its handler works US (200) µs on each: what it holds stays bounded;   |
//! |            | it prints its peak memory                                                   |
//! | mpi-world  | (MPI layer only) the program's own message on `MPI_COMM_WORLD` is not taken |
//! |            | by the layer's receives                                                     |
//!
//! The scenarios live by concern: delivery (order, loss, sizes, a slow or stalled receiver) in
//! `conformance/delivery.rs`, jobs that end abnormally in `conformance/ending.rs`, SMP mode in
//! `conformance/smp.rs`, node deaths in `conformance/survive.rs`, the rest here.

#[path = "conformance/delivery.rs"]
mod delivery;
#[path = "conformance/ending.rs"]
mod ending;
#[cfg(feature = "mpi")]
#[path = "conformance/mpi_world.rs"]
mod mpi_world;
#[path = "conformance/smp.rs"]
mod smp;
#[path = "conformance/survive.rs"]
mod survive;

use converse::{ops, HandlerId, Pe, ReduceTarget};
use std::cell::{Cell, RefCell};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let rt = match converse::Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            converse::input::error_line(&format!("conformance: error: {e}"));
            return ExitCode::from(2);
        }
    };
    let args = rt.args().to_vec();
    let start = match scenario(&args, rt.version_requested()) {
        Ok(start) => start,
        Err(e) => {
            converse::input::error_line(&format!("conformance: {e}"));
            return ExitCode::from(2);
        }
    };
    match rt.run(start) {
        Ok(code) => converse::exit_code(code),
        Err(e) if e.reported_elsewhere() => ExitCode::from(1),
        Err(e) => {
            converse::input::error_line(&format!("conformance: error: {e}"));
            ExitCode::from(1)
        }
    }
}

/// The start function of the scenario `args` name (`args[1]`), with its arguments parsed; an
/// argument that does not parse is an error naming it, never replaced by the default.
fn scenario(args: &[String], version_requested: bool) -> Result<StartFn, String> {
    let scenario = args.get(1).cloned().unwrap_or_default();
    let arg = args.get(2).cloned();
    Ok(match scenario.as_str() {
        "hello" => Box::new(hello),
        "segv" => Box::new(segv),
        "fifo" => Box::new(delivery::fifo),
        "broadcast" => Box::new(delivery::broadcast),
        "reduce" => Box::new(delivery::reduce),
        "priority" => Box::new(delivery::priority),
        "exit-code" => {
            let code: u8 = value(args, 2, 3)?;
            let code = i32::from(code);
            Box::new(move |pe: &mut Pe| ending::exit_code(pe, code))
        }
        "mismatch" => Box::new(ending::mismatch),
        "reduce-mismatch" => Box::new(ending::reduce_mismatch),
        "alltoall" => {
            let n = value(args, 2, 1_000_000)?;
            let busy = seconds_at(args, 3, 0.0)?;
            Box::new(move |pe: &mut Pe| delivery::alltoall(pe, n, busy))
        }
        "sizes" => {
            let max = value(args, 2, 64 << 20)?;
            Box::new(move |pe: &mut Pe| delivery::sizes(pe, max))
        }
        "idle" => Box::new(idle),
        "panic" => Box::new(ending::panic),
        "scheduling" => Box::new(scheduling),
        "exit-early" => Box::new(ending::exit_early),
        "exit-after-send" => Box::new(ending::exit_after_send),
        "proc-exit" => Box::new(ending::proc_exit),
        "hang" => Box::new(ending::hang),
        "silent" => Box::new(ending::silent),
        "forgotten-exit" => Box::new(ending::forgotten_exit),
        "busy-exit" => {
            let secs = seconds(args, 3.0)?;
            Box::new(move |pe: &mut Pe| ending::busy_exit(pe, secs))
        }
        "timer-exit" => {
            let secs = seconds(args, 3.0)?;
            Box::new(move |pe: &mut Pe| ending::timer_exit(pe, secs))
        }
        "slow" => {
            let n = value(args, 2, 3000)?;
            Box::new(move |pe: &mut Pe| delivery::slow(pe, n))
        }
        "flood" => {
            let mib = at_most(args, 2, 512, 16 << 10)?;
            Box::new(move |pe: &mut Pe| delivery::flood(pe, mib))
        }
        "backlog" => {
            let mib = at_most(args, 2, 384, 16 << 10)?;
            let us = at_most(args, 3, 200, 1_000_000)?;
            let bytes: usize = value(args, 4, 64 << 10)?;
            if !(1..=64 << 20).contains(&bytes) {
                return Err(format!("backlog: BYTES {bytes} is not from 1 to 64 MiB"));
            }
            Box::new(move |pe: &mut Pe| delivery::backlog(pe, mib, us, bytes))
        }
        "print" => {
            let lines = at_most(args, 2, 1000, 10_000_000)?;
            // Up to 256 MiB: past charmrun's 64 MiB split, still far from a 1 TiB allocation.
            let width = at_most(args, 3, 100, 256 << 20)?;
            Box::new(move |pe: &mut Pe| print(pe, lines, width))
        }
        "spawn" => {
            let crash = arg.as_deref() == Some("crash");
            Box::new(move |pe: &mut Pe| spawn(pe, crash))
        }
        "node" => Box::new(smp::node),
        "pinning" => Box::new(smp::pinning),
        "siblings" => {
            let mib = at_most(args, 2, 512, 16 << 10)?;
            let secs = seconds_at(args, 3, 2.0)?;
            let ring = match args.get(4).map(String::as_str) {
                None => false,
                Some("ring") => true,
                Some(other) => return Err(format!("siblings: '{other}' is not 'ring'")),
            };
            Box::new(move |pe: &mut Pe| smp::siblings(pe, mib, secs, ring))
        }
        "compute" => {
            let secs = seconds(args, 5.0)?;
            Box::new(move |pe: &mut Pe| smp::compute(pe, secs))
        }
        "traced" => {
            let secs = seconds(args, 0.0)?;
            Box::new(move |pe: &mut Pe| traced(pe, secs))
        }
        "survive" => {
            let victim = value(args, 2, 1)?;
            let how = args.get(3).cloned().unwrap_or_else(|| "exit".into());
            Box::new(move |pe: &mut Pe| survive::survive(pe, victim, how.clone()))
        }
        #[cfg(feature = "mpi")]
        "mpi-world" => Box::new(mpi_world::mpi_world),
        "wait" => {
            let secs = seconds(args, 2.0)?;
            Box::new(move |pe: &mut Pe| wait(pe, secs))
        }
        "ccs" => {
            let secs = seconds(args, 10.0)?;
            Box::new(move |pe: &mut Pe| ccs(pe, secs))
        }
        _ if version_requested => Box::new(|_: &mut Pe| {}),
        _ => {
            return Err(format!(
                "unknown scenario '{scenario}' (hello, fifo, broadcast, reduce, \
                 priority, exit-code, mismatch, reduce-mismatch, alltoall, sizes, idle, panic, scheduling, exit-early, exit-after-send, proc-exit, hang, silent, slow, flood, backlog, wait, traced, print, spawn, node, pinning, compute, siblings, survive, mpi-world)"
            ))
        }
    })
}

/// What a scenario runs on every PE.
type StartFn = Box<dyn Fn(&mut Pe) + Sync>;

/// Argument `i` of `args` as a `T`; `default` when there is none.
fn value<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    match args.get(i) {
        None => Ok(default),
        Some(a) => a
            .parse()
            .map_err(|e| format!("{}: argument {a:?}: {e}", args[1])),
    }
}

/// Argument `i` as a whole number of at most `max`, `default` when there is none: a test
/// program's arguments are bounded like any program's (a 1 TiB line, an endless flood).
fn at_most<T>(args: &[String], i: usize, default: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Default,
{
    let name = format!("{}: argument {i}", args[1]);
    converse::input::number(
        args.get(i).map(String::as_str),
        &name,
        default,
        T::default()..=max,
    )
}

/// The scenario's seconds argument: finite and not negative; `default` when there is none.
fn seconds(args: &[String], default: f64) -> Result<f64, String> {
    seconds_at(args, 2, default)
}

/// Argument `at`, a number of seconds from 0 to a day.
fn seconds_at(args: &[String], at: usize, default: f64) -> Result<f64, String> {
    let secs: f64 = value(args, at, default)?;
    if !(secs.is_finite() && (0.0..=86_400.0).contains(&secs)) {
        return Err(format!(
            "{}: {secs} is not a number of seconds from 0 to a day",
            args[1]
        ));
    }
    Ok(secs)
}

/// Register the verdict handler: PE 0 gets the summed error count of every PE and ends the job.
fn verdict(pe: &mut Pe, name: &'static str, detail: impl Fn(u64) -> String + 'static) -> HandlerId {
    pe.register("verdict", move |pe, msg| {
        let errors = word(msg.payload(), 0);
        if errors == 0 {
            converse::input::out_line(&format!("conformance {name}: ok {}", detail(errors)));
            pe.exit(0);
        } else {
            converse::input::out_line(&format!(
                "conformance {name}: FAILED: {errors} errors {}",
                detail(errors)
            ));
            pe.exit(1);
        }
    })
}

fn word(b: &[u8], i: usize) -> u64 {
    b.get(i * 8..i * 8 + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(u64::MAX, u64::from_le_bytes)
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Report this PE's error count to the verdict.
fn report(pe: &mut Pe, errors: u64, verdict: HandlerId) {
    pe.reduce(
        &errors.to_le_bytes(),
        ops::sum_u64,
        ReduceTarget::Root(verdict),
    );
}

fn complain(pe: &Pe, what: String) {
    converse::input::error_line(&format!("conformance: PE {}: {what}", pe.my_pe()));
}

/// The last PE crashes (SIGSEGV) in a function of that name, for the debugger's backtrace;
/// the others wait for the job to end.
fn segv(pe: &mut Pe) {
    #[inline(never)]
    fn crash_here_for_the_debugger() {
        // Used after the call, so that the call is not a tail call (its frame would be gone).
        let r = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSEGV);
        std::hint::black_box(r).ok();
    }
    if pe.my_pe() + 1 == pe.num_pes() {
        crash_here_for_the_debugger();
    }
}

fn hello(pe: &mut Pe) {
    let v = verdict(pe, "hello", |_| String::new());
    converse::input::out_line(&format!("hello from PE {} of {}", pe.my_pe(), pe.num_pes()));
    report(pe, 0, v);
}

/// One second of idleness with a 50 ms periodic timer: the process must use little CPU, the
/// timer must tick, the idle callback must run.
fn idle(pe: &mut Pe) {
    let v = verdict(pe, "idle", |_| String::new());
    let ticks = Rc::new(Cell::new(0u64));
    let idles = Rc::new(Cell::new(0u64));
    let (t, i) = (ticks.clone(), idles.clone());
    pe.every(Duration::from_millis(50), move |_| t.set(t.get() + 1));
    pe.on_idle(move |_| i.set(i.get() + 1));
    pe.barrier();
    let cpu0 = cpu_time();
    let wall0 = Instant::now();
    let done = Rc::new(Cell::new(false));
    let d = done.clone();
    pe.after(Duration::from_secs(1), move |_| d.set(true));
    let d = done.clone();
    pe.run_until(|_| d.get());
    let wall = wall0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    pe.barrier();
    let mut errors = 0;
    if ticks.get() < 5 || idles.get() < 1 {
        errors += 1;
        complain(
            pe,
            format!(
                "{} ticks of 50 ms in 1 s, {} idle calls",
                ticks.get(),
                idles.get()
            ),
        );
    }
    // The whole process (all PEs in it) over the idle second: busy polling would use a core
    // per PE; blocking uses almost nothing.
    if pe.my_pe() == 0 {
        converse::input::out_line(&format!(
            "conformance idle: process CPU {:.0} ms over {:.0} ms of idle wall time, {} ticks",
            cpu.as_secs_f64() * 1e3,
            wall.as_secs_f64() * 1e3,
            ticks.get()
        ));
        if cpu.as_secs_f64() > 0.25 * wall.as_secs_f64() {
            errors += 1;
            complain(pe, "idle PEs burn CPU".into());
        }
    }
    report(pe, errors, v);
}

fn cpu_time() -> Duration {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(
                    tv.tv_sec().max(0) as u64,
                    (tv.tv_usec().max(0) as u32) * 1000,
                )
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// Nested scheduling: `exit_scheduler` called while a handler waits in a barrier must end the
/// `scheduler()` around it; `after` fires; `barrier_then` runs its handler on every PE; a
/// handler may wait (`run_until`) for a later message.
fn scheduling(pe: &mut Pe) {
    let v = verdict(pe, "scheduling", |_| String::new());
    let left = Rc::new(Cell::new(false));
    let l = left.clone();
    let leave = pe.register("leave", move |pe, _| {
        l.set(true);
        pe.exit_scheduler();
    });
    let wait = pe.register("wait-in-barrier", |pe, _| {
        pe.barrier();
    });
    let released = Rc::new(Cell::new(0u32));
    let r = released.clone();
    let after_barrier = pe.register("after-barrier", move |_, _| r.set(r.get() + 1));
    let inner_seen = Rc::new(Cell::new(false));
    let i = inner_seen.clone();
    let inner = pe.register("inner", move |_, _| i.set(true));
    let outer_done = Rc::new(Cell::new(false));
    let (i, o) = (inner_seen.clone(), outer_done.clone());
    let outer = pe.register("outer", move |pe, _| {
        let i = i.clone();
        pe.run_until(move |_| i.get());
        o.set(true);
    });
    let me = pe.my_pe();
    let last = pe.num_pes() - 1;
    // 1. PE 0: a handler waits in a barrier while the next handler asks to leave.
    if me == 0 {
        pe.send(0, wait, b"");
        pe.send(0, leave, b"");
        pe.scheduler();
    } else {
        pe.barrier();
    }
    let mut errors = 0;
    if me == 0 && !left.get() {
        errors += 1;
        complain(pe, "scheduler() returned before exit_scheduler".into());
    }
    // 2. A timer.
    let fired = Rc::new(Cell::new(false));
    let f = fired.clone();
    pe.after(Duration::from_millis(20), move |_| f.set(true));
    let f = fired.clone();
    pe.run_until(move |_| f.get());
    // 3. barrier_then: its handler runs once on every PE.
    pe.barrier_then(after_barrier);
    let r = released.clone();
    pe.run_until(move |_| r.get() == 1);
    // 4. The last PE's handler waits for a message PE 0 sends after it.
    if me == 0 {
        pe.send(last, outer, b"");
        pe.send(last, inner, b"");
    }
    if me == last {
        let o = outer_done.clone();
        pe.run_until(move |_| o.get());
    }
    pe.barrier();
    if released.get() != 1 {
        errors += 1;
        complain(
            pe,
            format!("barrier_then handler ran {} times", released.get()),
        );
    }
    report(pe, errors, v);
}

fn wait(pe: &mut Pe, secs: f64) {
    converse::input::out_line(&format!(
        "conformance wait: PE {} waits {secs} s",
        pe.my_pe()
    ));
    if pe.my_pe() == 0 {
        pe.after(Duration::from_secs_f64(secs), |pe| {
            converse::input::out_line("conformance wait: ok");
            pe.exit(0);
        });
    }
}

/// CCS handlers for a client (tests/tests/ccs.rs): `echo` answers `PE p: DATA`; `later`
/// keeps the request and answers 100 ms later (a delayed reply); `silent` answers nothing
/// and `forget` drops the request 100 ms later (the client still gets an empty reply); `hold`
/// keeps the request for ever (only a death ends it) and `held` says how many it keeps;
/// `done` on PE 0 ends the job.
fn ccs(pe: &mut Pe, secs: f64) {
    pe.ccs_register("echo", |pe, req| {
        let line = format!("PE {}: {}", pe.my_pe(), String::from_utf8_lossy(req.data()));
        req.reply(pe, line.as_bytes());
    });
    pe.ccs_register("later", |pe, req| {
        let mut req = Some(req);
        pe.after(Duration::from_millis(100), move |pe| {
            if let Some(r) = req.take() {
                let line = format!("PE {} later", pe.my_pe());
                r.reply(pe, line.as_bytes());
            }
        });
    });
    pe.ccs_register("silent", |_, _| {});
    let held = Rc::new(RefCell::new(Vec::new()));
    let h = held.clone();
    pe.ccs_register("hold", move |_, req| h.borrow_mut().push(req));
    // How many requests `hold` keeps here: a test waits on it rather than sleeping.
    pe.ccs_register("held", move |pe, req| {
        let n = held.borrow().len().to_string();
        req.reply(pe, n.as_bytes());
    });
    // Kept, then dropped 100 ms later without a reply: the client gets an empty one.
    pe.ccs_register("forget", |pe, req| {
        pe.after(Duration::from_millis(100), move |_| drop(req));
    });
    pe.ccs_register("done", |pe, req| {
        req.reply(pe, b"bye");
        // Once the reply is on its way to the client.
        pe.after(Duration::from_millis(200), |pe| pe.exit(0));
    });
    if pe.my_pe() == 0 {
        pe.after(Duration::from_secs_f64(secs), |pe| {
            converse::input::out_line("conformance ccs: time is up");
            pe.exit(0);
        });
    }
}

/// Pings answered by pongs between every pair, for the tracing tests: when it is done, no
/// message is in flight.
fn traced(pe: &mut Pe, secs: f64) {
    const PINGS: usize = 20;
    let pongs = Rc::new(Cell::new(0usize));
    let pong = pe.register("trace.pong", {
        let pongs = pongs.clone();
        move |_, _| pongs.set(pongs.get() + 1)
    });
    pe.register("trace.ping", move |pe, msg| {
        let from = msg.src_pe() as usize;
        pe.send(from, pong, &[7; 16]);
    });
    // Report mode: each survivor tells PE 0 it learnt of the death; PE 0 ends the job once
    // every survivor has (so each survivor's trace holds the death).
    let told = Rc::new(Cell::new(0usize));
    let told_h = pe.register("trace.told", {
        let told = told.clone();
        move |pe, _| {
            told.set(told.get() + 1);
            exit_once_all_told(pe, told.get());
        }
    });
    let ping = pe.handler("trace.ping").expect("registered above");
    let (n, me) = (pe.num_pes(), pe.my_pe());
    for k in 0..PINGS {
        for d in (0..n).filter(|&d| d != me) {
            pe.send(d, ping, &vec![1u8; 8 + k * 100]);
        }
    }
    let want = PINGS * (n - 1);
    // The exchange as a user bracket, and its end as a user event (Projections' user
    // events), which the tests find in the trace and the report.
    let exchange = std::time::Instant::now();
    pe.run_until(move |_| pongs.get() == want);
    pe.trace_bracket("trace.exchange", exchange);
    pe.trace_event("trace.all-answered");
    pe.barrier();
    converse::input::out_line(&format!("conformance traced: PE {} done", pe.my_pe()));
    if pe.survives_node_failures() {
        pe.on_node_failure(move |pe, _| {
            if pe.my_pe() == 0 {
                exit_once_all_told(pe, told.get());
            } else {
                pe.send(0, told_h, &[]);
            }
        });
    }
    if pe.my_pe() == 0 {
        if secs > 0.0 {
            pe.after(Duration::from_secs_f64(secs), |pe| pe.exit(0));
        } else {
            converse::input::out_line("conformance traced: ok");
            pe.exit(0);
        }
    }
}

/// PE 0 of `traced` in report mode: ends the job once it knows of a death and `told` other
/// PEs, every survivor but itself, said they do too.
fn exit_once_all_told(pe: &mut Pe, told: usize) {
    let others = (1..pe.num_pes()).filter(|&p| pe.is_alive(p)).count();
    if !pe.dead_nodes().is_empty() && told == others {
        pe.exit(0);
    }
}

fn print(pe: &mut Pe, lines: usize, width: usize) {
    use std::io::Write;
    let v = verdict(pe, "print", move |_| {
        format!("({lines} lines of {width} x per PE)")
    });
    let tail = "x".repeat(width);
    let mut out = std::io::stdout().lock();
    for k in 0..lines {
        // One write per line: the line reaches charmrun's pipe whole or in pieces, as any
        // program's would.
        if writeln!(out, "print PE {} line {k} {tail}", pe.my_pe()).is_err() {
            break;
        }
    }
    drop(out);
    report(pe, 0, v);
}

fn spawn(pe: &mut Pe, crash: bool) {
    let v = verdict(pe, "spawn", |_| String::new());
    // The child inherits stdout: it holds the node's pipe to charmrun open.
    match std::process::Command::new("sleep").arg("300").spawn() {
        Ok(child) => converse::input::out_line(&format!(
            "conformance spawn: PE {} child {}",
            pe.my_pe(),
            child.id()
        )),
        Err(e) => complain(pe, format!("cannot start sleep: {e}")),
    }
    pe.barrier();
    if crash && pe.my_pe() == pe.num_pes() - 1 {
        std::process::abort();
    }
    report(pe, 0, v);
}
