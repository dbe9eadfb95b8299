//! `late`: timeouts that are resumed, and a sender a round ahead of its receiver. Plan: `Large`
//! (every rank to every other, blocks larger than the small ones that a sender may write a
//! round ahead into its receiver's control segment: see `ahead.rs` for those); the last rank,
//! L, is the late one.
//!
//! In each of four phases the ranks other than L call with a short timeout ([`POLL`]) until
//! their call completes, resuming after every timeout; after its first timeout each tells L
//! (a notification of its own), and L waits for all of them before it joins, so every early
//! rank has timed out at least once, whatever the scheduling:
//! 1. `get_remote_offsets`; after its first timeout each early rank also calls once with other
//!    arguments and reports what that returned (`discovery_other`);
//! 2. round 1: `send_all`, then `next_arrival` (`arrival_timeouts`);
//! 3. round 2: `send_all`, then `finish`, which takes every arrival (`finish_timeouts`);
//! 4. round 3: the proposal's `alltoallv` (`proposal_timeouts`).
//!
//! Then a sender a round ahead: in round 4 rank 0 keeps the block of L and does not reset it.
//! In round 5 L sends its next block to rank 0, which has given no credit for it, so L's
//! `finish` keeps timing out (`ahead_timeouts`); after its first timeout L tells rank 0, which
//! (after a pause in which a write that should not happen would land) reads the block of L in
//! its receive area, which must still be the one of round 4 (`ahead_before_reset`, its
//! digest), and only then resets it; round 5 then completes everywhere.
//!
//! Rank 0 keeps the block of L of round 5 too. In round 6 L sends every block but rank 0's,
//! starts a thread that takes arrivals (and so waits for rank 0's block), then sends its block
//! for rank 0 (held back for want of the credit) and tells rank 0; rank 0 checks the block of L
//! is still the one of round 5 (`deferred_before_reset`), resets it, waits for L's new block,
//! and only then sends its own. L's block must go out when the credit comes back, although
//! the thread that then waits in `next_arrival` began waiting before the block was sent.
//!
//! Each rank also reports its plan (`sources`, `destinations`) and a `digest` of every block of
//! rounds 1 to 6, ascending source per round.

use std::time::Duration;

use gaspi::{Context, Notification, Rank, SegmentId, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Error, Plan, Round, Status};

use crate::check::{
    check_number, destinations_layout, outcome, sources_layout, Received, Report, Setup,
};
use crate::plan::{Digest, Pattern};
use crate::{Outcome, TIMEOUT};

/// The timeout of the calls that are meant to time out.
const POLL: Timeout = Timeout::Millis(20);
/// Calls with [`POLL`] before a rank gives up on a phase.
const POLL_LIMIT: u32 = 1_500;
/// The segment of the "I timed out" notifications: notification `phase * n + rank`.
const SIGNALS: SegmentId = 3;
const QUEUE: gaspi::QueueId = 0;
/// How long rank 0 gives a write that should not happen to land before it looks.
const SETTLE: Duration = Duration::from_millis(100);

/// The phases, each with notifications of its own.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Discovery = 0,
    Arrivals = 1,
    Finish = 2,
    Proposal = 3,
    Ahead = 4,
    Deferred = 5,
}

pub fn run(ctx: &Context) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 2 {
        return Err("late needs at least 2 ranks".into());
    }
    let late = n - 1;
    let coll = Collectives::new(ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let setup = Setup::create(ctx, [1, 2], 4, Pattern::Large, 0)?;
    ctx.segment_create(SIGNALS, 8, TIMEOUT)?;
    let signals = Signals { ctx };
    let early: Vec<Rank> = (0..late).collect();
    // The early ranks poll and tell L; L waits for them and calls once.
    let poller = Poller {
        signals: &signals,
        polls: me != late,
        tell: late,
    };
    let mut report = Report::default();
    let mut digest = Digest::default();

    // 1. Discovery.
    let mut timeouts = 0;
    let plan = if me == late {
        signals.wait(Phase::Discovery, &early)?;
        setup.discover(&mut a2a, TIMEOUT)?
    } else {
        // L has not joined yet: this call cannot complete.
        let first = setup.discover(&mut a2a, POLL);
        if !first.as_ref().is_err_and(Error::is_timeout) {
            return Err(format!("discovery before rank {late} joined: {}", outcome(&first)).into());
        }
        timeouts += 1;
        let mut other = setup.sends.clone();
        other[0].1 += 1;
        let again = a2a.get_remote_offsets(setup.receive, setup.first_offset, &other, POLL);
        report.put("discovery_other", outcome(&again));
        signals.tell(late, Phase::Discovery)?;
        poller.call(Phase::Discovery, &mut timeouts, |t| {
            setup.discover(&mut a2a, t)
        })?
    };
    report.put("discovery_timeouts", timeouts);
    report.put("sources", sources_layout(&plan));
    let side = Side {
        ctx,
        setup: &setup,
        plan: &plan,
    };
    report.put("destinations", destinations_layout(&plan));

    // 2. Round 1: timeouts in `next_arrival`.
    setup.load(ctx, 1)?;
    poller.join(Phase::Arrivals, &early)?;
    let mut received = Received::default();
    let mut timeouts = 0;
    {
        let round = a2a.round(&plan, setup.source)?;
        check_number(&round, 1)?;
        round.send_all(&setup.offsets)?;
        while let Some(source) =
            poller.call(Phase::Arrivals, &mut timeouts, |t| round.next_arrival(t))?
        {
            received.add(1, source, setup.take(ctx, &plan, 1, source)?)?;
            round.reset(source)?;
        }
        round.finish(TIMEOUT)?;
    }
    received.finish(1, &plan, &mut digest)?;
    report.put("arrival_timeouts", timeouts);

    // 3. Round 2: timeouts in `finish`.
    setup.load(ctx, 2)?;
    poller.join(Phase::Finish, &early)?;
    let mut timeouts = 0;
    {
        let round = a2a.round(&plan, setup.source)?;
        check_number(&round, 2)?;
        round.send_all(&setup.offsets)?;
        poller.call(Phase::Finish, &mut timeouts, |t| round.finish(t))?;
    }
    let sources: Vec<Rank> = plan.sources().iter().map(|s| s.rank).collect();
    let mut received = Received::default();
    for &source in &sources {
        received.add(2, source, setup.take(ctx, &plan, 2, source)?)?;
    }
    a2a.alltoallv_reset(&sources)?;
    received.finish(2, &plan, &mut digest)?;
    report.put("finish_timeouts", timeouts);

    // 4. Round 3: timeouts in the proposal's form.
    setup.load(ctx, 3)?;
    poller.join(Phase::Proposal, &early)?;
    let mut timeouts = 0;
    let mut received = Received::default();
    while let Status::Arrived(source) = poller.call(Phase::Proposal, &mut timeouts, |t| {
        a2a.alltoallv(&plan, setup.source, &setup.offsets, t)
    })? {
        received.add(3, source, setup.take(ctx, &plan, 3, source)?)?;
        a2a.alltoallv_reset(&[source])?;
    }
    received.finish(3, &plan, &mut digest)?;
    report.put("proposal_timeouts", timeouts);

    // 5. Round 4: rank 0 keeps the block of L.
    setup.load(ctx, 4)?;
    let mut received = Received::default();
    {
        let round = a2a.round(&plan, setup.source)?;
        check_number(&round, 4)?;
        round.send_all(&setup.offsets)?;
        let keep = (me == 0).then_some(late);
        side.take(&round, 4, &mut received, keep, None)?;
        round.finish(TIMEOUT)?;
    }
    received.finish(4, &plan, &mut digest)?;

    // 6. Round 5: L is a round ahead of rank 0's reset.
    setup.load(ctx, 5)?;
    let mut received = Received::default();
    let mut timeouts = 0;
    let mut before_reset = "none".to_owned();
    {
        let round = a2a.round(&plan, setup.source)?;
        check_number(&round, 5)?;
        round.send_all(&setup.offsets)?;
        if me == late {
            // The sender: polls `finish`, and tells rank 0 after its first timeout.
            let ahead = Poller {
                signals: &signals,
                polls: true,
                tell: 0,
            };
            ahead.call(Phase::Ahead, &mut timeouts, |t| round.finish(t))?;
            for &source in &sources {
                received.add(5, source, setup.take(ctx, &plan, 5, source)?)?;
            }
            a2a.alltoallv_reset(&sources)?;
        } else {
            // Rank 0 keeps the block of L again, for round 6.
            let keep = (me == 0).then_some(late);
            if me == 0 {
                signals.wait(Phase::Ahead, &[late])?;
                before_reset = side.kept_block(late)?;
                round.reset(late)?;
            }
            side.take(&round, 5, &mut received, keep, None)?;
            round.finish(TIMEOUT)?;
        }
    }
    received.finish(5, &plan, &mut digest)?;
    report.put("ahead_timeouts", timeouts);
    report.put("ahead_before_reset", before_reset);

    // 7. Round 6: L sends its block for rank 0 while another of its threads waits in
    // `next_arrival`; rank 0 gives the credit only then, and sends its own block to L only
    // once L's block is here. A send whose credit comes back while another thread waits must
    // still be posted: if not, both wait for ever.
    setup.load(ctx, 6)?;
    let mut received = Received::default();
    let mut before_reset = "none".to_owned();
    {
        let round = a2a.round(&plan, setup.source)?;
        check_number(&round, 6)?;
        if me == late {
            received = side.send_while_waiting(&round, &signals)?;
        } else if me == 0 {
            signals.wait(Phase::Deferred, &[late])?;
            before_reset = side.kept_block(late)?;
            round.reset(late)?;
            side.take(&round, 6, &mut received, None, Some(late))
                .map_err(|e| format!("round 6, waiting for the block of rank {late}: {e}"))?;
            round.send_all(&setup.offsets)?;
            side.take(&round, 6, &mut received, None, None)?;
        } else {
            round.send_all(&setup.offsets)?;
            side.take(&round, 6, &mut received, None, None)?;
        }
        round.finish(TIMEOUT)?;
    }
    received.finish(6, &plan, &mut digest)?;
    report.put("deferred_before_reset", before_reset);
    report.put("digest", digest.hex());
    report.print("late", me);
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.barrier(TIMEOUT)?;
    Ok(())
}

/// This rank's side of the plan, with its context.
struct Side<'a> {
    ctx: &'a Context,
    setup: &'a Setup,
    plan: &'a Plan,
}

impl Side<'_> {
    /// Takes arrivals of round `number` into `received`, checking each and resetting it unless
    /// it is `keep`'s, until `last` was taken or, without `last`, none is left.
    fn take(
        &self,
        round: &Round<'_>,
        number: u64,
        received: &mut Received,
        keep: Option<Rank>,
        last: Option<Rank>,
    ) -> Outcome {
        while let Some(source) = round.next_arrival(TIMEOUT)? {
            let block = self.setup.take(self.ctx, self.plan, number, source)?;
            received.add(number, source, block)?;
            if keep != Some(source) {
                round.reset(source)?;
            }
            if last == Some(source) {
                return Ok(());
            }
        }
        match last {
            Some(rank) => {
                Err(format!("round {number} ended without the block of rank {rank}").into())
            }
            None => Ok(()),
        }
    }

    /// Rank 0: the digest of the block of `late` in its receive area, once a write that should
    /// not happen would have landed.
    fn kept_block(&self, late: Rank) -> Outcome<String> {
        std::thread::sleep(SETTLE);
        let Some(from) = self.plan.source(late) else {
            return Err(format!("rank {late} is not a source of rank 0").into());
        };
        let mut block = vec![0; usize::try_from(from.bytes)?];
        self.ctx
            .segment_read(self.setup.receive, from.offset, &mut block)?;
        let mut kept = Digest::default();
        kept.add(&block);
        Ok(kept.hex())
    }

    /// L in round 6: sends every block but rank 0's, starts a thread that takes arrivals (it
    /// waits for rank 0's block), and once it waits, sends the block for rank 0, which has no
    /// credit yet, and tells rank 0.
    fn send_while_waiting(&self, round: &Round<'_>, signals: &Signals<'_>) -> Outcome<Received> {
        let blocks = self.plan.destinations().iter().zip(&self.setup.offsets);
        for (d, &offset) in blocks.clone().filter(|(d, _)| d.rank != 0) {
            round.send(d.rank, offset)?;
        }
        let (_, &to_0) = blocks
            .clone()
            .find(|(d, _)| d.rank == 0)
            .ok_or("rank 0 is not a destination")?;
        std::thread::scope(|scope| {
            let taker = scope.spawn(|| -> Outcome<Received> {
                let mut received = Received::default();
                self.take(round, 6, &mut received, None, None)
                    .map_err(|e| format!("round 6, the thread taking arrivals: {e}"))?;
                Ok(received)
            });
            // Time for the taker to take what is here and wait for rank 0's block.
            std::thread::sleep(SETTLE);
            round.send(0, to_0)?;
            signals.tell(0, Phase::Deferred)?;
            taker.join().expect("the taking thread panicked")
        })
    }
}

/// The "I timed out" notifications between the ranks.
struct Signals<'a> {
    ctx: &'a Context,
}

impl Signals<'_> {
    fn id(&self, phase: Phase, from: Rank) -> gaspi::NotificationId {
        phase as u32 * self.ctx.size() + from
    }

    /// Tells `to` that this rank timed out in `phase`.
    fn tell(&self, to: Rank, phase: Phase) -> Outcome {
        let note = Notification {
            id: self.id(phase, self.ctx.rank()),
            value: 1,
        };
        self.ctx.notify(to, SIGNALS, note, QUEUE)?;
        self.ctx.wait(QUEUE, TIMEOUT)?;
        Ok(())
    }

    /// Waits until every rank of `from` told this one that it timed out in `phase`.
    fn wait(&self, phase: Phase, from: &[Rank]) -> Outcome {
        for &rank in from {
            let id = self.id(phase, rank);
            self.ctx
                .notify_waitsome(SIGNALS, id, 1, TIMEOUT)
                .map_err(|e| format!("waiting for rank {rank} to time out in {phase:?}: {e}"))?;
            self.ctx.notify_reset(SIGNALS, id)?;
        }
        Ok(())
    }
}

/// How this rank calls in a phase: polling with [`POLL`] (and telling `tell` after its first
/// timeout), or once with [`TIMEOUT`].
struct Poller<'a> {
    signals: &'a Signals<'a>,
    polls: bool,
    tell: Rank,
}

impl Poller<'_> {
    /// The rank that does not poll waits until every rank of `early` timed out in `phase`.
    fn join(&self, phase: Phase, early: &[Rank]) -> Outcome {
        if self.polls {
            return Ok(());
        }
        self.signals.wait(phase, early)
    }

    /// Calls `call` until it does not time out, counting the timeouts in `timeouts`.
    fn call<T>(
        &self,
        phase: Phase,
        timeouts: &mut u32,
        mut call: impl FnMut(Timeout) -> Result<T, Error>,
    ) -> Outcome<T> {
        if !self.polls {
            return Ok(call(TIMEOUT)?);
        }
        for _ in 0..POLL_LIMIT {
            match call(POLL) {
                Err(e) if e.is_timeout() => {
                    *timeouts += 1;
                    if *timeouts == 1 {
                        self.signals.tell(self.tell, phase)?;
                    }
                }
                done => return Ok(done?),
            }
        }
        Err(format!("{phase:?}: still timing out after {POLL_LIMIT} calls").into())
    }
}
