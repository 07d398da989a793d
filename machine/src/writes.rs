//! Writes a process must not be cut in the middle of: a trace chunk, whose reader counts a
//! torn one as damage. The launcher's watchdog, told to end the process at once (charmrun's
//! `DIE`), waits a moment for those under way before it ends it; a write that takes longer is
//! cut all the same, as the job is over.
//!
//! ```
//! use converse_machine::writes;
//! {
//!     let _w = writes::begin();
//!     // ... one write of a whole chunk ...
//! }
//! writes::wait(std::time::Duration::from_millis(10)); // returns at once: none under way
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static UNDER_WAY: AtomicUsize = AtomicUsize::new(0);

/// A write under way, until dropped.
#[derive(Debug)]
#[must_use = "the write is under way only while this lives"]
pub struct Writing(());

impl Drop for Writing {
    fn drop(&mut self) {
        UNDER_WAY.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Say a write that must not be cut begins.
pub fn begin() -> Writing {
    UNDER_WAY.fetch_add(1, Ordering::SeqCst);
    Writing(())
}

/// Wait until no such write is under way, at most `most`.
pub fn wait(most: Duration) {
    let until = Instant::now() + most;
    while UNDER_WAY.load(Ordering::SeqCst) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}
