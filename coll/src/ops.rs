//! The data-movement collectives of a [`Team`] (GASNet's set, with the variable-size forms
//! MPI users expect): argument checks, the choice of algorithm, and the schedule each
//! member runs.
//!
//! # Algorithms
//! Chosen per call from the size and the team size by this table, the same on every member;
//! the environment variable `GASPI_COLL_<OP>` (e.g. `GASPI_COLL_BROADCAST=pipelined`, read
//! when the team is built; unset or empty, the table decides) overrides it and must then be
//! the same on every member — a difference is reported as [`Error::Mismatch`], since the
//! algorithm is part of what the members check they agree on.
//!
//! | operation | rule | names |
//! |---|---|---|
//! | `broadcast` | `n <= 3`: flat; below 256 KiB: binomial; else pipelined (64 KiB segments) | `flat`, `binomial`, `knomialK`, `pipelined` |
//! | `scatter(v)` | `n <= 3` or a block of 64 KiB or more: flat; else binomial | `flat`, `binomial`, `knomialK` |
//! | `gather(v)` | `n <= 4` or a block of 64 KiB or more: flat; else binomial | `flat`, `binomial`, `knomialK` |
//! | `gather_all(v)` | up to 64 KiB in all: dissemination (Bruck); else ring | `dissemination`, `ring` |
//! | `exchange` | blocks up to 256 B whose Bruck staging fits a lane: Bruck; else pairwise | `bruck`, `pairwise` |
//! | `exchangev` | pairwise (Bruck would need every member's counts) | `pairwise` |
//!
//! `knomialK` is the k-nomial tree of `K >= 2` children per level (`knomial2` is `binomial`,
//! and so named); [`Handle::algorithm`] names it `knomialK` up to `K = 16`, `knomial` beyond.
//! The choice is made for the whole operation, also when it runs as pieces (see
//! [`Team`]'s staging and capacity).

use gaspi::{Rank, Timeout};

use crate::buffer::{Input, Output};
use crate::engine::{Blocks, Cut, Key, Launch, Prepared, Views};
use crate::error::{Error, Result};
use crate::schedule::all::{self, ExchangeAlgo, GatherAllAlgo};
use crate::schedule::tree::Tree;
use crate::schedule::{broadcast, gather, scatter, stage_bound, Reducer, Schedule};
use crate::team::{Flags, Handle, Lend, Team};

/// Teams up to this size scatter small blocks flat. At 4 members a binomial scatter of 8 B
/// blocks took 10.6 µs against the flat one's 23.3 over tcp through the fabric, and 0.43
/// against 0.48 µs on the direct path: the root's three puts cost more than a forwarding
/// member's one.
const SCATTER_FLAT: u32 = 3;

/// Teams up to this size gather small blocks flat: at 4 members a binomial gather of 8 B
/// blocks was no faster over tcp, and slower over shm through the fabric.
const GATHER_FLAT: u32 = 4;

/// The two families of rooted operations, which choose their trees alike but for the team
/// size up to which they stay flat.
#[derive(Debug, Clone, Copy)]
enum Rooted {
    /// `scatter`, `scatterv`.
    Scatter,
    /// `gather`, `gatherv`.
    Gather,
}

/// The algorithms forced by the environment, read when a team is built.
#[derive(Debug, Clone, Default)]
pub(crate) struct Choices {
    broadcast: Option<String>,
    scatter: Option<String>,
    gather: Option<String>,
    gather_all: Option<String>,
    exchange: Option<String>,
}

impl Choices {
    pub(crate) fn from_env() -> Choices {
        // Empty is unset, as for the runtime's variables.
        let var = |op: &str| {
            let name = format!("GASPI_COLL_{}", op.to_uppercase());
            std::env::var(name).ok().filter(|v| !v.is_empty())
        };
        Choices {
            broadcast: var("broadcast"),
            scatter: var("scatter"),
            gather: var("gather"),
            gather_all: var("gather_all"),
            exchange: var("exchange"),
        }
    }
}

/// The blocks an operation moves, for cutting it into pieces: the block sizes of the
/// caller's source and destination (packed in order), the largest block of any member (the
/// same on every member, so that members cut alike), a bound on any member's staging of the
/// whole operation (its algorithm's, the same on every member), whether that bound is at most
/// [`SMALL_STAGING`], and the alignment of cuts.
pub(crate) struct Shape<'s> {
    src: Sizes<'s>,
    dst: Sizes<'s>,
    largest: u64,
    bound: u64,
    small: bool,
    align: u64,
}

/// A data operation whose staging is bounded by this many bytes on every member stages in half
/// lanes (where half a lane holds it), so that eager runs of it go `2 · lanes` deep instead of
/// `lanes`: a root runs twice as far ahead of its slowest receiver before it waits for that
/// receiver's count. Larger ones stay in whole lanes, where the deeper staging cost more in
/// cache than it saved in waiting (a 1 MiB broadcast at 2 ranks: 105 µs in whole lanes,
/// 130–160 µs in halves).
const SMALL_STAGING: u64 = 4 << 10;

/// The sizes of a buffer's blocks, packed in order: described rather than listed, so that
/// an operation that is not cut allocates nothing for them.
#[derive(Clone, Copy)]
pub(crate) enum Sizes<'s> {
    /// `.0` blocks of `.1` bytes.
    Same(u32, u64),
    Each(&'s [u64]),
}

impl Sizes<'_> {
    fn largest(self) -> u64 {
        match self {
            Sizes::Same(count, bytes) => bytes * u64::from(count.min(1)),
            Sizes::Each(sizes) => sizes.iter().copied().max().unwrap_or(0),
        }
    }

    fn to_vec(self) -> Vec<u64> {
        match self {
            Sizes::Same(count, bytes) => vec![bytes; count as usize],
            Sizes::Each(sizes) => sizes.to_vec(),
        }
    }
}

impl<'s> Shape<'s> {
    /// An operation that moves the blocks `src` and `dst`, staging at most `bound` bytes on
    /// any member.
    fn new(src: Sizes<'s>, dst: Sizes<'s>, bound: u64) -> Shape<'s> {
        let largest = src.largest().max(dst.largest());
        Shape {
            src,
            dst,
            largest,
            bound,
            small: bound <= SMALL_STAGING,
            align: 1,
        }
    }

    /// An operation that is never cut: one piece whatever its size (its staging unbounded
    /// here, and so never small).
    fn whole() -> Shape<'s> {
        Shape {
            src: Sizes::Each(&[]),
            dst: Sizes::Each(&[]),
            largest: 0,
            bound: 0,
            small: false,
            align: 1,
        }
    }

    /// A reduction of `len` bytes in place of each member's: its staging under `bound`,
    /// cut at whole blocks of `align` bytes.
    pub(crate) fn reduction(len: u64, bound: u64, align: u64) -> Shape<'s> {
        Shape {
            src: Sizes::Same(1, len),
            dst: Sizes::Same(1, len),
            largest: len,
            bound,
            small: bound <= SMALL_STAGING,
            align: align.max(1),
        }
    }
}

/// `counts` cut by `cut`.
fn cut_all(counts: &[u64], cut: Cut) -> Vec<u64> {
    counts.iter().map(|&c| cut.of(c)).collect()
}

/// The names of the k-nomial trees of `k = 3..=16` (wider ones are all `knomial`).
const KNOMIAL: [&str; 14] = [
    "knomial3",
    "knomial4",
    "knomial5",
    "knomial6",
    "knomial7",
    "knomial8",
    "knomial9",
    "knomial10",
    "knomial11",
    "knomial12",
    "knomial13",
    "knomial14",
    "knomial15",
    "knomial16",
];

/// A rooted operation's tree: `forced` if given, else `default`.
fn tree(op: &'static str, forced: Option<&str>, default: Tree) -> Result<(Tree, &'static str)> {
    let tree = match forced {
        None => default,
        Some("flat") => Tree::Flat,
        Some("binomial") => Tree::Binomial,
        Some("pipelined") if op == "broadcast" => Tree::Pipelined { segment: 64 << 10 },
        Some(name) => match name.strip_prefix("knomial").map(str::parse::<u32>) {
            Some(Ok(k)) if k >= 2 => Tree::Knomial(k),
            _ => {
                return Err(Error::UnknownAlgorithm {
                    op,
                    name: name.to_string(),
                })
            }
        },
    };
    let name = match tree {
        Tree::Flat => "flat",
        Tree::Binomial | Tree::Knomial(2) => "binomial",
        Tree::Knomial(k) => (k as usize)
            .checked_sub(3)
            .and_then(|i| KNOMIAL.get(i))
            .copied()
            .unwrap_or("knomial"),
        Tree::Pipelined { .. } => "pipelined",
    };
    Ok((tree, name))
}

/// The word of `tree` among those members must agree on, beside its name: every k-nomial tree
/// wider than 16 is named `knomial`, so without its `k` members forcing `knomial17` and
/// `knomial18` were not told they differ (at 19 members, one waited for a parent that never
/// sent, every round). `Knomial(2)` is [`Tree::Binomial`], and its word too.
fn tree_word(tree: Tree) -> u64 {
    match tree {
        Tree::Flat => 0,
        Tree::Binomial => 2,
        Tree::Knomial(k) => u64::from(k),
        Tree::Pipelined { segment } => segment,
    }
}

/// Mixes the words that members must agree on into a signature.
pub(crate) fn signature(words: &[u64]) -> u64 {
    words.iter().fold(0xcbf2_9ce4_8422_2325, |h, &w| {
        (h ^ w).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The most bytes the counts of a variable-size collective may add up to (16 TiB): beyond
/// any buffer, and low enough that no staging computation over a team can overflow.
const MAX_COUNTS_TOTAL: u64 = 1 << 44;

/// The sum of `counts` on `rank`, refused ([`Error::TooLarge`]) above [`MAX_COUNTS_TOTAL`].
fn total(rank: Rank, counts: &[u64]) -> Result<u64> {
    let sum = counts.iter().fold(0u64, |sum, &c| sum.saturating_add(c));
    if sum > MAX_COUNTS_TOTAL {
        return Err(Error::TooLarge {
            rank,
            len: sum,
            max: MAX_COUNTS_TOTAL,
        });
    }
    Ok(sum)
}

fn check_len(len: usize, need: u64) -> Result<()> {
    if len as u64 == need {
        Ok(())
    } else {
        Err(Error::BufferTooShort {
            len: len as u64,
            need,
        })
    }
}

impl<'c> Team<'c> {
    /// The member index of `root`.
    fn root_index(&self, root: Rank) -> Result<u32> {
        self.index_of(root).ok_or(Error::NotInTeam { rank: root })
    }

    /// Initiates an operation described by `shape`: `build(m, cut)` is member `m`'s
    /// schedule for the bytes `cut` of every block, and `words` are the arguments members
    /// must agree on. When some member's staging of the whole operation exceeds a lane, it
    /// runs as pieces of equal cuts on every member (see the engine's `piece` module), each
    /// synchronised as `flags` ask, each piece with its own copy of `reducer` (the operator
    /// of the schedule's folds). `exact` is what, beside `words`, `flags` and `algorithm`,
    /// the schedule of an operation of one piece depends on (the counts of a v form, which
    /// `words` carry only as a digest): the engine keeps its plan, keyed by all of them, for
    /// the next call with the same ones, so that a v form repeated with the same counts, as
    /// MPI codes mostly call them, is not built and planned again on every call. `lend`
    /// says when the runs get what they still need of the source (see [`Lend`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start<'t, 'b>(
        &'t self,
        words: &[u64],
        exact: &[&[u64]],
        flags: Flags,
        algorithm: &'static str,
        lend: Lend,
        shape: Shape<'_>,
        build: impl Fn(u32, Cut) -> Schedule,
        reducer: Option<Box<dyn Reducer>>,
        src: Input<'b>,
        dst: Output<'b>,
    ) -> Result<Handle<'t, 'b>> {
        // Before any size is worked out from them: a range beyond its segment is refused
        // here, not cut into pieces.
        flags.check_buffers(self.context(), &src, &dst)?;
        let (n, me) = (self.size(), self.index());
        // The key of the plan: the call's words, flags (which GASNet asks to be the same on
        // every member, `SINGLE` and `LOCAL` too) and algorithm, and `exact`.
        let key = Key {
            words,
            flags: flags.bits(),
            algorithm,
            exact,
        };
        let lane = self.lane_bytes();
        let whole = Cut::whole(shape.largest);
        // Whether to cut must not depend on the member: decided on the heaviest staging of
        // any member, which the bound spares computing in the common case.
        let heaviest = |cut: Cut| (0..n).map(|m| build(m, cut).stage).max().unwrap_or(0);
        if shape.bound <= lane || heaviest(whole) <= lane {
            // Built (and the half lane decided) only when the engine has no plan for the key.
            // Folding operations and small data operations use half lanes (see
            // `SMALL_STAGING`).
            let deep = reducer.is_some() || shape.small;
            let schedule = || {
                let half = deep && (shape.bound <= lane / 2 || heaviest(whole) <= lane / 2);
                Ok((self.synchronised(build(me, whole), flags)?, half))
            };
            let prepared = Prepared::Keyed {
                key,
                build: &schedule,
            };
            let mut launch = Launch::new(prepared, reducer, None);
            return self.launch(
                std::slice::from_mut(&mut launch),
                flags,
                algorithm,
                lend,
                src,
                dst,
            );
        }
        let c = self.cut_size(&heaviest, shape.largest, shape.align)?;
        // The first cut is the largest, so its staging bounds every piece's.
        let half = reducer.is_some() && heaviest(Cut::whole(c)) <= lane / 2;
        let (src_sizes, dst_sizes) = (shape.src.to_vec(), shape.dst.to_vec());
        let mut agreed = Vec::new();
        key.agreed(&mut agreed);
        let mut launches = Vec::new();
        for cut in Cut::all(shape.largest, c) {
            let mut words = agreed.clone();
            words.extend([cut.at, cut.len]);
            launches.push(Launch::new(
                Prepared::Built {
                    schedule: self.synchronised(build(me, cut), flags)?,
                    half,
                    signature: signature(&words),
                },
                reducer.as_ref().map(|r| r.boxed()),
                Some(Views {
                    src: Blocks::new(&src_sizes, cut),
                    dst: Blocks::new(&dst_sizes, cut),
                }),
            ));
        }
        self.launch(&mut launches, flags, algorithm, lend, src, dst)
    }

    /// [`start`](Self::start) for an operation that only moves data (no folds).
    #[allow(clippy::too_many_arguments)]
    fn move_data<'t, 'b>(
        &'t self,
        words: &[u64],
        exact: &[&[u64]],
        flags: Flags,
        algorithm: &'static str,
        shape: Shape<'_>,
        build: impl Fn(u32, Cut) -> Schedule,
        lend: Lend,
        src: Input<'b>,
        dst: Output<'b>,
    ) -> Result<Handle<'t, 'b>> {
        self.start(
            words, exact, flags, algorithm, lend, shape, build, None, src, dst,
        )
    }

    /// The bytes per block of the pieces of an operation whose largest block is `largest`:
    /// the largest cut (a multiple of `align`), down from the share of one lane, whose
    /// `heaviest` staging on any member fits a lane.
    fn cut_size(&self, heaviest: &impl Fn(Cut) -> u64, largest: u64, align: u64) -> Result<u64> {
        let lane = self.lane_bytes().max(1);
        let mut pieces = heaviest(Cut::whole(largest)).div_ceil(lane);
        loop {
            let c = (largest.div_ceil(pieces) / align).max(1) * align;
            let need = heaviest(Cut::whole(c));
            if need <= lane {
                return Ok(c);
            }
            if c == align {
                return Err(Error::TooLarge {
                    rank: self.context().rank(),
                    len: need,
                    max: lane,
                });
            }
            pieces *= 2;
        }
    }

    /// Non-blocking broadcast: `root`'s `src` into every member's `dst` (the root's too);
    /// `src` is read on the root only, `dst.len()` bytes of it.
    ///
    /// # Errors
    /// [`Error::NotInTeam`] for a root outside the team; [`Error::BufferTooShort`] for a
    /// root's `src` of another length than `dst`; [`Error::Flags`]; [`Error::TooLarge`] when
    /// the staging exceeds the team's [`Capacity`](crate::Capacity);
    /// [`Error::UnknownAlgorithm`] for a bad `GASPI_COLL_BROADCAST`.
    pub fn broadcast_nb<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.broadcast_lent(dst, root, src, flags, Lend::Now)
    }

    /// Blocking [`broadcast_nb`](Self::broadcast_nb), synced within `timeout`. A timeout
    /// leaves this member's part to finish without its output, as a dropped [`Handle`]
    /// does: the rest of that part is taken by this member's later calls on the team, so
    /// make one before waiting elsewhere, or the members that need it wait until their
    /// timeout. Use the non-blocking form to continue after a timeout.
    ///
    /// # Errors
    /// As for [`broadcast_nb`](Self::broadcast_nb) and [`Handle::wait_sync`].
    pub fn broadcast<'b>(
        &self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.broadcast_lent(dst, root, src, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`broadcast_nb`](Self::broadcast_nb), its runs lent the source as `lend` says.
    fn broadcast_lent<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let (n, me, r) = (self.size(), self.index(), self.root_index(root)?);
        let bytes = dst.len() as u64;
        if me == r {
            check_len(src.len(), bytes)?;
        }
        let default = if n <= 3 {
            Tree::Flat
        } else if bytes < 256 << 10 {
            Tree::Binomial
        } else {
            Tree::Pipelined { segment: 64 << 10 }
        };
        let (algo, name) = tree("broadcast", self.choices().broadcast.as_deref(), default)?;
        let shape = Shape::new(
            Sizes::Same(1, bytes),
            Sizes::Same(1, bytes),
            stage_bound(bytes),
        );
        let build = |m: u32, cut: Cut| broadcast::broadcast(n, m, r, cut.of(bytes), algo);
        let words = [1, u64::from(r), bytes, tree_word(algo)];
        self.move_data(&words, &[], flags, name, shape, build, lend, src, dst)
    }

    /// The tree of a scatter or gather (`op`, the operation's name) of blocks up to `block`
    /// bytes, as the table says or `GASPI_COLL_SCATTER` / `_GATHER` force.
    fn rooted_tree(
        &self,
        rooted: Rooted,
        op: &'static str,
        block: u64,
    ) -> Result<(Tree, &'static str)> {
        let (forced, flat_up_to) = match rooted {
            Rooted::Scatter => (&self.choices().scatter, SCATTER_FLAT),
            Rooted::Gather => (&self.choices().gather, GATHER_FLAT),
        };
        let default = if self.size() <= flat_up_to || block >= 64 << 10 {
            Tree::Flat
        } else {
            Tree::Binomial
        };
        tree(op, forced.as_deref(), default)
    }

    /// Non-blocking scatter: block `i` of `root`'s `src` (`size()` blocks of `dst.len()`
    /// bytes, read on the root only) into member `i`'s `dst`.
    ///
    /// # Errors
    /// As for [`broadcast_nb`](Self::broadcast_nb).
    pub fn scatter_nb<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.scatter_lent(dst, root, src, flags, Lend::Now)
    }

    /// Blocking [`scatter_nb`](Self::scatter_nb) (see [`broadcast`](Self::broadcast) on
    /// timeouts).
    ///
    /// # Errors
    /// As for [`scatter_nb`](Self::scatter_nb) and [`Handle::wait_sync`].
    pub fn scatter<'b>(
        &self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.scatter_lent(dst, root, src, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`scatter_nb`](Self::scatter_nb), its runs lent the source as `lend` says.
    fn scatter_lent<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let (n, me, r) = (self.size(), self.index(), self.root_index(root)?);
        let bytes = dst.len() as u64;
        if me == r {
            check_len(src.len(), bytes.saturating_mul(u64::from(n)))?;
        }
        let (algo, name) = self.rooted_tree(Rooted::Scatter, "scatter", bytes)?;
        let every = stage_bound(bytes.saturating_mul(u64::from(n)));
        let shape = Shape::new(Sizes::Same(n, bytes), Sizes::Same(1, bytes), every);
        let build = |m: u32, cut: Cut| scatter::scatter(n, m, r, cut.of(bytes), algo);
        let words = [2, u64::from(r), bytes, tree_word(algo)];
        self.move_data(&words, &[], flags, name, shape, build, lend, src, dst)
    }

    /// Non-blocking scatterv: block `i` of `counts[i]` bytes of `root`'s `src` (packed in
    /// member order, read on the root only) into member `i`'s `dst` (`counts[i]` bytes).
    /// Every member passes all `counts`, which must agree (checked).
    ///
    /// # Errors
    /// As for [`scatter_nb`](Self::scatter_nb); [`Error::BufferTooShort`] for `counts` of
    /// another length than the team; [`Error::TooLarge`] for `counts` adding up to more than
    /// 2^44 bytes (16 TiB), on every member.
    pub fn scatterv_nb<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.scatterv_lent(dst, root, src, counts, flags, Lend::Now)
    }

    /// Blocking [`scatterv_nb`](Self::scatterv_nb) (see [`broadcast`](Self::broadcast) on
    /// timeouts).
    ///
    /// # Errors
    /// As for [`scatterv_nb`](Self::scatterv_nb) and [`Handle::wait_sync`].
    pub fn scatterv<'b>(
        &self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.scatterv_lent(dst, root, src, counts, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`scatterv_nb`](Self::scatterv_nb), its runs lent the source as `lend` says.
    fn scatterv_lent<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        root: Rank,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let (n, me, r) = (self.size(), self.index(), self.root_index(root)?);
        check_len(counts.len(), u64::from(n))?;
        // The sum first: counts too large to add up are `TooLarge` on every member, also
        // where one of them is this member's and its buffer is too short for it.
        let total = total(self.context().rank(), counts)?;
        check_len(dst.len(), counts[me as usize])?;
        if me == r {
            check_len(src.len(), total)?;
        }
        let largest = counts.iter().copied().max().unwrap_or(0);
        let (algo, name) = self.rooted_tree(Rooted::Scatter, "scatterv", largest)?;
        let shape = Shape::new(
            Sizes::Each(counts),
            Sizes::Same(1, counts[me as usize]),
            stage_bound(total),
        );
        let build = |m: u32, cut: Cut| scatter::scatterv(n, m, r, &cut_all(counts, cut), algo);
        let words = [3, u64::from(r), signature(counts), tree_word(algo)];
        self.move_data(&words, &[counts], flags, name, shape, build, lend, src, dst)
    }

    /// Non-blocking gather: every member's `src` into block `i` (member `i`'s) of `root`'s
    /// `dst` (`size()` blocks of `src.len()` bytes, written on the root only).
    ///
    /// # Errors
    /// As for [`broadcast_nb`](Self::broadcast_nb).
    pub fn gather_nb<'t, 'b>(
        &'t self,
        root: Rank,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.gather_lent(root, dst, src, flags, Lend::Now)
    }

    /// Blocking [`gather_nb`](Self::gather_nb) (see [`broadcast`](Self::broadcast) on
    /// timeouts).
    ///
    /// # Errors
    /// As for [`gather_nb`](Self::gather_nb) and [`Handle::wait_sync`].
    pub fn gather<'b>(
        &self,
        root: Rank,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.gather_lent(root, dst, src, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`gather_nb`](Self::gather_nb), its runs lent the source as `lend` says.
    fn gather_lent<'t, 'b>(
        &'t self,
        root: Rank,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let (n, me, r) = (self.size(), self.index(), self.root_index(root)?);
        let bytes = src.len() as u64;
        if me == r {
            check_len(dst.len(), bytes.saturating_mul(u64::from(n)))?;
        }
        let (algo, name) = self.rooted_tree(Rooted::Gather, "gather", bytes)?;
        let every = stage_bound(bytes.saturating_mul(u64::from(n)));
        let shape = Shape::new(Sizes::Same(1, bytes), Sizes::Same(n, bytes), every);
        let build = |m: u32, cut: Cut| gather::gather(n, m, r, cut.of(bytes), algo);
        let words = [4, u64::from(r), bytes, tree_word(algo)];
        self.move_data(&words, &[], flags, name, shape, build, lend, src, dst)
    }

    /// Non-blocking gatherv: member `i`'s `src` (`counts[i]` bytes) into `root`'s `dst`,
    /// packed in member order. Every member passes all `counts`, which must agree.
    ///
    /// # Errors
    /// As for [`scatterv_nb`](Self::scatterv_nb).
    pub fn gatherv_nb<'t, 'b>(
        &'t self,
        root: Rank,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.gatherv_lent(root, dst, src, counts, flags, Lend::Now)
    }

    /// Blocking [`gatherv_nb`](Self::gatherv_nb) (see [`broadcast`](Self::broadcast) on
    /// timeouts).
    ///
    /// # Errors
    /// As for [`gatherv_nb`](Self::gatherv_nb) and [`Handle::wait_sync`].
    pub fn gatherv<'b>(
        &self,
        root: Rank,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.gatherv_lent(root, dst, src, counts, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`gatherv_nb`](Self::gatherv_nb), its runs lent the source as `lend` says.
    fn gatherv_lent<'t, 'b>(
        &'t self,
        root: Rank,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let (n, me, r) = (self.size(), self.index(), self.root_index(root)?);
        check_len(counts.len(), u64::from(n))?;
        // The sum first: counts too large to add up are `TooLarge` on every member, also
        // where one of them is this member's and its buffer is too short for it.
        let total = total(self.context().rank(), counts)?;
        check_len(src.len(), counts[me as usize])?;
        if me == r {
            check_len(dst.len(), total)?;
        }
        let largest = counts.iter().copied().max().unwrap_or(0);
        let (algo, name) = self.rooted_tree(Rooted::Gather, "gatherv", largest)?;
        let shape = Shape::new(
            Sizes::Same(1, counts[me as usize]),
            Sizes::Each(counts),
            stage_bound(total),
        );
        let build = |m: u32, cut: Cut| gather::gatherv(n, m, r, &cut_all(counts, cut), algo);
        let words = [5, u64::from(r), signature(counts), tree_word(algo)];
        self.move_data(&words, &[counts], flags, name, shape, build, lend, src, dst)
    }

    fn all_algo(&self, total: u64) -> Result<(GatherAllAlgo, &'static str)> {
        match self.choices().gather_all.as_deref() {
            Some("ring") => Ok((GatherAllAlgo::Ring, "ring")),
            Some("dissemination") => Ok((GatherAllAlgo::Dissemination, "dissemination")),
            Some(name) => Err(Error::UnknownAlgorithm {
                op: "gather_all",
                name: name.to_string(),
            }),
            None if total <= 64 << 10 => Ok((GatherAllAlgo::Dissemination, "dissemination")),
            None => Ok((GatherAllAlgo::Ring, "ring")),
        }
    }

    /// Non-blocking gather_all: every member's `src` into block `i` (member `i`'s) of every
    /// member's `dst` (`size()` blocks of `src.len()` bytes).
    ///
    /// # Errors
    /// [`Error::BufferTooShort`]; [`Error::Flags`]; [`Error::TooLarge`];
    /// [`Error::UnknownAlgorithm`].
    pub fn gather_all_nb<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.gather_all_lent(dst, src, flags, Lend::Now)
    }

    /// Blocking [`gather_all_nb`](Self::gather_all_nb) (see [`broadcast`](Self::broadcast)
    /// on timeouts).
    ///
    /// # Errors
    /// As for [`gather_all_nb`](Self::gather_all_nb) and [`Handle::wait_sync`].
    pub fn gather_all<'b>(
        &self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.gather_all_lent(dst, src, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`gather_all_nb`](Self::gather_all_nb), its runs lent the source as `lend` says.
    fn gather_all_lent<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let n = self.size();
        let bytes = src.len() as u64;
        let total = bytes.saturating_mul(u64::from(n));
        check_len(dst.len(), total)?;
        let (algo, name) = self.all_algo(total)?;
        let shape = Shape::new(
            Sizes::Same(1, bytes),
            Sizes::Same(n, bytes),
            stage_bound(total),
        );
        let build = |m: u32, cut: Cut| all::gather_all(n, m, cut.of(bytes), algo);
        self.move_data(&[6, bytes], &[], flags, name, shape, build, lend, src, dst)
    }

    /// Non-blocking gather_allv: member `i`'s `src` (`counts[i]` bytes) into every member's
    /// `dst`, packed in member order. Every member passes all `counts`, which must agree.
    ///
    /// # Errors
    /// As for [`gather_all_nb`](Self::gather_all_nb); [`Error::TooLarge`] for `counts`
    /// adding up to more than 2^44 bytes (16 TiB).
    pub fn gather_allv_nb<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.gather_allv_lent(dst, src, counts, flags, Lend::Now)
    }

    /// Blocking [`gather_allv_nb`](Self::gather_allv_nb) (see [`broadcast`](Self::broadcast)
    /// on timeouts).
    ///
    /// # Errors
    /// As for [`gather_allv_nb`](Self::gather_allv_nb) and [`Handle::wait_sync`].
    pub fn gather_allv<'b>(
        &self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.gather_allv_lent(dst, src, counts, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`gather_allv_nb`](Self::gather_allv_nb), its runs lent the source as `lend` says.
    fn gather_allv_lent<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        counts: &[u64],
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let (n, me) = (self.size(), self.index());
        check_len(counts.len(), u64::from(n))?;
        // The sum first: counts too large to add up are `TooLarge` on every member, also
        // where one of them is this member's and its buffer is too short for it.
        let total = total(self.context().rank(), counts)?;
        check_len(src.len(), counts[me as usize])?;
        check_len(dst.len(), total)?;
        let (algo, name) = self.all_algo(total)?;
        let shape = Shape::new(
            Sizes::Same(1, counts[me as usize]),
            Sizes::Each(counts),
            stage_bound(total),
        );
        let build = |m: u32, cut: Cut| all::gather_allv(n, m, &cut_all(counts, cut), algo);
        self.move_data(
            &[7, signature(counts)],
            &[counts],
            flags,
            name,
            shape,
            build,
            lend,
            src,
            dst,
        )
    }

    /// Non-blocking exchange (all-to-all): block `j` of member `i`'s `src` into block `i`
    /// of member `j`'s `dst`, blocks of `src.len() / size()` bytes.
    ///
    /// # Errors
    /// As for [`gather_all_nb`](Self::gather_all_nb); [`Error::BufferTooShort`] for a
    /// `src` that is not `size()` blocks or a `dst` of another length.
    pub fn exchange_nb<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.exchange_lent(dst, src, flags, Lend::Now)
    }

    /// Blocking [`exchange_nb`](Self::exchange_nb) (see [`broadcast`](Self::broadcast) on
    /// timeouts).
    ///
    /// # Errors
    /// As for [`exchange_nb`](Self::exchange_nb) and [`Handle::wait_sync`].
    pub fn exchange<'b>(
        &self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.exchange_lent(dst, src, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`exchange_nb`](Self::exchange_nb), its runs lent the source as `lend` says.
    fn exchange_lent<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        src: impl Into<Input<'b>>,
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let n = self.size();
        let bytes = src.len() as u64 / u64::from(n);
        check_len(src.len(), bytes * u64::from(n))?;
        check_len(dst.len(), bytes * u64::from(n))?;
        let (algo, name) = match self.choices().exchange.as_deref() {
            Some("bruck") => (ExchangeAlgo::Bruck, "bruck"),
            Some("pairwise") => (ExchangeAlgo::Pairwise, "pairwise"),
            Some(name) => {
                return Err(Error::UnknownAlgorithm {
                    op: "exchange",
                    name: name.to_string(),
                })
            }
            // Bruck stages every block it forwards twice (packed, received): with lanes too
            // small for that even at a byte per block, pairwise, which fits any lane a team
            // accepts.
            None if bytes <= 256 && all::bruck_stage(n, bytes) <= self.lane_bytes() => {
                (ExchangeAlgo::Bruck, "bruck")
            }
            None => (ExchangeAlgo::Pairwise, "pairwise"),
        };
        let bound = all::exchange_stage_bound(n, bytes, algo);
        let shape = Shape::new(Sizes::Same(n, bytes), Sizes::Same(n, bytes), bound);
        let build = |m: u32, cut: Cut| all::exchange(n, m, cut.of(bytes), algo);
        self.move_data(&[8, bytes], &[], flags, name, shape, build, lend, src, dst)
    }

    /// Non-blocking exchangev: `send_counts[j]` bytes of `src` (packed in member order) to
    /// member `j`, `recv_counts[i]` bytes from member `i` into `dst` (packed in member
    /// order). Each member knows only its own counts, as in `MPI_Alltoallv`; a member's
    /// `send_counts[j]` must equal member `j`'s `recv_counts[i]`. The two ends of a block
    /// that disagree on its size are told at no extra message (every signal of the block
    /// carries the size as its end counts it): the first of the two to take a signal of the
    /// other fails with [`Error::Mismatch`] naming it before it copies any of the block's
    /// bytes, the other then waits for its timeout. Where one end takes the block for empty
    /// there is nothing to take: the other waits for its timeout.
    /// Blocks of any size stream through the team's lanes in chunks of
    /// `lane_bytes / (2 · size())` bytes (see [`Team`]'s "Staging and capacity"), every pair
    /// at once, one round trip per chunk within a pair. When a block takes several chunks,
    /// the source is copied at initiation, so that its later chunks go in any call (see
    /// [`Team`]'s "Progress"); chunks that arrive outside the handle's calls are kept until
    /// the sync.
    ///
    /// # Errors
    /// [`Error::BufferTooShort`] for counts of another length than the team, or buffers of
    /// other lengths than their counts' sums; [`Error::TooLarge`] for counts adding up to
    /// more than 2^44 bytes (16 TiB); [`Error::OwnCounts`] when this member's counts
    /// for itself differ; [`Error::Flags`]; [`Error::TooLarge`] only on a team whose lanes
    /// hold fewer bytes than two per member.
    pub fn exchangev_nb<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        recv_counts: &[u64],
        src: impl Into<Input<'b>>,
        send_counts: &[u64],
        flags: Flags,
    ) -> Result<Handle<'t, 'b>> {
        self.exchangev_lent(dst, recv_counts, src, send_counts, flags, Lend::Now)
    }

    /// Blocking [`exchangev_nb`](Self::exchangev_nb) (see [`broadcast`](Self::broadcast) on
    /// timeouts).
    ///
    /// # Errors
    /// As for [`exchangev_nb`](Self::exchangev_nb) and [`Handle::wait_sync`].
    pub fn exchangev<'b>(
        &self,
        dst: impl Into<Output<'b>>,
        recv_counts: &[u64],
        src: impl Into<Input<'b>>,
        send_counts: &[u64],
        flags: Flags,
        timeout: Timeout,
    ) -> Result<()> {
        self.exchangev_lent(dst, recv_counts, src, send_counts, flags, Lend::Late)?
            .wait_sync(timeout)
    }

    /// [`exchangev_nb`](Self::exchangev_nb), its runs lent the source as `lend` says.
    fn exchangev_lent<'t, 'b>(
        &'t self,
        dst: impl Into<Output<'b>>,
        recv_counts: &[u64],
        src: impl Into<Input<'b>>,
        send_counts: &[u64],
        flags: Flags,
        lend: Lend,
    ) -> Result<Handle<'t, 'b>> {
        let (src, dst): (Input<'b>, Output<'b>) = (src.into(), dst.into());
        let (n, me) = (self.size(), self.index());
        check_len(send_counts.len(), u64::from(n))?;
        check_len(recv_counts.len(), u64::from(n))?;
        let rank = self.context().rank();
        check_len(src.len(), total(rank, send_counts)?)?;
        check_len(dst.len(), total(rank, recv_counts)?)?;
        let (send, recv) = (send_counts[me as usize], recv_counts[me as usize]);
        if send != recv {
            return Err(Error::OwnCounts {
                index: me,
                send,
                recv,
            });
        }
        // Never cut into pieces: the pieces would depend on every member's counts, which no
        // member knows. Its blocks stream through the lane instead, in chunks that keep any
        // member's staging within it.
        let shape = Shape::whole();
        // A slot per partner to receive into and one to send from.
        let chunk = (self.lane_bytes() / (2 * u64::from(n))).max(1);
        let build = |_, _| all::exchangev(n, me, send_counts, recv_counts, chunk);
        let counts = [send_counts, recv_counts];
        self.move_data(
            &[9],
            &counts,
            flags,
            "pairwise",
            shape,
            build,
            lend,
            src,
            dst,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overrides that differ only in a `k` above 16 share a name but not their words; the
    /// two spellings of the binomial tree share both.
    #[test]
    fn wide_knomial_trees_differ_in_their_words() {
        let forced = |name| tree("broadcast", Some(name), Tree::Flat).expect("a known tree");
        let ((k17, name17), (k18, name18)) = (forced("knomial17"), forced("knomial18"));
        assert_eq!(name17, name18);
        assert_ne!(tree_word(k17), tree_word(k18));
        let ((two, name2), (binomial, name)) = (forced("knomial2"), forced("binomial"));
        assert_eq!((name2, tree_word(two)), (name, tree_word(binomial)));
        let (k16, name16) = forced("knomial16");
        assert_eq!(name16, "knomial16");
        assert_ne!(tree_word(k16), tree_word(k17));
    }
}
