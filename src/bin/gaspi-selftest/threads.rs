//! `threads`: many threads of a rank share one notification range, and every notification is
//! consumed exactly once.
//!
//! Each rank runs [`CONSUMERS`] threads that all wait on and reset the same range of ids, while
//! its main thread sends notifications to every rank (itself included). Sender `s` owns a window
//! of [`WINDOW`] ids at every target and reuses an id only after the consumer that took it has
//! acknowledged (so no notification is ever overwritten before it is consumed). Message `seq` of
//! sender `s` carries the value `s * messages + seq + 1`, so the values a rank receives must be
//! exactly `1..=size * messages`: any loss or duplicate shows up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gaspi::{Context, Error, Notification, NotificationId, QueueId, Rank, SegmentId, Timeout};

use crate::check::{ensure, Crew, Doing, Failure, Outcome};
use crate::options::Options;

const SEG: SegmentId = 0;
const CONSUMERS: usize = 4;
/// Notification ids each sender owns at each target.
const WINDOW: u32 = 16;
/// Short waits, so that threads notice when the work is done or another thread failed.
const POLL: Timeout = Timeout::Millis(20);
/// Bound of the whole exchange; it takes well under a second when healthy.
const DEADLINE: Duration = Duration::from_secs(60);
const TIMEOUT: Timeout = Timeout::Millis(60_000);
const SEND_QUEUE: QueueId = 0;

/// What every thread of the rank needs to know.
struct Shared {
    me: Rank,
    size: u32,
    messages: u32,
    /// Notifications consumed by all consumer threads together.
    consumed: AtomicU64,
    crew: Crew,
}

impl Shared {
    fn data_ids(&self) -> u32 {
        self.size * WINDOW
    }

    /// Acknowledgements live after the data ids: target `t` acknowledges into
    /// `ack_base + t * WINDOW + slot` of the sender.
    fn ack_base(&self) -> u32 {
        self.data_ids()
    }

    fn expected(&self) -> u64 {
        u64::from(self.size) * u64::from(self.messages)
    }

    fn should_stop(&self, what: &str) -> Outcome<bool> {
        self.crew.should_stop(|| {
            format!(
                "{what} ({} of {} consumed)",
                self.consumed.load(Ordering::Acquire),
                self.expected()
            )
        })
    }
}

/// What one consumer thread took.
struct Consumed {
    values: Vec<u32>,
    /// Times another thread reset an id first (`notify_reset` returned 0).
    lost_races: u64,
}

pub fn run(ctx: &Context, opts: &Options) -> Outcome<String> {
    let shared = Shared {
        me: ctx.rank(),
        size: ctx.size(),
        messages: opts.messages,
        consumed: AtomicU64::new(0),
        crew: Crew::new(DEADLINE),
    };
    ensure!(
        shared.expected() < u64::from(u32::MAX),
        "{} ranks x {} messages exceed the u32 value space",
        shared.size,
        shared.messages
    );
    ensure!(
        2 * shared.data_ids() <= ctx.config().notifications,
        "{} ranks need {} notification ids, the segment has {}",
        shared.size,
        2 * shared.data_ids(),
        ctx.config().notifications
    );
    ctx.segment_create(SEG, 64, TIMEOUT)
        .doing(|| "creating the segment")?;
    let (sent, consumers) = std::thread::scope(|s| {
        let shared = &shared;
        let handles: Vec<_> = (0..CONSUMERS)
            .map(|thread| s.spawn(move || shared.crew.guarded(|| consume(ctx, shared, thread))))
            .collect();
        let sent = shared.crew.guarded(|| send(ctx, shared));
        let consumers: Vec<Outcome<Consumed>> = handles
            .into_iter()
            .map(|h| Crew::join(h, "a consumer thread"))
            .collect();
        (sent, consumers)
    });
    sent?;
    let consumers = consumers.into_iter().collect::<Outcome<Vec<Consumed>>>()?;
    let mut values: Vec<u32> = consumers
        .iter()
        .flat_map(|c| c.values.iter().copied())
        .collect();
    check_exactly_once(&mut values, shared.expected())?;
    // Every sender has all its acknowledgements; nothing may be left over after that.
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the exchange")?;
    match ctx.notify_waitsome(SEG, 0, shared.data_ids(), Timeout::Test) {
        Err(Error::Timeout) => {}
        other => {
            return Err(Failure(format!(
                "a notification is still set after all were consumed: {other:?}"
            )))
        }
    }
    let per_thread: Vec<String> = consumers
        .iter()
        .map(|c| c.values.len().to_string())
        .collect();
    Ok(format!(
        "{CONSUMERS} threads consumed {} notifications from {} ranks ({} each), every value \
         exactly once (per thread: {}; {} resets lost to another thread)",
        values.len(),
        shared.size,
        shared.messages,
        per_thread.join("/"),
        consumers.iter().map(|c| c.lost_races).sum::<u64>()
    ))
}

/// The values taken must be exactly `1..=expected`.
fn check_exactly_once(values: &mut [u32], expected: u64) -> Outcome {
    values.sort_unstable();
    let duplicates = values.windows(2).filter(|w| w[0] == w[1]).count();
    let missing = (1..=expected)
        .filter(|v| values.binary_search(&(*v as u32)).is_err())
        .count();
    let foreign = values
        .iter()
        .filter(|&&v| v == 0 || u64::from(v) > expected)
        .count();
    ensure!(
        duplicates == 0 && missing == 0 && foreign == 0 && values.len() as u64 == expected,
        "consumed {} values, expected {expected}: {duplicates} duplicates, {missing} missing, \
         {foreign} never sent",
        values.len()
    );
    Ok(())
}

/// A consumer thread: takes whatever id of the shared range is set and acknowledges it.
fn consume(ctx: &Context, shared: &Shared, thread: usize) -> Outcome<Consumed> {
    // Each thread acknowledges on its own queue where there are enough, to post concurrently.
    let queue = ((thread + 1) % ctx.queue_num() as usize) as QueueId;
    let mut taken = Consumed {
        values: Vec::new(),
        lost_races: 0,
    };
    while shared.consumed.load(Ordering::Acquire) < shared.expected() {
        if shared.should_stop(&format!("consumer {thread}"))? {
            break;
        }
        let id = match ctx.notify_waitsome(SEG, 0, shared.data_ids(), POLL) {
            Ok(id) => id,
            Err(Error::Timeout) => continue,
            Err(e) => return Err(Failure(format!("consumer {thread}: waiting: {e}"))),
        };
        let value = ctx
            .notify_reset(SEG, id)
            .doing(|| format!("consumer {thread}: resetting {id}"))?;
        if value == 0 {
            taken.lost_races += 1;
            continue;
        }
        let sender = id / WINDOW;
        ensure!(
            (value - 1) / shared.messages == sender,
            "consumer {thread}: id {id} belongs to rank {sender}, but its value {value} was sent \
             by rank {}",
            (value - 1) / shared.messages
        );
        taken.values.push(value);
        shared.consumed.fetch_add(1, Ordering::AcqRel);
        let ack = Notification {
            id: shared.ack_base() + shared.me * WINDOW + id % WINDOW,
            value,
        };
        ctx.notify(sender, SEG, ack, queue)
            .doing(|| format!("consumer {thread}: acknowledging {value} to rank {sender}"))?;
    }
    Ok(taken)
}

/// The sender: keeps every free id of its window at every target busy until all messages are
/// acknowledged, and checks each acknowledgement against what the id carried.
fn send(ctx: &Context, shared: &Shared) -> Outcome<()> {
    let (me, n, m) = (shared.me, shared.size, shared.messages);
    let mut next = vec![0u32; n as usize];
    let mut in_flight = vec![[None::<u32>; WINDOW as usize]; n as usize];
    let mut acked = 0u64;
    while acked < shared.expected() {
        if shared.should_stop("sender")? {
            return Ok(());
        }
        for target in 0..n {
            let t = target as usize;
            for slot in 0..WINDOW {
                if next[t] == m || in_flight[t][slot as usize].is_some() {
                    continue;
                }
                let value = me * m + next[t] + 1;
                let id: NotificationId = me * WINDOW + slot;
                ctx.notify(target, SEG, Notification { id, value }, SEND_QUEUE)
                    .doing(|| format!("sender: notifying rank {target}"))?;
                in_flight[t][slot as usize] = Some(value);
                next[t] += 1;
            }
        }
        match ctx.notify_waitsome(SEG, shared.ack_base(), shared.data_ids(), POLL) {
            Ok(_) | Err(Error::Timeout) => {}
            Err(e) => {
                return Err(Failure(format!(
                    "sender: waiting for acknowledgements: {e}"
                )))
            }
        }
        for id in shared.ack_base()..shared.ack_base() + shared.data_ids() {
            let value = ctx
                .notify_reset(SEG, id)
                .doing(|| format!("sender: resetting acknowledgement {id}"))?;
            if value == 0 {
                continue;
            }
            let (t, slot) = (
                ((id - shared.ack_base()) / WINDOW) as usize,
                ((id - shared.ack_base()) % WINDOW) as usize,
            );
            let sent = in_flight[t][slot].take();
            ensure!(
                sent == Some(value),
                "sender: rank {t} acknowledged {value} in slot {slot}, which holds {sent:?}"
            );
            acked += 1;
        }
    }
    ctx.wait(SEND_QUEUE, TIMEOUT).doing(|| "sender: final wait")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_once_catches_loss_duplicates_and_strays() {
        assert!(check_exactly_once(&mut [3, 1, 2], 3).is_ok());
        assert!(check_exactly_once(&mut [1, 2], 3).is_err());
        assert!(check_exactly_once(&mut [1, 2, 2], 3).is_err());
        assert!(check_exactly_once(&mut [1, 2, 4], 3).is_err());
        assert!(check_exactly_once(&mut [0, 1, 2, 3], 3).is_err());
    }
}
