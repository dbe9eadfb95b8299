//! `jitter ROUNDS`: fast senders against a slow receiver, every byte checked. Every rank sends
//! to every rank (itself too); the rounds cycle through plans of blocks from none to 40,000
//! bytes, so each pair's credits carry over from plan to plan, and three rounds of small
//! blocks in a row use both slots of the two-slot protocol and then the first again. Rank 0 is slow: it holds each
//! block it is handed for a pseudo-random pause of up to [`MAX_PAUSE_US`] before it resets it,
//! while the others run flat out, each as far ahead of rank 0 as the flow control lets it.
//!
//! Every rank compares each block, the moment it is handed out, with the bytes its sender
//! wrote for that round, and compares it again just before its reset: a block overwritten
//! while its receiver still held it (a sender that did not wait for the credit) differs
//! then. Data line `data jitter rank R`: `rounds`, `blocks` (handed out), `wrong` (blocks
//! other than their round's when handed out), `overwritten` (blocks that changed before
//! their reset).

use std::time::Duration;

use gaspi::{Context, Rank, SegmentId, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Status};

use crate::check::Report;
use crate::plan;
use crate::{Outcome, TIMEOUT};

/// Bytes per block of the plans the rounds cycle through.
pub const SIZES: [u64; 6] = [8, 1024, 100, 1025, 0, 40_000];
/// The longest pause of rank 0 before a reset.
const MAX_PAUSE_US: u64 = 400;
const RECEIVE: SegmentId = 1;
const SOURCE: SegmentId = 2;

pub fn run(ctx: &Context, rounds: u32) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let largest = SIZES.iter().max().copied().unwrap_or(0);
    // Each plan receives into its own area: a source's block of one plan may land while the
    // receiver still reads its block of the other.
    let area = largest * u64::from(n);
    ctx.segment_create(RECEIVE, area * SIZES.len() as u64, TIMEOUT)?;
    ctx.segment_create(SOURCE, largest * u64::from(n), TIMEOUT)?;
    let coll = Collectives::new(ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let mut plans = Vec::with_capacity(SIZES.len());
    for (k, &bytes) in SIZES.iter().enumerate() {
        let sends: Vec<(Rank, u64)> = (0..n).map(|t| (t, bytes)).collect();
        plans.push(a2a.get_remote_offsets(RECEIVE, area * k as u64, &sends, TIMEOUT)?);
    }
    let source = ctx.segment(SOURCE)?;
    let receive = ctx.segment(RECEIVE)?;
    let mut pauses = seed(me);
    let (mut blocks, mut wrong, mut overwritten) = (0u64, 0u64, 0u64);
    for number in 1..=u64::from(rounds) {
        let plan = &plans[(number as usize - 1) % plans.len()];
        let bytes = plan.destinations().first().map_or(0, |d| d.bytes);
        let offsets: Vec<u64> = (0..u64::from(n)).map(|i| i * bytes).collect();
        for (d, &offset) in plan.destinations().iter().zip(&offsets) {
            source.write(offset, &plan::block(number, me, d.rank, bytes))?;
        }
        while let Status::Arrived(from) = a2a.alltoallv(plan, SOURCE, &offsets, TIMEOUT)? {
            let at = plan.source(from).ok_or("an arrival from no source")?;
            let want = plan::block(number, from, me, at.bytes);
            let mut got = vec![0; want.len()];
            receive.read(at.offset, &mut got)?;
            blocks += 1;
            wrong += u64::from(got != want);
            if me == 0 {
                pauses = next(pauses);
                std::thread::sleep(Duration::from_micros(pauses % MAX_PAUSE_US));
            }
            receive.read(at.offset, &mut got)?;
            overwritten += u64::from(got != want);
            a2a.alltoallv_reset(&[from])?;
        }
    }
    // The last resets must reach their sources before the alltoallv goes.
    ctx.barrier(TIMEOUT)?;
    let mut report = Report::default();
    report.put("rounds", rounds);
    report.put("blocks", blocks);
    report.put("wrong", wrong);
    report.put("overwritten", overwritten);
    report.print("jitter", me);
    Ok(())
}

fn seed(me: Rank) -> u64 {
    0x9e37_79b9_7f4a_7c15 ^ u64::from(me)
}

/// The next state of a xorshift generator: pauses that vary, the same in every run.
fn next(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
