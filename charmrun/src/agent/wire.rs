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

/// What an agent starts (`PLAN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Where the nodes start (charmrun's own directory).
    pub cwd: String,
    /// Nodes in the whole job.
    pub num_nodes: u32,
    /// This agent's nodes.
    pub nodes: Vec<PlanNode>,
}

impl Plan {
    /// Encode as a `PLAN` body.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_str(&self.cwd);
        b.put_u32(self.num_nodes);
        b.put_u32(self.nodes.len() as u32);
        for n in &self.nodes {
            b.put_u32(n.node);
            b.put_str(&n.program);
            b.put_str(&n.prefix);
            b.put_u32(n.args.len() as u32);
            for a in &n.args {
                b.put_str(a);
            }
        }
        b
    }

    /// Decode a `PLAN` body; `None` if it is not one.
    pub fn decode(b: &[u8]) -> Option<Plan> {
        let mut r = ByteReader::new(b);
        let cwd = r.str().ok()?.to_owned();
        let num_nodes = r.u32().ok()?;
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
        r.finish().ok()?;
        Some(Plan {
            cwd,
            num_nodes,
            nodes,
        })
    }
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
        };
        let b = p.encode();
        assert_eq!(Plan::decode(&b), Some(p.clone()));
        for len in 0..b.len() {
            assert_eq!(Plan::decode(&b[..len]), None, "len {len}");
        }
        let mut bad = p;
        bad.nodes[1].node = 8;
        assert_eq!(Plan::decode(&bad.encode()), None);
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
