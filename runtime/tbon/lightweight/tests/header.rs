//! The header is cbindgen's output for this crate: a change to the library's C surface that
//! is not in `include/mrnet_lightweight.h` fails here. `UPDATE_HEADER=1` writes it anew.

use std::path::Path;

#[test]
fn the_header_is_what_cbindgen_makes_of_the_library() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .unwrap_or_else(|e| panic!("cbindgen.toml: {e}"));
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen: {e}"))
        .write(&mut out);
    let made = String::from_utf8(out).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("include/mrnet_lightweight.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &made).unwrap_or_else(|e| panic!("{e}"));
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == made,
        "include/mrnet_lightweight.h is not what cbindgen makes of src/lib.rs: run \
         `UPDATE_HEADER=1 cargo test -p converse-tbon-lightweight --test header` and check \
         the difference"
    );
}
