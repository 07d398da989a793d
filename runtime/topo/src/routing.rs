//! Shortest-path routing tables: for one destination, the next hop from every process.
//!
//! One table per destination (Dijkstra from the destination), so following next hops from
//! any process traces one fixed shortest path: every message from a source to a destination
//! takes the same channels in the same order, which is what keeps them in FIFO order across
//! routed hops.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The next hop toward `dest` from every process (`dest` itself at `dest`). Ties go to the
/// neighbour with the lower id, so every process computes the same table.
pub(crate) fn toward(adj: &[Vec<(usize, u32)>], dest: usize) -> Vec<u32> {
    let n = adj.len();
    let mut dist = vec![u64::MAX; n];
    let mut next = vec![u32::MAX; n];
    let mut heap = BinaryHeap::new();
    dist[dest] = 0;
    next[dest] = dest as u32;
    heap.push(Reverse((0u64, dest)));
    while let Some(Reverse((d, v))) = heap.pop() {
        if d > dist[v] {
            continue;
        }
        for &(u, w) in &adj[v] {
            let nd = d + u64::from(w.max(1));
            if nd < dist[u] || nd == dist[u] && (v as u32) < next[u] {
                if nd < dist[u] {
                    dist[u] = nd;
                    heap.push(Reverse((nd, u)));
                }
                next[u] = v as u32;
            }
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_routes_toward_its_end() {
        let adj = vec![vec![(1, 1)], vec![(0, 1), (2, 1)], vec![(1, 1)]];
        assert_eq!(toward(&adj, 2), [1, 2, 2]);
        assert_eq!(toward(&adj, 0), [0, 0, 1]);
    }

    #[test]
    fn ties_go_to_the_lower_neighbour() {
        // A square 0-1-3-2-0: from 0 to 3 through 1 or 2, equally long.
        let adj = vec![
            vec![(1, 1), (2, 1)],
            vec![(0, 1), (3, 1)],
            vec![(0, 1), (3, 1)],
            vec![(1, 1), (2, 1)],
        ];
        assert_eq!(toward(&adj, 3)[0], 1);
    }
}
