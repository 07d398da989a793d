//! Degenerate networks on an in-process job: refused with an error, never a hang. Each job
//! runs on a thread of its own and the test waits for it a bounded time.

use converse_tbon::{self as tbon, topology_file, Options, SyncMode, TbonError, TFILTER_SUM};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

/// Run `start` on every PE of an in-process job of `pes` PEs; what PE 0 records, or a failure
/// if the job does not end within a minute.
fn job(pes: usize, start: fn(&mut converse::Pe) -> Option<String>) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let seen: Mutex<Option<String>> = Mutex::new(None);
        let ran = converse::Runtime::builder()
            .pes(pes)
            .layer("local")
            .quiet(true)
            .build()
            .and_then(|rt| {
                rt.run(|pe| {
                    if let Some(s) = start(pe) {
                        if let Ok(mut g) = seen.lock() {
                            *g = Some(s);
                        }
                    }
                })
            });
        let seen = seen.into_inner().ok().flatten();
        let _ = tx.send(match ran {
            Ok(_) => seen.unwrap_or_else(|| "PE 0 recorded nothing".into()),
            Err(e) => format!("the job failed: {e}"),
        });
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the job did not end within 60 s"))
}

#[test]
fn attaching_a_tree_without_back_ends_is_an_error_on_every_pe() {
    let got = job(2, |pe| {
        let me = pe.my_pe();
        let what = match tbon::attach(pe, Options::default(), |_| {
            Ok(topology_file::parse("localhost:0 => ;")?)
        }) {
            Ok(_) => "attached".to_string(),
            Err(e) => e.to_string(),
        };
        if me == 0 {
            pe.exit(0);
            return Some(what);
        }
        None
    });
    assert_eq!(
        got,
        "the tree is the front-end localhost:0 alone: a tree overlay needs at least one back-end"
    );
}

#[test]
fn a_stream_over_an_empty_communicator_is_refused() {
    let got = job(3, |pe| {
        let me = pe.my_pe();
        let net = tbon::attach(pe, Options::default(), |_| {
            Ok(topology_file::parse(
                "localhost:0 => localhost:1 localhost:2 ;",
            )?)
        });
        let mut net = match net {
            Ok(n) => n,
            Err(e) => return (me == 0).then(|| format!("attach: {e}")),
        };
        if !net.is_front_end() {
            let _ = net.wait_for_shutdown();
            return None;
        }
        let empty = net.new_communicator([]);
        let outcome = empty.and_then(|c| {
            net.new_stream(&c, TFILTER_SUM, SyncMode::WaitForAll, 0)
                .map(|_| ())
        });
        let what = match outcome {
            Ok(()) => "a stream was made".to_string(),
            Err(e @ TbonError::Usage(_)) => e.to_string(),
            Err(e) => format!("another error: {e}"),
        };
        net.exit(0);
        Some(what)
    });
    assert_eq!(
        got,
        "a stream needs at least one end-point; the communicator is empty"
    );
}
