//! MPI-3's general active-target synchronisation (post / start / complete / wait) on a user
//! segment: [`Window`], its [`Assert`]ions, and the epochs it keeps. Matching follows proposal
//! G of the MPI-2 discussion (`mpi-rma-post-start-complete-wait-proposal.txt`): a target posts
//! to named origins, an origin starts named targets, and every start matches exactly one post
//! *by rank and by epoch*, never by count.
//!
//! The protocol and the mapping of every MPI call and assertion are documented on [`Window`].

use gaspi::{
    Batch, Context, Deadline, GroupId, Notification, NotificationId, Rank, Segment, SegmentId,
    Target, Timeout,
};
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::Collectives;

bitflags::bitflags! {
    /// Assertions on [`Window::post`] and [`Window::start`], combined with `|`: MPI's `assert`
    /// argument. Only [`NOCHECK`](Self::NOCHECK) changes what happens; the others are accepted
    /// as the hints they are in MPI and change nothing here (nothing is cached that a local
    /// store or a put would have to flush). [`Assert::empty()`] (or [`Assert::NONE`]) is MPI's
    /// `0`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Assert: u8 {
        /// `MPI_MODE_NOCHECK`: the caller guarantees that the matching post already happened
        /// when the start is made, so no handshake takes place. Like MPI, it must be given on
        /// both sides: on a post (which then sends nothing) and on every start that matches it
        /// (which then waits for nothing). Used for double buffering, where the
        /// synchronisation of the other buffer's epoch already orders post before start.
        const NOCHECK = 1;
        /// `MPI_MODE_NOSTORE` (on post): no local store since the last synchronisation. A
        /// hint.
        const NOSTORE = 2;
        /// `MPI_MODE_NOPUT` (on post): no write into this window during the exposure epoch. A
        /// hint.
        const NOPUT = 4;
        /// `MPI_MODE_NOPRECEDE`: no earlier epoch to complete (a fence assertion). A hint.
        const NOPRECEDE = 8;
        /// `MPI_MODE_NOSUCCEED`: no later epoch follows (a fence assertion). A hint.
        const NOSUCCEED = 16;
    }
}

/// The rank of a write refused where it lands (its segment gone, or too small).
fn landing(e: &Error) -> Option<Rank> {
    match e {
        Error::Gaspi(
            gaspi::Error::UnknownSegment { rank, .. } | gaspi::Error::OutOfBounds { rank, .. },
        ) => Some(*rank),
        _ => None,
    }
}

/// `Ok`, or the death `lost` kept for the call that ends its wait, taken. Most calls find
/// none: they look before they move the error.
#[inline]
fn reported(lost: &mut Option<Error>) -> Result<()> {
    if lost.is_none() {
        return Ok(());
    }
    lost.take().map_or(Ok(()), Err)
}

/// The rank `e` names as dead.
fn dead_rank(e: &Error) -> Option<Rank> {
    match e {
        Error::Gaspi(gaspi::Error::RankFailed { rank, .. }) => Some(*rank),
        _ => None,
    }
}

impl Assert {
    /// No assertion (MPI's `0`).
    pub const NONE: Assert = Assert::empty();

    /// `self` if every bit names an assertion, else [`Error::UnknownAssert`].
    fn known(self) -> Result<Assert> {
        match Assert::all().contains(self) {
            true => Ok(self),
            false => Err(Error::UnknownAssert { bits: self.bits() }),
        }
    }
}

/// Domain of the agreement word of a window's control table: its segment.
const WINDOW: u64 = 0x3d0f_a11e;

/// The two kinds of epoch of a [`Window`], as errors name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epoch {
    /// Opened by [`Window::post`], closed by [`Window::wait`] or [`Window::test`].
    Exposure,
    /// Opened by [`Window::start`] (or [`start_one`](Window::start_one),
    /// [`start_any`](Window::start_any)), closed by [`Window::complete`] (or
    /// [`complete_one`](Window::complete_one) for each target).
    Access,
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Epoch::Exposure => "exposure",
            Epoch::Access => "access",
        })
    }
}

/// An origin of the exposure epoch.
#[derive(Debug, Clone, Copy)]
struct Origin {
    member: u32,
    /// The tag its `done` must carry.
    tag: u32,
    completed: bool,
}

/// Where a target of the access epoch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Its post has not been seen: writes to it are refused.
    Pending,
    /// Its post matched (or NOCHECK): writes go out.
    Ready,
    /// Its `done` was posted; the epoch waits for local completion.
    Told,
    /// Found dead: it left the epoch, and writes to it fail naming it.
    Dead,
}

/// A target of the access epoch.
#[derive(Debug, Clone, Copy)]
struct Access {
    member: u32,
    rank: Rank,
    /// The tag of the post it must match, and of the `done` it is sent.
    tag: u32,
    stage: Stage,
    /// The last small write to it, not posted yet: it goes out with the target's `done`
    /// (see "Choices" on [`Window`]), or before the next write to the target.
    held: Option<Held>,
    /// Whether a write to it was posted in this epoch (besides `held`).
    sent: bool,
}

impl Access {
    /// `rank` (member `member`), not yet matched to a post.
    fn new(member: u32, rank: Rank) -> Access {
        Access::matched(member, rank, 0, Stage::Pending)
    }

    fn matched(member: u32, rank: Rank, tag: u32, stage: Stage) -> Access {
        Access {
            member,
            rank,
            tag,
            stage,
            held: None,
            sent: false,
        }
    }
}

/// A write of a window, checked, as [`Window::write`] was called with it.
#[derive(Debug, Clone, Copy)]
struct Held {
    src: SegmentId,
    src_offset: u64,
    dst_offset: u64,
    size: u64,
}

/// An epoch window over a user segment and a committed group: MPI-3's
/// `MPI_Win_post / start / complete / wait / test` between the group's members, with proposal
/// G's per-target extensions ([`start_one`](Self::start_one),
/// [`complete_one`](Self::complete_one), [`start_any`](Self::start_any)).
///
/// Build it once (collective); then every member may open an *exposure epoch* (its segment is
/// written by named origins) and an *access epoch* (it writes to named targets), both at once,
/// as often as it likes, with other origins and targets each time.
///
/// # MPI calls and assertions, and what they are here
/// | MPI | here |
/// |---|---|
/// | `MPI_Win_create` over a communicator | [`Window::new`] over a user segment (the window's memory, the same id on every member) and a committed group |
/// | `MPI_Win_post(group, assert, win)` | [`post(origins, assert, timeout)`](Self::post): never waits for a peer |
/// | `MPI_Win_start(group, assert, win)` | [`start(targets, assert, timeout)`](Self::start): returns once every target's matching post arrived (MPI lets start block; here it does) |
/// | `MPI_Put` inside the access epoch | [`write`](Self::write), [`write_notify`](Self::write_notify), [`write_list`](Self::write_list): to a started target only |
/// | `MPI_Win_complete(win)` | [`complete(timeout)`](Self::complete) |
/// | `MPI_Win_wait(win)` | [`wait(timeout)`](Self::wait) |
/// | `MPI_Win_test(win, &flag)` | [`test()`](Self::test): `true` once, closing the epoch |
/// | `MPI_MODE_NOCHECK` | [`Assert::NOCHECK`], on both sides as in MPI |
/// | `MPI_MODE_NOSTORE`, `MPI_MODE_NOPUT`, `MPI_MODE_NOPRECEDE`, `MPI_MODE_NOSUCCEED` | [`Assert::NOSTORE`], [`Assert::NOPUT`], [`Assert::NOPRECEDE`], [`Assert::NOSUCCEED`]: accepted hints |
/// | proposal G `MPI_RMA_START(comm, rank)` / `MPI_RMA_COMPLETE(comm, rank)` | [`start_one`](Self::start_one) / [`complete_one`](Self::complete_one) |
/// | proposal G's "polling on the next target that posts" | [`start_any`](Self::start_any) |
///
/// # Protocol
/// Each member has a control table (a library notification table over the group) with two
/// notifications per member: `post(t)`, set by target `t` when it posts to this member, and
/// `done(o)`, set by origin `o` when it completes towards this member. Their values are
/// *epoch tags*: a target counts the exposure epochs it posted to each origin, an origin
/// counts the access epochs it started to each target, and the `k`-th start of `o` to `t`
/// matches exactly the `k`-th post of `t` that named `o` (proposal G's rule). So:
/// * a start never matches a stale post of an earlier epoch, nor one meant for another
///   origin, nor one of another target: the post from D or E never counts towards an epoch
///   started with B and C (the flaw of counter-only matching), and the proposal's cases (X),
///   (Y), (Z) and (U) synchronise without extra messages;
/// * `wait` collects `done` from exactly the posted origins, each with the tag of this epoch.
///
/// One notification per pair suffices: a target posts to an origin again only after its wait
/// saw that origin's `done`, which the origin sends only after it took the previous post; a
/// value other than the expected tag therefore means that the members disagree (NOCHECK on one
/// side only, or different numbers of epochs), and is reported as [`Error::OutOfStep`].
///
/// Writes go through the window's own [`gaspi::Batch`]; `done` is posted on the same batch
/// after them, and a batch's notification to a rank never lands before the batch's earlier
/// writes to that rank. So when `wait` sees an origin's `done`, all its data is visible.
/// When the last write to a target reached through the fabric is small, `done` travels with
/// it instead, as the notification of that write, which never lands before its data: one
/// message per target and epoch rather than two. That is done only where nothing can land
/// after it: the provider orders writes ([`gaspi::Context::ordered_writes`]), or the held
/// write is the only one to that target in the epoch.
///
/// # Waiting, errors and faults
/// * Every call that waits takes a [`Timeout`] and may be repeated after a timeout to
///   continue: a `start` or `complete` that timed out waiting for posts reports
///   [`Error::PostsMissing`] naming the targets (an origin that starts a target which did not
///   post it is reported this way, never hangs); a `wait` reports
///   [`Error::CompletionsMissing`] naming the origins. Both count as timeouts
///   ([`Error::is_timeout`]). As in the runtime's waits, the timeout starts counting when
///   the call first has to wait (or to look a member's tables up).
/// * A member found dead leaves the epoch it was in, which goes on with the others, and
///   its death ([`gaspi::Error::RankFailed`] naming it) is reported once, by the call that
///   then returns: `wait` (or `test`) once every other origin completed, closing the epoch
///   (their data is there); `start` once every other target posted, the epoch open with
///   them (a write to the dead target fails naming it); `complete` once every other target
///   was told, closing the epoch. A timeout meanwhile is reported as such, and the death
///   by the call that continues. So survivors keep using the window, as with any other
///   members: a later `post` to the dead rank fails naming it, and `start_any` no longer
///   waits for it.
/// * The first `start` of a rank looks its tables up; when that rank died before, the
///   runtime may report the failed lookup as [`gaspi::Error::OperationFailed`] naming it.
/// * Misuse is an error, checked before anything changes: [`Error::EpochOpen`] for a second
///   epoch of one kind, [`Error::NoEpoch`] for `complete` without `start` or `wait` without
///   `post`, [`Error::NotStarted`] for a write to (or `complete_one` of) a rank outside the
///   access epoch, [`Error::NotPosted`] for a write to a target whose post has not arrived,
///   [`Error::NotMember`] for a rank outside the group.
///
/// # Choices
/// * The calls take `&mut self`: one window carries one exposure and one access epoch at a
///   time, and its calls come from one thread at a time, as the borrow checker says. Many
///   windows may be open at once, each with its own epochs, and different threads may work in
///   different windows.
/// * `start` waits for the posts rather than deferring writes: a write then goes out at once,
///   and the window keeps no copy of pending writes. The one exception is the last write of
///   at most [`HELD_WRITE_MAX`](Self::HELD_WRITE_MAX) bytes to each target reached through
///   the fabric, which is held back (its arguments, not its data: MPI's rule that the source
///   stays unchanged until `complete` covers it) until the next write to that target or
///   `complete`, so that `done` can travel with it. A halo code's epoch of small blocks then
///   costs one message per neighbour, as a `write_notify` does; a larger write still goes
///   out at once and overlaps the caller's work. Towards a target on the direct intra-node
///   path ([`gaspi::Context::reaches_directly`]) nothing is held: the write is a copy and
///   `done` a store, which cost the same together or apart.
/// * [`start_one`](Self::start_one) and [`start_any`](Self::start_any) add targets one by
///   one to the access epoch, so an origin can serve each target as soon as it is ready.
/// * A member's control and data targets are resolved on first use, within the timeout of
///   `post` or `start`, and cached.
/// * `NOCHECK` cannot be used with `start_any`, which needs the post to find the target.
/// * The rank lists of `post` and `start` are sets, as MPI's groups are: a rank given twice
///   counts once, so that a periodic halo whose north and south neighbour are one rank (a
///   grid two ranks wide) posts to and starts it once.
///
/// # Example
/// A ring: each rank writes 8 bytes into its right neighbour's segment 0, every epoch.
/// ```no_run
/// use gaspi::{Context, Timeout, GROUP_ALL};
/// use gaspi_coll::{Assert, Collectives, Window};
///
/// let ctx = Context::init()?;
/// let t = Timeout::Millis(10_000);
/// ctx.segment_create(0, 4096, t)?;
/// let coll = Collectives::new(&ctx)?;
/// let mut win = Window::new(&coll, GROUP_ALL, 0, t)?;
/// let n = ctx.size();
/// let (left, right) = ((ctx.rank() + n - 1) % n, (ctx.rank() + 1) % n);
/// for _ in 0..10 {
///     win.post(&[left], Assert::NONE, t)?;
///     win.start(&[right], Assert::NONE, t)?;
///     win.write(0, 0, right, 8, 8)?;
///     win.complete(t)?;
///     win.wait(t)?; // bytes 8..16 now hold what `left` wrote
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Window<'c> {
    ctx: &'c Context,
    group: GroupId,
    segment: SegmentId,
    /// The members' ranks, by member index: ascending, as the runtime lists them, so a
    /// rank's member index is found by bisection.
    ranks: Vec<Rank>,
    me: u32,
    control: Segment<'c>,
    /// Per member: its control table and window segment, resolved on first use.
    peers: Vec<Peer>,
    /// Writes and `done`s: one batch, so that a `done` follows the writes it covers.
    batch: Batch<'c>,
    /// Per member: exposure epochs this member posted to it so far.
    posts: Vec<u64>,
    /// Per member: access epochs this member started to it so far.
    starts: Vec<u64>,
    /// Whether an exposure epoch is open (it may have no origins: `post(&[])`).
    exposing: bool,
    /// The origins of the open exposure epoch; kept between epochs so that an epoch
    /// allocates nothing.
    origins: Vec<Origin>,
    /// Whether an access epoch is open (it may have no targets: `start(&[])`).
    accessing: bool,
    access: Vec<Access>,
    /// The member [`start_any`](Self::start_any) matched but did not return yet (its
    /// tables were still being resolved when it timed out).
    matched: Option<u32>,
    /// The death of an origin that the open exposure epoch goes on without, reported by the
    /// call that closes the epoch.
    exposure_lost: Option<Error>,
    /// The death of a target that the open access epoch goes on without, reported by the
    /// `start` that waited for it, or else by the call that ends the epoch.
    access_lost: Option<Error>,
    /// The segment the last write came from, kept across epochs while it is current so that
    /// a write does not look its source up by id (see [`source`](Self::source)).
    source: Option<Segment<'c>>,
}

/// A member's tables, as far as they were resolved.
#[derive(Debug, Clone, Copy, Default)]
struct Peer {
    control: Option<Target>,
    window: Option<Target>,
    /// Its window segment was found gone by the last start: writes to it fail at once.
    gone: bool,
}

/// The control table of `rank` (a member whose table is `cached`, once looked up), looked up
/// in `control`'s namespace within `due` by the first call: every later epoch finds it, so
/// only that check is inline. A function of the fields it needs, so that the batch can post
/// to the table it borrows without copying it.
#[inline]
fn control_table<'p>(
    cached: &'p mut Option<Target>,
    control: &Segment<'_>,
    rank: Rank,
    due: &mut Due,
) -> Result<&'p Target> {
    match cached {
        Some(table) => Ok(table),
        None => Ok(cached.insert(look_up_control(control, rank, due)?)),
    }
}

#[cold]
#[inline(never)]
fn look_up_control(control: &Segment<'_>, rank: Rank, due: &mut Due) -> Result<Target> {
    Ok(control.target(rank, due.left())?)
}

/// A call's timeout, turned into a deadline when the call first has to wait or look something
/// up. Most epochs find their posts and completions already there; reading the clock for
/// each call would then cost more than the rest of such a check.
struct Due {
    timeout: Timeout,
    deadline: Option<Deadline>,
}

impl Due {
    fn new(timeout: Timeout) -> Due {
        Due {
            timeout,
            deadline: None,
        }
    }

    /// What is left of the timeout, for a runtime call that waits: the whole of it on the
    /// first wait, which starts the count.
    fn left(&mut self) -> Timeout {
        match self.deadline {
            Some(deadline) => deadline.left(),
            None => {
                self.deadline = Some(self.timeout.deadline());
                self.timeout
            }
        }
    }

    /// The deadline, for a runtime call that takes one: set by the first wait, which starts
    /// the count. The runtime takes it as it is, where a [`Timeout`] passed on read the clock
    /// a second time, right after the first reading.
    fn deadline(&mut self) -> Deadline {
        let timeout = self.timeout;
        *self.deadline.get_or_insert_with(|| timeout.deadline())
    }
}

impl std::fmt::Debug for Window<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("group", &self.group)
            .field("segment", &self.segment)
            .field("members", &self.ranks.len())
            .field("exposure", &self.exposing)
            .field("access", &self.accessing)
            .finish()
    }
}

impl<'c> Window<'c> {
    /// The largest write a window holds back until `complete` (see "Choices" on
    /// [`Window`]). Up to this size sending the data costs about what sending `done` does,
    /// and holding it costs the caller no overlap worth having.
    pub const HELD_WRITE_MAX: u64 = 4096;

    /// Builds the window over user segment `segment` of the members of committed group
    /// `group` (collective over its members; `MPI_Win_create`): creates each member's control
    /// table in `coll`'s namespace. The segment must exist on every member that is written to
    /// when it is first started. After [`gaspi::Error::Timeout`], call again with the same
    /// arguments to continue. The window keeps the group's members as they are now, whatever
    /// becomes of the group's id later.
    ///
    /// # Errors
    /// From the runtime: [`gaspi::Error::UnknownGroup`], [`gaspi::Error::GroupNotCommitted`],
    /// [`gaspi::Error::NotInGroup`], [`gaspi::Error::LibrarySegment`] for a group too
    /// large for a notification table, [`gaspi::Error::LibraryBusy`],
    /// [`gaspi::Error::Timeout`], [`gaspi::Error::RankFailed`].
    pub fn new(
        coll: &'c Collectives<'c>,
        group: GroupId,
        segment: SegmentId,
        timeout: Timeout,
    ) -> Result<Window<'c>> {
        let ctx = coll.context();
        let scope = coll.library().team_of_group(group)?;
        let (ranks, n, me) = (scope.ranks(), scope.size(), scope.index());
        // Members that made their windows in different orders (from several threads) learn
        // it, as `LibraryDisagreement`, instead of pairing one window's tables with another's.
        let agreement = crate::ops::signature(&[WINDOW, u64::from(segment)]);
        let control = coll.library().notifications_create_agreed(
            &scope,
            n.saturating_mul(2),
            agreement,
            timeout,
        )?;
        Ok(Window {
            ctx,
            group,
            segment,
            me,
            control,
            peers: vec![Peer::default(); ranks.len()],
            batch: crate::batch(ctx),
            posts: vec![0; ranks.len()],
            starts: vec![0; ranks.len()],
            ranks,
            exposing: false,
            origins: Vec::new(),
            accessing: false,
            access: Vec::new(),
            matched: None,
            exposure_lost: None,
            access_lost: None,
            source: None,
        })
    }

    /// The group the window is over.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The user segment the window exposes.
    pub fn segment(&self) -> SegmentId {
        self.segment
    }

    /// `MPI_Win_post`: opens an exposure epoch to `origins` (members of the group, this rank
    /// included if it likes), telling each that it may start (unless `assert` has
    /// [`Assert::NOCHECK`]). Never waits for a peer; `timeout` bounds only the first lookup
    /// of an origin's control table. After a timeout nothing was posted: call again.
    ///
    /// # Errors
    /// [`Error::UnknownAssert`]; [`Error::EpochOpen`] while an exposure epoch is open;
    /// [`Error::NotMember`]; from the runtime: [`gaspi::Error::Timeout`],
    /// [`gaspi::Error::RankFailed`], [`gaspi::Error::BatchFull`].
    pub fn post(&mut self, origins: &[Rank], assert: Assert, timeout: Timeout) -> Result<()> {
        // One origin whose table an earlier epoch looked up, a ping-pong's and a stencil's
        // steady state: no passes over a list. Anything else takes the general way, which
        // also makes every error.
        if let Some((_, member)) = self.alone(self.exposing, origins, assert) {
            // Its control table is cached, or not needed.
            if self.peers[member as usize].control.is_some() || assert.contains(Assert::NOCHECK) {
                return self.post_one(member, assert, timeout);
            }
        }
        self.post_list(origins, assert, timeout)
    }

    /// The rank of a list of one, and its member index, when an epoch it opens needs no
    /// check that can fail: no epoch of its kind `open`, `assert` known, the rank a member.
    #[inline]
    fn alone(&self, open: bool, ranks: &[Rank], assert: Assert) -> Option<(Rank, u32)> {
        match *ranks {
            [rank] if !open && Assert::all().contains(assert) => {
                Some((rank, crate::index_in(&self.ranks, rank)?))
            }
            _ => None,
        }
    }

    /// [`post`](Self::post) to `member` alone, as [`alone`](Self::alone) found it, its
    /// control table cached: the general way's steps for a list of one.
    fn post_one(&mut self, member: u32, assert: Assert, timeout: Timeout) -> Result<()> {
        self.posts[member as usize] += 1;
        let tag = crate::tag(self.posts[member as usize]);
        self.origins.clear();
        self.origins.push(Origin {
            member,
            tag,
            completed: false,
        });
        self.exposing = true;
        if assert.contains(Assert::NOCHECK) {
            return Ok(());
        }
        let id = self.post_id(self.me);
        self.notify(
            member,
            Notification { id, value: tag },
            &mut Due::new(timeout),
        )
    }

    fn post_list(&mut self, origins: &[Rank], assert: Assert, timeout: Timeout) -> Result<()> {
        assert.known()?;
        if self.exposing {
            return Err(Error::EpochOpen {
                epoch: Epoch::Exposure,
            });
        }
        // No epoch is open: a list left by a refused call is only overwritten.
        self.origins.clear();
        for i in 0..origins.len() {
            let Some(member) = self.listed(origins, i)? else {
                continue;
            };
            self.origins.push(Origin {
                member,
                tag: 0,
                completed: false,
            });
        }
        let mut due = Due::new(timeout);
        let nocheck = assert.contains(Assert::NOCHECK);
        if !nocheck {
            for i in 0..self.origins.len() {
                self.resolve_control(self.origins[i].member, &mut due)?;
            }
        }
        for o in &mut self.origins {
            self.posts[o.member as usize] += 1;
            o.tag = crate::tag(self.posts[o.member as usize]);
        }
        // The epoch is open from here on, also when a notification fails below: the origin
        // it was for is then dead or out of reach, and `wait` names it. The others are told
        // all the same (the first failure is reported after), or they could never start.
        self.exposing = true;
        let mut failed = Ok(());
        if !nocheck {
            let id = self.post_id(self.me);
            for i in 0..self.origins.len() {
                let Origin { member, tag, .. } = self.origins[i];
                let told = self.notify(member, Notification { id, value: tag }, &mut due);
                if failed.is_ok() {
                    failed = told;
                }
            }
        }
        failed
    }

    /// `MPI_Win_wait`: waits until every origin of the exposure epoch completed; then all
    /// their writes are visible in this rank's segment, and the epoch is closed. After a
    /// timeout ([`Error::CompletionsMissing`], naming the origins not heard from), call
    /// again to continue.
    ///
    /// # Errors
    /// [`Error::NoEpoch`] without an exposure epoch; [`Error::CompletionsMissing`];
    /// [`gaspi::Error::RankFailed`] naming an origin found dead, once the others completed
    /// (the epoch is closed then; see "Waiting, errors and faults" on [`Window`]);
    /// [`Error::OutOfStep`] when an origin completed another epoch than this one.
    pub fn wait(&mut self, timeout: Timeout) -> Result<()> {
        // One origin, its `done` there, the steady state of a ping-pong or a halo of one
        // neighbour: one take, without the general way's passes.
        if let [o] = self.origins[..] {
            if self.exposing && !o.completed {
                let rank = self.ranks[o.member as usize];
                if self.take(self.done_id(o.member), rank, o.tag)? {
                    self.origins[0].completed = true;
                    self.exposing = false;
                    return reported(&mut self.exposure_lost);
                }
                // Not there (through the fabric, mostly: it lands as the wait drives the
                // provider): sleep first, as the general way would after the same take,
                // rather than take it again.
                let mut due = Due::new(timeout);
                self.sleep_for_completions(&mut due)?;
                return self.await_completions(&mut due);
            }
        }
        self.await_completions(&mut Due::new(timeout))
    }

    /// `MPI_Win_test`: [`wait`](Self::wait) that never blocks: `false` while an origin has
    /// not completed; `true` once they all have, which closes the epoch (a further `test`
    /// before the next [`post`](Self::post) is [`Error::NoEpoch`], as MPI forbids it).
    ///
    /// # Errors
    /// As for [`wait`](Self::wait), except the timeout.
    pub fn test(&mut self) -> Result<bool> {
        match self.await_completions(&mut Due::new(Timeout::Test)) {
            Ok(()) => Ok(true),
            Err(e) if e.is_timeout() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `MPI_Win_start`: opens an access epoch to `targets` and returns once each has posted
    /// to this rank for this epoch (at once with [`Assert::NOCHECK`]); then
    /// [`write`](Self::write) to them. After a timeout ([`Error::PostsMissing`], naming the
    /// targets not heard from) the epoch is open with the targets that did post: call again
    /// with the same targets to continue (writes to those already there are allowed
    /// meanwhile), or [`complete`](Self::complete) it.
    ///
    /// # Errors
    /// [`Error::UnknownAssert`]; [`Error::EpochOpen`] while another access epoch is open;
    /// [`Error::NotMember`]; [`Error::PostsMissing`]; [`Error::OutOfStep`] when a target
    /// posted another epoch; from the runtime: [`gaspi::Error::Timeout`] (resolving a target),
    /// [`gaspi::Error::RankFailed`] naming a target found dead, once the others posted (the
    /// epoch is open with them).
    pub fn start(&mut self, targets: &[Rank], assert: Assert, timeout: Timeout) -> Result<()> {
        // One target resolved by an earlier epoch and still current, the steady state of a
        // ping-pong or a stencil: no passes over a list. Anything else takes the general
        // way, which also makes every error.
        if let Some((target, member)) = self.alone(self.accessing, targets, assert) {
            // Its window segment (and so its control table) resolved by an earlier start,
            // and current: nothing to look up.
            let window = &self.peers[member as usize].window;
            if window
                .as_ref()
                .is_some_and(|w| self.ctx.target_is_current(w))
            {
                return self.start_at_once(member, target, assert, timeout);
            }
        }
        self.start_list(targets, assert, timeout)
    }

    /// [`start`](Self::start) of `target` (member `member`) alone, as [`alone`](Self::alone)
    /// found it, resolved: the general way's steps for a list of one, its post taken at once
    /// when it is there.
    fn start_at_once(
        &mut self,
        member: u32,
        target: Rank,
        assert: Assert,
        timeout: Timeout,
    ) -> Result<()> {
        // No access epoch is open, so `access` is empty.
        self.access.push(Access::new(member, target));
        self.open(0, assert);
        self.accessing = true;
        let a = self.access[0];
        if a.stage == Stage::Pending {
            if !self.take(self.post_id(member), target, a.tag)? {
                return self.posts_arrived(None, &mut Due::new(timeout));
            }
            self.access[0].stage = Stage::Ready;
        }
        reported(&mut self.access_lost)
    }

    fn start_list(&mut self, targets: &[Rank], assert: Assert, timeout: Timeout) -> Result<()> {
        assert.known()?;
        let mut due = Due::new(timeout);
        if self.accessing {
            if !self.resumes(targets) {
                return Err(Error::EpochOpen {
                    epoch: Epoch::Access,
                });
            }
            return self.posts_arrived(None, &mut due);
        }
        // No access epoch is open, so `access` is empty; it is emptied again when the targets
        // are refused or cannot be resolved, so that nothing was started.
        for (i, &rank) in targets.iter().enumerate() {
            match self.listed(targets, i) {
                Ok(Some(member)) => self.access.push(Access::new(member, rank)),
                Ok(None) => {}
                Err(e) => {
                    self.access.clear();
                    return Err(e);
                }
            }
        }
        for i in 0..self.access.len() {
            if let Err(e) = self.resolve(self.access[i].member, &mut due) {
                self.access.clear();
                return Err(e);
            }
        }
        for i in 0..self.access.len() {
            self.open(i, assert);
        }
        self.accessing = true;
        self.posts_arrived(None, &mut due)
    }

    /// Proposal G's `MPI_RMA_START(comm, rank)`: adds `target` to the access epoch (opening
    /// one if none is open) and returns once it posted to this rank for this epoch. After a
    /// timeout, call again with the same target to continue.
    ///
    /// # Errors
    /// [`Error::EpochOpen`] when `target` is already in the access epoch (and not waiting
    /// for its post); otherwise as for [`start`](Self::start).
    pub fn start_one(&mut self, target: Rank, assert: Assert, timeout: Timeout) -> Result<()> {
        assert.known()?;
        let mut due = Due::new(timeout);
        let member = self.member(target)?;
        match self.access.iter().find(|a| a.rank == target) {
            Some(a) if a.stage == Stage::Pending => {}
            Some(_) => {
                return Err(Error::EpochOpen {
                    epoch: Epoch::Access,
                })
            }
            None => {
                self.resolve(member, &mut due)?;
                self.access.push(Access::new(member, target));
                self.open(self.access.len() - 1, assert);
                self.accessing = true;
            }
        }
        self.posts_arrived(Some(target), &mut due)
    }

    /// The next member (not in the access epoch) whose post to this rank arrived, added to the
    /// access epoch and returned: an origin serves its targets in the order they become ready,
    /// with [`complete_one`](Self::complete_one) for each. Posts made with
    /// [`Assert::NOCHECK`] send nothing, so they are never found here.
    ///
    /// A member is found when its post is taken: a call that then fails to reach its window
    /// (a timeout while its segment is looked up, its segment gone) has it in the access
    /// epoch already, and the next call returns it (or fails the same way); ending the
    /// epoch ([`complete`](Self::complete), or [`complete_one`](Self::complete_one) of the
    /// rank the error names) tells it this rank is done, so that its `wait` ends.
    ///
    /// # Errors
    /// [`gaspi::Error::Timeout`] (call again; no target was returned);
    /// [`gaspi::Error::RankFailed`] naming a member found dead while none has posted (once:
    /// members known dead are not waited for); [`Error::NoneToStart`] at once, with any
    /// timeout, when every member is in the access epoch or known dead (nothing could be
    /// found);
    /// [`gaspi::Error::UnknownSegment`] naming a member found whose window segment is not
    /// there; [`Error::OutOfStep`] when a member posted another epoch.
    pub fn start_any(&mut self, timeout: Timeout) -> Result<Rank> {
        let mut due = Due::new(timeout);
        loop {
            if let Some(member) = self.matched {
                self.resolve(member, &mut due)?;
                self.matched = None;
                return Ok(self.ranks[member as usize]);
            }
            // A member known dead posts no more: after the call that found it, none waits
            // for it.
            let candidates: SmallVec<[u32; 16]> = (0..self.ranks.len() as u32)
                .filter(|&m| self.access.iter().all(|a| a.member != m))
                .filter(|&m| self.ctx.known_failure([self.ranks[m as usize]]).is_none())
                .collect();
            for &m in &candidates {
                let expected = crate::tag(self.starts[m as usize] + 1);
                let rank = self.ranks[m as usize];
                if self.take(self.post_id(m), rank, expected)? {
                    self.starts[m as usize] += 1;
                    self.access
                        .push(Access::matched(m, rank, expected, Stage::Ready));
                    self.accessing = true;
                    self.matched = Some(m);
                    // One target per call: the others stay in the table for the next.
                    break;
                }
            }
            if self.matched.is_some() {
                continue;
            }
            if candidates.is_empty() {
                return Err(Error::NoneToStart);
            }
            let waiting = candidates
                .iter()
                .map(|&m| (self.post_id(m), self.ranks[m as usize]));
            self.sleep(waiting, &mut due)?;
        }
    }

    /// Writes `size` bytes of this rank's segment `src` at `src_offset` to `target`'s window
    /// segment at `dst_offset`, inside the access epoch (`MPI_Put`). Never blocks; the
    /// source must not change until [`complete`](Self::complete).
    ///
    /// A write of at most [`HELD_WRITE_MAX`](Self::HELD_WRITE_MAX) bytes to a target reached
    /// through the fabric is checked now and held back until the next write to `target` or
    /// until `complete`, which sends it with the target's `done` (see "Choices" on
    /// [`Window`]); a failure to post it then (the segment deleted since, say) is reported
    /// by `complete`, which still tells the target, so that its `wait` ends.
    ///
    /// The window names its segment by id: a start finds a member's window segment anew when
    /// it was deleted and made again (in another size) since the last start, and a write
    /// beyond the size the window knew looks again before it is refused. While a member's
    /// window segment is gone, writes to it fail at the call.
    /// The source is named by id too: the window keeps a handle on the last source segment
    /// between calls and checks that it is still current ([`gaspi::Segment::is_current`])
    /// instead of looking it up again, so that a source deleted since is found gone (or made
    /// anew) as by id. After such a deletion the kept handle holds the old segment's memory
    /// until the window's next write or its drop; no handle of bound memory is kept.
    ///
    /// # Errors
    /// [`Error::NotStarted`] when `target` is not in the access epoch; [`Error::NotPosted`]
    /// when its post has not arrived; from the runtime: [`gaspi::Error::UnknownSegment`],
    /// [`gaspi::Error::OutOfBounds`], [`gaspi::Error::BatchFull`],
    /// [`gaspi::Error::RankFailed`].
    pub fn write(
        &mut self,
        src: SegmentId,
        src_offset: u64,
        target: Rank,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        // A write that goes directly is a copy the caller makes, and its `done` a store:
        // carried together they cost what they cost apart.
        if size > Self::HELD_WRITE_MAX || self.ctx.reaches_directly(target) {
            return self.write_with(src, src_offset, target, dst_offset, size, None);
        }
        let i = self.ready(target)?;
        let len = self.ctx.segment_size(src)?;
        crate::check_range(self.ctx.rank(), src, len, src_offset, size)?;
        self.fit(i, dst_offset, size)?;
        self.release_held(i)?;
        self.access[i].held = Some(Held {
            src,
            src_offset,
            dst_offset,
            size,
        });
        Ok(())
    }

    /// Writes like [`write`](Self::write), then sets `notification` in the table of
    /// `target`'s window segment, never before the data: for targets that consume data
    /// before their epoch ends.
    ///
    /// # Errors
    /// As for [`write`](Self::write), and [`gaspi::Error::InvalidNotification`] /
    /// [`gaspi::Error::ZeroNotificationValue`].
    pub fn write_notify(
        &mut self,
        src: SegmentId,
        src_offset: u64,
        target: Rank,
        dst_offset: u64,
        size: u64,
        notification: Notification,
    ) -> Result<()> {
        let notification = Some(notification);
        self.write_with(src, src_offset, target, dst_offset, size, notification)
    }

    fn write_with(
        &mut self,
        src: SegmentId,
        src_offset: u64,
        target: Rank,
        dst_offset: u64,
        size: u64,
        notification: Option<Notification>,
    ) -> Result<()> {
        let Some(i) = self.ready_at(target) else {
            return Err(self.not_ready(target));
        };
        self.fit(i, dst_offset, size)?;
        let src = self.source(src)?;
        self.release_held(i)?;
        self.access[i].sent = true;
        let dst = self.window(i)?;
        match notification {
            None => self.batch.write(&src, src_offset, dst, dst_offset, size)?,
            Some(n) => self
                .batch
                .write_notify(&src, src_offset, dst, dst_offset, size, n)?,
        }
        self.keep_source(src);
        Ok(())
    }

    /// This rank's segment `id`, a write's source: the kept handle when it is that segment
    /// and still current ([`Segment::is_current`], one load), else looked up by id. Hand it
    /// back with [`keep_source`](Self::keep_source).
    #[inline]
    fn source(&mut self, id: SegmentId) -> Result<Segment<'c>> {
        match self.source.take() {
            Some(kept) if kept.id() == Some(id) && kept.is_current() => Ok(kept),
            _ => Ok(self.ctx.segment(id)?),
        }
    }

    /// Keeps `src` for the next write, unless its memory is the user's
    /// ([`Context::segment_bind`](gaspi::Context::segment_bind)): a live handle of bound
    /// memory makes the user's deletion of the segment fail, and the window must not hold
    /// one between calls.
    #[inline]
    fn keep_source(&mut self, src: Segment<'c>) {
        if !src.memory().is_some_and(|m| m.is_bound()) {
            self.source = Some(src);
        }
    }

    /// Writes each `(src_offset, dst_offset, size)` of `blocks` from segment `src` to
    /// `target`, as [`write`](Self::write) does (the list form): all checked against the
    /// segments first, so that none is posted when one is refused.
    ///
    /// # Errors
    /// As for [`write`](Self::write).
    pub fn write_list(
        &mut self,
        src: SegmentId,
        target: Rank,
        blocks: &[(u64, u64, u64)],
    ) -> Result<()> {
        let i = self.ready(target)?;
        let segment = self.ctx.segment(src)?;
        for &(src_offset, dst_offset, size) in blocks {
            crate::check_range(self.ctx.rank(), src, segment.len(), src_offset, size)?;
            self.fit(i, dst_offset, size)?;
        }
        self.release_held(i)?;
        self.access[i].sent = true;
        let dst = self.window(i)?;
        for &(src_offset, dst_offset, size) in blocks {
            self.batch
                .write(&segment, src_offset, dst, dst_offset, size)?;
        }
        Ok(())
    }

    /// `MPI_Win_complete`: ends the access epoch. Waits for the posts still missing (a start
    /// that timed out), tells every target that this rank is done (after its writes there,
    /// never before), and returns once every write of the epoch completed locally: the
    /// sources may be reused. After a timeout, call again to continue.
    ///
    /// # Errors
    /// [`Error::NoEpoch`] without an access epoch; [`Error::PostsMissing`];
    /// [`Error::OutOfStep`]; from the runtime: [`gaspi::Error::Timeout`],
    /// [`gaspi::Error::RankFailed`] naming a target found dead in the epoch and not reported
    /// yet, once the others were told (the epoch is closed then).
    pub fn complete(&mut self, timeout: Timeout) -> Result<()> {
        if !self.accessing {
            return Err(Error::NoEpoch {
                epoch: Epoch::Access,
            });
        }
        let mut due = Due::new(timeout);
        // One target, posted, nothing held for it (a target reached directly): telling it is
        // one notification, without the general way's passes.
        if let [a] = self.access[..] {
            if a.stage == Stage::Ready && a.held.is_none() {
                self.tell(0, &mut due)?;
                return self.settle(|_| true, None, &[], &mut due);
            }
        }
        self.await_posts(None, &mut due)?;
        self.finish(None, &mut due)
    }

    /// Proposal G's `MPI_RMA_COMPLETE(comm, rank)`: ends the access epoch towards `target`
    /// only, as [`complete`](Self::complete) does for all; the other targets stay started.
    /// Local completion covers every write of the window in flight, also to other targets.
    ///
    /// # Errors
    /// [`Error::NotStarted`] when `target` is not in the access epoch; otherwise as for
    /// [`complete`](Self::complete).
    pub fn complete_one(&mut self, target: Rank, timeout: Timeout) -> Result<()> {
        if !self.access.iter().any(|a| a.rank == target) {
            return Err(Error::NotStarted { rank: target });
        }
        let mut due = Due::new(timeout);
        self.await_posts(Some(target), &mut due)?;
        self.finish(Some(target), &mut due)
    }

    /// Tells `only` (or every target of the access epoch; all posted) that this rank is done,
    /// waits for local completion, and removes them from the epoch.
    fn finish(&mut self, only: Option<Rank>, due: &mut Due) -> Result<()> {
        let done = self.done_id(self.me);
        let chosen = |a: &Access| only.is_none_or(|rank| rank == a.rank);
        // The `done`s that ride on held writes: a write that fails takes its `done` with it,
        // and its target must still be told, or its `wait` never ends.
        let mut carried: SmallVec<[(u32, Rank, Notification); 4]> = SmallVec::new();
        // A held write refused when posted (its segment gone or smaller since the start):
        // reported once every target was told.
        let mut refused = None;
        for i in 0..self.access.len() {
            let a = self.access[i];
            if a.stage == Stage::Ready && chosen(&a) {
                let notification = Notification {
                    id: done,
                    value: a.tag,
                };
                // The held write carries `done` when nothing else can land after it: the
                // provider orders writes, or it is the only write to the target.
                let told = match a.held {
                    Some(held) if !a.sent || self.ctx.ordered_writes() => {
                        // Kept for a call that continues after an error other than these.
                        match self.post_held(a.member, held, Some((notification, due))) {
                            Ok(()) => {
                                self.access[i].held = None;
                                carried.push((a.member, a.rank, notification));
                                Ok(())
                            }
                            Err(e) if landing(&e) == Some(a.rank) => {
                                refused.get_or_insert(e);
                                let told = self.notify(a.member, notification, due);
                                if told.is_ok() {
                                    self.access[i].held = None;
                                }
                                told
                            }
                            Err(e) => Err(e),
                        }
                    }
                    _ => {
                        match self.release_held(i) {
                            Ok(()) => self.tell(i, due)?,
                            Err(e) => self.target_lost(i, e)?,
                        }
                        continue;
                    }
                };
                match told {
                    Ok(()) => self.access[i].stage = Stage::Told,
                    Err(e) => self.target_lost(i, e)?,
                }
            }
        }
        self.settle(chosen, refused, &carried, due)
    }

    /// Tells access target `i` (posted, nothing held for it) that this rank is done. A
    /// target that died leaves the epoch ([`target_lost`](Self::target_lost)).
    fn tell(&mut self, i: usize, due: &mut Due) -> Result<()> {
        let a = self.access[i];
        let notification = Notification {
            id: self.done_id(self.me),
            value: a.tag,
        };
        match self.notify(a.member, notification, due) {
            Ok(()) => {
                self.access[i].stage = Stage::Told;
                Ok(())
            }
            Err(e) => self.target_lost(i, e),
        }
    }

    /// Takes `e`, the failure to tell access target `i`, when it names the target dead: it
    /// is told nothing more, and the others still are. Any other error is returned.
    #[cold]
    fn target_lost(&mut self, i: usize, e: Error) -> Result<()> {
        if dead_rank(&e) != Some(self.access[i].rank) {
            return Err(e);
        }
        self.lose_target(i, e);
        Ok(())
    }

    /// Waits for the local completion of the epoch's writes once the `chosen` targets were
    /// told (the `done`s in `carried` riding on held writes), and removes those targets
    /// from the epoch.
    fn settle(
        &mut self,
        chosen: impl Fn(&Access) -> bool,
        refused: Option<Error>,
        carried: &[(u32, Rank, Notification)],
        due: &mut Due,
    ) -> Result<()> {
        // Writes that went directly, and injected ones, completed when posted: with nothing
        // in flight there is no deadline to take, and the wait only reports a failure.
        let timeout = if self.batch.outstanding() == 0 {
            Timeout::Test
        } else {
            due.left()
        };
        if let Err(e) = self.batch.wait(timeout) {
            let e = Error::from(e);
            if let Some(i) = dead_rank(&e)
                .and_then(|rank| self.access.iter().position(|a| chosen(a) && a.rank == rank))
            {
                // Its writes are dropped, and every other operation completed: the epoch
                // ends without it.
                self.lose_target(i, e);
                return self.finished(chosen, refused);
            }
            let failed = landing(&e);
            for &(member, _, n) in carried.iter().filter(|c| Some(c.1) == failed) {
                // Not `notify`: its reaping would report the same failure again.
                let (batch, table) = self.batch_to(member, due)?;
                batch.notify(table, n)?;
            }
            return Err(e);
        }
        self.finished(chosen, refused)
    }

    /// Removes the `chosen` targets from the access epoch, whose end is reported: `refused`,
    /// a held write that could not be posted, or else the death of a target the epoch went
    /// on without.
    fn finished(&mut self, chosen: impl Fn(&Access) -> bool, refused: Option<Error>) -> Result<()> {
        self.access.retain(|a| !chosen(a));
        self.accessing = !self.access.is_empty();
        // A member `start_any` matched but did not return (a timeout, a failure to resolve
        // it) is out of the epoch now: the next `start_any` must not return it unposted.
        if self
            .matched
            .is_some_and(|m| self.access.iter().all(|a| a.member != m))
        {
            self.matched = None;
        }
        match refused {
            Some(e) => {
                self.access_lost = None;
                Err(e)
            }
            None => reported(&mut self.access_lost),
        }
    }

    /// Waits until no target of the access epoch (or `only` that one) is pending: a target
    /// started on its own is served as soon as it posted, whoever else has not.
    /// A target found dead leaves the epoch ([`Stage::Dead`]; its death is kept in
    /// `access_lost`), and the others are waited for.
    #[inline]
    fn await_posts(&mut self, only: Option<Rank>, due: &mut Due) -> Result<()> {
        // `complete` mostly follows a `start` that took every post: then it only looks.
        if self.pending(only).next().is_none() {
            return Ok(());
        }
        self.take_posts_awaited(only, due)
    }

    #[inline(never)]
    fn take_posts_awaited(&mut self, only: Option<Rank>, due: &mut Due) -> Result<()> {
        while self.take_posts(only)? {
            let missing = |ranks| Error::PostsMissing { ranks };
            if let Err(e) = self.sleep_or(self.pending(only), missing, due) {
                self.target_fell(e, only)?;
            }
        }
        Ok(())
    }

    /// [`await_posts`](Self::await_posts), then the death of a target it found (or an earlier
    /// call of the epoch found), reported: the calls that open an access epoch.
    fn posts_arrived(&mut self, only: Option<Rank>, due: &mut Due) -> Result<()> {
        // A start mostly finds its posts there: it takes them before anything that waits.
        if self.take_posts(only)? {
            self.take_posts_awaited(only, due)?;
        }
        reported(&mut self.access_lost)
    }

    /// Takes `e`, when it names a target still pending (or `only` that one) as dead: the
    /// target leaves the epoch (unless its post came after all). Any other error is
    /// returned.
    fn target_fell(&mut self, e: Error, only: Option<Rank>) -> Result<()> {
        let Some(rank) = dead_rank(&e) else {
            return Err(e);
        };
        let pending = |a: &Access| {
            a.stage == Stage::Pending && a.rank == rank && only.is_none_or(|r| r == rank)
        };
        let Some(i) = self.access.iter().position(pending) else {
            return Err(e);
        };
        let a = self.access[i];
        if self.take(self.post_id(a.member), rank, a.tag)? {
            self.access[i].stage = Stage::Ready;
        } else {
            self.lose_target(i, e);
        }
        Ok(())
    }

    /// Access target `i` was found dead (`e` says so): it leaves the epoch, which goes on
    /// with the others.
    fn lose_target(&mut self, i: usize, e: Error) {
        self.access[i].stage = Stage::Dead;
        self.access[i].held = None;
        self.access_lost.get_or_insert(e);
    }

    /// Takes the posts that arrived for pending targets (or `only` that one): whether one is
    /// still pending.
    fn take_posts(&mut self, only: Option<Rank>) -> Result<bool> {
        let mut pending = false;
        for i in 0..self.access.len() {
            let a = self.access[i];
            if a.stage != Stage::Pending || only.is_some_and(|rank| rank != a.rank) {
                continue;
            }
            if self.take(self.post_id(a.member), a.rank, a.tag)? {
                self.access[i].stage = Stage::Ready;
            } else {
                pending = true;
            }
        }
        Ok(pending)
    }

    /// Waits until every origin of the exposure epoch completed, then closes it; an origin
    /// found dead leaves the epoch, and its death is reported once the epoch closed. After
    /// any other error the epoch stays open with what it collected.
    fn await_completions(&mut self, due: &mut Due) -> Result<()> {
        if !self.exposing {
            return Err(Error::NoEpoch {
                epoch: Epoch::Exposure,
            });
        }
        while self.take_completions()? {
            self.sleep_for_completions(due)?;
        }
        self.exposing = false;
        reported(&mut self.exposure_lost)
    }

    /// Sleeps until a `done` the exposure epoch waits for is set, or an origin is found
    /// dead (it leaves the epoch), within `due`.
    fn sleep_for_completions(&mut self, due: &mut Due) -> Result<()> {
        let missing = |ranks| Error::CompletionsMissing { ranks };
        if let Err(e) = self.sleep_or(self.uncompleted(), missing, due) {
            self.origin_fell(e)?;
        }
        Ok(())
    }

    /// Takes `e`, when it names an origin the exposure epoch still waits for as dead: the
    /// origin leaves the epoch (unless its `done` came after all). Any other error is
    /// returned.
    fn origin_fell(&mut self, e: Error) -> Result<()> {
        let Some(rank) = dead_rank(&e) else {
            return Err(e);
        };
        let waited = |o: &Origin| !o.completed && self.ranks[o.member as usize] == rank;
        let Some(i) = self.origins.iter().position(waited) else {
            return Err(e);
        };
        let o = self.origins[i];
        if !self.take(self.done_id(o.member), rank, o.tag)? {
            self.exposure_lost.get_or_insert(e);
        }
        self.origins[i].completed = true;
        Ok(())
    }

    /// Takes the `done`s that arrived from origins of the exposure epoch: whether one is
    /// still missing.
    fn take_completions(&mut self) -> Result<bool> {
        let mut missing = false;
        for i in 0..self.origins.len() {
            let o = self.origins[i];
            if o.completed {
                continue;
            }
            let rank = self.ranks[o.member as usize];
            if self.take(self.done_id(o.member), rank, o.tag)? {
                self.origins[i].completed = true;
            } else {
                missing = true;
            }
        }
        Ok(missing)
    }

    /// Sleeps until one of `waiting` is set, as [`sleep`](Self::sleep) does; when time runs
    /// out, the error `missing` makes of the ranks not heard from. A call with no time left
    /// (a test) still makes the runtime's one look, which drives the provider and names a
    /// peer known dead, so that polling never goes on in silence. Kept out of line: the
    /// takes before it run in every call, the sleep only when a peer is late, and inlined
    /// it made every call pay for its frame.
    #[inline(never)]
    fn sleep_or(
        &self,
        waiting: impl Iterator<Item = (NotificationId, Rank)> + Clone,
        missing: fn(Vec<Rank>) -> Error,
        due: &mut Due,
    ) -> Result<()> {
        let not_heard = || missing(waiting.clone().map(|(_, rank)| rank).collect());
        match self.sleep(waiting.clone(), due) {
            Err(e) if e.is_timeout() => Err(not_heard()),
            other => other,
        }
    }

    /// Takes notification `id`, set by `rank`: true when it carried `expected`, false when
    /// unset.
    fn take(&self, id: NotificationId, rank: Rank, expected: u32) -> Result<bool> {
        match self.control.notify_reset(id)? {
            0 => Ok(false),
            got if got == expected => Ok(true),
            got => Err(Error::OutOfStep {
                rank,
                expected,
                got,
            }),
        }
    }

    /// The `post` notifications the access epoch waits for, with the targets that set them.
    fn pending(
        &self,
        only: Option<Rank>,
    ) -> impl Iterator<Item = (NotificationId, Rank)> + Clone + '_ {
        self.access
            .iter()
            .filter(move |a| a.stage == Stage::Pending && only.is_none_or(|rank| rank == a.rank))
            .map(|a| (self.post_id(a.member), a.rank))
    }

    /// The `done` notifications the exposure epoch waits for, with the origins that set them.
    fn uncompleted(&self) -> impl Iterator<Item = (NotificationId, Rank)> + Clone + '_ {
        self.origins
            .iter()
            .filter(|o| !o.completed)
            .map(|o| (self.done_id(o.member), self.ranks[o.member as usize]))
    }

    /// Sleeps until one of the control table's notifications in `waiting` is set, watching
    /// the ranks that set them.
    fn sleep(
        &self,
        mut waiting: impl Iterator<Item = (NotificationId, Rank)>,
        due: &mut Due,
    ) -> Result<()> {
        let deadline = due.deadline();
        match (waiting.next(), waiting.next()) {
            // One peer, the usual case: nothing to allocate or gather before the wait starts
            // polling.
            (Some((id, rank)), None) => {
                let range = self.control.range(id, 1);
                self.ctx.notify_wait_range(range, &[rank], deadline)?;
            }
            // A halo's few neighbours fit on the stack: a wait allocates nothing.
            (first, second) => {
                let (ranges, senders): (SmallVec<[_; 8]>, SmallVec<[Rank; 8]>) = first
                    .into_iter()
                    .chain(second)
                    .chain(waiting)
                    .map(|(id, rank)| (self.control.range(id, 1), rank))
                    .unzip();
                self.ctx.notify_wait_any(&ranges, &senders, deadline)?;
            }
        }
        Ok(())
    }

    /// Makes the `i`-th target of the access epoch match its next post.
    fn open(&mut self, i: usize, assert: Assert) {
        let a = &mut self.access[i];
        self.starts[a.member as usize] += 1;
        a.tag = crate::tag(self.starts[a.member as usize]);
        if assert.contains(Assert::NOCHECK) {
            a.stage = Stage::Ready;
        }
    }

    /// Whether `targets` are exactly those of the access epoch, some still pending: a start
    /// that timed out, called again.
    fn resumes(&self, targets: &[Rank]) -> bool {
        targets
            .iter()
            .all(|&t| self.access.iter().any(|a| a.rank == t))
            && self.access.iter().all(|a| targets.contains(&a.rank))
            && self.access.iter().any(|a| a.stage == Stage::Pending)
    }

    /// `target`'s place in the access epoch, when `target` is in the epoch, has posted, and
    /// its window segment is there.
    #[inline]
    fn ready(&self, target: Rank) -> Result<usize> {
        match self.ready_at(target) {
            Some(i) => Ok(i),
            None => Err(self.not_ready(target)),
        }
    }

    /// [`ready`](Self::ready)'s answer when it is `Ok`: an index, where building the
    /// error-sized `Result` on every write cost the caller its moves.
    #[inline]
    fn ready_at(&self, target: Rank) -> Option<usize> {
        let i = self.access.iter().position(|a| a.rank == target)?;
        let a = &self.access[i];
        let peer = &self.peers[a.member as usize];
        (a.stage == Stage::Ready && peer.window.is_some() && !peer.gone).then_some(i)
    }

    /// Why `target` is not [`ready`](Self::ready) for a write.
    #[cold]
    #[inline(never)]
    fn not_ready(&self, target: Rank) -> Error {
        let i = match self.access.iter().position(|a| a.rank == target) {
            Some(i) if self.access[i].stage == Stage::Ready => i,
            Some(i) if self.access[i].stage == Stage::Pending => {
                return Error::NotPosted { rank: target };
            }
            Some(i) if self.access[i].stage == Stage::Dead => {
                let dead = self
                    .ctx
                    .known_failure([target])
                    .unwrap_or(gaspi::Error::RankFailed {
                        rank: target,
                        reason: "found dead in this access epoch".into(),
                    });
                return dead.into();
            }
            _ => return Error::NotStarted { rank: target },
        };
        // Resolved by the start that added it.
        match self.peers[self.access[i].member as usize].window {
            Some(_) => gaspi::Error::UnknownSegment {
                rank: target,
                segment: self.segment,
            }
            .into(),
            None => Error::NotStarted { rank: target },
        }
    }

    /// Access target `i`'s window segment, as its start (or a later [`fit`](Self::fit))
    /// resolved it: borrowed, so that a write passes it on without a copy.
    fn window(&self, i: usize) -> Result<&Target> {
        let Access { member, rank, .. } = self.access[i];
        match &self.peers[member as usize].window {
            Some(window) => Ok(window),
            None => Err(Error::NotStarted { rank }),
        }
    }

    /// `Ok` when `offset..offset + size` lies in access target `i`'s window segment; else
    /// when it lies in the segment looked up anew, which the window keeps from then on: made
    /// anew since the start (larger), where the news of its deletion came after the start
    /// (see [`Context::target_is_current`](gaspi::Context::target_is_current)). The lookup
    /// waits for nothing: where it would, the range is refused as the window had it.
    ///
    /// Only the comparison with the known length is inline: asking the target for the range
    /// built a 64-byte `Target` and an error-sized `Result` on every write, about 50
    /// instructions.
    #[inline]
    fn fit(&mut self, i: usize, offset: u64, size: u64) -> Result<()> {
        let dst = self.window(i)?;
        if offset.checked_add(size).is_some_and(|end| end <= dst.len()) {
            return Ok(());
        }
        self.refit(i, offset, size)
    }

    #[inline(never)]
    fn refit(&mut self, i: usize, offset: u64, size: u64) -> Result<()> {
        let dst = *self.window(i)?;
        let refused = match dst.range(offset, size) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let member = self.access[i].member;
        let rank = self.ranks[member as usize];
        match self.ctx.target(rank, self.segment, Timeout::Test) {
            Ok(fresh) if fresh != dst => {
                self.peers[member as usize].window = Some(fresh);
                fresh.range(offset, size)?;
                Ok(())
            }
            _ => Err(refused.into()),
        }
    }

    /// Posts the write held for access target `i`, if any, on its own. Most calls find none
    /// (nothing is held towards a target reached directly), so only that check is inline.
    #[inline]
    fn release_held(&mut self, i: usize) -> Result<()> {
        match self.access[i].held {
            Some(held) => self.post_released(i, held),
            None => Ok(()),
        }
    }

    #[inline(never)]
    fn post_released(&mut self, i: usize, held: Held) -> Result<()> {
        self.post_held(self.access[i].member, held, None)?;
        self.access[i].held = None;
        self.access[i].sent = true;
        Ok(())
    }

    /// Posts `held` to member `member`, with `done` set in its control table after the data
    /// when given (the table looked up within `due` if no earlier call did).
    fn post_held(
        &mut self,
        member: u32,
        held: Held,
        done: Option<(Notification, &mut Due)>,
    ) -> Result<()> {
        let rank = self.ranks[member as usize];
        let dst = self.peers[member as usize]
            .window
            .ok_or(Error::NotStarted { rank })?;
        let src = self.source(held.src)?;
        let Held {
            src_offset,
            dst_offset,
            size,
            ..
        } = held;
        match done {
            None => self.batch.write(&src, src_offset, &dst, dst_offset, size)?,
            Some((n, due)) => {
                self.reap()?;
                let (batch, table) = self.batch_to(member, due)?;
                with_room(batch, due, || {
                    batch.write_notify_to(&src, src_offset, &dst, dst_offset, size, table, n)
                })?;
            }
        }
        self.keep_source(src);
        Ok(())
    }

    /// The member index of `ranks[i]`, checked to be a member; `None` when the list named
    /// it before (a list is a set, as MPI's groups are).
    fn listed(&self, ranks: &[Rank], i: usize) -> Result<Option<u32>> {
        let rank = ranks[i];
        if ranks[..i].contains(&rank) {
            return Ok(None);
        }
        self.member(rank).map(Some)
    }

    fn member(&self, rank: Rank) -> Result<u32> {
        match crate::index_in(&self.ranks, rank) {
            Some(member) => Ok(member),
            None => Err(Error::NotMember {
                rank,
                group: self.group,
            }),
        }
    }

    /// Resolves member `member`'s control table and window segment, the latter again when
    /// its rank deleted a segment since (the window's may have been made anew, in another
    /// size). A window segment gone since it was first resolved is kept as it was: the
    /// epoch may still synchronise, and writes into it fail as they would have.
    fn resolve(&mut self, member: u32, due: &mut Due) -> Result<()> {
        // Looked at in place: copying the cached target out first cost a start about 17
        // instructions.
        let window = &self.peers[member as usize].window;
        if window
            .as_ref()
            .is_some_and(|w| self.ctx.target_is_current(w))
        {
            return Ok(());
        }
        let known = window.is_some();
        self.resolve_control(member, due)?;
        let rank = self.ranks[member as usize];
        let peer = &mut self.peers[member as usize];
        match self.ctx.target(rank, self.segment, due.left()) {
            Ok(target) => {
                peer.window = Some(target);
                peer.gone = false;
            }
            Err(gaspi::Error::UnknownSegment { .. }) if known => peer.gone = true,
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Looks member `member`'s control table up within `due`, if no earlier call did.
    fn resolve_control(&mut self, member: u32, due: &mut Due) -> Result<()> {
        self.batch_to(member, due)?;
        Ok(())
    }

    /// The window's batch and member `member`'s control table (looked up within `due` if no
    /// earlier call did), borrowed together so that the batch posts to the table as it is
    /// cached.
    fn batch_to(&mut self, member: u32, due: &mut Due) -> Result<(&Batch<'c>, &Target)> {
        let table = control_table(
            &mut self.peers[member as usize].control,
            &self.control,
            self.ranks[member as usize],
            due,
        )?;
        Ok((&self.batch, table))
    }

    /// Sets `notification` in member `member`'s control table, after this window's writes
    /// to it. Every epoch but a member's first finds its table cached and the batch with
    /// room: only that way is inline, and the rest ([`notify_anew`](Self::notify_anew))
    /// also takes a full batch.
    #[inline]
    fn notify(&mut self, member: u32, notification: Notification, due: &mut Due) -> Result<()> {
        if let Some(table) = &self.peers[member as usize].control {
            if !self.reaps() {
                match self.batch.notify(table, notification) {
                    Ok(()) => return Ok(()),
                    Err(gaspi::Error::BatchFull { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        self.notify_anew(member, notification, due)
    }

    /// [`notify`](Self::notify) by way of reaping the batch, looking the table up, and
    /// waiting for room.
    #[inline(never)]
    fn notify_anew(
        &mut self,
        member: u32,
        notification: Notification,
        due: &mut Due,
    ) -> Result<()> {
        self.reap()?;
        let (batch, table) = self.batch_to(member, due)?;
        with_room(batch, due, || batch.notify(table, notification))
    }

    /// Reaps the batch's completed operations when many are counted: notifications (and
    /// injected writes) complete at once, and reaping them keeps the batch from filling up.
    fn reap(&self) -> Result<()> {
        if self.reaps() {
            self.batch.test()?;
        }
        Ok(())
    }

    /// Whether [`reap`](Self::reap) reaps.
    #[inline]
    fn reaps(&self) -> bool {
        self.batch.outstanding() > self.ranks.len() as u32
    }

    /// `post(t)`: set by target member `t` when it posts to this member.
    fn post_id(&self, member: u32) -> NotificationId {
        member
    }

    /// `done(o)`: set by origin member `o` when it completes towards this member.
    fn done_id(&self, member: u32) -> NotificationId {
        self.ranks.len() as u32 + member
    }
}

/// Posts a `done` with `post` on `batch`; when the epoch's writes fill the batch, waits within
/// `due` for them to complete (as `complete` does next anyway) and posts it then. A full batch
/// made `complete` fail with `BatchFull` at once, its targets never told (a window that wrote
/// 65,536 blocks of 4,100 bytes through shm to a target not driving progress yet).
fn with_room(batch: &Batch<'_>, due: &mut Due, post: impl Fn() -> gaspi::Result<()>) -> Result<()> {
    match post() {
        Err(gaspi::Error::BatchFull { .. }) => {
            batch.wait(due.left())?;
            post()?;
        }
        other => other?,
    }
    Ok(())
}
