//! Bakes the build variant (conv-mach/variants/NAME.toml) into the runtime: its name, default
//! layer and the settings it changes. `conv-mach build NAME` sets CONV_MACH_VARIANT; a plain build is
//! the default variant.

use std::fmt::Write as _;

/// Layer features this crate may have; each maps to CARGO_FEATURE_<NAME>.
const LAYER_FEATURES: &[&str] = &["tcp", "udp", "si", "mpi", "ofi", "ucx"];

/// Layer features on by default: every variant has them, so they do not make a build "custom".
const BASE_FEATURES: &[&str] = &["tcp", "udp", "si"];

fn main() {
    println!("cargo:rerun-if-env-changed=CONV_MACH_VARIANT");
    let dir = conv_mach::variants_dir();
    println!("cargo:rerun-if-changed={}", dir.display());
    let enabled: Vec<&str> = LAYER_FEATURES
        .iter()
        .copied()
        .filter(|f| std::env::var_os(format!("CARGO_FEATURE_{}", f.to_uppercase())).is_some())
        .collect();
    let asked = std::env::var("CONV_MACH_VARIANT").ok();
    let name = asked.as_deref().unwrap_or(conv_mach::DEFAULT_VARIANT);
    let mut v = match conv_mach::load(&dir, name) {
        Ok(v) => v,
        Err(e) => panic!("CONV_MACH_VARIANT: {e}"),
    };
    if let Ok(path) = std::fs::read_dir(&dir) {
        for e in path.flatten() {
            println!("cargo:rerun-if-changed={}", e.path().display());
        }
    }
    let missing: Vec<&String> = v
        .features
        .iter()
        .filter(|f| !enabled.contains(&f.as_str()))
        .collect();
    if !missing.is_empty() {
        panic!(
            "variant '{}' needs the feature(s) {missing:?} of the converse crate; \
             build it with: cargo run -p conv-mach -- build {}",
            v.name, v.name
        );
    }
    // A plain build with extra layer features is not the default variant any more.
    let extra: Vec<&str> = enabled
        .iter()
        .copied()
        .filter(|f| !BASE_FEATURES.contains(f))
        .collect();
    if asked.is_none() && !extra.is_empty() {
        v.name = format!("custom({})", extra.join("+"));
    }
    let mut out = String::new();
    let _ = writeln!(out, "pub(crate) const NAME: &str = {:?};", v.name);
    let _ = writeln!(
        out,
        "pub(crate) const DEFAULT_LAYER: &str = {:?};",
        v.machine
    );
    let _ = writeln!(out, "pub(crate) const SETTINGS: &[(&str, &str)] = &[");
    for (k, val) in &v.settings {
        let _ = writeln!(out, "    ({k:?}, {val:?}),");
    }
    let _ = writeln!(out, "];");
    let path = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("variant.rs");
    std::fs::write(path, out).expect("OUT_DIR is writable");
}
