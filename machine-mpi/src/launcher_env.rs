//! What the MPI launcher tells a process through its environment, read before MPI starts.
//!
//! Used twice: to tell whether this process was started by `mpirun`/`mpiexec` at all (so a
//! program built with several layers picks MPI only then), and to catch the classic mix-up of a
//! binary built against one MPI but started by another MPI's launcher, which otherwise runs as
//! N separate one-rank jobs.

/// Variables each launcher sets to the job's size: Open MPI, PMIx-based launchers, MPICH's
/// Hydra (PMI), Slurm's `srun` (a step's tasks; `SLURM_NTASKS` is the allocation's, also seen
/// by a batch script that started nothing).
const SIZE_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_SIZE",
    "PMI_SIZE",
    "SLURM_STEP_NUM_TASKS",
    "MPI_LOCALNRANKS",
    "SLURM_NTASKS",
];

/// Variables only a launcher of ranks sets (any one of them means "started by a launcher"):
/// MPI's and PMI's, and `srun`'s per task, which it sets even with `MpiDefault=none` (no PMI):
/// such a program would otherwise run as N separate one-PE jobs.
const RANK_VARS: &[&str] = &["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"];

/// Set by `srun` for the tasks of a step, never for a batch script itself.
const SRUN_STEP: &str = "SLURM_STEP_NUM_TASKS";

/// Whether an MPI launcher (or `srun`) started this process.
pub fn launched() -> bool {
    RANK_VARS
        .iter()
        .chain(SIZE_VARS.iter().take(3))
        .chain(std::iter::once(&SRUN_STEP))
        .any(|v| std::env::var_os(v).is_some())
}

/// The job size the launcher announced, and the variable it came from, if any.
pub fn announced_size() -> Option<(usize, &'static str)> {
    SIZE_VARS.iter().find_map(|v| {
        std::env::var(v)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .map(|n| (n, *v))
    })
}

/// Checks the size MPI reports against what the launcher announced: one rank while the
/// launcher says more means the program and the launcher belong to different MPI libraries.
///
/// # Errors
/// A message saying what was seen and what to do.
pub fn check_size(mpi_size: usize, library: &str) -> Result<(), String> {
    match announced_size() {
        Some((n, var)) if mpi_size == 1 && n > 1 => Err(format!(
            "MPI says this job has 1 rank but the launcher started {n} ({var}={n}): the program \
             was built against another MPI than the one whose mpirun started it (this program \
             uses: {library}); start it with that MPI's mpirun, or rebuild against this one"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_rank_world_under_a_bigger_launch_is_refused() {
        // The environment is process-wide; one test touches it.
        std::env::set_var("OMPI_COMM_WORLD_SIZE", "4");
        assert!(launched());
        let e = check_size(1, "MPICH 4").err().unwrap_or_default();
        assert!(e.contains("started 4") && e.contains("MPICH 4"), "{e}");
        assert!(check_size(4, "x").is_ok());
        std::env::remove_var("OMPI_COMM_WORLD_SIZE");
        if announced_size().is_none() {
            assert!(check_size(1, "x").is_ok());
        }
    }
}
