//! The node table: which nodes make up the job, which PEs each hosts, and how to reach it.
//!
//! Every layer learns the table at boot. In a launched job, each node sends its own
//! [`NodeInfo`] to the launcher, which hands every node the full table encoded with
//! [`NodeTable::encode`]; the `addr` bytes are opaque to everybody but the layer (a socket
//! address for TCP/UDP, a segment name for shared memory).

use crate::bytes::{ByteReader, ByteWriter};
use crate::error::WireError;

/// One node of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// First PE hosted by this node; its PEs are `first_pe .. first_pe + num_pes`.
    pub first_pe: usize,
    /// Number of PEs this node hosts (at least 1).
    pub num_pes: usize,
    /// Host name, for messages to people.
    pub host: String,
    /// How the layer reaches this node; meaningful only to the layer.
    pub addr: Vec<u8>,
}

/// The whole job's nodes, in node order. Node `n`'s PEs follow node `n-1`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTable {
    nodes: Vec<NodeInfo>,
    num_pes: usize,
    /// PEs per node when every node has the same number: PE-to-node becomes one division.
    uniform: Option<usize>,
}

const MAGIC: &[u8; 4] = b"CVNT";
const VERSION: u8 = 1;

impl NodeTable {
    /// A table from nodes listed in order.
    ///
    /// # Errors
    /// [`WireError::Invalid`] when the list is empty, a node has no PE, or the PE ranges do
    /// not follow each other from 0.
    pub fn new(nodes: Vec<NodeInfo>) -> Result<NodeTable, WireError> {
        if nodes.is_empty() {
            return Err(WireError::Invalid(
                "a node table needs at least one node".into(),
            ));
        }
        let mut next = 0;
        for (i, n) in nodes.iter().enumerate() {
            if n.num_pes == 0 {
                return Err(WireError::Invalid(format!("node {i} hosts no PE")));
            }
            if n.first_pe != next {
                return Err(WireError::Invalid(format!(
                    "node {i} starts at PE {} but PE {next} was expected",
                    n.first_pe
                )));
            }
            next += n.num_pes;
        }
        let ppn = nodes[0].num_pes;
        let uniform = nodes.iter().all(|n| n.num_pes == ppn).then_some(ppn);
        Ok(NodeTable {
            nodes,
            num_pes: next,
            uniform,
        })
    }

    /// `num_nodes` nodes of `pes_per_node` PEs each on this host, with empty addresses.
    ///
    /// ```
    /// let t = converse_machine::NodeTable::uniform(3, 2);
    /// assert_eq!((t.num_nodes(), t.num_pes(), t.node_of(5)), (3, 6, 2));
    /// ```
    pub fn uniform(num_nodes: usize, pes_per_node: usize) -> NodeTable {
        let ppn = pes_per_node.max(1);
        let nodes = (0..num_nodes.max(1))
            .map(|n| NodeInfo {
                first_pe: n * ppn,
                num_pes: ppn,
                host: "localhost".into(),
                addr: Vec::new(),
            })
            .collect();
        NodeTable {
            nodes,
            num_pes: num_nodes.max(1) * ppn,
            uniform: Some(ppn),
        }
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Number of PEs over all nodes.
    pub fn num_pes(&self) -> usize {
        self.num_pes
    }

    /// The node hosting `pe`. `pe` must be below [`num_pes`](Self::num_pes).
    #[inline]
    pub fn node_of(&self, pe: usize) -> usize {
        match self.uniform {
            // One PE per node is the common case: spare the hot path a division.
            Some(1) => pe,
            Some(ppn) => pe / ppn,
            None => self.nodes.partition_point(|n| n.first_pe <= pe) - 1,
        }
    }

    /// Node `n`.
    pub fn node(&self, n: usize) -> Option<&NodeInfo> {
        self.nodes.get(n)
    }

    /// All nodes in order.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// Encode for the start-up exchange.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.nodes.len() * 32);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.put_u32(self.nodes.len() as u32);
        for n in &self.nodes {
            out.put_u32(n.num_pes as u32);
            out.put_str(&n.host);
            out.put_bytes(&n.addr);
        }
        out
    }

    /// Decode what [`encode`](Self::encode) produced. Never panics on bad input.
    ///
    /// # Errors
    /// A [`WireError`] saying what is wrong with the bytes.
    pub fn decode(bytes: &[u8]) -> Result<NodeTable, WireError> {
        let mut r = ByteReader::new(bytes);
        if r.take(4)? != MAGIC || r.u8()? != VERSION {
            return Err(WireError::BadMagic);
        }
        // Each node needs at least 12 bytes: counts the input cannot hold are refused before
        // anything is allocated for them.
        let count = r.count(12)?;
        if count == 0 {
            return Err(WireError::BadLength("node count 0".into()));
        }
        let mut nodes = Vec::with_capacity(count);
        let mut first_pe = 0usize;
        for _ in 0..count {
            let num_pes = r.u32()? as usize;
            let host = r.str()?.to_owned();
            let addr = r.bytes()?.to_vec();
            nodes.push(NodeInfo {
                first_pe,
                num_pes,
                host,
                addr,
            });
            first_pe = first_pe
                .checked_add(num_pes)
                .ok_or_else(|| WireError::BadLength("PE count overflows".into()))?;
        }
        r.finish()?;
        NodeTable::new(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NodeTable {
        NodeTable::new(vec![
            NodeInfo {
                first_pe: 0,
                num_pes: 2,
                host: "a".into(),
                addr: vec![1, 2, 3],
            },
            NodeInfo {
                first_pe: 2,
                num_pes: 1,
                host: "bb".into(),
                addr: vec![],
            },
            NodeInfo {
                first_pe: 3,
                num_pes: 4,
                host: "c".into(),
                addr: vec![9; 40],
            },
        ])
        .expect("valid table")
    }

    #[test]
    fn encode_decode_round_trip() {
        let t = sample();
        assert_eq!(NodeTable::decode(&t.encode()), Ok(t));
    }

    #[test]
    fn node_of_handles_uneven_nodes() {
        let t = sample();
        let owners: Vec<usize> = (0..t.num_pes()).map(|p| t.node_of(p)).collect();
        assert_eq!(owners, vec![0, 0, 1, 2, 2, 2, 2]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert!(NodeTable::decode(&bytes[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn huge_counts_are_refused_without_allocating() {
        let mut bytes = b"CVNT\x01".to_vec();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            NodeTable::decode(&bytes),
            Err(WireError::BadLength(_))
        ));
    }

    #[test]
    fn gaps_in_pe_ranges_are_refused() {
        let r = NodeTable::new(vec![NodeInfo {
            first_pe: 1,
            num_pes: 1,
            host: String::new(),
            addr: vec![],
        }]);
        assert!(r.is_err());
    }
}
