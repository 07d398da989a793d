//! Fibonacci by tasks, the Charm++ classic: `fib(n)` is a call to a service on another PE that
//! calls `fib(n-1)` and `fib(n-2)` on two more PEs and waits for both; below a threshold it
//! computes serially. The result is checked against a serial computation, and the job ends
//! when it has gone quiet (quiescence detection), not by counting replies.
//!
//! ```text
//! cargo build --release -p converse-tasks --examples
//! target/release/examples/fib 24 +p4
//! target/release/charmrun +p4 target/release/examples/fib 24 +machine tcp
//! ```

use converse::Message;
use converse_tasks::{call, with_pe, ServiceId, Tasks};
use std::cell::RefCell;
use std::rc::Rc;

/// Below this, a PE computes `fib` itself.
const SERIAL_BELOW: u64 = 12;

fn serial(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        serial(n - 1) + serial(n - 2)
    }
}

fn word(m: &Message) -> u64 {
    u64::from_le_bytes(m.payload().try_into().unwrap_or([0; 8]))
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let n: u64 = match pe.args().get(1).map(|a| a.parse()) {
            None => 20,
            Some(Ok(n)) if n <= 40 => n,
            Some(_) => {
                pe.refuse_arguments("usage: fib [N up to 40] (default 20)");
                return;
            }
        };
        let tasks = Tasks::attach(pe);
        // The service needs its own id to call itself: set once registered.
        let me: Rc<RefCell<Option<ServiceId>>> = Rc::default();
        let m = me.clone();
        let t = tasks.clone();
        let fib = tasks.serve(pe, "fib", move |pe, req, reply| {
            let k = word(&req);
            if k < SERIAL_BELOW {
                return reply.send(pe, &serial(k).to_le_bytes());
            }
            let Some(fib) = m.borrow().clone() else {
                return;
            };
            // Wait for the two halves in a task; the reply token goes with it.
            let (p, np) = (pe.my_pe(), pe.num_pes());
            t.spawn(pe, async move {
                let a = call((p + 1) % np, &fib, &(k - 1).to_le_bytes());
                let b = call((p + 2) % np, &fib, &(k - 2).to_le_bytes());
                let (a, b) = (a.await, b.await);
                let v = match (a, b) {
                    (Ok(a), Ok(b)) => word(&a) + word(&b),
                    _ => u64::MAX,
                };
                with_pe(|pe| reply.send(pe, &v.to_le_bytes()));
            });
        });
        *me.borrow_mut() = Some(fib.clone());
        if pe.my_pe() != 0 {
            return;
        }
        let t = tasks.clone();
        tasks.spawn(pe, async move {
            let v = call(0, &fib, &n.to_le_bytes()).await.map(|m| word(&m));
            // Every call has been answered; wait until nothing at all is left in flight.
            let quiet = with_pe(|pe| t.quiescence(pe));
            quiet.await;
            let want = serial(n);
            with_pe(|pe| match v {
                Ok(v) if v == want => {
                    converse::input::out_line(&format!("fib({n}) = {v}, as computed serially: ok"));
                    pe.exit(0);
                }
                other => {
                    converse::input::out_line(&format!("fib({n}) = {other:?}, want {want}"));
                    pe.exit(1);
                }
            });
        });
    })
}
