//! Starting a job: its secret and tag, the control socket, the address each host reaches
//! charmrun at, and one process per node — here, or through the host's remote shell — with
//! a thread watching its output and exit.

use super::control::ControlServer;
use super::job::{Job, Node, Process};
use super::{Event, LaunchError, NodeStart};
use crate::{client, output, protocol, spawn};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

impl Job<'_> {
    /// Open the control socket and start every node of `plan`. On failure, what was started
    /// so far is still in the job, for [`Job::abandon`] to end.
    pub(super) fn start(&mut self, plan: &[NodeStart]) -> Result<(), LaunchError> {
        let n = plan.len();
        raise_descriptor_limit();
        self.tag = protocol::new_tag().map_err(LaunchError::Random)?;
        let secret = protocol::new_secret().map_err(LaunchError::Random)?;
        let control = ControlServer::open(n, secret, self.tx.clone())?;
        let port = control.port();
        self.control = Some(control);
        let cwd = std::env::current_dir()
            .map_err(LaunchError::NoCurrentDir)?
            .display()
            .to_string();
        if self.opts.verbose {
            eprintln!(
                "charmrun: control port {port}, job tag {}, starting {n} node(s)",
                self.tag
            );
        }
        let routes = routes(plan)?;
        let secret_hex = protocol::secret_to_hex(&secret);
        for (i, start) in plan.iter().enumerate() {
            let charmrun = SocketAddr::new(routes[i], port).to_string();
            let (program, args, host) = match start {
                NodeStart::InProcess => {
                    self.in_process.push(client::LaunchEnv {
                        charmrun,
                        secret,
                        node: i,
                        num_nodes: n,
                        job: self.tag.clone(),
                        embedded: true,
                    });
                    self.nodes.push(Node {
                        host: client::hostname(),
                        reported: None,
                        process: Process::Embedded,
                    });
                    continue;
                }
                NodeStart::Process {
                    program,
                    args,
                    host,
                } => (program, args, host.as_ref()),
            };
            // This host by the name its nodes give it, so that one host has one name in every
            // message, the nodes' own included.
            let name = host.map_or_else(client::hostname, |h| h.name.clone());
            let mut env = vec![
                (client::ENV_CHARMRUN.to_string(), charmrun),
                (client::ENV_NODE.to_string(), i.to_string()),
                (client::ENV_NODES.to_string(), n.to_string()),
                (client::ENV_JOB.to_string(), self.tag.clone()),
            ];
            let child = match host {
                None => {
                    // Another user cannot read a local process's environment.
                    env.push((client::ENV_SECRET.to_string(), secret_hex.clone()));
                    spawn::local(program, args, &env)
                }
                Some(h) => {
                    let shell = h.shell.as_deref().unwrap_or(self.opts.remote_shell());
                    let secret = (client::ENV_SECRET, secret_hex.as_str());
                    spawn::remote(shell, &h.name, &cwd, program, args, &env, secret)
                }
            };
            let child = child.map_err(|source| LaunchError::Spawn {
                node: i,
                host: name.clone(),
                source,
            })?;
            let pid = child.id();
            // Pushed before anything else can fail, so that a failed start kills it.
            self.nodes.push(Node {
                host: name,
                reported: None,
                process: Process::Running(pid),
            });
            let prefix = if self.opts.prefix {
                self.label(i) + ": "
            } else {
                String::new()
            };
            let tx = self.tx.clone();
            // Threads of the node's own pass its output on and report its exit at once.
            let watcher = output::watch(child, prefix, self.output_over.clone(), move |st| {
                let _ = tx.send(Event::Exited(i, st));
            });
            match watcher {
                Ok(w) => self.outputs.push((i, w)),
                Err(source) => {
                    // Nobody will report its exit: kill it now, and do not wait for it.
                    let pgid = nix::unistd::Pid::from_raw(pid as i32);
                    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                    if let Some(node) = self.nodes.last_mut() {
                        node.process = Process::Gone;
                    }
                    return Err(LaunchError::Watch { node: i, source });
                }
            }
        }
        Ok(())
    }
}

/// charmrun's address as each node's host reaches it. In a job that spans hosts, a host named
/// for this machine's loopback (localhost, Debian's 127.0.1.1 entry) must still get an address
/// the other hosts can reach, since its nodes listen where they reach charmrun.
fn routes(plan: &[NodeStart]) -> Result<Vec<IpAddr>, LaunchError> {
    let mut routes: Vec<IpAddr> = Vec::with_capacity(plan.len());
    let mut known: HashMap<&str, IpAddr> = HashMap::new();
    for (i, start) in plan.iter().enumerate() {
        let ip = match start {
            NodeStart::Process { host: Some(h), .. } => match known.get(h.name.as_str()) {
                Some(ip) => *ip,
                None => {
                    let ip = spawn::address_towards(&h.name).map_err(|source| {
                        LaunchError::Unreachable {
                            host: h.name.clone(),
                            node: i,
                            source,
                        }
                    })?;
                    known.insert(&h.name, ip);
                    ip
                }
            },
            _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        routes.push(ip);
    }
    if let Some(&outward) = routes.iter().find(|a| !a.is_loopback()) {
        for r in routes.iter_mut().filter(|a| a.is_loopback()) {
            *r = outward;
        }
    }
    Ok(routes)
}

/// Each node costs charmrun about four descriptors (its two output pipes, its control
/// connection and the reader's clone of it): a few hundred nodes pass the usual soft limit of
/// 1024. Raise the soft limit to the hard one, as MPI launchers do; where that fails, the
/// first descriptor that cannot be had is an error naming the node.
fn raise_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
