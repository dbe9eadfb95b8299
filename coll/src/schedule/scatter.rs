//! The scatter's schedules: block `i` of the root's source into member `i`'s destination,
//! along a [`Tree`] (see [`tree`](super::tree) for the shapes, signal numbers and the layout
//! of the blocks in the stages).
//!
//! The root stages each child's subtree of blocks (rotated into relative order) and puts it,
//! after the child's credit, into the child's stage; a member forwards its children's
//! subtrees from the one put it received, and copies its own block out.
//!
//! Every credit is listed as skippable ([`Schedule::credits`]): a member's stage receives
//! one put, and the member only reads it (only the root stages its source, and nothing lands
//! at the root), so the subtree may land before its receiver started.

use super::tree::{credit, data, Blocks, Layout, Node, Tree};
use super::{Schedule, Span};

/// Member `me`'s schedule of a scatter of `bytes` to every member from `root` in a team of
/// `n`, along `tree`.
pub(crate) fn scatter(n: u32, me: u32, root: u32, bytes: u64, tree: Tree) -> Schedule {
    schedule(n, me, root, Blocks::Equal(bytes), tree)
}

/// Member `me`'s schedule of a scatter of `counts[i]` bytes to each member `i` from `root` in a
/// team of `n`, along `tree`.
pub(crate) fn scatterv(n: u32, me: u32, root: u32, counts: &[u64], tree: Tree) -> Schedule {
    schedule(n, me, root, Blocks::Counts(counts), tree)
}

/// Member `me`'s schedule of either form.
fn schedule(n: u32, me: u32, root: u32, blocks: Blocks<'_>, tree: Tree) -> Schedule {
    let mut s = Schedule::new();
    let layout = Layout::new(n, root, blocks);
    let node = Node::new(n, me, root, tree);
    let own = blocks.len(me);
    // The step after which this member's subtree is in its stage; the root has no such
    // step: it stages each child's subtree from its source just before putting it, so the
    // first put need not wait for the whole rotation.
    let got = match node.parent() {
        None => {
            s.copy(Span::src(layout.root_at(), own), Span::dst(0, own), &[]);
            None
        }
        Some(parent) => {
            let total = layout.subtree(node);
            if total == 0 {
                return s;
            }
            s.stage = total;
            let credited = s.signal(parent.member(), credit(n, me), &[]);
            s.credits.push(credited);
            let got = s.wait(parent.member(), data(parent.member()), &[]);
            s.copy(Span::stage(0, own), Span::dst(0, own), &[got]);
            Some(got)
        }
    };
    for (child, at, len) in layout.children(node) {
        if len == 0 {
            continue;
        }
        let to = child.member();
        let go = s.wait(to, credit(n, to), &[]);
        s.credits.push(go);
        let mut ready = vec![go];
        match got {
            Some(got) => ready.push(got),
            None => {
                for (packed, stage, len) in layout.packed(at, len) {
                    ready.extend(s.copy(Span::src(packed, len), Span::stage(stage, len), &[]));
                }
            }
        }
        s.put(to, at, 0, len, data(me), &ready);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::sim::{check, pattern};
    use super::super::tree::tests::{
        each_case, irregular, levels, puts, roots, wrapped, BYTES, TREES,
    };
    use super::super::Task;
    use super::*;

    /// The root's source: every member's block, packed in member order.
    fn packed(n: u32, root: u32, len: impl Fn(u32) -> u64) -> Vec<u8> {
        (0..n).flat_map(|i| pattern(root, i, len(i))).collect()
    }

    #[test]
    fn every_member_ends_with_its_block() {
        each_case(&TREES[..6], |n, root, tree, barriers| {
            for bytes in BYTES {
                check(
                    &format!("scatter {tree:?} root {root} {bytes} B barriers {barriers}"),
                    n,
                    |m| wrapped(scatter(n, m, root, bytes, tree), n, m, barriers),
                    |m| packed(n, root, |_| if m == root { bytes } else { 0 }),
                    |m| pattern(root, m, bytes),
                );
            }
        });
    }

    #[test]
    fn every_member_ends_with_its_block_of_its_own_size() {
        each_case(&TREES[..6], |n, root, tree, barriers| {
            let counts = irregular(n);
            check(
                &format!("scatterv {tree:?} root {root} barriers {barriers}"),
                n,
                |m| wrapped(scatterv(n, m, root, &counts, tree), n, m, barriers),
                |m| packed(n, root, |i| if m == root { counts[i as usize] } else { 0 }),
                |m| pattern(root, m, counts[m as usize]),
            );
        });
    }

    #[test]
    fn the_binomial_root_sends_each_block_once_in_log_n_puts() {
        for n in 1..=33 {
            for root in roots(n) {
                let root_puts = puts(&scatter(n, root, root, 3, Tree::Binomial));
                assert_eq!(root_puts.len() as u32, levels(n, 2), "n={n} root={root}");
                let sent: u64 = root_puts.iter().map(|&(_, len)| len).sum();
                assert_eq!(sent, 3 * u64::from(n - 1));
                // The first child, at the highest place, takes the blocks from there to the end.
                if n > 1 {
                    let half = u64::from(n.next_power_of_two() / 2);
                    assert_eq!(
                        root_puts[0],
                        ((root + half as u32) % n, 3 * (u64::from(n) - half))
                    );
                }
                let mut received = vec![0; n as usize];
                for m in 0..n {
                    for (to, _) in puts(&scatter(n, m, root, 3, Tree::Binomial)) {
                        received[to as usize] += 1;
                    }
                }
                for m in 0..n {
                    assert_eq!(
                        received[m as usize],
                        u32::from(m != root),
                        "n={n} member {m}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_flat_root_puts_each_member_its_block() {
        let counts = [4, 0, 2, 9, 1];
        let root_puts = puts(&scatterv(5, 1, 1, &counts, Tree::Flat));
        assert_eq!(root_puts, vec![(2, 2), (3, 9), (4, 1), (0, 4)]);
        for m in [0, 2, 3, 4] {
            assert!(puts(&scatterv(5, m, 1, &counts, Tree::Flat)).is_empty());
        }
    }

    #[test]
    fn empty_subtrees_take_no_signal_and_pipelined_is_binomial() {
        let counts = [0, 0, 0, 5, 0, 0, 0, 0];
        for m in 0..8 {
            let s = scatterv(8, m, 0, &counts, Tree::Binomial);
            let signals = s
                .steps
                .iter()
                .filter(|step| !matches!(step.task, Task::Copy { .. }));
            // Member 3 gets its block from 2, which gets it from the root.
            let want = match m {
                0 => 2,
                2 => 4,
                3 => 2,
                _ => 0,
            };
            assert_eq!(signals.count(), want, "member {m}");
            for tree in [
                Tree::Pipelined { segment: 1 },
                Tree::Pipelined { segment: 64 },
            ] {
                assert_eq!(scatterv(8, m, 0, &counts, tree), s);
            }
        }
    }
}
