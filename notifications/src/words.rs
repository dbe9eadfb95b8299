//! Owns where a table's or an event count's atomics live: in this process (a boxed array), or
//! in a shared-memory file other processes of the host map too ([`SharedWords`]), so that a
//! rank on the same host can set a notification and wake its waiters directly.
//!
//! Under the loom model checker (`--cfg loom`) shared words are replaced by private ones: loom
//! cannot see what another process does.

use std::sync::Arc;

use gaspi_segments::SharedWords;

use crate::sync::AtomicU32;

/// A run of words, owned or inside [`SharedWords`].
pub(crate) enum Storage {
    Owned(Box<[AtomicU32]>),
    /// The concrete mapping rather than a trait object: every set, reset and look at a table
    /// finds its words through here, and a call through a vtable cost each of them about a
    /// dozen instructions more than the two loads the mapping's slice is.
    #[cfg(not(loom))]
    Shared {
        words: Arc<SharedWords>,
        start: usize,
        len: usize,
    },
}

impl Storage {
    /// `len` zeroed words of this process.
    pub(crate) fn owned(len: usize) -> Storage {
        Storage::Owned((0..len).map(|_| AtomicU32::new(0)).collect())
    }

    /// Words `start..start + len` of `words`, or `None` when `words` is shorter.
    pub(crate) fn shared(words: Arc<SharedWords>, start: usize, len: usize) -> Option<Storage> {
        let end = start.checked_add(len)?;
        if words.words().len() < end {
            return None;
        }
        #[cfg(not(loom))]
        return Some(Storage::Shared { words, start, len });
        #[cfg(loom)]
        return Some(Storage::owned(len));
    }

    // Always: with fat LTO, `#[inline]` still left it a call of 14 instructions at some of
    // its callers (`notify_all`'s look at the sleepers among them).
    #[inline(always)]
    pub(crate) fn get(&self) -> &[AtomicU32] {
        match self {
            Storage::Owned(words) => words,
            #[cfg(not(loom))]
            Storage::Shared { words, start, len } => &words.words()[*start..*start + *len],
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
