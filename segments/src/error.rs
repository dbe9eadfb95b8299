//! The error type of this crate: every way a segment operation can be refused.

/// Why a segment operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The byte range `offset..offset + size` does not lie within the segment (this includes
    /// ranges whose end does not fit in a `u64`).
    #[error("range of {size} bytes at offset {offset} is outside the segment of {len} bytes")]
    OutOfBounds {
        /// First byte of the requested range.
        offset: u64,
        /// Number of bytes requested.
        size: u64,
        /// Length of the segment in bytes.
        len: u64,
    },

    /// A typed access was requested at an address that is not suitably aligned.
    #[error("offset {offset} is not aligned to {align} bytes")]
    Misaligned {
        /// Offset of the access within the segment.
        offset: u64,
        /// Required alignment in bytes.
        align: u64,
    },

    /// A segment of zero bytes was requested; segments are never empty.
    #[error("segment size must not be zero")]
    ZeroSize,

    /// A null pointer was passed where segment memory was expected.
    #[error("segment memory pointer is null")]
    NullPointer,

    /// A [`Slots`](crate::Slots) table has no slot `index`.
    #[error("slot {index} is outside the table of {len} slots")]
    SlotOutOfRange {
        /// The slot asked for.
        index: usize,
        /// The number of slots in the table.
        len: usize,
    },

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done when the call failed.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
