//! UCP's C interface, as bindgen made it from `<ucp/api/ucp.h>` (build.rs), and what the
//! header has as macros or inline functions.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    unreachable_pub,
    unused_imports,
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/ucp.rs"));

/// `UCS_PTR_IS_ERR`: a returned pointer that is an error status.
#[inline]
pub(crate) fn ptr_is_err(p: ucs_status_ptr_t) -> bool {
    (p as usize) >= (UCS_ERR_LAST as isize as usize)
}

/// `UCS_PTR_RAW_STATUS`: the status a returned pointer carries (`UCS_OK` for NULL).
#[inline]
pub(crate) fn ptr_status(p: ucs_status_ptr_t) -> ucs_status_t {
    p as isize as ucs_status_t
}

/// `ucs_status_string`, as text.
pub(crate) fn status_text(s: ucs_status_t) -> String {
    // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string for any
    // value (an "unknown" one for a value it does not know).
    unsafe {
        let p = ucs_status_string(s);
        if p.is_null() {
            return format!("UCX status {s}");
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}
