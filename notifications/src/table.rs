//! Owns [`NotificationTable`]: the per-segment array of notification slots, how they are set,
//! consumed and scanned, and how a scan keeps the chunk summary honest.

use std::sync::Arc;

use gaspi_segments::SharedWords;

use crate::summary::{chunk_of, chunk_start, Summary, CHUNK_LEN};
use crate::sync::{fence, AtomicBool, AtomicU32, Ordering};
use crate::words::Storage;
use crate::{wait_until, Deadline, Error, EventCount, Progress, Result};

/// Ranges of at most this many slots are scanned slot by slot, without the summary. Such a
/// scan reads at most a few cache lines, and a waiter polling them reads only the lines its
/// setter writes: through the summary it would also read (and unmark) the summary's line,
/// which every setter of the table writes, one more line moving between cores per
/// notification. Under loom only single slots go directly, so the models of wider ranges
/// still exercise the summary.
const DIRECT_SCAN_MAX: u32 = if cfg!(loom) { 1 } else { CHUNK_LEN };

/// The notification slots of one segment.
///
/// Slot `id` holds `0` while unset and the value of the last [`set`](Self::set) otherwise.
///
/// # Memory ordering
///
/// The runtime calls [`set`](Self::set) only after the payload of the write that carries the
/// notification has been placed in the segment. `set` stores the value with `Release`, and every
/// read that can observe it ([`get`](Self::get), [`first_set`](Self::first_set),
/// [`wait_some`](Self::wait_some), [`reset`](Self::reset)) uses `Acquire`, so a thread that sees
/// a non-zero value also sees the payload.
///
/// # Concurrency
///
/// Any number of threads may set, reset and wait at once, on disjoint or overlapping ranges.
/// [`reset`](Self::reset) is a single atomic swap, so of several threads resetting the same
/// slot exactly one receives the value.
///
/// A table placed in shared memory ([`in_words`](Self::in_words)) extends all of this to every
/// process of the host that builds a table over the same words: a `set` in one process is seen,
/// with its payload, by a waiter in another, and wakes it.
#[derive(Debug)]
pub struct NotificationTable {
    /// The `len` slots, then the chunk summary.
    words: Storage,
    len: u32,
    event: Arc<EventCount>,
    /// Set by [`close`](Self::close): waits end instead of waiting for what cannot come.
    closed: AtomicBool,
}

impl NotificationTable {
    /// Creates a table of `len` unset notifications.
    #[must_use]
    pub fn new(len: u32) -> Self {
        Self::with_event(len, Arc::new(EventCount::new()))
    }

    /// Creates a table of `len` unset notifications that notifies `event` on every set, so
    /// that one waiter can watch several tables sharing it (see [`event`](Self::event)).
    #[must_use]
    pub fn with_event(len: u32, event: Arc<EventCount>) -> Self {
        Self {
            words: Storage::owned(Self::words_for(len)),
            len,
            event,
            closed: AtomicBool::new(false),
        }
    }

    /// Words a table of `len` notifications occupies in shared memory (see
    /// [`in_words`](Self::in_words)).
    #[must_use]
    pub fn words_for(len: u32) -> usize {
        len as usize + Summary::words_for(len)
    }

    /// Places a table of `len` notifications at the start of `words`, memory that other
    /// processes of the host may map, notifying `event` (typically placed in shared memory
    /// too) on every set. Every process builds its own table over the same words; they are
    /// one table. Returns `None` when `words` holds fewer than [`words_for(len)`](Self::words_for)
    /// words.
    ///
    /// The words must be zero when the first table over them is built, and hold nothing else.
    #[must_use]
    pub fn in_words(len: u32, words: Arc<SharedWords>, event: Arc<EventCount>) -> Option<Self> {
        let words = Storage::shared(words, 0, Self::words_for(len))?;
        Some(Self {
            words,
            len,
            event,
            closed: AtomicBool::new(false),
        })
    }

    /// The event count every [`set`](Self::set) notifies: wait on it (with
    /// [`wait_until`]) for conditions over several tables that share it.
    #[must_use]
    pub fn event(&self) -> &Arc<EventCount> {
        &self.event
    }

    /// Closes the table, for its segment is gone: every wait on it that found nothing set
    /// ends with [`Error::Closed`] (woken if asleep), as does every later one. Setting and
    /// consuming still work on what the table holds.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.event.notify_all();
    }

    /// Whether the table was [closed](Self::close).
    // Inline: a wait that finds its range unset asks on every round, from the runtime's crate,
    // where a call cost as much as the load.
    #[inline]
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Number of notifications in the table.
    #[must_use]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the table has no notifications at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets notification `id` to `value` and wakes its waiters.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `id >= len()`, [`Error::ZeroValue`] if `value == 0`.
    #[inline(always)]
    pub fn set(&self, id: u32, value: u32) -> Result<()> {
        let (slots, summary) = self.parts();
        let slot = self.slot_in(slots, id)?;
        if value == 0 {
            return Err(Error::ZeroValue { id });
        }
        slot.store(value, Ordering::Release);
        // The fence orders the store before the looks at the summary and at the sleepers, as
        // the fence of `notify_all` did. A chunk already marked (every set of a slot set
        // before: only a scan that found its chunk empty unmarks it) is then left alone,
        // without the locked instruction a mark costs. By the rule for SeqCst fences (a
        // write before one fence is seen by a read after another that follows it in their
        // single order S):
        // * A sleeper counts itself, issues a fence and looks at the slot, or the summary. If
        //   its fence follows this one in S, its look sees this store; else the look at the
        //   sleepers below sees it counted, and wakes it.
        // * A scan that unmarks the chunk meanwhile issues a fence after its unmark and looks
        //   at the slots again (`unmark_stale`). If its fence follows this one in S, that
        //   look sees this store and re-marks the chunk; else the look at the summary below
        //   sees the unmark and marks the chunk here.
        // * A mark made here is followed by a fence of its own before the look at the
        //   sleepers, so a sleeper that looks at the summary sees the mark or is woken.
        fence(Ordering::SeqCst);
        if summary.mark_if_clear(chunk_of(id)) {
            fence(Ordering::SeqCst);
        }
        self.event.notify_all_fenced();
        Ok(())
    }

    /// Consumes notification `id`: sets it to `0` and returns its previous value (`0` if it was
    /// not set, or if another thread consumed it first).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `id >= len()`.
    pub fn reset(&self, id: u32) -> Result<u32> {
        // One swap rather than a load and a compare-exchange, so two consumers can never both
        // take the same value. Release hands the consumer's accesses to the payload to whoever
        // later sees the slot cleared (and may reuse it).
        Ok(self.slot(id)?.swap(0, Ordering::AcqRel))
    }

    /// Consumes notification `id` like [`reset`](Self::reset), with a load and a store
    /// instead of a swap (a locked instruction less, on the path of every barrier round).
    ///
    /// Only for an id that one thread alone consumes, and that its writer sets again only
    /// after it learned that the value was taken (a dissemination round's slot, written once
    /// per use of its bank): another consumer could take the same value, and a writer setting
    /// it between the load and the store would be overwritten. The store is a release, as
    /// `reset`'s swap is.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `id >= len()`.
    pub fn take_exclusive(&self, id: u32) -> Result<u32> {
        let slot = self.slot(id)?;
        let value = slot.load(Ordering::Acquire);
        if value != 0 {
            slot.store(0, Ordering::Release);
        }
        Ok(value)
    }

    /// The current value of notification `id`, without consuming it.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] if `id >= len()`.
    pub fn get(&self, id: u32) -> Result<u32> {
        Ok(self.slot(id)?.load(Ordering::Acquire))
    }

    /// The lowest id in `begin..begin + num` whose notification is set, if any, without
    /// consuming it or waiting.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyRange`] if `num == 0`, [`Error::OutOfRange`] (carrying `begin + num`) if
    /// the range extends beyond the table.
    pub fn first_set(&self, begin: u32, num: u32) -> Result<Option<u32>> {
        // One slot (a wait for one notification, every ping-pong's) is one load: through
        // `range` it also found the summary and checked a slice, some 40 instructions.
        if num == 1 {
            return match self.slot(begin) {
                Ok(slot) => Ok((slot.load(Ordering::Acquire) != 0).then_some(begin)),
                Err(_) => Err(Error::OutOfRange {
                    id: u64::from(begin) + 1,
                    len: self.len,
                }),
            };
        }
        Ok(self.range(begin, num)?.first_set())
    }

    /// The range `begin..begin + num`, validated once, for a caller that looks at it again
    /// and again (a wait over several tables polling each): its looks skip the validation and
    /// find the table's words once.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyRange`] and [`Error::OutOfRange`] as for [`first_set`](Self::first_set).
    pub fn range(&self, begin: u32, num: u32) -> Result<TableRange<'_>> {
        let end = self.range_end(begin, num)?;
        let (slots, summary) = self.parts();
        Ok(TableRange {
            table: self,
            slots,
            summary,
            begin,
            end,
        })
    }

    /// Waits until some notification in `begin..begin + num` is set and returns its id (the
    /// lowest set one when several are), without consuming it.
    ///
    /// `progress` is the runtime's non-blocking progress step (reading the completion queue);
    /// it returns whether it did anything. See [`wait_until`] for how waiting spins, sleeps
    /// and drives progress, and [`Timeout`](crate::Timeout) for the meaning of `timeout` (or
    /// pass a [`Deadline`], or a [`Slice`](crate::Slice) of one, which is resolved only if the
    /// range has nothing set at the first look).
    ///
    /// # Errors
    ///
    /// [`Error::EmptyRange`] and [`Error::OutOfRange`] as for [`first_set`](Self::first_set),
    /// before any waiting; [`Error::Timeout`] if nothing in the range was set in time;
    /// [`Error::Closed`] if nothing was set when the table was [closed](Self::close).
    pub fn wait_some(
        &self,
        begin: u32,
        num: u32,
        timeout: impl Into<Deadline>,
        progress: impl Progress,
    ) -> Result<u32> {
        let range = self.range(begin, num)?;
        let poll = || match range.first_set() {
            Some(id) => Some(Ok(id)),
            None => self.is_closed().then_some(Err(Error::Closed)),
        };
        wait_until(&self.event, timeout, poll, progress)?
    }

    /// Slot `id`, found without the summary (the slots are the first `len` words).
    #[inline]
    fn slot(&self, id: u32) -> Result<&AtomicU32> {
        match self.words.get().get(id as usize) {
            Some(slot) if id < self.len => Ok(slot),
            _ => Err(self.out_of_range(id)),
        }
    }

    /// Slot `id` of `slots` (this table's, from [`parts`](Self::parts)).
    #[inline(always)]
    fn slot_in<'a>(&self, slots: &'a [AtomicU32], id: u32) -> Result<&'a AtomicU32> {
        slots.get(id as usize).ok_or_else(|| self.out_of_range(id))
    }

    #[cold]
    fn out_of_range(&self, id: u32) -> Error {
        Error::OutOfRange {
            id: id.into(),
            len: self.len,
        }
    }

    /// The slots and the summary, found with one look at the words (which may be another
    /// process's memory, in [`SharedWords`]).
    #[inline(always)]
    fn parts(&self) -> (&[AtomicU32], Summary<'_>) {
        let (slots, summary) = self.words.get().split_at(self.len as usize);
        (slots, Summary::over(summary))
    }

    /// Validates `begin..begin + num` and returns its exclusive end.
    fn range_end(&self, begin: u32, num: u32) -> Result<u32> {
        if num == 0 {
            return Err(Error::EmptyRange {
                begin,
                len: self.len,
            });
        }
        let end = u64::from(begin) + u64::from(num);
        match u32::try_from(end) {
            Ok(end) if end <= self.len => Ok(end),
            _ => Err(Error::OutOfRange {
                id: end,
                len: self.len,
            }),
        }
    }
}

/// A validated range of a [`NotificationTable`], from [`NotificationTable::range`].
#[derive(Debug, Clone, Copy)]
pub struct TableRange<'a> {
    table: &'a NotificationTable,
    slots: &'a [AtomicU32],
    summary: Summary<'a>,
    begin: u32,
    end: u32,
}

impl TableRange<'_> {
    /// The lowest id of the range whose notification is set, if any, without consuming it
    /// (as [`NotificationTable::first_set`]): directly for a short range, else visiting only
    /// chunks whose summary bit is set.
    #[inline]
    pub fn first_set(&self) -> Option<u32> {
        // Inline, the look at a short range is a handful of instructions in a waiter's loop;
        // called, it cost as many again.
        if self.end - self.begin <= DIRECT_SCAN_MAX {
            return self.first_nonzero(self.begin, self.end);
        }
        self.first_marked()
    }

    /// [`first_set`](Self::first_set) of a range longer than [`DIRECT_SCAN_MAX`].
    #[inline(never)]
    fn first_marked(&self) -> Option<u32> {
        let (begin, end) = (self.begin, self.end);
        let last = chunk_of(end - 1);
        let mut next = chunk_of(begin);
        while let Some(chunk) = self.summary.next_marked(next, last) {
            let chunk_begin = chunk_start(chunk);
            let chunk_end = chunk_begin.saturating_add(CHUNK_LEN).min(self.table.len);
            let (lo, hi) = (chunk_begin.max(begin), chunk_end.min(end));
            if let Some(id) = self.first_nonzero(lo, hi) {
                return Some(id);
            }
            // Only a scan that looked at the whole chunk knows that its mark is stale.
            if (lo, hi) == (chunk_begin, chunk_end) {
                if let Some(id) = self.unmark_stale(chunk, lo, hi) {
                    return Some(id);
                }
            }
            next = chunk + 1;
        }
        None
    }

    /// Clears the mark of a chunk that looked empty, unless a `set` raced with the look.
    fn unmark_stale(&self, chunk: usize, lo: u32, hi: u32) -> Option<u32> {
        self.summary.unmark(chunk);
        // A `set` may have stored into the chunk after our look but marked before our unmark
        // (the unmark's Acquire makes its store visible to this second look), or found the
        // chunk still marked and left it so: the fence makes this look see the store of
        // every set whose fence came before it (see `set`).
        fence(Ordering::SeqCst);
        let id = self.first_nonzero(lo, hi)?;
        self.summary.mark(chunk);
        // While the chunk was unmarked another scanner may have skipped it and gone to sleep
        // after the setter's notification; it needs a notification after the re-mark.
        self.table.event.notify_all();
        Some(id)
    }

    #[inline]
    fn first_nonzero(&self, lo: u32, hi: u32) -> Option<u32> {
        let slots = &self.slots[lo as usize..hi as usize];
        let at = slots.iter().position(|s| s.load(Ordering::Acquire) != 0)?;
        // The position is below `hi - lo`, a u32.
        Some(lo + at as u32)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Timeout;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const LEN: u32 = 65_536;

    fn no_progress() -> bool {
        false
    }

    #[test]
    fn set_get_reset_round_trip() -> Result<()> {
        let table = NotificationTable::new(LEN);
        assert_eq!(table.len(), LEN);
        assert!(!table.is_empty());
        assert_eq!(table.get(17)?, 0);
        table.set(17, 5)?;
        assert_eq!(table.get(17)?, 5);
        table.set(17, 9)?;
        assert_eq!(table.reset(17)?, 9);
        assert_eq!(table.reset(17)?, 0);
        assert_eq!(table.get(17)?, 0);
        table.set(17, 4)?;
        assert_eq!(table.take_exclusive(17)?, 4);
        assert_eq!(table.take_exclusive(17)?, 0);
        assert_eq!(table.get(17)?, 0);
        Ok(())
    }

    #[test]
    fn bad_ids_values_and_ranges_are_rejected() {
        let table = NotificationTable::new(100);
        let out = |id| Error::OutOfRange { id, len: 100 };
        assert_eq!(table.set(100, 1), Err(out(100)));
        assert_eq!(table.set(3, 0), Err(Error::ZeroValue { id: 3 }));
        assert_eq!(table.get(100), Err(out(100)));
        assert_eq!(table.reset(u32::MAX), Err(out(u64::from(u32::MAX))));
        assert_eq!(table.take_exclusive(100), Err(out(100)));
        assert_eq!(
            table.first_set(5, 0),
            Err(Error::EmptyRange { begin: 5, len: 100 })
        );
        assert_eq!(table.first_set(90, 11), Err(out(101)));
        assert_eq!(table.first_set(100, 1), Err(out(101)));
        assert_eq!(
            table.first_set(u32::MAX, u32::MAX),
            Err(out(2 * u64::from(u32::MAX)))
        );
        assert_eq!(
            table.wait_some(0, 0, Timeout::Block, no_progress),
            Err(Error::EmptyRange { begin: 0, len: 100 })
        );
        assert_eq!(
            table.wait_some(99, 2, Timeout::Block, no_progress),
            Err(out(101))
        );
        assert_eq!(table.first_set(0, 100), Ok(None));
        assert!(NotificationTable::new(0).is_empty());
    }

    #[test]
    fn first_set_finds_the_lowest_set_id_in_range() -> Result<()> {
        let table = NotificationTable::new(LEN);
        assert_eq!(table.first_set(0, LEN)?, None);
        table.set(40_000, 1)?;
        table.set(70, 2)?;
        table.set(65, 3)?;
        assert_eq!(table.first_set(0, LEN)?, Some(65));
        assert_eq!(table.first_set(66, 10)?, Some(70));
        assert_eq!(table.first_set(71, LEN - 71)?, Some(40_000));
        assert_eq!(table.first_set(40_001, LEN - 40_001)?, None);
        assert_eq!(table.first_set(65, 1)?, Some(65));
        Ok(())
    }

    #[test]
    fn a_range_is_validated_once_and_sees_later_sets() -> Result<()> {
        let table = NotificationTable::new(LEN);
        assert!(matches!(table.range(5, 0), Err(Error::EmptyRange { .. })));
        assert!(matches!(
            table.range(LEN - 1, 2),
            Err(Error::OutOfRange { id, .. }) if id == u64::from(LEN) + 1
        ));
        let short = table.range(60, 10)?;
        let long = table.range(0, LEN)?;
        assert_eq!((short.first_set(), long.first_set()), (None, None));
        table.set(40_000, 1)?;
        table.set(65, 2)?;
        assert_eq!((short.first_set(), long.first_set()), (Some(65), Some(65)));
        table.reset(65)?;
        assert_eq!((short.first_set(), long.first_set()), (None, Some(40_000)));
        Ok(())
    }

    #[test]
    fn stale_marks_are_cleared_and_new_sets_still_found() -> Result<()> {
        let table = NotificationTable::new(LEN);
        table.set(130, 1)?;
        table.reset(130)?;
        // A partial look at the chunk must not clear its mark...
        assert_eq!(table.first_set(131, 2)?, None);
        assert_eq!(table.parts().1.next_marked(0, 1023), Some(chunk_of(130)));
        // ...a whole one does.
        assert_eq!(table.first_set(0, LEN)?, None);
        assert_eq!(table.parts().1.next_marked(0, 1023), None);
        table.set(131, 4)?;
        assert_eq!(table.first_set(0, LEN)?, Some(131));
        Ok(())
    }

    #[test]
    fn a_short_range_is_scanned_without_the_summary() -> Result<()> {
        let table = NotificationTable::new(LEN);
        table.set(70, 1)?;
        table.reset(70)?;
        assert_eq!(table.first_set(64, 64)?, None);
        // A direct scan leaves the (stale) mark alone: only summary scans judge marks.
        assert_eq!(table.parts().1.next_marked(0, 1023), Some(chunk_of(70)));
        table.set(100, 2)?;
        assert_eq!(table.first_set(100, 1)?, Some(100));
        assert_eq!(table.first_set(65, 63)?, Some(100));
        Ok(())
    }

    #[test]
    fn last_partial_chunk_is_scanned() -> Result<()> {
        let table = NotificationTable::new(100);
        table.set(99, 1)?;
        assert_eq!(table.first_set(0, 100)?, Some(99));
        table.reset(99)?;
        // Wider than a direct scan, so through the summary: the short last chunk counts as
        // looked at whole.
        assert_eq!(table.first_set(0, 100)?, None);
        assert_eq!(table.parts().1.next_marked(0, 1), None);
        Ok(())
    }

    #[test]
    fn wait_some_returns_a_set_id_without_consuming_it() -> Result<()> {
        let table = NotificationTable::new(LEN);
        table.set(300, 8)?;
        assert_eq!(table.wait_some(0, LEN, Timeout::Block, no_progress)?, 300);
        assert_eq!(table.wait_some(300, 1, Timeout::Test, no_progress)?, 300);
        assert_eq!(table.get(300)?, 8);
        Ok(())
    }

    #[test]
    fn test_timeout_never_blocks() {
        let table = NotificationTable::new(LEN);
        let start = Instant::now();
        let result = table.wait_some(0, LEN, Timeout::Test, no_progress);
        let elapsed = start.elapsed();
        assert_eq!(result, Err(Error::Timeout));
        assert!(elapsed < Duration::from_millis(1), "took {elapsed:?}");
    }

    #[test]
    fn test_timeout_sees_what_its_one_progress_call_delivers() {
        let table = NotificationTable::new(LEN);
        let progress = || table.set(5, 1).is_ok();
        assert_eq!(table.wait_some(0, 10, Timeout::Test, progress), Ok(5));
    }

    #[test]
    fn millis_times_out_on_time() {
        let table = NotificationTable::new(LEN);
        let start = Instant::now();
        let result = table.wait_some(0, LEN, Timeout::Millis(50), no_progress);
        let elapsed = start.elapsed();
        assert_eq!(result, Err(Error::Timeout));
        assert!(elapsed >= Duration::from_millis(50), "took {elapsed:?}");
        assert!(elapsed < Duration::from_millis(150), "took {elapsed:?}");
    }

    #[test]
    fn waiting_again_after_a_timeout_works() -> Result<()> {
        let table = NotificationTable::new(LEN);
        assert_eq!(
            table.wait_some(10, 5, Timeout::Millis(10), no_progress),
            Err(Error::Timeout)
        );
        table.set(12, 3)?;
        assert_eq!(
            table.wait_some(10, 5, Timeout::Millis(10), no_progress)?,
            12
        );
        Ok(())
    }

    #[test]
    fn closing_ends_a_wait_that_found_nothing() -> Result<()> {
        let table = Arc::new(NotificationTable::new(LEN));
        let waiter = {
            let table = Arc::clone(&table);
            std::thread::spawn(move || table.wait_some(0, 4, Timeout::Block, no_progress))
        };
        // Long enough for the waiter to fall asleep: the close must wake it.
        std::thread::sleep(Duration::from_millis(50));
        table.close();
        assert_eq!(waiter.join().expect("the waiter"), Err(Error::Closed));
        assert!(table.is_closed());
        // What a closed table holds is still found, and still consumed.
        table.set(2, 9)?;
        assert_eq!(table.wait_some(0, 4, Timeout::Block, no_progress)?, 2);
        assert_eq!(table.reset(2)?, 9);
        assert_eq!(
            table.wait_some(0, 4, Timeout::Test, no_progress),
            Err(Error::Closed)
        );
        Ok(())
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
    )]
    fn tables_over_the_same_words_are_one_table() -> Result<()> {
        let len = 1000;
        let at = NotificationTable::words_for(len);
        let owned = SharedWords::allocate(at + 2, "table-test").expect("a shared-memory file");
        let path = owned
            .path()
            .expect("created words have a path")
            .to_path_buf();
        // Two mappings of one file, as the owner's process and a writer's hold them.
        let mine = Arc::new(owned);
        let theirs = Arc::new(SharedWords::open(&path).expect("the file maps again"));
        let event = |w: &Arc<SharedWords>| {
            Arc::new(EventCount::in_words(Arc::clone(w), at).expect("room for the event"))
        };
        let owner = NotificationTable::in_words(len, Arc::clone(&mine), event(&mine))
            .expect("room for the table");
        let writer = NotificationTable::in_words(len, Arc::clone(&theirs), event(&theirs))
            .expect("room for the table");
        assert!(NotificationTable::in_words(len + 8, Arc::clone(&mine), event(&mine)).is_none());
        assert!(EventCount::in_words(Arc::clone(&mine), at + 1).is_none());
        let owner = Arc::new(owner);
        let waiter = {
            let owner = Arc::clone(&owner);
            std::thread::spawn(move || owner.wait_some(0, len, Timeout::Block, no_progress))
        };
        // Long enough for the waiter to fall asleep on the futex: only the writer's own event
        // count, over the same words, can wake it.
        std::thread::sleep(Duration::from_millis(30));
        writer.set(777, 5)?;
        assert_eq!(waiter.join().expect("the waiter does not panic"), Ok(777));
        assert_eq!(owner.reset(777)?, 5);
        assert_eq!(writer.get(777)?, 0);
        Ok(())
    }

    #[test]
    fn a_set_wakes_every_waiter_on_overlapping_ranges() -> Result<()> {
        let table = Arc::new(NotificationTable::new(LEN));
        let waiters: Vec<_> = [(0, LEN), (1000, 100), (1050, 1)]
            .into_iter()
            .map(|(begin, num)| {
                let table = Arc::clone(&table);
                std::thread::spawn(move || table.wait_some(begin, num, Timeout::Block, no_progress))
            })
            .collect();
        // Long enough for the waiters to finish spinning and fall asleep.
        std::thread::sleep(Duration::from_millis(30));
        table.set(1050, 7)?;
        for waiter in waiters {
            assert_eq!(waiter.join().expect("waiters do not panic"), Ok(1050));
        }
        Ok(())
    }
}
