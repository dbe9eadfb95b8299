//! Owns where a table's or an event count's atomics live: in this process (a boxed array), or
//! in memory other processes of the host map too ([`Words`]), so that a rank on the same host
//! can set a notification and wake its waiters directly.

use std::sync::Arc;

use crate::sync::AtomicU32;

/// Memory holding `u32` atomics that other processes on this host may map and change at the
/// same time (a shared-memory file, say). [`NotificationTable::in_words`] and
/// [`EventCount::in_words`] place their state in it.
///
/// Under the loom model checker (`--cfg loom`) such memory is replaced by private words: loom
/// cannot see what another process does.
///
/// [`NotificationTable::in_words`]: crate::NotificationTable::in_words
/// [`EventCount::in_words`]: crate::EventCount::in_words
pub trait Words: Send + Sync {
    /// The words; the same slice on every call.
    fn words(&self) -> &[std::sync::atomic::AtomicU32];
}

/// A run of words, owned or inside shared [`Words`].
pub(crate) enum Storage {
    Owned(Box<[AtomicU32]>),
    #[cfg(not(loom))]
    Shared {
        words: Arc<dyn Words>,
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
    pub(crate) fn shared(words: Arc<dyn Words>, start: usize, len: usize) -> Option<Storage> {
        let end = start.checked_add(len)?;
        if words.words().len() < end {
            return None;
        }
        #[cfg(not(loom))]
        return Some(Storage::Shared { words, start, len });
        #[cfg(loom)]
        return Some(Storage::owned(len));
    }

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
