//! Which bytes of a run's vector are still the caller's input, not yet copied in.
//!
//! A run starts from the caller's input but does not copy it into its own vector up front:
//! a part it sends before changing it goes out from the input, a part it folds is copied in
//! piece by piece as the fold reaches it (while the piece is in the cache anyway), and a part
//! a partner hands back whole is never copied at all. That saves a pass over the whole vector
//! through memory per call. A call that returns before the run completes copies in what is
//! left ([`Pending::fill`] over everything), so a later call never reads its own input.

use std::ops::Range;

/// Byte ranges of a run's vector that still have to come from the input: ascending, disjoint
/// and non-empty.
#[derive(Debug, Default)]
pub(crate) struct Pending(Vec<Range<usize>>);

impl Pending {
    /// All of a vector of `len` bytes is pending (keeping the list's memory).
    pub(crate) fn reset(&mut self, len: usize) {
        self.0.clear();
        if len > 0 {
            self.0.push(0..len);
        }
    }

    /// Whether all of `r` is pending.
    pub(crate) fn all_in(&self, r: &Range<usize>) -> bool {
        self.0.iter().any(|p| p.start <= r.start && r.end <= p.end)
    }

    /// Copies the pending bytes within `r` from `input` into `acc` (both the whole vector)
    /// and takes them off the list.
    pub(crate) fn fill(&mut self, r: Range<usize>, input: &[u8], acc: &mut [u8]) {
        if self.0.is_empty() {
            return;
        }
        for p in &self.0 {
            let (start, end) = (p.start.max(r.start), p.end.min(r.end));
            if start < end {
                gaspi_segments::copy_bytes(&mut acc[start..end], &input[start..end]);
            }
        }
        self.take(r);
    }

    /// Takes `r` off the list: those bytes of the vector are the run's own now.
    pub(crate) fn take(&mut self, r: Range<usize>) {
        let first = self.0.partition_point(|p| p.end <= r.start);
        let last = first + self.0[first..].partition_point(|p| p.start < r.end);
        if first == last {
            return;
        }
        let (head, tail) = (self.0[first].start, self.0[last - 1].end);
        let left = (head < r.start).then_some(head..r.start);
        let right = (r.end < tail).then_some(r.end..tail);
        self.0.splice(first..last, left.into_iter().chain(right));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(ranges: &[Range<usize>]) -> Pending {
        Pending(ranges.to_vec())
    }

    #[test]
    fn taking_splits_trims_and_drops_ranges() {
        let mut p = Pending::default();
        p.reset(100);
        p.take(40..60);
        assert_eq!(p.0, [0..40, 60..100]);
        p.take(0..10);
        assert_eq!(p.0, [10..40, 60..100]);
        p.take(30..70);
        assert_eq!(p.0, [10..30, 70..100]);
        p.take(50..60);
        assert_eq!(p.0, [10..30, 70..100]);
        p.take(0..100);
        assert!(p.0.is_empty());
        p.reset(0);
        assert!(p.0.is_empty());
    }

    #[test]
    fn a_range_is_pending_only_when_wholly_inside_one() {
        let p = pending(&[10..30, 70..100]);
        assert!(p.all_in(&(10..30)) && p.all_in(&(75..80)));
        assert!(!p.all_in(&(20..40)) && !p.all_in(&(30..70)) && !p.all_in(&(0..100)));
    }

    #[test]
    fn filling_copies_only_pending_bytes() {
        let input: Vec<u8> = (0..10).collect();
        let mut acc = vec![99u8; 10];
        let mut p = pending(&[0..3, 6..10]);
        p.fill(2..8, &input, &mut acc);
        assert_eq!(acc, [99, 99, 2, 99, 99, 99, 6, 7, 99, 99]);
        assert_eq!(p.0, [0..2, 8..10]);
        p.fill(0..10, &input, &mut acc);
        assert_eq!(acc, [0, 1, 2, 99, 99, 99, 6, 7, 8, 9]);
        assert!(p.0.is_empty());
    }
}
