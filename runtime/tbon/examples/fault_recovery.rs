//! The guide's FaultRecovery example, as one program: an internal process dies in the middle
//! of a stream; the front-end sees the topology events (the process removed, each orphan's
//! new parent), and the waves go on, whole, over the tree that recovery made.
//!
//! ```text
//! fault_recovery [TREE]
//! fault_recovery g:2x4
//! ```
//! The program makes its network (TREE: a tree spec or a topology file with internal
//! processes, default `g:2x4`) with failure recovery on, which runs every process in the
//! runtime's report mode (`+set faults=report`: a death is reported, not the end of the job),
//! and runs itself as the other processes. Back-ends answer each wave with their rank + 1.
//! After 5 waves the front-end asks the first internal process to die (it kills itself with
//! SIGKILL, as a crash would end it: nothing is said to anybody), then sends waves until 10
//! come back whole after the death. The request to die is a file in a directory of
//! `TMPDIR` (or `/tmp`), which every host of the tree must share.

use converse_tbon::{
    self as tbon, topgen, topology_file, EventKind, SyncMode, TbonError, Topology, TFILTER_NULL,
    TFILTER_SUM,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const WAVE: i32 = tbon::FIRST_APPLICATION_TAG;
/// How long the front-end waits for recovery before it gives up.
const LIMIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("be") {
        return process(PathBuf::from(argv.get(2).cloned().unwrap_or_default()));
    }
    let dir = std::env::temp_dir().join(format!("fault_recovery.{}", std::process::id()));
    let r = std::fs::create_dir_all(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))
        .and_then(|()| front_end(argv.get(1).map_or("g:2x4", String::as_str), &dir));
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok(()) => {
            converse::input::out_line("fault_recovery: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            converse::input::error_line(&format!("fault_recovery: {e}"));
            ExitCode::from(1)
        }
    }
}

/// A tree spec (`g:2x4`) or a topology file.
fn load(tree: &str) -> Result<Topology, String> {
    let path = Path::new(tree);
    let t = if path.exists() {
        topology_file::load(path)
    } else {
        topgen::TreeSpec::parse(tree).and_then(|s| topgen::generate(&s, &Default::default()))
    };
    t.map_err(|e| e.to_string())
}

/// Every process but the front-end: back-ends answer waves; internal processes serve the
/// tree, and die when the front-end leaves `DIR/kill.RANK` for them. (They run this code,
/// rather than `run_backend`, which never returns control on an internal process, only so
/// that the example can crash one.)
fn process(dir: PathBuf) -> ExitCode {
    converse::run(|pe| {
        let alone = |_: &converse::Pe| Err(TbonError::Create("started alone".into()));
        let mut net = match tbon::attach(pe, tbon::Options::default(), alone) {
            Ok(net) => net,
            Err(e) => {
                converse::input::error_line(&format!("fault_recovery: {e}"));
                return;
            }
        };
        let rank = net.rank().unwrap_or(u32::MAX);
        if net.is_back_end() {
            // Until the network shuts down (or the job ends).
            while let Ok((s, p)) = net.recv() {
                if p.tag() == WAVE && net.send(&s, WAVE, "%d", rank as i32 + 1).is_err() {
                    break;
                }
            }
        } else {
            let kill = dir.join(format!("kill.{rank}"));
            while !net.is_shut_down() {
                net.progress();
                if kill.exists() {
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _ = net.wait_for_shutdown();
    });
    ExitCode::SUCCESS
}

fn front_end(tree: &str, dir: &Path) -> Result<(), String> {
    let topo = load(tree)?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir_s = dir.to_string_lossy().into_owned();
    let mut settings = tbon::create::Settings::from_env(&me.to_string_lossy(), &["be", &dir_s])
        .map_err(|e| e.to_string())?;
    settings.failure_recovery = Some(true);
    tbon::create_network_fe_with(&topo, &settings, tbon::Options::default, |net| {
        run(net, &topo, dir)
    })
    .map_err(|e| e.to_string())?
}

fn run(net: &mut tbon::Network<'_>, topo: &Topology, dir: &Path) -> Result<(), String> {
    let e2s = |e: TbonError| e.to_string();
    let Some(&victim) = topo.internal().first() else {
        return Err("the tree has no internal process to kill".into());
    };
    let victim_rank = topo.nodes()[victim].rank();
    let orphans = topo.nodes()[victim].num_children();
    let want: i32 = topo
        .backends()
        .iter()
        .map(|&i| topo.nodes()[i].rank() as i32 + 1)
        .sum();
    let comm = net.broadcast_communicator();
    let s = net
        .new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)
        .map_err(e2s)?;
    for wave in 1..=5 {
        net.send(&s, WAVE, "", ()).map_err(e2s)?;
        let sum: i32 = net
            .recv_on(&s)
            .map_err(e2s)?
            .unpack("%d")
            .map_err(|e| e.to_string())?;
        converse::input::out_line(&format!("wave {wave}: sum {sum} (want {want})"));
    }
    converse::input::out_line(&format!(
        "killing internal process rank {victim_rank} ({} children)",
        orphans
    ));
    std::fs::write(dir.join(format!("kill.{victim_rank}")), b"").map_err(|e| e.to_string())?;
    let until = Instant::now() + LIMIT;
    let (mut whole, mut lost, mut wave) = (0, 0, 5);
    let (mut removed, mut new_parents) = (false, 0);
    while whole < 10 || !removed || new_parents < orphans {
        if Instant::now() > until {
            return Err(format!(
                "no recovery within {LIMIT:?}: {whole} whole waves, removed: {removed}, \
                 {new_parents} of {orphans} new parents"
            ));
        }
        while let Some(ev) = net.next_event() {
            converse::input::out_line(&format!(
                "event {:?}: rank {:?}: {}",
                ev.kind, ev.rank, ev.message
            ));
            match ev.kind {
                EventKind::ProcessRemoved if ev.rank == Some(victim_rank) => removed = true,
                EventKind::NewParent => new_parents += 1,
                _ => {}
            }
        }
        if whole >= 10 {
            // Waves are done; the events may still be on their way.
            net.progress();
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        wave += 1;
        net.send(&s, WAVE, "", ()).map_err(e2s)?;
        match net.recv_on(&s) {
            Ok(p) => {
                let sum: i32 = p.unpack("%d").map_err(|e| e.to_string())?;
                converse::input::out_line(&format!("wave {wave}: sum {sum} (want {want})"));
                // Only an internal process died: every back-end is still there.
                if sum == want {
                    whole += 1;
                } else if removed {
                    return Err(format!("wave {wave} summed to {sum} after recovery"));
                }
            }
            Err(TbonError::WaveLost { reason, .. }) => {
                lost += 1;
                converse::input::out_line(&format!("wave {wave} lost: {reason}"));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let after = net.topology();
    converse::input::out_line(&format!(
        "recovered: {lost} wave(s) lost, {whole} whole after the death; the tree has {} of {} \
         processes, orphans left: {:?}",
        after.num_nodes(),
        topo.num_nodes(),
        net.orphan_nodes()
    ));
    Ok(())
}
