//! The allreduce's schedule: every member contributes `len` bytes (whole blocks of the
//! operator) and ends with the element-wise reduction of all contributions, bitwise the same
//! on every member. The runtime's algorithms and fold order, as schedules.
//!
//! # Fixed order
//! Every fold joins two *adjacent* member ranges, lower range on the left. Sizes that are not
//! a power of two `p` first fold the first `2·(n − p)` members pairwise (`2i` into `2i + 1`),
//! so the remaining `p` "virtual" members hold adjacent ranges in member order; then partners
//! at distance 1, 2, 4, … fold their adjacent ranges. Both algorithms follow this same tree,
//! so every element of the result is the same expression over the inputs on every member,
//! whichever algorithm the length selects: results are bitwise identical, floating point
//! included (a NaN's sign and payload excepted, see `gaspi::ReduceOp`), and non-commutative operators see their operands in member order. At the end
//! member `2i + 1` puts the result to member `2i`.
//!
//! # Algorithms
//! * [`AllreduceAlgo::Doubling`] (short vectors): `log2 p` steps, each exchanging the whole
//!   vector.
//! * [`AllreduceAlgo::Rabenseifner`] (long vectors, at least one block per virtual member): a
//!   reduce-scatter by recursive halving (nearest partner first, so folds stay adjacent)
//!   leaves each virtual member one fully reduced part, and an allgather in the reverse
//!   order hands the parts around: `2·log2 p` steps moving about twice the vector in total
//!   instead of `log2 p` times it.
//!
//! # Stage
//! Every range a member receives into is its own, so every credit is given at the start, and
//! no range is written after it was put from or copied into the destination (a fold writes
//! into the received range, into a part of the accumulator that was never sent, or into a
//! range of its own):
//! * `0..len`: the member's source, the accumulator of an unpaired member (for Rabenseifner
//!   copied as the two halves of the first step, each read by one step);
//! * `len..2·len` (only when `n` is not a power of two): where an odd paired member receives
//!   its partner's vector and folds it into (its accumulator), and where an even paired
//!   member receives the result;
//! * then, for doubling, one `len`-byte range per step, into which the step's receipt is
//!   folded (the next step's accumulator); for Rabenseifner, one range per halving step (as
//!   large as the largest half any member keeps at that step) and the `len`-byte result, into
//!   which the last halving step folds and the allgather puts;
//! * for Rabenseifner with more than one halving step, after the result, the half an
//!   unpaired member keeps at the first step, into which that step folds (the accumulator
//!   from then on, its offsets those of the vector shifted): the staged source is then never
//!   written but by its copies, so the engine may fold and put it straight out of the source
//!   instead (see its `elide` module).
//!
//! # Signals
//! Steps are numbered by slot as in the runtime: slot 0 the pairing, `1..=2·log2 p` the steps
//! of the virtual members, `2·log2 p + 1` the result back to the paired members. A put in slot
//! `s` raises [`data(s)`](data) at its receiver, which gave [`credit(n, s)`](credit) for it
//! at the start: numbers stay below `2·(2·log2 n + 2)`, within
//! [`algorithm_signals`](super::algorithm_signals).
//!
//! Every put waits for its receiver's credit, so the schedule meets `IN_MYSYNC` and
//! `OUT_MYSYNC` by itself. A receiver writes a received range only after its receipt (the
//! source copy goes to `0..len`, where nothing lands), so the credits may be skipped
//! ([`Schedule::credits`]), and the schedule is gathering: every member's contribution
//! reaches every member.

use std::ops::Range;

use super::{Schedule, Signal, Span, StepId};

/// The algorithms of [`allreduce`] (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllreduceAlgo {
    Doubling,
    Rabenseifner,
}

/// Vectors longer than this use Rabenseifner's algorithm (as MPICH and the runtime do).
pub(crate) const LONG_BYTES: u64 = 2048;

/// The algorithm for `blocks` blocks of `block_bytes` among `n`: `forced` if given (and
/// possible), else by length. Rabenseifner needs a block per virtual member.
pub(crate) fn algorithm(
    n: u32,
    blocks: u64,
    block_bytes: u64,
    forced: Option<AllreduceAlgo>,
) -> AllreduceAlgo {
    let p = 1u64 << n.max(1).ilog2();
    let long = forced.map_or(blocks * block_bytes > LONG_BYTES, |a| {
        a == AllreduceAlgo::Rabenseifner
    });
    if long && blocks >= p {
        AllreduceAlgo::Rabenseifner
    } else {
        AllreduceAlgo::Doubling
    }
}

/// A bound on any member's staging in an allreduce of `len` bytes among `n`:
/// `len · (ceil(log2 n) + 2)` (recursive doubling keeps a received vector per step beside its
/// own; checked for both algorithms in the tests). Below it, a member knows every member's
/// staging fits a lane without computing the others' schedules.
pub(crate) fn stage_bound(n: u32, len: u64) -> u64 {
    let levels = u64::from(n.next_power_of_two().trailing_zeros());
    len.saturating_mul(levels + 2)
}

/// Slots of a run among `n` (see the [module documentation](self)).
fn slots(n: u32) -> Signal {
    2 * n.ilog2() + 2
}

/// The signal a put in slot `s` raises at its receiver.
fn data(s: Signal) -> Signal {
    s
}

/// The credit a receiver gives for the put of slot `s`.
fn credit(n: u32, s: Signal) -> Signal {
    slots(n) + s
}

/// One step of a member: in slot `slot`, with member `partner`.
struct Exchange {
    slot: Signal,
    partner: u32,
}

/// Member `me`'s part in an allreduce among `n` of `blocks` blocks of `block` bytes, by
/// `algo` (Rabenseifner only with at least one block per virtual member, see [`algorithm`]).
pub(crate) fn allreduce(n: u32, me: u32, blocks: u64, block: u64, algo: AllreduceAlgo) -> Schedule {
    let len = blocks * block;
    let mut s = Schedule::new();
    if n == 1 {
        s.copy(Span::src(0, len), Span::dst(0, len), &[]);
        return s;
    }
    let levels = n.ilog2();
    let extra = n - (1 << levels);
    let last = slots(n) - 1;
    // Every member's contribution reaches every member.
    s.gathering = true;
    let paired = me < 2 * extra;
    // Rabenseifner's unpaired members stage their source in the parts they use it in.
    let staged = if paired || algo == AllreduceAlgo::Doubling {
        s.copy(Span::src(0, len), Span::stage(0, len), &[])
    } else {
        None
    };
    if paired && me.is_multiple_of(2) {
        // Hands its vector to its right neighbour and gets the result back at the end.
        let partner = me + 1;
        let credited = s.signal(partner, credit(n, last), &[]);
        let go = s.wait(partner, credit(n, 0), &[credited]);
        s.credits.extend([credited, go]);
        let after: Vec<StepId> = staged.into_iter().chain([go]).collect();
        s.put(partner, 0, len, len, data(0), &after);
        let got = s.wait(partner, data(last), &[credited]);
        s.copy(Span::stage(len, len), Span::dst(0, len), &[got]);
        return s;
    }
    // The accumulator: where it is and the step that filled it.
    let (acc, filled, vme) = if paired {
        let partner = me - 1;
        let credited = s.signal(partner, credit(n, 0), &[]);
        s.credits.push(credited);
        let got = s.wait(partner, data(0), &[credited]);
        let after: Vec<StepId> = staged.into_iter().chain([got]).collect();
        let folded = s.fold(len, 0, len, len, &after);
        (len, vec![folded], me / 2)
    } else {
        (0, staged.into_iter().collect(), me - extra)
    };
    let base = if extra > 0 { 2 * len } else { len };
    let member = |v: u32| if v < extra { 2 * v + 1 } else { v + extra };
    let plan = Virtual {
        n,
        levels,
        vme,
        member: &member,
        len,
        block,
        blocks,
        base,
    };
    let (result, done) = match algo {
        AllreduceAlgo::Doubling => plan.doubling(&mut s, acc, filled),
        AllreduceAlgo::Rabenseifner => plan.rabenseifner(&mut s, acc, filled, !paired),
    };
    if paired {
        let partner = me - 1;
        let go = s.wait(partner, credit(n, last), &[]);
        s.credits.push(go);
        let after: Vec<StepId> = done.into_iter().chain([go]).collect();
        s.put(partner, result, len, len, data(last), &after);
    }
    s
}

/// The steps of a virtual member.
struct Virtual<'a> {
    n: u32,
    levels: u32,
    /// This member's virtual index.
    vme: u32,
    /// The member of a virtual index.
    member: &'a dyn Fn(u32) -> u32,
    len: u64,
    block: u64,
    blocks: u64,
    /// Where the ranges of the steps start.
    base: u64,
}

impl Virtual<'_> {
    /// The step with the partner at virtual distance `2^k`, in slot `slot`.
    fn exchange(&self, k: u32, slot: Signal) -> Exchange {
        Exchange {
            slot,
            partner: (self.member)(self.vme ^ (1 << k)),
        }
    }

    /// Whether the partner at distance `2^k` holds the lower member range.
    fn partner_first(&self, k: u32) -> bool {
        self.vme & (1 << k) != 0
    }

    /// Folds the received range `got` with this member's range `own` into `into`, in member
    /// order, after `after`.
    #[allow(clippy::too_many_arguments)]
    fn fold(
        &self,
        s: &mut Schedule,
        k: u32,
        got: u64,
        own: u64,
        into: u64,
        len: u64,
        after: &[StepId],
    ) -> StepId {
        let (left, right) = if self.partner_first(k) {
            (got, own)
        } else {
            (own, got)
        };
        s.fold(left, right, into, len, after)
    }

    /// Gives the credit for the receipt of `x`, puts `from..from + len` into the partner's
    /// stage at `into` once the partner's credit and `after` are in, and waits for the
    /// partner's put; returns the receipt.
    ///
    /// A member checks its partner's credit (and its value, the call's signature) only after
    /// giving its own, so that members that disagree both hear of it.
    fn swap(
        &self,
        s: &mut Schedule,
        x: &Exchange,
        (from, into, len): (u64, u64, u64),
        after: &[StepId],
    ) -> StepId {
        let credited = s.signal(x.partner, credit(self.n, x.slot), &[]);
        let go = s.wait(x.partner, credit(self.n, x.slot), &[credited]);
        s.credits.extend([credited, go]);
        let deps: Vec<StepId> = after.iter().copied().chain([go]).collect();
        s.put(x.partner, from, into, len, data(x.slot), &deps);
        s.wait(x.partner, data(x.slot), &[credited])
    }

    /// Recursive doubling from the accumulator at `acc`, filled by `filled`: step `k` puts the
    /// accumulator into the partner's range `k` and folds what arrives in its own range `k`,
    /// the next accumulator. Returns where the result is and the step that made it.
    fn doubling(
        &self,
        s: &mut Schedule,
        mut acc: u64,
        mut filled: Vec<StepId>,
    ) -> (u64, Vec<StepId>) {
        let len = self.len;
        for k in 0..self.levels {
            let x = self.exchange(k, 1 + k);
            let range = self.base + u64::from(k) * len;
            let got = self.swap(s, &x, (acc, range, len), &filled);
            let after: Vec<StepId> = filled.iter().copied().chain([got]).collect();
            filled = vec![self.fold(s, k, range, acc, range, len, &after)];
            acc = range;
        }
        s.copy(Span::stage(acc, len), Span::dst(0, len), &filled);
        (acc, filled)
    }

    /// Rabenseifner's algorithm from the accumulator at `acc`, filled by `filled`, or, with
    /// `unstaged`, still in the source (to be staged at `acc`): see the [module
    /// documentation](self). Returns where the result is (the result range, complete once
    /// the returned steps are done).
    fn rabenseifner(
        &self,
        s: &mut Schedule,
        mut acc: u64,
        filled: Vec<StepId>,
        unstaged: bool,
    ) -> (u64, Vec<StepId>) {
        let (block, levels) = (self.block, self.levels);
        let bytes = |r: &Range<u64>| (r.start * block, (r.end - r.start) * block);
        // The received range of halving step k, as large as the largest half kept at k.
        let mut halves = Vec::with_capacity(levels as usize);
        let mut at = self.base;
        for k in 0..levels {
            halves.push(at);
            at += self.blocks.div_ceil(1 << (k + 1)) * block;
        }
        let result = at;
        let mut range = 0..self.blocks;
        let mut splits = Vec::with_capacity(levels as usize);
        // The accumulator's last writer: the source copy or pairing fold, then each fold.
        let mut latest = filled;
        for k in 0..levels {
            let mid = range.start + (range.end - range.start) / 2;
            let (keep, give) = if self.partner_first(k) {
                (mid..range.end, range.start..mid)
            } else {
                (range.start..mid, mid..range.end)
            };
            let x = self.exchange(k, 1 + k);
            let (give_at, give_len) = bytes(&give);
            let (keep_at, keep_len) = bytes(&keep);
            // An unstaged source is staged half given, half kept, each copy read by one step
            // only, so that the engine may read the source instead (see its `elide` module).
            let (given, kept) = if unstaged && k == 0 {
                let mut stage = |at, len| -> Vec<StepId> {
                    s.copy(Span::src(at, len), Span::stage(acc + at, len), &[])
                        .into_iter()
                        .collect()
                };
                (stage(give_at, give_len), stage(keep_at, keep_len))
            } else {
                (latest.clone(), latest)
            };
            let got = self.swap(s, &x, (acc + give_at, halves[k as usize], give_len), &given);
            // The fold of the staged source goes beside it (the copy then has no other
            // writer); the accumulator moves there, after the result, so that the kept
            // half's offsets stay those of the vector.
            let own = acc + keep_at;
            let into = if k + 1 == levels {
                result + keep_at
            } else {
                if unstaged && k == 0 {
                    acc = result + self.len - keep_at;
                }
                acc + keep_at
            };
            let after: Vec<StepId> = kept.iter().copied().chain([got]).collect();
            let folded = self.fold(s, k, halves[k as usize], own, into, keep_len, &after);
            latest = vec![folded];
            splits.push((keep.clone(), give));
            range = keep;
        }
        let (own_at, own_len) = bytes(&range);
        s.copy(
            Span::stage(result + own_at, own_len),
            Span::dst(own_at, own_len),
            &latest,
        );
        // Undo the halving: at step k this member owns the part it kept at halving step k,
        // complete once the final fold and the receipts of the steps before are done.
        let mut complete = latest;
        for (k, (keep, give)) in splits.into_iter().enumerate().rev() {
            let k = k as u32;
            let x = self.exchange(k, 2 * levels - k);
            let (keep_at, keep_len) = bytes(&keep);
            let (give_at, give_len) = bytes(&give);
            let got = self.swap(
                s,
                &x,
                (result + keep_at, result + keep_at, keep_len),
                &complete,
            );
            s.copy(
                Span::stage(result + give_at, give_len),
                Span::dst(give_at, give_len),
                &[got],
            );
            complete.push(got);
        }
        (result, complete)
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::{check_folding, pattern};
    use super::super::sync::synchronise;
    use super::super::Reducer;
    use super::*;

    /// Affine maps `x ↦ a·x + b` over bytes, a block `[a, b]`, composed left then right:
    /// associative, and far from commutative, so any fold out of member order shows.
    struct Affine;

    impl Reducer for Affine {
        fn block(&self) -> u64 {
            2
        }

        fn boxed(&self) -> Box<dyn Reducer> {
            Box::new(Affine)
        }

        fn fold(&self, acc: &mut [u8], other: &[u8]) -> Result<(), String> {
            for (l, r) in acc.chunks_exact_mut(2).zip(other.chunks_exact(2)) {
                let (a, b) = (
                    l[0].wrapping_mul(r[0]),
                    r[0].wrapping_mul(l[1]).wrapping_add(r[1]),
                );
                l.copy_from_slice(&[a, b]);
            }
            Ok(())
        }
    }

    /// Member `m`'s source of `blocks` affine blocks, each `a` odd so that products keep
    /// information.
    fn source(m: u32, blocks: u64) -> Vec<u8> {
        let mut v = pattern(m, 9, blocks * 2);
        for pair in v.chunks_exact_mut(2) {
            pair[0] |= 1;
        }
        v
    }

    /// The serial reference: the sources folded left to right in member order.
    fn reference(n: u32, blocks: u64) -> Vec<u8> {
        let mut acc = source(0, blocks);
        for m in 1..n {
            Affine.fold(&mut acc, &source(m, blocks)).expect("folds");
        }
        acc
    }

    #[test]
    fn no_member_stages_more_than_the_bound() {
        for n in (1..=40u32).chain([63, 64, 65, 100, 128, 200]) {
            for blocks in [0u64, 1, 2, 7, 64, 301, 2000, 100_000] {
                for block in [2u64, 8, 16] {
                    for forced in [AllreduceAlgo::Doubling, AllreduceAlgo::Rabenseifner] {
                        let algo = algorithm(n, blocks, block, Some(forced));
                        let bound = stage_bound(n, blocks * block);
                        for m in 0..n {
                            let stage = allreduce(n, m, blocks, block, algo).stage;
                            assert!(stage <= bound, "n={n} m={m} {blocks}×{block}: {stage}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_member_gets_the_reduction_in_member_order_with_and_without_credits() {
        for n in 1..=33 {
            for blocks in [0, 1, 2, 3, 7, 8, 33, 64, 100, 1500] {
                for forced in [AllreduceAlgo::Doubling, AllreduceAlgo::Rabenseifner] {
                    let algo = algorithm(n, blocks, 2, Some(forced));
                    let want = reference(n, blocks);
                    for skip_credits in [false, true] {
                        check_folding(
                            "allreduce",
                            n,
                            |m| allreduce(n, m, blocks, 2, algo),
                            Some(&Affine),
                            skip_credits,
                            |m| source(m, blocks),
                            |_| want.clone(),
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn barriers_around_it_change_nothing() {
        for n in [2, 3, 6, 8] {
            let want = reference(n, 40);
            for (before, after) in [(true, false), (false, true), (true, true)] {
                check_folding(
                    "allreduce with barriers",
                    n,
                    |m| {
                        let algo = algorithm(n, 40, 2, Some(AllreduceAlgo::Rabenseifner));
                        synchronise(allreduce(n, m, 40, 2, algo), n, m, before, after)
                    },
                    Some(&Affine),
                    true,
                    |m| source(m, 40),
                    |_| want.clone(),
                );
            }
        }
    }

    #[test]
    fn the_length_chooses_and_rabenseifner_needs_a_block_per_member() {
        assert_eq!(algorithm(8, 1, 8, None), AllreduceAlgo::Doubling);
        assert_eq!(algorithm(8, 256, 8, None), AllreduceAlgo::Doubling);
        assert_eq!(algorithm(8, 257, 8, None), AllreduceAlgo::Rabenseifner);
        assert_eq!(
            algorithm(8, 7, 1024, Some(AllreduceAlgo::Rabenseifner)),
            AllreduceAlgo::Doubling
        );
        assert_eq!(
            algorithm(8, 1 << 20, 8, Some(AllreduceAlgo::Doubling)),
            AllreduceAlgo::Doubling
        );
    }

    #[test]
    fn rabenseifner_stages_less_than_doubling_and_moves_less() {
        let stage = |algo| allreduce(8, 3, 1 << 12, 8, algo).stage;
        assert_eq!(stage(AllreduceAlgo::Doubling), 4 * (8 << 12));
        // The vector, the received halves, the result and the first fold's half.
        assert!(stage(AllreduceAlgo::Rabenseifner) <= 4 * (8 << 12) - (8 << 9));
        let moved = |algo| -> u64 {
            allreduce(8, 3, 800, 1, algo)
                .steps
                .iter()
                .filter_map(|st| match st.task {
                    super::super::Task::Put { len, .. } => Some(len),
                    _ => None,
                })
                .sum()
        };
        assert_eq!(moved(AllreduceAlgo::Doubling), 3 * 800);
        assert_eq!(moved(AllreduceAlgo::Rabenseifner), 2 * 700);
    }
}
