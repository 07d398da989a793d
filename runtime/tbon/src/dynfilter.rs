//! Filters loaded at run time from shared libraries (the guide's `load_FilterFunc` and
//! Appendix D), by name, with the `<name>_format_string` convention.
//!
//! A library exports, for each filter `NAME`:
//!
//! - `NAME`: `extern "C" fn(call: *const FfiCall)`, the filter;
//! - `NAME_format_string`: a `const char *` (a static pointer to a NUL-terminated string), the
//!   format the filter takes (`""` or `" "`: any);
//! - optionally `NAME_drop_state`: `extern "C" fn(state: *mut c_void)`, to free the per-stream
//!   state the filter keeps behind `*call.state` when the stream closes;
//! - optionally `NAME_get_state`: `extern "C" fn(call: *const FfiStateCall)`, the guide's
//!   state extraction for failure recovery ([`Filter::get_state`]): it emits at most one
//!   packet, made from `call.state` (what the filter keeps behind `*call.state`, null if it
//!   never ran).
//!
//! Only C types cross the boundary: packets go in and out as their wire bytes, so a library
//! need not be built with the same compiler or the same version of this crate, and could be
//! written in C. A Rust library writes its filter as a [`Filter`]-shaped function and exports it
//! with [`export_filter!`](crate::export_filter), which does the rest:
//!
//! ```ignore
//! fn integer_add(cx: &mut FilterContext<'_>) -> Result<(), FilterError> { ... }
//! converse_tbon::export_filter!(IntegerAdd, "%d", integer_add);
//! ```
//!
//! Loading runs the library's initialisers: load only libraries you trust, as with `dlopen`.

use crate::filter::{Filter, FilterContext, FilterError, FilterState, TopologyLocalInfo};
use crate::format::Format;
use crate::packet::Packet;
use std::ffi::{c_char, c_void, CStr};
use std::rc::Rc;

/// Version of [`FfiCall`]'s layout; a filter built for another refuses to run.
pub const FFI_ABI_VERSION: u32 = 1;

/// Bytes lent across the boundary.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FfiSlice {
    /// First byte (null with `len` 0 for none).
    pub ptr: *const u8,
    /// Number of bytes.
    pub len: usize,
}

impl FfiSlice {
    fn of(b: &[u8]) -> FfiSlice {
        FfiSlice {
            ptr: b.as_ptr(),
            len: b.len(),
        }
    }

    const NONE: FfiSlice = FfiSlice {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// The bytes.
    ///
    /// # Safety
    /// `ptr` must point to `len` readable bytes that outlive the returned slice (or be null).
    pub unsafe fn bytes<'a>(self) -> Option<&'a [u8]> {
        if self.ptr.is_null() {
            return None;
        }
        // SAFETY: the caller promises `len` readable bytes at `ptr`.
        Some(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }
}

/// The local process's place in the tree, as [`TopologyLocalInfo`] in C types.
#[repr(C)]
#[derive(Debug)]
pub struct FfiTopologyInfo {
    /// This process's rank.
    pub rank: u32,
    /// Its parent's rank; `u32::MAX` at the front-end.
    pub parent: u32,
    /// Its children's ranks.
    pub children: *const u32,
    /// How many.
    pub num_children: u32,
    /// Back-ends below it.
    pub num_backends_below: u32,
    /// Processes in the tree.
    pub num_nodes: u32,
    /// Back-ends in the tree.
    pub num_backends: u32,
    /// Its depth.
    pub depth: u32,
}

/// One filter call.
#[repr(C)]
#[derive(Debug)]
pub struct FfiCall {
    /// [`FFI_ABI_VERSION`] of the caller.
    pub abi: u32,
    /// The wave: each packet's wire bytes.
    pub inputs: *const FfiSlice,
    /// How many packets.
    pub num_inputs: usize,
    /// The stream's configuration parameters (a packet's wire bytes), or none.
    pub params: FfiSlice,
    /// The filter's per-stream state: null until the filter stores something there.
    pub state: *mut *mut c_void,
    /// Where this process is in the tree.
    pub info: *const FfiTopologyInfo,
    /// The caller's context for the two functions below.
    pub host: *mut c_void,
    /// Send a packet on (`reverse` 0) or back (`reverse` 1): returns 0, or -1 if the bytes are
    /// not a packet. The bytes are copied before it returns.
    pub emit: unsafe extern "C" fn(host: *mut c_void, reverse: u8, packet: FfiSlice) -> i32,
    /// Fail the wave with a message (UTF-8).
    pub fail: unsafe extern "C" fn(host: *mut c_void, message: FfiSlice),
}

/// One call of a library's `NAME_get_state`: the state to export and where the packet goes.
#[repr(C)]
#[derive(Debug)]
pub struct FfiStateCall {
    /// [`FFI_ABI_VERSION`] of the host.
    pub abi: u32,
    /// The stream whose state this is.
    pub stream_id: u32,
    /// What the filter keeps behind `*FfiCall::state` for this stream (null: nothing yet).
    pub state: *mut c_void,
    /// The host's, for `emit`.
    pub host: *mut c_void,
    /// Give the exported packet (its wire bytes, copied before it returns; `reverse` is not
    /// read); non-zero when the bytes are not a packet or one was given already.
    pub emit: unsafe extern "C" fn(host: *mut c_void, reverse: u8, packet: FfiSlice) -> i32,
}

/// A `const char *` a library exports as `NAME_format_string`.
#[repr(transparent)]
#[derive(Debug)]
pub struct FfiFormatString(pub *const c_char);

// SAFETY: it points to a string literal, immutable for the life of the program.
unsafe impl Sync for FfiFormatString {}

type FilterFn = unsafe extern "C" fn(*const FfiCall);
type DropFn = unsafe extern "C" fn(*mut c_void);
type StateFn = unsafe extern "C" fn(*const FfiStateCall);

/// A filter function from a shared library.
pub(crate) struct LoadedFilter {
    name: String,
    format: Option<Format>,
    f: FilterFn,
    drop_state: Option<DropFn>,
    get_state: Option<StateFn>,
    // Keeps the code above mapped: declared last, so dropped after everything that uses it.
    _lib: Rc<libloading::Library>,
}

/// The state slot a loaded filter owns, inside a [`FilterState`].
struct ForeignState(*mut c_void);

/// Load filter `name` from the library at `path`.
///
/// # Errors
/// A sentence naming the library and what is missing: the library itself, the function, or
/// its format string (or a format string that does not parse).
pub(crate) fn load(path: &str, name: &str) -> Result<LoadedFilter, String> {
    if name.is_empty() || name.contains('\0') {
        return Err(format!("'{name}' is not a filter function name"));
    }
    // SAFETY: loading runs the library's initialisers; the program asked for this library.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("cannot load filter library {path}: {e}"))?;
    // SAFETY: the symbol is declared to be a function of this signature by the convention
    // every filter library follows.
    let f: FilterFn = unsafe { lib.get::<FilterFn>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| format!("filter library {path} has no function '{name}'"))?;
    let fmt_sym = format!("{name}_format_string");
    // SAFETY: by the convention, the symbol is a `const char *` variable; `get` gives its
    // address.
    let fmt_ptr: *const *const c_char =
        unsafe { lib.get::<*const *const c_char>(fmt_sym.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| {
                format!(
                    "filter library {path} defines '{name}' but not '{fmt_sym}' (every filter \
                     must say which format it takes)"
                )
            })?;
    // SAFETY: the variable is a valid pointer to a NUL-terminated string (checked non-null).
    let text = unsafe {
        if fmt_ptr.is_null() || (*fmt_ptr).is_null() {
            return Err(format!("'{fmt_sym}' in {path} is a null pointer"));
        }
        CStr::from_ptr(*fmt_ptr)
    }
    .to_str()
    .map_err(|_| format!("'{fmt_sym}' in {path} is not UTF-8"))?;
    let format = if text.trim().is_empty() {
        None
    } else {
        Some(Format::parse(text).map_err(|e| format!("'{fmt_sym}' in {path}: {e}"))?)
    };
    // SAFETY: as for the filter function, by convention.
    let drop_state = unsafe { lib.get::<DropFn>(format!("{name}_drop_state").as_bytes()) }
        .ok()
        .map(|s| *s);
    // SAFETY: as for the filter function, by convention.
    let get_state = unsafe { lib.get::<StateFn>(format!("{name}_get_state").as_bytes()) }
        .ok()
        .map(|s| *s);
    Ok(LoadedFilter {
        name: name.to_owned(),
        format,
        f,
        drop_state,
        get_state,
        _lib: Rc::new(lib),
    })
}

/// What the host side collects during one call.
struct Host<'a> {
    out: &'a mut Vec<Packet>,
    reverse: &'a mut Vec<Packet>,
    error: Option<String>,
}

unsafe extern "C" fn host_emit(host: *mut c_void, reverse: u8, packet: FfiSlice) -> i32 {
    // SAFETY: `host` is the `Host` of the call in progress (see `LoadedFilter::run`), and the
    // filter lends `packet` for the duration of this call.
    let (host, bytes) = unsafe { (&mut *(host as *mut Host<'_>), packet.bytes()) };
    match bytes.map(Packet::from_wire) {
        Some(Ok(p)) => {
            if reverse != 0 {
                host.reverse.push(p);
            } else {
                host.out.push(p);
            }
            0
        }
        _ => -1,
    }
}

unsafe extern "C" fn host_emit_state(host: *mut c_void, _reverse: u8, packet: FfiSlice) -> i32 {
    // SAFETY: `host` is the slot of the call in progress (see `LoadedFilter::get_state`), and
    // the library lends `packet` for the duration of this call.
    let (slot, bytes) = unsafe { (&mut *(host as *mut Option<Packet>), packet.bytes()) };
    match (slot.is_none(), bytes.map(Packet::from_wire)) {
        (true, Some(Ok(p))) => {
            *slot = Some(p);
            0
        }
        _ => -1,
    }
}

unsafe extern "C" fn host_fail(host: *mut c_void, message: FfiSlice) {
    // SAFETY: as in `host_emit`.
    let (host, bytes) = unsafe { (&mut *(host as *mut Host<'_>), message.bytes()) };
    host.error = Some(String::from_utf8_lossy(bytes.unwrap_or(b"(no message)")).into_owned());
}

impl Filter for LoadedFilter {
    fn format(&self) -> Option<&Format> {
        self.format.as_ref()
    }

    fn run(&self, cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
        let info = cx.info;
        // The state slot lives in the stream's FilterState, so it survives between waves.
        if cx.state.is_none() {
            *cx.state = Some(Box::new(ForeignState(std::ptr::null_mut())));
        }
        let slot = cx
            .state
            .as_mut()
            .and_then(|s| s.downcast_mut::<ForeignState>())
            .ok_or_else(|| FilterError(format!("{}: its state was replaced", self.name)))?;
        let inputs: Vec<FfiSlice> = cx
            .packets_in
            .iter()
            .map(|p| FfiSlice::of(p.wire()))
            .collect();
        let finfo = FfiTopologyInfo {
            rank: info.rank,
            parent: info.parent.unwrap_or(u32::MAX),
            children: info.children.as_ptr(),
            num_children: info.children.len() as u32,
            num_backends_below: info.num_backends_below as u32,
            num_nodes: info.num_nodes as u32,
            num_backends: info.num_backends as u32,
            depth: info.depth,
        };
        let mut host = Host {
            out: cx.packets_out,
            reverse: cx.packets_out_reverse,
            error: None,
        };
        let call = FfiCall {
            abi: FFI_ABI_VERSION,
            inputs: inputs.as_ptr(),
            num_inputs: inputs.len(),
            params: cx.params.map_or(FfiSlice::NONE, |p| FfiSlice::of(p.wire())),
            state: &mut slot.0,
            info: &finfo,
            host: (&mut host as *mut Host<'_>).cast(),
            emit: host_emit,
            fail: host_fail,
        };
        // SAFETY: every pointer in `call` is valid until it returns; the function follows the
        // convention of its library (it was found under the filter's name).
        unsafe { (self.f)(&call) };
        match host.error {
            Some(e) => Err(FilterError(format!("{}: {e}", self.name))),
            None => Ok(()),
        }
    }

    fn exports_state(&self) -> bool {
        self.get_state.is_some()
    }

    fn get_state(&self, state: &FilterState, stream_id: u32) -> Option<Packet> {
        let get = self.get_state?;
        let foreign = state
            .as_ref()
            .and_then(|s| s.downcast_ref::<ForeignState>())
            .map_or(std::ptr::null_mut(), |s| s.0);
        let mut slot: Option<Packet> = None;
        let call = FfiStateCall {
            abi: FFI_ABI_VERSION,
            stream_id,
            state: foreign,
            host: (&mut slot as *mut Option<Packet>).cast(),
            emit: host_emit_state,
        };
        // SAFETY: every pointer in `call` is valid until it returns; the function follows the
        // convention of its library (found under the filter's name and `_get_state`).
        unsafe { get(&call) };
        slot
    }

    fn drop_state(&self, state: &mut FilterState) {
        let foreign = state.take().and_then(|s| s.downcast::<ForeignState>().ok());
        if let (Some(s), Some(d)) = (foreign, self.drop_state) {
            if !s.0.is_null() {
                // SAFETY: the library's own function frees the state its filter made.
                unsafe { d(s.0) };
            }
        }
    }
}

/// The library side of a call: run a Rust filter function on an [`FfiCall`]. Used by
/// [`export_filter!`](crate::export_filter); not for direct use.
///
/// # Safety
/// `call` must be a valid [`FfiCall`] (as the host makes them).
#[doc(hidden)]
pub unsafe fn serve_call(call: *const FfiCall, run: &crate::filter::FilterFn) {
    // SAFETY: the caller promises a valid call for its duration.
    let call = unsafe { &*call };
    let fail = |msg: &str| {
        // SAFETY: `host` and `fail` come from the host, which lends `msg` for the call.
        unsafe { (call.fail)(call.host, FfiSlice::of(msg.as_bytes())) }
    };
    if call.abi != FFI_ABI_VERSION {
        return fail(&format!(
            "the filter was built for call version {FFI_ABI_VERSION}, the host uses {}",
            call.abi
        ));
    }
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(), String> {
            // SAFETY: the host lends `num_inputs` slices, each valid for the call.
            let slices = unsafe { std::slice::from_raw_parts(call.inputs, call.num_inputs) };
            let mut inputs = slices
                .iter()
                // SAFETY: each slice points to bytes valid for the call.
                .map(|s| Packet::from_wire(unsafe { s.bytes() }.unwrap_or(&[])))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            // SAFETY: as above.
            let params = match unsafe { call.params.bytes() } {
                Some(b) => Some(Packet::from_wire(b).map_err(|e| e.to_string())?),
                None => None,
            };
            // SAFETY: the host's info is valid for the call, its children array too.
            let info = unsafe {
                let i = &*call.info;
                TopologyLocalInfo {
                    rank: i.rank,
                    parent: (i.parent != u32::MAX).then_some(i.parent),
                    children: if i.children.is_null() {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(i.children, i.num_children as usize).to_vec()
                    },
                    num_backends_below: i.num_backends_below as usize,
                    num_nodes: i.num_nodes as usize,
                    num_backends: i.num_backends as usize,
                    depth: i.depth,
                }
            };
            // The state lives in this library's allocations, behind the host's pointer slot.
            // SAFETY: the slot is the host's, valid for the call; what it points to, when not
            // null, is a `Box<FilterState>` this function made on an earlier call.
            let slot = unsafe { &mut *call.state };
            if slot.is_null() {
                *slot = Box::into_raw(Box::new(None::<Box<dyn std::any::Any>>)).cast();
            }
            // SAFETY: see above.
            let state = unsafe { &mut *(*slot).cast::<FilterState>() };
            let (mut out, mut rev) = (Vec::new(), Vec::new());
            run(&mut FilterContext {
                packets_in: &mut inputs,
                packets_out: &mut out,
                packets_out_reverse: &mut rev,
                state,
                params: params.as_ref(),
                info: &info,
            })
            .map_err(|e| e.0)?;
            for (reverse, p) in out
                .iter()
                .map(|p| (0u8, p))
                .chain(rev.iter().map(|p| (1u8, p)))
            {
                // SAFETY: the host copies the bytes before returning.
                if unsafe { (call.emit)(call.host, reverse, FfiSlice::of(p.wire())) } != 0 {
                    return Err("the host refused an output packet".into());
                }
            }
            Ok(())
        }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => fail(&e),
        Err(_) => fail("the filter panicked"),
    }
}

/// The library side of freeing a Rust filter's state. Used by
/// [`export_filter!`](crate::export_filter).
///
/// # Safety
/// `state` must be null or what [`serve_call`] stored.
#[doc(hidden)]
pub unsafe fn drop_state(state: *mut c_void) {
    if !state.is_null() {
        // SAFETY: `serve_call` made it with `Box::into_raw` of a `Box<FilterState>`.
        drop(unsafe { Box::from_raw(state.cast::<FilterState>()) });
    }
}

/// The body of an exported `NAME_get_state`: calls `get` on the state `serve_call` keeps.
///
/// # Safety
/// `call` must be valid for the call, its `state` null or what `serve_call` stored.
#[doc(hidden)]
pub unsafe fn serve_state(
    call: *const FfiStateCall,
    get: &dyn Fn(&FilterState, u32) -> Option<Packet>,
) {
    // SAFETY: the caller promises a valid call for its duration.
    let call = unsafe { &*call };
    if call.abi != FFI_ABI_VERSION {
        return;
    }
    let none: FilterState = None;
    let state = if call.state.is_null() {
        &none
    } else {
        // SAFETY: `serve_call` made it with `Box::into_raw` of a `Box<FilterState>`.
        unsafe { &*call.state.cast::<FilterState>() }
    };
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| get(state, call.stream_id)));
    if let Ok(Some(p)) = got {
        // SAFETY: the host copies the bytes before returning. A refusal leaves nothing to do.
        let _ = unsafe { (call.emit)(call.host, 0, FfiSlice::of(p.wire())) };
    }
}

/// Export a Rust filter function from a shared library (a `cdylib` crate), under `NAME`, with
/// `NAME_format_string` and `NAME_drop_state`, for
/// [`Network::load_filter`](crate::Network::load_filter).
///
/// ```ignore
/// use converse_tbon::{FilterContext, FilterError, Packet};
/// fn integer_add(cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
///     let mut sum = 0i32;
///     for p in cx.packets_in.iter() {
///         sum = sum.wrapping_add(p.unpack::<i32>("%d")?);
///     }
///     let first = &cx.packets_in[0];
///     let total = Packet::new(first.stream_id(), first.tag(), "%d", sum)?;
///     cx.packets_out.push(total);
///     Ok(())
/// }
/// converse_tbon::export_filter!(IntegerAdd, "%d", integer_add);
/// ```
///
/// A fourth argument, a function `fn(&FilterState, u32) -> Option<Packet>`, exports
/// `NAME_get_state` too ([`Filter::get_state`]):
/// `export_filter!(RunningSum, "", running_sum, running_sum_state)`.
#[macro_export]
macro_rules! export_filter {
    ($name:ident, $format:literal, $func:path, $get_state:path) => {
        $crate::export_filter!($name, $format, $func);
        const _: () = {
            #[export_name = concat!(stringify!($name), "_get_state")]
            pub unsafe extern "C" fn get_state(call: *const $crate::dynfilter::FfiStateCall) {
                // SAFETY: the host passes a valid call.
                unsafe { $crate::dynfilter::serve_state(call, &$get_state) }
            }
        };
    };
    ($name:ident, $format:literal, $func:path) => {
        const _: () = {
            #[export_name = concat!(stringify!($name), "_format_string")]
            pub static FORMAT: $crate::dynfilter::FfiFormatString =
                $crate::dynfilter::FfiFormatString(
                    concat!($format, "\0").as_ptr() as *const ::std::ffi::c_char
                );

            #[export_name = stringify!($name)]
            pub unsafe extern "C" fn filter(call: *const $crate::dynfilter::FfiCall) {
                // SAFETY: the host passes a valid call.
                unsafe { $crate::dynfilter::serve_call(call, &$func) }
            }

            #[export_name = concat!(stringify!($name), "_drop_state")]
            pub unsafe extern "C" fn drop_state(state: *mut ::std::ffi::c_void) {
                // SAFETY: the host passes what the filter stored.
                unsafe { $crate::dynfilter::drop_state(state) }
            }
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_libraries_and_symbols_are_named() {
        let e = load("/nonexistent/libnothing.so", "F")
            .err()
            .unwrap_or_default();
        assert!(
            e.starts_with("cannot load filter library /nonexistent/libnothing.so"),
            "{e}"
        );
        // libc is there on every Linux system and has no filter in it.
        let e = load("libc.so.6", "IntegerAdd").err().unwrap_or_default();
        assert_eq!(e, "filter library libc.so.6 has no function 'IntegerAdd'");
        // `printf` exists, but `printf_format_string` does not.
        let e = load("libc.so.6", "printf").err().unwrap_or_default();
        assert!(
            e.contains("defines 'printf' but not 'printf_format_string'"),
            "{e}"
        );
        assert!(load("libc.so.6", "").is_err());
    }
}
