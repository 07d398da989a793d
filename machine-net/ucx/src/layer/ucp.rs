//! The UCX context and its worker, and the requests UCX returns.

use super::*;

/// One context and its worker, destroyed together (in this order) when dropped.
pub(super) struct Ucp {
    pub(super) ctx: sys::ucp_context_h,
    pub(super) worker: sys::ucp_worker_h,
}

impl Drop for Ucp {
    fn drop(&mut self) {
        // SAFETY: both were made by `Ucp::new` and are destroyed once, here, worker first
        // (UCX's order); every endpoint and request of the worker was closed or freed by
        // `UcxMachine`'s drop before this runs (fields drop after `Drop::drop`).
        unsafe {
            if !self.worker.is_null() {
                sys::ucp_worker_destroy(self.worker);
            }
            if !self.ctx.is_null() {
                sys::ucp_cleanup(self.ctx);
            }
        }
    }
}

impl Ucp {
    /// A context for tagged messages (and wake-ups, when `wakeup`) over `tls`, and its
    /// worker in single-thread mode (the runtime drives a node's machine from one thread at a
    /// time; nothing here is called concurrently).
    pub(super) fn new(
        tls: Option<&CString>,
        nodes: usize,
        wakeup: bool,
    ) -> Result<Ucp, MachineError> {
        let mut config: *mut sys::ucp_config_t = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; NULL prefix and file mean UCX's own (UCX_*
        // variables of the environment).
        let s = unsafe { sys::ucp_config_read(std::ptr::null(), std::ptr::null(), &mut config) };
        if s != sys::UCS_OK {
            return Err(ucx_err("reading UCX's configuration", s));
        }
        let mut ucp = Ucp {
            ctx: std::ptr::null_mut(),
            worker: std::ptr::null_mut(),
        };
        let made = (|| {
            if let Some(t) = tls {
                // SAFETY: config is live (read above); both strings are NUL-terminated and
                // outlive the call, which copies them.
                let s = unsafe { sys::ucp_config_modify(config, c"TLS".as_ptr(), t.as_ptr()) };
                if s != sys::UCS_OK {
                    return Err(MachineError::Boot(format!(
                        "UCX refuses the transport list '{}': {}",
                        t.to_string_lossy(),
                        sys::status_text(s)
                    )));
                }
            }
            // SAFETY: all-zero is a valid ucp_params_t (numbers, NULL pointers, no callbacks);
            // only the fields named in field_mask are read.
            let mut params: sys::ucp_params_t = unsafe { std::mem::zeroed() };
            params.field_mask =
                (sys::UCP_PARAM_FIELD_FEATURES | sys::UCP_PARAM_FIELD_ESTIMATED_NUM_EPS) as u64;
            params.features = sys::UCP_FEATURE_TAG as u64;
            if wakeup {
                params.features |= sys::UCP_FEATURE_WAKEUP as u64;
            }
            params.estimated_num_eps = nodes;
            // SAFETY: params and config are live; ctx is an out-pointer into `ucp`.
            let s = unsafe {
                sys::ucp_init_version(
                    sys::UCP_API_MAJOR,
                    sys::UCP_API_MINOR,
                    &params,
                    config,
                    &mut ucp.ctx,
                )
            };
            if s != sys::UCS_OK {
                ucp.ctx = std::ptr::null_mut();
                return Err(MachineError::Boot(format!(
                    "UCX cannot start over transports {}: {} (ucx_info -d lists what this host has)",
                    tls.map_or("(UCX's choice)".into(), |t| t.to_string_lossy().into_owned()),
                    sys::status_text(s)
                )));
            }
            // SAFETY: as above for ucp_worker_params_t.
            let mut wp: sys::ucp_worker_params_t = unsafe { std::mem::zeroed() };
            wp.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64;
            wp.thread_mode = sys::UCS_THREAD_MODE_SINGLE;
            // SAFETY: ctx was made above; worker is an out-pointer into `ucp`.
            let s = unsafe { sys::ucp_worker_create(ucp.ctx, &wp, &mut ucp.worker) };
            if s != sys::UCS_OK {
                ucp.worker = std::ptr::null_mut();
                return Err(ucx_err("creating the UCX worker", s));
            }
            Ok(())
        })();
        // SAFETY: config came from ucp_config_read and is released once; the context keeps
        // what it needs.
        unsafe { sys::ucp_config_release(config) };
        made.map(|()| ucp)
    }

    /// The worker's address, as bytes for the node table.
    pub(super) fn address(&self) -> Result<Vec<u8>, MachineError> {
        let mut addr: *mut sys::ucp_address_t = std::ptr::null_mut();
        let mut len: usize = 0;
        // SAFETY: the worker is live; out-pointers to locals.
        let s = unsafe { sys::ucp_worker_get_address(self.worker, &mut addr, &mut len) };
        if s != sys::UCS_OK || addr.is_null() {
            return Err(ucx_err("getting the UCX worker's address", s));
        }
        // SAFETY: UCX gave `len` readable bytes at `addr`, released right after the copy.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len).to_vec() };
        // SAFETY: released once, as UCX asks.
        unsafe { sys::ucp_worker_release_address(self.worker, addr) };
        Ok(bytes)
    }

    /// The transports the context opened, by name (`tcp`, `self`, ...), from
    /// `ucp_context_print_info`'s "resource N : md M dev D flags -- TL/DEVICE" lines (UCX 1.13
    /// has no query for them). Empty when the report cannot be had.
    pub(super) fn transports(&self) -> Vec<String> {
        let mut buf: *mut libc::c_char = std::ptr::null_mut();
        let mut len: libc::size_t = 0;
        // SAFETY: out-pointers to locals; the stream is closed below, after which `buf` holds
        // `len` bytes allocated by libc, freed below.
        let f = unsafe { libc::open_memstream(&mut buf, &mut len) };
        if f.is_null() {
            return Vec::new();
        }
        // SAFETY: the context is live; `f` is an open stream (libc's FILE is the C FILE the
        // bindings name).
        unsafe { sys::ucp_context_print_info(self.ctx, f.cast()) };
        // SAFETY: `f` is open and closed once; then `buf`/`len` are final.
        unsafe { libc::fclose(f) };
        if buf.is_null() {
            return Vec::new();
        }
        // SAFETY: `buf` holds `len` initialized bytes (open_memstream's contract).
        let text = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        let text = String::from_utf8_lossy(text).into_owned();
        // SAFETY: allocated by open_memstream with malloc, freed once.
        unsafe { libc::free(buf.cast()) };
        let mut tls: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| l.contains("resource")) {
            let Some(tl) = line
                .rsplit(' ')
                .next()
                .and_then(|r| r.split('/').next())
                .filter(|t| !t.is_empty())
            else {
                continue;
            };
            if !tls.iter().any(|t| t == tl) {
                tls.push(tl.to_owned());
            }
        }
        tls
    }

    /// UCX's event descriptor for this worker, when its transports can wake a sleeper.
    pub(super) fn efd(&self) -> Option<i32> {
        let mut fd: i32 = -1;
        // SAFETY: the worker is live; out-pointer to a local.
        let s = unsafe { sys::ucp_worker_get_efd(self.worker, &mut fd) };
        (s == sys::UCS_OK && fd >= 0).then_some(fd)
    }

    /// Progress the worker until it finds nothing to do or `rounds` calls were made; returns
    /// whether anything was done (callbacks may have run: error handlers).
    #[inline]
    pub(super) fn progress(&self, rounds: usize) -> bool {
        let mut any = false;
        for _ in 0..rounds {
            // SAFETY: the worker is live; single-thread mode, and only this node's thread
            // calls (the runtime's promise).
            if unsafe { sys::ucp_worker_progress(self.worker) } == 0 {
                break;
            }
            any = true;
        }
        any
    }
}

/// A request UCX returned: in progress until [`status`](Req::status) says otherwise; freed
/// by its owner once complete, or at drop.
#[derive(Clone, Copy)]
pub(super) struct Req(pub(super) *mut c_void);

impl Req {
    /// `UCS_INPROGRESS` while it runs, then its final status.
    #[inline]
    pub(super) fn status(self) -> sys::ucs_status_t {
        // SAFETY: a request UCX returned and not yet freed (owners free it once, after this
        // says it completed).
        unsafe { sys::ucp_request_check_status(self.0) }
    }

    /// Release it (complete, or to be cancelled: then UCX releases it when it completes).
    pub(super) fn free(self) {
        // SAFETY: as above; called once per request.
        unsafe { sys::ucp_request_free(self.0) }
    }
}
