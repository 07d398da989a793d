//! The in-process check of the `Machine` contract (`converse_machine::check`) on every layer compiled
//! in: each node a thread of this test process, the launched layers started by charmrun's
//! embedded launcher. Seconds per layer, next to the whole-job suites in the other files.

use charmrun::launch::{start_embedded, NodeStart};
use converse_machine::{BootConfig, LaunchEnv};
use std::time::Duration;

/// Run the check on `layer` with `n` nodes started by the embedded launcher, and check what
/// the launcher says the job's exit code was.
fn check_launched(layer: &str, n: usize) {
    check_launched_with(layer, n, &[]);
}

/// The same, with `settings` given to every node.
fn check_launched_with(layer: &str, n: usize, settings: &[(&str, &str)]) {
    let layer = converse::find_layer(layer).expect("layer compiled in");
    let mut opts = charmrun::opts::Opts::with_pes(n);
    opts.timeout = Duration::from_secs(30);
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
    // Direct copies: the shared-memory layer (alone or in a composite) offers them, and they
    // work; the network layers do not.
    assert_eq!(
        report.rma,
        layer.name.starts_with("si"),
        "direct copies offered"
    );
    assert_eq!(code, 0, "the launcher's verdict");
}

#[test]
fn local_keeps_the_contract() {
    let r =
        converse_machine::check::run(&converse_machine::local::LAYER, 5, |_| BootConfig::new(5))
            .expect("check");
    assert_eq!(r.messages, 5 * 4 * converse_machine::check::PER_PAIR);
    assert!(r.woken, "every node has a waker, and it works");
    assert!(r.rma, "every node offers direct copies, and they work");
}

#[test]
fn tcp_keeps_the_contract() {
    check_launched("tcp", 4);
}

#[test]
fn udp_keeps_the_contract() {
    check_launched("udp", 4);
}

#[test]
fn si_keeps_the_contract() {
    check_launched("si", 4);
}

#[test]
fn si_tcp_keeps_the_contract() {
    check_launched("si+tcp", 4);
}

#[test]
fn si_udp_keeps_the_contract() {
    check_launched("si+udp", 4);
}

#[cfg(feature = "ofi")]
#[test]
fn ofi_tcp_keeps_the_contract() {
    check_launched("ofi+tcp", 4);
}

// Not `ofi+shm`: the check runs its nodes as threads of this one process, and with four shm
// endpoints in one process the provider stopped completing messages after a few hundred
// (machine-net/ofi/README.md); its whole-job suite (tests/ofi.rs) runs a process per node.

/// The UCX layers this host can run: tcp, shared memory, and `ucx+all` narrowed by its
/// setting.
#[cfg(feature = "ucx")]
mod ucx {
    use super::check_launched_with;

    #[test]
    fn ucx_tcp_keeps_the_contract() {
        check_launched_with("ucx+tcp", 4, &[]);
    }

    #[test]
    fn ucx_shm_keeps_the_contract() {
        check_launched_with("ucx+shm", 4, &[]);
    }

    #[test]
    fn the_tls_setting_overrides_the_layer_names_set() {
        check_launched_with("ucx+all", 3, &[("ucx.tls", "tcp,self")]);
    }

    #[test]
    fn a_bad_transport_list_is_refused() {
        let layer = converse::find_layer("ucx").expect("compiled in");
        let mut s = converse_machine::Settings::default();
        s.set("ucx.tls", "tcp;rm -rf");
        assert!((layer.check)(&s).is_err());
        s.set("ucx.tls", "tcp,self");
        assert!((layer.check)(&s).is_ok());
    }

    #[test]
    fn every_name_has_a_layer() {
        let names: Vec<&str> = converse_ucx::LAYERS.iter().map(|l| l.name).collect();
        assert_eq!(names, converse_ucx::NAMES);
    }
}

/// The composites over the fabric layers: on one host every peer is SI's, so this checks the
/// composite's start-up with the fabric part open and idle (tests/composite.rs runs them
/// across hosts).
#[cfg(feature = "ofi")]
#[test]
fn si_ofi_tcp_keeps_the_contract() {
    check_launched("si+ofi+tcp", 4);
}

#[cfg(feature = "ucx")]
#[test]
fn si_ucx_tcp_keeps_the_contract() {
    check_launched("si+ucx+tcp", 4);
}
