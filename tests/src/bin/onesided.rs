//! Scenarios of one-sided transfers (`Pe::get`, `Pe::put`, regions) on whole jobs, run by
//! tests/onesided.rs on every layer:
//!
//! - `basics`: every PE registers a region of three parts (one empty), a marks region, an
//!   inbox and a region it deregisters at once, and sends their handles to every PE. Then each
//!   PE, towards every PE (itself too): gets the whole region 20 times at once and ranges that
//!   cross parts, one byte, the last byte, an empty range — every byte checked; sends a
//!   message that marks the target's marks region and gets the mark at once (a get is ordered
//!   after the initiator's earlier messages); puts into its slot of the target's inbox with a
//!   notification, then sends a message that checks the slot is filled (a message is ordered
//!   after the initiator's earlier puts); a range beyond the region, a handle claiming more
//!   than the region has (refused by its PE), a deregistered region and a PE outside the job
//!   each fail with their error. Each PE prints `onesided basics: PE N ok, D direct` (D:
//!   the transfers it started whose bytes did not travel in messages, `Pe::direct_transfers`).
//! - `big MAX`: PE 0 gets and puts 1 B, 1 KiB, 1 MiB and MAX bytes from and into a region of
//!   the last PE, every byte checked; each PE prints `onesided big: PE N ok, D direct`.
//! - `die`: report mode; the last PE's process dies while PE 0 has gets and a put pending on
//!   its region: each fails with `PeDied` naming it, one started later fails at once; PE 0
//!   prints `onesided die: ok`.

use converse::{Pe, PutNotice, RegionHandle, RmaError};
use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

/// Byte `i` of PE `owner`'s data region.
fn pattern(owner: usize, i: u64) -> u8 {
    (owner as u64 * 131 + i * 7 + i / 251) as u8
}

/// The parts of PE `pe`'s data region: the middle one empty.
fn part_lens(pe: usize) -> [usize; 3] {
    [1000 + 37 * pe, 0, 5000]
}

const SLOT: usize = 256;

#[derive(Clone, Copy)]
struct Handles {
    data: RegionHandle,
    marks: RegionHandle,
    inbox: RegionHandle,
    gone: RegionHandle,
}

type Errors = Rc<RefCell<Vec<String>>>;

/// What a transfer's callback got.
type Outcome = Result<Vec<u8>, RmaError>;

fn check(errors: &Errors, ok: bool, what: impl FnOnce() -> String) {
    if !ok {
        errors.borrow_mut().push(what());
    }
}

fn basics(pe: &mut Pe) -> Result<(), String> {
    let (me, n) = (pe.my_pe(), pe.num_pes());
    let errors: Errors = Rc::default();
    let handles: Rc<RefCell<Vec<Option<Handles>>>> = Rc::new(RefCell::new(vec![None; n]));
    let notices = Rc::new(RefCell::new(0usize));
    let after_puts = Rc::new(RefCell::new(0usize));

    // The regions.
    let lens = part_lens(me);
    let mut at = 0u64;
    let parts: Vec<Vec<u8>> = lens
        .iter()
        .map(|&l| {
            let p = (at..at + l as u64).map(|i| pattern(me, i)).collect();
            at += l as u64;
            p
        })
        .collect();
    let data = pe.register_region(parts);
    let marks = Rc::new(pe.register_region(vec![vec![0; n]]));
    let inbox = Rc::new(pe.register_region(vec![vec![0; n * SLOT]]));
    let gone = pe.register_region(vec![vec![1; 64]]);
    let mine = Handles {
        data: pe.region_handle(&data),
        marks: pe.region_handle(&marks),
        inbox: pe.region_handle(&inbox),
        gone: pe.region_handle(&gone),
    };
    // Deregistered before anyone has its handle: every transfer on it is stale.
    let back = pe.deregister_region(gone);
    if back != vec![vec![1u8; 64]] {
        return Err("deregistering did not hand the memory back".into());
    }

    // Handlers (every PE registers them in the same order).
    let h = handles.clone();
    let got_handles = pe.register("handles", move |_pe, m| {
        let p = m.payload();
        let from = m.src_pe() as usize;
        let rh = |k: usize| RegionHandle::from_bytes(&p[k * 20..]).expect("a handle");
        h.borrow_mut()[from] = Some(Handles {
            data: rh(0),
            marks: rh(1),
            inbox: rh(2),
            gone: rh(3),
        });
    });
    let mk = marks.clone();
    let mark = pe.register("mark", move |pe, m| {
        let from = m.src_pe() as usize;
        pe.region_mut(&mk)[0][from] = 1;
    });
    let (ib, e2, ns) = (inbox.clone(), errors.clone(), notices.clone());
    let noticed = pe.register("noticed", move |pe, m| {
        let notice = PutNotice::parse(&m).expect("a put notice");
        let from = notice.from;
        let want = (from * SLOT) as u64..((from + 1) * SLOT) as u64;
        let me = pe.my_pe();
        let filled = pe.region(&ib)[0][want.start as usize..want.end as usize]
            .iter()
            .all(|&b| b == (from ^ me) as u8 ^ 0x5a);
        check(&e2, notice.range == want && filled, || {
            format!(
                "a put notice from PE {from}: {:?}, filled {filled}",
                notice.range
            )
        });
        *ns.borrow_mut() += 1;
    });
    let (ib, e3, ap) = (inbox.clone(), errors.clone(), after_puts.clone());
    let after_put = pe.register("after-put", move |pe, m| {
        let from = m.src_pe() as usize;
        let me = pe.my_pe();
        let slot = &pe.region(&ib)[0][from * SLOT..(from + 1) * SLOT];
        check(
            &e3,
            slot.iter().all(|&b| b == (from ^ me) as u8 ^ 0x5a),
            || format!("PE {from}'s message came before its put's bytes"),
        );
        *ap.borrow_mut() += 1;
    });

    let mut out = Vec::new();
    for h in [mine.data, mine.marks, mine.inbox, mine.gone] {
        out.extend_from_slice(&h.to_bytes());
    }
    for q in 0..n {
        pe.send(q, got_handles, &out);
    }
    let h = handles.clone();
    pe.run_until(|_| h.borrow().iter().all(Option::is_some));
    let all: Vec<Handles> = handles.borrow().iter().flatten().copied().collect();

    // Every transfer, towards every PE; `left` counts completions to come.
    let left = Rc::new(RefCell::new(0usize));
    let expect = |left: &Rc<RefCell<usize>>| *left.borrow_mut() += 1;
    for (q, hq) in all.iter().enumerate() {
        let len = hq.data.len();
        let total: u64 = part_lens(q).iter().map(|&l| l as u64).sum();
        check(&errors, len == total, || {
            format!("PE {q}'s handle says {len} bytes")
        });
        // Whole, 20 at once, and ranges.
        let mut ranges: Vec<std::ops::Range<u64>> = vec![0..len; 20];
        let cross = part_lens(q)[0] as u64;
        ranges.extend([0..1, cross - 2..cross + 3, len - 1..len, 5..5, 17..4000]);
        for r in ranges {
            expect(&left);
            let (e, l, r2) = (errors.clone(), left.clone(), r.clone());
            pe.get(&hq.data, r, move |_pe, got| {
                match got {
                    Ok(bytes) => {
                        let ok = bytes.len() as u64 == r2.end - r2.start
                            && bytes
                                .iter()
                                .zip(r2.clone())
                                .all(|(&b, i)| b == pattern(q, i));
                        check(&e, ok, || format!("get {r2:?} from PE {q}: wrong bytes"));
                    }
                    Err(err) => e
                        .borrow_mut()
                        .push(format!("get {r2:?} from PE {q}: {err}")),
                }
                *l.borrow_mut() -= 1;
            });
        }
        // A message, then a get: the get sees what the message did.
        pe.send(q, mark, b"");
        expect(&left);
        let (e, l) = (errors.clone(), left.clone());
        pe.get(&hq.marks, me as u64..me as u64 + 1, move |_pe, got| {
            check(&e, got.as_deref() == Ok(&[1u8][..]), || {
                format!("a get after a message to PE {q} missed its mark: {got:?}")
            });
            *l.borrow_mut() -= 1;
        });
        // A put with a notification, then a message: the message sees the put.
        let bytes = vec![(me ^ q) as u8 ^ 0x5a; SLOT];
        expect(&left);
        let (e, l, sent) = (errors.clone(), left.clone(), bytes.clone());
        pe.put(
            &hq.inbox,
            (me * SLOT) as u64,
            bytes,
            Some(noticed),
            move |_pe, r| {
                check(&e, r.as_ref() == Ok(&sent), || {
                    format!("a put to PE {q}: {r:?}")
                });
                *l.borrow_mut() -= 1;
            },
        );
        pe.send(q, after_put, b"");
        // Errors.
        expect(&left);
        pe.get(
            &hq.data,
            0..len + 1,
            fails(
                &errors,
                format!("get past PE {q}'s region"),
                |e| matches!(e, RmaError::OutOfRange { .. }),
                &left,
            ),
        );
        // A handle that claims more than the region has: refused by the region's PE.
        let mut forged = hq.data.to_bytes();
        forged[12..].copy_from_slice(&(len + 100).to_le_bytes());
        let forged = RegionHandle::from_bytes(&forged).expect("a handle");
        expect(&left);
        pe.get(
            &forged,
            len..len + 50,
            fails(
                &errors,
                format!("get past PE {q}'s region by a forged handle"),
                |e| matches!(e, RmaError::OutOfRange { .. }),
                &left,
            ),
        );
        expect(&left);
        pe.put(
            &forged,
            len + 10,
            vec![0; 5],
            None,
            fails(
                &errors,
                format!("put past PE {q}'s region by a forged handle"),
                |e| matches!(e, RmaError::OutOfRange { .. }),
                &left,
            ),
        );
        expect(&left);
        pe.get(
            &hq.gone,
            0..8,
            fails(
                &errors,
                format!("get from PE {q}'s deregistered region"),
                |e| matches!(e, RmaError::Stale { .. }),
                &left,
            ),
        );
        expect(&left);
        pe.put(
            &hq.gone,
            0,
            vec![9; 8],
            None,
            fails(
                &errors,
                format!("put into PE {q}'s deregistered region"),
                |e| matches!(e, RmaError::Stale { .. }),
                &left,
            ),
        );
    }
    let mut beyond = all[0].data.to_bytes();
    beyond[..4].copy_from_slice(&(n as u32 + 5).to_le_bytes());
    let beyond = RegionHandle::from_bytes(&beyond).expect("a handle");
    expect(&left);
    pe.get(&beyond, 0..1, fails_outside(errors.clone(), left.clone()));

    let (l, ns, ap) = (left.clone(), notices.clone(), after_puts.clone());
    pe.run_until(|_| *l.borrow() == 0 && *ns.borrow() == n && *ap.borrow() == n);
    // Nothing written outside the inbox slots, and the data region untouched.
    let region = pe.region(&data);
    let mut i = 0u64;
    for part in region {
        for &b in part {
            check(&errors, b == pattern(me, i), || {
                format!("data byte {i} changed")
            });
            i += 1;
        }
    }
    let errs = errors.borrow();
    if errs.is_empty() {
        converse::input::out_line(&format!(
            "onesided basics: PE {me} ok, {} direct",
            pe.direct_transfers()
        ));
        Ok(())
    } else {
        Err(format!("{} failures, first: {}", errs.len(), errs[0]))
    }
}

/// A callback that expects the error `want` and counts itself done.
fn fails<T: std::fmt::Debug>(
    e: &Errors,
    what: String,
    want: fn(&RmaError) -> bool,
    l: &Rc<RefCell<usize>>,
) -> impl FnOnce(&mut Pe, Result<T, RmaError>) {
    let (e, l) = (e.clone(), l.clone());
    move |_pe: &mut Pe, r: Result<T, RmaError>| {
        check(&e, r.as_ref().err().is_some_and(want), || {
            format!("{what}: {r:?}")
        });
        *l.borrow_mut() -= 1;
    }
}

fn fails_outside(
    e: Errors,
    l: Rc<RefCell<usize>>,
) -> impl FnOnce(&mut Pe, Result<converse::Got, RmaError>) {
    move |pe: &mut Pe, r| {
        let n = pe.num_pes();
        check(
            &e,
            matches!(r, Err(RmaError::NoSuchPe(p)) if p == n + 5),
            || format!("a get from a PE outside the job: {r:?}"),
        );
        *l.borrow_mut() -= 1;
    }
}

fn big(pe: &mut Pe, max: usize) -> Result<(), String> {
    let (me, n) = (pe.my_pe(), pe.num_pes());
    let target = n - 1;
    let handle = Rc::new(RefCell::new(None));
    let h = handle.clone();
    let got = pe.register("big-handle", move |_pe, m| {
        *h.borrow_mut() = RegionHandle::from_bytes(m.payload()).ok();
    });
    let done = Rc::new(RefCell::new(false));
    let d = done.clone();
    let finished = pe.register("big-done", move |_pe, _m| *d.borrow_mut() = true);
    let fill = |i: usize| (i % 253) as u8;
    let _region = if me == target {
        let r = pe.register_region(vec![(0..max).map(fill).collect()]);
        let h = pe.region_handle(&r);
        pe.send(0, got, &h.to_bytes());
        Some(r)
    } else {
        None
    };
    if me == 0 {
        let h = handle.clone();
        pe.run_until(|_| h.borrow().is_some());
        let h = handle.borrow().expect("the handle");
        let errors: Errors = Rc::default();
        for size in [1usize, 1024, 1 << 20, max] {
            let size = size.min(max);
            // Get the last `size` bytes, then put a pattern of our own there and get it back.
            let off = (max - size) as u64;
            let res = Rc::new(RefCell::new(None));
            let r = res.clone();
            pe.get(&h, off..max as u64, move |_pe, g| *r.borrow_mut() = Some(g));
            let r = res.clone();
            pe.run_until(|_| r.borrow().is_some());
            let g = res.borrow_mut().take().expect("done");
            check(
                &errors,
                g.as_ref().is_ok_and(|b| {
                    b.iter()
                        .enumerate()
                        .all(|(i, &x)| x == fill(off as usize + i))
                }),
                || format!("get of {size} B: {:?}", g.as_ref().map(|b| b.len())),
            );
            let mine: Vec<u8> = (0..size).map(|i| (i % 241) as u8 ^ 0x33).collect();
            let res = Rc::new(RefCell::new(None));
            let r = res.clone();
            pe.put(&h, off, mine.clone(), None, move |_pe, p| {
                *r.borrow_mut() = Some(p.map(|b| b.len()))
            });
            let r = res.clone();
            pe.run_until(|_| r.borrow().is_some());
            let p = res.borrow_mut().take().expect("done");
            check(&errors, p == Ok(size), || format!("put of {size} B: {p:?}"));
            let res = Rc::new(RefCell::new(None));
            let r = res.clone();
            pe.get(&h, off..max as u64, move |_pe, g| *r.borrow_mut() = Some(g));
            let r = res.clone();
            pe.run_until(|_| r.borrow().is_some());
            let g = res.borrow_mut().take().expect("done");
            check(&errors, g.as_deref() == Ok(&mine[..]), || {
                format!("get back after a put of {size} B")
            });
            // Restore what the next, larger get checks.
            let restore: Vec<u8> = (0..size).map(|i| fill(off as usize + i)).collect();
            let res = Rc::new(RefCell::new(None));
            let r = res.clone();
            pe.put(&h, off, restore, None, move |_pe, p| {
                *r.borrow_mut() = Some(p.is_ok())
            });
            let r = res.clone();
            pe.run_until(|_| r.borrow().is_some());
        }
        let errs = errors.borrow();
        if !errs.is_empty() {
            return Err(format!("{} failures, first: {}", errs.len(), errs[0]));
        }
        for q in 0..n {
            pe.send(q, finished, b"");
        }
    }
    let d = done.clone();
    pe.run_until(|_| *d.borrow());
    converse::input::out_line(&format!(
        "onesided big: PE {me} ok, {} direct",
        pe.direct_transfers()
    ));
    Ok(())
}

fn die(pe: &mut Pe) -> Result<(), String> {
    let n = pe.num_pes();
    let victim = n - 1;
    let handle = Rc::new(RefCell::new(None));
    let h = handle.clone();
    let got = pe.register("die-handle", move |_pe, m| {
        *h.borrow_mut() = RegionHandle::from_bytes(m.payload()).ok();
    });
    // The victim stops answering (a handler that sleeps), then dies.
    let stall = pe.register("stall", |_pe, _m| {
        std::thread::sleep(Duration::from_millis(500));
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    });
    pe.barrier();
    if pe.my_pe() == victim {
        let r = pe.register_region(vec![vec![3; 4096]]);
        let h = pe.region_handle(&r);
        pe.send(0, got, &h.to_bytes());
        // Registered until the process dies.
        let _keep = r;
        pe.run_until(|_| false);
        return Ok(());
    }
    if pe.my_pe() != 0 {
        pe.run_until(|_| false);
        return Ok(());
    }
    let hh = handle.clone();
    pe.run_until(|_| hh.borrow().is_some());
    let h = handle.borrow().expect("a handle");
    pe.send(victim, stall, b"");
    let results: Rc<RefCell<Vec<Outcome>>> = Rc::default();
    for _ in 0..5 {
        let r = results.clone();
        pe.get(&h, 0..4096, move |_pe, g| {
            r.borrow_mut().push(g.map(|b| b.into_vec()))
        });
    }
    let r = results.clone();
    pe.put(&h, 0, vec![1; 100], None, move |_pe, p| {
        r.borrow_mut().push(p)
    });
    let r = results.clone();
    pe.run_until(|_| r.borrow().len() == 6);
    for res in results.borrow().iter() {
        if !matches!(res, Err(RmaError::PeDied { pe, .. }) if *pe == victim) {
            return Err(format!("a transfer on the dying PE's region gave {res:?}"));
        }
    }
    // Refused without being sent; its callback still comes from the scheduler, not inside
    // `get`.
    let later = Rc::new(RefCell::new(None));
    let l = later.clone();
    pe.get(&h, 0..1, move |_pe, g| *l.borrow_mut() = Some(g));
    if later.borrow().is_some() {
        return Err("a refused get's callback ran inside `get`".into());
    }
    let l = later.clone();
    pe.run_until(|_| l.borrow().is_some());
    match later.borrow_mut().take() {
        Some(Err(RmaError::PeDied { pe, .. })) if pe == victim => {}
        other => return Err(format!("a get after the death gave {other:?}")),
    }
    converse::input::out_line("onesided die: ok");
    Ok(())
}

fn main() -> ExitCode {
    converse::run(|pe| {
        let args: Vec<String> = pe.args().to_vec();
        let scenario = args.get(1).cloned().unwrap_or_default();
        let r = match scenario.as_str() {
            "basics" => basics(pe),
            "big" => match args.get(2).map_or(Ok(64 << 20), |a| a.parse::<usize>()) {
                Ok(max) if (1 << 20..=1 << 30).contains(&max) => big(pe, max),
                _ => Err("big MAX: MAX from 1 MiB to 1 GiB".into()),
            },
            "die" => die(pe),
            other => Err(format!("unknown scenario {other:?} (basics, big, die)")),
        };
        if let Err(e) = r {
            pe.abort(&format!("onesided {scenario}: PE {}: {e}", pe.my_pe()));
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
