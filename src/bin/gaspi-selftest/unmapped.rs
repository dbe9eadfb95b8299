//! `unmapped`: a segment that same-host peers cannot map still works, through the fabric, and
//! a segment deleted and created again is mapped anew.
//!
//! Every rank binds memory whose shared-memory file has lost its name (allocated, then
//! [`SegmentMemory::unlink_shm`]), as user memory given to `segment_bind` would be: no other
//! process can map it, so operations into it take the fabric even towards ranks reached
//! directly. Each rank writes a pattern with `write_notify` into its right neighbour's
//! unmapped segment, reads that segment back, and adds to a counter in it with a remote
//! atomic; every received byte, notification value and counter is checked. Then every rank
//! deletes a segment its left neighbour has already written into (so the neighbour holds a
//! mapping or descriptor of it), creates it again larger, and the neighbour's next write lands
//! in the new memory, beyond the old size. Last, every rank deletes another unmapped segment
//! and binds new memory as it while its left neighbour keeps a `Target` of it: the
//! neighbour's next write through that target lands in the new memory. Last, every rank
//! deletes a segment its left neighbour wrote into (directly, on the direct path): after the
//! neighbour's next progress, its process no longer maps that segment's files, and a write
//! into it is a clear error.

use std::time::{Duration, Instant};

use gaspi::{local, remote, Context, Notification, QueueId, SegmentId, SegmentMemory, Timeout};

use crate::check::{
    compare, ensure, fill_pattern, seed, take_arrival, Data, Doing, Failure, Outcome, Report,
};

/// This rank's outgoing data.
const SRC: SegmentId = 1;
/// The unmapped segment: [`LEN`] bytes of data, then the atomic counter.
const UNMAPPED: SegmentId = 2;
/// Deleted and created again.
const RENEWED: SegmentId = 3;
/// Unmapped, deleted and bound again while the left neighbour keeps a `Target` of it.
const REBOUND: SegmentId = 4;
/// Written into by the left neighbour, then deleted: its pages must not stay mapped there.
const RELEASED: SegmentId = 5;
const RELEASED_SIZE: u64 = 1 << 20;
/// The queue of the writes into `RELEASED`: one that never carried a fabric write towards
/// the neighbour, so that on the direct path they go direct (and map the segment).
const RELEASED_QUEUE: QueueId = 1;
/// Times `REBOUND` is bound anew, each with a target resolved before.
const REBINDINGS: u32 = 8;
const QUEUE: QueueId = 0;
const TIMEOUT: Timeout = Timeout::Millis(60_000);

/// Larger than every provider's inject size, so the data takes a real fabric write.
const LEN: u64 = 64 << 10;
const COUNTER: u64 = LEN;
/// `RENEWED`'s size before and after, and where the write into the new one lands.
const OLD_SIZE: u64 = 64;
const NEW_SIZE: u64 = 8192;
const LATE_AT: u64 = 8000;

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    ensure!(n >= 2, "unmapped needs at least 2 ranks, got {n}");
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let mut data = Data::default();
    data.put("direct", ctx.reaches_directly(right));

    ctx.segment_create(SRC, LEN, TIMEOUT)
        .doing(|| "segment_create(SRC)")?;
    let segment_error = |step: &str, e: gaspi::SegmentError| Failure(format!("{step}: {e}"));
    let mut memory = SegmentMemory::allocate((LEN + 8) as usize, "unmapped")
        .map_err(|e| segment_error("allocating the memory to bind", e))?;
    memory
        .unlink_shm()
        .map_err(|e| segment_error("removing the name of its file", e))?;
    ensure!(
        !memory.is_shareable(),
        "memory whose file has no name still claims to be shareable"
    );
    ctx.segment_bind(UNMAPPED, memory, TIMEOUT)
        .doing(|| "segment_bind(UNMAPPED)")?;

    write_notify_into_unmapped(ctx, me, left, right)?;
    read_back_from_unmapped(ctx, me, right)?;
    count_with_atomics(ctx, right)?;
    renewed_segment_is_mapped_anew(ctx, me, left, right)?;
    kept_target_reaches_rebound_segment(ctx, me, left, right)?;
    deleted_segment_is_released(ctx, me, left, right, &mut data)?;
    Ok(Report {
        summary: format!(
            "write_notify, read and atomics into a segment peers cannot map, a write into a \
             re-created segment beyond its old size, and one through a target kept across a \
             re-binding, all landed ({} KiB each way); a deleted segment is unmapped by its \
             writer",
            LEN >> 10
        ),
        data,
    })
}

fn pattern(from: u32, len: u64) -> Vec<u8> {
    let mut bytes = vec![0; len as usize];
    fill_pattern(seed(&[u64::from(from), len]), &mut bytes);
    bytes
}

/// The notification from `left` is there, with its value, and so are all of its bytes.
fn write_notify_into_unmapped(ctx: &Context, me: u32, left: u32, right: u32) -> Outcome {
    ctx.segment_write(SRC, 0, &pattern(me, LEN))
        .doing(|| "filling SRC")?;
    let note = Notification {
        id: 0,
        value: me + 1,
    };
    ctx.write_notify(local(SRC, 0), remote(right, UNMAPPED, 0), LEN, note, QUEUE)
        .doing(|| "write_notify into the right neighbour's unmapped segment")?;
    take_arrival(
        ctx,
        TIMEOUT,
        UNMAPPED,
        (left + 1, 0),
        &pattern(left, LEN),
        format_args!("the write from rank {left} into the unmapped segment"),
    )?;
    ctx.wait(QUEUE, TIMEOUT)
        .doing(|| "completing the write_notify")
}

/// A read from the right neighbour's unmapped segment returns what this rank wrote there.
fn read_back_from_unmapped(ctx: &Context, me: u32, right: u32) -> Outcome {
    ctx.barrier(TIMEOUT).doing(|| "barrier before the read")?;
    ctx.segment_write(SRC, 0, &vec![0; LEN as usize])
        .doing(|| "clearing SRC")?;
    ctx.read(local(SRC, 0), remote(right, UNMAPPED, 0), LEN, QUEUE)
        .doing(|| "read from the right neighbour's unmapped segment")?;
    ctx.wait(QUEUE, TIMEOUT).doing(|| "completing the read")?;
    let mut got = vec![0; LEN as usize];
    ctx.segment_read(SRC, 0, &mut got)
        .doing(|| "reading what the read fetched")?;
    compare(
        "this rank's data read back from its right neighbour",
        &got,
        &pattern(me, LEN),
    )
}

/// Every rank adds its rank + 1 to its right neighbour's counter: the left neighbour's sum
/// arrives here, and each add sees the counter it started from (0).
fn count_with_atomics(ctx: &Context, right: u32) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    let left = (me + n - 1) % n;
    let before = ctx
        .atomic_fetch_add(remote(right, UNMAPPED, COUNTER), u64::from(me) + 1, TIMEOUT)
        .doing(|| "atomic_fetch_add on the right neighbour's unmapped segment")?;
    ensure!(
        before == 0,
        "the counter was {before} before the add, want 0"
    );
    ctx.barrier(TIMEOUT).doing(|| "barrier after the atomics")?;
    let mut word = [0; 8];
    ctx.segment_read(UNMAPPED, COUNTER, &mut word)
        .doing(|| "reading the counter")?;
    let counter = u64::from_le_bytes(word);
    ensure!(
        counter == u64::from(left) + 1,
        "the counter holds {counter}, want {} from rank {left}",
        left + 1
    );
    Ok(())
}

/// The left neighbour maps (or looks up) `RENEWED`, this rank deletes it and creates it again
/// larger: the neighbour's next write lands beyond the old size, in the new memory.
///
/// The first write is confirmed by its notification before the deletion: a write that is
/// complete at its origin may still be on its way (GASPI's `wait` is local), and the barrier,
/// on the direct path, does not travel behind it.
fn renewed_segment_is_mapped_anew(ctx: &Context, me: u32, left: u32, right: u32) -> Outcome {
    ctx.segment_create(RENEWED, OLD_SIZE, TIMEOUT)
        .doing(|| "segment_create(RENEWED) at its old size")?;
    let first = Notification { id: 1, value: 1 };
    ctx.write_notify(
        local(SRC, 0),
        remote(right, RENEWED, 0),
        OLD_SIZE,
        first,
        QUEUE,
    )
    .doing(|| "writing into the right neighbour's old RENEWED")?;
    ctx.notify_waitsome(RENEWED, 1, 1, TIMEOUT)
        .doing(|| "waiting for the left neighbour's write into the old RENEWED")?;
    ctx.wait(QUEUE, TIMEOUT).doing(|| "completing that write")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before the deletion")?;
    ctx.segment_delete(RENEWED)
        .doing(|| "segment_delete(RENEWED)")?;
    ctx.segment_create(RENEWED, NEW_SIZE, TIMEOUT)
        .doing(|| "segment_create(RENEWED) at its new size")?;
    let late = pattern(me + 1000, 64);
    ctx.segment_write(SRC, 0, &late)
        .doing(|| "filling SRC for the late write")?;
    let note = Notification { id: 0, value: 7 };
    ctx.write_notify(
        local(SRC, 0),
        remote(right, RENEWED, LATE_AT),
        64,
        note,
        QUEUE,
    )
    .doing(|| "write_notify beyond the old size of the right neighbour's RENEWED")?;
    take_arrival(
        ctx,
        TIMEOUT,
        RENEWED,
        (7, LATE_AT),
        &pattern(left + 1000, 64),
        format_args!("the late write from rank {left} into the new RENEWED"),
    )?;
    ctx.wait(QUEUE, TIMEOUT)
        .doing(|| "completing the late write")
}

/// Binds `len` bytes of fresh memory that no other process can map as segment `id`.
fn bind_unmapped(ctx: &Context, id: SegmentId, len: u64) -> Outcome {
    let memory = SegmentMemory::allocate(len as usize, "rebound")
        .and_then(|mut memory| memory.unlink_shm().map(|()| memory))
        .map_err(|e| Failure(format!("memory for segment {id}: {e}")))?;
    ctx.segment_bind(id, memory, TIMEOUT)
        .doing(|| format!("segment_bind({id})"))
}

/// This rank deletes `REBOUND` and binds new memory as it while its left neighbour keeps a
/// `Target` of it: the neighbour's next write through the target lands in the new memory.
///
/// The news of the deletion travels through the fabric, the re-binding's synchronisation
/// between same-host ranks goes direct and can overtake it (mostly over shm, often over tcp,
/// hence several rounds): a target that trusted its descriptor until the news came wrote into
/// the deleted registration, and its notification appeared in the new table without the data,
/// or never.
fn kept_target_reaches_rebound_segment(ctx: &Context, me: u32, left: u32, right: u32) -> Outcome {
    bind_unmapped(ctx, REBOUND, LEN)?;
    let src = ctx.segment(SRC).doing(|| "a handle of SRC")?;
    let batch = ctx.batch();
    for round in 0..REBINDINGS {
        let kept = ctx
            .target(right, REBOUND, TIMEOUT)
            .doing(|| format!("round {round}: resolving the right neighbour's REBOUND"))?;
        ctx.barrier(TIMEOUT)
            .doing(|| format!("round {round}: barrier before the re-binding"))?;
        ctx.segment_delete(REBOUND)
            .doing(|| format!("round {round}: segment_delete(REBOUND)"))?;
        bind_unmapped(ctx, REBOUND, LEN)?;
        ctx.segment_write(SRC, 0, &pattern(me + 2000 + round, LEN))
            .doing(|| format!("round {round}: filling SRC"))?;
        let note = Notification {
            id: 0,
            value: me + 1,
        };
        batch
            .write_notify(&src, 0, &kept, 0, LEN, note)
            .doing(|| format!("round {round}: write_notify through the kept target"))?;
        take_arrival(
            ctx,
            TIMEOUT,
            REBOUND,
            (left + 1, 0),
            &pattern(left + 2000 + round, LEN),
            format_args!("round {round}: the write from rank {left} through its kept target"),
        )?;
        batch
            .wait(TIMEOUT)
            .doing(|| format!("round {round}: completing the write through the kept target"))?;
    }
    Ok(())
}

/// How many mappings this process holds of the files of other ranks' segment `id` (its
/// memory, `gaspi-seg<id>-...`, and its notification table, `gaspi-table<id>-...`), from
/// `/proc/self/maps`.
fn mappings_of_others(id: SegmentId) -> Outcome<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| Failure(format!("reading /proc/self/maps: {e}")))?;
    let me = std::process::id().to_string();
    let prefixes = [format!("gaspi-seg{id}-"), format!("gaspi-table{id}-")];
    Ok(maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter_map(|path| path.rsplit('/').next())
        .filter(|name| prefixes.iter().any(|p| name.starts_with(p.as_str())))
        // `gaspi-<kind>-<pid namespace>-<pid>-<n>`: another rank's file.
        .filter(|name| name.rsplit('-').nth(1) != Some(me.as_str()))
        .count())
}

/// Every rank writes into its right neighbour's `RELEASED` and then deletes its own: after
/// the barrier that follows and a progress call (or a few, `released_progress_calls`, within
/// ten seconds), no rank maps another's `RELEASED` any
/// more (`released_mapped_before`, `released_mapped_after` on the data line; before, a writer
/// kept the deleted memory mapped until it touched the segment again or finalized), and on
/// the direct path a write into it fails with `UnknownSegment` (`released_write_after`).
fn deleted_segment_is_released(
    ctx: &Context,
    me: u32,
    left: u32,
    right: u32,
    data: &mut Data,
) -> Outcome {
    ctx.segment_create(RELEASED, RELEASED_SIZE, TIMEOUT)
        .doing(|| "segment_create(RELEASED)")?;
    ctx.segment_write(SRC, 0, &pattern(me + 3000, 8))
        .doing(|| "filling SRC for RELEASED")?;
    let note = Notification {
        id: 0,
        value: me + 1,
    };
    ctx.write_notify(
        local(SRC, 0),
        remote(right, RELEASED, 0),
        8,
        note,
        RELEASED_QUEUE,
    )
    .doing(|| "write_notify into the right neighbour's RELEASED")?;
    take_arrival(
        ctx,
        TIMEOUT,
        RELEASED,
        (left + 1, 0),
        &pattern(left + 3000, 8),
        format_args!("the write from rank {left} into RELEASED"),
    )?;
    ctx.wait(RELEASED_QUEUE, TIMEOUT)
        .doing(|| "completing the write into RELEASED")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before deleting RELEASED")?;
    data.put("released_mapped_before", mappings_of_others(RELEASED)?);
    // Every rank has counted before any deletes: a sweep (the progress thread's, say) after a
    // neighbour's deletion would otherwise empty the count before it is taken.
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after counting the mappings")?;
    ctx.segment_delete(RELEASED)
        .doing(|| "segment_delete(RELEASED)")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after deleting RELEASED")?;
    // Any call that drives progress would do. The first releases the mappings unless a thread
    // of this rank (the progress thread, preempted on a busy core) was inside an operation
    // then; a later call releases them once it is out, so a few are allowed (counted).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut calls = 0u32;
    let after = loop {
        ctx.progress();
        calls += 1;
        let left = mappings_of_others(RELEASED)?;
        if left == 0 || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    data.put("released_mapped_after", after);
    data.put("released_progress_calls", calls);
    if ctx.reaches_directly(right) {
        let late = ctx.write_notify(
            local(SRC, 0),
            remote(right, RELEASED, 0),
            8,
            note,
            RELEASED_QUEUE,
        );
        data.put(
            "released_write_after",
            match late {
                Ok(()) => "Ok".to_owned(),
                Err(gaspi::Error::UnknownSegment { .. }) => "UnknownSegment".to_owned(),
                Err(e) => format!("{e:?}"),
            },
        );
    }
    Ok(())
}
