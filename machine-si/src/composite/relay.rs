//! One blocking wait for two transports: an idle composite node sleeps in the network layer's
//! wait (epoll, ppoll: sockets and timers), and this thread sleeps on the SI doorbell for it,
//! ringing the network layer's [`Wake`] when a same-host peer writes.
//!
//! Writers ring the doorbell only while the port's owner says it sleeps. Before its network
//! wait the owner says so ([`Si::arm`](crate::interconnect::Si::arm)), publishes the
//! sleep here (a generation and the doorbell value it saw), and looks at its rings once more:
//! a record written before the relay could see the sleep is found by that look, any later one
//! rings a bell the relay wakes for (both sides order their store before their load with a
//! full fence). The relay stays asleep on the doorbell the whole time, between the node's
//! sleeps too (nobody rings then), so a sleep costs the node no system call here; it wakes the
//! network layer once per sleep in which the bell rang, and naps at most [`NAP`] at a time (an
//! idle job: one wake-up a second).

use crate::interconnect::Doorbell;
use converse_machine::Wake;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest single sleep of the relay.
const NAP: Duration = Duration::from_secs(1);

/// Not sleeping.
const IDLE: u64 = 0;

struct Shared {
    /// `IDLE`, or the current sleep: generation in the high half, doorbell value in the low.
    sleep: AtomicU64,
    stop: AtomicBool,
}

/// The relay thread and what it shares with the node's thread.
pub(crate) struct Relay {
    shared: Arc<Shared>,
    bell: Doorbell,
    generation: u32,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// Start the relay for a node whose SI doorbell is `bell` and whose network layer wakes
    /// with `wake`. `bell` must stay valid until [`Relay::stop`].
    ///
    /// # Errors
    /// The thread's start.
    pub(crate) fn start(bell: Doorbell, wake: Arc<dyn Wake>) -> std::io::Result<Relay> {
        let shared = Arc::new(Shared {
            sleep: AtomicU64::new(IDLE),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("converse-relay".into())
            .spawn(move || run(&s, bell, &*wake))?;
        Ok(Relay {
            shared,
            bell,
            generation: 0,
            thread: Some(thread),
        })
    }

    /// The node sleeps from now on; `seen` is the doorbell value [`Si::arm`] returned. The
    /// caller then looks at its rings once more before it sleeps.
    ///
    /// [`Si::arm`]: crate::interconnect::Si::arm
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

    /// End the thread (before the doorbell's mapping goes).
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

fn run(s: &Shared, bell: Doorbell, wake: &dyn Wake) {
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
    use crate::interconnect::Si;
    use std::path::PathBuf;
    use std::sync::mpsc;

    struct Chan(std::sync::Mutex<mpsc::Sender<()>>);
    impl Wake for Chan {
        fn wake(&self) {
            if let Ok(s) = self.0.lock() {
                let _ = s.send(());
            }
        }
    }

    /// Two nodes' interconnects in this process: 0 reads, 1 writes to it.
    fn pair(name: &str) -> (Si, Si) {
        let path = |n: usize| {
            PathBuf::from(format!(
                "/dev/shm/cv-relay-test-{}-{name}-{n}",
                std::process::id()
            ))
        };
        let mut a = Si::init(0, 2);
        let mut b = Si::init(1, 2);
        a.open(&path(0), 4096).expect("port 0");
        b.open(&path(1), 4096).expect("port 1");
        b.attach(0, &path(0)).expect("attach");
        a.close();
        b.close();
        (a, b)
    }

    #[test]
    fn a_record_written_while_the_node_sleeps_rings_the_network_wake_once() {
        let (a, b) = pair("ring");
        let (tx, rx) = mpsc::channel();
        let bell = a.doorbell().expect("open port");
        let mut relay =
            Relay::start(bell, Arc::new(Chan(std::sync::Mutex::new(tx)))).expect("start");
        // Several sleeps in a row, the writer ringing in each: one wake per sleep.
        for round in 0..3 {
            let seen = a.arm().expect("nothing waiting yet");
            relay.arm(seen);
            assert!(!a.any_waiting());
            assert!(b.try_write(0, b"hello"), "round {round}");
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)),
                Ok(()),
                "round {round}"
            );
            a.disarm();
            relay.disarm();
            let mut got = [0u8; 5];
            assert_eq!(a.peek(1), Some(5));
            a.read(1, &mut got);
            assert_eq!(&got, b"hello");
        }
        relay.stop();
        assert!(rx.try_recv().is_err(), "one wake per sleep");
    }

    #[test]
    fn nothing_rings_while_the_node_is_awake_and_a_waiting_record_is_no_sleep() {
        let (a, b) = pair("awake");
        let (tx, rx) = mpsc::channel();
        let bell = a.doorbell().expect("open port");
        let mut relay =
            Relay::start(bell, Arc::new(Chan(std::sync::Mutex::new(tx)))).expect("start");
        // Awake: the writer does not ring, the relay does not wake anybody.
        assert!(b.try_write(0, b"x"));
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        // A record is waiting: arming says so instead of sleeping.
        assert_eq!(a.arm(), None);
        relay.stop();
    }
}
