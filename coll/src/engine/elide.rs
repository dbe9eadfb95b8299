//! Puts straight out of the caller's source: which copies into the stage a plan skips.
//!
//! Many schedules stage a block of the source only to put it out from there: a broadcast's
//! or a scatter's root, a gather's leaves, every block of an exchange. Towards a member
//! reached directly ([`gaspi::Context::reaches_directly`]) the runtime takes the bytes
//! from ordinary memory ([`gaspi::Batch::write_notify_from`]), so such a put can copy the
//! source into the receiver's stage itself, and the copy into this member's stage is one
//! pass over the data too many: for large collectives on one host, where copies are most of
//! the cost, a third of the bytes moved.
//!
//! A fold has the same pass too many wherever it combines a staged part of the source (an
//! allreduce's own contribution): it can read its operand from the source as well.
//!
//! Whatever its length: a put out of one part of the source goes with its signal in one
//! call, one look at its receiver as from the stage, and the copy is one call more (an 8 B
//! allreduce at 2 ranks took 3,186 instructions per initiating call with its copy, 3,012
//! without; callgrind, fat LTO, shm, direct). While the signal took a second look, copies
//! below 4 KiB were kept (putting out of the source made the v forms 0.1–0.2 µs slower at
//! 8 B). A copy `c` from the source into the stage is skipped when that is invisible:
//! * no other step of the schedule writes its stage range, and
//! * every step that reads any of it is
//!   * a put that depends on `c` directly, reads only stage bytes that such skipped copies
//!     fill, goes to a member reached directly, and waits for no data before it (a put
//!     after a wait could be meant to forward what arrived), or
//!   * a fold that depends on `c` directly and whose operands each lie within that range
//!     or outside it, where `c` gives no credit (no signal follows from it): a put of
//!     another member lands in this stage only after a signal of this member allowed it,
//!     so one that allowed a put into the range before `c` wrote it would have been
//!     overwritten, and the range receives nothing.
//!
//! The put then reads the source spans those copies would have staged, and so does the fold
//! for its operands within them. The schedule itself is unchanged (the simulator checks it
//! as written); a put that finds it cannot go directly after all fills the stage range
//! itself and puts from there.

use smallvec::SmallVec;

use crate::schedule::{Buf, Schedule, Span, StepId, Task};

/// A part of a put taken from the source: `span` of the source, to `offset` bytes into
/// the put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) offset: u64,
    pub(crate) span: Span,
}

/// What a plan takes from the source instead of the stage.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Elision {
    /// Per step: a copy into the stage that is skipped; empty when none is.
    skipped: Vec<bool>,
    /// Per step: for a put out of the source, its pieces in offset order; empty when no
    /// put goes out of the source.
    pieces: Vec<SmallVec<[Piece; 1]>>,
    /// Per step: for a fold, where in the source its left and right operands are read
    /// instead of the stage; empty when no fold reads the source.
    operands: Vec<[Option<Span>; 2]>,
}

impl Elision {
    /// What `schedule` can take from the source, its puts going to members for which
    /// `direct` holds.
    pub(crate) fn of(schedule: &Schedule, direct: impl Fn(u32) -> bool) -> Elision {
        let steps = &schedule.steps;
        let staged = |task: &Task| match *task {
            Task::Copy { from, into } if from.buf == Buf::Src && into.buf == Buf::Stage => {
                Some((from, into))
            }
            _ => None,
        };
        if !steps.iter().any(|s| staged(&s.task).is_some()) {
            return Elision::default();
        }
        let mut elision = Elision {
            skipped: vec![false; steps.len()],
            pieces: vec![SmallVec::new(); steps.len()],
            operands: vec![[None; 2]; steps.len()],
        };
        // Whether a step waits, itself or through what it depends on, for data from another
        // member (a credit carries none).
        let mut after_data = vec![false; steps.len()];
        for (id, step) in steps.iter().enumerate() {
            let data_wait = matches!(step.task, Task::Wait { .. })
                && !schedule.credits.contains(&(id as StepId));
            after_data[id] = data_wait || step.after.iter().any(|&b| after_data[b as usize]);
        }
        // Whether a signal follows from step `c`.
        let signals_after = |c: usize| {
            let mut after = vec![false; steps.len()];
            after[c] = true;
            steps.iter().enumerate().skip(c + 1).any(|(id, step)| {
                after[id] = step.after.iter().any(|&b| after[b as usize]);
                after[id] && matches!(step.task, Task::Signal { .. })
            })
        };
        let mut candidate: Vec<bool> = steps
            .iter()
            .enumerate()
            .map(|(id, step)| {
                let Some((_, into)) = staged(&step.task) else {
                    return false;
                };
                let mut folded = false;
                let alone = steps.iter().enumerate().all(|(other, s)| {
                    other == id
                        || (!writes_stage(&s.task, into)
                            && match s.task {
                                Task::Put { to, from, len, .. } if overlap(from, len, into) => {
                                    s.after.contains(&(id as StepId))
                                        && !after_data[other]
                                        && direct(to)
                                }
                                Task::Fold { left, right, .. } if reads_stage(&s.task, into) => {
                                    folded = true;
                                    s.after.contains(&(id as StepId))
                                        && [left, right].iter().all(|op| {
                                            within(*op, into) || !overlap(op.at, op.len, into)
                                        })
                                }
                                _ => !reads_stage(&s.task, into),
                            })
                });
                alone && !(folded && signals_after(id))
            })
            .collect();
        // A put must find all its bytes in candidate copies; where one does not, none of
        // the copies it reads is skipped, which may leave another put short: until none is.
        loop {
            let mut changed = false;
            for step in steps {
                let Task::Put { from, len, .. } = step.task else {
                    continue;
                };
                let feeding = |c: &StepId| {
                    staged(&steps[*c as usize].task)
                        .is_some_and(|(_, into)| candidate[*c as usize] && overlap(from, len, into))
                };
                if !step.after.iter().any(feeding) {
                    continue;
                }
                let covered: u64 = step
                    .after
                    .iter()
                    .filter(|c| feeding(c))
                    .filter_map(|&c| staged(&steps[c as usize].task))
                    .map(|(_, into)| into.end().min(from + len) - into.at.max(from))
                    .sum();
                // Candidate copies' ranges never overlap (none writes another's), so the
                // sum is the covered length.
                if covered != len {
                    let short: SmallVec<[StepId; 4]> =
                        step.after.iter().copied().filter(|c| feeding(c)).collect();
                    for c in short {
                        candidate[c as usize] = false;
                    }
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for (id, step) in steps.iter().enumerate() {
            if let Task::Put { from, len, .. } = step.task {
                let mut pieces: SmallVec<[Piece; 1]> = step
                    .after
                    .iter()
                    .filter(|&&c| candidate[c as usize])
                    .filter_map(|&c| staged(&steps[c as usize].task))
                    .filter(|&(_, into)| overlap(from, len, into))
                    .map(|(src, into)| {
                        let at = into.at.max(from);
                        Piece {
                            offset: at - from,
                            span: Span {
                                buf: Buf::Src,
                                at: src.at + (at - into.at),
                                len: into.end().min(from + len) - at,
                            },
                        }
                    })
                    .collect();
                pieces.sort_by_key(|p| p.offset);
                elision.pieces[id] = pieces;
            }
            if let Task::Fold { left, right, .. } = step.task {
                // Each operand within a skipped copy it follows reads the source instead.
                let from_source = |op: Span| {
                    step.after
                        .iter()
                        .filter(|&&c| candidate[c as usize])
                        .filter_map(|&c| staged(&steps[c as usize].task))
                        .find(|&(_, into)| within(op, into))
                        .map(|(src, into)| Span::src(src.at + (op.at - into.at), op.len))
                };
                elision.operands[id] = [from_source(left), from_source(right)];
            }
            elision.skipped[id] = candidate[id];
        }
        elision
    }

    /// Whether copy `id` is skipped.
    pub(crate) fn skipped(&self, id: StepId) -> bool {
        self.skipped.get(id as usize).copied().unwrap_or(false)
    }

    /// The pieces of put `id` out of the source; none for a put from the stage.
    pub(crate) fn pieces(&self, id: StepId) -> &[Piece] {
        self.pieces.get(id as usize).map_or(&[], |p| p.as_slice())
    }

    /// Where fold `id` reads its left and right operands in the source, each `None` when
    /// it reads the stage.
    pub(crate) fn operands(&self, id: StepId) -> [Option<Span>; 2] {
        self.operands.get(id as usize).copied().unwrap_or([None; 2])
    }

    /// Whether step `id` reads the source where its schedule says the stage.
    pub(crate) fn reads_source(&self, id: StepId) -> bool {
        !self.pieces(id).is_empty() || self.operands(id).iter().any(Option::is_some)
    }
}

/// Whether stage span `op` lies within stage span `span`.
fn within(op: Span, span: Span) -> bool {
    op.len > 0 && span.at <= op.at && op.end() <= span.end()
}

/// Whether stage range `len` bytes from `at` overlaps `span` (a stage span).
fn overlap(at: u64, len: u64, span: Span) -> bool {
    len > 0 && at < span.end() && span.at < at + len
}

/// Whether `task` reads any byte of stage span `span`.
fn reads_stage(task: &Task, span: Span) -> bool {
    match *task {
        Task::Put { from, len, .. } => overlap(from, len, span),
        Task::Copy { from, .. } => from.buf == Buf::Stage && overlap(from.at, from.len, span),
        Task::Fold { left, right, .. } => {
            overlap(left.at, left.len, span) || overlap(right.at, right.len, span)
        }
        Task::Signal { .. } | Task::Wait { .. } => false,
    }
}

/// Whether `task` writes any byte of stage span `span`.
fn writes_stage(task: &Task, span: Span) -> bool {
    match *task {
        Task::Copy { into, .. } => into.buf == Buf::Stage && overlap(into.at, into.len, span),
        Task::Fold { into, .. } => overlap(into.at, into.len, span),
        Task::Put { .. } | Task::Signal { .. } | Task::Wait { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of the source (any length goes out of the source).
    const B: u64 = 64;

    #[test]
    fn a_staged_block_put_directly_comes_from_the_source() {
        let mut s = Schedule::new();
        let copy = s.copy(Span::src(100, B), Span::stage(0, B), &[]).unwrap();
        let credit = s.wait(1, 7, &[]);
        s.credits.push(credit);
        let put = s.put(1, 0, 32, B, 3, &[copy, credit]);
        let e = Elision::of(&s, |_| true);
        assert!(e.skipped(copy));
        let whole = Piece {
            offset: 0,
            span: Span::src(100, B),
        };
        assert_eq!(e.pieces(put), &[whole]);
        // Towards a member reached through the fabric the copy stays.
        let e = Elision::of(&s, |_| false);
        assert!(!e.skipped(copy) && e.pieces(put).is_empty());
    }

    #[test]
    fn a_put_packed_from_two_copies_takes_both_pieces() {
        let mut s = Schedule::new();
        let a = s
            .copy(Span::src(5 * B, 2 * B), Span::stage(0, 2 * B), &[])
            .unwrap();
        let b = s.copy(Span::src(0, B), Span::stage(2 * B, B), &[]).unwrap();
        let put = s.put(2, 0, 0, 3 * B, 1, &[a, b]);
        let e = Elision::of(&s, |_| true);
        assert!(e.skipped(a) && e.skipped(b));
        let pieces = [
            Piece {
                offset: 0,
                span: Span::src(5 * B, 2 * B),
            },
            Piece {
                offset: 2 * B,
                span: Span::src(0, B),
            },
        ];
        assert_eq!(e.pieces(put), &pieces);
    }

    /// The bytes the copies from the source into the stage that `schedule` keeps move, and
    /// those of all its copies from the source into the stage.
    fn staged_bytes(schedule: &Schedule) -> (u64, u64) {
        let e = Elision::of(schedule, |_| true);
        let mut kept_and_all = (0, 0);
        for (id, step) in schedule.steps.iter().enumerate() {
            if let Task::Copy { from, into } = step.task {
                if from.buf == Buf::Src && into.buf == Buf::Stage {
                    kept_and_all.1 += from.len;
                    if !e.skipped(id as StepId) {
                        kept_and_all.0 += from.len;
                    }
                }
            }
        }
        kept_and_all
    }

    #[test]
    fn the_algorithms_that_stage_only_to_put_skip_it() {
        use crate::schedule::all::{exchange, gather_all, ExchangeAlgo, GatherAllAlgo};
        use crate::schedule::tree::Tree;
        use crate::schedule::{broadcast::broadcast, gather::gather, scatter::scatter};
        let len = B + 1000;
        for n in 2..=9 {
            for me in 0..n {
                let skipped_all = |s: &Schedule, what: &str| {
                    let (kept, all) = staged_bytes(s);
                    assert_eq!(kept, 0, "{what}, n = {n}, member {me}: {all} staged");
                };
                skipped_all(&exchange(n, me, len, ExchangeAlgo::Pairwise), "pairwise");
                for tree in [Tree::Flat, Tree::Binomial, Tree::Knomial(3)] {
                    skipped_all(&broadcast(n, me, 0, len, tree), "broadcast");
                    skipped_all(&scatter(n, me, n - 1, len, tree), "scatter");
                }
                // In a deeper tree a member puts its own block together with its
                // children's, which arrived first: only the leaves skip.
                skipped_all(&gather(n, me, 0, len, Tree::Flat), "flat gather");
                // The ring puts the member's own block out of the source; what it forwards
                // arrived first.
                skipped_all(&gather_all(n, me, len, GatherAllAlgo::Ring), "ring");
            }
        }
    }

    #[test]
    fn a_fold_of_a_staged_block_reads_the_source() {
        let mut s = Schedule::new();
        let copy = s.copy(Span::src(100, B), Span::stage(0, B), &[]).unwrap();
        let got = s.wait(1, 1, &[]);
        let fold = s.fold(B, 0, 2 * B, B, &[copy, got]);
        // Through the fabric too: the fold reads this member's memory only.
        let e = Elision::of(&s, |_| false);
        assert!(e.skipped(copy) && e.reads_source(fold));
        assert_eq!(e.operands(fold), [None, Some(Span::src(100, B))]);

        // A credit given after the copy may let a put land in its range.
        let credit = s.signal(1, 2, &[copy]);
        s.credits.push(credit);
        let e = Elision::of(&s, |_| true);
        assert!(!e.skipped(copy) && e.operands(fold) == [None, None]);

        // An operand reaching beyond the copy, or a fold into it, keeps it.
        for (left, into) in [(B / 2, 3 * B), (0, 0)] {
            let mut s = Schedule::new();
            let copy = s.copy(Span::src(0, B), Span::stage(0, B), &[]).unwrap();
            let got = s.wait(1, 1, &[]);
            let fold = s.fold(left, 2 * B, into, B, &[copy, got]);
            let e = Elision::of(&s, |_| true);
            assert!(
                !e.skipped(copy) && !e.reads_source(fold),
                "{left} into {into}"
            );
        }
    }

    #[test]
    fn a_long_allreduce_reads_its_source_where_it_is() {
        use crate::schedule::reduce::{allreduce, AllreduceAlgo};
        let blocks = 64 * B / 8;
        for n in [2, 4, 5, 8] {
            for me in 0..n {
                let s = allreduce(n, me, blocks, 8, AllreduceAlgo::Rabenseifner);
                // Directly, every copy of the source is skipped: its bytes go out or are
                // folded straight from the source.
                let (kept, all) = staged_bytes(&s);
                assert_eq!(kept, 0, "n = {n}, member {me}: {kept} of {all} staged");
                // An even paired member (of a size not a power of two) only puts its vector.
                let paired_even = me < 2 * (n - (1 << n.ilog2())) && me % 2 == 0;
                // Through the fabric, a member's first fold (of the half it keeps, or of its
                // pair's vectors) still reads its source.
                let e = Elision::of(&s, |_| false);
                let folds_from_source = (0..s.steps.len() as StepId)
                    .filter(|&id| e.operands(id).iter().any(Option::is_some))
                    .count();
                let folds = usize::from(!paired_even);
                assert_eq!(folds_from_source, folds, "n = {n}, member {me}");
            }
        }
    }

    #[test]
    fn a_short_allreduce_puts_and_folds_out_of_the_source() {
        use crate::schedule::reduce::{allreduce, AllreduceAlgo};
        // 8 B at 2 members: the put goes out of the source with its signal, and the fold
        // reads the member's own operand where it lies.
        for me in 0..2 {
            let s = allreduce(2, me, 1, 8, AllreduceAlgo::Doubling);
            let e = Elision::of(&s, |_| true);
            assert_eq!(staged_bytes(&s).0, 0, "member {me}");
            let puts = (0..s.steps.len() as StepId).filter(|&id| !e.pieces(id).is_empty());
            assert_eq!(puts.count(), 1, "member {me}");
            let folds = (0..s.steps.len() as StepId)
                .filter(|&id| e.operands(id).iter().flatten().count() == 1);
            assert_eq!(folds.count(), 1, "member {me}");
        }
    }

    #[test]
    fn staged_data_read_otherwise_stays_staged() {
        // Folded as well as put (an allreduce's own contribution).
        let mut s = Schedule::new();
        let copy = s.copy(Span::src(0, B), Span::stage(0, B), &[]).unwrap();
        s.put(1, 0, B, B, 1, &[copy]);
        let got = s.wait(1, 1, &[]);
        s.fold(0, B, 0, B, &[copy, got]);
        assert_eq!(staged_bytes(&s), (B, B));

        // Put after data arrived: it may forward what arrived into the same range.
        let mut s = Schedule::new();
        let copy = s.copy(Span::src(0, B), Span::stage(0, B), &[]).unwrap();
        let got = s.wait(1, 1, &[]);
        let put = s.put(2, 0, 0, B, 1, &[copy, got]);
        let e = Elision::of(&s, |_| true);
        assert!(!e.skipped(copy) && e.pieces(put).is_empty());

        // A put reading beyond the copy: the rest is staged otherwise.
        let mut s = Schedule::new();
        let copy = s.copy(Span::src(0, B), Span::stage(0, B), &[]).unwrap();
        let put = s.put(1, 0, 0, 2 * B, 1, &[copy]);
        let e = Elision::of(&s, |_| true);
        assert!(!e.skipped(copy) && e.pieces(put).is_empty());

        // Nothing depends on the copy directly.
        let mut s = Schedule::new();
        let copy = s.copy(Span::src(0, B), Span::stage(0, B), &[]).unwrap();
        let sig = s.signal(1, 2, &[copy]);
        let put = s.put(1, 0, 0, B, 1, &[sig]);
        let e = Elision::of(&s, |_| true);
        assert!(!e.skipped(copy) && e.pieces(put).is_empty());

        // Two puts of one copy, one of them to a member reached through the fabric.
        let mut s = Schedule::new();
        let copy = s.copy(Span::src(0, B), Span::stage(0, B), &[]).unwrap();
        let near = s.put(1, 0, 0, B, 1, &[copy]);
        let far = s.put(2, 0, 0, B, 1, &[copy]);
        let e = Elision::of(&s, |to| to == 1);
        assert!(!e.skipped(copy) && e.pieces(near).is_empty() && e.pieces(far).is_empty());
    }
}
