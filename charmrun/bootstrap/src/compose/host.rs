//! Which nodes share a host, as far as shared memory is concerned.
//!
//! A host name is no proof: two containers, or two network namespaces, may carry the same
//! one, and `localhost` is everybody's. Two processes can talk through an SI port only when
//! they run on the same kernel (its boot id, a random UUID per boot), see the same file where
//! the port is (the device and inode of /dev/shm: a container with a /dev/shm of its own has
//! another), and name each other's processes by the same numbers (the pid namespace: the SI
//! layer reads peers' memory and checks that they live by process id). Network namespaces
//! are hosts of their own too: they are how the tests make hosts, and a job that puts two
//! processes in different ones means them to be apart.
//!
//! The mount namespace is deliberately not part of it: `ip netns exec` gives every process a
//! mount namespace of its own, yet /dev/shm stays the same file system, which the device and
//! inode of /dev/shm itself say directly.
//!
//! Whatever cannot be read makes the identity unknown, and an unknown identity matches
//! nobody: in doubt, the network.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Where the kernel's boot id is.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This process's host identity, with `shm_dir` the directory the SI ports are in; `None`
/// when any part of it cannot be read.
pub(crate) fn identity(shm_dir: &Path) -> Option<String> {
    let boot = std::fs::read_to_string(BOOT_ID).ok()?;
    let boot = boot.trim();
    if boot.is_empty() {
        return None;
    }
    let file = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let (net_dev, net) = file(Path::new("/proc/self/ns/net"))?;
    let (pid_dev, pid) = file(Path::new("/proc/self/ns/pid"))?;
    let (shm_dev, shm) = file(shm_dir)?;
    Some(format!(
        "{boot} net:{net_dev}:{net} pid:{pid_dev}:{pid} shm:{shm_dev}:{shm}"
    ))
}

/// Whether two nodes' identities say they share a host: both known, and equal.
pub(crate) fn same(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_an_identity_that_names_its_parts() {
        let id = identity(Path::new("/dev/shm")).expect("readable here");
        for part in [" net:", " pid:", " shm:"] {
            assert!(id.contains(part), "{id}");
        }
        // Stable: asked twice, the same.
        assert_eq!(
            identity(Path::new("/dev/shm")).as_deref(),
            Some(id.as_str())
        );
    }

    #[test]
    fn a_missing_directory_makes_it_unknown() {
        assert_eq!(identity(Path::new("/nonexistent/shm")), None);
    }

    #[test]
    fn unknown_matches_nobody_not_even_unknown() {
        assert!(same(Some("a"), Some("a")));
        assert!(!same(Some("a"), Some("b")));
        assert!(!same(None, Some("a")));
        assert!(!same(None, None));
    }
}
