//! The crate's single error type.
//!
//! Every fallible call in `gaspi` returns [`Error`]. Variants carry the rank, segment, offset,
//! size or notification id that failed, so a message printed by a rank far away in a job log is
//! enough to find the bad call. Misuse (bad ids, out-of-range offsets, double resets) is a variant
//! like any other: the runtime never panics on user input.

use std::io;

/// A rank of the job, as seen by the runtime (0-based, dense).
pub type Rank = u32;

/// Identifier of a segment (0..=255).
pub type SegmentId = u8;

/// Identifier of a communication queue.
pub type QueueId = u8;

/// Identifier of a notification slot in a segment.
pub type NotificationId = u32;

/// Everything that can go wrong in the `gaspi` runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operation did not finish before its [`Timeout`](crate::Timeout). Calling it again
    /// continues where it stopped.
    #[error("timed out")]
    Timeout,

    /// A libfabric call failed.
    #[error("libfabric {call} failed: {message} (fi_errno {code})")]
    Fabric {
        /// The libfabric function that failed.
        call: &'static str,
        /// Positive libfabric error number.
        code: i32,
        /// `fi_strerror` of `code`.
        message: String,
    },

    /// The requested provider does not exist or cannot give what the runtime needs.
    #[error("libfabric provider {requested:?} is not usable here: {reason}; providers on this host: {available}")]
    ProviderUnavailable {
        /// What `GASPI_PROVIDER` (or the config) asked for.
        requested: String,
        /// Why it was rejected.
        reason: String,
        /// Comma-separated providers that `fi_getinfo` lists on this host.
        available: String,
    },

    /// The PMI bootstrap (talking to `gaspirun`, `mpiexec.hydra` or `srun`) failed.
    #[error("PMI bootstrap failed during {command}: {reason}")]
    Bootstrap {
        /// The PMI command in flight (`init`, `put`, `barrier_in`, ...).
        command: String,
        /// What went wrong.
        reason: String,
    },

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What the runtime was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A rank outside `0..size`.
    #[error("rank {rank} is out of range (job size {size})")]
    InvalidRank {
        /// The bad rank.
        rank: Rank,
        /// Number of ranks in the job.
        size: u32,
    },

    /// No segment with this id exists at the given rank.
    #[error("segment {segment} does not exist on rank {rank}")]
    UnknownSegment {
        /// The rank on which the segment was looked up.
        rank: Rank,
        /// The segment id.
        segment: SegmentId,
    },

    /// A segment with this id already exists.
    #[error("segment {segment} already exists on rank {rank}")]
    SegmentExists {
        /// This rank.
        rank: Rank,
        /// The segment id.
        segment: SegmentId,
    },

    /// `offset..offset+size` does not fit into the segment.
    #[error("range {offset}+{size} is outside segment {segment} of rank {rank} (segment size {segment_size})")]
    OutOfBounds {
        /// The rank owning the segment.
        rank: Rank,
        /// The segment id.
        segment: SegmentId,
        /// Start of the requested range.
        offset: u64,
        /// Length of the requested range.
        size: u64,
        /// Size of the segment.
        segment_size: u64,
    },

    /// A wait on an empty range of notifications (`num` 0): it has no id to return.
    #[error(
        "an empty range of notifications (0 from id {begin}) of segment {segment} on rank {rank}"
    )]
    EmptyNotificationRange {
        /// The rank owning the table.
        rank: Rank,
        /// The segment id.
        segment: SegmentId,
        /// Where the range begins.
        begin: u32,
    },

    /// A notification id outside the segment's notification table.
    #[error("notification {id} is out of range for segment {segment} on rank {rank} ({count} notifications)")]
    InvalidNotification {
        /// The rank owning the table.
        rank: Rank,
        /// The segment id.
        segment: SegmentId,
        /// The bad id (or the end of a bad range).
        id: u64,
        /// Number of notifications per segment.
        count: u32,
    },

    /// Notification value 0 means "unset" and cannot be sent.
    #[error("notification value 0 is reserved for 'unset' (notification {id} to rank {rank})")]
    ZeroNotificationValue {
        /// Target rank.
        rank: Rank,
        /// Notification id.
        id: NotificationId,
    },

    /// A queue id that does not exist. `count` is how many queues exist (as
    /// [`Context::queue_num`](crate::Context::queue_num) says), not a bound on their ids: after
    /// a `queue_delete` of another than the highest, the ids that exist are not `0..count`
    /// (`queue_create` takes the lowest free id again).
    #[error("queue {queue} does not exist ({count} queues exist, not always ids 0..{count})")]
    InvalidQueue {
        /// The bad queue id.
        queue: QueueId,
        /// Number of queues that exist, whatever their ids.
        count: u32,
    },

    /// The queue holds `depth` operations not yet completed; call [`Context::wait`](crate::Context::wait).
    #[error("queue {queue} is full ({depth} operations outstanding)")]
    QueueFull {
        /// The full queue.
        queue: QueueId,
        /// Its depth.
        depth: u32,
    },

    /// A queue cannot be deleted while operations on it are outstanding.
    #[error("queue {queue} still has {outstanding} operations outstanding")]
    QueueBusy {
        /// The queue.
        queue: QueueId,
        /// Operations posted and not completed.
        outstanding: u32,
    },

    /// A segment cannot be deleted while local operations on it are in flight.
    #[error("segment {segment} is in use by {in_flight} operations in flight")]
    SegmentBusy {
        /// The segment.
        segment: SegmentId,
        /// Operations posted and not completed.
        in_flight: u32,
    },

    /// A segment of bound user memory cannot be deleted while [`Segment`](crate::Segment)
    /// handles of it are alive: they reach the memory, which the user may free once the
    /// deletion returned.
    #[error("segment {segment} of bound memory is still reached by {handles} Segment handles")]
    SegmentHandled {
        /// The segment.
        segment: SegmentId,
        /// Handles alive.
        handles: u32,
    },

    /// Segment memory could not be set up or accessed.
    #[error("segment {segment} on rank {rank}: {source}")]
    Segment {
        /// This rank.
        rank: Rank,
        /// The segment.
        segment: SegmentId,
        /// What the segment memory layer reported.
        #[source]
        source: gaspi_segments::Error,
    },

    /// No group with this id exists.
    #[error("group {group} does not exist")]
    UnknownGroup {
        /// The group id.
        group: crate::GroupId,
    },

    /// The group is committed (or committing): its membership can no longer change.
    #[error("group {group} is committed; its membership cannot change")]
    GroupCommitted {
        /// The group id.
        group: crate::GroupId,
    },

    /// A collective or query on a group that has not been committed.
    #[error("group {group} has not been committed")]
    GroupNotCommitted {
        /// The group id.
        group: crate::GroupId,
    },

    /// A rank was added to a group twice.
    #[error("rank {rank} is already a member of group {group}")]
    DuplicateMember {
        /// The group id.
        group: crate::GroupId,
        /// The rank added twice.
        rank: Rank,
    },

    /// A member index beyond a group's members.
    #[error("member index {index} is out of range (group {group} has {members} members)")]
    InvalidMemberIndex {
        /// The group id.
        group: crate::GroupId,
        /// The bad index.
        index: u32,
        /// Members of the group.
        members: u32,
    },

    /// This rank takes part in a collective of a group it is not a member of.
    #[error("rank {rank} is not a member of group {group}")]
    NotInGroup {
        /// The group id.
        group: crate::GroupId,
        /// This rank.
        rank: Rank,
    },

    /// The members of a group disagree on its membership (or on its id).
    #[error("the members of group {group} disagree on its membership")]
    GroupMismatch {
        /// The group id.
        group: crate::GroupId,
    },

    /// A collective call on a group whose previous collective (one that timed out) is still in
    /// flight with different arguments or of a kind it may not run beside: call that one again
    /// to finish it first. One barrier and one allreduce of a group may be in flight at once,
    /// as GASPI allows; the synchronisations of `segment_create`, `group_commit` and
    /// `finalize` run beside neither an allreduce nor another kind of synchronisation (a
    /// deviation from GASPI, which leaves their order to the application).
    #[error("group {group} still has a timed-out {pending} in flight; call it again to finish it")]
    CollectiveInProgress {
        /// The group id.
        group: crate::GroupId,
        /// The collective in flight.
        pending: &'static str,
    },

    /// Members called a collective with arguments that do not match (length, element type,
    /// operator), or called different synchronisations of the group at once (a `barrier`
    /// where a partner called `segment_create` or `finalize`), detected when a partner's
    /// notification arrived (a barrier against an allreduce waits until its timeout: the two
    /// may be in flight at once, on notifications of their own). The group's collective state
    /// is reset; members
    /// must agree before its next collective (a group other than `GROUP_ALL` can be deleted
    /// and made anew). Members that do not hear from that partner directly wait for theirs
    /// until their timeout.
    #[error(
        "collective on group {group}: rank {rank} called another collective, or this one with \
         different arguments"
    )]
    CollectiveMismatch {
        /// The group id.
        group: crate::GroupId,
        /// The partner whose call differs from this rank's.
        rank: Rank,
    },

    /// The user operator of an allreduce ([`Context::allreduce_with`](crate::Context::allreduce_with))
    /// panicked on member `rank` during the run, and this member's result depends on a fold
    /// that member never finished: there is no result, and `output` is untouched. This member
    /// took every step of the run with the others, so the group's next allreduce works.
    #[error("allreduce on group {group}: the user operator panicked on rank {rank}; no result")]
    OperatorPanicked {
        /// The group id.
        group: crate::GroupId,
        /// The member whose operator panicked.
        rank: Rank,
    },

    /// Input and output buffers of a collective differ in length, or the length is not a whole
    /// number of the operator's blocks.
    #[error("collective buffers: {0}")]
    Buffers(String),

    /// A passive message larger than the configured maximum.
    #[error(
        "passive message of {size} bytes exceeds the maximum of {max} (GASPI_PASSIVE_MAX_BYTES)"
    )]
    PassiveTooLarge {
        /// The message size.
        size: usize,
        /// The configured maximum.
        max: usize,
    },

    /// An offset that must be 8-byte aligned (an atomic's target) is not.
    #[error("offset {offset} in segment {segment} of rank {rank} is not 8-byte aligned")]
    Misaligned {
        /// The rank owning the segment.
        rank: Rank,
        /// The segment.
        segment: SegmentId,
        /// The misaligned offset.
        offset: u64,
    },

    /// The provider cannot do what was asked.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// A list operation got lists of different lengths, or too many entries.
    #[error("invalid list operation: {0}")]
    InvalidList(String),

    /// A resource limit was reached (segments, queues; at init, the process's file
    /// descriptors, when they ran out while its first barrier waited for connections).
    #[error("limit reached: {0}")]
    Limit(String),

    /// A peer rank is gone: there is positive evidence that its process ended (see the
    /// `health` module). A timeout is never taken for this.
    #[error("rank {rank} failed: {reason}")]
    RankFailed {
        /// The rank that failed.
        rank: Rank,
        /// What the runtime observed.
        reason: String,
    },

    /// The provider failed an operation towards a rank that is not known to be dead (a
    /// registration that went away, a transport error); `rank` is `u32::MAX` when the
    /// endpoint itself failed.
    #[error("{}: {reason}", operation_failed(.rank))]
    OperationFailed {
        /// The target rank of the operation.
        rank: Rank,
        /// What the provider reported.
        reason: String,
    },

    /// A [`Batch`](crate::Batch) holds `depth` operations not yet completed; wait for it.
    #[error("the batch is full ({depth} operations outstanding)")]
    BatchFull {
        /// Its depth.
        depth: u32,
    },

    /// A creation of this library over the same scope timed out and was not continued: call
    /// it again (with the same arguments) to finish it first.
    #[error("library {library:?} still has a timed-out {pending} over this scope; call it again to finish it")]
    LibraryBusy {
        /// The library.
        library: String,
        /// What is in flight.
        pending: &'static str,
    },

    /// Members of a library collective called it for different things (one created a segment
    /// while `rank` created a notification table, say).
    #[error("library {library:?}: rank {rank} made a different collective call")]
    LibraryMismatch {
        /// The library.
        library: String,
        /// The member whose call differs from this rank's.
        rank: Rank,
    },

    /// Members of a library segment creation passed different agreement words
    /// ([`Library::segment_create_agreed`](crate::Library::segment_create_agreed)): they would
    /// lay the segment out differently. No member keeps the segment.
    #[error("library {library:?}: rank {rank} created the segment with other agreed parameters")]
    LibraryDisagreement {
        /// The library.
        library: String,
        /// The member whose agreement word differs from this rank's.
        rank: Rank,
    },

    /// A member of a library segment creation could not make its part (see the error there:
    /// [`Error::LibrarySegment`] or [`Error::Limit`], say). No member keeps the segment.
    #[error("library {library:?}: rank {rank} could not create its part of the segment")]
    LibraryRefused {
        /// The library.
        library: String,
        /// The member that could not.
        rank: Rank,
    },

    /// A library segment or notification table cannot be created as asked (refused before it
    /// has an id to name).
    #[error("library {library:?}: cannot create a segment of {size} bytes with {notifications} notifications: {reason}")]
    LibrarySegment {
        /// The library.
        library: String,
        /// The bytes asked for.
        size: u64,
        /// The notifications asked for.
        notifications: u32,
        /// Why not.
        reason: String,
    },

    /// A rank is not among the members of a library scope: this rank creating a team it is
    /// not listed in, or an operation on a library segment towards a rank outside its scope.
    #[error("rank {rank} is not a member of the library scope")]
    NotInScope {
        /// The rank.
        rank: Rank,
    },

    /// A rank is listed twice among the members of a library team.
    #[error("rank {rank} is listed twice among the team's members")]
    DuplicateTeamMember {
        /// The rank listed twice.
        rank: Rank,
    },

    /// A library of this name is already registered with the context.
    #[error("a library named {name:?} is already registered")]
    LibraryExists {
        /// The name.
        name: String,
    },

    /// A peer sent something the runtime's protocol does not allow (mismatched configuration
    /// or versions between ranks).
    #[error("protocol violation: {0}")]
    Protocol(String),

    /// [`Context::init`](crate::Context::init) did not meet every rank of the job in its first
    /// barrier within [`Config::op_timeout`](crate::Config::op_timeout)
    /// (`GASPI_OP_TIMEOUT_MS`). Unlike [`Error::Timeout`] nothing continues it: no context
    /// was made.
    #[error(
        "Context::init timed out: not every rank of the job was reachable within {timeout_ms} \
         ms (set GASPI_OP_TIMEOUT_MS to wait longer)"
    )]
    InitTimeout {
        /// `GASPI_OP_TIMEOUT_MS`, the time init waited.
        timeout_ms: u64,
    },

    /// [`Context::finalize`](crate::Context::finalize) timed out before every rank arrived. The
    /// context is handed back unchanged: call `finalize` on it again to continue.
    #[error("finalize timed out before every rank arrived; the context is returned for a retry")]
    FinalizeTimeout(Box<crate::Context>),

    /// [`Context::finalize`](crate::Context::finalize) could not begin: a collective of
    /// `GROUP_ALL` that timed out is still in flight (`reason`, an
    /// [`Error::CollectiveInProgress`]), or a rank called another collective of `GROUP_ALL`
    /// (`reason`, an [`Error::CollectiveMismatch`] naming it). Nothing was released: the
    /// context is handed back, to finish that collective with it (call it again), or agree
    /// with the other ranks again, and then finalize.
    #[error("finalize cannot begin ({reason}); the context is returned")]
    FinalizeRefused {
        /// Why it cannot begin.
        reason: Box<Error>,
        /// The context, unchanged.
        ctx: Box<crate::Context>,
    },

    /// The context was already finalized.
    #[error("the context has been finalized")]
    Finalized,
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn bootstrap(command: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Bootstrap {
            command: command.into(),
            reason: reason.into(),
        }
    }

    /// Wraps a failure of segment memory on `rank`'s segment `segment`.
    pub(crate) fn segment(
        rank: Rank,
        segment: SegmentId,
    ) -> impl FnOnce(gaspi_segments::Error) -> Error {
        move |source| Error::Segment {
            rank,
            segment,
            source,
        }
    }

    /// True for [`Error::Timeout`] and [`Error::FinalizeTimeout`]: the call may be repeated.
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout | Error::FinalizeTimeout(_))
    }
}

/// What failed, for [`Error::OperationFailed`] towards `rank`: `u32::MAX` is no rank but the
/// endpoint itself, which a message naming "rank 4294967295" would hide.
fn operation_failed(rank: &Rank) -> String {
    if *rank == u32::MAX {
        "the endpoint of this rank failed".to_owned()
    } else {
        format!("an operation towards rank {rank} failed")
    }
}

impl From<gaspi_fabric::Error> for Error {
    fn from(e: gaspi_fabric::Error) -> Self {
        match e {
            gaspi_fabric::Error::Fabric {
                call,
                code,
                message,
            } => Error::Fabric {
                call,
                code,
                message,
            },
            gaspi_fabric::Error::ProviderUnavailable {
                requested,
                reason,
                available,
            } => Error::ProviderUnavailable {
                requested,
                reason,
                available,
            },
            other => Error::Protocol(other.to_string()),
        }
    }
}

impl From<gaspi_pmi::Error> for Error {
    fn from(e: gaspi_pmi::Error) -> Self {
        match e {
            gaspi_pmi::Error::Bootstrap { command, reason } => Error::Bootstrap { command, reason },
            gaspi_pmi::Error::Config(reason) => Error::Config(reason),
            gaspi_pmi::Error::Io { context, source } => Error::Io { context, source },
            other => Error::Bootstrap {
                command: "init".into(),
                reason: other.to_string(),
            },
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_init_timeout_names_its_variable() {
        let error = Error::InitTimeout { timeout_ms: 1 };
        assert_eq!(
            error.to_string(),
            "Context::init timed out: not every rank of the job was reachable within 1 ms (set \
             GASPI_OP_TIMEOUT_MS to wait longer)"
        );
        assert!(
            !error.is_timeout(),
            "init cannot be called again to continue"
        );
    }

    #[test]
    fn an_endpoint_failure_names_the_endpoint_not_a_rank() {
        let endpoint = Error::OperationFailed {
            rank: u32::MAX,
            reason: "Input/output error".into(),
        };
        assert_eq!(
            endpoint.to_string(),
            "the endpoint of this rank failed: Input/output error"
        );
        let towards = Error::OperationFailed {
            rank: 3,
            reason: "Input/output error".into(),
        };
        assert_eq!(
            towards.to_string(),
            "an operation towards rank 3 failed: Input/output error"
        );
    }
}
