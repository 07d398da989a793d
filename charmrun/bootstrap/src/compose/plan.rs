//! What a composite node tells the others, and the transport each pair of nodes uses.
//!
//! A node's info in the node table is `[version u8][host identity: str][SI port: bytes]
//! [network address: bytes]` (lengths as `u32`, `converse_machine::bytes`); an empty identity
//! is an unknown one. Every node decodes the same table with the same rule, [`host::same`],
//! which is symmetric: so both ends of a pair pick the same transport, for the whole job.

use super::host;
use converse_machine::bytes::{ByteReader, ByteWriter};
use converse_machine::{MachineError, NodeInfo, NodeTable};

const VERSION: u8 = 1;

/// How this node reaches a node of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// It is this node (the runtime never sends to it).
    Me,
    /// Shared memory: same host.
    Shm,
    /// The network layer: another host, or one we cannot be sure of.
    Net,
}

/// One node's composite info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Info<'a> {
    /// Host identity, `None` when unknown.
    pub host: Option<&'a str>,
    /// The SI port's name.
    pub shm: &'a [u8],
    /// The network layer's address.
    pub net: &'a [u8],
}

/// Encode this node's info.
pub(crate) fn encode(host: Option<&str>, shm: &[u8], net: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + shm.len() + net.len() + host.map_or(0, str::len));
    out.put_u8(VERSION);
    out.put_str(host.unwrap_or(""));
    out.put_bytes(shm);
    out.put_bytes(net);
    out
}

/// Decode node `node`'s info from the table.
///
/// # Errors
/// [`MachineError::Boot`] naming the node when its bytes are not such info.
pub(crate) fn decode(table: &NodeTable, node: usize) -> Result<Info<'_>, MachineError> {
    let bad = |why: String| {
        MachineError::Boot(format!(
            "node {node}'s entry in the node table is not a composite layer's ({why}); \
             do all nodes run the same program with the same +machine?"
        ))
    };
    let addr = &table.node(node).ok_or_else(|| bad("missing".into()))?.addr;
    read_info(addr).map_err(|e| bad(e.to_string()))
}

fn read_info(addr: &[u8]) -> Result<Info<'_>, converse_machine::WireError> {
    let mut r = ByteReader::new(addr);
    if r.u8()? != VERSION {
        return Err(converse_machine::WireError::BadMagic);
    }
    let host = r.str()?;
    let shm = r.bytes()?;
    let net = r.bytes()?;
    r.finish()?;
    Ok(Info {
        host: (!host.is_empty()).then_some(host),
        shm,
        net,
    })
}

/// Every node's info, in node order.
///
/// # Errors
/// As [`decode`].
pub(crate) fn decode_all(table: &NodeTable) -> Result<Vec<Info<'_>>, MachineError> {
    (0..table.num_nodes()).map(|n| decode(table, n)).collect()
}

/// The route from `me` to every node.
pub(crate) fn routes(infos: &[Info<'_>], me: usize) -> Vec<Route> {
    let mine = infos.get(me).and_then(|i| i.host);
    infos
        .iter()
        .enumerate()
        .map(|(n, i)| {
            if n == me {
                Route::Me
            } else if host::same(mine, i.host) {
                Route::Shm
            } else {
                Route::Net
            }
        })
        .collect()
}

/// The table a part gets: the job's nodes, each with `addr` what `pick` gives.
///
/// # Errors
/// Never in practice (the nodes are the table's own); [`MachineError::Boot`] otherwise.
pub(crate) fn part_table(
    table: &NodeTable,
    infos: &[Info<'_>],
    pick: impl Fn(usize, &Info<'_>) -> Vec<u8>,
) -> Result<NodeTable, MachineError> {
    let nodes = table
        .nodes()
        .iter()
        .zip(infos)
        .enumerate()
        .map(|(n, (node, info))| NodeInfo {
            addr: pick(n, info),
            ..node.clone()
        })
        .collect();
    NodeTable::new(nodes).map_err(|e| MachineError::Boot(format!("splitting the node table: {e}")))
}

/// How many peers of `me` each transport serves: (shared memory, network).
pub(crate) fn peers(routes: &[Route]) -> (usize, usize) {
    let shm = routes.iter().filter(|r| **r == Route::Shm).count();
    let net = routes.iter().filter(|r| **r == Route::Net).count();
    (shm, net)
}

/// "no peer" / "1 peer" / "2 peers".
pub(crate) fn plural(n: usize) -> String {
    match n {
        0 => "no peer".to_string(),
        1 => "1 peer".to_string(),
        _ => format!("{n} peers"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(infos: &[(Option<&str>, &str, &str)]) -> NodeTable {
        let nodes = infos
            .iter()
            .enumerate()
            .map(|(n, (h, s, a))| NodeInfo {
                first_pe: n,
                num_pes: 1,
                host: "same-name".into(),
                addr: encode(*h, s.as_bytes(), a.as_bytes()),
            })
            .collect();
        NodeTable::new(nodes).expect("table")
    }

    #[test]
    fn info_round_trips_and_an_empty_identity_is_unknown() {
        let t = table(&[(Some("A"), "/dev/shm/p0", "10.0.0.1:5"), (None, "p1", "x")]);
        let i = decode_all(&t).expect("decodes");
        assert_eq!(i[0].host, Some("A"));
        assert_eq!(i[0].shm, b"/dev/shm/p0");
        assert_eq!(i[0].net, b"10.0.0.1:5");
        assert_eq!(i[1].host, None);
    }

    #[test]
    fn bad_bytes_are_an_error_naming_the_node_never_a_panic() {
        let mut t = table(&[(Some("A"), "p", "a"), (Some("A"), "p", "a")]);
        let mut nodes = t.nodes().to_vec();
        nodes[1].addr = b"10.0.0.1:5".to_vec();
        t = NodeTable::new(nodes).expect("table");
        let e = decode_all(&t).expect_err("a plain TCP address is no composite info");
        assert!(e.to_string().contains("node 1's entry"), "{e}");
        for cut in 0..encode(Some("A"), b"p", b"a").len() {
            let mut nodes = t.nodes().to_vec();
            nodes[1].addr = encode(Some("A"), b"p", b"a")[..cut].to_vec();
            let t = NodeTable::new(nodes).expect("table");
            assert!(decode(&t, 1).is_err(), "cut at {cut}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused_never_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)
        ) {
            let nodes = vec![NodeInfo { first_pe: 0, num_pes: 1, host: "h".into(), addr: bytes }];
            let t = NodeTable::new(nodes).expect("table");
            if let Ok(i) = decode(&t, 0) {
                // What decodes encodes back to the same bytes.
                let again = encode(i.host, i.shm, i.net);
                proptest::prop_assert_eq!(&again, &t.nodes()[0].addr);
            }
        }
    }

    #[test]
    fn two_hosts_of_two_nodes_pair_same_host_nodes_on_shared_memory_and_symmetrically() {
        // Nodes 0 and 2 on host A, 1 and 3 on host B (round-robin placement).
        let t = table(&[
            (Some("A"), "p0", "a0"),
            (Some("B"), "p1", "a1"),
            (Some("A"), "p2", "a2"),
            (Some("B"), "p3", "a3"),
        ]);
        let i = decode_all(&t).expect("decodes");
        use Route::*;
        assert_eq!(routes(&i, 0), vec![Me, Net, Shm, Net]);
        assert_eq!(routes(&i, 1), vec![Net, Me, Net, Shm]);
        for a in 0..4 {
            for b in 0..4 {
                if a != b {
                    assert_eq!(routes(&i, a)[b], routes(&i, b)[a], "pair {a}-{b}");
                }
            }
        }
        assert_eq!(peers(&routes(&i, 0)), (1, 2));
    }

    #[test]
    fn in_doubt_the_network() {
        let t = table(&[
            (None, "p0", "a0"),
            (None, "p1", "a1"),
            (Some("A"), "p2", "a2"),
        ]);
        let i = decode_all(&t).expect("decodes");
        assert_eq!(routes(&i, 0), vec![Route::Me, Route::Net, Route::Net]);
        assert_eq!(routes(&i, 2), vec![Route::Net, Route::Net, Route::Me]);
    }

    #[test]
    fn a_part_table_keeps_the_nodes_and_takes_the_picked_addresses() {
        let t = table(&[(Some("A"), "p0", "a0"), (Some("B"), "p1", "a1")]);
        let i = decode_all(&t).expect("decodes");
        let shm = part_table(&t, &i, |n, info| {
            if n == 0 {
                info.shm.to_vec()
            } else {
                Vec::new()
            }
        })
        .expect("table");
        assert_eq!(shm.num_pes(), t.num_pes());
        assert_eq!(shm.node(0).map(|n| n.addr.as_slice()), Some(&b"p0"[..]));
        assert_eq!(shm.node(1).map(|n| n.addr.len()), Some(0));
        assert_eq!(shm.node(1).map(|n| n.host.as_str()), Some("same-name"));
    }
}
