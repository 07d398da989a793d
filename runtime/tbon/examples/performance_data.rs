//! The guide's PerformanceData example, as one program: record performance data on every
//! stream at once, send waves, and collect it per stream and per rank (MRNet's
//! `Network::enable_PerformanceData` and `Network::collect_PerformanceData`; ours
//! `Network::enable_perf(None, ..)` and `Network::collect_perf_all`).
//!
//! ```text
//! performance_data [TREE]
//! performance_data g:2x3
//! ```
//! The program makes its network (TREE: a tree spec or a topology file, default `g:2x3`) and
//! runs itself as the back-ends. Two streams carry 4 and 2 waves; then the packets each
//! process sent on each stream are collected (one value per rank), the bytes received summed
//! over each stream's processes, and the largest resident memory of any process found; each
//! back-end must have sent one packet per wave of the stream.

mod support;

use converse_tbon::{
    self as tbon, Aggregate, Context, Metric, PerfData, SyncMode, TFILTER_NULL, TFILTER_SUM,
};
use std::process::ExitCode;

const WAVE: i32 = tbon::FIRST_APPLICATION_TAG;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("be") {
        return tbon::run_backend(|net| loop {
            let (s, p) = net.recv()?;
            if p.tag() == WAVE {
                net.send(&s, WAVE, "%d", 1)?;
            }
        });
    }
    match front_end(argv.get(1).map_or("g:2x3", String::as_str)) {
        Ok(()) => {
            converse::input::out_line("performance_data: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            converse::input::error_line(&format!("performance_data: {e}"));
            ExitCode::from(1)
        }
    }
}

fn front_end(tree: &str) -> Result<(), String> {
    let topo = support::load(tree)?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let settings = tbon::create::Settings::from_env(&me.to_string_lossy(), &["be"])
        .map_err(|e| e.to_string())?;
    tbon::create_network_fe_with(&topo, &settings, tbon::Options::default, |net| {
        run(net).map_err(|e| e.to_string())
    })
    .map_err(|e| e.to_string())?
}

fn run(net: &mut tbon::Network<'_>) -> Result<(), tbon::TbonError> {
    let comm = net.broadcast_communicator();
    let streams = [
        (
            net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)?,
            4,
        ),
        (
            net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)?,
            2,
        ),
    ];
    // On every stream at once (`None`), on every process of each.
    for (m, c) in [
        (Metric::NumPackets, Context::Send),
        (Metric::NumBytes, Context::Recv),
        (Metric::MemPhysKb, Context::None),
    ] {
        net.enable_perf(None, m, c)?;
    }
    for (s, waves) in &streams {
        for _ in 0..*waves {
            net.send(s, WAVE, "", ())?;
            let sum: i32 = net.recv_on(s)?.unpack("%d")?;
            if sum != comm.size() as i32 {
                return Err(tbon::TbonError::Usage(format!("a wave summed to {sum}")));
            }
        }
    }
    net.disable_perf(None, Metric::NumPackets, Context::Send)?;
    let sent = net.collect_perf_all(Metric::NumPackets, Context::Send, Aggregate::Concat)?;
    let received = net.collect_perf_all(Metric::NumBytes, Context::Recv, Aggregate::Sum)?;
    let memory = net.collect_perf_all(Metric::MemPhysKb, Context::None, Aggregate::Max)?;
    let mut wrong = Vec::new();
    for (s, waves) in &streams {
        let id = s.id();
        let per_rank = sent.get(&id).cloned().unwrap_or_default();
        let line: Vec<String> = per_rank
            .iter()
            .map(|(r, v)| {
                format!(
                    "{r}:{}",
                    v.iter()
                        .map(PerfData::to_string)
                        .collect::<Vec<_>>()
                        .join("/")
                )
            })
            .collect();
        converse::input::out_line(&format!(
            "stream {id}: packets sent by rank: {}",
            line.join(" ")
        ));
        for be in comm.endpoints() {
            let v = per_rank
                .get(&i64::from(*be))
                .and_then(|v| v.first().copied());
            if v != Some(PerfData::UInt(*waves)) {
                wrong.push(format!(
                    "stream {id}, back-end {be}: {v:?} packets, want {waves}"
                ));
            }
        }
        let show = |m: &std::collections::BTreeMap<u32, tbon::RankPerfData>| {
            m.get(&id).and_then(|d| d.iter().next()).map_or_else(
                || "none".to_string(),
                |(k, v)| format!("{} over {} ranks", v[0], -k),
            )
        };
        converse::input::out_line(&format!(
            "stream {id}: bytes received {}, largest resident memory (KiB) {}",
            show(&received),
            show(&memory)
        ));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(tbon::TbonError::Usage(wrong.join("; ")))
    }
}
