//! The [`Wake`](converse_machine::Wake) contract on the MPI layer: a one-rank job (MPI's
//! singleton start, no `mpirun` needed), its `wait` on this test's thread — the one that
//! booted MPI, as `MPI_THREAD_FUNNELED` wants — ended by wakes from other threads.
//!
//! One test in this file: MPI is initialized once per process.
#![cfg(feature = "mpi")]

use converse_machine::BootConfig;

#[test]
fn a_wake_ends_the_wait_of_an_idle_rank() {
    let mut nodes = converse_mpi::boot(&BootConfig::new(1)).expect("boot a one-rank job");
    let mut m = nodes.pop().expect("one node");
    let checked = converse_machine::check::waker(&mut *m);
    m.barrier(&mut |_| {}).expect("barrier");
    m.exit(0).expect("exit");
    assert!(checked.expect("the waker keeps its contract"), "a waker");
}
