//! Fuzz targets for every decoder of bytes that come from the network or from files.
//!
//! Each target is a function of arbitrary bytes that must never panic: it feeds them to one
//! decoder and, where the decoder accepts them, checks what its documentation promises (a
//! round trip through the matching encoder, lengths that agree). A broken promise panics, which
//! AFL records as a crash. The binaries in `src/bin/` wrap one target each in `afl::fuzz!`;
//! [`seeds`] makes each target's starting corpus from real encodings, so the fuzzer begins at
//! valid inputs instead of having to find magic numbers and job tags by itself.
//!
//! The targets live here, not in the binaries, so that a crashing input can be replayed under
//! a debugger or a plain test without AFL.

use charmrun::protocol::{self, Hello, SECRET_LEN};
use converse_machine::{Message, NodeInfo, NodeTable, ENVELOPE_LEN};
use converse_net::udp::wire;
use converse_tbon::{topology_file, Format, Packet};

/// Every target, by the name of its binary.
pub const TARGETS: &[&str] = &[
    "udp_wire",
    "tcp_frame",
    "charmrun_protocol",
    "node_table",
    "tbon_packet",
    "tbon_format",
    "topology_file",
    "nodelist",
];

/// The job secret the UDP seeds are tagged with (any fixed value: the fuzzer only needs
/// seeds that carry the tag it checks against).
const UDP_SECRET: [u8; 16] = *b"fuzz-job-secret!";

fn udp_expect() -> wire::Expect {
    wire::Expect {
        tag: wire::tag(&UDP_SECRET),
        me: 1,
        nodes: 4,
    }
}

/// A UDP datagram (machine-net/src/udp/wire.rs): [`wire::decode`], [`wire::decode_header`]
/// over the header part only, [`wire::fragment_of`] and [`wire::route`].
///
/// What `decode` accepts must be safe to act on, as it says: a fragment's body is exactly its
/// share of the message, an ACK's body is its SACK extension, and reading the header alone
/// gives the same answer as reading the whole datagram.
pub fn udp_wire(data: &[u8]) {
    let exp = udp_expect();
    let whole = wire::decode(data, &exp);
    let head = &data[..data.len().min(wire::MAX_DATA_HEADER)];
    let split = wire::decode_header(head, data.len(), &exp);
    let _ = wire::fragment_of(data);
    let _ = wire::route(data);
    match (&whole, &split) {
        (Ok(d), Ok((hdr, at))) => {
            assert_eq!(d.hdr, *hdr, "decode and decode_header disagree");
            assert_eq!(d.body.len(), data.len() - at, "body is not the rest");
            match d.hdr.kind {
                wire::Kind::Data => match d.hdr.frag {
                    Some(f) => {
                        let (off, len) = f.range();
                        assert!(u64::from(f.index) < f.count());
                        assert!(off + len <= f.total);
                        assert_eq!(len, d.body.len() as u64, "fragment length");
                        assert_eq!(
                            wire::fragment_of(data),
                            Some((d.hdr.src, d.hdr.seq, f.index))
                        );
                    }
                    None if d.bundle => {
                        // Entries of at least an envelope each, covering the body exactly.
                        let mut covered = 0;
                        let mut n = 0;
                        for e in wire::bundle_entries(d.body) {
                            assert!(e.len() >= ENVELOPE_LEN, "bundle entry without an envelope");
                            covered += wire::BUNDLE_ENTRY + e.len();
                            n += 1;
                        }
                        assert!(n >= 2 && covered == d.body.len(), "bundle not covered");
                    }
                    None => assert!(d.body.len() >= ENVELOPE_LEN, "data without an envelope"),
                },
                wire::Kind::Ack => assert!(d.body.len() <= wire::MAX_SACK_EXT),
                wire::Kind::Bye => assert!(d.body.is_empty()),
            }
            assert!(usize::from(d.hdr.src) < exp.nodes && d.hdr.dst == exp.me);
            assert_eq!(wire::route(data), Some((d.hdr.src, d.hdr.dst)));
            // The header written back is the header read (an ACK's length word follows it).
            let mut out = [0u8; wire::MAX_DATA_HEADER];
            d.hdr.write(&mut out);
            if d.bundle {
                // The flag is the layer's, written after the header.
                out[1] |= wire::FLAG_BUNDLE;
            }
            assert_eq!(
                &out[..d.hdr.size()],
                &data[..d.hdr.size()],
                "header round trip"
            );
        }
        // A bundle is checked whole: from its header alone it is refused.
        (Ok(d), Err(wire::Reject::Garbage)) if d.bundle && head.len() < data.len() => {}
        (Err(a), Err(b)) => assert_eq!(a, b, "decode and decode_header reject differently"),
        _ => panic!("decode {whole:?} but decode_header {split:?}"),
    }
}

/// TCP frames (machine-net/src/conn.rs). Its frame cutter is private to the connection and
/// reads from a socket, so this target cuts `[u32 length LE][wire bytes]` frames the same way
/// and gives each to what the connection gives them to: [`Message::from_wire`] (small frames)
/// and [`Message::from_frame`] (large ones, read in place behind their headroom), then reads
/// every envelope field and the payload as a handler would.
pub fn tcp_frame(data: &[u8]) {
    let mut rest = data;
    while let Some((len, after)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let take = len.min(after.len());
        let wire = &after[..take];
        let small = Message::from_wire(wire);
        // The headroom the layer reads in front of a large frame: the length's low byte picks
        // it, so odd offsets are tried too.
        let offset = len % 64;
        let mut frame = vec![0u8; offset];
        frame.extend_from_slice(wire);
        let big = Message::from_frame(frame, offset);
        assert_eq!(small.is_ok(), take >= ENVELOPE_LEN, "from_wire length rule");
        assert_eq!(big.is_ok(), take >= ENVELOPE_LEN, "from_frame length rule");
        for msg in [small, big].into_iter().flatten() {
            assert_eq!(msg.wire(), wire, "wire bytes moved");
            assert_eq!(msg.wire_len(), take);
            assert_eq!(msg.payload(), &wire[ENVELOPE_LEN..]);
            assert_eq!(msg.envelope(), &wire[..ENVELOPE_LEN]);
            let fields = (
                msg.handler(),
                msg.src_pe(),
                msg.dst_pe(),
                msg.priority(),
                msg.arg0(),
                msg.arg1(),
            );
            std::hint::black_box(fields);
            let (buf, head) = msg.into_frame();
            assert_eq!(&buf[head..], wire, "into_frame");
        }
        if len < ENVELOPE_LEN || take < len {
            // The connection refuses the first, and waits for more bytes for the second.
            break;
        }
        rest = &after[take..];
    }
}

/// Charmrun's control protocol (charmrun/src/protocol.rs): frames read from a stream, each
/// `HELLO` body decoded; a hex secret as a node reads it from its environment.
///
/// A decoded `HELLO` encodes back to the same bytes; a frame read comes from a length within
/// the limit it was read with.
pub fn charmrun_protocol(data: &[u8]) {
    let _ = Hello::decode(data);
    if let Some(h) = Hello::decode(data) {
        assert_eq!(h.encode(), data, "HELLO round trip");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = protocol::secret_from_hex(text);
    }
    agent_bodies(data);
    // A node not yet trusted is read with a small limit, a trusted one with the full one.
    for limit in [256, protocol::MAX_FRAME] {
        let mut r = data;
        while let Ok((kind, body)) = protocol::read_frame_limited(&mut r, limit) {
            assert!(body.len() < limit, "frame over its limit");
            let mut again = Vec::new();
            protocol::write_frame(&mut again, kind, &body).expect("write to a Vec");
            let (k2, b2) = protocol::read_frame(&mut again.as_slice()).expect("read back");
            assert_eq!((k2, &b2), (kind, &body), "frame round trip");
            if kind == protocol::Kind::Hello {
                let _ = Hello::decode(&body);
            }
            agent_bodies(&body);
        }
    }
}

/// What charmrun and its agents exchange beyond the nodes' frames (charmrun/src/agent/wire.rs):
/// an agent's introduction and plan encode back to the same bytes; a relayed frame's envelope
/// and a lost agent's report decode without panicking.
fn agent_bodies(data: &[u8]) {
    use charmrun::agent::wire::{self, AgentHello, Plan};
    if let Some(h) = AgentHello::decode(data) {
        assert_eq!(h.encode(), data, "AGENT round trip");
    }
    if let Some(p) = Plan::decode(data) {
        assert_eq!(p.encode(), data, "PLAN round trip");
        for a in &p.agents {
            let _ = p.of(a.agent);
        }
    }
    let _ = wire::unrelay(data);
    let _ = wire::unlost(data);
}

/// The node table (machine/src/node_table.rs) every layer exchanges at start-up:
/// [`NodeTable::decode`]; what it accepts encodes back to the same bytes and is a table whose
/// PE numbering adds up.
pub fn node_table(data: &[u8]) {
    let Ok(t) = NodeTable::decode(data) else {
        return;
    };
    assert_eq!(t.encode(), data, "node table round trip");
    assert!(t.num_nodes() > 0);
    let mut first = 0;
    for (i, n) in t.nodes().iter().enumerate() {
        assert_eq!(n.first_pe, first, "node {i} starts elsewhere");
        first += n.num_pes;
        assert_eq!(t.node(i), Some(n));
    }
    assert_eq!(t.num_pes(), first);
    if t.num_pes() > 0 {
        let last = t.num_pes() - 1;
        assert!(t.node_of(last) < t.num_nodes());
    }
}

/// An overlay packet (runtime/tbon/src/packet.rs, codec.rs): [`Packet::from_wire`], then
/// every element as a [`Value`](converse_tbon::Value).
///
/// A packet keeps the bytes it was made of; its elements, packed again with its format, are
/// its data bytes again.
pub fn tbon_packet(data: &[u8]) {
    let Ok(p) = Packet::from_wire(data) else {
        return;
    };
    assert_eq!(p.wire(), data, "a packet keeps its bytes");
    let f = p.format();
    assert_eq!(Format::parse(&p.format_string()).as_ref(), Ok(&f));
    assert!(p.has_format(&f));
    let values = p.values();
    assert_eq!(values.len(), f.len(), "a checked packet reads to its end");
    let again = Packet::with_format(p.stream_id(), p.tag(), &f, &values)
        .unwrap_or_else(|e| panic!("values of {f} do not pack back: {e}"));
    // Values hold strings read lossily (bytes that are not UTF-8 become U+FFFD), so only
    // packets whose strings are text come back byte for byte.
    if !format!("{values:?}").contains('\u{FFFD}') {
        let tail = 16; // stream, tag, source rank and weight come first
        assert_eq!(&again.wire()[tail..], &p.wire()[tail..], "data round trip");
    }
    // Compared as text: a float that is NaN is not equal to itself.
    assert_eq!(format!("{:?}", again.values()), format!("{values:?}"));
    let _ = p.unpack::<(i32, String)>("%d %s");
    let _ = p.unpack::<Vec<f64>>("%alf");
    let _ = Packet::from_wire(p.wire());
}

/// A format string (runtime/tbon/src/format.rs), as a program or a filter library gives it:
/// [`Format::parse`]; a parsed format prints as a string that parses to itself, and its wire
/// codes read back as itself.
pub fn tbon_format(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(f) = Format::parse(text) else {
        return;
    };
    let printed = f.to_string();
    assert_eq!(Format::parse(&printed).as_ref(), Ok(&f), "{printed:?}");
    let codes: Vec<u8> = f.codes().collect();
    assert_eq!(Format::from_codes(&codes).as_ref(), Some(&f));
    assert!(f.len() <= usize::from(u8::MAX));
}

/// A topology file (runtime/tbon/src/topology_file.rs): parsed and validated as one tree;
/// what is accepted prints as a file that reads back into the same tree, as
/// `Topology::to_topology_file` promises.
pub fn topology_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = topology_file::parse_entries(text);
    let Ok(t) = topology_file::parse(text) else {
        return;
    };
    let printed = t.to_topology_file();
    let back = topology_file::parse(&printed)
        .unwrap_or_else(|e| panic!("{printed:?} does not read back: {e}"));
    assert_eq!(back.entries(), t.entries(), "topology round trip");
    assert_eq!(back.num_nodes(), t.num_nodes());
    let _ = (t.stats(), t.to_dot(), t.leaves());
}

/// A charmrun nodelist (charmrun/src/nodelist.rs): [`charmrun::nodelist::parse`]; the hosts
/// it returns are named and have processors.
pub fn nodelist(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(hosts) = charmrun::nodelist::parse("fuzz", text) {
        assert!(!hosts.is_empty());
        for h in hosts {
            assert!(!h.name.is_empty() && h.cpus > 0, "{h:?}");
        }
    }
}

/// Run target `name` on `data`; `false` if there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    let f: fn(&[u8]) = match name {
        "udp_wire" => udp_wire,
        "tcp_frame" => tcp_frame,
        "charmrun_protocol" => charmrun_protocol,
        "node_table" => node_table,
        "tbon_packet" => tbon_packet,
        "tbon_format" => tbon_format,
        "topology_file" => topology_file,
        "nodelist" => nodelist,
        _ => return false,
    };
    f(data);
    true
}

fn udp_datagram(hdr: &wire::Header, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; hdr.size()];
    hdr.write(&mut b);
    b.extend_from_slice(body);
    b
}

fn message(handler: u32, payload: &[u8]) -> Message {
    let mut m = Message::from_payload(payload);
    m.set_handler(handler);
    m.set_src_pe(3);
    m.set_dst_pe(5);
    m.set_priority(-2);
    m
}

/// The starting corpus of target `name`: real encodings made with the project's own
/// encoders (named files, so a reader of the corpus knows what each one is).
pub fn seeds(name: &str) -> Vec<(&'static str, Vec<u8>)> {
    match name {
        "udp_wire" => {
            let exp = udp_expect();
            let base = wire::Header {
                kind: wire::Kind::Data,
                src: 2,
                dst: exp.me,
                wnd: 512,
                tag: exp.tag,
                seq: 7,
                ack: 5,
                sack: 0b101,
                frag: None,
                dup: false,
            };
            let msg = message(9, b"a small payload");
            let frag = wire::Frag {
                index: 1,
                chunk: 32,
                total: 80,
            };
            let mut ack = base;
            ack.kind = wire::Kind::Ack;
            ack.dup = true;
            let mut ack_body = 4u16.to_le_bytes().to_vec();
            ack_body.extend_from_slice(&[0xFF, 0, 0x10, 1]);
            let mut bye = base;
            bye.kind = wire::Kind::Bye;
            vec![
                ("data", udp_datagram(&base, msg.wire())),
                (
                    "fragment",
                    udp_datagram(
                        &wire::Header {
                            frag: Some(frag),
                            ..base
                        },
                        &[0xAB; 32],
                    ),
                ),
                ("ack", udp_datagram(&ack, &ack_body)),
                ("bye", udp_datagram(&bye, &[])),
                ("bundle", {
                    let mut body = Vec::new();
                    for m in [message(1, b""), message(2, b"two")] {
                        body.extend_from_slice(&(m.wire_len() as u32).to_le_bytes());
                        body.extend_from_slice(m.wire());
                    }
                    let mut d = udp_datagram(&base, &body);
                    d[1] |= wire::FLAG_BUNDLE;
                    d
                }),
            ]
        }
        "tcp_frame" => {
            let mut stream = Vec::new();
            for (h, p) in [(1, &b""[..]), (2, b"hello"), (3, &[7u8; 100][..])] {
                let m = message(h, p);
                stream.extend_from_slice(&(m.wire_len() as u32).to_le_bytes());
                stream.extend_from_slice(m.wire());
            }
            let one = stream[..4 + ENVELOPE_LEN].to_vec();
            vec![("one-frame", one), ("three-frames", stream)]
        }
        "charmrun_protocol" => {
            let hello = Hello {
                secret: [0x5A; SECRET_LEN],
                node: 3,
                pid: 4242,
                host: "node-a".into(),
                info: vec![127, 0, 0, 1, 0x1F, 0x90],
            };
            let mut frames = Vec::new();
            let w = &mut frames;
            protocol::write_frame(w, protocol::Kind::Hello, &hello.encode()).expect("vec");
            let table = NodeTable::uniform(2, 2).encode();
            protocol::write_frame(w, protocol::Kind::Table, &table).expect("vec");
            protocol::write_frame(w, protocol::Kind::Barrier, &[]).expect("vec");
            protocol::write_frame(w, protocol::Kind::Ending, &0i32.to_le_bytes()).expect("vec");
            protocol::write_frame(w, protocol::Kind::Abort, b"stopped").expect("vec");
            let agent = charmrun::agent::wire::AgentHello {
                secret: [0x5A; SECRET_LEN],
                agent: 1,
                pid: 77,
                host: "node-b".into(),
            };
            let node = |n: u32| charmrun::agent::wire::PlanNode {
                node: n,
                program: "/bin/pgm".into(),
                args: vec!["+machine".into(), "tcp".into()],
                prefix: String::new(),
            };
            let plan = charmrun::agent::wire::Plan {
                cwd: "/tmp".into(),
                num_nodes: 4,
                nodes: vec![node(0), node(2)],
                agents: vec![charmrun::agent::wire::SubAgent {
                    agent: 2,
                    parent: 1,
                    host: "node-c".into(),
                    shell: "ssh".into(),
                    nodes: vec![node(3)],
                }],
            };
            protocol::write_frame(w, protocol::Kind::Agent, &agent.encode()).expect("vec");
            protocol::write_frame(w, protocol::Kind::Plan, &plan.encode()).expect("vec");
            let relayed = charmrun::agent::wire::relay(2, protocol::Kind::Barrier, &[]);
            protocol::write_frame(w, protocol::Kind::Relay, &relayed).expect("vec");
            let lost = charmrun::agent::wire::lost(&[3], "gone");
            protocol::write_frame(w, protocol::Kind::Lost, &lost).expect("vec");
            vec![
                ("agent-body", agent.encode()),
                ("plan-body", plan.encode()),
                ("hello-body", hello.encode()),
                ("frames", frames),
                (
                    "secret-hex",
                    protocol::secret_to_hex(&[0xC3; SECRET_LEN]).into_bytes(),
                ),
            ]
        }
        "node_table" => {
            let t = NodeTable::new(vec![
                NodeInfo {
                    first_pe: 0,
                    num_pes: 2,
                    host: "a".into(),
                    addr: vec![1, 2, 3],
                },
                NodeInfo {
                    first_pe: 2,
                    num_pes: 1,
                    host: "host-b".into(),
                    addr: vec![],
                },
            ])
            .expect("a valid table");
            vec![
                ("two-nodes", t.encode()),
                ("uniform", NodeTable::uniform(3, 4).encode()),
            ]
        }
        "tbon_packet" => {
            let ints = (-1i8, 2u8, -3i16, 4u16, 5u32, -6i64, 7u64, 8.5f64);
            let strings = (vec!["x".to_owned(), "yz".to_owned()],);
            let packets = [
                ("mixed", Packet::new(7, 100, "%d %s %af", (32i32, "hi", vec![1.5f32, 2.5]))),
                ("ints", Packet::new(1, -1, "%c %uc %hd %uhd %ud %ld %uld %lf", ints)),
                ("strings", Packet::new(2, 3, "%as", strings)),
                ("empty", Packet::new(4, 0, "", ())),
            ];
            packets
                .into_iter()
                .map(|(n, p)| (n, p.expect("a seed packs").wire().to_vec()))
                .collect()
        }
        "tbon_format" => vec![
            ("scalars", b"%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s".to_vec()),
            ("arrays", b"%ac %auc %ahd %aud %ald %af %alf %as".to_vec()),
            ("large", b"%Ad %Alf  %s".to_vec()),
        ],
        "topology_file" => vec![
            ("flat", b"fe:0 => be:0 be:1 ;".to_vec()),
            (
                "two-levels",
                b"# a comment\nfe:0 => cp:0 cp:1 ;\ncp:0 => be:0 be:1 ;\ncp:1 => be:2 ;\n"
                    .to_vec(),
            ),
        ],
        "nodelist" => vec![
            (
                "charm",
                b"group main ++shell ssh\n host a ++cpus 2\n host b ++shell rsh // b\ngroup other\n host c\n"
                    .to_vec(),
            ),
            ("machine-file", b"a\nb # second\n\nc\n".to_vec()),
        ],
        _ => Vec::new(),
    }
}
