//! Owns the loom models of the crate's concurrency protocols: consuming a notification once,
//! never losing a wake-up, publishing the payload with the notification, and keeping the chunk
//! summary honest under races. Run them with
//! `RUSTFLAGS="--cfg loom" cargo test -p gaspi-notifications --release --lib loom`.

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::{EventCount, NotificationTable, Timeout, Wake};

/// Runs `model` over every interleaving with at most three preemptions, which covers each race
/// below in full while keeping the three-thread models to seconds.
fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(model);
}

#[test]
fn loom_concurrent_resets_take_the_value_once() {
    check(|| {
        let table = Arc::new(NotificationTable::new(2));
        table.set(1, 7).expect("id 1 is in range");
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.reset(1).expect("id 1 is in range"))
        };
        let mine = table.reset(1).expect("id 1 is in range");
        let theirs = other.join().expect("the other resetter does not panic");
        let mut seen = [mine, theirs];
        seen.sort_unstable();
        assert_eq!(seen, [0, 7]);
    });
}

#[test]
fn loom_event_count_loses_no_wake_up() {
    check(|| {
        let event = Arc::new(EventCount::new());
        let ready = Arc::new(AtomicBool::new(false));
        let notifier = {
            let (event, ready) = (Arc::clone(&event), Arc::clone(&ready));
            thread::spawn(move || {
                ready.store(true, Ordering::Release);
                event.notify_all();
            })
        };
        // A lost wake-up leaves this loop asleep forever, which loom reports as a deadlock.
        let is_ready = || ready.load(Ordering::Acquire).then_some(());
        loop {
            let key = event.prepare();
            if is_ready().is_some() {
                break;
            }
            if let Wake::Ready(()) = event.wait(key, Timeout::Block.deadline(), is_ready) {
                break;
            }
        }
        notifier.join().expect("the notifier does not panic");
    });
}

/// A waiter on `begin..begin + num` of a 2-slot table is woken by a racing set of slot 1 and
/// sees the payload written before it.
fn racing_set_wakes_the_waiter_with_its_payload(begin: u32, num: u32) {
    check(move || {
        let table = Arc::new(NotificationTable::new(2));
        // A stale mark on the chunk, so that a summary scan can find the slot without
        // synchronizing with the setter's mark: only the slot's own Release/Acquire may publish
        // the payload.
        table.set(0, 1).expect("id 0 is in range");
        table.reset(0).expect("id 0 is in range");
        let payload = Arc::new(AtomicUsize::new(0));
        let setter = {
            let (table, payload) = (Arc::clone(&table), Arc::clone(&payload));
            thread::spawn(move || {
                // Relaxed, like the RDMA write: only the notification may carry its visibility.
                payload.store(42, Ordering::Relaxed);
                table.set(1, 1).expect("id 1 is in range");
            })
        };
        let id = table.wait_some(begin, num, Timeout::Block, || false);
        assert_eq!(id, Ok(1));
        assert_eq!(payload.load(Ordering::Relaxed), 42);
        setter.join().expect("the setter does not panic");
    });
}

#[test]
fn loom_wait_some_is_woken_by_a_racing_set_and_sees_its_payload() {
    // Two slots: scanned through the summary.
    racing_set_wakes_the_waiter_with_its_payload(0, 2);
}

#[test]
fn loom_a_single_slot_wait_is_woken_by_a_racing_set_and_sees_its_payload() {
    // One slot: scanned directly, without the summary.
    racing_set_wakes_the_waiter_with_its_payload(1, 1);
}

#[test]
fn loom_unmarking_a_stale_chunk_hides_no_set() {
    check(|| {
        // 4 slots in 2-slot chunks; chunk 0 starts with a stale mark.
        let table = Arc::new(NotificationTable::new(4));
        table.set(1, 1).expect("id 1 is in range");
        table.reset(1).expect("id 1 is in range");

        let setter = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.set(0, 9).expect("id 0 is in range"))
        };
        let scanner = {
            let table = Arc::clone(&table);
            // Scans chunk 0 whole, so it may unmark it while the set races.
            thread::spawn(move || table.first_set(0, 4).expect("range is valid"))
        };
        assert_eq!(table.wait_some(0, 2, Timeout::Block, || false), Ok(0));
        setter.join().expect("the setter does not panic");
        let scanned = scanner.join().expect("the scanner does not panic");
        assert!(matches!(scanned, None | Some(0)));
        // With every thread done, the mark must still lead scans to the set slot.
        assert_eq!(table.first_set(0, 4), Ok(Some(0)));
    });
}

#[test]
fn loom_a_set_that_marks_its_chunk_wakes_a_summary_waiter() {
    check(|| {
        // No stale mark: the set finds its chunk unmarked and marks it, which is all that a
        // waiter scanning through the summary can see of it.
        let table = Arc::new(NotificationTable::new(2));
        let setter = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.set(1, 3).expect("id 1 is in range"))
        };
        assert_eq!(table.wait_some(0, 2, Timeout::Block, || false), Ok(1));
        setter.join().expect("the setter does not panic");
    });
}
