//! `ahead`: a sender of small blocks rounds ahead of a receiver that holds back its resets.
//! Plan: `LastToFirst`, one block of a few hundred bytes from the last rank, L, to rank 0 (a
//! small block, which travels through the receiver's control segment, in one of two slots by
//! round parity); L has no source, so nothing but its credits holds it back.
//!
//! Rank 0 first waits, in no round, until L has timed out in round 3. L meanwhile runs rounds
//! 1 and 2 at once (round 2's block goes into the other slot than round 1's, so its `finish`
//! completes without a credit; it times out for good if it waits for one), then in round 3,
//! whose block goes into round 1's slot, polls `finish`, which must time out
//! (`two_ahead_timeouts`) until rank 0 has reset round 1's block, and tells rank 0 after its
//! first timeout.
//!
//! Rank 0 then takes round 1's block (checked: round 3's must not have overwritten it) and
//! keeps it. In round 2, L's block is there, but must not be handed out while round 1's is
//! not reset: a `next_arrival` with a short timeout must time out (`held_2`), and the receive
//! area must still hold round 1's block (`kept_1`). Rank 0 resets it, is handed round 2's
//! block (checked: read from the right slot), resets it, and takes round 3's (checked).
//! Every other rank runs the three rounds with nothing to send or receive.

use gaspi::{Context, Notification, Rank, SegmentId, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Error, Plan, Round};

use crate::check::{check_number, outcome, take_all, Report, Setup};
use crate::plan::Pattern;
use crate::{Outcome, TIMEOUT};

/// How long rank 0 waits for a block that must be held back.
const HOLD: Timeout = Timeout::Millis(200);
/// L's polls of `finish` in round 3.
const POLL: Timeout = Timeout::Millis(20);
const POLL_LIMIT: u32 = 1_500;
/// The segment of L's signal to rank 0 (notification 0).
const SIGNALS: SegmentId = 3;
const QUEUE: gaspi::QueueId = 0;

pub fn run(ctx: &Context) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 2 {
        return Err("ahead needs at least 2 ranks".into());
    }
    let late = n - 1;
    let coll = Collectives::new(ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let setup = Setup::create(ctx, [1, 2], 4, Pattern::LastToFirst, 0)?;
    ctx.segment_create(SIGNALS, 8, TIMEOUT)?;
    let plan = setup.discover(&mut a2a, TIMEOUT)?;
    let mut report = Report::default();
    let step = Step {
        ctx,
        a2a: &a2a,
        setup: &setup,
        plan: &plan,
    };
    if me == 0 {
        ctx.notify_waitsome(SIGNALS, 0, 1, TIMEOUT)
            .map_err(|e| format!("waiting for rank {late} to time out in round 3: {e}"))?;
        let round = step.begin(1)?;
        step.take(&round, 1, Some(late))?;
        round.finish(TIMEOUT)?;
        let round = step.begin(2)?;
        report.put("held_2", held_outcome(&round.next_arrival(HOLD)));
        report.put("kept_1", ok_or_what(&setup.take(ctx, &plan, 1, late)));
        round.reset(late)?;
        step.take(&round, 2, None)?;
        round.finish(TIMEOUT)?;
        let round = step.begin(3)?;
        take_all(ctx, &round, &setup, &plan, 3)?;
    } else if me == late {
        for number in [1, 2] {
            let round = step.begin(number)?;
            round.finish(TIMEOUT)?;
        }
        let round = step.begin(3)?;
        let mut timeouts = 0u32;
        let mut finished = false;
        for _ in 0..POLL_LIMIT {
            match round.finish(POLL) {
                Err(e) if e.is_timeout() => {
                    timeouts += 1;
                    if timeouts == 1 {
                        let note = Notification { id: 0, value: 1 };
                        ctx.notify(0, SIGNALS, note, QUEUE)?;
                        ctx.wait(QUEUE, TIMEOUT)?;
                    }
                }
                done => {
                    done?;
                    finished = true;
                    break;
                }
            }
        }
        if !finished {
            return Err(format!("round 3: still timing out after {POLL_LIMIT} calls").into());
        }
        report.put("two_ahead_timeouts", timeouts);
    } else {
        for number in 1..=3 {
            let round = step.begin(number)?;
            round.finish(TIMEOUT)?;
        }
    }
    report.print("ahead", me);
    // The last resets must reach their sources before the alltoallv goes.
    ctx.barrier(TIMEOUT)?;
    Ok(())
}

/// What a call that must not hand out a block returned.
fn held_outcome(result: &Result<Option<Rank>, Error>) -> String {
    match result {
        Ok(Some(rank)) => format!("HandedOut({rank})"),
        Ok(None) => "None".into(),
        Err(_) => outcome(result),
    }
}

/// `ok`, or why a block differs from what it must be.
fn ok_or_what(result: &Outcome<Vec<u8>>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string().replace([';', '='], " "),
    }
}

/// One rank's side of the rounds.
struct Step<'a> {
    ctx: &'a Context,
    a2a: &'a Alltoallv<'a>,
    setup: &'a Setup,
    plan: &'a Plan,
}

impl<'a> Step<'a> {
    /// Loads the blocks of round `number`, begins it and sends them.
    fn begin(&self, number: u64) -> Outcome<Round<'a>> {
        self.setup.load(self.ctx, number)?;
        let round = self.a2a.round(self.plan, self.setup.source)?;
        check_number(&round, number)?;
        round.send_all(&self.setup.offsets)?;
        Ok(round)
    }

    /// Takes the arrivals of round `number`, checking each and resetting it unless it is
    /// `keep`'s.
    fn take(&self, round: &Round<'_>, number: u64, keep: Option<Rank>) -> Outcome {
        while let Some(source) = round.next_arrival(TIMEOUT)? {
            self.setup.take(self.ctx, self.plan, number, source)?;
            if keep != Some(source) {
                round.reset(source)?;
            }
        }
        Ok(())
    }
}
