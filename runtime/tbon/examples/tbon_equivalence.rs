//! The paper's equivalence classes (Paradyn's start-up, section 3): every back-end sums up what
//! it found (here, the names of the functions of "its" executable) in a checksum; the
//! `EquivClass` filter, loaded from a shared library, bins back-ends by checksum on the way up;
//! the front-end then asks one representative per class for the whole list, instead of every
//! back-end.
//!
//! ```text
//! cargo build --release --examples
//! target/release/examples/tbon_equivalence +p13                  # in-process layer
//! target/release/charmrun +p13 target/release/examples/tbon_equivalence
//! ```
//! The filter library is looked for next to the program (`libtbon_filters.so`), or given as
//! the first argument.

use converse_tbon::{self as tbon, topgen, Options, SyncMode, TbonError, TFILTER_NULL};
use std::hash::{Hash, Hasher};

const REPORT: i32 = 100;
const SEND_ALL: i32 = 101;

/// The functions back-end `rank` finds: three kinds of executable among the back-ends.
fn functions(rank: u32) -> Vec<String> {
    let kind = rank % 3;
    (0..10 + 5 * kind)
        .map(|i| format!("solver{kind}_fn{i}"))
        .collect()
}

fn checksum(items: &[String]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    items.hash(&mut h);
    h.finish()
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let n = pe.num_pes();
        // Every PE reads the same arguments, so all refuse them alike and start nothing; PE 0
        // alone says why, on one line, and ends the job with 2.
        let refused = if let Some(extra) = pe.args().get(2) {
            Some(format!("unexpected argument {extra:?}"))
        } else if n < 3 {
            // The tree below needs a front-end, an internal process and a back-end (and
            // n - 1 - fanout must not go below zero).
            Some(format!("needs +p3 or more, got +p{n}"))
        } else {
            None
        };
        if let Some(why) = refused {
            if pe.my_pe() == 0 {
                converse::input::error_line(&format!(
                    "tbon_equivalence: {why} (usage: tbon_equivalence [FILTER_LIBRARY] +pN)"
                ));
                pe.exit(2);
            }
            return;
        }
        let library = pe.args().get(1).cloned().unwrap_or_else(|| {
            let me = std::env::current_exe().unwrap_or_default();
            me.with_file_name("libtbon_filters.so")
                .to_string_lossy()
                .into_owned()
        });
        // A two-level tree over the job: as many internal processes as the square root.
        let fanout = ((n.saturating_sub(1)) as f64).sqrt().floor().max(1.0) as usize;
        let spec = topgen::TreeSpec::Generic(vec![fanout, (n - 1 - fanout) / fanout.max(1)]);
        let failed = match tbon::attach(pe, Options::default(), |_| {
            Ok(topgen::generate(&spec, &topgen::Placement::default())?)
        }) {
            Ok(mut net) => {
                let r = if net.is_front_end() {
                    front_end(&mut net, &library)
                } else if net.is_back_end() {
                    back_end(&mut net)
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
            converse::input::error_line(&format!("tbon_equivalence: {failed}"));
            pe.exit(1);
        }
    })
}

fn front_end(net: &mut tbon::Network<'_>, library: &str) -> Result<(), TbonError> {
    let filter = net.load_filter(library, "EquivClass")?;
    let comm = net.broadcast_communicator();
    let s = net.new_stream(&comm, filter, SyncMode::WaitForAll, TFILTER_NULL)?;
    net.send(&s, REPORT, "", ())?;
    let (sums, counts, members): (Vec<u64>, Vec<u32>, Vec<u32>) =
        net.recv_on(&s)?.unpack("%auld %aud %aud")?;
    converse::input::out_line(&format!(
        "{} back-ends in {} equivalence classes",
        members.len(),
        sums.len()
    ));
    let mut at = 0;
    for (sum, count) in sums.iter().zip(&counts) {
        let class = &members[at..at + *count as usize];
        at += *count as usize;
        // One representative tells everything for its whole class.
        net.send_to_backend(class[0], SEND_ALL, "", ())?;
        let (_, p) = net.recv()?;
        let names: Vec<String> = p.unpack("%as")?;
        let ok = if checksum(&names) == *sum {
            "checksum matches"
        } else {
            "CHECKSUM DIFFERS"
        };
        converse::input::out_line(&format!(
            "class {sum:016x}: {} back-ends (representative {}), {} functions, {ok}",
            class.len(),
            class[0],
            names.len()
        ));
    }
    Ok(())
}

fn back_end(net: &mut tbon::Network<'_>) -> Result<(), TbonError> {
    let rank = net.rank().unwrap_or(0);
    let mine = functions(rank);
    loop {
        let (s, p) = net.recv()?;
        match p.tag() {
            REPORT => net.send(
                &s,
                REPORT,
                "%auld %aud %aud",
                (vec![checksum(&mine)], vec![1u32], vec![rank]),
            )?,
            SEND_ALL => net.send(&s, SEND_ALL, "%as", mine.clone())?,
            _ => {}
        }
    }
}
