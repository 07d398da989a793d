//! Starting a job: its secret and tag, the control socket, the address each host reaches
//! charmrun at, and one process per node — here, or through the host's remote shell — with
//! a thread watching its output and exit.

use super::control::ControlServer;
use super::fleet::{Fleet, ShellCmd};
use super::job::{Job, Node, Process, ShellCtx};
use super::{Event, LaunchError, NodeStart, Spread};
use crate::{agent, client, output, protocol, spawn};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

impl Job<'_> {
    /// Open the control socket and start every node of `plan`. On failure, what was started
    /// so far is still in the job, for [`Job::abandon`] to end.
    pub(super) fn start(&mut self, plan: &[NodeStart], spread: Spread) -> Result<(), LaunchError> {
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
            converse_machine::input::error_line(&format!(
                "charmrun: control port {port}, job tag {}, starting {n} node(s)",
                self.tag
            ));
        }
        let routes = routes(plan)?;
        let secret_hex = protocol::secret_to_hex(&secret);
        let mut fleet = match spread {
            Spread::Direct => Fleet::default(),
            Spread::PerHost => {
                let mut f = Fleet::per_host(plan, self.opts.remote_shell(), |_, i| Ok(routes[i]))?;
                f.arrange_tree(Some(self.opts.fanout));
                f
            }
            Spread::Launcher {
                words,
                agents,
                hosts,
            } => {
                let route = match hosts.as_ref().and_then(|h| h.first()) {
                    Some(h) => spawn::address_towards(h)
                        .ok()
                        .filter(|a| !a.is_loopback())
                        .unwrap_or_else(spawn::outward_address),
                    None => spawn::outward_address(),
                };
                Fleet::launcher(words, n, agents, hosts.as_deref(), route)
            }
        };
        fleet.batch = self.opts.batch;
        self.plan = plan.to_vec();
        self.shell_ctx = Some(ShellCtx {
            port,
            secret_hex: secret_hex.clone(),
            cwd: cwd.clone(),
        });
        for (i, start) in plan.iter().enumerate() {
            let charmrun = SocketAddr::new(routes[i], port).to_string();
            let node = match (fleet.agent_of(i), start) {
                (Some(a), _) => Node {
                    host: fleet.agents[a].host.clone(),
                    reported: None,
                    process: Process::Gone,
                    // What its agent's shell says comes up through the shell of the agent
                    // charmrun started.
                    tail: Some(
                        fleet.shells[fleet.agents[fleet.top_of(a)].shell]
                            .stderr_tail
                            .clone(),
                    ),
                },
                (None, NodeStart::InProcess) => {
                    self.in_process.push(client::LaunchEnv {
                        charmrun,
                        secret,
                        node: i,
                        num_nodes: n,
                        job: self.tag.clone(),
                        embedded: true,
                    });
                    Node {
                        host: client::hostname(),
                        reported: None,
                        process: Process::Embedded,
                        tail: None,
                    }
                }
                (None, NodeStart::Process { host, .. }) => {
                    // Through a remote shell only when a host is named; `++batch` bounds how
                    // many of those start at once.
                    if host.is_some() && self.opts.batch.is_some() {
                        self.queued_nodes.push_back(i);
                    } else {
                        self.to_start.push(i);
                    }
                    Node {
                        // This host by the name its nodes give it, so that one host has one
                        // name in every message, the nodes' own included.
                        host: host
                            .as_ref()
                            .map_or_else(client::hostname, |h| h.name.clone()),
                        reported: None,
                        process: Process::Gone,
                        tail: host.as_ref().map(|_| output::Tail::default()),
                    }
                }
            };
            self.nodes.push(node);
        }
        self.routes = routes;
        for i in std::mem::take(&mut self.to_start) {
            self.start_node(i)?;
        }
        self.start_queued_nodes()?;
        self.fleet = fleet;
        self.start_shells()
    }

    /// Start the nodes waiting for their remote shell that `++batch` leaves room for: a shell
    /// is starting until its node connects or it exits.
    pub(super) fn start_queued_nodes(&mut self) -> Result<(), LaunchError> {
        let Some(batch) = self.opts.batch else {
            return Ok(());
        };
        while !self.queued_nodes.is_empty() {
            let starting = (0..self.nodes.len())
                .filter(|&i| {
                    matches!(self.nodes[i].process, Process::Running(_))
                        && self.nodes[i].tail.is_some()
                        && self.verdict.state(i) == Some(&super::verdict::NodeState::Starting)
                })
                .count();
            if starting >= batch {
                break;
            }
            if let Some(i) = self.queued_nodes.pop_front() {
                self.start_node(i)?;
            }
        }
        Ok(())
    }

    /// Where a node or agent reaches charmrun: the address of this host on the route to it,
    /// or with `++usehostname` this host's name (resolved there, as Charm++'s charmrun lets
    /// nodes do where addresses differ by network).
    fn reach_me(&self, route: std::net::IpAddr, port: u16) -> String {
        if self.opts.usehostname {
            format!("{}:{port}", client::hostname())
        } else {
            SocketAddr::new(route, port).to_string()
        }
    }

    /// Start node `i`'s process: here, or through its host's remote shell.
    fn start_node(&mut self, i: usize) -> Result<(), LaunchError> {
        let Some(NodeStart::Process {
            program,
            args,
            host,
        }) = self.plan.get(i).cloned()
        else {
            return Ok(());
        };
        let Some(ctx) = self.shell_ctx.clone() else {
            return Ok(());
        };
        let n = self.nodes.len();
        let charmrun = self.reach_me(self.routes[i], ctx.port);
        let mut env = vec![
            (client::ENV_CHARMRUN.to_string(), charmrun),
            (client::ENV_NODE.to_string(), i.to_string()),
            (client::ENV_NODES.to_string(), n.to_string()),
            (client::ENV_JOB.to_string(), self.tag.clone()),
        ];
        env.extend(converse_machine::log::passed_on());
        let child = match &host {
            None => {
                // Another user cannot read a local process's environment.
                env.push((client::ENV_SECRET.to_string(), ctx.secret_hex.clone()));
                spawn::local(&program, &args, &env)
            }
            Some(h) => {
                let shell = h.shell.as_deref().unwrap_or(self.opts.remote_shell());
                let secret = (client::ENV_SECRET, ctx.secret_hex.as_str());
                spawn::remote(shell, &h.name, &ctx.cwd, &program, &args, &env, secret)
            }
        };
        let child = child.map_err(|source| LaunchError::Spawn {
            node: i,
            host: self.nodes[i].host.clone(),
            source,
        })?;
        let pid = child.id();
        // Set before anything else can fail, so that a failed start kills it.
        self.nodes[i].process = Process::Running(pid);
        let prefix = if self.opts.prefix {
            self.label(i) + ": "
        } else {
            String::new()
        };
        let tx = self.tx.clone();
        let tail = self.nodes[i].tail.clone();
        // Threads of the node's own pass its output on and report its exit at once.
        let watcher =
            output::watch_keeping(child, prefix, self.output_over.clone(), tail, move |st| {
                let _ = tx.send(Event::Exited(i, st));
            });
        match watcher {
            Ok(w) => self.outputs.push((i, w)),
            Err(source) => {
                // Nobody will report its exit: kill it now, and do not wait for it.
                let pgid = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                self.nodes[i].process = Process::Gone;
                return Err(LaunchError::Watch { node: i, source });
            }
        }
        Ok(())
    }

    /// Start the agents' shells `++batch` leaves room for (all of them without it).
    pub(super) fn start_shells(&mut self) -> Result<(), LaunchError> {
        let Some(ctx) = self.shell_ctx.clone() else {
            return Ok(());
        };
        let exe = std::env::current_exe()
            .map_err(LaunchError::NoCurrentDir)?
            .display()
            .to_string();
        for s in self.fleet.next_to_start() {
            let shell = &self.fleet.shells[s];
            let charmrun = self.reach_me(shell.route, ctx.port);
            let mut env = vec![
                (client::ENV_CHARMRUN.to_string(), charmrun),
                (client::ENV_JOB.to_string(), self.tag.clone()),
            ];
            env.extend(converse_machine::log::passed_on());
            let first = self.fleet.agents[shell.agents[0]].nodes.first().copied();
            let child = match &shell.cmd {
                ShellCmd::Remote { shell: sh, host } => {
                    env.push((agent::ENV_AGENT.to_string(), shell.agents[0].to_string()));
                    let secret = (client::ENV_SECRET, ctx.secret_hex.as_str());
                    spawn::remote(
                        sh,
                        host,
                        &ctx.cwd,
                        &exe,
                        &[agent::FLAG.into()],
                        &env,
                        secret,
                    )
                }
                ShellCmd::Launcher(words) => {
                    // The launcher passes its environment on to the agents: the secret
                    // travels there, not on its command line.
                    env.push((client::ENV_SECRET.to_string(), ctx.secret_hex.clone()));
                    spawn::launcher(words, &exe, &[agent::FLAG.into()], &env)
                }
            };
            let host = self.fleet.agents[shell.agents[0]].host.clone();
            let child = child.map_err(|source| match &shell.cmd {
                ShellCmd::Launcher(words) => LaunchError::MpiLauncher {
                    program: words.first().cloned().unwrap_or_default(),
                    source,
                },
                ShellCmd::Remote { .. } => LaunchError::Spawn {
                    node: first.unwrap_or(0),
                    host: host.clone(),
                    source,
                },
            })?;
            let pid = child.id();
            self.fleet.shells[s].process = Process::Running(pid);
            if self.opts.verbose {
                let n: usize = self.fleet.shells[s]
                    .agents
                    .iter()
                    .map(|&a| self.fleet.agents[a].subtree.len())
                    .sum();
                let shell = &self.fleet.shells[s];
                let below = self.fleet.below(shell.agents[0]).len();
                let place = match &shell.cmd {
                    ShellCmd::Remote { .. } if below > 0 => {
                        format!("on {host} (it starts {below} agent(s) below it)")
                    }
                    ShellCmd::Remote { .. } => format!("on {host}"),
                    ShellCmd::Launcher(words) => format!("through `{}`", words.join(" ")),
                };
                converse_machine::input::error_line(&format!(
                    "charmrun: starting {} agent(s) for {n} node(s) {place} (pid {pid})",
                    shell.agents.len()
                ));
            }
            let tx = self.tx.clone();
            let tail = Some(self.fleet.shells[s].stderr_tail.clone());
            // An agent prefixes its nodes' lines itself.
            let watcher =
                output::watch_keeping(child, String::new(), self.output_over.clone(), tail, {
                    move |st| {
                        let _ = tx.send(Event::ShellExited(s, st));
                    }
                });
            match watcher {
                Ok(w) => self.shell_outputs.push((s, w)),
                Err(source) => {
                    let pgid = nix::unistd::Pid::from_raw(pid as i32);
                    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                    self.fleet.shells[s].process = Process::Gone;
                    return Err(LaunchError::Watch {
                        node: first.unwrap_or(0),
                        source,
                    });
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

/// Each node costs charmrun about five descriptors (its two output pipes, its pidfd, its
/// control connection and the reader's clone of it): a few hundred nodes pass the usual soft limit of
/// 1024. Raise the soft limit to the hard one, as MPI launchers do; where that fails, the
/// first descriptor that cannot be had is an error naming the node.
pub(crate) fn raise_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
