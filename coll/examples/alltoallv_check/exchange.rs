//! `exchange LONG`: the cases of `plan.rs` on one alltoallv object over `GROUP_ALL`. Every plan
//! is made first; then the rounds of each case follow those of the case before with nothing
//! else in between, so a fast rank may start the next case while a slow one is still in the
//! last round of the previous one. Every block is compared with what its source sent when it
//! is handed out, before it is reset.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gaspi::{Context, Rank, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Plan, Status};

use crate::check::{
    check_number, destinations_layout, list, sources_layout, whole_round, Received, Report, Setup,
};
use crate::plan::{self, Digest, Form, Forms, CASES, CONSUMER_THREADS};
use crate::{Outcome, TIMEOUT};

/// How long the proposal's form may poll one round with `Timeout::Test`.
const POLL_LIMIT: Duration = Duration::from_secs(30);

pub fn run(ctx: &Context, long: u32) -> Outcome {
    let me = ctx.rank();
    let coll = Collectives::new(ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let mut setups = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let receive = [plan::receive_segment(i, 0), plan::receive_segment(i, 1)];
        let source = plan::source_segment(i);
        setups.push(Setup::create(ctx, receive, source, case.pattern, i)?);
    }
    let mut plans = Vec::new();
    for setup in &setups {
        plans.push(setup.discover(&mut a2a, TIMEOUT)?);
    }
    // The alltoallv's rounds so far: round numbers run on across plans.
    let mut number = 0;
    for ((case, setup), plan) in CASES.iter().zip(&setups).zip(&plans) {
        let mut report = Report::default();
        report.put("sources", sources_layout(plan));
        report.put("destinations", destinations_layout(plan));
        report.put("required", plan.required_size());
        let rounds = plan::rounds(case, long);
        let mut digest = Digest::default();
        let mut taken = Taken::default();
        for round in 0..rounds {
            number += 1;
            setup.load(ctx, number)?;
            let received = match case.forms {
                Forms::Rotating => rotating(ctx, &a2a, setup, plan, number, plan::form(round)),
                Forms::Consumers => consumers(ctx, &a2a, setup, plan, number, &mut taken),
            }
            .map_err(|e| format!("case {}, round {number}: {e}", case.name))?;
            received.finish(number, plan, &mut digest)?;
        }
        setup.digest_guards(ctx, plan, &mut digest)?;
        report.put("rounds", rounds);
        report.put("digest", digest.hex());
        if case.forms == Forms::Consumers {
            taken.report(&mut report);
        }
        report.print(&format!("exchange-{}", case.name), me);
    }
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.barrier(TIMEOUT)?;
    Ok(())
}

/// Round `number` of `plan` by one thread, in `form`.
fn rotating(
    ctx: &Context,
    a2a: &Alltoallv<'_>,
    setup: &Setup,
    plan: &Plan,
    number: u64,
    form: Form,
) -> Outcome<Received> {
    let mut received = Received::default();
    let mut take = |source: Rank| -> Outcome {
        let block = setup.take(ctx, plan, number, source)?;
        received.add(number, source, block)
    };
    match form {
        Form::Stream => return whole_round(ctx, a2a, setup, plan, number, number),
        Form::Joined => {
            let round = a2a.round(plan, setup.source)?;
            check_number(&round, number)?;
            for (d, &offset) in plan.destinations().iter().zip(&setup.offsets).rev() {
                round.send(d.rank, offset)?;
            }
            let joined = a2a.round(plan, setup.source)?;
            check_number(&joined, number)?;
            let mut arrived = Vec::new();
            while let Some(source) = joined.next_arrival(TIMEOUT)? {
                take(source)?;
                arrived.push(source);
            }
            a2a.alltoallv_reset(&arrived)?;
            round.finish(TIMEOUT)?;
        }
        Form::Proposal => {
            let give_up = Instant::now() + POLL_LIMIT;
            loop {
                match a2a.alltoallv(plan, setup.source, &setup.offsets, Timeout::Test) {
                    Ok(Status::Arrived(source)) => {
                        take(source)?;
                        a2a.alltoallv_reset(&[source])?;
                    }
                    Ok(Status::Complete) => break,
                    Err(e) if e.is_timeout() && Instant::now() < give_up => {
                        std::thread::yield_now();
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Form::Deferred => {
            {
                let round = a2a.round(plan, setup.source)?;
                check_number(&round, number)?;
                round.send_all(&setup.offsets)?;
                round.finish(TIMEOUT)?;
            }
            // The round is over and every block is here; none was reset, so none can change.
            let sources: Vec<Rank> = plan.sources().iter().map(|s| s.rank).collect();
            for &source in &sources {
                take(source)?;
            }
            a2a.alltoallv_reset(&sources)?;
        }
    }
    Ok(received)
}

/// Round `number` of `plan` shared by [`CONSUMER_THREADS`] threads: thread `t` sends the blocks
/// `t`, `t + CONSUMER_THREADS`, ... and every thread takes arrivals until none is left, checks
/// each and resets it, then ends the round, which the first to find every block sent does
/// while others may still be posting theirs. Every source must be handed out to exactly one
/// thread, and the next round's source must not reach a destination of this one.
fn consumers(
    ctx: &Context,
    a2a: &Alltoallv<'_>,
    setup: &Setup,
    plan: &Plan,
    number: u64,
    taken: &mut Taken,
) -> Outcome<Received> {
    let round = a2a.round(plan, setup.source)?;
    check_number(&round, number)?;
    let round = &round;
    let results = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..CONSUMER_THREADS)
            .map(|t| {
                scope.spawn(move || -> Outcome<Vec<(Rank, Vec<u8>)>> {
                    let mine = plan.destinations().iter().zip(&setup.offsets);
                    for (d, &offset) in mine.skip(t).step_by(CONSUMER_THREADS) {
                        round.send(d.rank, offset).map_err(|e| {
                            format!("thread {t}: the block for rank {}: {e}", d.rank)
                        })?;
                    }
                    let mut got = Vec::new();
                    loop {
                        let next = round.next_arrival(TIMEOUT).map_err(|e| {
                            let ranks: Vec<Rank> = got.iter().map(|(r, _)| *r).collect();
                            format!("thread {t}: next_arrival after taking {ranks:?}: {e}")
                        })?;
                        let Some(source) = next else { break };
                        got.push((source, setup.take(ctx, plan, number, source)?));
                        round.reset(source)?;
                    }
                    // A block not sent yet is another thread's, still on its way to `send`.
                    loop {
                        match round.finish(TIMEOUT) {
                            Ok(()) => break,
                            Err(gaspi_coll::Error::Unsent { .. }) => std::thread::yield_now(),
                            Err(e) => return Err(format!("thread {t}: finish: {e}").into()),
                        }
                    }
                    Ok(got)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a consumer thread panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    round
        .finish(TIMEOUT)
        .map_err(|e| format!("finish after every thread ended the round: {e}"))?;
    let mut this_round = Vec::new();
    let mut received = Received::default();
    for (thread, got) in results.into_iter().enumerate() {
        taken.busy[thread] |= !got.is_empty();
        for (source, block) in got {
            this_round.push(source);
            received.add(number, source, block)?;
        }
    }
    taken.add(this_round);
    Ok(received)
}

/// Which sources the consumer threads were handed, over every round of a case.
struct Taken {
    /// Per source, how many times it was handed out.
    counts: BTreeMap<Rank, u64>,
    /// The sources of each round, sorted, as a digest.
    digest: Digest,
    /// Threads that took at least one arrival.
    busy: [bool; CONSUMER_THREADS],
}

impl Default for Taken {
    fn default() -> Self {
        Taken {
            counts: BTreeMap::new(),
            digest: Digest::default(),
            busy: [false; CONSUMER_THREADS],
        }
    }
}

impl Taken {
    fn add(&mut self, mut round: Vec<Rank>) {
        round.sort_unstable();
        for &source in &round {
            *self.counts.entry(source).or_default() += 1;
        }
        let words: Vec<u8> = round.iter().flat_map(|r| r.to_le_bytes()).collect();
        self.digest.add(&words);
    }

    fn report(&self, report: &mut Report) {
        let counts = self.counts.iter().map(|(r, c)| format!("{r}:{c}"));
        report.put("taken", list(counts));
        report.put("taken_digest", self.digest.hex());
        report.put("busy_threads", self.busy.iter().filter(|&&b| b).count());
    }
}
