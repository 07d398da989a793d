//! Report mode (`+set faults=report`): a job that survives a node's death.
//!
//! `survive VICTIM HOW`: PE 0 pings every PE it believes alive each 20 ms and counts the
//! answers per round. At round 5 the PE `VICTIM` dies, as `HOW` says: `exit` (exits with code
//! 3), `kill` (SIGKILL to itself), `send-kill` (sends PE 0 [`LARGE_SENT`] messages of 1 MiB,
//! then SIGKILL to itself: it dies with large messages part-way to PE 0), `stop` (SIGSTOP to itself: silent, for the launcher's hang
//! timeout or the layer's dead-peer detection), `wait` (the test kills it from outside; it
//! prints its pid). Every surviving PE prints `survive: PE p told node n died: why` from its
//! failure callback. PE 0 then checks that a send to the victim is refused, that a barrier
//! fails, that 10 further rounds are answered by exactly every survivor and that every survivor
//! was told (each says so to PE 0), that a broadcast to every PE and one to every node reach
//! every survivor (with `+set tree.branching=2` the dead node has children in both trees),
//! and prints
//! `conformance survive: ok ...`, and the job exits 0.

use converse::{HandlerId, Pe};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// The round at which the victim dies.
const DEATH_ROUND: u32 = 5;

/// Messages of 1 MiB the victim sends PE 0 before it dies (`send-kill`): more than a
/// layer takes at once, so some are still on their way.
const LARGE_SENT: usize = 32;

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
    /// Other PEs that said their failure callback ran.
    told_by: usize,
    /// The broadcasts after the death went out.
    broadcast: bool,
    /// PEs that ran the PE broadcast, nodes that ran the node broadcast.
    pe_acks: usize,
    node_acks: usize,
    done: bool,
}

pub(crate) fn survive(pe: &mut Pe, victim: usize, how: String) {
    if victim == 0 || victim >= pe.num_pes() {
        return pe.refuse_arguments(&format!(
            "conformance survive: the victim must be a PE from 1 to {} (PE 0 watches), got {victim}",
            pe.num_pes().saturating_sub(1)
        ));
    }
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
    // What the victim sends before it dies (`send-kill`): dropped.
    let sink = pe.register("sink", |_, _| {});
    let ping = pe.register("ping", move |pe, msg| {
        let round = u32::from_le_bytes(msg.payload()[..4].try_into().unwrap_or([0; 4]));
        if pe.my_pe() == victim && round == DEATH_ROUND {
            if how == "send-kill" {
                let large = vec![7u8; 1 << 20];
                for _ in 0..LARGE_SENT {
                    pe.send(0, sink, &large);
                }
                die(pe, "kill");
            }
            die(pe, &how);
        }
        pe.send(0, pong, msg.payload());
    });
    // After the death, a broadcast to every PE and one to every node: each must still reach
    // every survivor (the trees route around the dead), each says so to PE 0.
    let acks = {
        let state = state.clone();
        pe.register("acked", move |_, msg| {
            let mut s = state.borrow_mut();
            if msg.payload().first() == Some(&1) {
                s.node_acks += 1;
            } else {
                s.pe_acks += 1;
            }
        })
    };
    let to_pes = pe.register("to-pes", move |pe, _| pe.send(0, acks, &[0]));
    let to_nodes = pe.register("to-nodes", move |pe, _| pe.send(0, acks, &[1]));
    let told = {
        let state = state.clone();
        pe.register("told", move |_, _| state.borrow_mut().told_by += 1)
    };
    {
        let state = state.clone();
        pe.on_node_failure(move |pe, f| {
            converse::input::out_line(&format!(
                "survive: PE {} told node {} died: {}",
                pe.my_pe(),
                f.node,
                f.reason
            ));
            if pe.my_pe() == 0 {
                state.borrow_mut().told = true;
            } else {
                // PE 0 ends the job only once every survivor was told: a death a layer finds
                // reaches the others through charmrun, later.
                pe.send(0, told, &[]);
            }
        });
    }
    if me != 0 {
        return;
    }
    converse::input::out_line(&format!("survive: pid of PE {victim} is in its own output"));
    // Each round: the last one's answers are judged, the next one goes out.
    pe.every(Duration::from_millis(20), move |pe| {
        let mut s = state.borrow_mut();
        if s.done {
            return;
        }
        if s.told && s.answers == s.expected {
            s.good_after += 1;
        }
        let others = (1..pe.num_pes()).filter(|&p| pe.is_alive(p)).count();
        if s.good_after >= ROUNDS_AFTER / 2 && !s.broadcast {
            s.broadcast = true;
            pe.broadcast_all(to_pes, &[]);
            pe.broadcast_node_all(to_nodes, &[]);
        }
        let live_nodes = (0..pe.num_nodes())
            .filter(|&n| !pe.dead_nodes().contains(&n))
            .count();
        if s.good_after >= ROUNDS_AFTER
            && s.told_by >= others
            && s.pe_acks == others + 1
            && s.node_acks == live_nodes
        {
            s.done = true;
            let refused = pe.try_send(victim, ping, &[0; 4]).is_err();
            let alive = (0..pe.num_pes()).filter(|&p| pe.is_alive(p)).count();
            drop(s);
            let barrier_failed = !pe.barrier();
            if refused && barrier_failed && alive == pe.num_pes() - pe.node_size() {
                converse::input::out_line(&format!(
                    "conformance survive: ok ({} rounds answered by all {alive} survivors after \
                     node {} died)",
                    ROUNDS_AFTER,
                    pe.node_of(victim)
                ));
                pe.exit(0);
            } else {
                converse::input::out_line(&format!(
                    "conformance survive: FAILED: send refused {refused}, barrier failed \
                     {barrier_failed}, {alive} alive"
                ));
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
            converse::input::out_line("conformance survive: FAILED: no death reported in 10 s");
            pe.exit(1);
        }
    });
    let _: HandlerId = ping;
}

fn die(pe: &mut Pe, how: &str) {
    use nix::sys::signal::{raise, Signal};
    converse::input::out_line(&format!("survive: PE {} dies ({how})", pe.my_pe()));
    match how {
        "exit" => std::process::exit(3),
        "kill" => {
            let _ = raise(Signal::SIGKILL);
        }
        "stop" => {
            let _ = raise(Signal::SIGSTOP);
        }
        _ => {
            converse::input::out_line(&format!(
                "survive: PE {} waits to be killed, pid {}",
                pe.my_pe(),
                std::process::id()
            ));
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }
}
