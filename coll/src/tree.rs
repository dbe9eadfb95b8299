//! The binomial tree a broadcast runs along: who a member receives from and forwards to, for
//! a given root.
//!
//! Members are renumbered relative to the root (`v = (index - root) mod n`). A member's parent
//! is `v` without its lowest set bit; its children are `v + m` for every power of two `m`
//! below that bit (below `n` for the root) with `v + m < n`. The tree has depth
//! `ceil(log2 n)`, and each member receives once.

use gaspi::Rank;

/// A member of the group: its index and its rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) index: u32,
    pub(crate) rank: Rank,
}

/// A member's place in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    /// The member it receives from; `None` for the root.
    pub(crate) parent: Option<Member>,
    /// The members it forwards to, largest subtree first: those have the most forwarding
    /// left to do, so they should get the data first.
    pub(crate) children: Vec<Member>,
}

/// The place of member index `me` in the tree over `members` (ranks by member index) rooted
/// at member index `root`.
pub(crate) fn place(members: &[Rank], root: u32, me: u32) -> Place {
    let n = members.len() as u64;
    let (root, me) = (u64::from(root), u64::from(me));
    // Every index computed here is below n, so `get` finds it.
    let member = |v: u64| {
        let index = (v + root) % n;
        members.get(index as usize).map(|&rank| Member {
            index: index as u32,
            rank,
        })
    };
    let v = (me + n - root) % n;
    let low = v & v.wrapping_neg();
    let parent = if v == 0 { None } else { member(v - low) };
    let limit = if v == 0 { n } else { low };
    let mut masks: Vec<u64> = std::iter::successors(Some(1u64), |m| m.checked_mul(2))
        .take_while(|&m| m < limit)
        .collect();
    masks.reverse();
    let children = masks
        .into_iter()
        .filter(|&m| v + m < n)
        .filter_map(|m| member(v + m))
        .collect();
    Place { parent, children }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parent and children by member index, over a group of `n` members.
    fn indices(n: u32, root: u32, me: u32) -> (Option<u32>, Vec<u32>) {
        let members: Vec<Rank> = (0..n).map(|i| 3 * i + 1).collect();
        let p = place(&members, root, me);
        (
            p.parent.map(|m| m.index),
            p.children.iter().map(|m| m.index).collect(),
        )
    }

    #[test]
    fn every_member_is_reached_exactly_once_from_its_parent() {
        for n in 1..=40u32 {
            for root in 0..n {
                let places: Vec<_> = (0..n).map(|me| indices(n, root, me)).collect();
                let mut reached = vec![0u32; n as usize];
                for (me, (_, children)) in places.iter().enumerate() {
                    for &c in children {
                        reached[c as usize] += 1;
                        assert_eq!(places[c as usize].0, Some(me as u32), "n={n} root={root}");
                    }
                }
                for (me, count) in reached.iter().enumerate() {
                    let expected = u32::from(me as u32 != root);
                    assert_eq!(*count, expected, "n={n} root={root} member {me}");
                }
            }
        }
    }

    #[test]
    fn depth_is_logarithmic() {
        for n in 1..=40u32 {
            let bound = 32 - (n - 1).leading_zeros();
            for root in 0..n {
                for me in 0..n {
                    let (mut at, mut depth) = (me, 0);
                    while let Some(p) = indices(n, root, at).0 {
                        at = p;
                        depth += 1;
                    }
                    assert_eq!(at, root);
                    assert!(
                        depth <= bound,
                        "n={n} root={root} member {me}: depth {depth}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_root_serves_the_largest_subtree_first() {
        assert_eq!(indices(5, 0, 0), (None, vec![4, 2, 1]));
        assert_eq!(indices(4, 1, 1), (None, vec![3, 2]));
        assert_eq!(indices(4, 1, 3), (Some(1), vec![0]));
        assert_eq!(indices(4, 1, 0), (Some(3), vec![]));
        assert_eq!(indices(1, 0, 0), (None, vec![]));
    }

    #[test]
    fn members_carry_their_ranks() {
        let p = place(&[5, 9, 12], 2, 0);
        assert_eq!(p.parent, Some(Member { index: 2, rank: 12 }));
        assert_eq!(
            place(&[5, 9, 12], 2, 2).children[0],
            Member { index: 1, rank: 9 }
        );
    }
}
