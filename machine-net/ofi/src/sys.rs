//! libfabric's C interface: the types and exported functions bindgen generates from the
//! installed headers (`build.rs`), and, written here, the `static inline` calls of the headers
//! that this layer makes. Each of those only calls through the object's table of operations,
//! exactly as the header does; the tables are filled by the provider when the object is
//! opened and stay valid until it is closed.
//!
//! Every function here is `unsafe`: its caller guarantees the object is open (not closed) and
//! that buffers and contexts outlive the operation, as libfabric's man pages require.

#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn
)]

include!(concat!(env!("OUT_DIR"), "/fabric.rs"));

use std::os::raw::{c_int, c_void};

/// Call an operation of a provider's table. Every provider fills each slot (with a stub that
/// returns `-FI_ENOSYS` where it lacks the operation); an empty slot is answered the same way
/// rather than trusted.
macro_rules! call {
    ($slot:expr) => {
        match $slot {
            Some(f) => f,
            None => return -(FI_ENOSYS as i32) as _,
        }
    };
}

/// The five functions libfabric exports that the layer calls, looked up in `libfabric.so.1`
/// when the layer first boots.
pub struct Lib {
    pub fi_getinfo: unsafe extern "C" fn(
        u32,
        *const std::os::raw::c_char,
        *const std::os::raw::c_char,
        u64,
        *const fi_info,
        *mut *mut fi_info,
    ) -> c_int,
    pub fi_freeinfo: unsafe extern "C" fn(*mut fi_info),
    pub fi_dupinfo: unsafe extern "C" fn(*const fi_info) -> *mut fi_info,
    pub fi_fabric:
        unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut c_void) -> c_int,
    pub fi_strerror: unsafe extern "C" fn(c_int) -> *const std::os::raw::c_char,
}

/// The library's soname (Debian: package libfabric1).
const SONAME: &str = "libfabric.so.1";

static LIB: std::sync::OnceLock<Result<Lib, String>> = std::sync::OnceLock::new();

/// libfabric, loaded on first use (and kept for the process's life).
///
/// # Errors
/// Why it could not be loaded, in a sentence.
pub fn lib() -> Result<&'static Lib, String> {
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Lib, String> {
    let name = std::ffi::CString::new(SONAME).map_err(|e| e.to_string())?;
    // SAFETY: dlopen with a NUL-terminated name; the handle is never closed, so the symbols
    // stay valid for the process's life.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror's message, read right after the failing call.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_owned()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!(
            "cannot load {SONAME} ({why}): install libfabric (Debian: libfabric1)"
        ));
    }
    let sym = |n: &str| -> Result<*mut c_void, String> {
        let c = std::ffi::CString::new(n).map_err(|e| e.to_string())?;
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(h, c.as_ptr()) };
        if p.is_null() {
            Err(format!("{SONAME} has no {n}: a libfabric older than 1.5?"))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is the function of that name, whose C prototype (rdma/fabric.h)
    // the field's type transcribes.
    unsafe {
        Ok(Lib {
            fi_getinfo: std::mem::transmute::<*mut c_void, _>(sym("fi_getinfo")?),
            fi_freeinfo: std::mem::transmute::<*mut c_void, _>(sym("fi_freeinfo")?),
            fi_dupinfo: std::mem::transmute::<*mut c_void, _>(sym("fi_dupinfo")?),
            fi_fabric: std::mem::transmute::<*mut c_void, _>(sym("fi_fabric")?),
            fi_strerror: std::mem::transmute::<*mut c_void, _>(sym("fi_strerror")?),
        })
    }
}

/// `FI_VERSION(major, minor)`, a function-like macro.
pub const fn fi_version_of(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The API version this layer is written against (libfabric 1.17, Debian 12's); a newer
/// library serves it.
pub const API_VERSION: u32 = fi_version_of(1, 17);

/// `FI_ADDR_UNSPEC` and `FI_ADDR_NOTAVAIL` are `((uint64_t) -1)`, which bindgen does not
/// evaluate: "any source" in a receive, "not in the address vector" in a completion.
pub const ADDR_UNSPEC: fi_addr_t = u64::MAX;
/// See [`ADDR_UNSPEC`].
pub const ADDR_NOTAVAIL: fi_addr_t = u64::MAX;

/// `fi_close`.
pub unsafe fn close(fid: *mut fid) -> c_int {
    call!((*(*fid).ops).close)(fid)
}

/// `fi_control`.
pub unsafe fn control(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    call!((*(*fid).ops).control)(fid, command, arg)
}

/// `fi_domain`.
pub unsafe fn domain(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    out: *mut *mut fid_domain,
) -> c_int {
    call!((*(*fabric).ops).domain)(fabric, info, out, std::ptr::null_mut())
}

/// `fi_endpoint`.
pub unsafe fn endpoint(
    domain: *mut fid_domain,
    info: *mut fi_info,
    out: *mut *mut fid_ep,
) -> c_int {
    call!((*(*domain).ops).endpoint)(domain, info, out, std::ptr::null_mut())
}

/// `fi_cq_open`.
pub unsafe fn cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    out: *mut *mut fid_cq,
) -> c_int {
    call!((*(*domain).ops).cq_open)(domain, attr, out, std::ptr::null_mut())
}

/// `fi_av_open`.
pub unsafe fn av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    out: *mut *mut fid_av,
) -> c_int {
    call!((*(*domain).ops).av_open)(domain, attr, out, std::ptr::null_mut())
}

/// `fi_cancel` of an operation posted on an endpoint: it ends with an error completion
/// (`FI_ECANCELED`) if the provider still had it queued.
pub unsafe fn cancel(ep: *mut fid_ep, context: *mut c_void) -> isize {
    call!((*(*ep).ops).cancel)(&mut (*ep).fid, context)
}

/// `fi_ep_bind`.
pub unsafe fn ep_bind(ep: *mut fid_ep, bfid: *mut fid, flags: u64) -> c_int {
    call!((*(*ep).fid.ops).bind)(&mut (*ep).fid, bfid, flags)
}

/// `fi_enable`.
pub unsafe fn enable(ep: *mut fid_ep) -> c_int {
    control(&mut (*ep).fid, FI_ENABLE as c_int, std::ptr::null_mut())
}

/// `fi_getname`.
pub unsafe fn getname(ep: *mut fid_ep, addr: *mut c_void, len: *mut usize) -> c_int {
    call!((*(*ep).cm).getname)(&mut (*ep).fid, addr, len)
}

/// `fi_av_insert`.
pub unsafe fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    out: *mut fi_addr_t,
) -> c_int {
    call!((*(*av).ops).insert)(av, addr, count, out, 0, std::ptr::null_mut())
}

/// `fi_tsend`.
#[inline]
pub unsafe fn tsend(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    call!((*(*ep).tagged).send)(ep, buf, len, std::ptr::null_mut(), dest, tag, context)
}

/// `fi_tinject`: the buffer may be reused at once, and no completion is written.
#[inline]
pub unsafe fn tinject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    call!((*(*ep).tagged).inject)(ep, buf, len, dest, tag)
}

/// `fi_trecv`.
#[inline]
pub unsafe fn trecv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    call!((*(*ep).tagged).recv)(
        ep,
        buf,
        len,
        std::ptr::null_mut(),
        src,
        tag,
        ignore,
        context,
    )
}

/// `fi_cq_readfrom`.
#[inline]
pub unsafe fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    call!((*(*cq).ops).readfrom)(cq, buf, count, src)
}

/// `fi_cq_readerr`.
pub unsafe fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry) -> isize {
    call!((*(*cq).ops).readerr)(cq, buf, 0)
}

/// `fi_cq_strerror`.
pub unsafe fn cq_strerror(
    cq: *mut fid_cq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut std::os::raw::c_char,
    len: usize,
) -> *const std::os::raw::c_char {
    call!((*(*cq).ops).strerror)(cq, prov_errno, err_data, buf, len)
}

/// `fi_trywait`.
pub unsafe fn trywait(fabric: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int {
    call!((*(*fabric).ops).trywait)(fabric, fids, count)
}
