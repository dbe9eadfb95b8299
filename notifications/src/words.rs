//! Owns where a table's or an event count's atomics live: in this process (a boxed array), or
//! in a shared-memory file other processes of the host map too ([`SharedWords`]), so that a
//! rank on the same host can set a notification and wake its waiters directly.
//!
//! Under the loom model checker (`--cfg loom`) shared words are replaced by private ones: loom
//! cannot see what another process does.

use std::sync::Arc;

#[cfg(not(loom))]
use gaspi_segments::SharedRun;
use gaspi_segments::SharedWords;

use crate::sync::AtomicU32;

/// A run of words, owned or inside [`SharedWords`].
pub(crate) enum Storage {
    Owned(Box<[AtomicU32]>),
    /// A run that holds its first word's address: every set, reset and look at a table finds
    /// its words through here, and through the `Arc` of the mapping and a range of its words
    /// that cost each of them a dependent load and three checks (a trait object, before that,
    /// a call through a vtable too).
    #[cfg(not(loom))]
    Shared(SharedRun),
}

impl Storage {
    /// `len` zeroed words of this process.
    pub(crate) fn owned(len: usize) -> Storage {
        Storage::Owned((0..len).map(|_| AtomicU32::new(0)).collect())
    }

    /// Words `start..start + len` of `words`, or `None` when `words` is shorter.
    pub(crate) fn shared(words: Arc<SharedWords>, start: usize, len: usize) -> Option<Storage> {
        #[cfg(not(loom))]
        return SharedRun::new(words, start, len).map(Storage::Shared);
        #[cfg(loom)]
        return (start.checked_add(len)? <= words.words().len()).then(|| Storage::owned(len));
    }

    // Always: with fat LTO, `#[inline]` still left it a call of 14 instructions at some of
    // its callers (`notify_all`'s look at the sleepers among them).
    #[inline(always)]
    pub(crate) fn get(&self) -> &[AtomicU32] {
        match self {
            Storage::Owned(words) => words,
            #[cfg(not(loom))]
            Storage::Shared(run) => run.words(),
        }
    }

    /// Whether other processes may change the words.
    pub(crate) fn is_shared(&self) -> bool {
        !matches!(self, Storage::Owned(_))
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("len", &self.get().len())
            .field("shared", &self.is_shared())
            .finish()
    }
}
