//! Laying a tree over the PEs of a job: which PE plays which process of the topology.
//!
//! The front-end is always PE 0. With [`MapPolicy::ByHost`] every other process goes to the
//! lowest free PE on the host the topology names for it, taking processes in breadth-first
//! order, so a topology written for a nodelist puts each process where the file says. Host
//! names match when they are equal, or when both name this machine (`localhost`, a loopback
//! address, or this host's own name), so a topology on `localhost` fits a local job whatever
//! the launcher calls the host. [`MapPolicy::InOrder`] ignores hosts: process `i` (breadth-first)
//! is PE `i`. PEs left over are spares: they take no part in the tree.

use crate::topology::Topology;

/// How tree processes are matched with PEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MapPolicy {
    /// Each process on a PE of its own host.
    #[default]
    ByHost,
    /// Process `i` on PE `i`, whatever the hosts.
    InOrder,
}

/// Why a tree does not fit a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the topology does not fit the job: {0}")]
pub struct MappingError(pub String);

/// Whether `host` names this machine.
pub fn is_this_machine(host: &str) -> bool {
    if host == "localhost" || host.starts_with("127.") || host == "::1" {
        return true;
    }
    let me = converse_bootstrap::client::hostname();
    host == me || me.split('.').next() == Some(host) || host.split('.').next() == Some(&me)
}

/// Whether two host names name the same host.
pub fn same_host(a: &str, b: &str) -> bool {
    a == b || (is_this_machine(a) && is_this_machine(b))
}

/// The PE of each tree process (breadth-first order), given the host of each PE.
///
/// ```
/// use converse_tbon::{mapping::{map_to_pes, MapPolicy}, topology_file::parse};
/// let t = parse("a:0 => b:0 a:1 ;").unwrap();
/// let pes = map_to_pes(&t, &["a", "b", "a"], MapPolicy::ByHost).unwrap();
/// assert_eq!(pes, [0, 1, 2]);
/// let pes = map_to_pes(&t, &["a", "a", "b"], MapPolicy::ByHost).unwrap();
/// assert_eq!(pes, [0, 2, 1]);
/// ```
///
/// # Errors
/// [`MappingError`] when the job has fewer PEs than the tree has processes, or (by host) when
/// PE 0 is not on the root's host or a host has fewer PEs than the tree puts there.
pub fn map_to_pes(
    topo: &Topology,
    pe_hosts: &[&str],
    policy: MapPolicy,
) -> Result<Vec<usize>, MappingError> {
    let n = topo.num_nodes();
    if pe_hosts.len() < n {
        return Err(MappingError(format!(
            "it has {n} processes but the job has {} PE(s)",
            pe_hosts.len()
        )));
    }
    if policy == MapPolicy::InOrder {
        return Ok((0..n).collect());
    }
    let root_host = topo.root().host();
    if !same_host(root_host, pe_hosts[0]) {
        return Err(MappingError(format!(
            "its root {} is on host {root_host}, but the front-end (PE 0) runs on {}",
            topo.root().name(),
            pe_hosts[0]
        )));
    }
    let mut used = vec![false; pe_hosts.len()];
    used[0] = true;
    let mut out = Vec::with_capacity(n);
    out.push(0);
    // The next PE to look at per host (by the first PE seen on it), so a large job maps in
    // linear time.
    let mut cursor: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for node in &topo.nodes()[1..] {
        let host = node.host();
        let start = *cursor.get(host).unwrap_or(&1);
        let found = (start..pe_hosts.len()).find(|&p| !used[p] && same_host(host, pe_hosts[p]));
        let Some(pe) = found else {
            let wanted = topo
                .nodes()
                .iter()
                .filter(|m| same_host(m.host(), host))
                .count();
            let have = pe_hosts.iter().filter(|h| same_host(h, host)).count();
            return Err(MappingError(if have == 0 {
                let mut hosts: Vec<&str> = pe_hosts.to_vec();
                hosts.sort_unstable();
                hosts.dedup();
                format!(
                    "{} is on host {host}, which has no PE of the job (the job's hosts: {})",
                    node.name(),
                    hosts.join(", ")
                )
            } else {
                format!(
                    "it places {wanted} process(es) on host {host}, which has {have} PE(s) of \
                     the job"
                )
            }));
        };
        used[pe] = true;
        cursor.insert(host, pe + 1);
        out.push(pe);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topgen::{generate, Placement, TreeSpec};
    use crate::topology_file::parse;

    #[test]
    fn by_host_follows_the_file() {
        let t = parse("fe:0 => n1:0 n2:0 ;\nn1:0 => n1:1 n1:2 ;\nn2:0 => n2:1 ;").expect("tree");
        let hosts = ["fe", "n2", "n2", "n1", "n1", "n1"];
        let pes = map_to_pes(&t, &hosts, MapPolicy::ByHost).expect("fits");
        let by_name: Vec<(String, usize)> = t
            .nodes()
            .iter()
            .zip(&pes)
            .map(|(n, &p)| (n.name().to_string(), p))
            .collect();
        assert!(by_name.contains(&("n1:0".into(), 3)));
        assert!(by_name.contains(&("n2:1".into(), 2)));
        let mut sorted = pes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), pes.len());
    }

    #[test]
    fn errors_say_what_does_not_fit() {
        let t = parse("fe:0 => a:0 a:1 ;").expect("tree");
        let e = map_to_pes(&t, &["fe", "a"], MapPolicy::ByHost).unwrap_err();
        assert!(
            e.to_string().contains("3 processes but the job has 2"),
            "{e}"
        );
        let e = map_to_pes(&t, &["fe", "a", "b"], MapPolicy::ByHost).unwrap_err();
        assert!(
            e.to_string()
                .contains("2 process(es) on host a, which has 1"),
            "{e}"
        );
        let e = map_to_pes(&t, &["x", "a", "a"], MapPolicy::ByHost).unwrap_err();
        assert!(
            e.to_string().contains("the front-end (PE 0) runs on x"),
            "{e}"
        );
        let e = map_to_pes(&t, &["fe", "b", "c"], MapPolicy::ByHost).unwrap_err();
        assert!(e.to_string().contains("which has no PE of the job"), "{e}");
        assert_eq!(
            map_to_pes(&t, &["x", "y", "z", "w"], MapPolicy::InOrder).ok(),
            Some(vec![0, 1, 2])
        );
    }

    #[test]
    fn localhost_matches_this_machine_under_any_name() {
        let t = generate(&TreeSpec::Generic(vec![2, 2]), &Placement::default()).expect("tree");
        let me = converse_bootstrap::client::hostname();
        let hosts: Vec<&str> = vec![me.as_str(); 8];
        let pes = map_to_pes(&t, &hosts, MapPolicy::ByHost).expect("fits");
        assert_eq!(pes, (0..7).collect::<Vec<_>>());
        assert!(same_host("localhost", "127.0.0.1"));
        assert!(!same_host("node-a", "node-b"));
    }
}
