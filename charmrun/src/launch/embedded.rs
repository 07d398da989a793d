//! The launcher embedded in a program: a job run on a thread of the calling process, which
//! joins it as one or more of its nodes ([`NodeStart::InProcess`]) — what a front-end that
//! makes its own network uses (MRNet's `CreateNetworkFE`).

use super::job::Job;
use super::{Event, LaunchError, NodeStart};
use crate::client;
use crate::opts::Opts;
use crossbeam_channel::Sender;
use std::thread::JoinHandle;

/// A job run by a launcher inside the calling program. Nodes in this process join through
/// [`client`] with the [`LaunchEnv`](client::LaunchEnv)s of [`Embedded::envs`], handed to the
/// runtime as their launch context ([`converse_machine::BootConfig::launch`]).
///
/// The launcher runs on a thread of its own; no signal handler is installed (the program's
/// are its own). At the end it does what charmrun does, except that it never tells a node in
/// this process that leaves normally to die.
pub struct Embedded {
    envs: Vec<client::LaunchEnv>,
    cancel: Sender<Event>,
    handle: Option<JoinHandle<i32>>,
}

// By hand: it holds sockets, threads and handles, which have no useful text form.
impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("nodes_here", &self.envs.len())
            .finish_non_exhaustive()
    }
}

impl Embedded {
    /// What each in-process node joins with, in node order.
    pub fn envs(&self) -> &[client::LaunchEnv] {
        &self.envs
    }

    /// End the job now (the program could not join it, say): every process started is
    /// ended; `why` is printed.
    pub fn cancel(&self, why: &str) {
        let _ = self.cancel.send(Event::Cancel(why.to_owned()));
    }

    /// Wait until the job is over and every process it started has been reaped; its code.
    pub fn wait(mut self) -> i32 {
        self.handle.take().map_or(1, |h| h.join().unwrap_or(1))
    }
}

impl Drop for Embedded {
    /// A job nobody waits for is cancelled and waited for: no process outlives it.
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = self
                .cancel
                .send(Event::Cancel("the job was dropped".into()));
            let _ = h.join();
        }
    }
}

/// What the launcher thread tells the caller once the job has started (or not).
type Started = Result<(Vec<client::LaunchEnv>, Sender<Event>), LaunchError>;

/// Start a job of `plan.len()` nodes run by a launcher on a thread of this process.
///
/// # Errors
/// [`LaunchError`] saying why the job could not start (a program that cannot be started, a
/// host that cannot be reached); whatever was started is ended first.
pub fn start_embedded(opts: Opts, plan: Vec<NodeStart>) -> Result<Embedded, LaunchError> {
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<Started>(1);
    let handle = std::thread::Builder::new()
        .name("launcher".into())
        .spawn(move || {
            converse_machine::log::set_thread(converse_machine::log::Who::Charmrun);
            let in_process = plan.iter().map(|s| *s == NodeStart::InProcess).collect();
            let mut job = Job::new(&opts, in_process);
            match job.start(&plan, super::Spread::Direct) {
                Ok(()) => {
                    let _ = ready_tx.send(Ok((job.in_process.clone(), job.tx.clone())));
                    job.run()
                }
                Err(e) => {
                    job.abandon();
                    job.stop_accepting();
                    let _ = ready_tx.send(Err(e));
                    1
                }
            }
        })
        .map_err(LaunchError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok((envs, cancel))) => Ok(Embedded {
            envs,
            cancel,
            handle: Some(handle),
        }),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(LaunchError::LauncherGone)
        }
    }
}
