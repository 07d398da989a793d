//! `Transport::in_transfer` on the SI layer: two nodes in this process (charmrun's embedded
//! launcher), driven by hand from one thread, so that a message can be caught part-way.

use charmrun::launch::{start_embedded, Embedded, NodeStart};
use converse_machine::{BootConfig, Machine, Message};
use std::time::{Duration, Instant};

/// Two SI nodes with `settings`, booted (each boot waits for the other) on threads of their
/// own, and the launcher that started them.
fn two_nodes(settings: &[(&str, &str)]) -> (Embedded, Box<dyn Machine>, Box<dyn Machine>) {
    let mut opts = charmrun::opts::Opts::with_pes(2);
    opts.timeout = Duration::from_secs(60);
    let job = start_embedded(opts, vec![NodeStart::InProcess, NodeStart::InProcess])
        .expect("the embedded launcher starts");
    let envs = job.envs().to_vec();
    let mut nodes: Vec<Box<dyn Machine>> = std::thread::scope(|s| {
        let booting: Vec<_> = envs
            .iter()
            .map(|env| {
                s.spawn(move || {
                    let mut cfg = BootConfig {
                        launch: Some(env.clone()),
                        ..BootConfig::new(2)
                    };
                    for (k, v) in settings {
                        cfg.settings.set(*k, *v);
                    }
                    let mut ms = converse_si::layer::boot(&cfg).expect("boot");
                    ms.pop().expect("one node")
                })
            })
            .collect();
        booting
            .into_iter()
            .map(|h| h.join().expect("boot thread"))
            .collect()
    });
    let b = nodes.pop().expect("node 1");
    let a = nodes.pop().expect("node 0");
    assert_eq!((a.my_node(), b.my_node()), (0, 1));
    (job, a, b)
}

/// Advance both nodes until `b` has handed up one message (its length), 10 s at most.
fn pump_one(a: &mut dyn Machine, b: &mut dyn Machine) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while got.is_none() {
        assert!(Instant::now() < deadline, "the message never arrived");
        a.advance(&mut |_| panic!("nothing goes to node 0"))
            .expect("advance 0");
        b.advance(&mut |m| got = Some(m.payload_len()))
            .expect("advance 1");
    }
    // The sender frees what was pulled (a lent message) in its next advance.
    a.advance(&mut |_| panic!("nothing goes to node 0"))
        .expect("advance 0");
    got.unwrap_or(0)
}

/// Both nodes meet in the exit barrier and leave; the launcher's verdict is 0.
fn finish(job: Embedded, a: Box<dyn Machine>, b: Box<dyn Machine>) {
    std::thread::scope(|s| {
        for mut m in [a, b] {
            s.spawn(move || {
                m.barrier(&mut |_| {}).expect("barrier");
                m.exit(0).expect("exit");
            });
        }
    });
    assert_eq!(job.wait(), 0, "the launcher's verdict");
}

#[test]
fn a_message_in_pieces_or_lent_is_in_transfer_until_it_is_through() {
    let (job, mut a, mut b) = two_nodes(&[("si.ring_kib", "16")]);
    assert!(!a.in_transfer() && !b.in_transfer(), "idle");

    // 200 KiB through a 16 KiB ring: pieces, most of them queued at the sender.
    let len = 200 << 10;
    a.send(1, Message::from_payload(&vec![7u8; len]))
        .expect("send");
    assert!(a.in_transfer(), "pieces wait for ring room");
    let mut n = 0;
    b.advance(&mut |_| n += 1).expect("advance 1");
    assert_eq!(n, 0, "only the first pieces are in");
    assert!(b.in_transfer(), "the receiver holds part of the message");
    assert_eq!(pump_one(&mut *a, &mut *b), len);
    assert!(!a.in_transfer() && !b.in_transfer(), "through");

    // 1 MiB: lent when this host lets the receiver read the sender's memory (else pieces
    // again); either way in transfer until the receiver has it and the sender knows.
    let len = 1 << 20;
    a.send(1, Message::from_payload(&vec![9u8; len]))
        .expect("send");
    assert!(a.in_transfer(), "lent and not pulled, or pieces queued");
    assert_eq!(pump_one(&mut *a, &mut *b), len);
    assert!(!a.in_transfer() && !b.in_transfer(), "through");

    // A small message goes whole into the ring: nothing is part-way.
    a.send(1, Message::from_payload(b"small")).expect("send");
    assert!(!a.in_transfer());
    assert_eq!(pump_one(&mut *a, &mut *b), 5);
    finish(job, a, b);
}
