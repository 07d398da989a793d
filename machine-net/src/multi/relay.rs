//! One blocking wait for two transports: an idle composite node sleeps in the network layer's
//! wait (epoll, ppoll: sockets and timers), and this thread sleeps on the SI doorbell for it,
//! ringing the network layer's [`Wake`] when a same-host peer writes.
//!
//! Writers ring the doorbell only while the port's owner says it sleeps; the owner says so
//! ([`Si::arm`](converse_si::interconnect::Si::arm)) just before its network wait and checks
//! its rings after that, so a record is either seen then or rings the bell (the SI layer's own
//! sleep protocol, split over two threads). The owner publishes each sleep here as a
//! generation and the doorbell value to wait past; the relay wakes the network layer only
//! when the bell rang during the current sleep. It naps at most [`NAP`] at a time, so an idle
//! job costs it one wake-up a second.

use converse_machine::Wake;
use converse_si::interconnect::Doorbell;
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

    /// The node sleeps from now on; `seen` is the doorbell value [`Si::arm`] returned.
    ///
    /// [`Si::arm`]: converse_si::interconnect::Si::arm
    pub(crate) fn arm(&mut self, seen: u32) {
        // Never 0 in the high half, so never `IDLE`.
        self.generation = self.generation.wrapping_add(1).max(1);
        let word = (u64::from(self.generation) << 32) | u64::from(seen);
        self.shared.sleep.store(word, Ordering::SeqCst);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
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
            t.thread().unpark();
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
    while !s.stop.load(Ordering::SeqCst) {
        let sleep = s.sleep.load(Ordering::SeqCst);
        if sleep == IDLE {
            std::thread::park_timeout(NAP);
            continue;
        }
        let seen = sleep as u32;
        // Returns at once if the bell rang since `seen`.
        bell.wait_past(seen, NAP);
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        // Rung during the sleep still going on: wake the node's network wait, once.
        if s.sleep.load(Ordering::SeqCst) == sleep && bell.value() != seen {
            wake.wake();
            while s.sleep.load(Ordering::SeqCst) == sleep && !s.stop.load(Ordering::SeqCst) {
                std::thread::park_timeout(NAP);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use converse_si::interconnect::Si;
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
