//! Communication queues: bounded counters of posted, not yet locally completed operations.
//!
//! A queue is bookkeeping, not a provider object: every operation is posted on the one endpoint
//! with a context naming its queue, and the progress engine decrements that queue when the
//! completion arrives. This keeps the provider's resources independent of the queue count and
//! lets [`Context::wait`](crate::Context::wait) finish one queue while others stay busy. A full
//! queue is reported as [`Error::QueueFull`] at post time; nothing blocks silently.
//!
//! Each queue also counts its operations per target rank, so that a wait knows which ranks it
//! depends on, and so that the operations towards a rank that died can be dropped from the
//! queue: on shm they would never complete (see `health`). Every count goes down exactly once
//! per operation, whether it completes or is dropped, so a late completion of a dropped
//! operation is not counted twice.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::config::MAX_QUEUES;
use crate::error::{Error, QueueId, Rank, Result};
use crate::wire::WireNotification;

/// One queue's state.
pub(crate) struct Queue {
    active: AtomicBool,
    outstanding: AtomicU32,
    failure: Mutex<Option<(Rank, String)>>,
    /// Notifications waiting for the queue to drain (providers without write ordering only).
    outbox: Mutex<Vec<(Rank, WireNotification)>>,
    outbox_len: AtomicU32,
    /// Operations not yet completed, per target rank; allocated at the first post.
    per_rank: OnceLock<Box<[AtomicU32]>>,
    ranks: u32,
}

/// All queues of a context; ids are indices, created and deleted at run time.
pub(crate) struct Queues {
    queues: Vec<Queue>,
    depth: u32,
    // Serialises create/delete so two creators cannot pick the same id.
    admin: Mutex<()>,
}

impl Queues {
    /// `initial` queues of `depth` operations each, for a job of `ranks` ranks.
    pub(crate) fn new(initial: u8, depth: u32, ranks: u32) -> Self {
        let queues = (0..MAX_QUEUES)
            .map(|i| Queue {
                active: AtomicBool::new(i < initial),
                outstanding: AtomicU32::new(0),
                failure: Mutex::new(None),
                outbox: Mutex::new(Vec::new()),
                outbox_len: AtomicU32::new(0),
                per_rank: OnceLock::new(),
                ranks,
            })
            .collect();
        Queues {
            queues,
            depth,
            admin: Mutex::new(()),
        }
    }

    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    fn active_count(&self) -> u32 {
        self.queues
            .iter()
            .filter(|q| q.active.load(Ordering::Acquire))
            .count() as u32
    }

    pub(crate) fn get(&self, id: QueueId) -> Result<&Queue> {
        match self.queues.get(usize::from(id)) {
            Some(q) if q.active.load(Ordering::Acquire) => Ok(q),
            _ => Err(Error::InvalidQueue {
                queue: id,
                count: self.active_count(),
            }),
        }
    }

    /// Completion path: the queue id comes from a context we encoded, so it is in range.
    pub(crate) fn by_index(&self, id: QueueId) -> Option<&Queue> {
        self.queues.get(usize::from(id))
    }

    /// Reserves `n` slots on queue `id` for operations about to be posted to `rank` (valid).
    pub(crate) fn reserve(&self, id: QueueId, n: u32, rank: Rank) -> Result<&Queue> {
        let q = self.get(id)?;
        let depth = self.depth;
        q.outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                cur.checked_add(n).filter(|&next| next <= depth)
            })
            .map_err(|_| Error::QueueFull { queue: id, depth })?;
        if let Some(count) = q.counts().get(rank as usize) {
            count.fetch_add(n, Ordering::AcqRel);
        }
        Ok(q)
    }

    pub(crate) fn create(&self) -> Result<QueueId> {
        let _guard = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let (id, q) = self
            .queues
            .iter()
            .enumerate()
            .find(|(_, q)| !q.active.load(Ordering::Acquire))
            .ok_or_else(|| Error::Limit(format!("all {MAX_QUEUES} queues exist")))?;
        q.outstanding.store(0, Ordering::Relaxed);
        q.take_failure();
        q.outbox.lock().unwrap_or_else(|e| e.into_inner()).clear();
        q.outbox_len.store(0, Ordering::Release);
        q.active.store(true, Ordering::Release);
        Ok(id as QueueId)
    }

    pub(crate) fn delete(&self, id: QueueId) -> Result<()> {
        let _guard = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let q = self.get(id)?;
        let outstanding = q.outstanding() + q.outbox_len.load(Ordering::Acquire);
        if outstanding > 0 {
            return Err(Error::QueueBusy {
                queue: id,
                outstanding,
            });
        }
        q.active.store(false, Ordering::Release);
        Ok(())
    }

    /// Whether any queue has operations posted and not completed.
    pub(crate) fn any_outstanding(&self) -> bool {
        self.queues.iter().any(|q| q.outstanding() > 0)
    }

    pub(crate) fn count(&self) -> u32 {
        self.active_count()
    }
}

impl Queue {
    pub(crate) fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Acquire)
    }

    fn counts(&self) -> &[AtomicU32] {
        self.per_rank
            .get_or_init(|| (0..self.ranks).map(|_| AtomicU32::new(0)).collect())
    }

    /// Gives back up to `n` slots of operations towards `rank` (completed, never posted, or
    /// dropped); returns how many were still counted.
    fn take(&self, rank: Rank, n: u32) -> u32 {
        let Some(count) = self.counts().get(rank as usize) else {
            return 0;
        };
        let before = count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_sub(n))
            })
            .unwrap_or_else(|c| c);
        let taken = before.min(n);
        self.outstanding.fetch_sub(taken, Ordering::AcqRel);
        taken
    }

    /// Gives back `n` reserved slots towards `rank` (operations never posted).
    pub(crate) fn release(&self, rank: Rank, n: u32) {
        self.take(rank, n);
    }

    /// One operation towards `rank` completed (unless it was dropped before).
    pub(crate) fn completed(&self, rank: Rank) {
        self.take(rank, 1);
    }

    /// Drops every operation towards `rank` from the queue; returns how many there were.
    pub(crate) fn drop_rank(&self, rank: Rank) -> u32 {
        self.take(rank, u32::MAX)
    }

    /// The ranks this queue has operations towards.
    pub(crate) fn targets(&self) -> impl Iterator<Item = Rank> + '_ {
        let counts = self.per_rank.get().map_or(&[][..], |c| &c[..]);
        counts
            .iter()
            .enumerate()
            .filter(|(_, c)| c.load(Ordering::Acquire) > 0)
            .map(|(r, _)| r as Rank)
    }

    /// Records that an operation of this queue towards `rank` failed; the next
    /// [`Context::wait`](crate::Context::wait) reports it.
    pub(crate) fn fail(&self, rank: Rank, reason: String) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.get_or_insert((rank, reason));
    }

    /// Everything posted has completed and no deferred notification is waiting.
    pub(crate) fn is_drained(&self) -> bool {
        self.outstanding() == 0 && self.outbox_len.load(Ordering::Acquire) == 0
    }

    /// Returns true when a notification may be sent right away (nothing posted before it is
    /// still in flight); otherwise parks it until the queue drains.
    pub(crate) fn defer_notification(&self, rank: Rank, wire: WireNotification) -> bool {
        let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        // Checked under the outbox lock, which the draining side also takes, so a notification
        // cannot be parked just after the last flush and then be forgotten.
        if self.outstanding() == 0 && outbox.is_empty() {
            return true;
        }
        outbox.push((rank, wire));
        self.outbox_len.fetch_add(1, Ordering::AcqRel);
        false
    }

    /// Sends parked notifications with `send` once the queue has drained; stops at the first
    /// one `send` cannot post yet (it stays parked, order preserved).
    pub(crate) fn flush_outbox(&self, mut send: impl FnMut(Rank, WireNotification) -> bool) {
        if self.outbox_len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        if self.outstanding() != 0 {
            return;
        }
        let sent = outbox
            .iter()
            .take_while(|&&(rank, wire)| send(rank, wire))
            .count();
        outbox.drain(..sent);
        self.outbox_len.fetch_sub(sent as u32, Ordering::AcqRel);
    }

    pub(crate) fn take_failure(&self) -> Option<(Rank, String)> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_is_an_error_and_release_frees_it() {
        let qs = Queues::new(2, 3, 4);
        qs.reserve(0, 2, 1).expect("room for two");
        assert!(matches!(
            qs.reserve(0, 2, 1),
            Err(Error::QueueFull { queue: 0, depth: 3 })
        ));
        qs.reserve(0, 1, 1).expect("room for the third");
        qs.get(0).expect("queue 0").release(1, 3);
        assert_eq!(qs.get(0).expect("queue 0").outstanding(), 0);
    }

    #[test]
    fn operations_of_a_dropped_rank_are_counted_once() {
        let qs = Queues::new(1, 8, 3);
        let q = qs.reserve(0, 2, 1).expect("reserve");
        qs.reserve(0, 3, 2).expect("reserve");
        assert_eq!(q.targets().collect::<Vec<_>>(), vec![1, 2]);
        q.completed(2);
        assert_eq!(q.drop_rank(2), 2);
        assert_eq!(q.outstanding(), 2);
        // A late completion of a dropped operation changes nothing.
        q.completed(2);
        assert_eq!(q.outstanding(), 2);
        assert_eq!(q.targets().collect::<Vec<_>>(), vec![1]);
        q.completed(1);
        q.completed(1);
        assert!(q.is_drained());
    }

    #[test]
    fn create_and_delete_manage_ids() {
        let qs = Queues::new(1, 4, 2);
        assert!(matches!(
            qs.get(1),
            Err(Error::InvalidQueue { queue: 1, count: 1 })
        ));
        assert_eq!(qs.create().expect("create"), 1);
        qs.reserve(1, 1, 0).expect("reserve");
        assert!(matches!(
            qs.delete(1),
            Err(Error::QueueBusy { queue: 1, .. })
        ));
        qs.get(1).expect("queue 1").release(0, 1);
        qs.delete(1).expect("delete idle queue");
        assert!(qs.get(1).is_err());
    }
}
