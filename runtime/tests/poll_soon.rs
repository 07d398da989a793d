//! `Pe::poll_soon` lets an urgent message from another PE in ahead of the rest of a batch of
//! queued messages; `Pe::deliver` runs a held message's handler in place, keeping its envelope.

use converse::Message;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Queued messages of PE 0 to itself, more than a batch (`sched.batch`, 64).
const QUEUED: u32 = 96;

#[test]
fn a_ping_from_another_pe_runs_between_long_handlers_that_ask_to_poll() {
    let rt = converse::Runtime::from_args(["poll_soon", "+p2", "+quiet", "+machine", "local"])
        .expect("runtime");
    // How many long handlers ran before the ping; u32::MAX until it ran.
    let before = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(u32::MAX));
    let b = before.clone();
    let code = rt
        .run(move |pe| {
            let ran = Rc::new(Cell::new(0u32));
            let r = ran.clone();
            let slow = pe.register("slow", move |pe, _| {
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(1) {
                    std::hint::spin_loop();
                }
                r.set(r.get() + 1);
                pe.poll_soon();
            });
            let (r, b) = (ran.clone(), b.clone());
            let ping = pe.register("ping", move |pe, _| {
                b.store(r.get(), std::sync::atomic::Ordering::Relaxed);
                pe.exit(0);
            });
            // Urgent: it comes before the queued ones by priority once it is taken in.
            let go = pe.register("go", move |pe, _| {
                pe.send_msg(0, ping, Message::from_payload(b"").with_priority(-1))
            });
            pe.barrier();
            if pe.my_pe() == 0 {
                for _ in 0..QUEUED {
                    pe.send(0, slow, b"");
                }
                pe.send(1, go, b"");
            }
        })
        .expect("run");
    assert_eq!(code, 0);
    let n = before.load(std::sync::atomic::Ordering::Relaxed);
    // Without `poll_soon` the ping waits for the whole first batch (64). The margin leaves PE 1
    // tens of milliseconds to be scheduled on a loaded machine.
    assert!(n < 48, "the ping ran after {n} of {QUEUED} long handlers");
}

#[test]
fn a_held_message_is_delivered_later_with_its_envelope() {
    let rt = converse::Runtime::from_args(["deliver", "+p2", "+quiet", "+machine", "local"])
        .expect("runtime");
    let code = rt
        .run(|pe| {
            let held: Rc<RefCell<Vec<Message>>> = Rc::default();
            // (source PE, payload, priority) of each message delivered.
            type Seen = Vec<(u32, Vec<u8>, i32)>;
            let seen: Rc<RefCell<Seen>> = Rc::default();
            let s = seen.clone();
            let work = pe.register("work", move |_, msg| {
                s.borrow_mut()
                    .push((msg.src_pe(), msg.payload().to_vec(), msg.priority()))
            });
            let h = held.clone();
            let hold = pe.register("hold", move |_, msg| h.borrow_mut().push(msg));
            let h = held.clone();
            let release = pe.register("release", move |pe, _| {
                let msgs: Vec<Message> = h.borrow_mut().drain(..).collect();
                for mut m in msgs {
                    m.set_handler(work.raw());
                    pe.deliver(m);
                }
            });
            pe.barrier();
            if pe.my_pe() == 1 {
                pe.send_msg(0, hold, Message::from_payload(b"one").with_priority(-2));
                pe.send(0, hold, b"two");
                pe.send(0, release, b"");
                return;
            }
            let s = seen.clone();
            pe.run_until(|_| s.borrow().len() == 2);
            assert_eq!(
                *seen.borrow(),
                vec![(1, b"one".to_vec(), -2), (1, b"two".to_vec(), 0)]
            );
            pe.exit(0);
        })
        .expect("run");
    assert_eq!(code, 0);
}
