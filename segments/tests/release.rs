//! A value replaced in its slot is released before `replace` returns when no reader holds it:
//! the runtime's deleted segments are such values, and one whose release waited for the
//! epoch's next collection kept its memory and its /dev/shm file after `segment_delete`
//! returned. Alone in its process, so that no other test's thread holds the epoch back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gaspi_segments::Slots;

/// Counts its drops into a shared counter.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_replaced_value_no_one_holds_is_released_before_replace_returns() {
    let drops = Arc::new(AtomicUsize::new(0));
    let slots = Slots::new(2);
    for round in 0..100 {
        slots
            .try_insert(0, Arc::new(Counted(Arc::clone(&drops))))
            .unwrap_or_else(|_| panic!("slot 0 is empty in round {round}"));
        // Lent and given back, as a lookup does.
        drop(slots.get(0));
        drop(slots.replace(0, None).unwrap());
        assert_eq!(
            drops.load(Ordering::SeqCst),
            round + 1,
            "the value of round {round} is still kept"
        );
    }
}
