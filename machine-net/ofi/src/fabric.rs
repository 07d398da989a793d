//! The libfabric objects of one node, opened in order and closed in reverse: the provider's
//! description (`fi_info`), fabric, domain, address vector, completion queue and the reliable
//! datagram endpoint. Nothing here knows the runtime; `layer.rs` drives it.

use crate::sys;
use std::ffi::{CStr, CString};
use std::os::raw::{c_int, c_void};
use std::ptr;

/// libfabric's description of an error code (`fi_strerror`), with the code.
pub(crate) fn errstr(rc: isize) -> String {
    let code = rc.unsigned_abs() as c_int;
    let Ok(lib) = sys::lib() else {
        return format!("libfabric error -{code}");
    };
    // SAFETY: fi_strerror returns a pointer to a static string for any code.
    let s = unsafe { CStr::from_ptr((lib.fi_strerror)(code)) };
    format!("{} (-{code})", s.to_string_lossy())
}

/// What the layer asks of a provider.
#[derive(Debug, Clone)]
pub(crate) struct Want {
    /// The provider's name (`tcp;ofi_rxm`, `shm`, ...), or any suitable one.
    pub(crate) provider: Option<String>,
    /// The address to open the endpoint on (`FI_SOURCE`), for providers that take an IP.
    pub(crate) node: Option<String>,
    /// The name of the endpoint for the shared-memory provider, whose name is its segment's
    /// in /dev/shm: one with the job's prefix, which charmrun removes however the job ends
    /// (shm's own, `<pid>:0:0`, stays behind a killed process).
    pub(crate) shm_name: Option<String>,
    /// Nodes in the job: the address vector's size.
    pub(crate) nodes: usize,
}

/// Providers that `ofi` alone (no provider named) never picks: `shm` reaches one host only
/// (`ofi+shm` names it), hooks and `ofi_mrail` wrap another provider, `sockets` is
/// libfabric's deprecated reference provider, and rxd (over udp) lost the order of a pair's
/// messages in the conformance suite's FIFO test with libfabric 1.17 (4 nodes, all-to-all;
/// README.md), so it is used only when named with `ofi.provider`.
fn auto_skips(name: &str) -> bool {
    name == "shm"
        || name.starts_with("ofi_hook")
        || name.contains("mrail")
        || name == "sockets"
        || name.contains("ofi_rxd")
}

/// A `fi_info` list returned by `fi_getinfo`, freed on drop.
struct InfoList(*mut sys::fi_info, &'static sys::Lib);

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a list fi_getinfo returned (or fi_dupinfo), freed once.
            unsafe { (self.1.fi_freeinfo)(self.0) }
        }
    }
}

impl InfoList {
    /// Every entry, in libfabric's order of preference.
    fn iter(&self) -> impl Iterator<Item = *mut sys::fi_info> + '_ {
        let mut cur = self.0;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            let now = cur;
            // SAFETY: a non-null entry of the list, which lives as long as `self`.
            cur = unsafe { (*cur).next };
            Some(now)
        })
    }
}

/// The provider's name of an entry.
fn prov_name(info: *const sys::fi_info) -> String {
    // SAFETY: entries of a fi_getinfo list have fabric attributes with a provider name, or
    // null pointers, which are checked.
    unsafe {
        let fa = (*info).fabric_attr;
        if fa.is_null() || (*fa).prov_name.is_null() {
            return String::new();
        }
        CStr::from_ptr((*fa).prov_name)
            .to_string_lossy()
            .into_owned()
    }
}

/// `fi_getinfo` for reliable datagram endpoints with tagged messages, `FI_SOURCE` and
/// send-after-send ordering.
fn getinfo(
    lib: &'static sys::Lib,
    provider: Option<&str>,
    node: Option<&str>,
    src_str: Option<&str>,
) -> Result<InfoList, isize> {
    // SAFETY: fi_dupinfo(NULL) is fi_allocinfo: a zeroed fi_info with its attribute structs.
    let hints = InfoList(unsafe { (lib.fi_dupinfo)(ptr::null()) }, lib);
    if hints.0.is_null() {
        return Err(-(sys::FI_ENOMEM as isize));
    }
    let node = node.and_then(|n| CString::new(n).ok());
    // SAFETY: the attribute pointers of an allocated fi_info are valid; strings handed to
    // it are malloc'd (strdup), since fi_freeinfo frees them.
    unsafe {
        let h = hints.0;
        (*h).caps = sys::FI_TAGGED as u64 | sys::FI_SOURCE as u64;
        // Contexts we pass are pointers to memory the provider may use (fi_context2).
        (*h).mode = sys::FI_CONTEXT as u64 | sys::FI_CONTEXT2 as u64;
        (*(*h).ep_attr).type_ = sys::FI_EP_RDM;
        (*(*h).tx_attr).msg_order = sys::FI_ORDER_SAS as u64;
        (*(*h).rx_attr).msg_order = sys::FI_ORDER_SAS as u64;
        // One thread drives a node's objects (the runtime's contract): providers may drop
        // their locks.
        (*(*h).domain_attr).threading = sys::FI_THREAD_DOMAIN;
        (*(*h).domain_attr).av_type = sys::FI_AV_TABLE;
        // No registration modes: messages are sent from and received into ordinary memory;
        // a provider that needs registered memory (rxm over verbs) registers its own bounce
        // buffers and, for large messages, the user's through libfabric's registration cache.
        (*(*h).domain_attr).mr_mode = 0;
        if let Some(src) = src_str.and_then(|a| CString::new(a).ok()) {
            (*h).addr_format = sys::FI_ADDR_STR;
            (*h).src_addrlen = src.as_bytes_with_nul().len();
            (*h).src_addr = libc::strdup(src.as_ptr()).cast();
        }
        if let Some(p) = provider {
            let c = CString::new(p).map_err(|_| -(sys::FI_EINVAL as isize))?;
            (*(*h).fabric_attr).prov_name = libc::strdup(c.as_ptr());
        }
        let mut out = ptr::null_mut();
        let (n, flags) = match &node {
            Some(n) => (n.as_ptr(), sys::FI_SOURCE as u64),
            None => (ptr::null(), 0),
        };
        let rc = (lib.fi_getinfo)(sys::API_VERSION, n, ptr::null(), flags, h, &mut out);
        let list = InfoList(out, lib);
        if rc != 0 {
            return Err(rc as isize);
        }
        Ok(list)
    }
}

/// The providers of this machine that serve this layer (reliable datagram endpoints with
/// tagged messages), for error messages and the README.
pub(crate) fn providers() -> Vec<String> {
    let Ok(lib) = sys::lib() else {
        return Vec::new();
    };
    let mut names: Vec<String> = match getinfo(lib, None, None, None) {
        Ok(list) => list.iter().map(|i| prov_name(i)).collect(),
        Err(_) => Vec::new(),
    };
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| !n.is_empty() && seen.insert(n.clone()));
    names
}

/// A node's libfabric objects.
pub(crate) struct Fabric {
    lib: &'static sys::Lib,
    info: *mut sys::fi_info,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    av: *mut sys::fid_av,
    cq: *mut sys::fid_cq,
    ep: *mut sys::fid_ep,
    /// The completion queue's file descriptor, where the provider gives one (`FI_WAIT_FD`).
    wait_fd: Option<c_int>,
    provider: String,
    inject: usize,
    rx_size: usize,
}

// SAFETY: the objects are used by one thread at a time (the runtime moves a Machine to its
// communication thread, never shares it), which FI_THREAD_DOMAIN allows.
unsafe impl Send for Fabric {}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("provider", &self.provider)
            .field("wait_fd", &self.wait_fd)
            .finish_non_exhaustive()
    }
}

/// Why a node's objects could not be opened: the call, libfabric's words, and for a provider
/// not found, the ones there are.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// No provider matches.
    NoProvider {
        asked: Option<String>,
        available: Vec<String>,
    },
    /// A call failed.
    Call { what: &'static str, rc: isize },
    /// libfabric could not be loaded.
    Load(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NoProvider { asked, available } => {
                let avail = if available.is_empty() {
                    "none".to_owned()
                } else {
                    available.join(", ")
                };
                match asked {
                    Some(p) => write!(
                        f,
                        "libfabric has no provider '{p}' with reliable datagram endpoints and \
                         tagged messages on this machine (available: {avail})"
                    ),
                    None => write!(
                        f,
                        "libfabric has no provider with reliable datagram endpoints and tagged \
                         messages on this machine that reaches other hosts (available: {avail})"
                    ),
                }
            }
            OpenError::Call { what, rc } => write!(f, "{what}: {}", errstr(*rc)),
            OpenError::Load(why) => f.write_str(why),
        }
    }
}

fn check(what: &'static str, rc: isize) -> Result<(), OpenError> {
    if rc < 0 {
        Err(OpenError::Call { what, rc })
    } else {
        Ok(())
    }
}

impl Fabric {
    /// Find the provider and open its objects; the endpoint is enabled and has its address.
    pub(crate) fn open(want: &Want) -> Result<Fabric, OpenError> {
        let lib = sys::lib().map_err(OpenError::Load)?;
        let no_provider = || OpenError::NoProvider {
            asked: want.provider.clone(),
            available: providers(),
        };
        let shm = want.provider.as_deref() == Some("shm");
        let src = want
            .shm_name
            .as_ref()
            .filter(|_| shm)
            .map(|n| format!("fi_shm://{n}"));
        let list = getinfo(lib, want.provider.as_deref(), None, src.as_deref()).map_err(|rc| {
            if rc == -(sys::FI_ENODATA as isize) {
                no_provider()
            } else {
                OpenError::Call {
                    what: "fi_getinfo",
                    rc,
                }
            }
        })?;
        let chosen = list
            .iter()
            .find(|&i| want.provider.is_some() || !auto_skips(&prov_name(i)))
            .ok_or_else(no_provider)?;
        let provider = prov_name(chosen);
        // SAFETY: an entry of the list, whose address format is a plain field.
        let sockaddr = matches!(
            unsafe { (*chosen).addr_format },
            sys::FI_SOCKADDR_IN | sys::FI_SOCKADDR_IN6 | sys::FI_SOCKADDR
        );
        // A provider on IP opens its endpoint on the address that routes to the launcher (a
        // host's other interfaces may not reach the peers); ask again with it as source.
        let list = match (&want.node, sockaddr) {
            (Some(node), true) => {
                getinfo(lib, Some(&provider), Some(node), None).map_err(|rc| OpenError::Call {
                    what: "fi_getinfo on the launcher's interface",
                    rc,
                })?
            }
            _ => {
                // SAFETY: duplicates one entry (its `next` is not followed) to own it alone.
                let one = unsafe { (lib.fi_dupinfo)(chosen) };
                InfoList(one, lib)
            }
        };
        let info = list.iter().next().ok_or_else(no_provider)?;
        // SAFETY: duplicated to outlive `list`; freed in Drop.
        let info = unsafe { (lib.fi_dupinfo)(info) };
        if info.is_null() {
            return Err(OpenError::Call {
                what: "fi_dupinfo",
                rc: -(sys::FI_ENOMEM as isize),
            });
        }
        let mut f = Fabric {
            lib,
            info,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            av: ptr::null_mut(),
            cq: ptr::null_mut(),
            ep: ptr::null_mut(),
            wait_fd: None,
            provider,
            // SAFETY: tx_attr of a fi_getinfo entry is valid.
            inject: unsafe { (*(*info).tx_attr).inject_size },
            // SAFETY: likewise rx_attr.
            rx_size: unsafe { (*(*info).rx_attr).size },
        };
        // Each step stores the object as soon as it exists, so an error closes what was
        // opened (Drop).
        // SAFETY: the calls of libfabric's man pages, in their order, on objects just opened.
        unsafe {
            check(
                "fi_fabric",
                (lib.fi_fabric)((*info).fabric_attr, &mut f.fabric, ptr::null_mut()) as isize,
            )?;
            check(
                "fi_domain",
                sys::domain(f.fabric, info, &mut f.domain) as isize,
            )?;
            let mut av_attr = sys::fi_av_attr {
                type_: sys::FI_AV_TABLE,
                count: want.nodes.max(1),
                ..Default::default()
            };
            check(
                "fi_av_open",
                sys::av_open(f.domain, &mut av_attr, &mut f.av) as isize,
            )?;
            // Room for every operation the endpoint's queues can hold.
            let cq_size = ((*(*info).tx_attr).size + (*(*info).rx_attr).size).clamp(1024, 1 << 20);
            f.open_cq(cq_size)?;
            check(
                "fi_endpoint",
                sys::endpoint(f.domain, info, &mut f.ep) as isize,
            )?;
            check(
                "fi_ep_bind (av)",
                sys::ep_bind(f.ep, &mut (*f.av).fid, 0) as isize,
            )?;
            check(
                "fi_ep_bind (cq)",
                sys::ep_bind(
                    f.ep,
                    &mut (*f.cq).fid,
                    (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
                ) as isize,
            )?;
            check("fi_enable", sys::enable(f.ep) as isize)?;
        }
        Ok(f)
    }

    /// The completion queue, with a file descriptor to sleep on where the provider has one.
    ///
    /// # Safety
    /// `self.domain` is open.
    unsafe fn open_cq(&mut self, size: usize) -> Result<(), OpenError> {
        let mut attr = sys::fi_cq_attr {
            size,
            format: sys::FI_CQ_FORMAT_TAGGED,
            wait_obj: sys::FI_WAIT_FD,
            ..Default::default()
        };
        // SAFETY: the caller's domain; attr lives across the call.
        if unsafe { sys::cq_open(self.domain, &mut attr, &mut self.cq) } == 0 {
            let mut fd: c_int = -1;
            // SAFETY: FI_GETWAIT on a CQ with FI_WAIT_FD writes an int.
            let rc = unsafe {
                sys::control(
                    &mut (*self.cq).fid,
                    sys::FI_GETWAIT as c_int,
                    (&mut fd as *mut c_int).cast::<c_void>(),
                )
            };
            if rc == 0 && fd >= 0 {
                self.wait_fd = Some(fd);
                return Ok(());
            }
            // SAFETY: the CQ just opened, closed once and forgotten.
            unsafe { sys::close(&mut (*self.cq).fid) };
            self.cq = ptr::null_mut();
        }
        // No wait object: `wait` sleeps in slices (layer.rs says how long).
        attr.wait_obj = sys::FI_WAIT_NONE;
        // SAFETY: as above.
        check(
            "fi_cq_open",
            unsafe { sys::cq_open(self.domain, &mut attr, &mut self.cq) } as isize,
        )
    }

    /// The endpoint's address, as peers insert it into their address vectors.
    pub(crate) fn name(&self) -> Result<Vec<u8>, OpenError> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: the enabled endpoint; buf holds len bytes.
        let mut rc = unsafe { sys::getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
        if rc == -(sys::FI_ETOOSMALL as c_int) {
            buf.resize(len, 0);
            // SAFETY: as above, with the size it asked for.
            rc = unsafe { sys::getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
        }
        check("fi_getname", rc as isize)?;
        buf.truncate(len);
        Ok(buf)
    }

    /// Insert a peer's address; its handle for sends (`FI_AV_TABLE`: the insertion index).
    pub(crate) fn insert(&mut self, addr: &[u8]) -> Result<sys::fi_addr_t, OpenError> {
        let mut out: sys::fi_addr_t = sys::ADDR_NOTAVAIL;
        // SAFETY: the open AV; one address of the provider's format (the caller checked the
        // peer runs the same provider), read during the call only.
        let n = unsafe { sys::av_insert(self.av, addr.as_ptr().cast(), 1, &mut out) };
        if n != 1 {
            return Err(OpenError::Call {
                what: "fi_av_insert",
                rc: if n < 0 {
                    n as isize
                } else {
                    -(sys::FI_EINVAL as isize)
                },
            });
        }
        Ok(out)
    }

    pub(crate) fn provider(&self) -> &str {
        &self.provider
    }

    /// Largest message sent with `fi_tinject` (no completion, buffer free at once).
    pub(crate) fn inject_size(&self) -> usize {
        self.inject
    }

    /// Receives the endpoint's queue holds at once.
    pub(crate) fn rx_size(&self) -> usize {
        self.rx_size
    }

    pub(crate) fn wait_fd(&self) -> Option<c_int> {
        self.wait_fd
    }

    pub(crate) fn ep(&self) -> *mut sys::fid_ep {
        self.ep
    }

    pub(crate) fn cq(&self) -> *mut sys::fid_cq {
        self.cq
    }

    /// Whether the completion queue's descriptor may be slept on now (`fi_trywait`): false
    /// when completions or progress are pending, which a sleep would miss.
    pub(crate) fn trywait(&self) -> bool {
        let mut fids = [
            // SAFETY: the open CQ's fid.
            unsafe { &mut (*self.cq).fid as *mut sys::fid },
        ];
        // SAFETY: the open fabric and a list of one open fid.
        unsafe { sys::trywait(self.fabric, fids.as_mut_ptr(), 1) == 0 }
    }

    /// The provider's words for an error completion.
    pub(crate) fn cq_error_text(&self, e: &sys::fi_cq_err_entry) -> String {
        let mut buf = [0 as std::os::raw::c_char; 256];
        // SAFETY: the open CQ and the error entry it just gave (err_data valid until the next
        // read); the returned string is the provider's or buf.
        let s =
            unsafe { sys::cq_strerror(self.cq, e.prov_errno, e.err_data, buf.as_mut_ptr(), 256) };
        let prov = if s.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated string from the provider.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        };
        format!("{}: {prov}", errstr(-(e.err as isize)))
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: each object closed once, endpoint first (it uses the others), each after
        // what depends on it; a null one was never opened. Posted receives end with the
        // endpoint, before their buffers are freed (layer.rs drops this first).
        unsafe {
            if !self.ep.is_null() {
                sys::close(&mut (*self.ep).fid);
            }
            if !self.av.is_null() {
                sys::close(&mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                sys::close(&mut (*self.cq).fid);
            }
            if !self.domain.is_null() {
                sys::close(&mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                sys::close(&mut (*self.fabric).fid);
            }
            if !self.info.is_null() {
                (self.lib.fi_freeinfo)(self.info);
            }
        }
    }
}
