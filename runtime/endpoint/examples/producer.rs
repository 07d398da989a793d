//! The producer of a stream between two separately started jobs (see `consumer.rs`): PE 0
//! listens, and items are made by every PE of the job in turn (item `s` by PE `s % P`) and
//! streamed to whichever consumer is connected, with flow control, until the consumer has
//! acknowledged all of them.
//!
//! **The guarantee.** Every item reaches the consumer's output exactly once and in order,
//! across consumer restarts (a consumer killed at any moment and started again):
//! - the consumer writes items to its file and syncs it before acknowledging them;
//! - the producer keeps every item not yet acknowledged (at most `--window` of them: it asks
//!   its PEs for more only as acknowledgements free room);
//! - a consumer that (re)connects subscribes from the first item its file lacks; the producer
//!   sends from there, dropping what comes before (it was acknowledged or is in the file).
//!
//! Flow control: beyond the window, a send the endpoint refuses (`Full`: the consumer reads
//! slower than the producer sends) waits for the peer's `Drained` event.
//!
//! ```text
//! producer --items N [--size BYTES] [--window W] --secret-file FILE --addr-file FILE [--listen ADDR]
//! ```

/// A line on stdout that never panics when the reader is gone (`println!` does).
macro_rules! say {
    ($($t:tt)*) => {
        converse::input::out_line(&format!($($t)*))
    };
}

use converse::Pe;
use converse_endpoint::{Endpoints, PeerEvent, Secret, SendError};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

const USAGE: &str = "usage: producer --items N [--size BYTES] [--window W] --secret-file FILE \
                     --addr-file FILE [--listen ADDR]";

/// Item `seq`'s bytes, made on `pe`: its number, the PE, then a pattern both sides can check.
fn item(seq: u64, pe: usize, size: usize) -> Vec<u8> {
    let mut v = format!("item {seq} from PE {pe} ").into_bytes();
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

struct State {
    items: u64,
    window: u64,
    /// Next item to ask a PE for.
    next_make: u64,
    /// Items made and not yet acknowledged.
    made: BTreeMap<u64, Vec<u8>>,
    /// Every item below is in the consumer's file.
    acked: u64,
    /// Next item to send, and to whom.
    next_send: u64,
    consumer: Option<u32>,
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let args: Vec<String> = pe.args().to_vec();
        let mut items = None;
        let (mut size, mut window) = (200usize, 1024u64);
        let (mut secret_file, mut addr_file, mut listen) = (None, None, "tcp://:0".to_string());
        let mut it = args.iter().skip(1);
        while let Some(a) = it.next() {
            let v = it.next();
            let num = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok());
            match (a.as_str(), v) {
                ("--items", v) => items = num(v),
                ("--size", v) => {
                    size = num(v).filter(|s| (32..=1 << 24).contains(s)).unwrap_or(0) as usize
                }
                ("--window", v) => window = num(v).filter(|w| *w > 0).unwrap_or(0),
                ("--secret-file", Some(v)) => secret_file = Some(v.clone()),
                ("--addr-file", Some(v)) => addr_file = Some(v.clone()),
                ("--listen", Some(v)) => listen = v.clone(),
                _ => return pe.refuse_arguments(&format!("producer: bad argument {a} ({USAGE})")),
            }
        }
        let (Some(items), Some(secret_file), Some(addr_file)) = (items, secret_file, addr_file)
        else {
            return pe.refuse_arguments(&format!("producer: {USAGE}"));
        };
        if size == 0 || window == 0 {
            return pe.refuse_arguments(&format!(
                "producer: --size is 32 to 16777216 bytes, --window at least 1 ({USAGE})"
            ));
        }
        // Every PE makes items on request and sends them to PE 0.
        // PE 0's handling of a made item needs state made later: a slot filled then.
        type Made = Rc<dyn Fn(&mut Pe, &[u8])>;
        let on_made: Rc<RefCell<Option<Made>>> = Rc::default();
        let slot = on_made.clone();
        let made_h = pe.register("producer.made", move |pe, m| {
            let f = slot.borrow().clone();
            if let Some(f) = f {
                f(pe, m.payload());
            }
        });
        let make_h = pe.register("producer.make", move |pe, m| {
            let seq = u64::from_le_bytes(m.payload().try_into().unwrap_or_default());
            let mut out = seq.to_le_bytes().to_vec();
            out.extend(item(seq, pe.my_pe(), size));
            pe.send(0, made_h, &out);
        });
        let ep = Endpoints::attach(pe);
        if pe.my_pe() != 0 {
            return;
        }
        let secret = Secret::generate().expect("randomness");
        if let Err(e) = secret.write_file(secret_file.as_ref()) {
            return pe.refuse_arguments(&format!("producer: {e}"));
        }
        let addr = match ep.listen(pe, &listen, &secret) {
            Ok(a) => a,
            Err(e) => return pe.refuse_arguments(&format!("producer: {e}")),
        };
        let tmp = format!("{addr_file}.tmp");
        if std::fs::write(&tmp, &addr)
            .and_then(|()| std::fs::rename(&tmp, &addr_file))
            .is_err()
        {
            return pe.refuse_arguments(&format!("producer: cannot write {addr_file}"));
        }
        say!(
            "producer: {items} items from {} PEs, listening at {addr}",
            pe.num_pes()
        );
        let st = Rc::new(RefCell::new(State {
            items,
            window,
            next_make: 0,
            made: BTreeMap::new(),
            acked: 0,
            next_send: 0,
            consumer: None,
        }));

        // Ask PEs for items while the window has room.
        let ask = move |pe: &mut Pe, st: &mut State| {
            while st.next_make < st.items && st.next_make < st.acked + st.window {
                let seq = st.next_make;
                pe.send(
                    (seq % pe.num_pes() as u64) as usize,
                    make_h,
                    &seq.to_le_bytes(),
                );
                st.next_make += 1;
            }
        };
        // Send what is made, in order, while the consumer takes it.
        let send = {
            let ep = ep.clone();
            move |st: &mut State| {
                let Some(peer) = st.consumer else { return };
                while let Some(body) = st.made.get(&st.next_send) {
                    let mut m = st.next_send.to_le_bytes().to_vec();
                    m.extend_from_slice(body);
                    match ep.send(peer, "item", &m) {
                        Ok(()) => st.next_send += 1,
                        Err(SendError::Full { .. }) => return, // until Drained
                        Err(_) => return,                      // gone: until it comes back
                    }
                }
            }
        };
        let send = Rc::new(send);
        {
            let (st, send) = (st.clone(), send.clone());
            *on_made.borrow_mut() = Some(Rc::new(move |_pe: &mut Pe, p: &[u8]| {
                let seq = u64::from_le_bytes(p[..8].try_into().unwrap_or_default());
                let mut s = st.borrow_mut();
                if seq >= s.acked {
                    s.made.insert(seq, p[8..].to_vec());
                }
                send(&mut s);
            }));
        }
        {
            let (st, send) = (st.clone(), send.clone());
            ep.on("subscribe", move |pe, m| {
                let from = u64::from_le_bytes(m.data().try_into().unwrap_or_default());
                let mut s = st.borrow_mut();
                if from < s.acked || from > s.next_make {
                    say!(
                        "producer: a consumer asked for item {from}, outside {}..={}; refused",
                        s.acked,
                        s.next_make
                    );
                    return; // dropped unanswered: its call fails
                }
                s.made.retain(|&k, _| k >= from);
                s.acked = from;
                s.next_send = from;
                s.consumer = Some(m.peer());
                say!(
                    "producer: consumer (peer {}) subscribes from item {from}",
                    m.peer()
                );
                let total = s.items;
                let _ = m.reply(&total.to_le_bytes());
                ask(pe, &mut s);
                send(&mut s);
                if s.acked == s.items {
                    pe.exit(0);
                }
            });
        }
        {
            let st = st.clone();
            ep.on("ack", move |pe, m| {
                let upto = u64::from_le_bytes(m.data().try_into().unwrap_or_default());
                let mut s = st.borrow_mut();
                if upto > s.acked && upto <= s.next_send {
                    s.acked = upto;
                    s.made = s.made.split_off(&upto);
                    ask(pe, &mut s);
                }
                if s.acked == s.items {
                    say!("producer: all {} items acknowledged", s.items);
                    pe.exit(0);
                }
            });
        }
        ep.on_event(move |_pe, ev| {
            let mut s = st.borrow_mut();
            match ev {
                PeerEvent::Left { peer, why } if s.consumer == Some(peer) => {
                    s.consumer = None;
                    say!(
                        "producer: the consumer left ({why}) at item {}; waiting for it",
                        s.acked
                    );
                }
                PeerEvent::Drained { peer } if s.consumer == Some(peer) => send(&mut s),
                _ => {}
            }
        });
    })
}
