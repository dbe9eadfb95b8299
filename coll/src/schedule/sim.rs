//! The schedule simulator: runs every member's schedule of one call together, in an order
//! drawn from a seed, moving real bytes, and checks the rules of the
//! [module documentation](super) on the way:
//! * a wait is matched by exactly one put or signal of the member it names, and every signal
//!   raised is waited for; numbers stay below [`signal_bound`];
//! * no put lands in, and no copy writes over, a stage range its member has put from (an
//!   outgoing put may still be reading it), unless the writing step follows from the put's
//!   receiver having waited for its signal; for a put landing, that is the sender's put, as
//!   it writes whenever the sender posts it, whatever its receiver knows. What a step follows
//!   from is tracked per step, along its dependencies and from a wait to the step that raised
//!   its signal: the engine runs steps that no such path orders in any order, or at once, so
//!   a wait that merely ran earlier in the drawn order orders nothing after it;
//! * every access stays within the buffers (the stage within the schedule's `stage`);
//! * the schedules never deadlock, whatever order ready steps run in;
//! * copies into the destination are carried out at the very end, as the engine defers
//!   them: a schedule that writes over a stage range after copying it out ends with the
//!   wrong bytes (unless it captures them, [`Schedule::capture`]: then their bytes are read
//!   when they are taken);
//! * folds run with the call's [`Reducer`], through aligned buffers as in the engine, and
//!   write their stage range under the same rules as copies;
//! * the credits a schedule lists may be skipped, as the engine does when it can: a schedule
//!   whose receivers write a range before its data arrived then ends with the wrong bytes;
//! * a member of a [gathering](Schedule::gathering) schedule completes only after a step of
//!   every other member, through waits directly or through others: the engine skips a compact
//!   run's credits because a member that completed the lane's run before proves every member
//!   started that one. What a step follows from is tracked as for the rule on puts above.
//!
//! Algorithm tests compare what each member ends with in its destination against a serial
//! reference, for every team size 1..=33 and several orders, waiting for every credit and
//! (through [`check`]) skipping the listed ones too: a schedule must be right both ways, as
//! the engine runs it both ways.

use std::collections::HashMap;

use super::{signal_bound, Aligned, Buf, Check, Reducer, Schedule, Signal, Span, Task};

/// One member's memory during a simulation.
struct Member {
    src: Vec<u8>,
    dst: Vec<u8>,
    stage: Vec<u8>,
    /// The puts of this member.
    sent: Vec<Sent>,
    /// Signals raised here and not yet waited for: by number, who raised it.
    raised: HashMap<Signal, Raised>,
    /// Per step, once run, the waits it follows from (a wait's own among them).
    past: Vec<Waits>,
}

/// A put, for the rule on writing over its stage range.
struct Sent {
    from: u64,
    len: u64,
    /// The receiver's wait for its signal, once taken.
    seen: Option<usize>,
}

/// A signal raised and not yet waited for.
struct Raised {
    by: u32,
    check: Check,
    /// The put that raised it, by its index in the raiser's `sent`.
    put: Option<usize>,
    /// The waits the raising step follows from.
    past: Waits,
}

/// A set of the waits of a run, each by its place in the order they were taken in.
#[derive(Clone, Default)]
struct Waits(Vec<u64>);

impl Waits {
    fn insert(&mut self, wait: usize) {
        let word = wait / 64;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (wait % 64);
    }

    fn contains(&self, wait: usize) -> bool {
        self.0
            .get(wait / 64)
            .is_some_and(|word| word >> (wait % 64) & 1 == 1)
    }

    fn merge(&mut self, other: &Waits) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0) {
            *mine |= theirs;
        }
    }
}

impl Member {
    fn buf(&mut self, buf: Buf) -> &mut Vec<u8> {
        match buf {
            Buf::Src => &mut self.src,
            Buf::Dst => &mut self.dst,
            Buf::Stage => &mut self.stage,
        }
    }

    fn read(&mut self, span: Span, who: &str) -> Vec<u8> {
        let buf = self.buf(span.buf);
        assert!(
            span.end() <= buf.len() as u64,
            "{who}: reads {span:?} beyond its {} bytes",
            buf.len()
        );
        buf[span.at as usize..span.end() as usize].to_vec()
    }

    /// Writes `data` into `span` for a step that follows from the waits `past` (the writing
    /// step may be another member's put).
    fn write(&mut self, span: Span, data: &[u8], past: &Waits, who: &str) {
        assert_ne!(span.buf, Buf::Src, "{who}: writes into its source");
        if span.buf == Buf::Stage {
            self.check_unsent(span.at, span.len, past, who);
        }
        let buf = self.buf(span.buf);
        assert!(
            span.end() <= buf.len() as u64,
            "{who}: writes {span:?} beyond its {} bytes",
            buf.len()
        );
        buf[span.at as usize..span.end() as usize].copy_from_slice(data);
    }

    fn check_unsent(&self, at: u64, len: u64, past: &Waits, who: &str) {
        for put in &self.sent {
            let apart =
                len == 0 || put.len == 0 || at + len <= put.from || put.from + put.len <= at;
            let landed = put.seen.is_some_and(|wait| past.contains(wait));
            assert!(
                apart || landed,
                "{who}: stage {at}..{} overwritten while a put from {}..{} may read it",
                at + len,
                put.from,
                put.from + put.len
            );
        }
    }
}

/// A small deterministic generator for the order of steps.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Runs `schedules` (member `m`'s at index `m`) with member `m`'s source `srcs[m]` and a
/// destination of `dst_lens[m]` bytes, choosing among ready steps by `seed`; returns every
/// member's destination. Panics, naming the member and step, when a rule is broken.
pub(crate) fn run(
    schedules: &[Schedule],
    srcs: Vec<Vec<u8>>,
    dst_lens: &[u64],
    seed: u64,
) -> Vec<Vec<u8>> {
    run_folding(schedules, None, false, srcs, dst_lens, seed)
}

/// [`run`] with `reducer` as the operator of the schedules' folds (a fold without one
/// panics), skipping the credits the schedules list when `skip_credits`.
pub(crate) fn run_folding(
    schedules: &[Schedule],
    reducer: Option<&dyn Reducer>,
    skip_credits: bool,
    srcs: Vec<Vec<u8>>,
    dst_lens: &[u64],
    seed: u64,
) -> Vec<Vec<u8>> {
    let n = schedules.len() as u32;
    let bound = signal_bound(n);
    let mut members: Vec<Member> = srcs
        .into_iter()
        .zip(schedules)
        .zip(dst_lens)
        .map(|((src, s), &dst)| Member {
            src,
            // Filler that no reference contains by accident in long runs.
            dst: vec![0xd5; dst as usize],
            stage: vec![0xee; s.stage as usize],
            sent: Vec::new(),
            raised: HashMap::new(),
            past: vec![Waits::default(); s.steps.len()],
        })
        .collect();
    let mut waiting: Vec<Vec<usize>> = schedules
        .iter()
        .map(|s| s.steps.iter().map(|st| st.after.len()).collect())
        .collect();
    let mut dependents: Vec<Vec<Vec<u32>>> = schedules
        .iter()
        .map(|s| {
            let mut d = vec![Vec::new(); s.steps.len()];
            for (i, st) in s.steps.iter().enumerate() {
                for &a in &st.after {
                    d[a as usize].push(i as u32);
                }
            }
            d
        })
        .collect();
    let mut ready: Vec<(u32, u32)> = Vec::new();
    for (m, s) in schedules.iter().enumerate() {
        for id in s.sources() {
            ready.push((m as u32, id));
        }
    }
    let total: usize = schedules.iter().map(|s| s.steps.len()).sum();
    let mut done = 0;
    let mut draw = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // Copies into the destination, carried out at the end as the engine does.
    let mut deferred = Vec::new();
    // Per wait taken, in that order, the member it waited for.
    let mut taken: Vec<u32> = Vec::new();
    while done < total {
        let runnable: Vec<usize> = (0..ready.len())
            .filter(|&i| {
                let (m, id) = ready[i];
                let schedule = &schedules[m as usize];
                match schedule.steps[id as usize].task {
                    _ if skip_credits && schedule.credits.contains(&id) => true,
                    Task::Wait { signal, .. } => members[m as usize].raised.contains_key(&signal),
                    _ => true,
                }
            })
            .collect();
        assert!(
            !runnable.is_empty(),
            "n={n}: deadlock with {} of {total} steps done; waiting: {:?}",
            done,
            ready
                .iter()
                .map(|&(m, id)| (m, schedules[m as usize].steps[id as usize].task))
                .collect::<Vec<_>>()
        );
        let (m, id) = ready.swap_remove(runnable[draw.below(runnable.len())]);
        let who = format!("n={n} member {m} step {id}");
        let skipped = skip_credits && schedules[m as usize].credits.contains(&id);
        let mut past = Waits::default();
        for &a in &schedules[m as usize].steps[id as usize].after {
            past.merge(&members[m as usize].past[a as usize]);
        }
        match schedules[m as usize].steps[id as usize].task {
            Task::Signal { .. } | Task::Wait { .. } if skipped => {}
            Task::Put {
                to,
                from,
                into,
                len,
                signal,
                check,
            } => {
                assert!(to < n && to != m, "{who}: puts to member {to}");
                let data = members[m as usize].read(Span::stage(from, len), &who);
                let sender = &mut members[m as usize];
                sender.sent.push(Sent {
                    from,
                    len,
                    seen: None,
                });
                let raised = Raised {
                    by: m,
                    check,
                    put: Some(sender.sent.len() - 1),
                    past: past.clone(),
                };
                let receiver = &mut members[to as usize];
                let limit = schedules[to as usize].stage;
                assert!(
                    into + len <= limit,
                    "{who}: puts {into}..{} beyond member {to}'s stage of {limit}",
                    into + len
                );
                receiver.write(Span::stage(into, len), &data, &past, &who);
                raise(receiver, to, signal, raised, bound, &who);
            }
            Task::Signal { to, signal, check } => {
                assert!(to < n && to != m, "{who}: signals member {to}");
                let raised = Raised {
                    by: m,
                    check,
                    put: None,
                    past: past.clone(),
                };
                raise(&mut members[to as usize], to, signal, raised, bound, &who);
            }
            Task::Wait {
                from,
                signal,
                check,
            } => {
                // Runnable only once raised.
                let raised = members[m as usize]
                    .raised
                    .remove(&signal)
                    .unwrap_or_else(|| panic!("{who}: waits for signal {signal}, not raised"));
                assert_eq!(
                    raised.by, from,
                    "{who}: waits for signal {signal} from {from}"
                );
                assert_eq!(
                    raised.check, check,
                    "{who}: signal {signal} from {from} carries another check"
                );
                past.merge(&raised.past);
                let seen = taken.len();
                past.insert(seen);
                taken.push(from);
                if let Some(put) = raised.put {
                    members[from as usize].sent[put].seen = Some(seen);
                }
            }
            Task::Copy { from, into } if into.buf == Buf::Dst => {
                assert_eq!(from.len, into.len, "{who}: copies between other lengths");
                let captured = schedules[m as usize]
                    .capture
                    .then(|| members[m as usize].read(from, &who));
                deferred.push((m, from, into, who, captured));
            }
            Task::Copy { from, into } => {
                assert_eq!(from.len, into.len, "{who}: copies between other lengths");
                let data = members[m as usize].read(from, &who);
                members[m as usize].write(into, &data, &past, &who);
            }
            Task::Fold { left, right, into } => {
                let reducer = reducer.unwrap_or_else(|| panic!("{who}: folds without an operator"));
                assert!(
                    [left, right, into]
                        .iter()
                        .all(|s| s.buf == Buf::Stage && s.len == into.len),
                    "{who}: folds other than stage ranges of one length"
                );
                assert_eq!(
                    into.len % reducer.block(),
                    0,
                    "{who}: folds a part of a block"
                );
                let apart = |s: &Span| {
                    s.at == into.at || s.at + s.len <= into.at || into.at + into.len <= s.at
                };
                assert!(
                    apart(&left) && apart(&right),
                    "{who}: folds into a range overlapping an operand elsewhere"
                );
                let member = &mut members[m as usize];
                let mut acc = Aligned::zeroed(into.len as usize);
                acc.bytes_mut().copy_from_slice(&member.read(left, &who));
                let mut other = Aligned::zeroed(into.len as usize);
                other.bytes_mut().copy_from_slice(&member.read(right, &who));
                reducer
                    .fold(acc.bytes_mut(), other.bytes())
                    .unwrap_or_else(|e| panic!("{who}: the fold failed: {e}"));
                member.write(into, acc.bytes(), &past, &who);
            }
        }
        members[m as usize].past[id as usize] = past;
        done += 1;
        for &next in &dependents[m as usize][id as usize] {
            let left = &mut waiting[m as usize][next as usize];
            *left -= 1;
            if *left == 0 {
                ready.push((m, next));
            }
        }
        dependents[m as usize][id as usize].clear();
    }
    for (m, from, into, who, captured) in deferred {
        let data = captured.unwrap_or_else(|| members[m as usize].read(from, &who));
        // The destination holds no range a put reads, so what the copy follows from is moot.
        members[m as usize].write(into, &data, &Waits::default(), &who);
    }
    for (m, member) in members.iter().enumerate() {
        assert!(
            member.raised.is_empty(),
            "n={n} member {m}: signals raised but never waited for: {:?}",
            member.raised.keys().collect::<Vec<_>>()
        );
    }
    for (m, (member, schedule)) in members.iter().zip(schedules).enumerate() {
        if !schedule.gathering {
            continue;
        }
        // A member's completion follows from all of its steps; a step of another member
        // reaches them only through a wait for its signal, which hears from that member.
        let mut past = Waits::default();
        for step in &member.past {
            past.merge(step);
        }
        let mut heard = vec![false; n as usize];
        heard[m] = true;
        for (wait, &from) in taken.iter().enumerate() {
            if past.contains(wait) {
                heard[from as usize] = true;
            }
        }
        if let Some(j) = heard.iter().position(|&h| !h) {
            panic!(
                "n={n} member {m}: completes a gathering schedule without hearing from member {j}"
            );
        }
    }
    members.into_iter().map(|m| m.dst).collect()
}

fn raise(receiver: &mut Member, to: u32, signal: Signal, raised: Raised, bound: Signal, who: &str) {
    assert!(
        signal < bound,
        "{who}: signal {signal} at member {to} is beyond the bound {bound}"
    );
    if let Some(earlier) = receiver.raised.insert(signal, raised) {
        panic!(
            "{who}: signal {signal} at member {to} raised again (first by {}) before it was waited for",
            earlier.by
        );
    }
}

/// The bytes member `m` contributes in block `b` of `len` bytes of a test: distinct for
/// every member, block and byte.
pub(crate) fn pattern(m: u32, b: u32, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (u64::from(m) * 131 + u64::from(b) * 31 + i * 7 + 1) as u8)
        .collect()
}

/// Runs the schedules `schedule(n, m)` of every member `m` with sources `src(m)` over several
/// seeds, and checks that every member's destination equals `want(m)`: once waiting for
/// every credit and, when the schedules list credits, once more skipping them, so that a
/// credit listed wrongly shows as wrong bytes or a broken rule.
pub(crate) fn check(
    what: &str,
    n: u32,
    schedule: impl Fn(u32) -> Schedule,
    src: impl Fn(u32) -> Vec<u8>,
    want: impl Fn(u32) -> Vec<u8>,
) {
    let schedules: Vec<Schedule> = (0..n).map(&schedule).collect();
    let listed = schedules.iter().any(|s| !s.credits.is_empty());
    for skip_credits in [false, true] {
        if skip_credits && !listed {
            continue;
        }
        check_folding(
            &format!("{what} skipping credits {skip_credits}"),
            n,
            |m| schedules[m as usize].clone(),
            None,
            skip_credits,
            &src,
            &want,
        );
    }
}

/// [`check`] with `reducer` as the operator of the schedules' folds, skipping the credits
/// the schedules list when `skip_credits`.
pub(crate) fn check_folding(
    what: &str,
    n: u32,
    schedule: impl Fn(u32) -> Schedule,
    reducer: Option<&dyn Reducer>,
    skip_credits: bool,
    src: impl Fn(u32) -> Vec<u8>,
    want: impl Fn(u32) -> Vec<u8>,
) {
    let schedules: Vec<Schedule> = (0..n).map(&schedule).collect();
    let wants: Vec<Vec<u8>> = (0..n).map(&want).collect();
    let lens: Vec<u64> = wants.iter().map(|w| w.len() as u64).collect();
    for seed in 1..=3 {
        let got = run_folding(
            &schedules,
            reducer,
            skip_credits,
            (0..n).map(&src).collect(),
            &lens,
            seed,
        );
        for (m, (got, want)) in got.iter().zip(&wants).enumerate() {
            assert!(
                got == want,
                "{what} n={n} seed {seed}: member {m} ends with the wrong bytes"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::broadcast::broadcast;
    use super::super::sync::synchronise;
    use super::super::tree::Tree;
    use super::*;

    /// A ring shift: member m puts its source to m + 1, after that member's credit.
    fn shift(n: u32, m: u32, len: u64) -> Schedule {
        let mut s = Schedule::new();
        if n == 1 {
            s.copy(Span::src(0, len), Span::dst(0, len), &[]);
            return s;
        }
        let (right, left) = ((m + 1) % n, (m + n - 1) % n);
        let staged = s.copy(Span::src(0, len), Span::stage(0, len), &[]);
        let credit = s.signal(left, 1, &[]);
        let go = s.wait(right, 1, &[]);
        let deps: Vec<_> = staged.into_iter().chain([go]).collect();
        s.put(right, 0, len, len, 0, &deps);
        let got = s.wait(left, 0, &[credit]);
        s.copy(Span::stage(len, len), Span::dst(0, len), &[got]);
        s
    }

    #[test]
    fn a_ring_shift_moves_every_block_with_and_without_barriers() {
        for n in 1..=9 {
            for (before, after) in [(false, false), (true, false), (false, true), (true, true)] {
                check(
                    "shift",
                    n,
                    |m| synchronise(shift(n, m, 5), n, m, before, after),
                    |m| pattern(m, 0, 5),
                    |m| pattern((m + n - 1) % n, 0, 5),
                );
            }
        }
    }

    /// Member 0 puts two blocks in turn into member 1's stage `0..4`, each after a credit;
    /// member 1 moves the first aside before it credits the second. The credits order the
    /// reuse of a range within the run, so listing them (`list`) is wrong.
    fn reused(list: bool) -> [Schedule; 2] {
        let mut a = Schedule::new();
        let first = a.copy(Span::src(0, 4), Span::stage(0, 4), &[]);
        let second = a.copy(Span::src(4, 4), Span::stage(4, 4), &[]);
        let go = a.wait(1, 2, &[]);
        a.put(1, 0, 0, 4, 0, &[first.unwrap(), go]);
        let again = a.wait(1, 3, &[]);
        a.put(1, 4, 0, 4, 1, &[second.unwrap(), again]);
        let mut b = Schedule::new();
        let credited = b.signal(0, 2, &[]);
        let got = b.wait(0, 0, &[credited]);
        let moved = b.copy(Span::stage(0, 4), Span::stage(4, 4), &[got]);
        let freed = b.signal(0, 3, &[moved.unwrap()]);
        let got = b.wait(0, 1, &[freed]);
        b.copy(Span::stage(0, 4), Span::dst(4, 4), &[got]);
        b.copy(Span::stage(4, 4), Span::dst(0, 4), &[got]);
        if list {
            a.credits = vec![go, again];
            b.credits = vec![credited, freed];
        }
        [a, b]
    }

    #[test]
    fn credits_that_order_reuse_within_a_run_hold_when_waited_for() {
        let schedules = reused(false);
        check(
            "reused",
            2,
            |m| schedules[m as usize].clone(),
            |m| if m == 0 { pattern(0, 0, 8) } else { Vec::new() },
            |m| if m == 1 { pattern(0, 0, 8) } else { Vec::new() },
        );
    }

    #[test]
    #[should_panic(expected = "skipping credits true")]
    fn credits_that_order_reuse_within_a_run_listed_fail() {
        let schedules = reused(true);
        check(
            "reused",
            2,
            |m| schedules[m as usize].clone(),
            |m| if m == 0 { pattern(0, 0, 8) } else { Vec::new() },
            |m| if m == 1 { pattern(0, 0, 8) } else { Vec::new() },
        );
    }

    #[test]
    #[should_panic(expected = "deadlock")]
    fn a_wait_nobody_signals_is_a_deadlock() {
        let mut s = Schedule::new();
        s.wait(1, 0, &[]);
        run(&[s, Schedule::new()], vec![Vec::new(); 2], &[0, 0], 1);
    }

    #[test]
    #[should_panic(expected = "never waited for")]
    fn a_signal_nobody_waits_for_is_reported() {
        let mut s = Schedule::new();
        s.signal(1, 0, &[]);
        run(&[s, Schedule::new()], vec![Vec::new(); 2], &[0, 0], 1);
    }

    #[test]
    #[should_panic(expected = "overwritten while a put")]
    fn overwriting_a_stage_range_being_put_is_reported() {
        let mut a = Schedule::new();
        let put = a.put(1, 0, 0, 4, 0, &[]);
        a.copy(Span::src(0, 4), Span::stage(2, 4), &[put]);
        let mut b = Schedule::new();
        b.wait(0, 0, &[]);
        b.stage = 4;
        run(&[a, b], vec![vec![1; 4], Vec::new()], &[0, 0], 1);
    }

    /// Member 0 puts its stage `0..4` to member 1, then writes over it after a signal member 1
    /// raises without waiting for the put, so the put may still be reading it. Member 1 also
    /// acknowledges the put, and member 0 waits for that too, but the write does not follow
    /// from it: that it arrives first in this seed's order orders nothing.
    #[test]
    #[should_panic(expected = "n=2 member 0 step 4: stage 0..4 overwritten while a put from 0..4")]
    fn overwriting_a_stage_range_being_put_after_an_unrelated_wait_is_reported() {
        let mut a = Schedule::new();
        let staged = a.copy(Span::src(0, 4), Span::stage(0, 4), &[]);
        let put = a.put(1, 0, 0, 4, 0, staged.as_slice());
        a.wait(1, 1, &[]);
        let other = a.wait(1, 2, &[]);
        a.copy(Span::src(4, 4), Span::stage(0, 4), &[put, other]);
        let mut b = Schedule::new();
        let got = b.wait(0, 0, &[]);
        b.signal(0, 1, &[got]);
        b.signal(0, 2, &[]);
        b.stage = 4;
        run(&[a, b], vec![pattern(0, 0, 8), Vec::new()], &[0, 0], 1);
    }

    /// Each of two members puts its source to the other before it waits for anything: a
    /// member whose first step is a put has started once that put is waited for.
    fn swap(m: u32) -> Schedule {
        let mut s = Schedule::new();
        let staged = s.copy(Span::src(0, 4), Span::stage(0, 4), &[]);
        s.put(1 - m, 0, 4, 4, 0, staged.as_slice());
        let got = s.wait(1 - m, 0, &[]);
        s.copy(Span::stage(4, 4), Span::dst(0, 4), &[got]);
        s.gathering = true;
        s
    }

    #[test]
    fn a_member_that_puts_before_it_waits_is_heard_from() {
        check(
            "swap",
            2,
            swap,
            |m| pattern(m, 0, 4),
            |m| pattern(1 - m, 0, 4),
        );
    }

    /// A broadcast is not gathering: a leaf hears from its parent only, not from the other
    /// leaves, so a leaf's completion proves nothing about them.
    #[test]
    #[should_panic(
        expected = "n=3 member 1: completes a gathering schedule without hearing from member 2"
    )]
    fn a_gathering_member_that_never_hears_from_another_is_reported() {
        let schedules: Vec<Schedule> = (0..3)
            .map(|m| {
                let mut s = broadcast(3, m, 0, 4, Tree::Flat);
                s.gathering = true;
                s
            })
            .collect();
        let srcs = (0..3)
            .map(|m| if m == 0 { pattern(0, 0, 4) } else { Vec::new() })
            .collect();
        run(&schedules, srcs, &[4; 3], 1);
    }
}
