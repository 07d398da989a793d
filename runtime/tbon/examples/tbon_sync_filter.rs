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

use converse_tbon::{
    self as tbon, topgen, MapPolicy, Options, TbonError, TFILTER_NULL, TFILTER_SUM,
};

const ANSWER: i32 = 100;

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        if pe.num_pes() < 9 {
            if pe.my_pe() == 0 {
                converse::input::error_line("tbon_sync_filter: needs +p9 (a 2x3 tree)");
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
        let opts = Options::default().policy(MapPolicy::InOrder);
        let failed = match tbon::attach(pe, opts, |_| {
            let spec = topgen::TreeSpec::Generic(vec![2, 3]);
            Ok(topgen::generate(&spec, &topgen::Placement::default())?)
        }) {
            Ok(mut net) => {
                let r = if net.is_front_end() {
                    front_end(&mut net, &library)
                } else if net.is_back_end() {
                    loop {
                        match net.recv() {
                            Ok((s, _)) => {
                                if let Err(e) = net.send(&s, ANSWER, "%d", 1) {
                                    break Err(e);
                                }
                            }
                            Err(e) => break Err(e),
                        }
                    }
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
            converse::input::error_line(&format!("tbon_sync_filter: {failed}"));
            pe.exit(1);
        }
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
