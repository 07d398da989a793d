//! The machine layer on MPI (rsmpi), started by mpirun. Not built yet: it arrives with issue 6. Until then this crate exports nothing, and the runtime has no `mpi` layer to select.
