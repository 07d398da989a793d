//! The launcher session, written once: what every launched layer shares.
//!
//! A layer brings its transport's mechanics ([`Part`]) and its two boot phases ([`Open`]);
//! everything between it and the launcher is here:
//!
//! ```text
//! boot::<O>(name, cfg):                  Launched<P> (a Machine):
//!   reach the launcher (Control)            send     = refuse a dead peer; part.send; judge
//!   o = O::open(cfg, env, launcher)         advance  = deaths the launcher reported; part.advance; judge
//!   table = launcher.exchange(o.info())     barrier  = the launcher's, driving part.advance / part.nap
//!   part = o.connect(env, table, launcher)  exit     = part.leave, then tell the launcher
//!   Launched { part, session }              abort    = the launcher's
//! ```
//!
//! A composite (shared memory inside a host, a network between hosts) is one more [`Open`]
//! whose part drives two parts: so a plain layer is the one-part case of it, and neither
//! knows the launcher. "Judge" is report mode (`faults=report`, the contract's "Report mode"):
//! a peer's death the part finds is told to the launcher once, the part forgets the peer,
//! and the error goes up as the report; off report mode it is a single untaken branch.

use crate::client::{Control, LaunchEnv};
use crate::deaths::DeadPeers;
use crate::Bootstrap;
use converse_machine::{
    BootConfig, Machine, MachineError, Message, NodeTable, Part, Transport, Wake,
};
use std::sync::Arc;
use std::time::Duration;

/// A launched layer between the two phases of its boot (timely's builder, Mercury's
/// `NA_Initialize` then `NA_Addr_lookup`): its listener, socket or port exists, and
/// [`info`](Self::info) says how peers reach it.
pub trait Open: Sized {
    /// The transport this becomes.
    type Part: Part + 'static;

    /// Make the listener, socket or port: the layer's settings from `cfg`, this node and the
    /// job's tag from `env`, the address to bind on from `launcher`.
    ///
    /// # Errors
    /// [`MachineError::Setting`] for a bad setting of the layer's; [`MachineError::Io`] when
    /// the interconnect cannot be set up.
    fn open(
        cfg: &BootConfig,
        env: &LaunchEnv,
        launcher: &dyn Bootstrap,
    ) -> Result<Self, MachineError>;

    /// This node's info for the node table: how peers reach it.
    fn info(&self) -> Vec<u8>;

    /// Finish with the node table: every node's `addr` is what its [`info`](Self::info)
    /// gave, or empty for a node this part does not serve (a composite gives each part only
    /// its peers). `launcher` is there for a barrier every node meets while connecting (all
    /// nodes call `connect`).
    ///
    /// # Errors
    /// [`MachineError::Boot`] for a table this layer cannot run (a malformed address, a job
    /// across hosts for a one-host layer); [`MachineError::Io`] from the interconnect.
    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        launcher: &dyn Bootstrap,
    ) -> Result<Self::Part, MachineError>;
}

/// Boot the launched layer called `name` whose boot phases are `O`, under charmrun: the boot
/// function of every layer charmrun starts (`boot::<TcpOpen>`), composites included.
///
/// # Errors
/// [`MachineError::Boot`] when charmrun did not start this process or start-up fails; `O`'s
/// errors.
pub fn boot<O: Open>(
    name: &'static str,
    cfg: &BootConfig,
) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    let env = LaunchEnv::for_boot(cfg)?;
    let launcher = Control::connect(&env)?;
    boot_under::<O>(name, cfg, &env, Box::new(launcher))
}

/// [`boot`] under any launcher: `env` is the launch context it gave (this node, the job's
/// size and tag), `launcher` the session's [`Bootstrap`] (`si+mpi`'s is MPI itself).
///
/// # Errors
/// As [`boot`].
pub fn boot_under<O: Open>(
    name: &'static str,
    cfg: &BootConfig,
    env: &LaunchEnv,
    mut launcher: Box<dyn Bootstrap>,
) -> Result<Vec<Box<dyn Machine>>, MachineError> {
    let report = cfg.settings.reports_deaths()?;
    let open = O::open(cfg, env, &*launcher)?;
    let table = launcher.exchange(open.info())?;
    check_pes(&table, cfg.pes_per_node)?;
    let launcher: Arc<dyn Bootstrap> = Arc::from(launcher);
    let part = open.connect(env, table, &*launcher)?;
    let m = Launched::new(name, part, launcher, report)?;
    Ok(vec![Box::new(m)])
}

/// Check that the table holds `pes_per_node` PEs on every node, as `+ppn` says.
///
/// # Errors
/// [`MachineError::Boot`] when it does not.
pub fn check_pes(table: &NodeTable, pes_per_node: usize) -> Result<(), MachineError> {
    if table.num_pes() == table.num_nodes() * pes_per_node {
        return Ok(());
    }
    Err(MachineError::Boot(format!(
        "the node table has {} PEs on {} nodes, but +ppn is {}",
        table.num_pes(),
        table.num_nodes(),
        pes_per_node
    )))
}

/// A launched layer's node: its transport `P`, driven by the launcher session.
pub struct Launched<P: Part> {
    name: &'static str,
    part: P,
    launcher: Arc<dyn Bootstrap>,
    /// Peers out of the job, in report mode.
    dead: DeadPeers,
    /// In the exit barrier or after: peers released first close as they leave, which is no
    /// death to tell the launcher.
    leaving: bool,
}

// By hand: the part's working state has no useful text form.
impl<P: Part> std::fmt::Debug for Launched<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launched")
            .field("layer", &self.name)
            .field("node", &self.part.my_node())
            .finish_non_exhaustive()
    }
}

impl<P: Part> Launched<P> {
    /// `part` as the layer `name`'s node, under `launcher`; `report` is report mode
    /// (`faults=report`): the launcher is asked to report deaths and to ring the part's
    /// waker when it does.
    ///
    /// # Errors
    /// [`MachineError::Boot`] in report mode for a part whose wait cannot be ended;
    /// [`MachineError::Io`] when the launcher cannot be told.
    pub fn new(
        name: &'static str,
        part: P,
        launcher: Arc<dyn Bootstrap>,
        report: bool,
    ) -> Result<Launched<P>, MachineError> {
        // The barrier loop naps in the layer's wait: a release must end the nap (the last
        // node into the exit barrier otherwise saw it up to a nap, 1 ms, late — every job).
        if let Some(w) = part.waker() {
            launcher.wake_on_release(w);
        }
        let dead = if report {
            let Some(waker) = part.waker() else {
                return Err(MachineError::Boot(
                    "report mode needs a layer whose wait can be ended".into(),
                ));
            };
            DeadPeers::start(&*launcher, part.table().num_nodes(), waker)?
        } else {
            DeadPeers::default()
        };
        Ok(Launched {
            name,
            part,
            launcher,
            dead,
            leaving: false,
        })
    }

    /// Report mode: a peer's death found by `r` is reported (the launcher told, the part
    /// forgets the peer); every other error stays what it is. Silence past a layer's bound
    /// is a death in report mode (the contract says `PeerSilent` is not used there).
    #[cold]
    fn judge(&mut self, e: MachineError) -> MachineError {
        let e = match e {
            MachineError::PeerSilent {
                node,
                secs,
                setting,
                ..
            } if self.dead.reporting() => MachineError::peer_dead(
                self.part.table(),
                node,
                format!("it sent nothing for {secs:.1} s with data outstanding ({setting})"),
            ),
            e => e,
        };
        if let Some(node) = self.dead.judge(&*self.launcher, self.leaving, &e) {
            self.part.forget(node);
        }
        e
    }
}

impl<P: Part> Transport for Launched<P> {
    fn layer(&self) -> &'static str {
        self.name
    }

    fn my_node(&self) -> usize {
        self.part.my_node()
    }

    fn table(&self) -> &NodeTable {
        self.part.table()
    }

    #[inline]
    fn send(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        // Off report mode, a bounds check of an empty list.
        self.dead.check(self.part.table(), node)?;
        self.part.send(node, msg).map_err(|e| self.judge(e))
    }

    #[inline]
    fn queued(&self, node: usize) -> usize {
        self.part.queued(node)
    }

    fn in_transfer(&self) -> bool {
        self.part.in_transfer()
    }

    #[inline]
    fn flush(&mut self) -> Result<(), MachineError> {
        self.part.flush().map_err(|e| self.judge(e))
    }

    fn max_unpolled(&self) -> Option<Duration> {
        self.part.max_unpolled()
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        self.part.waker()
    }

    fn rma(&self) -> Option<Arc<dyn converse_machine::Rma>> {
        self.part.rma()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.part.counters()
    }

    #[inline]
    fn advance(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<usize, MachineError> {
        // Off report mode, one untaken branch.
        if let Some((node, why)) = self.dead.reported(&*self.launcher) {
            self.part.forget(node);
            return Err(MachineError::peer_dead(self.part.table(), node, why));
        }
        self.part.advance(deliver).map_err(|e| self.judge(e))
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), MachineError> {
        self.part.wait(timeout).map_err(|e| self.judge(e))
    }
}

/// Idle turns of the barrier's loop (nothing arrived, nothing part-way out) after which it
/// stops napping in the layer and waits on the launcher's release instead.
const BARRIER_IDLE_TURNS: u32 = 16;

/// The longest of those waits: how late an arrival may be noticed meanwhile.
const BARRIER_LONGEST_WAIT: Duration = Duration::from_millis(64);

impl<P: Part> Launched<P> {
    /// The exit barrier: keep the interconnect moving (naps in the layer, which end when
    /// something arrives) while there is traffic; once there has been none for
    /// [`BARRIER_IDLE_TURNS`] turns, wait on the launcher's release itself, from 1 ms doubling
    /// to [`BARRIER_LONGEST_WAIT`], between looks at the layer. A thousand nodes waiting for
    /// the last one would otherwise each wake every millisecond: on a host with fewer cores
    /// than nodes, that crowd took the cores from the nodes still working (1,024 nodes on
    /// 2 cores spent 6 s in the exit barrier).
    fn barrier_loop(
        &mut self,
        launcher: &dyn Bootstrap,
        deliver: &mut dyn FnMut(Message),
    ) -> Result<(), MachineError> {
        let ticket = launcher.barrier_begin()?;
        let mut idle = 0u32;
        loop {
            let mut came = 0usize;
            let r = self.advance(&mut |m| {
                came += 1;
                deliver(m);
            });
            let r = self.dead.in_barrier(r).and_then(|()| {
                if came > 0 || self.part.in_transfer() {
                    idle = 0;
                } else {
                    idle = idle.saturating_add(1);
                }
                if idle < BARRIER_IDLE_TURNS {
                    self.part.nap()
                } else {
                    Ok(())
                }
            });
            if let Err(e) = r {
                // A peer released first may already have left and closed its end.
                return if launcher.released(ticket, crate::BARRIER_GRACE) {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            let wait = if idle < BARRIER_IDLE_TURNS {
                Duration::ZERO
            } else {
                let doublings = (idle - BARRIER_IDLE_TURNS).min(6);
                Duration::from_millis(1 << doublings).min(BARRIER_LONGEST_WAIT)
            };
            if launcher.released(ticket, wait) {
                return Ok(());
            }
        }
    }
}

impl<P: Part> Machine for Launched<P> {
    fn barrier(&mut self, deliver: &mut dyn FnMut(Message)) -> Result<(), MachineError> {
        // Keep the interconnect moving while others catch up: what the part still holds may
        // be what a peer needs to reach the barrier (its exit, say). In report mode a death
        // then changes nothing: the launcher counts the dead as arrived.
        self.part.barrier_mode(true);
        self.leaving = true;
        let launcher = Arc::clone(&self.launcher);
        let r = self.barrier_loop(&*launcher, deliver);
        self.part.barrier_mode(false);
        r
    }

    fn exit(&mut self, code: i32) -> Result<(), MachineError> {
        let left = self.part.leave();
        // The launcher hears the exit whatever the part said: the job is over either way.
        let told = self.launcher.ending(code);
        left.and(told)
    }

    fn abort(&mut self, reason: &str) -> ! {
        self.launcher.abort(reason)
    }
}
