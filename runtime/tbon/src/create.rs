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
//!
//! **Settings by MRNet's names** (the guide's Appendix G):
//! [`Settings::from_env`](crate::create::Settings::from_env) reads the environment variables
//! (`XPLAT_RSH`, `XPLAT_RSH_ARGS`, `XPLAT_REMCMD`, `XPLAT_RESOLVE_HOSTS`,
//! `XPLAT_RESOLVE_CANONICAL`, `MRNET_COMM_PATH`, `MRNET_STARTUP_TIMEOUT`, `MRNET_DEBUG_LEVEL`,
//! `MRNET_DEBUG_LOG_DIRECTORY`, ...), which [`create_network_fe`] does itself;
//! [`Settings::attrs`](crate::create::Settings::attrs) applies MRNet's attribute map
//! (`CreateNetworkFE`'s `attrs`) on top, so attributes win over the environment, as in MRNet,
//! and fields set afterwards win over both. A malformed value or an unknown name is refused;
//! a setting the overlay does not use (the Cray ALPS ones) is named in a one-line warning.

mod attrs;
pub use attrs::ENV_SETTINGS;

use crate::error::TbonError;
use crate::mapping::{is_this_machine, MapPolicy};
use crate::network::{attach, Network, Options};
use crate::topology::Topology;
use charmrun::launch::{start_embedded, NodeStart};
use charmrun::nodelist::Host;
use std::path::PathBuf;
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
    /// The remote shell for hosts other than this one (default `ssh`; `XPLAT_RSH`). Split
    /// into words as a shell splits it.
    pub remote_shell: String,
    /// Words after the remote shell (`XPLAT_RSH_ARGS`).
    pub remote_shell_args: Vec<String>,
    /// A command the remote shell runs under, e.g. `runauth` (`XPLAT_REMCMD`).
    pub remote_cmd: Option<Vec<String>>,
    /// Look up the topology's other hosts before starting anything, so that a host that
    /// does not resolve is refused at once (`XPLAT_RESOLVE_HOSTS`, default on); off, names
    /// go to the remote shell as written.
    pub resolve_hosts: bool,
    /// Give the remote shell each host's canonical DNS name (`XPLAT_RESOLVE_CANONICAL`,
    /// default off; only with `resolve_hosts`).
    pub resolve_canonical: bool,
    /// Each process of the network logs to a file of its own in this directory
    /// (`MRNET_DEBUG_LOG_DIRECTORY`), the front-end too when its log is not set up yet.
    pub log_directory: Option<PathBuf>,
    /// The tree overlay's log level, 0 to 5, for the processes started
    /// (`MRNET_DEBUG_LEVEL`; the front-end's own comes from its environment).
    pub debug_level: Option<u8>,
    /// MRNet's `rank_backends` (default on): see
    /// [`Options::rank_backends`](crate::Options::rank_backends).
    pub rank_backends: bool,
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
            remote_shell_args: Vec::new(),
            remote_cmd: None,
            resolve_hosts: true,
            resolve_canonical: false,
            log_directory: None,
            debug_level: None,
            rank_backends: true,
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
/// `f` on the front-end once every process is in. The settings are MRNet's environment
/// variables ([`Settings::from_env`]). Returns what `f` returns, after the network is shut
/// down and every process it started has ended.
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
/// [`TbonError::Usage`] for a malformed setting in the environment;
/// [`TbonError::Topology`] when the tree has no back-end; [`TbonError::Create`] when the
/// processes cannot be started or the root of the topology is not on this host, or the job ends badly; the errors of [`attach`].
pub fn create_network_fe<T: Send>(
    topology: &Topology,
    backend: &str,
    args: &[&str],
    f: impl FnOnce(&mut Network<'_>) -> T + Send,
) -> Result<T, TbonError> {
    let settings = Settings::from_env(backend, args)?;
    create_network_fe_with(topology, &settings, Options::default, f)
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
    converse::log::init_in(settings.log_directory.as_deref())
        .map_err(|e| TbonError::Create(e.to_string()))?;
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
    let hosts = remote_hosts(topology, settings)?;
    let env = env_for_processes(settings);
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
            // Settings given here rather than in this process's environment reach the
            // processes through `env`, locally and through the remote shell alike.
            let (program, args) = if env.is_empty() {
                (program, args.clone())
            } else {
                let mut a = env.clone();
                a.push(program);
                a.extend(args.iter().cloned());
                ("env".to_string(), a)
            };
            NodeStart::Process {
                program,
                args,
                host: hosts.get(&i).map(|name| Host {
                    name: name.clone(),
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
    opts.remote_shell = Some(settings.shell_command());
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
                    .failure_recovery(recovery)
                    .rank_backends(settings.rank_backends);
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

/// The name to give the remote shell for each process not on this machine, by node index:
/// looked up first with `resolve_hosts` (so that a host that does not resolve is refused
/// before anything starts), canonical with `resolve_canonical`.
fn remote_hosts(
    topology: &Topology,
    settings: &Settings,
) -> Result<std::collections::HashMap<usize, String>, TbonError> {
    let mut names: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut out = std::collections::HashMap::new();
    for (i, node) in topology.nodes().iter().enumerate().skip(1) {
        let host = node.host();
        if is_this_machine(host) {
            continue;
        }
        if !names.contains_key(host) {
            let name = if settings.resolve_hosts {
                resolve(host, settings.resolve_canonical)?
            } else {
                host.to_owned()
            };
            names.insert(host.to_owned(), name);
        }
        out.insert(i, names[host].clone());
    }
    Ok(out)
}

/// `host` looked up; its canonical name when `canonical` (itself when it has none).
fn resolve(host: &str, canonical: bool) -> Result<String, TbonError> {
    use std::net::ToSocketAddrs;
    let unknown = |why: String| {
        TbonError::Create(format!(
            "host {host} of the topology does not resolve ({why}); XPLAT_RESOLVE_HOSTS=0 \
             passes host names to the remote shell as written"
        ))
    };
    (host, 0)
        .to_socket_addrs()
        .map_err(|e| unknown(e.to_string()))?;
    if !canonical {
        return Ok(host.to_owned());
    }
    canonical_name(host).ok_or_else(|| unknown("no canonical name".into()))
}

/// The canonical DNS name of `host` (`getaddrinfo` with `AI_CANONNAME`).
fn canonical_name(host: &str) -> Option<String> {
    let c_host = std::ffi::CString::new(host).ok()?;
    // SAFETY: zeroed is a valid `addrinfo` (null pointers, zero numbers): a hints value.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_flags = libc::AI_CANONNAME;
    hints.ai_family = libc::AF_UNSPEC;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: `c_host` is a NUL-terminated string, `hints` a valid addrinfo, `res` an out
    // pointer; the list it fills is freed below with `freeaddrinfo`.
    let rc = unsafe { libc::getaddrinfo(c_host.as_ptr(), std::ptr::null(), &hints, &mut res) };
    if rc != 0 || res.is_null() {
        return None;
    }
    // SAFETY: `res` is the head of the list getaddrinfo returned; with AI_CANONNAME its first
    // entry's `ai_canonname` is null or a NUL-terminated string owned by the list.
    let name = unsafe {
        let p = (*res).ai_canonname;
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    };
    // SAFETY: freed once, after its last use.
    unsafe { libc::freeaddrinfo(res) };
    name.filter(|n| !n.is_empty())
}

/// `NAME=VALUE` words for the settings the processes started must see that this process's
/// environment does not already give them (the launcher passes on what is there).
fn env_for_processes(settings: &Settings) -> Vec<String> {
    let mut out = Vec::new();
    let differs = |key: &str, value: &str| std::env::var(key).ok().as_deref() != Some(value);
    if let Some(dir) = &settings.log_directory {
        let d = dir.display().to_string();
        if differs(converse::log::ENV_LOG_DIRECTORY, &d) {
            out.push(format!("{}={d}", converse::log::ENV_LOG_DIRECTORY));
        }
    }
    if let Some(level) = settings.debug_level {
        let l = level.to_string();
        if differs(converse::log::ENV_MRNET_DEBUG_LEVEL, &l) {
            out.push(format!("{}={l}", converse::log::ENV_MRNET_DEBUG_LEVEL));
        }
    }
    out
}
