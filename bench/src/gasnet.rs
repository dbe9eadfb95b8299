//! GASNet's data-movement collectives on a `gaspi-coll` [`Team`], for the comparison with the
//! matching MPI calls (`bench/mpi/gasnet.c`).
//!
//! What both sides measure (change them together):
//! * The operations ([`OPS`]) over all ranks, root 0 for the rooted ones, beside `MPI_Bcast`,
//!   `MPI_Scatter`, `MPI_Gather`, `MPI_Allgather`, `MPI_Alltoall`, `MPI_Scatterv`,
//!   `MPI_Gatherv`, `MPI_Allgatherv` and `MPI_Alltoallv`. `"bench"` names our operation on the
//!   lines of both sides.
//! * `bytes` is the block of one member: what a broadcast moves, what a scatter gives each
//!   member, what each member contributes to a gather or gather_all, what each member sends
//!   each member in an exchange. In the v forms blocks alternate: member `i`'s block (in
//!   `exchangev`, the one from `i` to `j`, by `i + j`) has `bytes / 2` when even and
//!   `3 · bytes / 2` when odd ([`v_block`]), so that on an even number of ranks a v form moves
//!   as many bytes in all as its regular form, unevenly.
//! * One sample is one blocking call, with `Flags::EAGER` (`IN_NOSYNC | OUT_MYSYNC`), MPI's
//!   semantics: data may move before its receiver entered (into staging, as an MPI eager
//!   send), and a call returns once this member's buffers are done with. Calls follow each
//!   other with no barrier between them, as consecutive MPI calls do. The blocking forms are
//!   the `_nb` form synced at once; the benchmark calls them so, to read the algorithm from
//!   the handle (`"algorithm"` on gaspi lines).
//! * The figure: every rank times each of its calls, and the line carries the largest of the
//!   ranks' medians, the pace of the slowest member (`iters`: the calls behind each median).
//! * Every block carries a stamp naming its round, sender and receiver (a block that every
//!   member receives, of a broadcast or gather_all, names its sender as receiver), written
//!   before the timed call and checked after it (see [`stamp_bytes`]).

use std::time::Instant;

use gaspi::{Context, Rank, Timeout, GROUP_ALL};
use gaspi_coll::{Capacity, Collectives, Flags, Handle, Team};

use crate::api::figure;
use crate::{slowest_median, Error, Figure, Result};

const TIMEOUT: Timeout = Timeout::Millis(60_000);
/// The root of the rooted operations.
const ROOT: Rank = 0;

/// Bytes per member's block.
pub(crate) const SIZES: [usize; 3] = [8, 65536, 1 << 20];

/// How an operation moves blocks between the members.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// The root's block to every member.
    Broadcast,
    /// Block `j` of the root's source to member `j`.
    Scatter,
    /// Member `i`'s block into block `i` of the root's destination.
    Gather,
    /// Member `i`'s block into block `i` of every member's destination.
    GatherAll,
    /// Block `j` of member `i`'s source into block `i` of member `j`'s destination.
    Exchange,
}

/// An operation: its name in the lines, its pattern, and whether it is a v form.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    name: &'static str,
    pattern: Pattern,
    v: bool,
}

/// The operations, in the order both sides run them.
pub(crate) const OPS: [Op; 9] = [
    Op::new("broadcast", Pattern::Broadcast, false),
    Op::new("scatter", Pattern::Scatter, false),
    Op::new("gather", Pattern::Gather, false),
    Op::new("gather_all", Pattern::GatherAll, false),
    Op::new("exchange", Pattern::Exchange, false),
    Op::new("scatterv", Pattern::Scatter, true),
    Op::new("gatherv", Pattern::Gather, true),
    Op::new("gather_allv", Pattern::GatherAll, true),
    Op::new("exchangev", Pattern::Exchange, true),
];

impl Op {
    const fn new(name: &'static str, pattern: Pattern, v: bool) -> Op {
        Op { name, pattern, v }
    }

    /// Bytes of block `k` (a member index, or `i + j` for the block from `i` to `j`).
    fn block(self, bytes: usize, k: u32) -> usize {
        if self.v {
            v_block(bytes, k)
        } else {
            bytes
        }
    }
}

/// Block `k` of a v form whose regular form has blocks of `bytes`.
fn v_block(bytes: usize, k: u32) -> usize {
    bytes / 2 + (k % 2) as usize * bytes
}

/// Timed calls for blocks of `bytes`, and the untimed warm-up calls before. A cap below the
/// count of 8 B blocks (`--max-rounds`, for an oversubscribed host, where a call of an MPI
/// that busy-polls takes milliseconds, of large blocks seconds) is the count of 8 B blocks,
/// and shrinks those of larger blocks alike, to no fewer than 20 (or the cap).
fn iterations(bytes: usize, cap: usize) -> (usize, usize) {
    const SMALL: usize = 1000;
    let full: usize = match bytes {
        0..=8 => SMALL,
        9..=65536 => 300,
        _ => 100,
    };
    let iters = match cap {
        SMALL.. => full,
        // The cap is above 0 (Choice::parse): so is every count.
        _ => (full * cap / SMALL).max(cap.min(20)),
    };
    (iters / 10 + 1, iters)
}

/// One block of a member's source or destination: where it lies, and whom it goes from and
/// to.
#[derive(Debug, Clone, Copy)]
struct Block {
    at: usize,
    len: usize,
    from: Rank,
    to: Rank,
}

/// Blocks of the given lengths, senders and receivers, packed in that order.
fn packed(blocks: impl IntoIterator<Item = (usize, Rank, Rank)>) -> Vec<Block> {
    let mut at = 0;
    blocks
        .into_iter()
        .map(|(len, from, to)| {
            let block = Block { at, len, from, to };
            at += len;
            block
        })
        .collect()
}

/// Where `blocks` end: the length of the buffer that holds them.
fn end(blocks: &[Block]) -> usize {
    blocks.last().map_or(0, |b| b.at + b.len)
}

/// The blocks of `op` in member `me`'s source and destination, among `n`, for blocks of
/// `bytes` (a member's source or destination that the operation does not touch has none).
fn blocks(op: Op, bytes: usize, me: Rank, n: u32) -> (Vec<Block>, Vec<Block>) {
    let len = |k| op.block(bytes, k);
    let rooted = |blocks: Vec<Block>| if me == ROOT { blocks } else { Vec::new() };
    match op.pattern {
        Pattern::Broadcast => (
            rooted(packed([(bytes, ROOT, ROOT)])),
            packed([(bytes, ROOT, ROOT)]),
        ),
        Pattern::Scatter => (
            rooted(packed((0..n).map(|j| (len(j), ROOT, j)))),
            packed([(len(me), ROOT, me)]),
        ),
        Pattern::Gather => (
            packed([(len(me), me, ROOT)]),
            rooted(packed((0..n).map(|i| (len(i), i, ROOT)))),
        ),
        Pattern::GatherAll => (
            packed([(len(me), me, me)]),
            packed((0..n).map(|i| (len(i), i, i))),
        ),
        Pattern::Exchange => (
            packed((0..n).map(|j| (len(me + j), me, j))),
            packed((0..n).map(|i| (len(i + me), i, me))),
        ),
    }
}

/// The stamp of the block `from` sends `to` in `round`, as `crate::stamp` and
/// `bench/mpi/bench.h` compute it.
fn stamp(round: u64, from: Rank, to: Rank) -> u64 {
    (round << 32) | (u64::from(from & 0xffff) << 16) | u64::from(to & 0xffff)
}

/// What a block of `len` bytes carries at its start, and at its end too where the two do not
/// overlap: the stamp's 8 bytes, or in a block of fewer (a v form's half block of 8 B) its
/// first `len` bytes after folding the round into them, so that a block of another round
/// still shows. Returns the bytes and how many of them.
fn stamp_bytes(value: u64, len: usize) -> ([u8; 8], usize) {
    match len {
        8.. => (value.to_le_bytes(), 8),
        _ => ((value ^ (value >> 32)).to_le_bytes(), len),
    }
}

/// Where the stamp of `n` bytes lies in a block of `len`.
fn stamp_places(len: usize, n: usize) -> impl Iterator<Item = usize> {
    [0, len - n]
        .into_iter()
        .take(if len >= 2 * n { 2 } else { 1 })
}

/// Writes the stamp `value` into `block` (not empty; see [`stamp_bytes`]).
fn mark(block: &mut [u8], value: u64) {
    let (bytes, n) = stamp_bytes(value, block.len());
    for at in stamp_places(block.len(), n) {
        block[at..at + n].copy_from_slice(&bytes[..n]);
    }
}

/// Whether `block` carries the stamp `value` (see [`stamp_bytes`]).
fn marked(block: &[u8], value: u64) -> bool {
    let (bytes, n) = stamp_bytes(value, block.len());
    stamp_places(block.len(), n).all(|at| block[at..at + n] == bytes[..n])
}

/// The team over all ranks and the buffers of every operation and size.
pub(crate) struct Bench<'c> {
    ctx: &'c Context,
    team: Team<'c>,
    src: Vec<u8>,
    dst: Vec<u8>,
    /// Calls run so far, over every figure: stamps never repeat, so a block left over from an
    /// earlier figure is caught too.
    rounds: u64,
}

impl<'c> Bench<'c> {
    /// Builds the team over all ranks (collective) and buffers for the largest case.
    ///
    /// The team stages what it moves; a call whose staging exceeds a lane runs as pieces,
    /// and `exchangev`, which is never cut, streams its blocks in chunks of a lane's `1/2n`.
    /// Every lane here holds the most any call stages, under `2n + 1` of the widest blocks,
    /// so every call is one piece and every `exchangev` block one chunk: the figures are the
    /// algorithms', not the cutting's. The default capacity, lanes of 1 MiB, would stream
    /// `exchangev`'s 1 MiB blocks in `2n` chunks each.
    pub(crate) fn new(ctx: &'c Context, coll: &'c Collectives<'c>) -> Result<Bench<'c>> {
        let n = ctx.size() as usize;
        let largest = SIZES[SIZES.len() - 1];
        let widest = v_block(largest, 1).max(largest);
        let capacity = Capacity {
            lanes: 4,
            lane_bytes: ((2 * n + 1) * widest) as u64,
        };
        Ok(Bench {
            ctx,
            team: Team::with_capacity(coll, GROUP_ALL, capacity, TIMEOUT)?,
            src: vec![0; n * widest],
            dst: vec![0; n * widest],
            rounds: 0,
        })
    }

    /// Calls of `op` with blocks of `bytes` (at most `cap` timed), after their warm-up.
    pub(crate) fn figure(&mut self, op: Op, bytes: usize, cap: usize) -> Result<Option<Figure>> {
        let ctx = self.ctx;
        let (me, n) = (ctx.rank(), ctx.size());
        let (sends, receipts) = blocks(op, bytes, me, n);
        let (src_len, dst_len) = (end(&sends), end(&receipts));
        let counts = Counts::new(op, bytes, n, &sends, &receipts);
        let (warmup, iters) = iterations(bytes, cap);
        let mut samples = Vec::with_capacity(iters);
        let mut algorithm = "";
        ctx.barrier(TIMEOUT)?;
        for i in 0..warmup + iters {
            self.rounds += 1;
            for b in &sends {
                let value = stamp(self.rounds, b.from, b.to);
                mark(&mut self.src[b.at..b.at + b.len], value);
            }
            let (src, dst) = (&self.src[..src_len], &mut self.dst[..dst_len]);
            let start = Instant::now();
            let mut handle = call(&self.team, op, &counts, src, dst)?;
            handle.wait_sync(TIMEOUT)?;
            if i >= warmup {
                samples.push(start.elapsed());
            }
            algorithm = handle.algorithm();
            drop(handle);
            for b in &receipts {
                let value = stamp(self.rounds, b.from, b.to);
                if !marked(&self.dst[b.at..b.at + b.len], value) {
                    return Err(Error::Check(format!(
                        "{} of {bytes} B, round {}: rank {me} found a block from rank {} without its stamp {value:#x}",
                        op.name, self.rounds, b.from
                    )));
                }
            }
        }
        let slowest = slowest_median(ctx, &samples)?;
        Ok(figure(ctx, op.name, bytes, samples).map(|f| Figure {
            median: slowest,
            algorithm: Some(algorithm),
            ..f
        }))
    }
}

/// The counts the v forms take, worked out before the timed calls as MPI's are.
struct Counts {
    /// Every member's block, by member index: the rooted v forms and gather_allv take them
    /// all on every member.
    every: Vec<u64>,
    /// This member's blocks for and from each member, in exchangev.
    sends: Vec<u64>,
    receipts: Vec<u64>,
}

impl Counts {
    fn new(op: Op, bytes: usize, n: u32, sends: &[Block], receipts: &[Block]) -> Counts {
        let lens = |blocks: &[Block]| blocks.iter().map(|b| b.len as u64).collect();
        Counts {
            every: (0..n).map(|k| op.block(bytes, k) as u64).collect(),
            sends: lens(sends),
            receipts: lens(receipts),
        }
    }
}

/// Initiates `op` on `team` from `src` into `dst`.
fn call<'t, 'b>(
    team: &'t Team<'_>,
    op: Op,
    counts: &Counts,
    src: &'b [u8],
    dst: &'b mut [u8],
) -> Result<Handle<'t, 'b>> {
    let flags = Flags::EAGER;
    let every = &counts.every;
    let handle = match (op.pattern, op.v) {
        (Pattern::Broadcast, _) => team.broadcast_nb(dst, ROOT, src, flags),
        (Pattern::Scatter, false) => team.scatter_nb(dst, ROOT, src, flags),
        (Pattern::Scatter, true) => team.scatterv_nb(dst, ROOT, src, every, flags),
        (Pattern::Gather, false) => team.gather_nb(ROOT, dst, src, flags),
        (Pattern::Gather, true) => team.gatherv_nb(ROOT, dst, src, every, flags),
        (Pattern::GatherAll, false) => team.gather_all_nb(dst, src, flags),
        (Pattern::GatherAll, true) => team.gather_allv_nb(dst, src, every, flags),
        (Pattern::Exchange, false) => team.exchange_nb(dst, src, flags),
        (Pattern::Exchange, true) => {
            team.exchangev_nb(dst, &counts.receipts, src, &counts.sends, flags)
        }
    };
    Ok(handle?)
}

#[cfg(test)]
mod tests {
    use super::{blocks, iterations, mark, marked, stamp, Op, Pattern, OPS, SIZES};

    #[test]
    fn v_forms_move_as_much_as_their_regular_forms_on_even_jobs() {
        for n in [2, 4, 8] {
            for regular in OPS.iter().filter(|op| !op.v) {
                let v = OPS
                    .iter()
                    .find(|op| op.v && op.name.starts_with(regular.name))
                    .copied();
                let Some(v) = v else { continue };
                let total = |op: Op| -> usize {
                    let received = |me| {
                        blocks(op, 1024, me, n)
                            .1
                            .iter()
                            .map(|b| b.len)
                            .sum::<usize>()
                    };
                    (0..n).map(received).sum()
                };
                assert_eq!(total(*regular), total(v), "{} at {n} ranks", v.name);
            }
        }
    }

    #[test]
    fn what_one_member_sends_another_receives_in_the_same_place() {
        for op in OPS {
            for n in [2, 3, 8] {
                for bytes in [8, 100] {
                    let sides: Vec<_> = (0..n).map(|me| blocks(op, bytes, me, n)).collect();
                    let sent: Vec<_> = sides.iter().flat_map(|s| s.0.clone()).collect();
                    for (me, (_, receipts)) in sides.iter().enumerate() {
                        for r in receipts {
                            assert!(r.to == me as u32 || r.from == r.to, "{} {n}", op.name);
                            let from = sent
                                .iter()
                                .find(|s| (s.from, s.to) == (r.from, r.to))
                                .expect("every block received is sent");
                            assert_eq!(from.len, r.len, "{} {n} {bytes}", op.name);
                        }
                    }
                    if matches!(op.pattern, Pattern::Broadcast) {
                        assert_eq!(sent.len(), 1);
                    }
                }
            }
        }
    }

    #[test]
    fn a_cap_shrinks_every_size_alike() {
        let counts = |cap| SIZES.map(|bytes| iterations(bytes, cap).1);
        assert_eq!(counts(usize::MAX), [1000, 300, 100]);
        assert_eq!(counts(1000), [1000, 300, 100]);
        assert_eq!(counts(100), [100, 30, 20]);
        assert_eq!(counts(50), [50, 20, 20]);
        assert_eq!(counts(3), [3, 3, 3]);
    }

    #[test]
    fn stamps_show_another_round_in_blocks_of_every_length() {
        for len in 1..20 {
            let mut block = vec![0u8; len];
            mark(&mut block, stamp(7, 1, 2));
            assert!(marked(&block, stamp(7, 1, 2)), "{len}");
            assert!(!marked(&block, stamp(8, 1, 2)), "{len}");
            assert!(!marked(&block, stamp(7, 2, 1)), "{len}");
        }
    }
}
