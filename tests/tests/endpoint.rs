//! Open jobs (converse-endpoint) on whole jobs: a plain process (this test) and another job
//! connect to a job's address with its secret, call and send by handler name; strangers and
//! wrong secrets are refused without harm; memory stays bounded toward a peer that does not
//! read and from one the PE cannot keep up with; a producer job streams to a consumer job on
//! other hosts, the consumer killed and restarted mid-stream, every item exactly once. The
//! same over `udp://` (module `udp` at the end): calls and 1 MiB messages, a job to a job,
//! strangers and a wrong secret, a peer killed mid-stream, random loss.

use converse_endpoint::{Connection, EndpointError, Secret};
use converse_tests::netns::Hosts;
use converse_tests::{Launcher, Running};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");
const T: Duration = Duration::from_secs(20);

/// An example of converse-endpoint (built by `cargo test --workspace`, or
/// `cargo build --release -p converse-endpoint --examples`).
fn example(name: &str) -> String {
    let p = Path::new(PROGRAM).with_file_name("examples").join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --release -p converse-endpoint --examples`",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cvep-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Wait for a file the job writes (its address), and read it.
fn wait_file(p: &Path, job: &Running) -> String {
    let end = Instant::now() + T;
    loop {
        if let Ok(s) = std::fs::read_to_string(p) {
            return s.trim().to_string();
        }
        assert!(
            Instant::now() < end,
            "{} never came:\n{}\n{}",
            p.display(),
            job.stdout_so_far(),
            job.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An echo job on `pes` PEs via `l`, with its address and secret.
fn echo_job(l: &Launcher, pes: usize, d: &Path) -> (Running, String, Secret) {
    echo_job_at(l, pes, d, "tcp://:0")
}

/// An echo job listening on `listen`.
fn echo_job_at(l: &Launcher, pes: usize, d: &Path, listen: &str) -> (Running, String, Secret) {
    let (s, a) = (d.join("secret"), d.join("addr"));
    // A job before this one may have left them.
    let _ = std::fs::remove_file(&s);
    let _ = std::fs::remove_file(&a);
    let (s, a) = (s.to_string_lossy(), a.to_string_lossy());
    let mut job = Running::start(
        &mut l.command(
            &example("echo"),
            pes,
            &["--secret-file", &s, "--addr-file", &a, "--listen", listen],
        ),
        Duration::from_secs(120),
    )
    .expect("start");
    let addr = wait_file(Path::new(a.as_ref()), &job);
    let secret = Secret::read_file(Path::new(s.as_ref())).expect("the secret");
    assert!(job.wait_for_stdout_lines("listening at ", 1, T));
    (job, addr, secret)
}

fn charmrun(machine: &'static str) -> Launcher {
    Launcher::Charmrun {
        machine,
        opts: vec![],
    }
}

#[test]
fn a_plain_process_calls_and_sends_by_name_and_leaving_is_an_event() {
    let d = dir("plain");
    let si_name = format!("si://plain-{}", std::process::id());
    // udp:// on loopback (32 KiB datagrams) and on the host's own address (1,200-byte ones):
    // 5 MiB calls are fragmented into many.
    for (l, pes, listen) in [
        (charmrun("tcp"), 3, "tcp://:0"),
        (charmrun("si").with_ppn(2), 4, si_name.as_str()),
        (Launcher::Direct { machine: "local" }, 2, "si://"),
        (charmrun("tcp"), 3, "udp://127.0.0.1:0"),
        (charmrun("tcp"), 3, "udp://:0"),
    ] {
        let (mut job, addr, secret) = echo_job_at(&l, pes, &d, listen);
        if listen.starts_with("si://") {
            assert!(addr.starts_with("si://") && addr.len() > 5, "{addr}");
        }
        let mut c = Connection::connect(&addr, &secret).expect("connect");
        // Sent from the job's Joined event, so first.
        let w = c.recv(Some(T)).expect("welcome").expect("in time");
        assert_eq!(
            (w.handler.as_str(), &w.data[..]),
            ("welcome", &b"you are peer 0"[..])
        );
        assert_eq!(
            c.call("info", b"", T).expect("info"),
            format!(
                "pes={pes} layer={}",
                if pes == 2 {
                    "local"
                } else if pes == 3 {
                    "tcp"
                } else {
                    "si"
                }
            )
            .into_bytes(),
            "{l:?}"
        );
        for size in [0usize, 1, 1000, 1 << 20, 5 << 20] {
            let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            assert_eq!(
                c.call("echo", &data, T).expect("echo"),
                data,
                "{size} via {l:?}"
            );
            assert_eq!(
                c.call("around", &data, T).expect("around"),
                data,
                "around {size}"
            );
        }
        match c.call("nothing-here", b"x", T) {
            Err(EndpointError::NoHandler { name, .. }) => assert_eq!(name, "nothing-here"),
            other => panic!("a call to no handler: {other:?}"),
        }
        // Leaving is an event for the job, which goes on; a second client is a new peer.
        drop(c);
        assert!(
            job.wait_for_stdout_lines("left peer 0", 1, T),
            "{}",
            job.stdout_so_far()
        );
        let mut c = Connection::connect(&addr, &secret).expect("connect again");
        assert_eq!(c.call("echo", b"again", T).expect("echo"), b"again");
        assert!(job.wait_for_stdout_lines("joined peer 1 from", 1, T));
        c.send("quit", b"").expect("quit");
        let o = job.finish();
        assert_eq!(o.code, Some(0), "{l:?}:\n{o}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_job_connects_to_a_job() {
    for listen in ["tcp://:0", "si://", "udp://127.0.0.1:0"] {
        job_to_job(listen);
    }
}

fn job_to_job(listen: &str) {
    let d = dir("jobs");
    let (job, addr, _) = echo_job_at(&charmrun("tcp"), 2, &d, listen);
    let secret = d.join("secret");
    let other = charmrun("si").run(
        &example("echo"),
        2,
        &[
            "--connect",
            &addr,
            "--secret-file",
            &secret.to_string_lossy(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(other.code, Some(0), "{other}");
    assert_eq!(
        other.lines_with("the other job says pes=2 layer=tcp"),
        1,
        "{other}"
    );
    assert_eq!(
        other.lines_with("echoed: hello from another job"),
        1,
        "{other}"
    );
    assert_eq!(other.lines_with("20 echoes of 1 MiB"), 1, "{other}");
    let mut c =
        Connection::connect(&addr, &Secret::read_file(&secret).expect("secret")).expect("connect");
    c.send("quit", b"").expect("quit");
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("left peer 0"), 1, "{o}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn strangers_and_wrong_secrets_are_refused_and_the_job_goes_on() {
    let d = dir("strangers");
    let (mut job, addr, secret) = echo_job(&charmrun("tcp"), 2, &d);
    let mut good = Connection::connect(&addr, &secret).expect("connect");
    let hostport = addr.trim_start_matches("tcp://").to_string();
    // A wrong secret: refused, saying so.
    match Connection::connect(&addr, &Secret::generate().expect("random")) {
        Err(EndpointError::Refused { why, .. }) => assert_eq!(why, "wrong secret"),
        other => panic!("a wrong secret: {other:?}"),
    }
    // Its line first (one a second at most: the strangers' would hide it).
    assert!(
        job.wait_for_stderr("wrong secret", T),
        "{}",
        job.stderr_so_far()
    );
    // Garbage, an HTTP request, half a handshake, and 200 who say nothing at all — while the
    // established client keeps calling.
    let mut junk = Vec::new();
    for payload in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        &[0xff; 4096],
        b"CVEP\x01short",
    ] {
        let mut s = TcpStream::connect(&hostport).expect("connect");
        let _ = s.write_all(payload);
        junk.push(s);
    }
    let silent: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(&hostport).ok())
        .collect();
    for i in 0..200u32 {
        let d = i.to_le_bytes();
        assert_eq!(
            good.call("echo", &d, T).expect("a call during the flood"),
            d
        );
    }
    // The junk got the hello and was closed (not left hanging).
    for mut s in junk {
        s.set_read_timeout(Some(T)).expect("timeout");
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        assert!(all.starts_with(b"CVEP"), "{all:?}");
    }
    drop(silent);
    // After the strangers, a new client is accepted as ever.
    let mut again = Connection::connect(&addr, &secret).expect("connect after the strangers");
    assert_eq!(again.call("echo", b"ok", T).expect("echo"), b"ok");
    good.send("quit", b"").expect("quit");
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
    assert!(o.stderr.contains("refused a connection from"), "{o}");
    assert!(o.stderr.contains("wrong secret"), "{o}");
    // At most one line a second about strangers.
    assert!(
        o.stderr.lines().filter(|l| l.contains("refused")).count() <= 30,
        "{o}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// What a job sent before it ended reaches a peer that was not reading then: the job queues
/// 6 MiB for this client (more than the sockets hold), ends at once, and the client reads only
/// afterwards — every blob arrives, then the end of the connection; over tcp:// (also with
/// the client still sending after the end) and udp://.
#[test]
fn what_a_job_sent_before_it_ended_reaches_a_peer_reading_late() {
    for (tag, l, listen, talk) in [
        (
            "late-local",
            Launcher::Direct { machine: "local" },
            "tcp://:0",
            false,
        ),
        ("late-tcp", charmrun("tcp"), "tcp://:0", false),
        // The client goes on sending after the job ended: unread input must not reset
        // the connection (which would drop what the peer has not acknowledged yet).
        ("late-talking", charmrun("tcp"), "tcp://:0", true),
        ("late-udp", charmrun("tcp"), "udp://127.0.0.1:0", false),
    ] {
        let d = dir(tag);
        let (job, addr, secret) = echo_job_at(&l, 2, &d, listen);
        let mut c = Connection::connect(&addr, &secret).expect("connect");
        let mut ask = 6u64.to_le_bytes().to_vec();
        ask.extend((1u32 << 20).to_le_bytes());
        c.send("flood", &ask).expect("flood");
        c.send("quit", b"").expect("quit");
        if talk {
            std::thread::sleep(Duration::from_millis(100));
            c.send("echo", &[7u8; 64 << 10])
                .expect("an echo after the end");
        }
        // The job's PE is gone by now; its I/O thread still holds what did not fit.
        std::thread::sleep(Duration::from_millis(300));
        let mut blobs = 0;
        let end = loop {
            match c.recv(Some(T)) {
                Ok(Some(m)) => match m.handler.as_str() {
                    "blob" => {
                        assert_eq!(m.data.len(), 1 << 20, "{tag}");
                        blobs += 1;
                    }
                    "flooded" | "welcome" => {}
                    h => panic!("{tag}: unexpected {h}"),
                },
                other => break format!("{other:?}"),
            }
        };
        assert_eq!(blobs, 6, "{tag}: {blobs} of 6 blobs, then {end}");
        let o = job.finish();
        assert_eq!(o.code, Some(0), "{tag}: {o}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn memory_stays_bounded_toward_a_peer_that_does_not_read_and_from_one_too_fast() {
    let d = dir("bounded");
    // One process (the local layer), so its memory is the job's.
    let (job, addr, secret) = echo_job(&Launcher::Direct { machine: "local" }, 2, &d);
    let mut c = Connection::connect(&addr, &secret).expect("connect");
    let base = rss_kib(job.pid());
    // 2,000 blobs of 256 KiB (500 MiB) asked for, none read for a while.
    let mut ask = 2000u64.to_le_bytes().to_vec();
    ask.extend((256u32 << 10).to_le_bytes());
    c.send("flood", &ask).expect("flood");
    std::thread::sleep(Duration::from_secs(2));
    let stalled = rss_kib(job.pid());
    // Then read them all: every one arrives, and the job said it was refused on the way.
    let mut blobs = 0;
    let refused = loop {
        let m = c.recv(Some(T)).expect("recv").expect("in time");
        match m.handler.as_str() {
            "blob" => {
                assert_eq!(m.data.len(), 256 << 10);
                blobs += 1;
            }
            "flooded" => break u64::from_le_bytes(m.data.try_into().expect("u64")),
            "welcome" => {}
            h => panic!("unexpected {h}"),
        }
    };
    assert_eq!(blobs, 2000);
    assert!(refused > 0, "the flood was never refused");
    // The other way: the PE busy for 3 s while this side sends 400 MiB at it.
    c.send("hold", &3000u32.to_le_bytes()).expect("hold");
    let (addr2, secret2) = (addr.clone(), secret.clone());
    let sender = std::thread::spawn(move || {
        let mut c = Connection::connect(&addr2, &secret2).expect("connect");
        let blob = vec![1u8; 1 << 20];
        for _ in 0..400 {
            c.send("echo-not", &blob).expect("send");
        }
        c
    });
    std::thread::sleep(Duration::from_secs(2));
    let busy = rss_kib(job.pid());
    let mut c2 = sender.join().expect("sender");
    let _ = c2.call("echo", b"", T);
    // A peer that calls and never reads its replies: the job drops it once 4 x 8 MiB of its
    // replies wait, and its memory stays bounded.
    let (addr3, secret3) = (addr.clone(), secret.clone());
    let caller = std::thread::spawn(move || {
        let mut c = Connection::connect(&addr3, &secret3).expect("connect");
        let blob = vec![2u8; 256 << 10];
        let mut sent = 0;
        // 1,000 calls of 256 KiB (250 MiB of replies), none read: the job ends it first.
        while sent < 1000 && c.start_call("echo", &blob).is_ok() {
            sent += 1;
        }
        sent
    });
    let mut job = job;
    assert!(
        job.wait_for_stdout_lines("it does not read its replies", 1, T),
        "{}",
        job.stdout_so_far()
    );
    let replies = rss_kib(job.pid());
    let _ = caller.join();
    c.send("quit", b"").expect("quit");
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
    eprintln!("RSS: {base} KiB at start, {stalled} KiB toward a stalled reader, {busy} KiB from a fast sender, {replies} KiB toward a caller not reading");
    // 400 messages to no handler: said once.
    assert_eq!(
        o.stderr
            .lines()
            .filter(|l| l.contains("no handler 'echo-not'"))
            .count(),
        1,
        "{o}"
    );
    // Without bounds the job would hold hundreds of MiB in each case.
    assert!(
        stalled < base + 96 * 1024 && busy < base + 96 * 1024 && replies < base + 96 * 1024,
        "RSS from {base} KiB: {stalled} KiB toward a stalled reader, {busy} KiB from a fast \
         sender, {replies} KiB toward a caller that does not read its replies"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn address_errors_are_one_line_naming_the_address_and_what_is_available() {
    let secret = Secret::generate().expect("random");
    // Nothing listens on a port just closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let closed = format!("tcp://127.0.0.1:{port}");
    for (addr, needle) in [
        (closed.as_str(), "unreachable"),
        ("mpi+dynamic://port", "not offered"),
        ("udp://127.0.0.1", "udp://HOST:PORT"),
        ("si://nobody-listens-here", "nothing listens on that name"),
        ("si://", "names its listener"),
        ("si://a b", "an si name is"),
        ("ofi+verbs://x", "ofi layer is not compiled"),
        ("tcpp://h:1", "did you mean tcp"),
        ("tcp://no-such-host.invalid:5", "does not resolve"),
    ] {
        let e = Connection::connect(addr, &secret)
            .expect_err(addr)
            .to_string();
        assert!(e.contains(addr) && e.contains(needle), "{addr}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // Something that is not an endpoint.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let at = format!("tcp://{}", l.local_addr().expect("addr"));
    let t = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n");
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let e = Connection::connect(&at, &secret)
        .expect_err("not an endpoint")
        .to_string();
    assert!(e.contains("not a converse endpoint"), "{e}");
    let _ = t.join();
    // A job asked to listen on a scheme it does not have refuses its arguments.
    let d = dir("badlisten");
    let o = Launcher::Direct { machine: "local" }.run(
        &example("echo"),
        1,
        &[
            "--secret-file",
            &d.join("s").to_string_lossy(),
            "--listen",
            "mpi+dynamic://port",
        ],
        T,
    );
    assert_eq!(o.code, Some(2), "{o}");
    assert_eq!(
        o.stderr
            .lines()
            .filter(|l| l.contains("mpi+dynamic://port"))
            .count(),
        1,
        "{o}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// The lines of a consumer's output: item `i` is line `i`, made by PE `i % pes`.
fn check_stream(out: &Path, items: u64, pes: u64) {
    let text = std::fs::read_to_string(out).expect("the consumer's output");
    let mut n = 0u64;
    for (i, line) in text.lines().enumerate() {
        let want = format!("{i} item {i} from PE {} ", i as u64 % pes);
        assert!(
            line.starts_with(&want),
            "line {i}: {}",
            &line[..line.len().min(60)]
        );
        assert_eq!(line.len(), format!("{i} ").len() + 300, "line {i}'s length");
        n += 1;
    }
    assert_eq!(n, items, "items in the output");
}

/// Two jobs started apart on other hosts: a producer on hosts 0 and 1, a consumer on host 2;
/// the consumer is killed mid-stream (SIGKILL, the whole job) and started again; every item
/// is in its output once, in order.
#[test]
fn a_consumer_job_restarted_mid_stream_gets_every_item_once() {
    let Some(hosts) = Hosts::new("ep", 3) else {
        return;
    };
    let items = 300_000u64;
    let d = &hosts.dir;
    let (secret, addr, out) = (d.join("secret"), d.join("addr"), d.join("out"));
    let machines = hosts.machines("machines", 0..2);
    let mut prod = hosts.on_host0(&converse_tests::charmrun_path(PROGRAM));
    prod.args(["+p2", "++nodelist"])
        .arg(&machines)
        .arg("++remote-shell")
        .arg(hosts.shell())
        .arg(example("producer"))
        .args(["--items", &items.to_string(), "--size", "300", "--listen"])
        .arg(format!("tcp://{}:0", Hosts::addr(0)))
        .arg("--secret-file")
        .arg(&secret)
        .arg("--addr-file")
        .arg(&addr)
        .args(["+machine", "tcp"]);
    let producer = Running::start(&mut prod, Duration::from_secs(150)).expect("producer");
    let consumer = |hosts: &Hosts| {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &hosts.host_ns(2)])
            .arg(converse_tests::charmrun_path(PROGRAM))
            .args(["+p2", "++local"])
            .arg(example("consumer"))
            .arg("--out")
            .arg(&out)
            .arg("--secret-file")
            .arg(&secret)
            .arg("--addr-file")
            .arg(&addr)
            .args(["+machine", "tcp"]);
        c
    };
    let first = Running::start(&mut consumer(&hosts), Duration::from_secs(60)).expect("consumer");
    // Killed once it has written some, before the end.
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) / 310;
        if lines > items / 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            Instant::now() < end && !first.stdout_so_far().contains("all "),
            "the consumer wrote too little:\n{}\n{}",
            first.stdout_so_far(),
            producer.stdout_so_far()
        );
    }
    converse_tests::kill_tree(first.pid());
    let killed = first.finish();
    assert_ne!(
        killed.code,
        Some(0),
        "the consumer ended before it was killed:\n{killed}"
    );
    let again = converse_tests::run_bounded(&mut consumer(&hosts), Duration::from_secs(120));
    assert_eq!(again.code, Some(0), "{again}");
    let p = producer.finish();
    assert_eq!(p.code, Some(0), "{p}");
    assert_eq!(p.lines_with("the consumer left"), 1, "{p}");
    assert_eq!(
        p.lines_with(&format!("all {items} items acknowledged")),
        1,
        "{p}"
    );
    check_stream(&out, items, 2);
}

/// A job run inside a larger program (here, this test) leaves no listener or connection open
/// once it has ended: the PE's thread ending ends its I/O thread.
#[test]
fn a_job_that_ends_inside_a_program_closes_its_listeners_and_connections() {
    let secret = Secret::generate().expect("random");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let s2 = secret.clone();
    let job = std::thread::spawn(move || {
        let rt = converse::Runtime::from_args(["inner", "+p1", "+machine", "local", "+quiet"])
            .expect("args");
        rt.run(move |pe| {
            let ep = converse_endpoint::Endpoints::attach(pe);
            let at = ep.listen(pe, "tcp://127.0.0.1:0", &s2).expect("listen");
            ep.on("quit", |pe, _m| pe.exit(0));
            let _ = tx.send(at);
        })
        .expect("run")
    });
    let addr = rx.recv_timeout(T).expect("the job listens");
    let mut c = Connection::connect(&addr, &secret).expect("connect");
    c.send("quit", b"").expect("quit");
    assert_eq!(job.join().expect("the job's thread"), 0);
    // The connection ends, and nothing listens there any more.
    match c.recv(Some(T)) {
        Err(EndpointError::Closed { .. }) => {}
        other => panic!("after the job: {other:?}"),
    }
    let end = Instant::now() + T;
    while Connection::connect(&addr, &secret).is_ok() {
        assert!(
            Instant::now() < end,
            "{addr} still listens after its job ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A burst of clients from one host, more than the listener's handshake slots (32, 8 per
/// host): each waits its turn, none is refused.
#[test]
fn a_burst_of_clients_is_served_in_turn_not_refused() {
    let d = dir("burst");
    let (job, addr, secret) = echo_job(&charmrun("tcp"), 2, &d);
    let clients: Vec<_> = (0..80u32)
        .map(|i| {
            let (addr, secret) = (addr.clone(), secret.clone());
            std::thread::spawn(move || {
                let mut c =
                    Connection::connect(&addr, &secret).map_err(|e| format!("client {i}: {e}"))?;
                let back = c
                    .call("echo", &i.to_le_bytes(), T)
                    .map_err(|e| format!("client {i}: {e}"))?;
                if back != i.to_le_bytes() {
                    return Err(format!("client {i}: a wrong echo"));
                }
                Ok(c)
            })
        })
        .collect();
    let mut kept = Vec::new();
    for c in clients {
        kept.push(c.join().expect("a client thread").expect("served"));
    }
    kept[0].send("quit", b"").expect("quit");
    let o = job.finish();
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(o.lines_with("joined peer"), 80, "{o}");
    assert!(!o.stderr.contains("refused"), "{o}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `udp://`: the same job and clients as above over the crate's reliable stream on UDP.
mod udp {
    use super::{charmrun, dir, echo_job_at, example, wait_file, PROGRAM, T};
    use converse_endpoint::{Connection, EndpointError, Secret};
    use converse_tests::Running;
    use std::net::UdpSocket;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// A wrong secret is refused; junk datagrams, and 100 sockets that send an `OPEN` and
    /// say nothing more (not even its cookie back), cost an established client nothing; the
    /// job goes on.
    #[test]
    fn strangers_and_a_wrong_secret_are_refused_over_udp() {
        let d = dir("udp-strangers");
        let (mut job, addr, secret) = echo_job_at(&charmrun("tcp"), 2, &d, "udp://127.0.0.1:0");
        let mut good = Connection::connect(&addr, &secret).expect("connect");
        match Connection::connect(&addr, &Secret::generate().expect("random")) {
            Err(EndpointError::Refused { why, .. }) => assert_eq!(why, "wrong secret"),
            other => panic!("a wrong secret: {other:?}"),
        }
        assert!(
            job.wait_for_stderr("wrong secret", T),
            "{}",
            job.stderr_so_far()
        );
        let target = addr.trim_start_matches("udp://").to_string();
        let mut open = open_datagram();
        let strangers: Vec<UdpSocket> = (0..100u64)
            .filter_map(|i| {
                let s = UdpSocket::bind("127.0.0.1:0").ok()?;
                open[6..14].copy_from_slice(&(i + 1).to_le_bytes());
                for junk in [&b"GET / HTTP/1.0\r\n\r\n"[..], &[0xff; 2000], &open] {
                    let _ = s.send_to(junk, &target);
                }
                Some(s)
            })
            .collect();
        for i in 0..200u32 {
            let b = i.to_le_bytes();
            assert_eq!(good.call("echo", &b, T).expect("a call among strangers"), b);
        }
        drop(strangers);
        let mut again = Connection::connect(&addr, &secret).expect("connect after them");
        assert_eq!(again.call("echo", b"ok", T).expect("echo"), b"ok");
        good.send("quit", b"").expect("quit");
        let o = job.finish();
        assert_eq!(o.code, Some(0), "{o}");
        assert!(o.stderr.contains("wrong secret"), "{o}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// An `OPEN` of the crate's protocol (session.rs tabulates it) with connection id 0 and
    /// no cookie: what a stranger can send without hearing back.
    fn open_datagram() -> [u8; 34] {
        let mut open = [0u8; 34];
        open[..4].copy_from_slice(b"CVEU");
        open[4] = 1; // OPEN
        open[5] = 2; // the version
        open
    }

    /// A flood of `OPEN`s from 500 source sockets that never answer (as from forged
    /// addresses: they never see the listener's cookie) leaves the listener's half-open
    /// slots free: a real client connects at once while they keep coming, and the job goes
    /// on, having seen none of them.
    #[test]
    fn a_flood_of_opens_from_many_sources_does_not_keep_a_client_out() {
        let d = dir("udp-flood");
        let (job, addr, secret) = echo_job_at(&charmrun("tcp"), 2, &d, "udp://127.0.0.1:0");
        let target = addr.trim_start_matches("udp://").to_string();
        let flooders: Vec<UdpSocket> = (0..500)
            .filter_map(|_| UdpSocket::bind("127.0.0.1:0").ok())
            .collect();
        assert!(flooders.len() >= 400, "only {} sockets", flooders.len());
        let flood = |round: u64| {
            let mut open = open_datagram();
            for (i, s) in flooders.iter().enumerate() {
                open[6..14].copy_from_slice(&((round << 32) | (i as u64 + 1)).to_le_bytes());
                let _ = s.send_to(&open, &target);
            }
        };
        // Before: every half-open slot (32, and the 8 of this host) would be taken.
        flood(1);
        flood(2);
        let t0 = Instant::now();
        let mut c = Connection::connect(&addr, &secret).expect("connect amid the flood");
        let took = t0.elapsed();
        // The handshake's own round trips on a loaded machine; a slot freed by a timeout
        // would take seconds (HALF_OPEN, the handshake's deadline).
        assert!(took < Duration::from_secs(1), "connecting took {took:?}");
        // While the flood goes on, calls and a second client.
        for i in 0..50u32 {
            flood(3 + u64::from(i));
            let b = i.to_le_bytes();
            assert_eq!(c.call("echo", &b, T).expect("a call amid the flood"), b);
        }
        let t1 = Instant::now();
        let mut again = Connection::connect(&addr, &secret).expect("a second client");
        assert!(t1.elapsed() < Duration::from_secs(1), "{:?}", t1.elapsed());
        assert_eq!(again.call("echo", b"ok", T).expect("echo"), b"ok");
        drop(flooders);
        c.send("quit", b"").expect("quit");
        let o = job.finish();
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("joined peer"), 2, "{o}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Nothing listens on a UDP port: the connect says so at once (the port unreachable).
    #[test]
    fn connecting_where_nothing_listens_is_unreachable() {
        let port = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("port")
            .port();
        let addr = format!("udp://127.0.0.1:{port}");
        let t0 = Instant::now();
        let e = Connection::connect(&addr, &Secret::generate().expect("random"))
            .expect_err("nothing listens")
            .to_string();
        assert!(e.contains(&addr) && e.contains("unreachable"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{e}");
    }

    /// A child process of this test, killed when dropped.
    struct Helper(Child);

    impl Drop for Helper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Not a test of its own: run in a process of its own by
    /// `a_peer_killed_mid_stream_is_an_event_over_udp`, which kills it mid-stream.
    #[test]
    #[ignore = "a helper, run by another test in a process of its own"]
    fn udp_helper_streams_until_killed() {
        let (Ok(addr), Ok(secret)) = (
            std::env::var("CVEP_UDP_ADDR"),
            std::env::var("CVEP_UDP_SECRET"),
        ) else {
            return;
        };
        let secret = Secret::parse(&secret).expect("secret");
        let mut c = Connection::connect(&addr, &secret).expect("connect");
        let blob = vec![3u8; 1 << 20];
        for _ in 0..100_000 {
            c.send("echo-not", &blob).expect("send");
            let _ = c.call("echo", &blob, T).expect("echo");
        }
    }

    /// A plain process killed (SIGKILL) while 1 MiB messages flow both ways: the job hears
    /// nothing more from it, and after the session's 10 s of silence it is a Left event; the
    /// job serves others meanwhile and after.
    #[test]
    fn a_peer_killed_mid_stream_is_an_event_over_udp() {
        let d = dir("udp-killed");
        let (mut job, addr, secret) = echo_job_at(&charmrun("tcp"), 2, &d, "udp://127.0.0.1:0");
        let mut first = Connection::connect(&addr, &secret).expect("connect");
        let helper = Helper(
            Command::new(std::env::current_exe().expect("this test"))
                .args([
                    "--ignored",
                    "--exact",
                    "udp::udp_helper_streams_until_killed",
                    "--nocapture",
                ])
                .env("CVEP_UDP_ADDR", &addr)
                .env("CVEP_UDP_SECRET", secret.to_hex())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the helper"),
        );
        assert!(
            job.wait_for_stdout_lines("joined peer 1", 1, T),
            "{}",
            job.stdout_so_far()
        );
        // Mid-stream: a second of 1 MiB messages and calls.
        std::thread::sleep(Duration::from_secs(1));
        let killed = Instant::now();
        drop(helper);
        assert!(
            job.wait_for_stdout_lines("left peer 1: it sent nothing for 10 s", 1, T),
            "{}",
            job.stdout_so_far()
        );
        let took = killed.elapsed();
        assert!(
            took < Duration::from_secs(15),
            "the Left came after {took:?}"
        );
        assert_eq!(
            first.call("echo", b"still here", T).expect("echo"),
            b"still here"
        );
        first.send("quit", b"").expect("quit");
        let o = job.finish();
        assert_eq!(o.code, Some(0), "{o}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Inside a network namespace that drops 5% of UDP datagrams at random: a plain process
    /// and the job exchange calls of up to 4 MiB intact, and another job connects.
    #[test]
    fn calls_survive_random_loss_over_udp() {
        let Some(net) = converse_tests::netns::Lossy::new(5) else {
            return;
        };
        let d = dir("udp-loss");
        let (s, a) = (d.join("secret"), d.join("addr"));
        let mut cmd = net.command(&converse_tests::charmrun_path(PROGRAM));
        cmd.args(["+p2", &example("echo"), "--secret-file"])
            .arg(&s)
            .arg("--addr-file")
            .arg(&a)
            .args(["--listen", "udp://127.0.0.1:0", "+machine", "tcp"]);
        let mut job = Running::start(&mut cmd, Duration::from_secs(150)).expect("start");
        let addr = wait_file(&a, &job);
        let secret = Secret::read_file(&s).expect("secret");
        assert!(job.wait_for_stdout_lines("listening at ", 1, T));
        // This test's process is outside the namespace: its clients run there (another job,
        // then this test's binary as a plain process).
        let mut other = net.command(&converse_tests::charmrun_path(PROGRAM));
        other
            .args(["+p2", &example("echo"), "--connect", &addr, "--secret-file"])
            .arg(&s)
            .args(["+machine", "tcp"]);
        let o = converse_tests::run_bounded(&mut other, Duration::from_secs(120));
        assert_eq!(o.code, Some(0), "{o}");
        assert_eq!(o.lines_with("20 echoes of 1 MiB"), 1, "{o}");
        let mut quit = net.command(&std::env::current_exe().expect("this test"));
        quit.args([
            "--ignored",
            "--exact",
            "udp::udp_helper_calls_then_quits",
            "--nocapture",
        ])
        .env("CVEP_UDP_ADDR", &addr)
        .env("CVEP_UDP_SECRET", secret.to_hex());
        let q = converse_tests::run_bounded(&mut quit, Duration::from_secs(120));
        assert_eq!(q.code, Some(0), "{q}");
        // The loss was real and the stream mended it (the echoes came back intact, which
        // the helper checked): its connection sent data again.
        let retransmits: u64 = q
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("udp retransmits "))
            .and_then(|n| n.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no counters from the helper: {q}"));
        assert!(retransmits > 0, "no retransmission under 5% loss: {q}");
        let o = job.finish();
        assert_eq!(o.code, Some(0), "{o}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Not a test of its own: run inside the lossy namespace by
    /// `calls_survive_random_loss_over_udp`: calls of every size to 4 MiB, each checked
    /// byte for byte, then `quit`, then the connection's counters on a line.
    #[test]
    #[ignore = "a helper, run by another test in a network namespace"]
    fn udp_helper_calls_then_quits() {
        let (Ok(addr), Ok(secret)) = (
            std::env::var("CVEP_UDP_ADDR"),
            std::env::var("CVEP_UDP_SECRET"),
        ) else {
            return;
        };
        let secret = Secret::parse(&secret).expect("secret");
        let mut c = Connection::connect(&addr, &secret).expect("connect");
        for size in [0usize, 1, 1000, 100_000, 1 << 20, 4 << 20] {
            let data: Vec<u8> = (0..size).map(|i| (i * 13 % 251) as u8).collect();
            assert_eq!(c.call("echo", &data, T).expect("echo"), data, "{size}");
        }
        c.send("quit", b"").expect("quit");
        let st = c.udp_stats().expect("a udp:// connection has counters");
        converse::input::out_line(&format!(
            "udp retransmits {} timeouts {} duplicates {} early {}",
            st.retransmits, st.timeouts, st.duplicates, st.early
        ));
    }
}
