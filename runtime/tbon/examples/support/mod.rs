//! What the examples that lay a tree over their own job share (not an example itself: cargo
//! takes `examples/*.rs` and `examples/*/main.rs` only).

// Each example uses the part it needs.
#![allow(dead_code)]

use converse::Pe;
use converse_tbon::{self as tbon, topgen, topology_file, Network, Options, TbonError, Topology};

/// Lay a tree over this job and run this PE's part of the example `name`: `front` on the
/// front-end, `back` on each back-end, internal processes serving until the shutdown. The
/// front-end's return ends the job (0); a failure anywhere is said by PE 0 in one line, and
/// the job ends with 1.
pub(crate) fn run_roles(
    pe: &mut Pe,
    name: &str,
    opts: Options,
    tree: impl FnOnce(&Pe) -> Result<Topology, TbonError>,
    front: impl FnOnce(&mut Network<'_>) -> Result<(), TbonError>,
    back: impl FnOnce(&mut Network<'_>) -> Result<(), TbonError>,
) {
    let failed = match tbon::attach(pe, opts, tree) {
        Ok(mut net) => {
            let r = if net.is_front_end() {
                front(&mut net)
            } else if net.is_back_end() {
                back(&mut net)
            } else {
                net.wait_for_shutdown()
            };
            match r {
                Ok(()) | Err(TbonError::ShutDown) => {
                    if net.is_front_end() {
                        net.exit(0);
                    }
                    return;
                }
                Err(e) => e,
            }
        }
        Err(e) => e,
    };
    if pe.my_pe() == 0 {
        converse::input::error_line(&format!("{name}: {failed}"));
        pe.exit(1);
    }
}

/// Refuse a job of fewer than `min` PEs, or more than `max_args` arguments: every PE sees
/// the same, so all start nothing; PE 0 says why in one line (with `usage`) and ends the job
/// with 2. Whether it refused.
pub(crate) fn refused(pe: &mut Pe, name: &str, min: usize, max_args: usize, usage: &str) -> bool {
    let n = pe.num_pes();
    let why = if let Some(extra) = pe.args().get(1 + max_args) {
        format!("unexpected argument {extra:?}")
    } else if n < min {
        format!("needs +p{min} or more, got +p{n}")
    } else {
        return false;
    };
    if pe.my_pe() == 0 {
        converse::input::error_line(&format!("{name}: {why} (usage: {usage})"));
        pe.exit(2);
    }
    true
}

/// A two-level tree over `n` PEs (at least 3): as many internal processes as the square root
/// of the rest, the back-ends shared among them.
pub(crate) fn two_levels(n: usize) -> Result<Topology, TbonError> {
    let fanout = ((n.saturating_sub(1)) as f64).sqrt().floor().max(1.0) as usize;
    let spec = topgen::TreeSpec::Generic(vec![fanout, n.saturating_sub(1 + fanout) / fanout]);
    Ok(topgen::generate(&spec, &topgen::Placement::default())?)
}

/// The filter library: the first argument, else `libtbon_filters.so` next to the program.
pub(crate) fn filter_library(pe: &Pe) -> String {
    pe.args().get(1).cloned().unwrap_or_else(|| {
        let me = std::env::current_exe().unwrap_or_default();
        me.with_file_name("libtbon_filters.so")
            .to_string_lossy()
            .into_owned()
    })
}

/// A tree spec (`g:2x3`) or a topology file.
pub(crate) fn load(tree: &str) -> Result<Topology, String> {
    let path = std::path::Path::new(tree);
    let t = if path.exists() {
        topology_file::load(path)
    } else {
        topgen::TreeSpec::parse(tree).and_then(|s| topgen::generate(&s, &Default::default()))
    };
    t.map_err(|e| e.to_string())
}
