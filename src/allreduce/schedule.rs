//! The schedule of one allreduce run: for each step, the member it talks to, the block ranges
//! it sends and receives, and how it folds what arrives.
//!
//! A schedule is data, computed from the group size, this member's index and the run's length;
//! the runner in the parent module executes it step by step and can stop after any step (a
//! timeout) and resume later.
//!
//! # Fixed order
//! Every fold joins two *adjacent* member ranges, lower range on the left. Sizes that are not a
//! power of two `p` first fold the first `2·(n - p)` members pairwise (`2i` into `2i + 1`), so the
//! remaining `p` "virtual" members hold adjacent ranges in member order; then partners at
//! distance 1, 2, 4, … fold their adjacent ranges. Both algorithms below follow this same tree,
//! so every element of the result is the same expression over the inputs on every member, in
//! every run, whichever algorithm the length selects: results are bitwise identical, floating
//! point included (a NaN's sign and payload excepted: they are the processor's choice, see
//! `ReduceOp`), and non-commutative operators see their operands in member order.
//!
//! # Algorithms
//! * **Recursive doubling** (short vectors): `log2 p` steps, each exchanging the whole vector.
//! * **Rabenseifner** (long vectors): a reduce-scatter by recursive halving (nearest partner
//!   first, so folds stay adjacent) leaves each virtual member one fully reduced part, and an
//!   allgather in the reverse order hands the parts around: `2·log2 p` steps moving about twice
//!   the vector in total instead of `log2 p` times it.

use std::ops::Range;

/// How a received range is combined with this member's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fold {
    /// The received range is the result: copy it.
    Copy,
    /// The sender's range comes first: `own = received ⊕ own`.
    ReceivedFirst,
    /// The sender's range comes second: `own = own ⊕ received`.
    ReceivedSecond,
}

/// One step: send (if any) then receive (if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    /// Index of the step in the run's numbering, shared by sender and receiver: it selects the
    /// receive slot of the area and the notification id.
    pub slot: u32,
    /// Member index of the partner.
    pub partner: u32,
    /// Blocks sent to the partner.
    pub send: Option<Range<usize>>,
    /// Blocks received from the partner, and how they are folded in.
    pub recv: Option<(Range<usize>, Fold)>,
}

/// Slots a run may use in a group of `n` members: a pairing step, up to `2·log2 p` steps, and
/// the step handing the result back to paired members.
pub(crate) fn slots(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        2 * n.ilog2() + 2
    }
}

/// Runs whose payload is larger than this use Rabenseifner's algorithm (as MPICH does).
pub(crate) const LONG_BYTES: usize = 2048;

/// The steps member `me` of `n` takes to allreduce `blocks` blocks; `long` asks for
/// Rabenseifner's algorithm, used when there are at least as many blocks as virtual members.
/// No blocks take every step too, with empty ranges: a member passing an empty vector meets
/// the others' calls, so that a length that differs is named like any other difference,
/// where its run taking no step left theirs to pair with its next call.
pub(crate) fn schedule(n: u32, me: u32, blocks: usize, long: bool) -> Vec<Step> {
    let mut steps = Vec::new();
    if n <= 1 {
        return steps;
    }
    let levels = n.ilog2();
    let extra = n - (1 << levels);
    let last = 2 * levels + 1;
    let all = 0..blocks;
    let paired = me < 2 * extra;
    let virtual_me = if paired {
        if me % 2 == 0 {
            // Hands its vector to its right neighbour and gets the result back at the end.
            steps.push(Step {
                slot: 0,
                partner: me + 1,
                send: Some(all.clone()),
                recv: None,
            });
            steps.push(Step {
                slot: last,
                partner: me + 1,
                send: None,
                recv: Some((all, Fold::Copy)),
            });
            return steps;
        }
        steps.push(Step {
            slot: 0,
            partner: me - 1,
            send: None,
            recv: Some((all.clone(), Fold::ReceivedFirst)),
        });
        me / 2
    } else {
        me - extra
    };
    let member = |v: u32| if v < extra { 2 * v + 1 } else { v + extra };
    let fold = |partner: u32| {
        if partner < virtual_me {
            Fold::ReceivedFirst
        } else {
            Fold::ReceivedSecond
        }
    };
    if long && blocks >= 1 << levels {
        let mut range = all.clone();
        let mut splits = Vec::with_capacity(levels as usize);
        for k in 0..levels {
            let partner = virtual_me ^ (1 << k);
            let mid = range.start + range.len() / 2;
            let (keep, give) = if virtual_me & (1 << k) == 0 {
                (range.start..mid, mid..range.end)
            } else {
                (mid..range.end, range.start..mid)
            };
            steps.push(Step {
                slot: 1 + k,
                partner: member(partner),
                send: Some(give.clone()),
                recv: Some((keep.clone(), fold(partner))),
            });
            splits.push((keep.clone(), give));
            range = keep;
        }
        // Undo the halving: at step k this member owns the part it kept at halving step k.
        for (k, (keep, give)) in splits.into_iter().enumerate().rev() {
            steps.push(Step {
                slot: 2 * levels - k as u32,
                partner: member(virtual_me ^ (1 << k)),
                send: Some(keep),
                recv: Some((give, Fold::Copy)),
            });
        }
    } else {
        for k in 0..levels {
            let partner = virtual_me ^ (1 << k);
            steps.push(Step {
                slot: 1 + k,
                partner: member(partner),
                send: Some(all.clone()),
                recv: Some((all.clone(), fold(partner))),
            });
        }
    }
    if paired {
        steps.push(Step {
            slot: last,
            partner: me - 1,
            send: Some(all),
            recv: None,
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Executes the schedules of all `n` members together, slot by slot, with string
    /// concatenation as the (non-commutative) operator: every member must end with
    /// "0.1.2…" in every block, built in member order.
    fn simulate(n: u32, blocks: usize, long: bool) {
        let plans: Vec<Vec<Step>> = (0..n).map(|m| schedule(n, m, blocks, long)).collect();
        let mut acc: Vec<Vec<String>> = (0..n).map(|m| vec![format!("{m}."); blocks]).collect();
        for slot in 0..slots(n) {
            let mut mail = Vec::new();
            for (m, plan) in plans.iter().enumerate() {
                for step in plan.iter().filter(|s| s.slot == slot) {
                    if let Some(range) = &step.send {
                        mail.push((
                            step.partner,
                            m as u32,
                            range.clone(),
                            acc[m][range.clone()].to_vec(),
                        ));
                    }
                }
            }
            for (m, plan) in plans.iter().enumerate() {
                let Some(step) = plan.iter().find(|s| s.slot == slot) else {
                    continue;
                };
                let Some((range, how)) = &step.recv else {
                    continue;
                };
                let (_, _, sent, data) = mail
                    .iter()
                    .find(|(to, from, _, _)| *to == m as u32 && *from == step.partner)
                    .unwrap_or_else(|| panic!("n={n} member {m} slot {slot}: nothing sent"));
                assert_eq!(sent, range, "n={n} member {m} slot {slot}: ranges differ");
                for (own, got) in acc[m][range.clone()].iter_mut().zip(data) {
                    *own = match how {
                        Fold::Copy => got.clone(),
                        Fold::ReceivedFirst => format!("{got}{own}"),
                        Fold::ReceivedSecond => format!("{own}{got}"),
                    };
                }
            }
            // Every message was received by the step it was meant for.
            for (to, from, _, _) in &mail {
                let step = plans[*to as usize].iter().find(|s| s.slot == slot);
                assert!(
                    step.is_some_and(|s| s.partner == *from && s.recv.is_some()),
                    "n={n} slot {slot}: message {from}->{to} not received"
                );
            }
        }
        let want: String = (0..n).map(|m| format!("{m}.")).collect();
        for (m, blocks) in acc.iter().enumerate() {
            for b in blocks {
                assert_eq!(b, &want, "n={n} member {m} long={long}");
            }
        }
    }

    #[test]
    fn every_member_gets_the_ordered_reduction() {
        for n in 1..=33 {
            for blocks in [0, 1, 2, 3, 7, 8, 64, 100] {
                simulate(n, blocks, false);
                simulate(n, blocks, true);
            }
        }
    }

    #[test]
    fn steps_use_distinct_slots_within_bounds() {
        for n in 2..=70 {
            for m in 0..n {
                for long in [false, true] {
                    let plan = schedule(n, m, 1000, long);
                    assert!(plan.windows(2).all(|w| w[0].slot < w[1].slot));
                    assert!(plan
                        .iter()
                        .all(|s| s.slot < slots(n) && s.partner < n && s.partner != m));
                }
            }
        }
    }

    #[test]
    fn long_runs_move_less_data() {
        let moved = |long| -> usize {
            schedule(8, 3, 800, long)
                .iter()
                .filter_map(|s| s.send.as_ref().map(|r| r.len()))
                .sum()
        };
        assert_eq!(moved(false), 3 * 800);
        assert_eq!(moved(true), 2 * 700);
        assert!(schedule(1, 0, 10, true).is_empty());
    }
}
