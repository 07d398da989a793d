//! The guide's HeterogeneousFilters example, as one program: different filters at different
//! processes of one stream (MRNet's heterogeneous `new_Stream`, ours
//! `Network::new_stream_placed`).
//!
//! ```text
//! heterogeneous_filters [TREE] [--by-name]
//! heterogeneous_filters g:2x3
//! ```
//! The program makes its network (TREE: a tree spec or a topology file, default `g:2x3`) and
//! runs itself as the back-ends. Each back-end answers a wave with its rank + 1. Up the
//! stream, every process below the front-end takes the maximum of what reaches it, and the
//! front-end sums those maxima: a sum of per-subtree maxima that neither filter alone gives.
//! A second stream sums everywhere, for comparison. `--by-name` makes the network with
//! MRNet's `rank_backends = false` (back-ends ranked by name), and each back-end's rank is
//! shown.

mod support;

use converse_tbon::{self as tbon, SyncMode, TbonError, Topology, TFILTER_NULL, TFILTER_SUM};
use std::process::ExitCode;

const WAVE: i32 = tbon::FIRST_APPLICATION_TAG;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("be") {
        return backend();
    }
    let by_name = argv.iter().any(|a| a == "--by-name");
    let tree = argv
        .iter()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map_or("g:2x3", String::as_str);
    match front_end(tree, by_name) {
        Ok(()) => {
            converse::input::out_line("heterogeneous_filters: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            converse::input::error_line(&format!("heterogeneous_filters: {e}"));
            ExitCode::from(1)
        }
    }
}

fn backend() -> ExitCode {
    tbon::run_backend(|net| loop {
        let (s, p) = net.recv()?;
        if p.tag() == WAVE {
            let rank = net.rank().unwrap_or(0);
            net.send(&s, WAVE, "%d", rank as i32 + 1)?;
        }
    })
}

fn front_end(tree: &str, by_name: bool) -> Result<(), String> {
    let topo = support::load(tree)?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut settings = tbon::create::Settings::from_env(&me.to_string_lossy(), &["be"])
        .map_err(|e| e.to_string())?;
    settings.rank_backends = !by_name;
    tbon::create_network_fe_with(&topo, &settings, tbon::Options::default, |net| {
        run(net).map_err(|e| e.to_string())
    })
    .map_err(|e| e.to_string())?
}

fn run(net: &mut tbon::Network<'_>) -> Result<(), String> {
    let topo = net.topology().clone();
    let fe = topo.root().rank();
    let ranks: Vec<u32> = topo
        .backends()
        .iter()
        .map(|&i| topo.nodes()[i].rank())
        .collect();
    converse::input::out_line(&format!("back-end ranks: {ranks:?}"));
    // What the placed filters should give: below each child of the root, the largest answer.
    let want_max_sum: i32 = topo
        .root()
        .children()
        .iter()
        .map(|&c| max_below(&topo, c))
        .sum();
    let want_sum: i32 = ranks.iter().map(|&r| r as i32 + 1).sum();
    let comm = net.broadcast_communicator();
    let placed = net
        .new_stream_placed(&comm, &format!("max => *; sum => {fe}"), "", "")
        .map_err(|e| e.to_string())?;
    let summed = net
        .new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)
        .map_err(|e| e.to_string())?;
    for wave in 1..=3 {
        let got: i32 = ask(net, &placed)?;
        let all: i32 = ask(net, &summed)?;
        converse::input::out_line(&format!(
            "wave {wave}: sum of subtree maxima {got} (want {want_max_sum}), sum {all} (want \
             {want_sum})"
        ));
        if got != want_max_sum || all != want_sum {
            return Err(format!("wave {wave}: wrong results"));
        }
    }
    Ok(())
}

fn ask(net: &mut tbon::Network<'_>, s: &tbon::Stream) -> Result<i32, String> {
    net.send(s, WAVE, "", ()).map_err(|e| e.to_string())?;
    let p = net.recv_on(s).map_err(|e: TbonError| e.to_string())?;
    p.unpack("%d").map_err(|e| e.to_string())
}

/// The largest back-end answer (rank + 1) below node `i`.
fn max_below(topo: &Topology, i: usize) -> i32 {
    let n = &topo.nodes()[i];
    if n.num_children() == 0 {
        return n.rank() as i32 + 1;
    }
    n.children()
        .iter()
        .map(|&c| max_below(topo, c))
        .max()
        .unwrap_or(0)
}
