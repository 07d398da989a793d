//! The UCX layer's part driven by hand (no launcher session around it), two nodes as threads
//! of this process started by charmrun's embedded launcher: what the contract check does not
//! reach — FIFO across UCX's eager and rendezvous protocols (a small message overtakes a large
//! one inside UCX), `queued` and `in_transfer` during a rendezvous, and a dead peer found by
//! UCX itself (its endpoint's error callback), not by charmrun.

#![cfg(feature = "ucx")]

use charmrun::launch::{start_embedded, Embedded, NodeStart};
use converse_bootstrap::client::Control;
use converse_bootstrap::session::Open;
use converse_bootstrap::Bootstrap;
use converse_machine::{BootConfig, MachineError, Message, Transport};
use converse_ucx::{UcxMachine, UcxOpen};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The launcher and its connections (kept open: a node that closes its own is gone).
type Job = (Embedded, Vec<Control>);

/// Two connected parts of transport string `K` (1: ucx+tcp, 2: ucx+shm), and their launcher.
fn pair<const K: usize>() -> (UcxMachine, UcxMachine, Job) {
    let mut opts = charmrun::opts::Opts::with_pes(2);
    opts.timeout = Duration::from_secs(60);
    let job = start_embedded(opts, vec![NodeStart::InProcess, NodeStart::InProcess])
        .expect("the embedded launcher starts");
    let (mut parts, controls): (Vec<UcxMachine>, Vec<Control>) = std::thread::scope(|s| {
        let hs: Vec<_> = job
            .envs()
            .iter()
            .map(|env| {
                s.spawn(move || {
                    let cfg = BootConfig::new(2);
                    let mut launcher = Control::connect(env).expect("reaches the launcher");
                    let open = UcxOpen::<K>::open(&cfg, env, &launcher).expect("open");
                    let table = launcher.exchange(open.info()).expect("table");
                    let part = open.connect(env, table, &launcher).expect("connect");
                    (part, launcher)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("boot")).collect()
    });
    let b = parts.pop().expect("node 1");
    let a = parts.pop().expect("node 0");
    (a, b, (job, controls))
}

/// End the embedded job: each node leaves with code 0 (a node in the launcher's process that
/// has said so is not ended with the job).
fn end((job, controls): Job) {
    for c in &controls {
        c.ending(0).expect("ending");
    }
    job.wait();
    drop(controls);
}

/// Sizes that cross UCX's eager/rendezvous thresholds both ways, small after large.
const SIZES: [usize; 6] = [8, 2 << 20, 3, 256 << 10, 100, 40 << 10];

fn numbered(i: usize) -> Message {
    let size = SIZES[i % SIZES.len()].max(8);
    let mut m = Message::new(size);
    m.payload_mut().fill(i as u8);
    m.payload_mut()[..8].copy_from_slice(&(i as u64).to_le_bytes());
    m
}

fn fifo<const K: usize>() {
    const N: usize = 120;
    let (mut a, mut b, job) = pair::<K>();
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let receiver = std::thread::spawn(move || {
        let mut got = 0usize;
        let deadline = Instant::now() + Duration::from_secs(30);
        while got < N && Instant::now() < deadline {
            b.advance(&mut |m| {
                let p = m.payload();
                let seq = u64::from_le_bytes(p[..8].try_into().expect("8 bytes")) as usize;
                assert_eq!(seq, got, "FIFO");
                assert_eq!(p.len(), SIZES[seq % SIZES.len()].max(8), "size of {seq}");
                assert!(p[8..].iter().all(|&x| x == seq as u8), "bytes of {seq}");
                got += 1;
            })
            .expect("advance");
        }
        d2.store(true, Ordering::Release);
        (got, b)
    });
    let (mut held, mut transferring) = (0, false);
    for i in 0..N {
        a.send(1, numbered(i)).expect("send");
        held = held.max(a.queued(1));
        transferring |= a.in_transfer();
        a.advance(&mut |_| panic!("nothing comes back"))
            .expect("advance");
    }
    while !done.load(Ordering::Acquire) {
        a.advance(&mut |_| panic!("nothing comes back"))
            .expect("advance");
    }
    let (got, b) = receiver.join().expect("receiver");
    assert_eq!(got, N);
    assert!(
        held >= 2 << 20,
        "a rendezvous send is held until its receiver pulls it: {held}"
    );
    assert!(transferring, "in_transfer while a rendezvous runs");
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.queued(1) > 0 && Instant::now() < deadline {
        a.advance(&mut |_| {}).expect("advance");
    }
    assert_eq!(a.queued(1), 0, "every send completed");
    assert!(!a.in_transfer());
    drop((a, b));
    end(job);
}

#[test]
fn fifo_across_eager_and_rendezvous_over_tcp() {
    fifo::<1>();
}

#[test]
fn fifo_across_eager_and_rendezvous_over_shm() {
    fifo::<2>();
}

#[test]
fn strangers_are_dropped_and_counted_whatever_their_size() {
    let (mut a, mut b, job) = pair::<1>();
    // Another job's node 0 (another secret, so another stamp in its tags), handed this job's
    // table: its messages reach node 1's worker and must go nowhere.
    let mut env = job.0.envs()[0].clone();
    env.secret[0] ^= 0xff;
    let cfg = BootConfig::new(2);
    let open = UcxOpen::<1>::open(&cfg, &env, &job.1[0]).expect("open");
    let mut stranger = open
        .connect(&env, a.table().clone(), &job.1[0])
        .expect("connect");
    for size in [8, 100 << 10, 2 << 20] {
        stranger
            .send(1, Message::new(size))
            .expect("stranger's send");
    }
    a.send(1, numbered(0)).expect("send");
    a.send(1, numbered(1)).expect("send");
    let strangers = |m: &UcxMachine| {
        m.counters()
            .into_iter()
            .find(|(k, _)| *k == "ucx.strangers_dropped")
            .map_or(0, |(_, v)| v)
    };
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while (got.len() < 2 || strangers(&b) < 3) && Instant::now() < deadline {
        let _ = stranger.advance(&mut |_| {});
        a.advance(&mut |_| {}).expect("advance");
        b.advance(&mut |m| got.push(m.payload()[0]))
            .expect("advance");
    }
    assert_eq!(got, [0, 1], "only the job's messages, in order");
    assert_eq!(strangers(&b), 3);
    drop(stranger);
    drop((a, b));
    end(job);
}

#[test]
fn a_peer_whose_worker_is_gone_is_peer_dead() {
    let (mut a, mut b, job) = pair::<1>();
    a.send(1, numbered(0)).expect("send");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got == 0 && Instant::now() < deadline {
        a.advance(&mut |_| {}).expect("advance");
        b.advance(&mut |_| got += 1).expect("advance");
    }
    assert_eq!(got, 1, "the endpoint is up");
    // Node 1 goes away without a word: its worker and sockets are destroyed.
    drop(b);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(20);
    let err = loop {
        assert!(Instant::now() < deadline, "no PeerDead within 20 s");
        let r = a
            .send(1, numbered(2))
            .and_then(|()| a.advance(&mut |_| {}).map(drop));
        match r {
            Ok(()) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break e,
        }
    };
    match &err {
        MachineError::PeerDead {
            node: 1, reason, ..
        } => {
            assert!(
                reason.contains("UCX") || reason.contains("failed"),
                "{reason}"
            )
        }
        e => panic!("not PeerDead for node 1: {e}"),
    }
    eprintln!("found dead in {:?}: {err}", t0.elapsed());
    // Reported once; a later send to it is refused again, naming it.
    assert!(matches!(
        a.send(1, numbered(3)),
        Err(MachineError::PeerDead { node: 1, .. })
    ));
    drop(a);
    end(job);
}
