//! Report mode (`+set faults=report`): a job that survives a node's death.
//!
//! `survive VICTIM HOW`: PE 0 pings every PE it believes alive each 20 ms and counts the
//! answers per round. At round 5 the PE `VICTIM` dies, as `HOW` says: `exit` (exits with code
//! 3), `kill` (SIGKILL to itself), `stop` (SIGSTOP to itself: silent, for the launcher's hang
//! timeout or the layer's dead-peer detection), `wait` (the test kills it from outside; it
//! prints its pid). Every surviving PE prints `survive: PE p told node n died: why` from its
//! failure callback. PE 0 then checks that a send to the victim is refused, that a barrier
//! fails, and that 10 further rounds are answered by exactly every survivor, and prints
//! `conformance survive: ok ...`, and the job exits 0.

use converse::{HandlerId, Pe};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// The round at which the victim dies.
const DEATH_ROUND: u32 = 5;

/// Rounds answered by every survivor after the death, for the verdict.
const ROUNDS_AFTER: u32 = 10;

#[derive(Default)]
struct Zero {
    round: u32,
    answers: usize,
    expected: usize,
    /// Rounds completed with every survivor answering since the death was reported.
    good_after: u32,
    told: bool,
    done: bool,
}

pub(crate) fn survive(pe: &mut Pe, victim: usize, how: String) {
    let me = pe.my_pe();
    let state = Rc::new(RefCell::new(Zero::default()));
    let pong = {
        let state = state.clone();
        pe.register("pong", move |pe, msg| {
            let round = u32::from_le_bytes(msg.payload()[..4].try_into().unwrap_or([0; 4]));
            let mut s = state.borrow_mut();
            if round == s.round {
                s.answers += 1;
            }
            let _ = pe;
        })
    };
    let ping = pe.register("ping", move |pe, msg| {
        let round = u32::from_le_bytes(msg.payload()[..4].try_into().unwrap_or([0; 4]));
        if pe.my_pe() == victim && round == DEATH_ROUND {
            die(pe, &how);
        }
        pe.send(0, pong, msg.payload());
    });
    {
        let state = state.clone();
        pe.on_node_failure(move |pe, f| {
            println!(
                "survive: PE {} told node {} died: {}",
                pe.my_pe(),
                f.node,
                f.reason
            );
            if pe.my_pe() == 0 {
                state.borrow_mut().told = true;
            }
        });
    }
    if me != 0 {
        return;
    }
    println!("survive: pid of PE {victim} is in its own output");
    // Each round: the last one's answers are judged, the next one goes out.
    pe.every(Duration::from_millis(20), move |pe| {
        let mut s = state.borrow_mut();
        if s.done {
            return;
        }
        if s.told && s.answers == s.expected {
            s.good_after += 1;
        }
        if s.good_after >= ROUNDS_AFTER {
            s.done = true;
            let refused = pe.try_send(victim, ping, &[0; 4]).is_err();
            let alive = (0..pe.num_pes()).filter(|&p| pe.is_alive(p)).count();
            drop(s);
            let barrier_failed = !pe.barrier();
            if refused && barrier_failed && alive == pe.num_pes() - pe.node_size() {
                println!(
                    "conformance survive: ok ({} rounds answered by all {alive} survivors after \
                     node {} died)",
                    ROUNDS_AFTER,
                    pe.node_of(victim)
                );
                pe.exit(0);
            } else {
                println!(
                    "conformance survive: FAILED: send refused {refused}, barrier failed \
                     {barrier_failed}, {alive} alive"
                );
                pe.exit(1);
            }
            return;
        }
        s.round += 1;
        s.answers = 0;
        let round = s.round.to_le_bytes();
        let mut expected = 0;
        for p in 0..pe.num_pes() {
            if pe.is_alive(p) {
                expected += 1;
                pe.send(p, ping, &round);
            }
        }
        s.expected = expected;
        if s.round > DEATH_ROUND + 500 {
            s.done = true;
            println!("conformance survive: FAILED: no death reported in 10 s");
            pe.exit(1);
        }
    });
    let _: HandlerId = ping;
}

fn die(pe: &mut Pe, how: &str) {
    use nix::sys::signal::{raise, Signal};
    println!("survive: PE {} dies ({how})", pe.my_pe());
    match how {
        "exit" => std::process::exit(3),
        "kill" => {
            let _ = raise(Signal::SIGKILL);
        }
        "stop" => {
            let _ = raise(Signal::SIGSTOP);
        }
        _ => {
            println!(
                "survive: PE {} waits to be killed, pid {}",
                pe.my_pe(),
                std::process::id()
            );
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }
}
