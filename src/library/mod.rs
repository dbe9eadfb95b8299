//! The library API: what a library built on gaspi (the collectives of `gaspi-coll`, or anyone's)
//! needs to be a first-class client of the runtime, with nothing private to reach for.
//!
//! A [`Library`] is a namespace registered with the context under a name. Its resources never
//! collide with, nor shift, the user's:
//!
//! * **Segments and notification tables** ([`Library::segment_create`],
//!   [`Library::notifications_create`]) are created collectively over a [`Scope`] — a
//!   committed user group or a library [`Team`] — not over the world. They live in a space of
//!   local ids of their own (the user's segment ids 0..=255 stay the user's), and their
//!   creation is a rendezvous keyed by the library, the scope and a sequence number, so it
//!   never takes part in (or waits for) the user's barriers and collectives, and libraries may
//!   create concurrently with each other and with the user. A library segment is deleted when
//!   its last [`Segment`] handle is dropped.
//!   Members that must lay a segment out alike say so with
//!   [`Library::segment_create_agreed`], which checks an agreement word in the same exchange.
//! * **Teams** ([`Library::team`], [`Library::split`] of a scope by colour, or
//!   [`Library::team_of_group`], a snapshot of a group that outlives the group's id) are the
//!   library's groups: they take no user group id.
//!
//! Everything else a library needs is on [`Context`] for libraries and users alike:
//! [`Batch`](crate::Batch)es for completion tracking per set of operations,
//! [`Target`](crate::Target)s resolved once for cheap posting (small payloads injected),
//! [`Context::progress`], [`Context::notify_wait_any`] over several ranges with dead senders
//! named, non-blocking atomics and atomics that notify, and the reduction operators
//! ([`ReduceOp::apply`](crate::ReduceOp::apply), [`UserOp::apply`](crate::UserOp::apply)).
//!
//! As for every collective, the calls of one library over one scope must come in the same
//! order on every member. Errors about a library segment name it by its local id on the rank
//! concerned (a number in the library space, unrelated to the user's segment of that number).

mod rendezvous;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, Weak};

use gaspi_notifications::Timeout;

pub(crate) use rendezvous::{Mailbox, MESSAGE};

use crate::config::MAX_NOTIFICATIONS;
use crate::context::{Context, Inner};
use crate::engine::lookup::DescKey;
use crate::error::{Error, Rank, Result};
use crate::fnv::{fnv1a, fnv1a_words};
use crate::group::{fingerprint, GroupId, Members};
use crate::segment::{LocalSegment, Segment};
use crate::sync::{lock, Mutex};
use crate::wire::Table;
pub(crate) use rendezvous::room as internal_room;
use rendezvous::{Allgather, WIDTH};

/// Where a creation's value carries its agreement word.
const AGREED: std::ops::Range<usize> = 8..16;

/// Where a segment creation's value carries the incarnation of the member's segment (see
/// [`Placement`]).
const INCARNATION: std::ops::Range<usize> = 2..6;

/// A member's local id of a library segment, and the incarnation of its segment there.
type Part = (u8, u32);

/// The names of the libraries registered with a context, and the creation counts of the
/// names whose library was dropped.
#[derive(Default)]
pub(crate) struct Libraries {
    names: Mutex<HashSet<String>>,
    /// A library registered again under a name continues its predecessor's sequences: the
    /// rendezvous keys of its creations are made of the name, the scope and the count, and
    /// a count that began again at 0 gave a creation the key of its predecessor's first one
    /// over the scope, whose message from a member ahead replaced, in a slower member's
    /// mailbox, the one that member had not taken yet.
    dropped: Mutex<HashMap<String, HashMap<u64, Count>>>,
}

/// The ranks a library collective runs over.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'t> {
    /// The members of a committed user group.
    Group(GroupId),
    /// The members of a library team.
    Team(&'t Team<'t>),
}

impl From<GroupId> for Scope<'_> {
    fn from(group: GroupId) -> Self {
        Scope::Group(group)
    }
}

impl<'t> From<&'t Team<'t>> for Scope<'t> {
    fn from(team: &'t Team<'t>) -> Self {
        Scope::Team(team)
    }
}

/// What a creation makes; members that disagree are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Segment = 1,
    Notifications = 2,
    Team = 3,
    Split = 4,
}

/// What a member asks a rendezvous for; a call continuing one that timed out must ask the
/// same.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Call {
    kind: Kind,
    /// Bytes 2.. of the member's value (the first two say what is created).
    value: [u8; WIDTH],
    size: u64,
    notifications: u32,
}

impl Call {
    /// A call that creates no segment (a team, a split).
    fn teaming(kind: Kind, value: [u8; WIDTH]) -> Call {
        Call {
            kind,
            value,
            size: 0,
            notifications: 0,
        }
    }
}

/// Flag of a value's kind byte: the member could not make its part (its error stays there).
const REFUSED: u8 = 0x80;

/// A creation that timed out, to be continued.
struct Creation {
    call: Call,
    gather: Allgather,
    /// The segment installed for it (segments and tables).
    segment: Option<Arc<LocalSegment>>,
    /// Why this member could not make its part.
    refused: Option<Error>,
}

/// Creations made so far over one scope, and for the scope of a team made by
/// [`Library::team`] or [`Library::split`] that team's members: once the last handle on them
/// is gone, no creation over the scope can come any more (its key is never made again), so
/// the count goes too, instead of staying for the library's life with every team split off.
/// A group's scope (also through [`Library::team_of_group`]) has none: the group's key lasts.
struct Count {
    made: u64,
    team: Option<Weak<Members>>,
}

impl Count {
    fn live(&self) -> bool {
        self.team.as_ref().is_none_or(|t| t.strong_count() > 0)
    }
}

/// A library's state.
struct State {
    name: String,
    key: u64,
    /// Creations made so far per scope: the sequence number of the next.
    counts: Mutex<HashMap<u64, Count>>,
    pending: Mutex<HashMap<u64, Creation>>,
}

/// A library's namespace in the runtime: see the [module documentation](self).
///
/// ```no_run
/// # use gaspi::{Context, Notification, Timeout, GROUP_ALL};
/// # let ctx = Context::init()?;
/// let lib = ctx.library("my-collectives")?;
/// let seg = lib.segment_create(GROUP_ALL, 1 << 20, 64, Timeout::Millis(5_000))?;
/// let right = seg.target((ctx.rank() + 1) % ctx.size(), Timeout::Millis(5_000))?;
/// let batch = ctx.batch();
/// batch.write_notify(&seg, 0, &right, 0, 8, Notification { id: 0, value: 1 })?;
/// seg.notify_waitsome(0, 1, Timeout::Millis(5_000))?;
/// batch.wait(Timeout::Millis(5_000))?;
/// # Ok::<(), gaspi::Error>(())
/// ```
pub struct Library<'a> {
    ctx: &'a Context,
    state: Arc<State>,
}

impl std::fmt::Debug for Library<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("name", &self.state.name)
            .finish()
    }
}

impl Context {
    /// Registers a library under `name` (local: every rank that uses it registers it, under
    /// the same name). The name identifies its collectives across ranks, so it must be the
    /// same on every rank and unique among the libraries of a context. A library registered
    /// under the name of one dropped before continues that one's creation sequences, so its
    /// creations pair with the members' creations of the same number over each scope.
    ///
    /// # Errors
    /// [`Error::LibraryExists`] when a library of this name is registered (and not dropped).
    pub fn library(&self, name: &str) -> Result<Library<'_>> {
        let mut names = lock(&self.inner.libraries.names);
        if !names.insert(name.to_owned()) {
            return Err(Error::LibraryExists {
                name: name.to_owned(),
            });
        }
        let counts = lock(&self.inner.libraries.dropped)
            .remove(name)
            .unwrap_or_default();
        Ok(Library {
            ctx: self,
            state: Arc::new(State {
                name: name.to_owned(),
                key: fnv1a(name.bytes()),
                counts: Mutex::new(counts),
                pending: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl Drop for Library<'_> {
    fn drop(&mut self) {
        // A creation that timed out and was never continued installed its segment, which no
        // handle owns: without this it kept its memory, its files and one of the rank's 255
        // library ids until the context ended, and 255 of them refused every library's next
        // creation on this rank.
        let abandoned: Vec<Creation> = lock(&self.state.pending)
            .drain()
            .map(|(_, creation)| creation)
            .collect();
        for seg in abandoned.into_iter().filter_map(|c| c.segment) {
            self.ctx.inner.drop_library_segment(seg.table);
        }
        let mut counts = std::mem::take(&mut *lock(&self.state.counts));
        counts.retain(|_, count| count.live());
        let libraries = &self.ctx.inner.libraries;
        lock(&libraries.dropped).insert(self.state.name.clone(), counts);
        lock(&libraries.names).remove(&self.state.name);
    }
}

/// A scope resolved: its members, its key, and this rank's index; for a team's scope the
/// team's members (see [`Count`]).
struct Resolved {
    members: Members,
    key: u64,
    me: u32,
    team: Option<Weak<Members>>,
}

impl<'a> Library<'a> {
    /// The library's name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// Creates a segment of `size` bytes (each member may pass its own) with a table of
    /// `notifications` on every member of `scope` (collective over them); returns once every
    /// member has it, or [`Error::Timeout`]: call again with the same arguments to continue.
    ///
    /// # Errors
    /// [`Error::NotInGroup`] when this rank is not a member; [`Error::UnknownGroup`] /
    /// [`Error::GroupNotCommitted`] for a bad group; [`Error::LibrarySegment`] for a `size`
    /// of 0 (a table without memory is [`notifications_create`](Self::notifications_create)),
    /// a table size outside 1..=[`MAX_NOTIFICATIONS`] or memory that cannot be allocated;
    /// [`Error::Limit`] when this rank has 255 library segments; on the other members, such
    /// a refusal as [`Error::LibraryRefused`] naming the member (the refusing member still
    /// takes part in the creation, so that every member fails and stays in step);
    /// [`Error::LibraryBusy`] when another creation of this library over this scope (or this
    /// one with other arguments) timed out and was not continued; [`Error::LibraryMismatch`]
    /// when members created different things; [`Error::Timeout`]; [`Error::RankFailed`].
    pub fn segment_create<'s>(
        &self,
        scope: impl Into<Scope<'s>>,
        size: u64,
        notifications: u32,
        timeout: Timeout,
    ) -> Result<Segment<'a>> {
        self.segment_create_agreed(scope, size, notifications, 0, timeout)
    }

    /// [`segment_create`](Self::segment_create), where every member must also pass the same
    /// `agreement`: a word standing for the parameters the members lay the segment out by
    /// (a library's capacity, say, hashed), checked in the creation's own exchange at no
    /// extra cost. [`segment_create`](Self::segment_create) passes 0.
    ///
    /// # Errors
    /// As for [`segment_create`](Self::segment_create), and
    /// [`Error::LibraryDisagreement`] naming a member that passed another `agreement` (no
    /// member keeps the segment; the next creation over the scope starts afresh).
    pub fn segment_create_agreed<'s>(
        &self,
        scope: impl Into<Scope<'s>>,
        size: u64,
        notifications: u32,
        agreement: u64,
        timeout: Timeout,
    ) -> Result<Segment<'a>> {
        let kind = Kind::Segment;
        self.create(scope.into(), kind, size, notifications, agreement, timeout)
    }

    /// Creates a notification table of `count` notifications without memory on every member
    /// of `scope`: a range of notifications of the library's own, for notify-only traffic.
    /// Otherwise like [`segment_create`](Self::segment_create).
    ///
    /// # Errors
    /// As for [`segment_create`](Self::segment_create).
    pub fn notifications_create<'s>(
        &self,
        scope: impl Into<Scope<'s>>,
        count: u32,
        timeout: Timeout,
    ) -> Result<Segment<'a>> {
        self.notifications_create_agreed(scope, count, 0, timeout)
    }

    /// [`notifications_create`](Self::notifications_create), where every member must also
    /// pass the same `agreement`, as for
    /// [`segment_create_agreed`](Self::segment_create_agreed): a word standing for what the
    /// members use the table for (the object it belongs to, say), so that members whose
    /// creations came in different orders learn it instead of pairing up the wrong ones.
    ///
    /// # Errors
    /// As for [`segment_create_agreed`](Self::segment_create_agreed).
    pub fn notifications_create_agreed<'s>(
        &self,
        scope: impl Into<Scope<'s>>,
        count: u32,
        agreement: u64,
        timeout: Timeout,
    ) -> Result<Segment<'a>> {
        let kind = Kind::Notifications;
        self.create(scope.into(), kind, 0, count, agreement, timeout)
    }

    /// Creates a team of `members` (collective among them: each passes the same ranks, in any
    /// order). A team takes no user group id; use it as the [`Scope`] of this library's
    /// segments. A member whose partners never create the same team waits until its timeout.
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::NotInScope`] when this rank is not among `members`
    /// (none at all, say); [`Error::DuplicateTeamMember`]; [`Error::Timeout`] (call again to
    /// continue); [`Error::RankFailed`].
    pub fn team(&self, members: &[Rank], timeout: Timeout) -> Result<Team<'a>> {
        let ctx = self.ctx;
        let mut set = BTreeSet::new();
        for &rank in members {
            ctx.check_rank(rank)?;
            if !set.insert(rank) {
                return Err(Error::DuplicateTeamMember { rank });
            }
        }
        let members = Members::from_set(&set);
        let me = members
            .index_of(ctx.rank())
            .ok_or(Error::NotInScope { rank: ctx.rank() })?;
        // The scope of the creation is the member set, whose key recurs for every team of
        // the same ranks: its count lasts.
        let resolved = Resolved {
            key: fnv1a_words(std::iter::once(0x7ea3).chain(set.iter().map(|&r| u64::from(r)))),
            members,
            me,
            team: None,
        };
        let key = self
            .rendezvous(
                &resolved,
                Call::teaming(Kind::Team, [0; WIDTH]),
                timeout,
                || Ok(None),
            )?
            .key;
        Ok(Team {
            ctx: PhantomData,
            members: Arc::new(resolved.members),
            key,
            me,
            of_group: false,
        })
    }

    /// The team of committed group `group`'s members, in the group's member order: a
    /// snapshot, made locally (the group's commit made its members agree). Segments scoped to
    /// it are scoped as to the group — their creations count in one sequence, so members may
    /// pass either — but it keeps these members after the group is deleted or its id reused
    /// for others, where [`Scope::Group`] looks the group up at every call.
    ///
    /// # Errors
    /// [`Error::UnknownGroup`] / [`Error::GroupNotCommitted`] for a bad group;
    /// [`Error::NotInGroup`] when this rank is not a member.
    pub fn team_of_group(&self, group: GroupId) -> Result<Team<'a>> {
        let resolved = self.resolve(Scope::Group(group))?;
        Ok(Team {
            ctx: PhantomData,
            members: Arc::new(resolved.members),
            key: resolved.key,
            me: resolved.me,
            of_group: true,
        })
    }

    /// Splits `scope` into teams by `color` (collective over the scope's members, like
    /// `MPI_Comm_split`): the members that pass the same `Some(color)` form one team, ordered
    /// by `key` and, for equal keys, by their index in `scope`; a member passing `None`
    /// takes part but joins no team and gets `Ok(None)`. Every member of a new team gets the
    /// same team (the same member order and the same identity for segments scoped to it).
    /// After [`Error::Timeout`], call again with the same arguments to continue.
    ///
    /// # Errors
    /// As for [`segment_create`](Self::segment_create): [`Error::NotInGroup`],
    /// [`Error::UnknownGroup`] / [`Error::GroupNotCommitted`], [`Error::LibraryBusy`],
    /// [`Error::LibraryMismatch`] naming a member that created something else,
    /// [`Error::Timeout`], [`Error::RankFailed`].
    pub fn split<'s>(
        &self,
        scope: impl Into<Scope<'s>>,
        color: Option<u32>,
        key: u32,
        timeout: Timeout,
    ) -> Result<Option<Team<'a>>> {
        let resolved = self.resolve(scope.into())?;
        let mut value = [0u8; WIDTH];
        value[4..8].copy_from_slice(&key.to_le_bytes());
        // Colours are u32, so u64::MAX can stand for "no colour".
        let colour = |c: Option<u32>| c.map_or(u64::MAX, u64::from);
        value[8..16].copy_from_slice(&colour(color).to_le_bytes());
        let call = Call::teaming(Kind::Split, value);
        let done = self.rendezvous(&resolved, call, timeout, || Ok(None))?;
        let Some(color) = color else {
            return Ok(None);
        };
        let word = |v: &[u8; WIDTH], at: std::ops::Range<usize>| {
            v[at].iter().rev().fold(0u64, |w, &b| w << 8 | u64::from(b))
        };
        let mut chosen: Vec<(u64, u32)> = (0..resolved.members.len())
            .filter(|&i| word(&done.values[i as usize], 8..16) == u64::from(color))
            .map(|i| (word(&done.values[i as usize], 4..8), i))
            .collect();
        chosen.sort_unstable();
        let ranks = chosen
            .iter()
            .map(|&(_, i)| resolved.members.rank_at(i).unwrap_or(self.ctx.rank()))
            .collect::<Vec<Rank>>();
        let members = Members::in_order(ranks);
        let me = members.index_of(self.ctx.rank()).ok_or_else(|| {
            Error::Protocol("a split team does not hold the member that joined it".into())
        })?;
        Ok(Some(Team {
            ctx: PhantomData,
            members: Arc::new(members),
            key: fnv1a_words([0x5b11, done.key, u64::from(color)]),
            me,
            of_group: false,
        }))
    }

    fn resolve(&self, scope: Scope<'_>) -> Result<Resolved> {
        let ctx = self.ctx;
        match scope {
            Scope::Group(group) => {
                let g = ctx.inner.groups.committed(group)?;
                let me = g
                    .members
                    .index_of(ctx.rank())
                    .ok_or_else(|| Error::NotInGroup {
                        group,
                        rank: ctx.rank(),
                    })?;
                Ok(Resolved {
                    key: fnv1a_words([
                        0x6790,
                        u64::from(group),
                        u64::from(fingerprint(group, &g.members)),
                    ]),
                    members: g.members.clone(),
                    me,
                    team: None,
                })
            }
            Scope::Team(team) => Ok(Resolved {
                key: team.key,
                members: (*team.members).clone(),
                me: team.me,
                team: (!team.of_group).then(|| Arc::downgrade(&team.members)),
            }),
        }
    }

    fn create(
        &self,
        scope: Scope<'_>,
        kind: Kind,
        size: u64,
        notifications: u32,
        agreement: u64,
        timeout: Timeout,
    ) -> Result<Segment<'a>> {
        let ctx = self.ctx;
        let inner = &ctx.inner;
        let refused = |reason: String| Error::LibrarySegment {
            library: self.state.name.clone(),
            size,
            notifications,
            reason,
        };
        let resolved = self.resolve(scope)?;
        // Refusals come inside the rendezvous, which tells every member of them: a member
        // refusing before it would leave its partners waiting, and pair their next creation
        // with its next.
        let make = || -> Result<Option<Arc<LocalSegment>>> {
            if notifications == 0 || notifications > MAX_NOTIFICATIONS {
                let reason = format!("a table holds 1..={MAX_NOTIFICATIONS} notifications");
                return Err(refused(reason));
            }
            let memory = match kind {
                Kind::Segment => {
                    let len = usize::try_from(size)
                        .map_err(|_| refused("more bytes than this platform addresses".into()))?;
                    Some(
                        gaspi_segments::SegmentMemory::allocate(len, &self.state.name)
                            .map_err(|e| refused(e.to_string()))?,
                    )
                }
                Kind::Notifications | Kind::Team | Kind::Split => None,
            };
            let seg = inner.segments.insert_library(|id| {
                inner.new_segment(Table::Library(id), memory, notifications)
            })?;
            inner.publish_segment(DescKey::Library(seg.id()), &seg)?;
            Ok(Some(seg))
        };
        let mut value = [0; WIDTH];
        value[AGREED].copy_from_slice(&agreement.to_le_bytes());
        let call = Call {
            kind,
            value,
            size,
            notifications,
        };
        let done = self.rendezvous(&resolved, call, timeout, make)?;
        let rank_at = |index: usize| resolved.members.rank_at(index as u32).unwrap_or(ctx.rank());
        let disagreeing = done.values.iter().position(|v| v[AGREED] != value[AGREED]);
        let refusing = done.values.iter().position(|v| v[1] & REFUSED != 0);
        // Every member fails alike when one disagreed or refused; a member that refused
        // says why.
        let failed = match (done.refused, disagreeing, refusing) {
            (Some(e), _, _) => Some(e),
            (None, Some(index), _) => Some(Error::LibraryDisagreement {
                library: self.state.name.clone(),
                rank: rank_at(index),
            }),
            (None, None, Some(index)) => Some(Error::LibraryRefused {
                library: self.state.name.clone(),
                rank: rank_at(index),
            }),
            (None, None, None) => None,
        };
        if let Some(e) = failed {
            if let Some((local, _)) = done.created {
                inner.drop_library_segment(local.table);
            }
            return Err(e);
        }
        let (local, ids) = done.created.ok_or_else(|| {
            Error::Protocol("a library segment creation ended without a segment".into())
        })?;
        // A member's local id may be one its segment of an earlier creation had, whose
        // descriptor this rank may still have cached: the news of that deletion travels apart
        // and may not be here yet. Every member has published its new segment by now.
        for (index, &(id, _)) in ids.iter().enumerate() {
            inner
                .descriptors
                .forget(rank_at(index), DescKey::Library(id));
        }
        Ok(Segment {
            ctx,
            shared: Arc::new(Shared {
                local,
                library: Some(Placement {
                    members: resolved.members,
                    ids,
                    inner: Arc::downgrade(&ctx.inner),
                }),
            }),
        })
    }

    /// Runs (or continues) the rendezvous of this library's next creation `call` over
    /// `resolved`, installing what `make` builds first (a member whose `make` fails takes
    /// part all the same, flagged [`REFUSED`], and gets its error back in the result); each
    /// member contributes its call's value (bytes 2.. are the caller's: the first two say
    /// what is created). Returns the rendezvous key, every member's value by member index,
    /// and for segments the segment with every member's local id.
    fn rendezvous(
        &self,
        resolved: &Resolved,
        call: Call,
        timeout: Timeout,
        make: impl FnOnce() -> Result<Option<Arc<LocalSegment>>>,
    ) -> Result<Rendezvous> {
        let kind = call.kind;
        let inner = &self.ctx.inner;
        if inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Finalized);
        }
        let mut pending = lock(&self.state.pending);
        let mut creation = match pending.remove(&resolved.key) {
            Some(c) if c.call == call => c,
            Some(c) => {
                let kind = c.call.kind;
                pending.insert(resolved.key, c);
                return Err(Error::LibraryBusy {
                    library: self.state.name.clone(),
                    pending: match kind {
                        Kind::Segment => "segment creation",
                        Kind::Notifications => "notification table creation",
                        Kind::Team => "team creation",
                        Kind::Split => "team split",
                    },
                });
            }
            None => {
                // Counted whether or not this member makes its part, as on every other member.
                let (segment, refused) = match make() {
                    Ok(segment) => (segment, None),
                    Err(e) => (None, Some(e)),
                };
                let seq = {
                    let mut counts = lock(&self.state.counts);
                    if !counts.contains_key(&resolved.key) {
                        // Forgets the scopes of teams dropped since: as many counts as teams
                        // alive, not as teams ever made.
                        counts.retain(|_, count| count.live());
                    }
                    let count = counts.entry(resolved.key).or_insert_with(|| Count {
                        made: 0,
                        team: resolved.team.clone(),
                    });
                    count.made += 1;
                    count.made
                };
                let key = fnv1a_words([self.state.key, resolved.key, seq]);
                let mut value = call.value;
                value[0] = segment.as_ref().map_or(0, |s| s.id());
                value[1] = kind as u8 | if refused.is_some() { REFUSED } else { 0 };
                if let Some(s) = &segment {
                    value[INCARNATION].copy_from_slice(&s.incarnation.to_le_bytes());
                }
                Creation {
                    call,
                    gather: Allgather::new(key, value),
                    segment,
                    refused,
                }
            }
        };
        drop(pending);
        let key = creation.gather.key();
        let values =
            match creation
                .gather
                .run(inner, &resolved.members, resolved.me, timeout.deadline())
            {
                Ok(values) => values,
                Err(Error::Timeout) => {
                    lock(&self.state.pending).insert(resolved.key, creation);
                    return Err(Error::Timeout);
                }
                Err(e) => {
                    if let Some(seg) = creation.segment {
                        inner.drop_library_segment(seg.table);
                    }
                    return Err(e);
                }
            };
        if let Some(index) = values.iter().position(|v| v[1] & !REFUSED != kind as u8) {
            if let Some(seg) = creation.segment {
                inner.drop_library_segment(seg.table);
            }
            return Err(Error::LibraryMismatch {
                library: self.state.name.clone(),
                rank: resolved.members.rank_at(index as u32).unwrap_or(inner.rank),
            });
        }
        let ids = values
            .iter()
            .map(|v| {
                let mut incarnation = [0; 4];
                incarnation.copy_from_slice(&v[INCARNATION]);
                (v[0], u32::from_le_bytes(incarnation))
            })
            .collect();
        Ok(Rendezvous {
            key,
            created: creation.segment.map(|seg| (seg, ids)),
            values,
            refused: creation.refused,
        })
    }
}

/// What a rendezvous ended with.
struct Rendezvous {
    key: u64,
    /// The segment installed, with every member's local id and incarnation of it.
    created: Option<(Arc<LocalSegment>, Vec<Part>)>,
    /// Every member's value, by member index.
    values: Vec<[u8; WIDTH]>,
    /// Why this member could not make its part.
    refused: Option<Error>,
}

/// A library's group of ranks, from [`Library::team`] or [`Library::split`]: a [`Scope`] for the library's
/// segments, with O(1) rank ↔ member-index maps.
#[derive(Clone)]
pub struct Team<'a> {
    /// A team is a scope of one context.
    ctx: PhantomData<&'a Context>,
    members: Arc<Members>,
    key: u64,
    me: u32,
    /// A snapshot of a group ([`Library::team_of_group`]): its scope is the group's.
    of_group: bool,
}

impl std::fmt::Debug for Team<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("size", &self.members.len())
            .field("me", &self.me)
            .finish()
    }
}

impl Team<'_> {
    /// Number of members.
    pub fn size(&self) -> u32 {
        self.members.len()
    }

    /// This rank's member index.
    pub fn index(&self) -> u32 {
        self.me
    }

    /// The member index of `rank`, if it is a member.
    pub fn index_of(&self, rank: Rank) -> Option<u32> {
        self.members.index_of(rank)
    }

    /// The rank of member `index`, if there is one.
    pub fn rank_of(&self, index: u32) -> Option<Rank> {
        self.members.rank_at(index)
    }

    /// The members' ranks, by member index: ascending for a team from [`Library::team`], in
    /// key order for one from [`Library::split`].
    pub fn ranks(&self) -> Vec<Rank> {
        self.members.ranks()
    }
}

/// Where a library segment is on each member.
pub(crate) struct Placement {
    members: Members,
    /// Each member's local id of the segment, by member index, with the incarnation of the
    /// segment the member made (see `Descriptor::incarnation`): a creation that met a message
    /// left over from one a member abandoned (it timed out and dropped its library) names a
    /// segment of that member which is gone, and whose id another library's segment may
    /// have taken since; a target of that member must not reach the other one.
    ids: Vec<Part>,
    inner: Weak<Inner>,
}

/// What a [`Segment`] handle shares: the segment, and for a library segment its placement
/// (dropping the last handle deletes it).
pub(crate) struct Shared {
    pub(crate) local: Arc<LocalSegment>,
    library: Option<Placement>,
}

impl Shared {
    /// A user segment's.
    pub(crate) fn user(local: Arc<LocalSegment>) -> Shared {
        Shared {
            local,
            library: None,
        }
    }

    /// The table of the same segment on `rank`, and for a library segment the incarnation
    /// the segment there must have (see [`Placement`]).
    pub(crate) fn table_on(&self, rank: Rank) -> Result<(Table, Option<u32>)> {
        match &self.library {
            None => Ok((self.local.table, None)),
            Some(p) => {
                let index = p.members.index_of(rank).ok_or(Error::NotInScope { rank })?;
                p.ids
                    .get(index as usize)
                    .map(|&(id, incarnation)| (Table::Library(id), Some(incarnation)))
                    .ok_or_else(|| Error::Protocol("library segment ids are incomplete".into()))
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(inner) = self.library.as_ref().and_then(|p| p.inner.upgrade()) {
            inner.drop_library_segment(self.local.table);
        }
    }
}

impl Inner {
    /// Deletes library segment `table` whether or not operations on it are in flight (they
    /// keep its memory until they complete).
    pub(crate) fn drop_library_segment(&self, table: Table) {
        let Some(key) = table.descriptor() else {
            return;
        };
        // Dropping a handle cannot report an error; the system region is ours and always
        // writable, so there is none to report.
        let withdraw = || _ = self.withdraw(key);
        if let Some(seg) = self.segments.remove_even_busy(table, withdraw) {
            seg.notifications.close();
            self.announce_gone(table);
        }
    }

    /// Routes a runtime-internal message from `from`.
    pub(crate) fn route_internal(&self, from: Rank, payload: &[u8]) {
        match payload.first() {
            Some(&crate::atomic::MESSAGE) => self.atomics.serve(self, from, payload),
            Some(&MESSAGE) => self.mailbox.deliver(self, from, payload),
            // Unknown kinds can only come from a peer of another version.
            _ => {}
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::GROUP_ALL;

    const TIMEOUT: Timeout = Timeout::Millis(10_000);

    /// A solver that splits teams for hours: each team dropped takes its scope's count with
    /// it, while a group's count lasts across the snapshots taken of it.
    #[test]
    fn counts_of_dropped_teams_are_forgotten() {
        let ctx = Context::init().expect("a job of one starts without a launcher");
        let lib = ctx.library("counts").expect("registers");
        let group = lib
            .team_of_group(GROUP_ALL)
            .expect("a snapshot of the world");
        drop(
            lib.segment_create(&group, 64, 1, TIMEOUT)
                .expect("over the group"),
        );
        drop(group);
        for _ in 0..100 {
            let team = lib.team(&[0], TIMEOUT).expect("a team of one");
            let split = lib
                .split(&team, Some(0), 0, TIMEOUT)
                .expect("split")
                .expect("joined");
            drop(
                lib.segment_create(&split, 64, 1, TIMEOUT)
                    .expect("over the split"),
            );
            drop(split);
            drop(
                lib.segment_create(&team, 64, 1, TIMEOUT)
                    .expect("over the team"),
            );
        }
        drop(
            lib.segment_create(GROUP_ALL, 64, 1, TIMEOUT)
                .expect("over the group"),
        );
        let counts = lock(&lib.state.counts);
        // The group's, the member set's (teams of rank 0), and the last team's and split's
        // (forgotten at the next new scope), whatever the number of teams made.
        assert!(counts.len() <= 4, "{} counts kept", counts.len());
        let group_key = lib
            .resolve(Scope::Group(GROUP_ALL))
            .expect("the world resolves")
            .key;
        assert_eq!(counts.get(&group_key).map(|c| c.made), Some(2));
    }
}
