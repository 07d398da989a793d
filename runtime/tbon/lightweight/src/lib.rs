//! MRNet's lightweight back-end API in C, over [`converse_tbon`]'s back-end attach mode: a
//! back-end written in C joins a leaf of a tree overlay, receives packets and sends its
//! answers, with the calls and types of MRNet's `libmrnet_lightweight` (`Network_t`,
//! `Stream_t`, `Packet_t`, `NetworkTopology_t`, `Network_recv`, `Stream_send`,
//! `Packet_unpack`, ...). The header is `include/mrnet_lightweight.h`; link with
//! `-lmrnet_lightweight`.
//!
//! ```c
//! Network_t *net = Network_CreateNetworkBE(argc, argv); /* ... PARENT_HOST PARENT_PORT
//!                                                          PARENT_RANK MY_HOST MY_RANK */
//! Packet_t *p = malloc(sizeof(Packet_t));
//! Stream_t *s; int tag, v;
//! while (Network_recv(net, &tag, p, &s) == 1) {
//!     Packet_unpack(p, "%d", &v);
//!     Stream_send(s, tag, "%d", v + 1);
//! }
//! delete_Network_t(net);
//! ```
//!
//! **Differences from MRNet**, each for a reason:
//! - The secret: the leaf accepts only back-ends that prove the network's secret, which
//!   `Network_CreateNetworkBE` reads from the file `CONVERSE_TBON_SECRET_FILE` names (or
//!   `CONVERSE_TBON_SECRET`, hex): MRNet's listeners take anyone who connects.
//! - Ranks: a back-end's rank is below the network's internal ranks (2^24), not above them.
//! - Threads: every call may be made from any thread (this library is also MRNet's
//!   thread-safe `libmrnet_lightweight_r`). A blocking receive gives the network up to
//!   other threads' calls every 20 ms while nothing arrives (the calls take one lock).
//! - A packet's data lives in its network until the next receive into the same `Packet_t`
//!   (MRNet's caller allocates `Packet_t` with `malloc(sizeof(Packet_t))`, uninitialized, so
//!   the network keeps what it received by the `Packet_t`'s address, for the 4,096 addresses
//!   received into most recently and 64 MiB at most). `Network_last_error` (ours) says why
//!   the last call failed.
//! - Strings the network keeps (`Network_last_error`, `Packet_get_FormatString`) stay valid
//!   until the next failing call, or the next receive into that packet: with several
//!   threads, copy them before another thread can make such a call.
//! - A lightweight back-end knows itself and its parent: `NetworkTopology_find_Node` finds
//!   those two, `NetworkTopology_get_Root` gives `NULL`.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
// Every function takes pointers from C, checked for null and used as the header documents;
// marking each `unsafe` would make cbindgen's header no different and C callers no safer.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use converse_tbon::attached::{secret_from_env, AttachPoint, BackEnd};
use converse_tbon::{BaseType, ElemType, Format, Packet, Shape, Stream, TbonError, Value};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A process's rank in the tree.
pub type Rank = u32;
/// A listening port.
pub type Port = u16;
/// A C boolean (0 false, anything else true).
pub type bool_t = c_int;

/// The first tag a program may use (MRNet's `FirstApplicationTag`).
pub const FirstApplicationTag: c_int = 100;

/// The most `Packet_t` addresses whose data a network keeps, and the most bytes: past
/// either, the one received into longest ago is forgotten.
const KEPT_PACKETS: usize = 4096;
const KEPT_BYTES: usize = 64 << 20;

/// How long a blocking receive holds the network while nothing arrives, so that other
/// threads' calls get through.
const RECV_SLICE: Duration = Duration::from_millis(20);

/// A back-end's network (opaque).
#[derive(Debug)]
pub struct Network_t {
    inner: Mutex<Inner>,
    host: CString,
    topology: NetworkTopology_t,
}

#[derive(Debug)]
struct Inner {
    be: BackEnd,
    /// Streams handed out, at stable addresses until the network is deleted.
    streams: HashMap<u32, Box<Stream_t>>,
    /// What was received into each `Packet_t`, by its address.
    packets: HashMap<usize, Kept>,
    /// Each address with the number of the receive into it, oldest first: a stale entry
    /// (its address received into again since) is skipped when it comes up.
    order: VecDeque<(usize, u64)>,
    receives: u64,
    kept_bytes: usize,
    error: CString,
}

#[derive(Debug)]
struct Kept {
    packet: Packet,
    format: CString,
    /// The receive that filled it.
    at: u64,
}

/// A stream (opaque): from [`Network_recv`] or [`Network_get_Stream`]; it belongs to its
/// network.
#[derive(Debug)]
pub struct Stream_t {
    net: *const Network_t,
    id: u32,
}

/// A packet, filled by a receive: its network, stream and tag (MRNet's callers allocate it
/// themselves, `malloc(sizeof(Packet_t))`).
#[repr(C)]
#[derive(Debug)]
pub struct Packet_t {
    /// The network that received it.
    pub net: *const Network_t,
    /// Its stream.
    pub stream_id: c_uint,
    /// Its tag.
    pub tag: c_int,
}

/// What a lightweight back-end knows of the tree: itself and its parent (opaque).
#[derive(Debug)]
pub struct NetworkTopology_t {
    me: Node_t,
    parent: Node_t,
}

/// A process of the tree (opaque).
#[derive(Debug)]
pub struct Node_t {
    host: CString,
    port: Port,
    rank: Rank,
    parent: Rank,
    height: c_uint,
}

/// One value of a format, between the variadic calls (`mrnet_lightweight_varargs.h`) and this
/// library (not for programs).
#[repr(C)]
#[derive(Debug)]
pub struct ctbon_value {
    /// The base type: 0 `c`, 1 `uc`, 2 `hd`, 3 `uhd`, 4 `d`, 5 `ud`, 6 `ld`, 7 `uld`, 8 `f`,
    /// 9 `lf`, 10 `s`.
    pub code: c_int,
    /// 0 a scalar, 1 an array (`a`), 2 a large array (`A`).
    pub array: c_int,
    /// An array's length.
    pub len: u64,
    /// A signed integer.
    pub i: i64,
    /// An unsigned integer.
    pub u: u64,
    /// A floating-point number.
    pub f: f64,
    /// A string, or an array's items.
    pub p: *const c_void,
}

const BASES: [BaseType; 11] = [
    BaseType::Char,
    BaseType::UChar,
    BaseType::Short,
    BaseType::UShort,
    BaseType::Int,
    BaseType::UInt,
    BaseType::Long,
    BaseType::ULong,
    BaseType::Float,
    BaseType::Double,
    BaseType::Str,
];

fn code_of(b: BaseType) -> c_int {
    BASES
        .iter()
        .position(|&x| x == b)
        .map_or(-1, |i| i as c_int)
}

impl Network_t {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic cannot cross into C (every entry point catches it), so a poisoned lock
        // only means a call failed half-way: the state is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn fail(&mut self, e: impl std::fmt::Display) -> c_int {
        self.error = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
        -1
    }

    fn stream(&mut self, net: *const Network_t, id: u32) -> *mut Stream_t {
        let s = self
            .streams
            .entry(id)
            .or_insert_with(|| Box::new(Stream_t { net, id }));
        &mut **s
    }

    /// Keep `packet` as what `p` holds, and fill `p`.
    fn keep(&mut self, net: *const Network_t, p: *mut Packet_t, packet: Packet) {
        let key = p as usize;
        let format = CString::new(packet.format_string()).unwrap_or_default();
        // SAFETY: `p` was checked non-null by the caller and points at a `Packet_t` the
        // program allocated (the header says so).
        unsafe {
            (*p).net = net;
            (*p).stream_id = packet.stream_id();
            (*p).tag = packet.tag();
        }
        self.receives += 1;
        let at = self.receives;
        self.kept_bytes += packet.wire().len();
        if let Some(old) = self.packets.insert(key, Kept { packet, format, at }) {
            self.kept_bytes -= old.packet.wire().len();
        }
        self.order.push_back((key, at));
        while self.packets.len() > KEPT_PACKETS
            || self.kept_bytes > KEPT_BYTES
            || self.order.len() > 2 * KEPT_PACKETS
        {
            let Some((old, when)) = self.order.pop_front() else {
                break;
            };
            // Forget it unless it was received into again (or is the one just kept).
            if old != key && self.packets.get(&old).is_some_and(|k| k.at == when) {
                if let Some(k) = self.packets.remove(&old) {
                    self.kept_bytes -= k.packet.wire().len();
                }
            }
        }
    }
}

/// Run `f`, turning a panic into `fallback` (a panic must not unwind into C).
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

fn net_ref<'a>(net: *mut Network_t) -> Option<&'a Network_t> {
    // SAFETY: a non-null `Network_t*` comes from `Network_CreateNetworkBE` and lives until
    // `delete_Network_t` (the header's contract).
    unsafe { net.cast_const().as_ref() }
}

fn stream_ref<'a>(s: *mut Stream_t) -> Option<&'a Stream_t> {
    // SAFETY: stream pointers are handed out by a network and live as long as it.
    unsafe { s.cast_const().as_ref() }
}

/// A stream and the network it belongs to.
fn stream_net<'a>(s: *mut Stream_t) -> Option<(&'a Stream_t, &'a Network_t)> {
    let s = stream_ref(s)?;
    Some((s, net_ref(s.net.cast_mut())?))
}

/// Join the network as a back-end. `argv` ends with MRNet's five back-end arguments:
/// `PARENT_HOST PARENT_PORT PARENT_RANK MY_HOST MY_RANK`; the secret comes from the
/// environment (`CONVERSE_TBON_SECRET_FILE`, or `CONVERSE_TBON_SECRET`). Returns `NULL`
/// when it cannot attach, after one line on stderr saying why.
#[no_mangle]
pub extern "C" fn Network_CreateNetworkBE(argc: c_int, argv: *mut *mut c_char) -> *mut Network_t {
    guard(std::ptr::null_mut(), || {
        let n = if argv.is_null() {
            0
        } else {
            argc.max(0) as usize
        };
        let args: Vec<String> = (0..n)
            .filter_map(|i| {
                // SAFETY: `argv` holds `argc` C strings, as `main` gets them.
                let a = unsafe { *argv.add(i) };
                // SAFETY: each non-null one is a C string.
                let s = (!a.is_null()).then(|| unsafe { CStr::from_ptr(a) });
                s.map(|s| s.to_string_lossy().into_owned())
            })
            .collect();
        match create(&args) {
            Ok(net) => Box::into_raw(Box::new(net)),
            Err(e) => {
                eprintln!("Network_CreateNetworkBE: {e}");
                std::ptr::null_mut()
            }
        }
    })
}

fn create(args: &[String]) -> Result<Network_t, TbonError> {
    if args.len() < 5 {
        return Err(TbonError::Attach(format!(
            "{} arguments, where the last five are PARENT_HOST PARENT_PORT PARENT_RANK \
             MY_HOST MY_RANK",
            args.len()
        )));
    }
    let tail = &args[args.len() - 5..];
    let port: Port = tail[1]
        .parse()
        .map_err(|_| TbonError::Attach(format!("parent port {:?} is not a port", tail[1])))?;
    let parent: Rank = tail[2]
        .parse()
        .map_err(|_| TbonError::Attach(format!("parent rank {:?} is not a rank", tail[2])))?;
    let rank: Rank = tail[4]
        .parse()
        .map_err(|_| TbonError::Attach(format!("rank {:?} is not a rank", tail[4])))?;
    let point = AttachPoint {
        rank: parent,
        host: tail[0].clone(),
        port,
    };
    let be = BackEnd::attach(&point, rank, &secret_from_env()?)?;
    let cs = |s: &str| CString::new(s.replace('\0', " ")).unwrap_or_default();
    Ok(Network_t {
        host: cs(&tail[3]),
        topology: NetworkTopology_t {
            me: Node_t {
                host: cs(&tail[3]),
                port: 0,
                rank,
                parent,
                height: 0,
            },
            parent: Node_t {
                host: cs(&tail[0]),
                port,
                rank: parent,
                parent: Rank::MAX,
                height: 1,
            },
        },
        inner: Mutex::new(Inner {
            be,
            streams: HashMap::new(),
            packets: HashMap::new(),
            order: VecDeque::new(),
            receives: 0,
            kept_bytes: 0,
            error: CString::default(),
        }),
    })
}

/// Leave the network and free it (its streams and the packets it keeps with it).
#[no_mangle]
pub extern "C" fn delete_Network_t(net: *mut Network_t) {
    if !net.is_null() {
        // SAFETY: made by `Network_CreateNetworkBE` with `Box::into_raw`, deleted once.
        guard((), || drop(unsafe { Box::from_raw(net) }));
    }
}

/// Block until the front-end shuts the network down (or the connection ends).
#[no_mangle]
pub extern "C" fn Network_waitfor_ShutDown(net: *mut Network_t) {
    let Some(n) = net_ref(net) else { return };
    guard((), || loop {
        let mut g = n.lock();
        // Packets that come meanwhile stay for later receives.
        match g.be.wait_for_shutdown_timeout(RECV_SLICE) {
            Ok(false) => {}
            Ok(true) | Err(_) => return,
        }
        drop(g);
        // Other threads' calls get the network between slices.
        std::thread::yield_now();
    })
}

/// 1 if the network has been shut down, else 0.
#[no_mangle]
pub extern "C" fn Network_is_ShutDown(net: *mut Network_t) -> c_char {
    net_ref(net).map_or(1, |n| c_char::from(n.lock().be.is_shut_down()))
}

/// The host name given as this back-end's (its network keeps the string).
#[no_mangle]
pub extern "C" fn Network_get_LocalHostName(net: *mut Network_t) -> *const c_char {
    net_ref(net).map_or(std::ptr::null(), |n| n.host.as_ptr())
}

/// A back-end listens on no port: 0.
#[no_mangle]
pub extern "C" fn Network_get_LocalPort(net: *mut Network_t) -> Port {
    let _ = net;
    0
}

/// This back-end's rank.
#[no_mangle]
pub extern "C" fn Network_get_LocalRank(net: *mut Network_t) -> Rank {
    net_ref(net).map_or(Rank::MAX, |n| n.topology.me.rank)
}

/// Why the last call on this network that returned -1 failed (ours, not MRNet's); the
/// network keeps the string.
#[no_mangle]
pub extern "C" fn Network_last_error(net: *mut Network_t) -> *const c_char {
    net_ref(net).map_or(std::ptr::null(), |n| n.lock().error.as_ptr())
}

fn recv_any(
    net: *mut Network_t,
    otag: *mut c_int,
    packet: *mut Packet_t,
    stream: *mut *mut Stream_t,
    block: bool,
) -> c_int {
    let Some(n) = net_ref(net) else { return -1 };
    if packet.is_null() || stream.is_null() {
        return n.lock().fail("a null packet or stream pointer");
    }
    guard(-1, || loop {
        let mut g = n.lock();
        let got = if block {
            g.be.recv_timeout(RECV_SLICE)
        } else {
            g.be.recv_nonblock()
        };
        match got {
            Ok(Some((s, p))) => {
                let tag = p.tag();
                g.keep(n, packet, p);
                let sp = g.stream(n, s.id());
                // SAFETY: checked non-null above; the caller's out-pointers.
                unsafe {
                    *stream = sp;
                    if !otag.is_null() {
                        *otag = tag;
                    }
                }
                return 1;
            }
            Ok(None) if !block => return 0,
            Ok(None) => {
                drop(g);
                // Other threads' calls get the network between slices.
                std::thread::yield_now();
            }
            Err(e) => return g.fail(e),
        }
    })
}

/// Receive the next packet on any stream, waiting for it: 1, with `*otag`, `*packet` and
/// `*stream` filled; -1 on failure (the shutdown, a lost connection).
#[no_mangle]
pub extern "C" fn Network_recv(
    net: *mut Network_t,
    otag: *mut c_int,
    packet: *mut Packet_t,
    stream: *mut *mut Stream_t,
) -> c_int {
    recv_any(net, otag, packet, stream, true)
}

/// As [`Network_recv`] without waiting: 0 when nothing is there.
#[no_mangle]
pub extern "C" fn Network_recv_nonblock(
    net: *mut Network_t,
    otag: *mut c_int,
    packet: *mut Packet_t,
    stream: *mut *mut Stream_t,
) -> c_int {
    recv_any(net, otag, packet, stream, false)
}

/// What this back-end knows of the tree.
#[no_mangle]
pub extern "C" fn Network_get_NetworkTopology(net: *mut Network_t) -> *const NetworkTopology_t {
    net_ref(net).map_or(std::ptr::null(), |n| &n.topology)
}

/// This back-end or its parent, by rank; `NULL` for any other.
#[no_mangle]
pub extern "C" fn NetworkTopology_find_Node(
    top: *const NetworkTopology_t,
    rank: Rank,
) -> *const Node_t {
    // SAFETY: a topology pointer comes from its network.
    let Some(t) = (unsafe { top.as_ref() }) else {
        return std::ptr::null();
    };
    if t.me.rank == rank {
        &t.me
    } else if t.parent.rank == rank {
        &t.parent
    } else {
        std::ptr::null()
    }
}

/// The root is not known to a lightweight back-end: `NULL`.
#[no_mangle]
pub extern "C" fn NetworkTopology_get_Root(top: *const NetworkTopology_t) -> *const Node_t {
    let _ = top;
    std::ptr::null()
}

fn node<'a>(n: *const Node_t) -> Option<&'a Node_t> {
    // SAFETY: node pointers come from their network's topology.
    unsafe { n.as_ref() }
}

/// A node's host name (its network keeps the string).
#[no_mangle]
pub extern "C" fn NetworkTopology_Node_get_HostName(n: *const Node_t) -> *const c_char {
    node(n).map_or(std::ptr::null(), |n| n.host.as_ptr())
}

/// A node's listening port (0 for a back-end).
#[no_mangle]
pub extern "C" fn NetworkTopology_Node_get_Port(n: *const Node_t) -> Port {
    node(n).map_or(0, |n| n.port)
}

/// A node's rank.
#[no_mangle]
pub extern "C" fn NetworkTopology_Node_get_Rank(n: *const Node_t) -> Rank {
    node(n).map_or(Rank::MAX, |n| n.rank)
}

/// A node's parent's rank (`UINT32_MAX` when not known).
#[no_mangle]
pub extern "C" fn NetworkTopology_Node_get_Parent(n: *const Node_t) -> Rank {
    node(n).map_or(Rank::MAX, |n| n.parent)
}

/// The height of the subtree at a node as far as this back-end knows (itself 0, its parent
/// 1).
#[no_mangle]
pub extern "C" fn NetworkTopology_Node_find_SubTreeHeight(n: *const Node_t) -> c_uint {
    node(n).map_or(0, |n| n.height)
}

/// Stream `id` if this back-end may use it (opened to it, or its own rank: its singlecast
/// stream to the front-end); else `NULL`.
#[no_mangle]
pub extern "C" fn Network_get_Stream(net: *mut Network_t, id: c_uint) -> *mut Stream_t {
    let Some(n) = net_ref(net) else {
        return std::ptr::null_mut();
    };
    let mut g = n.lock();
    if g.be.has_stream(id) {
        g.stream(n, id)
    } else {
        std::ptr::null_mut()
    }
}

/// Streams belong to their network, which frees them: nothing to do.
#[no_mangle]
pub extern "C" fn delete_Stream_t(stream: *mut Stream_t) {
    let _ = stream;
}

/// A stream's id.
#[no_mangle]
pub extern "C" fn Stream_get_Id(stream: *mut Stream_t) -> c_uint {
    stream_ref(stream).map_or(c_uint::MAX, |s| s.id)
}

/// Send a received packet's data on `stream`, with the packet's tag (as
/// [`Packet_set_Tag`] left it): 0, or -1.
#[no_mangle]
pub extern "C" fn Stream_send_packet(stream: *mut Stream_t, packet: *mut Packet_t) -> c_int {
    let Some((s, n)) = stream_net(stream) else {
        return -1;
    };
    guard(-1, || {
        let mut g = n.lock();
        // SAFETY: a packet pointer the program passes, checked non-null.
        let Some(pk) = (unsafe { packet.as_ref() }) else {
            return g.fail("a null packet");
        };
        let Some(kept) = g.packets.get(&(packet as usize)) else {
            return g.fail("the packet holds nothing received");
        };
        let (format, values) = (kept.packet.format_string(), kept.packet.values());
        let r =
            g.be.send(&Stream::from_id(s.id), pk.tag, &format, values.as_slice());
        match r {
            Ok(()) => 0,
            Err(e) => g.fail(e),
        }
    })
}

/// Everything is written when a send returns: 0 while the connection is there, else -1.
#[no_mangle]
pub extern "C" fn Stream_flush(stream: *mut Stream_t) -> c_int {
    let Some((_, n)) = stream_net(stream) else {
        return -1;
    };
    let mut g = n.lock();
    match g.be.flush() {
        Ok(()) => 0,
        Err(e) => g.fail(e),
    }
}

/// Receive the next packet of `stream` (others stay for later receives): 1 with `*tag` and
/// `*packet` filled, 0 when `blocking` is false and none is there, -1 on failure.
#[no_mangle]
pub extern "C" fn Stream_recv(
    stream: *mut Stream_t,
    tag: *mut c_int,
    packet: *mut Packet_t,
    blocking: bool_t,
) -> c_int {
    let Some((s, n)) = stream_net(stream) else {
        return -1;
    };
    if packet.is_null() {
        return n.lock().fail("a null packet pointer");
    }
    guard(-1, || loop {
        let mut g = n.lock();
        let wait = if blocking != 0 {
            RECV_SLICE
        } else {
            Duration::ZERO
        };
        match g.be.recv_on(&Stream::from_id(s.id), wait) {
            Ok(Some(p)) => {
                let t = p.tag();
                g.keep(n, packet, p);
                if !tag.is_null() {
                    // SAFETY: the caller's out-pointer, checked non-null.
                    unsafe { *tag = t };
                }
                return 1;
            }
            Ok(None) if blocking == 0 => return 0,
            Ok(None) => {
                drop(g);
                std::thread::yield_now();
            }
            Err(e) => return g.fail(e),
        }
    })
}

/// [`Stream_recv`] under the name MRNet's guide prints.
#[no_mangle]
pub extern "C" fn Stream_rcv(
    stream: *mut Stream_t,
    tag: *mut c_int,
    packet: *mut Packet_t,
    blocking: bool_t,
) -> c_int {
    Stream_recv(stream, tag, packet, blocking)
}

/// 1 if the front-end closed the stream, else 0.
#[no_mangle]
pub extern "C" fn Stream_is_Closed(stream: *mut Stream_t) -> c_char {
    stream_net(stream).map_or(1, |(s, n)| c_char::from(n.lock().be.is_closed(s.id)))
}

/// A packet's tag.
#[no_mangle]
pub extern "C" fn Packet_get_Tag(packet: *mut Packet_t) -> c_int {
    // SAFETY: a packet pointer the program passes.
    unsafe { packet.as_ref() }.map_or(-1, |p| p.tag)
}

/// Set a packet's tag (for [`Stream_send_packet`]).
#[no_mangle]
pub extern "C" fn Packet_set_Tag(packet: *mut Packet_t, tag: c_int) {
    // SAFETY: as above.
    if let Some(p) = unsafe { packet.as_mut() } {
        p.tag = tag;
    }
}

/// A packet's stream id.
#[no_mangle]
pub extern "C" fn Packet_get_StreamId(packet: *mut Packet_t) -> c_uint {
    // SAFETY: as above.
    unsafe { packet.as_ref() }.map_or(c_uint::MAX, |p| p.stream_id)
}

/// Set a packet's stream id.
#[no_mangle]
pub extern "C" fn Packet_set_StreamId(packet: *mut Packet_t, strm_id: c_uint) {
    // SAFETY: as above.
    if let Some(p) = unsafe { packet.as_mut() } {
        p.stream_id = strm_id;
    }
}

/// A received packet's format string (its network keeps the string); `NULL` for a packet
/// that holds nothing received.
#[no_mangle]
pub extern "C" fn Packet_get_FormatString(packet: *mut Packet_t) -> *const c_char {
    // SAFETY: as above.
    let Some(p) = (unsafe { packet.as_ref() }) else {
        return std::ptr::null();
    };
    let Some(n) = net_ref(p.net.cast_mut()) else {
        return std::ptr::null();
    };
    let g = n.lock();
    // The string stays where it is until the packet is received into again.
    g.packets
        .get(&(packet as usize))
        .map_or(std::ptr::null(), |k| k.format.as_ptr())
}

/// The elements of format `fmt`: each one's base code and array kind into `codes` and
/// `arrays` (room for `max`); returns how many, or -1 if it does not parse or is longer.
#[no_mangle]
pub extern "C" fn ctbon_format(
    fmt: *const c_char,
    codes: *mut c_int,
    arrays: *mut c_int,
    max: c_int,
) -> c_int {
    if fmt.is_null() || codes.is_null() || arrays.is_null() {
        return -1;
    }
    // SAFETY: a C string from the program.
    let text = unsafe { CStr::from_ptr(fmt) }.to_string_lossy();
    let Ok(f) = Format::parse(&text) else {
        return -1;
    };
    if f.len() > max.max(0) as usize {
        return -1;
    }
    for (i, e) in f.elems().iter().enumerate() {
        // SAFETY: `max` entries of room, checked above.
        unsafe {
            *codes.add(i) = code_of(e.base);
            *arrays.add(i) = match e.shape {
                Shape::Scalar => 0,
                Shape::Array => 1,
                Shape::LargeArray => 2,
            };
        }
    }
    f.len() as c_int
}

/// One C value as a [`Value`] of element type `t`.
fn value_of(v: &ctbon_value, t: ElemType) -> Option<Value> {
    let scalar = |base: BaseType, at: *const c_void, i: usize| -> Option<Value> {
        // SAFETY: `at` points at `len` items of the C type the format names (the header's
        // contract for arrays); scalars come by value instead.
        unsafe {
            Some(match base {
                BaseType::Char => Value::Char(*at.cast::<i8>().add(i)),
                BaseType::UChar => Value::UChar(*at.cast::<u8>().add(i)),
                BaseType::Short => Value::Short(*at.cast::<i16>().add(i)),
                BaseType::UShort => Value::UShort(*at.cast::<u16>().add(i)),
                BaseType::Int => Value::Int(*at.cast::<i32>().add(i)),
                BaseType::UInt => Value::UInt(*at.cast::<u32>().add(i)),
                BaseType::Long => Value::Long(*at.cast::<i64>().add(i)),
                BaseType::ULong => Value::ULong(*at.cast::<u64>().add(i)),
                BaseType::Float => Value::Float(*at.cast::<f32>().add(i)),
                BaseType::Double => Value::Double(*at.cast::<f64>().add(i)),
                BaseType::Str => {
                    let s = *at.cast::<*const c_char>().add(i);
                    if s.is_null() {
                        return None;
                    }
                    Value::Str(CStr::from_ptr(s).to_string_lossy().into_owned())
                }
            })
        }
    };
    if t.shape != Shape::Scalar {
        if v.p.is_null() && v.len > 0 {
            return None;
        }
        let items = (0..v.len as usize)
            .map(|i| scalar(t.base, v.p, i))
            .collect::<Option<Vec<_>>>()?;
        return Some(Value::Array(t, items));
    }
    Some(match t.base {
        BaseType::Char => Value::Char(v.i as i8),
        BaseType::UChar => Value::UChar(v.u as u8),
        BaseType::Short => Value::Short(v.i as i16),
        BaseType::UShort => Value::UShort(v.u as u16),
        BaseType::Int => Value::Int(v.i as i32),
        BaseType::UInt => Value::UInt(v.u as u32),
        BaseType::Long => Value::Long(v.i),
        BaseType::ULong => Value::ULong(v.u),
        BaseType::Float => Value::Float(v.f as f32),
        BaseType::Double => Value::Double(v.f),
        BaseType::Str => {
            if v.p.is_null() {
                return None;
            }
            // SAFETY: a C string from the program.
            Value::Str(
                unsafe { CStr::from_ptr(v.p.cast()) }
                    .to_string_lossy()
                    .into_owned(),
            )
        }
    })
}

/// `Stream_send`'s second half: send the `n` values `vals` as `fmt` with `tag`. 0, or -1.
#[no_mangle]
pub extern "C" fn ctbon_stream_send_values(
    stream: *mut Stream_t,
    tag: c_int,
    fmt: *const c_char,
    vals: *const ctbon_value,
    n: c_int,
) -> c_int {
    let Some((s, net)) = stream_net(stream) else {
        return -1;
    };
    guard(-1, || {
        let mut g = net.lock();
        if fmt.is_null() || (vals.is_null() && n > 0) {
            return g.fail("a null format or values");
        }
        // SAFETY: a C string from the program.
        let text = unsafe { CStr::from_ptr(fmt) }
            .to_string_lossy()
            .into_owned();
        let f = match Format::parse(&text) {
            Ok(f) => f,
            Err(e) => return g.fail(e),
        };
        if f.len() != n.max(0) as usize {
            return g.fail("the values do not match the format");
        }
        let mut values = Vec::with_capacity(f.len());
        for (i, t) in f.elems().iter().enumerate() {
            // SAFETY: `n` values, checked against the format.
            let v = unsafe { &*vals.add(i) };
            match value_of(v, *t) {
                Some(x) => values.push(x),
                None => return g.fail(format!("element {} is a null pointer", i + 1)),
            }
        }
        match g
            .be
            .send(&Stream::from_id(s.id), tag, &text, values.as_slice())
        {
            Ok(()) => 0,
            Err(e) => g.fail(e),
        }
    })
}

/// A copy in memory from `malloc`, which the program frees (as MRNet's unpack gives
/// strings and arrays); `NULL` for none or if out of memory.
fn malloc_copy(bytes: &[u8]) -> *mut c_void {
    // SAFETY: a fresh allocation of the size written.
    unsafe {
        let p = libc::malloc(bytes.len().max(1));
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len());
        }
        p
    }
}

fn malloc_str(s: &str) -> *mut c_void {
    let mut b = s.replace('\0', " ").into_bytes();
    b.push(0);
    malloc_copy(&b)
}

/// One [`Value`] as a C value (strings and arrays copied into `malloc` memory).
fn c_value(v: &Value) -> ctbon_value {
    let mut out = ctbon_value {
        code: -1,
        array: 0,
        len: 0,
        i: 0,
        u: 0,
        f: 0.0,
        p: std::ptr::null(),
    };
    match v {
        Value::Char(x) => out.i = (*x).into(),
        Value::UChar(x) => out.u = (*x).into(),
        Value::Short(x) => out.i = (*x).into(),
        Value::UShort(x) => out.u = (*x).into(),
        Value::Int(x) => out.i = (*x).into(),
        Value::UInt(x) => out.u = (*x).into(),
        Value::Long(x) => out.i = *x,
        Value::ULong(x) => out.u = *x,
        Value::Float(x) => out.f = (*x).into(),
        Value::Double(x) => out.f = *x,
        Value::Str(s) => out.p = malloc_str(s),
        Value::Array(t, items) => {
            out.array = if t.shape == Shape::LargeArray { 2 } else { 1 };
            out.len = items.len() as u64;
            let mut bytes: Vec<u8> = Vec::new();
            for it in items {
                match it {
                    Value::Char(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::UChar(x) => bytes.push(*x),
                    Value::Short(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::UShort(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::Int(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::UInt(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::Long(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::ULong(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::Float(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    Value::Double(x) => bytes.extend_from_slice(&x.to_ne_bytes()),
                    // An array of strings: an array of `malloc`ed strings.
                    Value::Str(s) => {
                        bytes.extend_from_slice(&(malloc_str(s) as usize).to_ne_bytes())
                    }
                    Value::Array(..) => {}
                }
            }
            out.p = malloc_copy(&bytes);
        }
    }
    out.code = match v {
        Value::Array(t, _) => code_of(t.base),
        other => other_code(other),
    };
    out
}

fn other_code(v: &Value) -> c_int {
    use converse_tbon::Element;
    code_of(v.elem_type().base)
}

/// `Packet_unpack`'s first half: the values of `packet` as `fmt` (which must be its format)
/// into `out` (room for `max`); returns how many, or -1.
#[no_mangle]
pub extern "C" fn ctbon_packet_values(
    packet: *mut Packet_t,
    fmt: *const c_char,
    out: *mut ctbon_value,
    max: c_int,
) -> c_int {
    // SAFETY: a packet pointer the program passes.
    let Some(p) = (unsafe { packet.as_ref() }) else {
        return -1;
    };
    let Some(n) = net_ref(p.net.cast_mut()) else {
        return -1;
    };
    if fmt.is_null() || out.is_null() {
        return n.lock().fail("a null format or output");
    }
    guard(-1, || {
        let mut g = n.lock();
        // SAFETY: a C string from the program.
        let text = unsafe { CStr::from_ptr(fmt) }
            .to_string_lossy()
            .into_owned();
        let f = match Format::parse(&text) {
            Ok(f) => f,
            Err(e) => return g.fail(e),
        };
        let Some(kept) = g.packets.get(&(packet as usize)) else {
            return g.fail("the packet holds nothing received");
        };
        if !kept.packet.has_format(&f) {
            let why = format!(
                "format {text:?} is not the packet's ({:?})",
                kept.packet.format_string()
            );
            return g.fail(why);
        }
        let values = kept.packet.values();
        if values.len() > max.max(0) as usize {
            return g.fail("more values than room");
        }
        for (i, v) in values.iter().enumerate() {
            // SAFETY: `max` entries of room, checked above.
            unsafe { *out.add(i) = c_value(v) };
        }
        values.len() as c_int
    })
}
