//! Work that any PE of a node may run (Argobots' shared pools, Converse's node queue): a
//! closure posted to the node's queue is run by the first PE of the node free to take it, so
//! PEs that finish their own work early take what the busy ones have not reached.
//!
//! The closure stays in this process: the node message carries only a number, which keys it in
//! a process-wide table (a mutex; one lock per item to put and one to take), so nothing from
//! the wire is ever taken for a pointer. A closure whose message never runs (the job ends
//! first) is dropped with the process.

use converse::{HandlerId, Message, Pe};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// A piece of shared work.
pub(crate) type Work = Box<dyn FnOnce(&mut Pe) + Send>;

fn table() -> &'static Mutex<HashMap<u64, Work>> {
    static TABLE: OnceLock<Mutex<HashMap<u64, Work>>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Post `work` to this PE's node queue, for handler `h` (`converse-tasks.shared`).
pub(crate) fn post(pe: &mut Pe, h: HandlerId, prio: i32, work: Work) {
    let key = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut t) = table().lock() {
        t.insert(key, work);
    }
    let node = pe.my_node();
    pe.send_node_msg(
        node,
        h,
        Message::from_payload(&key.to_le_bytes()).with_priority(prio),
    );
}

/// The handler: run the work the message names, if it is this process's (a key from another
/// node names nothing here and is dropped).
pub(crate) fn run(pe: &mut Pe, msg: &Message) {
    let Ok(key) = <[u8; 8]>::try_from(msg.payload()).map(u64::from_le_bytes) else {
        return;
    };
    let work = table().lock().ok().and_then(|mut t| t.remove(&key));
    if let Some(w) = work {
        w(pe);
    }
}
