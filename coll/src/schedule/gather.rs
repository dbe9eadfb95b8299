//! The gather's schedules: member `i`'s source into block `i` of the root's destination,
//! along a [`Tree`] (see [`tree`](super::tree) for the shapes, signal numbers and the layout
//! of the blocks in the stages).
//!
//! A member copies its source into its stage, raises a credit to each child, and once all
//! children's subtrees have landed beside its own block (and its parent's credit is there)
//! puts its whole subtree into its parent's stage in one put. The root copies each child's
//! subtree into its destination (rotated back into member order) as soon as it landed.
//! Members other than the root have an empty destination.
//!
//! Every credit is listed as skippable ([`Schedule::credits`]): each child's subtree lands in
//! a range of its own behind the member's block, and the member writes only that block (its
//! source copy, where nothing lands; the root's goes straight into its destination). So a
//! subtree may land before its receiver started, even before its receiver staged its own
//! block.

use super::tree::{credit, data, Blocks, Layout, Node, Tree};
use super::{Schedule, Span};

/// Member `me`'s schedule of a gather of `bytes` from every member to `root` in a team of `n`,
/// along `tree`.
pub(crate) fn gather(n: u32, me: u32, root: u32, bytes: u64, tree: Tree) -> Schedule {
    schedule(n, me, root, Blocks::Equal(bytes), tree)
}

/// Member `me`'s schedule of a gather of `counts[i]` bytes from each member `i` to `root` in a
/// team of `n`, along `tree`.
pub(crate) fn gatherv(n: u32, me: u32, root: u32, counts: &[u64], tree: Tree) -> Schedule {
    schedule(n, me, root, Blocks::Counts(counts), tree)
}

/// Member `me`'s schedule of either form.
fn schedule(n: u32, me: u32, root: u32, blocks: Blocks<'_>, tree: Tree) -> Schedule {
    let mut s = Schedule::new();
    let layout = Layout::new(n, root, blocks);
    let node = Node::new(n, me, root, tree);
    let own = blocks.len(me);
    let parent = node.parent();
    let total = layout.subtree(node);
    if parent.is_some() && total == 0 {
        return s;
    }
    let into = match parent {
        None => Span::dst(layout.root_at(), own),
        Some(_) => Span::stage(0, own),
    };
    // What the put to the parent waits for: the member's own block in its stage, every
    // child's subtree beside it, and the parent's credit. At the root nothing waits for the
    // own block, which goes straight into its destination.
    let mut ready: Vec<_> = s.copy(Span::src(0, own), into, &[]).into_iter().collect();
    for (child, at, len) in layout.children(node) {
        if len == 0 {
            continue;
        }
        let from = child.member();
        let credited = s.signal(from, credit(n, me), &[]);
        s.credits.push(credited);
        let got = s.wait(from, data(from), &[]);
        // The child puts its subtree there.
        s.stage = s.stage.max(at + len);
        match parent {
            None => {
                for (packed, stage, len) in layout.packed(at, len) {
                    s.copy(Span::stage(stage, len), Span::dst(packed, len), &[got]);
                }
            }
            Some(_) => ready.push(got),
        }
    }
    if let Some(parent) = parent {
        let to = parent.member();
        let go = s.wait(to, credit(n, to), &[]);
        s.credits.push(go);
        ready.push(go);
        let into = layout.offset_in(parent, node.v);
        s.put(to, 0, into, total, data(me), &ready);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::sim::{check, pattern};
    use super::super::tree::tests::{
        each_case, irregular, levels, puts, roots, wrapped, BYTES, TREES,
    };
    use super::super::{Task, NO_CHECK};
    use super::*;

    /// What the root ends with: every member's block, packed in member order.
    fn packed(n: u32, len: impl Fn(u32) -> u64) -> Vec<u8> {
        (0..n).flat_map(|i| pattern(i, 0, len(i))).collect()
    }

    #[test]
    fn the_root_ends_with_every_members_block() {
        each_case(&TREES[..6], |n, root, tree, barriers| {
            for bytes in BYTES {
                check(
                    &format!("gather {tree:?} root {root} {bytes} B barriers {barriers}"),
                    n,
                    |m| wrapped(gather(n, m, root, bytes, tree), n, m, barriers),
                    |m| pattern(m, 0, bytes),
                    |m| packed(n, |_| if m == root { bytes } else { 0 }),
                );
            }
        });
    }

    #[test]
    fn the_root_ends_with_every_members_block_of_its_own_size() {
        each_case(&TREES[..6], |n, root, tree, barriers| {
            let counts = irregular(n);
            check(
                &format!("gatherv {tree:?} root {root} barriers {barriers}"),
                n,
                |m| wrapped(gatherv(n, m, root, &counts, tree), n, m, barriers),
                |m| pattern(m, 0, counts[m as usize]),
                |m| packed(n, |i| if m == root { counts[i as usize] } else { 0 }),
            );
        });
    }

    /// The members that put to `root`, and how many puts each member makes.
    fn shape(n: u32, root: u32, tree: Tree) -> (Vec<u32>, Vec<usize>) {
        let puts: Vec<_> = (0..n).map(|m| puts(&gather(n, m, root, 3, tree))).collect();
        let senders = (0..n).filter(|&m| puts[m as usize].iter().any(|&(to, _)| to == root));
        (senders.collect(), puts.iter().map(Vec::len).collect())
    }

    #[test]
    fn the_binomial_root_receives_log_n_puts_and_each_member_puts_once() {
        for n in 1..=33 {
            for root in roots(n) {
                let (senders, puts) = shape(n, root, Tree::Binomial);
                assert_eq!(senders.len() as u32, levels(n, 2), "n={n} root={root}");
                for m in 0..n {
                    let want = usize::from(m != root);
                    assert_eq!(puts[m as usize], want, "n={n} root={root} member {m}");
                }
            }
        }
    }

    #[test]
    fn every_member_puts_to_the_flat_root() {
        for n in 1..=17 {
            let (senders, _) = shape(n, n - 1, Tree::Flat);
            assert_eq!(senders, (0..n - 1).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_subtree_moves_in_one_put_after_its_children_and_pipelined_is_binomial() {
        // Member 4 of 8 gathers 4..8 (relative to root 0) before it puts all four blocks.
        let s = gather(8, 4, 0, 3, Tree::Binomial);
        let put = s
            .steps
            .iter()
            .filter(|step| matches!(step.task, Task::Put { .. }));
        let put: Vec<Task> = put.map(|step| step.task).collect();
        assert_eq!(
            put,
            vec![Task::Put {
                to: 0,
                from: 0,
                into: 9,
                len: 12,
                signal: 4,
                check: NO_CHECK,
            }]
        );
        for m in 0..8 {
            assert_eq!(
                gather(8, m, 3, 5, Tree::Pipelined { segment: 2 }),
                gather(8, m, 3, 5, Tree::Binomial)
            );
        }
    }
}
