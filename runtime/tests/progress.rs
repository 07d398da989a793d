//! `Pe::progress`: one turn of the scheduler that runs what has arrived and never waits.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

#[test]
fn progress_runs_arrived_handlers_and_returns_when_nothing_is_there() {
    let rt = converse::Runtime::from_args(["progress", "+p1", "+quiet"]).expect("runtime");
    let code = rt
        .run(|pe| {
            let ran = Rc::new(Cell::new(0u32));
            let r = ran.clone();
            let h = pe.register("count", move |_, _| r.set(r.get() + 1));
            pe.send(0, h, b"x");
            // The start-up check runs first (its messages count too), then the handler.
            let deadline = Instant::now() + Duration::from_secs(5);
            while ran.get() == 0 && Instant::now() < deadline {
                pe.progress();
            }
            assert_eq!(ran.get(), 1, "the handler ran once");
            // Nothing queued, nothing arriving: it returns at once, having done nothing.
            let t = Instant::now();
            assert_eq!(pe.progress(), 0);
            assert!(
                t.elapsed() < Duration::from_millis(500),
                "{:?}",
                t.elapsed()
            );
            assert_eq!(ran.get(), 1);
            pe.exit(0);
        })
        .expect("run");
    assert_eq!(code, 0);
}
