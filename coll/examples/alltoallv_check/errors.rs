//! `errors` (3 ranks or more): every misuse, each reported as what it returned, then rounds that
//! must still work. Two alltoallv objects over `GROUP_ALL`: A with the plans `Dense` and
//! `Ring(1)`, B with `Ring(1)` only (so a rank's next rank is no source of any plan of B).
//! Every rank makes the same calls in the same order; `t` is this rank's next rank.
//!
//! Discovery on A, each with arguments every rank passes alike: `duplicate` (`t` given twice),
//! `missing_receive` (receive segment [`MISSING`]: the discovery goes through, as the receive
//! segment may be made after it) and `missing_receive_round` (a round of that plan, refused
//! since the segment is still missing), `too_small` (every rank sends 64 bytes to rank 0,
//! whose receive area in [`SMALL`] has 64 bytes from its first offset), `past_end` (every
//! rank sends 0 bytes to `t`; rank 0's first offset, [`PAST_END`], lies past the end of its
//! receive segment [`SMALL`], which rank 0 and its previous rank are told; the others get a
//! plan).
//!
//! Before any round: `missing_source` and `missing_source_proposal` (source segment
//! [`MISSING`] in `round` and `alltoallv`), `foreign` and `foreign_proposal` (a plan of A on B).
//!
//! Round 1 of A's dense plan, before any rank sent (all meet in a barrier after these):
//! `not_arrived` and `not_arrived_proposal` (reset of source `t` through the round and through
//! `alltoallv_reset`), `in_progress` and `in_progress_proposal` (a round and an `alltoallv` of
//! A's other plan), `in_progress_object` (a round of B, the second alltoallv over the group),
//! `joined` (the number of a second `round` of the same plan, and of the first),
//! `source_offsets` (`send_all` with one offset), `unknown_destination` (a rank beyond the
//! job), `out_of_bounds` (the block for `t` from an offset one byte too far), `unsent`
//! (`finish` before any block was sent). Then every block is sent (the one for `t` too, from
//! its right offset: a rejected call sends nothing), and: `already_sent` (the block for `t`
//! again), arrivals taken and reset, `already_reset` and `already_reset_proposal` (`t` again),
//! `unknown_source` (a rank beyond the job); a second barrier keeps every rank in round 1 until
//! all have made these calls. Once the round is finished: `ended_send` (a block for `t`),
//! `ended_arrival` (`next_arrival`, `None` or `Some(rank)`), `ended_finish` (`finish` again).
//!
//! Round 2 of A's dense plan in the proposal's form; round 3 begun before any rank sent:
//! `not_arrived_later` (reset of `t`, reset in round 2 and not arrived in round 3); round 4 in
//! the proposal's blocking form: `blocking` (what its one call returned; then every source's
//! block is checked) and `blocking_reset` (every source reset at once). Then round 1 of B, where
//! `unknown_source_b` (reset of `t`) and `unknown_destination_b` (a block for the rank after
//! `t`) come before its blocks are exchanged. Last, `late_receive` on a third alltoallv: a
//! discovery before its receive segment exists, the segment made of the size it tells, and a
//! round (see [`late_receive`]); then `half_missing` on a fourth: a call that sends to two
//! ranks, one of which has not made its receive segment yet (see [`half_missing`]); then
//! `gone_receive` on a fifth: a receive segment deleted while a small block waits to be
//! handed out, and made again (see [`gone_receive`]); then `out_of_step` on a sixth: a round
//! whose members disagree on the plan (see [`out_of_step`]); then `source_again` on a seventh:
//! a source segment deleted between rounds, and made again (see [`source_again`]). `digest`:
//! every block of the five rounds.

use gaspi::{Context, Rank, SegmentId, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Plan, Round, Status};

use crate::check::{check_number, outcome, take_all, Received, Report, Setup};
use crate::plan::{self, Digest, Pattern};
use crate::{Outcome, TIMEOUT};

/// A segment id no rank creates.
pub const MISSING: SegmentId = 250;
/// The receive segment of the `too_small` discovery: [`SMALL_SIZE`] bytes on every rank.
pub const SMALL: SegmentId = 9;
pub const SMALL_SIZE: u64 = 100;
/// Where the receive area in [`SMALL`] begins, leaving 64 bytes.
pub const SMALL_FIRST: u64 = 36;
/// Rank 0's first offset in `past_end`: beyond the [`SMALL_SIZE`] bytes of [`SMALL`].
pub const PAST_END: u64 = 9999;

pub fn run(ctx: &Context) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 3 {
        return Err("errors needs at least 3 ranks".into());
    }
    let t = (me + 1) % n;
    let beyond = n + 3;
    let coll = Collectives::new(ctx)?;
    let mut a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let mut b = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let dense = Setup::create(ctx, [1, 2], 3, Pattern::Dense, 0)?;
    let ring = Setup::create(ctx, [4, 5], 6, Pattern::Ring(1), 0)?;
    let ring_b = Setup::create(ctx, [7, 8], 10, Pattern::Ring(1), 0)?;
    ctx.segment_create(SMALL, SMALL_SIZE, TIMEOUT)?;
    let mut report = Report::default();

    // Discovery.
    let first = plan::first_offset(0, me);
    let twice = a.get_remote_offsets(dense.receive, first, &[(t, 8), (t, 8)], TIMEOUT);
    report.put("duplicate", outcome(&twice));
    let missing = a.get_remote_offsets(MISSING, first, &[(t, 8)], TIMEOUT);
    report.put("missing_receive", outcome(&missing));
    if let Ok(plan) = &missing {
        report.put(
            "missing_receive_round",
            outcome(&a.round(plan, dense.source)),
        );
    }
    let small = a.get_remote_offsets(SMALL, SMALL_FIRST, &[(0, 64)], TIMEOUT);
    report.put("too_small", outcome(&small));
    let past_end_first = if me == 0 { PAST_END } else { 0 };
    let past_end = a.get_remote_offsets(SMALL, past_end_first, &[(t, 0)], TIMEOUT);
    report.put("past_end", outcome(&past_end));
    let dense_plan = dense.discover(&mut a, TIMEOUT)?;
    let ring_plan = ring.discover(&mut a, TIMEOUT)?;
    let b_plan = ring_b.discover(&mut b, TIMEOUT)?;

    // Before any round.
    let offsets = &dense.offsets;
    report.put("missing_source", outcome(&a.round(&dense_plan, MISSING)));
    let proposal = a.alltoallv(&dense_plan, MISSING, offsets, Timeout::Test);
    report.put("missing_source_proposal", outcome(&proposal));
    report.put("foreign", outcome(&b.round(&dense_plan, dense.source)));
    let proposal = b.alltoallv(&dense_plan, dense.source, offsets, Timeout::Test);
    report.put("foreign_proposal", outcome(&proposal));

    // Round 1 of the dense plan.
    let mut digest = Digest::default();
    dense.load(ctx, 1)?;
    let mut received = Received::default();
    {
        let round = a.round(&dense_plan, dense.source)?;
        check_number(&round, 1)?;
        report.put("not_arrived", outcome(&round.reset(t)));
        report.put("not_arrived_proposal", outcome(&a.alltoallv_reset(&[t])));
        report.put("in_progress", outcome(&a.round(&ring_plan, ring.source)));
        let other = a.alltoallv(&ring_plan, ring.source, &ring.offsets, Timeout::Test);
        report.put("in_progress_proposal", outcome(&other));
        let other = b.round(&b_plan, ring_b.source);
        report.put("in_progress_object", outcome(&other));
        let joined = a.round(&dense_plan, dense.source)?;
        report.put("joined", format!("{}/{}", joined.number(), round.number()));
        report.put("source_offsets", outcome(&round.send_all(&offsets[..1])));
        report.put("unknown_destination", outcome(&round.send(beyond, 0)));
        let (at, bytes) = block_for(&dense_plan, &dense, t)?;
        let size = ctx.segment_size(dense.source)?;
        let too_far = round.send(t, size - bytes + 1);
        report.put("out_of_bounds", outcome(&too_far));
        report.put("unsent", outcome(&round.finish(Timeout::Test)));
        // Nobody sends before every rank has made the calls above.
        ctx.barrier(TIMEOUT)?;
        round.send_all(offsets)?;
        report.put("already_sent", outcome(&round.send(t, at)));
        while let Some(source) = joined.next_arrival(TIMEOUT)? {
            received.add(1, source, dense.take(ctx, &dense_plan, 1, source)?)?;
            round.reset(source)?;
        }
        report.put("already_reset", outcome(&round.reset(t)));
        report.put("already_reset_proposal", outcome(&a.alltoallv_reset(&[t])));
        report.put("unknown_source", outcome(&a.alltoallv_reset(&[beyond])));
        // Nobody begins round 2 (whose block from `t` would make a reset of `t` valid again)
        // before every rank has made the calls above.
        ctx.barrier(TIMEOUT)?;
        round.finish(TIMEOUT)?;
        report.put("ended_send", outcome(&round.send(t, at)));
        let arrival = match round.next_arrival(Timeout::Test) {
            Ok(next) => format!("{next:?}"),
            failed => outcome(&failed),
        };
        report.put("ended_arrival", arrival);
        report.put("ended_finish", outcome(&round.finish(Timeout::Test)));
    }
    received.finish(1, &dense_plan, &mut digest)?;

    // Round 2 of the dense plan, in the proposal's form.
    dense.load(ctx, 2)?;
    let mut received = Received::default();
    while let Status::Arrived(source) = a.alltoallv(&dense_plan, dense.source, offsets, TIMEOUT)? {
        received.add(2, source, dense.take(ctx, &dense_plan, 2, source)?)?;
        a.alltoallv_reset(&[source])?;
    }
    received.finish(2, &dense_plan, &mut digest)?;

    // Round 3 of the dense plan, begun before anyone sends: `t` arrived and was reset in
    // round 2, and has not arrived in this one.
    dense.load(ctx, 3)?;
    let received = {
        let round = a.round(&dense_plan, dense.source)?;
        check_number(&round, 3)?;
        report.put("not_arrived_later", outcome(&round.reset(t)));
        // Nobody sends before every rank has made the call above.
        ctx.barrier(TIMEOUT)?;
        round.send_all(offsets)?;
        take_all(ctx, &round, &dense, &dense_plan, 3)?
    };
    received.finish(3, &dense_plan, &mut digest)?;

    // Round 4 in the proposal's blocking form: one call completes it, then every source is
    // there, to be reset.
    dense.load(ctx, 4)?;
    let status = a.alltoallv(&dense_plan, dense.source, offsets, Timeout::Block)?;
    report.put("blocking", format!("{status:?}"));
    let mut received = Received::default();
    let sources: Vec<Rank> = dense_plan.sources().iter().map(|s| s.rank).collect();
    for &source in &sources {
        received.add(4, source, dense.take(ctx, &dense_plan, 4, source)?)?;
    }
    report.put("blocking_reset", outcome(&a.alltoallv_reset(&sources)));
    received.finish(4, &dense_plan, &mut digest)?;

    // Round 1 of B.
    ring_b.load(ctx, 1)?;
    let received = {
        let round = b.round(&b_plan, ring_b.source)?;
        check_number(&round, 1)?;
        report.put("unknown_source_b", outcome(&round.reset(t)));
        let next_but_one = (me + 2) % n;
        report.put(
            "unknown_destination_b",
            outcome(&round.send(next_but_one, 0)),
        );
        round.send_all(&ring_b.offsets)?;
        take_all(ctx, &round, &ring_b, &b_plan, 1)?
    };
    received.finish(1, &b_plan, &mut digest)?;

    // A receive segment made after the discovery, of the size it told.
    let c = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    report.put("late_receive", late_receive(ctx, c)?);

    // One of two destinations without its receive segment yet.
    let d = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    report.put("half_missing", half_missing(ctx, d)?);

    // A receive segment deleted while a small block waits to be handed out.
    let e = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    report.put("gone_receive", gone_receive(ctx, e)?);

    // A round whose members disagree on the plan.
    let f = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    report.put("out_of_step", out_of_step(ctx, f)?);

    // A source segment deleted between rounds, and made again.
    let g = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    report.put("source_again", source_again(ctx, g)?);

    report.put("digest", digest.hex());
    report.print("errors", me);
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.barrier(TIMEOUT)?;
    Ok(())
}

/// A discovery on `a2a` before its receive segment [`LATE`] exists (each rank sends
/// [`LATE_BYTES`] to the next), the segment then made of the size it tells, and a round of
/// the plan: `<required size>/<outcome>`, the outcome `Ok` when the previous rank's block
/// arrived intact.
fn late_receive(ctx: &Context, mut a2a: Alltoallv<'_>) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let plan = a2a.get_remote_offsets(LATE, 8, &[((me + 1) % n, LATE_BYTES)], TIMEOUT)?;
    let required = plan.required_size();
    ctx.segment_create(LATE, 8 + required, TIMEOUT)?;
    ctx.segment_write(SMALL, 0, &[me as u8 + 1; LATE_BYTES as usize])?;
    while let Status::Arrived(source) = a2a.alltoallv(&plan, SMALL, &[0], TIMEOUT)? {
        let at = plan
            .source(source)
            .ok_or("an arrival from no source")?
            .offset;
        let mut got = [0u8; LATE_BYTES as usize];
        ctx.segment_read(LATE, at, &mut got)?;
        if got != [source as u8 + 1; LATE_BYTES as usize] {
            return Ok(format!("{required}/rank {source}'s block differs: {got:?}"));
        }
        a2a.alltoallv_reset(&[source])?;
    }
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.barrier(TIMEOUT)?;
    Ok(format!("{required}/Ok"))
}

/// The receive segment of [`late_receive`], made after its discovery.
const LATE: SegmentId = 11;
const LATE_BYTES: u64 = 48;

/// Rank 0 sends [`LATE_BYTES`] to ranks 1 and 2; ranks 0 and 1 receive into [`HALF_MADE`],
/// made before the discovery, rank 2 into [`HALF_LATE`], made only after rank 0's first call
/// that did not time out (each bounded by [`HALF_FIRST`]). That call must name rank 2's missing segment and still send
/// the block for rank 1 (before the fix it dropped it, marked sent, and reported the round
/// complete later while rank 1 waited for ever); once rank 2's segment is there, rank 0's
/// next calls complete the round. Outcome on rank 0: `<first call>/<last status>`; on ranks 1
/// and 2: `<what arrived>/<status after its reset>`, `Arrived(0)/Complete` when rank 0's
/// block came intact (else what differed, or the error, within [`HALF_WAIT`]); others `-`.
fn half_missing(ctx: &Context, mut a2a: Alltoallv<'_>) -> Outcome<String> {
    let me = ctx.rank();
    ctx.segment_create(HALF_MADE, LATE_BYTES, TIMEOUT)?;
    let receive = if me == 2 { HALF_LATE } else { HALF_MADE };
    let sends = match me {
        0 => vec![(1, LATE_BYTES), (2, LATE_BYTES)],
        _ => Vec::new(),
    };
    let offsets: Vec<u64> = (0..sends.len() as u64).map(|i| i * LATE_BYTES).collect();
    let plan = a2a.get_remote_offsets(receive, 0, &sends, TIMEOUT)?;
    ctx.segment_write(SMALL, 0, &[0xa5; 2 * LATE_BYTES as usize])?;
    let first = match me {
        // Through the fabric the lookup of rank 2's segment may take longer than a call:
        // called again until it tells.
        0 => loop {
            match a2a.alltoallv(&plan, SMALL, &offsets, HALF_FIRST) {
                Err(e) if e.is_timeout() => continue,
                told => break outcome(&told),
            }
        },
        _ => String::new(),
    };
    // Rank 2 makes its segment only now: `segment_create` makes it before it synchronises.
    ctx.barrier(TIMEOUT)?;
    ctx.segment_create(HALF_LATE, LATE_BYTES, TIMEOUT)?;
    let told = match me {
        0 => {
            let mut status = a2a.alltoallv(&plan, SMALL, &offsets, TIMEOUT);
            while matches!(status, Ok(Status::Arrived(_))) {
                status = a2a.alltoallv(&plan, SMALL, &offsets, TIMEOUT);
            }
            format!("{first}/{}", status_of(&status))
        }
        1 | 2 => match a2a.alltoallv(&plan, SMALL, &offsets, HALF_WAIT) {
            Ok(Status::Arrived(0)) => {
                let mut got = [0u8; LATE_BYTES as usize];
                ctx.segment_read(receive, 0, &mut got)?;
                if got != [0xa5; LATE_BYTES as usize] {
                    format!("rank 0's block differs: {got:?}")
                } else {
                    a2a.alltoallv_reset(&[0])?;
                    let status = a2a.alltoallv(&plan, SMALL, &offsets, TIMEOUT)?;
                    format!("Arrived(0)/{status:?}")
                }
            }
            other => status_of(&other),
        },
        _ => "-".into(),
    };
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.barrier(TIMEOUT)?;
    Ok(told)
}

/// Each rank sends [`GONE_BYTES`] (a small block, which waits in the receiver's control
/// segment) to the next, into [`GONE`]; once every block is sent, each rank deletes `GONE` and
/// asks for the next arrival, which must name the missing segment, then asks again, which
/// must name it again (before the fix the block's notification was gone with the first
/// call, and this one timed out), then makes `GONE` again and asks a third time, which must
/// hand out the previous rank's block intact (before the fix it timed out), and the round
/// must finish. Outcome: `<first>/<second>/<third>/<finish>`, the third `Arrived(<rank>)`
/// when the block came intact.
fn gone_receive(ctx: &Context, mut a2a: Alltoallv<'_>) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    ctx.segment_create(GONE, GONE_BYTES, TIMEOUT)?;
    let plan = a2a.get_remote_offsets(GONE, 0, &[((me + 1) % n, GONE_BYTES)], TIMEOUT)?;
    ctx.segment_write(SMALL, 0, &[me as u8 + 0x30; GONE_BYTES as usize])?;
    let round = a2a.round(&plan, SMALL)?;
    round.send_all(&[0])?;
    // Every block is posted before any receive segment goes: a block for a deleted segment
    // is refused at its sending (see `Round::send`), which is not what this checks.
    ctx.barrier(TIMEOUT)?;
    ctx.segment_delete(GONE)?;
    let first = outcome(&round.next_arrival(TIMEOUT));
    let second = outcome(&round.next_arrival(GONE_WAIT));
    ctx.segment_create(GONE, GONE_BYTES, TIMEOUT)?;
    let third = hand_out(ctx, &round, round.next_arrival(GONE_WAIT), GONE, 0x30)?;
    let finished = outcome(&round.finish(GONE_WAIT));
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.barrier(TIMEOUT)?;
    Ok(format!("{first}/{second}/{third}/{finished}"))
}

/// What `arrival` handed out: `Arrived(<rank>)` once the source's block of [`GONE_BYTES`]
/// at offset 0 of `receive`, each byte its rank plus `fill`, was found intact and reset.
fn hand_out(
    ctx: &Context,
    round: &Round<'_>,
    arrival: gaspi_coll::Result<Option<Rank>>,
    receive: SegmentId,
    fill: u8,
) -> Outcome<String> {
    Ok(match arrival {
        Ok(Some(source)) => {
            let mut got = [0u8; GONE_BYTES as usize];
            ctx.segment_read(receive, 0, &mut got)?;
            if got != [source as u8 + fill; GONE_BYTES as usize] {
                format!("rank {source}'s block differs: {got:?}")
            } else {
                round.reset(source)?;
                format!("Arrived({source})")
            }
        }
        Ok(None) => "None".into(),
        other => outcome(&other),
    })
}

/// The receive segment of [`gone_receive`], and its block size (at most 1 KiB: small).
const GONE: SegmentId = 14;
const GONE_BYTES: u64 = 40;
/// How long [`gone_receive`] waits where a lost block would leave it waiting for ever.
const GONE_WAIT: Timeout = Timeout::Millis(2_000);

/// Two plans of `a2a` alike (each rank sends [`GONE_BYTES`] to the next), the first into
/// [`STEP_FIRST`], the second into [`STEP_SECOND`]; rank 0 begins a round of the second, the
/// others of the first. Rank 1 gets rank 0's block of the second plan, and rank 0 the last
/// rank's of the first: each asks for the next arrival, which must name the source out of
/// step, then asks again, which must name it again (before the fix the block's notification
/// was gone with the first call, and this one timed out), then tries to finish, which must
/// name it too. The other ranks' round goes through. Outcome: `<first>/<second>/<finish>`,
/// the first `Arrived(<rank>)` when the previous rank's block came intact.
fn out_of_step(ctx: &Context, mut a2a: Alltoallv<'_>) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let sends = [((me + 1) % n, GONE_BYTES)];
    let mut plans = Vec::new();
    for receive in [STEP_FIRST, STEP_SECOND] {
        ctx.segment_create(receive, GONE_BYTES, TIMEOUT)?;
        plans.push((
            receive,
            a2a.get_remote_offsets(receive, 0, &sends, TIMEOUT)?,
        ));
    }
    let (receive, plan) = &plans[usize::from(me == 0)];
    ctx.segment_write(SMALL, 0, &[me as u8 + 0x50; GONE_BYTES as usize])?;
    let round = a2a.round(plan, SMALL)?;
    round.send_all(&[0])?;
    let first = hand_out(ctx, &round, round.next_arrival(TIMEOUT), *receive, 0x50)?;
    let second = match round.next_arrival(GONE_WAIT) {
        Ok(next) => format!("{next:?}"),
        other => outcome(&other),
    };
    let finished = outcome(&round.finish(GONE_WAIT));
    // An alltoallv is dropped only once its rounds are over on every member (here, once
    // every member made its calls: the rounds out of step never end).
    ctx.barrier(TIMEOUT)?;
    Ok(format!("{first}/{second}/{finished}"))
}

/// Each rank sends [`GONE_BYTES`] to the next, into [`AGAIN_RECEIVE`], from its segment
/// [`AGAIN`], which the alltoallv keeps (as a target) between rounds: a round from `AGAIN`
/// filled with the rank plus 0x60; then `AGAIN` is deleted, and a round from it must be
/// refused, naming it; then it is made again, filled with the rank plus 0x70, and a round must
/// send the new bytes (a target kept without looking whether its segment is still current
/// began the refused round). Outcome: `<first>/<missing>/<second>`,
/// each round `Arrived(<rank>)` when the previous rank's block came as its source held it.
fn source_again(ctx: &Context, mut a2a: Alltoallv<'_>) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    ctx.segment_create(AGAIN_RECEIVE, GONE_BYTES, TIMEOUT)?;
    let sends = [((me + 1) % n, GONE_BYTES)];
    let plan = a2a.get_remote_offsets(AGAIN_RECEIVE, 0, &sends, TIMEOUT)?;
    let mut told = Vec::new();
    for fill in [0x60, 0x70] {
        ctx.segment_create(AGAIN, GONE_BYTES, TIMEOUT)?;
        ctx.segment_write(AGAIN, 0, &[me as u8 + fill; GONE_BYTES as usize])?;
        let round = a2a.round(&plan, AGAIN)?;
        round.send_all(&[0])?;
        let arrival = round.next_arrival(TIMEOUT);
        told.push(hand_out(ctx, &round, arrival, AGAIN_RECEIVE, fill)?);
        round.finish(TIMEOUT)?;
        // Every own block completed: the source may go.
        ctx.segment_delete(AGAIN)?;
        if told.len() == 1 {
            told.push(outcome(&a2a.round(&plan, AGAIN)));
        }
    }
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.barrier(TIMEOUT)?;
    Ok(told.join("/"))
}

/// The source and receive segments of [`source_again`].
const AGAIN: SegmentId = 17;
const AGAIN_RECEIVE: SegmentId = 18;

/// The receive segments of the two plans of [`out_of_step`].
const STEP_FIRST: SegmentId = 15;
const STEP_SECOND: SegmentId = 16;

/// `status` as the status, or the error as [`outcome`] names it.
fn status_of(status: &gaspi_coll::Result<Status>) -> String {
    match status {
        Ok(status) => format!("{status:?}"),
        Err(_) => outcome(status),
    }
}

/// The receive segments of [`half_missing`].
const HALF_MADE: SegmentId = 12;
const HALF_LATE: SegmentId = 13;
/// Rank 0's first call in [`half_missing`], before rank 2's segment exists.
const HALF_FIRST: Timeout = Timeout::Millis(300);
/// How long ranks 1 and 2 wait for rank 0's block in [`half_missing`]: far beyond its
/// coming, and short enough that a lost block fails the job soon.
const HALF_WAIT: Timeout = Timeout::Millis(10_000);

/// Where the block for `target` is read from, and its size.
fn block_for(plan: &Plan, setup: &Setup, target: Rank) -> Outcome<(u64, u64)> {
    let i = plan
        .destinations()
        .iter()
        .position(|d| d.rank == target)
        .ok_or_else(|| format!("rank {target} is not a destination"))?;
    Ok((setup.offsets[i], plan.destinations()[i].bytes))
}
