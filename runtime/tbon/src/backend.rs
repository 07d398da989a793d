//! The `main` of a back-end program (MRNet's back-end side of instantiation mode 1): it needs
//! no launcher linked, only the runtime, whoever started the process.

use crate::error::TbonError;
use crate::network::{attach, Network, Options};
use std::process::ExitCode;

/// The `main` of a back-end program: join the network the front-end made and, on back-ends,
/// run `f` (internal processes serve the tree); then wait for the front-end to shut the
/// network down. Started by hand, without a front-end, it says so and exits non-zero.
///
/// `f` returning [`TbonError::ShutDown`] (from a receive once the network is shut down) is
/// a normal end. Any other failure in `f` ends the whole job with the error, naming the
/// back-end: a front-end waiting for this back-end's data must not wait forever.
pub fn run_backend(f: impl Fn(&mut Network<'_>) -> Result<(), TbonError> + Sync) -> ExitCode {
    run_backend_with(Options::default, f)
}

/// As [`run_backend`], with the overlay's options (the same filters as the front-end's).
pub fn run_backend_with(
    options: impl Fn() -> Options + Sync,
    f: impl Fn(&mut Network<'_>) -> Result<(), TbonError> + Sync,
) -> ExitCode {
    converse::run(|pe| {
        let alone = || {
            Err(TbonError::Create(
                "this is a back-end program: its front-end starts it (it was started alone)".into(),
            ))
        };
        let failed = match attach(pe, options(), |_| alone()) {
            Ok(mut net) => {
                if net.is_back_end() {
                    match f(&mut net) {
                        // A receive that sees the network end is how a back-end loop ends.
                        Ok(()) | Err(TbonError::ShutDown) | Err(TbonError::JobEnded) => {}
                        Err(e) => {
                            let rank = net.rank().unwrap_or(0);
                            let why = format!("back-end rank {rank} failed: {e}; ending the job");
                            net.pe().abort(&why);
                        }
                    }
                }
                let _ = net.wait_for_shutdown();
                return;
            }
            Err(e) => e,
        };
        if pe.my_pe() == 0 {
            let prog = pe.args().first().cloned().unwrap_or_default();
            converse::input::error_line(&format!("{prog}: {failed}"));
            pe.exit(1);
        }
    })
}
