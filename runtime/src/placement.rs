//! Placement: `+pemap` and `+commap`, Charm++'s core lists, pin worker PEs and communication
//! threads to cores. Without them nothing is pinned.
//!
//! A list is comma-separated ranges: `0-3,8,10-14:2` is cores 0, 1, 2, 3, 8, 10, 12, 14. The
//! PEs of one host take the `+pemap` entries in order (the host's first PE the first entry,
//! wrapping around when there are more PEs than entries); the communication threads of one
//! host take the `+commap` entries the same way.

use converse_machine::NodeTable;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// A core list as `+pemap` and `+commap` take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreList {
    cores: Vec<usize>,
    text: String,
}

impl std::fmt::Display for CoreList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl CoreList {
    /// Parse `0-3,8,10-14:2`.
    ///
    /// ```
    /// let l = converse::CoreList::parse("0-3,8,10-14:2").unwrap();
    /// assert_eq!(l.cores(), [0, 1, 2, 3, 8, 10, 12, 14]);
    /// assert!(converse::CoreList::parse("3-1").is_err());
    /// ```
    ///
    /// # Errors
    /// A sentence saying which part is wrong.
    pub fn parse(text: &str) -> Result<CoreList, String> {
        let max = CpuSet::count();
        let num = |s: &str| -> Result<usize, String> {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&c| c < max)
                .ok_or_else(|| format!("'{s}' is not a core number (0 to {})", max - 1))
        };
        let mut cores = Vec::new();
        for part in text.split(',') {
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => (
                    r,
                    num(s).ok().filter(|&s| s > 0).ok_or_else(|| {
                        format!("'{part}': the stride after ':' must be a number from 1")
                    })?,
                ),
                None => (part, 1),
            };
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let c = num(range)?;
                    (c, c)
                }
            };
            if lo > hi {
                return Err(format!("'{part}': the range goes down"));
            }
            cores.extend((lo..=hi).step_by(stride));
        }
        Ok(CoreList {
            cores,
            text: text.to_owned(),
        })
    }

    /// The cores this process may run on (its affinity mask: what `taskset`, a cgroup or a
    /// batch system's binding left it), in order: `+setcpuaffinity`'s list.
    ///
    /// # Errors
    /// When the mask cannot be read.
    pub fn allowed() -> Result<CoreList, String> {
        let set = nix::sched::sched_getaffinity(Pid::from_raw(0))
            .map_err(|e| format!("cannot read this process's cores: {e}"))?;
        let cores: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect();
        if cores.is_empty() {
            return Err("this process may run on no core".into());
        }
        // As `+pemap` would say it: runs of cores as ranges ("0-63", not 64 numbers).
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < cores.len() {
            let mut j = i;
            while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
                j += 1;
            }
            parts.push(if j > i {
                format!("{}-{}", cores[i], cores[j])
            } else {
                cores[i].to_string()
            });
            i = j + 1;
        }
        Ok(CoreList {
            cores,
            text: parts.join(","),
        })
    }

    /// The cores, in order.
    pub fn cores(&self) -> &[usize] {
        &self.cores
    }

    /// The `i`-th entry, wrapping around.
    fn nth(&self, i: usize) -> usize {
        self.cores[i % self.cores.len()]
    }
}

/// Where PE `pe` of `node` sits among the PEs of its host, and where `node` sits among the
/// nodes of its host: the indexes into `+pemap` and `+commap`.
fn host_indexes(table: &NodeTable, node: usize, pe: usize) -> (usize, usize) {
    let host = table.node(node).map(|n| n.host.as_str());
    let before = table.nodes()[..node.min(table.num_nodes())]
        .iter()
        .filter(|n| Some(n.host.as_str()) == host);
    let (pes, nodes) = before.fold((0, 0), |(p, n), info| (p + info.num_pes, n + 1));
    let rank = pe.saturating_sub(table.node(node).map_or(0, |n| n.first_pe));
    (pes + rank, nodes)
}

/// The core `+pemap` gives PE `pe` of `node`.
pub(crate) fn pe_core(map: &CoreList, table: &NodeTable, node: usize, pe: usize) -> usize {
    map.nth(host_indexes(table, node, pe).0)
}

/// The core `+commap` gives `node`'s communication thread.
pub(crate) fn comm_core(map: &CoreList, table: &NodeTable, node: usize) -> usize {
    let first = table.node(node).map_or(0, |n| n.first_pe);
    map.nth(host_indexes(table, node, first).1)
}

/// Pin the calling thread to `core`.
///
/// # Errors
/// The OS's refusal in a sentence (a core this host lacks, one outside the process's cpuset).
pub(crate) fn pin_current(core: usize, what: &str) -> Result<(), String> {
    let mut set = CpuSet::new();
    set.set(core)
        .and_then(|()| sched_setaffinity(Pid::from_raw(0), &set))
        .map_err(|e| format!("cannot pin {what} to core {core}: {}", e.desc()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_ones_are_refused() {
        assert_eq!(CoreList::parse("4").unwrap().cores(), [4]);
        assert_eq!(CoreList::parse("0-7:3").unwrap().cores(), [0, 3, 6]);
        for bad in [
            "", "a", "1-", "-1", "2-1", "0-3:0", "0-3:x", "1,,2", "99999",
        ] {
            assert!(CoreList::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_indexes_count_only_the_same_host() {
        use converse_machine::NodeInfo;
        let n = |first, host: &str| NodeInfo {
            first_pe: first,
            num_pes: 2,
            host: host.into(),
            addr: Vec::new(),
        };
        let t = NodeTable::new(vec![n(0, "a"), n(2, "b"), n(4, "a"), n(6, "b")]).unwrap();
        assert_eq!(host_indexes(&t, 2, 5), (3, 1));
        assert_eq!(host_indexes(&t, 3, 6), (2, 1));
        assert_eq!(host_indexes(&t, 0, 1), (1, 0));
        let map = CoreList::parse("0-2").unwrap();
        assert_eq!(pe_core(&map, &t, 2, 5), 0);
        assert_eq!(comm_core(&map, &t, 2), 1);
    }
}
