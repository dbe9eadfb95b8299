//! Threads of one rank sharing rounds of an alltoallv: every rank sends every rank (itself
//! included) a block whose bytes change with the round, for 1,000 rounds, and 4 threads per
//! rank send those blocks and consume what arrives. Run with
//! `gaspirun -n 4 threaded_reset [--rounds N] [--threads T]`.
//!
//! In each round every thread sends its share of the blocks, then calls
//! [`Round::next_arrival`] until it returns `None`: it checks the block it was handed against
//! the one its source must have sent this round, copies it out and resets the source itself.
//! Nothing but those resets holds a fast rank back: there is no barrier between rounds, so a
//! block that overwrote one not yet reset, or came from another round, would fail the check.
//! Now and then a thread dawdles before it copies a block out, so that its source, a round
//! ahead by then, has every chance to overwrite it if the credit did not stop it.
//!
//! Every rank prints `data threaded_reset rank R: rounds=..; sources=..; arrivals=..;
//! per_thread=a/b/..; duplicates=..; missed=..; bad=..; digest=..`: the times a source was
//! handed out more than once in a round, not at all, or with other bytes than it sent, and a
//! digest of every round's sources, how often each was handed out and its block (see
//! `pattern.rs`, from which the test computes the digest every rank must report). It exits
//! non-zero on any of those errors.

#![forbid(unsafe_code)]

#[allow(dead_code)] // Each example uses its part of the support.
#[path = "../support/mod.rs"]
mod support;

#[path = "../support/data.rs"]
mod data;
mod pattern;

use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use gaspi::{Context, Rank, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Plan, Round};
use pattern::Digest;
use support::{during, joined, Options, Outcome, RECEIVE, SOURCE, TIMEOUT};

/// In every this many rounds (shifted by the source), the thread handed a source's block
/// waits [`DAWDLE`] before it copies it out.
const DAWDLE_EVERY: u64 = 97;
/// Long enough for a source to run a round ahead.
const DAWDLE: Duration = Duration::from_millis(2);
/// Where the receive area begins in [`RECEIVE`]: not at 0, as a plan must allow.
const FIRST_OFFSET: u64 = 64;

fn main() -> ExitCode {
    support::main_of("threaded_reset", run)
}

fn run(args: &[String]) -> Outcome<()> {
    let options = Options::parse(args, &["rounds", "threads"])?;
    let rounds = options.get("rounds", pattern::ROUNDS)?;
    let threads = options.count("threads", pattern::THREADS)?;
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    let coll = Collectives::new(&ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;

    let sends: Vec<(Rank, u64)> = (0..n).map(|dst| (dst, pattern::bytes(me, dst))).collect();
    let (offsets, sent) = support::packed(sends.iter().map(|&(_, bytes)| bytes));
    let received: u64 = (0..n).map(|src| pattern::bytes(src, me)).sum();
    // A segment is never empty, even where every block is.
    ctx.segment_create(SOURCE, sent.max(8), TIMEOUT)?;
    ctx.segment_create(RECEIVE, FIRST_OFFSET + received.max(8), TIMEOUT)?;
    let plan = a2a.get_remote_offsets(RECEIVE, FIRST_OFFSET, &sends, TIMEOUT)?;
    check_plan(&plan, me, n)?;

    let mut tally = Tally::new(n, threads);
    for number in 1..=rounds {
        let round = a2a
            .round(&plan, SOURCE)
            .map_err(during(format_args!("round {number}: begin")))?;
        if round.number() != number {
            return Err(format!("round {number} calls itself {}", round.number()).into());
        }
        let part = Part {
            ctx: &ctx,
            plan: &plan,
            round: &round,
            offsets: &offsets,
            number,
            me,
            threads,
        };
        let taken = thread::scope(|s| {
            let handles = (0..threads)
                .map(|thread| s.spawn(move || part.run(thread)))
                .collect();
            joined(handles)
        })?;
        round
            .finish(TIMEOUT)
            .map_err(during(format_args!("round {number}: finish")))?;
        tally.add(number, taken)?;
    }

    let per_thread: Vec<String> = tally.per_thread.iter().map(u64::to_string).collect();
    println!(
        "data threaded_reset rank {me}: rounds={rounds}; sources={n}; arrivals={}; \
         per_thread={}; duplicates={}; missed={}; bad={}; digest={}",
        tally.arrivals,
        per_thread.join("/"),
        tally.duplicates,
        tally.missed,
        tally.bad,
        tally.digest.hex()
    );
    drop(a2a);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    if tally.duplicates + tally.missed + tally.bad > 0 {
        return Err(format!(
            "{} duplicate, {} missed and {} bad arrivals",
            tally.duplicates, tally.missed, tally.bad
        )
        .into());
    }
    if tally.digest != pattern::expected(rounds, n, me) {
        return Err("the digest of what arrived differs from what was sent".into());
    }
    Ok(())
}

/// The plan is the one the pattern implies: every rank is a source, with its block's size,
/// packed in rank order from [`FIRST_OFFSET`].
fn check_plan(plan: &Plan, me: Rank, n: Rank) -> Outcome<()> {
    let mut offset = FIRST_OFFSET;
    let sources = plan.sources();
    if sources.len() != n as usize {
        return Err(format!("{} sources, expected {n}", sources.len()).into());
    }
    for (source, rank) in sources.iter().zip(0..n) {
        let bytes = pattern::bytes(rank, me);
        if (source.rank, source.offset, source.bytes) != (rank, offset, bytes) {
            return Err(format!("source {source:?}, expected rank {rank} at {offset}").into());
        }
        offset += bytes;
    }
    if plan.required_size() != offset - FIRST_OFFSET {
        return Err(format!("required size {}", plan.required_size()).into());
    }
    Ok(())
}

/// What one thread needs for its part of a round.
#[derive(Clone, Copy)]
struct Part<'a> {
    ctx: &'a Context,
    plan: &'a Plan,
    round: &'a Round<'a>,
    offsets: &'a [u64],
    number: u64,
    me: Rank,
    threads: usize,
}

/// A block a thread was handed.
struct Taken {
    source: Rank,
    block: Vec<u8>,
    /// Whether it held what its source sent in this round.
    intact: bool,
}

impl Part<'_> {
    /// Thread `thread` sends the blocks of destinations `thread`, `thread + threads`, ...,
    /// then takes arrivals until every source of the round was handed out.
    fn run(self, thread: usize) -> Outcome<Vec<Taken>> {
        let number = self.number;
        let destinations = self.plan.destinations().iter().zip(self.offsets);
        for (dest, &offset) in destinations.skip(thread).step_by(self.threads) {
            let block = pattern::block(self.number, self.me, dest.rank);
            self.ctx.segment_write(SOURCE, offset, &block)?;
            self.round
                .send(dest.rank, offset)
                .map_err(during(format_args!(
                    "round {number}: send to {}",
                    dest.rank
                )))?;
        }
        let mut taken = Vec::new();
        let next = || {
            self.round
                .next_arrival(TIMEOUT)
                .map_err(during(format_args!("round {number}: next_arrival")))
        };
        while let Some(source) = next()? {
            let area = self
                .plan
                .source(source)
                .ok_or_else(|| format!("round {number}: rank {source} arrived but is no source"))?;
            if (self.number + u64::from(source)).is_multiple_of(DAWDLE_EVERY) {
                thread::sleep(DAWDLE);
            }
            let mut block = vec![0u8; usize::try_from(area.bytes)?];
            self.ctx.segment_read(RECEIVE, area.offset, &mut block)?;
            self.round
                .reset(source)
                .map_err(during(format_args!("round {number}: reset {source}")))?;
            let intact = block == pattern::block(self.number, source, self.me);
            taken.push(Taken {
                source,
                block,
                intact,
            });
        }
        Ok(taken)
    }
}

/// What arrived over all rounds.
struct Tally {
    digest: Digest,
    arrivals: u64,
    per_thread: Vec<u64>,
    duplicates: u64,
    missed: u64,
    bad: u64,
    ranks: Rank,
}

impl Tally {
    fn new(ranks: Rank, threads: usize) -> Tally {
        Tally {
            digest: Digest::default(),
            arrivals: 0,
            per_thread: vec![0; threads],
            duplicates: 0,
            missed: 0,
            bad: 0,
            ranks,
        }
    }

    /// Adds round `number`, from what each thread was handed.
    fn add(&mut self, number: u64, taken: Vec<Vec<Taken>>) -> Outcome<()> {
        let mut by_source: Vec<Vec<Taken>> = (0..self.ranks).map(|_| Vec::new()).collect();
        for (thread, blocks) in taken.into_iter().enumerate() {
            self.per_thread[thread] += blocks.len() as u64;
            self.arrivals += blocks.len() as u64;
            for taken in blocks {
                by_source
                    .get_mut(taken.source as usize)
                    .ok_or_else(|| format!("rank {} is not in the job", taken.source))?
                    .push(taken);
            }
        }
        for (source, got) in (0..self.ranks).zip(&by_source) {
            match got.len() {
                0 => self.missed += 1,
                handed_out => self.duplicates += handed_out as u64 - 1,
            }
            self.bad += got.iter().filter(|taken| !taken.intact).count() as u64;
            let block = got.first().map_or(&[][..], |taken| &taken.block);
            pattern::record(&mut self.digest, number, source, got.len(), block);
        }
        Ok(())
    }
}
