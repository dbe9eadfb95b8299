//! What the rooted collectives' schedules ([`broadcast`](super::broadcast),
//! [`scatter`](super::scatter), [`gather`](super::gather)) share: the trees they run along
//! ([`Tree`]), the numbering of their signals, and where their blocks lie in the stages.
//!
//! # Trees
//! Members are numbered relative to the root, `v = (me - root) mod n`, so every tree is rooted
//! at 0. In the k-nomial tree, with `v` written in base `k`, a member's parent is `v` with its
//! lowest non-zero digit cleared, and its children are `v + j·kⁱ` for every place `kⁱ` below
//! that digit (every place below `n`, for the root) and every digit `j` in `1..k`, as far as
//! they are below `n`. So
//! * each member but the root has one parent, and the tree is `ceil(log_k n)` deep;
//! * a member's subtree is the contiguous range `v..v + p` (cut at `n`), where `p` is the
//!   place of its lowest non-zero digit: the blocks of a subtree are contiguous in relative
//!   order, so a scatter or gather moves a whole subtree's blocks in one put;
//! * `k = 2` is the binomial tree, and `k ≥ n` the flat tree (the root is everyone's parent).
//!
//! Children come highest place first: in a full tree those are the deepest subtrees, with the
//! most forwarding left to do, so an engine that starts ready steps in schedule order serves
//! them first.
//!
//! An edge that would carry no bytes (a broadcast of nothing, a scatter's or gather's subtree
//! of empty blocks) carries nothing, not even a credit: both ends know the sizes.
//!
//! # Signals
//! A signal's number at its receiver says who raised it and why, so that no number is raised
//! twice in one schedule (member `i` of `n`):
//!
//! | number | raised by `i` | when |
//! |---|---|---|
//! | `i` | with a scatter's or gather's put | the blocks `i` forwards |
//! | `n + i` | as a credit | "my stage is ready for your put" |
//! | `2n + s` | with a broadcast's put | segment `s` of the message |
//!
//! All stay below [`algorithm_signals`] `= 2n + 64`, which is why a pipelined broadcast has
//! at most 64 segments. A broadcast is one segment unless pipelined.
//!
//! # Sync modes met
//! A member puts into another's stage only after that member's credit, so data moves only
//! between members that have both entered: `IN_MYSYNC` (and so `IN_NOSYNC`). A member's
//! schedule ends once its own destination is written and its puts are done: `OUT_MYSYNC`
//! (and so `OUT_NOSYNC`). The `ALLSYNC` modes take [`sync`](super::sync)'s barriers.
//!
//! No stage range is received into twice in one schedule, and a member writes its stage
//! only where nothing lands (a gather's own block, the root's staged source). So a credit
//! orders nothing within a run, and broadcast, scatter and gather list all theirs as
//! skippable ([`Schedule::credits`](super::Schedule::credits)): an engine that knows the
//! stages free between runs (`IN_NOSYNC`) may let data land before its receiver entered.

use super::{algorithm_signals, Signal};

/// The tree a rooted collective runs along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tree {
    /// The root exchanges with every member directly: one level, `n - 1` transfers at the
    /// root.
    Flat,
    /// The binomial tree: `ceil(log2 n)` levels and transfers at the root.
    Binomial,
    /// The k-nomial tree: `ceil(log_k n)` levels, up to `k - 1` transfers per level at a
    /// member. `Knomial(2)` is [`Tree::Binomial`]; `k` below 2 is taken as 2.
    Knomial(u32),
    /// A broadcast along the binomial tree with the message cut into segments of `segment`
    /// bytes (larger where it would take more than 64 segments), each forwarded as soon as it
    /// arrived, so segments move on all levels of the tree at once. A scatter or gather runs
    /// it as [`Tree::Binomial`]: what crosses an edge there is one subtree's blocks, sent
    /// once, so there is nothing to pipeline.
    Pipelined { segment: u64 },
}

impl Tree {
    /// The `k` of the k-nomial tree this is over `n` members.
    fn radix(self, n: u32) -> u64 {
        match self {
            Tree::Flat => u64::from(n.max(2)),
            Tree::Binomial | Tree::Pipelined { .. } => 2,
            Tree::Knomial(k) => u64::from(k.max(2)),
        }
    }
}

/// The signal of the blocks member `from` puts, in a scatter or gather.
pub(super) fn data(from: u32) -> Signal {
    from
}

/// The signal of member `from`'s credit in a team of `n`.
pub(super) fn credit(n: u32, from: u32) -> Signal {
    n + from
}

/// The signal of a broadcast's segment `s` in a team of `n`.
pub(super) fn segment(n: u32, s: u32) -> Signal {
    2 * n + s
}

/// The most segments a broadcast in a team of `n` may have: the numbers left after data and
/// credits.
pub(super) fn max_segments(n: u32) -> u64 {
    u64::from(algorithm_signals(n) - 2 * n)
}

/// A member's place in a k-nomial tree, in relative numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Node {
    n: u64,
    k: u64,
    root: u64,
    /// The member's relative index.
    pub(super) v: u64,
    /// The place of `v`'s lowest non-zero digit; for the root, the first place at or above
    /// `n`. The subtree is `v..v + span`, cut at `n`.
    span: u64,
}

impl Node {
    /// Member `me`'s place in `tree` over `n` (at least 1) members rooted at `root`.
    pub(super) fn new(n: u32, me: u32, root: u32, tree: Tree) -> Node {
        debug_assert!(
            me < n && root < n,
            "member {me} or root {root} not below {n}"
        );
        let (n64, root) = (u64::from(n), u64::from(root));
        let top = Node {
            n: n64,
            k: tree.radix(n),
            root,
            v: 0,
            span: 0,
        };
        top.at((u64::from(me) + n64 - root) % n64)
    }

    /// The node of relative member `v` in the same tree.
    fn at(self, v: u64) -> Node {
        let mut span = 1;
        // For v > 0 this stops at v's lowest non-zero digit, which is below n; span · k
        // stays below 2⁶⁴ since span < n ≤ 2³² and k ≤ 2³².
        while span < self.n && v.is_multiple_of(span * self.k) {
            span *= self.k;
        }
        Node { v, span, ..self }
    }

    /// The member's index.
    pub(super) fn member(&self) -> u32 {
        // Below n, which is a u32.
        ((self.v + self.root) % self.n) as u32
    }

    /// The parent's node; `None` for the root.
    pub(super) fn parent(&self) -> Option<Node> {
        (self.v != 0).then(|| self.at(self.v - self.v % (self.span * self.k)))
    }

    /// The relative member after the subtree.
    pub(super) fn end(&self) -> u64 {
        (self.v + self.span).min(self.n)
    }

    /// The children's nodes, highest place first.
    pub(super) fn children(self) -> impl Iterator<Item = Node> {
        let places = std::iter::successors(Some(self.span / self.k), move |&p| Some(p / self.k))
            .take_while(|&p| p > 0);
        places.flat_map(move |p| {
            (1..self.k)
                .map(move |j| self.v + j * p)
                .take_while(move |&c| c < self.n)
                .map(move |c| Node {
                    v: c,
                    span: p,
                    ..self
                })
        })
    }
}

/// The block sizes of a scatter or gather by member index; the blocks are packed in member
/// order in the root's buffer.
#[derive(Debug, Clone, Copy)]
pub(super) enum Blocks<'a> {
    /// Every block has this many bytes.
    Equal(u64),
    /// Block `i` has `counts[i]` bytes.
    Counts(&'a [u64]),
}

impl Blocks<'_> {
    /// Member `m`'s block's bytes.
    pub(super) fn len(self, m: u32) -> u64 {
        match self {
            Blocks::Equal(len) => len,
            Blocks::Counts(counts) => counts[m as usize],
        }
    }

    /// Bytes of the blocks of members `from..to`.
    fn sum(self, from: u64, to: u64) -> u64 {
        match self {
            Blocks::Equal(len) => (to - from) * len,
            Blocks::Counts(counts) => counts[from as usize..to as usize].iter().sum(),
        }
    }
}

/// Where a scatter's or gather's blocks lie in the stages along the tree: a member's stage
/// holds its subtree's blocks in relative order from its own, which comes first; the root's
/// holds all others from relative member 1, since its own block never travels. A subtree's
/// blocks are contiguous there, and a child's subtree lies in its parent's stage at the
/// offset where the child's stage puts it first.
pub(super) struct Layout<'a> {
    n: u64,
    root: u64,
    blocks: Blocks<'a>,
    /// Bytes of all blocks.
    total: u64,
    /// Where the root's block ends in the packed buffer.
    root_end: u64,
}

impl<'a> Layout<'a> {
    pub(super) fn new(n: u32, root: u32, blocks: Blocks<'a>) -> Layout<'a> {
        if let Blocks::Counts(counts) = blocks {
            assert_eq!(counts.len(), n as usize, "counts for another team size");
        }
        let (n, root) = (u64::from(n), u64::from(root));
        Layout {
            n,
            root,
            blocks,
            total: blocks.sum(0, n),
            root_end: blocks.sum(0, root + 1),
        }
    }

    /// Bytes of the blocks of relative members `lo..hi`.
    pub(super) fn bytes(&self, lo: u64, hi: u64) -> u64 {
        let (from, to) = (lo + self.root, hi + self.root);
        if to <= self.n {
            self.blocks.sum(from, to)
        } else if from >= self.n {
            self.blocks.sum(from - self.n, to - self.n)
        } else {
            self.blocks.sum(from, self.n) + self.blocks.sum(0, to - self.n)
        }
    }

    /// Bytes of `node`'s subtree's blocks: what crosses the edge to its parent.
    pub(super) fn subtree(&self, node: Node) -> u64 {
        self.bytes(node.v, node.end())
    }

    /// Where `v`'s subtree's blocks lie in `parent`'s stage.
    pub(super) fn offset_in(&self, parent: Node, v: u64) -> u64 {
        // The root's stage starts at relative member 1, any other's at the member itself.
        self.bytes(parent.v.max(1), v)
    }

    /// `node`'s children with where their subtrees lie in `node`'s stage and their bytes.
    pub(super) fn children(&self, node: Node) -> impl Iterator<Item = (Node, u64, u64)> + '_ {
        // Siblings on one place follow each other, so the offset runs on from the previous
        // one; only the first child of a place sums from the start of the stage. That keeps
        // a member's work linear in its subtree, also for the flat tree's root.
        let mut next = (node.v.max(1), 0);
        node.children().map(move |child| {
            let at = if child.v == next.0 {
                next.1
            } else {
                self.offset_in(node, child.v)
            };
            let len = self.subtree(child);
            next = (child.end(), at + len);
            (child, at, len)
        })
    }

    /// Where the root's block lies in the packed buffer.
    pub(super) fn root_at(&self) -> u64 {
        self.root_end - self.blocks.len(self.root as u32)
    }

    /// The pieces of the root's stage range `at..at + len` in the packed buffer, as
    /// `(packed offset, stage offset, length)`. The root's stage is the packed buffer rotated
    /// to start after the root's block, so a range wraps at most once.
    pub(super) fn packed(&self, at: u64, len: u64) -> [(u64, u64, u64); 2] {
        let start = self.root_end + at;
        if start >= self.total {
            [(start - self.total, at, len), (0, at + len, 0)]
        } else {
            let first = len.min(self.total - start);
            [(start, at, first), (0, at + first, len - first)]
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::sync::synchronise;
    use super::super::{Schedule, StepId, Task, NO_CHECK};
    use super::*;

    /// The trees the correctness tests try; scatter and gather take the first six, since
    /// they run the pipelined ones as binomial.
    pub(crate) const TREES: [Tree; 9] = [
        Tree::Flat,
        Tree::Binomial,
        Tree::Knomial(2),
        Tree::Knomial(3),
        Tree::Knomial(4),
        Tree::Knomial(8),
        Tree::Pipelined { segment: 1 },
        Tree::Pipelined { segment: 16 },
        Tree::Pipelined { segment: 1000 },
    ];

    /// The message sizes the correctness tests try.
    pub(crate) const BYTES: [u64; 4] = [0, 1, 7, 100];

    /// The roots the tests try in a team of `n`.
    pub(crate) fn roots(n: u32) -> Vec<u32> {
        if n <= 9 {
            (0..n).collect()
        } else {
            vec![0, 1, n / 2, n - 1]
        }
    }

    /// Calls `f(n, root, tree, barriers)` for every team size in `1..=33`, its [`roots`] and
    /// `trees`, without barriers and, for every fourth team size, with them.
    pub(crate) fn each_case(trees: &[Tree], mut f: impl FnMut(u32, u32, Tree, bool)) {
        for n in 1..=33 {
            for root in roots(n) {
                for &tree in trees {
                    f(n, root, tree, false);
                    if n % 4 == 1 {
                        f(n, root, tree, true);
                    }
                }
            }
        }
    }

    /// Irregular block sizes for the v forms, with empty blocks among them.
    pub(crate) fn irregular(n: u32) -> Vec<u64> {
        (0..u64::from(n)).map(|i| (i * 7) % 5).collect()
    }

    /// Member `m`'s schedule of `n`, checked for credits (every one given and listed as
    /// skippable), with barriers around it when `barriers`.
    pub(crate) fn wrapped(schedule: Schedule, n: u32, m: u32, barriers: bool) -> Schedule {
        assert_credited(&schedule, n);
        assert_eq!(
            schedule.credits,
            credit_steps(&schedule, n),
            "n={n} member {m}"
        );
        if barriers {
            synchronise(schedule, n, m, true, true)
        } else {
            schedule
        }
    }

    /// A schedule's puts, as (receiver, bytes).
    pub(crate) fn puts(schedule: &Schedule) -> Vec<(u32, u64)> {
        schedule
            .steps
            .iter()
            .filter_map(|step| match step.task {
                Task::Put { to, len, .. } => Some((to, len)),
                _ => None,
            })
            .collect()
    }

    /// Whether each step is one `step` depends on, directly or not.
    pub(crate) fn before(schedule: &Schedule, step: StepId) -> Vec<bool> {
        let mut marked = vec![false; schedule.steps.len()];
        for &a in &schedule.steps[step as usize].after {
            marked[a as usize] = true;
        }
        for i in (0..step as usize).rev() {
            if marked[i] {
                for &a in &schedule.steps[i].after {
                    marked[a as usize] = true;
                }
            }
        }
        marked
    }

    /// The credit steps of a schedule of `n` whose credits are numbered `n..2n` (the rooted
    /// collectives' and [`all`](super::super::all)'s): the signals and the waits on those
    /// numbers, in schedule order. Asserts that each waits for no step but earlier credit
    /// steps, as the engine needs of a credit it skips: one held back by another step would
    /// run after all while its partner's was skipped.
    pub(crate) fn credit_steps(schedule: &Schedule, n: u32) -> Vec<StepId> {
        let is_credit = |signal: u32| (n..2 * n).contains(&signal);
        let steps: Vec<StepId> = (0..schedule.steps.len() as StepId)
            .filter(|&i| match schedule.steps[i as usize].task {
                Task::Signal { signal, .. } | Task::Wait { signal, .. } => is_credit(signal),
                _ => false,
            })
            .collect();
        for &i in &steps {
            let after = &schedule.steps[i as usize].after;
            assert!(
                after.iter().all(|a| steps.contains(a)),
                "credit step {i} waits for other steps: {after:?}"
            );
        }
        steps
    }

    /// Asserts that every put waits for its receiver's credit: `IN_MYSYNC`.
    fn assert_credited(schedule: &Schedule, n: u32) {
        for (i, step) in schedule.steps.iter().enumerate() {
            if let Task::Put { to, .. } = step.task {
                let earlier = before(schedule, i as StepId);
                let credited = schedule.steps.iter().zip(&earlier).any(|(s, &e)| {
                    e && s.task
                        == Task::Wait {
                            from: to,
                            signal: credit(n, to),
                            check: NO_CHECK,
                        }
                });
                assert!(credited, "step {i}, a put to {to}, waits for no credit");
            }
        }
    }

    /// Every member's (parent, children) by member index.
    fn shape(n: u32, root: u32, tree: Tree) -> Vec<(Option<u32>, Vec<u32>)> {
        (0..n)
            .map(|me| {
                let node = Node::new(n, me, root, tree);
                let parent = node.parent().map(|p| p.member());
                (parent, node.children().map(|c| c.member()).collect())
            })
            .collect()
    }

    /// `ceil(log_k n)`.
    pub(crate) fn levels(n: u32, k: u64) -> u32 {
        let (mut levels, mut reach) = (0, 1);
        while reach < u64::from(n) {
            reach *= k;
            levels += 1;
        }
        levels
    }

    #[test]
    fn every_member_hangs_once_from_its_parent_within_the_depth() {
        for n in 1..=40 {
            for k in [2, 3, 4, 5, 8, 40] {
                let tree = Tree::Knomial(k);
                for root in 0..n {
                    let places = shape(n, root, tree);
                    let mut reached = vec![0; n as usize];
                    for (me, (_, children)) in places.iter().enumerate() {
                        for &c in children {
                            reached[c as usize] += 1;
                            assert_eq!(places[c as usize].0, Some(me as u32), "n={n} k={k}");
                        }
                    }
                    for me in 0..n {
                        assert_eq!(reached[me as usize], u32::from(me != root), "n={n} k={k}");
                        let (mut at, mut depth) = (me, 0);
                        while let Some(p) = places[at as usize].0 {
                            (at, depth) = (p, depth + 1);
                        }
                        assert_eq!(at, root);
                        assert!(depth <= levels(n, k.into()), "n={n} k={k} member {me}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_subtree_is_its_member_and_its_childrens_subtrees_in_a_row() {
        for n in 1..=40 {
            for tree in [Tree::Binomial, Tree::Knomial(3), Tree::Flat] {
                for me in 0..n {
                    let node = Node::new(n, me, n / 3, tree);
                    let mut covered: Vec<(u64, u64)> =
                        node.children().map(|c| (c.v, c.end())).collect();
                    covered.sort_unstable();
                    let mut at = node.v + 1;
                    for (from, to) in covered {
                        assert_eq!(from, at, "n={n} {tree:?} member {me}");
                        at = to;
                    }
                    assert_eq!(at, node.end(), "n={n} {tree:?} member {me}");
                }
            }
        }
    }

    #[test]
    fn the_binomial_tree_is_the_broadcast_objects_and_the_flat_tree_is_flat() {
        for n in 1..=40 {
            let ranks: Vec<u32> = (0..n).collect();
            for root in 0..n {
                for (me, (parent, children)) in
                    shape(n, root, Tree::Binomial).into_iter().enumerate()
                {
                    let place = crate::tree::place(&ranks, root, me as u32);
                    assert_eq!(parent, place.parent.map(|p| p.index));
                    let theirs: Vec<u32> = place.children.iter().map(|c| c.index).collect();
                    assert_eq!(children, theirs, "n={n} root={root} member {me}");
                }
                for (me, (parent, children)) in shape(n, root, Tree::Flat).into_iter().enumerate() {
                    if me as u32 == root {
                        assert_eq!(children.len() as u32, n - 1);
                    } else {
                        assert_eq!((parent, children), (Some(root), vec![]));
                    }
                }
            }
        }
    }

    #[test]
    fn the_k_nomial_root_serves_k_minus_1_children_per_place() {
        let root_of = |n, k| shape(n, 0, Tree::Knomial(k)).swap_remove(0).1;
        assert_eq!(root_of(9, 3), vec![3, 6, 1, 2]);
        assert_eq!(root_of(10, 3), vec![9, 3, 6, 1, 2]);
        assert_eq!(root_of(20, 4), vec![16, 4, 8, 12, 1, 2, 3]);
        assert_eq!(shape(9, 0, Tree::Knomial(3))[7], (Some(6), vec![]));
        assert_eq!(shape(9, 0, Tree::Knomial(3))[6], (Some(0), vec![7, 8]));
        // A radix below 2 is binomial.
        assert_eq!(shape(7, 2, Tree::Knomial(0)), shape(7, 2, Tree::Binomial));
    }

    #[test]
    fn blocks_lie_rotated_in_the_roots_stage() {
        let counts = [3, 0, 5, 2, 4];
        let layout = Layout::new(5, 2, Blocks::Counts(&counts));
        // Relative order from the root: members 2, 3, 4, 0, 1.
        assert_eq!(layout.bytes(0, 5), 14);
        assert_eq!(layout.bytes(1, 4), 2 + 4 + 3);
        assert_eq!(layout.root_at(), 3);
        // The root's stage holds members 3, 4, 0, 1: packed 8..14, then 0..3.
        assert_eq!(layout.packed(0, 9), [(8, 0, 6), (0, 6, 3)]);
        assert_eq!(layout.packed(2, 4), [(10, 2, 4), (0, 6, 0)]);
        assert_eq!(layout.packed(6, 3), [(0, 6, 3), (0, 9, 0)]);
    }
}
