//! `Pe::after` and `Pe::every`: timers fire in deadline order (set order among equal
//! deadlines), a timer set by a firing one waits for the next look, periodic ones go on, and
//! many pending timers do not keep the due one from firing.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

#[test]
fn timers_fire_in_deadline_order_and_periodic_ones_repeat() {
    let rt = converse::Runtime::from_args(["timers", "+p1", "+quiet"]).expect("runtime");
    let code = rt
        .run(|pe| {
            let log: Rc<RefCell<Vec<&'static str>>> = Rc::default();
            // Ten thousand far-off timers: pending, never due in this test.
            for _ in 0..10_000 {
                pe.after(Duration::from_secs(3600), |_| {});
            }
            let l = log.clone();
            pe.after(Duration::from_millis(30), move |pe| {
                l.borrow_mut().push("30");
                let l = l.clone();
                // Due at once, but fires at the next look, after this callback.
                pe.after(Duration::ZERO, move |_| l.borrow_mut().push("30+0"));
            });
            let l = log.clone();
            pe.after(Duration::from_millis(10), move |_| {
                l.borrow_mut().push("10a")
            });
            let l = log.clone();
            pe.after(Duration::from_millis(10), move |_| {
                l.borrow_mut().push("10b")
            });
            let ticks = Rc::new(RefCell::new(0u32));
            let t = ticks.clone();
            pe.every(Duration::from_millis(5), move |_| *t.borrow_mut() += 1);
            let l = log.clone();
            pe.run_until(move |_| l.borrow().len() == 4);
            assert_eq!(*log.borrow(), ["10a", "10b", "30", "30+0"]);
            let t = ticks.clone();
            pe.run_until(move |_| *t.borrow() >= 8);
            pe.exit(0);
        })
        .expect("run");
    assert_eq!(code, 0);
}
