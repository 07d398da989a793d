//! The in-process check of the `Machine` contract (`converse_machine::check`) on the UCX
//! layers this host can run (tcp, shared memory): each node a thread of this test process,
//! started by charmrun's embedded launcher, as `layer_check.rs` does for the
//! other launched layers.

#![cfg(feature = "ucx")]

use charmrun::launch::{start_embedded, NodeStart};
use converse_machine::{BootConfig, LaunchEnv, Layer};
use std::time::Duration;

fn layer(name: &str) -> &'static Layer {
    converse_ucx::LAYERS
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no layer {name}"))
}

/// Run the check on `name` with `n` nodes started by the embedded launcher.
fn check_launched(name: &str, n: usize, settings: &[(&str, &str)]) {
    let layer = layer(name);
    let mut opts = charmrun::opts::Opts::with_pes(n);
    opts.timeout = Duration::from_secs(60);
    let plan = (0..n).map(|_| NodeStart::InProcess).collect();
    let job = start_embedded(opts, plan).expect("the embedded launcher starts");
    let envs: Vec<LaunchEnv> = job.envs().to_vec();
    let report = converse_machine::check::run(layer, n, |i| {
        let mut cfg = BootConfig::new(n);
        cfg.launch = envs.get(i).cloned();
        for (k, v) in settings {
            cfg.settings.set(*k, *v);
        }
        cfg
    });
    if report.is_err() {
        job.cancel("the check failed");
    }
    let code = job.wait();
    let report = report.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.nodes, n);
    assert_eq!(
        report.messages,
        (n * (n - 1)) as u64 * converse_machine::check::PER_PAIR
    );
    assert!(report.woken, "every node has a waker, and it works");
    assert_eq!(code, 0, "the launcher's verdict");
}

#[test]
fn ucx_tcp_keeps_the_contract() {
    check_launched("ucx+tcp", 4, &[]);
}

#[test]
fn ucx_shm_keeps_the_contract() {
    check_launched("ucx+shm", 4, &[]);
}

#[test]
fn the_tls_setting_overrides_the_layer_names_set() {
    check_launched("ucx+all", 3, &[("ucx.tls", "tcp,self")]);
}

#[test]
fn a_bad_transport_list_is_refused() {
    let mut s = converse_machine::Settings::default();
    s.set("ucx.tls", "tcp;rm -rf");
    assert!((layer("ucx").check)(&s).is_err());
    s.set("ucx.tls", "tcp,self");
    assert!((layer("ucx").check)(&s).is_ok());
}

#[test]
fn every_name_has_a_layer() {
    let names: Vec<&str> = converse_ucx::LAYERS.iter().map(|l| l.name).collect();
    assert_eq!(names, converse_ucx::NAMES);
}
