//! A synchronization filter of the program's (MRNet's user-defined synchronization filters),
//! loaded from a shared library like a transformation filter: `Group` holds the packets that
//! come up until two have come, and gives them on as one wave, which `sum` adds.
//!
//! On a 2x3 tree each internal process gets three answers a round: it sends up the sum of
//! the first two and keeps the third for the next round; the front-end adds its two
//! children's sums. Two rounds of answers of 1 give three waves of 4: 2 + 2 from the first
//! round, then the kept answers pair with the second round's.
//!
//! ```text
//! cargo build --release --examples
//! target/release/charmrun +p9 target/release/examples/tbon_sync_filter
//! ```

mod support;

use converse_tbon::{
    self as tbon, topgen, MapPolicy, Options, TbonError, TFILTER_NULL, TFILTER_SUM,
};

const ANSWER: i32 = 100;

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        if support::refused(
            pe,
            "tbon_sync_filter",
            9,
            1,
            "tbon_sync_filter [FILTER_LIBRARY] +p9",
        ) {
            return;
        }
        let library = support::filter_library(pe);
        // The walk-through above is for a 2x3 tree: process i on PE i.
        let opts = Options::default().policy(MapPolicy::InOrder);
        let tree = |_: &converse::Pe| {
            let spec = topgen::TreeSpec::Generic(vec![2, 3]);
            Ok(topgen::generate(&spec, &topgen::Placement::default())?)
        };
        let answer = |net: &mut tbon::Network<'_>| loop {
            let (s, _) = net.recv()?;
            net.send(&s, ANSWER, "%d", 1)?;
        };
        support::run_roles(
            pe,
            "tbon_sync_filter",
            opts,
            tree,
            |net| front_end(net, &library),
            answer,
        );
    })
}

fn front_end(net: &mut tbon::Network<'_>, library: &str) -> Result<(), TbonError> {
    let group = net.load_filter(library, "Group")?;
    let comm = net.broadcast_communicator();
    let s = net.new_stream_sync(&comm, TFILTER_SUM, group, TFILTER_NULL)?;
    let mut waves = Vec::new();
    for round in 1..=2 {
        net.send(&s, ANSWER, "", ())?;
        // Round 1 gives one wave; round 2, two (the kept answers pair with the new ones).
        for _ in 0..round {
            waves.push(net.recv_on(&s)?.unpack::<i32>("%d")?);
        }
    }
    converse::input::out_line(&format!(
        "group synchronization: waves {waves:?} from {} answers",
        2 * comm.size()
    ));
    Ok(())
}
