//! Vector time: one counter per process of the topology (Mattern and Fidge).
//!
//! A process ticks its own entry at every topology send and receive; a receive first takes
//! the entry-wise maximum with the time the message carries. So event `a` happened before
//! event `b` exactly when `a`'s vector is below `b`'s ([`VectorTime::happened_before`]).

/// A vector time, one entry per process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct VectorTime(pub Vec<u64>);

impl VectorTime {
    /// The entries, by process id.
    pub fn entries(&self) -> &[u64] {
        &self.0
    }

    /// Whether the event stamped `self` happened before the one stamped `other`: no entry
    /// greater, and the two differ.
    ///
    /// ```
    /// use converse_topo::VectorTime;
    /// let a = VectorTime(vec![1, 0]);
    /// let b = VectorTime(vec![1, 2]);
    /// assert!(a.happened_before(&b) && !b.happened_before(&a));
    /// assert!(VectorTime(vec![0, 1]).concurrent(&VectorTime(vec![1, 0])));
    /// ```
    pub fn happened_before(&self, other: &VectorTime) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(a, b)| a <= b)
            && self.0 != other.0
    }

    /// Neither happened before the other.
    pub fn concurrent(&self, other: &VectorTime) -> bool {
        self != other && !self.happened_before(other) && !other.happened_before(self)
    }

    /// The text form traces use: entries joined by commas.
    pub fn to_text(&self) -> String {
        let v: Vec<String> = self.0.iter().map(u64::to_string).collect();
        v.join(",")
    }

    /// Read [`to_text`](Self::to_text)'s form.
    pub fn from_text(s: &str) -> Option<VectorTime> {
        if s.is_empty() {
            return Some(VectorTime(Vec::new()));
        }
        s.split(',')
            .map(|x| x.parse().ok())
            .collect::<Option<Vec<u64>>>()
            .map(VectorTime)
    }
}

/// Take the entry-wise maximum of `mine` and `theirs`, then tick `me`: a receive.
pub(crate) fn merge_tick(mine: &mut [u64], theirs: impl Iterator<Item = u64>, me: usize) {
    for (m, t) in mine.iter_mut().zip(theirs) {
        *m = (*m).max(t);
    }
    mine[me] += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_takes_maxima_then_ticks() {
        let mut v = vec![3, 0, 5];
        merge_tick(&mut v, [1, 4, 5].into_iter(), 0);
        assert_eq!(v, [4, 4, 5]);
    }

    #[test]
    fn text_round_trip() {
        let v = VectorTime(vec![0, 7, 12]);
        assert_eq!(VectorTime::from_text(&v.to_text()), Some(v));
        assert_eq!(VectorTime::from_text("1,x"), None);
    }
}
