//! Self-checking tree-overlay scenarios, one program for every PE (the overlay laid over a
//! running job): `tbon SCENARIO TOPOLOGY [ARG]`, where TOPOLOGY is a tree spec (`g:2x3`,
//! `b:2^2`, `k:2@8`) or `file:PATH`. The front-end checks the results and prints
//! `tbon SCENARIO: ok`, or `tbon SCENARIO: FAILED: why` and exits 1.
//!
//! The back-ends' side of each scenario is here (`back_end`); the front-end's, what it asks
//! and what it must get back, is in `tbon/checks.rs`.

#[path = "tbon/checks.rs"]
mod checks;

use converse_tbon::{
    self as tbon, topgen, topology_file, FnFilter, Network, Options, Packet, Role, Stream,
    SyncMode, TbonError, Topology, TFILTER_NULL,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const REPLY_INT: i32 = 100;
const REPLY_DOUBLE: i32 = 101;
const REPLY_ARRAY: i32 = 102;
const REPLY_STRING: i32 = 103;
const REPLY_LATE: i32 = 104;
const SINGLECAST: i32 = 105;
const WATCH_CLOSE: i32 = 106;
const MIXED_FORMATS: i32 = 107;
const WAVES: i32 = 108;
const FORMAT_SEEN: i32 = 109;

type Check = Result<(), String>;

fn main() -> ExitCode {
    converse::run(|pe| {
        let args = pe.args().to_vec();
        let scenario = args.get(1).cloned().unwrap_or_default();
        let spec = args.get(2).cloned().unwrap_or_else(|| "g:2".into());
        let extra = args.get(3).cloned().unwrap_or_default();
        // A filter compiled into the program: counts the packets of each wave.
        let count = FnFilter::new("", |cx| {
            let first = &cx.packets_in[0];
            cx.packets_out.push(Packet::new(
                first.stream_id(),
                first.tag(),
                "%ud",
                cx.packets_in.len() as u32,
            )?);
            Ok(())
        });
        let mut opts = Options::default();
        for (name, f) in [("count", count)].into_iter().chain(user_filters()) {
            if let Ok(f) = f {
                opts = opts.filter(name, f);
            }
        }
        // `plandeath VICTIM`: every other process tells the front-end how its attach ended.
        let told = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
        let t = told.clone();
        let tell = pe.register("tbon.told", move |_, msg| {
            t.borrow_mut()
                .push(String::from_utf8_lossy(msg.payload()).into_owned());
        });
        // The victim runs this before the plan, which comes after it from PE 0: once every PE
        // is past start-up (a death during it ends any job), it dies with the plan unread.
        let die = pe.register("tbon.die", |_, _| {
            std::thread::sleep(Duration::from_millis(500));
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::SIGKILL);
        });
        if scenario == "plandeath" && pe.my_pe() == 0 {
            if let Ok(victim) = extra.parse::<usize>() {
                pe.send(victim, die, b"");
            }
        }
        let failed = match tbon::attach(pe, opts, |_| topology(&spec)) {
            Ok(mut net) if scenario == "plandeath" => {
                // Placed before the death: the front-end's abandoning ends its waits.
                let r = net.wait_for_shutdown();
                let me = net.pe().my_pe();
                net.pe()
                    .send(0, tell, format!("PE {me} placed, then {r:?}").as_bytes());
                return;
            }
            Ok(mut net) => {
                run_role(&scenario, &extra, &mut net);
                return;
            }
            Err(e) => e,
        };
        if scenario == "plandeath" {
            return plan_death(pe, tell, &told, &failed);
        }
        if pe.my_pe() == 0 {
            converse::input::error_line(&format!("tbon {scenario}: cannot attach: {failed}"));
            pe.exit(3);
        }
    })
}

/// `plandeath`: a process died before the plan went through it. The front-end's attach fails
/// naming it, and every other live process's wait ends too (those below the dead one waited
/// for a plan that never came); each tells the front-end how, and it prints them.
fn plan_death(
    pe: &mut converse::Pe,
    tell: converse::HandlerId,
    told: &std::rc::Rc<std::cell::RefCell<Vec<String>>>,
    failed: &TbonError,
) {
    let me = pe.my_pe();
    if me != 0 {
        pe.send(
            0,
            tell,
            format!("PE {me} not attached: {failed}").as_bytes(),
        );
        return;
    }
    // Everybody but the front-end and the victim.
    let want = pe.num_pes() - 2;
    let until = Instant::now() + Duration::from_secs(30);
    pe.run_until(|_| told.borrow().len() >= want || Instant::now() > until);
    let got = told.borrow().clone();
    let ok = got.len() == want
        && failed
            .to_string()
            .contains("died while the network was being made");
    converse::input::out_line(&format!(
        "tbon plandeath: {}: front-end: {failed}; {} of {want} told: {}",
        if ok { "ok" } else { "FAILED" },
        got.len(),
        got.join("; ")
    ));
    pe.exit(if ok { 0 } else { 1 });
}

/// Filters compiled into the program, with the guide's whole shape: per-stream state,
/// configuration parameters, packets sent back the way they came.
fn user_filters() -> Vec<(&'static str, Result<FnFilter, tbon::FilterError>)> {
    vec![
        // Packets seen on this stream so far, here: state kept between waves.
        (
            "running",
            FnFilter::new("", |cx| {
                let seen = cx.state.get_or_insert_with(|| Box::new(0u32));
                let seen = seen
                    .downcast_mut::<u32>()
                    .ok_or_else(|| tbon::FilterError("the state is not a count".into()))?;
                *seen += cx.packets_in.len() as u32;
                let first = &cx.packets_in[0];
                let p = Packet::new(first.stream_id(), first.tag(), "%ud", *seen)?;
                cx.packets_out.push(p);
                Ok(())
            }),
        ),
        // The wave's sum of `%d`, times the factor the front-end set (1 until it does).
        (
            "scaled",
            FnFilter::new("%d", |cx| {
                let factor = match cx.params {
                    Some(p) => p.unpack::<i32>("%d")?,
                    None => 1,
                };
                let mut sum = 0i32;
                for p in cx.packets_in.iter() {
                    sum += p.unpack::<i32>("%d")?;
                }
                let first = &cx.packets_in[0];
                cx.packets_out.push(Packet::new(
                    first.stream_id(),
                    first.tag(),
                    "%d",
                    sum * factor,
                )?);
                Ok(())
            }),
        ),
        // Everything goes on, and a copy goes back the way it came.
        (
            "echo",
            FnFilter::new("", |cx| {
                cx.packets_out_reverse.extend(cx.packets_in.iter().cloned());
                cx.packets_out.append(cx.packets_in);
                Ok(())
            }),
        ),
    ]
}

fn run_role(scenario: &str, extra: &str, net: &mut Network<'_>) {
    match net.role() {
        Role::FrontEnd => {
            // The shutdown is part of every scenario: it returns once every process has
            // acknowledged it, so "ok" also says the whole tree was reached.
            let result = front_end(scenario, extra, net)
                .and_then(|()| net.shutdown().map_err(|e| format!("shutdown: {e}")));
            match result {
                Ok(()) => {
                    converse::input::out_line(&format!("tbon {scenario}: ok"));
                    net.pe().exit(0);
                }
                Err(why) => {
                    converse::input::out_line(&format!("tbon {scenario}: FAILED: {why}"));
                    let _ = net.shutdown();
                    net.pe().exit(1);
                }
            }
        }
        Role::BackEnd => back_end(scenario, net),
        Role::Internal | Role::Spare => {
            let _ = net.wait_for_shutdown();
        }
    }
}

fn topology(spec: &str) -> Result<Topology, TbonError> {
    match spec.strip_prefix("file:") {
        Some(path) => Ok(topology_file::load(std::path::Path::new(path))?),
        None => Ok(topgen::generate(
            &topgen::TreeSpec::parse(spec)?,
            &topgen::Placement::default(),
        )?),
    }
}

fn e2s(e: TbonError) -> String {
    e.to_string()
}

/// A stream over `comm` with `up` and `sync` (and no downstream filter).
fn stream(
    net: &mut Network<'_>,
    comm: &tbon::Communicator,
    up: u32,
    sync: SyncMode,
) -> Result<Stream, String> {
    net.new_stream(comm, up, sync, TFILTER_NULL).map_err(e2s)
}

/// The next packet on `s`, unpacked as `format`.
fn recv_as<T: tbon::Unpack>(net: &mut Network<'_>, s: &Stream, format: &str) -> Result<T, String> {
    net.recv_on(s)
        .map_err(e2s)?
        .unpack(format)
        .map_err(|e| e.to_string())
}

/// The back-ends' side of every scenario: answer by tag until the network is shut down.
fn back_end(scenario: &str, net: &mut Network<'_>) {
    let rank = net.rank().unwrap_or(0) as i32;
    loop {
        let (s, p) = match net.recv() {
            Ok(x) => x,
            Err(TbonError::ShutDown) | Err(TbonError::JobEnded) => return,
            Err(e) => {
                converse::input::error_line(&format!("tbon {scenario}: back-end {rank}: {e}"));
                return;
            }
        };
        let r = match p.tag() {
            REPLY_INT => net.send(&s, REPLY_INT, "%d", rank + 1),
            REPLY_DOUBLE => net.send(&s, REPLY_DOUBLE, "%lf", f64::from(rank + 1)),
            REPLY_ARRAY => net.send(&s, REPLY_ARRAY, "%ad", vec![rank + 1; 2]),
            REPLY_STRING => net.send(&s, REPLY_STRING, "%s", format!("be{rank}")),
            REPLY_LATE => {
                if rank == 0 {
                    let until = Instant::now() + Duration::from_millis(1500);
                    net.pe().run_until(|_| Instant::now() >= until);
                }
                net.send(&s, REPLY_LATE, "%d", rank + 1)
            }
            SINGLECAST => {
                let v: i32 = p.unpack("%d").unwrap_or(-1);
                let right = s.id() == rank as u32 && s.is_singlecast();
                net.send(&s, SINGLECAST, "%d %d", (v * 2, i32::from(right)))
            }
            WATCH_CLOSE => {
                let _ = net.send(&s, WATCH_CLOSE, "%d", 1);
                let seen = match net.recv_on(&s) {
                    Err(TbonError::StreamClosed(_)) => "closed".to_string(),
                    other => format!("{other:?}"),
                };
                let after = match net.send(&s, WATCH_CLOSE, "%d", 1) {
                    Err(TbonError::StreamClosed(_)) => "refused",
                    _ => "accepted",
                };
                let mine = net.stream(rank as u32);
                match mine {
                    Some(m) => net.send(&m, WATCH_CLOSE, "%s %s", (seen, after)),
                    None => Ok(()),
                }
            }
            MIXED_FORMATS => {
                if rank == 0 {
                    net.send(&s, MIXED_FORMATS, "%f", 1.0f32)
                } else {
                    net.send(&s, MIXED_FORMATS, "%d", 1)
                }
            }
            FORMAT_SEEN => net.send(&s, FORMAT_SEEN, "%s", p.format_string()),
            WAVES => {
                let (v, n): (i32, i32) = p.unpack("%d %d").unwrap_or((0, 0));
                (0..n)
                    .map(|i| net.send(&s, WAVES, "%d", v * i))
                    .find(Result::is_err)
                    .unwrap_or(Ok(()))
            }
            other => {
                converse::input::error_line(&format!(
                    "tbon {scenario}: back-end {rank}: unknown tag {other}"
                ));
                Ok(())
            }
        };
        if let Err(e) = r {
            converse::input::error_line(&format!(
                "tbon {scenario}: back-end {rank} could not answer: {e}"
            ));
        }
    }
}

fn front_end(scenario: &str, extra: &str, net: &mut Network<'_>) -> Check {
    match scenario {
        "reduce" => checks::reduce(net),
        "sync" => checks::sync(net),
        "hetero" => checks::hetero(net),
        "subset" => checks::subset(net),
        "close" => checks::close(net),
        "load" => checks::load(net, extra),
        "errors" => checks::errors(net),
        "events" => checks::events(net),
        "perf" => checks::perf(net),
        "topology" => checks::topology_queries(net),
        "shutdown" => Ok(()),
        "userfilters" => checks::user_filter_shape(net),
        other => Err(format!("unknown scenario '{other}'")),
    }
}
