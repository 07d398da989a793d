//! Files a node made under its job's tag and must not leave behind if it ends early.
//!
//! charmrun removes a job's files when the job ends (see
//! [`LaunchEnv::shm_path`](crate::client::LaunchEnv::shm_path)), but not when charmrun itself is
//! killed: then each node must remove its own. A layer registers such a file for as long as it
//! exists ([`remove_on_exit`]); a node that leaves from where no destructor runs — the
//! control watchdog's `_exit` when charmrun goes away, [`Bootstrap::abort`](crate::Bootstrap::abort)
//! — first removes everything registered ([`remove_registered`]); a layer's error returns drop
//! the guard, which removes the file too.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

/// The files to remove if the process ends now. Held only to push or take a path, never
/// across anything that blocks, so the watchdog can always take it.
static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A registered file: removed when this is dropped, or by [`remove_registered`] if the
/// process ends first.
#[derive(Debug)]
#[must_use = "dropping the guard removes the file at once"]
pub struct RemoveOnExit {
    path: PathBuf,
}

/// Register `path` (a file this process just made) for removal.
pub fn remove_on_exit(path: impl Into<PathBuf>) -> RemoveOnExit {
    let path = path.into();
    FILES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(path.clone());
    RemoveOnExit { path }
}

impl Drop for RemoveOnExit {
    fn drop(&mut self) {
        let mut files = FILES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = files.iter().position(|p| *p == self.path) {
            files.swap_remove(i);
        }
        // Already gone is fine: the layer may have removed it itself.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Remove every registered file: the process is about to end without running destructors.
pub fn remove_registered() {
    let files = std::mem::take(&mut *FILES.lock().unwrap_or_else(PoisonError::into_inner));
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("cleanup-{}-{name}", std::process::id()));
        std::fs::write(&p, b"x").expect("write");
        p
    }

    #[test]
    fn a_dropped_guard_removes_its_file_and_unregisters_it() {
        let p = temp("drop");
        drop(remove_on_exit(&p));
        assert!(!p.exists());
        assert!(!FILES.lock().expect("lock").contains(&p));
    }

    #[test]
    fn remove_registered_removes_what_is_registered_only() {
        let kept = temp("kept");
        let gone = temp("gone");
        let guard = remove_on_exit(&gone);
        remove_registered();
        assert!(!gone.exists());
        assert!(kept.exists());
        // The guard's own removal later finds nothing to do.
        drop(guard);
        let _ = std::fs::remove_file(&kept);
    }
}
