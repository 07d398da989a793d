//! Ready-made combine functions for [`Pe::reduce`](crate::Pe::reduce). Values are
//! little-endian. A contribution whose length differs from the accumulator's, or is not whole
//! words, is an error: the runtime ends the job naming the PEs and the lengths (it folded
//! nothing of it: a wrong answer would be worse).

use std::cell::Cell;

/// A contribution a combine function of this module could not fold: (the function, its word
/// size, the accumulator's length, the contribution's length).
pub(crate) type Mismatch = (&'static str, usize, usize, usize);

thread_local! {
    /// The last mismatch on this thread, for the runtime to report after the fold.
    static MISMATCH: Cell<Option<Mismatch>> = const { Cell::new(None) };
}

/// Note a contribution `op` could not fold, for the runtime to report after the fold.
pub(crate) fn mismatch(op: &'static str, word: usize, acc: usize, x: usize) {
    MISMATCH.with(|m| m.set(Some((op, word, acc, x))));
}

/// The mismatch the last fold on this thread met, if any (taken).
pub(crate) fn take_mismatch() -> Option<Mismatch> {
    MISMATCH.with(Cell::take)
}

macro_rules! fold_words {
    ($name:ident, $t:ty, $op:expr, $doc:literal) => {
        #[doc = $doc]
        // The signature is the `Combine` one, which must allow growing the accumulator.
        #[allow(clippy::ptr_arg)]
        pub fn $name(acc: &mut Vec<u8>, x: &[u8]) {
            const W: usize = std::mem::size_of::<$t>();
            if acc.len() != x.len() || acc.len() % W != 0 {
                mismatch(concat!("ops::", stringify!($name)), W, acc.len(), x.len());
                return;
            }
            for (a, b) in acc.chunks_exact_mut(W).zip(x.chunks_exact(W)) {
                let (Ok(av), Ok(bv)) = (<[u8; W]>::try_from(&*a), <[u8; W]>::try_from(b)) else {
                    return;
                };
                let f: fn($t, $t) -> $t = $op;
                a.copy_from_slice(
                    &f(<$t>::from_le_bytes(av), <$t>::from_le_bytes(bv)).to_le_bytes(),
                );
            }
        }
    };
}

fold_words!(
    sum_u64,
    u64,
    |a, b| a.wrapping_add(b),
    "Element-wise sum of `u64` arrays."
);
fold_words!(
    max_u64,
    u64,
    |a, b| a.max(b),
    "Element-wise maximum of `u64` arrays."
);
fold_words!(
    min_u64,
    u64,
    |a, b| a.min(b),
    "Element-wise minimum of `u64` arrays."
);
fold_words!(
    sum_i64,
    i64,
    |a, b| a.wrapping_add(b),
    "Element-wise sum of `i64` arrays."
);
fold_words!(
    sum_f64,
    f64,
    |a, b| a + b,
    "Element-wise sum of `f64` arrays."
);
fold_words!(
    max_f64,
    f64,
    |a, b| a.max(b),
    "Element-wise maximum of `f64` arrays."
);

/// Concatenation (in arrival order, so only for order-insensitive uses such as sets).
pub fn concat(acc: &mut Vec<u8>, x: &[u8]) {
    acc.extend_from_slice(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_maxima() {
        let mut a = [1u64, 5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>();
        let b = [2u64, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>();
        let mut m = a.clone();
        sum_u64(&mut a, &b);
        max_u64(&mut m, &b);
        let words = |v: &[u8]| -> Vec<u64> {
            v.chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect()
        };
        assert_eq!(words(&a), [3, 8]);
        assert_eq!(words(&m), [2, 5]);
    }

    #[test]
    fn wrong_lengths_leave_the_accumulator_alone() {
        let mut a = 7u64.to_le_bytes().to_vec();
        sum_u64(&mut a, &[1, 2, 3]);
        assert_eq!(a, 7u64.to_le_bytes());
    }
}
