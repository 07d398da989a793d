//! `+machine si+ucx`, `si+ucx+tcp`, ...: shared memory (the SI layer) between the nodes of a
//! host, UCX between hosts. Each is the launcher session's combinator
//! ([`converse_bootstrap::compose::Both`]) over the SI layer's boot phases and this crate's
//! ([`UcxOpen`]) with the transports of the string after `si+`, so the composite of a
//! transport string is named `si+` and that string, as `si+tcp` is of `tcp`.
//!
//! There is none over `ucx+shm`: it reaches one host only, where SI already serves. Under
//! `si+ucx` and `si+ucx+all` UCX may still open its shared-memory transports, unused: the
//! composite sends to same-host peers through SI, and UCX makes an endpoint only on a pair's
//! first send.

use crate::layer::UcxOpen;
use crate::{KINDS, SI_NAMES};
use converse_bootstrap::compose::{self, Both};
use converse_bootstrap::session;
use converse_machine::{BootConfig, Layer, Machine, MachineError, NodeTable};
use converse_si::layer::SiOpen;

/// For `+machine`'s listing: what the composite is, its network part named by `net`.
macro_rules! summary {
    ($net:literal) => {
        concat!(
            "charmrun's processes: shared memory within a host, ",
            $net,
            " between hosts"
        )
    };
}

/// The composites, in the order of [`SI_NAMES`]: `SI_LAYERS[S]` is over `KINDS[K]`.
pub const SI_LAYERS: &[Layer] = &[
    composite::<0, 0>(summary!("UCX (UCX_TLS or all)")),
    composite::<1, 1>(summary!("UCX over TCP sockets")),
    composite::<3, 2>(summary!("UCX over InfiniBand/RoCE RC")),
    composite::<4, 3>(summary!("UCX over InfiniBand UD")),
    composite::<5, 4>(summary!("UCX (every transport)")),
];

/// The composite `SI_NAMES[S]` of SI and the transport string `KINDS[K]`.
const fn composite<const K: usize, const S: usize>(summary: &'static str) -> Layer {
    Layer {
        name: SI_NAMES[S],
        summary,
        boot: boot::<K, S>,
        launched: converse_bootstrap::client::LaunchEnv::present,
        settings: crate::SETTINGS,
        check: crate::layer::check_settings,
        describe: describe::<K>,
    }
}

fn boot<const K: usize, const S: usize>(
    cfg: &BootConfig,
) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<Both<SiOpen, UcxOpen<K>>>(SI_NAMES[S], cfg)
}

/// For the banner: the peers each part serves.
fn describe<const K: usize>(table: &NodeTable, node: usize) -> Option<String> {
    compose::describe("si", KINDS[K].name, table, node)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_composite_is_si_and_a_transport_string_that_leaves_the_host() {
        for l in super::SI_LAYERS {
            let net = l.name.strip_prefix("si+").unwrap_or_default();
            let kind = crate::KINDS.iter().find(|k| k.name == net);
            assert!(kind.is_some_and(|k| !k.one_host), "{}", l.name);
        }
        let names: Vec<&str> = super::SI_LAYERS.iter().map(|l| l.name).collect();
        assert_eq!(names, crate::SI_NAMES);
    }
}
