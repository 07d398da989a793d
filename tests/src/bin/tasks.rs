//! Scenarios of the tasks crate (`converse-tasks`) on whole jobs, run by tests/tasks.rs on every
//! layer:
//!
//! - `basics`: on every PE, tasks that yield, sleep, share a task-aware mutex, spawn and join
//!   each other (a chain of 10,000 joins too), an aborted task, a finished task's future
//!   dropped at once, a stale waker that must not poll its slot's next task, `block_on` from
//!   the start function; each PE prints
//!   `tasks basics: PE N ok`.
//! - `calls`: every PE calls every PE (itself too), many calls in flight at once; a reply kept
//!   and given later; a dropped reply token; a timeout whose reply comes late (dropped and
//!   counted, never delivered to another call); each PE prints `tasks calls: PE N ok`.
//! - `qd`: a storm of messages hopping between random PEs, each with a random number of hops
//!   left, ends at a moment nobody knows; PE 0 asked for quiescence at the start. Once told,
//!   it asks every PE (by call) how many hops it ran, how many it started and when it ran its
//!   last: every hop ran, and none after the detection. PE 0 prints `tasks qd: PE 0 ok` and
//!   the delay from the last hop to the detection; the others `tasks qd: PE N ok`.
//! - `qdsleep`: a task on PE 0 calls the last PE, sleeps 200 ms, then sends a message to it; PE 0 asks
//!   for quiescence right after spawning it: the detection comes after that message ran (a
//!   task's timer is work in flight), on one PE too. Each PE prints `tasks qdsleep: PE N ok`.
//! - `shared`: the first PE of each node puts 100 pieces of work of 1 ms each in its node's
//!   shared pool; every piece runs once, and at `++ppn 2` and up by more than one PE of the
//!   node. Each PE prints `tasks shared: PE N ok`.
//! - `seeds-BALANCER` (`keep`, `random`, `neighbor`, `steal`): PE 0 enqueues 8 seeds, each of
//!   which spins 200 µs, tells PE 0 it ran, and enqueues two more down to depth 6 (1,016 in
//!   all) where it runs. Once quiescence is detected, PE 0 checks that every seed ran exactly
//!   once, and where: all on PE 0 with `keep`, on more than one PE otherwise. Quiescence itself
//!   shows that the balancers' own messages end. Each PE prints `tasks seeds-B: PE N ok`.
//! - `die`: report mode; the last PE's process dies while PE 0 has calls pending to it: each
//!   fails with `PeDied` naming the PE, and a call made afterwards fails at once; PE 0 prints
//!   `tasks die: ok`.

use converse::{Message, Pe};
use converse_tasks::{
    call, callback, sleep, timeout, with_pe, yield_now, CallError, Dropped, TaskError, Tasks,
};
use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

fn word(m: &Message) -> u64 {
    u64::from_le_bytes(m.payload().try_into().unwrap_or([0xff; 8]))
}

fn basics(pe: &mut Pe, tasks: &Tasks) -> Result<(), String> {
    let me = pe.my_pe();
    // Attached before the first scheduling, as every library is.
    let ring = converse_topo::attach(
        pe,
        converse_topo::Topology::ring(pe.num_pes()).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?
    .ok_or("every PE is a process of the ring")?;
    // Message-driven calls awaited through `callback`: a PE timer's value, a callback
    // dropped uncalled, and the topology library's all-reduce and barrier (every PE's task
    // waits there for the others, its PE running messages meanwhile).
    let n = pe.num_pes() as u64;
    let awaited = tasks
        .block_on(pe, async move {
            let timer =
                callback(|pe, done| pe.after(Duration::from_millis(5), move |pe| done(pe, 42u64)))
                    .await;
            let dropped = callback(|_, done: converse_tasks::Done<u64>| drop(done)).await;
            let sum = callback(|pe, done| {
                let add = |acc: &mut Vec<u8>, x: &[u8]| {
                    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                    let total = word(acc) + word(x);
                    *acc = total.to_le_bytes().to_vec();
                };
                ring.all_reduce_then(pe, &(me as u64 + 1).to_le_bytes(), add, done)
            })
            .await;
            let sum = match sum {
                Ok(Ok(p)) => u64::from_le_bytes(p.as_slice().try_into().unwrap_or([0xff; 8])),
                other => return Err(format!("the all-reduce gave {other:?}")),
            };
            let barrier = callback(|pe, done| ring.barrier_then(pe, done)).await;
            Ok((timer, dropped, sum, barrier.map(|b| b.is_ok())))
        })
        .map_err(|e| e.to_string())??;
    if awaited != (Ok(42), Err(Dropped), n * (n + 1) / 2, Ok(true)) {
        return Err(format!("awaited callbacks gave {awaited:?}"));
    }
    // A task spawns a child, then waits for it in a nested scheduler loop (not by awaiting):
    // the child, readied to run in a row after this poll, must still run inside that loop.
    let t = tasks.clone();
    let nested = tasks
        .block_on(pe, async move {
            let child = with_pe(|pe| t.spawn(pe, async { 7u64 }));
            let finished = with_pe(|pe| pe.run_until(|_| child.is_finished()));
            (finished, child.take())
        })
        .map_err(|e| e.to_string())?;
    if !matches!(nested, (true, Some(Ok(7)))) {
        return Err(format!(
            "a child waited for in a nested loop gave {nested:?}"
        ));
    }
    // The same, waiting by `Pe::progress`, which fires no idle callback: the child's drain
    // message is what it runs.
    let t = tasks.clone();
    let progressed = tasks
        .block_on(pe, async move {
            let child = with_pe(|pe| t.spawn(pe, async { 8u64 }));
            let t0 = Instant::now();
            while !child.is_finished() && t0.elapsed() < Duration::from_secs(10) {
                with_pe(|pe| pe.progress());
            }
            child.take()
        })
        .map_err(|e| e.to_string())?;
    if !matches!(progressed, Some(Ok(8))) {
        return Err(format!(
            "a child waited for by progress gave {progressed:?}"
        ));
    }
    // Children that yield between steps, joined by a parent task.
    let t = tasks.clone();
    let sum = tasks
        .block_on(pe, async move {
            let mut handles = Vec::new();
            for i in 0..100u64 {
                handles.push(with_pe(|pe| {
                    t.spawn(pe, async move {
                        for _ in 0..3 {
                            yield_now().await;
                        }
                        i
                    })
                }));
            }
            let mut sum = 0;
            for h in handles {
                sum += h.await.map_err(|e| e.to_string())?;
            }
            Ok::<u64, String>(sum)
        })
        .map_err(|e| e.to_string())??;
    if sum != 4950 {
        return Err(format!("children summed to {sum}, not 4950"));
    }
    // A sleep lasts at least its time, and the PE runs other tasks meanwhile.
    let ticks = Rc::new(RefCell::new(0u32));
    let tk = ticks.clone();
    let slept = tasks
        .block_on(pe, async move {
            let ticker = converse_tasks::spawn(async move {
                for _ in 0..5 {
                    *tk.borrow_mut() += 1;
                    yield_now().await;
                }
            });
            let t0 = Instant::now();
            sleep(Duration::from_millis(20)).await;
            let _ = ticker.await;
            t0.elapsed()
        })
        .map_err(|e| e.to_string())?;
    if slept < Duration::from_millis(20) || *ticks.borrow() != 5 {
        return Err(format!("slept {slept:?}, ticks {}", ticks.borrow()));
    }
    // A task-aware mutex held across yields: no increment lost.
    let counter = Rc::new(converse_tasks::sync::Mutex::new(0u32));
    let t = tasks.clone();
    let c = counter.clone();
    tasks
        .block_on(pe, async move {
            let mut hs = Vec::new();
            for _ in 0..10 {
                let c = c.clone();
                hs.push(with_pe(|pe| {
                    t.spawn(pe, async move {
                        for _ in 0..10 {
                            let mut g = c.lock().await;
                            let v = *g;
                            yield_now().await;
                            *g = v + 1;
                        }
                    })
                }));
            }
            for h in hs {
                let _ = h.await;
            }
        })
        .map_err(|e| e.to_string())?;
    let total = *counter.try_lock().map_err(|e| e.to_string())?;
    if total != 100 {
        return Err(format!("the mutex-guarded counter is {total}, not 100"));
    }
    // An aborted task: its handle says so, its future is dropped, nothing is left alive.
    let dropped = Rc::new(RefCell::new(false));
    struct OnDrop(Rc<RefCell<bool>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            *self.0.borrow_mut() = true;
        }
    }
    let guard = OnDrop(dropped.clone());
    let long = tasks.spawn(pe, async move {
        let _g = guard;
        sleep(Duration::from_secs(30)).await;
    });
    // Its first poll runs: it waits in its sleep when aborted.
    pe.progress();
    long.abort();
    let aborted = long.take();
    if aborted != Some(Err(TaskError::Aborted)) || !*dropped.borrow() {
        return Err(format!(
            "abort: {aborted:?}, future dropped: {}",
            dropped.borrow()
        ));
    }
    // A finished task's future (and what it holds) is dropped when it finishes, though its
    // handle lives on.
    let freed = Rc::new(RefCell::new(false));
    let guard = OnDrop(freed.clone());
    let done = tasks.spawn(pe, async move {
        let _g = guard;
        5u64
    });
    pe.run_until(|_| done.is_finished());
    if !*freed.borrow() || done.take() != Some(Ok(5)) {
        return Err(format!(
            "a finished task's future dropped: {}",
            freed.borrow()
        ));
    }
    // A large future (boxed apart from its cell) runs and joins like a small one.
    let big = tasks.spawn(pe, async {
        let buf = [7u8; 4096];
        yield_now().await;
        u64::from(buf[4095]) + u64::from(buf[0])
    });
    pe.run_until(|_| big.is_finished());
    if big.take() != Some(Ok(14)) {
        return Err("a task with a 4 KiB future did not give 14".into());
    }
    // A task that kept a clone of its own waker finishes; the next task takes its slot. A
    // wake through the old waker must not poll the new task (the slot reuses a waker only
    // when nothing else holds it).
    let kept: Rc<RefCell<Option<std::task::Waker>>> = Rc::default();
    let k = kept.clone();
    let first = tasks.spawn(
        pe,
        std::future::poll_fn(move |cx| {
            *k.borrow_mut() = Some(cx.waker().clone());
            std::task::Poll::Ready(())
        }),
    );
    pe.run_until(|_| first.is_finished());
    let polls = Rc::new(std::cell::Cell::new(0u32));
    let p = polls.clone();
    let second = tasks.spawn(
        pe,
        std::future::poll_fn(move |_| {
            p.set(p.get() + 1);
            std::task::Poll::<()>::Pending
        }),
    );
    pe.run_until(|_| polls.get() >= 1);
    for _ in 0..3 {
        if let Some(w) = kept.borrow().as_ref() {
            w.wake_by_ref();
        }
        pe.progress();
    }
    second.abort();
    if polls.get() != 1 {
        return Err(format!(
            "a finished task's waker polled the task after it {} times",
            polls.get() - 1
        ));
    }
    // A chain of 10,000 tasks, each spawning the next and joining it: a join runs a task not
    // yet started inside the joiner's poll, but only a few deep, so the chain does not become
    // 10,000 nested stack frames.
    fn chain(n: u32) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64>>> {
        Box::pin(async move {
            if n == 0 {
                return 0;
            }
            converse_tasks::spawn(chain(n - 1)).await.unwrap_or(0) + 1
        })
    }
    let depth = tasks
        .block_on(pe, chain(10_000))
        .map_err(|e| e.to_string())?;
    if depth != 10_000 {
        return Err(format!("a chain of 10,000 joins gave {depth}"));
    }
    // A wake from another thread while the PE is idle (blocked in its layer): a helper
    // thread answers through a oneshot 50 ms later.
    let (tx, rx) = converse_tasks::sync::oneshot::channel::<u64>();
    let helper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let _ = tx.send(7);
    });
    let got = tasks
        .block_on(pe, async move { rx.await.map_err(|e| e.to_string()) })
        .map_err(|e| e.to_string())??;
    let _ = helper.join();
    if got != 7 {
        return Err(format!("the helper thread's 7 came as {got}"));
    }
    if tasks.live() != 0 {
        return Err(format!("{} tasks still alive", tasks.live()));
    }
    converse::input::out_line(&format!("tasks basics: PE {me} ok"));
    Ok(())
}

fn calls(pe: &mut Pe, tasks: &Tasks) -> Result<(), String> {
    let me = pe.my_pe();
    let n = pe.num_pes();
    let echo = tasks.serve(pe, "echo", |pe, req, reply| reply.send_msg(pe, req));
    // Answered 30 ms later, from a timer: the token is kept.
    let later = tasks.serve(pe, "later", |pe, req, reply| {
        pe.after(Duration::from_millis(30), move |pe| {
            let v = word(&req) + 1;
            reply.send(pe, &v.to_le_bytes());
        })
    });
    let never = tasks.serve(pe, "never", |_pe, _req, reply| drop(reply));
    let slow = tasks.serve(pe, "slow", |pe, req, reply| {
        pe.after(Duration::from_millis(300), move |pe| {
            reply.send_msg(pe, req)
        })
    });
    // Answers, then says so with a second message: FIFO per pair, so when the note has run on
    // the caller's PE, the reply has too.
    let noted = Rc::new(std::cell::Cell::new(false));
    let nd = noted.clone();
    let note = pe.register("noted", move |_pe, _m| nd.set(true));
    let echo_note = tasks.serve(pe, "echo-note", move |pe, req, reply| {
        let caller = reply.caller();
        reply.send_msg(pe, req);
        pe.send(caller, note, b"");
    });
    let inbox = tasks.expect(pe, "expected");
    pe.barrier();
    // Expected receives: every PE sends 3 numbered messages to every PE; each PE takes them
    // source by source, from the last source to the first, each source's in order.
    for dest in 0..n {
        for k in 0..3u64 {
            pe.send(
                dest,
                inbox.handler(),
                &(((me as u64) << 8) | k).to_le_bytes(),
            );
        }
    }
    let ib = inbox.clone();
    tasks
        .block_on(pe, async move {
            for src in (0..n).rev() {
                for k in 0..3u64 {
                    let want = ((src as u64) << 8) | k;
                    let m = ib.recv_from(src).await.map_err(|e| e.to_string())?;
                    if word(&m) != want || m.src_pe() as usize != src {
                        return Err(format!("from PE {src}: {:#x}, want {want:#x}", word(&m)));
                    }
                }
            }
            Ok::<(), String>(())
        })
        .map_err(|e| e.to_string())??;
    if !inbox.is_empty() {
        return Err(format!("{} expected messages left", inbox.len()));
    }
    let t = tasks.clone();
    let echo2 = echo.clone();
    let r = tasks
        .block_on(pe, async move {
            // 50 calls to every PE in flight at once, each checked against its own request.
            let mut hs = Vec::new();
            for k in 0..50u64 {
                for dest in 0..n {
                    let echo = echo.clone();
                    let tag = (me as u64) << 32 | (dest as u64) << 16 | k;
                    hs.push(with_pe(|pe| {
                        t.spawn(pe, async move {
                            let r = call(dest, &echo, &tag.to_le_bytes()).await;
                            match r {
                                Ok(m) if word(&m) == tag => Ok(()),
                                Ok(m) => Err(format!("call {tag:#x} got {:#x}", word(&m))),
                                Err(e) => Err(format!("call {tag:#x}: {e}")),
                            }
                        })
                    }));
                }
            }
            for h in hs {
                h.await.map_err(|e| e.to_string())??;
            }
            let dest = (me + 1) % n;
            let v = call(dest, &later, &41u64.to_le_bytes())
                .await
                .map_err(|e| e.to_string())?;
            if word(&v) != 42 {
                return Err(format!("later answered {}", word(&v)));
            }
            // A reply that lands while its task is still being polled (in a nested loop of
            // the task's own): the wake by slot finds the task out polling; the call completes.
            let mut c = call(dest, &echo_note, &99u64.to_le_bytes());
            let pending = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(
                    std::future::Future::poll(std::pin::Pin::new(&mut c), cx).is_pending(),
                )
            })
            .await;
            let t0 = Instant::now();
            with_pe(|pe| pe.run_until(|_| noted.get() || t0.elapsed() > Duration::from_secs(10)));
            if !noted.get() {
                return Err("no reply in a nested loop within 10 s".into());
            }
            let v = c.await.map_err(|e| e.to_string())?;
            if !pending || word(&v) != 99 {
                return Err(format!("a reply in a nested loop: {pending} {}", word(&v)));
            }
            // A spawn right after a reply came (this task is polled from the reply's handler).
            let five = converse_tasks::spawn(async { 5u64 })
                .await
                .map_err(|e| e.to_string())?;
            if five != 5 {
                return Err(format!("a task spawned after a call gave {five}"));
            }
            match call(dest, &never, b"").await {
                Err(CallError::Unanswered { pe }) if pe == dest => {}
                other => return Err(format!("a dropped token gave {other:?}")),
            }
            // Times out; its reply comes 250 ms after and is dropped.
            if timeout(
                Duration::from_millis(50),
                call(dest, &slow, &7u64.to_le_bytes()),
            )
            .await
            .is_ok()
            {
                return Err("the slow call did not time out".into());
            }
            // Calls in flight while the late reply lands: none of them may get it.
            for k in 0..60u64 {
                let v = call(dest, &echo, &(1000 + k).to_le_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                if word(&v) != 1000 + k {
                    return Err(format!("echo {} came back as {}", 1000 + k, word(&v)));
                }
                sleep(Duration::from_millis(10)).await;
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    r?;
    // The slow call's reply comes 300 ms after it was made: wait for it (10 s at most).
    let t0 = Instant::now();
    let tk = tasks.clone();
    pe.run_until(|_| tk.call_stats().late_replies >= 1 || t0.elapsed() > Duration::from_secs(10));
    let s = tasks.call_stats();
    if s.cancelled != 1 || s.late_replies != 1 {
        return Err(format!("call stats {s:?}: want 1 cancelled, 1 late reply"));
    }
    // A call awaited by something other than a task of this PE (its own waker, not one of
    // the executor's): woken through that waker, and completed.
    struct Count(std::sync::atomic::AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let count = std::sync::Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
    let waker = std::task::Waker::from(count.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    let mut c = std::pin::pin!(echo2.call(pe, (me + 1) % n, &77u64.to_le_bytes()));
    if std::future::Future::poll(c.as_mut(), &mut cx).is_ready() {
        return Err("a call to another PE was ready at once".into());
    }
    let t0 = Instant::now();
    let woken = || count.0.load(std::sync::atomic::Ordering::SeqCst) > 0;
    pe.run_until(|_| woken() || t0.elapsed() > Duration::from_secs(10));
    match std::future::Future::poll(c.as_mut(), &mut cx) {
        std::task::Poll::Ready(Ok(m)) if woken() && word(&m) == 77 => {}
        other => return Err(format!("a call with a foreign waker: {other:?}")),
    }
    converse::input::out_line(&format!("tasks calls: PE {me} ok"));
    Ok(())
}

/// Nanoseconds of the host's real-time clock: comparable between the processes of one host.
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn qd(pe: &mut Pe, tasks: &Tasks) -> Result<(), String> {
    let (me, n) = (pe.my_pe(), pe.num_pes());
    // (hops run, hops started, time of the last hop run)
    let tally = Rc::new(RefCell::new((0u64, 0u64, 0u64)));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ ((me as u64 + 1) * 0x2545_f491);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let t = tally.clone();
    let storm = Rc::new(std::cell::Cell::new(None));
    let st = storm.clone();
    let mix = std::cell::Cell::new(0x2545_f491_4f6c_dd1du64 ^ me as u64);
    let h = pe.register("storm", move |pe, msg| {
        let left = u32::from_le_bytes(msg.payload().try_into().unwrap_or([0; 4]));
        {
            let mut t = t.borrow_mut();
            t.0 += 1;
            t.2 = now_ns();
        }
        if left > 0 {
            let mut r = mix.get();
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            mix.set(r);
            let dest = (r % pe.num_pes() as u64) as usize;
            if let Some(h) = st.get() {
                pe.send(dest, h, &(left - 1).to_le_bytes());
            }
        }
    });
    storm.set(Some(h));
    let t = tally.clone();
    let status = tasks.serve(pe, "status", move |pe, _req, reply| {
        let (run, started, last) = *t.borrow();
        let mut b = Vec::with_capacity(24);
        for v in [run, started, last] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        reply.send(pe, &b);
    });
    pe.barrier();
    // Each PE starts 20 messages of 0 to 199 further hops.
    for _ in 0..20 {
        let hops = (next() % 200) as u32;
        tally.borrow_mut().1 += u64::from(hops) + 1;
        let dest = (next() % n as u64) as usize;
        pe.send(dest, h, &hops.to_le_bytes());
    }
    if me != 0 {
        converse::input::out_line(&format!("tasks qd: PE {me} ok"));
        return Ok(());
    }
    let quiet = tasks.quiescence(pe);
    let r = tasks
        .block_on(pe, async move {
            quiet.await;
            let at = now_ns();
            let (mut run, mut started, mut last) = (0, 0, 0);
            for p in 0..n {
                let m = call(p, &status, b"").await.map_err(|e| e.to_string())?;
                let v: Vec<u64> = m
                    .payload()
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect();
                if v.len() != 3 {
                    return Err(format!("PE {p} answered {} bytes", m.payload().len()));
                }
                run += v[0];
                started += v[1];
                last = last.max(v[2]);
            }
            if run != started {
                return Err(format!("quiescence with {run} of {started} hops run"));
            }
            if last > at {
                return Err(format!(
                    "a hop ran {} us after the detection",
                    (last - at) / 1000
                ));
            }
            Ok((run, (at - last) / 1000))
        })
        .map_err(|e| e.to_string())?;
    let (hops, delay_us) = r?;
    converse::input::out_line(&format!(
        "tasks qd: PE 0 ok ({hops} hops; detected {delay_us} us after the last)"
    ));
    Ok(())
}

fn qdsleep(pe: &mut Pe, tasks: &Tasks) -> Result<(), String> {
    let (me, n) = (pe.my_pe(), pe.num_pes());
    let ran = Rc::new(std::cell::Cell::new(0u64));
    let r = ran.clone();
    let late = pe.register("late", move |_, _| r.set(now_ns()));
    let r = ran.clone();
    let when = tasks.serve(pe, "when", move |pe, _req, reply| {
        reply.send(pe, &r.get().to_le_bytes())
    });
    pe.barrier();
    if me != 0 {
        converse::input::out_line(&format!("tasks qdsleep: PE {me} ok"));
        return Ok(());
    }
    let w = when.clone();
    tasks.spawn(pe, async move {
        // The sleep follows a call: this task is polled from the reply's handler when it
        // sets its timer, which must count as in flight all the same.
        let _ = call(n - 1, &w, b"").await;
        sleep(Duration::from_millis(200)).await;
        with_pe(|pe| pe.send(n - 1, late, b""));
    });
    let quiet = tasks.quiescence(pe);
    let r = tasks
        .block_on(pe, async move {
            quiet.await;
            let at = now_ns();
            let m = call(n - 1, &when, b"").await.map_err(|e| e.to_string())?;
            let last = word(&m);
            if last == 0 {
                return Err("quiescence before the sleeping task's message ran".into());
            }
            if last > at {
                return Err("the sleeping task's message ran after quiescence".into());
            }
            Ok::<(), String>(())
        })
        .map_err(|e| e.to_string())?;
    r?;
    converse::input::out_line(&format!("tasks qdsleep: PE {me} ok"));
    Ok(())
}

fn shared(pe: &mut Pe, tasks: &Tasks) -> Result<(), String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let me = pe.my_pe();
    if pe.my_rank() != 0 {
        converse::input::out_line(&format!("tasks shared: PE {me} ok"));
        return Ok(());
    }
    const PIECES: u64 = 100;
    let ranks = pe.node_size();
    let ran: Arc<Vec<AtomicU64>> = Arc::new((0..ranks).map(|_| AtomicU64::new(0)).collect());
    for _ in 0..PIECES {
        let ran = ran.clone();
        tasks.spawn_shared(pe, move |pe| {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
            if let Some(c) = ran.get(pe.my_rank()) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let total = |ran: &[AtomicU64]| ran.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>();
    let r = ran.clone();
    let t0 = Instant::now();
    pe.run_until(|_| total(&r) == PIECES || t0.elapsed() > Duration::from_secs(60));
    let per: Vec<u64> = ran.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    if total(&ran) != PIECES {
        return Err(format!("{} of {PIECES} pieces ran: {per:?}", total(&ran)));
    }
    if ranks > 1 && per.iter().filter(|&&c| c > 0).count() < 2 {
        return Err(format!("one PE ran all of the node's pool: {per:?}"));
    }
    converse::input::out_line(&format!("tasks shared: PE {me} ok (by rank: {per:?})"));
    Ok(())
}

fn seeds(pe: &mut Pe, tasks: &Tasks, scenario: &str) -> Result<(), String> {
    use converse_tasks::seeds::{Balancer, Seeds};
    const ROOTS: u32 = 8;
    const DEPTH: u32 = 6;
    // A root's seeds are numbered as a heap: 1, then 2i and 2i + 1 below i.
    const PER_ROOT: u32 = (1 << (DEPTH + 1)) - 1;
    let balancer: Balancer = scenario
        .strip_prefix("seeds-")
        .unwrap_or_default()
        .parse()?;
    let (me, n) = (pe.my_pe(), pe.num_pes());
    let seeds = Seeds::attach(pe, balancer);
    // PE 0's tally: how often each seed ran, and how many ran on each PE.
    let ran = Rc::new(RefCell::new((
        vec![0u8; (ROOTS * PER_ROOT) as usize],
        vec![0u64; n],
    )));
    let r = ran.clone();
    let told = pe.register("seed-ran", move |_pe, msg| {
        let id = word(&msg) as usize;
        let mut r = r.borrow_mut();
        if let Some(c) = r.0.get_mut(id) {
            *c = c.saturating_add(1);
        }
        if let Some(c) = r.1.get_mut(msg.src_pe() as usize) {
            *c += 1;
        }
    });
    let piece = Rc::new(std::cell::Cell::new(None));
    let (s, p) = (seeds.clone(), piece.clone());
    let h = pe.register("seed-piece", move |pe, msg| {
        let i = word(&msg) as u32;
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
        pe.send(0, told, &u64::from(i).to_le_bytes());
        let heap = i % PER_ROOT + 1;
        if heap < (1 << DEPTH) {
            if let Some(h) = p.get() {
                let base = i - (heap - 1);
                for child in [2 * heap, 2 * heap + 1] {
                    s.enqueue(pe, h, &u64::from(base + child - 1).to_le_bytes());
                }
            }
        }
    });
    piece.set(Some(h));
    pe.barrier();
    if me != 0 {
        converse::input::out_line(&format!("tasks {scenario}: PE {me} ok"));
        return Ok(());
    }
    for root in 0..ROOTS {
        seeds.enqueue(pe, h, &u64::from(root * PER_ROOT).to_le_bytes());
    }
    let quiet = Rc::new(std::cell::Cell::new(false));
    let q = quiet.clone();
    tasks.on_quiescence(pe, move |_| q.set(true));
    let t0 = Instant::now();
    pe.run_until(|_| quiet.get() || t0.elapsed() > Duration::from_secs(60));
    if !quiet.get() {
        return Err("no quiescence within 60 s".into());
    }
    let r = ran.borrow();
    let wrong: Vec<(usize, u8)> =
        r.0.iter()
            .enumerate()
            .filter(|(_, &c)| c != 1)
            .map(|(i, &c)| (i, c))
            .collect();
    if !wrong.is_empty() {
        return Err(format!(
            "{} seeds did not run exactly once (seed, times): {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(8)]
        ));
    }
    let busy = r.1.iter().filter(|&&c| c > 0).count();
    match balancer {
        Balancer::Keep if busy != 1 || r.1[0] == 0 => {
            return Err(format!("keep ran seeds away from PE 0: {:?}", r.1))
        }
        Balancer::Keep => {}
        _ if n > 1 && busy < 2 => {
            return Err(format!("{} moved no seed: {:?}", balancer.name(), r.1))
        }
        _ => {}
    }
    converse::input::out_line(&format!(
        "tasks {scenario}: PE 0 ok (by PE: {:?}; PE 0's {:?})",
        r.1,
        seeds.stats()
    ));
    Ok(())
}

fn die(pe: &mut Pe, tasks: &Tasks) -> Result<(), String> {
    let n = pe.num_pes();
    let victim = n - 1;
    // Never answers: the tokens are kept for ever.
    let kept: Rc<RefCell<Vec<converse_tasks::Reply>>> = Rc::default();
    let k = kept.clone();
    let hold = tasks.serve(pe, "hold", move |_pe, _req, reply| {
        k.borrow_mut().push(reply)
    });
    let inbox = tasks.expect(pe, "never-sent");
    pe.barrier();
    if pe.my_pe() == victim {
        // Dies once the calls have had time to arrive.
        pe.after(Duration::from_millis(300), |_| {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        });
        pe.run_until(|_| false);
        return Ok(());
    }
    if pe.my_pe() != 0 {
        pe.run_until(|_| false);
        return Ok(());
    }
    let t = tasks.clone();
    let r = tasks
        .block_on(pe, async move {
            // An expected receive waiting on the dying PE, in a task of its own.
            let waiting =
                with_pe(|pe| t.spawn(pe, async move { inbox.recv_from(victim).await.map(|_| ()) }));
            let pending: Vec<_> = (0..5)
                .map(|_| call(victim, &hold, b"are you there"))
                .collect();
            for c in pending {
                match c.await {
                    Err(CallError::PeDied { pe, .. }) if pe == victim => {}
                    other => return Err(format!("a call to the dying PE gave {other:?}")),
                }
            }
            match waiting.await {
                Ok(Err(CallError::PeDied { pe, .. })) if pe == victim => {}
                other => return Err(format!("a receive from the dying PE gave {other:?}")),
            }
            match call(victim, &hold, b"").await {
                Err(CallError::PeDied { pe, .. }) if pe == victim => Ok(()),
                other => Err(format!("a call to the dead PE gave {other:?}")),
            }
        })
        .map_err(|e| e.to_string())?;
    r?;
    converse::input::out_line("tasks die: ok");
    Ok(())
}

fn main() -> ExitCode {
    converse::run(|pe| {
        let args: Vec<String> = pe.args().to_vec();
        let scenario = args.get(1).cloned().unwrap_or_default();
        let tasks = Tasks::attach(pe);
        let r = match scenario.as_str() {
            "basics" => basics(pe, &tasks),
            "calls" => calls(pe, &tasks),
            "qd" => qd(pe, &tasks),
            "qdsleep" => qdsleep(pe, &tasks),
            "shared" => shared(pe, &tasks),
            "die" => die(pe, &tasks),
            s if s.starts_with("seeds-") => seeds(pe, &tasks, s),
            other => Err(format!(
                "unknown scenario {other:?} (basics, calls, qd, qdsleep, shared, seeds-B, die)"
            )),
        };
        if let Err(e) = r {
            pe.abort(&format!("tasks {scenario}: PE {}: {e}", pe.my_pe()));
        }
        if scenario == "die" {
            pe.exit(0);
            return;
        }
        pe.barrier();
        if pe.my_pe() == 0 {
            pe.exit(0);
        }
    })
}
