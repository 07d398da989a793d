//! The layers compiled into this program, and choosing one by name (`+machine NAME`).
//!
//! Adding a layer is one line in [`COMPILED`], behind its cargo feature.

use crate::error::RuntimeError;
use converse_machine::Layer;

/// Every layer name the project knows, compiled in or not, so that a name of a layer this
/// build lacks gets a different error from a misspelt one.
pub(crate) const KNOWN: &[&str] = &[
    "local", "tcp", "udp", "si", "mpi", "si+tcp", "si+udp", "si+mpi",
];

/// The layers compiled into this program, in order of preference.
pub(crate) const COMPILED: &[Layer] = &[
    converse_machine::local::LAYER,
    #[cfg(feature = "tcp")]
    converse_net::tcp::LAYER,
    #[cfg(feature = "udp")]
    converse_net::udp::LAYER,
    #[cfg(feature = "si")]
    converse_si::LAYER,
    #[cfg(feature = "mpi")]
    converse_mpi::LAYER,
];

/// The fabric layers compiled in, each a list of layers, one per transport string
/// (`ofi+tcp`, `ofi+shm`, ...: the same layer with the provider its name selects; `ucx+tcp`,
/// ... with UCX's transports); after the others in preference, so a fabric is used when named
/// (`+machine`, or a variant's default).
const FABRICS: &[&[Layer]] = &[
    #[cfg(feature = "ofi")]
    converse_ofi::LAYERS,
    #[cfg(feature = "ucx")]
    converse_ucx::LAYERS,
];

/// The composites over the fabric layers compiled in (`si+ofi`, `si+ofi+tcp`, ..., `si+ucx`,
/// `si+ucx+tcp`, ...: shared memory within a host, the fabric between hosts), each list in
/// its crate's order; last in preference, as the fabrics are, so they run when named.
const FABRIC_COMPOSED: &[&[Layer]] = &[
    #[cfg(all(feature = "si", feature = "ofi"))]
    converse_ofi::SI_LAYERS,
    #[cfg(all(feature = "si", feature = "ucx"))]
    converse_ucx::SI_LAYERS,
];

/// Every layer name the project knows: [`KNOWN`], the fabric layers' transport strings and
/// their composites' names.
fn known() -> impl Iterator<Item = &'static str> {
    KNOWN
        .iter()
        .copied()
        .chain(converse_ofi::TRANSPORTS.iter().map(|t| t.0))
        .chain(converse_ucx::NAMES.iter().copied())
        .chain(converse_ofi::SI_NAMES.iter().copied())
        .chain(converse_ucx::SI_NAMES.iter().copied())
}

/// The composite layers compiled in (one job over several transports, each peer reached by
/// one of them), in order of preference: preferred to [`COMPILED`] under a launcher, so a
/// program with the SI and TCP layers runs on `si+tcp` under charmrun without `+machine`
/// (shared memory inside each host, TCP between hosts).
pub(crate) const COMPOSED: &[Layer] = &[
    #[cfg(all(feature = "si", feature = "tcp"))]
    converse_net::multi::SI_TCP,
    #[cfg(all(feature = "si", feature = "udp"))]
    converse_net::multi::SI_UDP,
    #[cfg(all(feature = "si", feature = "mpi"))]
    converse_mpi::pshm::SI_MPI,
];

/// Parse every compiled-in layer's settings (see [`Layer::check`]): a malformed value is
/// refused whichever layer runs.
///
/// # Errors
/// The first layer's that refuses one.
pub(crate) fn check_values(
    s: &converse_machine::Settings,
) -> Result<(), converse_machine::MachineError> {
    // Every declared setting's type and bounds (a layer not compiled in too), then what a
    // compiled-in layer checks across its settings.
    settings()
        .into_iter()
        .try_for_each(|g| converse_machine::check_declared(g, s))?;
    all().try_for_each(|l| (l.check)(s))
}

/// `+settings`: every setting this program knows, a line each (key, then what it sets, its
/// bounds and default), from the declarations.
pub(crate) fn listing() -> String {
    settings()
        .into_iter()
        .flat_map(|g| g.iter())
        .map(|spec| format!("{:<22} {}\n", spec.key, spec.describe()))
        .collect()
}

/// Every layer compiled in, composites first (those over a fabric after the fabrics).
fn all() -> impl Iterator<Item = &'static Layer> {
    COMPOSED
        .iter()
        .chain(COMPILED)
        .chain(FABRICS.iter().flat_map(|f| f.iter()))
        .chain(FABRIC_COMPOSED.iter().flat_map(|f| f.iter()))
}

/// The layer to run on when `+machine` is not given: if a launcher started this process, the
/// variant's default layer when it is one that launcher starts, else the first compiled-in
/// layer it starts (a composite first); without a launcher, the variant's default.
///
/// # Errors
/// As [`find`], for the variant's default.
pub(crate) fn choose(default: &str) -> Result<&'static Layer, RuntimeError> {
    let default = find(default)?;
    if (default.launched)() {
        return Ok(default);
    }
    if let Some(l) = all().find(|l| (l.launched)()) {
        return Ok(l);
    }
    // Started by mpirun without the MPI layer: every rank would run alone as a one-PE job.
    if converse_mpi::launcher_env::launched() {
        if let Some((n, var)) = converse_mpi::launcher_env::announced_size().filter(|s| s.0 > 1) {
            return Err(RuntimeError::Layer(format!(
                "started by an MPI launcher ({var}={n}) but this program has no MPI layer \
                 (compiled in: {}); build the mpi variant (cargo run -p conv-mach -- build mpi)",
                names()
            )));
        }
    }
    Ok(default)
}

/// The `converse` features a known layer's name needs, as cargo takes them: `ofi+tcp` is the
/// `ofi` layer on libfabric's tcp provider, `si+mpi` two layers, `si+ofi+tcp` two (what
/// follows a fabric's name is its protocol, not a layer).
fn features_of(name: &str) -> String {
    let mut parts = Vec::new();
    for p in name.split('+') {
        parts.push(format!("converse/{p}"));
        if matches!(p, "ofi" | "ucx") {
            break;
        }
    }
    parts.join(",")
}

/// The layer called `name`.
///
/// # Errors
/// [`RuntimeError::Layer`] saying whether the name is unknown or the layer was not compiled in.
pub(crate) fn find(name: &str) -> Result<&'static Layer, RuntimeError> {
    if let Some(l) = all().find(|l| l.name == name) {
        return Ok(l);
    }
    let compiled = names();
    if known().any(|k| k == name) {
        Err(RuntimeError::Layer(format!(
            "layer '{name}' is not compiled into this program (compiled in: {compiled}); \
             build it with `cargo build --release --features {}` (a crate of your own, or this \
             workspace), or a variant that has it (`conv-mach list`)",
            features_of(name)
        )))
    } else {
        Err(RuntimeError::Layer(format!(
            "unknown layer '{name}'{} (known layers: {}; compiled in: {compiled})",
            converse_machine::suggest::hint(name, known()),
            known().collect::<Vec<_>>().join(", ")
        )))
    }
}

/// For the banner: what the layer called `layer` says of how node `node` reaches its peers
/// ([`Layer::describe`]: a composite's transports), if anything.
pub(crate) fn describe(
    layer: &str,
    table: &converse_machine::NodeTable,
    node: usize,
) -> Option<String> {
    all()
        .find(|l| l.name == layer)
        .and_then(|l| (l.describe)(table, node))
}

/// Every setting a key may name: the runtime's, each compiled-in layer's, and the MPI layer's
/// even where it is not compiled in (a variant file for it is still checked).
pub(crate) fn settings() -> Vec<&'static [converse_machine::SettingSpec]> {
    let mut groups = vec![crate::scheduler::SETTINGS];
    let extra = [
        converse_mpi::SETTINGS,
        converse_ofi::SETTINGS,
        converse_ucx::SETTINGS,
    ];
    // The fabric layers declare theirs in `extra` whether compiled in or not: the same order
    // in every build (README's table).
    for g in COMPOSED
        .iter()
        .chain(COMPILED)
        .map(|l| l.settings)
        .chain(extra)
    {
        let known = |x: &&[converse_machine::SettingSpec]| x.first().map(|s| s.key);
        if !g.is_empty() && !groups.iter().any(|x| known(x) == known(&g)) {
            groups.push(g);
        }
    }
    groups
}

/// Names of the compiled-in layers, comma-separated (the composites are named by
/// `+machine`'s errors and the README).
pub(crate) fn names() -> String {
    COMPILED
        .iter()
        .chain(FABRICS.iter().flat_map(|f| f.iter()))
        .map(|l| l.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_is_always_there() {
        assert_eq!(find("local").map(|l| l.name).ok(), Some("local"));
    }

    #[test]
    fn composites_are_found_by_name_and_come_first_under_a_launcher() {
        if cfg!(all(feature = "si", feature = "tcp")) {
            assert_eq!(find("si+tcp").map(|l| l.name).ok(), Some("si+tcp"));
            assert_eq!(all().next().map(|l| l.name), Some("si+tcp"));
        }
        let e = find("si+xyz")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("si+tcp, si+udp, si+mpi"), "{e}");
    }

    #[test]
    fn a_fabric_composite_needs_si_and_its_fabric_only() {
        assert_eq!(features_of("si+ofi+tcp"), "converse/si,converse/ofi");
        assert_eq!(features_of("si+ucx"), "converse/si,converse/ucx");
        assert_eq!(features_of("ofi+shm"), "converse/ofi");
        assert_eq!(features_of("si+tcp"), "converse/si,converse/tcp");
        for name in converse_ofi::SI_NAMES.iter().chain(converse_ucx::SI_NAMES) {
            assert!(known().any(|k| k == *name), "{name}");
            if cfg!(all(feature = "si", feature = "ofi", feature = "ucx")) {
                assert_eq!(find(name).map(|l| l.name).ok(), Some(*name));
            }
        }
    }

    #[test]
    fn errors_tell_missing_from_unknown() {
        let e = find("nope")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("unknown layer 'nope'"), "{e}");
        if !COMPILED.iter().any(|l| l.name == "mpi") {
            let e = find("mpi").err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("not compiled into this program"), "{e}");
            assert!(e.contains("--features converse/"), "{e}");
        }
    }

    /// README's table of settings is made from the declarations: it fails when one changes
    /// and README does not (run the test with `CONVERSE_WRITE_README=1` to rewrite it).
    #[test]
    fn readme_lists_every_setting_as_declared() {
        if !cfg!(all(feature = "tcp", feature = "udp", feature = "si")) {
            return;
        }
        let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let text = std::fs::read_to_string(readme).expect("README.md");
        let (begin, end) = (
            "<!-- settings: made from the declarations (runtime/src/layers.rs) -->\n",
            "<!-- end of settings -->",
        );
        let table = converse_machine::markdown_table(&settings());
        let (Some(a), Some(b)) = (text.find(begin), text.find(end)) else {
            panic!("README.md has no settings table between {begin:?} and {end:?}");
        };
        let now = &text[a + begin.len()..b];
        if now != table && std::env::var_os("CONVERSE_WRITE_README").is_some() {
            let new = format!("{}{table}{}", &text[..a + begin.len()], &text[b..]);
            std::fs::write(readme, new).expect("README.md written");
            return;
        }
        assert_eq!(
            now, table,
            "README.md's settings table differs from the declarations"
        );
    }

    #[test]
    fn the_listing_names_every_setting_once_with_its_default() {
        let l = listing();
        for g in settings() {
            for spec in g {
                assert_eq!(
                    l.lines()
                        .filter(|x| x.split(' ').next() == Some(spec.key))
                        .count(),
                    1,
                    "{}\n{l}",
                    spec.key
                );
            }
        }
        assert!(l.contains("default"), "{l}");
    }

    #[test]
    fn every_variant_sets_only_declared_settings() {
        let dir = conv_mach::variants_dir();
        let names = conv_mach::list(&dir).expect("variants");
        assert!(names.len() >= 5);
        for name in names {
            let v = conv_mach::load(&dir, &name).expect("variant loads");
            let mut s = converse_machine::Settings::default();
            for (k, val) in &v.settings {
                s.set(k, val);
            }
            if let Err(e) = s.check_known(&settings()).and_then(|()| check_values(&s)) {
                panic!("variant {name}: {e}");
            }
        }
    }
}
