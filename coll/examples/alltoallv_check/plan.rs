//! What the `alltoallv_check` example exchanges: the cases of its `exchange` scenario (who sends
//! how many bytes to whom, where each rank's receive area begins, how many rounds), the bytes of
//! every block, and the digest a rank reports over what it received. The example runs the cases;
//! `coll/tests/alltoallv.rs` includes this same file and computes from it, independently of any
//! run, the plan every rank must have been given and the digest it must report.

use gaspi::{Rank, SegmentId};

use crate::data;
pub use crate::data::Digest;

/// Who sends to whom, and how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Every rank to every rank, itself included; some blocks are empty.
    Dense,
    /// Every rank to its next `k` ranks (not itself), nearest last: sources and destinations
    /// differ.
    Sparse(u32),
    /// Rank 0 receives nothing, the last rank sends nothing, every other pair exchanges.
    Holes,
    /// Every rank to itself only.
    SelfOnly,
    /// Every rank to every rank, 0 B to 64 KiB, and 16 MiB from rank 0 to the last rank.
    Skewed,
    /// Every rank to every other rank, 20 to 40 KiB: blocks a provider reads out of the source
    /// after their post returned, which a finished round must no longer do.
    Large,
    /// Every rank to itself and its next `k` ranks, small blocks (the long run of rounds).
    Ring(u32),
    /// Only the last rank sends: one small block, to rank 0 (the `ahead` scenario, whose
    /// sender has no source to wait for and so runs ahead as far as its credits let it).
    LastToFirst,
}

/// How the rounds of a case are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forms {
    /// One thread; the forms of [`form`] take turns, round by round.
    Rotating,
    /// [`CONSUMER_THREADS`] threads share every round: each sends a share of the blocks, all
    /// of them take arrivals until none is left, and each ends the round.
    Consumers,
}

/// One exchange of the `exchange` scenario: a plan and its rounds.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub pattern: Pattern,
    /// Rounds run with the plan; `None` for the long run, whose count the scenario is given.
    pub rounds: Option<u32>,
    pub forms: Forms,
}

/// The cases, in the order the scenario runs them on one alltoallv object: every plan is made
/// first, then the rounds of each case follow those of the one before, with no other
/// synchronisation between them.
pub const CASES: [Case; 8] = [
    Case {
        name: "dense",
        pattern: Pattern::Dense,
        rounds: Some(8),
        forms: Forms::Rotating,
    },
    Case {
        name: "sparse",
        pattern: Pattern::Sparse(2),
        rounds: Some(8),
        forms: Forms::Rotating,
    },
    Case {
        name: "holes",
        pattern: Pattern::Holes,
        rounds: Some(4),
        forms: Forms::Rotating,
    },
    Case {
        name: "self",
        pattern: Pattern::SelfOnly,
        rounds: Some(4),
        forms: Forms::Rotating,
    },
    Case {
        name: "skewed",
        pattern: Pattern::Skewed,
        rounds: Some(2),
        forms: Forms::Rotating,
    },
    Case {
        name: "consumers",
        pattern: Pattern::Dense,
        rounds: Some(40),
        forms: Forms::Consumers,
    },
    Case {
        name: "consumers-large",
        pattern: Pattern::Large,
        rounds: Some(100),
        forms: Forms::Consumers,
    },
    Case {
        name: "long",
        pattern: Pattern::Ring(3),
        rounds: None,
        forms: Forms::Rotating,
    },
];

/// Threads per rank in a [`Forms::Consumers`] case.
pub const CONSUMER_THREADS: usize = 4;

/// The single-threaded forms of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `round`, `send_all`, then `next_arrival` and `reset` one source at a time, `finish`.
    Stream,
    /// `round`, `send` block by block in reverse order, a second `round` that joins it takes
    /// every arrival, one `alltoallv_reset` of all of them, `finish`.
    Joined,
    /// The proposal's form: `alltoallv` with `Timeout::Test` until `Complete`, each arrival
    /// reset at once with `alltoallv_reset`.
    Proposal,
    /// `round`, `send_all`, `finish` (which takes every arrival), then the blocks are read and
    /// reset after the round ended.
    Deferred,
}

/// The form of round `round` (counted from 0 within its case) of a [`Forms::Rotating`] case.
pub fn form(round: u32) -> Form {
    const FORMS: [Form; 4] = [Form::Stream, Form::Joined, Form::Proposal, Form::Deferred];
    FORMS[round as usize % FORMS.len()]
}

/// The largest block of the skewed case.
pub const HUGE: u64 = 16 << 20;
/// The other sizes of the skewed case.
const SKEWED: [u64; 5] = [0, 1, 13, 4096, 65_539];

/// Rank `me`'s destinations `(rank, bytes)` in a job of `n` ranks, in the order it passes them.
pub fn sends(pattern: Pattern, n: u32, me: Rank) -> Vec<(Rank, u64)> {
    let next = |k: u32| (1..=k.min(n - 1)).rev().map(move |d| (me + d) % n);
    match pattern {
        Pattern::Dense => (0..n)
            .map(|t| (t, u64::from((me * 7 + t * 13 + 3) % 29) * 37))
            .collect(),
        Pattern::Sparse(k) => next(k)
            .map(|t| (t, 64 + u64::from((me * 5 + t) % 7) * 129))
            .collect(),
        Pattern::Holes if me == n - 1 => Vec::new(),
        Pattern::Holes => (1..n).map(|t| (t, u64::from(100 + me + t))).collect(),
        Pattern::SelfOnly => vec![(me, 4096 + u64::from(me))],
        Pattern::Skewed => (0..n)
            .rev()
            .map(|t| {
                let bytes = if me == 0 && t == n - 1 {
                    HUGE
                } else {
                    SKEWED[((me + 2 * t) % 5) as usize]
                };
                (t, bytes)
            })
            .collect(),
        Pattern::Large => (0..n)
            .filter(|&t| t != me)
            .map(|t| (t, (20 << 10) + u64::from((me * 5 + t * 3) % 11) * 2039))
            .collect(),
        Pattern::Ring(k) => std::iter::once(me)
            .chain(next(k))
            .map(|t| (t, 8 + u64::from((me + t) % 24)))
            .collect(),
        Pattern::LastToFirst if n > 1 && me == n - 1 => vec![(0, 500 + u64::from(me))],
        Pattern::LastToFirst => Vec::new(),
    }
}

/// The bytes rank `me` receives in one round: the receive area `get_remote_offsets` must find.
pub fn incoming(pattern: Pattern, n: u32, me: Rank) -> u64 {
    (0..n)
        .flat_map(|r| sends(pattern, n, r))
        .filter(|&(t, _)| t == me)
        .map(|(_, bytes)| bytes)
        .sum()
}

/// Where rank `me`'s receive area begins in case `case`: unaligned, and not the same on all
/// ranks.
pub fn first_offset(case: usize, me: Rank) -> u64 {
    16 + 8 * u64::from(me) + case as u64 % 3
}

/// Bytes after a receive area that no block may touch.
pub const TAIL: u64 = 40;

/// What every byte of a receive segment holds before any block lands, and what the bytes around
/// the receive area must still hold after every round.
pub const SENTINEL: u8 = 0xee;

/// The receive segment of rank `me` in case `case`: even ranks use one id, odd ranks another
/// (every rank creates both, collectively), so a destination's segment is the receiver's own.
pub fn receive_segment(case: usize, me: Rank) -> SegmentId {
    10 + 2 * case as SegmentId + (me % 2) as SegmentId
}

/// Rank `me`'s source segment in case `case`.
pub fn source_segment(case: usize) -> SegmentId {
    100 + case as SegmentId
}

/// Bytes left free before each block in a source segment (so that source offsets are unaligned).
pub const SOURCE_GAP: u64 = 5;

/// Where each block of `sends` is read from in the source segment: laid out in reverse order of
/// the destinations, each after a gap; returns the offsets (in the order of `sends`) and the
/// segment size they need.
pub fn source_offsets(sends: &[(Rank, u64)]) -> (Vec<u64>, u64) {
    let mut offsets = vec![0; sends.len()];
    let mut end = 0;
    for (i, &(_, bytes)) in sends.iter().enumerate().rev() {
        offsets[i] = end + SOURCE_GAP;
        end += SOURCE_GAP + bytes;
    }
    (offsets, end.max(1))
}

/// The bytes of the block `source` sends to `target` in round `round` (the alltoallv's round
/// number, from 1): different in every round and for every pair.
pub fn fill(round: u64, source: Rank, target: Rank, buf: &mut [u8]) {
    data::fill(
        (round << 32) ^ (u64::from(source) << 16) ^ u64::from(target),
        buf,
    );
}

/// The block `source` sends to `target` in round `round`, as [`fill`] makes it.
pub fn block(round: u64, source: Rank, target: Rank, bytes: u64) -> Vec<u8> {
    let mut buf = vec![0; usize::try_from(bytes).expect("blocks fit in memory")];
    fill(round, source, target, &mut buf);
    buf
}

/// Rounds of case `case`, given the long run's count `long`.
pub fn rounds(case: &Case, long: u32) -> u32 {
    case.rounds.unwrap_or(long)
}
