//! `stress`: a notification never becomes visible before its data, under sustained load.
//!
//! Every even rank streams `write_notify` messages into a ring of [`SLOTS`] slots of rank + 1,
//! one notification id per slot. The receiver checks every byte of a slot the moment its
//! notification appears, resets it and acknowledges with a notification back (credit-based flow
//! control: the writer reuses a slot only after its acknowledgement). A message carries its
//! sequence number and a pattern derived from it, so a notification that overtook its data
//! shows as the previous message's bytes (or a mix), and a lost, duplicated or reordered
//! message shows as an unexpected sequence number. First 64 KiB blocks, then small messages
//! (8..256 B), where such a race would be the most visible.

use gaspi::{local, remote, Context, Error, Notification, QueueId, Rank, SegmentId, Timeout};

use crate::check::{
    compare, ensure, fill_pattern, human, seed, Data, Doing, Failure, Outcome, Report,
};
use crate::options::Options;

const SEG: SegmentId = 0;
/// Slots in the ring; the writer has this many messages in flight at most.
const SLOTS: u32 = 8;
const SLOT_LEN: u64 = 64 << 10;
/// Notification ids of the acknowledgements (in the writer's segment), after the data ids.
const ACK_BASE: u32 = SLOTS;
const QUEUE: QueueId = 0;
/// Bound of every single wait; a healthy stream never waits more than milliseconds.
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// Bytes at the start of every message holding its sequence number.
const HEADER: usize = 8;

/// The shape of the stream, known to both ends.
#[derive(Debug, Clone, Copy)]
struct Stream {
    writer: Rank,
    blocks: u64,
    total: u64,
}

impl Stream {
    /// Length of message `seq`: full blocks first, then small sizes sweeping 8..=256 B.
    fn len(self, seq: u64) -> usize {
        if seq < self.blocks {
            SLOT_LEN as usize
        } else {
            8 + (seq * 37 % 249) as usize
        }
    }

    fn slot(seq: u64) -> u32 {
        (seq % u64::from(SLOTS)) as u32
    }

    /// Message `seq` as the writer sends it.
    fn fill(self, seq: u64, buf: &mut [u8]) {
        buf[..HEADER].copy_from_slice(&seq.to_le_bytes());
        fill_pattern(seed(&[u64::from(self.writer), seq]), &mut buf[HEADER..]);
    }
}

/// The notification value of message `seq` (never 0).
fn value(seq: u64) -> Outcome<u32> {
    u32::try_from(seq + 1)
        .map_err(|_| Failure(format!("message {seq} exceeds the u32 value space")))
}

pub fn run(ctx: &Context, opts: &Options) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    ctx.segment_create(SEG, u64::from(SLOTS) * SLOT_LEN, TIMEOUT)
        .doing(|| "creating the ring segment")?;
    let stream = |writer| Stream {
        writer,
        blocks: opts.blocks,
        total: opts.blocks + opts.small,
    };
    value(stream(me).total)?;
    if me % 2 == 0 && me + 1 < n {
        write(ctx, stream(me), me + 1).map(Report::from)
    } else if me % 2 == 1 {
        receive(ctx, stream(me - 1))
    } else {
        Ok(Report::from(
            "no partner (last rank of an odd-sized job), idle".to_owned(),
        ))
    }
}

/// The writer: keeps every free slot busy, reuses a slot only after its acknowledgement.
fn write(ctx: &Context, stream: Stream, peer: Rank) -> Outcome<String> {
    let mut buf = vec![0u8; SLOT_LEN as usize];
    let mut in_slot: [Option<u64>; SLOTS as usize] = [None; SLOTS as usize];
    let (mut next, mut acked) = (0u64, 0u64);
    while acked < stream.total {
        let mut posted = false;
        while next < stream.total && in_slot[Stream::slot(next) as usize].is_none() {
            let slot = Stream::slot(next);
            let len = stream.len(next);
            let offset = u64::from(slot) * SLOT_LEN;
            stream.fill(next, &mut buf[..len]);
            ctx.segment_write(SEG, offset, &buf[..len])
                .doing(|| format!("filling slot {slot} with message {next}"))?;
            let note = Notification {
                id: slot,
                value: value(next)?,
            };
            ctx.write_notify(
                local(SEG, offset),
                remote(peer, SEG, offset),
                len as u64,
                note,
                QUEUE,
            )
            .doing(|| format!("sending message {next}"))?;
            in_slot[slot as usize] = Some(next);
            next += 1;
            posted = true;
        }
        if posted {
            // A source slot is refilled only once its write has completed locally.
            ctx.wait(QUEUE, TIMEOUT)
                .doing(|| format!("waiting for the writes up to message {next}"))?;
        }
        ctx.notify_waitsome(SEG, ACK_BASE, SLOTS, TIMEOUT)
            .doing(|| {
                format!(
                    "waiting for acknowledgements ({acked} of {} so far)",
                    stream.total
                )
            })?;
        // Take every acknowledgement that is there, not only the first one.
        for slot in 0..SLOTS {
            let got = ctx
                .notify_reset(SEG, ACK_BASE + slot)
                .doing(|| format!("resetting the acknowledgement of slot {slot}"))?;
            if got == 0 {
                continue;
            }
            let expected = in_slot[slot as usize].take();
            ensure!(
                expected.map(|seq| u64::from(got) == seq + 1) == Some(true),
                "slot {slot}: acknowledgement value {got}, but the slot holds {expected:?}"
            );
            acked += 1;
        }
    }
    Ok(format!(
        "streamed {} write_notify ({} x 64 KiB + {} x 8..256 B) to rank {peer} through {SLOTS} \
         slots, every acknowledgement matched its message",
        stream.total,
        stream.blocks,
        stream.total - stream.blocks
    ))
}

/// The receiver: checks each slot when its notification appears, then hands it back.
fn receive(ctx: &Context, stream: Stream) -> Outcome<Report> {
    let segment = ctx.segment(SEG).doing(|| "getting the segment")?;
    let memory = segment
        .memory()
        .ok_or_else(|| Failure("segment 0 has no memory".into()))?;
    let mut want = vec![0u8; SLOT_LEN as usize];
    let mut next_in_slot: Vec<u64> = (0..u64::from(SLOTS)).collect();
    let mut bytes = 0u64;
    for received in 0..stream.total {
        let slot = ctx
            .notify_waitsome(SEG, 0, SLOTS, TIMEOUT)
            .doing(|| format!("waiting for message {received} of {}", stream.total))?;
        let got = ctx
            .notify_reset(SEG, slot)
            .doing(|| format!("resetting notification {slot}"))?;
        let seq = next_in_slot[slot as usize];
        ensure!(
            u64::from(got) == seq + 1,
            "slot {slot}: notification value {got}, expected {} (message {seq}): a message was \
             lost, duplicated or reordered",
            seq + 1
        );
        let len = stream.len(seq);
        let offset = u64::from(slot) * SLOT_LEN;
        stream.fill(seq, &mut want[..len]);
        // SAFETY: the writer does not touch this slot again before our acknowledgement, which
        // is sent only after the borrow ends; no local code writes the segment.
        let data = unsafe { memory.slice(offset, len as u64) }
            .map_err(|e| Failure(format!("borrowing slot {slot}: {e}")))?;
        compare(
            format_args!(
                "message {seq} ({len} B) in slot {slot}, checked as its notification appeared"
            ),
            data,
            &want[..len],
        )?;
        bytes += len as u64;
        ctx.notify(
            stream.writer,
            SEG,
            Notification {
                id: ACK_BASE + slot,
                value: got,
            },
            QUEUE,
        )
        .doing(|| format!("acknowledging message {seq}"))?;
        next_in_slot[slot as usize] += u64::from(SLOTS);
    }
    ctx.wait(QUEUE, TIMEOUT)
        .doing(|| "waiting for the acknowledgements to leave")?;
    match ctx.notify_waitsome(SEG, 0, SLOTS, Timeout::Test) {
        Err(Error::Timeout) => {}
        other => {
            return Err(Failure(format!(
                "after the last message a data notification is still set: {other:?}"
            )))
        }
    }
    let mut data = Data::default();
    data.put("messages", stream.total);
    data.put("verified_bytes", bytes);
    Ok(Report {
        summary: format!(
            "{} notifications from rank {} each checked the moment it appeared: {} x 64 KiB + \
             {} x 8..256 B, {} verified, no loss, duplicate or reordering",
            stream.total,
            stream.writer,
            stream.blocks,
            stream.total - stream.blocks,
            human(bytes)
        ),
        data,
    })
}
