//! Collectives as data: a [`Schedule`] is what one member does in one collective — a
//! dependency graph of puts, signals, waits, local copies and folds over member indices and
//! byte ranges — computed by an algorithm from the team size, the member's index and the call's
//! arguments, free of any transport call. The engine runs schedules on the runtime; the
//! simulator (`sim`, in tests) runs every member's schedule of a call together and compares
//! what each member ends with against a serial reference.
//!
//! # Buffers
//! A schedule touches three buffers of its member: [`Buf::Src`] (the caller's input, read
//! only), [`Buf::Dst`] (the caller's output, written only) and [`Buf::Stage`] (this call's
//! staging area in a library segment). Remote operations go from stage to stage only: a
//! [`Task::Put`] writes part of this member's stage into another member's stage, and local
//! [`Task::Copy`] steps move data between the caller's buffers and the stage. So the
//! caller's buffers may be ordinary memory, and an algorithm never needs to know where they
//! are.
//!
//! # Signals
//! A put raises a *signal* at its receiver once its data has landed (never before); a
//! [`Task::Signal`] raises one without data, as a credit ("my stage is ready for you") or a
//! synchronisation; a [`Task::Wait`] waits for one. Signals are numbered per receiver: within
//! one schedule, every signal raised is waited for exactly once, and a signal is raised again
//! (if at all) only once its receiver waited for the previous raise, as its raising step
//! follows from that wait through the steps between; numbers stay below [`signal_bound`],
//! split between the algorithm ([`algorithm_signals`]) and the synchronisation the modes add
//! ([`sync`]).
//!
//! # The caller's buffers
//! The engine takes the steps that touch the caller's buffers differently: a copy from the
//! source runs only in a call that holds the collective's handle, and a copy into the
//! destination is deferred to the handle's sync (and counts as done for the steps after it).
//! So a stage range copied into the destination must never be written again within the
//! schedule; the simulator defers those copies the same way, so a schedule that breaks the
//! rule ends with the wrong bytes. A schedule that must reuse such a range (`exchangev`, which
//! streams a block's chunks through one slot) sets [`Schedule::capture`]: a copy into the
//! destination taken outside the handle's calls then reads its bytes out of the stage at once,
//! into memory of the run, and writes them into the destination at the sync.
//!
//! # Folds
//! A [`Task::Fold`] combines two stage ranges with the run's operator (a [`Reducer`], given
//! to the engine with the schedule) into a third, `into = left ⊕ right`; `into` may be one of
//! the two. The operand order is the schedule's: an algorithm that keeps a fixed order of
//! folds gives the same bits on every member, and non-commutative operators see their
//! operands in the order the algorithm documents. A fold writes its stage range like a copy
//! does, under the same rules.
//!
//! # Credits the engine may skip
//! A credit tells a sender that its receiver's stage is free for this run. A schedule may
//! list its credit steps in [`Schedule::credits`] when every put lands in a range that its
//! receiver never writes before the put's signal arrived (only the source copy, into
//! ranges no put lands in, may come earlier): then the data may come before its receiver
//! started the run. A listed credit waits for no step but listed ones, as a step held back by
//! another would run after all on one member while its partner skipped it. The engine skips
//! them (takes them as done at the start, on every member alike) where the order of runs
//! proves the receivers' stage free (see the engine's documentation); `gathering` says
//! whether this schedule can serve as that proof for the next run on its lane.
//!
//! Every algorithm lists its credits: each receives every put into a range of its own, so a
//! credit says no more than "my stage is free for this run", which the engine can know
//! without it (each module says why its ranges are safe). Only `exchangev` keeps some: it
//! streams a block's chunks through one slot, and the credit of a later chunk says the chunk
//! before was moved out of it, an order within the run, which nothing between runs gives. The
//! simulator's `check` runs every schedule skipping its listed credits as well as waiting for
//! them, so a credit listed wrongly ends with the wrong bytes.
//!
//! # Order
//! Steps depend only on earlier steps (by index), so the list is a topological order, and a
//! step may start once every step it names in [`Step::after`] is done. A put is done for its
//! dependents once posted: an algorithm overwrites a stage range it has put from only in a
//! step that follows from its receiver's wait for that put's signal (the data landed, so the
//! put no longer reads it; the simulator checks it), so no step needs to wait for local
//! completion. A schedule is complete when every step is done and its puts have completed
//! locally.

pub(crate) mod all;
pub(crate) mod broadcast;
pub(crate) mod gather;
pub(crate) mod reduce;
pub(crate) mod scatter;
pub(crate) mod sync;
pub(crate) mod tree;

#[cfg(test)]
pub(crate) mod sim;

/// A buffer of the member running the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Buf {
    /// The caller's input.
    Src,
    /// The caller's output.
    Dst,
    /// The call's staging area in the library's segment.
    Stage,
}

/// `len` bytes of buffer `buf` from byte `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) buf: Buf,
    pub(crate) at: u64,
    pub(crate) len: u64,
}

impl Span {
    pub(crate) fn src(at: u64, len: u64) -> Span {
        Span {
            buf: Buf::Src,
            at,
            len,
        }
    }

    pub(crate) fn dst(at: u64, len: u64) -> Span {
        Span {
            buf: Buf::Dst,
            at,
            len,
        }
    }

    pub(crate) fn stage(at: u64, len: u64) -> Span {
        Span {
            buf: Buf::Stage,
            at,
            len,
        }
    }

    /// The byte after the span.
    pub(crate) fn end(&self) -> u64 {
        self.at + self.len
    }
}

/// A signal number at its receiver.
pub(crate) type Signal = u32;

/// What a signal tells its receiver beyond the run it belongs to: a number its sender and
/// receiver compute alike from their own arguments where they may disagree without the
/// run's value showing it (an exchangev block's size, which only its two ends know), mixed
/// into the notification's value, so that a disagreement is reported where the signal is
/// taken; [`NO_CHECK`] for nothing more.
pub(crate) type Check = u64;

/// The [`Check`] of a signal that tells nothing beyond its run.
pub(crate) const NO_CHECK: Check = 0;

/// One thing a member does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Task {
    /// Writes `len` bytes of this member's stage from `from` into member `to`'s stage at
    /// `into`, then raises `signal` at `to`: the signal is never seen before the data.
    Put {
        to: u32,
        from: u64,
        into: u64,
        len: u64,
        signal: Signal,
        check: Check,
    },
    /// Raises `signal` at member `to`, without data.
    Signal {
        to: u32,
        signal: Signal,
        check: Check,
    },
    /// Waits until member `from` raised `signal` here (and, for a put, its data is here),
    /// which it did with the same `check`.
    Wait {
        from: u32,
        signal: Signal,
        check: Check,
    },
    /// Copies `from` into `into` (the same length) within this member.
    Copy { from: Span, into: Span },
    /// Folds the stage ranges `left` and `right` (the same length, whole blocks of the
    /// operator) into the stage range `into`: `into = left ⊕ right`. `into` is one of the
    /// two or overlaps neither, so the engine may fold piece by piece.
    Fold { left: Span, right: Span, into: Span },
}

/// A run's operator, as the engine and the simulator fold with it.
pub(crate) trait Reducer: Send {
    /// Bytes of one block: folds take whole blocks, and a schedule never splits one.
    fn block(&self) -> u64;
    /// The same operator, for another run (a piece of the same collective).
    fn boxed(&self) -> Box<dyn Reducer>;
    /// `acc = acc ⊕ other` (`acc` the left operand), both whole blocks of the same length;
    /// `acc` and `other` start at 8-byte-aligned addresses, so they can be viewed as any
    /// element type without copying.
    fn fold(&self, acc: &mut [u8], other: &[u8]) -> Result<(), String>;
    /// Whether the operator folds into its right operand too ([`fold_right`]); a user
    /// operator folds into its left one only.
    ///
    /// [`fold_right`]: Self::fold_right
    fn folds_right(&self) -> bool {
        false
    }
    /// `acc = left ⊕ acc` (`acc` the right operand), as [`fold`](Self::fold) otherwise;
    /// called only where [`folds_right`](Self::folds_right) holds.
    fn fold_right(&self, left: &[u8], acc: &mut [u8]) -> Result<(), String> {
        let _ = (left, acc);
        Err("the operator folds into its left operand only".into())
    }
}

/// A byte buffer at an 8-byte-aligned address, as [`Reducer::fold`] takes its operands.
pub(crate) struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> Aligned {
        Aligned {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// Makes it `len` bytes long, keeping its allocation; the bytes are unspecified (every
    /// user overwrites them all).
    pub(crate) fn resize(&mut self, len: usize) {
        self.words.resize(len.div_ceil(8), 0);
        self.len = len;
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// The index of a step in its schedule.
pub(crate) type StepId = u32;

/// A task and the earlier steps it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) task: Task,
    pub(crate) after: Vec<StepId>,
}

/// What one member does in one collective: see the [module documentation](self).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub(crate) steps: Vec<Step>,
    /// Bytes of stage the schedule uses on this member.
    pub(crate) stage: u64,
    /// The credit steps (the signals that give credits and the waits for them, a wait after
    /// its member's own signals) that the engine may skip: see "Credits the engine may skip"
    /// in the [module documentation](self).
    pub(crate) credits: Vec<StepId>,
    /// Whether a member completes the schedule only once every member started it (every
    /// member's data reaches every other).
    pub(crate) gathering: bool,
    /// Whether the copies into the destination capture their bytes when taken, so the stage
    /// ranges they copy may be written again (see "The caller's buffers" in the
    /// [module documentation](self)).
    pub(crate) capture: bool,
}

/// Signal numbers an algorithm may use in a team of `n` members: `0..algorithm_signals(n)`
/// (a data signal and a credit per member, and room for the segments of a pipeline).
pub(crate) fn algorithm_signals(n: u32) -> Signal {
    2 * n + 64
}

/// Signal numbers a schedule of a team of `n` members may use in all: the algorithm's, then
/// those of the synchronisation the modes add.
pub(crate) fn signal_bound(n: u32) -> Signal {
    algorithm_signals(n) + sync::SIGNALS
}

impl Schedule {
    /// An empty schedule.
    pub(crate) fn new() -> Schedule {
        Schedule::default()
    }

    /// Appends `task`, to run after the steps `after`; returns its id.
    pub(crate) fn push(&mut self, task: Task, after: &[StepId]) -> StepId {
        debug_assert!(
            after.iter().all(|&s| (s as usize) < self.steps.len()),
            "a step depends on a later one"
        );
        for span in task.spans() {
            if span.buf == Buf::Stage {
                self.stage = self.stage.max(span.end());
            }
        }
        let id = self.steps.len() as StepId;
        self.steps.push(Step {
            task,
            after: after.to_vec(),
        });
        id
    }

    /// Puts `len` bytes of the stage from `from` into member `to`'s stage at `into`, raising
    /// `signal` there, after `after`.
    pub(crate) fn put(
        &mut self,
        to: u32,
        from: u64,
        into: u64,
        len: u64,
        signal: Signal,
        after: &[StepId],
    ) -> StepId {
        self.push(
            Task::Put {
                to,
                from,
                into,
                len,
                signal,
                check: NO_CHECK,
            },
            after,
        )
    }

    /// Raises `signal` at member `to` after `after`.
    pub(crate) fn signal(&mut self, to: u32, signal: Signal, after: &[StepId]) -> StepId {
        self.push(
            Task::Signal {
                to,
                signal,
                check: NO_CHECK,
            },
            after,
        )
    }

    /// Waits for `signal` from member `from` after `after`.
    pub(crate) fn wait(&mut self, from: u32, signal: Signal, after: &[StepId]) -> StepId {
        self.push(
            Task::Wait {
                from,
                signal,
                check: NO_CHECK,
            },
            after,
        )
    }

    /// Makes the signal that step `id` raises or waits for carry `with` (see [`Check`]).
    pub(crate) fn check(&mut self, id: StepId, with: Check) {
        match &mut self.steps[id as usize].task {
            Task::Put { check, .. } | Task::Signal { check, .. } | Task::Wait { check, .. } => {
                *check = with;
            }
            task => unreachable!("step {id} ({task:?}) raises no signal to check"),
        }
    }

    /// Copies `from` into `into` after `after`; an empty copy is not recorded, and `after`'s
    /// last step (if any) stands for it.
    pub(crate) fn copy(&mut self, from: Span, into: Span, after: &[StepId]) -> Option<StepId> {
        debug_assert_eq!(from.len, into.len, "a copy between spans of other lengths");
        if from.len == 0 {
            return after.last().copied();
        }
        Some(self.push(Task::Copy { from, into }, after))
    }

    /// Folds the stage ranges at `left` and `right` into the one at `into`, `len` bytes
    /// each (`into = left ⊕ right`), after `after`.
    pub(crate) fn fold(
        &mut self,
        left: u64,
        right: u64,
        into: u64,
        len: u64,
        after: &[StepId],
    ) -> StepId {
        let span = |at| Span::stage(at, len);
        self.push(
            Task::Fold {
                left: span(left),
                right: span(right),
                into: span(into),
            },
            after,
        )
    }

    /// Moves every stage range of the schedule `by` bytes up.
    pub(crate) fn shift_stage(&mut self, by: u64) {
        let shift = |span: &mut Span| {
            if span.buf == Buf::Stage {
                span.at += by;
            }
        };
        for step in &mut self.steps {
            match &mut step.task {
                Task::Put { from, into, .. } => {
                    *from += by;
                    *into += by;
                }
                Task::Copy { from, into } => {
                    shift(from);
                    shift(into);
                }
                Task::Fold { left, right, into } => {
                    shift(left);
                    shift(right);
                    shift(into);
                }
                Task::Signal { .. } | Task::Wait { .. } => {}
            }
        }
        self.stage += by;
    }

    /// The steps no other step waits for: where the schedule ends.
    pub(crate) fn sinks(&self) -> Vec<StepId> {
        let mut waited = vec![false; self.steps.len()];
        for step in &self.steps {
            for &s in &step.after {
                waited[s as usize] = true;
            }
        }
        (0..self.steps.len() as StepId)
            .filter(|&s| !waited[s as usize])
            .collect()
    }

    /// The steps that wait for nothing: where the schedule starts.
    pub(crate) fn sources(&self) -> Vec<StepId> {
        (0..self.steps.len() as StepId)
            .filter(|&s| self.steps[s as usize].after.is_empty())
            .collect()
    }
}

impl Task {
    /// The local spans the task reads or writes.
    pub(crate) fn spans(&self) -> Vec<Span> {
        match *self {
            Task::Put { from, len, .. } => vec![Span::stage(from, len)],
            Task::Copy { from, into } => vec![from, into],
            Task::Fold { left, right, into } => vec![left, right, into],
            Task::Signal { .. } | Task::Wait { .. } => Vec::new(),
        }
    }
}

/// A bound on any member's staging in a broadcast, scatter(v), gather(v) or gather_all(v)
/// whose blocks add up to `total` bytes (a broadcast's one block): no algorithm of theirs
/// stages a block twice on one member; checked for every algorithm in the tests. Below it,
/// a member knows that every member's staging fits a lane without computing the others'
/// schedules, which a 1 MiB call at 8 members would otherwise do on every call.
pub(crate) fn stage_bound(total: u64) -> u64 {
    total
}

#[cfg(test)]
mod tests {
    use super::all::{ExchangeAlgo, GatherAllAlgo};
    use super::tree::tests::{irregular, TREES};
    use super::*;

    #[test]
    fn no_member_stages_more_than_its_operations_bound() {
        for n in (1..=17u32).chain([31, 32, 33, 63, 64, 65, 100]) {
            for bytes in [1u64, 7, 100, 4096] {
                let counts: Vec<u64> = irregular(n).iter().map(|c| c * bytes / 4 + 1).collect();
                let (every, each) = (u64::from(n) * bytes, counts.iter().sum::<u64>());
                for me in 0..n {
                    let mut stages = Vec::new();
                    for &tree in &TREES {
                        for r in [0, n / 2, n - 1] {
                            let b = broadcast::broadcast(n, me, r, bytes, tree);
                            stages.push(("broadcast", b, stage_bound(bytes)));
                            let s = scatter::scatter(n, me, r, bytes, tree);
                            stages.push(("scatter", s, stage_bound(every)));
                            let s = scatter::scatterv(n, me, r, &counts, tree);
                            stages.push(("scatterv", s, stage_bound(each)));
                            let g = gather::gather(n, me, r, bytes, tree);
                            stages.push(("gather", g, stage_bound(every)));
                            let g = gather::gatherv(n, me, r, &counts, tree);
                            stages.push(("gatherv", g, stage_bound(each)));
                        }
                    }
                    for algo in [GatherAllAlgo::Ring, GatherAllAlgo::Dissemination] {
                        let a = all::gather_all(n, me, bytes, algo);
                        stages.push(("gather_all", a, stage_bound(every)));
                        let a = all::gather_allv(n, me, &counts, algo);
                        stages.push(("gather_allv", a, stage_bound(each)));
                    }
                    for algo in [ExchangeAlgo::Pairwise, ExchangeAlgo::Bruck] {
                        let e = all::exchange(n, me, bytes, algo);
                        stages.push(("exchange", e, all::exchange_stage_bound(n, bytes, algo)));
                    }
                    for (op, s, bound) in stages {
                        assert!(
                            s.stage <= bound,
                            "{op} n={n} me={me} bytes={bytes}: {} > {bound}",
                            s.stage
                        );
                    }
                }
            }
        }
    }
}
