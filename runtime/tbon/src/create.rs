//! A front-end that makes its network itself (MRNet's `CreateNetworkFE`), and the back-end
//! program's side (`CreateNetworkBE`).
//!
//! [`create_network_fe`] starts the tree's other processes through the launcher, run as a
//! library on a thread of the calling process, and joins the job as PE 0: the root. Each
//! process of the topology runs on the host the topology names (this machine's processes
//! directly, others through the remote shell, as charmrun does); back-ends run the back-end
//! program, internal processes run it too (the library serves as a communication process
//! there and never calls the program's back-end code: one program means nothing more to
//! install or find than MRNet's `mrnet_commnode`), or another program if the settings say so.
//! The front-end's closure runs once every process has reported in; when it returns, the
//! network is shut down, the job ends, and every process started is reaped before
//! `create_network_fe` returns.
//!
//! A back-end program's `main` is [`run_backend`]: it joins the network, and on back-ends runs
//! the closure, which receives and answers on streams.

use crate::error::TbonError;
use crate::mapping::{is_this_machine, MapPolicy};
use crate::network::{attach, Network, Options};
use crate::topology::Topology;
use charmrun::launch::{start_embedded, NodeStart};
use charmrun::nodelist::Host;
use std::sync::Mutex;
use std::time::Duration;

/// How [`create_network_fe_with`] makes the network.
#[derive(Debug)]
pub struct Settings {
    /// The back-end program.
    pub backend: String,
    /// Its arguments (the runtime's own are added).
    pub args: Vec<String>,
    /// The program internal processes run (default: the back-end program).
    pub internal: Option<String>,
    /// How long processes may take to start and connect (default 60 s).
    pub timeout: Duration,
    /// The remote shell for hosts other than this one (default `ssh`).
    pub remote_shell: String,
    /// Say what the launcher does, on standard error.
    pub verbose: bool,
    /// The layer the network's job runs on: `tcp` (the default, any hosts) or `si` (shared
    /// memory, every process on this host); any layer charmrun starts.
    pub layer: String,
    /// Runtime arguments for every process of the network, the front-end included
    /// (`+set KEY=VALUE`, ...).
    pub runtime_args: Vec<String>,
    /// Failure recovery (MRNet's `set_FailureRecovery`): `None` (the default) as the
    /// environment variable `MRNET_FAILURE_RECOVERY` says (`1` or `0`), else on. On, the job
    /// survives the death of any process but the front-end (every process runs with
    /// `+set faults=report`) and the tree recovers (see
    /// [`Network::set_failure_recovery`](crate::Network::set_failure_recovery)); off, any
    /// death ends the job, as MRNet without recovery does (unless `runtime_args` ask for
    /// report mode themselves: then the front-end is told, and the streams fail).
    pub failure_recovery: Option<bool>,
}

impl Settings {
    /// Run `backend` with `args` on the back-ends (and internal processes).
    pub fn new(backend: &str, args: &[&str]) -> Settings {
        Settings {
            backend: backend.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            internal: None,
            timeout: Duration::from_secs(60),
            remote_shell: "ssh".into(),
            verbose: false,
            layer: "tcp".into(),
            runtime_args: Vec::new(),
            failure_recovery: None,
        }
    }
}

/// One network at a time per process: the launcher's node environment is per process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Make the network `topology` describes, running `backend args` as its back-ends, and run
/// `f` on the front-end once every process is in. Returns what `f` returns, after the
/// network is shut down and every process it started has ended.
///
/// ```no_run
/// use converse_tbon::{create::create_network_fe, topology_file, SyncMode, TbonError};
/// let topo = topology_file::load("tree.top".as_ref()).unwrap();
/// let sum = create_network_fe(&topo, "./my_backend", &[], |net| -> Result<i32, TbonError> {
///     let comm = net.broadcast_communicator();
///     let s = net.new_stream(&comm, converse_tbon::TFILTER_SUM, SyncMode::WaitForAll, 0)?;
///     net.send(&s, 100, "%d", 1)?;
///     Ok(net.recv_on(&s)?.unpack("%d")?)
/// });
/// ```
///
/// # Errors
/// [`TbonError::Topology`] when the tree has no back-end; [`TbonError::Create`] when the
/// processes cannot be started or the root of the topology is not on this host, or the job ends badly; the errors of [`attach`].
pub fn create_network_fe<T: Send>(
    topology: &Topology,
    backend: &str,
    args: &[&str],
    f: impl FnOnce(&mut Network<'_>) -> T + Send,
) -> Result<T, TbonError> {
    create_network_fe_with(topology, &Settings::new(backend, args), Options::default, f)
}

/// As [`create_network_fe`], with settings, and the overlay's options (filters compiled into
/// the front-end; the back-end program must register the same ones, see
/// [`run_backend_with`](crate::run_backend_with)).
///
/// # Errors
/// As [`create_network_fe`].
pub fn create_network_fe_with<T: Send>(
    topology: &Topology,
    settings: &Settings,
    options: impl Fn() -> Options + Sync,
    f: impl FnOnce(&mut Network<'_>) -> T + Send,
) -> Result<T, TbonError> {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Before starting anything, so that the launcher logs too; a malformed CONVERSE_LOG is
    // refused here rather than after the back-ends are started.
    converse::log::init().map_err(|e| TbonError::Create(e.to_string()))?;
    // Before starting anything: a front-end alone would wait forever for its back-ends.
    topology.require_backends()?;
    let root = topology.root();
    if !is_this_machine(root.host()) {
        return Err(TbonError::Create(format!(
            "the topology's root {} is on host {}, but the front-end runs on {}",
            root.name(),
            root.host(),
            converse_bootstrap::client::hostname()
        )));
    }
    let recovery = match settings.failure_recovery {
        Some(on) => on,
        None => crate::network::recovery_from_env()?,
    };
    let mut runtime_args = settings.runtime_args.clone();
    if recovery {
        runtime_args.extend(["+set".to_string(), "faults=report".into()]);
    }
    let mut args = settings.args.clone();
    let layer = settings.layer.clone();
    args.extend(["+machine".to_string(), layer.clone(), "+quiet".into()]);
    args.extend(runtime_args.iter().cloned());
    let plan: Vec<NodeStart> = topology
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, node)| {
            if i == 0 {
                return NodeStart::InProcess;
            }
            let program = match (&settings.internal, node.num_children()) {
                (Some(p), c) if c > 0 => p.clone(),
                _ => settings.backend.clone(),
            };
            NodeStart::Process {
                program,
                args: args.clone(),
                host: (!is_this_machine(node.host())).then(|| Host {
                    name: node.host().to_owned(),
                    cpus: 1,
                    shell: None,
                }),
            }
        })
        .collect();
    let n = plan.len();
    tracing::debug!(target: "tbon", processes = n, layer = %layer, "starting the network's job");
    let mut opts = charmrun::opts::Opts::with_pes(n);
    opts.timeout = settings.timeout;
    opts.remote_shell = Some(settings.remote_shell.clone());
    opts.verbose = settings.verbose;
    let job = start_embedded(opts, plan).map_err(|e| TbonError::Create(e.to_string()))?;
    let Some(env) = job.envs().first().cloned() else {
        job.cancel("internal: the front-end has no place in its own job");
        return Err(TbonError::Create("the job has no front-end".into()));
    };
    let result: Mutex<Option<Result<T, TbonError>>> = Mutex::new(None);
    let f = Mutex::new(Some(f));
    let ran = converse::Runtime::builder()
        .program_args(["tbon-front-end"])
        .pes(n)
        .layer(&layer)
        .quiet(true)
        .runtime_args(&runtime_args)
        .map(|b| b.launch(env))
        .and_then(converse::RuntimeBuilder::build)
        .and_then(|rt| {
            rt.run(|pe| {
                let opts = options()
                    .policy(MapPolicy::InOrder)
                    .failure_recovery(recovery);
                let failed = match attach(pe, opts, |_| Ok(topology.clone())) {
                    Ok(mut net) => {
                        let user = f.lock().ok().and_then(|mut g| g.take());
                        if let Some(user) = user {
                            let v = user(&mut net);
                            if let Ok(mut r) = result.lock() {
                                *r = Some(Ok(v));
                            }
                        }
                        let _ = net.shutdown();
                        None
                    }
                    Err(e) => Some(e),
                };
                if let Some(e) = failed {
                    if let Ok(mut r) = result.lock() {
                        *r = Some(Err(e));
                    }
                }
                pe.exit(0);
            })
        });
    if let Err(e) = &ran {
        job.cancel(&format!("the front-end failed: {e}"));
    }
    let code = job.wait();
    let outcome = result.into_inner().ok().flatten();
    match (ran, outcome) {
        (Err(e), _) => Err(TbonError::Create(e.to_string())),
        (Ok(_), Some(r)) if code == 0 => r,
        (Ok(_), Some(Err(e))) => Err(e),
        (Ok(_), _) => Err(TbonError::Create(format!(
            "the network's job ended with code {code}"
        ))),
    }
}
