//! The conformance scenarios about how a job ends when something goes wrong: an exit code
//! chosen by a PE, a handler-set mismatch, a panic, an exit before start-up completes, a PE
//! leaving past the runtime, a PE that stops polling, and an exit right after a huge send.

use super::{report, verdict};
use converse::{Message, Pe, ReduceTarget};
use std::time::Duration;

pub(super) fn exit_code(pe: &mut Pe, code: i32) {
    let last = pe.num_pes() - 1;
    if pe.my_pe() == last {
        converse::input::out_line(&format!(
            "conformance exit-code: PE {last} exits with {code}"
        ));
        pe.exit(code);
    }
}

pub(super) fn mismatch(pe: &mut Pe) {
    let v = verdict(pe, "mismatch", |_| {
        "(but a handler mismatch was expected)".into()
    });
    if pe.my_pe() == pe.num_pes() - 1 {
        pe.register("only-on-the-last-pe", |_, _| {});
    }
    report(pe, 0, v);
}

/// The last PE panics in a handler while the others wait in a barrier it never reaches.
pub(super) fn reduce_mismatch(pe: &mut Pe) {
    let got = pe.register("mismatch.sum", |pe, msg| {
        converse::input::out_line(&format!(
            "conformance reduce-mismatch: FAILED: a sum of {} bytes came out",
            msg.payload().len()
        ));
        pe.exit(1);
    });
    let last = pe.num_pes() - 1;
    let mine = pe.my_pe() as u64;
    let data: Vec<u8> = if pe.my_pe() == last && last > 0 {
        (mine as u32).to_le_bytes().to_vec()
    } else {
        mine.to_le_bytes().to_vec()
    };
    pe.reduce(
        &data,
        converse::ops::sum_u64,
        converse::ReduceTarget::Root(got),
    );
}

pub(super) fn panic(pe: &mut Pe) {
    let boom = pe.register("boom", |pe, _| {
        panic!("deliberate panic on PE {}", pe.my_pe())
    });
    let last = pe.num_pes() - 1;
    if pe.my_pe() == 0 {
        pe.send(last, boom, b"");
    }
    if pe.my_pe() == last {
        // Only ever left by the panic.
        pe.run_until(|_| false);
    }
    pe.barrier();
    converse::input::out_line(&format!(
        "conformance panic: FAILED: PE {} passed the barrier",
        pe.my_pe()
    ));
}

/// PE 0 ends the job before start-up can complete; the others wait in a barrier that never
/// completes. The job must still end, with PE 0's code.
pub(super) fn exit_early(pe: &mut Pe) {
    if pe.my_pe() == 0 {
        pe.exit(5);
    } else {
        pe.barrier();
    }
}

pub(super) fn proc_exit(pe: &mut Pe) {
    pe.barrier();
    if pe.my_pe() == pe.num_pes() - 1 {
        converse::input::out_line(&format!(
            "conformance proc-exit: PE {} calls process::exit(3)",
            pe.my_pe()
        ));
        std::process::exit(3);
    }
}

pub(super) fn hang(pe: &mut Pe) {
    pe.barrier();
    if pe.my_pe() == pe.num_pes() - 1 {
        converse::input::out_line(&format!(
            "conformance hang: PE {} stops polling",
            pe.my_pe()
        ));
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

pub(super) fn silent(pe: &mut Pe) {
    let sink = pe.register("sink", |_, _| {});
    pe.barrier();
    let last = pe.num_pes() - 1;
    if pe.my_pe() == last {
        converse::input::out_line(&format!("conformance silent: PE {last} stops polling"));
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    if pe.my_pe() == 0 {
        // After the last PE has surely stopped: nobody will ever read this.
        pe.after(Duration::from_millis(200), move |pe| {
            pe.send(last, sink, b"anyone?")
        });
    }
}

pub(super) fn exit_after_send(pe: &mut Pe) {
    let sink = pe.register("sink", |_, _| {});
    pe.barrier();
    if pe.my_pe() == 0 {
        let last = pe.num_pes() - 1;
        pe.send_msg(last, sink, Message::new(64 << 20));
        converse::input::out_line("conformance exit-after-send: ok");
        pe.exit(0);
    }
}

/// Every PE meets the others in a barrier and a reduction, then returns without `pe.exit`:
/// the job is idle for good (what `+idle-warn` is for). PE 0 prints
/// `conformance forgotten-exit: done, no exit`.
pub(super) fn forgotten_exit(pe: &mut Pe) {
    let done = pe.register("done", |_pe, _m| {
        converse::input::out_line("conformance forgotten-exit: done, no exit");
    });
    pe.barrier();
    pe.reduce(
        &1u64.to_le_bytes(),
        converse::ops::sum_u64,
        ReduceTarget::Root(done),
    );
}

/// PE 0 ends the job from a timer SECS after start-up; nothing else happens meanwhile: idle,
/// but with work to come (`+idle-warn` must not call it idle).
pub(super) fn timer_exit(pe: &mut Pe, secs: f64) {
    pe.barrier();
    if pe.my_pe() == 0 {
        pe.after(Duration::from_secs_f64(secs), |pe| {
            converse::input::out_line("conformance timer-exit: ok");
            pe.exit(0);
        });
    }
}

/// The last PE computes SECS in a handler, then tells PE 0, which ends the job; every other PE
/// idles meanwhile: idle but for one busy PE (`+idle-warn` must not call it idle).
pub(super) fn busy_exit(pe: &mut Pe, secs: f64) {
    let finished = pe.register("finished", |pe, _m| {
        converse::input::out_line("conformance busy-exit: ok");
        pe.exit(0);
    });
    let work = pe.register("work", move |pe, _m| {
        let until = std::time::Instant::now() + Duration::from_secs_f64(secs);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        pe.send(0, finished, b"");
    });
    pe.barrier();
    let last = pe.num_pes() - 1;
    if pe.my_pe() == last {
        pe.send(last, work, b"");
    }
}
