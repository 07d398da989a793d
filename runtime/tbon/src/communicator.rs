//! Communicators: sets of end-points (back-end ranks) that streams are made over.

use crate::error::TbonError;
use crate::topology::Rank;

/// A set of back-ends, by rank. Made by a [`Network`](crate::Network): its broadcast
/// communicator (every back-end) or one of chosen ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Communicator {
    /// Sorted, no duplicates.
    endpoints: Vec<Rank>,
    num_backends: usize,
}

impl Communicator {
    pub(crate) fn new(num_backends: usize) -> Communicator {
        Communicator {
            endpoints: Vec::new(),
            num_backends,
        }
    }

    pub(crate) fn all(num_backends: usize) -> Communicator {
        Communicator {
            endpoints: (0..num_backends as Rank).collect(),
            num_backends,
        }
    }

    /// Keep only the end-points `keep` says to.
    pub(crate) fn retain(&mut self, keep: impl Fn(Rank) -> bool) {
        self.endpoints.retain(|&r| keep(r));
    }

    /// Add back-end `rank` (already there: nothing changes).
    ///
    /// # Errors
    /// [`TbonError::BadRank`] when no back-end has that rank.
    pub fn add_endpoint(&mut self, rank: Rank) -> Result<(), TbonError> {
        if rank as usize >= self.num_backends {
            return Err(TbonError::BadRank(format!(
                "rank {rank} is not a back-end (back-ends are ranked 0 to {})",
                self.num_backends as i64 - 1
            )));
        }
        if let Err(at) = self.endpoints.binary_search(&rank) {
            self.endpoints.insert(at, rank);
        }
        Ok(())
    }

    /// The end-points, in rank order.
    pub fn endpoints(&self) -> &[Rank] {
        &self.endpoints
    }

    /// Number of end-points.
    pub fn size(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether it has no end-point.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Whether `rank` is an end-point.
    pub fn contains(&self, rank: Rank) -> bool {
        self.endpoints.binary_search(&rank).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_stay_sorted_and_checked() {
        let mut c = Communicator::new(4);
        for r in [3, 1, 3, 0] {
            assert!(c.add_endpoint(r).is_ok());
        }
        assert_eq!(c.endpoints(), [0, 1, 3]);
        let e = c.add_endpoint(4).unwrap_err().to_string();
        assert_eq!(e, "rank 4 is not a back-end (back-ends are ranked 0 to 3)");
        assert_eq!(Communicator::all(3).size(), 3);
        let mut c = Communicator::all(4);
        c.retain(|r| r != 2);
        assert_eq!(c.endpoints(), [0, 1, 3]);
        // A rank left out is still a rank of the tree: it may be added back.
        assert!(c.add_endpoint(2).is_ok());
        assert!(Communicator::all(3).contains(2));
    }
}
