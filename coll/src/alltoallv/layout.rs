//! The control segment of an [`Alltoallv`](super::Alltoallv): one library segment per member,
//! of the same layout everywhere, holding everything the protocol exchanges besides the user's
//! blocks. With `n` members:
//!
//! | bytes | what |
//! |---|---|
//! | `COUNTERS`: 2 × 8 | per discovery bank: how many sources registered here (remote fetch-and-add) |
//! | `RECORDS`: 2 × n × [`SLOT`] | per bank, the registrations, in the order they were counted; then this member's replies to them |
//! | `REPLIES`: n × [`SLOT`] | per destination of this member: its registration (staged), then the destination's reply |
//! | `SMALL_SLOTS`: n × 2 × [`SMALL_BLOCK`] | per source member and round parity: its small block, until this member copies it out |
//!
//! | notification ids | set by | value |
//! |---|---|---|
//! | `reg(bank, k)` | a source, with its registration record in slot `k` | discovery tag |
//! | `reply(i)` | destination `i`, with its reply | discovery tag |
//! | `barrier(bank, q)` | the partner of dissemination round `q` | discovery tag |
//! | `data(s, p)` | source member `s`, with its block of a round of parity `p` (a small one in its slot `p` here, a larger one in the user's receive segment) | round tag |
//! | `credit(t, p)` | destination member `t`, when it reset this member's block of a round of parity `p` | that block's round tag |
//! | `wake` | this member, when the exchange changed under the thread watching the table | 1 |
//!
//! Rounds alternate between two parities (odd and even round numbers, the same on every
//! member, since every member begins every round): a block of at most [`SMALL_BLOCK`] bytes
//! goes into its source's slot of the round's parity, so a source may write round `r + 1`
//! while its block of round `r` still waits to be reset; only round `r + 2` needs round `r`'s
//! credit.
//!
//! Discoveries alternate between two banks, because a member may begin the next one while a
//! slower one still reads its registrations of the last: it cannot get further ahead, since a
//! discovery ends with a barrier. The arrays are indexed by counted slots and destination
//! indices, which are dense from 0: only the pages of as many slots as a member has neighbours
//! are ever touched; the small-block slots are indexed by source member, so only the pages of
//! the member's sources are touched. The memory in use grows with the neighbours, while the
//! address space reserved grows with `n` (2,120 bytes and 7 notifications per member).

use gaspi::NotificationId;

/// Bytes of one registration or reply slot.
pub(super) const SLOT: u64 = 24;

/// The largest block that travels through its receiver's control segment (see the module
/// doc): up to here a block's cost is the trip, not the bytes, and a round trip per round for
/// the credit would double it.
pub(super) const SMALL_BLOCK: u64 = 1024;
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
        self.slots() + 2 * u64::from(self.n) * SMALL_BLOCK
    }

    /// Offset of the small-block slots.
    fn slots(self) -> u64 {
        16 + 3 * u64::from(self.n) * SLOT
    }

    /// Offset of the slot of source member `source` for rounds of parity `parity`.
    pub(super) fn slot(self, source: u32, parity: u32) -> u64 {
        self.slots() + (2 * u64::from(source) + u64::from(parity)) * SMALL_BLOCK
    }

    /// Notifications of the segment's table.
    pub(super) fn notifications(self) -> u32 {
        self.n
            .saturating_mul(7)
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

    pub(super) fn data(self, source: u32, parity: u32) -> NotificationId {
        3 * self.n + barrier::NOTIFICATIONS + 2 * source + parity
    }

    pub(super) fn credit(self, destination: u32, parity: u32) -> NotificationId {
        5 * self.n + barrier::NOTIFICATIONS + 2 * destination + parity
    }

    /// Set by a thread of this member to wake the one watching the notifications.
    pub(super) fn wake(self) -> NotificationId {
        7 * self.n + barrier::NOTIFICATIONS
    }

    /// The member and the round parity of the block `id` announces, if it is a data id.
    pub(super) fn data_source(self, id: NotificationId) -> Option<(u32, u32)> {
        let k = id
            .checked_sub(self.data(0, 0))
            .filter(|&k| k < 2 * self.n)?;
        Some((k / 2, k % 2))
    }
}

/// Whether a block of `bytes` travels through its receiver's control segment.
pub(super) fn is_small(bytes: u64) -> bool {
    bytes <= SMALL_BLOCK
}

/// The parity of round `number`: which slot and which data and credit ids its blocks use.
pub(super) fn parity(number: u64) -> u32 {
    (number % 2) as u32
}

/// The parity of the round whose tag is `tag` (see [`round_tag`], which keeps it).
pub(super) fn tag_parity(tag: u32) -> u32 {
    (tag - 1) & 1
}

/// The tag of round `number` of plan `plan` in notification values: never 0 (which means
/// "unset"), different for consecutive rounds, and different for rounds of the same number
/// of different plans (members that disagree on the plan are told, not corrupted) unless the
/// plans' numbers are 255 apart. Its lowest bit, less 1, is the round's [`parity`].
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
                for parity in 0..2 {
                    ids.push(l.data(member, parity));
                    ids.push(l.credit(member, parity));
                    let data = l.data_source(l.data(member, parity));
                    assert_eq!(data, Some((member, parity)));
                    assert_eq!(l.data_source(l.credit(member, parity)), None);
                }
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
            assert_eq!(l.reply_slot(n - 1) + SLOT, l.slot(0, 0));
            for member in 0..n {
                assert_eq!(l.slot(member, 0) + SMALL_BLOCK, l.slot(member, 1));
            }
            assert_eq!(l.slot(n - 1, 1) + SMALL_BLOCK, l.bytes());
        }
    }

    /// Consecutive rounds alternate parities, and a round's tag tells its parity, for every
    /// plan and across the wrap of the round field.
    #[test]
    fn tags_keep_the_round_parity() {
        for plan in [0, 1, 254, 255, 1000] {
            for number in [1, 2, 3, (1 << 24) - 1, 1 << 24, (1 << 24) + 1, u64::MAX] {
                let tag = round_tag(number, plan);
                assert_eq!(
                    tag_parity(tag),
                    parity(number),
                    "round {number}, plan {plan}"
                );
                assert_ne!(parity(number), parity(number.wrapping_add(1)));
            }
        }
    }
}
