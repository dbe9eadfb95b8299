//! The broadcast's schedules: the root's bytes into every member's destination, along a
//! [`Tree`] (see [`tree`](super::tree) for the shapes and signal numbers).
//!
//! The root copies its source into its stage; every member forwards from its stage to its
//! children, each after that child's credit, and copies its stage into its destination. The
//! message moves as segments: one for the plain trees, up to 64 for [`Tree::Pipelined`],
//! where a member forwards a segment as soon as it has it, so a long message is on every
//! level of the tree at once instead of crossing the levels one after the other.
//!
//! # Credits
//! Every credit is listed as skippable ([`Schedule::credits`]): a member's stage receives
//! only its parent's segments, each into a range of its own, and the member only reads it
//! (only the root stages its source, and nothing lands at the root). So a segment may land
//! before its receiver started.

use super::tree::{credit, max_segments, segment, Node, Tree};
use super::{Schedule, Span, StepId, Task};

/// Member `me`'s schedule of a broadcast of `bytes` from `root` in a team of `n`, along
/// `tree`.
pub(crate) fn broadcast(n: u32, me: u32, root: u32, bytes: u64, tree: Tree) -> Schedule {
    let mut s = Schedule::new();
    let node = Node::new(n, me, root, tree);
    let parent = node.parent();
    if parent.is_none() {
        s.copy(Span::src(0, bytes), Span::dst(0, bytes), &[]);
    }
    if bytes == 0 {
        return s;
    }
    if let Some(p) = parent {
        let credited = s.signal(p.member(), credit(n, me), &[]);
        s.credits.push(credited);
        // The parent puts the whole message here.
        s.stage = bytes;
    }
    let credits: Vec<(u32, StepId)> = node
        .children()
        .map(|c| (c.member(), s.wait(c.member(), credit(n, c.member()), &[])))
        .collect();
    s.credits.extend(credits.iter().map(|&(_, go)| go));
    let len = segment_len(n, bytes, tree);
    // The parent puts the segments in order, so they mostly arrive in order: a member waits
    // for them one at a time, and an engine tests one signal of its parent's, not all of a
    // pipeline's; a segment that overtook another is seen right after it.
    let mut arrived: Option<StepId> = None;
    for (i, at) in (0..bytes.div_ceil(len)).map(|i| (i, i * len)) {
        let len = len.min(bytes - at);
        // At most max_segments(n), so it fits.
        let signal = segment(n, i as u32);
        let here = match parent {
            // Pushed rather than `copy`'d: the segment is not empty, and this is its step.
            None => s.push(
                Task::Copy {
                    from: Span::src(at, len),
                    into: Span::stage(at, len),
                },
                &[],
            ),
            Some(p) => {
                let got = s.wait(p.member(), signal, arrived.as_slice());
                arrived = Some(got);
                s.copy(Span::stage(at, len), Span::dst(at, len), &[got]);
                got
            }
        };
        for &(child, credited) in &credits {
            s.put(child, at, at, len, signal, &[here, credited]);
        }
    }
    s
}

/// The bytes of a segment of a message of `bytes` (above 0) in a team of `n` along `tree`.
fn segment_len(n: u32, bytes: u64, tree: Tree) -> u64 {
    match tree {
        Tree::Pipelined { segment } => segment.max(bytes.div_ceil(max_segments(n))).max(1),
        Tree::Flat | Tree::Binomial | Tree::Knomial(_) => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::{check, pattern};
    use super::super::tree::tests::{
        before, each_case, levels, puts, roots, wrapped, BYTES, TREES,
    };
    use super::super::NO_CHECK;
    use super::*;

    #[test]
    fn every_member_ends_with_the_roots_bytes() {
        each_case(&TREES, |n, root, tree, barriers| {
            for bytes in BYTES {
                check(
                    &format!("broadcast {tree:?} root {root} {bytes} B barriers {barriers}"),
                    n,
                    |m| wrapped(broadcast(n, m, root, bytes, tree), n, m, barriers),
                    |m| pattern(root, 0, if m == root { bytes } else { 0 }),
                    |_| pattern(root, 0, bytes),
                );
            }
        });
    }

    /// Every member's puts as (to, length).
    fn all_puts(n: u32, root: u32, bytes: u64, tree: Tree) -> Vec<Vec<(u32, u64)>> {
        (0..n)
            .map(|m| puts(&broadcast(n, m, root, bytes, tree)))
            .collect()
    }

    /// Who each member received from, and how often, in a broadcast along `tree`.
    fn parents(n: u32, root: u32, tree: Tree) -> Vec<Vec<u32>> {
        let mut from = vec![Vec::new(); n as usize];
        for (m, puts) in all_puts(n, root, 5, tree).into_iter().enumerate() {
            for (to, _) in puts {
                from[to as usize].push(m as u32);
            }
        }
        from
    }

    /// How many puts a member's message crossed from the root.
    fn depth(parents: &[Vec<u32>], root: u32, mut m: u32) -> u32 {
        let mut depth = 0;
        while m != root {
            m = parents[m as usize][0];
            depth += 1;
        }
        depth
    }

    #[test]
    fn the_flat_root_puts_to_everyone_and_nobody_else_puts() {
        for n in 1..=17 {
            let puts = all_puts(n, n / 2, 9, Tree::Flat);
            for (m, puts) in puts.iter().enumerate() {
                let want = if m as u32 == n / 2 { n - 1 } else { 0 };
                assert_eq!(puts.len() as u32, want, "n={n} member {m}");
            }
        }
    }

    #[test]
    fn the_binomial_root_puts_log_n_times_and_each_member_receives_once() {
        for n in 1..=33 {
            for root in roots(n) {
                let from = parents(n, root, Tree::Binomial);
                let root_puts = from.iter().flatten().filter(|&&p| p == root).count();
                assert_eq!(root_puts as u32, levels(n, 2), "n={n} root={root}");
                for (m, from) in from.iter().enumerate() {
                    let want = usize::from(m as u32 != root);
                    assert_eq!(from.len(), want, "n={n} root={root} member {m}");
                }
            }
        }
    }

    #[test]
    fn a_k_nomial_broadcast_is_log_k_deep_and_k_2_is_binomial() {
        for n in 1..=33 {
            for k in [3, 4, 8] {
                let from = parents(n, 1 % n, Tree::Knomial(k));
                for m in 0..n {
                    let depth = depth(&from, 1 % n, m);
                    assert!(depth <= levels(n, k.into()), "n={n} k={k} member {m}");
                }
            }
            for root in roots(n) {
                for m in 0..n {
                    assert_eq!(
                        broadcast(n, m, root, 9, Tree::Knomial(2)),
                        broadcast(n, m, root, 9, Tree::Binomial)
                    );
                }
            }
        }
        // 27 members in three levels (binomial takes five), the root serving two per level.
        let from = parents(27, 0, Tree::Knomial(3));
        assert_eq!((0..27).map(|m| depth(&from, 0, m)).max(), Some(3));
        assert_eq!(from.iter().flatten().filter(|&&p| p == 0).count(), 6);
    }

    #[test]
    fn a_pipelined_member_forwards_the_first_segment_before_it_has_the_last() {
        let (n, root, bytes) = (12, 3, 100);
        // Relative member 2 receives from the root and forwards to relative member 3.
        let s = broadcast(n, 5, root, bytes, Tree::Pipelined { segment: 10 });
        let waits: Vec<usize> = (0..s.steps.len())
            .filter(|&i| matches!(s.steps[i].task, Task::Wait { signal, .. } if signal >= 2 * n))
            .collect();
        assert_eq!(waits.len(), 10);
        let first = (0..s.steps.len()).find(|&i| matches!(s.steps[i].task, Task::Put { .. }));
        let first = first.expect("member 5 forwards");
        assert_eq!(
            s.steps[first].task,
            Task::Put {
                to: 6,
                from: 0,
                into: 0,
                len: 10,
                signal: 2 * n,
                check: NO_CHECK,
            }
        );
        assert!(
            !before(&s, first as StepId)[waits[9]],
            "segment 0 waits for segment 9"
        );
        assert!(before(&s, first as StepId)[waits[0]]);
    }

    #[test]
    fn a_pipeline_takes_at_most_64_segments_of_at_least_the_segment_asked() {
        let count = |bytes, segment| {
            let s = broadcast(3, 0, 0, bytes, Tree::Pipelined { segment });
            let to_1 = puts(&s).into_iter().filter(|&(to, _)| to == 1);
            let sizes: Vec<u64> = to_1.map(|(_, len)| len).collect();
            assert_eq!(sizes.iter().sum::<u64>(), bytes);
            sizes.len()
        };
        assert_eq!(count(100, 16), 7);
        assert_eq!(count(100, 1), 50);
        assert_eq!(count(1000, 1), 63);
        assert_eq!(count(6400, 0), 64);
        assert_eq!(count(100, 1000), 1);
    }
}
