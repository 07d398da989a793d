//! With the `ofi` feature: libfabric's bindings, generated from the installed headers (as
//! rsmpi's are from MPI's), and the link line. Without it, nothing: the crate is then only its
//! settings and names.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/sys/wrapper.h");
    #[cfg(feature = "ofi")]
    generate();
}

#[cfg(feature = "ofi")]
fn generate() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // libfabric's calls on an object (fi_tsend, fi_cq_read, fi_close, ...) are `static inline`
    // functions calling through the object's table of operations: bindgen gives the tables,
    // and src/sys.rs writes those few calls in Rust. The five exported functions it needs
    // (fi_getinfo, fi_fabric, fi_dupinfo, fi_freeinfo, fi_strerror) are looked up when the
    // layer first boots (src/sys.rs, `lib`), not linked: a program of a build with the layer
    // that runs on another one never loads libfabric, whose Debian build pulls in
    // libinfinipath, whose constructor spends ~0.1 s of CPU calibrating a clock.
    let bindings = bindgen::Builder::default()
        .header("src/sys/wrapper.h")
        .allowlist_type("fi_.*|fid_.*|fid")
        .allowlist_var("FI_.*")
        .derive_default(true)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "generating libfabric's bindings failed ({e}): the `ofi` feature needs libfabric's \
                 headers (Debian: libfabric-dev) and libclang (libclang-dev)"
            )
        });
    bindings
        .write_to_file(out.join("fabric.rs"))
        .expect("writing libfabric's bindings");
}
