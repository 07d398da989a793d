//! `+machine si+ofi`, `si+ofi+tcp`, ...: shared memory (the SI layer) between the nodes of a
//! host, libfabric between hosts. Each is the launcher session's combinator
//! ([`converse_bootstrap::compose::Both`]) over the SI layer's boot phases and this crate's
//! ([`OfiOpen`]) with the provider of the transport string after `si+`, so the composite of a
//! transport string is named `si+` and that string, as `si+tcp` is of `tcp`.
//!
//! There is none over `ofi+shm`: its provider reaches one host only, where SI already serves.

use crate::layer::{Choice, OfiOpen};
use crate::transports::{Any, Cxi, Efa, Psm2, Psm3, Sockets, Tcp, Verbs};
use converse_bootstrap::compose::{self, Both};
use converse_bootstrap::session;
use converse_machine::{BootConfig, Layer, Machine, MachineError};
use converse_si::layer::SiOpen;

/// Boot the composite of SI and transport string `C`, named `name`.
fn boot<C: Choice>(
    name: &'static str,
    cfg: &BootConfig,
) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    session::boot::<Both<SiOpen, OfiOpen<C>>>(name, cfg)
}

macro_rules! composites {
    ($($ty:ident $konst:ident = $name:literal over $net:literal, $what:literal;)*) => {
        $(
            const $konst: Layer = Layer {
                name: $name,
                summary: concat!(
                    "charmrun's processes: shared memory within a host, ",
                    $what,
                    " between hosts"
                ),
                boot: |cfg| boot::<$ty>($name, cfg),
                launched: converse_machine::launch::LaunchEnv::present,
                settings: crate::SETTINGS,
                check: crate::transports::check,
                describe: |table, node| compose::describe("si", $net, table, node),
            };
        )*
        /// The composites of this crate, one per transport string that reaches other hosts,
        /// in the order of [`crate::SI_NAMES`].
        pub const SI_LAYERS: &[Layer] = &[$($konst),*];
    };
}

composites! {
    Any SI_OFI = "si+ofi" over "ofi", "libfabric (ofi.provider or fi_getinfo's choice)";
    Tcp SI_OFI_TCP = "si+ofi+tcp" over "ofi+tcp", "libfabric's tcp provider under rxm";
    Verbs SI_OFI_VERBS = "si+ofi+verbs" over "ofi+verbs", "libfabric's verbs provider";
    Psm2 SI_OFI_PSM2 = "si+ofi+psm2" over "ofi+psm2", "libfabric's psm2 provider";
    Psm3 SI_OFI_PSM3 = "si+ofi+psm3" over "ofi+psm3", "libfabric's psm3 provider";
    Cxi SI_OFI_CXI = "si+ofi+cxi" over "ofi+cxi", "libfabric's cxi provider";
    Efa SI_OFI_EFA = "si+ofi+efa" over "ofi+efa", "libfabric's efa provider";
    Sockets SI_OFI_SOCKETS = "si+ofi+sockets" over "ofi+sockets", "libfabric's sockets provider";
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_composite_name_has_a_layer_of_its_name() {
        let names: Vec<&str> = super::SI_LAYERS.iter().map(|l| l.name).collect();
        assert_eq!(names, crate::SI_NAMES);
    }
}
