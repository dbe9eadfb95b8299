//! Owns the chunk summary of a notification table: one bit per chunk of consecutive slots,
//! meaning "a slot in this chunk may be non-zero", so that scans skip empty chunks.
//!
//! The bit is only a hint in one direction: a set bit may be stale (the slot was reset since),
//! but a clear bit must not hide a non-zero slot from a scan that needs to see it. The table
//! keeps that promise by marking after every store a chunk not marked yet, and by re-checking
//! after every unmark, each behind a SeqCst fence (see `NotificationTable::set` and its
//! scan).

use crate::sync::{AtomicU32, Ordering};

/// log2 of the number of slots per chunk. 64 slots (256 bytes of slots) per bit keeps the
/// summary of a 65536-slot table at 16 words. Under loom, chunks of 2 slots let a 4-slot
/// model table span several chunks.
const CHUNK_SHIFT: u32 = if cfg!(loom) { 1 } else { 6 };

/// Number of slots per chunk.
pub(crate) const CHUNK_LEN: u32 = 1 << CHUNK_SHIFT;

/// The chunk that holds slot `id`.
pub(crate) fn chunk_of(id: u32) -> usize {
    (id >> CHUNK_SHIFT) as usize
}

/// The first slot of `chunk`.
pub(crate) fn chunk_start(chunk: usize) -> u32 {
    // Chunks are only ever derived from u32 ids by `chunk_of`, so this shifts back into range.
    (chunk as u32) << CHUNK_SHIFT
}

/// Which chunks may hold a set notification: one bit per chunk. A view of the words that
/// follow the slots in the table's storage, so that a `set` finds both with one look.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary<'a> {
    /// One bit per chunk, [`BITS`] chunks per word.
    words: &'a [AtomicU32],
}

/// Chunks per summary word.
const BITS: usize = 32;

impl<'a> Summary<'a> {
    /// The summary in `words`, which must hold [`words_for`](Self::words_for) words.
    pub(crate) fn over(words: &'a [AtomicU32]) -> Self {
        Self { words }
    }

    /// Words a summary of a table of `slots` notifications occupies.
    pub(crate) fn words_for(slots: u32) -> usize {
        (slots.div_ceil(CHUNK_LEN) as usize).div_ceil(BITS)
    }

    /// Marks `chunk` as possibly holding a non-zero slot.
    pub(crate) fn mark(&self, chunk: usize) {
        // Release: an unmark that reads this (Acquire) must also see the slot stored before it.
        self.words[chunk / BITS].fetch_or(bit(chunk), Ordering::Release);
    }

    /// Marks `chunk` unless it is marked already, and says whether it marked it; for a `set`
    /// that has issued a SeqCst fence since its store (see `NotificationTable::set`): a mark
    /// it finds costs a plain load.
    #[inline(always)]
    pub(crate) fn mark_if_clear(&self, chunk: usize) -> bool {
        let word = &self.words[chunk / BITS];
        if word.load(Ordering::Relaxed) & bit(chunk) != 0 {
            return false;
        }
        word.fetch_or(bit(chunk), Ordering::Release);
        true
    }

    /// Clears the mark of `chunk`; the caller must issue a SeqCst fence and re-check the
    /// chunk's slots afterwards (see `NotificationTable::set`).
    pub(crate) fn unmark(&self, chunk: usize) {
        // Acquire: the re-check after this must see every slot whose mark this clears.
        self.words[chunk / BITS].fetch_and(!bit(chunk), Ordering::AcqRel);
    }

    /// The first marked chunk in `from..=last`, if any.
    pub(crate) fn next_marked(&self, from: usize, last: usize) -> Option<usize> {
        let mut chunk = from;
        while chunk <= last {
            let word = chunk / BITS;
            let bits = self.words[word].load(Ordering::Acquire) >> (chunk % BITS);
            if bits != 0 {
                let found = chunk + bits.trailing_zeros() as usize;
                return (found <= last).then_some(found);
            }
            chunk = (word + 1) * BITS;
        }
        None
    }
}

fn bit(chunk: usize) -> u32 {
    1 << (chunk % BITS)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The words of a summary of `slots` slots, every chunk unmarked.
    fn words(slots: u32) -> Vec<AtomicU32> {
        (0..Summary::words_for(slots))
            .map(|_| AtomicU32::new(0))
            .collect()
    }

    #[test]
    fn finds_marked_chunks_within_bounds_only() {
        let words = words(65_536);
        assert_eq!(words.len(), 32);
        let summary = Summary::over(&words);
        assert_eq!(summary.next_marked(0, 1023), None);
        summary.mark(3);
        summary.mark(200);
        assert_eq!(summary.next_marked(0, 1023), Some(3));
        assert_eq!(summary.next_marked(4, 1023), Some(200));
        assert_eq!(summary.next_marked(4, 199), None);
        assert_eq!(summary.next_marked(201, 1023), None);
        summary.unmark(3);
        assert_eq!(summary.next_marked(0, 1023), Some(200));
    }

    #[test]
    fn chunk_arithmetic_round_trips() {
        assert_eq!(chunk_of(0), 0);
        assert_eq!(chunk_of(CHUNK_LEN - 1), 0);
        assert_eq!(chunk_of(CHUNK_LEN), 1);
        assert_eq!(chunk_start(chunk_of(u32::MAX)), u32::MAX - (CHUNK_LEN - 1));
        assert_eq!(words(CHUNK_LEN + 1).len(), 1);
    }
}
