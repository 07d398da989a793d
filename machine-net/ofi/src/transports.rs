//! One [`Layer`] per transport string (`ofi`, `ofi+tcp`, ...): the same layer, each with the
//! provider its name selects ([`crate::TRANSPORTS`]).

use crate::layer::{self, Choice};
use converse_bootstrap::client::LaunchEnv;
use converse_machine::{Layer, MachineError, NodeTable, Settings};

/// Parse the settings as boot would. (Every compiled-in layer's check runs whichever layer
/// is chosen, so an `ofi.provider` that contradicts one transport string is refused only by
/// that one's boot, not here.)
pub(crate) fn check(s: &Settings) -> Result<(), MachineError> {
    crate::EAGER_KIB.read_whole(s)?;
    crate::RX_POSTED.read_whole(s)?;
    Ok(())
}

/// For the banner: the provider the node uses.
fn describe(table: &NodeTable, node: usize) -> Option<String> {
    let entry = table.node(node)?;
    let i = crate::info::decode(&entry.addr).ok()?;
    Some(format!("libfabric provider {}", i.provider))
}

macro_rules! transports {
    ($($ty:ident $konst:ident = $name:literal $prov:expr, $summary:literal;)*) => {
        $(
            #[derive(Debug)]
            pub(crate) struct $ty;
            impl Choice for $ty {
                const NAME: &'static str = $name;
                const PROVIDER: Option<&'static str> = $prov;
            }
            const $konst: Layer = Layer {
                name: $name,
                summary: $summary,
                boot: layer::boot::<$ty>,
                launched: LaunchEnv::present,
                settings: crate::SETTINGS,
                check,
                describe,
            };
        )*
        /// The layers of this crate, one per transport string.
        pub const LAYERS: &[Layer] = &[$($konst),*];
    };
}

transports! {
    Any OFI = "ofi" None, "libfabric, the provider chosen by ofi.provider or fi_getinfo";
    Tcp OFI_TCP = "ofi+tcp" Some("tcp;ofi_rxm"), "libfabric's tcp provider under rxm";
    Shm OFI_SHM = "ofi+shm" Some("shm"), "libfabric's shared-memory provider (one host)";
    Verbs OFI_VERBS = "ofi+verbs" Some("verbs;ofi_rxm"), "libfabric's verbs provider under rxm (InfiniBand, RoCE)";
    Psm2 OFI_PSM2 = "ofi+psm2" Some("psm2"), "libfabric's psm2 provider (Omni-Path)";
    Psm3 OFI_PSM3 = "ofi+psm3" Some("psm3"), "libfabric's psm3 provider";
    Cxi OFI_CXI = "ofi+cxi" Some("cxi"), "libfabric's cxi provider (Slingshot)";
    Efa OFI_EFA = "ofi+efa" Some("efa"), "libfabric's efa provider (AWS EFA)";
    Sockets OFI_SOCKETS = "ofi+sockets" Some("sockets"), "libfabric's sockets reference provider";
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_transport_string_has_a_layer_of_its_name() {
        let names: Vec<&str> = super::LAYERS.iter().map(|l| l.name).collect();
        let known: Vec<&str> = crate::TRANSPORTS.iter().map(|t| t.0).collect();
        assert_eq!(names, known);
    }
}
