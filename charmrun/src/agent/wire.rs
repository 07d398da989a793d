//! What charmrun and its agents say to each other beyond the nodes' own frames: the agent's
//! introduction, the plan charmrun hands it, and the envelope of a relayed node frame.

use crate::protocol::{Kind, SECRET_LEN};
use converse_machine::bytes::{ByteReader, ByteWriter};

/// An agent's introduction (`AGENT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHello {
    /// The job secret it was given.
    pub secret: [u8; SECRET_LEN],
    /// Which agent of the job it is.
    pub agent: u32,
    /// Its process id (on its host).
    pub pid: u32,
    /// Its host's name.
    pub host: String,
}

impl AgentHello {
    /// Encode as an `AGENT` body.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.host.len());
        b.extend_from_slice(&self.secret);
        b.put_u32(self.agent);
        b.put_u32(self.pid);
        b.put_str(&self.host);
        b
    }

    /// Decode an `AGENT` body; `None` if it is not one.
    pub fn decode(b: &[u8]) -> Option<AgentHello> {
        let mut r = ByteReader::new(b);
        let h = AgentHello {
            secret: r.array().ok()?,
            agent: r.u32().ok()?,
            pid: r.u32().ok()?,
            host: r.str().ok()?.to_owned(),
        };
        r.finish().ok()?;
        Some(h)
    }
}

/// One node an agent starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanNode {
    /// Its node number in the job.
    pub node: u32,
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// What each line of its output starts with (`++prefix`), often empty.
    pub prefix: String,
}

/// An agent below another in the tree of agents, and what it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAgent {
    /// Its number in the job.
    pub agent: u32,
    /// The agent that starts it.
    pub parent: u32,
    /// Its host.
    pub host: String,
    /// The remote shell that reaches its host.
    pub shell: String,
    /// Its nodes.
    pub nodes: Vec<PlanNode>,
}

/// What an agent starts (`PLAN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Where the nodes start (charmrun's own directory).
    pub cwd: String,
    /// Nodes in the whole job.
    pub num_nodes: u32,
    /// This agent's nodes.
    pub nodes: Vec<PlanNode>,
    /// Every agent below this one: those whose parent it is it starts itself, and hands
    /// each the part of this list below it.
    pub agents: Vec<SubAgent>,
}

fn put_nodes(b: &mut Vec<u8>, nodes: &[PlanNode]) {
    b.put_u32(nodes.len() as u32);
    for n in nodes {
        b.put_u32(n.node);
        b.put_str(&n.program);
        b.put_str(&n.prefix);
        b.put_u32(n.args.len() as u32);
        for a in &n.args {
            b.put_str(a);
        }
    }
}

fn get_nodes(r: &mut ByteReader<'_>, num_nodes: u32) -> Option<Vec<PlanNode>> {
    // Each node takes at least its number and three lengths.
    let count = r.count(16).ok()?;
    let mut nodes = Vec::with_capacity(count);
    for _ in 0..count {
        let node = r.u32().ok()?;
        let program = r.str().ok()?.to_owned();
        let prefix = r.str().ok()?.to_owned();
        let argc = r.count(4).ok()?;
        let mut args = Vec::with_capacity(argc);
        for _ in 0..argc {
            args.push(r.str().ok()?.to_owned());
        }
        if node >= num_nodes {
            return None;
        }
        nodes.push(PlanNode {
            node,
            program,
            args,
            prefix,
        });
    }
    Some(nodes)
}

impl Plan {
    /// Encode as a `PLAN` body.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_str(&self.cwd);
        b.put_u32(self.num_nodes);
        put_nodes(&mut b, &self.nodes);
        b.put_u32(self.agents.len() as u32);
        for a in &self.agents {
            b.put_u32(a.agent);
            b.put_u32(a.parent);
            b.put_str(&a.host);
            b.put_str(&a.shell);
            put_nodes(&mut b, &a.nodes);
        }
        b
    }

    /// Decode a `PLAN` body; `None` if it is not one.
    pub fn decode(b: &[u8]) -> Option<Plan> {
        let mut r = ByteReader::new(b);
        let cwd = r.str().ok()?.to_owned();
        let num_nodes = r.u32().ok()?;
        let nodes = get_nodes(&mut r, num_nodes)?;
        // Each agent takes at least two numbers and three lengths.
        let count = r.count(20).ok()?;
        let mut agents = Vec::with_capacity(count);
        for _ in 0..count {
            agents.push(SubAgent {
                agent: r.u32().ok()?,
                parent: r.u32().ok()?,
                host: r.str().ok()?.to_owned(),
                shell: r.str().ok()?.to_owned(),
                nodes: get_nodes(&mut r, num_nodes)?,
            });
        }
        r.finish().ok()?;
        Some(Plan {
            cwd,
            num_nodes,
            nodes,
            agents,
        })
    }

    /// The plan of agent `agent` of [`Plan::agents`]: its nodes, and the agents below it.
    pub fn of(&self, agent: u32) -> Option<Plan> {
        let me = self.agents.iter().find(|a| a.agent == agent)?;
        let mut below = Vec::new();
        let mut parents = vec![agent];
        // Each agent is taken once: a plan whose parents form a cycle (it can only come from
        // a broken or hostile peer) must not make this loop forever.
        let mut taken = vec![false; self.agents.len()];
        while let Some(p) = parents.pop() {
            for (i, a) in self.agents.iter().enumerate() {
                if a.parent == p && a.agent != agent && !taken[i] {
                    taken[i] = true;
                    below.push(a.clone());
                    parents.push(a.agent);
                }
            }
        }
        Some(Plan {
            cwd: self.cwd.clone(),
            num_nodes: self.num_nodes,
            nodes: me.nodes.clone(),
            agents: below,
        })
    }

    /// Every node this plan starts, its agents' included.
    pub fn all_nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes
            .iter()
            .chain(self.agents.iter().flat_map(|a| a.nodes.iter()))
            .map(|n| n.node as usize)
    }
}

/// The body of a `LOST` frame: an agent below is gone, and with it `nodes`.
pub fn lost(nodes: &[usize], why: &str) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_u32(nodes.len() as u32);
    for &n in nodes {
        b.put_u32(n as u32);
    }
    b.put_str(why);
    b
}

/// A `LOST` body taken apart; `None` if it is not one.
pub fn unlost(b: &[u8]) -> Option<(Vec<usize>, String)> {
    let mut r = ByteReader::new(b);
    let n = r.count(4).ok()?;
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        nodes.push(r.u32().ok()? as usize);
    }
    let why = r.str().ok()?.to_owned();
    r.finish().ok()?;
    Some((nodes, why))
}

/// The body of a `RELAY` frame carrying node `node`'s frame of `kind`.
pub fn relay(node: usize, kind: Kind, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(5 + body.len());
    b.put_u32(node as u32);
    b.put_u8(kind as u8);
    b.extend_from_slice(body);
    b
}

/// A `RELAY` body taken apart: node, kind, body; `None` if it is not one.
pub fn unrelay(b: &[u8]) -> Option<(usize, Kind, &[u8])> {
    let mut r = ByteReader::new(b);
    let node = r.u32().ok()? as usize;
    let kind = Kind::from_u8(r.u8().ok()?)?;
    Some((node, kind, r.rest()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_hello_round_trips_and_refuses_truncations() {
        let h = AgentHello {
            secret: [3; SECRET_LEN],
            agent: 7,
            pid: 99,
            host: "h1".into(),
        };
        let b = h.encode();
        assert_eq!(AgentHello::decode(&b), Some(h));
        for len in 0..b.len() {
            assert_eq!(AgentHello::decode(&b[..len]), None, "len {len}");
        }
    }

    #[test]
    fn plan_round_trips_and_refuses_nodes_outside_the_job() {
        let p = Plan {
            cwd: "/tmp/x y".into(),
            num_nodes: 8,
            nodes: vec![
                PlanNode {
                    node: 1,
                    program: "/bin/pgm".into(),
                    args: vec!["a".into(), "+machine".into(), "tcp".into()],
                    prefix: "PE 1: ".into(),
                },
                PlanNode {
                    node: 5,
                    program: "/bin/pgm".into(),
                    args: vec![],
                    prefix: String::new(),
                },
            ],
            agents: vec![
                SubAgent {
                    agent: 2,
                    parent: 0,
                    host: "b".into(),
                    shell: "ssh".into(),
                    nodes: vec![PlanNode {
                        node: 2,
                        program: "/bin/pgm".into(),
                        args: vec![],
                        prefix: String::new(),
                    }],
                },
                SubAgent {
                    agent: 3,
                    parent: 2,
                    host: "c".into(),
                    shell: "ssh".into(),
                    nodes: vec![],
                },
            ],
        };
        let b = p.encode();
        assert_eq!(Plan::decode(&b), Some(p.clone()));
        for len in 0..b.len() {
            assert_eq!(Plan::decode(&b[..len]), None, "len {len}");
        }
        assert_eq!(p.all_nodes().collect::<Vec<_>>(), [1, 5, 2]);
        // Agent 2's plan: its node, and agent 3 below it.
        let two = p.of(2).expect("agent 2");
        assert_eq!(two.nodes[0].node, 2);
        assert_eq!(two.agents.len(), 1);
        assert_eq!(two.agents[0].agent, 3);
        assert_eq!(p.of(9), None);
        // Parents in a cycle (2 under 3, 3 under 2): each agent is taken once, no endless loop.
        let mut cyclic = p.clone();
        cyclic.agents[0].parent = 3;
        let two = cyclic.of(2).expect("agent 2");
        assert_eq!(two.agents.len(), 1);
        let mut bad = p;
        bad.nodes[1].node = 8;
        assert_eq!(Plan::decode(&bad.encode()), None);
    }

    #[test]
    fn lost_round_trips() {
        let b = lost(&[3, 7], "its agent on h closed");
        assert_eq!(
            unlost(&b),
            Some((vec![3, 7], "its agent on h closed".into()))
        );
        assert_eq!(unlost(&b[..b.len() - 1]), None);
    }

    #[test]
    fn relay_round_trips() {
        let b = relay(300, Kind::Ending, &7i32.to_le_bytes());
        assert_eq!(
            unrelay(&b),
            Some((300, Kind::Ending, &7i32.to_le_bytes()[..]))
        );
        assert_eq!(unrelay(&b[..4]), None);
        assert_eq!(unrelay(&[0, 0, 0, 0, 200]), None);
    }
}
