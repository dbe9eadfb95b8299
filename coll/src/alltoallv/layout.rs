//! The control segment of an [`Alltoallv`](super::Alltoallv): one library segment per member,
//! of the same layout everywhere, holding everything the protocol exchanges besides the user's
//! blocks. With `n` members:
//!
//! | bytes | what |
//! |---|---|
//! | `COUNTERS`: 2 × 8 | per discovery bank: how many sources registered here (remote fetch-and-add) |
//! | `RECORDS`: 2 × n × [`SLOT`] | per bank, the registrations, in the order they were counted; then this member's replies to them |
//! | `REPLIES`: n × [`SLOT`] | per destination of this member: its registration (staged), then the destination's reply |
//!
//! | notification ids | set by | value |
//! |---|---|---|
//! | `reg(bank, k)` | a source, with its registration record in slot `k` | discovery tag |
//! | `reply(i)` | destination `i`, with its reply | discovery tag |
//! | `barrier(bank, q)` | the partner of dissemination round `q` | discovery tag |
//! | `data(s)` | source member `s`, with its block (in the user's receive segment) | round tag |
//! | `credit(t)` | destination member `t`, when it reset this member's block | that block's round tag |
//! | `wake` | this member, when the exchange changed under the thread watching the table | 1 |
//!
//! Discoveries alternate between two banks, because a member may begin the next one while a
//! slower one still reads its registrations of the last: it cannot get further ahead, since a
//! discovery ends with a barrier. The arrays are indexed by counted slots and destination
//! indices, which are dense from 0: only the pages of as many slots as a member has neighbours
//! are ever touched, so the memory in use grows with the neighbours, while the address space
//! reserved grows with `n` (72 bytes and 5 notifications per member).

use gaspi::NotificationId;

/// Bytes of one registration or reply slot.
pub(super) const SLOT: u64 = 24;
use crate::barrier;

/// Ids and offsets of the control segment of a group of `n` members.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    n: u32,
}

impl Layout {
    pub(super) fn new(n: u32) -> Layout {
        Layout { n }
    }

    /// Members of the group.
    pub(super) fn members(self) -> u32 {
        self.n
    }

    /// Bytes of the segment.
    pub(super) fn bytes(self) -> u64 {
        16 + 3 * u64::from(self.n) * SLOT
    }

    /// Notifications of the segment's table.
    pub(super) fn notifications(self) -> u32 {
        self.n
            .saturating_mul(5)
            .saturating_add(barrier::NOTIFICATIONS + 1)
    }

    pub(super) fn counter(self, bank: u32) -> u64 {
        8 * u64::from(bank)
    }

    pub(super) fn record(self, bank: u32, k: u32) -> u64 {
        16 + (u64::from(bank) * u64::from(self.n) + u64::from(k)) * SLOT
    }

    pub(super) fn reply_slot(self, i: u32) -> u64 {
        16 + (2 * u64::from(self.n) + u64::from(i)) * SLOT
    }

    pub(super) fn reg(self, bank: u32, k: u32) -> NotificationId {
        bank * self.n + k
    }

    pub(super) fn reply(self, i: u32) -> NotificationId {
        2 * self.n + i
    }

    /// First id of the barrier's notifications.
    pub(super) fn barrier(self) -> NotificationId {
        3 * self.n
    }

    pub(super) fn data(self, source: u32) -> NotificationId {
        3 * self.n + barrier::NOTIFICATIONS + source
    }

    pub(super) fn credit(self, destination: u32) -> NotificationId {
        4 * self.n + barrier::NOTIFICATIONS + destination
    }

    /// Set by a thread of this member to wake the one watching the notifications.
    pub(super) fn wake(self) -> NotificationId {
        5 * self.n + barrier::NOTIFICATIONS
    }

    /// The member whose block `id` announces, if it is a data id.
    pub(super) fn data_source(self, id: NotificationId) -> Option<u32> {
        id.checked_sub(self.data(0)).filter(|&s| s < self.n)
    }
}

/// The tag of round `number` of plan `plan` in notification values: never 0 (which means
/// "unset"), different for consecutive rounds, and different for rounds of the same number
/// of different plans (members that disagree on the plan are told, not corrupted) unless the
/// plans' numbers are 255 apart.
pub(super) fn round_tag(number: u64, plan: u64) -> u32 {
    // Both remainders fit their fields: 24 bits of round, 8 bits (< 255) of plan, plus 1.
    let round = (number % (1 << 24)) as u32;
    let plan = (plan % 255) as u32;
    (plan << 24 | round) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id of the table is used once and lies in it, `data_source` names exactly the
    /// data ids' members, and the record and reply slots lie apart within the segment.
    #[test]
    fn ids_and_slots_are_disjoint_and_in_bounds() {
        for n in [1, 2, 3, 7, 1000] {
            let l = Layout::new(n);
            let mut ids: Vec<NotificationId> = Vec::new();
            for bank in 0..2 {
                ids.extend((0..n).map(|k| l.reg(bank, k)));
            }
            ids.extend((0..n).map(|i| l.reply(i)));
            ids.extend((0..barrier::NOTIFICATIONS).map(|q| l.barrier() + q));
            for member in 0..n {
                ids.push(l.data(member));
                ids.push(l.credit(member));
                assert_eq!(l.data_source(l.data(member)), Some(member));
                assert_eq!(l.data_source(l.credit(member)), None);
            }
            ids.push(l.wake());
            let count = ids.len();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), count, "n = {n}: an id used twice");
            assert_eq!(count as u32, l.notifications(), "n = {n}: ids left unused");
            assert!(ids.iter().all(|&id| id < l.notifications()));

            assert!(l.counter(1) + 8 <= l.record(0, 0));
            assert!(l.record(1, n - 1) + SLOT <= l.reply_slot(0));
            assert_eq!(l.reply_slot(n - 1) + SLOT, l.bytes());
        }
    }
}
