//! Agents: how a job's nodes are started by agents (`charmrun ++agent`, see
//! [`agent`](crate::agent)) rather than one by one — one agent per host through one remote
//! shell each (`++agents`), or every agent through one batch launcher (`++mpiexec` for a net
//! layer, `srun` inside a Slurm allocation) — and, with `++batch N`, how many remote shells
//! may be starting at once.

use super::job::Process;
use super::NodeStart;
use std::collections::VecDeque;
use std::net::IpAddr;

/// How an agent's remote shell, or the batch launcher, is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ShellCmd {
    /// `SHELL HOST 'cd DIR && ... exec env ... charmrun ++agent'`: one agent, on `host`.
    Remote {
        /// The remote shell command.
        shell: String,
        /// The host.
        host: String,
    },
    /// `WORDS... charmrun ++agent` with the job in the environment: the launcher starts
    /// every agent, each learning which it is from its rank.
    Launcher(Vec<String>),
}

/// One agent of the job.
#[derive(Debug)]
pub(super) struct AgentSlot {
    /// The host it runs on, by the name charmrun knows it (the one it reports, once it has).
    pub(super) host: String,
    /// Its nodes, in node order.
    pub(super) nodes: Vec<usize>,
    /// The shell that starts it.
    pub(super) shell: usize,
    /// The agent that starts it (`None`: charmrun does).
    pub(super) parent: Option<usize>,
    /// Its nodes and those of every agent below it.
    pub(super) subtree: Vec<usize>,
    /// It introduced itself.
    pub(super) connected: bool,
    /// Its connection closed.
    pub(super) gone: bool,
}

/// A remote shell, or the launcher, that starts agents.
#[derive(Debug)]
pub(super) struct Shell {
    pub(super) cmd: ShellCmd,
    pub(super) agents: Vec<usize>,
    pub(super) process: Process,
    /// charmrun's address as its agents reach it.
    pub(super) route: IpAddr,
    /// The last lines it wrote to its stderr: why an agent never connected, in the remote
    /// shell's own words.
    pub(super) stderr_tail: crate::output::Tail,
}

/// The agents of a job and the shells that start them.
#[derive(Debug, Default)]
pub(super) struct Fleet {
    pub(super) agents: Vec<AgentSlot>,
    pub(super) shells: Vec<Shell>,
    /// Shells not started yet, in order.
    pub(super) queue: VecDeque<usize>,
    /// At most this many shells starting at once (`++batch`).
    pub(super) batch: Option<usize>,
}

impl Fleet {
    /// One agent per host for the nodes of `plan` placed on hosts (nodes placed here are
    /// started directly). `default_shell` reaches a host without a `++shell` of its own;
    /// `route(host)` is charmrun's address towards it.
    pub(super) fn per_host(
        plan: &[NodeStart],
        default_shell: &str,
        mut route: impl FnMut(&str, usize) -> Result<IpAddr, super::LaunchError>,
    ) -> Result<Fleet, super::LaunchError> {
        let mut f = Fleet::default();
        for (i, start) in plan.iter().enumerate() {
            let NodeStart::Process { host: Some(h), .. } = start else {
                continue;
            };
            let a = match f.agents.iter().position(|a| a.host == h.name) {
                Some(a) => a,
                None => {
                    let s = f.shells.len();
                    f.shells.push(Shell {
                        cmd: ShellCmd::Remote {
                            shell: h.shell.clone().unwrap_or_else(|| default_shell.into()),
                            host: h.name.clone(),
                        },
                        agents: vec![f.agents.len()],
                        process: Process::Gone,
                        route: route(&h.name, i)?,
                        stderr_tail: Default::default(),
                    });
                    f.agents.push(AgentSlot {
                        host: h.name.clone(),
                        nodes: Vec::new(),
                        shell: s,
                        parent: None,
                        subtree: Vec::new(),
                        connected: false,
                        gone: false,
                    });
                    f.agents.len() - 1
                }
            };
            f.agents[a].nodes.push(i);
        }
        f.queue = (0..f.shells.len()).collect();
        f.arrange_tree(None);
        Ok(f)
    }

    /// Make a tree of the agents when there are more than `fanout`: charmrun starts the first
    /// `fanout`, and agent `a` beyond them is started by agent `(a - fanout) / fanout`, so no
    /// agent starts more than `fanout` others. Only charmrun's own agents' shells stay queued.
    pub(super) fn arrange_tree(&mut self, fanout: Option<usize>) {
        let m = self.agents.len();
        for a in 0..m {
            self.agents[a].parent = fanout.filter(|&k| k > 0 && a >= k).map(|k| (a - k) / k);
            self.agents[a].subtree = self.agents[a].nodes.clone();
        }
        // Parents come before their children: gather the subtrees from the leaves up.
        for a in (0..m).rev() {
            if let Some(p) = self.agents[a].parent {
                let below = self.agents[a].subtree.clone();
                self.agents[p].subtree.extend(below);
            }
        }
        let top: Vec<usize> = (0..m)
            .filter(|&a| self.agents[a].parent.is_none())
            .map(|a| self.agents[a].shell)
            .collect();
        self.queue.retain(|s| top.contains(s));
    }

    /// The agents below `a`, each after its parent.
    pub(super) fn below(&self, a: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut parents = vec![a];
        while let Some(p) = parents.pop() {
            for b in (0..self.agents.len()).filter(|&b| self.agents[b].parent == Some(p)) {
                out.push(b);
                parents.push(b);
            }
        }
        out
    }

    /// The agent charmrun started whose tree holds agent `a`.
    pub(super) fn top_of(&self, mut a: usize) -> usize {
        while let Some(p) = self.agents.get(a).and_then(|ag| ag.parent) {
            a = p;
        }
        a
    }

    /// `agents` agents started by one launcher command (`words`), node `i` on agent
    /// `i % agents`; agent `a` is on `hosts[a]` when the hosts are known.
    pub(super) fn launcher(
        words: Vec<String>,
        nodes: usize,
        agents: usize,
        hosts: Option<&[String]>,
        route: IpAddr,
    ) -> Fleet {
        let agents = agents.clamp(1, nodes.max(1));
        let mut f = Fleet::default();
        f.shells.push(Shell {
            cmd: ShellCmd::Launcher(words),
            agents: (0..agents).collect(),
            process: Process::Gone,
            route,
            stderr_tail: Default::default(),
        });
        f.agents = (0..agents)
            .map(|a| AgentSlot {
                host: hosts
                    .and_then(|h| h.get(a).cloned())
                    .unwrap_or_else(|| format!("the launcher's task {a}")),
                nodes: (a..nodes).step_by(agents).collect(),
                shell: 0,
                parent: None,
                subtree: (a..nodes).step_by(agents).collect(),
                connected: false,
                gone: false,
            })
            .collect();
        f.queue = VecDeque::from([0]);
        f
    }

    /// Whether node `i` is started by an agent; which.
    pub(super) fn agent_of(&self, i: usize) -> Option<usize> {
        self.agents.iter().position(|a| a.nodes.contains(&i))
    }

    /// Shells started whose agents have not all introduced themselves, and that still run.
    fn starting(&self) -> usize {
        self.shells
            .iter()
            .filter(|s| {
                matches!(s.process, Process::Running(_))
                    && s.agents.iter().any(|&a| !self.agents[a].connected)
            })
            .count()
    }

    /// The shells to start now: as many as `++batch` leaves room for.
    pub(super) fn next_to_start(&mut self) -> Vec<usize> {
        let room = self
            .batch
            .map_or(usize::MAX, |b| b.saturating_sub(self.starting()));
        let n = room.min(self.queue.len());
        self.queue.drain(..n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodelist::Host;

    fn on(host: &str) -> NodeStart {
        NodeStart::Process {
            program: "p".into(),
            args: vec![],
            host: Some(Host {
                name: host.into(),
                cpus: 1,
                shell: None,
            }),
        }
    }

    #[test]
    fn one_agent_per_host_in_order_of_first_node() {
        let plan = [on("a"), on("b"), on("a"), on("b"), on("c")];
        let f =
            Fleet::per_host(&plan, "ssh", |_, _| Ok(IpAddr::from([10, 0, 0, 1]))).expect("fleet");
        let hosts: Vec<_> = f.agents.iter().map(|a| a.host.as_str()).collect();
        assert_eq!(hosts, ["a", "b", "c"]);
        assert_eq!(f.agents[0].nodes, [0, 2]);
        assert_eq!(f.agents[1].nodes, [1, 3]);
        assert_eq!(f.agent_of(4), Some(2));
        assert_eq!(f.shells.len(), 3);
    }

    #[test]
    fn beyond_the_fanout_agents_start_agents() {
        let plan: Vec<_> = ["a", "b", "c", "d", "e", "f", "g"]
            .iter()
            .map(|h| on(h))
            .collect();
        let mut f =
            Fleet::per_host(&plan, "ssh", |_, _| Ok(IpAddr::from([10, 0, 0, 1]))).expect("fleet");
        f.arrange_tree(Some(2));
        let parents: Vec<_> = f.agents.iter().map(|a| a.parent).collect();
        assert_eq!(
            parents,
            [None, None, Some(0), Some(0), Some(1), Some(1), Some(2)]
        );
        // Agent 0 holds its node, its children's and agent 6's (below agent 2).
        let mut t = f.agents[0].subtree.clone();
        t.sort_unstable();
        assert_eq!(t, [0, 2, 3, 6]);
        assert_eq!(f.below(0), [2, 3, 6]);
        assert_eq!(f.top_of(6), 0);
        // Only charmrun's own two agents' shells are started by charmrun.
        assert_eq!(f.next_to_start(), [0, 1]);
    }

    #[test]
    fn a_launcher_spreads_nodes_round_robin_over_its_agents() {
        let f = Fleet::launcher(vec!["srun".into()], 5, 2, None, [127, 0, 0, 1].into());
        assert_eq!(f.agents[0].nodes, [0, 2, 4]);
        assert_eq!(f.agents[1].nodes, [1, 3]);
        // Never more agents than nodes.
        let f = Fleet::launcher(vec![], 2, 8, None, [127, 0, 0, 1].into());
        assert_eq!(f.agents.len(), 2);
    }

    #[test]
    fn batch_bounds_the_shells_starting_at_once() {
        let plan: Vec<_> = ["a", "b", "c", "d", "e"].iter().map(|h| on(h)).collect();
        let mut f =
            Fleet::per_host(&plan, "ssh", |_, _| Ok(IpAddr::from([10, 0, 0, 1]))).expect("fleet");
        f.batch = Some(2);
        assert_eq!(f.next_to_start(), [0, 1]);
        for s in [0, 1] {
            f.shells[s].process = Process::Running(100 + s as u32);
        }
        assert!(f.next_to_start().is_empty());
        f.agents[0].connected = true;
        assert_eq!(f.next_to_start(), [2]);
        f.shells[2].process = Process::Running(102);
        // A shell that exited without its agent no longer counts as starting.
        f.shells[1].process = Process::Reaped(101);
        assert_eq!(f.next_to_start(), [3]);
    }
}
