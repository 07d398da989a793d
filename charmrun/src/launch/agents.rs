//! A started job's agents, as the job loop sees them: an agent introducing itself gets its
//! plan (its nodes, and the agents below it in a tree), and a shell that exits before its
//! agents came makes their nodes dead before starting.

use super::fleet::ShellCmd;
use super::job::Job;
use super::NodeStart;
use crate::agent::wire::{AgentHello, Plan, PlanNode, SubAgent};
use std::net::TcpStream;
use std::process::ExitStatus;
use std::time::Instant;

impl Job<'_> {
    /// Agent `hello.agent` introduced itself: send it its plan.
    pub(super) fn agent_joined(&mut self, stream: TcpStream, hello: &AgentHello) {
        let a = hello.agent as usize;
        // Agents below another connect to it, not here.
        let fresh = self
            .fleet
            .agents
            .get(a)
            .is_some_and(|ag| !ag.connected && ag.parent.is_none());
        if !fresh {
            self.strangers += 1;
            return;
        }
        let launched = matches!(
            self.fleet.shells[self.fleet.agents[a].shell].cmd,
            ShellCmd::Launcher(_)
        );
        let ag = &mut self.fleet.agents[a];
        ag.connected = true;
        if launched {
            // A batch launcher placed it: its host is the one it names.
            ag.host = hello.host.clone();
            for &i in &ag.nodes {
                if let Some(n) = self.nodes.get_mut(i) {
                    n.host = hello.host.clone();
                }
            }
        }
        let ag = &self.fleet.agents[a];
        if self.opts.verbose {
            let from = stream
                .peer_addr()
                .map_or("?".to_string(), |a| a.ip().to_string());
            converse_machine::input::error_line(&format!(
                "charmrun: agent {a} connected from {from} (pid {}, host {}) for {} node(s)",
                hello.pid,
                hello.host,
                ag.nodes.len()
            ));
        }
        let cwd = self
            .shell_ctx
            .as_ref()
            .map_or(String::new(), |c| c.cwd.clone());
        let plan = Plan {
            cwd,
            num_nodes: self.nodes.len() as u32,
            nodes: self.plan_nodes(&ag.nodes),
            agents: self
                .fleet
                .below(a)
                .into_iter()
                .map(|b| {
                    let sub = &self.fleet.agents[b];
                    let shell = match &self.fleet.shells[sub.shell].cmd {
                        ShellCmd::Remote { shell, .. } => shell.clone(),
                        ShellCmd::Launcher(w) => w.join(" "),
                    };
                    SubAgent {
                        agent: b as u32,
                        parent: sub.parent.unwrap_or(a) as u32,
                        host: sub.host.clone(),
                        shell,
                        nodes: self.plan_nodes(&sub.nodes),
                    }
                })
                .collect(),
        };
        let nodes = ag.subtree.clone();
        if let Some(c) = self.control.as_mut() {
            if let Err(why) = c.agent_joined(a, stream, &nodes, &plan.encode()) {
                self.verdict.cancel(why);
            }
        }
    }

    /// What nodes `nodes` run, for an agent's plan.
    fn plan_nodes(&self, nodes: &[usize]) -> Vec<PlanNode> {
        nodes
            .iter()
            .filter_map(|&i| match self.plan.get(i) {
                Some(NodeStart::Process { program, args, .. }) => Some(PlanNode {
                    node: i as u32,
                    program: program.clone(),
                    args: args.clone(),
                    prefix: if self.opts.prefix {
                        self.label(i) + ": "
                    } else {
                        String::new()
                    },
                }),
                _ => None,
            })
            .collect()
    }

    /// A shell that starts agents exited: the nodes of any agent it started that never
    /// connected are dead before starting, by its exit status.
    pub(super) fn shell_exited(&mut self, s: usize, st: ExitStatus, now: Instant) {
        let Some(shell) = self.fleet.shells.get_mut(s) else {
            return;
        };
        shell.process = shell.process.reaped();
        for &a in &shell.agents {
            let ag = &self.fleet.agents[a];
            if !ag.connected {
                for &i in &ag.subtree {
                    self.verdict.exited(i, st, now);
                }
            }
        }
    }
}
