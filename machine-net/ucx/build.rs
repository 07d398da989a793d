//! With the `ucx` feature: bindings to UCP (`ucp/api/ucp.h`) made by bindgen, and the link
//! lines for `-lucp -lucs`. Without it: nothing (the crate then needs nothing outside Rust).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "ucx")]
    ucx::generate();
}

#[cfg(feature = "ucx")]
mod ucx {
    use std::path::PathBuf;

    pub(super) fn generate() {
        // UCX_DIR: an installation elsewhere than /usr (include/ and lib/ below it).
        println!("cargo:rerun-if-env-changed=UCX_DIR");
        let mut clang_args = Vec::new();
        if let Ok(dir) = std::env::var("UCX_DIR") {
            println!("cargo:rustc-link-search=native={dir}/lib");
            clang_args.push(format!("-I{dir}/include"));
        }
        println!("cargo:rustc-link-lib=ucp");
        println!("cargo:rustc-link-lib=ucs");
        let bindings = bindgen::Builder::default()
            .header_contents("ucx_wrapper.h", "#include <ucp/api/ucp.h>\n")
            .clang_args(&clang_args)
            .allowlist_function("ucp_.*")
            .allowlist_function("ucs_status_string")
            .allowlist_type("ucp_.*")
            .allowlist_type("ucs_status_t")
            .allowlist_var("UCP_.*")
            .allowlist_var("UCS_.*")
            .prepend_enum_name(false)
            .layout_tests(false)
            .generate_comments(false)
            .generate()
            .unwrap_or_else(|e| {
                panic!("bindgen over <ucp/api/ucp.h> failed (is libucx-dev installed?): {e}")
            });
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR set by cargo"));
        bindings
            .write_to_file(out.join("ucp.rs"))
            .expect("writing the UCP bindings");
    }
}
