//! `library`: the library API, used by two libraries and the user at once.
//!
//! 1. **Namespaces.** On every rank three threads start together: library `lib-a` creates three
//!    segments and a notification table over `GROUP_ALL`, library `lib-b` creates a team of all
//!    ranks, two segments over it and (on the even ranks, between the two) a team of the even
//!    ranks, while the user creates segments 0..=3 and two groups. The user's segment list and
//!    group ids must be what they would be without libraries, a second `lib-a` is refused, and
//!    every rank writes a pattern into each segment of its right neighbour, user and library
//!    alike (their local ids overlap numerically), with a notification in that segment's own
//!    table: each segment must hold exactly its own data and have exactly its own notification.
//! 2. **Data paths.** A ring of `write_notify` through a library segment, polled with
//!    `Batch::test` and `Context::progress`; `write_notify_to` (data into a user segment, the
//!    notification into lib-a's table); `write_notify_each` from rank 0 to every other rank;
//!    `Batch::read`; `Batch::notify` into the table; `notify_wait_any` over a user range and a
//!    library range at once; `write_notify_from` out of ordinary memory (only on the direct
//!    path: refused, with nothing written, through the fabric) and `write_from` beyond the
//!    target. Every byte and notification value is checked. Then a reduction
//!    as a library builds one: contributions gathered over lib-b's team with
//!    `write_notify_each`, folded in member order with `ReduceOp::apply` and `UserOp::apply`.
//! 3. **Atomics.** Every rank adds to a word of rank 0's lib-a segment (`atomic_fetch_add_at`)
//!    and of rank 0's user segment 3 (`atomic_fetch_add_nb`), waiting with `test` loops and
//!    `wait`: exact totals, distinct fetched values. Then each rank adds to its right
//!    neighbour's words with a notification (`atomic_fetch_add_at` with `Some(..)`,
//!    `atomic_fetch_add_notify`): whoever sees the notification must see the new word.
//! 4. **Errors a library gets**: `BatchFull`, a notification beyond a table, a target range
//!    outside its segment, a segment with no notifications.
//! 5. **Churn.** Three libraries, each on a thread of its own, create a segment over
//!    `GROUP_ALL`, move a pattern into the right neighbour's and drop it, round after round: a
//!    segment one library drops frees the local id that another's next creation takes (the
//!    lowest free one), and every round's segment must be reachable with its own data.
//! 6. **Abandoned creations.** Rank 0 starts a segment creation of a library of its own that
//!    no other rank joins, and drops the library after the creation's timeout, more often than
//!    a rank has library ids: each dropped library must give its segment back, so that a
//!    creation of every rank afterwards succeeds (`after_abandoned`).
//! 7. **A library's stale target.** Library `stale-x` makes a segment over `GROUP_ALL`, and
//!    rank 0 drops its part while the others keep theirs and a target of it, as a library
//!    whose teardown is not synchronised does; rank 0's next library segment, of library
//!    `stale-y` over a team of rank 0 alone, takes the same local id. A write with a
//!    notification, a notification and an atomic that notifies, through the kept target, and
//!    a write into a user segment notified in the kept target's table (`write_notify_to`),
//!    must each fail with `UnknownSegment` naming rank 0's old id, and `stale-y`'s segment
//!    must stay untouched (`stale_untouched`).
//! 8. **A library registered again.** Ranks 0 and 1 make a team of the two in library
//!    `again`; rank 0 completes it, drops the library, registers it again and starts the same
//!    team creation, all before rank 1, which started the first, takes rank 0's message of
//!    it (a passive message behind rank 0's second one tells rank 1 when). Rank 1 must
//!    complete both creations (`reregistered`), each with its own message.
//! 9. **A creation's leftover.** Over a team of ranks 0 and 1, rank 0 alone starts a segment
//!    creation of library `leftover` and abandons it (a test, then drops the library); its
//!    part reaches rank 1 all the same. Rank 0's next segment, of another library, takes the
//!    freed local id. Both then register `leftover` again and create: rank 1's creation pairs
//!    with rank 0's leftover part (rank 0's is one further and times out), so it names rank
//!    0's segment that is gone: a target of it there must be `UnknownSegment`
//!    (`leftover_target`), never the other library's segment, which stays untouched
//!    (`leftover_untouched`).
//!
//! The observations go to the data line (see `tests/library.rs`, which judges them).

use std::collections::BTreeSet;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use gaspi::{
    remote, AtomicRequest, Context, Error, GroupId, Library, Notification, Rank, Segment,
    SegmentId, Target, Team, Timeout, GROUP_ALL,
};

use crate::check::{compare, describe, ensure, fill_pattern, seed, Data, Doing, Failure, Outcome};
use crate::check::{outcome, Report};

const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// Size of every segment but lib-a's error segment.
const SIZE: u64 = 64 << 10;
/// Phase 1: each rank fills the first half of its segments and sends it into the second half
/// of its right neighbour's.
const HALF: u64 = SIZE / 2;
/// Notifications of each library segment.
const NOTES: u32 = 16;
/// Notifications of lib-a's table without memory.
const TABLE: u32 = 64;
const USER_SEGMENTS: [SegmentId; 4] = [0, 1, 2, 3];

/// Phase 2 layout of lib-a's ring segment: disjoint areas, none on a multiple of the others'
/// lengths, all longer than an injected write (64 B over tcp, 4 KiB over shm) except `ANY`.
const RING_SRC: u64 = 0;
const RING_DST: u64 = 8 << 10;
const RING_LEN: u64 = 6000;
const TO_USER_SRC: u64 = 16 << 10;
const TO_USER_LEN: u64 = 3000;
const EACH_SRC: u64 = 24 << 10;
const EACH_DST: u64 = 32 << 10;
const EACH_LEN: u64 = 5000;
const READ_DST: u64 = 40 << 10;
const ANY_SRC: u64 = 48 << 10;
const ANY_LEN: u64 = 100;
/// Where `write_notify_from` puts its bytes of ordinary memory.
const FROM_DST: u64 = 56 << 10;
const FROM_LEN: u64 = 5000;
/// The user segment whose table `write_notify_to` must leave alone (its data goes there).
const TO_USER_SEG: SegmentId = 1;
/// The user segment of `notify_wait_any`'s user range.
const ANY_SEG: SegmentId = 2;
/// The user segment of the atomics.
const ATOMIC_SEG: SegmentId = 3;
/// Notification ids: in lib-a's ring segment, table, and the user segments.
const RING_ID: u32 = 1;
const EACH_ID: u32 = 3;
const EACH_VALUE: u32 = 77;
const TO_USER_ID: u32 = 2;
const TABLE_ID: u32 = 4;
const ANY_USER_ID: u32 = 5;
const ANY_TABLE_ID: u32 = 10;
const FROM_ID: u32 = 6;
const ATOMIC_NOTE_LIB: u32 = 1;
const ATOMIC_NOTE_USER: u32 = 6;

/// Phase 3: the word every rank adds to (on rank 0), and the word the left neighbour adds
/// to with a notification (on every rank), in lib-a's atomics segment and user segment 3.
const SUM_WORD: u64 = 0;
const NOTIFY_WORD: u64 = 8;
const ADDS: u64 = 40;
/// Atomics in flight at once from one rank (the runtime has 64 slots per rank).
const WAVE: u64 = 8;

/// Phase 5: libraries that create and drop segments at once, and their rounds each.
const CHURN_LIBRARIES: u64 = 3;
const CHURN_ROUNDS: u64 = 100;
const CHURN_LEN: u64 = 64;

/// Phase 4: lib-a's error segment, and a read that is surely still in flight when the next
/// operation is posted.
const ERR_SIZE: u64 = 1 << 20;
const BIG: u64 = 512 << 10;
const TRACKED: u64 = 8 << 10;

/// Tags of the patterns, so that no two areas ever hold the same bytes.
const SEPARATE: u64 = 1;
const RING: u64 = 2;
const TO_USER: u64 = 3;
const EACH: u64 = 4;
const ANY: u64 = 5;
const FROM_MEMORY: u64 = 6;

pub fn run(ctx: &Context) -> Outcome<Report> {
    let mut data = Data::default();
    let me = ctx.rank();
    let start = Barrier::new(3);
    let (a, b, groups) = thread::scope(|s| {
        let a = s.spawn(|| setup_a(ctx, &start));
        let b = s.spawn(|| setup_b(ctx, &start));
        let user = s.spawn(|| setup_user(ctx, &start));
        Ok::<_, Failure>((
            joined("lib-a", a.join())?,
            joined("lib-b", b.join())?,
            joined("user", user.join())?,
        ))
    })?;
    let (a, b, groups) = (a?, b?, groups?);

    let segments = ctx.segment_list();
    data.put("user_segments", list(&segments));
    data.put("user_groups", list(&groups));
    ensure!(
        segments == USER_SEGMENTS,
        "the user's segments are {segments:?} next to the libraries' (want {USER_SEGMENTS:?})"
    );
    ensure!(
        groups == [1, 2],
        "the user's groups got ids {groups:?} next to the libraries' teams (want [1, 2])"
    );
    let again = ctx.library("lib-a");
    data.outcome("second_register", &again);
    ensure!(
        matches!(&again, Err(Error::LibraryExists { name }) if name == "lib-a"),
        "registering lib-a a second time: {}",
        outcome(&again)
    );
    drop(again);
    ensure!(
        a.lib.name() == "lib-a",
        "lib-a is called {:?}",
        a.lib.name()
    );
    b.record(ctx, &mut data)?;
    let ids = a.record_ids(ctx, &b, &mut data)?;

    let user = USER_SEGMENTS
        .iter()
        .map(|&id| {
            ctx.segment(id)
                .doing(|| format!("the handle of user segment {id}"))
        })
        .collect::<Outcome<Vec<_>>>()?;
    separate(ctx, &a, &b, &user, &mut data)?;
    // Phase 3 starts from zero words; zeroed before the barrier, which also keeps phase 2's
    // writes out of the halves the neighbours are still checking.
    let zero = [0u8; 8];
    for word in [SUM_WORD, NOTIFY_WORD] {
        if word == NOTIFY_WORD || me == 0 {
            a.atom.write(word, &zero).doing(|| "zeroing a lib-a word")?;
            ctx.segment_write(ATOMIC_SEG, word, &zero)
                .doing(|| "zeroing a user word")?;
        }
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the namespace checks")?;

    data_paths(ctx, &a, &user, &mut data)?;
    reduction(ctx, &b, &mut data)?;
    atomics(ctx, &a, &mut data)?;
    errors(ctx, &a, &mut data)?;
    group_snapshot(ctx, &a, &mut data)?;
    churn(ctx, &mut data)?;
    abandoned(ctx, &mut data)?;
    stale(ctx, &mut data)?;
    reregistered(ctx, &mut data)?;
    leftover(ctx, &mut data)?;
    // No rank drops its library segments (at the end of this function) while another may
    // still write into them.
    ctx.barrier(TIMEOUT).doing(|| "final barrier")?;
    let n = ctx.size();
    Ok(Report {
        summary: format!(
            "lib-a, lib-b and the user created concurrently: user segments {}, groups {}, \
             library ids {ids}; 10 segments kept their own data and notifications; ring, \
             write_notify_to, write_notify_each, read, notify and notify_wait_any checked; \
             gathered contributions folded with ReduceOp and UserOp::apply; \
             {n} x {ADDS} atomics exact on a library and a user word; notifying atomics and \
             library errors as expected",
            list(&segments),
            list(&groups),
        ),
        data,
    })
}

/// Phase 5: the rounds of library `k`: each moves a pattern naming the library, the round and
/// the sender into the right neighbour's segment of that round, with a notification, and
/// takes the left neighbour's; a second notification tells the neighbour that its segment
/// may go.
fn churn_rounds(ctx: &Context, k: u64) -> Outcome<u64> {
    let (me, n) = (ctx.rank(), ctx.size());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let lib = ctx
        .library(&format!("churn-{k}"))
        .doing(|| format!("registering churn-{k}"))?;
    for round in 0..CHURN_ROUNDS {
        let at = || format!("churn-{k} round {round}");
        let seg = lib
            .segment_create(GROUP_ALL, 2 * CHURN_LEN, 2, TIMEOUT)
            .doing(|| format!("{}: creating its segment", at()))?;
        let to = seg
            .target(right, TIMEOUT)
            .doing(|| format!("{}: the right neighbour's segment", at()))?;
        seg.write(0, &pattern(&[k, round, u64::from(me)], CHURN_LEN))
            .doing(|| format!("{}: packing", at()))?;
        let batch = ctx.batch();
        let sent = Notification {
            id: 0,
            value: round as u32 + 1,
        };
        batch
            .write_notify(&seg, 0, &to, CHURN_LEN, CHURN_LEN, sent)
            .doing(|| format!("{}: write_notify", at()))?;
        batch
            .wait(TIMEOUT)
            .doing(|| format!("{}: its write", at()))?;
        let value = take(&seg, 0, &at())?;
        ensure!(value == sent.value, "{}: notification value {value}", at());
        let got = read(&seg, CHURN_LEN, CHURN_LEN, &at())?;
        compare(
            at(),
            &got,
            &pattern(&[k, round, u64::from(left)], CHURN_LEN),
        )?;
        batch
            .notify(&to, Notification { id: 1, value: 1 })
            .doing(|| format!("{}: telling the neighbour", at()))?;
        batch
            .wait(TIMEOUT)
            .doing(|| format!("{}: its notify", at()))?;
        take(&seg, 1, &format!("{}: the left neighbour's word", at()))?;
    }
    Ok(CHURN_ROUNDS)
}

/// Phase 5, see the module documentation.
fn churn(ctx: &Context, data: &mut Data) -> Outcome {
    let rounds = thread::scope(|s| {
        let threads: Vec<_> = (0..CHURN_LIBRARIES)
            .map(|k| s.spawn(move || churn_rounds(ctx, k)))
            .collect();
        threads
            .into_iter()
            .map(|t| joined("churn", t.join())?)
            .sum::<Outcome<u64>>()
    })?;
    data.put("churn_rounds", rounds);
    Ok(())
}

/// Phase 6: more abandoned creations than a rank has library ids (255).
const ABANDONED: u64 = 260;

/// Phase 6, see the module documentation.
fn abandoned(ctx: &Context, data: &mut Data) -> Outcome {
    if ctx.rank() == 0 && ctx.size() > 1 {
        for i in 0..ABANDONED {
            let lib = ctx
                .library("abandoned")
                .doing(|| format!("registering abandoned library {i}"))?;
            let made = lib.segment_create(GROUP_ALL, CHURN_LEN, 1, Timeout::Test);
            timed_out(
                &made,
                format!("abandoned creation {i}, which no other rank joins"),
            )?;
        }
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the abandoned creations")?;
    let lib = ctx
        .library("after-abandoned")
        .doing(|| "registering after-abandoned")?;
    let made = lib.segment_create(GROUP_ALL, CHURN_LEN, 1, TIMEOUT);
    data.outcome("after_abandoned", &made);
    ensure!(
        made.is_ok(),
        "a creation after rank 0's abandoned ones: {}",
        outcome(&made)
    );
    Ok(())
}

/// Phase 7: the words and notification `stale-x`'s kept target aims at.
const STALE_LEN: u64 = 256;
const STALE_ID: u32 = 1;

/// Phase 7, see the module documentation.
fn stale(ctx: &Context, data: &mut Data) -> Outcome {
    let me = ctx.rank();
    let x = ctx.library("stale-x").doing(|| "registering stale-x")?;
    let y = ctx.library("stale-y").doing(|| "registering stale-y")?;
    let old = x
        .segment_create(GROUP_ALL, STALE_LEN, NOTES, TIMEOUT)
        .doing(|| "stale-x's segment")?;
    let kept = old
        .target(0, TIMEOUT)
        .doing(|| "stale-x's target on rank 0")?;
    let mine_id = local_id(ctx, &old, "stale-x's segment")?;
    ctx.barrier(TIMEOUT).doing(|| "barrier before the drop")?;
    let mut new = None;
    if me == 0 {
        drop(old);
        new = Some(taking(ctx, &y, mine_id, "stale-y's segment")?);
    }
    ctx.barrier(TIMEOUT).doing(|| "barrier after the reuse")?;
    if me != 0 {
        // Rank 0's local id of the segment, as the kept target names it.
        let old_id = match kept.range(kept.len() + 1, 0) {
            Err(Error::OutOfBounds { segment, .. }) => segment,
            other => return Err(Failure(format!("a range past stale-x's end: {other:?}"))),
        };
        let mine = y
            .team(&[me], TIMEOUT)
            .and_then(|alone| y.segment_create(&alone, STALE_LEN, NOTES, TIMEOUT))
            .doing(|| "stale-y's source segment")?;
        let batch = ctx.batch();
        let note = Notification {
            id: STALE_ID,
            value: 1,
        };
        let write = batch
            .write_notify(&mine, 0, &kept, 0, STALE_LEN, note)
            .and_then(|()| batch.wait(TIMEOUT));
        let notify = batch.notify(&kept, note).and_then(|()| batch.wait(TIMEOUT));
        let user = ctx
            .target(0, TO_USER_SEG, TIMEOUT)
            .doing(|| "user segment 1 on rank 0")?;
        let write_to = batch
            .write_notify_to(&mine, 0, &user, 0, STALE_LEN, &kept, note)
            .and_then(|()| batch.wait(TIMEOUT));
        let atomic = ctx
            .atomic_fetch_add_at(&kept, 0, 1, Some(note))
            .and_then(|request| request.wait(TIMEOUT));
        let want = format!("UnknownSegment(0,{old_id})");
        for (key, got) in [
            ("stale_write", outcome(&write)),
            ("stale_notify", outcome(&notify)),
            ("stale_write_to", outcome(&write_to)),
            ("stale_atomic", outcome(&atomic)),
        ] {
            ensure!(
                got == want,
                "{key} through a kept target: {got} (want {want})"
            );
            data.put(key, got);
        }
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the stale operations")?;
    if let Some(seg) = new {
        let untouched = untouched(&seg, "stale-y's segment")?;
        ensure!(
            untouched,
            "stale-y's segment got a stale target's operations"
        );
        data.put("stale_untouched", untouched);
    }
    Ok(())
}

/// Phase 8: what rank 1 waits for its second team creation before it calls it timed out,
/// well after rank 0 sent its part.
const REREGISTERED_WAIT: Timeout = Timeout::Millis(5_000);

/// Phase 8: the library and the pair its teams are made of.
const AGAIN: &str = "again";
const PAIR: [Rank; 2] = [0, 1];

/// Phase 8: completes (or continues) the first team of `lib`, drops the library and
/// registers it again.
fn registered_again<'c>(ctx: &'c Context, lib: Library<'c>, me: Rank) -> Outcome<Library<'c>> {
    lib.team(&PAIR, TIMEOUT)
        .doing(|| format!("rank {me}'s first team of library again"))?;
    drop(lib);
    ctx.library(AGAIN)
        .doing(|| format!("registering again a second time on rank {me}"))
}

/// Phase 8, see the module documentation.
fn reregistered(ctx: &Context, data: &mut Data) -> Outcome {
    let me = ctx.rank();
    let first = match me {
        1 => {
            let lib = ctx.library(AGAIN).doing(|| "registering again on rank 1")?;
            // Its part leaves now; rank 0 joins after the barrier.
            let started = lib.team(&PAIR, Timeout::Test);
            timed_out(
                &started,
                "rank 1's first team of library again, before rank 0 joins",
            )?;
            Some(lib)
        }
        _ => None,
    };
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before rank 0 joins library again")?;
    match me {
        0 if ctx.size() > 1 => {
            let lib = ctx.library(AGAIN).doing(|| "registering again on rank 0")?;
            let lib = registered_again(ctx, lib, me)?;
            let started = lib.team(&PAIR, Timeout::Test);
            timed_out(
                &started,
                "rank 0's second team of library again, before rank 1 joins",
            )?;
            ctx.passive_send(1, b"second", TIMEOUT)
                .doing(|| "telling rank 1 that the second creation started")?;
            let made = lib.team(&PAIR, TIMEOUT);
            data.outcome("reregistered", &made);
            made.doing(|| "rank 0's second team of library again")?;
        }
        1 => {
            let (from, _) = ctx
                .passive_receive(TIMEOUT)
                .doing(|| "waiting for rank 0's second creation")?;
            ensure!(from == 0, "a passive message from rank {from}, not rank 0");
            let lib = first.ok_or_else(|| Failure("rank 1 lost its library".into()))?;
            let lib = registered_again(ctx, lib, me)?;
            let made = lib.team(&PAIR, REREGISTERED_WAIT);
            data.outcome("reregistered", &made);
            made.doing(|| "rank 1's second team of library again")?;
        }
        _ => data.put("reregistered", "Ok"),
    }
    Ok(())
}

/// Phase 9: what the creation that pairs with a leftover waits on the member one further.
const LEFTOVER_WAIT: Timeout = Timeout::Millis(300);

/// Phase 9, see the module documentation.
fn leftover(ctx: &Context, data: &mut Data) -> Outcome {
    let me = ctx.rank();
    let pair_lib = ctx
        .library("leftover-pair")
        .doing(|| "registering leftover-pair")?;
    let pair = match me {
        0 | 1 if ctx.size() > 1 => Some(pair_lib.team(&PAIR, TIMEOUT).doing(|| "the pair")?),
        _ => None,
    };
    let mut old_id = None;
    if let (Some(pair), 0) = (&pair, me) {
        let lib = ctx.library("leftover").doing(|| "registering leftover")?;
        let started = lib.segment_create(pair, STALE_LEN, NOTES, Timeout::Test);
        timed_out(
            &started,
            "rank 0's creation of leftover, which rank 1 does not join",
        )?;
        // The id the abandoned creation took is the lowest free one, as is the next.
        let (_, beside) = alone_on_0(ctx, &lib, "a segment beside the abandoned one")?;
        old_id = Some(beside - 1);
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the abandoned creation")?;
    let mut other = None;
    if let Some(old_id) = old_id {
        let lib = ctx
            .library("leftover-other")
            .doing(|| "registering leftover-other")?;
        other = Some(taking(ctx, &lib, old_id, "leftover-other's segment")?);
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the id was taken")?;
    if let Some(pair) = &pair {
        let lib = ctx
            .library("leftover")
            .doing(|| "registering leftover again")?;
        let made = lib.segment_create(pair, STALE_LEN, NOTES, LEFTOVER_WAIT);
        if me == 1 {
            let seg = made.doing(|| "rank 1's creation, paired with the leftover")?;
            let reached = seg.target(0, TIMEOUT).and_then(|target| {
                let batch = ctx.batch();
                let note = Notification {
                    id: STALE_ID,
                    value: 1,
                };
                batch.write_notify(&seg, 0, &target, 0, STALE_LEN, note)?;
                batch.wait(TIMEOUT)
            });
            data.outcome("leftover_target", &reached);
        } else {
            timed_out(&made, "rank 0's creation one further than rank 1's")?;
        }
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the leftover's use")?;
    if let Some(seg) = other {
        data.put(
            "leftover_untouched",
            untouched(&seg, "leftover-other's segment")?,
        );
    }
    Ok(())
}

/// Phases 7 and 9: whether `seg` (`what`) still holds no byte and no notification
/// [`STALE_ID`] of the stale operations aimed at it.
fn untouched(seg: &Segment<'_>, what: &str) -> Outcome<bool> {
    let bytes = read(seg, 0, STALE_LEN, what)?;
    let noted = seg
        .notify_peek(STALE_ID)
        .doing(|| format!("{what}: its notification"))?;
    Ok(bytes.iter().all(|&b| b == 0) && noted == 0)
}

/// Phases 7 and 9: a segment of `lib` on rank 0 alone, and its local id.
fn alone_on_0<'c>(
    ctx: &'c Context,
    lib: &Library<'c>,
    what: &str,
) -> Outcome<(Segment<'c>, SegmentId)> {
    let seg = lib
        .team(&[0], TIMEOUT)
        .and_then(|alone| lib.segment_create(&alone, STALE_LEN, NOTES, TIMEOUT))
        .doing(|| what.to_owned())?;
    let id = local_id(ctx, &seg, what)?;
    Ok((seg, id))
}

/// [`alone_on_0`], which must take local id `freed`, given up just before: without the
/// reuse there is nothing to check (the ids are the lowest free ones).
fn taking<'c>(
    ctx: &'c Context,
    lib: &Library<'c>,
    freed: SegmentId,
    what: &str,
) -> Outcome<Segment<'c>> {
    let (seg, id) = alone_on_0(ctx, lib, what)?;
    ensure!(
        id == freed,
        "{what} took local id {id}, not the freed {freed}"
    );
    Ok(seg)
}

/// Checks that `result`, of a call that no other rank joins yet, is a timeout.
fn timed_out<T>(result: &gaspi::Result<T>, what: impl std::fmt::Display) -> Outcome {
    ensure!(
        matches!(result, Err(e) if e.is_timeout()),
        "{what}: {}",
        outcome(result)
    );
    Ok(())
}

fn joined<T>(what: &str, result: thread::Result<T>) -> Outcome<T> {
    result.map_err(|_| Failure(format!("the {what} thread panicked")))
}

fn list<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn pattern(parts: &[u64], len: u64) -> Vec<u8> {
    // Every length here is at most a segment of this scenario, which fits in memory.
    let mut buf = vec![0u8; len as usize];
    fill_pattern(seed(parts), &mut buf);
    buf
}

fn read(seg: &Segment<'_>, offset: u64, len: u64, what: &str) -> Outcome<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    seg.read(offset, &mut buf)
        .doing(|| format!("reading {what}"))?;
    Ok(buf)
}

fn word(seg: &Segment<'_>, offset: u64, what: &str) -> Outcome<u64> {
    let mut buf = [0u8; 8];
    seg.read(offset, &mut buf)
        .doing(|| format!("reading {what}"))?;
    Ok(u64::from_le_bytes(buf))
}

/// Waits for notification `id` of `seg` and takes it.
fn take(seg: &Segment<'_>, id: u32, what: &str) -> Outcome<u32> {
    let got = seg
        .notify_waitsome(id, 1, TIMEOUT)
        .doing(|| format!("waiting for {what}"))?;
    ensure!(got == id, "waiting for {what}: notification {got} is set");
    seg.notify_reset(id).doing(|| format!("taking {what}"))
}

struct LibA<'a> {
    lib: Library<'a>,
    ring: Segment<'a>,
    atom: Segment<'a>,
    err: Segment<'a>,
    table: Segment<'a>,
}

struct LibB<'a> {
    _lib: Library<'a>,
    all: Team<'a>,
    even: Option<Team<'a>>,
    /// Of the team of all ranks by `rank % 3`, without the ranks where that is 2, in
    /// descending rank order.
    split: Option<Team<'a>>,
    segs: [Segment<'a>; 2],
}

fn setup_a<'a>(ctx: &'a Context, start: &Barrier) -> Outcome<LibA<'a>> {
    start.wait();
    let lib = ctx.library("lib-a").doing(|| "registering lib-a")?;
    let segment = |what: &str, size: u64| {
        lib.segment_create(GROUP_ALL, size, NOTES, TIMEOUT)
            .doing(|| format!("lib-a creating its {what} segment"))
    };
    let ring = segment("ring", SIZE)?;
    let atom = segment("atomics", SIZE)?;
    let table = lib
        .notifications_create(GROUP_ALL, TABLE, TIMEOUT)
        .doing(|| "lib-a creating its notification table")?;
    let err = segment("errors", ERR_SIZE)?;
    Ok(LibA {
        lib,
        ring,
        atom,
        err,
        table,
    })
}

fn setup_b<'a>(ctx: &'a Context, start: &Barrier) -> Outcome<LibB<'a>> {
    start.wait();
    let (me, n) = (ctx.rank(), ctx.size());
    let lib = ctx.library("lib-b").doing(|| "registering lib-b")?;
    // Descending: a team's members may come in any order.
    let ranks: Vec<Rank> = (0..n).rev().collect();
    let all = lib
        .team(&ranks, TIMEOUT)
        .doing(|| "lib-b creating the team of all ranks")?;
    // Room for one notification per rank: the reduction's gather.
    let notes = NOTES.max(n + 1);
    let first = lib
        .segment_create(&all, SIZE, notes, TIMEOUT)
        .doing(|| "lib-b creating its first segment")?;
    // Between two creations over the other team, on some ranks only: a team of its own scope.
    let even = if me % 2 == 0 {
        let evens: Vec<Rank> = (0..n).step_by(2).collect();
        Some(
            lib.team(&evens, TIMEOUT)
                .doing(|| "lib-b creating the team of the even ranks")?,
        )
    } else {
        None
    };
    let second = lib
        .segment_create(&all, SIZE, notes, TIMEOUT)
        .doing(|| "lib-b creating its second segment")?;
    let split = lib
        .split(&all, (me % 3 != 2).then_some(me % 3), n - me, TIMEOUT)
        .doing(|| "lib-b splitting the team of all ranks")?;
    Ok(LibB {
        _lib: lib,
        all,
        even,
        split,
        segs: [first, second],
    })
}

/// The user's segments 0..=3 and two groups, interleaved; returns the groups' ids.
fn setup_user(ctx: &Context, start: &Barrier) -> Outcome<Vec<GroupId>> {
    start.wait();
    let (me, n) = (ctx.rank(), ctx.size());
    let create = |id: SegmentId| {
        ctx.segment_create(id, SIZE, TIMEOUT)
            .doing(|| format!("creating user segment {id}"))
    };
    let group = |ranks: &[Rank], what: &str| -> Outcome<GroupId> {
        let g = ctx
            .group_create()
            .doing(|| format!("creating the group of {what}"))?;
        for &r in ranks {
            ctx.group_add(g, r)
                .doing(|| format!("adding rank {r} to the group of {what}"))?;
        }
        if ranks.contains(&me) {
            ctx.group_commit(g, TIMEOUT)
                .doing(|| format!("committing the group of {what}"))?;
        }
        Ok(g)
    };
    create(0)?;
    create(1)?;
    let all: Vec<Rank> = (0..n).collect();
    let g1 = group(&all, "all ranks")?;
    create(2)?;
    let evens: Vec<Rank> = (0..n).step_by(2).collect();
    let g2 = group(&evens, "the even ranks")?;
    create(3)?;
    Ok(vec![g1, g2])
}

/// The local id of library segment `seg`, as the errors about it name it: the only place the
/// API shows it.
fn local_id(ctx: &Context, seg: &Segment<'_>, what: &str) -> Outcome<SegmentId> {
    let me = ctx.rank();
    let whole = seg
        .target(me, TIMEOUT)
        .doing(|| format!("{what} as a target on this rank"))?;
    match whole.range(whole.len() + 1, 0) {
        Err(Error::OutOfBounds { rank, segment, .. }) if rank == me => Ok(segment),
        other => Err(Failure(format!(
            "a range past the end of {what}: {:?}",
            other.map_err(|e| describe(&e))
        ))),
    }
}

impl LibB<'_> {
    fn record(&self, ctx: &Context, data: &mut Data) -> Outcome {
        let (me, n) = (ctx.rank(), ctx.size());
        let all = &self.all;
        data.put("team_all", format!("{}:{}", all.size(), all.index()));
        ensure!(
            all.ranks() == (0..n).collect::<Vec<_>>()
                && all.index() == me
                && all.index_of(n - 1) == Some(n - 1)
                && all.rank_of(0) == Some(0),
            "lib-b's team of all ranks: {all:?} with ranks {:?}",
            all.ranks()
        );
        match &self.even {
            Some(even) => {
                data.put("team_even", format!("{}:{}", even.size(), even.index()));
                ensure!(
                    even.size() == n.div_ceil(2)
                        && even.index() == me / 2
                        && even.index_of(1).is_none(),
                    "lib-b's team of the even ranks: {even:?} with ranks {:?}",
                    even.ranks()
                );
            }
            None => data.put("team_even", "none"),
        }
        let split = match &self.split {
            Some(team) => format!(
                "{}:{}:{:?}",
                team.size(),
                team.index(),
                (0..team.size())
                    .map(|i| team.rank_of(i).and_then(|r| team.index_of(r)))
                    .collect::<Vec<_>>()
            ),
            None => "none".into(),
        };
        data.put("team_split", split);
        if let Some(team) = &self.split {
            data.put("team_split_ranks", format!("{:?}", team.ranks()));
        }
        Ok(())
    }
}

impl LibA<'_> {
    /// Records every library segment's local id; returns them for the summary.
    fn record_ids(&self, ctx: &Context, b: &LibB<'_>, data: &mut Data) -> Outcome<String> {
        let mut all = BTreeSet::new();
        for (key, seg) in [
            ("a_ring_id", &self.ring),
            ("a_atom_id", &self.atom),
            ("a_err_id", &self.err),
            ("a_table_id", &self.table),
            ("b_first_id", &b.segs[0]),
            ("b_second_id", &b.segs[1]),
        ] {
            ensure!(seg.id().is_none(), "{key}: a library segment has a user id");
            let id = local_id(ctx, seg, key)?;
            data.put(key, id);
            all.insert(id);
        }
        ensure!(
            all.len() == 6,
            "six library segments have the local ids {all:?}"
        );
        let shared: Vec<_> = all.iter().filter(|id| USER_SEGMENTS.contains(id)).collect();
        data.put("shared_ids", list(&shared));
        ensure!(
            self.table.is_empty() && self.table.memory().is_none(),
            "lib-a's table has {} bytes of memory",
            self.table.len()
        );
        ensure!(
            self.table.notifications() == TABLE && self.ring.notifications() == NOTES,
            "lib-a's table has {} notifications, its ring segment {}",
            self.table.notifications(),
            self.ring.notifications()
        );
        Ok(list(&all.into_iter().collect::<Vec<_>>()))
    }
}

/// Phase 1: every memory segment (user and library) gets a pattern from this rank in its
/// first half and one from the left neighbour in its second half, each with notification 0
/// of its own table set to its index + 1; the table gets a notification of its own.
fn separate(
    ctx: &Context,
    a: &LibA<'_>,
    b: &LibB<'_>,
    user: &[Segment<'_>],
    data: &mut Data,
) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let mut segs: Vec<(String, &Segment<'_>, Target)> = Vec::new();
    for (&id, seg) in USER_SEGMENTS.iter().zip(user) {
        let target = ctx
            .target(right, id, TIMEOUT)
            .doing(|| format!("user segment {id} of rank {right}"))?;
        segs.push((format!("user segment {id}"), seg, target));
    }
    for (what, seg) in [
        ("lib-a's ring segment", &a.ring),
        ("lib-a's atomics segment", &a.atom),
        ("lib-a's error segment", &a.err),
        ("lib-b's first segment", &b.segs[0]),
        ("lib-b's second segment", &b.segs[1]),
    ] {
        let target = seg
            .target(right, TIMEOUT)
            .doing(|| format!("{what} of rank {right}"))?;
        segs.push((what.to_owned(), seg, target));
    }
    let table = a
        .table
        .target(right, TIMEOUT)
        .doing(|| format!("lib-a's table of rank {right}"))?;
    ensure!(
        table.is_empty() && table.notifications() == TABLE,
        "lib-a's table of rank {right} as a target: {table:?}"
    );
    let table_value = 100;

    let batch = ctx.batch();
    for (k, (what, seg, target)) in segs.iter().enumerate() {
        let k = k as u64;
        seg.write(0, &pattern(&[SEPARATE, u64::from(me), k], HALF))
            .doing(|| format!("filling {what}"))?;
        // k < 10, so the value is small and non-zero.
        let note = Notification {
            id: 0,
            value: k as u32 + 1,
        };
        batch
            .write_notify(seg, 0, target, HALF, HALF, note)
            .doing(|| format!("writing into {what} of rank {right}"))?;
    }
    batch
        .notify(
            &table,
            Notification {
                id: 0,
                value: table_value,
            },
        )
        .doing(|| format!("notifying lib-a's table of rank {right}"))?;
    batch.wait(TIMEOUT).doing(|| "waiting for the writes")?;

    let mut bytes = 0;
    for (k, (what, seg, _)) in segs.iter().enumerate() {
        let value = take(seg, 0, &format!("notification 0 of {what}"))?;
        ensure!(
            value == k as u32 + 1,
            "notification 0 of {what} has value {value}, want {} (the one of another segment?)",
            k + 1
        );
        for id in 0..NOTES {
            let v = seg
                .notify_peek(id)
                .doing(|| format!("peeking into {what}"))?;
            ensure!(v == 0, "{what}: notification {id} is {v} after taking 0");
        }
        let k = k as u64;
        let own = read(seg, 0, HALF, what)?;
        compare(
            format!("{what}: this rank's half"),
            &own,
            &pattern(&[SEPARATE, u64::from(me), k], HALF),
        )?;
        let got = read(seg, HALF, HALF, what)?;
        compare(
            format!("{what}: rank {left}'s half"),
            &got,
            &pattern(&[SEPARATE, u64::from(left), k], HALF),
        )?;
        bytes += 2 * HALF;
    }
    let value = take(&a.table, 0, "notification 0 of lib-a's table")?;
    ensure!(
        value == table_value,
        "lib-a's table notification 0 has value {value}, want {table_value}"
    );
    data.put("separate_bytes", bytes);
    data.put("separate_notifications", segs.len() + 1);
    Ok(())
}

/// Phase 2: the library's data paths; see the module documentation.
/// `user` holds the handles of `USER_SEGMENTS`, by id.
fn data_paths(ctx: &Context, a: &LibA<'_>, user: &[Segment<'_>], data: &mut Data) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let mine = |tag: u64, len: u64| pattern(&[tag, u64::from(me)], len);
    let theirs = |tag: u64, rank: Rank, len: u64| pattern(&[tag, u64::from(rank)], len);
    let ring = &a.ring;
    ring.write(RING_SRC, &mine(RING, RING_LEN))
        .doing(|| "filling the ring source")?;
    ring.write(TO_USER_SRC, &mine(TO_USER, TO_USER_LEN))
        .doing(|| "filling the write_notify_to source")?;
    ring.write(EACH_SRC, &mine(EACH, EACH_LEN))
        .doing(|| "filling the write_notify_each source")?;
    ring.write(ANY_SRC, &mine(ANY, ANY_LEN))
        .doing(|| "filling the notify_wait_any source")?;
    let ring_right = ring
        .target(right, TIMEOUT)
        .doing(|| format!("lib-a's ring segment of rank {right}"))?;
    let ring_left = ring
        .target(left, TIMEOUT)
        .doing(|| format!("lib-a's ring segment of rank {left}"))?;
    let table_right = a
        .table
        .target(right, TIMEOUT)
        .doing(|| format!("lib-a's table of rank {right}"))?;
    let user_right = |id: SegmentId| {
        ctx.target(right, id, TIMEOUT)
            .doing(|| format!("user segment {id} of rank {right}"))
    };
    let note = |id: u32| Notification { id, value: me + 1 };

    // The ring, completed by polling as a non-blocking collective would.
    let ring_batch = ctx.batch();
    ring_batch
        .write_notify(
            ring,
            RING_SRC,
            &ring_right,
            RING_DST,
            RING_LEN,
            note(RING_ID),
        )
        .doing(|| "posting the ring write")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut polls = 0u64;
    while !ring_batch.test().doing(|| "testing the ring batch")? {
        ensure!(
            Instant::now() < deadline,
            "the ring write did not complete in 30 s ({polls} polls)"
        );
        ctx.progress();
        polls += 1;
        thread::yield_now();
    }

    let batch = ctx.batch();
    batch
        .write_notify_to(
            ring,
            TO_USER_SRC,
            &user_right(TO_USER_SEG)?,
            0,
            TO_USER_LEN,
            &table_right,
            note(TO_USER_ID),
        )
        .doing(|| "write_notify_to into a user segment with lib-a's table")?;
    if me == 0 {
        let dsts = (1..n)
            .map(|r| {
                ring.target(r, TIMEOUT)
                    .map(|t| (t, EACH_DST))
                    .doing(|| format!("lib-a's ring segment of rank {r}"))
            })
            .collect::<Outcome<Vec<_>>>()?;
        let each = Notification {
            id: EACH_ID,
            value: EACH_VALUE,
        };
        batch
            .write_notify_each(ring, EACH_SRC, EACH_LEN, &dsts, each)
            .doing(|| "write_notify_each to every other rank")?;
    }
    // From ordinary memory: only the direct path takes it; nothing is written otherwise.
    let from = mine(FROM_MEMORY, FROM_LEN);
    let sent = batch.write_notify_from(&from, &ring_right, FROM_DST, note(FROM_ID));
    data.outcome("from_memory", &sent);
    let beyond = batch.write_from(&from, &ring_right, SIZE - FROM_LEN / 2);
    data.outcome("from_memory_beyond", &beyond);
    batch
        .write_notify(
            ring,
            ANY_SRC,
            &user_right(ANY_SEG)?,
            0,
            ANY_LEN,
            note(ANY_USER_ID),
        )
        .doing(|| "write_notify from a library segment into a user segment")?;
    batch
        .notify(&table_right, note(ANY_TABLE_ID))
        .doing(|| "notify into lib-a's table for notify_wait_any")?;
    batch
        .notify(&table_right, note(TABLE_ID))
        .doing(|| "notify into lib-a's table")?;

    // The ring's data, then a read of what the left neighbour sent: it filled its source
    // before the write whose notification arrived here.
    let value = take(ring, RING_ID, "the ring notification")?;
    ensure!(
        value == left + 1,
        "the ring notification came from {value} - 1"
    );
    let got = read(ring, RING_DST, RING_LEN, "the ring data")?;
    compare("the ring data", &got, &theirs(RING, left, RING_LEN))?;
    data.put("ring_value", value);
    data.put("ring_bytes", got.len());
    let reading = ctx.batch();
    reading
        .read(ring, READ_DST, &ring_left, RING_SRC, RING_LEN)
        .doing(|| format!("reading rank {left}'s ring source"))?;
    reading.wait(TIMEOUT).doing(|| "waiting for the read")?;
    let got = read(ring, READ_DST, RING_LEN, "the read data")?;
    compare("the data read", &got, &theirs(RING, left, RING_LEN))?;
    data.put("read_bytes", got.len());

    let value = take(&a.table, TO_USER_ID, "write_notify_to's notification")?;
    ensure!(
        value == left + 1,
        "write_notify_to's notification has value {value}"
    );
    let got = read(
        &user[usize::from(TO_USER_SEG)],
        0,
        TO_USER_LEN,
        "write_notify_to's data",
    )?;
    compare(
        "write_notify_to's data in user segment 1",
        &got,
        &theirs(TO_USER, left, TO_USER_LEN),
    )?;
    let stray = ctx
        .notify_peek(TO_USER_SEG, TO_USER_ID)
        .doing(|| "peeking into user segment 1")?;
    data.put("to_user_value", value);
    data.put("to_user_bytes", got.len());
    data.put("to_user_user_table", stray);

    if me == 0 {
        data.put("each_sent", n - 1);
    } else {
        let value = take(ring, EACH_ID, "write_notify_each's notification")?;
        ensure!(
            value == EACH_VALUE,
            "write_notify_each's notification has value {value}"
        );
        let got = read(ring, EACH_DST, EACH_LEN, "write_notify_each's data")?;
        compare("write_notify_each's data", &got, &theirs(EACH, 0, EACH_LEN))?;
        data.put("each_value", value);
        data.put("each_bytes", got.len());
    }

    if ctx.reaches_directly(left) {
        let value = take(ring, FROM_ID, "write_notify_from's notification")?;
        ensure!(
            value == left + 1,
            "write_notify_from's notification has value {value}"
        );
        let got = read(ring, FROM_DST, FROM_LEN, "write_notify_from's data")?;
        compare(
            "write_notify_from's data",
            &got,
            &theirs(FROM_MEMORY, left, FROM_LEN),
        )?;
        data.put("from_memory_bytes", got.len());
    } else {
        data.put("from_memory_bytes", 0);
    }

    // One wait over a user range and a library range, each holding one arrival.
    let any = &user[usize::from(ANY_SEG)];
    let owners = [any, &a.table];
    let mut arrivals = Vec::new();
    for _ in 0..2 {
        let got = ctx
            .notify_wait_any(&[any.range(0, 8), a.table.range(8, 8)], &[left], TIMEOUT)
            .doing(|| "notify_wait_any over a user and a library range")?;
        let owner = owners
            .get(got.range)
            .ok_or_else(|| Failure(format!("notify_wait_any named range {} of 2", got.range)))?;
        let value = owner
            .notify_reset(got.id)
            .doing(|| "taking notify_wait_any's arrival")?;
        arrivals.push(format!("{}:{}:{value}", got.range, got.id));
    }
    arrivals.sort();
    let want = [
        format!("0:{ANY_USER_ID}:{}", left + 1),
        format!("1:{ANY_TABLE_ID}:{}", left + 1),
    ];
    ensure!(
        arrivals == want,
        "notify_wait_any found {arrivals:?}, want {want:?}"
    );
    let got = read(any, 0, ANY_LEN, "the data into user segment 2")?;
    compare(
        "the write_notify into user segment 2",
        &got,
        &theirs(ANY, left, ANY_LEN),
    )?;
    data.put("wait_any", arrivals.join(","));
    data.put("wait_any_bytes", got.len());
    // A range beyond the table is refused naming the size of its own table, not of the
    // user's; an empty one as empty.
    let beyond = a.table.range(0, a.table.notifications() + 1);
    match ctx.notify_wait_any(&[beyond], &[], Timeout::Test) {
        Err(Error::InvalidNotification { count, .. }) if count == a.table.notifications() => {}
        other => {
            return Err(Failure(format!(
                "notify_wait_any over a range beyond lib-a's table of {}: {other:?}",
                a.table.notifications()
            )))
        }
    }
    match ctx.notify_wait_any(&[a.table.range(0, 0)], &[], Timeout::Test) {
        Err(Error::EmptyNotificationRange { begin: 0, .. }) => {}
        other => {
            return Err(Failure(format!(
                "notify_wait_any over an empty range of lib-a's table: {other:?}"
            )))
        }
    }

    let value = take(&a.table, TABLE_ID, "the table notification")?;
    data.put("table_value", value);
    batch.wait(TIMEOUT).doing(|| "waiting for the batch")?;
    ensure!(
        batch.outstanding() == 0 && ring_batch.outstanding() == 0,
        "batches still hold {} and {} operations after their waits",
        batch.outstanding(),
        ring_batch.outstanding()
    );
    Ok(())
}

/// Phase 2b: each rank's contribution in lib-b's first segment: a vector, then a 2x2 matrix.
const SLOT: u64 = 64;
const VECTOR: usize = 4;

/// Rank `rank`'s contribution: `(rank + 1) * (i + 1)`, and the affine map `x -> (rank + 1) x
/// + 1` as a matrix, whose products depend on the order of their factors.
fn contribution(rank: Rank) -> [u64; 8] {
    let r = u64::from(rank) + 1;
    [r, 2 * r, 3 * r, 4 * r, r, 1, 0, 1]
}

/// `acc = acc * other` for row-major 2x2 matrices.
fn compose(acc: &mut [u64], other: &[u64]) {
    for (a, o) in acc.chunks_exact_mut(4).zip(other.chunks_exact(4)) {
        let m = [a[0], a[1], a[2], a[3]];
        a[0] = m[0]
            .wrapping_mul(o[0])
            .wrapping_add(m[1].wrapping_mul(o[2]));
        a[1] = m[0]
            .wrapping_mul(o[1])
            .wrapping_add(m[1].wrapping_mul(o[3]));
        a[2] = m[2]
            .wrapping_mul(o[0])
            .wrapping_add(m[3].wrapping_mul(o[2]));
        a[3] = m[2]
            .wrapping_mul(o[1])
            .wrapping_add(m[3].wrapping_mul(o[3]));
    }
}

/// Phase 2b: a reduction as a library builds one. Every member of lib-b's team sends its
/// contribution to every other with `write_notify_each`; each folds them in member order
/// with `ReduceOp::apply` (sum, max) and `UserOp::apply` (a matrix product, not commutative).
fn reduction(ctx: &Context, b: &LibB<'_>, data: &mut Data) -> Outcome {
    let me = ctx.rank();
    let (team, seg) = (&b.all, &b.segs[0]);
    let slot = |rank: Rank| u64::from(rank) * SLOT;
    let bytes: Vec<u8> = contribution(me)
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    seg.write(slot(me), &bytes)
        .doing(|| "writing this rank's contribution")?;
    let others: Vec<Rank> = team.ranks().into_iter().filter(|&r| r != me).collect();
    let dsts = others
        .iter()
        .map(|&r| {
            seg.target(r, TIMEOUT)
                .map(|t| (t, slot(me)))
                .doing(|| format!("lib-b's first segment of rank {r}"))
        })
        .collect::<Outcome<Vec<_>>>()?;
    let batch = ctx.batch();
    let note = Notification {
        id: 1 + me,
        value: me + 1,
    };
    batch
        .write_notify_each(seg, slot(me), SLOT, &dsts, note)
        .doing(|| "sending the contribution to every member")?;
    for &r in &others {
        let value = take(seg, 1 + r, &format!("rank {r}'s contribution"))?;
        ensure!(
            value == r + 1,
            "rank {r}'s contribution came with value {value}"
        );
    }
    let mut parts = Vec::new();
    for index in 0..team.size() {
        let rank = team
            .rank_of(index)
            .ok_or_else(|| Failure(format!("lib-b's team has no member {index}")))?;
        let got = read(seg, slot(rank), SLOT, "a contribution")?;
        let words: Vec<u64> = got
            .chunks_exact(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w.copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect();
        ensure!(
            words == contribution(rank),
            "rank {rank}'s contribution reads {words:?}"
        );
        parts.push(words);
    }
    batch.wait(TIMEOUT).doing(|| "waiting for the gather")?;

    let matrix = gaspi::UserOp::new(compose).block(4);
    let (first, rest) = parts
        .split_first()
        .ok_or_else(|| Failure("lib-b's team has no members".into()))?;
    let (mut sum, mut max) = (first[..VECTOR].to_vec(), first[..VECTOR].to_vec());
    let mut product = first[VECTOR..].to_vec();
    for part in rest {
        let (vector, m) = part.split_at(VECTOR);
        gaspi::ReduceOp::Sum
            .apply(&mut sum, vector)
            .doing(|| "ReduceOp::Sum.apply")?;
        gaspi::ReduceOp::Max
            .apply(&mut max, vector)
            .doing(|| "ReduceOp::Max.apply")?;
        matrix
            .apply(&mut product, m)
            .doing(|| "UserOp::apply of the matrix product")?;
    }
    data.put("reduce_sum", list(&sum));
    data.put("reduce_max", list(&max));
    data.put("reduce_product", list(&product));

    let errors = [
        outcome(&gaspi::ReduceOp::Sum.apply(&mut [0u64; 2], &[0u64; 3])),
        outcome(&gaspi::ReduceOp::BitAnd.apply(&mut [0f64; 2], &[0f64; 2])),
        outcome(&matrix.apply(&mut [0u64; 6], &[0u64; 6])),
    ];
    data.put("apply_errors", errors.join(","));
    Ok(())
}

/// Waits for `request` by polling `test` (driving progress in between) or with `wait`.
fn finish(ctx: &Context, request: &AtomicRequest<'_>, poll: bool, what: &str) -> Outcome<u64> {
    if !poll {
        return request
            .wait(TIMEOUT)
            .doing(|| format!("waiting for {what}"));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(old) = request.test().doing(|| format!("testing {what}"))? {
            return Ok(old);
        }
        ensure!(Instant::now() < deadline, "{what} did not complete in 30 s");
        ctx.progress();
        thread::yield_now();
    }
}

/// Phase 3: atomics on library and user words; see the module documentation.
fn atomics(ctx: &Context, a: &LibA<'_>, data: &mut Data) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let on_zero = a
        .atom
        .target(0, TIMEOUT)
        .doing(|| "lib-a's atomics segment of rank 0")?;
    let add = u64::from(me) + 1;
    let (mut lib_old, mut user_old) = (BTreeSet::new(), BTreeSet::new());
    for _ in 0..ADDS / WAVE {
        let mut lib = Vec::new();
        let mut user = Vec::new();
        for _ in 0..WAVE {
            lib.push(
                ctx.atomic_fetch_add_at(&on_zero, SUM_WORD, add, None)
                    .doing(|| "atomic_fetch_add_at on rank 0's lib-a word")?,
            );
            user.push(
                ctx.atomic_fetch_add_nb(remote(0, ATOMIC_SEG, SUM_WORD), 1)
                    .doing(|| "atomic_fetch_add_nb on rank 0's user word")?,
            );
        }
        for (i, (l, u)) in lib.iter().zip(&user).enumerate() {
            let poll = i % 2 == 0;
            lib_old.insert(finish(ctx, l, poll, "a fetch_add on the lib-a word")?);
            user_old.insert(finish(ctx, u, !poll, "a fetch_add on the user word")?);
        }
    }
    ensure!(
        lib_old.len() as u64 == ADDS && user_old.len() as u64 == ADDS,
        "fetched values repeat: {} distinct on the lib-a word, {} on the user word",
        lib_old.len(),
        user_old.len()
    );

    // The notifying atomics: this rank is the only one adding to its right neighbour's words.
    let atom_right = a
        .atom
        .target(right, TIMEOUT)
        .doing(|| format!("lib-a's atomics segment of rank {right}"))?;
    let amount = 1000 * add;
    let lib_note = Notification {
        id: ATOMIC_NOTE_LIB,
        value: me + 1,
    };
    let user_note = Notification {
        id: ATOMIC_NOTE_USER,
        value: me + 1,
    };
    let on_lib = ctx
        .atomic_fetch_add_at(&atom_right, NOTIFY_WORD, amount, Some(lib_note))
        .doing(|| "atomic_fetch_add_at with a notification")?;
    let on_user = ctx
        .atomic_fetch_add_notify(remote(right, ATOMIC_SEG, NOTIFY_WORD), amount, user_note)
        .doing(|| "atomic_fetch_add_notify")?;
    ensure!(
        on_lib.rank() == right && on_user.rank() == right,
        "atomic requests name ranks {} and {}, want {right}",
        on_lib.rank(),
        on_user.rank()
    );
    let old_lib = finish(ctx, &on_lib, true, "the notifying lib-a atomic")?;
    let old_user = finish(ctx, &on_user, false, "the notifying user atomic")?;
    ensure!(
        old_lib == 0 && old_user == 0,
        "the notifying atomics found {old_lib} and {old_user}, want 0 (nobody else adds there)"
    );
    let value = take(&a.atom, ATOMIC_NOTE_LIB, "the lib-a atomic's notification")?;
    let lib_word = word(&a.atom, NOTIFY_WORD, "the lib-a word")?;
    data.put("notified_lib", format!("{value}:{lib_word}"));
    let user = ctx.segment(ATOMIC_SEG).doing(|| "user segment 3")?;
    let value_user = take(&user, ATOMIC_NOTE_USER, "the user atomic's notification")?;
    let user_word = word(&user, NOTIFY_WORD, "the user word")?;
    data.put("notified_user", format!("{value_user}:{user_word}"));
    let want = 1000 * (u64::from(left) + 1);
    ensure!(
        value == left + 1 && lib_word == want && value_user == left + 1 && user_word == want,
        "after the notifications {value} and {value_user} the words hold {lib_word} and \
         {user_word}, want {} and {want}",
        left + 1
    );

    ctx.barrier(TIMEOUT).doing(|| "barrier after the atomics")?;
    let lib_total = ctx
        .atomic_fetch_add_at(&on_zero, SUM_WORD, 0, None)
        .doing(|| "reading the lib-a word")?
        .wait(TIMEOUT)
        .doing(|| "reading the lib-a word")?;
    let user_total = ctx
        .atomic_fetch_add(remote(0, ATOMIC_SEG, SUM_WORD), 0, TIMEOUT)
        .doing(|| "reading the user word")?;
    data.put("atomic_lib_total", lib_total);
    data.put("atomic_user_total", user_total);
    data.put(
        "atomic_fetched",
        format!("{}:{}", lib_old.len(), user_old.len()),
    );
    let n = u64::from(n);
    ensure!(
        lib_total == ADDS * n * (n + 1) / 2 && user_total == ADDS * n,
        "totals {lib_total} and {user_total}, want {} and {}",
        ADDS * n * (n + 1) / 2,
        ADDS * n
    );
    ensure!(
        lib_old.iter().all(|&v| v < lib_total) && user_old.iter().all(|&v| v < user_total),
        "a fetched value is not below the final total"
    );
    Ok(())
}

/// Phase 4: the errors a library gets; see the module documentation.
fn errors(ctx: &Context, a: &LibA<'_>, data: &mut Data) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let right = (me + 1) % n;
    let err_right = a
        .err
        .target(right, TIMEOUT)
        .doing(|| format!("lib-a's error segment of rank {right}"))?;

    if ctx.reaches_directly(right) {
        // Direct transfers complete in the call and take no room: a batch never fills.
        data.put("batch_full", "direct");
    } else {
        // The batch's one place goes to a read: unlike a write, which tcp may complete while
        // posting it (once the socket took its bytes), a read waits for the peer's answer, so it
        // is still in flight when the write comes. Should it not be, try again.
        let full = ctx.batch_with_depth(1);
        let mut refused = None;
        for _ in 0..10 {
            full.read(&a.err, 0, &err_right, 0, BIG)
                .doing(|| "the read of a batch of depth 1")?;
            let second = full.write(&a.err, BIG, &err_right, BIG, TRACKED);
            full.wait(TIMEOUT)
                .doing(|| "waiting for the batch of depth 1")?;
            match second {
                Ok(()) => {}
                Err(e @ Error::BatchFull { .. }) => {
                    refused = Some(e);
                    break;
                }
                Err(e) => return Err(Failure(format!("a second write, depth 1: {e}"))),
            }
        }
        let refused = refused.ok_or_else(|| {
            Failure("a batch of depth 1 took an 8 KiB write after a read ten times".into())
        })?;
        data.put("batch_full", describe(&refused));
    }

    let table_right = a
        .table
        .target(right, TIMEOUT)
        .doing(|| format!("lib-a's table of rank {right}"))?;
    let beyond = ctx.batch().notify(
        &table_right,
        Notification {
            id: TABLE,
            value: 1,
        },
    );
    data.outcome("notify_beyond", &beyond);
    ensure!(
        matches!(beyond, Err(Error::InvalidNotification { rank, id, count, .. })
            if rank == right && id == u64::from(TABLE) && count == TABLE),
        "notification {TABLE} of a table of {TABLE}: {}",
        outcome(&beyond)
    );

    let outside = err_right.range(ERR_SIZE - 8, 16);
    data.outcome("range_outside", &outside);
    ensure!(
        matches!(outside, Err(Error::OutOfBounds { rank, offset, size, segment_size, .. })
            if rank == right && offset == ERR_SIZE - 8 && size == 16 && segment_size == ERR_SIZE),
        "a target range across the end: {}",
        outcome(&outside)
    );

    let zero = a.lib.segment_create(GROUP_ALL, SIZE, 0, TIMEOUT);
    data.outcome("zero_notifications", &zero);
    ensure!(
        matches!(&zero, Err(Error::LibrarySegment { library, notifications: 0, .. })
            if library == "lib-a"),
        "a library segment without notifications: {}",
        outcome(&zero)
    );
    let zero = a.lib.notifications_create(GROUP_ALL, 0, TIMEOUT);
    data.outcome("zero_table", &zero);
    ensure!(
        matches!(
            zero,
            Err(Error::LibrarySegment {
                notifications: 0,
                ..
            })
        ),
        "a library table without notifications: {}",
        outcome(&zero)
    );
    let huge = a.lib.segment_create(GROUP_ALL, u64::MAX, 4, TIMEOUT);
    data.outcome("huge_segment", &huge);
    ensure!(
        matches!(huge, Err(Error::LibrarySegment { size: u64::MAX, .. })),
        "a library segment of 2^64 - 1 bytes: {}",
        outcome(&huge)
    );
    let nobody = a.lib.team(&[], TIMEOUT);
    data.outcome("team_empty", &nobody);
    ensure!(
        matches!(nobody, Err(Error::NotInScope { rank }) if rank == me),
        "a team of no ranks: {}",
        outcome(&nobody)
    );
    let twice = a.lib.team(&[me, right, me], TIMEOUT);
    data.outcome("team_twice", &twice);
    ensure!(
        matches!(twice, Err(Error::DuplicateTeamMember { rank }) if rank == me),
        "a team listing this rank twice: {}",
        outcome(&twice)
    );
    agreement(ctx, a, data)
}

/// Segment creations whose agreement words differ on rank 0, or that rank 0 refuses, fail on
/// every member naming a member that disagrees or refused; one continued after a timeout with
/// other arguments is refused until continued with its own; the next creation over the scope
/// works again.
fn agreement(ctx: &Context, a: &LibA<'_>, data: &mut Data) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let notifications = if me == 0 { 0 } else { 4 };
    let refused = a
        .lib
        .segment_create(GROUP_ALL, SIZE, notifications, TIMEOUT);
    data.outcome("refused", &refused);
    ensure!(
        match &refused {
            Err(Error::LibrarySegment { .. }) => me == 0,
            Err(Error::LibraryRefused { rank: 0, .. }) => me != 0,
            _ => false,
        },
        "a creation rank 0 refuses: {}",
        outcome(&refused)
    );
    if me == 0 {
        // The others wait in the barrier below: nothing of theirs can have come yet.
        let first = a.lib.segment_create(GROUP_ALL, SIZE, 4, Timeout::Test);
        data.outcome("retry_first", &first);
        let other = a.lib.segment_create(GROUP_ALL, 2 * SIZE, 4, TIMEOUT);
        data.outcome("retry_other", &other);
        ensure!(
            matches!(first, Err(Error::Timeout)) && matches!(other, Err(Error::LibraryBusy { .. })),
            "a creation continued with another size: {} then {}",
            outcome(&first),
            outcome(&other)
        );
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before the continued creation")?;
    let retried = a.lib.segment_create(GROUP_ALL, SIZE, 4, TIMEOUT);
    data.outcome("retried", &retried);
    ensure!(
        retried.is_ok(),
        "the continued creation: {}",
        outcome(&retried)
    );
    let word = if me == 0 { 7 } else { 8 };
    let split = a
        .lib
        .segment_create_agreed(GROUP_ALL, SIZE, 4, word, TIMEOUT);
    data.outcome("agreement_split", &split);
    // Rank 0 meets member 1 first; the others meet rank 0.
    let expected = if me == 0 { 1 } else { 0 };
    ensure!(
        n == 1 && split.is_ok()
            || matches!(&split, Err(Error::LibraryDisagreement { library, rank })
                if library == "lib-a" && *rank == expected),
        "agreement words 7 on rank 0 and 8 elsewhere: {}",
        outcome(&split)
    );
    let agreed = a.lib.segment_create_agreed(GROUP_ALL, SIZE, 4, 9, TIMEOUT);
    data.outcome("agreement_same", &agreed);
    ensure!(
        agreed.is_ok(),
        "agreement word 9 everywhere: {}",
        outcome(&agreed)
    );
    Ok(())
}

/// A team of a group keeps the group's members after the group is deleted and its id reused
/// by a group of rank 0 alone, and scopes segments over them.
fn group_snapshot(ctx: &Context, a: &LibA<'_>, data: &mut Data) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let group = ctx.group_create().doing(|| "creating a group to delete")?;
    for r in 0..n {
        ctx.group_add(group, r)
            .doing(|| "filling the group to delete")?;
    }
    ctx.group_commit(group, TIMEOUT)
        .doing(|| "committing the group to delete")?;
    let team = a
        .lib
        .team_of_group(group)
        .doing(|| "the team of the group")?;
    ctx.group_delete(group).doing(|| "deleting the group")?;
    let reused = ctx
        .group_create()
        .doing(|| "creating the group of rank 0")?;
    ctx.group_add(reused, 0).doing(|| "adding rank 0")?;
    if me == 0 {
        ctx.group_commit(reused, TIMEOUT)
            .doing(|| "committing the group of rank 0")?;
    }
    let seg = a
        .lib
        .segment_create(&team, SIZE, 4, TIMEOUT)
        .doing(|| "a segment over the team of the deleted group")?;
    let right = (me + 1) % n;
    let target = seg
        .target(right, TIMEOUT)
        .doing(|| "the neighbour's part of the team's segment")?;
    let batch = ctx.batch();
    let value = me + 1;
    batch
        .write_notify(&seg, 0, &target, 0, 8, Notification { id: 1, value })
        .doing(|| "write_notify over the team of the deleted group")?;
    batch.wait(TIMEOUT).doing(|| "its completion")?;
    let from_left = take(&seg, 1, "the left neighbour's notification")?;
    data.put(
        "snapshot",
        format!(
            "{}:{}:{from_left}:{}",
            team.size(),
            team.index(),
            reused == group
        ),
    );
    // Nobody drops the segment while its left neighbour's write may still be in flight.
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the snapshot")?;
    ctx.group_delete(reused)
        .doing(|| "deleting the group of rank 0")?;
    Ok(())
}
