//! `stress`: a notification never becomes visible before its data, under sustained load.
//!
//! Every even rank streams `write_notify` messages into rank + 1 from `--threads` threads at
//! once. Each writer thread has a *lane* of its own: a ring of [`SLOTS`] slots, one
//! notification id per slot, and a queue. As many threads of the receiver all wait on the
//! notifications of every lane; whichever takes one checks every byte of its slot at once,
//! resets it and acknowledges with a notification back (credit-based flow control: a writer
//! reuses a slot only after its acknowledgement). A message carries its sequence number and a
//! pattern derived from its writer, lane and sequence number, so a notification that overtook
//! its data shows as the previous message's bytes (or a mix), and a lost, duplicated or
//! reordered message shows as an unexpected sequence number. First 64 KiB blocks, then small
//! messages (8..256 B), where such a race would be the most visible. A slot whose bytes differ
//! is counted and the run goes on, so a failure says how often it happened.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gaspi::{local, remote, Context, Error, Notification, QueueId, Rank, SegmentId, Timeout};

use crate::check::{
    compare, ensure, fill_pattern, human, seed, Crew, Data, Doing, Failure, Outcome, Report,
};
use crate::options::Options;

const SEG: SegmentId = 0;
/// Slots in a lane's ring; its writer has this many messages in flight at most.
const SLOTS: u32 = 8;
const SLOT_LEN: u64 = 64 << 10;
/// Bound of every single wait of a writer; a healthy stream never waits more than milliseconds.
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// The receiving threads wait in short slices, to notice when the work is done or another
/// thread failed.
const POLL: Timeout = Timeout::Millis(20);
/// Bound of a whole receiving side; healthy, it takes a few seconds at most.
const DEADLINE: Duration = Duration::from_secs(60);
/// Bytes at the start of every message holding its sequence number.
const HEADER: usize = 8;

/// The shape of the streams from one writer rank, known to both ends.
#[derive(Debug, Clone, Copy)]
struct Shape {
    writer: Rank,
    lanes: u32,
    blocks: u64,
    /// Messages of each lane.
    total: u64,
}

impl Shape {
    /// Data notification ids, one per slot of every lane; the acknowledgements (in the
    /// writer's segment) follow them.
    fn ids(self) -> u32 {
        self.lanes * SLOTS
    }

    /// Messages of all lanes together.
    fn messages(self) -> u64 {
        u64::from(self.lanes) * self.total
    }

    /// Length of message `seq` of a lane: full blocks first, then small sizes sweeping 8..=256 B.
    fn len(self, seq: u64) -> usize {
        if seq < self.blocks {
            SLOT_LEN as usize
        } else {
            8 + (seq * 37 % 249) as usize
        }
    }

    /// The lane that slot (and notification id) `slot` belongs to.
    fn lane(self, slot: u32) -> Lane {
        Lane {
            shape: self,
            lane: slot / SLOTS,
        }
    }
}

/// One writer thread's stream: slots `lane * SLOTS..(lane + 1) * SLOTS`.
#[derive(Debug, Clone, Copy)]
struct Lane {
    shape: Shape,
    lane: u32,
}

impl Lane {
    /// The slot (and data notification id) of message `seq`.
    fn slot(self, seq: u64) -> u32 {
        self.lane * SLOTS + (seq % u64::from(SLOTS)) as u32
    }

    /// Message `seq` as the writer sends it.
    fn fill(self, seq: u64, buf: &mut [u8]) {
        buf[..HEADER].copy_from_slice(&seq.to_le_bytes());
        let parts = [u64::from(self.shape.writer), u64::from(self.lane), seq];
        fill_pattern(seed(&parts), &mut buf[HEADER..]);
    }
}

fn offset(slot: u32) -> u64 {
    u64::from(slot) * SLOT_LEN
}

/// The notification value of message `seq` (never 0).
fn value(seq: u64) -> Outcome<u32> {
    u32::try_from(seq + 1)
        .map_err(|_| Failure(format!("message {seq} exceeds the u32 value space")))
}

pub fn run(ctx: &Context, opts: &Options) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    let lanes = opts.threads;
    ensure!(lanes > 0, "--threads must be at least 1");
    let shape = |writer| Shape {
        writer,
        lanes,
        blocks: opts.blocks,
        total: opts.blocks + opts.small,
    };
    ensure!(
        2 * shape(me).ids() <= ctx.config().notifications,
        "{lanes} lanes need {} notification ids, a segment has {}",
        2 * shape(me).ids(),
        ctx.config().notifications
    );
    value(shape(me).total)?;
    ctx.segment_create(SEG, u64::from(lanes * SLOTS) * SLOT_LEN, TIMEOUT)
        .doing(|| "creating the ring segment")?;
    if me % 2 == 0 && me + 1 < n {
        write(ctx, shape(me), me + 1).map(Report::from)
    } else if me % 2 == 1 {
        receive(ctx, shape(me - 1))
    } else {
        Ok(Report::from(
            "no partner (last rank of an odd-sized job), idle".to_owned(),
        ))
    }
}

/// The queue of thread `thread` (a writer's lane, or a receiving thread's acknowledgements):
/// its own where there are enough, so that threads post concurrently.
fn queue_of(ctx: &Context, thread: u32) -> QueueId {
    (thread % ctx.queue_num()) as QueueId
}

/// The writer: one thread per lane.
fn write(ctx: &Context, shape: Shape, peer: Rank) -> Outcome<String> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..shape.lanes)
            .map(|lane| s.spawn(move || write_lane(ctx, Lane { shape, lane }, peer)))
            .collect();
        handles
            .into_iter()
            .enumerate()
            .try_for_each(|(lane, h)| Crew::join(h, format_args!("writer thread {lane}")))
    })?;
    Ok(format!(
        "{} threads each streamed {} write_notify ({} x 64 KiB + {} x 8..256 B) to rank {peer} \
         through {SLOTS} slots of their own, every acknowledgement matched its message",
        shape.lanes,
        shape.total,
        shape.blocks,
        shape.total - shape.blocks
    ))
}

/// A writer thread: keeps every free slot of its lane busy, reuses a slot only after its
/// acknowledgement.
fn write_lane(ctx: &Context, lane: Lane, peer: Rank) -> Outcome {
    let (shape, me) = (lane.shape, lane.lane);
    let queue = queue_of(ctx, me);
    let first = lane.slot(0);
    let mut buf = vec![0u8; SLOT_LEN as usize];
    let mut in_slot: [Option<u64>; SLOTS as usize] = [None; SLOTS as usize];
    let (mut next, mut acked) = (0u64, 0u64);
    while acked < shape.total {
        let mut posted = false;
        while next < shape.total && in_slot[(lane.slot(next) - first) as usize].is_none() {
            let slot = lane.slot(next);
            let len = shape.len(next);
            lane.fill(next, &mut buf[..len]);
            ctx.segment_write(SEG, offset(slot), &buf[..len])
                .doing(|| format!("lane {me}: filling slot {slot} with message {next}"))?;
            let note = Notification {
                id: slot,
                value: value(next)?,
            };
            ctx.write_notify(
                local(SEG, offset(slot)),
                remote(peer, SEG, offset(slot)),
                len as u64,
                note,
                queue,
            )
            .doing(|| format!("lane {me}: sending message {next}"))?;
            in_slot[(slot - first) as usize] = Some(next);
            next += 1;
            posted = true;
        }
        if posted {
            // A source slot is refilled only once its write has completed locally.
            ctx.wait(queue, TIMEOUT)
                .doing(|| format!("lane {me}: waiting for the writes up to message {next}"))?;
        }
        let acks = shape.ids() + first;
        ctx.notify_waitsome(SEG, acks, SLOTS, TIMEOUT).doing(|| {
            format!(
                "lane {me}: waiting for acknowledgements ({acked} of {} so far)",
                shape.total
            )
        })?;
        // Take every acknowledgement that is there, not only the first one.
        for i in 0..SLOTS {
            let got = ctx
                .notify_reset(SEG, acks + i)
                .doing(|| format!("lane {me}: resetting the acknowledgement of slot {i}"))?;
            if got == 0 {
                continue;
            }
            let expected = in_slot[i as usize].take();
            ensure!(
                expected.map(|seq| u64::from(got) == seq + 1) == Some(true),
                "lane {me}, slot {i}: acknowledgement value {got}, but the slot holds {expected:?}"
            );
            acked += 1;
        }
    }
    Ok(())
}

/// What the receiving threads share.
struct Receiving {
    shape: Shape,
    /// The sequence number each slot expects next; only the thread that took the slot's
    /// notification touches it until it acknowledges.
    next_in_slot: Vec<AtomicU64>,
    /// Messages taken by all threads together.
    consumed: AtomicU64,
    crew: Crew,
}

/// What one receiving thread checked.
#[derive(Default)]
struct Checked {
    messages: u64,
    blocks: u64,
    bytes: u64,
    mismatches: u64,
    first_mismatch: Option<String>,
    /// Times another thread reset an id first (`notify_reset` returned 0).
    lost_races: u64,
}

/// The receiver: as many threads as the writer has lanes, all waiting on every lane.
fn receive(ctx: &Context, shape: Shape) -> Outcome<Report> {
    let receiving = Receiving {
        shape,
        next_in_slot: (0..shape.ids())
            .map(|slot| AtomicU64::new(u64::from(slot % SLOTS)))
            .collect(),
        consumed: AtomicU64::new(0),
        crew: Crew::new(DEADLINE),
    };
    let threads = std::thread::scope(|s| {
        let receiving = &receiving;
        let handles: Vec<_> = (0..shape.lanes)
            .map(|t| s.spawn(move || receiving.crew.guarded(|| check_arrivals(ctx, receiving, t))))
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(t, h)| Crew::join(h, format_args!("receiving thread {t}")))
            .collect::<Outcome<Vec<Checked>>>()
    })?;
    match ctx.notify_waitsome(SEG, 0, shape.ids(), Timeout::Test) {
        Err(Error::Timeout) => {}
        other => {
            return Err(Failure(format!(
                "after the last message a data notification is still set: {other:?}"
            )))
        }
    }
    let sum = |f: fn(&Checked) -> u64| threads.iter().map(f).sum::<u64>();
    let (messages, bytes, mismatches) =
        (sum(|c| c.messages), sum(|c| c.bytes), sum(|c| c.mismatches));
    let per_thread: Vec<String> = threads.iter().map(|c| c.messages.to_string()).collect();
    let mut data = Data::default();
    data.put("threads", shape.lanes);
    data.put("messages", messages);
    data.put("verified_blocks", sum(|c| c.blocks));
    data.put("verified_bytes", bytes);
    data.put("mismatches", mismatches);
    data.put("per_thread", per_thread.join("/"));
    data.put("lost_races", sum(|c| c.lost_races));
    if let Some(first) = threads.iter().find_map(|c| c.first_mismatch.as_ref()) {
        return Err(Failure(format!(
            "{mismatches} of {messages} messages differed from what was sent when their \
             notification appeared; the first: {first}"
        )));
    }
    ensure!(
        messages == shape.messages(),
        "took {messages} messages, expected {}",
        shape.messages()
    );
    Ok(Report {
        summary: format!(
            "{} threads took {messages} notifications from {} lanes of rank {} and checked \
             each slot the moment its notification appeared (per thread: {}): {} x 64 KiB + {} \
             x 8..256 B per lane, {} verified, no loss, duplicate or reordering",
            shape.lanes,
            shape.lanes,
            shape.writer,
            per_thread.join("/"),
            shape.blocks,
            shape.total - shape.blocks,
            human(bytes)
        ),
        data,
    })
}

/// A receiving thread: takes whatever notification of any lane is set, checks its slot and
/// hands the slot back.
fn check_arrivals(ctx: &Context, receiving: &Receiving, thread: u32) -> Outcome<Checked> {
    let shape = receiving.shape;
    let queue = queue_of(ctx, thread);
    let segment = ctx.segment(SEG).doing(|| "getting the segment")?;
    let memory = segment
        .memory()
        .ok_or_else(|| Failure("segment 0 has no memory".into()))?;
    let mut want = vec![0u8; SLOT_LEN as usize];
    let mut landed = vec![0u8; SLOT_LEN as usize];
    let mut checked = Checked::default();
    while receiving.consumed.load(Ordering::Acquire) < shape.messages() {
        let stop = receiving.crew.should_stop(|| {
            format!(
                "receiving thread {thread} ({} of {} messages taken)",
                receiving.consumed.load(Ordering::Acquire),
                shape.messages()
            )
        })?;
        if stop {
            break;
        }
        let slot = match ctx.notify_waitsome(SEG, 0, shape.ids(), POLL) {
            Ok(slot) => slot,
            Err(Error::Timeout) => continue,
            Err(e) => return Err(Failure(format!("thread {thread}: waiting: {e}"))),
        };
        let got = ctx
            .notify_reset(SEG, slot)
            .doing(|| format!("thread {thread}: resetting notification {slot}"))?;
        if got == 0 {
            checked.lost_races += 1;
            continue;
        }
        let seq = u64::from(got) - 1;
        // Whoever takes a slot's notification owns the slot until it acknowledges, so the
        // exchange fails only for a message that was lost, duplicated or reordered.
        let expected = receiving.next_in_slot[slot as usize].compare_exchange(
            seq,
            seq + u64::from(SLOTS),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        ensure!(
            expected.is_ok(),
            "thread {thread}, slot {slot}: notification value {got}, expected {}: a message was \
             lost, duplicated or reordered",
            expected.unwrap_or_else(|e| e) + 1
        );
        let lane = shape.lane(slot);
        let len = shape.len(seq);
        lane.fill(seq, &mut want[..len]);
        // The writer does not touch this slot again before our acknowledgement, which is sent
        // only after this copy: what it holds is what the notification made visible.
        let data = &mut landed[..len];
        memory
            .read(offset(slot), data)
            .map_err(|e| Failure(format!("reading slot {slot}: {e}")))?;
        if let Err(Failure(differs)) = compare(
            format_args!(
                "message {seq} ({len} B) of lane {} in slot {slot}, checked as its \
                 notification appeared",
                lane.lane
            ),
            data,
            &want[..len],
        ) {
            checked.mismatches += 1;
            checked.first_mismatch.get_or_insert(differs);
        }
        checked.messages += 1;
        checked.bytes += len as u64;
        checked.blocks += u64::from(len as u64 == SLOT_LEN);
        receiving.consumed.fetch_add(1, Ordering::AcqRel);
        let ack = Notification {
            id: shape.ids() + slot,
            value: got,
        };
        ctx.notify(shape.writer, SEG, ack, queue)
            .doing(|| format!("thread {thread}: acknowledging message {seq} of slot {slot}"))?;
    }
    ctx.wait(queue, TIMEOUT)
        .doing(|| format!("thread {thread}: waiting for the acknowledgements to leave"))?;
    Ok(checked)
}
