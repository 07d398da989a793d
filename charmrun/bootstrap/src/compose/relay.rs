//! One blocking wait for two transports: an idle composite node sleeps in its network part's
//! wait (epoll, ppoll, MPI's naps: sockets and timers), and this thread sleeps on the
//! intra-host part's [`Bell`] for it, ringing the network part's [`Wake`] when a same-host peer
//! writes.
//!
//! The part's writers ring the bell only while the part says it sleeps. Before its network wait
//! the node arms the part ([`Part::arm`](converse_machine::Part::arm): it says it sleeps and
//! gives the bell's value it saw), publishes the sleep here (a generation and that value), and
//! asks the part once more ([`Part::arrived`](converse_machine::Part::arrived)): a record
//! written before the relay could see the sleep is found by that look, any later one rings a
//! bell the relay wakes for (both sides order their store before their load with a full fence).
//! The relay stays asleep on the bell the whole time, between the node's sleeps too (nobody
//! rings then), so a sleep costs the node no system call here; it wakes the network part once
//! per sleep in which the bell rang, and naps at most [`NAP`] at a time (an idle job: one
//! wake-up a second).

use converse_machine::{Bell, Wake};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest single sleep of the relay.
const NAP: Duration = Duration::from_secs(1);

/// Not sleeping.
const IDLE: u64 = 0;

struct Shared {
    /// `IDLE`, or the current sleep: generation in the high half, the bell's value in the low.
    sleep: AtomicU64,
    stop: AtomicBool,
}

/// The relay thread and what it shares with the node's thread.
pub(crate) struct Relay {
    shared: Arc<Shared>,
    bell: Arc<dyn Bell>,
    generation: u32,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// Start the relay for a node whose intra-host part rings `bell` and whose network part
    /// wakes with `wake`. The bell must stay valid until [`Relay::stop`].
    ///
    /// # Errors
    /// The thread's start.
    pub(crate) fn start(bell: Arc<dyn Bell>, wake: Arc<dyn Wake>) -> std::io::Result<Relay> {
        let shared = Arc::new(Shared {
            sleep: AtomicU64::new(IDLE),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let b = Arc::clone(&bell);
        let thread = std::thread::Builder::new()
            .name("converse-relay".into())
            .spawn(move || run(&s, &*b, &*wake))?;
        Ok(Relay {
            shared,
            bell,
            generation: 0,
            thread: Some(thread),
        })
    }

    /// The node sleeps from now on; `seen` is the bell's value the part's `arm` gave. The
    /// caller then asks the part once more before it sleeps.
    pub(crate) fn arm(&mut self, seen: u32) {
        // Never 0 in the high half, so never `IDLE`.
        self.generation = self.generation.wrapping_add(1).max(1);
        let word = (u64::from(self.generation) << 32) | u64::from(seen);
        self.shared.sleep.store(word, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The node's sleep is over.
    pub(crate) fn disarm(&self) {
        self.shared.sleep.store(IDLE, Ordering::SeqCst);
    }

    /// End the thread (before the bell's part goes).
    pub(crate) fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            self.bell.kick();
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(s: &Shared, bell: &dyn Bell, wake: &dyn Wake) {
    // The sleep last woken for: one wake per sleep.
    let mut woken = IDLE;
    while !s.stop.load(Ordering::SeqCst) {
        let now = bell.value();
        let sleep = s.sleep.load(Ordering::SeqCst);
        if sleep != IDLE && sleep != woken && now != sleep as u32 {
            // Rung during the sleep going on: end the node's network wait.
            wake.wake();
            woken = sleep;
        }
        // Returns at once if it rang since `now`.
        bell.wait_past(now, NAP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::{Condvar, Mutex};

    /// A bell in one process: a counter and a condition variable.
    #[derive(Default)]
    struct TestBell(Mutex<u32>, Condvar);

    impl Bell for TestBell {
        fn value(&self) -> u32 {
            self.0.lock().map_or(0, |v| *v)
        }
        fn wait_past(&self, seen: u32, timeout: Duration) {
            if let Ok(v) = self.0.lock() {
                let _ = self.1.wait_timeout_while(v, timeout, |v| *v == seen);
            }
        }
        fn kick(&self) {
            if let Ok(mut v) = self.0.lock() {
                *v = v.wrapping_add(1);
            }
            self.1.notify_all();
        }
    }

    struct Chan(Mutex<mpsc::Sender<()>>);
    impl Wake for Chan {
        fn wake(&self) {
            if let Ok(s) = self.0.lock() {
                let _ = s.send(());
            }
        }
    }

    #[test]
    fn a_bell_rung_while_the_node_sleeps_wakes_the_network_part_once_per_sleep() {
        let bell = Arc::new(TestBell::default());
        let (tx, rx) = mpsc::channel();
        let mut relay = Relay::start(bell.clone(), Arc::new(Chan(Mutex::new(tx)))).expect("start");
        for round in 0..3 {
            relay.arm(bell.value());
            // The writer rings (twice: still one wake for this sleep).
            bell.kick();
            bell.kick();
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)),
                Ok(()),
                "round {round}"
            );
            relay.disarm();
        }
        relay.stop();
        assert!(rx.try_recv().is_err(), "one wake per sleep");
    }

    #[test]
    fn nothing_rings_while_the_node_is_awake() {
        let bell = Arc::new(TestBell::default());
        let (tx, rx) = mpsc::channel();
        let mut relay = Relay::start(bell.clone(), Arc::new(Chan(Mutex::new(tx)))).expect("start");
        // Awake: a ring (here, by hand) wakes nobody.
        bell.kick();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        relay.stop();
    }
}
