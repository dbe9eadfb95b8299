//! [`Pending`]: the sources of a round not handed out yet, as a set of their indices in the
//! plan, which a look for an arrival walks instead of every source of the plan.

use smallvec::SmallVec;

/// Bits per word of the set.
const WORD: usize = u64::BITS as usize;

/// A set of source indices `0..n`, all in it at first, taken out one by one: one bit per
/// source, and the first word that still has one, so that a walk skips the sources handed out
/// by the word, not one by one (a round's looks grew with the square of its sources).
#[derive(Debug, Clone)]
pub(super) struct Pending {
    /// Bit `i % 64` of word `i / 64`: source `i` is pending. Up to 64 sources in place.
    words: SmallVec<[u64; 1]>,
    /// The first word with a bit set (`words.len()` once none has).
    first: usize,
    len: usize,
}

impl Pending {
    /// Every index in `0..n`.
    pub(super) fn all(n: usize) -> Pending {
        let mut words = SmallVec::from_elem(u64::MAX, n.div_ceil(WORD));
        if let Some(last) = words.last_mut() {
            let used = n % WORD;
            if used != 0 {
                *last = (1 << used) - 1;
            }
        }
        Pending {
            words,
            first: 0,
            len: n,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / WORD)
            .is_some_and(|w| w & (1 << (i % WORD)) != 0)
    }

    /// Takes `i` out; `false` when it was not in.
    pub(super) fn remove(&mut self, i: usize) -> bool {
        let (w, bit) = (i / WORD, 1 << (i % WORD));
        let Some(word) = self.words.get_mut(w).filter(|word| **word & bit != 0) else {
            return false;
        };
        *word &= !bit;
        self.len -= 1;
        if *word == 0 && w == self.first {
            self.first = (w..self.words.len())
                .find(|&k| self.words[k] != 0)
                .unwrap_or(self.words.len());
        }
        true
    }

    /// The smallest index in the set at or after `from`.
    pub(super) fn next_from(&self, from: usize) -> Option<usize> {
        let mut w = (from / WORD).max(self.first);
        let mut bits = *self.words.get(w)?;
        if w == from / WORD {
            bits &= u64::MAX << (from % WORD);
        }
        loop {
            if bits != 0 {
                return Some(w * WORD + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.words.get(w)?;
        }
    }

    /// The indices in the set, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(self.next_from(0), |&i| self.next_from(i + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::Pending;

    #[test]
    fn holds_every_index_until_taken_out() {
        for n in [0, 1, 3, 63, 64, 65, 130] {
            let mut p = Pending::all(n);
            assert_eq!(p.is_empty(), n == 0);
            assert_eq!(p.iter().collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
            assert!(!p.contains(n), "{n} is past the set");
            // Every third, then the rest backwards: the walk and the first word follow.
            let order: Vec<usize> = (0..n).step_by(3).chain((0..n).rev()).collect();
            let mut left: Vec<usize> = (0..n).collect();
            for i in order {
                let was = left.contains(&i);
                assert_eq!(p.remove(i), was, "n {n}: remove {i}");
                left.retain(|&k| k != i);
                assert_eq!(p.iter().collect::<Vec<_>>(), left, "n {n} after {i}");
                assert_eq!(p.is_empty(), left.is_empty());
                assert_eq!(p.next_from(i), left.iter().copied().find(|&k| k >= i));
            }
            assert!(p.is_empty());
            assert_eq!(p.next_from(0), None);
        }
    }
}
