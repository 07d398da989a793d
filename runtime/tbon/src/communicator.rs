//! Communicators: sets of end-points (back-end ranks) that streams are made over.

use crate::error::TbonError;
use crate::topology::Rank;
use std::rc::Rc;

/// A set of back-ends, by rank. Made by a [`Network`](crate::Network): its broadcast
/// communicator (every back-end) or one of chosen ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Communicator {
    /// Sorted, no duplicates.
    endpoints: Vec<Rank>,
    /// Every back-end rank of the network when it was made (sorted): those it may add.
    known: Rc<[Rank]>,
}

impl Communicator {
    pub(crate) fn new(known: Rc<[Rank]>) -> Communicator {
        Communicator {
            endpoints: Vec::new(),
            known,
        }
    }

    pub(crate) fn all(known: Rc<[Rank]>) -> Communicator {
        Communicator {
            endpoints: known.to_vec(),
            known,
        }
    }

    /// Keep only the end-points `keep` says to.
    pub(crate) fn retain(&mut self, keep: impl Fn(Rank) -> bool) {
        self.endpoints.retain(|&r| keep(r));
    }

    /// Add back-end `rank` (already there: nothing changes).
    ///
    /// # Errors
    /// [`TbonError::BadRank`] when no back-end has that rank (one that attached after the
    /// communicator was made is not known to it: make another).
    pub fn add_endpoint(&mut self, rank: Rank) -> Result<(), TbonError> {
        if self.known.binary_search(&rank).is_err() {
            let n = self.known.len();
            let why = if n > 0 && self.known[n - 1] as usize == n - 1 {
                format!("back-ends are ranked 0 to {}", n - 1)
            } else {
                format!("the network has {n} back-ends")
            };
            return Err(TbonError::BadRank(format!(
                "rank {rank} is not a back-end ({why})"
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
        let known = |n: Rank| -> Rc<[Rank]> { (0..n).collect() };
        let mut c = Communicator::new(known(4));
        for r in [3, 1, 3, 0] {
            assert!(c.add_endpoint(r).is_ok());
        }
        assert_eq!(c.endpoints(), [0, 1, 3]);
        let e = c.add_endpoint(4).unwrap_err().to_string();
        assert_eq!(e, "rank 4 is not a back-end (back-ends are ranked 0 to 3)");
        assert_eq!(Communicator::all(known(3)).size(), 3);
        let mut c = Communicator::all(known(4));
        c.retain(|r| r != 2);
        assert_eq!(c.endpoints(), [0, 1, 3]);
        // A rank left out is still a rank of the tree: it may be added back.
        assert!(c.add_endpoint(2).is_ok());
        assert!(Communicator::all(known(3)).contains(2));
        // Attached back-ends' ranks are whatever they chose.
        let mut c = Communicator::new(vec![7, 900].into());
        assert!(c.add_endpoint(900).is_ok());
        let e = c.add_endpoint(8).unwrap_err().to_string();
        assert_eq!(e, "rank 8 is not a back-end (the network has 2 back-ends)");
    }
}
