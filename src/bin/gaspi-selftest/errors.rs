//! `errors`: every kind of bad input is refused with its own `Error` variant, carrying the
//! rank, segment, offset, size or id that was wrong, without panicking, without posting
//! anything, and without breaking the context for the calls that follow.
//!
//! Checks that need a peer's segment descriptor are made at the call once the descriptor is
//! known (the scenario looks it up first); an operation towards a segment never accessed
//! before is accepted and its error reported by the queue's next wait (see
//! `deferred_checks`).

use std::time::{Duration, Instant};

use gaspi::{
    local, remote, Context, Error, ListEntry, Notification, QueueId, Rank, SegmentId, Timeout,
};

use crate::check::{compare, ensure, fill_pattern, seed, Data, Doing, Failure, Outcome, Report};

/// Depth of every queue in this scenario (set by `main` before init): a few writes fill it.
///
/// `main` also turns the progress thread off for this scenario: completions are then reaped
/// only inside calls that wait, so posted operations stay in flight, and a queue stays full,
/// until the scenario itself waits. That makes `QueueFull`, `QueueBusy` and `SegmentBusy`
/// deterministic.
pub const QUEUE_DEPTH: u32 = 8;

/// The segment most checks aim at, on every rank.
const SEG: SegmentId = 0;
const SEG_LEN: u64 = 4096;
/// Source of writes; deleted while they are in flight.
const BUSY: SegmentId = 6;
/// Target of those writes; lives to the end.
const SINK: SegmentId = 7;
/// Target of a write made before its descriptor is known (so parked for the lookup).
const PARKED: SegmentId = 8;
/// Created and deleted again by every rank.
const GONE: SegmentId = 5;
/// Never created.
const NEVER: SegmentId = 9;
/// Created by every rank and never accessed before `deferred_checks`.
const LATE: SegmentId = 10;
/// Size of the writes that fill queues and keep segments busy: beyond every provider's
/// inject size (shm: 4 KiB), so that they are tracked on their queue rather than injected.
const CHUNK: u64 = 8192;
const QUEUE: QueueId = 0;
const TIMEOUT: Timeout = Timeout::Millis(30_000);

/// Checks that `$call` returns `Err` matching `$pattern` (and the guard), and counts it;
/// `$what` names the call in the failure message.
macro_rules! expect_err {
    ($checks:expr, $what:expr, $call:expr, $pattern:pat $(if $guard:expr)?) => {
        match $call {
            Err($pattern) $(if $guard)? => *$checks += 1,
            other => {
                return Err(Failure(format!(
                    "{}: expected Err({}), got {:?}",
                    $what,
                    stringify!($pattern $(if $guard)?),
                    other
                )))
            }
        }
    };
}

/// The ids and sizes every check refers to.
struct Setup {
    me: Rank,
    peer: Rank,
    size: u32,
    count: u32,
}

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    let s = Setup {
        me,
        peer: (me + 1) % n,
        size: n,
        count: ctx.config().notifications,
    };
    ensure!(
        ctx.queue_size_max() == QUEUE_DEPTH,
        "queue depth is {}, the scenario configured {QUEUE_DEPTH}",
        ctx.queue_size_max()
    );
    for (id, len) in [
        (SEG, SEG_LEN),
        (BUSY, CHUNK),
        (SINK, CHUNK),
        (PARKED, CHUNK),
        (GONE, 64),
        (LATE, 64),
    ] {
        ctx.segment_create(id, len, TIMEOUT)
            .doing(|| format!("creating segment {id}"))?;
    }
    let mut checks = 0;
    deferred_checks(ctx, &s, &mut checks)?;
    // From here on the peer's descriptors are known: every check is made at the call.
    for id in [SEG, SINK] {
        ctx.segment_size_of(s.peer, id, TIMEOUT)
            .doing(|| format!("looking up the peer's segment {id}"))?;
    }
    bounds(ctx, &s, &mut checks)?;
    segments_and_ranks(ctx, &s, &mut checks)?;
    notifications(ctx, &s, &mut checks)?;
    queues_and_lists(ctx, &s, &mut checks)?;
    local_access(ctx, &s, &mut checks)?;
    ensure!(
        ctx.queue_size(QUEUE).doing(|| "queue_size")? == 0,
        "refused calls left operations on queue {QUEUE}"
    );
    let mut data = Data::default();
    let filled = full_queue(ctx, &s, &mut checks, &mut data)?;
    busy_and_deleted(ctx, &s, &mut checks)?;
    still_works(ctx, &s)?;
    data.put("bad_calls", checks);
    data.put("single_writes_filled_queue", filled);
    Ok(Report {
        summary: format!(
            "{checks} bad calls each returned the expected variant with the right fields, none \
             posted anything or panicked, and a write_notify exchange afterwards delivered \
             intact data"
        ),
        data,
    })
}

/// Operations towards a peer's segment this rank never accessed are accepted at once when the
/// descriptor must be looked up over the fabric (the lookup must not block a call without a
/// timeout), and what the lookup finds is reported by the queue's next wait; towards a peer
/// reached directly the descriptor is known at once, so the first call fails already. Once
/// the answer is known the same calls fail at once either way.
fn deferred_checks(ctx: &Context, s: &Setup, checks: &mut u32) -> Outcome {
    let peer = s.peer;
    let note = Notification { id: 1, value: 1 };
    match ctx.write(local(SEG, 0), remote(peer, NEVER, 0), 8, QUEUE) {
        Ok(()) => expect_err!(
            checks,
            "wait after a first write to a segment the peer never created",
            ctx.wait(QUEUE, TIMEOUT),
            Error::UnknownSegment { rank, segment: NEVER } if rank == peer
        ),
        Err(Error::UnknownSegment {
            rank,
            segment: NEVER,
        }) if rank == peer => *checks += 1,
        Err(e) => {
            return Err(Failure(format!(
                "first write to a segment the peer never created: {e}"
            )))
        }
    }
    expect_err!(
        checks,
        "write to a segment the peer is known not to have",
        ctx.write(local(SEG, 0), remote(peer, NEVER, 0), 8, QUEUE),
        Error::UnknownSegment { rank, segment: NEVER } if rank == peer
    );
    expect_err!(
        checks,
        "write_notify of 0 bytes to a segment the peer is known not to have",
        ctx.write_notify(local(SEG, 0), remote(peer, NEVER, 0), 0, note, QUEUE),
        Error::UnknownSegment { rank, segment: NEVER } if rank == peer
    );
    match ctx.write(local(SEG, 0), remote(peer, LATE, 60), 8, QUEUE) {
        Ok(()) => {
            // Parked behind the write, which the lookup refuses: it must be dropped with it
            // (`still_works` finds any notification a refused call left set).
            ctx.notify(peer, SEG, note, QUEUE)
                .doing(|| "notify behind a write the lookup will refuse")?;
            expect_err!(
                checks,
                "wait after a first write running past the peer's segment",
                ctx.wait(QUEUE, TIMEOUT),
                Error::OutOfBounds { rank, segment: LATE, offset: 60, size: 8, segment_size: 64 }
                    if rank == peer
            )
        }
        Err(Error::OutOfBounds {
            rank,
            segment: LATE,
            offset: 60,
            size: 8,
            segment_size: 64,
        }) if rank == peer => *checks += 1,
        Err(e) => {
            return Err(Failure(format!(
                "first write running past a segment never accessed before: {e}"
            )))
        }
    }
    expect_err!(
        checks,
        "the same write once the segment is known",
        ctx.write(local(SEG, 0), remote(peer, LATE, 60), 8, QUEUE),
        Error::OutOfBounds { rank, segment: LATE, offset: 60, size: 8, segment_size: 64 }
            if rank == peer
    );
    ensure!(
        ctx.queue_size(QUEUE).doing(|| "queue_size")? == 0,
        "the refused first-touch operations left operations on queue {QUEUE}"
    );
    Ok(())
}

fn bounds(ctx: &Context, s: &Setup, checks: &mut u32) -> Outcome {
    let (me, peer) = (s.me, s.peer);
    let to_peer = remote(peer, SEG, 0);
    expect_err!(
        checks,
        "write from local offset 4096 of a 4096 B segment",
        ctx.write(local(SEG, 4096), to_peer, 1, QUEUE),
        Error::OutOfBounds { rank, segment: SEG, offset: 4096, size: 1, segment_size: SEG_LEN }
            if rank == me
    );
    expect_err!(
        checks,
        "write of 4097 B from a 4096 B segment",
        ctx.write(local(SEG, 0), to_peer, 4097, QUEUE),
        Error::OutOfBounds { rank, segment: SEG, offset: 0, size: 4097, .. } if rank == me
    );
    expect_err!(
        checks,
        "write from local offset u64::MAX (end overflows)",
        ctx.write(local(SEG, u64::MAX), to_peer, 2, QUEUE),
        Error::OutOfBounds { rank, segment: SEG, offset: u64::MAX, size: 2, .. } if rank == me
    );
    expect_err!(
        checks,
        "read of u64::MAX bytes",
        ctx.read(local(SEG, 1), to_peer, u64::MAX, QUEUE),
        Error::OutOfBounds { rank, segment: SEG, offset: 1, size: u64::MAX, .. } if rank == me
    );
    expect_err!(
        checks,
        "write to remote offset 4096 of a 4096 B segment",
        ctx.write(local(SEG, 0), remote(peer, SEG, 4096), 1, QUEUE),
        Error::OutOfBounds { rank, segment: SEG, offset: 4096, size: 1, segment_size: SEG_LEN }
            if rank == peer
    );
    expect_err!(
        checks,
        "read of a remote range running past the segment end",
        ctx.read(local(SEG, 0), remote(peer, SEG, 4000), 200, QUEUE),
        Error::OutOfBounds { rank, segment: SEG, offset: 4000, size: 200, segment_size: SEG_LEN }
            if rank == peer
    );
    expect_err!(
        checks,
        "write_notify to remote offset u64::MAX - 1 (end overflows)",
        ctx.write_notify(
            local(SEG, 0),
            remote(peer, SEG, u64::MAX - 1),
            4,
            Notification { id: 0, value: 1 },
            QUEUE
        ),
        Error::OutOfBounds { rank, segment: SEG, offset, size: 4, .. }
            if rank == peer && offset == u64::MAX - 1
    );
    let entry = |offset: u64, size: u64| ListEntry {
        local: local(SEG, 0),
        remote_segment: SEG,
        remote_offset: offset,
        size,
    };
    expect_err!(
        checks,
        "write_list whose middle entry runs past the remote segment",
        ctx.write_list(&[entry(0, 8), entry(4090, 10), entry(100, 8)], peer, QUEUE),
        Error::OutOfBounds { rank, segment: SEG, offset: 4090, size: 10, .. } if rank == peer
    );
    Ok(())
}

fn segments_and_ranks(ctx: &Context, s: &Setup, checks: &mut u32) -> Outcome {
    let (me, peer, n) = (s.me, s.peer, s.size);
    let note = Notification { id: 0, value: 1 };
    expect_err!(
        checks,
        "an atomic on a segment the peer does not have",
        ctx.atomic_fetch_add(remote(peer, NEVER, 0), 1, TIMEOUT),
        Error::UnknownSegment { rank, segment: NEVER } if rank == peer
    );
    // At the call on the direct path, at the request's wait through the fabric.
    expect_err!(
        checks,
        "a non-blocking atomic on a segment the peer does not have",
        ctx.atomic_fetch_add_nb(remote(peer, NEVER, 0), 1)
            .and_then(|request| request.wait(TIMEOUT)),
        Error::UnknownSegment { rank, segment: NEVER } if rank == peer
    );
    expect_err!(
        checks,
        "segment_create of a segment that exists",
        ctx.segment_create(SEG, SEG_LEN, TIMEOUT),
        Error::SegmentExists { rank, segment: SEG } if rank == me
    );
    expect_err!(
        checks,
        "write from an unknown local segment",
        ctx.write(local(NEVER, 0), remote(peer, SEG, 0), 1, QUEUE),
        Error::UnknownSegment { rank, segment: NEVER } if rank == me
    );
    expect_err!(
        checks,
        "write to an unknown remote segment",
        ctx.write(local(SEG, 0), remote(peer, NEVER, 0), 1, QUEUE),
        Error::UnknownSegment { rank, segment: NEVER } if rank == peer
    );
    expect_err!(
        checks,
        "notify into an unknown remote segment",
        ctx.notify(peer, NEVER, note, QUEUE),
        Error::UnknownSegment { rank, segment: NEVER } if rank == peer
    );
    expect_err!(
        checks,
        "segment_size_of an unknown remote segment",
        ctx.segment_size_of(peer, NEVER, TIMEOUT),
        Error::UnknownSegment { rank, segment: NEVER } if rank == peer
    );
    expect_err!(
        checks,
        "write to rank == size",
        ctx.write(local(SEG, 0), remote(n, SEG, 0), 1, QUEUE),
        Error::InvalidRank { rank, size } if rank == n && size == n
    );
    expect_err!(
        checks,
        "notify to rank == size",
        ctx.notify(n, SEG, note, QUEUE),
        Error::InvalidRank { rank, size } if rank == n && size == n
    );
    let entries = [ListEntry {
        local: local(SEG, 0),
        remote_segment: SEG,
        remote_offset: 0,
        size: 8,
    }];
    expect_err!(
        checks,
        "read_list from rank u32::MAX",
        ctx.read_list(&entries, u32::MAX, QUEUE),
        Error::InvalidRank { rank: u32::MAX, size } if size == n
    );
    expect_err!(
        checks,
        "segment_size_of rank == size",
        ctx.segment_size_of(n, SEG, TIMEOUT),
        Error::InvalidRank { rank, .. } if rank == n
    );
    Ok(())
}

fn notifications(ctx: &Context, s: &Setup, checks: &mut u32) -> Outcome {
    let (me, peer, count) = (s.me, s.peer, s.count);
    let count64 = u64::from(count);
    expect_err!(
        checks,
        "write_notify with id == notification count",
        ctx.write_notify(
            local(SEG, 0),
            remote(peer, SEG, 0),
            8,
            Notification { id: count, value: 1 },
            QUEUE
        ),
        Error::InvalidNotification { rank, segment: SEG, id, count: c }
            if rank == peer && id == count64 && c == count
    );
    expect_err!(
        checks,
        "notify with id u32::MAX",
        ctx.notify(peer, SEG, Notification { id: u32::MAX, value: 1 }, QUEUE),
        Error::InvalidNotification { rank, segment: SEG, id, .. }
            if rank == peer && id == u64::from(u32::MAX)
    );
    expect_err!(
        checks,
        "read_notify with id == notification count",
        ctx.read_notify(
            local(SEG, 0),
            remote(peer, SEG, 0),
            8,
            Notification { id: count, value: 1 },
            QUEUE
        ),
        Error::InvalidNotification { rank, segment: SEG, id, .. } if rank == me && id == count64
    );
    expect_err!(
        checks,
        "notify_waitsome on a range running past the table",
        ctx.notify_waitsome(SEG, count - 1, 2, Timeout::Test),
        Error::InvalidNotification { rank, segment: SEG, id, .. }
            if rank == me && id == count64 + 1
    );
    expect_err!(
        checks,
        "notify_waitsome on an empty range",
        ctx.notify_waitsome(SEG, 0, 0, Timeout::Test),
        Error::EmptyNotificationRange { rank, segment: SEG, begin: 0 } if rank == me
    );
    expect_err!(
        checks,
        "notify_reset of id == notification count",
        ctx.notify_reset(SEG, count),
        Error::InvalidNotification { rank, segment: SEG, id, .. } if rank == me && id == count64
    );
    expect_err!(
        checks,
        "notify_peek of id == notification count",
        ctx.notify_peek(SEG, count),
        Error::InvalidNotification { rank, segment: SEG, id, .. } if rank == me && id == count64
    );
    expect_err!(
        checks,
        "notify_waitsome on an unknown segment",
        ctx.notify_waitsome(NEVER, 0, 1, Timeout::Test),
        Error::UnknownSegment { rank, segment: NEVER } if rank == me
    );
    expect_err!(
        checks,
        "notify with value 0",
        ctx.notify(peer, SEG, Notification { id: 3, value: 0 }, QUEUE),
        Error::ZeroNotificationValue { rank, id: 3 } if rank == peer
    );
    expect_err!(
        checks,
        "write_notify with value 0",
        ctx.write_notify(
            local(SEG, 0),
            remote(peer, SEG, 0),
            8,
            Notification { id: 4, value: 0 },
            QUEUE
        ),
        Error::ZeroNotificationValue { rank, id: 4 } if rank == peer
    );
    expect_err!(
        checks,
        "read_notify with value 0",
        ctx.read_notify(
            local(SEG, 0),
            remote(peer, SEG, 0),
            8,
            Notification { id: 5, value: 0 },
            QUEUE
        ),
        Error::ZeroNotificationValue { rank, id: 5 } if rank == me
    );
    Ok(())
}

fn queues_and_lists(ctx: &Context, s: &Setup, checks: &mut u32) -> Outcome {
    let peer = s.peer;
    let queues = ctx.queue_num();
    let to_peer = remote(peer, SEG, 0);
    expect_err!(
        checks,
        "write on queue 200",
        ctx.write(local(SEG, 0), to_peer, 1, 200),
        Error::InvalidQueue { queue: 200, count } if count == queues
    );
    expect_err!(
        checks,
        "notify on queue 200",
        ctx.notify(peer, SEG, Notification { id: 0, value: 1 }, 200),
        Error::InvalidQueue { queue: 200, .. }
    );
    expect_err!(
        checks,
        "wait on queue 200",
        ctx.wait(200, Timeout::Test),
        Error::InvalidQueue { queue: 200, .. }
    );
    expect_err!(
        checks,
        "queue_size of queue 200",
        ctx.queue_size(200),
        Error::InvalidQueue { queue: 200, .. }
    );
    expect_err!(
        checks,
        "queue_delete of queue 200",
        ctx.queue_delete(200),
        Error::InvalidQueue { queue: 200, .. }
    );
    let q = ctx.queue_create().doing(|| "queue_create")?;
    ctx.queue_delete(q)
        .doing(|| "queue_delete of an idle queue")?;
    expect_err!(
        checks,
        "write on a deleted queue",
        ctx.write(local(SEG, 0), to_peer, 1, q),
        Error::InvalidQueue { queue, count } if queue == q && count == queues
    );
    let one = ListEntry {
        local: local(SEG, 0),
        remote_segment: SEG,
        remote_offset: 0,
        size: 1,
    };
    let too_long = vec![one; gaspi::MAX_LIST_ENTRIES + 1];
    expect_err!(
        checks,
        "write_list with no entries",
        ctx.write_list(&[], peer, QUEUE),
        Error::InvalidList(_)
    );
    expect_err!(
        checks,
        "write_list with MAX_LIST_ENTRIES + 1 entries",
        ctx.write_list(&too_long, peer, QUEUE),
        Error::InvalidList(_)
    );
    expect_err!(
        checks,
        "read_list with no entries",
        ctx.read_list(&[], peer, QUEUE),
        Error::InvalidList(_)
    );
    expect_err!(
        checks,
        "write_list_notify with MAX_LIST_ENTRIES + 1 entries",
        ctx.write_list_notify(
            &too_long,
            peer,
            SEG,
            Notification { id: 0, value: 1 },
            QUEUE
        ),
        Error::InvalidList(_)
    );
    Ok(())
}

fn local_access(ctx: &Context, s: &Setup, checks: &mut u32) -> Outcome {
    let me = s.me;
    let segment = ctx.segment(SEG).doing(|| "getting segment 0")?;
    let memory = segment
        .memory()
        .ok_or_else(|| Failure("segment 0 has no memory".into()))?;
    let past_end = memory.read(4000, &mut [0; 200]);
    expect_err!(
        checks,
        "a read running past the segment end",
        past_end,
        gaspi::SegmentError::OutOfBounds {
            offset: 4000,
            size: 200,
            len: SEG_LEN
        }
    );
    let overflowing = memory.read(u64::MAX, &mut [0; 1]);
    expect_err!(
        checks,
        "a read at offset u64::MAX",
        overflowing,
        gaspi::SegmentError::OutOfBounds {
            offset: u64::MAX,
            size: 1,
            ..
        }
    );
    let at_end = memory.write(SEG_LEN, &[0; 1]);
    expect_err!(
        checks,
        "a write at the segment end",
        at_end,
        gaspi::SegmentError::OutOfBounds {
            offset: SEG_LEN,
            size: 1,
            ..
        }
    );
    expect_err!(
        checks,
        "a handle on an unknown segment",
        ctx.segment(NEVER),
        Error::UnknownSegment { rank, segment: NEVER } if rank == me
    );
    let mut buf = [0u8; 10];
    expect_err!(
        checks,
        "segment_read running past the segment end",
        ctx.segment_read(SEG, 4090, &mut buf),
        Error::OutOfBounds { rank, segment: SEG, offset: 4090, size: 10, .. } if rank == me
    );
    expect_err!(
        checks,
        "segment_write at the segment end",
        ctx.segment_write(SEG, SEG_LEN, &[1]),
        Error::OutOfBounds { rank, segment: SEG, offset: SEG_LEN, size: 1, .. } if rank == me
    );
    expect_err!(
        checks,
        "segment_size of an unknown segment",
        ctx.segment_size(NEVER),
        Error::UnknownSegment { rank, segment: NEVER } if rank == me
    );
    Ok(())
}

/// Records how `result` ended under `key`: `Ok`, or the error's whole message (the tests
/// check the messages of refused lists word for word).
fn put_message<T>(data: &mut Data, key: &str, result: &gaspi::Result<T>) {
    match result {
        Ok(_) => data.put(key, "Ok"),
        Err(e) => data.put(key, e),
    }
}

/// A list with more operations than the queue is deep never fits, and is refused. Single writes
/// fill the queue (unless the provider makes each post wait for earlier completions), the queue
/// never holds more than its depth, and once it holds that many the next post is refused. Returns
/// whether single writes filled the queue. The lists' messages go into `data` as
/// `long_write_list`, `long_write_list_notify` and `long_read_list`.
fn full_queue(ctx: &Context, s: &Setup, checks: &mut u32, data: &mut Data) -> Outcome<bool> {
    let entry = ListEntry {
        local: local(BUSY, 0),
        remote_segment: SINK,
        remote_offset: 0,
        size: CHUNK,
    };
    let list = vec![entry; QUEUE_DEPTH as usize + 1];
    // Refused as invalid on every path: over the fabric it could never fit, and retrying a
    // `QueueFull` would go on for ever; done directly it would take no room, but a program
    // must not work only while its peers share the host.
    let long = ctx.write_list(&list, s.peer, QUEUE);
    put_message(data, "long_write_list", &long);
    expect_err!(
        checks,
        "write_list of depth + 1 entries",
        long,
        Error::InvalidList(_)
    );
    let long = ctx.write_list_notify(
        &list[1..],
        s.peer,
        SINK,
        Notification { id: 0, value: 1 },
        QUEUE,
    );
    put_message(data, "long_write_list_notify", &long);
    expect_err!(
        checks,
        "write_list_notify of depth entries (and the notification)",
        long,
        Error::InvalidList(_)
    );
    let long = ctx.read_list(&list, s.peer, QUEUE);
    put_message(data, "long_read_list", &long);
    expect_err!(
        checks,
        "read_list of depth + 1 entries",
        long,
        Error::InvalidList(_)
    );
    ensure!(
        ctx.queue_size(QUEUE).doing(|| "queue_size")? == 0,
        "the refused list left operations on queue {QUEUE}"
    );
    let mut filled = false;
    for _ in 0..8 * QUEUE_DEPTH {
        // Without a progress thread nothing completes between this look and the post (a post
        // only reaps completions when the provider makes it wait, after reserving its slot).
        let before = ctx.queue_size(QUEUE).doing(|| "queue_size")?;
        ensure!(
            before <= QUEUE_DEPTH,
            "queue {QUEUE} holds {before} operations, more than its depth {QUEUE_DEPTH}"
        );
        let posted = ctx.write(local(BUSY, 0), remote(s.peer, SINK, 0), CHUNK, QUEUE);
        if before == QUEUE_DEPTH {
            expect_err!(
                checks,
                "write onto a queue holding depth operations",
                posted,
                Error::QueueFull {
                    queue: QUEUE,
                    depth: QUEUE_DEPTH
                }
            );
            filled = true;
            break;
        }
        posted.doing(|| format!("write onto a queue holding {before} operations"))?;
    }
    ctx.wait(QUEUE, TIMEOUT)
        .doing(|| "waiting for the queue to drain")?;
    ensure!(
        ctx.queue_size(QUEUE).doing(|| "queue_size")? == 0,
        "queue {QUEUE} not empty after wait"
    );
    Ok(filled)
}

/// A segment and a queue with a write in flight refuse deletion; once drained they can be
/// deleted, and a deleted segment is unknown locally and remotely.
fn busy_and_deleted(ctx: &Context, s: &Setup, checks: &mut u32) -> Outcome {
    let (me, peer) = (s.me, s.peer);
    let q = ctx.queue_create().doing(|| "queue_create")?;
    ctx.write(local(BUSY, 0), remote(peer, SINK, 0), CHUNK, q)
        .doing(|| "posting a write from the segment to delete")?;
    // A direct write is complete when the call returns: nothing is in flight to refuse for.
    let in_flight = !ctx.reaches_directly(peer);
    if in_flight {
        expect_err!(
            checks,
            "segment_delete with a write in flight",
            ctx.segment_delete(BUSY),
            Error::SegmentBusy {
                segment: BUSY,
                in_flight: 1
            }
        );
        expect_err!(
            checks,
            "queue_delete with a write in flight",
            ctx.queue_delete(q),
            Error::QueueBusy { queue, outstanding: 1 } if queue == q
        );
    }
    ctx.wait(q, TIMEOUT)
        .doing(|| "waiting for the large writes")?;
    if in_flight {
        // Towards a segment never looked up, the write waits in its queue for the lookup
        // (until this rank waits: the progress thread is off), and holds its source as a
        // posted one does.
        ctx.write(local(BUSY, 0), remote(peer, PARKED, 0), CHUNK, q)
            .doing(|| "posting a write to a segment not looked up yet")?;
        expect_err!(
            checks,
            "segment_delete with a write waiting for its target's lookup",
            ctx.segment_delete(BUSY),
            Error::SegmentBusy {
                segment: BUSY,
                in_flight: 1
            }
        );
        ctx.wait(q, TIMEOUT)
            .doing(|| "waiting for the write that waited for its lookup")?;
    }
    ctx.queue_delete(q).doing(|| "deleting the drained queue")?;
    // As GASPI counts them: queues are created up to `queue_max`, and no further.
    let mut created = Vec::new();
    while ctx.queue_num() < ctx.queue_max() {
        created.push(
            ctx.queue_create()
                .doing(|| "queue_create up to queue_max")?,
        );
    }
    expect_err!(
        checks,
        "queue_create beyond queue_max",
        ctx.queue_create(),
        Error::Limit(_)
    );
    for q in created {
        ctx.queue_delete(q)
            .doing(|| "deleting the queues made up to queue_max")?;
    }
    ctx.segment_delete(BUSY)
        .doing(|| "deleting the idle segment")?;
    expect_err!(
        checks,
        "write from a deleted segment",
        ctx.write(local(BUSY, 0), remote(peer, SINK, 0), 1, QUEUE),
        Error::UnknownSegment { rank, segment: BUSY } if rank == me
    );
    expect_err!(
        checks,
        "segment_delete of a deleted segment",
        ctx.segment_delete(BUSY),
        Error::UnknownSegment { rank, segment: BUSY } if rank == me
    );
    // Every rank looks up its peer's GONE first, so the descriptor is cached when the peer
    // deletes it: the deletion must reach the cache (a write through a stale descriptor would
    // hit a closed registration, which crashes libfabric 1.17's tcp provider).
    let gone_size = ctx
        .segment_size_of(peer, GONE, TIMEOUT)
        .doing(|| "looking up the peer's segment GONE")?;
    if gone_size != 64 {
        return Err(Failure(format!(
            "segment_size_of(peer, GONE) = {gone_size}, want 64"
        )));
    }
    // A target keeps its descriptor: once the peer deleted the segment, it must not be used.
    let kept = ctx
        .target(peer, GONE, TIMEOUT)
        .doing(|| "a target of the peer's GONE")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before everyone deletes GONE")?;
    ctx.segment_delete(GONE).doing(|| "deleting segment GONE")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after everyone deleted GONE")?;
    // The news travels as a notification of its own; it arrives soon, not necessarily before
    // the barrier completes (it takes another path). Drive progress until it has.
    let start = Instant::now();
    loop {
        match ctx.segment_size_of(peer, GONE, Timeout::Test) {
            Err(Error::UnknownSegment {
                rank,
                segment: GONE,
            }) if rank == peer => break,
            Ok(_) | Err(Error::Timeout) if start.elapsed() < Duration::from_secs(10) => {
                ctx.wait(QUEUE, Timeout::Test)
                    .doing(|| "driving progress while the deletion news travels")?;
                std::thread::sleep(Duration::from_millis(1));
            }
            other => {
                return Err(Failure(format!(
                    "the peer's deletion of GONE never reached this rank's cache: {other:?}"
                )))
            }
        }
    }
    *checks += 1;
    expect_err!(
        checks,
        "write into a segment the peer deleted",
        ctx.write(local(SEG, 0), remote(peer, GONE, 0), 1, QUEUE),
        Error::UnknownSegment { rank, segment: GONE } if rank == peer
    );
    expect_err!(
        checks,
        "notify_waitsome on a deleted segment",
        ctx.notify_waitsome(GONE, 0, 1, Timeout::Test),
        Error::UnknownSegment { rank, segment: GONE } if rank == me
    );
    kept_target(ctx, s, &kept, checks)
}

/// A target resolved before its segment was deleted goes on naming segment GONE of the peer:
/// through it a write fails as one by id does (at the call, or at the batch's wait when that
/// takes a lookup), and once the peer made GONE anew, a write reaches the new segment.
fn kept_target(ctx: &Context, s: &Setup, kept: &gaspi::Target, checks: &mut u32) -> Outcome {
    let (me, peer) = (s.me, s.peer);
    ensure!(
        !ctx.target_is_current(kept),
        "a target of a segment the peer deleted counts as current"
    );
    *checks += 1;
    let src = ctx.segment(SEG).doing(|| "segment SEG")?;
    let batch = ctx.batch();
    expect_err!(
        checks,
        "write through a target of a segment the peer deleted",
        batch
            .write(&src, 0, kept, 0, 1)
            .and_then(|()| batch.wait(TIMEOUT)),
        Error::UnknownSegment { rank, segment: GONE } if rank == peer
    );
    // Nobody makes GONE anew before everyone checked what a deleted GONE does.
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before everyone makes GONE anew")?;
    ctx.segment_create(GONE, 64, TIMEOUT)
        .doing(|| "making GONE anew")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after everyone made GONE anew")?;
    let fresh = ctx
        .target(peer, GONE, TIMEOUT)
        .doing(|| "a target of the peer's new GONE")?;
    ensure!(
        ctx.target_is_current(&fresh),
        "a target resolved after the peer's last deletion counts as stale"
    );
    *checks += 1;
    let mut sent = [0u8; 16];
    fill_pattern(seed(&[u64::from(me), u64::from(peer), 5]), &mut sent);
    ctx.segment_write(SEG, 0, &sent)
        .doing(|| "staging the bytes for the new GONE")?;
    let done = Notification { id: 3, value: 1 };
    batch
        .write_notify(&src, 0, kept, 8, 16, done)
        .and_then(|()| batch.wait(TIMEOUT))
        .doing(|| "write through the kept target into the peer's new GONE")?;
    let from = (me + s.size - 1) % s.size;
    let id = ctx
        .notify_waitsome(GONE, done.id, 1, TIMEOUT)
        .doing(|| "waiting for the write into this rank's new GONE")?;
    ctx.notify_reset(GONE, id).doing(|| "notify_reset")?;
    let mut got = [0u8; 16];
    ctx.segment_read(GONE, 8, &mut got)
        .doing(|| "reading the new GONE")?;
    let mut want = [0u8; 16];
    fill_pattern(seed(&[u64::from(from), u64::from(me), 5]), &mut want);
    compare(
        "the bytes written into the new GONE through a kept target",
        &got,
        &want,
    )?;
    *checks += 1;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the writes into the new GONE")?;
    ctx.segment_delete(GONE).doing(|| "deleting GONE again")?;
    Ok(())
}

/// After all of the above, no notification was set by a refused call, and real traffic works.
fn still_works(ctx: &Context, s: &Setup) -> Outcome {
    let (me, peer) = (s.me, s.peer);
    let left = (me + s.size - 1) % s.size;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before the final exchange")?;
    match ctx.notify_waitsome(SEG, 0, s.count, Timeout::Test) {
        Err(Error::Timeout) => {}
        other => {
            return Err(Failure(format!(
                "a refused call left a notification set: {other:?}"
            )))
        }
    }
    // Nobody may send the final notification while another rank still checks for strays.
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the check for strays")?;
    let half = SEG_LEN / 2;
    let pattern = |rank: Rank| {
        let mut p = vec![0u8; half as usize];
        fill_pattern(seed(&[u64::from(rank), 0xe77]), &mut p);
        p
    };
    ctx.segment_write(SEG, 0, &pattern(me))
        .doing(|| "writing the final pattern")?;
    ctx.write_notify(
        local(SEG, 0),
        remote(peer, SEG, half),
        half,
        Notification {
            id: 7,
            value: me + 1,
        },
        QUEUE,
    )
    .doing(|| "final write_notify")?;
    let id = ctx
        .notify_waitsome(SEG, 0, s.count, TIMEOUT)
        .doing(|| "waiting for the final notification")?;
    let value = ctx.notify_reset(SEG, id).doing(|| "resetting")?;
    ensure!(
        id == 7 && value == left + 1,
        "final exchange: notification {id} = {value}, expected 7 = {}",
        left + 1
    );
    let mut got = vec![0u8; half as usize];
    ctx.segment_read(SEG, half, &mut got)
        .doing(|| "reading the final data")?;
    compare("final exchange data", &got, &pattern(left))?;
    ctx.wait(QUEUE, TIMEOUT).doing(|| "final wait")
}
