//! Laying a tree over a running job: the options, and [`attach`], which every PE calls.

use super::Network;
use crate::error::TbonError;
use crate::filter::Filter;
use crate::mapping::{map_to_pes, MapPolicy};
use crate::node::{after_handler, install};
use crate::protocol::Ctl;
use crate::topology::Topology;
use converse::Pe;
use converse_endpoint::Secret;
use std::rc::Rc;

/// How a network is laid over a job.
#[derive(Default)]
pub struct Options {
    policy: MapPolicy,
    filters: Vec<(String, Rc<dyn Filter>)>,
    failure_recovery: Option<bool>,
    attach_backends: bool,
    /// MRNet's `rank_backends = false`.
    backends_by_name: bool,
}

// By hand: it holds closures and the overlay's state, which have no useful text form.
impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options").finish_non_exhaustive()
    }
}

impl Options {
    /// How tree processes are matched with PEs (by host, the default, or in order).
    pub fn policy(mut self, p: MapPolicy) -> Options {
        self.policy = p;
        self
    }

    /// Failure recovery on or off from the start (MRNet's `set_FailureRecovery`, here before
    /// the network exists; [`Network::set_failure_recovery`] changes it later). Unset: as the
    /// environment variable `MRNET_FAILURE_RECOVERY` says (`1` or `0`), else on. It takes
    /// effect only in a job that survives node failures (see [`attach`]).
    pub fn failure_recovery(mut self, on: bool) -> Options {
        self.failure_recovery = Some(on);
        self
    }

    /// Back-end attach mode (MRNet's, instantiation mode 2): every process of the topology
    /// is internal, and back-ends started apart — by `mpirun` for the application a tool
    /// watches, by `srun`, by hand on another host — attach to its leaves later, each under
    /// a rank of its own choosing ([`BackEnd::attach`](crate::BackEnd::attach), or the C
    /// library). The front-end learns where the leaves listen from
    /// [`Network::attach_points`] (and writes them for the back-ends with
    /// [`Network::write_attach_file`]); each back-end that joins is an
    /// [`EventKind::BackendAdded`](crate::EventKind::BackendAdded) event, and communicators
    /// made after it include it ([`Network::wait_for_backends`] waits for a number of them).
    pub fn attach_backends(mut self, on: bool) -> Options {
        self.attach_backends = on;
        self
    }

    /// MRNet's `rank_backends` (on by default): back-ends ranked `0 .. B` from left to right,
    /// as MPI ranks processes. Off, each back-end is ranked as MRNet ranks it without
    /// `rank_backends`: by the place of its name (`host:instance`, compared as text) among
    /// the names of every process of the topology, from 0, so the ranks have gaps where the
    /// front-end and internal processes fall. Those stay ranked from
    /// [`FIRST_INTERNAL_RANK`](crate::FIRST_INTERNAL_RANK), where MRNet numbers them in the
    /// same sequence: here a rank below it is what makes a back-end (and its singlecast
    /// stream's id). Only PE 0's choice counts; no effect in attach mode, where back-ends
    /// choose their ranks.
    pub fn rank_backends(mut self, on: bool) -> Options {
        self.backends_by_name = !on;
        self
    }

    /// A filter compiled into the program, under `name`. Every process must register the same
    /// filters in the same order (they get ids from
    /// [`FIRST_USER_FILTER`](crate::FIRST_USER_FILTER) up, in that order); for filters only
    /// some programs have, load them from a library instead
    /// ([`Network::load_filter`]).
    pub fn filter(mut self, name: &str, f: impl Filter + 'static) -> Options {
        self.filters.push((name.to_owned(), Rc::new(f)));
        self
    }
}

/// Lay a tree over the job this PE belongs to (MRNet's back-end attach mode: the processes are
/// already running, started by charmrun, mpirun or the in-process layer).
///
/// Every PE calls it in its start function, after registering its own handlers (which must be
/// the same on every PE, as always). On PE 0, the front-end, `topology` gives the tree; PE 0
/// maps it onto the PEs, tells every PE its place and waits until every process of the tree
/// has reported in (the instantiation). Other PEs wait for their place. PEs the tree does not
/// use get the role [`Role::Spare`](crate::Role::Spare).
///
/// ```no_run
/// use converse_tbon::{self as tbon, topgen, Options, SyncMode, TFILTER_SUM};
/// converse::run(|pe| {
///     let n = pe.num_pes();
///     let mut net = tbon::attach(pe, Options::default(), |_| {
///         let spec = topgen::TreeSpec::Generic(vec![2, (n - 3) / 2]);
///         Ok(topgen::generate(&spec, &topgen::Placement::default())?)
///     })
///     .expect("attach");
///     if net.is_front_end() {
///         let comm = net.broadcast_communicator();
///         let s = net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, 0).unwrap();
///         net.send(&s, 100, "%d", 1).unwrap();
///         let sum: i32 = net.recv_on(&s).unwrap().unpack("%d").unwrap();
///         println!("{sum} back-ends answered");
///         net.exit(0);
///     } else if net.is_back_end() {
///         let (s, p) = net.recv().unwrap();
///         let v: i32 = p.unpack("%d").unwrap();
///         net.send(&s, 100, "%d", v).unwrap();
///         let _ = net.wait_for_shutdown();
///     } else {
///         let _ = net.wait_for_shutdown();
///     }
/// });
/// ```
///
/// **Failure recovery** (on by default, see [`Options::failure_recovery`]) needs a job that
/// survives node failures: one whose runtime was built with
/// [`survive_node_failures(true)`](converse::RuntimeBuilder::survive_node_failures), or
/// started with `+set faults=report` on every process. The overlay cannot turn that on once
/// the runtime runs; in a job without it, any process's death ends the job as always, and
/// [`Network::failure_recovery`] says `false`. ([`create_network_fe`](crate::create_network_fe)
/// asks for it itself when recovery is on.)
///
/// # Errors
/// [`TbonError::Usage`] on PE 0 when `MRNET_FAILURE_RECOVERY` is neither `1` nor `0`;
/// [`TbonError::Topology`] or [`TbonError::Mapping`] on PE 0 when the tree is wrong, has no
/// back-end or does not fit; on other PEs [`TbonError::Create`] with PE 0's reason; [`TbonError::AlreadyAttached`];
/// [`TbonError::JobEnded`].
pub fn attach<'p>(
    pe: &'p mut Pe,
    opts: Options,
    topology: impl FnOnce(&Pe) -> Result<Topology, TbonError>,
) -> Result<Network<'p>, TbonError> {
    let node = install(pe)?;
    if opts.attach_backends {
        crate::node::endpoints(pe, &node);
    }
    let wanted = match opts.failure_recovery {
        Some(on) => Ok(on),
        None => recovery_from_env(),
    };
    {
        let weak = Rc::downgrade(&node);
        pe.on_node_failure(move |pe, failure| {
            let Some(node) = weak.upgrade() else { return };
            if let Ok(mut n) = node.try_borrow_mut() {
                n.on_failure(pe, failure, &weak);
            }
            after_handler(&node);
        });
    }
    {
        let mut n = node.borrow_mut();
        // The front-end's choice; elsewhere on until the front-end says otherwise.
        let on = if pe.my_pe() == 0 {
            *wanted.as_ref().unwrap_or(&true)
        } else {
            true
        };
        n.recovery.on = on && pe.survives_node_failures();
        for (name, f) in opts.filters {
            let id = n.next_filter;
            n.filters.insert(id, (name, f));
            n.next_filter += 1;
        }
    }
    let ctl = node.borrow().h.ctl;
    let mut net = Network {
        pe,
        node,
        topo: None,
        last_format: Default::default(),
    };
    if net.pe.my_pe() == 0 {
        let attach_mode = opts.attach_backends;
        let plan = wanted.and_then(|_| topology(net.pe)).and_then(|t| {
            // A front-end alone would wait forever for replies nobody sends (in attach
            // mode: it has no leaf to attach to).
            t.require_backends()?;
            let hosts = pe_hosts(net.pe);
            let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
            let pes = map_to_pes(&t, &host_refs, opts.policy)?;
            let tree = t
                .nodes()
                .iter()
                .map(|n| (n.name().clone(), n.parent()))
                .collect();
            let attach = if attach_mode {
                let s = Secret::generate().map_err(|e| TbonError::Create(e.to_string()))?;
                Some(s.to_hex())
            } else {
                None
            };
            Ok(Ctl::Plan {
                tree,
                pes,
                attach,
                by_name: opts.backends_by_name,
            })
        });
        match plan {
            // The front-end takes the plan first; it goes down the tree from there.
            Ok(plan) => net.pe.send(0, ctl, &plan.encode()),
            Err(e) => {
                let reason = Ctl::Abandon {
                    reason: e.to_string(),
                };
                net.pe.broadcast(ctl, &reason.encode());
                return Err(e);
            }
        }
        net.wait_for(|n| n.ready || n.abandoned.is_some())?;
    } else {
        net.wait_for(|n| n.place.is_some() || n.abandoned.is_some())?;
        // A leaf of an attach-mode tree listens now, then reports in.
        crate::node::listen(net.pe, &net.node);
    }
    let abandoned = net.node.borrow().abandoned.clone();
    if let Some(reason) = abandoned {
        // Nothing to shut down (dropping the front-end's `Network` would otherwise ask the
        // processes of a network that was never made, and wait for them).
        net.node.borrow_mut().shut_down = true;
        return Err(TbonError::Create(reason));
    }
    net.topo = net.node.borrow().place.as_ref().map(|p| p.topo.clone());
    if net.pe.my_pe() == 0 && net.pe.survives_node_failures() && !net.node.borrow().recovery.on {
        // Every process starts with recovery on (in a job that survives failures): only
        // the front-end's choice to turn it off has to be told, so making a network with
        // recovery on costs no extra round trip.
        net.request(None, crate::protocol::Req::Recovery { on: false })?;
    }
    Ok(net)
}

/// `MRNET_FAILURE_RECOVERY`: `1` on, `0` off, unset on.
///
/// # Errors
/// [`TbonError::Usage`] for any other value.
pub(crate) fn recovery_from_env() -> Result<bool, TbonError> {
    recovery_value(std::env::var("MRNET_FAILURE_RECOVERY"))
}

/// What a value of `MRNET_FAILURE_RECOVERY` says.
fn recovery_value(v: Result<String, std::env::VarError>) -> Result<bool, TbonError> {
    let bad = |v: &dyn std::fmt::Debug| {
        TbonError::Usage(format!(
            "MRNET_FAILURE_RECOVERY is {v:?}: it must be 1 (failure recovery on) or 0 (off)"
        ))
    };
    match v {
        Err(std::env::VarError::NotPresent) => Ok(true),
        Ok(v) if v.trim() == "1" => Ok(true),
        Ok(v) if v.trim() == "0" => Ok(false),
        Ok(v) => Err(bad(&v)),
        Err(std::env::VarError::NotUnicode(v)) => Err(bad(&v)),
    }
}

/// The host of every PE (one PE per node).
fn pe_hosts(pe: &Pe) -> Vec<String> {
    let t = pe.node_table();
    (0..pe.num_pes())
        .map(|p| {
            t.node(t.node_of(p))
                .map_or_else(|| "localhost".to_owned(), |n| n.host.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::env::VarError;

    #[test]
    fn the_environment_variable_says_1_or_0_and_nothing_else() {
        assert!(matches!(
            recovery_value(Err(VarError::NotPresent)),
            Ok(true)
        ));
        assert!(matches!(recovery_value(Ok("1".into())), Ok(true)));
        assert!(matches!(recovery_value(Ok(" 0\n".into())), Ok(false)));
        for v in ["", "yes", "2", "off"] {
            let e = recovery_value(Ok(v.into())).map_err(|e| e.to_string());
            let Err(e) = e else {
                panic!("{v:?} accepted");
            };
            assert!(
                e.contains("MRNET_FAILURE_RECOVERY") && e.contains("must be 1"),
                "{e}"
            );
        }
    }
}
