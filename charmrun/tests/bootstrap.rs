//! charmrun's side of the `Bootstrap` interface, driven by hand: three nodes in this process
//! (the embedded launcher), each with its own control connection, through the exchange, two
//! broadcasts from different roots, a barrier, and their exit.

use charmrun::client::Control;
use charmrun::launch::{start_embedded, NodeStart};
use converse_bootstrap::Bootstrap;
use std::time::Duration;

#[test]
fn every_node_gets_each_broadcast_from_its_root_in_order() {
    let mut opts = charmrun::opts::Opts::with_pes(3);
    opts.timeout = Duration::from_secs(60);
    let job = start_embedded(opts, vec![NodeStart::InProcess; 3]).expect("the launcher starts");
    let got: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let nodes: Vec<_> = job
            .envs()
            .iter()
            .map(|env| {
                s.spawn(move || {
                    let mut ctl = Control::connect(env).expect("connect");
                    let table = ctl
                        .exchange(format!("node {}", env.node).into_bytes())
                        .expect("exchange");
                    assert_eq!(table.num_nodes(), 3);
                    // Only the root's blob counts; the others' is not read.
                    let got = vec![
                        ctl.broadcast(1, b"from one").expect("broadcast 1"),
                        ctl.broadcast(0, &[0xab; 100_000]).expect("broadcast 2"),
                        ctl.broadcast(2, b"").expect("broadcast 3"),
                    ];
                    ctl.barrier().expect("barrier");
                    ctl.ending(0).expect("ending");
                    got
                })
            })
            .collect();
        nodes
            .into_iter()
            .map(|h| h.join().expect("node thread"))
            .collect()
    });
    for (node, g) in got.iter().enumerate() {
        assert_eq!(g.len(), 3, "node {node}");
        assert_eq!(g[0], b"from one", "node {node}");
        assert_eq!(g[1], vec![0xab; 100_000], "node {node}");
        assert!(g[2].is_empty(), "node {node}");
    }
    assert_eq!(job.wait(), 0, "the launcher's verdict");
}

#[test]
fn a_root_outside_the_job_is_refused() {
    let mut opts = charmrun::opts::Opts::with_pes(1);
    opts.timeout = Duration::from_secs(60);
    let job = start_embedded(opts, vec![NodeStart::InProcess]).expect("the launcher starts");
    let mut ctl = Control::connect(&job.envs()[0]).expect("connect");
    ctl.exchange(Vec::new()).expect("exchange");
    let e = ctl.broadcast(5, b"x").err().map(|e| e.to_string());
    assert!(e.as_deref().is_some_and(|e| e.contains('5')), "{e:?}");
    ctl.barrier().expect("barrier");
    ctl.ending(0).expect("ending");
    drop(ctl);
    assert_eq!(job.wait(), 0);
}
