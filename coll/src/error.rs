//! The crate's single error type: the runtime's errors, wrapped unchanged, and what a collective
//! itself can detect (bad arguments, members that disagree, a broadcast abandoned upstream,
//! misuse of epochs).

use gaspi::{GroupId, Rank};

/// Everything that can go wrong in a collective of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime failed: among others [`gaspi::Error::Timeout`] (call again to continue) and
    /// [`gaspi::Error::RankFailed`] naming a dead member.
    #[error(transparent)]
    Gaspi(#[from] gaspi::Error),

    /// A buffer longer than the collective was built for.
    #[error("rank {rank}: {len} bytes exceed the maximum of {max} this collective was built for")]
    TooLarge {
        /// The rank that passed the buffer.
        rank: Rank,
        /// Its length.
        len: u64,
        /// The maximum given at construction.
        max: u64,
    },

    /// A team's capacity too small for its collectives: a team of `size` members needs at
    /// least 1 lane of `2 · size` bytes (an `exchangev` streams at least a byte from and to
    /// every partner through a lane).
    #[error("{lanes} lanes of {lane_bytes} bytes are too small for a team of {size}: it needs at least 1 lane of {} bytes", 2 * u64::from(*size))]
    CapacityTooSmall {
        /// The lanes asked for.
        lanes: u32,
        /// The bytes per lane asked for.
        lane_bytes: u64,
        /// The team's members.
        size: u32,
    },

    /// A member created the team with another [`Capacity`](crate::Capacity): its collectives
    /// would stage at other places. No member gets the team.
    #[error("rank {rank} created the team with another capacity")]
    CapacityMismatch {
        /// A member whose capacity differs from this rank's.
        rank: Rank,
    },

    /// The maximum size asked for at construction cannot be allocated on this platform.
    #[error("a staging area for {max} bytes cannot be addressed on this platform")]
    Unaddressable {
        /// The maximum asked for.
        max: u64,
    },

    /// The root of a broadcast is not a member of its group.
    #[error("root {root} is not a member of group {group}")]
    RootNotMember {
        /// The group of the collective.
        group: GroupId,
        /// The root passed.
        root: Rank,
    },

    /// This member passed a buffer whose length differs from the root's. The data was still
    /// forwarded to this member's children, so the others are not held up; this member's buffer
    /// is left as it was.
    #[error("rank {rank} passed {len} bytes, but root {root} broadcast {root_len}")]
    LengthMismatch {
        /// This rank.
        rank: Rank,
        /// The root.
        root: Rank,
        /// The root's length.
        root_len: u64,
        /// This member's length.
        len: u64,
    },

    /// The message this member received was sent by a broadcast with another root: members
    /// called the broadcast with different roots.
    #[error("rank {rank} expected a broadcast from root {root}, but rank {parent} forwarded one from root {got}")]
    RootMismatch {
        /// This rank.
        rank: Rank,
        /// The root this member passed.
        root: Rank,
        /// The member that forwarded the message.
        parent: Rank,
        /// The root the message came from.
        got: Rank,
    },

    /// A notification from `rank` belongs to another broadcast than the one in progress:
    /// members made different numbers of broadcasts on this object.
    #[error(
        "rank {rank} is out of step: its message carries sequence tag {got}, expected {expected}"
    )]
    OutOfStep {
        /// The member that sent the notification.
        rank: Rank,
        /// The tag of the broadcast in progress here.
        expected: u32,
        /// The tag it carried.
        got: u32,
    },

    /// An earlier call on this object timed out with other arguments; call again with these to
    /// finish it first.
    #[error("a broadcast from root {root} of {len} bytes timed out and is still in progress; call again with these arguments to finish it")]
    InProgress {
        /// The root of the broadcast in progress.
        root: Rank,
        /// Its length on this member.
        len: u64,
    },

    /// An ancestor in the broadcast tree could not take part, so `parent` abandoned the
    /// broadcast and told this member instead of sending it data. `cause` is the rank
    /// responsible: a dead member, or the member that failed for another reason.
    #[error(
        "the broadcast was abandoned upstream because of rank {cause} (told by rank {parent})"
    )]
    Aborted {
        /// The rank that caused the abandonment.
        cause: Rank,
        /// The member that told this one.
        parent: Rank,
    },

    /// The broadcast of a [`BroadcastHandle`](crate::BroadcastHandle) already ended with an
    /// error, reported by an earlier call.
    #[error("this broadcast already ended with an error")]
    Ended,

    /// A receive area smaller than the blocks it must hold: `rank`'s segment `segment` needs
    /// `required` bytes from the first offset on, and has `available`.
    #[error("rank {rank}: the receive area in segment {segment} needs {required} bytes from its first offset, {available} are there")]
    ReceiveAreaTooSmall {
        /// The receiving rank.
        rank: Rank,
        /// Its receive segment.
        segment: gaspi::SegmentId,
        /// Bytes needed from the first offset on.
        required: u64,
        /// Bytes there from the first offset on.
        available: u64,
    },

    /// A destination given twice to `get_remote_offsets`.
    #[error("destination rank {rank} is given twice")]
    DuplicateDestination {
        /// The rank.
        rank: Rank,
    },

    /// A `get_remote_offsets` timed out with other arguments: call again with those first.
    #[error("a get_remote_offsets with other arguments timed out and is still in progress")]
    DiscoveryInProgress,

    /// A round of another plan is running on this group: one alltoallv per group at a time.
    #[error("an alltoallv round is already running on group {group}")]
    AlltoallvInProgress {
        /// The group.
        group: GroupId,
    },

    /// A plan made by another alltoallv object.
    #[error("the plan belongs to another alltoallv")]
    ForeignPlan,

    /// A block for a rank that is not a destination of the plan.
    #[error("rank {rank} is not a destination of the plan")]
    UnknownDestination {
        /// The rank.
        rank: Rank,
    },

    /// A block sent twice in one round.
    #[error("the block for rank {rank} was already sent in this round")]
    AlreadySent {
        /// The rank.
        rank: Rank,
    },

    /// Source offsets that do not match the plan's destinations one to one.
    #[error("{got} source offsets for {expected} destinations")]
    SourceOffsets {
        /// The plan's destinations.
        expected: usize,
        /// The offsets passed.
        got: usize,
    },

    /// A round finished before the block for a destination was sent.
    #[error("the block for rank {rank} was never sent in this round")]
    Unsent {
        /// The destination.
        rank: Rank,
    },

    /// A call on a round that has ended.
    #[error("alltoallv round {number} has ended")]
    RoundEnded {
        /// The round's number.
        number: u64,
    },

    /// A reset of a rank that is not a source of any plan of this alltoallv.
    #[error("rank {rank} is not a source here")]
    UnknownSource {
        /// The rank.
        rank: Rank,
    },

    /// A reset of a source whose block has not arrived.
    #[error("the block of rank {rank} has not arrived")]
    NotArrived {
        /// The rank.
        rank: Rank,
    },

    /// A reset of a source already reset since its last block arrived.
    #[error("the block of rank {rank} was already reset")]
    AlreadyReset {
        /// The rank.
        rank: Rank,
    },

    /// An [`Assert`](crate::Assert) with bits that name no assertion (MPI: `MPI_ERR_ASSERT`).
    #[error("assertion bits {bits:#x} name no assertion")]
    UnknownAssert {
        /// The assertion's bits.
        bits: u8,
    },

    /// A second epoch of one kind on a [`Window`](crate::Window): a `post` while the exposure
    /// epoch is open, a `start` while the access epoch is (or a `start_one` of a target already
    /// in it).
    #[error("an {epoch} epoch is already open on this window")]
    EpochOpen {
        /// The kind of epoch.
        epoch: crate::Epoch,
    },

    /// A call that ends an epoch of a [`Window`](crate::Window) without one open: `complete`
    /// without `start`, `wait` or `test` without `post`.
    #[error("no {epoch} epoch is open on this window")]
    NoEpoch {
        /// The kind of epoch.
        epoch: crate::Epoch,
    },

    /// A write to, or `complete_one` of, a rank outside the access epoch of a
    /// [`Window`](crate::Window).
    #[error("rank {rank} is not a target of the access epoch")]
    NotStarted {
        /// The rank.
        rank: Rank,
    },

    /// A write to a target of the access epoch whose post has not arrived (its start timed
    /// out): call the start again first.
    #[error("the post of target rank {rank} has not arrived")]
    NotPosted {
        /// The target.
        rank: Rank,
    },

    /// A [`Window::start_any`](crate::Window::start_any) with no member left to find: every
    /// member is in the access epoch already or known dead, so no post can arrive, whatever
    /// the timeout. End the access epoch (or some of it) first.
    #[error("no member is left to start: each is in the access epoch or known dead")]
    NoneToStart,

    /// A rank that is not a member of the group of the object.
    #[error("rank {rank} is not a member of group {group}")]
    NotMember {
        /// The rank.
        rank: Rank,
        /// The group.
        group: GroupId,
    },

    /// A timeout while waiting for the posts of these targets (a start to a target that never
    /// posts to this rank ends here): call again to continue. Counts as a timeout
    /// ([`Error::is_timeout`]).
    #[error("timed out waiting for the posts of target ranks {ranks:?}")]
    PostsMissing {
        /// The targets not heard from.
        ranks: Vec<Rank>,
    },

    /// A timeout while waiting for these origins to complete: call again to continue. Counts
    /// as a timeout ([`Error::is_timeout`]).
    #[error("timed out waiting for origin ranks {ranks:?} to complete")]
    CompletionsMissing {
        /// The origins not heard from.
        ranks: Vec<Rank>,
    },

    /// An earlier broadcast on this object failed (with an error other than a timeout or a
    /// length mismatch), so its members are no longer in step: build a new object.
    #[error("an earlier broadcast (sequence {seq}) on this object failed; build a new one")]
    Abandoned {
        /// The sequence number of the broadcast that failed (the first is 1).
        seq: u64,
    },

    /// A member's notification in a team collective carried another value than this
    /// member's: it initiated another collective at this point of the sequence, or the same
    /// one with another root, size, sync mode or algorithm.
    #[error("rank {rank} called another collective, or with other arguments (value {value:#x})")]
    Mismatch {
        /// The member whose notification this member expected where the disagreeing one
        /// landed. Where members disagree about who sends to whom (the algorithm, say), it
        /// may have come from another member, which disagrees too.
        rank: Rank,
        /// The value it carried.
        value: u32,
    },

    /// A buffer of another length than what the collective moves through it: shorter, or
    /// longer (a collective's sizes come from its buffers, so they must be exact).
    #[error("a buffer of {len} bytes where the collective needs {need}")]
    BufferTooShort {
        /// The buffer's length.
        len: u64,
        /// The length needed.
        need: u64,
    },

    /// Counts of an exchangev that disagree for the member itself: what member `index` sends
    /// itself (`send_counts[index]`) is what it receives from itself (`recv_counts[index]`).
    #[error("exchangev: member {index} sends itself {send} bytes but receives {recv} from itself")]
    OwnCounts {
        /// This member's index in the team.
        index: u32,
        /// Its send count for itself.
        send: u64,
        /// Its receive count from itself.
        recv: u64,
    },

    /// The runtime failed in a way kept by a collective in flight, reported again when its
    /// handle syncs.
    #[error("the runtime failed: {0}")]
    Runtime(String),

    /// Bad flags for a team collective: exactly one `IN_` mode, one `OUT_` mode and one of
    /// `SINGLE` / `LOCAL` are needed.
    #[error("bad collective flags {flags:#x}: {why}")]
    Flags {
        /// The flags passed.
        flags: u32,
        /// What is wrong with them.
        why: &'static str,
    },

    /// A rank that is not a member of the team (as a root).
    #[error("rank {rank} is not a member of the team")]
    NotInTeam {
        /// The rank passed.
        rank: Rank,
    },

    /// A handle that was synced already.
    #[error("the collective's handle was synced already")]
    Synced,

    /// Handles of several teams passed to one sync over a set.
    #[error("the handles of one sync over a set must belong to one team")]
    ForeignHandle,

    /// A split of the team with other arguments timed out and was not continued.
    #[error("a split with colour {color:?} and key {key} timed out and is still in progress; call again with these arguments to finish it")]
    SplitInProgress {
        /// The pending split's colour.
        color: Option<u32>,
        /// The pending split's key.
        key: u32,
    },

    /// A vector that is not a whole number of the reduction operator's blocks.
    #[error("{elements} elements are not a whole number of the operator's {block}-element blocks")]
    PartialBlock {
        /// Elements of the vector.
        elements: u64,
        /// Elements of one block of the operator.
        block: u64,
    },

    /// An algorithm that the operation does not have (from an environment variable or an
    /// explicit choice).
    #[error("{op} has no algorithm {name:?}")]
    UnknownAlgorithm {
        /// The operation.
        op: &'static str,
        /// The name asked for.
        name: String,
    },
}

impl Error {
    /// True for a timeout (of the runtime, or one naming the ranks waited for): the call may be
    /// repeated to continue.
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Gaspi(e) => e.is_timeout(),
            Error::PostsMissing { .. } | Error::CompletionsMissing { .. } => true,
            _ => false,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
