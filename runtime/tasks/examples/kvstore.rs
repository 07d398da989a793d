//! A client/server with calls and timeouts: PE 0 serves a key-value store; every other PE is
//! a client whose task puts its own key, gets the next client's (a get of a key not there yet
//! is answered later, when the key is put: the server keeps the reply token), and asks for a
//! key nobody puts, under a timeout that runs out. Each client tells the server it is done;
//! once all have, the job ends when it has gone quiet.
//!
//! ```text
//! cargo build --release -p converse-tasks --examples
//! target/release/examples/kvstore +p4
//! target/release/charmrun +p4 target/release/examples/kvstore +machine tcp
//! ```

use converse::Message;
use converse_tasks::{call, timeout, with_pe, Reply, Tasks};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

fn word(m: &Message) -> u64 {
    u64::from_le_bytes(
        m.payload()
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 8]),
    )
}

/// `key, value` as 16 bytes.
fn pair(k: u64, v: u64) -> Vec<u8> {
    let mut b = k.to_le_bytes().to_vec();
    b.extend(v.to_le_bytes());
    b
}

/// The store: values, and the gets waiting for a key not put yet.
#[derive(Default)]
struct Store {
    values: HashMap<u64, u64>,
    waiting: HashMap<u64, Vec<Reply>>,
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        if pe.num_pes() < 2 {
            return pe.refuse_arguments("kvstore: needs at least 2 PEs (+p2)");
        }
        let tasks = Tasks::attach(pe);
        let store: Rc<RefCell<Store>> = Rc::default();
        let s = store.clone();
        let put = tasks.serve(pe, "kv.put", move |pe, req, reply| {
            let (k, v) = (
                word(&req),
                req.payload()
                    .get(8..16)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
            );
            let waiting = {
                let mut st = s.borrow_mut();
                st.values.insert(k, v);
                st.waiting.remove(&k).unwrap_or_default()
            };
            // The gets that waited for this key are answered now.
            for r in waiting {
                r.send(pe, &v.to_le_bytes());
            }
            reply.send(pe, b"");
        });
        let s = store.clone();
        let get = tasks.serve(pe, "kv.get", move |pe, req, reply| {
            let k = word(&req);
            let v = s.borrow().values.get(&k).copied();
            match v {
                Some(v) => reply.send(pe, &v.to_le_bytes()),
                // Kept: answered by the put of this key, if one ever comes.
                None => s.borrow_mut().waiting.entry(k).or_default().push(reply),
            }
        });
        let done_count = Rc::new(RefCell::new(0usize));
        let (d, t) = (done_count.clone(), tasks.clone());
        let clients = pe.num_pes() - 1;
        let done = tasks.serve(pe, "kv.done", move |pe, _req, reply| {
            reply.send(pe, b"");
            *d.borrow_mut() += 1;
            if *d.borrow() == clients {
                let t2 = t.clone();
                t.spawn(pe, async move {
                    // Every client is done; wait until nothing at all is in flight, then end.
                    let quiet = with_pe(|pe| t2.quiescence(pe));
                    quiet.await;
                    converse::input::out_line(&format!("kvstore: {clients} clients ok"));
                    with_pe(|pe| pe.exit(0));
                });
            }
        });
        let me = pe.my_pe() as u64;
        if me == 0 {
            return;
        }
        let next = if me as usize == clients { 1 } else { me + 1 };
        tasks.spawn(pe, async move {
            let fail = |what: String| {
                with_pe(|pe| pe.abort(&format!("kvstore client PE {me}: {what}")));
            };
            if let Err(e) = call(0, &put, &pair(me, me * 10)).await {
                return fail(format!("put failed: {e}"));
            }
            // The next client may not have put its key yet: the server answers when it does.
            let got = match call(0, &get, &next.to_le_bytes()).await {
                Ok(m) => word(&m),
                Err(e) => return fail(format!("get {next} failed: {e}")),
            };
            if got != next * 10 {
                return fail(format!("key {next} is {got}, want {}", next * 10));
            }
            // Nobody puts key 0: the get waits at the server, and the client gives up.
            let missing = timeout(Duration::from_millis(200), call(0, &get, &0u64.to_le_bytes())).await;
            if missing.is_ok() {
                return fail("a get of a key nobody puts was answered".into());
            }
            converse::input::out_line(&format!(
                "kvstore client PE {me}: put {me}, got key {next} = {got}, missing key timed out: ok"
            ));
            if let Err(e) = call(0, &done, b"").await {
                fail(format!("done failed: {e}"));
            }
        });
    })
}
