//! Many consumers and one producer hammering a notification table: every value set is
//! consumed exactly once.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use gaspi_notifications::{Error, NotificationTable, Timeout};

const NOTIFICATIONS: u32 = 100_000;
const SLOTS: u32 = 1024;

#[test]
fn every_notification_is_consumed_exactly_once() {
    let table = Arc::new(NotificationTable::new(SLOTS));
    let consumed = Arc::new(AtomicU64::new(0));

    // Two consumers see the whole range, two see one half each: waits overlap and race.
    let ranges = [
        (0, SLOTS),
        (0, SLOTS),
        (0, SLOTS / 2),
        (SLOTS / 2, SLOTS / 2),
    ];
    let consumers: Vec<_> = ranges
        .into_iter()
        .map(|(begin, num)| {
            let (table, consumed) = (Arc::clone(&table), Arc::clone(&consumed));
            thread::spawn(move || {
                let mut values = Vec::new();
                while consumed.load(Ordering::Acquire) < u64::from(NOTIFICATIONS) {
                    // A short timeout, so consumers notice that everything has been consumed.
                    match table.wait_some(begin, num, Timeout::Millis(5), || false) {
                        Ok(id) => {
                            let value = table.reset(id).expect("ids from wait_some are in range");
                            // Another consumer may have reset it first; 0 means "not mine".
                            if value != 0 {
                                values.push(value);
                                consumed.fetch_add(1, Ordering::AcqRel);
                            }
                        }
                        Err(Error::Timeout) => {}
                        Err(other) => panic!("unexpected error {other}"),
                    }
                }
                values
            })
        })
        .collect();

    for i in 0..NOTIFICATIONS {
        let id = i % SLOTS;
        // The slot's previous value must be consumed before it is reused, as in GASPI.
        while table.get(id).expect("id is in range") != 0 {
            thread::yield_now();
        }
        table
            .set(id, i + 1)
            .expect("id is in range and value non-zero");
    }

    let mut values: Vec<u32> = consumers
        .into_iter()
        .flat_map(|consumer| consumer.join().expect("consumers do not panic"))
        .collect();
    let count = values.len();
    let sum: u64 = values.iter().copied().map(u64::from).sum();
    values.sort_unstable();
    values.dedup();

    let n = u64::from(NOTIFICATIONS);
    assert_eq!(count, NOTIFICATIONS as usize, "each value consumed once");
    assert_eq!(sum, n * (n + 1) / 2);
    assert_eq!(values.len(), count, "no value consumed twice");
    assert_eq!(table.first_set(0, SLOTS), Ok(None));
}
