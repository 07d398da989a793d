//! The topology classes: which processes there are, which channels join them, and the
//! queries on them (neighbours, coordinates, shift, distance, routes, spanning trees).
//!
//! A [`Topology`] is pure data, the same on every process (each builds it from the same
//! arguments), so routes and trees need no agreement protocol: every process computes the
//! same ones.

use crate::error::TopoError;
use crate::routing;
use crate::tree::{self, Tree};
use std::sync::OnceLock;

/// The class of a topology, with what defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A graph from an adjacency matrix (weights 1 when `weighted` is false).
    Arbitrary {
        /// Whether the matrix had weights other than 0 and 1.
        weighted: bool,
    },
    /// Every process joined to `centre` only.
    Star {
        /// The centre.
        centre: usize,
    },
    /// Process i joined to i-1 and i+1.
    Line,
    /// A line whose ends are joined.
    Ring,
    /// An N-dimensional grid, row-major (the last dimension varies fastest).
    Grid(Vec<usize>),
    /// An N-dimensional grid with wrap-around in every dimension, row-major.
    Torus(Vec<usize>),
    /// Every process joined to every other.
    Full,
}

impl Shape {
    /// The class's name, as traces and pictures show it.
    pub fn name(&self) -> &'static str {
        match self {
            Shape::Arbitrary { .. } => "arbitrary",
            Shape::Star { .. } => "star",
            Shape::Line => "line",
            Shape::Ring => "ring",
            Shape::Grid(_) => "grid",
            Shape::Torus(_) => "torus",
            Shape::Full => "full",
        }
    }
}

/// A logical process topology: processes `0..n`, the channels between them (each both ways,
/// with a weight), and the PE each process runs on.
///
/// ```
/// use converse_topo::Topology;
/// let t = Topology::torus(&[3, 4]).unwrap();
/// assert_eq!(t.len(), 12);
/// assert_eq!(t.coords(5), Some(vec![1, 1]));
/// assert_eq!(t.shift(0, 1, -1), Some(3)); // wraps around the row
/// assert_eq!(t.neighbours(0), [1, 3, 4, 8]);
/// assert_eq!(t.distance(0, 6), 3);
/// ```
#[derive(Debug)]
pub struct Topology {
    shape: Shape,
    /// Neighbours of each process with the channel's weight, sorted by neighbour.
    adj: Vec<Vec<(usize, u32)>>,
    /// Just the neighbour ids (what `neighbours` returns).
    ids: Vec<Vec<usize>>,
    pes: Vec<usize>,
    /// Next hop toward each destination, computed on first use.
    next: Vec<OnceLock<Vec<u32>>>,
    /// The spanning tree rooted at each process, computed on first use.
    trees: Vec<OnceLock<Tree>>,
}

impl Clone for Topology {
    fn clone(&self) -> Topology {
        Topology::from_parts(self.shape.clone(), self.adj.clone()).with_pes_unchecked(&self.pes)
    }
}

/// Largest topology a constructor accepts: routes and trees are tables of n² entries at most.
pub const MAX_PROCESSES: usize = 1 << 16;

impl Topology {
    fn from_parts(shape: Shape, mut adj: Vec<Vec<(usize, u32)>>) -> Topology {
        for a in &mut adj {
            a.sort_unstable();
            a.dedup_by_key(|e| e.0);
        }
        let n = adj.len();
        let ids = adj
            .iter()
            .map(|a| a.iter().map(|e| e.0).collect())
            .collect();
        Topology {
            shape,
            adj,
            ids,
            pes: (0..n).collect(),
            next: (0..n).map(|_| OnceLock::new()).collect(),
            trees: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    fn with_pes_unchecked(mut self, pes: &[usize]) -> Topology {
        self.pes = pes.to_vec();
        self
    }

    fn check_size(n: usize) -> Result<(), TopoError> {
        if n == 0 {
            return Err(TopoError::Empty);
        }
        if n > MAX_PROCESSES {
            return Err(TopoError::Invalid(format!(
                "{n} processes: at most {MAX_PROCESSES} are supported"
            )));
        }
        Ok(())
    }

    /// Every process joined to every other.
    ///
    /// # Errors
    /// [`TopoError::Empty`] for 0 processes.
    pub fn fully_connected(n: usize) -> Result<Topology, TopoError> {
        Self::check_size(n)?;
        let adj = (0..n)
            .map(|i| (0..n).filter(|&j| j != i).map(|j| (j, 1)).collect())
            .collect();
        Ok(Self::from_parts(Shape::Full, adj))
    }

    /// A star: every process joined to `centre` only (the seed's default centre is 0).
    ///
    /// # Errors
    /// [`TopoError::Empty`]; [`TopoError::Invalid`] when `centre` is not a process.
    pub fn star(n: usize, centre: usize) -> Result<Topology, TopoError> {
        Self::check_size(n)?;
        if centre >= n {
            return Err(TopoError::Invalid(format!(
                "star centre {centre} is not one of the {n} processes"
            )));
        }
        let mut adj = vec![Vec::new(); n];
        for i in (0..n).filter(|&i| i != centre) {
            adj[i].push((centre, 1));
            adj[centre].push((i, 1));
        }
        Ok(Self::from_parts(Shape::Star { centre }, adj))
    }

    /// A linear array: process i joined to i-1 and i+1.
    ///
    /// # Errors
    /// [`TopoError::Empty`].
    pub fn line(n: usize) -> Result<Topology, TopoError> {
        Self::check_size(n)?;
        Ok(Self::from_parts(Shape::Line, Self::chain(n, false)))
    }

    /// A ring: a line whose ends are joined.
    ///
    /// # Errors
    /// [`TopoError::Empty`].
    pub fn ring(n: usize) -> Result<Topology, TopoError> {
        Self::check_size(n)?;
        Ok(Self::from_parts(Shape::Ring, Self::chain(n, true)))
    }

    fn chain(n: usize, wrap: bool) -> Vec<Vec<(usize, u32)>> {
        let mut adj = vec![Vec::new(); n];
        for i in 1..n {
            adj[i].push((i - 1, 1));
            adj[i - 1].push((i, 1));
        }
        if wrap && n > 2 {
            adj[0].push((n - 1, 1));
            adj[n - 1].push((0, 1));
        }
        adj
    }

    /// A 2-D grid of `rows` × `cols`, row-major: process 0 at the upper left, process
    /// `rows*cols - 1` at the lower right (the seed's `GridTopology`).
    ///
    /// # Errors
    /// As [`grid`](Self::grid).
    pub fn grid2(rows: usize, cols: usize) -> Result<Topology, TopoError> {
        Self::grid(&[rows, cols])
    }

    /// A 2-D torus of `rows` × `cols`, row-major (the seed's `TorusTopology`).
    ///
    /// # Errors
    /// As [`torus`](Self::torus).
    pub fn torus2(rows: usize, cols: usize) -> Result<Topology, TopoError> {
        Self::torus(&[rows, cols])
    }

    /// An N-dimensional grid of the given extents, row-major (the last dimension varies
    /// fastest).
    ///
    /// # Errors
    /// [`TopoError::Invalid`] for no dimension or one of extent 0; [`TopoError::Empty`].
    pub fn grid(dims: &[usize]) -> Result<Topology, TopoError> {
        let adj = Self::mesh(dims, false)?;
        Ok(Self::from_parts(Shape::Grid(dims.to_vec()), adj))
    }

    /// An N-dimensional torus (a grid with wrap-around in every dimension), row-major.
    ///
    /// # Errors
    /// As [`grid`](Self::grid).
    pub fn torus(dims: &[usize]) -> Result<Topology, TopoError> {
        let adj = Self::mesh(dims, true)?;
        Ok(Self::from_parts(Shape::Torus(dims.to_vec()), adj))
    }

    fn mesh(dims: &[usize], wrap: bool) -> Result<Vec<Vec<(usize, u32)>>, TopoError> {
        if dims.is_empty() || dims.contains(&0) {
            return Err(TopoError::Invalid(format!(
                "grid dimensions {dims:?}: need at least one, each at least 1"
            )));
        }
        let n = dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| TopoError::Invalid(format!("grid {dims:?} is too large")))?;
        Self::check_size(n)?;
        let mut adj = vec![Vec::new(); n];
        for (id, a) in adj.iter_mut().enumerate() {
            for dim in 0..dims.len() {
                for disp in [-1isize, 1] {
                    if let Some(j) = mesh_shift(dims, wrap, id, dim, disp) {
                        if j != id {
                            a.push((j, 1));
                        }
                    }
                }
            }
        }
        Ok(adj)
    }

    /// An arbitrary topology from an adjacency matrix: entry (i,j) is the weight of the
    /// channel between i and j, 0 for none; the diagonal must be 0 (a process has no channel to
    /// itself). Channels go both ways, so the matrix must be symmetric; the graph must be
    /// connected.
    ///
    /// ```
    /// use converse_topo::{Topology, TopoError};
    /// let t = Topology::from_matrix(&[vec![0, 1, 0], vec![1, 0, 1], vec![0, 1, 0]]).unwrap();
    /// assert_eq!(t.neighbours(1), [0, 2]);
    /// let e = Topology::from_matrix(&[vec![0, 1, 0], vec![1, 0, 0], vec![0, 0, 0]]);
    /// assert_eq!(e.unwrap_err(), TopoError::Disconnected { process: 2 });
    /// let e = Topology::from_matrix(&[vec![5, 1], vec![1, 0]]);
    /// assert_eq!(e.unwrap_err(), TopoError::SelfChannel { process: 0, weight: 5 });
    /// ```
    ///
    /// # Errors
    /// [`TopoError::NotSquare`], [`TopoError::SelfChannel`], [`TopoError::NotSymmetric`],
    /// [`TopoError::Disconnected`], [`TopoError::Empty`].
    pub fn from_matrix<R: AsRef<[u32]>>(m: &[R]) -> Result<Topology, TopoError> {
        let n = m.len();
        Self::check_size(n)?;
        for (row, r) in m.iter().enumerate() {
            if r.as_ref().len() != n {
                return Err(TopoError::NotSquare {
                    row,
                    got: r.as_ref().len(),
                    rows: n,
                });
            }
        }
        if let Some((process, weight)) =
            (0..n).map(|i| (i, m[i].as_ref()[i])).find(|&(_, w)| w != 0)
        {
            return Err(TopoError::SelfChannel { process, weight });
        }
        let mut adj = vec![Vec::new(); n];
        let mut weighted = false;
        for (a, adj_a) in adj.iter_mut().enumerate() {
            for b in 0..n {
                let (ab, ba) = (m[a].as_ref()[b], m[b].as_ref()[a]);
                if a == b || ab == 0 && ba == 0 {
                    continue;
                }
                if ab != ba {
                    return Err(TopoError::NotSymmetric { a, b, ab, ba });
                }
                weighted |= ab != 1;
                adj_a.push((b, ab));
            }
        }
        let t = Self::from_parts(Shape::Arbitrary { weighted }, adj);
        t.check_connected()?;
        Ok(t)
    }

    /// An arbitrary topology from a matrix file (see [`crate::matrix`] for the format) of at
    /// most [`MAX_FILE_BYTES`](crate::files::MAX_FILE_BYTES).
    ///
    /// # Errors
    /// [`TopoError::Io`] (also for a larger file), [`TopoError::Parse`] (one line: file, line,
    /// reason), and those of [`from_matrix`](Self::from_matrix).
    pub fn from_matrix_file(path: impl AsRef<std::path::Path>) -> Result<Topology, TopoError> {
        let path = path.as_ref();
        let text = crate::files::read_text(path)?;
        let m = crate::matrix::parse(&text, &path.display().to_string())?;
        Self::from_matrix(&m)
    }

    fn check_connected(&self) -> Result<(), TopoError> {
        let n = self.len();
        let mut seen = vec![false; n];
        let mut stack = vec![0];
        seen[0] = true;
        while let Some(v) = stack.pop() {
            for &w in &self.ids[v] {
                if !seen[w] {
                    seen[w] = true;
                    stack.push(w);
                }
            }
        }
        match seen.iter().position(|s| !s) {
            Some(process) => Err(TopoError::Disconnected { process }),
            None => Ok(()),
        }
    }

    /// Run process i on PE `pes[i]` instead of PE i (a topology over some of the job's PEs,
    /// or in another order). PEs not listed get no place in the topology.
    ///
    /// # Errors
    /// [`TopoError::Placement`] when the list's length is not the topology's or names a PE
    /// twice.
    pub fn on_pes(mut self, pes: &[usize]) -> Result<Topology, TopoError> {
        if pes.len() != self.len() {
            return Err(TopoError::Placement(format!(
                "{} PEs listed for a topology of {} processes",
                pes.len(),
                self.len()
            )));
        }
        let mut sorted = pes.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(TopoError::Placement(format!("PE {} is listed twice", w[0])));
        }
        self.pes = pes.to_vec();
        Ok(self)
    }

    /// The class and what defines it.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Number of processes.
    pub fn len(&self) -> usize {
        self.adj.len()
    }

    /// Never true: a topology has at least one process.
    pub fn is_empty(&self) -> bool {
        self.adj.is_empty()
    }

    /// The PE process `id` runs on.
    pub fn pe_of(&self, id: usize) -> Option<usize> {
        self.pes.get(id).copied()
    }

    /// The process that runs on `pe`, if one does.
    pub fn id_of_pe(&self, pe: usize) -> Option<usize> {
        self.pes.iter().position(|&p| p == pe)
    }

    /// The PEs, by process id.
    pub fn pes(&self) -> &[usize] {
        &self.pes
    }

    /// The neighbours of `id`, in increasing order (empty for an id not in the topology).
    pub fn neighbours(&self, id: usize) -> &[usize] {
        self.ids.get(id).map_or(&[], Vec::as_slice)
    }

    /// The channels of `id` with their weights, by neighbour.
    pub fn channels(&self, id: usize) -> &[(usize, u32)] {
        self.adj.get(id).map_or(&[], Vec::as_slice)
    }

    /// Whether a channel joins `a` and `b`.
    pub fn is_edge(&self, a: usize, b: usize) -> bool {
        self.neighbours(a).binary_search(&b).is_ok()
    }

    /// Every channel once, as (a, b, weight) with a < b.
    pub fn edges(&self) -> Vec<(usize, usize, u32)> {
        let mut v = Vec::new();
        for (a, adj) in self.adj.iter().enumerate() {
            v.extend(adj.iter().filter(|e| e.0 > a).map(|&(b, w)| (a, b, w)));
        }
        v
    }

    /// The extents of the topology's dimensions: a grid's or torus's own, `[n]` for a line
    /// or ring; `None` for the others.
    pub fn dims(&self) -> Option<Vec<usize>> {
        match &self.shape {
            Shape::Grid(d) | Shape::Torus(d) => Some(d.clone()),
            Shape::Line | Shape::Ring => Some(vec![self.len()]),
            _ => None,
        }
    }

    /// The coordinates of `id` (row-major for grids and tori; `[id]` on a line or ring);
    /// `None` for classes without coordinates or an id not in the topology.
    pub fn coords(&self, id: usize) -> Option<Vec<usize>> {
        if id >= self.len() {
            return None;
        }
        let dims = self.dims()?;
        let mut c = vec![0; dims.len()];
        let mut rest = id;
        for (k, &d) in dims.iter().enumerate().rev() {
            c[k] = rest % d;
            rest /= d;
        }
        Some(c)
    }

    /// The process at `coords`, if the topology has coordinates and they are inside it.
    pub fn at(&self, coords: &[usize]) -> Option<usize> {
        let dims = self.dims()?;
        if coords.len() != dims.len() || coords.iter().zip(&dims).any(|(c, d)| c >= d) {
            return None;
        }
        Some(coords.iter().zip(&dims).fold(0, |a, (c, d)| a * d + c))
    }

    /// The process `disp` steps from `id` along dimension `dim` (MPI's `MPI_Cart_shift`):
    /// wrapping on a ring or torus, `None` past the edge of a line or grid, or for classes
    /// without dimensions.
    pub fn shift(&self, id: usize, dim: usize, disp: isize) -> Option<usize> {
        if id >= self.len() {
            return None;
        }
        let (dims, wrap) = match &self.shape {
            Shape::Grid(d) => (d.clone(), false),
            Shape::Torus(d) => (d.clone(), true),
            Shape::Line => (vec![self.len()], false),
            Shape::Ring => (vec![self.len()], true),
            _ => return None,
        };
        mesh_shift(&dims, wrap, id, dim, disp)
    }

    /// The next process on the route from `from` to `to` (`to` itself when they are
    /// neighbours; `None` when `from == to` or either is not a process). Routes follow
    /// shortest paths (by weight, on a weighted arbitrary graph; ties to the lower id), and
    /// are fixed, so messages from one process to another all take the same path.
    pub fn next_hop(&self, from: usize, to: usize) -> Option<usize> {
        if from == to || from >= self.len() || to >= self.len() {
            return None;
        }
        let table = self.next[to].get_or_init(|| routing::toward(&self.adj, to));
        Some(table[from] as usize)
    }

    /// The whole route from `from` to `to`, both ends included.
    pub fn route(&self, from: usize, to: usize) -> Vec<usize> {
        let mut path = vec![from];
        let mut at = from;
        while let Some(h) = self.next_hop(at, to) {
            path.push(h);
            at = h;
        }
        path
    }

    /// Hops on the route from `a` to `b`.
    pub fn distance(&self, a: usize, b: usize) -> usize {
        self.route(a, b).len() - 1
    }

    /// The largest distance between two processes.
    pub fn diameter(&self) -> usize {
        let n = self.len();
        (0..n)
            .map(|a| (0..n).map(|b| self.distance(a, b)).max().unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    /// The spanning tree collectives rooted at `root` travel: for an arbitrary graph a
    /// minimum spanning tree of its weights, for the regular classes a shortest-path tree on
    /// the topology's own channels (a 4-ary tree when every channel exists) — unless that
    /// tree gives a process more than [`tree::WIDEST`] children (a star's centre), when it is
    /// the 4-ary tree over the processes ([`Tree::over_channels`] says which). `None` when
    /// `root` is not a process.
    pub fn tree(&self, root: usize) -> Option<&Tree> {
        let cell = self.trees.get(root)?;
        Some(cell.get_or_init(|| {
            match self.shape {
                Shape::Arbitrary { .. } => tree::minimum(&self.adj, root),
                Shape::Full => tree::kary(self.len(), root, tree::BRANCHING),
                _ => tree::shortest(&self.adj, root),
            }
            .or_kary_if_wide()
        }))
    }
}

/// `id` moved `disp` along `dim` of a row-major mesh of `dims`.
fn mesh_shift(dims: &[usize], wrap: bool, id: usize, dim: usize, disp: isize) -> Option<usize> {
    let d = *dims.get(dim)? as isize;
    let stride: usize = dims[dim + 1..].iter().product();
    let c = ((id / stride) % d as usize) as isize;
    let moved = c + disp;
    let moved = if wrap {
        moved.rem_euclid(d)
    } else if (0..d).contains(&moved) {
        moved
    } else {
        return None;
    };
    Some((id as isize + (moved - c) * stride as isize) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_classes(n: usize) -> Vec<Topology> {
        let mut v = vec![
            Topology::fully_connected(n).unwrap(),
            Topology::star(n, 0).unwrap(),
            Topology::star(n, n - 1).unwrap(),
            Topology::line(n).unwrap(),
            Topology::ring(n).unwrap(),
            Topology::grid2(1, n).unwrap(),
            Topology::grid2(n, 1).unwrap(),
            Topology::torus2(1, n).unwrap(),
        ];
        if n == 16 {
            v.push(Topology::grid2(4, 4).unwrap());
            v.push(Topology::torus2(4, 4).unwrap());
            v.push(Topology::torus(&[2, 2, 4]).unwrap());
            v.push(Topology::grid(&[2, 4, 2]).unwrap());
        }
        // A ring with a chord, weighted: an arbitrary graph.
        let mut m = vec![vec![0u32; n]; n];
        for (i, j) in (0..n).map(|i| (i, (i + 1) % n)) {
            if i != j {
                let w = 1 + (i as u32 % 3);
                m[i][j] = w;
                m[j][i] = w;
            }
        }
        if n > 3 {
            m[0][n / 2] = 5;
            m[n / 2][0] = 5;
        }
        v.push(Topology::from_matrix(&m).unwrap());
        v
    }

    #[test]
    fn edges_are_symmetric_and_never_loops() {
        for n in [1, 2, 7, 16] {
            for t in all_classes(n) {
                for a in 0..n {
                    assert!(!t.is_edge(a, a), "{:?} {a}", t.shape());
                    for &b in t.neighbours(a) {
                        assert!(t.is_edge(b, a));
                    }
                }
            }
        }
    }

    #[test]
    fn neighbour_counts_of_each_class() {
        let n = 7;
        assert!(Topology::fully_connected(n)
            .unwrap()
            .neighbours(3)
            .eq(&[0, 1, 2, 4, 5, 6]));
        let s = Topology::star(n, 2).unwrap();
        assert_eq!(s.neighbours(2).len(), 6);
        assert_eq!(s.neighbours(5), [2]);
        let l = Topology::line(n).unwrap();
        assert_eq!(l.neighbours(0), [1]);
        assert_eq!(l.neighbours(6), [5]);
        let r = Topology::ring(n).unwrap();
        assert_eq!(r.neighbours(0), [1, 6]);
        assert_eq!(Topology::ring(2).unwrap().neighbours(0), [1]);
        assert!(Topology::ring(1).unwrap().neighbours(0).is_empty());
        let g = Topology::grid2(3, 4).unwrap();
        assert_eq!(g.neighbours(0), [1, 4]);
        assert_eq!(g.neighbours(5), [1, 4, 6, 9]);
        let t = Topology::torus2(3, 4).unwrap();
        assert_eq!(t.neighbours(0), [1, 3, 4, 8]);
        // A torus dimension of 2 joins the two once; of 1, not at all.
        assert_eq!(Topology::torus2(2, 1).unwrap().neighbours(0), [1]);
        let t3 = Topology::torus(&[3, 3, 3]).unwrap();
        assert!(t3.neighbours(13).len() == 6 && t3.neighbours(0).len() == 6);
    }

    #[test]
    fn coordinates_shift_and_at_are_row_major() {
        let g = Topology::grid2(3, 4).unwrap();
        assert_eq!(g.coords(0), Some(vec![0, 0]));
        assert_eq!(g.coords(11), Some(vec![2, 3]));
        assert_eq!(g.coords(6), Some(vec![1, 2]));
        assert_eq!(g.at(&[1, 2]), Some(6));
        assert_eq!(g.shift(6, 0, 1), Some(10));
        assert_eq!(g.shift(6, 1, -1), Some(5));
        assert_eq!(g.shift(3, 1, 1), None);
        let t = Topology::torus2(3, 4).unwrap();
        assert_eq!(t.shift(3, 1, 1), Some(0));
        assert_eq!(t.shift(1, 0, -1), Some(9));
        let t3 = Topology::torus(&[2, 3, 4]).unwrap();
        for id in 0..24 {
            let c = t3.coords(id).unwrap();
            assert_eq!(t3.at(&c), Some(id));
        }
        assert_eq!(t3.shift(0, 0, 1), Some(12));
        let r = Topology::ring(5).unwrap();
        assert_eq!(r.shift(4, 0, 1), Some(0));
        assert_eq!(Topology::line(5).unwrap().shift(4, 0, 1), None);
        assert_eq!(Topology::star(5, 0).unwrap().shift(1, 0, 1), None);
    }

    #[test]
    fn routes_are_shortest_and_use_only_edges() {
        for n in [1, 2, 7, 16] {
            for t in all_classes(n) {
                for a in 0..n {
                    for b in 0..n {
                        let p = t.route(a, b);
                        assert_eq!((p[0], *p.last().unwrap()), (a, b));
                        for w in p.windows(2) {
                            assert!(t.is_edge(w[0], w[1]), "{:?} {a}->{b}: {p:?}", t.shape());
                        }
                    }
                }
                // Hop counts of the regular classes are known.
                match t.shape() {
                    Shape::Ring => assert_eq!(t.distance(0, n / 2), n / 2),
                    Shape::Line => assert_eq!(t.distance(0, n - 1), n - 1),
                    Shape::Full => assert_eq!(t.diameter(), usize::from(n > 1)),
                    Shape::Star { .. } => assert_eq!(t.diameter(), (n - 1).min(2)),
                    _ => {}
                }
            }
        }
        assert_eq!(Topology::torus2(4, 4).unwrap().diameter(), 4);
        assert_eq!(Topology::grid2(4, 4).unwrap().diameter(), 6);
        assert_eq!(Topology::torus(&[4, 4, 4]).unwrap().diameter(), 6);
    }

    #[test]
    fn weighted_routes_prefer_light_paths() {
        // 0-1 costs 10, 0-2-1 costs 2: the route goes round.
        let t = Topology::from_matrix(&[[0, 10, 1], [10, 0, 1], [1, 1, 0]]).unwrap();
        assert_eq!(t.route(0, 1), [0, 2, 1]);
        assert_eq!(t.shape(), &Shape::Arbitrary { weighted: true });
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert_eq!(Topology::ring(0).unwrap_err(), TopoError::Empty);
        assert!(matches!(Topology::star(3, 3), Err(TopoError::Invalid(_))));
        assert!(matches!(Topology::grid(&[]), Err(TopoError::Invalid(_))));
        assert!(matches!(
            Topology::grid(&[3, 0]),
            Err(TopoError::Invalid(_))
        ));
        assert!(matches!(
            Topology::torus(&[usize::MAX, 4]),
            Err(TopoError::Invalid(_))
        ));
        assert_eq!(
            Topology::from_matrix(&[vec![0, 1], vec![1]]).unwrap_err(),
            TopoError::NotSquare {
                row: 1,
                got: 1,
                rows: 2
            }
        );
        assert!(matches!(
            Topology::from_matrix(&[[0, 1], [2, 0]]),
            Err(TopoError::NotSymmetric { a: 0, b: 1, .. })
        ));
        let e = Topology::from_matrix(&[[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]);
        assert_eq!(e.unwrap_err(), TopoError::Disconnected { process: 2 });
        assert!(e_text(Topology::ring(4).unwrap().on_pes(&[0, 1, 1, 2])).contains("twice"));
        assert!(e_text(Topology::ring(4).unwrap().on_pes(&[0, 1])).contains("2 PEs listed"));
    }

    fn e_text(r: Result<Topology, TopoError>) -> String {
        r.map(|_| String::new()).unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn placement_on_a_list_of_pes() {
        let t = Topology::ring(3).unwrap().on_pes(&[4, 2, 7]).unwrap();
        assert_eq!(t.pe_of(1), Some(2));
        assert_eq!(t.id_of_pe(7), Some(2));
        assert_eq!(t.id_of_pe(0), None);
        assert_eq!(t.clone().pes(), [4, 2, 7]);
    }
}
