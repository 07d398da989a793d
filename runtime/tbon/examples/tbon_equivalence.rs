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

mod support;

use converse_tbon::{self as tbon, Options, SyncMode, TbonError, TFILTER_NULL};
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
        let usage = "tbon_equivalence [FILTER_LIBRARY] +pN";
        if support::refused(pe, "tbon_equivalence", 3, 1, usage) {
            return;
        }
        let library = support::filter_library(pe);
        let n = pe.num_pes();
        support::run_roles(
            pe,
            "tbon_equivalence",
            Options::default(),
            |_| support::two_levels(n),
            |net| front_end(net, &library),
            back_end,
        );
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
